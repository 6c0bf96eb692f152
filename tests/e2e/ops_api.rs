//! `kubectl bosh logs` and `kubectl bosh ssh` through the Kubernetes API (issue 26): the
//! controller serves the ops API behind the real kube-apiserver's aggregation layer (an
//! APIService, its Service's EndpointSlice at this machine's address), so the operator's
//! credentials and RBAC decide: an operator without `get` on `boshdeployments/logs` (or
//! `create` on `boshdeployments/ssh`) in `ops.kubosh.io` is refused, one with it gets the
//! tarballs. On the local cloud an ssh session is a shell in the VM's directory, with a
//! one-time user set up by the agent and removed after. Real kube-apiserver, nats-server,
//! local cloud, kubosh agents, the real kubectl finding the plugin on PATH.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kube::api::Api;
use serde_json::json;

use crate::controller::{
    apply_deployment, apply_inputs, control_plane, deployment_object, kubectl, ready_at,
    start_replica_with, stored_state,
};
use crate::director_world::{World, hello_deployment};
use kubosh_kube::api::Deployment;
use kubosh_kube::ops_api::register;

/// `kubectl bosh <args>` in `ns` as the kubeconfig's `context`: success, stdout, stderr.
fn kubectl_bosh(
    kubeconfig: &Path,
    context: &str,
    ns: &str,
    args: &[&str],
) -> (bool, String, String) {
    crate::kubectl_plugin::kubectl_bosh(kubeconfig, Some(context), ns, args)
}

/// The entries of a `.tgz`.
fn entries(tarball: &Path) -> Vec<String> {
    let out = Command::new("tar")
        .arg("-tzf")
        .arg(tarball)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// The one tarball `dir` holds.
fn the_tarball(dir: &Path) -> std::path::PathBuf {
    let found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tgz"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

/// Deletes the cluster-wide APIService when the test ends, so no other test's discovery
/// meets an API nobody serves.
struct Registered<'a>(&'a kubosh_devenv::ControlPlane);

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let name = format!(
            "apiservice/{}.{}",
            kubosh_kube::ops_api::VERSION,
            kubosh_kube::ops_api::GROUP
        );
        let _ = self
            .0
            .kubectl()
            .map(|mut c| c.args(["delete", &name]).output());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_ssh_go_through_the_kubernetes_api_and_rbac_decides() {
    let cp = control_plane().await;
    let w = World::new(48);
    let ns = "ops-api-e2e";
    cp.create_namespace(ns).await.unwrap();
    let client = cp.client().await.unwrap();

    // The controller makes its serving certificate for the Service's name and writes its
    // CA into the APIService (created here before it, or after: it keeps trying).
    let port = kubosh_devenv::free_port().unwrap();
    let bind = format!("0.0.0.0:{port}");
    let service = format!("{ns}/{}", register::SERVICE);
    let _controller = start_replica_with(
        &w,
        cp,
        ns,
        "ops",
        &[
            "--ops-api-bind-address",
            &bind,
            "--ops-api-service",
            &service,
        ],
    );
    let address = kubosh_devenv::host_address().expect("an address on the default route");
    let _registered = Registered(cp);
    register::register_local(&client, ns, address, port, None, Duration::from_secs(90))
        .await
        .unwrap_or_else(|e| panic!("{e}\ncontroller log:\n{}", w.controller_log_tail()));

    apply_inputs(&client, ns, &w).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let generation = apply_deployment(
        &client,
        ns,
        &deployment_object("hello", hello_deployment(w.port, "Hello")),
    )
    .await;
    ready_at(&deployments, "hello", &w, generation).await;
    let kubeconfig = cp.kubeconfig_path();

    // One instance: its agent's tarball, with the job's logs.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (ok, stdout, stderr) = kubectl_bosh(
        kubeconfig,
        "admin",
        ns,
        &["logs", "hello", "web/0", "--dir", d],
    );
    assert!(ok, "logs failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("Logs written to '"), "{stdout}");
    let one = the_tarball(dir.path());
    assert!(
        one.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("hello.web.0-")
    );
    let files = entries(&one);
    assert!(files.iter().any(|f| f.contains("hello/")), "{files:?}");

    // The group: the Director's bundle, one tarball per instance.
    let group = tempfile::tempdir().unwrap();
    let g = group.path().to_str().unwrap();
    let (ok, stdout, stderr) = kubectl_bosh(
        kubeconfig,
        "admin",
        ns,
        &["logs", "hello", "web", "--dir", g],
    );
    assert!(ok, "{stdout}\n{stderr}");
    let bundle = entries(&the_tarball(group.path()));
    let inner: Vec<&String> = bundle.iter().filter(|f| f.ends_with(".tgz")).collect();
    assert_eq!(inner.len(), 2, "{bundle:?}");
    assert!(
        inner
            .iter()
            .all(|f| f.trim_start_matches("./").starts_with("web.")),
        "{bundle:?}"
    );

    // An operator without the verb is refused by kube-apiserver; granted it, served.
    let (ok, _, stderr) = kubectl_bosh(
        kubeconfig,
        "operator",
        ns,
        &["logs", "hello", "web/0", "--dir", d],
    );
    assert!(!ok);
    assert!(stderr.contains("forbidden"), "{stderr}");
    assert!(stderr.contains("boshdeployments/logs"), "{stderr}");
    let rbac = w.dir.path().join("bosh-logs-rbac.json");
    let grant = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "bosh-logs"},
         "rules": [{"apiGroups": ["ops.kubosh.io"], "resources": ["boshdeployments/logs"],
                    "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "bosh-logs"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bosh-logs"},
         "subjects": [{"kind": "User", "name": "kubosh-operator"}]},
    ]});
    std::fs::write(&rbac, grant.to_string()).unwrap();
    kubectl(cp, &["apply", "-n", ns, "-f", rbac.to_str().unwrap()]);
    let granted = tempfile::tempdir().unwrap();
    let gd = granted.path().to_str().unwrap();
    let (ok, stdout, stderr) = kubectl_bosh(
        kubeconfig,
        "operator",
        ns,
        &["logs", "hello", "web/1", "--dir", gd],
    );
    assert!(ok, "{stdout}\n{stderr}");
    the_tarball(granted.path());

    // ssh on the local cloud: a shell in the VM's directory, the one-time user there during
    // the session and gone after; the operator (logs only) may not.
    let state = stored_state(&client, ns, "hello").await;
    let web0 = (state.instances.values())
        .find(|i| i.group == "web" && i.index == 0)
        .unwrap();
    let root = w.vm_root(&web0.vm.as_ref().unwrap().cid);
    let (ok, stdout, stderr) = kubectl_bosh(
        kubeconfig,
        "admin",
        ns,
        &["ssh", "hello", "web/0", "-c", "pwd; ls bosh_ssh"],
    );
    assert!(ok, "ssh failed:\n{stdout}\n{stderr}");
    let root = std::fs::canonicalize(&root).unwrap();
    assert!(stdout.contains(&root.display().to_string()), "{stdout}");
    assert!(stdout.contains("bosh_"), "the one-time user: {stdout}");
    let users = std::fs::read_dir(root.join("bosh_ssh")).unwrap().count();
    assert_eq!(users, 0, "the one-time user is removed after the session");
    let (ok, stdout, _) = kubectl_bosh(
        kubeconfig,
        "admin",
        ns,
        &["ssh", "hello", "web", "-c", "exit 3"],
    );
    assert!(!ok, "a failing command fails the session: {stdout}");
    let (ok, _, stderr) = kubectl_bosh(kubeconfig, "admin", ns, &["ssh", "hello", "web"]);
    assert!(!ok);
    assert!(
        stderr.contains("Interactive SSH only works for a single host"),
        "{stderr}"
    );
    let (ok, _, stderr) = kubectl_bosh(
        kubeconfig,
        "operator",
        ns,
        &["ssh", "hello", "web/0", "-c", "true"],
    );
    assert!(!ok);
    assert!(stderr.contains("boshdeployments/ssh"), "{stderr}");
    let discovery = kubectl(cp, &["api-resources", "--api-group", "ops.kubosh.io"]);
    assert!(
        discovery.contains("boshdeployments/logs")
            || discovery.is_empty()
            || discovery.contains("NAME"),
        "{discovery}"
    );
}
