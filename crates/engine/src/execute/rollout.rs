//! Step 11 of the seed: the rollout. Updates are announced in one write, then run as the
//! Director runs them: runs of groups (serial or together), each group AZ by AZ (or all AZs
//! at once), canaries first, then `max_in_flight` at a time on a work-conserving pool.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::PoisonError;

use crate::instance::InstanceTarget;
use crate::prepare::{Planned, target};
use crate::progress::StageRun;
use crate::state::{DeploymentMeta, DeploymentState, InstanceRecord, Write};
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

/// How a batch of a deploy's updates runs: which updates it announced, (filled as they go)
/// which it started, and what it last published of its DNS records (published again after
/// the batch, if it changed them).
pub(crate) struct Rollout<'a> {
    pub(crate) announced: &'a BTreeSet<String>,
    pub(crate) started: &'a std::sync::Mutex<BTreeSet<String>>,
    pub(crate) meta: &'a mut DeploymentMeta,
}

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
        updating.retain(|uuid, _| {
            state
                .instances
                .get(uuid)
                .is_some_and(|r| !r.update_completed)
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

    /// Step 11 for one batch of [`Engine::rollout_batches`], its instances desired and
    /// announced: their templates stored, then the groups updated together, each on a
    /// work-conserving pool. Once they all succeeded, the DNS records follow the VMs they
    /// recreated (one publish at most; a failed group's are the failure's to publish, from
    /// the state as stored).
    pub(crate) async fn update_batch(
        &self,
        manifest: &DeploymentManifest,
        (groups, batch): (&[GroupSpec], &[GroupRollout<usize>]),
        planned: &mut [Planned],
        stemcells: &BTreeMap<String, String>,
        Rollout {
            announced,
            started,
            meta,
        }: Rollout<'_>,
        updated: &mut Vec<String>,
    ) -> Result<(), EngineError> {
        let deployment = manifest.name.clone().unwrap_or_default();
        let keys = batch
            .iter()
            .flat_map(|g| g.phases.iter())
            .flat_map(|p| p.canaries.iter().chain(&p.rest))
            .map(|step| step.key);
        let changed: Vec<usize> = keys.filter(|&i| !planned[i].changes.is_empty()).collect();
        for &i in &changed {
            self.upload_archive(&mut planned[i]).await?;
        }
        let tags = manifest.tags.clone().unwrap_or_default();
        let mut targets: BTreeMap<usize, InstanceTarget> = BTreeMap::new();
        for &i in &changed {
            let p = &planned[i];
            let mut target = target(
                &deployment,
                &tags,
                &groups[p.group],
                p,
                stemcells,
                &self.config.dns_root_domain,
            );
            target.announced = announced.contains(&p.record.uuid);
            targets.insert(i, target);
        }
        let outcomes: Vec<GroupOutcome> = futures::future::join_all(
            (batch.iter()).map(|g| self.update_group(g, &targets, started)),
        )
        .await;
        let mut error = None;
        for (records, failure) in outcomes {
            for (i, record) in records {
                updated.push(record.display_name());
                planned[i].record = record;
            }
            error = error.or(failure);
        }
        if let Some(e) = error {
            return Err(e);
        }
        let live = super::live_entries(super::planned_records(planned));
        self.publish_dns(&deployment, live, meta).await
    }

    /// One group's phases; the updated records and the failure that stopped it.
    async fn update_group(
        &self,
        group: &GroupRollout<usize>,
        targets: &BTreeMap<usize, InstanceTarget>,
        started: &std::sync::Mutex<BTreeSet<String>>,
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
