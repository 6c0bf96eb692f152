//! What the agents say between deploys: each `Instance`'s `processState` (the State column of
//! `kubectl get instances`) and its deployment's `ready`/`failing` counters follow the
//! agents' heartbeats, as BOSH's health monitor follows them. An agent silent for longer than
//! the agent timeout (the health monitor's `agent_timeout`, 60 s) makes its instance
//! `Unresponsive`; one reporting `failing` (or `stopped` jobs that should run) makes it
//! `Failing`; each change is one status write and one Event (`AgentUnresponsive`,
//! `JobsFailing`, `InstanceRecovered`), never one per heartbeat.
//!
//! A deployment whose deploy or deletion runs is left to that task (it stops and starts
//! jobs on purpose, and writes every status when it ends), and so is an instance whose last
//! update did not complete. Only heartbeats sent after the deployment's last task ended
//! count (one sent while its jobs were being restarted says nothing about them now), and
//! silence counts only once a whole agent timeout passed since then.
//!
//! Silence is an agent's only while heartbeats can arrive ([`AgentHealth::silent_for`]):
//! while the message bus is unreachable no instance becomes `Unresponsive` (each keeps its
//! last known state) and each deployment with instances is told once, with an Event
//! `MessageBusUnreachable` naming the bus, and `MessageBusReachable` when it is back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use super::deployment::{DeploymentContext, publish_regarding, reasons, set_trio, write_status};
use super::resurrection::{RESURRECTION, RESURRECTION_MELTDOWN, Resurrection, Verdict};
use super::status::{self, Overwrite};
use crate::api::condition::{READY, STALLED};
use crate::api::{Deployment, DeploymentStatus, Instance, InstanceState, ProcessState};
use crate::left_behind::{self, RECORD_DIGEST};
use crate::state::{is_conflict, is_not_found};
use kubosh_engine::AgentHealth;
use kubosh_engine::state::InstanceRecord;

/// The heartbeats the controller hears, and how long an agent may be silent.
#[derive(Clone)]
pub struct HealthWatch {
    /// The heartbeats (the health monitor's ear on NATS).
    pub health: Arc<dyn AgentHealth>,
    /// How long an agent may be silent before its instance is `Unresponsive` (the health
    /// monitor's `agent_timeout`).
    pub agent_timeout: Duration,
    /// When listening began: silence means nothing before one timeout has passed.
    pub since: Instant,
}

impl HealthWatch {
    /// Heartbeats from `health`, listened to from now on.
    pub fn new(health: Arc<dyn AgentHealth>, agent_timeout: Duration) -> HealthWatch {
        HealthWatch {
            health,
            agent_timeout,
            since: Instant::now(),
        }
    }
}

/// The health monitor's `agent_timeout`.
pub const AGENT_TIMEOUT: Duration = Duration::from_secs(60);

/// What the heartbeats say of an instance that should run: `None` when they say nothing
/// new (not heard yet, a state in between, or the instance is not meant to run).
pub fn observed_state(
    desired: InstanceState,
    has_vm: bool,
    job_state: Option<&str>,
    proven_silent: bool,
) -> Option<ProcessState> {
    if desired != InstanceState::Started || !has_vm {
        return None;
    }
    match job_state {
        Some("running") => Some(ProcessState::Running),
        Some("failing" | "stopped") => Some(ProcessState::Failing),
        Some(_) => None,
        None if proven_silent => Some(ProcessState::Unresponsive),
        None => None,
    }
}

/// The Event of a change from `from` to `to`, if it is one worth telling.
fn transition(
    from: Option<ProcessState>,
    to: ProcessState,
    instance: &str,
    agent_timeout: Duration,
) -> Option<(EventType, &'static str, String)> {
    match to {
        ProcessState::Unresponsive => Some((
            EventType::Warning,
            "AgentUnresponsive",
            format!(
                "No heartbeat from the agent of {instance} for more than {}s",
                agent_timeout.as_secs()
            ),
        )),
        ProcessState::Failing => Some((
            EventType::Warning,
            "JobsFailing",
            format!("The agent of {instance} reports jobs that are not running"),
        )),
        ProcessState::Running
            if matches!(
                from,
                Some(ProcessState::Failing | ProcessState::Unresponsive)
            ) =>
        {
            Some((
                EventType::Normal,
                "InstanceRecovered",
                format!("The jobs of {instance} run again"),
            ))
        }
        _ => None,
    }
}

/// How often the instances are compared with the heartbeats: a twelfth of the agent
/// timeout, at most 5 s, so a silent agent is noticed (and resurrected) at most that long
/// after the timeout. A check reads the watch's cache and writes only what changed: its cost
/// is CPU, not API requests.
pub fn check_every(agent_timeout: Duration) -> Duration {
    (agent_timeout / 12).clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// Watches the `Instance`s (of `api`'s scope) until `shutdown`: counts them by state for
/// the metrics and, with heartbeats (`watch`), writes what the agents say changed and what
/// that makes of each of `deployments` (the deployment controller's cache).
pub async fn run(
    ctx: Arc<DeploymentContext>,
    api: Api<Instance>,
    deployments: Store<Deployment>,
    watch: Option<HealthWatch>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (store, writer) = ctx.left_behind.cache_writer();
    // Without their managed fields and records, the cached instances take a fraction of
    // the memory.
    let instances = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(slim);
    let reflect = reflector::reflector(writer, instances)
        .applied_objects()
        .for_each(|_| futures::future::ready(()));
    let check = async {
        let timeout = watch.as_ref().map_or(AGENT_TIMEOUT, |w| w.agent_timeout);
        let mut tick = tokio::time::interval(check_every(timeout));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut outage = false;
        // Besides the periodic checks, one where something can first be proven.
        let mut look_again: Option<Instant> = None;
        loop {
            match look_again {
                Some(at) => tokio::select! {
                    _ = tick.tick() => {}
                    () = tokio::time::sleep_until(at.into()) => {}
                },
                None => {
                    tick.tick().await;
                }
            }
            if let Some(watch) = &watch {
                let unreachable = watch.health.unreachable();
                if unreachable.is_some() != outage {
                    outage = unreachable.is_some();
                    tell_outage(&ctx, &store, &deployments, unreachable.as_deref(), watch).await;
                }
                look_again = check(&ctx, &store, &deployments, watch).await;
            }
            ctx.metrics.set_instances(&count_by_state(&store));
        }
    };
    tokio::select! {
        () = reflect => {}
        () = check => {}
        () = shutdown => {}
    }
}

/// Tells the deployments that have instances that heartbeats stopped arriving because the
/// message bus is unreachable (`unreachable` says why), or that they arrive again (`None`):
/// silence during an outage says nothing of the agents, so no instance is taken for
/// unresponsive (nor resurrected) because of it ([`AgentHealth::silent_for`]).
async fn tell_outage(
    ctx: &DeploymentContext,
    store: &Store<Instance>,
    deployments: &Store<Deployment>,
    unreachable: Option<&str>,
    watch: &HealthWatch,
) {
    let (kind, reason, note) = match unreachable {
        Some(why) => {
            tracing::warn!(%why, "no heartbeats can arrive: instance states are the last known");
            (
                EventType::Warning,
                "MessageBusUnreachable",
                format!(
                    "{why}. No heartbeat can arrive: instances keep their last known state, and \
                     none is taken for unresponsive or resurrected until heartbeats flow again"
                ),
            )
        }
        None => {
            tracing::info!("the message bus is reachable again: heartbeats can arrive");
            (
                EventType::Normal,
                "MessageBusReachable",
                format!(
                    "The message bus is reachable again: an agent not heard within the agent \
                     timeout ({} s, after the agents' own time to reconnect) is taken for \
                     unresponsive",
                    watch.agent_timeout.as_secs()
                ),
            )
        }
    };
    let owners: std::collections::BTreeSet<(String, String)> = store
        .state()
        .iter()
        .filter_map(|i| {
            let owner = i
                .owner_references()
                .iter()
                .find(|o| o.kind == "Deployment")?;
            Some((i.namespace().unwrap_or_default(), owner.name.clone()))
        })
        .collect();
    for (namespace, name) in owners {
        if let Some(deployment) = deployments.get(&ObjectRef::new(&name).within(&namespace)) {
            publish_about(ctx, &deployment, kind, reason, &note).await;
        }
    }
}

/// The instances in `store` by process state (`None` when no state is known yet).
fn count_by_state(store: &Store<Instance>) -> Vec<(String, i64)> {
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for instance in store.state() {
        let state = (instance.status.as_ref().and_then(|s| s.process_state))
            .map_or_else(|| "None".to_string(), |s| format!("{s:?}"));
        *counts.entry(state).or_default() += 1;
    }
    counts.into_iter().collect()
}

/// The annotation the cache keeps instead of an `Instance`'s record: whether its last update
/// completed (all the health watch needs of the record, which is most of the object).
const UPDATE_COMPLETED: &str = "kubosh.io/update-completed";

/// `instance` as the health watch caches it: no managed fields, its record reduced to
/// [`UPDATE_COMPLETED`] and its digest ([`RECORD_DIGEST`], for deploys that start from
/// what the last one left, [`LeftBehind`](crate::left_behind::LeftBehind)).
fn slim(instance: &mut Instance) {
    instance.managed_fields_mut().clear();
    let record = left_behind::digest_record(instance);
    let completed = (record.as_deref())
        .and_then(|text| serde_json::from_str::<InstanceRecord>(text).ok())
        .is_some_and(|r| r.update_completed);
    let annotations = instance.annotations_mut();
    annotations.retain(|k, _| k == RECORD_DIGEST);
    annotations.insert(UPDATE_COMPLETED.into(), completed.to_string());
}

/// What one check found of a deployment's instances.
#[derive(Debug, Default)]
struct DeploymentHealth {
    /// Its instances.
    total: usize,
    /// Instances whose agents are silent, by label.
    down: Vec<String>,
    /// Instances whose agents report jobs not running, by label.
    failing: Vec<String>,
    /// An instance's agent answered again after silence.
    recovered: bool,
    /// Its instances as the watch's cache has them.
    instances: Vec<Arc<Instance>>,
}

/// An instance as the health watch names it: `group/uuid (index)`.
fn label(instance: &Instance) -> String {
    format!(
        "{}/{} ({})",
        instance.spec.instance_group, instance.spec.id, instance.spec.index
    )
}

/// How many writes a check has in flight at once: a check that finds many instances
/// changed (agents that died together) writes them in a fraction of the time one by one
/// would take, without flooding the apiserver.
const CHECK_WRITES_AT_ONCE: usize = 32;

/// One comparison of every instance with its agent's heartbeats, then what each deployment
/// makes of it: its counters and conditions, and resurrection. Every instance is judged at
/// the check's instant, so instances that went down together settle together however long
/// the writes take. When to look again before the next periodic check, if ever: when an
/// agent still heard can first be proven silent, or when instances seen down have settled.
async fn check(
    ctx: &DeploymentContext,
    store: &Store<Instance>,
    deployments: &Store<Deployment>,
    watch: &HealthWatch,
) -> Option<Instant> {
    let now = Instant::now();
    let mut look_again: Option<Instant> = None;
    // By (namespace, name, uid) of the owning deployment.
    let mut found: BTreeMap<(String, String, String), DeploymentHealth> = BTreeMap::new();
    let mut states: BTreeMap<String, ProcessState> = BTreeMap::new();
    let mut changes = Vec::new();
    for instance in store.state() {
        let Some(owner) = instance
            .owner_references()
            .iter()
            .find(|o| o.kind == "Deployment")
        else {
            continue;
        };
        if ctx.ledger.is_running(&owner.uid) {
            continue;
        }
        let key = (
            instance.namespace().unwrap_or_default(),
            owner.name.clone(),
            owner.uid.clone(),
        );
        let health = found.entry(key.clone()).or_default();
        health.total += 1;
        health.instances.push(instance.clone());
        let current = instance.status.as_ref().and_then(|s| s.process_state);
        let quiet_since = quiet_since(ctx, owner, watch);
        let state = match observe(&instance, quiet_since, watch) {
            Some(next) => {
                if current != Some(next) {
                    changes.push((key, instance.clone(), owner.clone(), current, next));
                }
                Some(next)
            }
            None => current,
        };
        let Some(state) = state else { continue };
        if state != ProcessState::Unresponsive
            && let Some(at) = silent_from(&instance, quiet_since, watch)
            && at > now
        {
            look_again = Some(look_again.map_or(at, |earlier| earlier.min(at)));
        }
        states.insert(instance.name_any(), state);
        match state {
            ProcessState::Unresponsive => health.down.push(label(&instance)),
            ProcessState::Failing => health.failing.push(label(&instance)),
            _ => {}
        }
    }
    let written: Vec<_> = futures::stream::iter(changes)
        .map(|(key, instance, owner, current, next)| async move {
            let written = write_process_state(ctx, &instance, next).await;
            if written {
                publish_transition(ctx, &instance, &owner, current, next, watch).await;
            }
            let recovered =
                current == Some(ProcessState::Unresponsive) && next == ProcessState::Running;
            (key, written && recovered)
        })
        .buffer_unordered(CHECK_WRITES_AT_ONCE)
        .collect()
        .await;
    for (key, recovered) in written {
        if let Some(health) = found.get_mut(&key) {
            health.recovered |= recovered;
        }
    }
    let states = &states;
    let settling: Vec<bool> = futures::stream::iter(found)
        .map(|((namespace, name, uid), health)| async move {
            let reference = ObjectRef::<Deployment>::new(&name).within(&namespace);
            let deployment = deployments.get(&reference)?;
            if deployment.uid().as_deref() != Some(uid.as_str()) {
                return None;
            }
            let settling = resurrect(ctx, &deployment, &health, now).await;
            write_counters(ctx, &deployment, &health, states).await;
            Some(settling)
        })
        .buffer_unordered(CHECK_WRITES_AT_ONCE)
        .filter_map(futures::future::ready)
        .collect()
        .await;
    if settling.contains(&true) {
        let settled = now + ctx.resurrection.settle() + Duration::from_millis(1);
        look_again = Some(look_again.map_or(settled, |earlier| earlier.min(settled)));
    }
    look_again
}

/// When `instance`'s agent will be proven silent if nothing more is heard from it (and its
/// deployment's agents, quiet since `quiet_since`, have had the agent timeout to say
/// something).
fn silent_from(instance: &Instance, quiet_since: Instant, watch: &HealthWatch) -> Option<Instant> {
    let agent = instance.spec.agent_id.as_deref()?;
    instance.spec.vm_cid.as_ref()?;
    let heard = watch.health.silent_from(agent, watch.agent_timeout)?;
    // `observe` needs more than the timeout since the deployment's last deploy.
    let quiet = quiet_since + watch.agent_timeout + Duration::from_millis(1);
    Some(heard.max(quiet))
}

/// Since when the agents of `owner` have had to say something new: its last deploy's end,
/// or the watch's start.
fn quiet_since(
    ctx: &DeploymentContext,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    watch: &HealthWatch,
) -> Instant {
    match ctx.ledger.ended(&owner.uid) {
        Some(ended) => ended.max(watch.since),
        None => watch.since,
    }
}

/// What the heartbeats say of `instance` now, its deployment's agents having had since
/// `quiet_since` to say something new ([`quiet_since`]): `None` when they say nothing new,
/// or its last update did not complete (the next deploy's business).
fn observe(instance: &Instance, quiet_since: Instant, watch: &HealthWatch) -> Option<ProcessState> {
    let quiet = quiet_since.elapsed();
    let completed = instance
        .annotations()
        .get(UPDATE_COMPLETED)
        .map(String::as_str)
        == Some("true");
    let job_state = (instance.spec.agent_id.as_deref())
        .and_then(|agent| (watch.health).recent_job_state(agent, watch.agent_timeout.min(quiet)));
    // Silence is the agent's only when the heartbeats could have come (the bus was up for
    // the whole timeout, and others were heard); asked only of agents not heard.
    let silent = job_state.is_none()
        && quiet > watch.agent_timeout
        && (instance.spec.agent_id.as_deref())
            .is_some_and(|agent| (watch.health).silent_for(agent, watch.agent_timeout));
    observed_state(
        instance.spec.state,
        instance.spec.vm_cid.is_some(),
        job_state.as_deref(),
        silent,
    )
    .filter(|_| completed)
}

/// The Event of `instance` going from `current` to `next`, if it is one worth telling.
async fn publish_transition(
    ctx: &DeploymentContext,
    instance: &Instance,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    current: Option<ProcessState>,
    next: ProcessState,
    watch: &HealthWatch,
) {
    if let Some((kind, reason, note)) =
        transition(current, next, &label(instance), watch.agent_timeout)
    {
        let secondary = Some(owner_reference(instance, owner));
        publish_regarding(
            ctx,
            &instance.object_ref(&()),
            secondary,
            kind,
            reason,
            &note,
        )
        .await;
    }
}

/// The resurrector's part of a check: instances down are recreated by a deploy (the
/// deployment's reconcile is woken) unless resurrection is off or the deployment melts
/// down; a meltdown ends once every instance runs. Agents that answer again after a deploy
/// stalled on them make the deploy run again. Whether instances seen down are settling
/// (their repair is decided at a later check).
async fn resurrect(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    health: &DeploymentHealth,
    now: Instant,
) -> bool {
    let mut settling = false;
    let uid = deployment.uid().unwrap_or_default();
    let reference = ObjectRef::from_obj(deployment);
    let resurrection = &ctx.resurrection;
    let asked = resurrection.enabled()
        && deployment.spec.resurrection()
        && !deployment.spec.paused
        && deployment.metadata.deletion_timestamp.is_none();
    if asked && !health.down.is_empty() {
        match resurrection.down(&uid, &health.down, health.total, now) {
            Verdict::Repair { newly: true } => {
                tracing::info!(deployment = %deployment.name_any(), instances = ?health.down, "resurrecting: agents are silent");
                resurrection.wake(reference.clone());
            }
            Verdict::Meltdown {
                meltdown,
                newly: true,
            } => {
                ctx.metrics.melted_down();
                let note = resurrection.meltdown_message(meltdown);
                tracing::warn!(deployment = %deployment.name_any(), "{note}");
                publish_about(
                    ctx,
                    deployment,
                    EventType::Warning,
                    "ResurrectionStopped",
                    &note,
                )
                .await;
            }
            Verdict::Settling => settling = true,
            _ => {}
        }
    }
    if health.down.is_empty()
        && health.failing.is_empty()
        && let Some(meltdown) = resurrection.all_up(&uid)
    {
        let note = format!(
            "Resurrection resumed: every instance runs again (it stopped when {} of {} instances went down)",
            meltdown.down, meltdown.total
        );
        publish_about(
            ctx,
            deployment,
            EventType::Normal,
            "ResurrectionResumed",
            &note,
        )
        .await;
    }
    let stalled_on_agents = (deployment.status.as_ref())
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == STALLED))
        .is_some_and(|c| c.status == "True" && c.reason == reasons::DEPLOY_FAILED);
    if health.recovered && stalled_on_agents && resurrection.want(&uid) {
        resurrection.wake(reference);
    }
    settling
}

/// Publishes an Event regarding `deployment`.
async fn publish_about(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    kind: EventType,
    reason: &str,
    note: &str,
) {
    publish_regarding(ctx, &deployment.object_ref(&()), None, kind, reason, note).await;
}

fn owner_reference(
    instance: &Instance,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(owner.api_version.clone()),
        kind: Some(owner.kind.clone()),
        name: Some(owner.name.clone()),
        namespace: instance.namespace(),
        uid: Some(owner.uid.clone()),
        ..Default::default()
    }
}

/// Writes `state` (and the matching `Ready`) to the instance's status; whether it did.
async fn write_process_state(
    ctx: &DeploymentContext,
    instance: &Instance,
    state: ProcessState,
) -> bool {
    let (ready, reason) = match state {
        ProcessState::Running => (true, "Running"),
        ProcessState::Failing => (false, "JobsFailing"),
        ProcessState::Unresponsive => (false, "AgentUnresponsive"),
        ProcessState::Stopped => (true, "Stopped"),
        ProcessState::Unknown => (false, "Unknown"),
    };
    // Judged on the watch's copy: a deploy that wrote the instance since knows better (the
    // next check judges it again).
    let overwrite = Overwrite::IfUnchanged;
    match status::write_instance_state(&ctx.client, instance, state, ready, reason, overwrite).await
    {
        Ok(()) => true,
        Err(e) if is_conflict(&e) => {
            tracing::debug!(instance = %instance.name_any(), "written since the check read it");
            false
        }
        Err(e) => {
            tracing::warn!(instance = %instance.name_any(), error = %e, "cannot write the instance's state");
            false
        }
    }
}

/// Rewrites the `ready` and `failing` counters of `deployment` from its instances' states
/// (the other counters are the last deploy's), and its conditions from what the check found
/// ([`health_trio`]), written only when something changed. Written from the cache's copy if
/// it is still the current one (no read); else (a task may have written since the cache
/// saw it) read fresh and judged again.
async fn write_counters(
    ctx: &DeploymentContext,
    deployment: &Deployment,
    health: &DeploymentHealth,
    states: &BTreeMap<String, ProcessState>,
) {
    let uid = deployment.uid().unwrap_or_default();
    let repairing = ctx.resurrection.wanted(&uid);
    let next = |deployment: &Deployment| {
        let mut status = deployment.status.clone().unwrap_or_default();
        count_ready(&mut status, &health.instances, states);
        let why_not = (!repairing)
            .then(|| {
                (ctx.resurrection).not_resurrected_because(&uid, deployment.spec.resurrection())
            })
            .flatten();
        health_trio(&mut status, health, why_not);
        resurrection_condition(&mut status, &ctx.resurrection, &uid);
        status
    };
    let status = next(deployment);
    // A task running writes every counter when it ends.
    if deployment.status.as_ref() == Some(&status) || ctx.ledger.is_running(&uid) {
        return;
    }
    let name = deployment.name_any();
    let cached_version = deployment.resource_version();
    match status::apply_status_if(&ctx.client, deployment, &status, cached_version.as_deref()).await
    {
        Ok(()) => return,
        Err(e) if is_conflict(&e) => {}
        Err(e) if is_not_found(&e) => return,
        Err(e) => {
            tracing::warn!(deployment = %name, error = %e, "cannot write the counters");
            return;
        }
    }
    let api: Api<Deployment> = Api::namespaced(
        ctx.client.clone(),
        &deployment.namespace().unwrap_or_default(),
    );
    let fresh = match api.get_opt(&name).await {
        Ok(Some(d)) if d.uid().as_deref() == Some(uid.as_str()) => d,
        Ok(_) => return,
        Err(e) => {
            tracing::warn!(deployment = %name, error = %e, "cannot read the deployment");
            return;
        }
    };
    let status = next(&fresh);
    // A task started meanwhile writes every counter when it ends.
    if fresh.status.as_ref() == Some(&status) || ctx.ledger.is_running(&uid) {
        return;
    }
    if let Err(e) = write_status(&ctx.client, &fresh, &status).await {
        tracing::warn!(deployment = %name, error = %e, "cannot write the counters");
    }
}

/// The `ready` and `failing` counters of `status` from the instances' states.
fn count_ready(
    status: &mut DeploymentStatus,
    instances: &[Arc<Instance>],
    states: &BTreeMap<String, ProcessState>,
) {
    for group in &mut status.instance_groups {
        let of_group = || {
            (instances.iter())
                .filter(|i| i.spec.instance_group == group.name)
                .filter_map(|i| states.get(&i.name_any()))
        };
        group.ready = i32::try_from(of_group().filter(|s| **s == ProcessState::Running).count())
            .unwrap_or(i32::MAX);
        group.failing = i32::try_from(
            of_group()
                .filter(|s| matches!(s, ProcessState::Failing | ProcessState::Unresponsive))
                .count(),
        )
        .unwrap_or(i32::MAX);
    }
    let ready: i32 = status.instance_groups.iter().map(|g| g.ready).sum();
    status.ready_instances = Some(ready);
    if let Some(desired) = status.desired_instances {
        status.instances = Some(format!("{ready}/{desired}"));
    }
}

/// Condition reasons the health watch writes.
const INSTANCES_UNHEALTHY: &str = "InstancesUnhealthy";
const RESURRECTING: &str = "Resurrecting";
const JOBS_FAILING: &str = "JobsFailing";

/// The kstatus trio of a deployment whose last deploy succeeded, from its instances now:
/// `Ready` only while every instance runs; instances down are being resurrected
/// (`Reconciling`) or, when they will not be (`why_not`: resurrection off, meltdown) or
/// only their jobs fail (monit's business), `Stalled` says so. A deployment whose last
/// deploy did not succeed keeps what that deploy said.
fn health_trio(
    status: &mut DeploymentStatus,
    health: &DeploymentHealth,
    why_not: Option<(&str, String)>,
) {
    let ready = status.conditions.iter().find(|c| c.type_ == READY);
    let after_success =
        ready.is_some_and(|c| c.reason == reasons::DEPLOYED || c.reason == INSTANCES_UNHEALTHY);
    if !after_success {
        return;
    }
    let generation = status.observed_generation;
    if health.down.is_empty() && health.failing.is_empty() {
        if ready.is_some_and(|c| c.reason == INSTANCES_UNHEALTHY) {
            let message = "Every instance runs again";
            set_trio(
                status,
                generation,
                (true, reasons::DEPLOYED, message),
                (false, reasons::DEPLOYED, ""),
                (false, reasons::DEPLOYED, ""),
            );
        }
        return;
    }
    let mut unhealthy: Vec<String> = (health.down.iter())
        .map(|i| format!("{i} (agent unresponsive)"))
        .collect();
    unhealthy.extend(health.failing.iter().map(|i| format!("{i} (jobs failing)")));
    let message = format!(
        "{} of {} instance(s) not running: {}",
        unhealthy.len(),
        health.total,
        unhealthy.join(", ")
    );
    let ready = (false, INSTANCES_UNHEALTHY, message.as_str());
    match why_not {
        Some((reason, why)) if !health.down.is_empty() => {
            let stalled = format!("{message}; not resurrected: {why}");
            set_trio(
                status,
                generation,
                ready,
                (false, reason, ""),
                (true, reason, &stalled),
            );
        }
        _ if !health.down.is_empty() => {
            let doing = format!(
                "Recreating the VMs of instances whose agents are silent: {}",
                health.down.join(", ")
            );
            set_trio(
                status,
                generation,
                ready,
                (true, RESURRECTING, &doing),
                (false, RESURRECTING, ""),
            );
        }
        _ => {
            let stalled = format!(
                "{message}; their agents restart failing jobs (monit), kubosh does not recreate them"
            );
            set_trio(
                status,
                generation,
                ready,
                (false, JOBS_FAILING, ""),
                (true, JOBS_FAILING, &stalled),
            );
        }
    }
}

/// The `Resurrection` condition of deployment `uid`: `False` with why in a meltdown, `True`
/// again once it ended (absent until a deployment's first meltdown).
pub(crate) fn resurrection_condition(
    status: &mut DeploymentStatus,
    resurrection: &Resurrection,
    uid: &str,
) {
    let meltdown = (resurrection.meltdown(uid)).map(|m| resurrection.meltdown_message(m));
    let generation = status.observed_generation;
    let present = status.conditions.iter().any(|c| c.type_ == RESURRECTION);
    let condition = match meltdown {
        Some(message) => status::condition(
            RESURRECTION,
            false,
            RESURRECTION_MELTDOWN,
            &message,
            generation,
        ),
        None if present => status::condition(
            RESURRECTION,
            true,
            "Resumed",
            "Resurrection runs: instances that lose their agent or VM are recreated",
            generation,
        ),
        None => return,
    };
    status::set_condition(&mut status.conditions, condition);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_say_running_failing_or_nothing_and_silence_is_unresponsive() {
        use InstanceState::{Started, Stopped};
        use ProcessState::{Failing, Running, Unresponsive};
        assert_eq!(
            observed_state(Started, true, Some("running"), false),
            Some(Running)
        );
        assert_eq!(
            observed_state(Started, true, Some("failing"), true),
            Some(Failing)
        );
        assert_eq!(
            observed_state(Started, true, Some("stopped"), true),
            Some(Failing)
        );
        assert_eq!(observed_state(Started, true, Some("starting"), true), None);
        assert_eq!(
            observed_state(Started, true, None, false),
            None,
            "not listened long enough to say"
        );
        assert_eq!(
            observed_state(Started, true, None, true),
            Some(Unresponsive)
        );
        assert_eq!(
            observed_state(Stopped, true, None, true),
            None,
            "stopped on purpose"
        );
        assert_eq!(observed_state(Started, false, None, true), None, "no VM");
    }

    #[test]
    fn the_cache_keeps_only_whether_the_update_completed_and_the_record_digest() {
        let mut instance = Instance::new("web-0", Default::default());
        let record = serde_json::json!({"group": "web", "index": 0, "uuid": "u",
                                        "update_completed": true, "applied": {"stemcell": "s/1"}});
        (instance.annotations_mut())
            .insert(crate::api::RECORD_ANNOTATION.into(), record.to_string());
        instance
            .annotations_mut()
            .insert("other".into(), "x".into());
        instance.metadata.managed_fields = Some(vec![Default::default()]);
        slim(&mut instance);
        assert_eq!(
            instance.annotations().clone(),
            [
                (UPDATE_COMPLETED.to_string(), "true".to_string()),
                (
                    RECORD_DIGEST.to_string(),
                    left_behind::record_digest(&record.to_string())
                )
            ]
            .into()
        );
        assert!(instance.managed_fields().is_empty());
        let mut unreadable = Instance::new("web-1", Default::default());
        slim(&mut unreadable);
        assert_eq!(unreadable.annotations()[UPDATE_COMPLETED], "false");
    }

    #[test]
    fn only_changes_worth_telling_are_events() {
        let t = Duration::from_secs(60);
        let (kind, reason, note) = transition(
            Some(ProcessState::Running),
            ProcessState::Unresponsive,
            "web/u (0)",
            t,
        )
        .unwrap();
        assert_eq!((kind, reason), (EventType::Warning, "AgentUnresponsive"));
        assert_eq!(
            note,
            "No heartbeat from the agent of web/u (0) for more than 60s"
        );
        assert_eq!(
            transition(
                Some(ProcessState::Unresponsive),
                ProcessState::Running,
                "w",
                t
            )
            .map(|e| e.1),
            Some("InstanceRecovered")
        );
        assert_eq!(
            transition(Some(ProcessState::Unknown), ProcessState::Running, "w", t),
            None,
            "running after a deploy is no news"
        );
        assert_eq!(check_every(Duration::from_secs(60)), Duration::from_secs(5));
        assert_eq!(check_every(Duration::from_secs(2)), Duration::from_secs(1));
    }
}
