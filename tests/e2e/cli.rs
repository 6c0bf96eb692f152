//! The `kubosh` binary, run as a user would.

use std::process::Command;

fn kubosh(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubosh"))
        .args(args)
        .output()
        .expect("run kubosh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/real-world");

#[test]
fn validate_accepts_cf_deployment_with_ops() {
    let cf = format!("{FIXTURES}/cf-deployment");
    let (code, out, err) = kubosh(&[
        "validate",
        &format!("{cf}/cf-deployment.yml"),
        "--cloud-config",
        &format!("{cf}/bosh-lite-cloud-config.yml"),
        "-o",
        &format!("{cf}/bosh-lite.yml"),
        "-o",
        &format!("{cf}/scale-to-one-az.yml"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("manifest 'cf' is valid"), "{out}");
    assert!(!err.contains("error:"), "{err}");
}

#[test]
fn validate_reports_every_problem_with_its_path_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("bad.yml");
    std::fs::write(
        &manifest,
        "name: web\nreleases: [{name: kv, version: '1'}]\nstemcells: [{alias: default, os: ubuntu-noble, version: latest}]\n\
         update: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}\n\
         instance_groups:\n- name: web\n  azs: [z1, z9]\n  instances: 1\n  vm_type: tiny\n  stemcell: default\n  networks: [{name: default}]\n  jobs: [{name: web-server, release: kv}]\n",
    )
    .unwrap();
    let cc = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/bosh/cloud-config.yml"
    );
    let (code, _, err) = kubosh(&["validate", manifest.to_str().unwrap(), "-c", cc]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("instance_groups[0].azs[1]: AZ 'z9' is not defined"),
        "{err}"
    );
    assert!(
        err.contains("instance_groups[0].vm_type: VM type 'tiny' is not defined"),
        "{err}"
    );
    assert!(err.contains("2 error(s)"), "{err}");
}

/// Several `--cloud-config`s merge as the Director merges named cloud configs: cf-deployment
/// on bosh-lite's cloud config split in two validates; a VM type defined in both is an
/// error naming both files.
#[test]
fn validate_merges_several_cloud_configs() {
    let cf = format!("{FIXTURES}/cf-deployment");
    let dir = tempfile::tempdir().unwrap();
    let whole = yaml_file(std::path::Path::new(&format!(
        "{cf}/bosh-lite-cloud-config.yml"
    )));
    let mut rest = whole.clone();
    let vm_types = rest.as_object_mut().unwrap().remove("vm_types").unwrap();
    let write = |name: &str, doc: &serde_json::Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_string(doc).unwrap()).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (rest, types) = (
        write("rest.yml", &rest),
        write("types.yml", &serde_json::json!({"vm_types": vm_types})),
    );
    let manifest = format!("{cf}/cf-deployment.yml");
    let ops = format!("{cf}/bosh-lite.yml");
    let validate = |configs: &[&str]| {
        let mut args = vec!["validate", manifest.as_str(), "-o", ops.as_str()];
        for c in configs {
            args.extend(["--cloud-config", c]);
        }
        kubosh(&args)
    };
    let (code, out, err) = validate(&[&rest, &types]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("manifest 'cf' is valid"), "{out}");
    let again = write("again.yml", &serde_json::json!({"vm_types": vm_types}));
    let (code, _, err) = validate(&[&rest, &types, &again]);
    assert_ne!(code, 0);
    let first = whole["vm_types"][0]["name"].as_str().unwrap();
    assert!(
        err.contains(&format!(
            "vm_types '{first}' is defined in cloud config '{types}' (vm_types[0]) and in cloud config '{again}' (vm_types[0])"
        )),
        "{err}"
    );
}

/// bosh-deployment's runtime configs applied to the zookeeper manifest validate; a release
/// version conflict with the manifest is an error naming the runtime config.
#[test]
fn validate_applies_runtime_configs() {
    let rcs = format!("{FIXTURES}/bosh-deployment/runtime-configs");
    let manifest = format!("{FIXTURES}/zookeeper-release/zookeeper.yml");
    let cc = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/core/tests/data/zookeeper-cloud-config.yml"
    );
    let (dns, bpm) = (format!("{rcs}/dns.yml"), format!("{rcs}/bpm.yml"));
    let (code, out, err) = kubosh(&[
        "validate",
        &manifest,
        "-c",
        cc,
        "--runtime-config",
        &dns,
        "--runtime-config",
        &bpm,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("is valid"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let old_bpm = dir.path().join("old-bpm.yml");
    std::fs::write(&old_bpm, "releases: [{name: bpm, version: '0.1.0'}]\n").unwrap();
    let (code, _, err) = kubosh(&[
        "validate",
        &manifest,
        "-c",
        cc,
        "--runtime-config",
        &bpm,
        "--runtime-config",
        old_bpm.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("Runtime manifest specifies release 'bpm' with version as '0.1.0'. This conflicts with version '0.8.0'"),
        "{err}"
    );
}

#[test]
fn interpolate_prints_a_path_like_bosh_int() {
    let b = format!("{FIXTURES}/bosh-deployment");
    let (code, out, err) = kubosh(&[
        "interpolate",
        &format!("{b}/bosh.yml"),
        "-o",
        &format!("{b}/warden/cpi.yml"),
        "-v",
        "internal_ip=10.0.0.6",
        "--path",
        "/cloud_provider/mbus",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "https://mbus:((mbus_bootstrap_password))@10.0.0.6:6868\n"
    );
}

#[test]
fn interpolate_with_var_errs_lists_missing_variables() {
    let b = format!("{FIXTURES}/bosh-deployment");
    let (code, _, err) = kubosh(&["interpolate", &format!("{b}/bosh.yml"), "--var-errs"]);
    assert_eq!(code, 1);
    assert!(err.contains("Expected to find variables:"), "{err}");
    assert!(err.contains("internal_ip"), "{err}");
}

/// `bosh` (bosh-cli, built by tools/testbins.sh).
fn bosh(args: &[&str]) -> (i32, String, String) {
    let bin = kubosh_devenv::binary("bosh").unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(bin).args(args).output().expect("run bosh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn yaml_file(path: &std::path::Path) -> serde_json::Value {
    kubosh_base::yaml::parse_value(&std::fs::read_to_string(path).unwrap(), "vars store").unwrap()
}

/// What a variable's value looks like, without the value: its keys, and for each string a
/// description of its form.
fn shape(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        Value::String(s) => {
            let form =
                if let Some(first) = s.lines().next().filter(|l| l.starts_with("-----BEGIN ")) {
                    format!(
                        "{first} ({} lines)",
                        if s.ends_with('\n') {
                            "newline-terminated"
                        } else {
                            "unterminated"
                        }
                    )
                } else if s.starts_with("ssh-rsa ") {
                    format!("ssh-rsa line, ends with newline: {}", s.ends_with('\n'))
                } else if s.len() == 47 && s.split(':').count() == 16 {
                    "md5 fingerprint".to_string()
                } else if s
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                {
                    format!("{} chars of a-z0-9", s.len())
                } else {
                    "other".to_string()
                };
            Value::String(form)
        }
        other => other.clone(),
    }
}

/// The first place `a` and `b` differ, as a path.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => first_difference(p, q, &format!("{at}/{k}")),
                _ => Some(format!("{at}/{k} (only one side)")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{at}/{i}"))),
        _ if a == b => None,
        _ => Some(format!("{at}: {a} != {b}")),
    }
}

/// bosh-deployment's bosh.yml with the real bosh-cli and with kubosh: the same variables
/// are stored, each with the same keys and forms; the interpolated documents have the same
/// structure; each tool reads the other's vars store without generating anything, and signs
/// new certificates with the other's CA.
#[test]
fn interpolate_vars_store_matches_bosh_cli() {
    let b = format!("{FIXTURES}/bosh-deployment/bosh.yml");
    let tmp = tempfile::tempdir().unwrap();
    let theirs = tmp.path().join("bosh-creds.yml");
    let ours = tmp.path().join("kubosh-creds.yml");
    let args = |store: &std::path::Path| -> Vec<String> {
        [
            "interpolate",
            &b,
            "-v",
            "internal_ip=10.0.0.6",
            "-v",
            "director_name=d",
            "--vars-store",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([store.display().to_string()])
        .collect()
    };
    let run = |tool: fn(&[&str]) -> (i32, String, String), store: &std::path::Path| {
        let a = args(store);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let (code, out, err) = tool(&refs);
        assert_eq!(code, 0, "{err}");
        out
    };
    let bosh_out = run(bosh, &theirs);
    let kubosh_out = run(kubosh, &ours);

    let (t, o) = (yaml_file(&theirs), yaml_file(&ours));
    let names = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&t), names(&o));
    assert!(names(&o).len() > 10);
    for name in names(&t) {
        let diff = first_difference(&shape(&t[&name]), &shape(&o[&name]), &name);
        assert_eq!(diff, None);
    }
    let parse = |s: &str| shape(&kubosh_base::yaml::parse_value(s, "out").unwrap());
    let diff = first_difference(&parse(&bosh_out), &parse(&kubosh_out), "");
    assert_eq!(diff, None);
    let mode = std::fs::metadata(&ours).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );

    // Generated once: a second run changes nothing and prints the same.
    let before = std::fs::read_to_string(&ours).unwrap();
    assert_eq!(run(kubosh, &ours), kubosh_out);
    assert_eq!(std::fs::read_to_string(&ours).unwrap(), before);
    // Each reads the other's store as its own (same documents; the YAML emitters quote
    // differently).
    let value = |s: &str| kubosh_base::yaml::parse_value(s, "out").unwrap();
    assert!(value(&run(kubosh, &theirs)) == value(&bosh_out));
    assert!(value(&run(bosh, &ours)) == value(&kubosh_out));

    // Without `internal_ip`, definitions whose options need it are not generated, and stay
    // in the document's `variables:`, as with bosh-cli.
    let partial = |tool: fn(&[&str]) -> (i32, String, String), store: &std::path::Path| {
        let (code, out, err) = tool(&["interpolate", &b, "--vars-store", store.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        let doc = kubosh_base::yaml::parse_value(&out, "out").unwrap();
        (names(&yaml_file(store)), doc["variables"].clone())
    };
    let (theirs_partial, ours_partial) = (
        tmp.path().join("p-bosh.yml"),
        tmp.path().join("p-kubosh.yml"),
    );
    let (their_names, their_left) = partial(bosh, &theirs_partial);
    let (our_names, our_left) = partial(kubosh, &ours_partial);
    assert_eq!(our_names, their_names);
    assert!(our_names.len() < names(&o).len());
    assert_eq!(our_left, their_left);
    assert!(!our_left.as_array().unwrap().is_empty());

    // Each signs with the other's CA.
    let extra = tmp.path().join("extra.yml");
    std::fs::write(
        &extra,
        "variables:\n- {name: extra_tls, type: certificate, options: {ca: default_ca, common_name: extra}}\n",
    )
    .unwrap();
    for (tool, store) in [
        (kubosh as fn(&[&str]) -> (i32, String, String), &theirs),
        (bosh, &ours),
    ] {
        let (code, _, err) = tool(&[
            "interpolate",
            extra.to_str().unwrap(),
            "--vars-store",
            store.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        let v = yaml_file(store);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ca.pem"),
            v["default_ca"]["certificate"].as_str().unwrap(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("leaf.pem"),
            v["extra_tls"]["certificate"].as_str().unwrap(),
        )
        .unwrap();
        assert_eq!(v["extra_tls"]["ca"], v["default_ca"]["certificate"]);
        let out = Command::new("openssl")
            .args(["verify", "-CAfile", "ca.pem", "leaf.pem"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn interpolate_vars_store_lets_user_values_win() {
    let tmp = tempfile::tempdir().unwrap();
    let doc = tmp.path().join("m.yml");
    std::fs::write(
        &doc,
        "a: ((pw))\nb: ((other))\nvariables:\n- {name: pw, type: password}\n- {name: other, type: password, options: {length: 8}}\n",
    )
    .unwrap();
    let store = tmp.path().join("creds.yml");
    let s = store.to_str().unwrap();
    let (code, out, err) = kubosh(&[
        "interpolate",
        doc.to_str().unwrap(),
        "--vars-store",
        s,
        "-v",
        "pw=mine",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("a: mine\nb: "), "{out}");
    assert!(out.ends_with("variables: []\n"), "{out}");
    let stored = yaml_file(&store);
    // The user's value is not stored; the generated one is, and is reused.
    assert!(stored.get("pw").is_none());
    assert_eq!(stored["other"].as_str().unwrap().len(), 8);
    let (_, again, _) = kubosh(&[
        "interpolate",
        doc.to_str().unwrap(),
        "--vars-store",
        s,
        "-v",
        "pw=mine",
    ]);
    assert_eq!(again, out);
    // Errors name the definition's path.
    std::fs::write(
        &doc,
        "variables:\n- {name: tls, type: certificate, options: {ca: nowhere, common_name: x}}\n",
    )
    .unwrap();
    let (code, _, err) = kubosh(&["interpolate", doc.to_str().unwrap(), "--vars-store", s]);
    assert_eq!(code, 1);
    assert!(err.starts_with("variables[0].options.ca: "), "{err}");
}

/// `kubosh nats-pki` writes certificates a real nats-server accepts for mutual TLS, with
/// the configuration it prints, and never overwrites them.
#[tokio::test]
async fn nats_pki_writes_what_a_real_nats_server_and_the_director_use() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let pki_arg = pki.display().to_string();
    let (code, out, err) = kubosh(&["nats-pki", "--dir", &pki_arg]);
    assert_eq!(code, 0, "{err}");
    let start = out.find("tls {").expect("a tls block");
    let tls_block = &out[start..start + out[start..].find("\n}\n").unwrap() + 3];
    assert!(tls_block.contains("verify: true"), "{out}");
    let nats_block = &out[out.find("nats:\n").expect("a nats block")..];
    let setting = |key: &str| -> String {
        let line = (nats_block.lines())
            .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("{key} in {out}"));
        std::fs::read_to_string(line).unwrap()
    };
    let key_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(pki.join("ca.key")).unwrap().permissions(),
    );
    assert_eq!(key_mode & 0o077, 0, "the CA key is its owner's only");
    // The confined server's first authorization file: the director (by its certificate's
    // subject) and the health monitor, no agent yet.
    let seed = std::fs::read_to_string(pki.join("authorization.json")).unwrap();
    let seed: serde_json::Value = serde_json::from_str(&seed).unwrap();
    let users = seed["authorization"]["users"].as_array().unwrap();
    let director_subject =
        kubosh_base::pki::subject_dn(&setting("director_certificate_path")).unwrap();
    assert_eq!(users.len(), 2, "{seed}");
    assert_eq!(users[0]["user"], director_subject.as_str());
    assert_eq!(users[1]["user"], "CN=default.hm.bosh-internal");

    let server = kubosh_devenv::NatsServer::start(None, tls_block).unwrap();
    let url = format!("tls://127.0.0.1:{}", server.port());
    let director = kubosh_transport::agent::MbusTls::new(
        setting("ca_certificate_path"),
        setting("director_certificate_path"),
        setting("director_private_key_path"),
    );
    let options = kubosh_transport::agent::NatsOptions::new(url.clone(), director);
    let client = kubosh_transport::agent::nats::connect(&options)
        .await
        .expect("the director's certificate connects");
    client.flush().await.unwrap();

    // An agent's certificate, issued by the CA as the director issues them, connects too.
    let ca = kubosh_base::pki::Ca::from_pem(
        &setting("ca_certificate_path"),
        &setting("ca_private_key_path"),
    )
    .unwrap();
    let agent = ca
        .issue(&kubosh_base::pki::Leaf {
            common_name: "a1.agent.bosh-internal",
            client: true,
            ..kubosh_base::pki::Leaf::default()
        })
        .unwrap();
    let tls = kubosh_transport::agent::MbusTls::new(
        setting("ca_certificate_path"),
        &agent.cert_pem,
        &agent.key_pem,
    );
    let agent_client = kubosh_transport::agent::nats::connect(
        &kubosh_transport::agent::NatsOptions::new(url, tls),
    )
    .await
    .expect("an agent's certificate from the CA connects");
    agent_client.flush().await.unwrap();

    // Again: the CA that signed those certificates is kept, and the command says why.
    let ca_before = std::fs::read(pki.join("ca.key")).unwrap();
    let (code, _, err) = kubosh(&["nats-pki", "--dir", &pki_arg]);
    assert_eq!(code, 1);
    assert!(
        err.contains("already exist") && err.contains("ca.key"),
        "{err}"
    );
    assert_eq!(std::fs::read(pki.join("ca.key")).unwrap(), ca_before);
}

/// A reader that goes away before the output ends (`| head -1`) ends the command quietly,
/// not with a panic.
#[test]
fn a_closed_stdout_ends_quietly() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yml");
    // Far more than a pipe holds (64 KiB), so the write meets the closed end.
    let text: String = (0..20_000)
        .map(|i| format!("key{i}: value {i}\n"))
        .collect();
    std::fs::write(&big, text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubosh"))
        .args(["interpolate", &big.display().to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The pipe's read end is closed here, with most of the document unread.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
