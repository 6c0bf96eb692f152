//! The instances after a deploy, from the engine's records: the deployment's counters
//! (`instances`, `readyInstances`, per group) and each `Instance`'s state.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::Api;

use super::super::inputs::Inputs;
use super::super::status;
use super::DeploymentContext;
use crate::api::{DeploymentStatus, Instance, InstanceGroupStatus, ProcessState};
use crate::state::KubeStore;
use kubosh_engine::state::{DeploymentState, InstanceState};

/// Instance counters from the engine's records: desired from the manifest, up to date when
/// the last update completed, ready when up to date and started.
pub(super) fn count_instances(
    status: &mut DeploymentStatus,
    inputs: &Inputs,
    state: &DeploymentState,
) {
    let mut groups: BTreeMap<String, InstanceGroupStatus> = BTreeMap::new();
    let manifest = &inputs.documents.document.0;
    for g in manifest.instance_groups.iter().filter(|g| !g.is_errand()) {
        groups.insert(
            g.name.clone(),
            InstanceGroupStatus {
                name: g.name.clone(),
                desired: i32::try_from(g.instances.unwrap_or(0)).unwrap_or(i32::MAX),
                ..InstanceGroupStatus::default()
            },
        );
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
/// completed and it is started (only when `running_known`: the deploy succeeded, so it
/// watched every started instance run), `Stopped` when stopped or detached. Written only
/// where it changed.
pub(super) async fn write_instance_statuses(
    ctx: &DeploymentContext,
    namespace: &str,
    deployment: &str,
    state: &DeploymentState,
    running_known: bool,
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
            (InstanceState::Started, true) if !running_known => continue,
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
