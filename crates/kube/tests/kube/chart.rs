//! The Helm chart (`charts/kubosh`) and the plain manifests rendered from it (`deploy/`):
//! `helm lint`, the rendered objects accepted by the real apiserver (`kubectl apply
//! --dry-run=server`) in a namespace that enforces the restricted Pod Security Standard, in
//! both RBAC modes (one watched namespace, or all of them), and `deploy/kubosh.yaml` equal
//! to what the chart renders. That the RBAC is enough, and no more, is shown by the
//! controller itself in `tests/e2e/chart_rbac.rs`.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

use crate::helm::{render, root, succeeds};
use crate::support;

/// The command regenerating `deploy/kubosh.yaml`, from the repository root.
const REGENERATE: &str =
    "helm template kubosh charts/kubosh --namespace kubosh-system > deploy/kubosh.yaml";

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
    let cases = [
        // One namespace: Roles there and in the release namespace, nothing cluster-wide.
        vec![format!("watchNamespace={watched}")],
        // All namespaces, with every optional object.
        vec![
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
        }
        let warnings = server_dry_run(&["-f", "-"], Some(&rendered)).await;
        assert!(
            !warnings.contains("PodSecurity"),
            "the pod template breaks the restricted Pod Security Standard:\n{warnings}"
        );
    }
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
    // The local cloud's agents reach the same NATS server and blobstore.
    assert!(rendered.contains("mbus: nats://nats.bosh:4222"), "{rendered}");
    assert!(rendered.contains("blobstore_path: /var/lib/kubosh/blobs"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_plain_manifests_are_the_rendered_chart_and_apply() {
    let committed = std::fs::read_to_string(root().join("deploy/kubosh.yaml")).unwrap_or_default();
    let rendered = render("kubosh", "kubosh-system", &[]);
    assert!(
        committed == rendered,
        "deploy/kubosh.yaml is not what the chart renders. Regenerate it from the repository \
         root with:\n\n    {REGENERATE}\n\nand commit the result."
    );
    // `kubectl apply -k deploy/` as a user would, but dry: the namespace exists (the
    // dry run creates nothing), the CRDs already do.
    let client = support::control_plane().await.client().await.unwrap();
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "kubosh-system"}}))
            .unwrap();
    match Api::<Namespace>::all(client)
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create kubosh-system: {e}"),
    }
    let warnings = server_dry_run(&["-k", "deploy"], None).await;
    assert!(!warnings.contains("PodSecurity"), "{warnings}");
}
