//! kubosh in a cluster that runs Pods: the dev control plane with a node (containerd, a
//! kubelet, kube-proxy, kube-scheduler, kube-controller-manager, CoreDNS), the images
//! tools/images.sh built from the repository's Dockerfile imported into it. The image's
//! contents under the chart's security context, and the chart installed with `helm
//! install` as README's "Install on a cluster" says, deploying the example to Ready with
//! the controller in its Pod.
//!
//! One control plane and node shared by the binary's tests (a node needs root and there is
//! one per machine), but while `kubosh up --in-cluster` runs a node of its own.

/// Every test of the binary, in one module the test command can skip by name: its first
/// `cargo test` runs while tools/images.sh still builds the node's images, and a second runs
/// these once they are built (tools/test.sh).
mod on_the_node {
    mod image;
    mod install;
    mod up;
}

use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, PoisonError, Weak};
use std::time::{Duration, Instant};

use kubosh_devenv::ControlPlane;
use kubosh_devenv::in_cluster::{InClusterError, Installer};
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Turns at the machine's one node: the tests sharing [`cluster`] together, or one test
/// alone that starts a node of its own ([`node_alone`]).
static NODE_TURNS: RwLock<()> = RwLock::const_new(());
/// Held while the shared cluster starts, so that one test starts it.
static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// The shared cluster while a test holds it. Only touched under its lock: a test finding it
/// gone then knows its teardown is over.
static SHARED: std::sync::Mutex<Weak<ControlPlane>> = std::sync::Mutex::new(Weak::new());

/// The shared control plane with its node, for as long as this lives.
pub struct Cluster {
    cp: Option<Arc<ControlPlane>>,
    _turn: RwLockReadGuard<'static, ()>,
}

impl Deref for Cluster {
    type Target = ControlPlane;

    fn deref(&self) -> &ControlPlane {
        self.cp.as_ref().expect("taken only when dropped")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The last holder tears the cluster down under the lock, before its turn ends.
        let shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.cp.take());
        drop(shared);
    }
}

/// The binary's control plane with its node and kubosh's CRDs, started when no test holds
/// it.
pub async fn cluster() -> Cluster {
    let turn = NODE_TURNS.read().await;
    let _starting = STARTING.lock().await;
    let running = (SHARED.lock().unwrap_or_else(PoisonError::into_inner)).upgrade();
    let cp = match running {
        Some(cp) => cp,
        None => {
            let cp = ControlPlane::start_with_node()
                .await
                .unwrap_or_else(|e| panic!("a control plane with a node: {e}"));
            (cp.install_crds(&kubosh_kube::api::crds()).await)
                .unwrap_or_else(|e| panic!("kubosh's CRDs: {e}"));
            let cp = Arc::new(cp);
            *SHARED.lock().unwrap_or_else(PoisonError::into_inner) = Arc::downgrade(&cp);
            cp
        }
    };
    Cluster {
        cp: Some(cp),
        _turn: turn,
    }
}

/// The machine's node to start alone: once no test holds the shared cluster (which is then
/// torn down), until this is dropped.
pub async fn node_alone() -> RwLockWriteGuard<'static, ()> {
    NODE_TURNS.write().await
}

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The steps of README's "Install on a cluster" on `cp`, from the repository root, with the
/// `kubosh` under test.
pub fn installer(cp: &ControlPlane) -> Installer<'_> {
    Installer::new(cp, root(), Path::new(env!("CARGO_BIN_EXE_kubosh")))
}

/// A step's result, or a panic with what went wrong and the cluster's diagnosis.
pub fn done<T>(cp: &ControlPlane, step: Result<T, InClusterError>) -> T {
    step.unwrap_or_else(|e| panic!("{e}\n{}", diagnosis(cp)))
}

/// A command line of `kubectl` or `helm` (words split on whitespace, no quoting), as README
/// writes it, which must succeed: its stdout.
pub fn sh(cp: &ControlPlane, line: &str) -> String {
    done(cp, installer(cp).sh(line))
}

/// `kubectl ARGS`, which must succeed: its stdout.
pub fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let kubectl = kubosh_devenv::binary("kubectl").unwrap_or_else(|e| panic!("{e}"));
    done(cp, installer(cp).run(&kubectl, args))
}

/// What an operator would look at when something did not come up: kubosh's objects, every
/// Pod, the kubosh, NATS and cloud Pods' logs, and the recent Events.
pub fn diagnosis(cp: &ControlPlane) -> String {
    let kubectl = |args: &[&str]| match kubosh_devenv::binary("kubectl") {
        Ok(kubectl) => installer(cp)
            .run(&kubectl, args)
            .unwrap_or_else(|e| e.to_string()),
        Err(e) => e.to_string(),
    };
    // The leader's log is the one that says what the controller did (any replica's when
    // none leads).
    let leader = kubectl(&[
        "get",
        "lease",
        "kubosh-controller",
        "-n",
        "kubosh-system",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    let leader_pod = match leader.trim() {
        "" => "deploy/kubosh".to_string(),
        pod => format!("pod/{pod}"),
    };
    let mut text = String::new();
    // kubosh's own objects first: a failure's excerpt keeps the beginning.
    for args in [
        &[
            "get",
            "boshdeployments,instances,errandruns",
            "-A",
            "-o",
            "wide",
        ][..],
        &["describe", "errandruns", "-A"][..],
        &["get", "pods", "-A", "-o", "wide"][..],
        &["logs", "-n", "kubosh-system", &leader_pod, "--tail=120"][..],
        &[
            "logs",
            "-n",
            "kubosh-system",
            "deploy/kubosh-cloud",
            "--tail=60",
        ][..],
        &[
            "logs",
            "-n",
            "kubosh-system",
            "deploy/nats",
            "--all-containers",
            "--tail=40",
        ][..],
        &["get", "events", "-A", "--sort-by=.lastTimestamp"][..],
    ] {
        text += &format!("--- kubectl {}\n{}", args.join(" "), kubectl(args));
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
