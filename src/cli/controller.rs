//! `kubosh controller`: reconciles `Deployment`, `Release` and `Stemcell` resources against
//! the cloud and the message bus of a director configuration file (`-d`, the same file
//! `kubosh deploy` reads: CPI, NATS, blobstore, engine settings; its `state_dir` holds the
//! controller's scratch space). The cluster is the one of `KUBECONFIG` (or in-cluster).
//! Stops on SIGINT/SIGTERM after the reconciles in flight.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use futures::FutureExt;
use kube::runtime::events::Reporter;

use kubosh_engine::NoEvents;
use kubosh_engine::director::DirectorConfig;
use kubosh_kube::controller::artifacts::ArtifactContext;
use kubosh_kube::controller::deployment::DeploymentContext;
use kubosh_kube::controller::run::{Scope, run};

/// Arguments of `kubosh controller`.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// The director configuration file (CPI, NATS, blobstore, scratch directory).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// Watch one namespace only (default: all).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Deploys running at once, at most.
    #[arg(long = "max-deploys", default_value_t = 32)]
    pub max_deploys: usize,
}

/// Runs `kubosh controller`.
pub fn run_controller(args: &ControllerArgs) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kubosh controller: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubosh controller: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: &ControllerArgs) -> Result<(), String> {
    let config = DirectorConfig::load(&args.director).map_err(|e| e.to_string())?;
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("cannot reach the cluster: {e}"))?;
    let mut engine = config
        .engine("controller", Arc::new(NoEvents), false)
        .await?;
    // Heartbeats make a deploy with nothing to do free of agent calls.
    match config.heartbeat_monitor().await {
        Ok(monitor) => engine.config.health = Some(Arc::new(monitor)),
        Err(e) => tracing::warn!(error = %e, "deploys ask every agent for its state"),
    }
    let work_dir = config.state_dir.join("controller");
    let reporter = Reporter {
        controller: "kubosh".into(),
        instance: std::env::var("CONTROLLER_POD_NAME")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok()),
    };
    let deployments = DeploymentContext::new(
        client.clone(),
        engine.clone(),
        work_dir.clone(),
        reporter,
        args.max_deploys,
    );
    let artifacts = ArtifactContext {
        client,
        blobstore: engine.blobstore.clone(),
        work_dir: work_dir.join("downloads"),
    };
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => futures::future::pending::<()>().await } } => {}
        }
    }
    .boxed()
    .shared();
    let scope = Scope {
        namespace: args.namespace.clone(),
    };
    tracing::info!(namespace = ?scope.namespace, "kubosh controller started");
    run(deployments, artifacts, scope, shutdown).await;
    Ok(())
}
