//! `kubectl bosh`: the `kubosh` binary as the kubectl plugin `kubectl-bosh`, found by the
//! real kubectl on `PATH`, reading the cluster through kubectl's kubeconfig conventions.

use std::process::Command;

use kube::api::{Api, Patch, PatchParams, PostParams};
use kubosh_kube::api::{
    Instance, InstanceNetwork, InstanceSpec, InstanceStatus, ProcessState, labels,
};

use crate::controller::control_plane;
use crate::director_world::{KUBOSH, text};

/// The plugin as `kubectl-bosh` on a `PATH` (a symlink to the kubosh binary in the
/// directory returned, which must live as long as the `PATH` is used).
pub(crate) fn plugin_on_path() -> (tempfile::TempDir, String) {
    let plugins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(KUBOSH, plugins.path().join("kubectl-bosh")).unwrap();
    let path = format!(
        "{}:{}",
        plugins.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (plugins, path)
}

/// `kubectl bosh <args> -n <ns>` with `kubeconfig` (as its `context`, when given), the
/// plugin on `PATH`: success, stdout, stderr.
pub(crate) fn kubectl_bosh(
    kubeconfig: &std::path::Path,
    context: Option<&str>,
    ns: &str,
    args: &[&str],
) -> (bool, String, String) {
    let (_plugins, path) = plugin_on_path();
    let mut kubectl = Command::new(kubosh_devenv::binary("kubectl").unwrap());
    kubectl.arg("bosh").args(args).args(["-n", ns]);
    if let Some(context) = context {
        kubectl.args(["--context", context]);
    }
    let out = kubectl
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", &path)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    (out.status.success(), stdout, stderr)
}

fn instance(deployment: &str, group: &str, index: i32, ip: &str) -> Instance {
    let mut i = Instance::new(
        &format!("{deployment}-{group}-{index}"),
        InstanceSpec {
            deployment: deployment.into(),
            instance_group: group.into(),
            index,
            id: format!("{group}-id-{index}"),
            az: Some("z1".into()),
            networks: vec![InstanceNetwork {
                name: "default".into(),
                ip: Some(ip.into()),
            }],
            ..InstanceSpec::default()
        },
    );
    i.metadata.labels = Some([(labels::DEPLOYMENT.to_string(), deployment.to_string())].into());
    i
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_bosh_instances_lists_a_deployments_instances() {
    let cp = control_plane().await;
    let ns = "kubectl-bosh";
    cp.create_namespace(ns).await.unwrap();
    let api: Api<Instance> = Api::namespaced(cp.client().await.unwrap(), ns);
    for (i, state) in [
        (
            instance("hello", "web", 0, "10.0.0.2"),
            ProcessState::Running,
        ),
        (
            instance("hello", "web", 1, "10.0.0.3"),
            ProcessState::Failing,
        ),
        (
            instance("other", "web", 0, "10.0.1.2"),
            ProcessState::Running,
        ),
    ] {
        api.create(&PostParams::default(), &i).await.unwrap();
        let status = serde_json::json!({"status": InstanceStatus {
            process_state: Some(state),
            ..InstanceStatus::default()
        }});
        let name = i.metadata.name.clone().unwrap();
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
    let (_plugins, path) = plugin_on_path();
    let kubectl = kubosh_devenv::binary("kubectl").unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(&kubectl)
            .args(args)
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("PATH", &path)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "kubectl {args:?}:\n{stdout}\n{stderr}"
        );
        stdout
    };
    let listed = run(&["bosh", "instances", "hello", "-n", ns]);
    assert_eq!(
        listed,
        "web/web-id-0\trunning\tz1\t10.0.0.2\thello\t\n\
         web/web-id-1\tfailing\tz1\t10.0.0.3\thello\t\n"
    );
    // kubectl's conventions: --kubeconfig and --namespace, and the command list.
    let kubeconfig = cp.kubeconfig_path().display().to_string();
    let listed = run(&[
        "bosh",
        "--kubeconfig",
        &kubeconfig,
        "instances",
        "other",
        "--namespace",
        ns,
        "--tty",
    ]);
    assert!(
        listed.starts_with("Deployment 'other'\n\nInstance "),
        "{listed}"
    );
    assert!(listed.contains("\n1 instances\n"), "{listed}");
    let help = run(&["bosh", "--help"]);
    assert!(help.contains("instances"), "{help}");
    assert!(help.contains("--context"), "{help}");
}
