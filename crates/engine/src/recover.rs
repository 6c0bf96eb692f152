//! Settling what a killed run left behind: pending intents (a cloud creation whose result
//! was never recorded, or recorded but never owned) and orphan records of disks that are
//! still in use, and the inactive VMs of create-swap-delete (`swap.rs`).

use std::time::Duration;

use super::{Engine, EngineError, progress};
use crate::state::{DeploymentState, Intent, IntentKind, Write};
use kubosh_cloud::{DiskCid, SnapshotCid, StemcellCid, VmCid};

impl Engine {
    /// Settles every pending intent of `state` (updating it as the store is updated):
    /// creations the owner record carries are kept, everything else the cloud made is
    /// deleted. A VM whose CID was never recorded is found through its agent, which knows
    /// its VM's name; what cannot be found within `wait` is reported and forgotten.
    pub async fn recover(
        &self,
        state: &mut DeploymentState,
        wait: Duration,
    ) -> Result<(), EngineError> {
        let intents: Vec<Intent> = state.intents.values().cloned().collect();
        for intent in intents {
            if self.settle_intent(state, &intent, wait).await? {
                let write = Write::DeleteIntent(intent.id.clone());
                self.write(write.clone()).await?;
                state.apply(&write);
            }
        }
        // A VM made ahead for create-swap-delete, or one a swap replaced, whose run was
        // killed (after the intents: a pending `DeleteVm` may still need the old VM).
        self.delete_inactive_vms(state).await?;
        // A disk orphaned just before its instance record let go of it is still in use.
        let active: Vec<String> = state
            .instances
            .values()
            .flat_map(|i| i.disks.iter().map(|d| d.cid.clone()))
            .filter(|cid| state.orphaned_disks.contains_key(cid))
            .collect();
        for cid in active {
            let write = Write::DeleteOrphanedDisk(cid);
            self.write(write.clone()).await?;
            state.apply(&write);
        }
        Ok(())
    }

    /// Deletes what one intent made unless its owner has it; true when it is settled.
    async fn settle_intent(
        &self,
        state: &mut DeploymentState,
        intent: &Intent,
        wait: Duration,
    ) -> Result<bool, EngineError> {
        match &intent.kind {
            IntentKind::CreateVm { instance, agent_id } => {
                self.settle_create_vm(state, intent, instance.as_deref(), agent_id, wait)
                    .await
            }
            IntentKind::DeleteVm { instance, vm } => {
                (self.settle_delete_vm(state, instance, vm, intent.cpi.as_deref())).await
            }
            IntentKind::CreateDisk { instance, name } => {
                self.settle_create_disk(state, intent, instance, name, wait)
                    .await
            }
            IntentKind::SnapshotDisk { disk } => self.settle_snapshot(state, intent, disk).await,
            IntentKind::CreateStemcell { stemcell } => {
                self.settle_create_stemcell(state, intent, stemcell).await
            }
        }
    }

    /// A `create_vm` the owner does not carry: the VM (by its recorded CID, or found through
    /// its agent within `wait`) is deleted.
    async fn settle_create_vm(
        &self,
        state: &DeploymentState,
        intent: &Intent,
        instance: Option<&str>,
        agent_id: &str,
        wait: Duration,
    ) -> Result<bool, EngineError> {
        let owned = (state.instances.values()).any(|i| i.agent_ids().any(|a| a == agent_id));
        if owned {
            return Ok(true);
        }
        let cpi = intent.cpi.as_deref();
        let cid = match &intent.cid {
            Some(cid) => Some(cid.clone()),
            None => self.find_vm_of(agent_id, cpi, wait).await?,
        };
        match cid {
            Some(cid) => {
                self.delete_agent_vm(&cid, agent_id, cpi).await?;
                tracing::info!(vm = %cid, agent_id, "deleted a VM a previous run created but never recorded");
                Ok(true)
            }
            None => {
                progress::warn(
                    self.events.as_ref(),
                    format!(
                        "A previous run asked the cloud for a VM (agent id {agent_id}{}) and stopped before the cloud answered; no agent with that id answered within {} s, so no VM was made",
                        instance
                            .as_ref()
                            .map(|i| format!(", instance {i}"))
                            .unwrap_or_default(),
                        wait.as_secs()
                    ),
                );
                Ok(true)
            }
        }
    }

    /// A `delete_vm` that may not have finished: its disks detached, the VM deleted, and the
    /// owner that still names it without a VM.
    async fn settle_delete_vm(
        &self,
        state: &mut DeploymentState,
        instance: &str,
        vm: &str,
        cpi: Option<&str>,
    ) -> Result<bool, EngineError> {
        // An owner already on another VM took its disks there (a settle that was
        // deferred): they are not this VM's to detach.
        let disks = match state.instances.get(instance) {
            Some(i) if i.vm.as_ref().is_none_or(|v| v.cid == vm) => i.disks.clone(),
            _ => Vec::new(),
        };
        for disk in &disks {
            self.force_detach(vm, disk).await;
        }
        // The VM may be the owner's active one (killed before a swap, or in a delete), or
        // the inactive one a create-swap-delete replaced.
        let named = |i: &&crate::state::InstanceRecord| -> Option<String> {
            let active = i.vm.as_ref().filter(|v| v.cid == vm);
            let inactive = i
                .inactive_vm
                .as_ref()
                .map(|x| &x.vm)
                .filter(|v| v.cid == vm);
            active.or(inactive).map(|v| v.agent_id.clone())
        };
        match state.instances.get(instance).as_ref().and_then(named) {
            Some(agent_id) => self.delete_agent_vm(vm, &agent_id, cpi).await?,
            None => self.delete_vm_cid(vm, cpi).await?,
        }
        if let Some(owner) = state.instances.get(instance)
            && named(&owner).is_some()
        {
            let mut owner = owner.clone();
            if owner.vm.as_ref().is_some_and(|v| v.cid == vm) {
                owner.vm = None;
                owner.update_completed = false;
            } else {
                owner.inactive_vm = None;
            }
            self.persist(&owner).await?;
            state.apply(&Write::Instance(Box::new(owner)));
        }
        Ok(true)
    }

    /// A `create_disk` whose disk neither its owner nor the orphans list: the recorded disks
    /// put back on the VM, the new disk deleted.
    async fn settle_create_disk(
        &self,
        state: &DeploymentState,
        intent: &Intent,
        instance: &str,
        name: &str,
        wait: Duration,
    ) -> Result<bool, EngineError> {
        let cloud = self.cloud_of(
            intent.cpi.as_deref(),
            &format!("disk '{name}' of {instance}"),
        )?;
        let found = match &intent.cid {
            Some(cid) => Some(cid.clone()),
            None => self.find_disk_of(cloud, intent, instance, name).await?,
        };
        let Some(cid) = &found else {
            return Ok(true);
        };
        let owner = state.instances.get(instance);
        if owner.is_some_and(|i| i.disks.iter().any(|d| &d.cid == cid))
            || state.orphaned_disks.contains_key(cid)
        {
            return Ok(true);
        }
        // Never made active: the data is still on the disk it was to replace. The agent
        // may have mounted it, or even switched its store to it (a migration that
        // finished before its record did): take it away and put the recorded disks
        // back, before the cloud deletes it.
        if let Some(owner) = owner
            && let Some(vm) = &owner.vm
        {
            self.restore_disks(owner, &vm.agent_id, &vm.cid, cid, wait)
                .await;
            let _ = cloud
                .detach_disk(&VmCid(vm.cid.clone()), &DiskCid(cid.clone()))
                .await;
        }
        match cloud.delete_disk(&DiskCid(cid.clone())).await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == Some(&kubosh_cloud::ErrorKind::DiskNotFound) => Ok(true),
            Err(e) => Err(EngineError::from(e)),
        }
    }

    /// A `snapshot_disk`: kept when its disk lists it, else deleted (found by request id
    /// when its CID was never recorded).
    async fn settle_snapshot(
        &self,
        state: &DeploymentState,
        intent: &Intent,
        disk: &str,
    ) -> Result<bool, EngineError> {
        let cloud = self.cloud_of(intent.cpi.as_deref(), &format!("a snapshot of disk {disk}"))?;
        match &intent.cid {
            // Recorded on its disk: the snapshot is the disk's now.
            Some(cid) if super::snapshot::snapshot_recorded(state, disk, cid) => Ok(true),
            Some(cid) => {
                cloud
                    .delete_snapshot(&SnapshotCid(cid.clone()))
                    .await
                    .map_err(EngineError::from)?;
                Ok(true)
            }
            // Never answered: the snapshot the call made, if the cloud can tell, goes.
            None => {
                match cloud.find_snapshot_by_request(&intent.id).await {
                    Ok(Some(cid)) => cloud
                        .delete_snapshot(&cid)
                        .await
                        .map_err(EngineError::from)?,
                    Ok(None) => {}
                    Err(e) if e.is(&kubosh_cloud::ErrorKind::NotImplemented) => {
                        progress::warn(
                            self.events.as_ref(),
                            format!(
                                "A previous run stopped while the cloud was snapshotting disk '{disk}'; the cloud did not report the snapshot's CID, so it cannot be found: check the cloud for a snapshot of that disk"
                            ),
                        );
                    }
                    Err(e) => return Err(EngineError::from(e)),
                }
                Ok(true)
            }
        }
    }

    /// A `create_stemcell` never recorded: the stemcell, when its CID is known, deleted.
    async fn settle_create_stemcell(
        &self,
        state: &DeploymentState,
        intent: &Intent,
        stemcell: &str,
    ) -> Result<bool, EngineError> {
        if state.stemcells.contains_key(stemcell) {
            return Ok(true);
        }
        if let Some(cid) = &intent.cid {
            (self.cloud_of(intent.cpi.as_deref(), &format!("stemcell {stemcell}"))?)
                .delete_stemcell(&StemcellCid(cid.clone()))
                .await
                .map_err(EngineError::from)?;
        }
        Ok(true)
    }

    /// The disk an interrupted `create_disk` made, asked of the cloud by the intent's id (the
    /// call's request id). `None` when the cloud made none, or cannot tell (a CPI without
    /// the `kubosh_find_disk` extension: then a warning names what to look for).
    async fn find_disk_of(
        &self,
        cloud: &dyn kubosh_cloud::Cloud,
        intent: &Intent,
        instance: &str,
        name: &str,
    ) -> Result<Option<String>, EngineError> {
        match cloud.find_disk_by_request(&intent.id).await {
            Ok(Some(cid)) => {
                tracing::info!(disk = %cid, instance, "found the disk a previous run created but never recorded");
                Ok(Some(cid.0))
            }
            Ok(None) => Ok(None),
            Err(e) if e.is(&kubosh_cloud::ErrorKind::NotImplemented) => {
                progress::warn(
                    self.events.as_ref(),
                    format!(
                        "A previous run stopped while the cloud was creating disk '{name}' of instance {instance}; the cloud did not report its CID, so it cannot be found: check the cloud for an unattached disk"
                    ),
                );
                Ok(None)
            }
            Err(e) => Err(EngineError::from(e)),
        }
    }

    /// Unmounts and forgets `stray` on the instance's agent and mounts the instance's recorded
    /// disks again (best effort: an agent that does not answer gets a new VM anyway).
    async fn restore_disks(
        &self,
        owner: &crate::state::InstanceRecord,
        agent_id: &str,
        vm_cid: &str,
        stray: &str,
        wait: Duration,
    ) {
        let agent = self.agent(agent_id, &owner.display_name());
        if agent.wait_until_ready(vm_cid, wait).await.is_err() {
            return;
        }
        let _ = agent.unmount_disk(stray).await;
        let _ = agent.remove_persistent_disk(stray).await;
        for disk in owner.disks.iter().filter(|d| d.is_managed()) {
            if agent.mount_disk(&disk.cid).await.is_err() {
                let _ = self.attach_disk_to_vm(&agent, vm_cid, disk).await;
            }
        }
    }

    /// The VM an interrupted `create_vm` for `agent_id` made: asked of the cloud (the
    /// `kubosh_find_vm` extension; it finds a VM whose agent never came up), else of the
    /// agent itself, whose `get_state` names its VM, waiting at most `wait` for it.
    async fn find_vm_of(
        &self,
        agent_id: &str,
        cpi: Option<&str>,
        wait: Duration,
    ) -> Result<Option<String>, EngineError> {
        match self
            .cloud_of(cpi, &format!("the VM of agent {agent_id}"))?
            .find_vm_by_agent(agent_id)
            .await
        {
            Ok(Some(cid)) => return Ok(Some(cid.0)),
            // A CPI process the killed run started may still be creating the VM: a `None`
            // is not the last word, the agent may yet come up.
            Ok(None) => {}
            Err(e) if e.is(&kubosh_cloud::ErrorKind::NotImplemented) => {}
            Err(e) => tracing::warn!(agent_id, error = %e, "cannot ask the cloud for the VM"),
        }
        Ok(self.ask_agent_for_vm(agent_id, wait).await)
    }

    /// The CID of the VM whose agent is `agent_id`, asked of the agent itself (its
    /// `get_state` names its VM).
    async fn ask_agent_for_vm(&self, agent_id: &str, wait: Duration) -> Option<String> {
        let agent = self.agent(agent_id, "unknown");
        agent.wait_until_ready("unknown", wait).await.ok()?;
        let state = agent.get_state(false).await.ok()?;
        state.vm.map(|vm| vm.name).filter(|name| !name.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::state::MemoryStore;
    use crate::{EngineConfig, EventLog};
    use kubosh_cloud::{Cloud as _, CreateDisk};
    use kubosh_sim::{CloudFault, LiteralRenderer, SimCloud, SimConfig};

    /// An engine on a simulated cloud, its event log, and a state holding one pending
    /// `create_disk` intent without a CID (for an instance the state does not hold).
    fn world(dir: &std::path::Path) -> (Engine, Arc<SimCloud>, EventLog, DeploymentState) {
        let (cloud, agents) = kubosh_sim::pair(SimConfig::default());
        let events = EventLog::new();
        let engine = Engine {
            cloud: cloud.clone(),
            agents,
            blobstore: Arc::new(
                kubosh_artifacts::blobstore::LocalBlobstore::new(dir.join("blobs")).unwrap(),
            ),
            renderer: Arc::new(LiteralRenderer),
            store: Arc::new(MemoryStore::new()),
            locks: Arc::new(crate::lock::FileLocks::new(dir.join("locks"))),
            events: Arc::new(events.clone()),
            cancel: Default::default(),
            config: EngineConfig::default(),
            named_clouds: Default::default(),
        };
        let mut state = DeploymentState::default();
        let intent = Intent {
            id: "intent-1".into(),
            kind: IntentKind::CreateDisk {
                instance: "u-gone".into(),
                name: String::new(),
            },
            cid: None,
            cpi: None,
        };
        state.intents.insert(intent.id.clone(), intent);
        (engine, cloud, events, state)
    }

    async fn made_for(cloud: &SimCloud, request_id: &str) -> DiskCid {
        let request = CreateDisk {
            size_mib: 10,
            cloud_properties: Default::default(),
            vm_cid: None,
        };
        cloud
            .create_disk_with_request_id(&request, request_id)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_disk_made_for_the_intent_is_found_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cloud, events, mut state) = world(dir.path());
        let disk = made_for(&cloud, "intent-1").await;
        let other = made_for(&cloud, "another-request").await;
        engine.recover(&mut state, Duration::ZERO).await.unwrap();
        assert!(state.intents.is_empty());
        assert!(cloud.disk(&disk).is_none());
        assert!(cloud.disk(&other).is_some());
        assert_eq!(events.warnings(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_cloud_that_made_no_disk_settles_the_intent_quietly() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cloud, events, mut state) = world(dir.path());
        engine.recover(&mut state, Duration::ZERO).await.unwrap();
        assert!(state.intents.is_empty());
        assert_eq!(cloud.count("kubosh_find_disk"), 1);
        assert_eq!(events.warnings(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_cloud_that_cannot_tell_leaves_the_warning() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cloud, events, mut state) = world(dir.path());
        let disk = made_for(&cloud, "intent-1").await;
        cloud.inject(
            "kubosh_find_disk",
            CloudFault::fail(
                kubosh_cloud::ErrorKind::NotImplemented,
                "Unknown method",
                false,
            ),
        );
        engine.recover(&mut state, Duration::ZERO).await.unwrap();
        assert!(
            state.intents.is_empty(),
            "settled: nothing more can be done"
        );
        assert!(cloud.disk(&disk).is_some());
        let warnings = events.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("disk '' of instance u-gone")
                && warnings[0].contains("check the cloud for an unattached disk"),
            "{warnings:?}"
        );
    }

    #[tokio::test]
    async fn other_errors_keep_the_intent_for_the_next_run() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cloud, _events, mut state) = world(dir.path());
        cloud.inject(
            "kubosh_find_disk",
            CloudFault::fail(kubosh_cloud::ErrorKind::CloudError, "IaaS down", false),
        );
        let err = engine
            .recover(&mut state, Duration::ZERO)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("IaaS down"), "{err}");
        assert_eq!(state.intents.len(), 1);
    }

    #[tokio::test]
    async fn a_vm_whose_agent_never_answers_is_found_through_the_cloud_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cloud, events, mut state) = world(dir.path());
        state.intents.clear();
        let stemcell = cloud
            .create_stemcell(&kubosh_cloud::CreateStemcell {
                image_path: dir.path().join("image"),
                cloud_properties: Default::default(),
            })
            .await
            .unwrap();
        let vm = cloud
            .create_vm(&kubosh_cloud::CreateVm {
                agent_id: "agent-lost".into(),
                stemcell_cid: stemcell,
                cloud_properties: Default::default(),
                networks: Default::default(),
                disk_cids: vec![],
                env: Default::default(),
            })
            .await
            .unwrap();
        cloud.set_agent_unresponsive(&vm.cid, true).unwrap();
        let intent = Intent {
            id: "intent-vm".into(),
            kind: IntentKind::CreateVm {
                instance: Some("u-new".into()),
                agent_id: "agent-lost".into(),
            },
            cid: None,
            cpi: None,
        };
        state.intents.insert(intent.id.clone(), intent);
        // No wait for agents at all: the cloud knows the VM.
        engine.recover(&mut state, Duration::ZERO).await.unwrap();
        assert!(state.intents.is_empty());
        assert!(cloud.vm(&vm.cid).is_none(), "the VM is deleted");
        assert_eq!(cloud.count("kubosh_find_vm"), 1);
        assert_eq!(events.warnings(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_snapshot_whose_call_was_never_answered_is_found_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cloud, events, mut state) = world(dir.path());
        state.intents.clear();
        let disk = made_for(&cloud, "disk-request").await;
        let snapshot = cloud
            .snapshot_disk_with_request_id(&disk, &Default::default(), "intent-snap")
            .await
            .unwrap();
        let kept = cloud
            .snapshot_disk_with_request_id(&disk, &Default::default(), "another")
            .await
            .unwrap();
        let intent = Intent {
            id: "intent-snap".into(),
            kind: IntentKind::SnapshotDisk {
                disk: disk.0.clone(),
            },
            cid: None,
            cpi: None,
        };
        state.intents.insert(intent.id.clone(), intent);
        engine.recover(&mut state, Duration::ZERO).await.unwrap();
        assert!(state.intents.is_empty());
        let left: Vec<String> = cloud
            .inventory()
            .snapshots
            .iter()
            .map(|s| s.cid.clone())
            .collect();
        assert_eq!(left, vec![kept.0.clone()], "{snapshot:?} is deleted");
        assert_eq!(events.warnings(), Vec::<String>::new());
    }
}
