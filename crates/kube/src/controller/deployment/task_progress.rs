//! A running deploy's progress, told as it comes: its milestones as Events (regarding the
//! `Instance` where one applies) and its stage and count in `status.progress`.

use std::sync::Arc;
use std::time::Duration;

use kube::Resource;
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

use super::super::inputs::Inputs;
use super::super::progress::{DeployProgress, Milestone, RESURRECTED};
use super::super::status;
use super::DeploymentContext;
use super::deploy_task::Announcement;
use super::report::{publish, publish_regarding, reasons, write_status};
use crate::api::condition::{RECONCILING, STALLED};
use crate::api::{Deployment, DeploymentStatus, Progress};
use crate::state::KubeStore;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use kubosh_engine::PlanSummary;

/// How often a running deploy's stage is written to the status (its milestones are
/// published as Events as they come). A deploy shorter than this (a resurrection's repair,
/// a one-instance update) writes no progress: its start and its end say all of it, and each
/// write of the `Deployment`'s status is one of the apiserver's costliest requests (a patch
/// of the whole object through its schema).
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// How often a running deploy's count within a stage is written to the status, at most; a
/// new stage is written at the next [`PROGRESS_EVERY`]. Every write is paid from the request
/// budget all deployments share.
const PROGRESS_COUNT_EVERY: Duration = Duration::from_secs(10);

/// Writes a running deploy's progress until stopped.
pub(super) struct ProgressWriter {
    stop: watch::Sender<bool>,
    writer: JoinHandle<()>,
    store: Arc<KubeStore>,
    inputs: Arc<Inputs>,
    progress: Arc<DeployProgress>,
    /// Whether the deploy said it started (a quiet one says so at its first change).
    announced: Arc<std::sync::atomic::AtomicBool>,
}

impl ProgressWriter {
    /// Starts telling what `progress` hears of the deploy of `deployment`, writing into
    /// `status` (the task's status, shared with it). A deploy that starts quietly
    /// (`quiet`: its announcement, not made yet) is told from its first stage that changes
    /// something; "Preparing deployment" only reads.
    pub(super) fn start(
        ctx: &DeploymentContext,
        deployment: &Deployment,
        store: Arc<KubeStore>,
        inputs: Arc<Inputs>,
        progress: Arc<DeployProgress>,
        status: Arc<Mutex<DeploymentStatus>>,
        quiet: Option<Announcement>,
    ) -> ProgressWriter {
        let (stop, stopped) = watch::channel(false);
        let announced = Arc::new(std::sync::atomic::AtomicBool::new(quiet.is_none()));
        let task = Task {
            ctx: ctx.clone(),
            deployment: deployment.clone(),
            store: store.clone(),
            inputs: inputs.clone(),
            progress: progress.clone(),
            status,
            quiet,
            announced: announced.clone(),
        };
        let writer = tokio::spawn(report_progress(task, stopped));
        ProgressWriter {
            stop,
            writer,
            store,
            inputs,
            progress,
            announced,
        }
    }

    /// Stops writing, then publishes the milestones not told yet; whether the deploy said
    /// it started.
    pub(super) async fn stop(self, ctx: &DeploymentContext, deployment: &Deployment) -> bool {
        let _ = self.stop.send(true);
        let _ = self.writer.await;
        for m in self.progress.drain() {
            publish_milestone(ctx, deployment, &self.store, &self.inputs, m).await;
        }
        self.announced.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// What the progress task works with.
struct Task {
    ctx: DeploymentContext,
    deployment: Deployment,
    store: Arc<KubeStore>,
    inputs: Arc<Inputs>,
    progress: Arc<DeployProgress>,
    status: Arc<Mutex<DeploymentStatus>>,
    quiet: Option<Announcement>,
    announced: Arc<std::sync::atomic::AtomicBool>,
}

/// The stage that only reads (a quiet deploy says nothing of it).
const PREPARING: &str = "Preparing deployment";

/// Publishes milestones as they come and writes the running stage to the status (a new
/// stage at the next [`PROGRESS_EVERY`] tick, its count at most every
/// [`PROGRESS_COUNT_EVERY`]), until `stop`.
async fn report_progress(task: Task, mut stop: watch::Receiver<bool>) {
    let Task {
        ctx,
        deployment,
        store,
        inputs,
        progress,
        status,
        quiet,
        announced,
    } = task;
    // The first tick one period in, not at once: a deploy that ends before it writes none.
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut written: Option<(String, tokio::time::Instant)> = None;
    let mut pending: Option<Progress> = None;
    let mut plan: Option<PlanSummary> = None;
    loop {
        let ticked = tokio::select! {
            _ = tick.tick() => true,
            () = progress.news() => false,
            _ = stop.changed() => return,
        };
        let mut milestones = progress.drain();
        if let Some(p) = progress.take_progress() {
            pending = Some(p);
        }
        let planned = progress.take_plan();
        let silent = !announced.load(std::sync::atomic::Ordering::SeqCst);
        let changing = planned.as_ref().is_some_and(PlanSummary::changes_anything)
            || pending
                .as_ref()
                .is_some_and(|p| !p.stage.starts_with(PREPARING));
        if silent && !changing {
            // Nothing yet, or still only reading: what it heard waits until it changes
            // something (or is told at the end).
            progress.requeue(std::mem::take(&mut milestones));
            pending = None;
            continue;
        }
        if silent && let Some(announcement) = &quiet {
            let mut s = status.lock().await;
            announcement.apply(&mut s);
            announced.store(true, std::sync::atomic::Ordering::SeqCst);
            announcement.publish(&ctx, &deployment).await;
        }
        if let Some(planned) = planned {
            tell_plan(&ctx, &deployment, &planned).await;
            plan = Some(planned);
        }
        for m in milestones {
            publish_milestone(&ctx, &deployment, &store, &inputs, m).await;
        }
        let due = |p: &Progress| match &written {
            Some((stage, at)) => stage != &p.stage || at.elapsed() >= PROGRESS_COUNT_EVERY,
            None => true,
        };
        // The plan is said in the condition until the first stage that changes something.
        let first = written.is_none() && plan.is_some();
        if let Some(p) = pending.take_if(|p| ticked && (due(p) || first)) {
            written = Some((p.stage.clone(), tokio::time::Instant::now()));
            let mut s = status.lock().await;
            let doing = match (&plan, p.stage.starts_with(PREPARING)) {
                (Some(plan), true) => plan.to_string(),
                _ => p.message.clone(),
            };
            let message = format!(
                "Deploying generation {}: {doing}",
                s.observed_generation.unwrap_or_default(),
            );
            let generation = s.observed_generation;
            // A repair while the newest generation cannot deploy (its status says it is
            // stalled) leaves the conditions saying so.
            let stalled = (s.conditions.iter()).any(|c| c.type_ == STALLED && c.status == "True");
            if !stalled {
                status::set_condition(
                    &mut s.conditions,
                    status::condition(RECONCILING, true, reasons::DEPLOYING, &message, generation),
                );
            }
            s.progress = Some(p);
            if let Some(rollout) = progress.rollout() {
                super::instances::count_rollout(&mut s, &rollout);
            }
            if let Err(e) = write_status(&ctx.client, &deployment, &s).await {
                tracing::debug!(error = %e, "cannot write progress");
            }
        }
    }
}

/// Says what the deploy will change: the `DeployPlanned` Event and the log. Told only of a
/// deploy that said it started.
async fn tell_plan(ctx: &DeploymentContext, deployment: &Deployment, plan: &PlanSummary) {
    let note = format!(
        "Generation {}: {plan}",
        deployment.metadata.generation.unwrap_or_default()
    );
    tracing::info!(deployment = %deployment.name_any(), "planned: {note}");
    publish(ctx, deployment, EventType::Normal, "DeployPlanned", note).await;
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
    if m.reason == RESURRECTED {
        ctx.metrics.resurrected();
    }
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
