//! kubosh in a cluster that runs Pods: the dev control plane with a node (containerd, a
//! kubelet, kube-proxy, kube-scheduler, kube-controller-manager, CoreDNS), the images
//! tools/images.sh built from the repository's Dockerfile imported into it. The image's
//! contents under the chart's security context, and the chart installed with `helm
//! install` as README's "Install on a cluster" says, deploying the example to Ready with
//! the controller in its Pod.
//!
//! One control plane and node for the binary (a node needs root and there is one per
//! machine).

/// Every test of the binary, in one module the test command can skip by name: its first
/// `cargo test` runs while tools/images.sh still builds the node's images, and a second runs
/// these once they are built (tools/test.sh).
mod on_the_node {
    mod image;
    mod install;
}

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kubosh_devenv::ControlPlane;

/// The binary's control plane with its node, started on first use.
pub async fn cluster() -> &'static ControlPlane {
    ControlPlane::shared_with_node(kubosh_kube::api::crds)
        .await
        .unwrap_or_else(|e| panic!("a control plane with a node: {e}"))
}

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `program` (a test binary: kubectl, helm) with the cluster's kubeconfig in the
/// repository root: success, stdout, stderr.
pub fn run(cp: &ControlPlane, program: &str, args: &[&str]) -> (bool, String, String) {
    let path = kubosh_devenv::binary(program).unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(&path)
        .args(args)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A command line of `kubectl` or `helm` (words split on whitespace, no quoting), as README
/// writes it, which must succeed: its stdout.
pub fn sh(cp: &ControlPlane, line: &str) -> String {
    let mut words = line.split_whitespace();
    let program = words.next().expect("a command");
    let args: Vec<&str> = words.collect();
    let (ok, out, err) = run(cp, program, &args);
    assert!(ok, "{line}:\n{out}\n{err}\n{}", diagnosis(cp));
    out
}

/// `kubectl ARGS`, which must succeed: its stdout.
pub fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let (ok, out, err) = run(cp, "kubectl", args);
    assert!(
        ok,
        "kubectl {}:\n{out}\n{err}\n{}",
        args.join(" "),
        diagnosis(cp)
    );
    out
}

/// What an operator would look at when something did not come up: every Pod, the recent
/// Events, and the kubosh and NATS Pods' logs.
pub fn diagnosis(cp: &ControlPlane) -> String {
    let mut text = String::new();
    for args in [
        &["get", "pods", "-A", "-o", "wide"][..],
        &["get", "events", "-A", "--sort-by=.lastTimestamp"][..],
        &[
            "logs",
            "-n",
            "kubosh-system",
            "deploy/kubosh",
            "--all-containers",
            "--tail=80",
        ][..],
        &[
            "logs",
            "-n",
            "kubosh-system",
            "deploy/nats",
            "--all-containers",
            "--tail=40",
        ][..],
    ] {
        let (_, out, err) = run(cp, "kubectl", args);
        text += &format!("--- kubectl {}\n{out}{err}", args.join(" "));
    }
    text
}

/// Polls `check` until it returns `Some`, at most `within`; panics with `what` and the
/// diagnosis otherwise.
pub async fn eventually<T>(
    cp: &ControlPlane,
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {within:?}\n{}",
            diagnosis(cp)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
