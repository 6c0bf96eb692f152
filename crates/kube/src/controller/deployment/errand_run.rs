//! `ErrandRun`: `bosh run-errand` as a resource. A run waits until its deployment has no
//! deploy in progress (it exists, is not paused, has deployed its generation and nothing
//! runs on it), then runs as a task of the deployment (the ledger's: no deploy of it starts
//! meanwhile; the engine's deployment lock across processes): an errand colocated on
//! instances runs on them; an instance group with `lifecycle: errand` gets its VMs from a
//! deploy through the engine's crash-safe path and loses them after the run unless
//! `keepAlive`. The status ends `Succeeded` (every exit code 0, or skipped: `whenChanged`
//! and nothing changed since a run that succeeded) or `Failed`, with each instance's exit
//! code and the tails of its output (secrets scrubbed), and the kstatus trio, so Argo CD's
//! hook and kstatus read it. A run found `Running` with no task in this process was
//! interrupted (the controller stopped): it is `Failed`, and the deployment's next deploy
//! deletes errand VMs left behind.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::{Resource, ResourceExt};
use tracing::Instrument as _;

use super::super::inputs::Inputs;
use super::super::progress::DeployProgress;
use super::super::status;
use super::DeploymentContext;
use super::deploy_task::task_id;
use super::ledger::InputsKey;
use super::materialise::request_of;
use super::report::{keep_history, now};
use crate::api::condition::{READY, RECONCILING};
use crate::api::{
    Deployment, ErrandInstanceResult, ErrandPhase, ErrandRun, ErrandRunStatus, TaskState,
    TaskSummary,
};
use crate::task_history::TaskRecorder;
use kubosh_engine::CancellationToken;
use kubosh_engine::errand::ErrandOutcome;

/// Condition reasons of an `ErrandRun`.
pub mod reasons {
    /// Waiting for its deployment.
    pub const WAITING: &str = "Waiting";
    /// Running.
    pub const RUNNING: &str = "Running";
    /// Every instance's run exited 0.
    pub const SUCCEEDED: &str = "Succeeded";
    /// Not run: `whenChanged`, and the deployment is as when the errand last succeeded.
    pub const SKIPPED: &str = "Skipped";
    /// An instance's run exited non-zero.
    pub const ERRAND_FAILED: &str = "ErrandFailed";
    /// The errand could not run (no such errand, no VM, a failed deploy, ...).
    pub const CANNOT_RUN: &str = "CannotRun";
    /// The controller stopped while it ran.
    pub const INTERRUPTED: &str = "Interrupted";
}

/// How often a waiting run looks at its deployment again (its changes wake it sooner).
const WAIT_POLL: Duration = Duration::from_secs(10);

/// How soon a run looks again when another task of its deployment just started.
const TASK_RUNNING_POLL: Duration = Duration::from_secs(5);

/// Longest tail of one instance's stdout or stderr in the status.
const MAX_TAIL: usize = 4096;

/// The most all tails together take in the status (an object is at most 1.5 MiB).
const TAILS_BUDGET: usize = 256 * 1024;

/// Why a reconcile of an `ErrandRun` failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum ErrandRunError {
    /// The Kubernetes API failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
}

/// How a run ended.
enum Ended {
    /// It ran on these instances.
    Ran(Vec<ErrandOutcome>),
    /// Skipped (`whenChanged`): the `ErrandRun` of this name succeeded on the same inputs.
    Skipped(String),
    /// It could not run.
    Failed(String),
    /// The controller stopped while it ran.
    Interrupted,
}

/// Reconciles one `ErrandRun`.
pub async fn reconcile(
    run: Arc<ErrandRun>,
    ctx: Arc<DeploymentContext>,
) -> Result<Action, ErrandRunError> {
    let uid = run.uid().unwrap_or_default();
    let status = run.status.clone().unwrap_or_default();
    if status.phase.is_some_and(ErrandPhase::is_final) || ctx.ledger.runs_errand(&uid) {
        return Ok(Action::await_change());
    }
    if status.phase == Some(ErrandPhase::Running) {
        let _ = conclude(&ctx, &run, status, Ended::Interrupted).await?;
        return Ok(Action::await_change());
    }
    let namespace = run.namespace().unwrap_or_default();
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(deployment) = api.get_opt(&run.spec.deployment).await? else {
        let missing = format!(
            "waiting for Deployment '{}' in namespace '{namespace}'",
            run.spec.deployment
        );
        wait(&ctx, &run, status, &missing).await?;
        return Ok(Action::requeue(WAIT_POLL));
    };
    match busy(&ctx, &deployment) {
        Some(Err(waiting)) => {
            wait(&ctx, &run, status, &waiting).await?;
            return Ok(Action::requeue(WAIT_POLL));
        }
        Some(Ok(refused)) => {
            let _ = conclude(&ctx, &run, status, Ended::Failed(refused)).await?;
            return Ok(Action::await_change());
        }
        None => {}
    }
    let deployment_uid = deployment.uid().unwrap_or_default();
    let Some(cancel) = ctx.ledger.start_errand(&deployment_uid, &uid, &ctx.cancel) else {
        return Ok(Action::requeue(TASK_RUNNING_POLL));
    };
    let span = tracing::info_span!(
        "errand",
        namespace = %namespace,
        deployment = %deployment.name_any(),
        errand = %run.spec.errand,
    );
    ctx.spawn_tracked(deployment_uid, span, |ctx| async move {
        run_task(&ctx, &run, &deployment, cancel).await;
    });
    Ok(Action::await_change())
}

/// What to do after a failed reconcile: look again soon.
pub fn error_policy(
    run: Arc<ErrandRun>,
    error: &ErrandRunError,
    _ctx: Arc<DeploymentContext>,
) -> Action {
    tracing::warn!(errand_run = %run.name_any(), error = %error, "reconcile failed");
    Action::requeue(WAIT_POLL)
}

/// Why the errand cannot run on `deployment` now: `Err` while it should wait, `Ok` when it
/// never will; `None` when it may run.
fn busy(ctx: &DeploymentContext, deployment: &Deployment) -> Option<Result<String, String>> {
    let name = deployment.name_any();
    if deployment.metadata.deletion_timestamp.is_some() {
        return Some(Ok(format!("Deployment '{name}' is being deleted")));
    }
    if deployment.spec.paused {
        return Some(Err(format!(
            "waiting for Deployment '{name}': it is paused (spec.paused)"
        )));
    }
    if ctx.ledger.is_running(&deployment.uid().unwrap_or_default()) {
        return Some(Err(format!(
            "waiting for Deployment '{name}': a task of it is running"
        )));
    }
    let generation = deployment.metadata.generation;
    let status = deployment.status.as_ref();
    let deploying = status.is_none_or(|s| s.observed_generation != generation)
        || status.is_some_and(|s| {
            (s.conditions.iter()).any(|c| c.type_ == RECONCILING && c.status == "True")
        });
    let never = status.is_none_or(|s| {
        !matches!(
            s.last_task.as_ref().map(|t| t.state),
            Some(TaskState::Succeeded | TaskState::Failed | TaskState::Cancelled)
        )
    });
    (deploying || never).then(|| {
        Err(format!(
            "waiting for Deployment '{name}' to deploy generation {}",
            generation.unwrap_or_default()
        ))
    })
}

/// Says the run waits, `why` (written only when the status says otherwise).
async fn wait(
    ctx: &DeploymentContext,
    run: &ErrandRun,
    mut status: ErrandRunStatus,
    why: &str,
) -> Result<(), kube::Error> {
    let generation = run.metadata.generation;
    let said = (status.conditions.iter())
        .any(|c| c.type_ == RECONCILING && c.message == why && c.observed_generation == generation);
    if said && status.phase == Some(ErrandPhase::Pending) {
        return Ok(());
    }
    status.phase = Some(ErrandPhase::Pending);
    set_trio(
        &mut status,
        generation,
        (false, reasons::WAITING, why),
        (true, reasons::WAITING, why),
        (false, reasons::WAITING, ""),
    );
    status::apply_status(&ctx.client, run, &status).await
}

/// Runs the errand of `run` on `deployment`, from its start to its status and Events.
async fn run_task(
    ctx: &DeploymentContext,
    run: &ErrandRun,
    deployment: &Deployment,
    cancel: CancellationToken,
) {
    let _permit = ctx.deploys.acquire().await;
    let mut status = run.status.clone().unwrap_or_default();
    let message = format!(
        "Running errand '{}' of Deployment '{}'",
        run.spec.errand, run.spec.deployment
    );
    status.phase = Some(ErrandPhase::Running);
    status.started = Some(now());
    status.deployment_generation = deployment.metadata.generation;
    set_trio(
        &mut status,
        run.metadata.generation,
        (false, reasons::RUNNING, &message),
        (true, reasons::RUNNING, &message),
        (false, reasons::RUNNING, ""),
    );
    if let Err(e) = status::apply_status(&ctx.client, run, &status).await {
        tracing::warn!(error = %e, "cannot write the errand run's status");
    }
    publish(ctx, run, EventType::Normal, "ErrandStarted", message).await;
    let recorder = Arc::new(TaskRecorder::new(Arc::new(DeployProgress::new())));
    let mut task = TaskSummary {
        id: task_id(),
        state: TaskState::Processing,
        description: format!(
            "run errand {} (ErrandRun {})",
            run.spec.errand,
            run.name_any()
        ),
        started: Some(now()),
        ..TaskSummary::default()
    };
    let (ended, secrets) = errand(ctx, run, deployment, &mut status, (&cancel, &recorder))
        .instrument(recorder.span())
        .await;
    task.finished = Some(now());
    match conclude(ctx, run, status, ended).await {
        Ok(ended) => {
            task.state = ended.0;
            task.error = ended.1;
        }
        Err(e) => tracing::warn!(error = %e, "cannot write the errand run's end"),
    }
    keep_history(ctx, deployment, Some(&task), &recorder, &secrets, true).await;
}

/// The run itself: the deployment's inputs read (for a `lifecycle: errand` group, for
/// `whenChanged`, and for the secrets to scrub), then the engine's errand; how it ended,
/// and the secrets to scrub from its logs.
async fn errand(
    ctx: &DeploymentContext,
    run: &ErrandRun,
    deployment: &Deployment,
    status: &mut ErrandRunStatus,
    (cancel, recorder): (&CancellationToken, &Arc<TaskRecorder>),
) -> (Ended, Vec<String>) {
    let namespace = deployment.namespace().unwrap_or_default();
    let name = deployment.name_any();
    let errand = &run.spec.errand;
    let inputs = read_inputs(ctx, deployment).await;
    status.deployment_digest = (inputs.as_ref()).map(|i| InputsKey::of(i, None).fingerprint());
    if run.spec.when_changed
        && let Some(digest) = &status.deployment_digest
        && let Some(earlier) = succeeded_before(ctx, run, digest).await
    {
        return (Ended::Skipped(earlier), Vec::new());
    }
    let store = ctx.deploy_store(deployment);
    let mut engine = ctx.engine(store.clone(), &namespace, recorder.clone(), cancel.clone());
    let lifecycle = inputs.as_ref().filter(|i| {
        (i.documents.document.0.instance_groups.iter()).any(|g| g.name == *errand && g.is_errand())
    });
    let scrub = |text: &str| match &inputs {
        Some(inputs) => inputs.scrub(text),
        None => text.to_string(),
    };
    let ran = match lifecycle {
        Some(inputs) => {
            engine.named_clouds = inputs.named_clouds.clone();
            match request_of(ctx, inputs).await {
                Ok(request) => (engine.run_lifecycle_errand(&request, errand, run.spec.keep_alive))
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
        None => match engine.instances_selected(&name, &run.spec.instances).await {
            Ok(chosen) => engine.run_errand(&name, errand, chosen).await,
            Err(e) => Err(e),
        }
        .map_err(|e| e.to_string()),
    };
    // For the next deploy of the deployment (errand VMs made or deleted).
    store.leave().await;
    let ended = match ran {
        Ok(outcomes) => Ended::Ran(
            (outcomes.into_iter())
                .map(|o| ErrandOutcome {
                    stdout: scrub(&o.stdout),
                    stderr: scrub(&o.stderr),
                    ..o
                })
                .collect(),
        ),
        Err(_) if cancel.is_cancelled() => Ended::Interrupted,
        Err(e) => Ended::Failed(scrub(&e)),
    };
    (ended, inputs.map(|i| i.secrets).unwrap_or_default())
}

/// The deployment's inputs as a deploy would read them now; `None` when they cannot be
/// read or do not validate (a colocated errand runs all the same).
async fn read_inputs(ctx: &DeploymentContext, deployment: &Deployment) -> Option<Inputs> {
    let counter = ctx
        .inputs
        .counter(&deployment.namespace().unwrap_or_default());
    ctx.gather_inputs(deployment, counter).await.ok()?.ok()
}

/// The name of an earlier `ErrandRun` of the same errand, instances and deployment that
/// succeeded (not skipped) on inputs of fingerprint `digest`.
async fn succeeded_before(
    ctx: &DeploymentContext,
    run: &ErrandRun,
    digest: &str,
) -> Option<String> {
    let api: Api<ErrandRun> =
        Api::namespaced(ctx.client.clone(), &run.namespace().unwrap_or_default());
    let selector = format!("spec.deployment={}", run.spec.deployment);
    let list = (api.list(&ListParams::default().fields(&selector)).await).ok()?;
    (list.items.into_iter())
        .filter(|r| r.uid() != run.uid() && r.spec.errand == run.spec.errand)
        .filter(|r| r.spec.instances == run.spec.instances)
        .filter_map(|r| {
            let s = r.status.as_ref()?;
            let ran = s.phase == Some(ErrandPhase::Succeeded)
                && s.deployment_digest.as_deref() == Some(digest)
                && !(s.conditions.iter()).any(|c| c.type_ == READY && c.reason == reasons::SKIPPED);
            ran.then(|| (s.finished.clone(), r.name_any()))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, name)| name)
}

/// Writes how the run ended and publishes it; the state and error of its task.
async fn conclude(
    ctx: &DeploymentContext,
    run: &ErrandRun,
    mut status: ErrandRunStatus,
    ended: Ended,
) -> Result<(TaskState, Option<String>), kube::Error> {
    let errand = &run.spec.errand;
    status.finished = Some(now());
    let (phase, reason, message) = match ended {
        Ended::Ran(outcomes) => {
            status.exit_code = outcomes.iter().map(|o| o.exit_code).max();
            status.instances = results(errand, outcomes);
            match status.exit_code {
                Some(0) => (
                    ErrandPhase::Succeeded,
                    reasons::SUCCEEDED,
                    format!(
                        "Errand '{errand}' completed successfully on {} instance(s)",
                        status.instances.len()
                    ),
                ),
                code => (
                    ErrandPhase::Failed,
                    reasons::ERRAND_FAILED,
                    format!(
                        "Errand '{errand}' completed with error (exit code {})",
                        code.unwrap_or_default()
                    ),
                ),
            }
        }
        Ended::Skipped(earlier) => (
            ErrandPhase::Succeeded,
            reasons::SKIPPED,
            format!(
                "Skipped (whenChanged): the deployment is as when ErrandRun '{earlier}' succeeded"
            ),
        ),
        Ended::Failed(why) => (
            ErrandPhase::Failed,
            reasons::CANNOT_RUN,
            format!("Errand '{errand}' could not run: {why}"),
        ),
        Ended::Interrupted => (
            ErrandPhase::Failed,
            reasons::INTERRUPTED,
            format!(
                "Errand '{errand}' was interrupted: the controller stopped while it ran; \
                 create another ErrandRun to run it again"
            ),
        ),
    };
    status.phase = Some(phase);
    let generation = run.metadata.generation;
    let succeeded = phase == ErrandPhase::Succeeded;
    set_trio(
        &mut status,
        generation,
        (succeeded, reason, &message),
        (false, reason, ""),
        (!succeeded, reason, if succeeded { "" } else { &message }),
    );
    status::apply_status(&ctx.client, run, &status).await?;
    let (kind, event) = match succeeded {
        true => (EventType::Normal, "ErrandSucceeded"),
        false => (EventType::Warning, "ErrandFailed"),
    };
    publish(ctx, run, kind, event, message.clone()).await;
    Ok(match succeeded {
        true => (TaskState::Succeeded, None),
        false => (TaskState::Failed, Some(message)),
    })
}

/// Each instance's run as the status keeps it: sorted, its output's tails within
/// [`TAILS_BUDGET`].
fn results(errand: &str, mut outcomes: Vec<ErrandOutcome>) -> Vec<ErrandInstanceResult> {
    outcomes.sort_by(|a, b| (&a.group, &a.id).cmp(&(&b.group, &b.id)));
    let tail = (TAILS_BUDGET / (2 * outcomes.len().max(1))).min(MAX_TAIL);
    (outcomes.into_iter())
        .map(|o| ErrandInstanceResult {
            instance: format!("{}/{}", o.group, o.id),
            exit_code: o.exit_code,
            stdout: tail_of(&o.stdout, tail),
            stderr: tail_of(&o.stderr, tail),
            logs: format!("/var/vcap/sys/log/{errand}"),
        })
        .collect()
}

/// The last `max` bytes of `text` (at a character boundary).
fn tail_of(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

/// Sets the kstatus trio of an `ErrandRun`.
fn set_trio(
    status: &mut ErrandRunStatus,
    generation: Option<i64>,
    ready: (bool, &str, &str),
    reconciling: (bool, &str, &str),
    stalled: (bool, &str, &str),
) {
    status.observed_generation = generation;
    status::set_trio(
        &mut status.conditions,
        generation,
        ready,
        reconciling,
        stalled,
    );
}

/// Publishes an Event regarding the run.
async fn publish(
    ctx: &DeploymentContext,
    run: &ErrandRun,
    kind: EventType,
    reason: &str,
    note: String,
) {
    let event = KubeEvent {
        type_: kind,
        reason: reason.into(),
        note: Some(kubosh_base::secret::excerpt(&note, 1000)),
        action: "RunErrand".into(),
        secondary: None,
    };
    ctx.publish(&event, &run.object_ref(&())).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(group: &str, id: &str, code: i64, stdout: &str) -> ErrandOutcome {
        ErrandOutcome {
            group: group.into(),
            id: id.into(),
            exit_code: code,
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    #[test]
    fn results_are_sorted_and_their_tails_fit_the_budget() {
        let long = "é".repeat(5000);
        let got = results(
            "smoke",
            vec![outcome("b", "2", 0, "ok"), outcome("a", "1", 3, &long)],
        );
        assert_eq!(got[0].instance, "a/1");
        assert_eq!(got[0].exit_code, 3);
        assert!(got[0].stdout.len() <= MAX_TAIL && got[0].stdout.ends_with('é'));
        assert_eq!(got[1].stdout, "ok");
        assert_eq!(got[1].logs, "/var/vcap/sys/log/smoke");
        let many: Vec<ErrandOutcome> = (0..1000)
            .map(|i| outcome("g", &format!("{i:04}"), 0, &"x".repeat(MAX_TAIL)))
            .collect();
        let total: usize = results("e", many).iter().map(|r| r.stdout.len()).sum();
        assert!(total <= TAILS_BUDGET / 2, "{total}");
    }
}
