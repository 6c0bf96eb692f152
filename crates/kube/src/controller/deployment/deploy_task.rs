//! The deploy task: one deploy (or instance action) of one deployment, run beside the
//! reconciles (bounded by a semaphore) so a long deploy never holds a reconcile slot. It
//! runs the engine with a [`KubeStore`], Lease locks and a [`DeployProgress`] sink, writes
//! `Reconciling` with the stage while it runs and `Ready` or `Stalled` (or a retry with
//! backoff) at the end, and publishes the milestones as Events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use tracing::Instrument as _;

use super::super::inputs::Inputs;
use super::super::progress::DeployProgress;
use super::super::requests::{self, Handled, Pending, Requested};
use super::DeploymentContext;
use super::instances::{count_instances, write_instance_statuses};
use super::ledger::{Attempt, Outcome};
use super::materialise::{MaterialiseError, request_of};
use super::report::{clip, keep_history, now, publish, reasons, set_trio, write_status};
use super::task_progress::ProgressWriter;
use crate::api::{Deployment, DeploymentStatus, TaskState, TaskSummary};
use crate::state::KubeStore;
use crate::task_history::TaskRecorder;
use kubosh_core::plan::changes::Requests;
use kubosh_engine::deploy::DeployReport;
use kubosh_engine::{
    CancellationToken, DeployRequest, Disposition, EngineError, InstanceAction, InstanceName, Scope,
};

/// What a deploy task does, as `lastTask.description` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DeployKind {
    /// The first deploy of the deployment.
    Create,
    /// A deploy of a deployment deployed before.
    Update,
    /// An instance action (`kubosh.io/action`).
    Action(InstanceAction, Option<Scope>),
    /// A scan or a resolution of its problems (`kubosh.io/action: cck`, `resolve ...`).
    Cck(Requested),
    /// Instances that lost their agent or VM recreated from the spec of the generation
    /// deployed last (this one), while the newest generation does not validate.
    Repair(i64),
}

impl DeployKind {
    /// What `deployment` asks for now: its pending action, else a create or an update.
    fn of(deployment: &Deployment, pending: &Pending) -> DeployKind {
        let action = pending.action.as_ref().and_then(|a| a.parsed.clone().ok());
        let first = deployment
            .status
            .as_ref()
            .and_then(|s| s.last_task.as_ref())
            .is_none();
        match action {
            Some(Requested::Instance(verb, scope)) => DeployKind::Action(verb, scope),
            Some(cck) => DeployKind::Cck(cck),
            None if first => DeployKind::Create,
            None => DeployKind::Update,
        }
    }

    /// The engine's `action` for it.
    fn action(&self) -> Option<(InstanceAction, Option<Scope>)> {
        match self {
            DeployKind::Action(verb, scope) => Some((*verb, scope.clone())),
            DeployKind::Create
            | DeployKind::Update
            | DeployKind::Cck(_)
            | DeployKind::Repair(_) => None,
        }
    }
}

impl std::fmt::Display for DeployKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeployKind::Create => f.write_str("create deployment"),
            DeployKind::Update => f.write_str("update deployment"),
            DeployKind::Action(verb, scope) => {
                f.write_str(&requests::describe(*verb, scope.as_ref()))
            }
            DeployKind::Cck(requested) => requested.fmt(f),
            DeployKind::Repair(from) => write!(f, "repair from generation {from}"),
        }
    }
}

/// Why a deploy failed.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// A release or stemcell could not be made ready for the engine.
    #[error(transparent)]
    Materialise(#[from] MaterialiseError),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl DeployError {
    /// Whether trying the same again later may help (else the deploy stalls until its
    /// spec or inputs change).
    pub fn retry(&self) -> bool {
        match self {
            // A resource not stored yet, the blobstore or the scratch space: each may pass.
            DeployError::Materialise(_) => true,
            DeployError::Engine(e) => e.disposition() == Disposition::Retry,
        }
    }
}

/// How a deploy ended without success.
enum Failure {
    /// It was cancelled (shutdown, pause, deletion) and stopped between steps.
    Cancelled,
    /// It failed.
    Failed(DeployError),
}

/// How a deploy ended, as the metrics count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DeployResult {
    Succeeded,
    Cancelled,
    Retrying,
    Failed,
}

impl DeployResult {
    fn of(result: &Result<DeployReport, Failure>) -> DeployResult {
        match result {
            Ok(_) => DeployResult::Succeeded,
            Err(Failure::Cancelled) => DeployResult::Cancelled,
            Err(Failure::Failed(e)) if e.retry() => DeployResult::Retrying,
            Err(Failure::Failed(_)) => DeployResult::Failed,
        }
    }

    /// The metric's `result` label.
    pub(super) fn label(self) -> &'static str {
        match self {
            DeployResult::Succeeded => "succeeded",
            DeployResult::Cancelled => "cancelled",
            DeployResult::Retrying => "retrying",
            DeployResult::Failed => "failed",
        }
    }
}

/// One deploy to run: the deployment as the reconcile read it, its inputs, the attempt
/// they make, what was asked, and the task's token from the ledger.
pub(super) struct DeployTask {
    pub(super) deployment: Arc<Deployment>,
    pub(super) inputs: Inputs,
    pub(super) attempt: Attempt,
    pub(super) pending: Pending,
    pub(super) cancel: CancellationToken,
    /// A repair from the spec of this generation, the last deployed (`deployment` carries
    /// that spec; its newest does not validate): its status keeps saying why the newest
    /// cannot deploy.
    pub(super) repair_of: Option<i64>,
}

/// Starts `task` as a tracked task (awaited when the controller stops); the ledger hears
/// when it ends.
pub(super) fn spawn(ctx: &Arc<DeploymentContext>, task: DeployTask) {
    let deployment = &task.deployment;
    // The task's log lines carry the deployment (`--log-format json` shows the span).
    let span = tracing::info_span!(
        "deploy",
        namespace = %deployment.namespace().unwrap_or_default(),
        deployment = %deployment.name_any(),
        generation = task.attempt.generation,
    );
    let uid = deployment.uid().unwrap_or_default();
    ctx.spawn_tracked(uid, span, |ctx| async move { run_deploy(&ctx, task).await });
}

/// Runs one deploy to its end and writes its outcome.
async fn run_deploy(ctx: &DeploymentContext, task: DeployTask) {
    ctx.metrics.deploys_waiting(1);
    let _permit = ctx.deploys.acquire().await;
    ctx.metrics.deploys_waiting(-1);
    ctx.metrics.deploys_running(1);
    let started = Instant::now();
    deploy(ctx, task, started).await;
    ctx.metrics.deploys_running(-1);
}

/// [`run_deploy`] once it has a slot.
async fn deploy(ctx: &DeploymentContext, task: DeployTask, started: Instant) -> DeployResult {
    let DeployTask {
        deployment,
        inputs,
        attempt,
        pending,
        cancel,
        repair_of,
    } = task;
    let deployment = deployment.as_ref();
    let namespace = deployment.namespace().unwrap_or_default();
    let kind = match repair_of {
        Some(from) => DeployKind::Repair(from),
        None => DeployKind::of(deployment, &pending),
    };
    if let DeployKind::Cck(requested) = &kind {
        let task = super::cck_task::CckTask {
            deployment: deployment.clone(),
            inputs,
            pending,
            cancel,
            requested: requested.clone(),
            description: kind.to_string(),
        };
        let ended = super::cck_task::run(ctx, task).await;
        ctx.metrics.deployed(ended.label(), started.elapsed());
        return ended;
    }
    let announcement = Announcement::of(deployment, &kind);
    let quiet = starts_quietly(deployment, &kind, &pending);
    let status = starting_status(ctx, deployment, quiet, &announcement).await;
    let progress = Arc::new(DeployProgress::new());
    let uid = deployment.uid().unwrap_or_default();
    let store = ctx.deploy_store(deployment);
    let recorder = Arc::new(TaskRecorder::new(progress.clone()));
    let mut engine = ctx.engine(store.clone(), &namespace, recorder.clone(), cancel);
    engine.named_clouds = inputs.named_clouds.clone();
    let status = Arc::new(tokio::sync::Mutex::new(status));
    let inputs = Arc::new(inputs);
    let writer = ProgressWriter::start(
        ctx,
        deployment,
        store.clone(),
        inputs.clone(),
        progress,
        status.clone(),
        quiet.then(|| announcement.clone()),
    );
    let result = run_engine(ctx, deployment, &engine, &inputs, &kind)
        .instrument(recorder.span())
        .await;
    // For the next deploy of the deployment, a no-op included.
    store.leave().await;
    let announced = writer.stop(ctx, deployment).await;
    let mut status = status.lock().await.clone();
    if result.is_ok() && repair_of.is_none() {
        keep_deployed_spec(ctx, deployment, attempt.generation).await;
    }
    if quiet && !announced {
        if let Ok(report) = &result
            && report.noop
        {
            ctx.metrics
                .deployed(DeployResult::Succeeded.label(), started.elapsed());
            name_runtime_configs(ctx, deployment, &status, &inputs).await;
            finish_quietly(ctx, deployment, attempt);
            return DeployResult::Succeeded;
        }
        // It did something (or failed) without a stage that says so: its task is told now.
        announcement.apply(&mut status);
        announcement.publish(ctx, deployment).await;
    }
    status.progress = None;
    let elapsed = started.elapsed();
    if result.is_ok() {
        status.runtime_configs = inputs.runtime_configs.clone();
    }
    report_instances(ctx, &store, &inputs, &mut status, result.is_ok()).await;
    let ended = DeployResult::of(&result);
    // Counted before the status says it ended (a reader of both never sees one without the
    // other).
    ctx.metrics.deployed(ended.label(), elapsed);
    // The task's status was read at its start: whether resurrection runs is said as it is now.
    super::super::health::resurrection_condition(&mut status, &ctx.resurrection, &uid);
    let status = match repair_of {
        Some(from) => {
            conclude_repair(ctx, deployment, &inputs, status, result, from, elapsed).await
        }
        None => conclude(ctx, deployment, &inputs, status, attempt, result, elapsed).await,
    };
    let task = status.last_task.as_ref();
    keep_history(ctx, deployment, task, &recorder, &inputs.secrets, true).await;
    acknowledge_requests(ctx, deployment, &store, status, pending, ended).await;
    ended
}

/// The status a deploy starts from: as it is for a `quiet` start, else announced.
async fn starting_status(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    quiet: bool,
    announcement: &Announcement,
) -> DeploymentStatus {
    if !quiet {
        return announce(ctx, deployment, announcement).await;
    }
    let mut status = deployment.status.clone().unwrap_or_default();
    Handled::of(deployment).fill(&mut status);
    status
}

/// The counters in `status` and each `Instance`'s state after a deploy (`succeeded` or
/// not), from the records and objects as the deploy left them (read again only if it read
/// none).
async fn report_instances(
    ctx: &DeploymentContext,
    store: &KubeStore,
    inputs: &Inputs,
    status: &mut DeploymentStatus,
    succeeded: bool,
) {
    if let Ok(instances) = store.instances_as_left().await {
        count_instances(status, inputs, &instances);
        // After a failure, whether an instance runs is its agent's to say (the health
        // watch), not the record's.
        write_instance_statuses(ctx, &instances, succeeded).await;
    }
}

/// The engine's deploy of `inputs` with what `kind` asks; every deploy of a deployment with
/// resurrection on recreates what lost its agent or VM (`--fix`), as the resurrector asked
/// (or would).
async fn run_engine(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    engine: &kubosh_engine::Engine,
    inputs: &Inputs,
    kind: &DeployKind,
) -> Result<DeployReport, Failure> {
    let uid = deployment.uid().unwrap_or_default();
    ctx.resurrection.deploying(&uid);
    let fix = (ctx.resurrection).allows(&uid, deployment.spec.resurrection());
    let request = request_of(ctx, inputs)
        .await
        .map_err(|e| Failure::Failed(e.into()))?;
    let request = DeployRequest {
        action: kind.action(),
        requests: Requests {
            fix,
            ..request.requests
        },
        ..request
    };
    engine.deploy(&request).await.map_err(|e| match e {
        EngineError::Cancelled { lock_lost: false } => Failure::Cancelled,
        e => Failure::Failed(e.into()),
    })
}

/// Names in the status the versions of the runtime configs in `inputs`, deployed though
/// nothing changed (what a new version of one changed applies nowhere, or only its
/// metadata changed), when `status` names others. Only that field is written (a merge
/// patch): `status` may be a cached copy older than the last deploy's.
pub(super) async fn name_runtime_configs(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    status: &DeploymentStatus,
    inputs: &Inputs,
) {
    if status.runtime_configs == inputs.runtime_configs {
        return;
    }
    let api: Api<Deployment> = Api::namespaced(
        ctx.client.clone(),
        &deployment.namespace().unwrap_or_default(),
    );
    let patch = serde_json::json!({"status": {"runtimeConfigs": inputs.runtime_configs}});
    let params = PatchParams::default();
    if let Err(e) = (api.patch_status(&deployment.name_any(), &params, &Patch::Merge(&patch))).await
    {
        tracing::warn!(deployment = %deployment.name_any(), error = %e, "cannot name the runtime configs deployed");
    }
}

/// The end of a quiet deploy that found nothing to do: nothing was done and nothing was
/// asked, so nothing is said; the ledger remembers the attempt.
fn finish_quietly(ctx: &DeploymentContext, deployment: &Deployment, attempt: Attempt) {
    let uid = deployment.uid().unwrap_or_default();
    ctx.ledger.reset_backoff(&uid);
    ctx.ledger.set_outcome(&uid, Outcome::Deployed(attempt));
}

/// A task id unique within the deployment.
pub(super) fn task_id() -> String {
    kubosh_base::ids::uuid_v4()[..8].to_string()
}

/// How a deploy says it started: `Reconciling` (Deploying), a new `lastTask`, and an Event.
#[derive(Debug, Clone)]
pub(super) struct Announcement {
    generation: i64,
    /// A repair: the conditions keep saying why the newest generation cannot deploy.
    keeps_conditions: bool,
    /// `lastTask.description`.
    description: String,
    /// The condition's message and the Event's note.
    message: String,
}

impl Announcement {
    fn of(deployment: &Deployment, kind: &DeployKind) -> Announcement {
        let generation = deployment.metadata.generation.unwrap_or_default();
        let description = kind.to_string();
        let message = match kind {
            DeployKind::Action(..) | DeployKind::Cck(_) => {
                format!("Deploying generation {generation}: {description}")
            }
            DeployKind::Create | DeployKind::Update => format!("Deploying generation {generation}"),
            DeployKind::Repair(from) => format!(
                "Repairing instances from generation {from}, the last deployed (generation {generation} cannot be deployed)"
            ),
        };
        Announcement {
            generation,
            keeps_conditions: matches!(kind, DeployKind::Repair(_)),
            description,
            message,
        }
    }

    /// `status` as a deploy that started says it.
    pub(super) fn apply(&self, status: &mut DeploymentStatus) {
        let message = format!("Deploying generation {}", self.generation);
        if !self.keeps_conditions {
            set_trio(
                status,
                Some(self.generation),
                (false, reasons::DEPLOYING, &message),
                (true, reasons::DEPLOYING, &message),
                (false, reasons::DEPLOYING, ""),
            );
        }
        status.progress = None;
        status.last_task = Some(TaskSummary {
            id: task_id(),
            state: TaskState::Processing,
            description: self.description.clone(),
            started: Some(now()),
            ..TaskSummary::default()
        });
    }

    /// Publishes the `DeployStarted` Event.
    pub(super) async fn publish(&self, ctx: &DeploymentContext, deployment: &Deployment) {
        let note = self.message.clone();
        tracing::info!(deployment = %deployment.name_any(), "{note}");
        publish(ctx, deployment, EventType::Normal, "DeployStarted", note).await;
    }
}

/// Whether a deploy of `deployment` starts quietly: its status says it is Ready at this
/// generation and nothing is asked (no action, no reconcile request), so the deploy most likely finds nothing to do (a
/// controller restart, a resync, agents back after silence). It says it started only once
/// it changes something (see `task_progress`), so `Ready` does not flap for a deploy that
/// does nothing.
fn starts_quietly(deployment: &Deployment, kind: &DeployKind, pending: &Pending) -> bool {
    let generation = deployment.metadata.generation;
    let status = deployment.status.as_ref();
    // Whoever asked (an action, a reconcile request) hears how it went.
    pending.is_empty()
        && matches!(kind, DeployKind::Create | DeployKind::Update)
        && status.is_some_and(|s| {
            s.observed_generation == generation
                && super::super::status::is_ready(&s.conditions, s.observed_generation)
        })
}

/// Says the deploy started (see [`Announcement`]); the status as written.
async fn announce(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    announcement: &Announcement,
) -> DeploymentStatus {
    let mut status = deployment.status.clone().unwrap_or_default();
    Handled::of(deployment).fill(&mut status);
    announcement.apply(&mut status);
    // The status and the Event at once: one round trip before the engine starts, not two.
    let (written, ()) = tokio::join!(
        write_status(&ctx.client, deployment, &status),
        announcement.publish(ctx, deployment)
    );
    if let Err(e) = written {
        tracing::warn!(deployment = %deployment.name_any(), error = %e, "cannot write the status");
    }
    status
}

/// The status after the deploy's `result`: the task's end, the trio, Events and the
/// ledger's outcome.
async fn conclude(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    inputs: &Inputs,
    mut status: DeploymentStatus,
    attempt: Attempt,
    result: Result<DeployReport, Failure>,
    elapsed: Duration,
) -> DeploymentStatus {
    let task = task_ended(&mut status, elapsed);
    match result {
        Ok(report) => {
            task.state = TaskState::Succeeded;
            succeeded(ctx, deployment, &mut status, &report, attempt, elapsed).await;
        }
        Err(Failure::Cancelled) => {
            task.state = TaskState::Cancelled;
            cancelled(ctx, deployment, &mut status, attempt.generation).await;
        }
        Err(Failure::Failed(error)) => {
            let message = inputs.scrub(&failure_message(ctx, deployment, &error));
            task.state = TaskState::Failed;
            task.error = Some(clip(&message));
            failed(
                ctx,
                deployment,
                &mut status,
                message,
                error.retry(),
                attempt,
            )
            .await;
        }
    }
    status
}

/// `status`'s task, marked ended now after `elapsed` (its state is the caller's to set).
fn task_ended(status: &mut DeploymentStatus, elapsed: Duration) -> &mut TaskSummary {
    let task = status.last_task.get_or_insert_with(TaskSummary::default);
    task.finished = Some(now());
    task.duration_seconds = Some(i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX));
    task
}

/// The status after a repair's `result`: the task's end and an Event; the conditions and
/// the ledger's outcome keep saying why the newest generation cannot deploy. A failed
/// repair is tried again after the backoff.
async fn conclude_repair(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    inputs: &Inputs,
    mut status: DeploymentStatus,
    result: Result<DeployReport, Failure>,
    from: i64,
    elapsed: Duration,
) -> DeploymentStatus {
    let uid = deployment.uid().unwrap_or_default();
    let task = task_ended(&mut status, elapsed);
    let (kind, reason, note) = match result {
        Ok(report) => {
            task.state = TaskState::Succeeded;
            let note = format!(
                "Repaired from generation {from}, the last deployed: recreated {} instance(s) in {}s",
                report.updated.len(),
                elapsed.as_secs()
            );
            (EventType::Normal, "DeploySucceeded", note)
        }
        Err(Failure::Cancelled) => {
            task.state = TaskState::Cancelled;
            let note = "The repair stopped after the steps in flight".to_string();
            (EventType::Normal, "DeployCancelled", note)
        }
        Err(Failure::Failed(error)) => {
            let message = inputs.scrub(&failure_message(ctx, deployment, &error));
            task.state = TaskState::Failed;
            task.error = Some(clip(&message));
            let note = format!("Repair from generation {from} failed: {message}");
            (EventType::Warning, "DeployFailed", note)
        }
    };
    ctx.ledger
        .repair_ended(&uid, task.state == TaskState::Succeeded);
    tracing::info!(deployment = %deployment.name_any(), "{note}");
    publish(ctx, deployment, kind, reason, note).await;
    status
}

/// Keeps the spec of `generation`, deployed now, unless this process kept it already:
/// what a repair recreates from while a newer generation does not validate.
async fn keep_deployed_spec(ctx: &DeploymentContext, deployment: &Deployment, generation: i64) {
    let uid = deployment.uid().unwrap_or_default();
    if ctx.ledger.kept_generation(&uid) == Some(generation) {
        return;
    }
    let namespace = deployment.namespace().unwrap_or_default();
    let kept = crate::deployed_spec::DeployedSpec::new(
        ctx.client.clone(),
        &namespace,
        &deployment.name_any(),
    );
    match kept.keep(&uid, generation, &deployment.spec).await {
        Ok(()) => ctx.ledger.set_kept_generation(&uid, generation),
        Err(e) => {
            tracing::warn!(deployment = %deployment.name_any(), error = %e, "cannot keep the deployed spec")
        }
    }
}

/// What a failed deploy's status says: the error, and for agents that did not answer, why
/// they were not recreated and how to have them recreated.
fn failure_message(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    error: &DeployError,
) -> String {
    let DeployError::Engine(engine) = error else {
        return error.to_string();
    };
    let silent: Vec<&InstanceName> = (engine.unanswered().iter())
        .filter(|u| u.error.is_silence())
        .map(|u| &u.instance)
        .collect();
    if silent.is_empty() {
        return error.to_string();
    }
    let uid = deployment.uid().unwrap_or_default();
    let why = (ctx.resurrection)
        .not_resurrected_because(&uid, deployment.spec.resurrection())
        .map_or_else(|| "resurrection is off".to_string(), |(_, why)| why);
    let names: Vec<&str> = silent.iter().map(|i| i.display.as_str()).collect();
    let recreate: Vec<String> = (silent.iter())
        .map(|i| format!("recreate {}/{}", i.group, i.index))
        .collect();
    format!(
        "{error}\nNo answer from the agent of {}; their VMs are not recreated because {why}. Recreate them with the {} annotation ({}), or turn resurrection on",
        names.join(", "),
        requests::ACTION_ANNOTATION,
        recreate.join("; ")
    )
}

/// Ready, with what the deploy did.
async fn succeeded(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    status: &mut DeploymentStatus,
    report: &DeployReport,
    attempt: Attempt,
    elapsed: Duration,
) {
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
        status,
        Some(attempt.generation),
        (true, reasons::DEPLOYED, &summary),
        (false, reasons::DEPLOYED, ""),
        (false, reasons::DEPLOYED, ""),
    );
    tracing::info!(deployment = %deployment.name_any(), generation = attempt.generation, "{summary}");
    publish(
        ctx,
        deployment,
        EventType::Normal,
        "DeploySucceeded",
        summary,
    )
    .await;
    let uid = deployment.uid().unwrap_or_default();
    ctx.ledger.reset_backoff(&uid);
    ctx.ledger.set_outcome(&uid, Outcome::Deployed(attempt));
}

/// Interrupted: nothing is decided, the next reconcile (or the next leader) looks again.
async fn cancelled(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    status: &mut DeploymentStatus,
    generation: i64,
) {
    let uid = deployment.uid().unwrap_or_default();
    let message = match ctx.ledger.cancelled_because(&uid) {
        Some(because) if !ctx.cancel.is_cancelled() => because,
        _ => {
            "The controller stopped during the deploy, after the steps in flight; it resumes when a controller runs again"
        }
    };
    set_trio(
        status,
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

/// Failed with `message`: retried with backoff when `retry`, else Stalled until the spec
/// or inputs change.
async fn failed(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    status: &mut DeploymentStatus,
    message: String,
    retry: bool,
    attempt: Attempt,
) {
    let uid = deployment.uid().unwrap_or_default();
    let generation = Some(attempt.generation);
    if retry {
        let delay = ctx.ledger.next_delay(&uid);
        let text = format!("{message} (retrying in {}s)", delay.as_secs());
        set_trio(
            status,
            generation,
            (false, reasons::DEPLOY_FAILED, &text),
            (true, reasons::RETRYING, &text),
            (false, reasons::RETRYING, ""),
        );
        let at = Instant::now() + delay;
        ctx.ledger
            .set_outcome(&uid, Outcome::DeployRetry { attempt, at });
    } else {
        set_trio(
            status,
            generation,
            (false, reasons::DEPLOY_FAILED, &message),
            (false, reasons::DEPLOY_FAILED, ""),
            (true, reasons::DEPLOY_FAILED, &message),
        );
        ctx.ledger.set_outcome(&uid, Outcome::Stalled(attempt));
    }
    // The message is scrubbed of the deployment's variables already.
    tracing::warn!(deployment = %deployment.name_any(), generation = ?generation, retry, "deploy failed: {message}");
    publish(ctx, deployment, EventType::Warning, "DeployFailed", message).await;
}

/// Writes the final `status`, with the requests the deploy handled: a request is handled
/// once a deploy ran for it to an end; an action that may succeed on a retry stays pending.
/// What the status acknowledges is kept in the annotation too.
pub(super) async fn acknowledge_requests(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    store: &KubeStore,
    mut status: DeploymentStatus,
    pending: Pending,
    ended: DeployResult,
) {
    let handled_before = Handled::in_status(&status);
    if ended != DeployResult::Cancelled {
        if let Some(value) = pending.reconcile {
            status.last_handled_reconcile_request = Some(value);
        }
        if let Some(action) = pending.action
            && ended != DeployResult::Retrying
        {
            status.last_handled_action = Some(action.value);
        }
    }
    let name = deployment.name_any();
    if let Err(e) = write_status(&ctx.client, deployment, &status).await {
        tracing::warn!(deployment = %name, error = %e, "cannot write the status");
    }
    let handled = Handled::in_status(&status);
    if handled != handled_before
        && let Err(e) = store.record_handled_requests(handled.to_annotation()).await
    {
        tracing::warn!(deployment = %name, error = %e, "cannot record the handled requests");
    }
}
