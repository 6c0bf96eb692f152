//! Persistent disks on a VM as the Director's `DiskManager` handles them (`bosh-protocols.md`
//! §4.13): attaching (`attach_disk`, `add_persistent_disk`, and `mount_disk` only for the
//! managed disk) and detaching (`list_disk` and `unmount_disk` for the managed disk,
//! `remove_persistent_disk`, `detach_disk`); before an instance's disks change, what its agent
//! has mounted must match the record; and with `enable_cpi_resize_disk` /
//! `enable_cpi_update_disk` a changed disk is changed in the cloud itself instead of copied
//! onto a new one.

use super::{Engine, EngineError};
use crate::state::{DiskRecord, DiskSpec, InstanceRecord};
use kubosh_cloud::{DiskCid, ErrorKind, UpdateDisk, VmCid};
use kubosh_transport::agent::AgentClient;
use kubosh_transport::agent::protocol::DiskHint as AgentDiskHint;

/// How a changed disk can be changed in place, given the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InPlace {
    /// `resize_disk`: only the size changed, and it grew.
    Resize,
    /// `update_disk`: size and/or cloud properties.
    Update,
    /// Neither: a new disk and a copy.
    No,
}

/// Which in-place change applies to `old` becoming `new` (the Director prefers `resize_disk`
/// when only the size grew, else `update_disk`, each only when enabled).
pub fn in_place(
    old: &DiskRecord,
    new: &DiskSpec,
    resize_enabled: bool,
    update_enabled: bool,
) -> InPlace {
    if resize_enabled && old.cloud_properties == new.cloud_properties && new.size_mib > old.size_mib
    {
        InPlace::Resize
    } else if update_enabled {
        InPlace::Update
    } else {
        InPlace::No
    }
}

/// What a disk's metadata names besides the manifest's tags.
#[derive(Debug, Clone, Copy)]
pub struct DiskLabels<'a> {
    /// The deployment.
    pub deployment: &'a str,
    /// The manifest's `tags` (an object, or null).
    pub tags: &'a serde_json::Value,
}

impl DiskLabels<'_> {
    /// The metadata of a disk attached to `instance` now: the manifest's tags, then the
    /// director's keys over them (`metadata_updater.rb#update_disk_metadata`).
    pub fn metadata(
        &self,
        instance: &InstanceRecord,
    ) -> serde_json::Map<String, serde_json::Value> {
        let mut metadata = self.tags.as_object().cloned().unwrap_or_default();
        for (k, v) in [
            ("director", "kubosh".to_string()),
            ("deployment", self.deployment.to_string()),
            ("instance_id", instance.uuid.clone()),
            ("instance_index", instance.index.to_string()),
            ("instance_group", instance.group.clone()),
            ("attached_at", super::vm::created_at_now()),
        ] {
            metadata.insert(k.into(), serde_json::Value::String(v));
        }
        metadata
    }
}

impl Engine {
    /// Sets the metadata of `disk`, now attached to `instance` (`set_disk_metadata`); a CPI
    /// without disk metadata is no reason to fail.
    pub(crate) async fn label_disk(
        &self,
        labels: &DiskLabels<'_>,
        instance: &InstanceRecord,
        disk: &DiskRecord,
    ) -> Result<(), EngineError> {
        let metadata = labels.metadata(instance);
        match (self.disk_cloud(disk)?)
            .set_disk_metadata(&DiskCid(disk.cid.clone()), &metadata)
            .await
        {
            Err(e) if e.kind() == Some(&kubosh_cloud::ErrorKind::NotImplemented) => Ok(()),
            other => other.map_err(EngineError::from),
        }
    }

    /// Attaches `disk` to the VM as `disk_manager.rb#attach_disk` does: CPI `attach_disk`;
    /// with a hint, the agent (once it answers) gets `add_persistent_disk`; a managed disk is
    /// then mounted (`mount_disk`). A named disk is never mounted: its jobs find it through
    /// the disk associations of the next `update_settings`.
    pub(crate) async fn attach_disk_to_vm(
        &self,
        agent: &AgentClient,
        vm_cid: &str,
        disk: &DiskRecord,
    ) -> Result<(), EngineError> {
        let hint = self
            .disk_cloud(disk)?
            .attach_disk(&VmCid(vm_cid.to_string()), &DiskCid(disk.cid.clone()))
            .await
            .map_err(EngineError::from)?;
        if let Some(hint) = hint {
            let hint: AgentDiskHint = serde_json::from_value(hint.0)
                .unwrap_or_else(|_| AgentDiskHint::Path(String::new()));
            self.wait_for_agent(agent, vm_cid)
                .await
                .map_err(EngineError::Agent)?;
            agent
                .add_persistent_disk(&disk.cid, &hint)
                .await
                .map_err(EngineError::Agent)?;
        }
        if disk.is_managed() {
            self.wait_for_agent(agent, vm_cid)
                .await
                .map_err(EngineError::Agent)?;
            agent
                .mount_disk(&disk.cid)
                .await
                .map_err(EngineError::Agent)?;
        }
        Ok(())
    }

    /// Detaches `disk` from the VM as `disk_manager.rb#detach_disk` does: a managed disk is
    /// unmounted first when the agent lists it (`list_disk`, `unmount_disk`); then the agent
    /// forgets it (`remove_persistent_disk`) and the cloud detaches it. A disk the cloud
    /// says is not attached counts as detached.
    pub(crate) async fn detach_disk_from_vm(
        &self,
        agent: &AgentClient,
        vm_cid: &str,
        disk: &DiskRecord,
    ) -> Result<(), EngineError> {
        if disk.is_managed() {
            let listed = agent.list_disk().await.map_err(EngineError::Agent)?;
            if listed.contains(&disk.cid) {
                agent
                    .unmount_disk(&disk.cid)
                    .await
                    .map_err(EngineError::Agent)?;
            }
        }
        agent
            .remove_persistent_disk(&disk.cid)
            .await
            .map_err(EngineError::Agent)?;
        match self
            .disk_cloud(disk)?
            .detach_disk(&VmCid(vm_cid.to_string()), &DiskCid(disk.cid.clone()))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if e.is(&ErrorKind::DiskNotAttached) => Ok(()),
            Err(e) => Err(EngineError::from(e)),
        }
    }

    /// CPI `detach_disk` of `disk` from VM `vm_cid` without asking its agent, errors
    /// ignored: for a disk that is leaving anyway (its VM is deleted, or the disk orphaned).
    pub(crate) async fn force_detach(&self, vm_cid: &str, disk: &DiskRecord) {
        if let Ok(cloud) = self.disk_cloud(disk) {
            let _ = cloud
                .detach_disk(&VmCid(vm_cid.to_string()), &DiskCid(disk.cid.clone()))
                .await;
        }
    }

    /// The Director's disk sync check (`disk_manager.rb#sync_persistent_disk`), run before
    /// an instance's disks change unless `wanted` has a named disk (the Director skips it
    /// then: which disk `list_disk` names first is not the managed one's to say). The agent
    /// must list only recorded disks. An agent with nothing mounted gets the managed disk
    /// attached and mounted again (unless the instance is to have none); a disk the record
    /// does not know is `AgentDiskOutOfSync` (400010).
    pub(crate) async fn sync_disks(
        &self,
        record: &InstanceRecord,
        agent: &AgentClient,
        vm_cid: &str,
        wanted: &[DiskSpec],
    ) -> Result<(), EngineError> {
        if wanted.iter().any(|spec| !spec.name.is_empty()) {
            return Ok(());
        }
        let Some(managed) = record.disks.iter().find(|d| d.is_managed()) else {
            return Ok(());
        };
        let mounted = agent.list_disk().await.map_err(EngineError::Agent)?;
        if mounted.is_empty() {
            if !wanted.iter().any(|spec| spec.name.is_empty()) {
                tracing::debug!(instance = %record.display_name(), "disks are already unmounted");
                return Ok(());
            }
            tracing::warn!(
                "Agent of '{}' reports no disk while director record shows '{}'. Re-attaching existing persistent disk...",
                record.display_name(),
                managed.cid
            );
            return self.attach_disk_to_vm(agent, vm_cid, managed).await;
        }
        match mounted
            .iter()
            .find(|cid| !record.disks.iter().any(|d| &d.cid == *cid))
        {
            Some(stray) => Err(EngineError::AgentDiskOutOfSync {
                instance: record.display_name(),
                agent: stray.clone(),
                recorded: managed.cid.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Changes disk `old` of `record` to `spec` in the cloud when the configuration allows
    /// (§4.13 (1) and (2)): detach ([`Engine::detach_disk_from_vm`]), `resize_disk` or
    /// `update_disk`, attach again ([`Engine::attach_disk_to_vm`]), record. Only managed
    /// disks. True when done; false when it does not apply or the CPI answered
    /// `NotImplemented`/`NotSupported` (the disk is then attached and mounted again, for the
    /// copy path).
    pub(crate) async fn change_disk_in_place(
        &self,
        record: &mut InstanceRecord,
        agent: &AgentClient,
        vm_cid: &str,
        old: &DiskRecord,
        spec: &DiskSpec,
    ) -> Result<bool, EngineError> {
        let how = in_place(
            old,
            spec,
            self.config.enable_cpi_resize_disk,
            self.config.enable_cpi_update_disk,
        );
        // The Director changes only managed disks in place; a named disk gets a new one.
        if how == InPlace::No || !old.is_managed() {
            return Ok(false);
        }
        // The jobs are stopped (a disk change shuts the instance down).
        self.detach_disk_from_vm(agent, vm_cid, old).await?;
        let cid = DiskCid(old.cid.clone());
        let cloud = self.disk_cloud(old)?;
        let changed = match how {
            InPlace::Resize => cloud.resize_disk(&cid, spec.size_mib).await.map(|()| None),
            _ => {
                cloud
                    .update_disk(&UpdateDisk {
                        disk_cid: cid.clone(),
                        new_size_mib: spec.size_mib,
                        cloud_properties: super::vm::object(&spec.cloud_properties),
                    })
                    .await
            }
        };
        let new_cid = match changed {
            Ok(new_cid) => new_cid,
            Err(e) if e.is_not_implemented() => {
                tracing::info!(disk = %old.cid, "the CPI cannot change the disk in place ({e}); copying it to a new disk");
                self.attach_disk_to_vm(agent, vm_cid, old).await?;
                return Ok(false);
            }
            Err(e) => return Err(EngineError::from(e)),
        };
        let mut disk = old.clone();
        disk.size_mib = spec.size_mib;
        disk.cloud_properties = spec.cloud_properties.clone();
        match new_cid {
            // The CPI replaced the disk: its record must name the new one before anything else.
            Some(new_cid) => {
                disk.cid = new_cid.0;
                replace_disk(record, &old.cid, disk.clone());
                self.persist(record).await?;
                self.attach_disk_to_vm(agent, vm_cid, &disk).await?;
            }
            // Recorded once attached again: a run killed in between finds the old size in
            // the record and changes (and attaches) the disk again.
            None => {
                self.attach_disk_to_vm(agent, vm_cid, &disk).await?;
                replace_disk(record, &old.cid, disk);
                self.persist(record).await?;
            }
        }
        Ok(true)
    }
}

/// Puts `disk` where the disk with CID `old_cid` was.
fn replace_disk(record: &mut InstanceRecord, old_cid: &str, disk: DiskRecord) {
    match record.disks.iter_mut().find(|d| d.cid == old_cid) {
        Some(slot) => *slot = disk,
        None => record.disks.push(disk),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn old(size_mib: u64, cloud_properties: serde_json::Value) -> DiskRecord {
        DiskRecord {
            cid: "d-1".into(),
            name: String::new(),
            size_mib,
            cloud_properties,
            snapshots: Vec::new(),
            cpi: None,
        }
    }

    fn spec(size_mib: u64, cloud_properties: serde_json::Value) -> DiskSpec {
        DiskSpec {
            name: String::new(),
            size_mib,
            cloud_properties,
        }
    }

    #[test]
    fn resize_only_when_only_the_size_grew_and_it_is_enabled() {
        let a = json!({"type": "ssd"});
        let b = json!({"type": "hdd"});
        let cases = [
            (
                old(10, a.clone()),
                spec(20, a.clone()),
                true,
                false,
                InPlace::Resize,
            ),
            (
                old(10, a.clone()),
                spec(20, a.clone()),
                true,
                true,
                InPlace::Resize,
            ),
            (
                old(10, a.clone()),
                spec(20, a.clone()),
                false,
                false,
                InPlace::No,
            ),
            (
                old(10, a.clone()),
                spec(20, a.clone()),
                false,
                true,
                InPlace::Update,
            ),
            (
                old(20, a.clone()),
                spec(10, a.clone()),
                true,
                false,
                InPlace::No,
            ),
            (
                old(20, a.clone()),
                spec(10, a.clone()),
                true,
                true,
                InPlace::Update,
            ),
            (
                old(10, a.clone()),
                spec(20, b.clone()),
                true,
                false,
                InPlace::No,
            ),
            (
                old(10, a.clone()),
                spec(10, b.clone()),
                true,
                true,
                InPlace::Update,
            ),
        ];
        for (o, s, resize, update, expected) in cases {
            assert_eq!(in_place(&o, &s, resize, update), expected, "{o:?} → {s:?}");
        }
    }

    #[test]
    fn a_replaced_disk_takes_the_old_ones_place() {
        let mut record = crate::state::InstanceRecord {
            group: "db".into(),
            index: 0,
            uuid: "u".into(),
            az: None,
            bootstrap: false,
            state: Default::default(),
            update_completed: false,
            vm: None,
            disks: vec![
                old(10, json!({})),
                DiskRecord {
                    cid: "d-2".into(),
                    name: "logs".into(),
                    ..old(5, json!({}))
                },
            ],
            ips: Default::default(),
            applied: None,
            inactive_vm: None,
        };
        replace_disk(
            &mut record,
            "d-1",
            DiskRecord {
                cid: "d-3".into(),
                ..old(20, json!({}))
            },
        );
        let cids: Vec<&str> = record.disks.iter().map(|d| d.cid.as_str()).collect();
        assert_eq!(cids, ["d-3", "d-2"]);
        assert_eq!(record.disks[0].size_mib, 20);
    }
}
