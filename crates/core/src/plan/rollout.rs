//! The order in which changed instances are updated (`bosh-protocols.md` §4.2 last bullet,
//! §4.6; the Director's `instance_plan_sorter.rb`, `instance_group_updater.rb` and
//! `multi_instance_group_updater.rb`).
//!
//! - Instance groups, in manifest order, form runs of consecutive groups with the same
//!   `serial` flag: a serial run updates its groups one after another, a parallel run all at
//!   once.
//! - Inside a group, instances are sorted: the bootstrap instance first, then the rest of
//!   its AZ, then instances without an AZ, then the other AZs alphabetically; within an AZ by
//!   `<group>/<uuid>`. Only changed instances are updated, one AZ after another (a barrier
//!   each), each AZ with `max_in_flight` computed on its own changed instances.
//! - The first AZ starts with `canaries` computed on its changed instances, behind a barrier;
//!   canaries use the canary watch time, everything else the update watch time.
//! - All AZs form one phase (canaries once, `max_in_flight` on the whole group) on an
//!   initial deploy with `initial_deploy_az_update_strategy: parallel` (BOSH), or always with
//!   [`RolloutOptions::parallel_azs`] (kubosh's opt-in).
//!
//! Errand groups are not rolled out; callers leave them out (or give them no changed
//! instances).

use crate::manifest::{AzUpdateStrategy, Update, WatchTime};

/// An instance of an instance group, as the rollout needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceInput<K> {
    /// The caller's key for the instance (handed back in [`Step::key`]).
    pub key: K,
    /// Its AZ, if the group uses AZs.
    pub az: Option<String>,
    /// Whether it is the group's bootstrap instance.
    pub bootstrap: bool,
    /// `<group>/<uuid>`: the order inside an AZ.
    pub sort_key: String,
    /// Whether it needs an update. Unchanged instances are still given because the
    /// bootstrap instance decides which AZ goes first even when it is unchanged itself.
    pub changed: bool,
}

/// An instance group to roll out.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupInput<K> {
    /// Instance group name.
    pub name: String,
    /// The group's `update` block overlaid on the deployment's ([`Update::overlaid_on`]).
    pub update: Update,
    /// True when the deployment has no previous manifest (its first deploy).
    pub initial_deploy: bool,
    /// The group's desired (not obsolete) instances, changed or not, in any order.
    pub instances: Vec<InstanceInput<K>>,
}

/// Choices beyond BOSH's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RolloutOptions {
    /// Update all AZs of a group together on every deploy (one phase, canaries once,
    /// `max_in_flight` computed on the whole group), not only on an initial deploy with
    /// `initial_deploy_az_update_strategy: parallel`.
    pub parallel_azs: bool,
}

/// The whole rollout: runs, one after another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout<K> {
    /// Runs in manifest order.
    pub runs: Vec<Run<K>>,
}

/// Consecutive instance groups with the same `serial` flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run<K> {
    /// True: one group after another. False: all groups at once.
    pub serial: bool,
    /// The groups, in manifest order (groups without changes have no phases).
    pub groups: Vec<GroupRollout<K>>,
}

/// One instance group's updates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRollout<K> {
    /// Instance group name.
    pub name: String,
    /// Phases one after another, each a barrier.
    pub phases: Vec<AzPhase<K>>,
}

/// Instances updated together: one AZ, or all AZs when AZs are updated in parallel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzPhase<K> {
    /// The AZs this phase covers, in update order (`None`: instances without an AZ).
    pub azs: Vec<Option<String>>,
    /// How many instances run at once, canaries included (at least 1).
    pub max_in_flight: usize,
    /// Canaries: updated first, all finished before [`AzPhase::rest`] starts.
    pub canaries: Vec<Step<K>>,
    /// The other instances, in order.
    pub rest: Vec<Step<K>>,
}

impl<K> AzPhase<K> {
    /// Canaries, then the rest: the order items are handed to the pool.
    pub fn steps(&self) -> impl Iterator<Item = &Step<K>> {
        self.canaries.iter().chain(&self.rest)
    }

    /// How many instances the phase updates.
    pub fn len(&self) -> usize {
        self.canaries.len() + self.rest.len()
    }

    /// True when the phase updates nothing (never the case in a planned rollout).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One instance update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step<K> {
    /// The caller's key.
    pub key: K,
    /// The instance's AZ.
    pub az: Option<String>,
    /// Whether it is a canary (task name suffixed ` (canary)`).
    pub canary: bool,
    /// How long to wait for it to be running: the canary or the update watch time (`None`
    /// when the update block has none, which validation rejects at deployment level).
    pub watch_time: Option<WatchTime>,
}

/// Plans the rollout of `groups` (in manifest order).
pub fn plan_rollout<K>(groups: Vec<GroupInput<K>>, options: RolloutOptions) -> Rollout<K> {
    let mut runs: Vec<Run<K>> = Vec::new();
    for group in groups {
        // The Director's default: serial unless the block says otherwise.
        let serial = group.update.serial.unwrap_or(true);
        let planned = plan_group(group, options);
        match runs.last_mut() {
            Some(run) if run.serial == serial => run.groups.push(planned),
            _ => runs.push(Run {
                serial,
                groups: vec![planned],
            }),
        }
    }
    Rollout { runs }
}

/// The AZs of a phase and its instances, in order.
type Batch<K> = (Vec<Option<String>>, Vec<InstanceInput<K>>);

/// Sorts before everything else in [`sort_instances`]: AZ rank (bootstrap's AZ, none,
/// other), AZ name, and 0 for the bootstrap instance.
type OrderKey = (u8, Option<String>, u8);

fn plan_group<K>(group: GroupInput<K>, options: RolloutOptions) -> GroupRollout<K> {
    let update = group.update;
    let parallel = options.parallel_azs
        || (group.initial_deploy
            && update.initial_deploy_az_update_strategy == Some(AzUpdateStrategy::Parallel));
    let changed: Vec<InstanceInput<K>> = sort_instances(group.instances)
        .into_iter()
        .filter(|i| i.changed)
        .collect();

    let mut batches: Vec<Batch<K>> = Vec::new();
    if parallel {
        if !changed.is_empty() {
            let mut azs: Vec<Option<String>> = Vec::new();
            for i in &changed {
                if !azs.contains(&i.az) {
                    azs.push(i.az.clone());
                }
            }
            batches.push((azs, changed));
        }
    } else {
        // Sorted order keeps each AZ contiguous, so a new AZ starts a new batch.
        for i in changed {
            match batches.last_mut() {
                Some((azs, list)) if azs.first() == Some(&i.az) => list.push(i),
                _ => batches.push((vec![i.az.clone()], vec![i])),
            }
        }
    }

    let phases = batches
        .into_iter()
        .enumerate()
        .map(|(n, (azs, instances))| {
            let size = instances.len();
            // Canaries only in the first phase, never more than its instances.
            let canaries = if n == 0 {
                update.canaries.map_or(0, |q| q.canaries(size))
            } else {
                0
            };
            let max_in_flight = update.max_in_flight.map_or(1, |q| q.max_in_flight(size));
            let mut steps = instances.into_iter().enumerate().map(|(k, i)| {
                let canary = k < canaries;
                Step {
                    key: i.key,
                    az: i.az,
                    canary,
                    watch_time: if canary {
                        update.canary_watch_time
                    } else {
                        update.update_watch_time
                    },
                }
            });
            let canaries: Vec<Step<K>> = steps.by_ref().take(canaries).collect();
            AzPhase {
                azs,
                max_in_flight,
                canaries,
                rest: steps.collect(),
            }
        })
        .collect();
    GroupRollout {
        name: group.name,
        phases,
    }
}

/// The Director's update order: the bootstrap instance, the rest of its AZ, instances
/// without an AZ, then the other AZs by name; inside an AZ by `<group>/<uuid>`.
fn sort_instances<K>(instances: Vec<InstanceInput<K>>) -> Vec<InstanceInput<K>> {
    let bootstrap_az: Option<Option<String>> =
        instances.iter().find(|i| i.bootstrap).map(|i| i.az.clone());
    let mut keyed: Vec<(OrderKey, InstanceInput<K>)> = instances
        .into_iter()
        .map(|i| {
            let rank = match &bootstrap_az {
                Some(az) if *az == i.az => 0,
                _ if i.az.is_none() => 1,
                _ => 2,
            };
            // The bootstrap instance leads its AZ.
            let lead = u8::from(!(i.bootstrap && rank == 0));
            ((rank, i.az.clone(), lead), i)
        })
        .collect();
    keyed.sort_by(|(a, x), (b, y)| a.cmp(b).then_with(|| x.sort_key.cmp(&y.sort_key)));
    keyed.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Quantity;

    fn watch(ms: u64) -> WatchTime {
        WatchTime {
            min_ms: ms,
            max_ms: ms,
        }
    }

    fn update(canaries: Quantity, max_in_flight: Quantity) -> Update {
        Update {
            canaries: Some(canaries),
            max_in_flight: Some(max_in_flight),
            canary_watch_time: Some(watch(1000)),
            update_watch_time: Some(watch(2000)),
            ..Update::default()
        }
    }

    fn instance(
        uuid: &str,
        az: Option<&str>,
        bootstrap: bool,
        changed: bool,
    ) -> InstanceInput<String> {
        InstanceInput {
            key: uuid.to_string(),
            az: az.map(str::to_string),
            bootstrap,
            sort_key: format!("web/{uuid}"),
            changed,
        }
    }

    fn group(
        name: &str,
        update: Update,
        instances: Vec<InstanceInput<String>>,
    ) -> GroupInput<String> {
        GroupInput {
            name: name.into(),
            update,
            initial_deploy: false,
            instances,
        }
    }

    fn keys(steps: &[Step<String>]) -> Vec<&str> {
        steps.iter().map(|s| s.key.as_str()).collect()
    }

    #[test]
    fn bootstrap_az_first_then_no_az_then_the_others_alphabetically() {
        let instances = vec![
            instance("a1", Some("z1"), false, true),
            instance("c1", Some("z3"), false, true),
            instance("b2", Some("z2"), false, true),
            instance("n1", None, false, true),
            instance("b9", Some("z2"), true, true),
            instance("b1", Some("z2"), false, true),
            instance("a0", Some("z1"), false, true),
        ];
        let rollout = plan_rollout(
            vec![group(
                "web",
                update(Quantity::Count(1), Quantity::Count(2)),
                instances,
            )],
            RolloutOptions::default(),
        );
        let phases = &rollout.runs[0].groups[0].phases;
        let azs: Vec<Option<&str>> = phases.iter().map(|p| p.azs[0].as_deref()).collect();
        assert_eq!(azs, vec![Some("z2"), None, Some("z1"), Some("z3")]);
        // The bootstrap instance leads its AZ and is the canary.
        assert_eq!(keys(&phases[0].canaries), vec!["b9"]);
        assert_eq!(keys(&phases[0].rest), vec!["b1", "b2"]);
        assert_eq!(keys(&phases[2].rest), vec!["a0", "a1"]);
        assert!(phases[1..].iter().all(|p| p.canaries.is_empty()));
        assert!(phases[0].canaries[0].canary);
        assert_eq!(phases[0].canaries[0].watch_time, Some(watch(1000)));
        assert_eq!(phases[0].rest[0].watch_time, Some(watch(2000)));
    }

    #[test]
    fn an_unchanged_bootstrap_still_picks_the_first_az() {
        let instances = vec![
            instance("a1", Some("z1"), false, true),
            instance("b0", Some("z2"), true, false),
            instance("b1", Some("z2"), false, true),
        ];
        let rollout = plan_rollout(
            vec![group(
                "web",
                update(Quantity::Count(1), Quantity::Count(1)),
                instances,
            )],
            RolloutOptions::default(),
        );
        let phases = &rollout.runs[0].groups[0].phases;
        assert_eq!(phases.len(), 2);
        assert_eq!(keys(&phases[0].canaries), vec!["b1"]);
        assert!(phases[0].rest.is_empty());
        assert_eq!(keys(&phases[1].rest), vec!["a1"]);
    }

    #[test]
    fn canaries_and_max_in_flight_are_computed_per_az() {
        // z1: 2 changed, z2: 10 changed. canaries 50% of the first AZ = 1, not 6; max in
        // flight 30% per AZ: z1 -> 0 -> 1, z2 -> 3.
        let mut instances = vec![
            instance("a0", Some("z1"), true, true),
            instance("a1", Some("z1"), false, true),
        ];
        for n in 0..10 {
            instances.push(instance(&format!("b{n}"), Some("z2"), false, true));
        }
        let rollout = plan_rollout(
            vec![group(
                "web",
                update(Quantity::Percent(50), Quantity::Percent(30)),
                instances,
            )],
            RolloutOptions::default(),
        );
        let phases = &rollout.runs[0].groups[0].phases;
        assert_eq!(phases[0].canaries.len(), 1);
        assert_eq!(phases[0].max_in_flight, 1);
        assert_eq!(phases[1].canaries.len(), 0);
        assert_eq!(phases[1].rest.len(), 10);
        assert_eq!(phases[1].max_in_flight, 3);
    }

    #[test]
    fn canaries_never_exceed_the_first_az() {
        let instances = vec![
            instance("a0", Some("z1"), true, true),
            instance("b0", Some("z2"), false, true),
            instance("b1", Some("z2"), false, true),
        ];
        let rollout = plan_rollout(
            vec![group(
                "web",
                update(Quantity::Count(3), Quantity::Count(5)),
                instances,
            )],
            RolloutOptions::default(),
        );
        let phases = &rollout.runs[0].groups[0].phases;
        assert_eq!(keys(&phases[0].canaries), vec!["a0"]);
        assert_eq!(phases[0].max_in_flight, 1);
        assert_eq!(keys(&phases[1].rest), vec!["b0", "b1"]);
        assert_eq!(phases[1].max_in_flight, 2);
    }

    #[test]
    fn parallel_azs_make_one_phase() {
        let mut instances = vec![instance("a0", Some("z1"), true, true)];
        for n in 0..3 {
            instances.push(instance(&format!("b{n}"), Some("z2"), false, true));
            instances.push(instance(&format!("c{n}"), Some("z3"), false, true));
        }
        let u = update(Quantity::Count(2), Quantity::Percent(50));
        let opted_in = plan_rollout(
            vec![group("web", u.clone(), instances.clone())],
            RolloutOptions { parallel_azs: true },
        );
        let mut initial = group(
            "web",
            Update {
                initial_deploy_az_update_strategy: Some(AzUpdateStrategy::Parallel),
                ..u.clone()
            },
            instances.clone(),
        );
        initial.initial_deploy = true;
        let bosh_initial = plan_rollout(vec![initial.clone()], RolloutOptions::default());
        for rollout in [&opted_in, &bosh_initial] {
            let phases = &rollout.runs[0].groups[0].phases;
            assert_eq!(phases.len(), 1);
            let p = &phases[0];
            assert_eq!(
                p.azs,
                vec![Some("z1".into()), Some("z2".into()), Some("z3".into())]
            );
            assert_eq!(keys(&p.canaries), vec!["a0", "b0"]);
            assert_eq!(p.rest.len(), 5);
            // 50% of 7.
            assert_eq!(p.max_in_flight, 3);
        }
        // Not an initial deploy: the strategy does not apply.
        initial.initial_deploy = false;
        let later = plan_rollout(vec![initial], RolloutOptions::default());
        assert_eq!(later.runs[0].groups[0].phases.len(), 3);
    }

    #[test]
    fn runs_partition_consecutive_groups_by_serial() {
        let serial = |s: Option<bool>| Update {
            serial: s,
            ..update(Quantity::Count(1), Quantity::Count(1))
        };
        let one = || vec![instance("x", None, true, true)];
        let groups = vec![
            group("a", serial(None), one()),
            group("b", serial(Some(true)), one()),
            group("c", serial(Some(false)), one()),
            group("d", serial(Some(false)), vec![]),
            group("e", serial(Some(true)), one()),
        ];
        let rollout = plan_rollout(groups, RolloutOptions::default());
        let shape: Vec<(bool, Vec<&str>)> = rollout
            .runs
            .iter()
            .map(|r| (r.serial, r.groups.iter().map(|g| g.name.as_str()).collect()))
            .collect();
        assert_eq!(
            shape,
            vec![
                (true, vec!["a", "b"]),
                (false, vec!["c", "d"]),
                (true, vec!["e"])
            ]
        );
        assert!(rollout.runs[1].groups[1].phases.is_empty());
    }

    #[test]
    fn without_canaries_or_max_in_flight_one_at_a_time() {
        let instances = vec![
            instance("a", None, true, true),
            instance("b", None, false, true),
        ];
        let rollout = plan_rollout(
            vec![group("web", Update::default(), instances)],
            RolloutOptions::default(),
        );
        let p = &rollout.runs[0].groups[0].phases[0];
        assert!(p.canaries.is_empty());
        assert_eq!(p.max_in_flight, 1);
        assert_eq!(p.steps().count(), 2);
        assert_eq!(p.rest[0].watch_time, None);
    }
}
