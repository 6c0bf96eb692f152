//! Step 11 of the seed: the rollout, run as the Director runs it: runs of groups (serial or
//! together), each group AZ by AZ (or all AZs at once), canaries first, then
//! `max_in_flight` at a time on a work-conserving pool; but each group starts as soon as
//! its own packages compiled (issue 29), announced in one write with the groups starting
//! with it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;

use super::compile::{CompileWatch, Compiled};
use crate::instance::InstanceTarget;
use crate::prepare::{InstancePlan, PackageSource, Planned, Resolved, instance_plan, target};
use crate::progress::StageRun;
use crate::state::{DeploymentState, InstanceRecord, Write};
use crate::{Engine, EngineError, PlanError};
use kubosh_bosh::events::instance_task;
use kubosh_core::manifest::DeploymentManifest;
use kubosh_core::plan::desired::GroupSpec;
use kubosh_core::plan::rollout::{
    GroupInput, GroupRollout, InstanceInput, RolloutOptions, plan_rollout,
};

/// What updating one group did: the records updated (by planned index) and the failure that
/// stopped it.
type GroupOutcome = (Vec<(usize, InstanceRecord)>, Option<EngineError>);

/// What a batch's groups are desired and updated from.
pub(crate) struct BatchInputs<'a, 'r> {
    pub(crate) manifest: &'a DeploymentManifest,
    pub(crate) groups: &'a [GroupSpec],
    pub(crate) stemcells: &'a BTreeMap<String, String>,
    pub(crate) resolved: &'a Resolved<'r>,
    pub(crate) request: &'a crate::DeployRequest,
    pub(crate) source: &'a PackageSource,
}

/// A group of a batch not started yet: its rollout, its index among the resolved groups and
/// the compile tasks its packages come from.
struct Waiting {
    group: GroupRollout<usize>,
    index: usize,
    tasks: Vec<usize>,
}

impl Waiting {
    fn ready(&self, compiled: &Compiled) -> bool {
        (self.tasks.iter()).all(|&t| compiled.results.get(t).is_some_and(Option::is_some))
    }
}

/// The updates of started groups, by planned index.
type Targets = Arc<BTreeMap<usize, InstanceTarget>>;

impl Engine {
    /// After a failed rollout: the announcements of instances whose update never started
    /// are withdrawn (their records are as before, so a rollback leaves them alone, as the
    /// Director's would). Not once cancelled: the lock may be another run's by now. Best
    /// effort: a failed write leaves them dirty, which is safe.
    pub(crate) async fn withdraw_announcements(
        &self,
        started: &BTreeSet<String>,
        state: &mut DeploymentState,
    ) {
        if self.cancel.is_cancelled() {
            return;
        }
        let mut updating = state.meta.updating.clone();
        updating.retain(|uuid, _| {
            let dirty_before = state
                .instances
                .get(uuid)
                .is_some_and(|r| !r.update_completed);
            // One that started and finished shows its new applied spec: clean all the same.
            dirty_before || started.contains(uuid)
        });
        if updating != state.meta.updating {
            state.meta.updating = updating;
            if let Err(e) = self.write(Write::Meta(state.meta.clone())).await {
                tracing::warn!(error = %e, "cannot withdraw the announcements of updates not started");
            }
        }
    }

    /// Announces the updates this deploy makes to instances already recorded in `groups`
    /// (by index; the groups about to be updated), in one write
    /// ([`DeploymentMeta::updating`]); the uuids announced. Earlier announcements of
    /// instances still dirty stay (an instance out of an action's scope keeps its mark).
    pub(crate) async fn announce_updates(
        &self,
        planned: &[Planned],
        groups: &BTreeSet<usize>,
        state: &mut DeploymentState,
    ) -> Result<BTreeSet<String>, EngineError> {
        let mut updating = state.meta.updating.clone();
        // What this deploy announced stays until it concludes (a group still updating keeps
        // its mark while the next starts); earlier deploys' marks, while still dirty.
        let changing: BTreeSet<&String> = (planned.iter())
            .filter(|p| !p.changes.is_empty())
            .map(|p| &p.record.uuid)
            .collect();
        updating.retain(|uuid, _| {
            changing.contains(uuid)
                || (state.instances.get(uuid)).is_some_and(|r| !r.update_completed)
        });
        let mut announced = BTreeSet::new();
        for p in (planned.iter()).filter(|p| groups.contains(&p.group) && !p.changes.is_empty()) {
            let recorded = state.instances.contains_key(&p.record.uuid) || p.record.vm.is_some();
            if recorded {
                updating.insert(p.record.uuid.clone(), p.desired.digest());
                announced.insert(p.record.uuid.clone());
            }
        }
        if updating != state.meta.updating {
            state.meta.updating = updating;
            self.write(Write::Meta(state.meta.clone())).await?;
        }
        Ok(announced)
    }

    /// Step 11's order: the rollout of the changed instances (as [`Planned::changes`] says)
    /// in batches, one after another: each group of a serial run alone, the groups of a
    /// parallel run together; each group AZ by AZ (or all AZs at once), canaries first.
    pub(crate) fn rollout_batches(
        &self,
        groups: &[GroupSpec],
        planned: &[Planned],
        initial_deploy: bool,
    ) -> Vec<Vec<GroupRollout<usize>>> {
        let inputs: Vec<GroupInput<usize>> = groups
            .iter()
            .enumerate()
            .map(|(gi, g)| GroupInput {
                name: g.name.clone(),
                update: g.update.clone(),
                initial_deploy,
                instances: (0..planned.len())
                    .filter(|&i| planned[i].group == gi)
                    .map(|i| InstanceInput {
                        key: i,
                        az: planned[i].placed.az.clone(),
                        bootstrap: planned[i].placed.bootstrap,
                        sort_key: planned[i].record.name(),
                        changed: !planned[i].changes.is_empty(),
                    })
                    .collect(),
            })
            .collect();
        let rollout = plan_rollout(
            inputs,
            RolloutOptions {
                parallel_azs: self.config.parallel_azs,
            },
        );
        let mut batches = Vec::new();
        for run in rollout.runs {
            let changed = run.groups.into_iter().filter(|g| !g.phases.is_empty());
            if run.serial {
                batches.extend(changed.map(|g| vec![g]));
            } else {
                batches.push(changed.collect());
            }
        }
        batches.retain(|b: &Vec<GroupRollout<usize>>| !b.is_empty());
        batches
    }

    /// Step 11 for one batch of [`Engine::rollout_batches`]: each of its groups starts as
    /// soon as its own packages compiled (a parallel run's side by side): desired,
    /// announced, its templates stored, updated. Once a group or compilation failed no
    /// further group starts; those running finish. Then the DNS records follow the VMs the
    /// batch recreated (one publish at most; a failed group's are the failure's to publish,
    /// from the state as stored). `false` when compilation failed before every group
    /// started. `plans` gets each instance's plan as it was desired.
    pub(crate) async fn roll_out_batch(
        &self,
        inputs: &BatchInputs<'_, '_>,
        batch: Vec<GroupRollout<usize>>,
        compiled: &mut CompileWatch,
        (planned, state): (&mut [Planned], &mut DeploymentState),
        (updated, plans): (&mut Vec<String>, &mut [Option<InstancePlan>]),
    ) -> Result<bool, EngineError> {
        let mut waiting: Vec<Waiting> = (batch.into_iter())
            .filter_map(|group| {
                let index = (inputs.groups.iter()).position(|g| g.name == group.name)?;
                let spec = &inputs.groups[index];
                let jobs = crate::templates::group_jobs(inputs.manifest, &spec.name);
                let tasks = inputs.source.tasks_for(&spec.stemcell, &jobs);
                Some(Waiting {
                    group,
                    index,
                    tasks,
                })
            })
            .collect();
        let started = Mutex::new(BTreeSet::new());
        let mut running = futures::stream::FuturesUnordered::new();
        let (mut failure, mut compilation_failed) = (None, false);
        loop {
            if failure.is_none() && !compilation_failed && !waiting.is_empty() {
                match compiled.now() {
                    None => compilation_failed = true,
                    Some(now) => {
                        let (ready, still): (Vec<Waiting>, Vec<Waiting>) =
                            waiting.into_iter().partition(|w| w.ready(&now));
                        waiting = still;
                        if !ready.is_empty() {
                            let starting = (&mut *planned, &mut *state, &mut *plans);
                            match self.start_groups(inputs, &now, ready, starting).await {
                                Ok(groups) => running.extend(
                                    (groups.into_iter())
                                        .map(|(g, t)| self.run_group(g, t, &started)),
                                ),
                                Err(e) => failure = Some(e),
                            }
                        }
                    }
                }
            }
            let may_start = failure.is_none() && !compilation_failed && !waiting.is_empty();
            if running.is_empty() && !may_start {
                break;
            }
            tokio::select! {
                Some((records, error)) = running.next(), if !running.is_empty() => {
                    for (i, record) in records {
                        updated.push(record.display_name());
                        planned[i].record = record;
                    }
                    if let Some(e) = error {
                        failure.get_or_insert(e);
                    }
                }
                () = compiled.changed(), if may_start => {}
                // Unreachable (the loop breaks first), but not a panic if it ever is.
                else => break,
            }
        }
        drop(running);
        if let Some(e) = failure {
            let started = started.into_inner().unwrap_or_else(PoisonError::into_inner);
            self.withdraw_announcements(&started, state).await;
            return Err(e);
        }
        if compilation_failed {
            return Ok(false);
        }
        let deployment = inputs.manifest.name.as_deref().unwrap_or_default();
        let live = super::live_entries(super::planned_records(planned));
        self.publish_dns(deployment, live, &mut state.meta).await?;
        Ok(true)
    }

    /// The `ready` groups of a batch, started with the packages compiled so far: their
    /// instances desired (each one's plan kept in `plans`), announced in one write, their
    /// templates stored; each group with the updates to make.
    async fn start_groups(
        &self,
        inputs: &BatchInputs<'_, '_>,
        compiled: &Compiled,
        ready: Vec<Waiting>,
        (planned, state, plans): (
            &mut [Planned],
            &mut DeploymentState,
            &mut [Option<InstancePlan>],
        ),
    ) -> Result<Vec<(GroupRollout<usize>, Targets)>, EngineError> {
        let ids: BTreeSet<usize> = ready.iter().map(|w| w.index).collect();
        let packages = inputs.source.packages(&compiled.results);
        let asked = (inputs.request, &self.config);
        inputs
            .resolved
            .desire(planned, &packages, asked, Some(&ids));
        for (i, p) in (planned.iter().enumerate()).filter(|(_, p)| ids.contains(&p.group)) {
            plans[i] = Some(instance_plan(p));
        }
        let announced = self.announce_updates(planned, &ids, state).await?;
        let deployment = inputs.manifest.name.clone().unwrap_or_default();
        let tags = inputs.manifest.tags.clone().unwrap_or_default();
        let changed: Vec<usize> = (ready.iter())
            .flat_map(|w| w.group.phases.iter())
            .flat_map(|phase| phase.canaries.iter().chain(&phase.rest))
            .map(|step| step.key)
            .filter(|&i| !planned[i].changes.is_empty())
            .collect();
        let mut targets = BTreeMap::new();
        for i in changed {
            self.upload_archive(&mut planned[i]).await?;
            let p = &planned[i];
            let group = &inputs.groups[p.group];
            let dns = &self.config.dns_root_domain;
            let mut update = target(&deployment, &tags, group, p, inputs.stemcells, dns);
            update.announced = announced.contains(&p.record.uuid);
            targets.insert(i, update);
        }
        let targets = Arc::new(targets);
        Ok((ready.into_iter())
            .map(|w| (w.group, targets.clone()))
            .collect())
    }

    /// [`Engine::update_group`] of a started group.
    async fn run_group(
        &self,
        group: GroupRollout<usize>,
        targets: Targets,
        started: &Mutex<BTreeSet<String>>,
    ) -> GroupOutcome {
        self.update_group(&group, &targets, started).await
    }

    /// One group's phases; the updated records and the failure that stopped it.
    async fn update_group(
        &self,
        group: &GroupRollout<usize>,
        targets: &BTreeMap<usize, InstanceTarget>,
        started: &Mutex<BTreeSet<String>>,
    ) -> GroupOutcome {
        let total = group.phases.iter().map(|p| p.len()).sum();
        let stage = StageRun::new(
            self.events.clone(),
            "Updating instance",
            vec![group.name.clone()],
            total,
        );
        let mut done = Vec::new();
        for phase in &group.phases {
            let steps: Vec<_> = phase.steps().collect();
            let phases = [crate::pool::Phase {
                len: steps.len(),
                canaries: phase.canaries.len(),
                max_in_flight: phase.max_in_flight,
            }];
            let outcome = crate::pool::run_phases(&phases, |n: usize, _slot: usize| {
                let step = steps[n];
                let target = targets.get(&step.key).cloned();
                let stage = stage.clone();
                async move {
                    let Some(mut target) = target else {
                        return Err(PlanError::Unplanned(step.key).into());
                    };
                    self.checkpoint()?;
                    started
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(target.record.uuid.clone());
                    target.canary = step.canary;
                    if let Some(watch) = step.watch_time {
                        target.watch = watch;
                    }
                    let task = stage.start(instance_task(
                        &target.record.group,
                        &target.record.uuid,
                        target.record.index,
                        step.canary,
                    ));
                    // Its log lines carry the instance (`--log-format json` shows the span).
                    let span = tracing::info_span!("instance", instance = %task.name);
                    let result = tracing::Instrument::instrument(
                        self.update_instance(&stage, &task, target),
                        span,
                    )
                    .await;
                    stage.end(&task, &result);
                    result.map(|r| (step.key, r))
                }
            })
            .await;
            let first_failure = outcome.first_failure;
            let mut error = None;
            for (n, task) in outcome.tasks.into_iter().enumerate() {
                match task {
                    crate::pool::TaskOutcome::Succeeded(r) => done.push(r),
                    crate::pool::TaskOutcome::Failed(e)
                        if first_failure == Some(n) || error.is_none() =>
                    {
                        error = Some(e);
                    }
                    _ => {}
                }
            }
            if error.is_some() {
                return (done, error);
            }
        }
        (done, None)
    }

    /// Stores an instance's rendered templates archive in the blobstore (once).
    async fn upload_archive(&self, p: &mut Planned) -> Result<(), EngineError> {
        let Some(rendered) = p.rendered.as_mut() else {
            return Ok(());
        };
        if rendered.archive.is_some() {
            return Ok(());
        }
        let bytes = kubosh_artifacts::render::rendered_templates_archive(&rendered.jobs)
            .map_err(PlanError::Archive)?;
        let stored = self
            .blobstore
            .put_bytes(bytes::Bytes::from(bytes))
            .await
            .map_err(EngineError::Blobstore)?;
        rendered.archive = Some((stored.id, stored.sha1));
        Ok(())
    }
}
