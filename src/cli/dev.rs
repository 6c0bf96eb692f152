//! `kubosh dev cluster`: the test control plane, in the foreground, for humans.

use super::out::outln;
use std::process::ExitCode;

use clap::Subcommand;

use kubosh_devenv::ControlPlane;

/// Development helpers.
#[derive(Debug, Subcommand)]
pub enum DevCommand {
    /// Start etcd + kube-apiserver with kubosh's CRDs installed; print a kubeconfig path and
    /// run until Ctrl-C.
    Cluster,
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
        DevCommand::Cluster => runtime.block_on(cluster()),
    }
}

async fn cluster() -> ExitCode {
    let started = std::time::Instant::now();
    let cp = match ControlPlane::start().await {
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
    outln!("export KUBECONFIG={}", cp.kubeconfig_path().display());
    outln!("contexts: admin (system:masters), operator (no rights until RBAC grants them)");
    outln!(
        "try: kubectl --kubeconfig {} get boshdeployments -A",
        cp.kubeconfig_path().display()
    );
    outln!(
        "Ctrl-C stops etcd and kube-apiserver and removes {}",
        cp.dir().display()
    );
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
