//! The `Deployment` reconciler: `kubectl apply` a BOSH deployment, and the engine deploys it.
//!
//! A reconcile is short: it reads the inputs ([`inputs::gather`]), writes what stops them
//! (waiting for a release, an invalid manifest: zero cloud calls), and otherwise starts a
//! deploy task unless the same generation and inputs were already deployed. The task runs
//! the engine with a [`KubeStore`], Lease locks and a [`DeployProgress`] sink, writes
//! `Reconciling` with the stage while it runs and `Ready` or `Stalled` (or a retry with
//! backoff) at the end, and publishes the milestones as Events. A long deploy of one
//! deployment never holds a reconcile slot of another.
//!
//! Status is kstatus-correct: `observedGeneration` on the status and on every condition, in
//! one server-side apply with field manager `kubosh`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio::sync::Semaphore;

use super::backoff::Backoffs;
use super::inputs::{self, Inputs, Unready, Watched};
use super::progress::{DeployProgress, Milestone};
use super::requests::{self, ActionRequest, Handled, Pending};
use super::status;
use crate::api::condition::{READY, RECONCILING, STALLED};
use crate::api::{
    Deployment, DeploymentStatus, Instance, InstanceGroupStatus, ProcessState,
    Release as ReleaseResource, Stemcell as StemcellResource, TaskState, TaskSummary,
};
use crate::lock::{LeaseLocks, Process};
use crate::registry::KubeRegistries;
use crate::state::{FIELD_MANAGER, KubeStore};
use kubosh_artifacts::release::Release;
use kubosh_core::digest::MultiDigest;
use kubosh_engine::delete::DiskDisposal;
use kubosh_engine::state::{InstanceState, StateStore};
use kubosh_engine::{
    CancellationToken, DeployRequest, Disposition, Engine, EngineError, StemcellSource,
};
use tokio_util::task::TaskTracker;

/// How often a settled deployment's inputs are read again (Secrets and ConfigMaps in
/// `varsFrom` are not watched).
pub const RESYNC: Duration = Duration::from_secs(600);

/// How soon a deployment with a new generation or request is looked at again while its
/// previous task runs.
const WAIT_FOR_TASK: Duration = Duration::from_secs(5);

/// How often a running deploy's milestones are published (as Events).
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// How often a running deploy's count within a stage is written to the status, at most; a
/// new stage is written at the next [`PROGRESS_EVERY`]. Every write is paid from the request
/// budget all deployments share.
const PROGRESS_COUNT_EVERY: Duration = Duration::from_secs(10);

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
}

/// A counter per namespace, moved by every change of a `CloudConfig`, `Release` or
/// `Stemcell` there (the watches call [`InputChanges::changed`] before the reconciles they
/// trigger run), and the namespace's [`Watched`] inputs as read at a counter value: read
/// again only once the counter moved, so the deployments of a namespace share one read
/// per change, and a resync reads only what is not watched (Secrets, ConfigMaps). A
/// reconcile of a deployed deployment whose namespace's counter has not moved since it
/// last read its inputs, less than [`RESYNC`] ago, reads nothing at all: its own
/// `Instance`s' changes wake it too, and they change no input.
#[derive(Debug, Default)]
pub struct InputChanges {
    counters: Mutex<HashMap<String, u64>>,
    watched: Mutex<HashMap<String, (u64, Arc<Watched>)>>,
}

impl InputChanges {
    /// Something changed in `namespace`.
    pub fn changed(&self, namespace: Option<&str>) {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        *counters
            .entry(namespace.unwrap_or_default().to_string())
            .or_default() += 1;
    }

    fn counter(&self, namespace: &str) -> u64 {
        let counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters.get(namespace).copied().unwrap_or_default()
    }

    /// The watched inputs of `namespace`, read no earlier than counter value `counter`
    /// (read now unless they were then).
    async fn watched(
        &self,
        client: &kube::Client,
        namespace: &str,
        counter: u64,
    ) -> Result<Arc<Watched>, kube::Error> {
        let cached = (self.watched.lock().unwrap_or_else(PoisonError::into_inner))
            .get(namespace)
            .filter(|(c, _)| *c == counter)
            .map(|(_, w)| w.clone());
        if let Some(watched) = cached {
            return Ok(watched);
        }
        let watched = Arc::new(Watched::read(client, namespace).await?);
        (self.watched.lock().unwrap_or_else(PoisonError::into_inner))
            .insert(namespace.to_string(), (counter, watched.clone()));
        Ok(watched)
    }
}

/// How long orphaned disks are kept by default (the Director's `max_orphaned_age_in_days`).
pub const ORPHANED_DISK_MAX_AGE: Duration = Duration::from_secs(5 * 24 * 3600);

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
        }
    }

    /// Deployment locks as Leases in `namespace`, held by this process. They expire
    /// [`LOCK_EXPIRY`] after their last renewal: that long after a controller dies, another
    /// replica may resume its deploys.
    fn locks(&self, namespace: &str) -> Arc<LeaseLocks> {
        let locks =
            LeaseLocks::new(self.client.clone(), namespace).with_periods(LOCK_EXPIRY, LOCK_RENEW);
        Arc::new(match &self.process {
            Some(p) => locks.held_by(p.clone()),
            None => locks,
        })
    }

    /// Publishes `event` regarding `regarding`; a failure is only logged.
    pub(crate) async fn publish(&self, event: &KubeEvent, regarding: &ObjectReference) {
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(event, regarding).await {
            tracing::warn!(regarding = ?regarding.name, error = %e, "cannot publish an event");
        }
    }

    /// The engine of one task on deployment `name`: its own store, locks, progress and
    /// cancellation.
    pub(crate) fn engine(
        &self,
        store: Arc<KubeStore>,
        namespace: &str,
        events: Arc<DeployProgress>,
        cancel: CancellationToken,
    ) -> Engine {
        let locks = self.locks(namespace);
        let registries =
            KubeRegistries::new(self.client.clone(), namespace, locks.clone(), REGISTRY_WAIT);
        let mut config = self.engine.config.clone();
        config.ip_registry = Some(registries.ip_registry());
        config.dns_registry = Some(registries.dns_registry());
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

/// The last outcome of a deployment's deploy, as this process saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Deployed: `generation` with inputs `digest`.
    Succeeded { generation: i64, digest: String },
    /// Failed for good until the spec or inputs change.
    Stalled { generation: i64, digest: String },
    /// Failed; retried not before `at`.
    Retry {
        generation: i64,
        digest: String,
        at: Instant,
    },
    /// Invalid or waiting inputs were reported for this generation.
    Reported { generation: i64, message: String },
}

/// What a deployment's running task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Task {
    /// A deploy or an instance action.
    Deploy,
    /// Deleting the deployment (its finalizer).
    Delete,
}

/// A running task: what it does, its token, and why it was cancelled (when it was).
struct Running {
    task: Task,
    token: CancellationToken,
    cancelled_because: Option<&'static str>,
}

/// Running tasks and last outcomes, by deployment uid.
#[derive(Default)]
pub struct Ledger {
    running: Mutex<HashMap<String, Running>>,
    outcomes: Mutex<HashMap<String, Outcome>>,
    backoff: Backoffs,
    releases: Mutex<HashMap<String, Arc<Release>>>,
    /// When each deployment's last task ended (what agents said before is not news).
    ended: Mutex<HashMap<String, Instant>>,
    /// When each deployment last read its inputs, and its namespace's [`InputChanges`]
    /// counter then.
    read: Mutex<HashMap<String, (u64, Instant)>>,
}

impl Ledger {
    fn outcome(&self, uid: &str) -> Option<Outcome> {
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .cloned()
    }

    fn set_outcome(&self, uid: &str, outcome: Outcome) {
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uid.to_string(), outcome);
    }

    fn clear_outcome(&self, uid: &str) {
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }

    fn next_delay(&self, uid: &str) -> Duration {
        self.backoff.next(uid)
    }

    fn reset_backoff(&self, uid: &str) {
        self.backoff.reset(uid);
    }

    /// Marks a `task` on `uid` running, with a token cancelled with `parent` or by
    /// [`Ledger::cancel_deploy`]; `None` if one already runs.
    fn start(
        &self,
        uid: &str,
        task: Task,
        parent: &CancellationToken,
    ) -> Option<CancellationToken> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if running.contains_key(uid) {
            return None;
        }
        let token = parent.child_token();
        let entry = Running {
            task,
            token: token.clone(),
            cancelled_because: None,
        };
        running.insert(uid.to_string(), entry);
        Some(token)
    }

    /// Asks the deploy running on `uid`, if any, to start no new step, `because` (said in
    /// its status); a deletion always runs to its end.
    fn cancel_deploy(&self, uid: &str, because: &'static str) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = running.get_mut(uid).filter(|r| r.task == Task::Deploy) {
            r.cancelled_because.get_or_insert(because);
            r.token.cancel();
        }
    }

    /// Why the task running on `uid` was cancelled, if it was by [`Ledger::cancel_deploy`].
    fn cancelled_because(&self, uid: &str) -> Option<&'static str> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.get(uid).and_then(|r| r.cancelled_because)
    }

    fn finish(&self, uid: &str) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
        self.ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uid.to_string(), Instant::now());
    }

    /// Records that `uid` reads its inputs now, its namespace's counter at `counter`.
    fn reading_inputs(&self, uid: &str, counter: u64) {
        self.read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uid.to_string(), (counter, Instant::now()));
    }

    /// How long ago `uid` read its inputs, if none changed since (the namespace's counter
    /// is still `counter`).
    fn inputs_unchanged_for(&self, uid: &str, counter: u64) -> Option<Duration> {
        let read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        read.get(uid)
            .filter(|(c, _)| *c == counter)
            .map(|(_, at)| at.elapsed())
    }

    /// When the last task on `uid` ended in this process, if one did.
    pub(crate) fn ended(&self, uid: &str) -> Option<Instant> {
        self.ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .copied()
    }

    pub(crate) fn is_running(&self, uid: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(uid)
    }
}

/// Why a reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum DeploymentError {
    /// Reading the inputs failed.
    #[error(transparent)]
    Inputs(#[from] inputs::InputError),
    /// The Kubernetes API failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
}

/// The finalizer that makes deleting a `Deployment` delete its VMs (and its disks, per
/// `spec.deletionPolicy`) first.
pub const FINALIZER: &str = "kubosh.io/deployment";

/// Condition reasons of a `Deployment`.
mod reasons {
    pub const DEPLOYING: &str = "Deploying";
    pub const DEPLOYED: &str = "Deployed";
    pub const WAITING: &str = "Waiting";
    pub const DEPLOY_FAILED: &str = "DeployFailed";
    pub const RETRYING: &str = "RetryingAfterError";
    pub const PAUSED: &str = "Paused";
    pub const INPUTS_UNAVAILABLE: &str = "InputsUnavailable";
    pub const DELETING: &str = "Deleting";
    pub const INTERRUPTED: &str = "Interrupted";
}

/// Longest condition message kubosh writes (the apiserver allows 32 KiB).
const MAX_MESSAGE: usize = 4096;

fn clip(message: &str) -> String {
    kubosh_core::secret::excerpt(message, MAX_MESSAGE)
}

/// Sets the kstatus trio in one go.
fn set_trio(
    status: &mut DeploymentStatus,
    generation: Option<i64>,
    ready: (bool, &str, &str),
    reconciling: (bool, &str, &str),
    stalled: (bool, &str, &str),
) {
    status.observed_generation = generation;
    for (kind, (value, reason, message)) in [
        (READY, ready),
        (RECONCILING, reconciling),
        (STALLED, stalled),
    ] {
        status::set_condition(
            &mut status.conditions,
            status::condition(kind, value, reason, &clip(message), generation),
        );
    }
}

pub(crate) async fn write_status(
    client: &kube::Client,
    deployment: &Deployment,
    status: &DeploymentStatus,
) -> Result<(), kube::Error> {
    let api: Api<Deployment> =
        Api::namespaced(client.clone(), &deployment.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": Deployment::api_version(&()),
        "kind": Deployment::kind(&()),
        "status": status,
    });
    api.patch_status(
        &deployment.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Publishes an Event regarding the deployment.
async fn publish(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    kind: EventType,
    reason: &str,
    note: String,
) {
    publish_regarding(ctx, &deployment.object_ref(&()), None, kind, reason, &note).await;
}

/// Publishes an Event regarding `regarding` (and `secondary`), its note clipped.
pub(crate) async fn publish_regarding(
    ctx: &DeploymentContext,
    regarding: &ObjectReference,
    secondary: Option<ObjectReference>,
    kind: EventType,
    reason: &str,
    note: &str,
) {
    let event = KubeEvent {
        type_: kind,
        reason: reason.into(),
        note: Some(kubosh_core::secret::excerpt(note, 1000)),
        action: "Deploy".into(),
        secondary,
    };
    ctx.publish(&event, regarding).await;
}

/// Reconciles one `Deployment`.
pub async fn reconcile(
    deployment: Arc<Deployment>,
    ctx: Arc<DeploymentContext>,
) -> Result<Action, DeploymentError> {
    let uid = deployment.uid().unwrap_or_default();
    let generation = deployment.metadata.generation.unwrap_or_default();
    if deployment.metadata.deletion_timestamp.is_some() {
        return delete(&ctx, &deployment).await;
    }
    if !deployment.finalizers().iter().any(|f| f == FINALIZER) {
        set_finalizers(&ctx.client, &deployment, |f| f.push(FINALIZER.to_string())).await?;
        // The write wakes the next reconcile.
        return Ok(Action::await_change());
    }
    if ctx.ledger.is_running(&uid) {
        if deployment.spec.paused {
            // The deploy finishes the instances in flight, then stops.
            ctx.ledger.cancel_deploy(
                &uid,
                "spec.paused was set: the deploy stopped after the steps in flight",
            );
        }
        // The task triggers the next reconcile with its status write; the resync is only a
        // net (a shorter one would wake every deployment again once its deploy is done). A
        // new generation or request waits for the task's end: that write may be seen before
        // the task is marked finished, so look again soon (no API call until then).
        let observed = deployment
            .status
            .as_ref()
            .and_then(|s| s.observed_generation);
        if observed != Some(generation) || !Pending::of(&deployment).is_empty() {
            return Ok(Action::requeue(WAIT_FOR_TASK));
        }
        return Ok(Action::requeue(RESYNC));
    }
    // Deployed, nothing asked, no input changed and read recently: nothing to read again.
    let namespace = deployment.namespace().unwrap_or_default();
    let counter = ctx.inputs.counter(&namespace);
    if let Some(Outcome::Succeeded { generation: g, .. }) = ctx.ledger.outcome(&uid)
        && g == generation
        && !deployment.spec.paused
        && Pending::of(&deployment).is_empty()
        && let Some(age) = ctx.ledger.inputs_unchanged_for(&uid, counter)
        && age < RESYNC
    {
        return Ok(Action::requeue(RESYNC - age));
    }
    ctx.ledger.reading_inputs(&uid, counter);
    let mut status = deployment.status.clone().unwrap_or_default();
    Handled::of(&deployment).fill(&mut status);
    let read = async {
        let watched = (ctx.inputs)
            .watched(&ctx.client, &namespace, counter)
            .await
            .map_err(inputs::InputError::Kube)?;
        inputs::gather(&ctx.client, &deployment, &watched).await
    };
    let gathered = match read.await {
        Ok(g) => g,
        Err(e) => {
            let message = format!("cannot read the deployment's inputs: {e}");
            set_trio(
                &mut status,
                Some(generation),
                (false, reasons::INPUTS_UNAVAILABLE, &message),
                (true, reasons::INPUTS_UNAVAILABLE, &message),
                (false, reasons::INPUTS_UNAVAILABLE, ""),
            );
            write_status(&ctx.client, &deployment, &status).await?;
            return Err(e.into());
        }
    };
    let inputs = match gathered {
        Ok(inputs) => inputs,
        Err(unready) => return report_unready(&ctx, &deployment, status, unready).await,
    };
    if deployment.spec.paused {
        let message = "spec.paused is set: nothing is created, updated or deleted";
        let ready = status::is_ready(&status.conditions, status.observed_generation);
        set_trio(
            &mut status,
            Some(generation),
            (ready, reasons::PAUSED, message),
            (false, reasons::PAUSED, message),
            (false, reasons::PAUSED, ""),
        );
        write_status(&ctx.client, &deployment, &status).await?;
        return Ok(Action::await_change());
    }
    let pending = Pending::of(&deployment);
    if let Some(ActionRequest {
        value,
        parsed: Err(message),
    }) = &pending.action
    {
        // Said once (an event) and acknowledged: nothing to retry.
        publish(
            &ctx,
            &deployment,
            EventType::Warning,
            "InvalidAction",
            message.clone(),
        )
        .await;
        status.last_handled_action = Some(value.clone());
        write_status(&ctx.client, &deployment, &status).await?;
        let namespace = deployment.namespace().unwrap_or_default();
        let store = KubeStore::new(ctx.client.clone(), &namespace, &deployment.name_any(), None);
        if let Err(e) = store
            .record_handled_requests(Handled::in_status(&status).to_annotation())
            .await
        {
            tracing::warn!(deployment = %deployment.name_any(), error = %e, "cannot record the handled action");
        }
        return Ok(Action::await_change());
    }
    let digest = inputs_digest(&inputs);
    match ctx.ledger.outcome(&uid) {
        Some(Outcome::Succeeded {
            generation: g,
            digest: d,
        }) if g == generation && d == digest && pending.is_empty() => {
            return Ok(Action::requeue(RESYNC));
        }
        Some(Outcome::Stalled {
            generation: g,
            digest: d,
        }) if g == generation && d == digest && pending.is_empty() => {
            return Ok(Action::await_change());
        }
        Some(Outcome::Retry {
            generation: g,
            digest: d,
            at,
        }) if g == generation && d == digest && at > Instant::now() => {
            return Ok(Action::requeue(at - Instant::now()));
        }
        _ => {}
    }
    let Some(cancel) = ctx.ledger.start(&uid, Task::Deploy, &ctx.cancel) else {
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let task_ctx = ctx.clone();
    let task_deployment = deployment.clone();
    // The task's log lines carry the deployment (`--log-format json` shows the span).
    let span = tracing::info_span!(
        "deploy",
        namespace = %deployment.namespace().unwrap_or_default(),
        deployment = %deployment.name_any(),
        generation,
    );
    ctx.tasks.spawn(tracing::Instrument::instrument(
        async move {
            let uid = task_deployment.uid().unwrap_or_default();
            run_deploy(&task_ctx, &task_deployment, inputs, digest, pending, cancel).await;
            task_ctx.ledger.finish(&uid);
        },
        span,
    ));
    Ok(Action::requeue(RESYNC))
}

/// Rewrites the finalizers with `change`, guarded by the resourceVersion read.
async fn set_finalizers(
    client: &kube::Client,
    deployment: &Deployment,
    change: impl FnOnce(&mut Vec<String>),
) -> Result<(), kube::Error> {
    let mut finalizers = deployment.finalizers().to_vec();
    change(&mut finalizers);
    let api: Api<Deployment> =
        Api::namespaced(client.clone(), &deployment.namespace().unwrap_or_default());
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": deployment.resource_version(),
    }});
    api.patch(
        &deployment.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Deletes the deployment's VMs, and its disks or not per `spec.deletionPolicy`, releases
/// its addresses and DNS entries, then lets the resource go. A running deploy is cancelled
/// first (it stops after the steps in flight); the deletion itself runs as a tracked task,
/// retried with backoff when it fails.
async fn delete(
    ctx: &Arc<DeploymentContext>,
    deployment: &Arc<Deployment>,
) -> Result<Action, DeploymentError> {
    if !deployment.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let uid = deployment.uid().unwrap_or_default();
    if ctx.ledger.is_running(&uid) {
        // The task's last status write wakes the next reconcile.
        ctx.ledger.cancel_deploy(
            &uid,
            "The deployment is being deleted: the deploy stopped after the steps in flight",
        );
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    if let Some(Outcome::Retry { digest, at, .. }) = ctx.ledger.outcome(&uid)
        && digest == DELETION
        && at > Instant::now()
    {
        return Ok(Action::requeue(at - Instant::now()));
    }
    let disposal = match deployment.spec.deletion_policy {
        crate::api::DeletionPolicy::Delete => DiskDisposal::Delete,
        crate::api::DeletionPolicy::Orphan => DiskDisposal::Orphan,
    };
    let mut status = deployment.status.clone().unwrap_or_default();
    let message = format!(
        "Deleting: VMs deleted, disks {}",
        match disposal {
            DiskDisposal::Delete => "deleted",
            DiskDisposal::Orphan => "orphaned",
        }
    );
    set_trio(
        &mut status,
        deployment.metadata.generation,
        (false, reasons::DELETING, &message),
        (true, reasons::DELETING, &message),
        (false, reasons::DELETING, ""),
    );
    status.progress = None;
    write_status(&ctx.client, deployment, &status).await?;
    let Some(cancel) = ctx.ledger.start(&uid, Task::Delete, &ctx.cancel) else {
        return Ok(Action::requeue(Duration::from_secs(5)));
    };
    let task_ctx = ctx.clone();
    let task_deployment = deployment.clone();
    let span = tracing::info_span!(
        "delete",
        namespace = %deployment.namespace().unwrap_or_default(),
        deployment = %deployment.name_any(),
    );
    ctx.tasks.spawn(tracing::Instrument::instrument(
        async move {
            let outcome = run_delete(&task_ctx, &task_deployment, disposal, status, cancel).await;
            if let Err(e) = outcome {
                tracing::warn!(deployment = %task_deployment.name_any(), error = %e, "deleting");
            }
            task_ctx.ledger.finish(&uid);
        },
        span,
    ));
    Ok(Action::requeue(Duration::from_secs(5)))
}

/// The outcome digest of a failed deletion (retried with backoff).
const DELETION: &str = "deletion";

/// Runs `Engine::delete_deployment`; on success removes the finalizer, on failure says why
/// and schedules a retry.
async fn run_delete(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    disposal: DiskDisposal,
    mut status: DeploymentStatus,
    cancel: CancellationToken,
) -> Result<(), DeploymentError> {
    let uid = deployment.uid().unwrap_or_default();
    let name = deployment.name_any();
    let namespace = deployment.namespace().unwrap_or_default();
    // No owner: disks kept as orphans outlive the resource (ownerReferences would let the
    // garbage collector drop their records and leak them in the cloud).
    let store = Arc::new(KubeStore::new(ctx.client.clone(), &namespace, &name, None));
    let engine = ctx.engine(store, &namespace, Arc::new(DeployProgress::new()), cancel);
    match engine.delete_deployment(&name, disposal).await {
        Ok(report) => {
            let note = format!(
                "Deleted {} instance(s); {} disk(s) deleted, {} orphaned",
                report.instances.len(),
                report.disks_deleted.len(),
                report.disks_orphaned.len()
            );
            publish(ctx, deployment, EventType::Normal, "Deleted", note).await;
            ctx.ledger.clear_outcome(&uid);
            ctx.ledger.reset_backoff(&uid);
            set_finalizers(&ctx.client, deployment, |f| f.retain(|x| x != FINALIZER)).await?;
        }
        Err(e) => {
            let message = format!("deleting failed: {e}");
            publish(
                ctx,
                deployment,
                EventType::Warning,
                "DeleteFailed",
                message.clone(),
            )
            .await;
            let at = Instant::now() + ctx.ledger.next_delay(&uid);
            ctx.ledger.set_outcome(
                &uid,
                Outcome::Retry {
                    generation: deployment.metadata.generation.unwrap_or_default(),
                    digest: DELETION.into(),
                    at,
                },
            );
            set_trio(
                &mut status,
                deployment.metadata.generation,
                (false, reasons::DELETING, &message),
                (true, reasons::DELETING, &message),
                (false, reasons::DELETING, ""),
            );
            write_status(&ctx.client, deployment, &status).await?;
        }
    }
    Ok(())
}

/// Writes why the deployment cannot deploy, once per generation and message.
async fn report_unready(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    mut status: DeploymentStatus,
    unready: Unready,
) -> Result<Action, DeploymentError> {
    let uid = deployment.uid().unwrap_or_default();
    let generation = deployment.metadata.generation.unwrap_or_default();
    let (message, action) = match &unready {
        Unready::Waiting(lines) => {
            let message = format!("waiting for: {}", lines.join("; "));
            set_trio(
                &mut status,
                Some(generation),
                (false, reasons::WAITING, &message),
                (true, reasons::WAITING, &message),
                (false, reasons::WAITING, ""),
            );
            // Releases, stemcells and cloud configs are watched; Secrets are not.
            (message, Action::requeue(ctx.ledger.next_delay(&uid)))
        }
        Unready::Invalid { reason, problems } => {
            let message = problems.join("\n");
            set_trio(
                &mut status,
                Some(generation),
                (false, reason, &message),
                (false, reason, ""),
                (true, reason, &message),
            );
            (message, Action::await_change())
        }
    };
    status.progress = None;
    let reported = Outcome::Reported {
        generation,
        message: message.clone(),
    };
    if ctx.ledger.outcome(&uid) != Some(reported.clone()) {
        write_status(&ctx.client, deployment, &status).await?;
        if let Unready::Invalid { reason, .. } = &unready {
            publish(ctx, deployment, EventType::Warning, reason, message).await;
        }
        ctx.ledger.set_outcome(&uid, reported);
    }
    Ok(action)
}

/// What was deployed: the manifest, cloud config and the resources' versions and blobs.
fn inputs_digest(inputs: &Inputs) -> String {
    let doc = json!({
        "manifest": inputs.manifest,
        "cloud_config": inputs.cloud_config,
        "releases": inputs.releases.iter().map(|r| (r.name_any(), r.status.as_ref().and_then(|s| s.manifest_blob_id.clone()))).collect::<Vec<_>>(),
        "stemcells": inputs.stemcells.iter().map(|s| (s.name_any(), s.status.as_ref().and_then(|x| x.blob_id.clone()))).collect::<Vec<_>>(),
    });
    kubosh_core::digest::sha256_hex(doc.to_string().as_bytes())
}

/// A task id unique within the deployment.
fn task_id() -> String {
    kubosh_core::ids::uuid_v4()[..8].to_string()
}

fn now() -> Time {
    let ts = k8s_openapi::jiff::Timestamp::now();
    Time(k8s_openapi::jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}

/// How a deploy ended without success.
enum Failure {
    /// It was cancelled (shutdown, pause) and stopped between steps.
    Cancelled,
    /// It failed; `retry` if trying the same again later may help.
    Failed { message: String, retry: bool },
}

/// Runs one deploy to its end and writes its outcome.
async fn run_deploy(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    inputs: Inputs,
    digest: String,
    pending: Pending,
    cancel: CancellationToken,
) {
    ctx.metrics.deploys_waiting(1);
    let _permit = ctx.deploys.acquire().await;
    ctx.metrics.deploys_waiting(-1);
    ctx.metrics.deploys_running(1);
    let started = Instant::now();
    let outcome = run_deploy_slot(ctx, deployment, inputs, digest, pending, cancel, started).await;
    ctx.metrics.deploys_running(-1);
    ctx.metrics.deployed(outcome, started.elapsed());
}

/// [`run_deploy`] once it has a slot; the outcome's metric label.
async fn run_deploy_slot(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    inputs: Inputs,
    digest: String,
    pending: Pending,
    cancel: CancellationToken,
    started: Instant,
) -> &'static str {
    let uid = deployment.uid().unwrap_or_default();
    let generation = deployment.metadata.generation.unwrap_or_default();
    let name = deployment.name_any();
    let namespace = deployment.namespace().unwrap_or_default();
    let first = deployment
        .status
        .as_ref()
        .and_then(|s| s.last_task.as_ref())
        .is_none();
    let mut status = deployment.status.clone().unwrap_or_default();
    Handled::of(deployment).fill(&mut status);
    let message = format!("Deploying generation {generation}");
    set_trio(
        &mut status,
        Some(generation),
        (false, reasons::DEPLOYING, &message),
        (true, reasons::DEPLOYING, &message),
        (false, reasons::DEPLOYING, ""),
    );
    status.progress = None;
    let action = pending.action.as_ref().and_then(|a| a.parsed.clone().ok());
    let description = match &action {
        Some((verb, scope)) => requests::describe(*verb, scope.as_ref()),
        None if first => "create deployment".into(),
        None => "update deployment".into(),
    };
    let message = match &action {
        Some(_) => format!("{message}: {description}"),
        None => message,
    };
    status.last_task = Some(TaskSummary {
        id: task_id(),
        state: TaskState::Processing,
        description,
        started: Some(now()),
        ..TaskSummary::default()
    });
    if let Err(e) = write_status(&ctx.client, deployment, &status).await {
        tracing::warn!(deployment = %name, error = %e, "cannot write the status");
    }
    publish(ctx, deployment, EventType::Normal, "DeployStarted", message).await;

    let progress = Arc::new(DeployProgress::new());
    let store = Arc::new(KubeStore::new(
        ctx.client.clone(),
        &namespace,
        &name,
        deployment.controller_owner_ref(&()),
    ));
    let engine = ctx.engine(store.clone(), &namespace, progress.clone(), cancel);
    let shared_status = Arc::new(tokio::sync::Mutex::new(status));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let inputs = Arc::new(inputs);
    let reporter = tokio::spawn(report_progress(
        ctx.clone(),
        deployment.clone(),
        store.clone(),
        inputs.clone(),
        progress.clone(),
        shared_status.clone(),
        stop_rx,
    ));
    let result = match request_of(ctx, &inputs).await {
        Ok(request) => engine
            .deploy(&DeployRequest { action, ..request })
            .await
            .map_err(|e| match e {
                EngineError::Cancelled { lock_lost: false } => Failure::Cancelled,
                e => Failure::Failed {
                    message: inputs.scrub(&e.to_string()),
                    retry: e.disposition() == Disposition::Retry,
                },
            }),
        Err(message) => Err(Failure::Failed {
            message: inputs.scrub(&message),
            retry: true,
        }),
    };
    let ran_to_an_end = !matches!(result, Err(Failure::Cancelled));
    let retrying = matches!(result, Err(Failure::Failed { retry: true, .. }));
    let _ = stop_tx.send(true);
    let _ = reporter.await;
    for m in progress.drain() {
        publish_milestone(ctx, deployment, &store, &inputs, m).await;
    }
    let mut status = shared_status.lock().await.clone();
    status.progress = None;
    let elapsed = started.elapsed();
    let state = store.load().await.ok();
    if let Some(state) = &state {
        count_instances(&mut status, &inputs, state);
        write_instance_statuses(ctx, &namespace, &name, state).await;
    }
    let task = status.last_task.get_or_insert_with(TaskSummary::default);
    task.finished = Some(now());
    task.duration_seconds = Some(i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX));
    let label = match &result {
        Ok(_) => "succeeded",
        Err(Failure::Cancelled) => "cancelled",
        Err(Failure::Failed { retry: true, .. }) => "retrying",
        Err(Failure::Failed { retry: false, .. }) => "failed",
    };
    match result {
        Ok(report) => {
            task.state = TaskState::Succeeded;
            let summary = if report.noop {
                "No changes: the deployment is up to date".to_string()
            } else {
                format!(
                    "Updated {} instance(s), deleted {}, compiled {} package(s) in {}s",
                    report.updated.len(),
                    report.deleted.len(),
                    report.compiled,
                    elapsed.as_secs()
                )
            };
            set_trio(
                &mut status,
                Some(generation),
                (true, reasons::DEPLOYED, &summary),
                (false, reasons::DEPLOYED, ""),
                (false, reasons::DEPLOYED, ""),
            );
            if report.compiled > 0 {
                let note = format!("Compiled {} package(s)", report.compiled);
                publish(ctx, deployment, EventType::Normal, "PackagesCompiled", note).await;
            }
            publish(
                ctx,
                deployment,
                EventType::Normal,
                "DeploySucceeded",
                summary,
            )
            .await;
            ctx.ledger.reset_backoff(&uid);
            ctx.ledger
                .set_outcome(&uid, Outcome::Succeeded { generation, digest });
        }
        Err(Failure::Cancelled) => {
            task.state = TaskState::Cancelled;
            // Nothing is decided: the next reconcile (or the next leader) looks again.
            let message = match ctx.ledger.cancelled_because(&uid) {
                Some(because) if !ctx.cancel.is_cancelled() => because,
                _ => {
                    "The controller stopped during the deploy, after the steps in flight; it resumes when a controller runs again"
                }
            };
            set_trio(
                &mut status,
                Some(generation),
                (false, reasons::INTERRUPTED, message),
                (true, reasons::INTERRUPTED, message),
                (false, reasons::INTERRUPTED, ""),
            );
            ctx.ledger.clear_outcome(&uid);
            publish(
                ctx,
                deployment,
                EventType::Normal,
                "DeployCancelled",
                message.into(),
            )
            .await;
        }
        Err(Failure::Failed { message, retry }) => {
            task.state = TaskState::Failed;
            task.error = Some(clip(&message));
            if retry {
                let delay = ctx.ledger.next_delay(&uid);
                let text = format!("{message} (retrying in {}s)", delay.as_secs());
                set_trio(
                    &mut status,
                    Some(generation),
                    (false, reasons::DEPLOY_FAILED, &text),
                    (true, reasons::RETRYING, &text),
                    (false, reasons::RETRYING, ""),
                );
                ctx.ledger.set_outcome(
                    &uid,
                    Outcome::Retry {
                        generation,
                        digest,
                        at: Instant::now() + delay,
                    },
                );
            } else {
                set_trio(
                    &mut status,
                    Some(generation),
                    (false, reasons::DEPLOY_FAILED, &message),
                    (false, reasons::DEPLOY_FAILED, ""),
                    (true, reasons::DEPLOY_FAILED, &message),
                );
                ctx.ledger
                    .set_outcome(&uid, Outcome::Stalled { generation, digest });
            }
            publish(ctx, deployment, EventType::Warning, "DeployFailed", message).await;
        }
    }
    // A request is handled once a deploy ran for it; an action that may succeed on a
    // retry stays pending.
    let handled_before = Handled::in_status(&status);
    if ran_to_an_end {
        if let Some(value) = pending.reconcile {
            status.last_handled_reconcile_request = Some(value);
        }
        if let Some(action) = pending.action
            && !retrying
        {
            status.last_handled_action = Some(action.value);
        }
    }
    if let Err(e) = write_status(&ctx.client, deployment, &status).await {
        tracing::warn!(deployment = %name, error = %e, "cannot write the status");
    }
    let handled = Handled::in_status(&status);
    if handled != handled_before
        && let Err(e) = store.record_handled_requests(handled.to_annotation()).await
    {
        tracing::warn!(deployment = %name, error = %e, "cannot record the handled requests");
    }
    label
}

/// Publishes milestones as they come and writes the running stage to the status (a new
/// stage at once, its count at most every [`PROGRESS_COUNT_EVERY`]), until `stop`.
async fn report_progress(
    ctx: DeploymentContext,
    deployment: Deployment,
    store: Arc<KubeStore>,
    inputs: Arc<Inputs>,
    progress: Arc<DeployProgress>,
    status: Arc<tokio::sync::Mutex<DeploymentStatus>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    let mut written: Option<(String, tokio::time::Instant)> = None;
    let mut pending: Option<crate::api::Progress> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        for m in progress.drain() {
            publish_milestone(&ctx, &deployment, &store, &inputs, m).await;
        }
        if let Some(p) = progress.take_progress() {
            pending = Some(p);
        }
        let due = |p: &crate::api::Progress| match &written {
            Some((stage, at)) => stage != &p.stage || at.elapsed() >= PROGRESS_COUNT_EVERY,
            None => true,
        };
        if let Some(p) = pending.take_if(|p| due(p)) {
            written = Some((p.stage.clone(), tokio::time::Instant::now()));
            let mut s = status.lock().await;
            let message = format!(
                "Deploying generation {}: {}",
                s.observed_generation.unwrap_or_default(),
                p.message
            );
            let generation = s.observed_generation;
            status::set_condition(
                &mut s.conditions,
                status::condition(RECONCILING, true, reasons::DEPLOYING, &message, generation),
            );
            s.progress = Some(p);
            if let Err(e) = write_status(&ctx.client, &deployment, &s).await {
                tracing::debug!(error = %e, "cannot write progress");
            }
        }
    }
}

/// Publishes a milestone regarding its `Instance` (related to the deployment), or the
/// deployment itself, with the deployment's secrets scrubbed.
async fn publish_milestone(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    store: &KubeStore,
    inputs: &Inputs,
    mut m: Milestone,
) {
    m.note = inputs.scrub(&m.note);
    let Some((group, index)) = &m.instance else {
        publish(ctx, deployment, m.kind, m.reason, m.note).await;
        return;
    };
    let regarding = match store.instance_ref(group, *index).await {
        Some(instance) => instance,
        None => deployment.object_ref(&()),
    };
    let secondary = Some(deployment.object_ref(&()));
    publish_regarding(ctx, &regarding, secondary, m.kind, m.reason, &m.note).await;
}

/// The engine's request: each release by reference (its packages stay in the blobstore),
/// each stemcell's image extracted once.
async fn request_of(ctx: &DeploymentContext, inputs: &Inputs) -> Result<DeployRequest, String> {
    let mut releases = Vec::new();
    for r in &inputs.releases {
        releases.push(release_of(ctx, r).await?);
    }
    let mut stemcells = Vec::new();
    for s in &inputs.stemcells {
        stemcells.push(stemcell_of(ctx, s).await?);
    }
    Ok(DeployRequest {
        manifest: inputs.manifest.clone(),
        cloud_config: inputs.cloud_config.clone(),
        releases,
        stemcells,
        ..DeployRequest::default()
    })
}

/// Fetches blob `id` into `dir/<id>` unless it is there already.
async fn fetch_blob(ctx: &DeploymentContext, id: &str, dir: &str) -> Result<PathBuf, String> {
    let dir = ctx.work_dir.join(dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(id);
    if !path.is_file() {
        let digest: MultiDigest = format!("sha256:{id}")
            .parse()
            .map_err(|e| format!("blob {id}: {e}"))?;
        ctx.engine
            .blobstore
            .get(id, &digest, &path)
            .await
            .map_err(|e| format!("blob {id}: {e}"))?;
    }
    Ok(path)
}

/// How many releases by reference the controller keeps in memory, at most.
const RELEASE_CACHE_MAX: usize = 64;

/// The release of `resource` by reference: `release.MF` and the job archives fetched from
/// the blobstore (small), the packages only by id (cached by `release.MF` blob id).
async fn release_of(
    ctx: &DeploymentContext,
    resource: &ReleaseResource,
) -> Result<Arc<Release>, String> {
    let name = resource.name_any();
    let status = resource.status.clone().unwrap_or_default();
    let Some(manifest_id) = status.manifest_blob_id.clone() else {
        return Err(format!("release {name} is not in the blobstore yet"));
    };
    let cached = (ctx.ledger.releases.lock())
        .unwrap_or_else(PoisonError::into_inner)
        .get(&manifest_id)
        .cloned();
    if let Some(r) = cached {
        return Ok(r);
    }
    let name = name.as_str();
    let blob = |id: Option<String>, what: String| async move {
        let id = id.ok_or_else(|| format!("release {name}: {what} is not in the blobstore yet"))?;
        let digest: MultiDigest = format!("sha256:{id}")
            .parse()
            .map_err(|e| format!("blob {id}: {e}"))?;
        (ctx.engine.blobstore.get_bytes(&id, &digest).await)
            .map(|b| b.to_vec())
            .map_err(|e| format!("release {name}: {what}: {e}"))
    };
    let release_mf = blob(Some(manifest_id.clone()), "release.MF".into()).await?;
    let mut jobs = BTreeMap::new();
    for job in &status.jobs {
        let archive = blob(job.blob_id.clone(), format!("job {}", job.name)).await?;
        jobs.insert(job.name.clone(), archive);
    }
    let packages: BTreeMap<String, String> = (status.packages.iter())
        .filter_map(|p| Some((p.name.clone(), p.blob_id.clone()?)))
        .collect();
    let release = Release::by_reference(&release_mf, jobs, &packages)
        .map(Arc::new)
        .map_err(|e| format!("release {name}: {e}"))?;
    let mut cache = (ctx.ledger.releases.lock()).unwrap_or_else(PoisonError::into_inner);
    // Bounded: release versions come and go; the ones in use are read again once.
    if cache.len() >= RELEASE_CACHE_MAX {
        cache.clear();
    }
    cache.insert(manifest_id, release.clone());
    Ok(release)
}

async fn stemcell_of(
    ctx: &DeploymentContext,
    resource: &StemcellResource,
) -> Result<StemcellSource, String> {
    let id = resource
        .status
        .as_ref()
        .and_then(|s| s.blob_id.clone())
        .ok_or_else(|| {
            format!(
                "stemcell {} has no tarball in the blobstore yet",
                resource.name_any()
            )
        })?;
    let tarball = fetch_blob(ctx, &id, "stemcell-tarballs").await?;
    let dir = ctx.work_dir.join("stemcells");
    tokio::task::spawn_blocking(move || StemcellSource::prepare(&dir, &tarball, true))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("stemcell {}: {e}", resource.name_any()))
}

/// Instance counters from the engine's records: desired from the manifest, up to date when
/// the last update completed, ready when up to date and started.
fn count_instances(
    status: &mut DeploymentStatus,
    inputs: &Inputs,
    state: &kubosh_engine::state::DeploymentState,
) {
    let mut groups: BTreeMap<String, InstanceGroupStatus> = BTreeMap::new();
    if let Some(list) = inputs
        .manifest
        .get("instance_groups")
        .and_then(|v| v.as_array())
    {
        for g in list {
            let errand = g.get("lifecycle").and_then(|l| l.as_str()) == Some("errand");
            let Some(name) = g.get("name").and_then(|n| n.as_str()) else {
                continue;
            };
            if errand {
                continue;
            }
            let desired = g.get("instances").and_then(|n| n.as_i64()).unwrap_or(0);
            groups.insert(
                name.to_string(),
                InstanceGroupStatus {
                    name: name.to_string(),
                    desired: i32::try_from(desired).unwrap_or(i32::MAX),
                    ..InstanceGroupStatus::default()
                },
            );
        }
    }
    for record in state.instances.values() {
        let Some(g) = groups.get_mut(&record.group) else {
            continue;
        };
        if record.update_completed {
            g.up_to_date += 1;
            if record.state == InstanceState::Started && record.vm.is_some() {
                g.ready += 1;
            }
        }
    }
    let sum = |f: fn(&InstanceGroupStatus) -> i32| groups.values().map(f).sum::<i32>();
    let (desired, ready, up_to_date) =
        (sum(|g| g.desired), sum(|g| g.ready), sum(|g| g.up_to_date));
    status.desired_instances = Some(desired);
    status.ready_instances = Some(ready);
    status.up_to_date_instances = Some(up_to_date);
    status.instances = Some(format!("{ready}/{desired}"));
    status.instance_groups = groups.into_values().collect();
}

/// Each `Instance`'s status from its record after a deploy: `Running` when its update
/// completed and it is started, `Stopped` when stopped or detached. Written only where it
/// changed.
async fn write_instance_statuses(
    ctx: &DeploymentContext,
    namespace: &str,
    deployment: &str,
    state: &kubosh_engine::state::DeploymentState,
) {
    let api: Api<Instance> = Api::namespaced(ctx.client.clone(), namespace);
    // One list, not a read per instance: the request budget is shared by every deployment.
    let objects: BTreeMap<String, Instance> = match api.list(&KubeStore::selector(deployment)).await
    {
        Ok(list) => (list.items.into_iter())
            .map(|i| (i.name_any(), i))
            .collect(),
        Err(e) => {
            tracing::warn!(deployment, error = %e, "cannot list the instances");
            return;
        }
    };
    for record in state.instances.values() {
        let name = KubeStore::instance_name(deployment, &record.group, record.index);
        let Some(object) = objects.get(&name) else {
            continue;
        };
        let generation = object.metadata.generation;
        let (process, ready, reason) = match (record.state, record.update_completed) {
            (InstanceState::Started, true) => (ProcessState::Running, true, "Running"),
            (InstanceState::Started, false) => (ProcessState::Unknown, false, "UpdateIncomplete"),
            _ => (ProcessState::Stopped, true, "Stopped"),
        };
        let current = object.status.clone().unwrap_or_default();
        if current.observed_generation == generation && current.process_state == Some(process) {
            continue;
        }
        if let Err(e) =
            status::write_instance_state(&ctx.client, object, process, ready, reason).await
        {
            tracing::warn!(instance = %name, error = %e, "cannot write the instance status");
        }
    }
}

/// What to do after a failed reconcile: retry with this deployment's backoff.
pub fn error_policy(
    deployment: Arc<Deployment>,
    error: &DeploymentError,
    ctx: Arc<DeploymentContext>,
) -> Action {
    let uid = deployment.uid().unwrap_or_default();
    let delay = ctx.ledger.next_delay(&uid);
    tracing::warn!(deployment = %deployment.name_any(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
