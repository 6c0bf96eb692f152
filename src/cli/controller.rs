//! `kubosh controller`: reconciles `Deployment`, `Release` and `Stemcell` resources against
//! the cloud and the message bus of a director configuration file (`-d`, the same file
//! `kubosh deploy` reads: CPI, NATS, blobstore, engine settings; its `state_dir` holds the
//! controller's scratch space). The cluster is the one of `KUBECONFIG` (or in-cluster).
//!
//! Replicas elect a leader with a Lease (`kube-lease-manager`); only the leader reconciles.
//! On SIGINT/SIGTERM, or when leadership is lost, running deploys start no new step, the
//! steps in flight finish, and the process exits (a lost leadership with a failure, for its
//! supervisor to restart it as a standby). A standby takes over within the Lease duration
//! of the leader's death and resumes its deploys once their locks expire.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use futures::FutureExt;
use kube::runtime::events::Reporter;

use kube_lease_manager::LeaseManagerBuilder;
use kubosh_director::DirectorConfig;
use kubosh_engine::NoEvents;
use kubosh_kube::client::RequestBudget;
use kubosh_kube::controller::artifacts::ArtifactContext;
use kubosh_kube::controller::deployment::DeploymentContext;
use kubosh_kube::controller::health::HealthWatch;
use kubosh_kube::controller::run::{Scope, run};
use kubosh_kube::lock::Process;
use kubosh_kube::metrics::{Endpoints, MeteredTransport, Metrics, Readiness};

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
    /// This replica's name, unique among the live ones (default: `$CONTROLLER_POD_NAME`,
    /// `$HOSTNAME`, or the host name). A restarted process with the same name takes over its
    /// predecessor's leadership and locks at once.
    #[arg(long)]
    pub identity: Option<String>,
    /// Run without leader election (one replica only).
    #[arg(long = "no-leader-election")]
    pub no_leader_election: bool,
    /// The namespace of the leader election Lease (default: `$POD_NAMESPACE`, the watched
    /// namespace, or `default`).
    #[arg(long = "leader-election-namespace")]
    pub leader_election_namespace: Option<String>,
    /// How long orphaned disks are kept (so a returning instance group gets them back)
    /// before they are deleted from the cloud: `5d`, `12h`, `30m` (the Director's
    /// `max_orphaned_age_in_days`: 5 days).
    #[arg(long = "orphaned-disk-max-age", default_value = "5d", value_parser = humantime::parse_duration)]
    pub orphaned_disk_max_age: std::time::Duration,
    /// Requests per second to the Kubernetes API, on average.
    #[arg(long = "kube-api-qps", default_value_t = 20.0)]
    pub kube_api_qps: f64,
    /// Requests to the Kubernetes API that may start at once.
    #[arg(long = "kube-api-burst", default_value_t = 30)]
    pub kube_api_burst: u64,
    /// How long an agent may send no heartbeat before its instance shows `Unresponsive`
    /// (the health monitor's `agent_timeout`): `60s`, `2m`.
    #[arg(long = "agent-timeout", default_value = "60s", value_parser = humantime::parse_duration)]
    pub agent_timeout: std::time::Duration,
    /// Where `/metrics`, `/healthz` and `/readyz` are served (plain HTTP); empty: nowhere.
    #[arg(long = "metrics-bind-address", default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: String,
}

/// The leader election Lease.
const LEADER_LEASE: &str = "kubosh-controller";
/// How long leadership outlives the leader's last renewal (seconds).
const LEADER_LEASE_SECONDS: u64 = 10;
/// How long before expiry the leader renews (seconds).
const LEADER_RENEW_BEFORE_SECONDS: u64 = 4;

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
    // Served from the start: a standby answers its probes too.
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::default());
    let _endpoints = match args.metrics_bind_address.as_str() {
        "" => None,
        addr => Some(
            kubosh_kube::metrics::serve(
                addr,
                Endpoints {
                    metrics: metrics.clone(),
                    readiness: readiness.clone(),
                },
            )
            .await
            .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?,
        ),
    };
    let kube_config = kube::Config::infer()
        .await
        .map_err(|e| format!("cannot reach the cluster: {e}"))?;
    let budget = RequestBudget {
        qps: args.kube_api_qps,
        burst: args.kube_api_burst,
    };
    let client = kubosh_kube::client::client(kube_config, budget)
        .map_err(|e| format!("cannot reach the cluster: {e}"))?;
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("CONTROLLER_POD_NAME").ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "kubosh-controller".into());
    let shutdown = super::signals::stop_requested().boxed().shared();

    // Leadership first: a standby does nothing else.
    let mut leadership = None;
    if !args.no_leader_election {
        let namespace = args
            .leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| args.namespace.clone())
            .unwrap_or_else(|| "default".into());
        let manager = LeaseManagerBuilder::new(client.clone(), LEADER_LEASE)
            .with_namespace(namespace.clone())
            .with_identity(identity.clone())
            .with_field_manager(format!("kubosh-leader-{identity}"))
            .with_duration(LEADER_LEASE_SECONDS)
            .with_grace(LEADER_RENEW_BEFORE_SECONDS)
            .build()
            .await
            .map_err(|e| format!("leader election Lease {namespace}/{LEADER_LEASE}: {e}"))?;
        let (mut leader, task) = manager.watch().await;
        tracing::info!(%identity, lease = %format!("{namespace}/{LEADER_LEASE}"), "waiting to lead");
        // Leadership is settled once this process leads or one Lease duration passed
        // without: it stands by (and is ready as a standby).
        let standing_by = {
            let readiness = readiness.clone();
            let mut leader = leader.clone();
            tokio::spawn(async move {
                let wait = std::time::Duration::from_secs(LEADER_LEASE_SECONDS);
                if tokio::time::timeout(wait, leader.wait_for(|l| *l))
                    .await
                    .is_err()
                {
                    readiness.settle(false);
                }
            })
        };
        tokio::select! {
            result = leader.wait_for(|l| *l) => {
                if result.is_err() {
                    return Err("leader election stopped".into());
                }
            }
            () = shutdown.clone() => return Ok(()),
        }
        standing_by.abort();
        tracing::info!(%identity, "leading");
        leadership = Some((leader, task));
    }
    let lost = {
        let leader = leadership.as_ref().map(|(l, _)| l.clone());
        async move {
            match leader {
                Some(mut l) => {
                    let _ = l.wait_for(|l| !*l).await;
                }
                None => futures::future::pending::<()>().await,
            }
        }
        .boxed()
        .shared()
    };

    readiness.settle(true);
    metrics.set_leader(true);
    let mut engine = config
        .observed_engine(
            "controller",
            Arc::new(NoEvents),
            false,
            Some(metrics.clone() as Arc<dyn kubosh_cloud::CallObserver>),
        )
        .await?;
    engine.agents = Arc::new(MeteredTransport::new(engine.agents, metrics.clone()));
    // Heartbeats make a deploy with nothing to do free of agent calls, and show each
    // instance's state between deploys.
    let health = match config.heartbeat_monitor().await {
        Ok(monitor) => {
            let monitor = Arc::new(monitor);
            engine.config.health = Some(monitor.clone());
            Some(HealthWatch::new(monitor, args.agent_timeout))
        }
        Err(e) => {
            tracing::warn!(error = %e, "deploys ask every agent for its state; instance states follow deploys only");
            None
        }
    };
    let work_dir = config.state_dir.join("controller");
    let reporter = Reporter {
        controller: "kubosh".into(),
        instance: Some(identity.clone()),
    };
    let mut deployments = DeploymentContext::new(
        client.clone(),
        engine.clone(),
        work_dir.clone(),
        reporter,
        args.max_deploys,
    );
    deployments.process = Some(Process::new(identity));
    deployments.metrics = metrics.clone();
    deployments.readiness = readiness.clone();
    deployments.orphaned_disk_max_age = args.orphaned_disk_max_age;
    let cancel = deployments.cancel.clone();
    let tasks = deployments.tasks.clone();
    let artifacts = ArtifactContext {
        client,
        blobstore: engine.blobstore.clone(),
        cloud: Some(engine.cloud.clone()),
        work_dir: work_dir.join("downloads"),
    };
    let stop = {
        let (shutdown, lost) = (shutdown.clone(), lost.clone());
        async move {
            tokio::select! {
                () = shutdown => {}
                () = lost => {}
            }
        }
        .boxed()
        .shared()
    };
    tokio::spawn({
        let stop = stop.clone();
        async move {
            stop.await;
            tracing::info!("stopping: running deploys finish their steps in flight");
            cancel.cancel();
        }
    });
    let scope = Scope {
        namespace: args.namespace.clone(),
    };
    tracing::info!(namespace = ?scope.namespace, "kubosh controller started");
    run(deployments, artifacts, scope, health, stop).await;
    tasks.close();
    tasks.wait().await;
    let lost_leadership = lost.peek().is_some();
    // Dropping the receiver makes the election task release the Lease: a standby takes
    // over at once. `lost` holds a clone of it (until leadership is lost), so it goes
    // first, or the task never ends and a SIGTERM never ends the process.
    drop(lost);
    if let Some((leader, task)) = leadership {
        drop(leader);
        let _ = task.await;
    }
    metrics.set_leader(false);
    if lost_leadership {
        return Err("lost the leadership: stopped".into());
    }
    Ok(())
}
