//! The instances during and after a deploy, from its plan and the engine's records: the deployment's counters
//! (`instances`, `readyInstances`, per group) and each `Instance`'s state.

use std::collections::BTreeMap;

use kube::ResourceExt;

use super::super::inputs::Inputs;
use super::super::progress::GroupRollout;
use super::super::status::{self, Overwrite};
use super::DeploymentContext;
use crate::api::{DeploymentStatus, Instance, InstanceGroupStatus, ProcessState};
use kubosh_engine::state::{InstanceRecord, InstanceState};

/// Instance counters from the engine's records: desired from the manifest, up to date when
/// the last update completed, ready when up to date and started.
pub(super) fn count_instances(
    status: &mut DeploymentStatus,
    inputs: &Inputs,
    instances: &[(InstanceRecord, Instance)],
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
    for (record, _) in instances {
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
    status.instance_groups = groups.into_values().collect();
    count_totals(status);
}

/// The status's instance counts as a rollout stands: the groups the manifest wants now (a
/// scale is counted from its plan, not from the end of the deploy), up to date as far as the
/// plan left them alone or the rollout updated them, ready and failing as last counted but
/// never more than wanted.
pub(super) fn count_rollout(status: &mut DeploymentStatus, rollout: &[GroupRollout]) {
    let before: BTreeMap<&str, &InstanceGroupStatus> = (status.instance_groups.iter())
        .map(|g| (g.name.as_str(), g))
        .collect();
    let to_i32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let groups = (rollout.iter())
        .filter(|g| g.desired > 0)
        .map(|g| {
            let desired = to_i32(g.desired);
            let last = before.get(g.group.as_str());
            InstanceGroupStatus {
                name: g.group.clone(),
                desired,
                ready: last.map_or(0, |l| l.ready.min(desired)),
                up_to_date: to_i32(g.up_to_date),
                failing: last.map_or(0, |l| l.failing.min(desired)),
            }
        })
        .collect();
    status.instance_groups = groups;
    count_totals(status);
}

/// The deployment's totals from its groups' counts.
fn count_totals(status: &mut DeploymentStatus) {
    let groups = &status.instance_groups;
    let sum = |f: fn(&InstanceGroupStatus) -> i32| groups.iter().map(f).sum::<i32>();
    let (desired, ready, up_to_date) =
        (sum(|g| g.desired), sum(|g| g.ready), sum(|g| g.up_to_date));
    status.desired_instances = Some(desired);
    status.ready_instances = Some(ready);
    status.up_to_date_instances = Some(up_to_date);
    status.instances = Some(format!("{ready}/{desired}"));
}

/// Each `Instance`'s status from its record after a deploy: `Running` when its update
/// completed and it is started (only when `running_known`: the deploy succeeded, so it
/// watched every started instance run), `Stopped` when stopped or detached. Written only
/// where the object, as the deploy last read or wrote it, says otherwise.
pub(super) async fn write_instance_statuses(
    ctx: &DeploymentContext,
    instances: &[(InstanceRecord, Instance)],
    running_known: bool,
) {
    for (record, object) in instances {
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
        if let Err(e) = status::write_instance_state(
            &ctx.client,
            object,
            process,
            ready,
            reason,
            Overwrite::Always,
        )
        .await
        {
            tracing::warn!(instance = %object.name_any(), error = %e, "cannot write the instance status");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, desired: i32, ready: i32, up_to_date: i32) -> InstanceGroupStatus {
        InstanceGroupStatus {
            name: name.into(),
            desired,
            ready,
            up_to_date,
            failing: 0,
        }
    }

    #[test]
    fn a_rollout_counts_the_new_scale_and_never_more_ready_than_wanted() {
        let mut status = DeploymentStatus {
            instance_groups: vec![group("web", 2, 2, 2), group("db", 3, 3, 3)],
            ..DeploymentStatus::default()
        };
        let rollout = |group: &str, desired, up_to_date| GroupRollout {
            group: group.into(),
            desired,
            up_to_date,
        };
        // web scales 2 → 3 (two unchanged), db 3 → 1, a group removed entirely is left out.
        count_rollout(
            &mut status,
            &[
                rollout("web", 3, 2),
                rollout("db", 1, 1),
                rollout("old", 0, 0),
            ],
        );
        assert_eq!(
            status.instance_groups,
            vec![group("web", 3, 2, 2), group("db", 1, 1, 1)]
        );
        assert_eq!(status.instances.as_deref(), Some("3/4"));
        assert_eq!(
            (status.desired_instances, status.up_to_date_instances),
            (Some(4), Some(3))
        );
    }
}
