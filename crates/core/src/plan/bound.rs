//! Lower bounds on a deploy's duration (`perf-reliability.md` §3): what no scheduler could
//! beat given the durations of its parts, so the engine's makespan is judged as a ratio to
//! them, not as wall time.
//!
//! Durations are plain numbers in any one unit (the engine uses milliseconds). Divisions
//! round up: a bound in whole units stays a bound.

use crate::plan::rollout::{AzPhase, GroupRollout, Rollout};

/// A dependency graph the bound cannot be computed for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundError {
    /// A task depends on an index outside the task list.
    #[error("task {task} depends on task {dependency}, which does not exist")]
    UnknownDependency {
        /// The depending task.
        task: usize,
        /// The index that is out of range.
        dependency: usize,
    },
    /// Tasks depend on each other in a cycle.
    #[error("the tasks depend on each other in a cycle")]
    Cycle,
    /// `durations` and `depends_on` differ in length.
    #[error("{durations} durations for {tasks} tasks")]
    LengthMismatch {
        /// Number of durations.
        durations: usize,
        /// Number of dependency lists.
        tasks: usize,
    },
}

/// The deploy's stages before the rollout, which BOSH runs one after another (§3.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTerms {
    /// Diff and render ("Preparing deployment").
    pub prepare: u64,
    /// Compilation's makespan (or its [`compile_lower_bound`]).
    pub compile: u64,
    /// Creating missing VMs.
    pub missing_vms: u64,
    /// The `post-deploy` scripts run on every instance once the rollout is done (§4.1 step
    /// 6).
    pub post_deploy: u64,
}

/// One pool phase of `m` slots (0 acts as 1): at least `max(max Tᵢ, ⌈ΣTᵢ / m⌉)` (§3.1),
/// tightened by pigeonhole: of the `k` longest items some slot runs `⌈k/m⌉`, one after
/// another, each at least as long as the `k`-th longest. So identical items give exactly
/// `⌈n/m⌉·T`, as greedy scheduling achieves. 0 for no items.
pub fn phase_lower_bound(durations: &[u64], m: usize) -> u64 {
    let slots = m.max(1);
    let mut longest_first = durations.to_vec();
    longest_first.sort_unstable_by(|a, b| b.cmp(a));
    let pigeonhole = longest_first
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let rounds = u64::try_from((i + 1).div_ceil(slots)).unwrap_or(u64::MAX);
            rounds.saturating_mul(t)
        })
        .max()
        .unwrap_or(0);
    let total: u128 = durations.iter().map(|&d| u128::from(d)).sum();
    let spread = u64::try_from(total.div_ceil(slots as u128)).unwrap_or(u64::MAX);
    pigeonhole.max(spread)
}

/// An AZ phase: its canaries (at most `min(c, max_in_flight)` at once), a barrier, then the
/// rest with `max_in_flight`.
pub fn az_phase_lower_bound<K>(phase: &AzPhase<K>, duration: &impl Fn(&K) -> u64) -> u64 {
    let canaries: Vec<u64> = phase.canaries.iter().map(|s| duration(&s.key)).collect();
    let rest: Vec<u64> = phase.rest.iter().map(|s| duration(&s.key)).collect();
    let canary_slots = phase.canaries.len().min(phase.max_in_flight);
    phase_lower_bound(&canaries, canary_slots)
        .saturating_add(phase_lower_bound(&rest, phase.max_in_flight))
}

/// An instance group: its phases one after another (AZ barriers make it a sum).
pub fn group_lower_bound<K>(group: &GroupRollout<K>, duration: &impl Fn(&K) -> u64) -> u64 {
    group
        .phases
        .iter()
        .map(|p| az_phase_lower_bound(p, duration))
        .fold(0, u64::saturating_add)
}

/// The whole deploy (§3.1): the stage terms, then the runs one after another; a serial run
/// costs the sum of its groups, a parallel run the longest group. `duration` gives each
/// instance's update time `Tᵢ`.
pub fn rollout_lower_bound<K>(
    rollout: &Rollout<K>,
    duration: impl Fn(&K) -> u64,
    stages: StageTerms,
) -> u64 {
    let runs = rollout.runs.iter().map(|run| {
        let groups = run.groups.iter().map(|g| group_lower_bound(g, &duration));
        if run.serial {
            groups.fold(0, u64::saturating_add)
        } else {
            groups.max().unwrap_or(0)
        }
    });
    [
        stages.prepare,
        stages.compile,
        stages.missing_vms,
        stages.post_deploy,
    ]
    .into_iter()
    .chain(runs)
    .fold(0, u64::saturating_add)
}

/// What a deploy's physical lower bound knows besides its rollout (issue 29): what no
/// schedule could beat given only the real dependencies (a VM exists before its agent is
/// used; a worker's VM exists before it compiles; a group's packages are compiled before its
/// instances are updated), the user's constraints (the rollout: canaries, `max_in_flight`,
/// `serial`, AZ order) and the cloud's declared limits (none here: every VM may be made at
/// once), and nothing of the engine's own (no stage barriers, no concurrency caps, no
/// preparation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhysicalTerms {
    /// How long a VM takes to exist and answer (0 when none is made: an update).
    pub vm: u64,
    /// How many VMs are made (instances and compilation workers).
    pub vms: usize,
    /// The cloud's declared limit on VMs made at once, if it has one.
    pub vm_concurrency: Option<usize>,
    /// The cloud's declared limit on `create_vm` calls started per 1,000 time units (per
    /// second for milliseconds), if it has one.
    pub vm_rate: Option<u64>,
    /// The longest post-deploy script: BOSH runs `post-deploy` only once every instance is
    /// updated, on every instance at once.
    pub post_deploy: u64,
}

impl PhysicalTerms {
    /// When the last of the VMs exists at the earliest under the cloud's limits: `⌈n/c⌉`
    /// rounds of `vm` at concurrency `c`; the `n`-th call started no sooner than `(n−1)/r`.
    fn last_vm(&self) -> u64 {
        if self.vms == 0 {
            return 0;
        }
        let n = u64::try_from(self.vms).unwrap_or(u64::MAX);
        let rounds = match self.vm_concurrency {
            Some(c) => n.div_ceil(u64::try_from(c.max(1)).unwrap_or(u64::MAX)),
            None => 1,
        };
        let started = match self.vm_rate {
            Some(r) => (n - 1).saturating_mul(1000).div_ceil(r.max(1)),
            None => 0,
        };
        rounds
            .saturating_mul(self.vm)
            .max(started.saturating_add(self.vm))
    }
}

/// The physical lower bound (see [`PhysicalTerms`]): runs one after another; in a serial
/// run each group starts when the one before ended and its packages are ready, in a
/// parallel run every group starts with the run or when its packages are ready; each group
/// takes at least its [`group_lower_bound`]; then post-deploy. `packages_ready` gives, by
/// group name, when its packages can be compiled at the earliest (a worker's VM, then the
/// critical path of its package graph with a worker per package: `terms.vm +
/// critical_path`; 0 when nothing is compiled); a group's instances cannot start before
/// their VMs exist either (`terms.vm`), and under a cloud limit the last VM exists no sooner
/// than the limit lets `terms.vms` VMs be made, its instance updated after it.
pub fn physical_lower_bound<K>(
    rollout: &Rollout<K>,
    duration: impl Fn(&K) -> u64,
    packages_ready: impl Fn(&str) -> u64,
    terms: PhysicalTerms,
) -> u64 {
    let ready = |g: &GroupRollout<K>| packages_ready(&g.name).max(terms.vm);
    let mut end = 0u64;
    let mut shortest = u64::MAX;
    for run in &rollout.runs {
        let start = end;
        for group in run.groups.iter().filter(|g| !g.phases.is_empty()) {
            let begins = ready(group).max(if run.serial { end } else { start });
            end = end.max(begins.saturating_add(group_lower_bound(group, &duration)));
            let steps = group
                .phases
                .iter()
                .flat_map(|p| p.canaries.iter().chain(&p.rest));
            shortest = steps.map(|s| duration(&s.key)).fold(shortest, u64::min);
        }
    }
    // Under the cloud's limits the last VM comes late, and its instance is updated after.
    let last_instance = match shortest {
        u64::MAX => 0,
        t => terms.last_vm().saturating_add(t),
    };
    end.max(last_instance).saturating_add(terms.post_deploy)
}

/// For each task, the longest chain of durations from it to a task nothing depends on, its
/// own duration included (the critical-path priority). `depends_on[i]` lists the tasks task
/// `i` waits for.
pub fn remaining_chains(
    durations: &[u64],
    depends_on: &[Vec<usize>],
) -> Result<Vec<u64>, BoundError> {
    if durations.len() != depends_on.len() {
        return Err(BoundError::LengthMismatch {
            durations: durations.len(),
            tasks: depends_on.len(),
        });
    }
    let n = durations.len();
    let mut dependents = vec![Vec::new(); n];
    let mut waiting = vec![0usize; n];
    for (task, deps) in depends_on.iter().enumerate() {
        for &dependency in deps {
            let Some(list) = dependents.get_mut(dependency) else {
                return Err(BoundError::UnknownDependency { task, dependency });
            };
            list.push(task);
            waiting[task] += 1;
        }
    }
    // Kahn's order: every task after the tasks it waits for.
    let mut order = Vec::with_capacity(n);
    let mut ready: Vec<usize> = (0..n).filter(|&t| waiting[t] == 0).collect();
    while let Some(t) = ready.pop() {
        order.push(t);
        for &d in &dependents[t] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready.push(d);
            }
        }
    }
    if order.len() != n {
        return Err(BoundError::Cycle);
    }
    let mut chain = vec![0u64; n];
    for &t in order.iter().rev() {
        let after = dependents[t].iter().map(|&d| chain[d]).max().unwrap_or(0);
        chain[t] = durations[t].saturating_add(after);
    }
    Ok(chain)
}

/// The critical path: the longest chain of durations through the graph.
pub fn critical_path(durations: &[u64], depends_on: &[Vec<usize>]) -> Result<u64, BoundError> {
    Ok(remaining_chains(durations, depends_on)?
        .into_iter()
        .max()
        .unwrap_or(0))
}

/// Compilation on `workers` (0 acts as 1), §3.2: `max(critical path, ⌈Σ pⱼ / W⌉)`. No
/// schedule is shorter.
pub fn compile_lower_bound(
    durations: &[u64],
    depends_on: &[Vec<usize>],
    workers: usize,
) -> Result<u64, BoundError> {
    let cp = critical_path(durations, depends_on)?;
    let total: u128 = durations.iter().map(|&d| u128::from(d)).sum();
    let spread = u64::try_from(total.div_ceil(workers.max(1) as u128)).unwrap_or(u64::MAX);
    Ok(cp.max(spread))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Quantity, Update};
    use crate::plan::rollout::{GroupInput, InstanceInput, RolloutOptions, plan_rollout};

    /// A rollout of `groups` (name, instances, serial), one AZ each, canaries 1,
    /// `max_in_flight` 2.
    fn rollout_of(groups: &[(&str, usize, bool)]) -> Rollout<String> {
        let inputs: Vec<GroupInput<String>> = (groups.iter())
            .map(|(name, n, serial)| GroupInput {
                name: name.to_string(),
                update: Update {
                    canaries: Some(Quantity::Count(1)),
                    max_in_flight: Some(Quantity::Count(2)),
                    serial: Some(*serial),
                    ..Update::default()
                },
                initial_deploy: false,
                instances: (0..*n)
                    .map(|i| InstanceInput {
                        key: format!("{name}/{i}"),
                        az: None,
                        bootstrap: i == 0,
                        sort_key: format!("{name}/{i:04}"),
                        changed: true,
                    })
                    .collect(),
            })
            .collect();
        plan_rollout(inputs, RolloutOptions::default())
    }

    #[test]
    fn the_physical_bound_overlaps_what_only_the_engine_orders() {
        let terms = PhysicalTerms {
            vm: 30,
            vms: 6,
            post_deploy: 1,
            ..PhysicalTerms::default()
        };
        // One group of 5: canary 10, then 4 two at a time: 10 + 20; its packages ready at
        // 30 + 60 (a worker's VM, then the chain): 90 + 30 + 1.
        let one = rollout_of(&[("web", 5, true)]);
        assert_eq!(physical_lower_bound(&one, |_| 10, |_| 90, terms), 121);
        // Nothing to compile: the VMs (30) are the wait.
        assert_eq!(physical_lower_bound(&one, |_| 10, |_| 0, terms), 61);
        // Two serial groups: the second waits for the first (and for its packages).
        let serial = rollout_of(&[("a", 1, true), ("b", 1, true)]);
        let ready = |g: &str| if g == "a" { 40 } else { 100 };
        assert_eq!(physical_lower_bound(&serial, |_| 10, ready, terms), 111);
        assert_eq!(physical_lower_bound(&serial, |_| 10, |_| 0, terms), 51);
        // The same not serial: both start when ready.
        let parallel = rollout_of(&[("a", 1, false), ("b", 1, false)]);
        assert_eq!(physical_lower_bound(&parallel, |_| 10, ready, terms), 111);
        assert_eq!(physical_lower_bound(&parallel, |_| 10, |_| 0, terms), 41);
        // A cloud that makes 2 VMs at a time: the 6th exists at 90, its instance ends at 100.
        let limited = PhysicalTerms {
            vm_concurrency: Some(2),
            ..terms
        };
        assert_eq!(physical_lower_bound(&one, |_| 10, |_| 0, limited), 101);
        // ... or starts one create_vm every 20 units (50 per 1,000): the 6th at 100.
        let paced = PhysicalTerms {
            vm_rate: Some(50),
            ..terms
        };
        assert_eq!(physical_lower_bound(&one, |_| 10, |_| 0, paced), 141);
        // An update makes no VM and compiles nothing: the rollout alone.
        let update = PhysicalTerms::default();
        assert_eq!(physical_lower_bound(&one, |_| 10, |_| 0, update), 30);
        assert_eq!(
            physical_lower_bound(&one, |_| 10, |_| 0, update),
            rollout_lower_bound(&one, |_: &String| 10, StageTerms::default())
        );
    }

    #[test]
    fn phase_bound_is_the_longest_item_or_the_spread() {
        assert_eq!(phase_lower_bound(&[], 3), 0);
        assert_eq!(phase_lower_bound(&[6; 10], 3), 24); // ceil(10/3) * 6
        assert_eq!(phase_lower_bound(&[10, 1, 1], 3), 10);
        assert_eq!(phase_lower_bound(&[3, 3, 1], 2), 4); // ceil(7/2)
        assert_eq!(phase_lower_bound(&[5, 5], 0), 10);
        assert_eq!(phase_lower_bound(&[4, 4, 4, 4], 3), 8); // not ceil(16/3) = 6
        assert_eq!(phase_lower_bound(&[5, 5, 5, 1], 3), 6); // ceil(16/3)
    }

    fn cells(per_az: usize, azs: &[&str]) -> Vec<InstanceInput<usize>> {
        let mut v = Vec::new();
        for (a, az) in azs.iter().enumerate() {
            for i in 0..per_az {
                let key = a * per_az + i;
                v.push(InstanceInput {
                    key,
                    az: Some(az.to_string()),
                    bootstrap: key == 0,
                    sort_key: format!("cell/{key:04}"),
                    changed: true,
                });
            }
        }
        v
    }

    fn update(serial: bool) -> Update {
        Update {
            canaries: Some(Quantity::Count(1)),
            max_in_flight: Some(Quantity::Percent(10)),
            serial: Some(serial),
            ..Update::default()
        }
    }

    #[test]
    fn the_worked_example_of_the_reference() {
        // §3.3: 300 cells over 3 AZs, canaries 1, max_in_flight 10%, 6 min each:
        // 6 + ceil(99/10)*6 + 60 + 60 = 186 min; with AZs in parallel about 66 min.
        let group = |name: &str| GroupInput {
            name: name.into(),
            update: update(true),
            initial_deploy: false,
            instances: cells(100, &["z1", "z2", "z3"]),
        };
        let serial_azs = plan_rollout(vec![group("diego-cell")], RolloutOptions::default());
        assert_eq!(
            rollout_lower_bound(&serial_azs, |_| 6, StageTerms::default()),
            186
        );
        let parallel_azs = plan_rollout(
            vec![group("diego-cell")],
            RolloutOptions { parallel_azs: true },
        );
        // 6 + ceil(299/30)*6 = 6 + 60.
        assert_eq!(
            rollout_lower_bound(&parallel_azs, |_| 6, StageTerms::default()),
            66
        );
        let stages = StageTerms {
            prepare: 1,
            compile: 20,
            missing_vms: 3,
            post_deploy: 2,
        };
        assert_eq!(rollout_lower_bound(&serial_azs, |_| 6, stages), 186 + 26);
    }

    #[test]
    fn canaries_share_max_in_flight_and_runs_sum_or_max() {
        let group = |name: &str, serial: bool, n: usize, canaries: u64, mif: u64| GroupInput {
            name: name.into(),
            update: Update {
                canaries: Some(Quantity::Count(canaries)),
                max_in_flight: Some(Quantity::Count(mif)),
                serial: Some(serial),
                ..Update::default()
            },
            initial_deploy: false,
            instances: cells(n, &["z1"]),
        };
        // a: 3 canaries at most 2 at once (2), then 3 more on 2 slots (2): 4.
        // b and c run in parallel: b = 1 + ceil(4/5) = 2, c = 1 + 9 = 10.
        let rollout = plan_rollout(
            vec![
                group("a", true, 6, 3, 2),
                group("b", false, 5, 1, 5),
                group("c", false, 10, 1, 1),
            ],
            RolloutOptions::default(),
        );
        let g = &rollout.runs[0].groups[0];
        assert_eq!(group_lower_bound(g, &|_| 1), 4);
        assert_eq!(group_lower_bound(&rollout.runs[1].groups[0], &|_| 1), 2);
        assert_eq!(
            rollout_lower_bound(&rollout, |_| 1, StageTerms::default()),
            14
        );
        // Uneven: a long canary dominates its part.
        assert_eq!(
            group_lower_bound(g, &|k: &usize| if *k == 0 { 10 } else { 1 }),
            12
        );
    }

    #[test]
    fn compile_bound_is_critical_path_or_spread() {
        // 0 -> 1 -> 2 (chain of 3+2+5), 3 and 4 free (4 each).
        let durations = [3, 2, 5, 4, 4];
        let deps = vec![vec![], vec![0], vec![1], vec![], vec![]];
        assert_eq!(
            remaining_chains(&durations, &deps).unwrap(),
            vec![10, 7, 5, 4, 4]
        );
        assert_eq!(critical_path(&durations, &deps).unwrap(), 10);
        assert_eq!(compile_lower_bound(&durations, &deps, 1).unwrap(), 18);
        assert_eq!(compile_lower_bound(&durations, &deps, 2).unwrap(), 10);
        assert_eq!(compile_lower_bound(&durations, &deps, 0).unwrap(), 18);
        assert_eq!(compile_lower_bound(&[], &[], 4).unwrap(), 0);
        assert_eq!(
            compile_lower_bound(&[1, 1], &[vec![1], vec![0]], 2),
            Err(BoundError::Cycle)
        );
        assert_eq!(
            compile_lower_bound(&[1], &[vec![3]], 2),
            Err(BoundError::UnknownDependency {
                task: 0,
                dependency: 3
            })
        );
        assert!(matches!(
            remaining_chains(&[1], &[]),
            Err(BoundError::LengthMismatch { .. })
        ));
    }
}
