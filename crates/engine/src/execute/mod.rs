//! A [`DeployPlan`] carried out: the seed's steps from the first change on (the planned
//! addresses are claimed before [`Engine::execute`] runs). Stemcells uploaded, then two
//! branches at once: packages compiled (`compile`), and beside it, once compilation's first
//! workers' VMs are up, obsolete instances deleted, missing VMs created (with new instances'
//! first disks), and the rollout (`rollout`) batch by batch, each as soon as its groups'
//! packages compiled. Then unused addresses released (`addresses`) and `post-deploy`, which
//! the Director runs once every instance is updated and so do we; the DNS records
//! published as VMs come and go (`dns`).

pub(crate) mod addresses;
mod compile;
mod dns;
mod rollout;

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;

use crate::lock::{Holder, STEMCELL_LOCK};
use crate::prepare::{
    DeployPlan, DeployReport, InstancePlan, PackageSource, Planned, PlannedCompilation, Resolved,
    instance_plan, vm_request,
};
use crate::progress::StageRun;
use crate::state::{
    DeploymentMeta, DeploymentState, InstanceRecord, InstanceState, IntentKind, StemcellRecord,
    Write, stemcell_key,
};
use crate::{Engine, EngineError, PlanError};
use compile::{CompileProgress, CompileWatch};
use dns::live_entries;
use kubosh_bosh::events::instance_task;
use kubosh_cloud::CreateStemcell;
use kubosh_core::manifest::{CloudConfig, DeploymentManifest};
use kubosh_core::plan::desired::{DesiredError, GroupSpec};
use rollout::BatchInputs;

/// What [`Engine::make_machines`] works from besides the planned instances.
struct Machines<'a> {
    manifest: &'a DeploymentManifest,
    groups: &'a [GroupSpec],
    stemcells: &'a BTreeMap<String, String>,
    obsolete: &'a [String],
    /// What compilation has done so far.
    compiled: CompileWatch,
}

/// Whether `p`'s VM is replaced create-swap-delete and its next VM is not made yet.
fn next_vm_wanted(p: &Planned) -> bool {
    p.swap && p.changes.recreates_vm() && p.record.vm.is_some() && p.record.inactive_vm.is_none()
}

/// The records of the planned instances, as the deploy has changed them so far.
fn planned_records(planned: &[Planned]) -> impl Iterator<Item = &InstanceRecord> {
    planned.iter().map(|p| &p.record)
}

impl Engine {
    /// Carries out a plan whose addresses are claimed: the deploy's changes, in the seed's
    /// order but for what need not wait (issue 29): obsolete instances, missing VMs and a
    /// group's rollout go as soon as what they need is there, while packages compile.
    /// Packages compiled now decide the instances' final desired specs and changes
    /// (planning knew all but their blobs).
    pub(crate) async fn execute(&self, plan: DeployPlan<'_>) -> Result<DeployReport, EngineError> {
        let DeployPlan {
            request,
            resolved,
            inputs,
            mut state,
            vanished,
            instances: mut planned,
            obsolete,
            addresses,
            link_group_ids,
            compilation,
            shared_links,
        } = plan;
        let Resolved {
            manifest, groups, ..
        } = &resolved;
        self.record_first(&mut state, &vanished, link_group_ids)
            .await?;
        let stemcells = self
            .upload_stemcells(
                &request.stemcells,
                stemcells_in_use(groups, &planned, &compilation, resolved.cloud),
                &mut state,
            )
            .await?;
        // Packages compile while obsolete instances go and missing VMs (with their first
        // disks) are made, and groups roll out as soon as their own packages compiled:
        // neither needs more of the other (issue 29). Compilation's first workers go first:
        // it is the longer path, their VMs show the cloud makes VMs, and a compilation that
        // fails before them leaves the instances as they were.
        let (progress, compiled) = CompileProgress::of(&compilation);
        let source = compilation.package_source();
        let compiling = self.compile(
            resolved.compile_inputs(&addresses),
            compilation,
            &stemcells,
            progress,
        );
        let machines = Machines {
            manifest,
            groups,
            stemcells: &stemcells,
            obsolete: &obsolete,
            compiled,
        };
        let mut updated = Vec::new();
        let rolling_out = self.machines_then_rollout(
            machines,
            (&resolved, request, &source),
            &mut planned,
            &mut state,
            &mut updated,
        );
        let (compiled, rolled_out) = futures::join!(compiling, rolling_out);
        // The rollout's failure is the deploy's (compilation then stopped for it); when
        // compilation failed, the rollout only stopped.
        let ((packages, records), (deleted, plans)) = match (compiled, rolled_out) {
            (Ok(compiled), Ok(Some(rolled_out))) => (compiled, rolled_out),
            (compiled, Err(e)) => {
                if let Err(other) = compiled {
                    tracing::debug!(error = %other, "compilation stopped");
                }
                return Err(e);
            }
            (Err(e), Ok(_)) => return Err(e),
            (Ok(_), Ok(None)) => return Err(PlanError::RolloutWithoutPackages.into()),
        };
        // Each was made durable as its compile ended.
        for record in records {
            state.apply(&Write::CompiledPackage(record));
        }
        // The groups nothing was rolled out to get their final specs too.
        let unchanged: BTreeSet<usize> = (planned.iter().zip(&plans))
            .filter(|(_, plan)| plan.is_none())
            .map(|(p, _)| p.group)
            .collect();
        let asked = (request, &self.config);
        resolved.desire(&mut planned, &packages, asked, Some(&unchanged));
        let mut report = DeployReport::of(&planned, &obsolete, &state, &packages);
        report.plan = (planned.iter().zip(plans))
            .map(|(p, plan)| plan.unwrap_or_else(|| instance_plan(p)))
            .collect();
        report.noop = DeployReport::changes_nothing(&planned, &obsolete, packages.compiled > 0);
        report.deleted = deleted;
        report.updated = updated;
        // Before the inputs are recorded: a deploy that could not publish is not a no-op
        // next time.
        self.publish_links(request.name(), Some(shared_links))
            .await?;
        self.conclude(manifest, &planned, state, inputs, &report)
            .await?;
        Ok(report)
    }

    /// What is recorded before the first change, whatever happens next: instances whose VM
    /// vanished without it (no one asks that VM again), new link groups' ids.
    async fn record_first(
        &self,
        state: &mut DeploymentState,
        vanished: &[String],
        link_group_ids: BTreeMap<String, u64>,
    ) -> Result<(), EngineError> {
        for uuid in vanished {
            if let Some(record) = state.instances.get(uuid) {
                self.persist(record).await?;
            }
        }
        if link_group_ids != state.meta.link_group_ids {
            state.meta.link_group_ids = link_group_ids;
            self.write(Write::Meta(state.meta.clone())).await?;
        }
        Ok(())
    }

    /// Instances to delete or detach out of the DNS records before their VMs go. An instance
    /// whose VM vanished (and nothing else) waits for the publish after "Creating missing
    /// vms", which names its new VM: its VM is gone either way, and it is published once.
    async fn publish_dns_of_leaving(
        &self,
        deployment: &str,
        planned: &[Planned],
        obsolete: &[String],
        meta: &mut DeploymentMeta,
    ) -> Result<(), EngineError> {
        let leaving = !obsolete.is_empty()
            || (planned.iter())
                .any(|p| p.record.state == InstanceState::Detached && p.record.vm.is_some());
        if !leaving {
            return Ok(());
        }
        self.publish_dns(deployment, live_entries(planned_records(planned)), meta)
            .await
    }

    /// After the rollout: DNS published (when a stage before left it behind), unused
    /// addresses released, `post-deploy` when anything changed, and the deployed inputs
    /// recorded (announcements end with the updates: only instances still dirty keep
    /// theirs).
    async fn conclude(
        &self,
        manifest: &DeploymentManifest,
        planned: &[Planned],
        mut state: DeploymentState,
        inputs: String,
        report: &DeployReport,
    ) -> Result<(), EngineError> {
        let deployment = manifest.name.as_deref().unwrap_or_default();
        self.publish_dns(
            deployment,
            live_entries(planned_records(planned)),
            &mut state.meta,
        )
        .await?;
        let held: Vec<&InstanceRecord> = planned.iter().map(|p| &p.record).collect();
        self.release_unused_ips(manifest.name.as_deref().unwrap_or_default(), held)
            .await?;
        if !report.updated.is_empty() || !report.deleted.is_empty() {
            self.run_post_deploy(planned).await?;
        }
        let mut meta = DeploymentMeta {
            deployed_inputs: Some(inputs),
            ..state.meta.clone()
        };
        meta.updating.retain(|uuid, _| {
            planned
                .iter()
                .any(|p| &p.record.uuid == uuid && !p.record.update_completed)
        });
        self.write(Write::Meta(meta)).await
    }

    /// Publishes (`None`: withdraws) the deployment's shared link providers, for the
    /// deployments that consume from it.
    pub(crate) async fn publish_links(
        &self,
        deployment: &str,
        links: Option<Vec<kubosh_core::state::SharedLink>>,
    ) -> Result<(), EngineError> {
        match &self.config.link_registry {
            Some(registry) => Ok(registry.publish(deployment, links).await?),
            None => Ok(()),
        }
    }

    /// The deploy's branch beside compilation: the machines ([`Engine::make_machines`]),
    /// then the rollout batch by batch ([`Engine::rollout_batches`]), each once its groups'
    /// packages compiled: desired, announced, updated. `None` when compilation failed first
    /// (nothing more was started); when this branch fails, compilation starts no further
    /// package. The names of the instances deleted and the plan of each instance desired
    /// for its rollout.
    async fn machines_then_rollout(
        &self,
        machines: Machines<'_>,
        inputs: (&Resolved<'_>, &crate::DeployRequest, &PackageSource),
        planned: &mut [Planned],
        state: &mut DeploymentState,
        updated: &mut Vec<String>,
    ) -> Result<Option<(Vec<String>, Vec<Option<InstancePlan>>)>, EngineError> {
        let compiled = machines.compiled.clone();
        let rolled_out =
            (self.machines_and_batches(machines, inputs, planned, state, updated)).await;
        // A failed canary need not wait for every package to compile.
        if rolled_out.is_err() {
            compiled.stop_compiling();
        }
        rolled_out
    }

    /// [`Engine::machines_then_rollout`], but for stopping compilation when it fails.
    async fn machines_and_batches(
        &self,
        machines: Machines<'_>,
        (resolved, request, source): (&Resolved<'_>, &crate::DeployRequest, &PackageSource),
        planned: &mut [Planned],
        state: &mut DeploymentState,
        updated: &mut Vec<String>,
    ) -> Result<Option<(Vec<String>, Vec<Option<InstancePlan>>)>, EngineError> {
        let mut compiled = machines.compiled.clone();
        let (manifest, groups, stemcells) =
            (machines.manifest, machines.groups, machines.stemcells);
        let made =
            (self.make_machines(machines, planned, &state.instances, &mut state.meta)).await?;
        let Some(deleted) = made else {
            return Ok(None);
        };
        let initial_deploy = state.meta.deployed_inputs.is_none();
        let mut plans = vec![None; planned.len()];
        let inputs = BatchInputs {
            manifest,
            groups,
            stemcells,
            resolved,
            request,
            source,
        };
        for batch in self.rollout_batches(groups, planned, initial_deploy) {
            let went_on = self
                .roll_out_batch(
                    &inputs,
                    batch,
                    &mut compiled,
                    (&mut *planned, &mut *state),
                    (&mut *updated, &mut plans),
                )
                .await?;
            if !went_on {
                return Ok(None);
            }
        }
        Ok(Some((deleted, plans)))
    }

    /// Steps 5 and 9–10, while packages compile, once compilation's first workers' VMs are
    /// up (`None` when it failed before: nothing is done): the DNS records without the
    /// instances leaving, obsolete instances deleted, the missing VMs made with their first
    /// disks, and the records with the new VMs published. The names of the instances
    /// deleted.
    async fn make_machines(
        &self,
        machines: Machines<'_>,
        planned: &mut [Planned],
        recorded: &BTreeMap<String, InstanceRecord>,
        meta: &mut DeploymentMeta,
    ) -> Result<Option<Vec<String>>, EngineError> {
        let Machines {
            manifest,
            groups,
            stemcells,
            obsolete,
            mut compiled,
        } = machines;
        if !compiled.first_workers_up().await {
            return Ok(None);
        }
        let deployment = manifest.name.as_deref().unwrap_or_default();
        self.publish_dns_of_leaving(deployment, planned, obsolete, meta)
            .await?;
        let deleted = self.delete_obsolete(recorded, obsolete).await?;
        self.create_missing_vms(manifest, groups, planned, stemcells, recorded)
            .await?;
        // The new VMs in the records (the seed's DNS step after "Creating missing vms").
        self.publish_dns(deployment, live_entries(planned_records(planned)), meta)
            .await?;
        Ok(Some(deleted))
    }

    /// Step 5: deletes instances no longer wanted, disks orphaned; their names.
    async fn delete_obsolete(
        &self,
        recorded: &BTreeMap<String, InstanceRecord>,
        obsolete: &[String],
    ) -> Result<Vec<String>, EngineError> {
        if obsolete.is_empty() {
            return Ok(Vec::new());
        }
        // Collected first: a lazy iterator with a borrowing closure would make the deploy
        // future not `Send` (rust-lang/rust#102211), and the controller spawns it.
        let records: Vec<InstanceRecord> = obsolete
            .iter()
            .filter_map(|uuid| recorded.get(uuid).cloned())
            .collect();
        self.delete_instances("Deleting unneeded instances", records)
            .await
    }

    /// Deletes `records` as the tasks of stage `stage`, all at once (the cloud is paced by
    /// what it answers: [`kubosh_cloud::PacedCloud`]), none started once the task is
    /// cancelled; their names, sorted.
    pub(crate) async fn delete_instances(
        &self,
        stage: &str,
        records: Vec<InstanceRecord>,
    ) -> Result<Vec<String>, EngineError> {
        let stage = StageRun::new(self.events.clone(), stage, vec![], records.len());
        let work = records.into_iter().map(|r| {
            let stage = stage.clone();
            async move {
                self.checkpoint()?;
                let name = r.display_name();
                stage
                    .task(name.clone(), self.delete_instance(r))
                    .await
                    .map(|()| name)
            }
        });
        let at_once = work.len().max(1);
        let results: Vec<Result<String, EngineError>> = futures::stream::iter(work)
            .buffer_unordered(at_once)
            .collect()
            .await;
        let mut deleted = results.into_iter().collect::<Result<Vec<_>, _>>()?;
        deleted.sort();
        Ok(deleted)
    }

    /// Uploads the stemcells in use (`name/version` and CPI: each instance's AZ's, the
    /// compilation AZ's for the stemcells packages compile on) that their cloud does not
    /// have yet; their CIDs by [`stemcell_key`]. A stemcell is uploaded once per CPI for
    /// every deployment of the director: the uploads hold [`STEMCELL_LOCK`] and look again
    /// at what the store has under it, so two deploys never upload the same one twice.
    async fn upload_stemcells(
        &self,
        sources: &[crate::StemcellSource],
        used: BTreeSet<(String, Option<String>)>,
        state: &mut DeploymentState,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        let mut out = BTreeMap::new();
        let mut missing = Vec::new();
        for (stemcell, cpi) in used {
            match self.recorded_stemcell(state, &stemcell, cpi.as_deref()) {
                Some(cid) => {
                    out.insert(stemcell_key(&stemcell, cpi.as_deref()), cid);
                }
                None => missing.push((stemcell, cpi)),
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let holder = Holder::new(STEMCELL_LOCK, "upload stemcells");
        let _guard = (self.locks)
            .acquire(STEMCELL_LOCK, &holder, self.config.lock_wait)
            .await?;
        state.stemcells = self.store.stemcells().await?;
        for (stemcell, cpi) in missing {
            let key = stemcell_key(&stemcell, cpi.as_deref());
            let cid = match self.recorded_stemcell(state, &stemcell, cpi.as_deref()) {
                Some(cid) => cid,
                None => {
                    self.upload_stemcell(sources, &stemcell, cpi.as_deref(), state)
                        .await?
                }
            };
            out.insert(key, cid);
        }
        Ok(out)
    }

    /// The CID of `stemcell` in the cloud of `cpi`, if recorded there (under that CPI's name
    /// or one it was migrated from).
    fn recorded_stemcell(
        &self,
        state: &DeploymentState,
        stemcell: &str,
        cpi: Option<&str>,
    ) -> Option<String> {
        (state.stemcells.values())
            .find(|s| s.stemcell() == stemcell && self.named_clouds.same(s.cpi.as_deref(), cpi))
            .map(|s| s.cid.clone())
    }

    /// `create_stemcell` of `stemcell` in the cloud of `cpi`, bracketed by an intent.
    async fn upload_stemcell(
        &self,
        sources: &[crate::StemcellSource],
        stemcell: &str,
        cpi: Option<&str>,
        state: &mut DeploymentState,
    ) -> Result<String, EngineError> {
        let Some(source) = sources.iter().find(|s| s.info.key() == stemcell) else {
            return Err(PlanError::Desired(vec![DesiredError::StemcellMissing {
                wanted: stemcell.to_string(),
            }])
            .into());
        };
        let cloud = self.cloud_of(cpi, &format!("stemcell {stemcell}"))?;
        let intent = crate::state::Intent {
            id: kubosh_base::ids::uuid_v4(),
            kind: IntentKind::CreateStemcell {
                stemcell: stemcell_key(stemcell, cpi),
            },
            cid: None,
            cpi: cpi.map(str::to_string),
        };
        self.write(Write::Intent(intent.clone())).await?;
        let request = CreateStemcell {
            image_path: source.image_path.clone(),
            cloud_properties: source.cloud_properties.clone(),
        };
        let cid = match cloud.create_stemcell(&request).await {
            Ok(cid) => cid,
            Err(e) => return Err(self.not_created(e, &intent).await),
        };
        let record = StemcellRecord {
            name: source.info.name.clone(),
            version: source.info.version.clone(),
            os: source.info.os.clone(),
            cid: cid.0.clone(),
            cpi: cpi.map(str::to_string),
        };
        self.write(Write::Stemcell(record.clone())).await?;
        state.apply(&Write::Stemcell(record));
        self.settle(intent.id).await?;
        Ok(cid.0)
    }

    /// Steps 9–10: VMs for instances that have none ("Creating missing vms"), with their
    /// first persistent disks (an instance with none recorded: nothing on it to keep or
    /// move, so the disk need not wait for its update), and the next VMs of instances whose
    /// VM is replaced create-swap-delete (made ahead, with the new addresses; `recorded` has
    /// the addresses their old VMs keep until they are gone).
    async fn create_missing_vms(
        &self,
        manifest: &DeploymentManifest,
        groups: &[GroupSpec],
        planned: &mut [Planned],
        stemcells: &BTreeMap<String, String>,
        recorded: &BTreeMap<String, InstanceRecord>,
    ) -> Result<(), EngineError> {
        let missing: Vec<usize> = planned
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                (p.record.vm.is_none() && p.record.state != InstanceState::Detached)
                    || next_vm_wanted(p)
            })
            .map(|(i, _)| i)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let stage = StageRun::new(
            self.events.clone(),
            "Creating missing vms",
            vec![],
            missing.len(),
        );
        let deployment = manifest.name.clone().unwrap_or_default();
        let tags = manifest.tags.clone().unwrap_or_default();
        let work = missing.clone().into_iter().map(|i| {
            let p = &planned[i];
            let request = vm_request(&deployment, &tags, &groups[p.group], p, stemcells);
            let mut record = p.record.clone();
            // The next VM of a create-swap-delete: its old VM keeps its addresses.
            let previous_ips = next_vm_wanted(p).then(|| {
                (recorded.get(&record.uuid))
                    .map(|r| r.ips.clone())
                    .unwrap_or_default()
            });
            let (disks, disk_tags) = (&p.desired.disks, &p.desired.tags);
            let deployment = &deployment;
            let stage = stage.clone();
            async move {
                let task = instance_task(&record.group, &record.uuid, record.index, false);
                let created = stage
                    .task(task, async {
                        self.checkpoint()?;
                        if let Some(previous_ips) = previous_ips {
                            return (self.create_next_vm(&mut record, &request, previous_ips))
                                .await;
                        }
                        let labels = crate::disks::DiskLabels {
                            deployment,
                            tags: disk_tags,
                        };
                        self.persist(&record).await?;
                        let vm = self.create_instance_vm(&mut record, &request, None).await?;
                        if record.disks.is_empty() {
                            let name = record.display_name();
                            self.converge_disks(&mut record, disks, &name, &labels)
                                .await?;
                        } else {
                            // A detached instance coming back keeps its disks; a change to
                            // them waits for its update.
                            self.attach_disks(&record, &vm, &labels).await?;
                        }
                        self.send_vm_settings(&vm.agent_id, &record.display_name(), &record.disks)
                            .await
                    })
                    .await;
                (i, created.map(|_| record))
            }
        });
        let results: Vec<(usize, Result<InstanceRecord, EngineError>)> =
            futures::stream::iter(work)
                .buffer_unordered(missing.len())
                .collect()
                .await;
        let mut first_error = None;
        for (i, result) in results {
            match result {
                Ok(record) => planned[i].record = record,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// §4.1 step 6: `post-deploy` on every running instance, once anything changed: every
    /// agent asked at once (the Director asks `max_threads` at a time: at 10,000 instances
    /// that was minutes of a deploy).
    async fn run_post_deploy(&self, planned: &[Planned]) -> Result<(), EngineError> {
        let vms: Vec<_> = planned
            .iter()
            .filter(|p| p.record.state == InstanceState::Started)
            .filter_map(|p| Some((p.record.vm.clone()?, p.record.display_name())))
            .collect();
        let runs = vms.into_iter().map(|(vm, name)| async move {
            crate::instance::run_script(&self.agent(&vm.agent_id, &name), "post-deploy", None).await
        });
        let at_once = runs.len().max(1);
        let results: Vec<Result<(), EngineError>> = futures::stream::iter(runs)
            .buffer_unordered(at_once)
            .collect()
            .await;
        results.into_iter().collect()
    }
}

/// The stemcells a deploy uses, each with the CPI it is needed in: every planned instance's
/// on its AZ's CPI, and the stemcells packages compile on on the compilation AZ's.
fn stemcells_in_use(
    groups: &[GroupSpec],
    planned: &[Planned],
    compilation: &PlannedCompilation,
    cloud: &CloudConfig,
) -> BTreeSet<(String, Option<String>)> {
    let workers_cpi = crate::clouds::cpi_of_az(
        cloud,
        cloud.compilation.as_ref().and_then(|c| c.az.as_deref()),
    );
    let instances = planned
        .iter()
        .map(|p| (groups[p.group].stemcell.key(), p.cpi.clone()));
    let compiled_on = (compilation.plan.tasks.iter()).map(|t| {
        (
            format!("{}/{}", t.stemcell.name, t.stemcell.version),
            workers_cpi.clone(),
        )
    });
    instances.chain(compiled_on).collect()
}
