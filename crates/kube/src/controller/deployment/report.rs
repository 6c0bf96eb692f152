//! How the reconciler tells what it does: the `Deployment`'s status (the kstatus trio,
//! `observedGeneration` on the status and on every condition, in one server-side apply
//! with field manager `kubosh`) and Events.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::runtime::events::{Event as KubeEvent, EventType};

use super::super::status;
use super::DeploymentContext;
use crate::api::{Deployment, DeploymentStatus};

/// Condition reasons of a `Deployment`.
pub(crate) mod reasons {
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

/// `message` cut to what a condition holds.
pub(super) fn clip(message: &str) -> String {
    kubosh_base::secret::excerpt(message, status::MAX_MESSAGE)
}

/// Sets the kstatus trio of a `Deployment` in one go.
pub(crate) fn set_trio(
    status: &mut DeploymentStatus,
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

/// Writes `status` as the deployment's whole status.
pub(crate) async fn write_status(
    client: &kube::Client,
    deployment: &Deployment,
    status: &DeploymentStatus,
) -> Result<(), kube::Error> {
    status::apply_status(client, deployment, status).await
}

/// Publishes an Event regarding the deployment.
pub(super) async fn publish(
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
        note: Some(kubosh_base::secret::excerpt(note, 1000)),
        action: "Deploy".into(),
        secondary,
    };
    ctx.publish(&event, regarding).await;
}

/// Now, in whole seconds (what the apiserver keeps of a time).
pub(super) fn now() -> Time {
    let ts = k8s_openapi::jiff::Timestamp::now();
    Time(k8s_openapi::jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}

/// Keeps `task` (as the status summarises it) with the log `recorder` kept, owned by the
/// deployment (`owned`; a deletion's is not, or it would go with the deployment), scrubbed
/// of `secrets`.
pub(super) async fn keep_history(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    task: Option<&crate::api::TaskSummary>,
    recorder: &crate::task_history::TaskRecorder,
    secrets: &[String],
    owned: bool,
) {
    use crate::api::TaskState;
    let Some(task) = task else { return };
    let seconds = |t: Option<&Time>| t.map_or(0, |t| t.0.as_second());
    let entry = crate::task_history::TaskEntry {
        id: task.id.clone(),
        description: task.description.clone(),
        deployment: kube::ResourceExt::name_any(deployment),
        state: match task.state {
            TaskState::Succeeded => "done",
            TaskState::Failed => "error",
            TaskState::Cancelled => "cancelled",
            TaskState::Queued => "queued",
            TaskState::Processing => "processing",
        }
        .into(),
        started_at: seconds(task.started.as_ref()),
        finished_at: seconds(task.finished.as_ref()),
        error: task.error.clone(),
    };
    let owner = owned
        .then(|| deployment.controller_owner_ref(&()))
        .flatten();
    let namespace = kube::ResourceExt::namespace(deployment).unwrap_or_default();
    crate::task_history::keep(
        &ctx.client,
        &namespace,
        owner,
        &entry,
        (&recorder.log(), &recorder.debug_log()),
        secrets,
    )
    .await;
}
