//! Variables: every generated type's shape and properties (checked with x509-parser, the
//! openssl CLI and ssh-keygen), generated-once semantics for the vars-store file and for
//! Kubernetes Secrets on a real apiserver, user values winning, CA ordering and errors with
//! their paths, update modes, and that no value ever reaches a log line, an error or `Debug`.

use crate::support;

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kubosh_core::manifest::Variable;
use kubosh_core::ops::{InterpolateOptions, MissingVars, Vars};
use kubosh_kube::variables::{
    self, FileStore, MemoryStore, SecretStore, Source, StoredVariable, VariableStore,
};
use serde_json::{Value, json};
use x509_parser::prelude::*;
use x509_parser::public_key::PublicKey;

fn defs(yaml: &str) -> Vec<Variable> {
    kubosh_base::yaml::parse(yaml, "variables").unwrap()
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

fn resolve(
    d: &[Variable],
    user: &Vars,
    store: &dyn VariableStore,
) -> kubosh_kube::variables::Resolved {
    block(variables::resolve(d, user, store)).unwrap()
}

fn value(r: &kubosh_kube::variables::Resolved, name: &str) -> Value {
    r.vars.get(name).unwrap_or_else(|| panic!("no {name}"))
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort();
    k
}

fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap()
}

fn openssl(args: &[&str], dir: &Path) -> String {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is installed (tools/test.sh)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    std::fs::write(dir.join(name), text).unwrap();
    name.to_string()
}

struct CertFacts {
    subject: String,
    is_ca: Option<bool>,
    key_usage: (bool, bool, bool, bool),
    eku: (bool, bool),
    dns: Vec<String>,
    ips: Vec<String>,
    /// Every SAN in the certificate's order.
    sans: Vec<String>,
    rsa_bits: usize,
    days: i64,
    ski: Option<Vec<u8>>,
    aki: Option<Vec<u8>>,
}

fn facts(pem: &str) -> CertFacts {
    let der = pem_der(pem);
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let mut f = CertFacts {
        subject: cert.subject().to_string(),
        is_ca: None,
        key_usage: (false, false, false, false),
        eku: (false, false),
        dns: Vec::new(),
        ips: Vec::new(),
        sans: Vec::new(),
        rsa_bits: 0,
        days: (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp())
            / 86_400,
        ski: None,
        aki: None,
    };
    if let Ok(PublicKey::RSA(rsa)) = cert.public_key().parsed() {
        f.rsa_bits = rsa.key_size();
    }
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::BasicConstraints(bc) => f.is_ca = Some(bc.ca),
            ParsedExtension::KeyUsage(ku) => {
                f.key_usage = (
                    ku.digital_signature(),
                    ku.key_encipherment(),
                    ku.key_cert_sign(),
                    ku.crl_sign(),
                )
            }
            ParsedExtension::ExtendedKeyUsage(eku) => f.eku = (eku.server_auth, eku.client_auth),
            ParsedExtension::SubjectAlternativeName(san) => {
                for name in &san.general_names {
                    match name {
                        GeneralName::DNSName(d) => {
                            f.dns.push(d.to_string());
                            f.sans.push(d.to_string());
                        }
                        GeneralName::IPAddress(ip) => {
                            let ip = match ip.len() {
                                4 => {
                                    std::net::Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]).to_string()
                                }
                                _ => {
                                    let b: [u8; 16] = (*ip).try_into().unwrap();
                                    std::net::Ipv6Addr::from(b).to_string()
                                }
                            };
                            f.ips.push(ip.clone());
                            f.sans.push(ip);
                        }
                        _ => {}
                    }
                }
            }
            ParsedExtension::SubjectKeyIdentifier(ki) => f.ski = Some(ki.0.to_vec()),
            ParsedExtension::AuthorityKeyIdentifier(aki) => {
                f.aki = aki.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => {}
        }
    }
    f
}

#[test]
fn passwords_are_20_lowercase_letters_and_digits() {
    let store = MemoryStore::new();
    let r = resolve(
        &defs("- {name: a, type: password}\n- {name: b, type: password, options: {length: 41}}\n"),
        &Vars::new(),
        &store,
    );
    let a = value(&r, "a");
    let a = a.as_str().unwrap();
    assert_eq!(a.len(), 20);
    assert!(
        a.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    );
    assert_eq!(value(&r, "b").as_str().unwrap().len(), 41);
    assert_ne!(value(&r, "a"), value(&r, "b"));
}

const CERTS: &str = "\
- name: leaf
  type: certificate
  options:
    ca: mid
    common_name: svc.example
    alternative_names: [10.0.0.7, svc.example, '::1', '*.svc.example']
    extended_key_usage: [client_auth, server_auth]
    duration: 30
    key_length: 2048
- name: mid
  type: certificate
  options: {ca: root, is_ca: true, common_name: Intermediate, key_length: 2048}
- name: root
  type: certificate
  options: {is_ca: true, common_name: Root CA, organization: Acme}
- name: plain
  type: certificate
  options: {ca: root, common_name: plain, key_length: 2048}
";

#[test]
fn certificates_have_boshs_shape_and_verify() {
    let store = MemoryStore::new();
    let r = resolve(&defs(CERTS), &Vars::new(), &store);
    // CAs first, whatever the section's order.
    let order: Vec<&str> = r.sources.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(order, ["root", "mid", "leaf", "plain"]);
    let (root, mid, leaf, plain) = (
        value(&r, "root"),
        value(&r, "mid"),
        value(&r, "leaf"),
        value(&r, "plain"),
    );
    for v in [&root, &mid, &leaf, &plain] {
        assert_eq!(keys(v), ["ca", "certificate", "private_key"]);
        assert!(
            v["private_key"]
                .as_str()
                .unwrap()
                .starts_with("-----BEGIN RSA PRIVATE KEY-----\n")
        );
        assert!(
            v["certificate"]
                .as_str()
                .unwrap()
                .ends_with("-----END CERTIFICATE-----\n")
        );
    }

    // Root: self-signed CA, default key length and duration, the given organization.
    assert_eq!(root["ca"], root["certificate"]);
    let f = facts(root["certificate"].as_str().unwrap());
    assert_eq!(f.subject, "C=US, O=Acme, CN=Root CA");
    assert_eq!(f.is_ca, Some(true));
    assert_eq!(f.key_usage, (false, false, true, true));
    assert_eq!(f.rsa_bits, 3072);
    assert_eq!(f.days, 365);
    assert!(f.ski.is_some());
    assert_eq!(f.ski, f.aki);
    let root_ski = f.ski.unwrap();

    // Intermediate: a CA signed by root; its `ca` is root's certificate.
    assert_eq!(mid["ca"], root["certificate"]);
    let f = facts(mid["certificate"].as_str().unwrap());
    assert_eq!(f.subject, "C=US, O=Cloud Foundry, CN=Intermediate");
    assert_eq!(f.is_ca, Some(true));
    assert_eq!(f.aki.as_ref(), Some(&root_ski));
    let mid_ski = f.ski.unwrap();

    // Leaf: everything asked for.
    assert_eq!(leaf["ca"], mid["certificate"]);
    let f = facts(leaf["certificate"].as_str().unwrap());
    assert_eq!(f.subject, "C=US, O=Cloud Foundry, CN=svc.example");
    assert_eq!(f.is_ca, Some(false));
    assert_eq!(f.key_usage, (true, true, false, false));
    assert_eq!(f.eku, (true, true));
    assert_eq!(f.dns, ["svc.example", "*.svc.example"]);
    assert_eq!(f.ips, ["10.0.0.7", "::1"]);
    // As bosh-cli orders them: DNS names first, then addresses, each in the given order.
    assert_eq!(f.sans, ["svc.example", "*.svc.example", "10.0.0.7", "::1"]);
    assert_eq!(f.rsa_bits, 2048);
    assert_eq!(f.days, 30);
    assert_eq!(f.aki, Some(mid_ski));

    // Default extended key usage: server_auth only.
    let f = facts(plain["certificate"].as_str().unwrap());
    assert_eq!(f.eku, (true, false));

    // openssl agrees: chains verify, keys match certificates.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(d, "root.pem", root["certificate"].as_str().unwrap());
    write(d, "mid.pem", mid["certificate"].as_str().unwrap());
    write(d, "leaf.pem", leaf["certificate"].as_str().unwrap());
    write(d, "leaf.key", leaf["private_key"].as_str().unwrap());
    write(d, "plain.pem", plain["certificate"].as_str().unwrap());
    let ok = openssl(
        &[
            "verify",
            "-CAfile",
            "root.pem",
            "-untrusted",
            "mid.pem",
            "-purpose",
            "sslserver",
            "leaf.pem",
        ],
        d,
    );
    assert_eq!(ok.trim(), "leaf.pem: OK");
    let ok = openssl(
        &[
            "verify",
            "-CAfile",
            "root.pem",
            "-purpose",
            "sslclient",
            "-untrusted",
            "mid.pem",
            "leaf.pem",
        ],
        d,
    );
    assert_eq!(ok.trim(), "leaf.pem: OK");
    assert_eq!(
        openssl(&["verify", "-CAfile", "root.pem", "plain.pem"], d).trim(),
        "plain.pem: OK"
    );
    assert_eq!(
        openssl(&["x509", "-noout", "-modulus", "-in", "leaf.pem"], d),
        openssl(&["rsa", "-noout", "-modulus", "-in", "leaf.key"], d)
    );
    openssl(&["rsa", "-check", "-noout", "-in", "leaf.key"], d);
}

#[test]
fn rsa_and_ssh_keys_have_boshs_shape() {
    let store = MemoryStore::new();
    let r = resolve(
        &defs("- {name: k, type: rsa}\n- {name: s, type: ssh}\n"),
        &Vars::new(),
        &store,
    );
    let k = value(&r, "k");
    assert_eq!(keys(&k), ["private_key", "public_key"]);
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(d, "k.key", k["private_key"].as_str().unwrap());
    assert!(
        k["private_key"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN RSA PRIVATE KEY-----\n")
    );
    assert!(
        k["public_key"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN PUBLIC KEY-----\n")
    );
    assert_eq!(
        openssl(&["rsa", "-in", "k.key", "-pubout"], d),
        k["public_key"].as_str().unwrap()
    );
    let text = openssl(&["rsa", "-in", "k.key", "-noout", "-text"], d);
    assert!(text.contains("Private-Key: (2048 bit, 2 primes)"), "{text}");

    let s = value(&r, "s");
    assert_eq!(
        keys(&s),
        ["private_key", "public_key", "public_key_fingerprint"]
    );
    let public = s["public_key"].as_str().unwrap();
    let re = regex::Regex::new(r"\Assh-rsa AAAAB3NzaC1yc2E[A-Za-z0-9+/]+=*\n\z").unwrap();
    assert!(re.is_match(public), "{public:?}");
    let fp = s["public_key_fingerprint"].as_str().unwrap();
    assert!(
        regex::Regex::new(r"\A([0-9a-f]{2}:){15}[0-9a-f]{2}\z")
            .unwrap()
            .is_match(fp),
        "{fp}"
    );
    write(d, "s.pub", public);
    write(d, "s.key", s["private_key"].as_str().unwrap());
    std::fs::set_permissions(
        d.join("s.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let keygen = |args: &[&str]| {
        let out = Command::new("ssh-keygen")
            .args(args)
            .current_dir(d)
            .output()
            .expect("ssh-keygen (openssh-client) is installed (tools/test.sh)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = keygen(&["-l", "-E", "md5", "-f", "s.pub"]);
    assert_eq!(listed, format!("2048 MD5:{fp} no comment (RSA)\n"));
    // The private key is the public key's.
    assert_eq!(keygen(&["-y", "-f", "s.key"]).trim(), public.trim());
}

#[test]
fn the_vars_store_file_generates_once_and_is_private() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("creds.yml");
    let d = defs(
        "- {name: pw, type: password}\n- {name: ca, type: certificate, options: {is_ca: true, common_name: ca, key_length: 2048}}\n\
         - {name: tls, type: certificate, options: {ca: ca, common_name: x, key_length: 2048}}\n- {name: k, type: ssh}\n",
    );
    let first = resolve(&d, &Vars::new(), &FileStore::new(&path));
    assert!(first.sources.iter().all(|(_, s)| *s == Source::Generated));
    let mode = std::fs::metadata(&path).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(&path).unwrap();
    // bosh-cli's layout: a map of names (sorted) to values.
    let top: Vec<&str> = text.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(top[0], "ca:");
    assert_eq!(top[1], "k:");
    assert!(top[2].starts_with("pw: "), "{top:?}");
    assert_eq!(top[3], "tls:");
    assert!(text.contains("  certificate: |\n    -----BEGIN CERTIFICATE-----\n"));

    // A second run (a new store on the same file) reads everything back, generates nothing.
    let second = resolve(&d, &Vars::new(), &FileStore::new(&path));
    assert!(second.sources.iter().all(|(_, s)| *s == Source::Stored));
    for name in ["pw", "ca", "tls", "k"] {
        assert_eq!(value(&first, name), value(&second, name), "{name}");
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    // No temporary files left behind.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);

    // A new definition is added; the others stay.
    let mut more = d.clone();
    more.extend(defs("- {name: pw2, type: password}\n"));
    let third = resolve(&more, &Vars::new(), &FileStore::new(&path));
    assert_eq!(value(&third, "pw"), value(&first, "pw"));
    assert_eq!(
        third.sources.last().unwrap(),
        &("pw2".to_string(), Source::Generated)
    );
}

#[test]
fn user_values_win_and_are_never_stored() {
    let store = MemoryStore::new();
    // Something stored already loses to the user's value too.
    block(store.create(
        "pw",
        &StoredVariable {
            value: json!("stored-value").into(),
            options_digest: None,
        },
    ))
    .unwrap();
    // The user's CA (from an earlier generation) signs the generated leaf.
    let earlier = resolve(
        &defs(
            "- {name: ca, type: certificate, options: {is_ca: true, common_name: user-ca, key_length: 2048}}\n",
        ),
        &Vars::new(),
        &MemoryStore::new(),
    );
    let user_ca = value(&earlier, "ca");
    let mut user = Vars::new();
    user.add_var("pw", json!("from-the-user"));
    user.add_vars_map([("ca".to_string(), user_ca.clone())].into_iter().collect());

    let d = defs(
        "- {name: pw, type: password}\n- {name: ca, type: certificate, options: {is_ca: true, common_name: ca}}\n\
         - {name: leaf, type: certificate, options: {ca: ca, common_name: l, key_length: 2048}}\n",
    );
    let r = resolve(&d, &user, &store);
    assert_eq!(value(&r, "pw"), json!("from-the-user"));
    assert_eq!(value(&r, "ca"), user_ca);
    assert_eq!(value(&r, "leaf")["ca"], user_ca["certificate"]);
    assert_eq!(
        r.sources,
        [
            ("pw".to_string(), Source::Provided),
            ("ca".to_string(), Source::Provided),
            ("leaf".to_string(), Source::Generated),
        ]
    );
    // Only the generated leaf went to the store (and the pre-existing `pw` is untouched).
    assert_eq!(store.names(), ["pw", "leaf"]);
    assert_eq!(
        block(store.get("pw")).unwrap().unwrap().value.expose(),
        &json!("stored-value")
    );

    // A CA that is only provided (no definition) works too; its options interpolate.
    let mut user = Vars::new();
    user.add_vars_map(
        [("outside_ca".to_string(), user_ca.clone())]
            .into_iter()
            .collect(),
    );
    user.add_var("domain", json!("example.org"));
    let r = resolve(
        &defs(
            "- {name: l, type: certificate, options: {ca: outside_ca, common_name: ((domain)), key_length: 2048}}\n",
        ),
        &user,
        &MemoryStore::new(),
    );
    let f = facts(value(&r, "l")["certificate"].as_str().unwrap());
    assert_eq!(f.subject, "C=US, O=Cloud Foundry, CN=example.org");
}

fn resolve_err(yaml: &str) -> String {
    block(variables::resolve(
        &defs(yaml),
        &Vars::new(),
        &MemoryStore::new(),
    ))
    .unwrap_err()
    .to_string()
}

#[test]
fn bad_definitions_are_reported_with_their_paths() {
    assert_eq!(
        resolve_err(
            "- {name: pw, type: password}\n- {name: a, type: certificate, options: {ca: b, is_ca: true}}\n\
             - {name: b, type: certificate, options: {ca: a, is_ca: true}}\n"
        ),
        "variables[2].options.ca: variables depend on each other in a cycle: a -> b -> a"
    );
    assert_eq!(
        resolve_err(
            "- {name: pw, type: password}\n- {name: leaf, type: certificate, options: {ca: nowhere, common_name: x}}\n"
        ),
        "variables[1].options.ca: variable 'leaf' is signed by CA 'nowhere', which is not defined, provided or stored"
    );
    assert_eq!(
        resolve_err("- {name: leaf, type: certificate, options: {common_name: x}}\n"),
        "variables[0]: Generating variable 'leaf': Missing required CA name"
    );
    assert_eq!(
        resolve_err("- {name: pw, type: password}\n- {name: u, type: user}\n"),
        "variables[1].type: Generating variable 'u': Unsupported value type: user"
    );
    assert_eq!(
        resolve_err("- {name: pw, type: password, update_mode: sometimes}\n"),
        "variables[0].update_mode: unknown update_mode 'sometimes' (expected no-overwrite, overwrite or converge)"
    );
    assert_eq!(
        resolve_err(
            "- {name: c, type: certificate, options: {is_ca: true, key_usage: [digital_signature]}}\n"
        ),
        "variables[0]: Generating variable 'c': Failed to generate certificate, parameters are invalid: Unsupported parameter 'key_usage'"
    );
    // A CA variable whose value is not a certificate.
    let mut user = Vars::new();
    user.add_var("ca", json!("just a string"));
    let err = block(variables::resolve(
        &defs("- {name: l, type: certificate, options: {ca: ca, common_name: x}}\n"),
        &user,
        &MemoryStore::new(),
    ))
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "variables[0].options.ca: Generating variable 'l': Loading certificates: Expected variable 'ca' to be a certificate with 'certificate'"
    );
    // A definition whose options need a variable nothing provides is not generated.
    let store = MemoryStore::new();
    let r = resolve(
        &defs(
            "- {name: pw, type: password, options: {length: ((len))}}\n- {name: ok, type: password}\n",
        ),
        &Vars::new(),
        &store,
    );
    assert_eq!(r.sources[0], ("pw".to_string(), Source::Missing));
    assert_eq!(store.names(), ["ok"]);
    // A type-less definition nothing provides is simply missing.
    let r = resolve(
        &defs("- {name: given, type: ''}\n"),
        &Vars::new(),
        &MemoryStore::new(),
    );
    assert_eq!(r.sources, [("given".to_string(), Source::Missing)]);
}

#[test]
fn update_modes_overwrite_and_converge() {
    let store = MemoryStore::new();
    let v1 = defs(
        "- {name: keep, type: password}\n- {name: over, type: password, update_mode: overwrite}\n\
         - {name: conv, type: password, update_mode: converge, options: {length: 10}}\n\
         - {name: ca, type: certificate, update_mode: converge, options: {is_ca: true, common_name: a, key_length: 2048}}\n\
         - {name: leaf, type: certificate, update_mode: converge, options: {ca: ca, common_name: l, key_length: 2048}}\n",
    );
    let a = resolve(&v1, &Vars::new(), &store);
    let b = resolve(&v1, &Vars::new(), &store);
    assert_eq!(value(&a, "keep"), value(&b, "keep"));
    assert_ne!(value(&a, "over"), value(&b, "over"));
    assert_eq!(value(&a, "conv"), value(&b, "conv"));
    assert_eq!(value(&a, "leaf"), value(&b, "leaf"));

    // Options changed: converge regenerates; reordering options is not a change.
    let mut v2 = v1.clone();
    v2[2].options = Some(json!({"length": 12}).as_object().unwrap().clone());
    v2[3].options = Some(
        json!({"key_length": 2048, "common_name": "a", "is_ca": true})
            .as_object()
            .unwrap()
            .clone(),
    );
    let c = resolve(&v2, &Vars::new(), &store);
    assert_eq!(value(&c, "conv").as_str().unwrap().len(), 12);
    assert_eq!(value(&c, "ca"), value(&b, "ca"));

    // A new CA (its common name changed): the leaf it signs follows.
    let mut v3 = v2.clone();
    v3[3].options = Some(
        json!({"key_length": 2048, "common_name": "b", "is_ca": true})
            .as_object()
            .unwrap()
            .clone(),
    );
    let d = resolve(&v3, &Vars::new(), &store);
    assert_ne!(value(&d, "ca"), value(&c, "ca"));
    assert_eq!(value(&d, "leaf")["ca"], value(&d, "ca")["certificate"]);
    let sources: std::collections::HashMap<_, _> = d.sources.into_iter().collect();
    assert_eq!(sources["ca"], Source::Regenerated);
    assert_eq!(sources["leaf"], Source::Regenerated);
    assert_eq!(sources["keep"], Source::Stored);
}

async fn kube_store(ns: &str, deployment: &str) -> SecretStore {
    let client = support::control_plane().await.client().await.unwrap();
    SecretStore::new(client, ns, deployment)
}

/// Resolves `d` with `first` (every variable generated), then with `second`, a fresh store
/// as another controller process would have (every one found stored, with the same value);
/// the first resolution.
async fn generated_once(
    d: &[Variable],
    first: &dyn VariableStore,
    second: &dyn VariableStore,
) -> kubosh_kube::variables::Resolved {
    let generated = variables::resolve(d, &Vars::new(), first).await.unwrap();
    assert!(
        generated
            .sources
            .iter()
            .all(|(_, s)| *s == Source::Generated)
    );
    let stored = variables::resolve(d, &Vars::new(), second).await.unwrap();
    assert!(
        stored.sources.iter().all(|(_, s)| *s == Source::Stored),
        "{:?}",
        stored.sources
    );
    for v in d {
        assert_eq!(
            value(&generated, &v.name),
            value(&stored, &v.name),
            "{}",
            v.name
        );
    }
    generated
}

#[tokio::test(flavor = "multi_thread")]
async fn kubernetes_secrets_generate_once() {
    let ns = support::namespace("vars").await;
    let d = defs(
        "- {name: admin_password, type: password}\n- {name: ca, type: certificate, options: {is_ca: true, common_name: ca, key_length: 2048}}\n\
         - {name: tls, type: certificate, options: {ca: ca, common_name: web, key_length: 2048}}\n",
    );
    let first = generated_once(
        &d,
        &kube_store(&ns, "web").await,
        &kube_store(&ns, "web").await,
    )
    .await;
    // Read with one list: the same values.
    let listed = kube_store(&ns, "web").await.preloaded().await.unwrap();
    let third = variables::resolve(&d, &Vars::new(), &listed).await.unwrap();
    assert!(third.sources.iter().all(|(_, s)| *s == Source::Stored));
    for name in ["admin_password", "ca", "tls"] {
        assert_eq!(value(&first, name), value(&third, name), "{name}");
    }
    // Another deployment in the same namespace has its own (its list finds none of web's;
    // its leaf is signed by the CA it generated in the same pass).
    let listed = kube_store(&ns, "api").await.preloaded().await.unwrap();
    let other = variables::resolve(&d, &Vars::new(), &listed).await.unwrap();
    assert!(other.sources.iter().all(|(_, s)| *s == Source::Generated));
    assert_ne!(
        value(&other, "admin_password"),
        value(&first, "admin_password")
    );

    // The Secrets: named, labelled and annotated as documented, value as JSON under `value`.
    let client = support::control_plane().await.client().await.unwrap();
    let api: Api<Secret> = Api::namespaced(client, &ns);
    let list = api
        .list(&ListParams::default().labels("kubosh.io/deployment=web"))
        .await
        .unwrap();
    let mut names: Vec<String> = list
        .items
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names.contains(&"web-var-ca".to_string()), "{names:?}");
    assert!(names.contains(&"web-var-tls".to_string()), "{names:?}");
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("web-var-admin-password-")),
        "{names:?}"
    );
    let tls = api.get("web-var-tls").await.unwrap();
    let annotations = tls.metadata.annotations.unwrap();
    assert_eq!(annotations["kubosh.io/variable"], "tls");
    assert_eq!(annotations["kubosh.io/options-sha256"].len(), 64);
    let data = tls.data.unwrap();
    let stored: Value = serde_json::from_slice(&data["value"].0).unwrap();
    assert_eq!(stored, value(&first, "tls"));

    // Racing writers: create returns whatever got there first.
    let store = kube_store(&ns, "web").await;
    let loser = StoredVariable {
        value: json!("a-different-value").into(),
        options_digest: None,
    };
    let kept = store.create("admin_password", &loser).await.unwrap();
    assert_eq!(kept.value.expose(), &value(&first, "admin_password"));

    // Owner references are the caller's to set.
    let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: "00000000-0000-0000-0000-000000000001".into(),
        ..Default::default()
    };
    let owned = kube_store(&ns, "owned").await.with_owner(owner.clone());
    variables::resolve(&defs("- {name: p, type: password}\n"), &Vars::new(), &owned)
        .await
        .unwrap();
    let secret = api.get("owned-var-p").await.unwrap();
    assert_eq!(secret.metadata.owner_references.unwrap()[0].name, "owner");

    // An absolute name is the director's (the namespace's): one value for every deployment,
    // read past a deployment's list, owned by none of them.
    let shared = defs(
        "- {name: /shared_ca, type: certificate, options: {is_ca: true, common_name: ca, key_length: 2048}}\n\
         - {name: /shared_tls, type: certificate, options: {ca: /shared_ca, common_name: dns, key_length: 2048}}\n\
         - {name: own, type: password}\n",
    );
    let web = kube_store(&ns, "web").await.preloaded().await.unwrap();
    let from_web = variables::resolve(&shared, &Vars::new(), &web)
        .await
        .unwrap();
    let owner_of_api = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        name: "api".into(),
        ..owner
    };
    let api_store =
        (kube_store(&ns, "api").await.preloaded().await.unwrap()).with_owner(owner_of_api);
    let from_api = variables::resolve(&shared, &Vars::new(), &api_store)
        .await
        .unwrap();
    for name in ["/shared_ca", "/shared_tls"] {
        assert_eq!(value(&from_web, name), value(&from_api, name), "{name}");
    }
    assert_eq!(sources(&from_api)["/shared_tls"], Source::Stored);
    assert_ne!(value(&from_web, "own"), value(&from_api, "own"));
    let director = api
        .list(&ListParams::default().labels("kubosh.io/director-variable=true"))
        .await
        .unwrap();
    assert_eq!(director.items.len(), 2);
    for secret in &director.items {
        let name = secret.metadata.name.as_deref().unwrap();
        assert!(name.starts_with("director-var-shared-"), "{name}");
        assert!(secret.metadata.owner_references.is_none(), "{name}");
    }
}

/// Each secret's text, and each line of multi-line ones (PEM bodies), long enough to be
/// unambiguous.
fn needles(values: &[&Value]) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => {
                out.push(s.clone());
                out.extend(
                    s.lines()
                        .filter(|l| l.len() >= 16 && !l.starts_with("-----"))
                        .map(str::to_string),
                );
            }
            Value::Object(m) => m.values().for_each(|v| walk(v, out)),
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    values.iter().for_each(|v| walk(v, &mut out));
    out
}

/// A controller that may read, create and update Secrets but not list them (the chart's
/// cluster-wide RBAC) still keeps its variables: `preloaded` falls back to one read each.
#[tokio::test(flavor = "multi_thread")]
async fn secret_store_without_the_right_to_list_reads_variables_one_by_one() {
    let ns = support::namespace("vars-nolist").await;
    let rules = json!([
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "update"]}
    ]);
    let client =
        support::service_account_client(&ns, "controller", rules, ["get", "secrets"]).await;
    let listing = Api::<Secret>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await;
    assert!(
        matches!(&listing, Err(kube::Error::Api(s)) if s.is_forbidden()),
        "{listing:?}"
    );
    let d = defs("- {name: admin_password, type: password}\n- {name: api_key, type: password}\n");
    let store = || async {
        SecretStore::new(client.clone(), &ns, "web")
            .preloaded()
            .await
            .expect("no list needed")
    };
    generated_once(&d, &store().await, &store().await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn values_never_reach_logs_errors_or_debug() {
    let logs = kubosh_devenv::captured_logs();
    const PLANTED: &str = "planted-S3cret-never-to-be-logged";
    let ns = support::namespace("leak").await;
    let doc = kubosh_base::yaml::parse_value(
        "name: leak\n\
         properties:\n  user: ((user_pw))\n  admin: ((admin_pw))\n  tls: ((tls))\n  cn: ((tls.certificate))\n\
         variables:\n\
         - {name: user_pw, type: password}\n\
         - {name: admin_pw, type: password}\n\
         - {name: ca, type: certificate, options: {is_ca: true, common_name: ca, key_length: 2048}}\n\
         - {name: tls, type: certificate, options: {ca: ca, common_name: ((admin_pw)), key_length: 2048}}\n\
         - {name: key, type: ssh}\n",
        "manifest",
    )
    .unwrap();
    let defs = variables::definitions(&doc).unwrap();
    let mut user = Vars::new();
    user.add_var_arg(&format!("user_pw={PLANTED}")).unwrap();

    let kube = kube_store(&ns, "leak").await;
    let tmp = tempfile::tempdir().unwrap();
    let file = FileStore::new(tmp.path().join("creds.yml"));
    let mut texts = Vec::new();
    let mut secrets: Vec<Value> = vec![json!(PLANTED)];
    for store in [&kube as &dyn VariableStore, &file, &MemoryStore::new()] {
        // Twice: generation, then reading back.
        for _ in 0..2 {
            let resolved = variables::resolve(&defs, &user, store).await.unwrap();
            tracing::trace!(?resolved, "resolved");
            texts.push(format!("{resolved:?} {:?} {store:?}", resolved.vars));
            let out = variables::interpolate(&doc, &resolved.vars, &InterpolateOptions::default())
                .unwrap();
            assert_eq!(out.value["properties"]["user"], json!(PLANTED));
            for name in ["admin_pw", "ca", "tls", "key"] {
                secrets.push(resolved.vars.get(name).unwrap());
            }
            texts.push(format!("{:?}", store.get("admin_pw").await.unwrap()));

            // Errors that would quote values: a map embedded in a string, a bad option.
            let bad = json!({"x": "cert: ((tls)) and ((user_pw))"});
            let err = variables::interpolate(
                &bad,
                &resolved.vars,
                &InterpolateOptions {
                    missing: MissingVars::Error,
                    error_on_unused: false,
                },
            )
            .unwrap_err();
            assert!(err.to_string().contains("Invalid type 'map"), "{err}");
            texts.push(format!("{err} {err:?}"));
            let bad_defs = kubosh_base::yaml::parse::<Vec<Variable>>(
                "- {name: c, type: certificate, options: {ca: tls, is_ca: true, common_name: 'x ((tls))'}}\n",
                "v",
            )
            .unwrap();
            let err = variables::resolve(&bad_defs, &resolved.vars, &MemoryStore::new())
                .await
                .unwrap_err();
            texts.push(format!("{err} {err:?}"));
            tracing::error!(error = %err, "expected failure");
        }
    }
    // The CLI's error path too.
    let kubosh_err = variables::interpolate(
        &json!({"a": "((key)) x"}),
        &variables::resolve(&defs, &user, &file).await.unwrap().vars,
        &InterpolateOptions::default(),
    )
    .unwrap_err();
    texts.push(format!("{kubosh_err} {kubosh_err:?}"));

    let refs: Vec<&Value> = secrets.iter().collect();
    let needles = needles(&refs);
    assert!(needles.len() > 20);
    let log_text = logs.text();
    assert!(
        log_text.contains("generated variable"),
        "logs were captured"
    );
    for needle in &needles {
        assert!(
            !log_text.contains(needle.as_str()),
            "a secret reached the logs: {needle:.12}..."
        );
        for t in &texts {
            assert!(
                !t.contains(needle.as_str()),
                "a secret reached an error or Debug: {needle:.12}..."
            );
        }
    }
}

/// The definitions of the "generated once" tests: two passwords, a CA, and two leaves it
/// signs, one with the default `update_mode` (`no-overwrite`) and one with `converge`.
const ONCE: &str = "\
- {name: pw, type: password}
- {name: other_pw, type: password}
- {name: ca, type: certificate, options: {is_ca: true, common_name: ca, key_length: 2048}}
- {name: tls, type: certificate, options: {ca: ca, common_name: web, key_length: 2048}}
- {name: tls_conv, type: certificate, update_mode: converge, options: {ca: ca, common_name: api, key_length: 2048}}
";
const ONCE_NAMES: [&str; 5] = ["pw", "other_pw", "ca", "tls", "tls_conv"];

fn sources(r: &kubosh_kube::variables::Resolved) -> std::collections::HashMap<String, Source> {
    r.sources.iter().cloned().collect()
}

/// Whether `openssl verify` accepts `cert` (PEM) as signed by `ca` (PEM).
fn verifies(ca: &Value, cert: &Value) -> bool {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ca.pem", ca.as_str().unwrap());
    write(dir.path(), "cert.pem", cert.as_str().unwrap());
    Command::new("openssl")
        .args(["verify", "-CAfile", "ca.pem", "cert.pem"])
        .current_dir(dir.path())
        .output()
        .expect("openssl is installed (tools/test.sh)")
        .status
        .success()
}

/// What happens across resolutions, whatever the store: `first` is the first resolution,
/// `again` a second one, `after_pw` one after `pw` was deleted from the store, `after_ca`
/// one after `ca` was deleted from it.
fn check_generated_once(
    first: &kubosh_kube::variables::Resolved,
    again: &kubosh_kube::variables::Resolved,
    after_pw: &kubosh_kube::variables::Resolved,
    after_ca: &kubosh_kube::variables::Resolved,
) {
    assert!(first.sources.iter().all(|(_, s)| *s == Source::Generated));
    // Stable across reconciles: nothing generated, the same values.
    assert!(
        again.sources.iter().all(|(_, s)| *s == Source::Stored),
        "{:?}",
        again.sources
    );
    for name in ONCE_NAMES {
        assert_eq!(value(first, name), value(again, name), "{name}");
    }

    // `pw` deleted: only it is generated anew.
    let s = sources(after_pw);
    assert_eq!(s["pw"], Source::Generated);
    assert_ne!(value(after_pw, "pw"), value(first, "pw"));
    for name in ["other_pw", "ca", "tls", "tls_conv"] {
        assert_eq!(s[name], Source::Stored, "{name}");
        assert_eq!(value(after_pw, name), value(first, name), "{name}");
    }

    // `ca` deleted: a new CA. As BOSH (bosh-cli's vars store, the config server's
    // `no-overwrite`): the default leaf is kept as stored, still signed by the old CA (its
    // `ca` field is the old CA); only `converge` notices the new CA and regenerates the leaf.
    let s = sources(after_ca);
    assert_eq!(s["ca"], Source::Generated);
    let (old_ca, new_ca) = (value(first, "ca"), value(after_ca, "ca"));
    assert_ne!(old_ca, new_ca);
    assert_ne!(old_ca["certificate"], new_ca["certificate"]);
    for name in ["pw", "other_pw"] {
        assert_eq!(s[name], Source::Stored, "{name}");
        assert_eq!(value(after_ca, name), value(after_pw, name), "{name}");
    }

    assert_eq!(s["tls"], Source::Stored);
    let tls = value(after_ca, "tls");
    assert_eq!(tls, value(first, "tls"), "no-overwrite keeps the old leaf");
    assert_eq!(tls["ca"], old_ca["certificate"]);
    assert!(verifies(&old_ca["certificate"], &tls["certificate"]));
    assert!(
        !verifies(&new_ca["certificate"], &tls["certificate"]),
        "the kept leaf is not signed by the new CA"
    );

    assert_eq!(s["tls_conv"], Source::Regenerated);
    let conv = value(after_ca, "tls_conv");
    assert_ne!(conv, value(first, "tls_conv"));
    assert_eq!(conv["ca"], new_ca["certificate"]);
    assert!(verifies(&new_ca["certificate"], &conv["certificate"]));
    assert!(!verifies(&old_ca["certificate"], &conv["certificate"]));
}

/// Removes `name` from the vars-store file, as an operator would with an editor.
fn remove_from_vars_file(path: &Path, name: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut doc = kubosh_base::yaml::parse_value(&text, "creds.yml").unwrap();
    assert!(
        doc.as_object_mut().unwrap().remove(name).is_some(),
        "{name}"
    );
    std::fs::write(path, kubosh_base::yaml::to_string(&doc).unwrap()).unwrap();
}

#[test]
fn file_store_values_are_stable_and_regenerated_only_when_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("creds.yml");
    let d = defs(ONCE);
    // A new store on the same file each time, as each `kubosh` run has.
    let run = || resolve(&d, &Vars::new(), &FileStore::new(&path));
    let first = run();
    let again = run();
    remove_from_vars_file(&path, "pw");
    let after_pw = run();
    remove_from_vars_file(&path, "ca");
    let after_ca = run();
    check_generated_once(&first, &again, &after_pw, &after_ca);
    // The file holds the current values.
    let stored = FileStore::new(&path).load().unwrap();
    for name in ONCE_NAMES {
        assert_eq!(stored[name], value(&after_ca, name), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn secret_store_values_are_stable_and_regenerated_only_when_deleted() {
    let ns = support::namespace("vars-once").await;
    let d = defs(ONCE);
    let client = support::control_plane().await.client().await.unwrap();
    let api: Api<Secret> = Api::namespaced(client, &ns);
    let delete = |name: &str| {
        let api = api.clone();
        let secret = SecretStore::secret_name("db", name);
        async move {
            api.delete(&secret, &Default::default())
                .await
                .unwrap_or_else(|e| panic!("delete {secret}: {e}"));
        }
    };
    // A new store each time, as each reconcile (or controller restart) has.
    let run = || {
        let ns = ns.clone();
        let d = d.clone();
        async move {
            variables::resolve(&d, &Vars::new(), &kube_store(&ns, "db").await)
                .await
                .unwrap()
        }
    };
    let first = run().await;
    let again = run().await;
    delete("pw").await;
    let after_pw = run().await;
    delete("ca").await;
    let after_ca = run().await;
    check_generated_once(&first, &again, &after_pw, &after_ca);
    // One Secret per variable, still.
    let list = api
        .list(&ListParams::default().labels("kubosh.io/deployment=db"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), ONCE_NAMES.len());
}
