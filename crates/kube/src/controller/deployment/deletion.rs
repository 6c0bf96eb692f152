//! Deleting a `Deployment`: the cleanup of its finalizer [`FINALIZER`](super::FINALIZER).
//! Its VMs go, its disks go or are orphaned per `spec.deletionPolicy`, its addresses and
//! DNS entries are released; then the finalizer lets the resource go.
//!
//! The deletion runs for minutes, so it runs as a tracked task (awaited when the controller
//! stops) and never holds a reconcile slot. kube-runtime's `finalizer` helper removes the
//! finalizer when the cleanup returns `Ok`; so [`cleanup`] returns `Ok` only once the task
//! has succeeded, and [`DeploymentError::DeletionUnfinished`] (not a failure: the
//! reconciler looks again, its backoff untouched) while the task runs or waits for its
//! retry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use tracing::Instrument as _;

use super::super::progress::DeployProgress;
use super::deploy_task::task_id;
use super::ledger::{Outcome, TaskKind};
use super::report::{keep_history, now, publish, reasons, set_trio, write_status};
use super::{DeploymentContext, DeploymentError};
use crate::api::{DeletionPolicy, Deployment, DeploymentStatus, TaskState, TaskSummary};
use crate::deployed_spec::DeployedSpec;
use crate::state::KubeStore;
use crate::task_history::TaskRecorder;
use kubosh_engine::CancellationToken;
use kubosh_engine::delete::DiskDisposal;

/// How soon a deployment being deleted is looked at again while its task runs.
const WHILE_DELETING: Duration = Duration::from_secs(5);

/// The finalizer's cleanup: `Ok` once the deletion succeeded. Before that, a running deploy
/// is cancelled first (it stops after the steps in flight), then the deletion is started;
/// a failed one is retried with backoff.
pub(super) async fn cleanup(
    ctx: &Arc<DeploymentContext>,
    deployment: Arc<Deployment>,
) -> Result<Action, DeploymentError> {
    let uid = deployment.uid().unwrap_or_default();
    let unfinished = |look_again| Err(DeploymentError::DeletionUnfinished { look_again });
    if ctx.ledger.is_running(&uid) {
        // The task's last status write wakes the next reconcile.
        ctx.ledger.cancel_deploy(
            &uid,
            "The deployment is being deleted: the deploy stopped after the steps in flight",
        );
        return unfinished(WHILE_DELETING);
    }
    let now = Instant::now();
    match ctx.ledger.outcome(&uid) {
        Some(Outcome::Deleted) => {
            ctx.ledger.clear_outcome(&uid);
            return Ok(Action::await_change());
        }
        Some(Outcome::DeleteRetry { at }) if at > now => return unfinished(at - now),
        _ => {}
    }
    let disposal = match deployment.spec.deletion_policy {
        DeletionPolicy::Delete => DiskDisposal::Delete,
        DeletionPolicy::Orphan => DiskDisposal::Orphan,
    };
    let status = announce(ctx, &deployment, disposal).await?;
    let Some(cancel) = ctx.ledger.start(&uid, TaskKind::Delete, &ctx.cancel) else {
        return unfinished(WHILE_DELETING);
    };
    spawn(ctx, deployment, disposal, status, cancel);
    unfinished(WHILE_DELETING)
}

/// Says the deletion runs (`Reconciling`, reason Deleting); the status as written.
async fn announce(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    disposal: DiskDisposal,
) -> Result<DeploymentStatus, DeploymentError> {
    let mut status = deployment.status.clone().unwrap_or_default();
    let message = format!(
        "Deleting: VMs deleted, disks {}",
        match disposal {
            DiskDisposal::Delete => "deleted",
            DiskDisposal::Orphan => "orphaned",
        }
    );
    deleting(&mut status, deployment.metadata.generation, &message);
    status.progress = None;
    write_status(&ctx.client, deployment, &status).await?;
    Ok(status)
}

/// The trio of a deployment being deleted: Reconciling (Deleting) with `message`.
fn deleting(status: &mut DeploymentStatus, generation: Option<i64>, message: &str) {
    set_trio(
        status,
        generation,
        (false, reasons::DELETING, message),
        (true, reasons::DELETING, message),
        (false, reasons::DELETING, ""),
    );
}

/// Starts the deletion as a tracked task; the ledger hears when it ends.
fn spawn(
    ctx: &Arc<DeploymentContext>,
    deployment: Arc<Deployment>,
    disposal: DiskDisposal,
    status: DeploymentStatus,
    cancel: CancellationToken,
) {
    let span = tracing::info_span!(
        "delete",
        namespace = %deployment.namespace().unwrap_or_default(),
        deployment = %deployment.name_any(),
    );
    let uid = deployment.uid().unwrap_or_default();
    ctx.spawn_tracked(uid, span, |ctx| async move {
        let outcome = run_delete(&ctx, &deployment, disposal, status, cancel).await;
        if let Err(e) = outcome {
            tracing::warn!(deployment = %deployment.name_any(), error = %e, "deleting");
        }
    });
}

/// Runs `Engine::delete_deployment`; on success records it (the next reconcile lets the
/// finalizer go), on failure says why and schedules a retry.
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
    ctx.left_behind.forget(&uid);
    // No owner: disks kept as orphans outlive the resource (ownerReferences would let the
    // garbage collector drop their records and leak them in the cloud).
    let store = Arc::new(KubeStore::new(ctx.client.clone(), &namespace, &name, None));
    let recorder = TaskRecorder::new(Arc::new(DeployProgress::new()));
    let recorder = Arc::new(recorder);
    let mut task = TaskSummary {
        id: task_id(),
        state: TaskState::Processing,
        description: "delete deployment".into(),
        started: Some(now()),
        ..TaskSummary::default()
    };
    let mut engine = ctx.engine(store.clone(), &namespace, recorder.clone(), cancel);
    engine.named_clouds = ctx.named_clouds(&namespace).await?;
    // The state `ConfigMap` and the deployed spec have no owner: they go with the
    // deletion's success.
    let deleted = async {
        let report =
            (engine.delete_deployment(&name, disposal).await).map_err(|e| e.to_string())?;
        (store.forget_deployment_state().await).map_err(|e| e.to_string())?;
        (DeployedSpec::new(ctx.client.clone(), &namespace, &name).forget())
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(report)
    }
    .instrument(recorder.span())
    .await;
    task.finished = Some(now());
    task.state = match &deleted {
        Ok(_) => TaskState::Succeeded,
        Err(e) => {
            task.error = Some(e.clone());
            TaskState::Failed
        }
    };
    // Not owned: it would go with the deployment it tells of.
    keep_history(ctx, deployment, Some(&task), &recorder, &[], false).await;
    match deleted {
        Ok(report) => {
            let note = format!(
                "Deleted {} instance(s); {} disk(s) deleted, {} orphaned",
                report.instances.len(),
                report.disks_deleted.len(),
                report.disks_orphaned.len()
            );
            publish(ctx, deployment, EventType::Normal, "Deleted", note).await;
            ctx.ledger.reset_backoff(&uid);
            ctx.ledger.set_outcome(&uid, Outcome::Deleted);
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
            ctx.ledger.set_outcome(&uid, Outcome::DeleteRetry { at });
            deleting(&mut status, deployment.metadata.generation, &message);
            write_status(&ctx.client, deployment, &status).await?;
        }
    }
    Ok(())
}
