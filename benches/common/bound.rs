//! What the simulated-cloud benchmarks (`deploy`, `controller`) divide by: what each call of
//! an instance's update costs, and the lower bound of a rollout over those costs
//! (`kubosh_core::plan::bound`).

use std::collections::BTreeMap;

use kubosh_core::manifest::Update;
use kubosh_core::plan::bound::{StageTerms, phase_lower_bound, rollout_lower_bound};
use kubosh_core::plan::rollout::{
    GroupInput, InstanceInput, Rollout, RolloutOptions, plan_rollout,
};
use serde_json::{Value, json};

/// The Director's `max_threads`: VMs it creates, and agents it runs post-deploy on, at once.
pub const DIRECTOR_MAX_THREADS: usize = 32;

/// The simulated calls' latencies (milliseconds by method; every other method answers at
/// once) and the watch time's minimum.
#[derive(Debug, Clone)]
pub struct Calls {
    pub latencies: BTreeMap<String, u64>,
    pub watch_min_ms: u64,
}

impl Calls {
    pub fn ms(&self, method: &str) -> u64 {
        self.latencies.get(method).copied().unwrap_or(0)
    }

    /// The sum of the latencies of `calls`.
    pub fn sum(&self, calls: &[&str]) -> u64 {
        calls.iter().map(|m| self.ms(m)).sum()
    }

    /// A VM of "Creating missing vms": `create_vm`, `set_vm_metadata`, the agent's `ping`.
    pub fn missing_vm(&self) -> u64 {
        self.sum(&["create_vm", "set_vm_metadata", "ping"])
    }

    /// "Running post-deploy" as the Director runs it: `run_script post-deploy` on every
    /// instance, `max_threads` at a time (`post_deployment_script_runner.rb`; kubosh asks
    /// every agent at once).
    pub fn post_deploy(&self, instances: usize) -> u64 {
        phase_lower_bound(
            &vec![self.sum(&["run_script"]); instances],
            DIRECTOR_MAX_THREADS,
        )
    }

    /// A silent agent's instance given a new VM on its disk (the resurrector, `--fix`): the
    /// cloud detaches the disk (the agent is not asked) and deletes the VM, a new VM is made
    /// and the disk attached and mounted, the agent's settings, then as a first update.
    pub fn recreate(&self, disk: bool) -> u64 {
        let disk_calls = if disk {
            self.sum(&[
                "detach_disk",
                "attach_disk",
                "add_persistent_disk",
                "mount_disk",
            ])
        } else {
            0
        };
        self.sum(&["delete_vm"])
            + self.missing_vm()
            + disk_calls
            + self.sum(&["update_settings"])
            + self.start_and_watch()
    }

    /// apply, pre-start, start, the watch's minimum, post-start.
    pub fn start_and_watch(&self) -> u64 {
        self.sum(&["apply", "run_script", "start", "get_state", "run_script"]) + self.watch_min_ms
    }
}

/// The lower bound of the rollout the engine plans for `instances` (keyed by their group;
/// `changed` says which are rolled out) under `manifest`'s `update` blocks, each instance
/// taking `duration` of its group, after and before the stages of `stages`.
pub fn rollout_bound(
    manifest: &Value,
    initial_deploy: bool,
    instances: &[InstanceInput<String>],
    duration: impl Fn(&str) -> u64,
    stages: StageTerms,
) -> u64 {
    let rollout = planned_rollout(manifest, initial_deploy, instances);
    rollout_lower_bound(&rollout, |group: &String| duration(group), stages)
}

/// The rollout the engine plans for `instances` (keyed by their group) under `manifest`'s
/// `update` blocks.
#[allow(dead_code)] // The deploy bench's physical bound; the controller bench has none.
pub fn planned_rollout(
    manifest: &Value,
    initial_deploy: bool,
    instances: &[InstanceInput<String>],
) -> Rollout<String> {
    let base: Update =
        serde_json::from_value(manifest["update"].clone()).expect("the deployment's update");
    let groups: Vec<GroupInput<String>> = manifest["instance_groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| {
            let name = g["name"].as_str().unwrap_or_default().to_string();
            let own: Update = serde_json::from_value(g.get("update").cloned().unwrap_or(json!({})))
                .expect("the group's update");
            GroupInput {
                update: own.overlaid_on(&base),
                initial_deploy,
                instances: (instances.iter())
                    .filter(|i| i.key == name)
                    .cloned()
                    .collect(),
                name,
            }
        })
        .collect();
    plan_rollout(groups, RolloutOptions::default())
}
