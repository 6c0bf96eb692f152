//! The generated CRDs on a real kube-apiserver, driven with the real kubectl: structural
//! schemas, apply round trips, the status subresource, schema rejection, printer columns.

use crate::support;

use std::process::Output;

use kube::api::{Api, Patch, PatchParams};
use kubosh_kube::api::Deployment;
use serde_json::{Value, json};

fn example(name: &str) -> String {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    // The examples name a namespace; tests each use their own.
    text.lines()
        .filter(|l| !l.trim_start().starts_with("namespace:"))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let cp = support::control_plane().await;
    let mut cmd = cp.kubectl().expect("kubectl is installed");
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("run kubectl");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_shows_the_documented_manifest_fields() {
    let out = ok(&kubectl(&["explain", "boshdeployment.spec.manifest"], None).await);
    for field in [
        "instance_groups",
        "releases",
        "stemcells",
        "update",
        "variables",
    ] {
        assert!(out.contains(field), "explain lacks {field}:\n{out}");
    }
    assert!(
        out.contains("The groups of identical instances"),
        "field docs missing:\n{out}"
    );
    let out = ok(&kubectl(
        &[
            "explain",
            "boshdeployment.spec.manifest.update.max_in_flight",
        ],
        None,
    )
    .await);
    assert!(out.contains("percentage"), "{out}");
}

/// The example, with YAML 1.1 scalars among its properties (kubectl reads YAML with
/// go-yaml v2's rules, as bosh-cli and kubosh do).
fn example_deployment() -> String {
    let text = example("deployment.yaml");
    let yaml_1_1 = "            purge_interval: 24\n            mode: 0644\n            \
                    on: yes\n            hex: 0x1F\n            \
                    quoted: '0777'\n";
    let changed = text.replacen("            purge_interval: 24\n", yaml_1_1, 1);
    assert_ne!(changed, text, "the example has its autopurge properties");
    changed
}

#[tokio::test(flavor = "multi_thread")]
async fn examples_apply_client_and_server_side_and_read_back_unchanged() {
    let ns = support::namespace("apply").await;
    let original: Value = kubosh_base::yaml::parse_value(&example_deployment(), "example").unwrap();
    let autopurge =
        &original["spec"]["manifest"]["instance_groups"][0]["jobs"][0]["properties"]["autopurge"];
    assert_eq!(autopurge["mode"], 420, "{autopurge}");
    assert_eq!(autopurge["true"], true, "{autopurge}");
    assert_eq!(autopurge["quoted"], "0777", "{autopurge}");
    ok(&kubectl(
        &["apply", "-n", &ns, "-f", "-"],
        Some(&example("cloud-config.yaml")),
    )
    .await);
    for (mode, name) in [
        ("--server-side=false", "zk-client-side"),
        ("--server-side=true", "zk-server-side"),
    ] {
        let text =
            example_deployment().replacen("name: zookeeper\n", &format!("name: {name}\n"), 1);
        ok(&kubectl(&["apply", mode, "-n", &ns, "-f", "-"], Some(&text)).await);
        let got: Value = serde_json::from_str(&ok(&kubectl(
            &["get", "boshdeployment", name, "-n", &ns, "-o", "json"],
            None,
        )
        .await))
        .unwrap();
        // kubectl (go-yaml v2 underneath) and kubosh read the YAML 1.1 scalars alike.
        assert_eq!(
            got["spec"], original["spec"],
            "{mode}: the stored spec differs from the example"
        );
        let props = &got["spec"]["manifest"]["instance_groups"][0]["jobs"][0]["properties"];
        assert_eq!(
            props["autopurge"]["snap_retain_count"], 3,
            "{mode}: free-form properties were pruned"
        );
        assert_eq!(props["admin"]["password"], "((zookeeper_admin_password))");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn status_round_trips_through_the_status_subresource_with_server_side_apply() {
    let cp = support::control_plane().await;
    let ns = support::namespace("status").await;
    ok(&kubectl(
        &["apply", "--server-side", "-n", &ns, "-f", "-"],
        Some(&example("deployment.yaml")),
    )
    .await);
    let api: Api<Deployment> = Api::namespaced(cp.client().await.unwrap(), &ns);
    let generation = api
        .get("zookeeper")
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    let status = json!({
        "apiVersion": "kubosh.io/v1alpha1",
        "kind": "Deployment",
        "status": {
            "observedGeneration": generation,
            "instances": "5/6",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "Updating", "message": "updating zookeeper/2 (canary)",
                 "lastTransitionTime": "2026-11-22T03:00:00Z", "observedGeneration": generation},
                {"type": "Reconciling", "status": "True", "reason": "Updating", "message": "1 of 6 instances left",
                 "lastTransitionTime": "2026-11-22T03:00:00Z", "observedGeneration": generation}
            ]
        }
    });
    api.patch_status(
        "zookeeper",
        &PatchParams::apply("kubosh-test").force(),
        &Patch::Apply(&status),
    )
    .await
    .unwrap();
    let back = api.get("zookeeper").await.unwrap();
    assert_eq!(
        back.metadata.generation,
        Some(generation),
        "a status write must not bump the generation"
    );
    let back = serde_json::to_value(&back).unwrap();
    assert_eq!(back["status"]["observedGeneration"], generation);
    assert_eq!(back["status"]["conditions"], status["status"]["conditions"]);

    // Printer columns show the status.
    let table = ok(&kubectl(&["get", "boshdeployments", "-n", &ns], None).await);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "INSTANCES", "UP-TO-DATE", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..4],
        ["zookeeper", "False", "Updating", "5/6"],
        "{table}"
    );
    // The `bosh` category and the short name reach the same objects.
    assert!(ok(&kubectl(&["get", "bosh", "-n", &ns], None).await).contains("zookeeper"));
    assert!(ok(&kubectl(&["get", "bd", "-n", &ns], None).await).contains("zookeeper"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_deployment_is_rejected_by_the_schema_with_the_field_named() {
    let ns = support::namespace("reject").await;
    let bad = example("deployment.yaml")
        .replace("instances: 5", "instances: five")
        .replace("max_in_flight: 1", "max_in_flight: [1]");
    // A create is validated against the schema as a whole: every bad field is named.
    let out = kubectl(&["create", "-n", &ns, "-f", "-"], Some(&bad)).await;
    assert!(
        !out.status.success(),
        "the apiserver accepted an invalid manifest"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.manifest.instance_groups[0].instances"),
        "{err}"
    );
    assert!(err.contains("spec.manifest.update.max_in_flight"), "{err}");
    // Server-side apply stops at the first field that does not fit the schema.
    let out = kubectl(
        &["apply", "--server-side", "-n", &ns, "-f", "-"],
        Some(&bad),
    )
    .await;
    assert!(
        !out.status.success(),
        "server-side apply accepted an invalid manifest"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(".spec.manifest."),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nothing was stored.
    let get = kubectl(&["get", "boshdeployment", "zookeeper", "-n", &ns], None).await;
    assert!(!get.status.success());
}
