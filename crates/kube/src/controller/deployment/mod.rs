//! The `Deployment` reconciler: `kubectl apply` a BOSH deployment, and the engine deploys it.
//!
//! By concept:
//! - `apply`: the reconcile of a live deployment: reads the inputs, writes what stops them,
//!   starts a deploy task unless the same generation and inputs were already deployed.
//! - `deploy_task`: the deploy task, from its start to its status and Events (`cck_task`:
//!   a scan or a resolution of the deployment's problems, the same task's other shape);
//!   `task_progress` tells its progress while it runs, `instances` the instances after it.
//! - `materialise`: the engine's request from the inputs (releases by reference, stemcells
//!   extracted).
//! - `deletion`: the finalizer's cleanup, a tracked deletion task.
//! - `errand_run`: the `ErrandRun` reconciler; an errand runs as a task of its deployment.
//! - `ledger`: what this process knows of each deployment (running task, last outcome).
//! - `input_changes`: which namespaces' watched inputs changed, shared reads of them.
//! - `report`: status writes (the kstatus trio) and Events.
//!
//! A long deploy of one deployment never holds a reconcile slot of another. Status is
//! kstatus-correct: `observedGeneration` on the status and on every condition, in one
//! server-side apply with field manager `kubosh`.

mod apply;
mod cck_task;
mod deletion;
mod deploy_task;
pub mod errand_run;
mod input_changes;
mod instances;
mod ledger;
mod materialise;
mod report;
mod task_progress;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, Reporter};
use kube::runtime::finalizer::{self, finalizer};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use super::inputs;
use crate::api::Deployment;
use crate::lock::{LeaseLocks, Process};
use crate::registry::KubeRegistries;
use crate::state::KubeStore;
use kubosh_engine::{CancellationToken, Engine};

pub use deploy_task::DeployError;
pub use input_changes::InputChanges;
pub use ledger::Ledger;
pub use materialise::{MaterialiseError, ReleasePart};
pub(crate) use report::{publish_regarding, reasons, set_trio, write_status};

/// How often a settled deployment's inputs are read again (Secrets and ConfigMaps in
/// `varsFrom` are not watched).
pub const RESYNC: Duration = Duration::from_secs(600);

/// What the reconciler needs.
#[derive(Clone)]
pub struct DeploymentContext {
    /// The Kubernetes client.
    pub client: kube::Client,
    /// The engine's edges and settings; each deploy gets its own state store, locks and
    /// event sink.
    pub engine: Engine,
    /// Scratch space: release tarballs and extracted stemcell images.
    pub work_dir: PathBuf,
    /// Who publishes Events.
    pub reporter: Reporter,
    /// Deploys running at once, at most.
    pub deploys: Arc<Semaphore>,
    /// What this process knows of each deployment (by uid).
    pub ledger: Arc<Ledger>,
    /// Cancelled when the controller stops (shutdown, lost leadership): running deploys
    /// start no new step and end.
    pub cancel: CancellationToken,
    /// The deploy and delete tasks, to wait for when the controller stops.
    pub tasks: TaskTracker,
    /// This process, named in the deployment locks it holds.
    pub process: Option<Process>,
    /// How long an orphaned disk is kept before it is deleted from the cloud.
    pub orphaned_disk_max_age: Duration,
    /// Changes seen to the watched inputs of each namespace (cloud configs, releases,
    /// stemcells).
    pub inputs: Arc<InputChanges>,
    /// What `/metrics` shows.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// What `/readyz` says (told when the caches are synced).
    pub readiness: Arc<crate::metrics::Readiness>,
    /// The resurrector: which deployments recreate lost instances, and which are asked to.
    pub resurrection: Arc<super::resurrection::Resurrection>,
    /// Makes the clouds of the namespaces' `CpiConfig`s (the director's installed CPI
    /// types; none by default).
    pub cloud_maker: Arc<dyn kubosh_engine::clouds::CloudMaker>,
    /// The releases deploys read, by reference.
    releases: Arc<materialise::ReleaseCache>,
    /// What each deployment's last deploy left of its instance records, and the health
    /// watch's cache of `Instance`s it is checked against.
    pub left_behind: Arc<crate::left_behind::LeftBehind>,
    /// How often each instance's processes and vitals are refreshed (`None`: never).
    pub details_interval: Option<Duration>,
}

pub use kubosh_engine::delete::ORPHANED_DISK_MAX_AGE;

impl DeploymentContext {
    /// A context with at most `max_deploys` deploys at once.
    pub fn new(
        client: kube::Client,
        engine: Engine,
        work_dir: PathBuf,
        reporter: Reporter,
        max_deploys: usize,
    ) -> DeploymentContext {
        DeploymentContext {
            client,
            engine,
            work_dir,
            reporter,
            deploys: Arc::new(Semaphore::new(max_deploys.max(1))),
            ledger: Arc::new(Ledger::default()),
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
            process: None,
            orphaned_disk_max_age: ORPHANED_DISK_MAX_AGE,
            inputs: Arc::default(),
            metrics: Arc::default(),
            readiness: Arc::default(),
            resurrection: Arc::default(),
            cloud_maker: Arc::new(kubosh_engine::clouds::NoCpiTypes),
            releases: Arc::default(),
            left_behind: Arc::default(),
            details_interval: Some(super::details::DEFAULT_INTERVAL),
        }
    }

    /// The clouds of `namespace`'s `CpiConfig`s, read now (for tasks that have no deploy
    /// inputs: deletions, cck, orphaned disks).
    pub(crate) async fn named_clouds(
        &self,
        namespace: &str,
    ) -> Result<kubosh_engine::clouds::NamedClouds, DeploymentError> {
        super::cpis::named_clouds(&self.client, namespace, self.cloud_maker.as_ref())
            .await
            .map_err(DeploymentError::Clouds)
    }

    /// Deployment locks as Leases in `namespace`, held by this process. They expire
    /// [`LOCK_EXPIRY`] after their last renewal: that long after a controller dies, another
    /// replica may resume its deploys.
    pub(crate) fn locks(&self, namespace: &str) -> Arc<LeaseLocks> {
        let locks =
            LeaseLocks::new(self.client.clone(), namespace).with_periods(LOCK_EXPIRY, LOCK_RENEW);
        Arc::new(match &self.process {
            Some(p) => locks.held_by(p.clone()),
            None => locks,
        })
    }

    /// The registries the deployments of `namespace` share, serialized by `locks`.
    pub(crate) fn registries(&self, namespace: &str, locks: Arc<LeaseLocks>) -> KubeRegistries {
        KubeRegistries::new(self.client.clone(), namespace, locks, REGISTRY_WAIT)
    }

    /// Runs the task `task` makes (with this context) as a tracked task in `span`, awaited
    /// when the controller stops; the ledger hears when the task on `uid` ends.
    fn spawn_tracked<F>(
        self: &Arc<Self>,
        uid: String,
        span: tracing::Span,
        task: impl FnOnce(Arc<DeploymentContext>) -> F,
    ) where
        F: Future<Output = ()> + Send + 'static,
    {
        let ctx = self.clone();
        let task = task(self.clone());
        let tracked = async move {
            task.await;
            ctx.ledger.finish(&uid);
        };
        self.tasks
            .spawn(tracing::Instrument::instrument(tracked, span));
    }

    /// Publishes `event` regarding `regarding`; a failure is only logged.
    pub(crate) async fn publish(&self, event: &KubeEvent, regarding: &ObjectReference) {
        if let Err(e) = super::events::publish(&self.client, &self.reporter, event, regarding).await
        {
            tracing::warn!(regarding = ?regarding.name, error = %e, "cannot publish an event");
        }
    }

    /// What `deployment` deploys (or why it cannot yet), read with the watched inputs of its
    /// namespace as of its change `counter`.
    pub(crate) async fn gather_inputs(
        &self,
        deployment: &Deployment,
        counter: u64,
    ) -> Result<Result<inputs::Inputs, inputs::Unready>, inputs::InputError> {
        let namespace = deployment.namespace().unwrap_or_default();
        let watched = (self.inputs)
            .watched(&self.client, &namespace, counter)
            .await
            .map_err(inputs::InputError::Kube)?;
        inputs::gather(
            &self.client,
            deployment,
            &watched,
            self.cloud_maker.as_ref(),
        )
        .await
    }

    /// The store of a task that deploys `deployment` (its records owned by it), starting
    /// from what its last deploy left and leaving its own for the next.
    pub(crate) fn deploy_store(&self, deployment: &Deployment) -> Arc<KubeStore> {
        let store = KubeStore::new(
            self.client.clone(),
            &deployment.namespace().unwrap_or_default(),
            &deployment.name_any(),
            kube::Resource::controller_owner_ref(deployment, &()),
        );
        let uid = deployment.uid().unwrap_or_default();
        Arc::new(store.reusing(self.left_behind.clone(), &uid))
    }

    /// The engine of one task on deployment `name`: its own store, locks, progress and
    /// cancellation.
    pub(crate) fn engine(
        &self,
        store: Arc<KubeStore>,
        namespace: &str,
        events: Arc<dyn kubosh_engine::EventSink>,
        cancel: CancellationToken,
    ) -> Engine {
        let locks = self.locks(namespace);
        let registries = self.registries(namespace, locks.clone());
        let mut config = self.engine.config.clone();
        config.ip_registry = Some(registries.ip_registry());
        config.dns_registry = Some(registries.dns_registry());
        config.link_registry = Some(registries.link_registry());
        Engine {
            store,
            locks,
            events,
            cancel,
            config,
            ..self.engine.clone()
        }
    }
}

/// How long a claim of addresses or a DNS publish waits for the namespace's registry lock
/// (each holds it for a few API calls; many deploys may finish at once).
const REGISTRY_WAIT: Duration = Duration::from_secs(120);

/// How long a deployment lock outlives its holder's last renewal.
pub const LOCK_EXPIRY: Duration = Duration::from_secs(15);
/// How often a held deployment lock is renewed.
const LOCK_RENEW: Duration = Duration::from_secs(5);

/// Why a reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum DeploymentError {
    /// Reading the inputs failed.
    #[error(transparent)]
    Inputs(#[from] inputs::InputError),
    /// The Kubernetes API failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The links other deployments share cannot be read.
    #[error("shared links: {0}")]
    Links(#[from] kubosh_engine::state::StoreError),
    /// The namespace's CPI configs cannot be read or made into clouds.
    #[error("CPI config: {0}")]
    Clouds(String),
    /// Not a failure: the deletion runs, or waits for its retry; the finalizer stays until
    /// it has succeeded (see `deletion.rs`).
    #[error("the deletion has not finished")]
    DeletionUnfinished {
        /// When to look again.
        look_again: Duration,
    },
}

/// The finalizer that makes deleting a `Deployment` delete its VMs (and its disks, per
/// `spec.deletionPolicy`) first.
pub const FINALIZER: &str = "kubosh.io/deployment";

/// Reconciles one `Deployment` under its finalizer [`FINALIZER`] (kube-runtime's helper
/// adds it first, and removes it once the deletion task has succeeded).
pub async fn reconcile(
    deployment: Arc<Deployment>,
    ctx: Arc<DeploymentContext>,
) -> Result<Action, finalizer::Error<DeploymentError>> {
    let api: Api<Deployment> = Api::namespaced(
        ctx.client.clone(),
        &deployment.namespace().unwrap_or_default(),
    );
    let outcome = finalizer(&api, FINALIZER, deployment, |event| async {
        match event {
            finalizer::Event::Apply(d) => apply::reconcile(&ctx, d).await,
            finalizer::Event::Cleanup(d) => deletion::cleanup(&ctx, d).await,
        }
    })
    .await;
    match outcome {
        // Not a failure: looked at again soon, without growing the backoff.
        Err(finalizer::Error::CleanupFailed(DeploymentError::DeletionUnfinished {
            look_again,
        })) => Ok(Action::requeue(look_again)),
        other => other,
    }
}

/// What to do after a failed reconcile: retry with this deployment's backoff.
pub fn error_policy(
    deployment: Arc<Deployment>,
    error: &finalizer::Error<DeploymentError>,
    ctx: Arc<DeploymentContext>,
) -> Action {
    // Logged as the reconcile said it, not as the finalizer helper wraps it.
    let error: &dyn std::fmt::Display = match error {
        finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
        other => other,
    };
    let uid = deployment.uid().unwrap_or_default();
    let delay = ctx.ledger.next_delay(&uid);
    tracing::warn!(deployment = %deployment.name_any(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
