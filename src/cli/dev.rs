//! `kubosh dev cluster`: the test control plane, in the foreground, for humans.

use super::out::outln;
use std::process::ExitCode;

use clap::Subcommand;

use kubosh_devenv::ControlPlane;

/// Development helpers.
#[derive(Debug, Subcommand)]
pub enum DevCommand {
    /// Start etcd + kube-apiserver with kubosh's CRDs installed and kube-controller-manager's
    /// garbage collector; print a kubeconfig path and run until Ctrl-C.
    Cluster {
        /// Add a node that runs Pods: kube-controller-manager, kube-scheduler, containerd, a
        /// kubelet and kube-proxy in a network namespace of its own, with the images of
        /// `tools/images.sh` imported (needs root; one node per machine).
        #[arg(long)]
        node: bool,
    },
}

/// Runs a `kubosh dev` command.
pub fn run(command: &DevCommand) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kubosh dev: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match command {
        DevCommand::Cluster { node } => runtime.block_on(cluster(*node)),
    }
}

async fn cluster(node: bool) -> ExitCode {
    let started = std::time::Instant::now();
    let cp = if node {
        ControlPlane::start_with_node().await
    } else {
        ControlPlane::start().await
    };
    let cp = cp.and_then(|mut cp| {
        cp.start_garbage_collector()?;
        Ok(cp)
    });
    let cp = match cp {
        Ok(cp) => cp,
        Err(e) => {
            eprintln!("kubosh dev cluster: {e}");
            return ExitCode::FAILURE;
        }
    };
    let installed = cp.install_crds(&kubosh_kube::api::crds()).await;
    if let Err(e) = installed {
        eprintln!("kubosh dev cluster: cannot install CRDs: {e}");
        return ExitCode::FAILURE;
    }
    outln!(
        "control plane ready at {} in {:.1}s",
        cp.server(),
        started.elapsed().as_secs_f64()
    );
    if let Some(node) = cp.node() {
        outln!(
            "node {} ready; its logs and state are in {}",
            kubosh_devenv::NODE_NAME,
            node.dir().display()
        );
    }
    outln!("export KUBECONFIG={}", cp.kubeconfig_path().display());
    outln!("contexts: admin (system:masters), operator (no rights until RBAC grants them)");
    outln!(
        "try: kubectl --kubeconfig {} get boshdeployments -A",
        cp.kubeconfig_path().display()
    );
    outln!("Ctrl-C stops everything and removes {}", cp.dir().display());
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
