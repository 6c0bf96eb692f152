//! Everything the local cloud holds, for leak checks (`kubosh cpi inventory`).

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::disks::{DiskRecord, SnapshotRecord};
use super::process;
use super::stemcells::StemcellRecord;
use super::store::{Kind, Store};
use super::vms::VmRecord;

/// The contents of a state directory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// VMs.
    pub vms: Vec<VmEntry>,
    /// Persistent disks.
    pub disks: Vec<DiskEntry>,
    /// Stemcells.
    pub stemcells: Vec<StemcellEntry>,
    /// Snapshots.
    pub snapshots: Vec<SnapshotEntry>,
    /// Names under `tmp/`: objects being built or removed right now, or whose creation or
    /// removal was interrupted.
    pub leftovers: Vec<String>,
}

/// One VM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmEntry {
    /// Its CID.
    pub cid: String,
    /// The agent ID it was created with.
    pub agent_id: String,
    /// The agent's pid (also its process group).
    pub pid: Option<i32>,
    /// Whether any process of the agent's group is running.
    pub agent_alive: bool,
    /// Its IP addresses.
    pub ips: Vec<String>,
    /// Attached disks.
    pub disks: Vec<String>,
    /// Its metadata (`set_vm_metadata`).
    pub metadata: Map<String, Value>,
    /// Its directory (root, settings, agent log).
    pub dir: PathBuf,
}

/// One disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskEntry {
    /// Its CID.
    pub cid: String,
    /// Size in MiB.
    pub size_mib: u64,
    /// The VM it is attached to.
    pub attached_to: Option<String>,
    /// Its metadata (`set_disk_metadata`).
    pub metadata: Map<String, Value>,
    /// Its content directory.
    pub data_dir: PathBuf,
}

/// One stemcell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StemcellEntry {
    /// Its CID.
    pub cid: String,
    /// Where the image was uploaded from.
    pub source: String,
}

/// One snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotEntry {
    /// Its CID.
    pub cid: String,
    /// The disk it copies.
    pub disk_cid: String,
}

impl Inventory {
    /// True when the cloud holds nothing at all.
    pub fn is_empty(&self) -> bool {
        self.vms.is_empty()
            && self.disks.is_empty()
            && self.stemcells.is_empty()
            && self.snapshots.is_empty()
            && self.leftovers.is_empty()
    }
}

/// Lists what the local cloud in `state_dir` holds (a consistent view, under a shared lock).
pub fn inventory(state_dir: &Path) -> io::Result<Inventory> {
    let store = Store::open(state_dir)?;
    let _lock = store.lock_shared()?;
    let disks = store.list::<DiskRecord>(Kind::Disk)?;
    Ok(Inventory {
        vms: store
            .list::<VmRecord>(Kind::Vm)?
            .into_iter()
            .map(|(cid, vm)| VmEntry {
                agent_id: vm.agent_id.clone(),
                pid: vm.agent.map(|a| a.pid),
                agent_alive: vm.agent.as_ref().is_some_and(process::is_alive),
                ips: vm.ips(),
                disks: disks
                    .iter()
                    .filter(|(_, d)| d.attached_to.as_deref() == Some(cid.as_str()))
                    .map(|(c, _)| c.clone())
                    .collect(),
                metadata: vm.metadata,
                dir: store.dir(Kind::Vm, &cid),
                cid,
            })
            .collect(),
        disks: disks
            .iter()
            .map(|(cid, d)| DiskEntry {
                cid: cid.clone(),
                size_mib: d.size_mib,
                attached_to: d.attached_to.clone(),
                metadata: d.metadata.clone(),
                data_dir: store.dir(Kind::Disk, cid).join("data"),
            })
            .collect(),
        stemcells: store
            .list::<StemcellRecord>(Kind::Stemcell)?
            .into_iter()
            .map(|(cid, s)| StemcellEntry {
                cid,
                source: s.source,
            })
            .collect(),
        snapshots: store
            .list::<SnapshotRecord>(Kind::Snapshot)?
            .into_iter()
            .map(|(cid, s)| SnapshotEntry {
                cid,
                disk_cid: s.disk_cid,
            })
            .collect(),
        leftovers: store.leftovers()?,
    })
}
