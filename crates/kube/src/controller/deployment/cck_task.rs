//! A scan or a resolution of a deployment's problems (`kubosh.io/action: cck`, `resolve <ID|all>
//! <RESOLUTION>`): `bosh cck` as a task. The scan's findings go to `status.problems`; a
//! resolution applies to the problems the last scan found (a `recreate_vm` deploys the
//! deployment's inputs, recreating those instances on their disks), then scans again. While it
//! runs `Reconciling` says so; the rest of the trio is left to the deploys and the health
//! watch, which say how the deployment is.

use std::sync::Arc;

use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tracing::Instrument as _;

use super::super::inputs::Inputs;
use super::super::progress::DeployProgress;
use super::super::requests::{Handled, Pending, Requested};
use super::super::status;
use super::DeploymentContext;
use super::deploy_task::{DeployResult, acknowledge_requests, task_id};
use super::materialise::request_of;
use super::report::{clip, keep_history, now, publish, write_status};
use crate::api::condition::RECONCILING;
use crate::api::{Deployment, DeploymentStatus, ProblemStatus, TaskState, TaskSummary};
use crate::state::KubeStore;
use crate::task_history::TaskRecorder;
use kubosh_engine::cck::{Problem, Resolution};
use kubosh_engine::{CancellationToken, Engine};

/// One scan or resolution to run.
pub(super) struct CckTask {
    pub(super) deployment: Deployment,
    pub(super) inputs: Inputs,
    pub(super) pending: Pending,
    pub(super) cancel: CancellationToken,
    pub(super) requested: Requested,
    /// `lastTask.description`.
    pub(super) description: String,
}

/// Why a resolution could not be applied.
#[derive(Debug, thiserror::Error)]
enum CckError {
    /// The problem is not among the last scan's.
    #[error("no problem '{0}' in the last scan (it may be resolved already: see status.problems)")]
    UnknownProblem(String),
    /// Nothing to apply the resolution to.
    #[error("no problem offers '{0}'")]
    NothingToResolve(&'static str),
    /// The engine failed.
    #[error(transparent)]
    Resolve(#[from] kubosh_engine::cck::ResolveError),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] kubosh_engine::EngineError),
    /// The inputs could not be made ready for a `recreate_vm`.
    #[error(transparent)]
    Materialise(#[from] super::MaterialiseError),
}

/// Runs `task` to its end: status, Events, the request acknowledged.
pub(super) async fn run(ctx: &DeploymentContext, task: CckTask) -> DeployResult {
    let deployment = &task.deployment;
    let name = deployment.name_any();
    let namespace = deployment.namespace().unwrap_or_default();
    let mut status = deployment.status.clone().unwrap_or_default();
    Handled::of(deployment).fill(&mut status);
    let reconciling_before = (status.conditions.iter())
        .find(|c| c.type_ == RECONCILING)
        .cloned();
    status.last_task = Some(TaskSummary {
        id: task_id(),
        state: TaskState::Processing,
        description: task.description.clone(),
        started: Some(now()),
        ..TaskSummary::default()
    });
    let generation = status.observed_generation;
    let message = format!("Running {}", task.description);
    status::set_condition(
        &mut status.conditions,
        status::condition(RECONCILING, true, "Scanning", &message, generation),
    );
    if let Err(e) = write_status(&ctx.client, deployment, &status).await {
        tracing::warn!(deployment = %name, error = %e, "cannot write the status");
    }
    // Its writes are not the next deploy's to start from.
    ctx.left_behind
        .forget(&deployment.uid().unwrap_or_default());
    let store = Arc::new(KubeStore::new(
        ctx.client.clone(),
        &namespace,
        &name,
        deployment.controller_owner_ref(&()),
    ));
    let recorder = Arc::new(TaskRecorder::new(Arc::new(DeployProgress::new())));
    let mut engine = ctx.engine(
        store.clone(),
        &namespace,
        recorder.clone(),
        task.cancel.clone(),
    );
    engine.named_clouds = task.inputs.named_clouds.clone();
    let started = std::time::Instant::now();
    let result = scan_or_resolve(ctx, &engine, &name, &task)
        .instrument(recorder.span())
        .await;
    let summary = status.last_task.get_or_insert_with(TaskSummary::default);
    summary.finished = Some(now());
    summary.duration_seconds = i64::try_from(started.elapsed().as_secs()).ok();
    let ended = match result {
        Ok((problems, applied)) => {
            summary.state = TaskState::Succeeded;
            if !applied.is_empty() {
                // The cloud changed: the next reconcile deploys again to say how it is.
                ctx.ledger
                    .clear_outcome(&deployment.uid().unwrap_or_default());
            }
            report_problems(ctx, deployment, &mut status, &problems, &applied).await;
            DeployResult::Succeeded
        }
        Err(e) => {
            let message = task.inputs.scrub(&e.to_string());
            summary.state = TaskState::Failed;
            summary.error = Some(clip(&message));
            publish(ctx, deployment, EventType::Warning, "CckFailed", message).await;
            DeployResult::Failed
        }
    };
    match reconciling_before {
        Some(before) => status::set_condition(&mut status.conditions, before),
        None => status.conditions.retain(|c| c.type_ != RECONCILING),
    }
    let summary = status.last_task.as_ref();
    let secrets = &task.inputs.secrets;
    keep_history(ctx, deployment, summary, &recorder, secrets, true).await;
    acknowledge_requests(ctx, deployment, &store, status, task.pending, ended).await;
    ended
}

/// The scan, or the resolution and the scan after it: the problems now and what was applied.
async fn scan_or_resolve(
    ctx: &DeploymentContext,
    engine: &Engine,
    name: &str,
    task: &CckTask,
) -> Result<(Vec<Problem>, Vec<(String, Resolution)>), CckError> {
    let problems = engine.scan(name).await?;
    let Requested::Resolve {
        problem,
        resolution,
    } = &task.requested
    else {
        return Ok((problems, Vec::new()));
    };
    let chosen: Vec<(Problem, Resolution)> = match problem {
        Some(id) => {
            let found = (problems.iter())
                .find(|p| &p.id == id)
                .ok_or_else(|| CckError::UnknownProblem(id.clone()))?;
            vec![(found.clone(), *resolution)]
        }
        None => (problems.iter())
            .filter(|p| p.resolutions().contains(resolution))
            .map(|p| (p.clone(), *resolution))
            .collect(),
    };
    if chosen.is_empty() {
        return Err(CckError::NothingToResolve(resolution.name()));
    }
    let request = match resolution {
        Resolution::RecreateVm => Some(request_of(ctx, &task.inputs).await?),
        _ => None,
    };
    let done = engine
        .resolve_problems(name, &chosen, request.as_ref())
        .await?;
    Ok((engine.scan(name).await?, done.applied))
}

/// `status.problems` and the Events of a scan (and of what was resolved before it).
async fn report_problems(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    status: &mut DeploymentStatus,
    problems: &[Problem],
    applied: &[(String, Resolution)],
) {
    status.problems = problems.iter().map(problem_status).collect();
    for (id, resolution) in applied {
        let note = format!("Resolved problem {id}: {}", resolution.name());
        publish(ctx, deployment, EventType::Normal, "ProblemResolved", note).await;
    }
    let (kind, note) = match problems.len() {
        0 => (EventType::Normal, "The scan found no problem".to_string()),
        n => (
            EventType::Warning,
            format!(
                "The scan found {n} problem(s): {}",
                (problems.iter())
                    .map(|p| format!("{} {} ({})", p.id, p.kind.name(), p.instance.display))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    };
    publish(ctx, deployment, kind, "ProblemsScanned", note).await;
}

/// A problem as `status.problems` lists it.
fn problem_status(p: &Problem) -> ProblemStatus {
    ProblemStatus {
        id: p.id.clone(),
        type_: p.kind.name().to_string(),
        instance: p.instance.display.clone(),
        description: p.description.clone(),
        resolutions: p
            .resolutions()
            .iter()
            .map(|r| r.name().to_string())
            .collect(),
    }
}
