//! Each `Instance`'s processes and vitals (`bosh instances --ps --vitals`, kept in its
//! status): every interval ([`DEFAULT_INTERVAL`] unless the controller is told otherwise),
//! each instance with a VM whose deployment runs no task is asked `get_state ["full"]` (at
//! most the engine's `get_state_concurrency` at once, each once for at most 10 s; an agent
//! its heartbeats prove silent is not asked), and its `status.processes` and
//! `status.vitals` are written when what it said differs from what they hold: one
//! server-side apply under the field manager [`FIELD_MANAGER`], so the health watch's
//! writes of the process state (field manager `kubosh`) never touch them.
//!
//! Cost: per interval, one agent request per instance with a VM and at most one status
//! write per instance (its uptimes change each time, so in practice one): `N / interval`
//! writes per second, 8.3/s for 1,000 instances at the default 2 minutes. An agent that
//! does not answer keeps what it last said (its `processState` tells it is unresponsive).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use super::deployment::DeploymentContext;
use crate::api::{Instance, InstanceVitals, Process};
use kubosh_engine::instances::AgentDetails;

/// How often the details are refreshed by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(120);

/// The field manager of `status.processes` and `status.vitals`.
pub const FIELD_MANAGER: &str = "kubosh-details";

/// Refreshes the details every `interval` until `shutdown` completes.
pub async fn run(
    ctx: Arc<DeploymentContext>,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = tick.tick() => refresh(&ctx).await,
            () = &mut shutdown => return,
        }
    }
}

/// One refresh of every instance the watch has.
async fn refresh(ctx: &DeploymentContext) {
    let asks = (ctx.left_behind.watched_instances().into_iter())
        .filter(|i| i.spec.vm_cid.is_some() && i.metadata.deletion_timestamp.is_none())
        .filter(|i| {
            // A deployment's task stops and starts jobs on purpose and writes every status
            // when it ends.
            let owners = i.owner_references();
            !owners.iter().any(|o| ctx.ledger.is_running(&o.uid))
        })
        .filter_map(|i| {
            let agent = i.spec.agent_id.clone()?;
            Some(async move {
                let name = format!("{}/{}", i.spec.instance_group, i.spec.id);
                let said = ctx.engine.agent_details(&agent, &name).await;
                (i, said)
            })
        });
    let concurrency = ctx.engine.config.get_state_concurrency.max(1);
    let mut answers = futures::stream::iter(asks).buffer_unordered(concurrency);
    while let Some((instance, said)) = answers.next().await {
        let Some(said) = said else { continue };
        let (processes, vitals) = status_of(&said);
        let status = instance.status.as_ref();
        let unchanged = status.is_some_and(|s| s.processes == processes && s.vitals == vitals);
        if unchanged {
            continue;
        }
        if let Err(e) = write(&ctx.client, &instance, &processes, vitals.as_ref()).await {
            tracing::debug!(instance = %instance.name_any(), error = %e, "cannot write the instance's processes and vitals");
        }
    }
}

/// The status's processes (sorted by name) and vitals of what an agent said.
fn status_of(said: &AgentDetails) -> (Vec<Process>, Option<InstanceVitals>) {
    let mut processes: Vec<Process> = said.processes.iter().map(Process::from).collect();
    processes.sort_by(|a, b| a.name.cmp(&b.name));
    processes.dedup_by(|a, b| a.name == b.name);
    (processes, said.vitals.as_ref().map(InstanceVitals::from))
}

/// Writes `processes` and `vitals` to `instance`'s status under [`FIELD_MANAGER`].
async fn write(
    client: &kube::Client,
    instance: &Instance,
    processes: &[Process],
    vitals: Option<&InstanceVitals>,
) -> Result<(), kube::Error> {
    let api: Api<Instance> =
        Api::namespaced(client.clone(), &instance.namespace().unwrap_or_default());
    let mut status = serde_json::json!({"processes": processes});
    if let Some(vitals) = vitals {
        status["vitals"] = serde_json::json!(vitals);
    }
    let patch = serde_json::json!({
        "apiVersion": "kubosh.io/v1alpha1",
        "kind": "Instance",
        "status": status,
    });
    api.patch_status(
        &instance.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(|_| ())
}
