//! One instance's update (`bosh-protocols.md` §4.4): prepare, stop (pre-stop, drain, stop,
//! post-stop), new VM when needed, persistent disk changes, apply, start and watch. Also
//! deleting an instance and starting/stopping one. Every step that changes the instance is
//! recorded before the next one starts, so a killed run leaves a record that says what is
//! there.

use std::time::Duration;

use indexmap::IndexMap;
use tokio::time::{Instant, sleep};

use super::disks::DiskLabels;
use super::progress::{InstanceName, Milestone, StageRun};
use super::vm::{NewVm, VmRequest};
use super::{Engine, EngineError};
use crate::state::{
    AppliedSpec, DiskRecord, DiskSpec, InstanceRecord, InstanceState, OrphanedDisk, VmRecord, Write,
};
use kubosh_bosh::events::{StageTask, UpdateStep};
use kubosh_core::manifest::WatchTime;
use kubosh_core::plan::changes::{Change, Changes};
use kubosh_transport::agent::AgentClient;
use kubosh_transport::agent::protocol::{ApplySpec, DrainType, JobState, RunScriptOptions};

/// Everything needed to bring one instance to its desired state.
#[derive(Debug, Clone)]
pub struct InstanceTarget {
    /// The instance as recorded (its VM and disks).
    pub record: InstanceRecord,
    /// What it should have.
    pub desired: AppliedSpec,
    /// Started, stopped or detached.
    pub desired_state: InstanceState,
    /// Why it is touched.
    pub changes: Changes,
    /// The full apply spec (rendered templates archive included).
    pub apply: ApplySpec,
    /// How to make its VM.
    pub vm: VmRequest,
    /// How long to wait for it to run.
    pub watch: WatchTime,
    /// It is a canary.
    pub canary: bool,
    /// Its agent answered at the start of the deploy (false for a VM this deploy made:
    /// its jobs never ran, so they are not stopped).
    pub responsive: bool,
    /// Its agent reported a `job_state` other than `stopped` at the start of the deploy:
    /// stopping it takes a disk snapshot (the Director snapshots instances that were not
    /// stopped).
    pub was_running: bool,
    /// The deploy announced this update in [`crate::state::DeploymentMeta::updating`], so
    /// the record need not be written not-completed first.
    pub announced: bool,
    /// Its VM was made by this deploy ("Creating missing vms") from the desired stemcell,
    /// cloud properties, env and networks: changes that ask for a new VM (a `recreate`
    /// included) are made already.
    pub new_vm: bool,
}

impl Engine {
    /// Writes an instance record.
    pub async fn persist(&self, record: &InstanceRecord) -> Result<(), EngineError> {
        self.write(Write::Instance(Box::new(record.clone()))).await
    }

    /// Updates one instance (task `task` of `stage`).
    pub(crate) async fn update_instance(
        &self,
        stage: &StageRun,
        task: &StageTask,
        mut target: InstanceTarget,
    ) -> Result<InstanceRecord, EngineError> {
        let record = &mut target.record;
        let name = record.display_name();
        tracing::debug!(changes = ?target.changes.names(), "updating the instance");
        record.update_completed = false;
        if !target.announced {
            self.persist(record).await?;
        }

        if target.changes.is_minimal() {
            record.applied = Some(target.desired.clone());
            record.update_completed = true;
            self.persist(record).await?;
            return Ok(target.record);
        }

        let recreate = (target.changes.recreates_vm() && !target.new_vm) || record.vm.is_none();
        // Stop what runs, with the new spec so drain scripts see what comes.
        if let Some(vm) = record.vm.clone() {
            let agent = self.agent(&vm.agent_id, &name);
            if !recreate {
                agent
                    .prepare(&target.apply)
                    .await
                    .map_err(EngineError::Agent)?;
            }
            let shutdown = recreate
                || target.desired_state != InstanceState::Started
                || target.changes.contains(Change::PersistentDisk);
            // An agent that does not answer cannot stop anything (its VM is recreated).
            if target.responsive {
                self.stop_jobs(stage, task, &agent, &target.apply, shutdown, recreate)
                    .await?;
                if target.was_running {
                    let deployment = target.apply.deployment.clone().unwrap_or_default();
                    self.take_snapshots(record, &deployment, &target.desired.tags)
                        .await?;
                }
            }
            if target.desired_state == InstanceState::Stopped {
                record.state = InstanceState::Stopped;
                record.applied = Some(target.desired.clone());
                record.update_completed = true;
                self.persist(record).await?;
                return Ok(target.record);
            }
        }

        if target.desired_state == InstanceState::Detached {
            if let Some(cid) = self.delete_vm_of(record, target.responsive).await? {
                self.events.milestone(Milestone::VmDeleted {
                    instance: InstanceName::of(record),
                    cid,
                });
            }
            record.state = InstanceState::Detached;
            record.update_completed = true;
            self.persist(record).await?;
            return Ok(target.record);
        }

        let deployment = target.apply.deployment.clone().unwrap_or_default();
        let labels = DiskLabels {
            deployment: &deployment,
            tags: &target.desired.tags,
        };
        let mut swapped = None;
        if recreate {
            let (vm, intent) = self
                .replace_vm(record, &target.vm, target.responsive)
                .await?;
            swapped = intent;
            self.attach_disks(record, &vm, &labels).await?;
        }
        let plan = (&target.apply, target.desired_state, target.watch);
        let updated = async {
            self.converge_disks(record, &target.desired.disks, &name, &labels)
                .await?;
            self.apply_and_start(stage, task, record, &name, plan).await
        }
        .await;
        // The old VM is deleted whether or not the new one started: its jobs are stopped
        // and its disks are gone.
        if let Some(intent) = swapped {
            let deleted = self.delete_previous_vm(record, intent).await;
            updated?;
            deleted?;
        } else {
            updated?;
        }
        record.applied = Some(target.desired.clone());
        record.update_completed = true;
        self.persist(record).await?;
        Ok(target.record)
    }

    /// The instance's new VM: with `create-swap-delete` the one made ahead, swapped in
    /// (with the intent to settle once the old VM is deleted, after the update); otherwise
    /// the old VM deleted and a new one made from `request`.
    async fn replace_vm(
        &self,
        record: &mut InstanceRecord,
        request: &VmRequest,
        responsive: bool,
    ) -> Result<(NewVm, Option<String>), EngineError> {
        if Self::swaps(record) {
            let (vm, intent) = self.swap_vms(record, responsive).await?;
            return Ok((vm, Some(intent)));
        }
        let replaced = self.delete_vm_of(record, responsive).await?;
        let vm = self.create_instance_vm(record, request, replaced).await?;
        Ok((vm, None))
    }

    /// The end of a full update (§4.8): the agent's settings, `apply` of the spec, then for
    /// an instance to be started pre-start, start, the watch for `running` (within the watch
    /// time) and post-start. `record` is the instance's record as the update changed it.
    async fn apply_and_start(
        &self,
        stage: &StageRun,
        task: &StageTask,
        record: &mut InstanceRecord,
        name: &str,
        (apply, desired_state, watch_time): (&ApplySpec, InstanceState, WatchTime),
    ) -> Result<(), EngineError> {
        let vm = record
            .vm
            .clone()
            .ok_or_else(|| EngineError::NoVmAfterUpdate {
                instance: name.to_string(),
            })?;
        // Every full update ends its disk changes with the agent's settings
        // (`update_procedure.rb#converge_vm`): the associations of the named disks it has now
        // and the director's trusted certificates. The Director sends a recreated VM's
        // before its disks change; after them, the agent also learns of a named disk the
        // same update added.
        self.send_vm_settings(&vm.agent_id, name, &record.disks)
            .await?;
        let agent = self.agent(&vm.agent_id, name);
        stage.step(task, UpdateStep::InstallPackages, 40);
        agent.apply(apply).await.map_err(EngineError::Agent)?;
        stage.step(task, UpdateStep::ConfigureJobs, 50);
        record.state = desired_state;
        if desired_state == InstanceState::Started {
            stage.step(task, UpdateStep::PreStart, 60);
            run_script(&agent, "pre-start", None).await?;
            stage.step(task, UpdateStep::StartJobs, 70);
            agent.start().await.map_err(EngineError::Agent)?;
            watch(&agent, name, watch_time).await?;
            stage.step(task, UpdateStep::PostStart, 90);
            run_script(&agent, "post-start", None).await?;
        }
        Ok(())
    }

    /// pre-stop, drain, stop, post-stop (§4.8).
    async fn stop_jobs(
        &self,
        stage: &StageRun,
        task: &StageTask,
        agent: &AgentClient,
        spec: &ApplySpec,
        shutdown: bool,
        vm_goes: bool,
    ) -> Result<(), EngineError> {
        let next = |goes: bool| if goes { "delete" } else { "keep" }.to_string();
        let env: IndexMap<String, String> = [
            ("BOSH_VM_NEXT_STATE".to_string(), next(vm_goes)),
            ("BOSH_INSTANCE_NEXT_STATE".to_string(), next(false)),
            ("BOSH_DEPLOYMENT_NEXT_STATE".to_string(), next(false)),
        ]
        .into_iter()
        .collect();
        stage.step(task, UpdateStep::PreStop, 5);
        run_script(agent, "pre-stop", Some(env)).await?;
        stage.step(task, UpdateStep::Drain, 10);
        let kind = if shutdown {
            DrainType::Shutdown
        } else {
            DrainType::Update
        };
        agent
            .drain(kind, Some(spec))
            .await
            .map_err(EngineError::Agent)?;
        stage.step(task, UpdateStep::StopJobs, 20);
        agent.stop().await.map_err(EngineError::Agent)?;
        stage.step(task, UpdateStep::PostStop, 30);
        run_script(agent, "post-stop", None).await
    }

    /// Creates the instance's VM and records it; `replaced` is the VM it replaces, when it
    /// does (said in the milestone).
    pub(crate) async fn create_instance_vm(
        &self,
        record: &mut InstanceRecord,
        request: &VmRequest,
        replaced: Option<String>,
    ) -> Result<NewVm, EngineError> {
        let mut owner = record.clone();
        let before = &*record;
        let vm = self
            .create_vm(
                request,
                async |vm: &NewVm| {
                    owner.vm = Some(super::vm::recorded_vm(request, vm));
                    self.persist(&owner).await
                },
                // Deleted again (its agent never answered): the record as it was.
                async || self.persist(before).await,
            )
            .await?;
        *record = owner;
        let instance = InstanceName::of(record);
        self.events.milestone(match replaced {
            Some(old_cid) => Milestone::VmRecreated {
                instance,
                old_cid,
                new_cid: vm.cid.clone(),
            },
            None => Milestone::VmCreated {
                instance,
                cid: vm.cid.clone(),
            },
        });
        Ok(vm)
    }

    /// Unmounts and detaches the instance's disks (without asking the agent when it does not
    /// answer, `agent_answers` false), deletes its VM, and records that it has none. The
    /// deleted VM's CID, if it had one.
    pub(crate) async fn delete_vm_of(
        &self,
        record: &mut InstanceRecord,
        agent_answers: bool,
    ) -> Result<Option<String>, EngineError> {
        let Some(vm) = record.vm.clone() else {
            return Ok(None);
        };
        // Recorded before the disks come off: a killed run's next deploy finishes the job
        // (and gives the instance a new VM with its disks) instead of trusting a half-taken
        // VM.
        let intent = self.intend_vm_deletion(record, &vm).await?;
        self.detach_disks_from(record, &vm, agent_answers).await;
        self.delete_agent_vm(&vm.cid, &vm.agent_id, vm.cpi.as_deref())
            .await?;
        record.vm = None;
        self.persist(record).await?;
        self.settle(intent.id).await?;
        Ok(Some(vm.cid))
    }

    /// Records the intent to delete `record`'s VM `vm` (before its disks come off), settled
    /// once the record no longer names it.
    pub(crate) async fn intend_vm_deletion(
        &self,
        record: &InstanceRecord,
        vm: &VmRecord,
    ) -> Result<crate::state::Intent, EngineError> {
        let intent = crate::state::Intent {
            id: kubosh_base::ids::uuid_v4(),
            kind: crate::state::IntentKind::DeleteVm {
                instance: record.uuid.clone(),
                vm: vm.cid.clone(),
            },
            cid: None,
            cpi: vm.cpi.clone(),
        };
        self.write(Write::Intent(intent.clone())).await?;
        Ok(intent)
    }

    /// Takes the instance's disks off `vm` as the Director's `RecreateHandler` does (unmount
    /// the managed one, then detach all). An agent that does not answer is not asked again
    /// (each question would wait its timeout), nor is one the deploy found silent
    /// (`agent_answers` false); the cloud still detaches.
    pub(crate) async fn detach_disks_from(
        &self,
        record: &InstanceRecord,
        vm: &VmRecord,
        agent_answers: bool,
    ) {
        let agent = self.agent(&vm.agent_id, &record.display_name());
        let mut agent_answers = agent_answers;
        for disk in &record.disks {
            if agent_answers {
                match self.detach_disk_from_vm(&agent, &vm.cid, disk).await {
                    Ok(()) => continue,
                    Err(EngineError::Agent(_)) => agent_answers = false,
                    Err(e) => tracing::warn!(disk = %disk.cid, error = %e, "detaching a disk"),
                }
            }
            self.force_detach(&vm.cid, disk).await;
        }
    }

    /// Attaches the instance's active disks to its (new) VM, mounting the managed one, and
    /// labels them.
    pub(crate) async fn attach_disks(
        &self,
        record: &InstanceRecord,
        vm: &NewVm,
        labels: &DiskLabels<'_>,
    ) -> Result<(), EngineError> {
        let agent = self.agent(&vm.agent_id, &record.display_name());
        for disk in &record.disks {
            self.attach_disk_to_vm(&agent, &vm.cid, disk).await?;
            self.label_disk(labels, record, disk).await?;
        }
        Ok(())
    }

    /// Makes the instance's disks match `wanted` (§4.13): first the agent's mounted disks
    /// are checked against the record ([`Engine::sync_disks`]); new disks are created and
    /// mounted, changed ones changed in place when enabled
    /// ([`Engine::change_disk_in_place`]) or else replaced by a new disk the data is
    /// migrated to, unwanted ones detached. Replaced and unwanted disks are orphaned, never
    /// deleted.
    pub(crate) async fn converge_disks(
        &self,
        record: &mut InstanceRecord,
        wanted: &[DiskSpec],
        name: &str,
        labels: &DiskLabels<'_>,
    ) -> Result<(), EngineError> {
        let Some(vm) = record.vm.clone() else {
            return Ok(());
        };
        let agent = self.agent(&vm.agent_id, name);
        let unchanged = |spec: &DiskSpec, d: &DiskRecord| {
            d.name == spec.name
                && d.size_mib == spec.size_mib
                && d.cloud_properties == spec.cloud_properties
        };
        let changes = wanted
            .iter()
            .any(|spec| !record.disks.iter().any(|d| unchanged(spec, d)))
            || record
                .disks
                .iter()
                .any(|d| !wanted.iter().any(|w| w.name == d.name));
        if changes {
            self.sync_disks(record, &agent, &vm.cid, wanted).await?;
        }
        for spec in wanted {
            let current = record.disks.iter().find(|d| d.name == spec.name).cloned();
            if current.as_ref().is_some_and(|d| unchanged(spec, d)) {
                continue;
            }
            if let Some(old) = &current
                && self
                    .change_disk_in_place(record, &agent, &vm.cid, old, spec)
                    .await?
            {
                continue;
            }
            if current.is_none()
                && let Some(orphan) = self.orphan_for(record, spec).await?
            {
                self.reattach_orphan(record, &agent, &vm.cid, orphan, labels)
                    .await?;
                continue;
            }
            self.replace_disk(record, &agent, &vm.cid, spec, current, labels)
                .await?;
        }
        let unwanted: Vec<DiskRecord> = record
            .disks
            .iter()
            .filter(|d| !wanted.iter().any(|w| w.name == d.name))
            .cloned()
            .collect();
        for old in unwanted {
            self.orphan_disk(&old, record).await?;
            record.disks.retain(|d| d.cid != old.cid);
            self.persist(record).await?;
            self.release_disk(&agent, &vm.cid, &old).await;
            self.events.milestone(Milestone::DiskOrphaned {
                instance: InstanceName::of(record),
                cid: old.cid,
            });
        }
        Ok(())
    }

    /// Gives `record` back its disk from before its group was removed: recorded as the
    /// instance's first (the orphan record goes next, and an orphan an instance lists is
    /// never deleted), then attached and mounted with its data.
    async fn reattach_orphan(
        &self,
        record: &mut InstanceRecord,
        agent: &AgentClient,
        vm_cid: &str,
        orphan: OrphanedDisk,
        labels: &DiskLabels<'_>,
    ) -> Result<(), EngineError> {
        record.disks.push(orphan.disk.clone());
        self.persist(record).await?;
        (self.write(Write::DeleteOrphanedDisk(orphan.disk.cid.clone()))).await?;
        self.attach_disk_to_vm(agent, vm_cid, &orphan.disk).await?;
        self.label_disk(labels, record, &orphan.disk).await?;
        super::progress::warn(
            self.events.as_ref(),
            format!(
                "Attached orphaned disk '{}' of '{}' to '{}'",
                orphan.disk.cid,
                orphan.instance,
                record.display_name()
            ),
        );
        Ok(())
    }

    /// Makes `spec`'s disk new: created, attached, the managed disk's data migrated from
    /// `current` (a named disk's replacement starts empty), then the new one recorded as
    /// active and `current` orphaned with its data.
    async fn replace_disk(
        &self,
        record: &mut InstanceRecord,
        agent: &AgentClient,
        vm_cid: &str,
        spec: &DiskSpec,
        current: Option<DiskRecord>,
        labels: &DiskLabels<'_>,
    ) -> Result<(), EngineError> {
        let cpi = record.vm.as_ref().and_then(|vm| vm.cpi.clone());
        let (disk, intent) = self
            .create_disk(
                &record.uuid,
                &spec.name,
                spec.size_mib,
                &spec.cloud_properties,
                Some(vm_cid),
                cpi.as_deref(),
            )
            .await?;
        self.attach_disk_to_vm(agent, vm_cid, &disk).await?;
        self.label_disk(labels, record, &disk).await?;
        // Data moves to a new managed disk; a named disk's replacement starts empty, as
        // the Director's `update_disk` leaves it.
        if let Some(old) = current
            .as_ref()
            .filter(|old| old.is_managed() && disk.is_managed())
        {
            agent
                .migrate_disk(&old.cid, &disk.cid)
                .await
                .map_err(EngineError::Agent)?;
        }
        // The new disk is active from here on; the old one is orphaned with its data.
        record.disks.retain(|d| d.name != spec.name);
        record.disks.push(disk.clone());
        if let Some(old) = current {
            self.orphan_disk(&old, record).await?;
            self.persist(record).await?;
            self.settle(intent).await?;
            self.release_disk(agent, vm_cid, &old).await;
            self.events.milestone(Milestone::DiskMigrated {
                instance: InstanceName::of(record),
                old_cid: old.cid,
                new_cid: disk.cid,
                size_mib: disk.size_mib,
            });
        } else {
            self.persist(record).await?;
            self.settle(intent).await?;
            self.events.milestone(Milestone::DiskCreated {
                instance: InstanceName::of(record),
                cid: disk.cid,
                size_mib: disk.size_mib,
            });
        }
        Ok(())
    }

    /// The orphaned disk `record` gets back instead of a new one: orphaned from the same
    /// group and index, in its AZ, with the name, size and cloud properties `spec` asks for.
    async fn orphan_for(
        &self,
        record: &InstanceRecord,
        spec: &DiskSpec,
    ) -> Result<Option<OrphanedDisk>, EngineError> {
        let orphans = self.store.orphaned_disks().await?;
        let group = format!("{}/", record.group);
        Ok(orphans
            .into_values()
            .filter(|o| o.instance.starts_with(&group) && o.index == Some(record.index))
            .filter(|o| o.az == record.az)
            .filter(|o| {
                let vm_cpi = record.vm.as_ref().and_then(|vm| vm.cpi.as_deref());
                self.named_clouds.same(o.disk.cpi.as_deref(), vm_cpi)
            })
            .filter(|o| o.disk.name == spec.name && o.disk.size_mib == spec.size_mib)
            .find(|o| o.disk.cloud_properties == spec.cloud_properties))
    }

    /// Records a disk of `instance` as orphaned.
    pub(crate) async fn orphan_disk(
        &self,
        disk: &DiskRecord,
        instance: &InstanceRecord,
    ) -> Result<(), EngineError> {
        self.write(Write::OrphanedDisk(OrphanedDisk {
            disk: disk.clone(),
            instance: instance.name(),
            index: Some(instance.index),
            az: instance.az.clone(),
            orphaned_at: now_rfc3339(),
        }))
        .await
    }

    /// Detaches a disk that is no longer the instance's ([`Engine::detach_disk_from_vm`]);
    /// errors are not fatal: the disk is orphaned already, and the cloud still detaches it.
    async fn release_disk(&self, agent: &AgentClient, vm_cid: &str, disk: &DiskRecord) {
        if let Err(e) = self.detach_disk_from_vm(agent, vm_cid, disk).await {
            tracing::warn!(disk = %disk.cid, error = %e, "detaching an orphaned disk");
            self.force_detach(vm_cid, disk).await;
        }
    }

    /// Deletes an instance (§4.1 "Deleting unneeded instances"): stops it, detaches and
    /// orphans its disks, deletes its VM, forgets it.
    pub async fn delete_instance(&self, mut record: InstanceRecord) -> Result<(), EngineError> {
        let name = record.display_name();
        if let Some(vm) = record.vm.clone() {
            let agent = self.agent(&vm.agent_id, &name);
            let env: IndexMap<String, String> = ["BOSH_VM_NEXT_STATE", "BOSH_INSTANCE_NEXT_STATE"]
                .into_iter()
                .map(|k| (k.to_string(), "delete".to_string()))
                .chain([("BOSH_DEPLOYMENT_NEXT_STATE".to_string(), "keep".to_string())])
                .collect();
            // A dead agent must not keep its VM alive.
            if agent.ping().await.is_ok() {
                let _ = run_script(&agent, "pre-stop", Some(env)).await;
                agent
                    .drain(DrainType::Shutdown, None)
                    .await
                    .map_err(EngineError::Agent)?;
                agent.stop().await.map_err(EngineError::Agent)?;
            }
        }
        for disk in record.disks.clone() {
            self.orphan_disk(&disk, &record).await?;
        }
        let instance = InstanceName::of(&record);
        let deleted = self.delete_vm_of(&mut record, true).await?;
        self.write(Write::DeleteInstance(record.uuid.clone()))
            .await?;
        if let Some(cid) = deleted {
            self.events.milestone(Milestone::VmDeleted {
                instance: instance.clone(),
                cid,
            });
        }
        for disk in record.disks {
            self.events.milestone(Milestone::DiskOrphaned {
                instance: instance.clone(),
                cid: disk.cid,
            });
        }
        Ok(())
    }
}

/// Runs a lifecycle script on the agent (agents without the script succeed).
pub async fn run_script(
    agent: &AgentClient,
    script: &str,
    env: Option<IndexMap<String, String>>,
) -> Result<(), EngineError> {
    agent
        .run_script(script, &RunScriptOptions { env })
        .await
        .map_err(EngineError::Agent)
}

/// Waits for the instance's jobs to run (§4.7): the first check after `min`, then at least
/// once a second (BOSH checks at most every 15 s) until `max`.
async fn watch(agent: &AgentClient, name: &str, watch: WatchTime) -> Result<(), EngineError> {
    let start = Instant::now();
    let max = Duration::from_millis(watch.max_ms.max(watch.min_ms));
    sleep(Duration::from_millis(watch.min_ms)).await;
    loop {
        let state = agent.get_state(false).await.map_err(EngineError::Agent)?;
        if state.job_state == JobState::Running {
            return Ok(());
        }
        let elapsed = start.elapsed();
        if elapsed >= max {
            return Err(EngineError::NotRunning {
                instance: name.to_string(),
                failing: state
                    .failing_processes()
                    .into_iter()
                    .map(String::from)
                    .collect(),
            });
        }
        sleep((max - elapsed).min(Duration::from_secs(1))).await;
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}
