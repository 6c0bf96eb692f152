//! The controller as a process (`kubosh controller`): its probes and metrics served from the
//! start, the leader election, and, while it leads, the controllers of [`super::run`].
//!
//! Replicas elect a leader with a Lease (`kube-lease-manager`); only the leader connects to
//! the cloud and the bus, and reconciles. On shutdown, or when leadership is lost, running
//! deploys start no new step, the steps in flight finish, and [`serve`] returns (a lost
//! leadership as an error, for the process's supervisor to restart it as a standby). A
//! standby takes over within the Lease duration of the leader's death and resumes its
//! deploys once their locks expire.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::runtime::events::Reporter;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::artifacts::ArtifactContext;
use super::deployment::DeploymentContext;
use super::health::HealthWatch;
use super::resurrection::{MeltdownPolicy, Resurrection};
use super::run::{Scope, run};
use crate::client::RequestBudget;
use crate::lock::Process;
use crate::metrics::{Endpoints, MeteredTransport, Metrics, Readiness};
use kubosh_cloud::CallObserver;
use kubosh_engine::clouds::CloudMaker;
use kubosh_engine::{AgentHealth, Engine};

/// The leader election Lease.
const LEADER_LEASE: &str = "kubosh-controller";
/// How long leadership outlives the leader's last renewal (seconds).
const LEADER_LEASE_SECONDS: u64 = 10;
/// How long before expiry the leader renews (seconds).
const LEADER_RENEW_BEFORE_SECONDS: u64 = 4;

/// How the controller runs (the flags of `kubosh controller`).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Watch one namespace only (all when `None`).
    pub namespace: Option<String>,
    /// Deploys running at once, at most.
    pub max_deploys: usize,
    /// This replica's name, unique among the live ones (default: `$CONTROLLER_POD_NAME`,
    /// `$HOSTNAME`, or the host name).
    pub identity: Option<String>,
    /// Whether replicas elect a leader (without: one replica only).
    pub leader_election: bool,
    /// The namespace of the leader election Lease (default: `$POD_NAMESPACE`, the watched
    /// namespace, or `default`).
    pub leader_election_namespace: Option<String>,
    /// How long orphaned disks are kept before they are deleted from the cloud.
    pub orphaned_disk_max_age: Duration,
    /// The request budget of the Kubernetes client.
    pub budget: RequestBudget,
    /// How long an agent may send no heartbeat before its instance shows `Unresponsive`.
    pub agent_timeout: Duration,
    /// Whether instances that lose their agent or VM are recreated (deployments may opt out
    /// with `spec.resurrection: false`; this switch turns it off for all).
    pub resurrection: bool,
    /// When resurrection stops for a deployment.
    pub meltdown: MeltdownPolicy,
    /// How often each instance's processes and vitals are refreshed (`None`: never).
    pub details_interval: Option<Duration>,
    /// The ops API (`kubectl bosh logs`, `ssh`), served while this process leads (`None`:
    /// not served).
    pub ops_api: Option<crate::ops_api::OpsApiOptions>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served (plain HTTP); `None`: nowhere.
    pub metrics_bind_address: Option<String>,
    /// Scratch space: release tarballs, extracted stemcells, downloads.
    pub work_dir: PathBuf,
}

impl ServeOptions {
    /// This replica's name: the option, else `$CONTROLLER_POD_NAME`, `$HOSTNAME`, the host
    /// name, or `kubosh-controller`.
    fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| std::env::var("CONTROLLER_POD_NAME").ok())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .unwrap_or_else(|| "kubosh-controller".into())
    }

    /// The namespace of the leader election Lease.
    fn lease_namespace(&self) -> String {
        self.leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| self.namespace.clone())
            .unwrap_or_else(|| "default".into())
    }
}

/// Why wiring an edge failed, as its builder says it.
pub type EdgeError = Box<dyn std::error::Error + Send + Sync>;

/// The cloud, the bus and the blobstore the controller drives, connected only once this
/// process leads (a standby holds no connection to them). The binary wires them from its
/// director configuration.
pub trait Edges: Sync {
    /// The engine (cloud, agents, blobstore, renderer, settings), telling `observer` of
    /// every cloud call.
    fn engine(
        &self,
        observer: Arc<dyn CallObserver>,
    ) -> impl Future<Output = Result<Engine, EdgeError>> + Send;

    /// The agents' heartbeats, heard from now on.
    fn heartbeats(&self) -> impl Future<Output = Result<Arc<dyn AgentHealth>, EdgeError>> + Send;

    /// What makes the clouds of the CPI configs' CPIs (the CPI programs this director
    /// installs), telling `observer` of every call.
    fn cloud_maker(&self, observer: Arc<dyn CallObserver>) -> Arc<dyn CloudMaker>;
}

/// Why the controller stopped with a failure.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The metrics and probes could not be served.
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        /// The bind address.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
    /// No cluster configuration (`KUBECONFIG`, in-cluster) was found.
    #[error("cannot reach the cluster: {0}")]
    ClusterConfig(#[source] kube::config::InferConfigError),
    /// The cluster's client could not be made.
    #[error("cannot reach the cluster: {0}")]
    Client(#[source] kube::Error),
    /// The leader election Lease could not be read or created.
    #[error("leader election Lease {lease}: {source}")]
    LeaderLease {
        /// `namespace/name`.
        lease: String,
        /// The error.
        source: LeaseManagerError,
    },
    /// The election task ended before this process led.
    #[error("leader election stopped")]
    ElectionStopped,
    /// An edge could not be wired.
    #[error("{0}")]
    Edges(EdgeError),
    /// The ops API cannot be served.
    #[error(transparent)]
    OpsApi(#[from] crate::ops_api::OpsApiError),
    /// Another replica leads now: this one stopped (its supervisor restarts it as a standby).
    #[error("lost the leadership: stopped")]
    LostLeadership,
}

/// Runs the controller until `shutdown` completes (or leadership is lost): probes and
/// metrics at once, the controllers once this process leads.
pub async fn serve(
    options: &ServeOptions,
    edges: &impl Edges,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    // Served from the start: a standby answers its probes too.
    let metrics = Arc::new(Metrics::new());
    let readiness = Arc::new(Readiness::default());
    let _endpoints = match &options.metrics_bind_address {
        None => None,
        Some(addr) => {
            let endpoints = Endpoints {
                metrics: metrics.clone(),
                readiness: readiness.clone(),
            };
            let server = crate::metrics::serve(addr, endpoints).await;
            Some(server.map_err(|source| ServeError::Metrics {
                addr: addr.clone(),
                source,
            })?)
        }
    };
    let kube_config = kube::Config::infer()
        .await
        .map_err(ServeError::ClusterConfig)?;
    let client = crate::client::client(kube_config, options.budget).map_err(ServeError::Client)?;
    // A restarted process is not the leader yet: its Pod must not draw the ops API's
    // requests (the label outlives the process).
    if let Some((namespace, pod)) = options.ops_api.as_ref().and_then(|o| o.pod.as_ref())
        && let Err(e) = crate::ops_api::label_pod(&client, namespace, pod, false).await
    {
        tracing::warn!(error = %e, "cannot take the ops API's label off this Pod");
    }
    let identity = options.identity();
    let shutdown = shutdown.boxed().shared();

    // Leadership first: a standby does nothing else.
    let leadership = match options.leader_election {
        true => {
            let won = Leadership::win(&client, options, &identity, &readiness, &shutdown);
            match won.await? {
                Some(leadership) => Some(leadership),
                None => return Ok(()),
            }
        }
        false => None,
    };
    let lost = match &leadership {
        Some(l) => l.lost(),
        None => futures::future::pending::<()>().boxed().shared(),
    };
    readiness.settle(true);
    metrics.set_leader(true);
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
    lead(
        options, edges, client, &identity, &metrics, &readiness, stop,
    )
    .await?;
    let lost_leadership = lost.peek().is_some();
    // Releasing the Lease lets a standby take over at once. `lost` holds a clone of the
    // election's receiver (until leadership is lost), so it goes first, or the election
    // task never ends and a shutdown never ends the process.
    drop(lost);
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    metrics.set_leader(false);
    if lost_leadership {
        return Err(ServeError::LostLeadership);
    }
    Ok(())
}

/// Runs the controllers of [`run`] with the engine of `edges` until `stop`, then waits for
/// the deploy and delete tasks to finish their steps in flight.
async fn lead(
    options: &ServeOptions,
    edges: &impl Edges,
    client: kube::Client,
    identity: &str,
    metrics: &Arc<Metrics>,
    readiness: &Arc<Readiness>,
    stop: Shared<BoxFuture<'static, ()>>,
) -> Result<(), ServeError> {
    let observer = metrics.clone() as Arc<dyn CallObserver>;
    let mut engine = edges
        .engine(observer.clone())
        .await
        .map_err(ServeError::Edges)?;
    let cloud_maker = edges.cloud_maker(observer);
    engine.agents = Arc::new(MeteredTransport::new(engine.agents, metrics.clone()));
    // Heartbeats make a deploy with nothing to do free of agent calls, and show each
    // instance's state between deploys.
    let health = match edges.heartbeats().await {
        Ok(heartbeats) => {
            engine.config.health = Some(heartbeats.clone());
            // Silence means the same to a deploy as to the health watch.
            engine.config.health_window = options.agent_timeout;
            Some(HealthWatch::new(heartbeats, options.agent_timeout))
        }
        Err(e) => {
            tracing::warn!(error = %e, "deploys ask every agent for its state; instance states follow deploys only");
            None
        }
    };
    let reporter = Reporter {
        controller: "kubosh".into(),
        instance: Some(identity.to_string()),
    };
    let mut deployments = DeploymentContext::new(
        client.clone(),
        engine.clone(),
        options.work_dir.clone(),
        reporter,
        options.max_deploys,
    );
    deployments.process = Some(Process::new(identity));
    deployments.cloud_maker = cloud_maker.clone();
    deployments.metrics = metrics.clone();
    deployments.readiness = readiness.clone();
    deployments.orphaned_disk_max_age = options.orphaned_disk_max_age;
    deployments.details_interval = options.details_interval;
    deployments.resurrection = Arc::new(
        Resurrection::new(options.resurrection, options.meltdown)
            .with_settle(super::health::check_every(options.agent_timeout)),
    );
    let cancel = deployments.cancel.clone();
    let tasks = deployments.tasks.clone();
    let artifacts = ArtifactContext {
        client,
        blobstore: engine.blobstore.clone(),
        cloud: Some(engine.cloud.clone()),
        cloud_maker,
        work_dir: options.work_dir.join("downloads"),
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
        namespace: options.namespace.clone(),
    };
    let deployments = Arc::new(deployments);
    // The leader serves it: a standby holds no connection to the agents.
    let _ops_api = match &options.ops_api {
        Some(ops) => Some(crate::ops_api::serve(ops, deployments.clone()).await?),
        None => None,
    };
    tracing::info!(namespace = ?scope.namespace, "kubosh controller started");
    run(deployments, artifacts, scope, health, stop).await;
    tasks.close();
    tasks.wait().await;
    Ok(())
}

/// This process's leadership: the election's view (`true` while it leads) and its task.
struct Leadership {
    leader: watch::Receiver<bool>,
    election: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
}

impl Leadership {
    /// Takes part in the election until this process leads; `None` if `shutdown` comes
    /// first. Readiness is settled as a standby once one Lease duration passed without
    /// leading.
    async fn win(
        client: &kube::Client,
        options: &ServeOptions,
        identity: &str,
        readiness: &Arc<Readiness>,
        shutdown: &Shared<BoxFuture<'static, ()>>,
    ) -> Result<Option<Leadership>, ServeError> {
        let namespace = options.lease_namespace();
        let manager = LeaseManagerBuilder::new(client.clone(), LEADER_LEASE)
            .with_namespace(namespace.clone())
            .with_identity(identity)
            .with_field_manager(format!("kubosh-leader-{identity}"))
            .with_duration(LEADER_LEASE_SECONDS)
            .with_grace(LEADER_RENEW_BEFORE_SECONDS)
            .build()
            .await
            .map_err(|source| ServeError::LeaderLease {
                lease: format!("{namespace}/{LEADER_LEASE}"),
                source,
            })?;
        let (mut leader, election) = manager.watch().await;
        tracing::info!(%identity, lease = %format!("{namespace}/{LEADER_LEASE}"), "waiting to lead");
        // Leadership is settled once this process leads or one Lease duration passed
        // without: it stands by (and is ready as a standby).
        let standing_by = {
            let readiness = readiness.clone();
            let mut leader = leader.clone();
            tokio::spawn(async move {
                let wait = Duration::from_secs(LEADER_LEASE_SECONDS);
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
                    return Err(ServeError::ElectionStopped);
                }
            }
            () = shutdown.clone() => return Ok(None),
        }
        standing_by.abort();
        tracing::info!(%identity, "leading");
        Ok(Some(Leadership { leader, election }))
    }

    /// Completes when this process no longer leads.
    fn lost(&self) -> Shared<BoxFuture<'static, ()>> {
        let mut leader = self.leader.clone();
        async move {
            let _ = leader.wait_for(|l| !*l).await;
        }
        .boxed()
        .shared()
    }

    /// Gives the Lease up (dropping the last receiver ends the election task, which
    /// releases it): a standby takes over at once.
    async fn release(self) {
        drop(self.leader);
        let _ = self.election.await;
    }
}
