//! Persistent disks (a `data/` directory with a recorded size) and their snapshots (copies).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::settings;
use super::store::{Kind, copy_tree, now_rfc3339, read_json, remove_tree, write_json};
use super::{Args, Failure, Local};
use crate::ErrorKind;
use kubosh_bosh::agent::settings::Settings;

/// The record of a disk (`disks/<cid>/meta.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiskRecord {
    pub cid: String,
    pub size_mib: u64,
    pub cloud_properties: Map<String, Value>,
    /// The `vm_cid` locality hint of `create_disk`.
    #[serde(default)]
    pub vm_locality: Option<String>,
    /// The VM it is attached to.
    #[serde(default)]
    pub attached_to: Option<String>,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    pub created_at: String,
    /// The `context.request_id` of the `create_disk` call that made it.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// The record of a snapshot (`snapshots/<cid>/meta.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub cid: String,
    pub disk_cid: String,
    pub size_mib: u64,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    pub created_at: String,
    /// The `context.request_id` of the `snapshot_disk` call that made it.
    #[serde(default)]
    pub request_id: Option<String>,
}

fn disk_not_found(cid: &str) -> Failure {
    Failure::new(ErrorKind::DiskNotFound, format!("Disk '{cid}' not found"))
}

impl Local {
    fn disk(&self, cid: &str) -> Result<DiskRecord, Failure> {
        self.store
            .read(Kind::Disk, cid)?
            .ok_or_else(|| disk_not_found(cid))
    }

    /// A disk's content directory (what the disk hint points at).
    pub fn disk_data(&self, cid: &str) -> std::path::PathBuf {
        self.store.dir(Kind::Disk, cid).join("data")
    }

    /// Sets or removes the disk in the VM's agent settings (`disks.persistent`).
    fn update_vm_settings(
        &self,
        vm_cid: &str,
        disk_cid: &str,
        hint: Option<Value>,
    ) -> Result<(), Failure> {
        let path = self.vm_paths(vm_cid).settings();
        let mut doc: Settings = read_json(&path)?.unwrap_or_default();
        doc.set_persistent_disk(disk_cid, hint);
        write_json(&path, &doc)?;
        Ok(())
    }

    /// `create_disk(size, cloud_properties, vm_cid)`.
    pub fn create_disk(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let size_mib = args.size(0, "size")?;
        let cloud_properties = args.object(1, "cloud_properties")?;
        let vm_locality = args.opt_string(2, "vm_cid")?.map(str::to_string);
        let (cid, staged) = self.store.staging(Kind::Disk)?;
        let record = DiskRecord {
            cid: cid.clone(),
            size_mib,
            cloud_properties,
            vm_locality,
            attached_to: None,
            metadata: Map::new(),
            created_at: now_rfc3339(),
            request_id: Some(self.request_id.clone()).filter(|id| !id.is_empty()),
        };
        let built = std::fs::create_dir_all(staged.join("data"))
            .and_then(|()| write_json(&staged.join("meta.json"), &record))
            .and_then(|()| {
                let _lock = self.store.lock()?;
                self.store.commit(Kind::Disk, &cid, &staged)
            });
        if let Err(e) = built {
            let _ = remove_tree(&staged);
            return Err(e.into());
        }
        Ok(Value::String(cid))
    }

    /// `delete_disk(disk_cid)`: `DiskNotFound` when unknown; an attached disk is refused.
    pub fn delete_disk(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "disk_cid")?;
        let _lock = self.store.lock()?;
        let disk = self.disk(cid)?;
        if let Some(vm) = disk.attached_to {
            return Err(Failure::cloud(format!(
                "Disk '{cid}' is attached to VM '{vm}'"
            )));
        }
        self.store.remove(Kind::Disk, cid)?;
        Ok(Value::Null)
    }

    /// `kubosh_find_disk(request_id)`: the disk `create_disk` made for that request id, or
    /// null.
    pub fn find_disk(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let request_id = args.string(0, "request_id")?;
        let _lock = self.store.lock_shared()?;
        Ok(self
            .store
            .list::<DiskRecord>(Kind::Disk)?
            .into_iter()
            .find(|(_, d)| d.request_id.as_deref() == Some(request_id))
            .map_or(Value::Null, |(cid, _)| Value::String(cid)))
    }

    /// `has_disk(disk_cid)`.
    pub fn has_disk(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "disk_cid")?;
        let _lock = self.store.lock_shared()?;
        Ok(Value::Bool(
            self.store.read::<DiskRecord>(Kind::Disk, cid)?.is_some(),
        ))
    }

    /// `attach_disk(vm_cid, disk_cid)`: records the attachment, adds the disk to the VM's
    /// agent settings, answers the hint `{"path": <data dir>}` (v2) or null (v1). Attaching
    /// again to the same VM is harmless; a disk attached elsewhere is refused.
    pub fn attach_disk(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let vm_cid = args.string(0, "vm_cid")?;
        let disk_cid = args.string(1, "disk_cid")?;
        let _lock = self.store.lock()?;
        self.vm(vm_cid)?;
        let mut disk = self.disk(disk_cid)?;
        if let Some(other) = disk.attached_to.as_deref().filter(|o| *o != vm_cid) {
            return Err(Failure::cloud(format!(
                "Disk '{disk_cid}' is already attached to VM '{other}'"
            )));
        }
        let hint = settings::disk_hint(&self.disk_data(disk_cid));
        self.update_vm_settings(vm_cid, disk_cid, Some(hint.clone()))?;
        disk.attached_to = Some(vm_cid.to_string());
        self.store.write(Kind::Disk, disk_cid, &disk)?;
        Ok(if self.v2 { hint } else { Value::Null })
    }

    /// `detach_disk(vm_cid, disk_cid)`: `DiskNotAttached` unless attached to that VM. A VM
    /// whose agent runs under `kubosh vm run --dummy-disks` is first given time to apply the
    /// agent's disk bookkeeping (`dummy.rs`).
    pub fn detach_disk(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let vm_cid = args.string(0, "vm_cid")?;
        let disk_cid = args.string(1, "disk_cid")?;
        // A bosh-agent VM's launcher finishes what the agent recorded (a migration's copy,
        // an unmount) before the disk goes; waited for outside the lock.
        if let Ok(vm) = self.vm(vm_cid)
            && !super::dummy::wait_for_launcher(
                &self.vm_paths(vm_cid),
                vm.agent.as_ref(),
                super::dummy::CATCH_UP,
            )
        {
            return Err(Failure::cloud(format!(
                "detach_disk: the launcher of VM '{vm_cid}' did not apply its agent's disk changes within {} s",
                super::dummy::CATCH_UP.as_secs()
            )));
        }
        let _lock = self.store.lock()?;
        self.vm(vm_cid)?;
        let mut disk = self.disk(disk_cid)?;
        if disk.attached_to.as_deref() != Some(vm_cid) {
            return Err(Failure::new(
                ErrorKind::DiskNotAttached,
                format!("Disk '{disk_cid}' is not attached to VM '{vm_cid}'"),
            ));
        }
        self.update_vm_settings(vm_cid, disk_cid, None)?;
        disk.attached_to = None;
        self.store.write(Kind::Disk, disk_cid, &disk)?;
        Ok(Value::Null)
    }

    /// `get_disks(vm_cid)`: the disks attached to the VM.
    pub fn get_disks(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let vm_cid = args.string(0, "vm_cid")?;
        let _lock = self.store.lock_shared()?;
        self.vm(vm_cid)?;
        Ok(Value::Array(
            self.store
                .list::<DiskRecord>(Kind::Disk)?
                .into_iter()
                .filter(|(_, d)| d.attached_to.as_deref() == Some(vm_cid))
                .map(|(cid, _)| Value::String(cid))
                .collect(),
        ))
    }

    fn resize(
        &self,
        method: &str,
        cid: &str,
        new_size: u64,
        cloud_properties: Option<Map<String, Value>>,
    ) -> Result<(), Failure> {
        let _lock = self.store.lock()?;
        let mut disk = self.disk(cid)?;
        if let Some(vm) = &disk.attached_to {
            return Err(Failure::cloud(format!(
                "{method}: disk '{cid}' is attached to VM '{vm}'; detach it first"
            )));
        }
        if new_size < disk.size_mib {
            return Err(Failure::new(
                ErrorKind::NotSupported,
                format!(
                    "{method}: disk '{cid}' cannot shrink from {} MiB to {new_size} MiB",
                    disk.size_mib
                ),
            ));
        }
        disk.size_mib = new_size;
        if let Some(cp) = cloud_properties {
            disk.cloud_properties = cp;
        }
        self.store.write(Kind::Disk, cid, &disk)?;
        Ok(())
    }

    /// `resize_disk(disk_cid, new_size)`: grows a detached disk in place (shrinking is
    /// `NotSupported`, which makes the director copy instead).
    pub fn resize_disk(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "disk_cid")?;
        let size = args.size(1, "new_size")?;
        self.resize("resize_disk", cid, size, None)?;
        Ok(Value::Null)
    }

    /// `update_disk(disk_cid, new_size, cloud_properties)`: in place; answers the same CID.
    pub fn update_disk(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "disk_cid")?;
        let size = args.size(1, "new_size")?;
        let cloud_properties = args.object(2, "cloud_properties")?;
        self.resize("update_disk", cid, size, Some(cloud_properties))?;
        Ok(Value::String(cid.to_string()))
    }

    /// `set_disk_metadata(disk_cid, metadata)`: merged into the stored metadata.
    pub fn set_disk_metadata(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "disk_cid")?;
        let metadata = args.object(1, "metadata")?;
        let _lock = self.store.lock()?;
        let mut disk = self.disk(cid)?;
        disk.metadata.extend(metadata);
        self.store.write(Kind::Disk, cid, &disk)?;
        Ok(Value::Null)
    }

    /// `snapshot_disk(disk_cid, metadata)`: a copy of the disk's data directory.
    pub fn snapshot_disk(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let disk_cid = args.string(0, "disk_cid")?;
        let metadata = args.object(1, "metadata")?;
        let _lock = self.store.lock()?;
        let disk = self.disk(disk_cid)?;
        let (cid, staged) = self.store.staging(Kind::Snapshot)?;
        let record = SnapshotRecord {
            cid: cid.clone(),
            disk_cid: disk_cid.to_string(),
            size_mib: disk.size_mib,
            metadata,
            created_at: now_rfc3339(),
            request_id: Some(self.request_id.clone()).filter(|id| !id.is_empty()),
        };
        let built = copy_tree(&self.disk_data(disk_cid), &staged.join("data"))
            .and_then(|()| write_json(&staged.join("meta.json"), &record))
            .and_then(|()| self.store.commit(Kind::Snapshot, &cid, &staged));
        if let Err(e) = built {
            let _ = remove_tree(&staged);
            return Err(e.into());
        }
        Ok(Value::String(cid))
    }

    /// `kubosh_find_snapshot(request_id)`: the snapshot `snapshot_disk` made for that request
    /// id, or null.
    pub fn find_snapshot(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let request_id = args.string(0, "request_id")?;
        let _lock = self.store.lock_shared()?;
        Ok(self
            .store
            .list::<SnapshotRecord>(Kind::Snapshot)?
            .into_iter()
            .find(|(_, s)| s.request_id.as_deref() == Some(request_id))
            .map_or(Value::Null, |(cid, _)| Value::String(cid)))
    }

    /// `delete_snapshot(snapshot_cid)`.
    pub fn delete_snapshot(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "snapshot_cid")?;
        let _lock = self.store.lock()?;
        if self
            .store
            .read::<SnapshotRecord>(Kind::Snapshot, cid)?
            .is_none()
        {
            return Err(Failure::cloud(format!("Snapshot '{cid}' not found")));
        }
        self.store.remove(Kind::Snapshot, cid)?;
        Ok(Value::Null)
    }
}
