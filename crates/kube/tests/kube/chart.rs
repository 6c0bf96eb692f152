//! The Helm chart (`charts/kubosh`) and the plain manifests rendered from it (`deploy/`):
//! `helm lint`, the rendered objects accepted by the real apiserver (`kubectl apply
//! --dry-run=server`) in a namespace that enforces the restricted Pod Security Standard, in
//! both RBAC modes (one watched namespace, or all of them), and `deploy/kubosh.yaml` and
//! `examples/cluster/kubosh.yaml` equal to what the chart renders. That the RBAC is enough, and no more, is shown by the
//! controller itself in `tests/e2e/chart_rbac.rs`.

use std::path::Path;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

use crate::helm::{render, root, succeeds, template_args};
use crate::support;

/// The chart's committed renderings, each with its `helm template` values arguments: the
/// defaults in `deploy/`, and the cluster example's values in `examples/cluster/`, each a
/// kustomization.
const RENDERINGS: [(&str, &[&str]); 2] = [
    ("deploy", &[]),
    ("examples/cluster", &["-f", "examples/cluster/values.yaml"]),
];

/// A namespace that enforces (and warns about) the restricted Pod Security Standard.
async fn restricted_namespace(prefix: &str) -> String {
    let name = support::namespace(prefix).await;
    let client = support::control_plane().await.client().await.unwrap();
    let labels = serde_json::json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }}});
    Api::<Namespace>::all(client)
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&labels),
        )
        .await
        .unwrap();
    name
}

/// `kubectl apply --dry-run=server` of `manifests`: the apiserver's warnings (stderr).
async fn server_dry_run(args: &[&str], manifests: Option<&str>) -> String {
    let cp = support::control_plane().await;
    let kubeconfig = cp.kubeconfig_path().display().to_string();
    let mut all = vec!["--kubeconfig", &kubeconfig, "apply", "--dry-run=server"];
    all.extend(args);
    let (stdout, stderr) = succeeds("kubectl", &all, manifests.unwrap_or(""));
    assert!(stdout.contains("(server dry run)"), "{stdout}");
    stderr
}

#[test]
fn helm_lint_passes_in_both_rbac_modes() {
    for set in [&[][..], &["watchNamespace=bosh"][..]] {
        let mut args = vec!["lint", "--strict", "charts/kubosh"];
        for s in set {
            args.extend(["--set", s]);
        }
        let (stdout, _) = succeeds("helm", &args, "");
        assert!(stdout.contains("0 chart(s) failed"), "{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rendered_chart_is_accepted_by_the_apiserver_under_restricted_pod_security() {
    let release_ns = restricted_namespace("chart-sys").await;
    let watched = support::namespace("chart-watched").await;
    // A real CPI: the local cloud's VMs (processes in the Pod) need user namespaces, which
    // the restricted standard's seccomp profile forbids (below).
    let cpi = "cpi.command={/var/vcap/packages/aws_cpi/bin/aws_cpi}";
    let cases = [
        // One namespace, without the ops API (its APIService and its delegated
        // authorization are cluster-wide by nature): Roles there and in the release
        // namespace, nothing cluster-wide.
        vec![
            format!("watchNamespace={watched}"),
            "opsApi.enabled=false".into(),
            cpi.into(),
        ],
        // All namespaces, with every optional object.
        vec![
            cpi.to_string(),
            "podDisruptionBudget.enabled=true".to_string(),
            "blobstore.persistence.enabled=true".into(),
            "cpi.credentialsSecret=cpi-creds".into(),
            "nats.authorization.enabled=true".into(),
            "nats.authorization.claimName=nats-auth".into(),
        ],
    ];
    for (i, set) in cases.iter().enumerate() {
        let set: Vec<&str> = set.iter().map(String::as_str).collect();
        let rendered = render(&format!("kubosh-dry{i}"), &release_ns, &set);
        let kinds: Vec<&str> = (rendered.lines())
            .filter_map(|l| l.strip_prefix("kind: "))
            .collect();
        if i == 0 {
            assert!(!kinds.iter().any(|k| k.starts_with("Cluster")), "{kinds:?}");
            assert_eq!(kinds.iter().filter(|k| **k == "Role").count(), 2);
        } else {
            assert!(kinds.contains(&"ClusterRole"), "{kinds:?}");
            assert!(kinds.contains(&"PodDisruptionBudget"), "{kinds:?}");
            assert!(kinds.contains(&"PersistentVolumeClaim"), "{kinds:?}");
            assert!(kinds.contains(&"APIService"), "{kinds:?}");
        }
        let warnings = server_dry_run(&["-f", "-"], Some(&rendered)).await;
        assert!(
            !warnings.contains("PodSecurity"),
            "the pod template breaks the restricted Pod Security Standard:\n{warnings}"
        );
    }
    // The local cloud (the default): only its seccomp profile is outside the standard.
    let rendered = render("kubosh-local", &release_ns, &[]);
    let warnings = server_dry_run(&["-f", "-"], Some(&rendered)).await;
    let violations: Vec<&str> = (warnings.lines())
        .filter(|l| l.contains("PodSecurity"))
        .collect();
    assert_eq!(violations.len(), 1, "{warnings}");
    assert!(
        violations[0].contains("seccompProfile") && violations[0].contains("Unconfined"),
        "{warnings}"
    );
}

#[test]
fn the_director_configuration_mounts_what_it_names() {
    let rendered = render(
        "kubosh",
        "kubosh-system",
        &[
            "cpi.credentialsSecret=cpi-creds",
            "cpi.properties.region=eu-1",
            "nats.url=nats://nats.bosh:4222",
        ],
    );
    let director = rendered
        .split("director.yml: |\n")
        .nth(1)
        .and_then(|rest| rest.split("\n---").next())
        .expect("the director Secret");
    for line in [
        "state_dir: /var/lib/kubosh/state",
        "properties_path: /etc/kubosh/cpi-credentials/properties.yml",
        "region: eu-1",
        "url: nats://nats.bosh:4222",
        "ca_private_key_path: /etc/kubosh/nats/ca.key",
        "path: /var/lib/kubosh/blobs",
    ] {
        assert!(director.contains(line), "{line} in\n{director}");
    }
    for mount in [
        "mountPath: /etc/kubosh/director",
        "mountPath: /etc/kubosh/nats",
        "mountPath: /etc/kubosh/cpi-credentials",
        "mountPath: /etc/kubosh/cpi",
        "mountPath: /var/lib/kubosh/state",
        "mountPath: /var/lib/kubosh/blobs",
        "secretName: cpi-creds",
    ] {
        assert!(rendered.contains(mount), "{mount}");
    }
    // The local cloud's configuration: its agents reach the same NATS server and blobstore.
    let cpi_yml = document(&rendered, "ConfigMap")["data"]["cpi.yml"]
        .as_str()
        .unwrap()
        .to_string();
    let local: kubosh_cloud::local::Config =
        serde_json::from_value(kubosh_base::yaml::parse_value(&cpi_yml, "cpi.yml").unwrap())
            .unwrap();
    assert_eq!(local.state_dir, Path::new("/var/lib/kubosh/state/cloud"));
    assert_eq!(
        local.mbus.as_ref().map(|m| m.expose().as_str()),
        Some("nats://nats.bosh:4222")
    );
    assert_eq!(
        local.blobstore.as_ref().map(|b| b.expose().clone()),
        Some(serde_json::json!({"provider": "local",
                                "options": {"blobstore_path": "/var/lib/kubosh/blobs"}}))
    );
}

/// The first object of `kind` in `rendered`.
fn document(rendered: &str, kind: &str) -> serde_json::Value {
    rendered
        .split("\n---\n")
        .filter_map(|doc| kubosh_base::yaml::parse_value(doc, "chart").ok())
        .find(|doc| doc["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in\n{rendered}"))
}

/// The generated director configuration is one `kubosh controller` loads: with its mounts
/// laid out below a temporary directory (the NATS Secret's files, the CPI credentials'
/// `properties.yml`), every key known, every file read, the CPI's properties merged.
#[test]
fn the_generated_director_configuration_loads() {
    let rendered = render(
        "kubosh",
        "kubosh-system",
        &[
            "cpi.command={sh,-c,true}",
            "cpi.credentialsSecret=cpi-creds",
            "cpi.properties.region=eu-1",
            "director.settings.snapshots.enabled=true",
        ],
    );
    let secret = document(&rendered, "Secret");
    let text = secret["stringData"]["director.yml"].as_str().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let text = text
        .replace("/etc/kubosh/", &format!("{root}/etc/kubosh/"))
        .replace("/var/lib/kubosh/", &format!("{root}/var/lib/kubosh/"));
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = params.self_signed(&key).unwrap().pem();
    let ca = kubosh_base::pki::Ca::from_pem(&ca_cert, &key.serialize_pem()).unwrap();
    let director = ca
        .issue(&kubosh_base::pki::Leaf {
            common_name: "default.director.bosh-internal",
            client: true,
            ..Default::default()
        })
        .unwrap();
    let nats = dir.path().join("etc/kubosh/nats");
    let creds = dir.path().join("etc/kubosh/cpi-credentials");
    std::fs::create_dir_all(&nats).unwrap();
    std::fs::create_dir_all(&creds).unwrap();
    for (name, pem) in [
        ("ca.crt", ca_cert.as_str()),
        ("ca.key", &key.serialize_pem()),
        ("director.crt", &director.cert_pem),
        ("director.key", &director.key_pem),
    ] {
        std::fs::write(nats.join(name), pem).unwrap();
    }
    std::fs::write(creds.join("properties.yml"), "api_key: k3y\n").unwrap();

    let value = kubosh_base::yaml::parse_value(&text, "director.yml").unwrap();
    let config = kubosh_director::DirectorConfig::from_value(&value, dir.path())
        .unwrap_or_else(|e| panic!("{}: {}\n{text}", e.key, e.message));
    assert_eq!(config.state_dir, dir.path().join("var/lib/kubosh/state"));
    assert_eq!(
        config.blobstore_dir,
        dir.path().join("var/lib/kubosh/blobs")
    );
    assert_eq!(
        config.cpi.properties.expose(),
        serde_json::json!({"region": "eu-1", "api_key": "k3y"})
            .as_object()
            .unwrap()
    );
    assert!(config.disks.snapshots_enabled);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_plain_manifests_are_the_rendered_chart_and_apply() {
    // `kubectl apply -k` as a user would, but dry: the namespace exists (the dry run
    // creates nothing), the CRDs already do.
    let client = support::control_plane().await.client().await.unwrap();
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "kubosh-system"}})).unwrap();
    match Api::<Namespace>::all(client)
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create kubosh-system: {e}"),
    }
    for (dir, values) in RENDERINGS {
        let file = format!("{dir}/kubosh.yaml");
        let committed = std::fs::read_to_string(root().join(&file)).unwrap_or_default();
        let args = template_args("kubosh", "kubosh-system", values);
        let rendered = succeeds("helm", &args, "").0;
        assert!(
            committed == rendered,
            "{file} is not what the chart renders. Regenerate it from the repository root \
             with:\n\n    helm {} > {file}\n\nand commit the result.",
            args.join(" ")
        );
        let warnings = server_dry_run(&["-k", dir], None).await;
        assert!(!warnings.contains("PodSecurity"), "{dir}: {warnings}");
    }
}
