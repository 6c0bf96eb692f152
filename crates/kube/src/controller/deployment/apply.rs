//! The reconcile of a `Deployment` that is not being deleted: short, it reads the inputs,
//! writes what stops them (waiting for a release, an invalid manifest: zero cloud calls),
//! and otherwise starts a deploy task unless the same generation and inputs were already
//! deployed (or failed for good, or wait for their retry) and the resurrector asks for
//! nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use super::super::inputs::{Inputs, Unready};
use super::super::requests::{ActionRequest, Handled, Pending, Requested};
use super::super::status;
use super::deploy_task::{self, DeployTask};
use super::ledger::{Attempt, InputsKey, Outcome, TaskKind};
use super::report::{publish, reasons, set_trio, write_status};
use super::{DeploymentContext, DeploymentError, RESYNC};
use crate::api::{Deployment, DeploymentStatus};
use crate::deployed_spec::DeployedSpec;
use crate::state::KubeStore;

/// How soon a deployment with a new generation or request is looked at again while its
/// previous task runs.
const WAIT_FOR_TASK: Duration = Duration::from_secs(5);

/// How soon a deployment is looked at again when its task was started by another
/// reconcile in between.
const TASK_STARTED_ELSEWHERE: Duration = Duration::from_secs(30);

/// Reconciles one `Deployment` that carries its finalizer and is not being deleted.
pub(super) async fn reconcile(
    ctx: &Arc<DeploymentContext>,
    deployment: Arc<Deployment>,
) -> Result<Action, DeploymentError> {
    let uid = deployment.uid().unwrap_or_default();
    let generation = deployment.metadata.generation.unwrap_or_default();
    let namespace = deployment.namespace().unwrap_or_default();
    let counter = ctx.inputs.counter(&namespace);
    if ctx.ledger.is_running(&uid) {
        return Ok(while_running(ctx, &deployment, &uid, generation, counter));
    }
    // Deployed, nothing asked, no input changed and read recently: nothing to read again.
    let repair = ctx.resurrection.wanted(&uid);
    if let Some(Outcome::Deployed(attempt)) = ctx.ledger.outcome(&uid)
        && attempt.generation == generation
        && !deployment.spec.paused
        && !repair
        && Pending::of(&deployment).is_empty()
        && let Some(age) = ctx.ledger.inputs_unchanged_for(&uid, counter)
        && age < RESYNC
    {
        return Ok(Action::requeue(RESYNC - age));
    }
    ctx.ledger.reading_inputs(&uid, counter);
    let mut status = deployment.status.clone().unwrap_or_default();
    Handled::of(&deployment).fill(&mut status);
    let inputs = match read_inputs(ctx, &deployment, counter, &status).await? {
        Ok(inputs) => inputs,
        Err(unready) => {
            let invalid = matches!(unready, Unready::Invalid { .. });
            let action = report_unready(ctx, &deployment, status, unready).await?;
            let cck = cck_request(&deployment);
            if invalid && (repair || cck.is_some()) && !deployment.spec.paused {
                return repair_from_deployed(ctx, &deployment, counter, cck, action).await;
            }
            return Ok(action);
        }
    };
    if deployment.spec.paused {
        return report_paused(ctx, &deployment, status).await;
    }
    let pending = Pending::of(&deployment);
    if pending.reconcile.is_some()
        && let Some(meltdown) = ctx.resurrection.resume(&uid)
    {
        let note = format!(
            "Resurrection resumed as asked (it stopped when {} of {} instances went down)",
            meltdown.down, meltdown.total
        );
        publish(
            ctx,
            &deployment,
            EventType::Normal,
            "ResurrectionResumed",
            note,
        )
        .await;
    }
    if let Some(ActionRequest {
        value,
        parsed: Err(message),
    }) = &pending.action
    {
        return acknowledge_invalid_action(ctx, &deployment, status, value, message).await;
    }
    let links = consumed_links(ctx, &namespace, &inputs).await?;
    let attempt = Attempt {
        generation,
        inputs: InputsKey::of(&inputs, links),
    };
    let outcome = ctx.ledger.outcome(&uid);
    if !repair && let Some(action) = already_decided(outcome.clone(), &attempt, &pending) {
        // The same content deployed: a runtime config's new version (a label) is the one
        // deployed now.
        if matches!(outcome, Some(Outcome::Deployed(_))) {
            deploy_task::name_runtime_configs(ctx, &deployment, &status, &inputs).await;
        }
        return Ok(action);
    }
    let Some(cancel) = ctx.ledger.start(&uid, TaskKind::Deploy, &ctx.cancel) else {
        return Ok(Action::requeue(TASK_STARTED_ELSEWHERE));
    };
    let task = DeployTask {
        deployment,
        inputs,
        attempt,
        pending,
        cancel,
        repair_of: None,
    };
    deploy_task::spawn(ctx, task);
    Ok(Action::requeue(RESYNC))
}

/// The deployment's pending `cck` or `resolve` request, if it has one.
fn cck_request(deployment: &Deployment) -> Option<Pending> {
    let pending = Pending::of(deployment);
    let asked = pending.action.as_ref()?.parsed.as_ref().ok()?;
    (!matches!(asked, Requested::Instance(..))).then_some(pending)
}

/// Instances that lost their agent or VM while the newest generation does not validate:
/// recreated from the spec of the generation deployed last, as BOSH's resurrector and cck
/// recreate from what is deployed (the status keeps saying why the newest cannot deploy);
/// a pending `cck` or `resolve` (`cck`) runs on that spec too. Nothing when no spec was kept
/// or it does not validate with today's inputs either; after a failed repair, the next
/// waits for the backoff. `action` is what the reconcile returns otherwise.
async fn repair_from_deployed(
    ctx: &Arc<DeploymentContext>,
    deployment: &Arc<Deployment>,
    counter: u64,
    cck: Option<Pending>,
    action: Action,
) -> Result<Action, DeploymentError> {
    let uid = deployment.uid().unwrap_or_default();
    let wait = ctx.ledger.repair_wait(&uid);
    if cck.is_none() && !wait.is_zero() {
        return Ok(Action::requeue(wait));
    }
    let namespace = deployment.namespace().unwrap_or_default();
    let kept = DeployedSpec::new(ctx.client.clone(), &namespace, &deployment.name_any());
    let (from, spec) = match kept.read(&uid).await {
        Ok(Some(kept)) => kept,
        Ok(None) => {
            let why = "Instances lost their agent or VM and cannot be recreated: the newest \
                generation does not validate, and no spec of a deployed generation is kept \
                (the last deploy was made by an earlier kubosh); they are recreated once a \
                generation that validates deploys";
            tell_repair_blocked(ctx, deployment, why.to_string()).await;
            return Ok(action);
        }
        Err(e) => {
            tracing::warn!(deployment = %deployment.name_any(), error = %e, "instances to repair");
            return Ok(action);
        }
    };
    let mut deployed = Deployment::clone(deployment);
    deployed.spec = spec;
    let inputs = match ctx.gather_inputs(&deployed, counter).await {
        Ok(Ok(inputs)) => inputs,
        Ok(Err(unready)) => {
            let why = format!(
                "Instances lost their agent or VM and cannot be recreated: the newest \
                 generation does not validate, and generation {from}, deployed last, cannot \
                 deploy either: {unready}"
            );
            tell_repair_blocked(ctx, deployment, why).await;
            return Ok(action);
        }
        Err(e) => return Err(e.into()),
    };
    let Some(cancel) = ctx.ledger.start(&uid, TaskKind::Deploy, &ctx.cancel) else {
        return Ok(Action::requeue(TASK_STARTED_ELSEWHERE));
    };
    let attempt = Attempt {
        generation: from,
        inputs: InputsKey::of(&inputs, None),
    };
    // A cck task says its own start and end, and touches only `Reconciling`.
    let repair_of = cck.is_none().then_some(from);
    let task = DeployTask {
        deployment: Arc::new(deployed),
        inputs,
        attempt,
        pending: cck.unwrap_or_default(),
        cancel,
        repair_of,
    };
    deploy_task::spawn(ctx, task);
    Ok(action)
}

/// Says (a Warning Event `RepairBlocked` and the log, once while it holds) why instances
/// to repair cannot be.
async fn tell_repair_blocked(ctx: &DeploymentContext, deployment: &Deployment, why: String) {
    let uid = deployment.uid().unwrap_or_default();
    if ctx.ledger.repair_blocked(&uid, &why) {
        tracing::warn!(deployment = %deployment.name_any(), "{why}");
        publish(ctx, deployment, EventType::Warning, "RepairBlocked", why).await;
    }
}

/// The digest of what the deployments `inputs` consume links from share (`None` when they
/// consume from none): read at every reconcile that reads the inputs, so a provider that
/// changed makes a new attempt.
async fn consumed_links(
    ctx: &DeploymentContext,
    namespace: &str,
    inputs: &Inputs,
) -> Result<Option<String>, DeploymentError> {
    let names = kubosh_core::links::consumed_deployments(&inputs.documents.document.0);
    if names.is_empty() {
        return Ok(None);
    }
    let registries = ctx.registries(namespace, ctx.locks(namespace));
    let shared = registries.link_registry().shared(&names).await?;
    Ok(Some(shared.digest()))
}

/// A reconcile while the deployment's task runs: a pause stops the deploy; nothing else is
/// read or written.
fn while_running(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    uid: &str,
    generation: i64,
    counter: u64,
) -> Action {
    if deployment.spec.paused {
        // The deploy finishes the instances in flight, then stops.
        ctx.ledger.cancel_deploy(
            uid,
            "spec.paused was set: the deploy stopped after the steps in flight",
        );
    }
    // The task triggers the next reconcile with its status write; the resync is only a
    // net (a shorter one would wake every deployment again once its deploy is done). A
    // new generation or request, or an input changed since the task read them, waits for
    // the task's end: that write may be seen before the task is marked finished, so look
    // again soon (no API call until then).
    let observed = deployment
        .status
        .as_ref()
        .and_then(|s| s.observed_generation);
    let inputs_changed = ctx.ledger.inputs_unchanged_for(uid, counter).is_none();
    if observed != Some(generation) || !Pending::of(deployment).is_empty() || inputs_changed {
        return Action::requeue(WAIT_FOR_TASK);
    }
    Action::requeue(RESYNC)
}

/// What the deployment deploys, or why it cannot yet; a failure to read is written to
/// `status` (as InputsUnavailable) and returned.
async fn read_inputs(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    counter: u64,
    status: &DeploymentStatus,
) -> Result<Result<Inputs, Unready>, DeploymentError> {
    match ctx.gather_inputs(deployment, counter).await {
        Ok(gathered) => Ok(gathered),
        Err(e) => {
            let message = format!("cannot read the deployment's inputs: {e}");
            let mut status = status.clone();
            set_trio(
                &mut status,
                Some(deployment.metadata.generation.unwrap_or_default()),
                (false, reasons::INPUTS_UNAVAILABLE, &message),
                (true, reasons::INPUTS_UNAVAILABLE, &message),
                (false, reasons::INPUTS_UNAVAILABLE, ""),
            );
            write_status(&ctx.client, deployment, &status).await?;
            Err(e.into())
        }
    }
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

/// Writes that the deployment is paused: nothing happens until `spec.paused` is unset.
async fn report_paused(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    mut status: DeploymentStatus,
) -> Result<Action, DeploymentError> {
    let message = "spec.paused is set: nothing is created, updated or deleted";
    let ready = status::is_ready(&status.conditions, status.observed_generation);
    set_trio(
        &mut status,
        Some(deployment.metadata.generation.unwrap_or_default()),
        (ready, reasons::PAUSED, message),
        (false, reasons::PAUSED, message),
        (false, reasons::PAUSED, ""),
    );
    write_status(&ctx.client, deployment, &status).await?;
    Ok(Action::await_change())
}

/// An action annotation that does not parse: said once (an Event) and acknowledged, so
/// there is nothing to retry.
async fn acknowledge_invalid_action(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    mut status: DeploymentStatus,
    value: &str,
    message: &str,
) -> Result<Action, DeploymentError> {
    publish(
        ctx,
        deployment,
        EventType::Warning,
        "InvalidAction",
        message.to_string(),
    )
    .await;
    status.last_handled_action = Some(value.to_string());
    write_status(&ctx.client, deployment, &status).await?;
    let namespace = deployment.namespace().unwrap_or_default();
    let store = KubeStore::new(ctx.client.clone(), &namespace, &deployment.name_any(), None);
    if let Err(e) = store
        .record_handled_requests(Handled::in_status(&status).to_annotation())
        .await
    {
        tracing::warn!(deployment = %deployment.name_any(), error = %e, "cannot record the handled action");
    }
    Ok(Action::await_change())
}

/// What to do when `attempt` was already made: nothing until a resync after it succeeded
/// or until a change after it stalled (unless something is asked), or wait for its retry.
fn already_decided(
    outcome: Option<Outcome>,
    attempt: &Attempt,
    pending: &Pending,
) -> Option<Action> {
    let now = Instant::now();
    match outcome? {
        Outcome::Deployed(done) if &done == attempt && pending.is_empty() => {
            Some(Action::requeue(RESYNC))
        }
        Outcome::Stalled(done) if &done == attempt && pending.is_empty() => {
            Some(Action::await_change())
        }
        Outcome::DeployRetry { attempt: done, at } if &done == attempt && at > now => {
            Some(Action::requeue(at - now))
        }
        _ => None,
    }
}
