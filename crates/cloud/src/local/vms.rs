//! VMs: a directory (its `/var/vcap` root, agent settings, ephemeral disk, agent log) and a
//! detached agent process; and, for tests, freezing one VM's agent or stopping them all.

use std::io;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::config::Placeholders;
use super::disks::DiskRecord;
use super::process::{self, ProcessRecord};
use super::settings::{self, VmPaths};
use super::stemcells::StemcellRecord;
use super::store::{Kind, Store, now_rfc3339, remove_tree, write_json};
use super::{Args, Failure, Local, faults};
use crate::{ErrorKind, VmCid};

/// The record of a VM (`vms/<cid>/meta.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VmRecord {
    pub cid: String,
    pub agent_id: String,
    pub stemcell_cid: String,
    pub cloud_properties: Map<String, Value>,
    /// The networks as requested (and as written into the agent settings).
    pub networks: Map<String, Value>,
    /// The `disk_cids` placement hint of `create_vm`.
    pub disk_cids: Vec<String>,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// The running agent, if one was started.
    #[serde(default)]
    pub agent: Option<ProcessRecord>,
    pub created_at: String,
}

impl VmRecord {
    /// The IP addresses the VM holds (every network's `ip`).
    pub fn ips(&self) -> Vec<String> {
        self.networks
            .values()
            .filter_map(|n| n.get("ip")?.as_str().map(str::to_string))
            .filter(|ip| !ip.is_empty())
            .collect()
    }
}

fn vm_not_found(cid: &str) -> Failure {
    Failure::new(ErrorKind::VmNotFound, format!("VM '{cid}' not found"))
}

impl Local {
    pub fn vm_paths(&self, cid: &str) -> VmPaths {
        VmPaths::new(self.store.dir(Kind::Vm, cid))
    }

    /// Reads a VM's record, `VMNotFound` when there is none.
    pub fn vm(&self, cid: &str) -> Result<VmRecord, Failure> {
        self.store
            .read(Kind::Vm, cid)?
            .ok_or_else(|| vm_not_found(cid))
    }

    fn stop_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.config.agent.stop_timeout_seconds.min(1e6))
    }

    fn start_agent(&self, record: &VmRecord) -> std::io::Result<ProcessRecord> {
        let paths = self.vm_paths(&record.cid);
        let argv = self.config.agent.argv(&Placeholders {
            settings: &paths.settings(),
            agent_config: &paths.agent_config(),
            root: &paths.root(),
            vm_dir: &paths.dir,
            vm_cid: &record.cid,
            agent_id: &record.agent_id,
            state_dir: self.store.root(),
        });
        let mut env: Vec<(String, String)> = self
            .config
            .agent
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.expose().clone()))
            .collect();
        env.push(("KUBOSH_VM_CID".into(), record.cid.clone()));
        env.push(("KUBOSH_AGENT_ID".into(), record.agent_id.clone()));
        // Where the VM is on its host (inside, the agent may see its root as /var/vcap): a
        // session of `kubectl bosh ssh` on it is a shell there.
        env.push(("KUBOSH_VM_ROOT".into(), paths.root().display().to_string()));
        let agent = process::spawn_detached(&argv, &env, &paths.root(), &paths.log())?;
        if faults::start_frozen(&self.store) {
            process::freeze_group(&agent, true);
        }
        Ok(agent)
    }

    /// `create_vm(agent_id, stemcell_cid, cloud_properties, networks, disk_cids, env)`.
    pub fn create_vm(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let agent_id = args.string(0, "agent_id")?;
        let stemcell_cid = args.string(1, "stemcell_cid")?;
        let cloud_properties = args.object(2, "cloud_properties")?;
        let networks = args.object(3, "networks")?;
        let disk_cids = args.strings(4, "disk_cids")?;
        let env = args.object(5, "env")?;
        if let Some((name, _)) = networks.iter().find(|(_, n)| !n.is_object()) {
            return Err(Failure::new(
                ErrorKind::CpiError,
                format!("create_vm: network '{name}' must be an object"),
            ));
        }
        self.require_mbus()?;

        let _lock = self.store.lock()?;
        if self
            .store
            .read::<StemcellRecord>(Kind::Stemcell, stemcell_cid)?
            .is_none()
        {
            return Err(Failure::cloud(format!(
                "Stemcell '{stemcell_cid}' not found"
            )));
        }
        let mut record = VmRecord {
            cid: String::new(),
            agent_id: agent_id.to_string(),
            stemcell_cid: stemcell_cid.to_string(),
            cloud_properties,
            networks,
            disk_cids,
            metadata: Map::new(),
            agent: None,
            created_at: now_rfc3339(),
        };
        let wanted = record.ips();
        for (other, vm) in self.store.list::<VmRecord>(Kind::Vm)? {
            if let Some(ip) = vm.ips().into_iter().find(|ip| wanted.contains(ip)) {
                return Err(Failure::new(
                    ErrorKind::VmCreationFailed,
                    format!("IP address '{ip}' is already in use by VM '{other}'"),
                ));
            }
        }

        let (cid, staged) = self.store.staging(Kind::Vm)?;
        record.cid = cid.clone();
        let staged_paths = VmPaths::new(staged.clone());
        let built = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(staged_paths.root().join("bosh"))?;
            std::fs::create_dir_all(staged_paths.ephemeral())?;
            let final_paths = self.vm_paths(&cid);
            let settings = settings::agent_settings(
                &self.config,
                agent_id,
                &cid,
                record.networks.clone(),
                env,
                &final_paths,
            )
            .map_err(|e| std::io::Error::other(format!("agent settings: {e}")))?;
            write_json(&staged_paths.settings(), &settings)?;
            write_json(
                &staged_paths.agent_config(),
                &settings::agent_json(&final_paths),
            )?;
            write_json(&staged.join("meta.json"), &record)?;
            self.store.commit(Kind::Vm, &cid, &staged)
        })();
        if let Err(e) = built {
            let _ = remove_tree(&staged);
            return Err(e.into());
        }

        match self.start_agent(&record) {
            Ok(agent) => {
                record.agent = Some(agent);
                self.store.write(Kind::Vm, &cid, &record)?;
            }
            Err(e) => {
                let _ = self.store.remove(Kind::Vm, &cid);
                return Err(Failure::new(
                    ErrorKind::VmCreationFailed,
                    format!("cannot start the agent of VM '{cid}': {e}"),
                ));
            }
        }
        Ok(if self.v2 {
            json!([cid, record.networks])
        } else {
            Value::String(cid)
        })
    }

    /// An `mbus` for new VMs' agent settings. Without it a VM would start an agent that can
    /// never call home, and the deploy would only notice after its agent wait (600 s).
    fn require_mbus(&self) -> Result<(), Failure> {
        if (self.config.mbus.as_ref()).is_none_or(|m| m.expose().is_empty()) {
            return Err(Failure::cloud(
                "create_vm: the local cloud has no 'mbus' to give the VM's agent, so the agent could never reach the director: set 'mbus' in the CPI's configuration (for example 'mbus: nats://127.0.0.1:4222') or in the 'context' of its requests".to_string(),
            ));
        }
        Ok(())
    }

    /// `delete_vm(vm_cid)`: stops the agent's process group (TERM, then KILL), detaches its
    /// disks, removes the VM directory. `VMNotFound` for unknown VMs.
    pub fn delete_vm(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "vm_cid")?;
        let _lock = self.store.lock()?;
        let record = self.vm(cid)?;
        if let Some(agent) = &record.agent {
            process::stop_group(agent, self.stop_timeout());
        }
        for (disk_cid, mut disk) in self.store.list::<DiskRecord>(Kind::Disk)? {
            if disk.attached_to.as_deref() == Some(cid) {
                disk.attached_to = None;
                self.store.write(Kind::Disk, &disk_cid, &disk)?;
            }
        }
        self.store.remove(Kind::Vm, cid)?;
        Ok(Value::Null)
    }

    /// `kubosh_find_vm(agent_id)`: the VM made for that agent, or null.
    pub fn find_vm(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let agent_id = args.string(0, "agent_id")?;
        // Under the shared lock: a create_vm in progress (it holds the lock) finishes first.
        let _lock = self.store.lock_shared()?;
        Ok(self
            .store
            .list::<VmRecord>(Kind::Vm)?
            .into_iter()
            .find(|(_, vm)| vm.agent_id == agent_id)
            .map_or(Value::Null, |(cid, _)| Value::String(cid)))
    }

    /// `has_vm(vm_cid)`.
    pub fn has_vm(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "vm_cid")?;
        let _lock = self.store.lock_shared()?;
        Ok(Value::Bool(
            self.store.read::<VmRecord>(Kind::Vm, cid)?.is_some(),
        ))
    }

    /// `reboot_vm(vm_cid)`: stops the agent and starts it again. A bosh-agent's record of
    /// the last mounted disk goes when that disk is no longer attached (`dummy.rs`), so the
    /// agent comes back.
    pub fn reboot_vm(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "vm_cid")?;
        let _lock = self.store.lock()?;
        let mut record = self.vm(cid)?;
        if let Some(agent) = &record.agent {
            process::stop_group(agent, self.stop_timeout());
        }
        record.agent = None;
        let attached: Vec<String> = (self.store.list::<DiskRecord>(Kind::Disk)?.into_iter())
            .filter(|(_, d)| d.attached_to.as_deref() == Some(cid))
            .map(|(disk, _)| disk)
            .collect();
        if let Some(gone) =
            super::dummy::forget_detached_managed_disk(&self.vm_paths(cid).root(), &attached)?
        {
            tracing::info!(vm = cid, disk = %gone, "the agent's last mounted disk is no longer attached; forgot it");
        }
        let agent = self
            .start_agent(&record)
            .map_err(|e| Failure::cloud(format!("cannot restart the agent of VM '{cid}': {e}")));
        record.agent = agent.as_ref().ok().copied();
        self.store.write(Kind::Vm, cid, &record)?;
        agent.map(|_| Value::Null)
    }

    /// `set_vm_metadata(vm_cid, metadata)`: merged into the stored metadata.
    pub fn set_vm_metadata(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "vm_cid")?;
        let metadata = args.object(1, "metadata")?;
        let _lock = self.store.lock()?;
        let mut record = self.vm(cid)?;
        record.metadata.extend(metadata);
        self.store.write(Kind::Vm, cid, &record)?;
        Ok(Value::Null)
    }

    /// `calculate_vm_cloud_properties({cpu, ram, ephemeral_disk_size})`: the resources
    /// themselves are the local cloud's VM type.
    pub fn calculate_vm_cloud_properties(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let resources = args.object(0, "vm_resources")?;
        let mut out = Map::new();
        for key in ["cpu", "ram", "ephemeral_disk_size"] {
            let Some(n) = resources.get(key).and_then(Value::as_u64) else {
                return Err(Failure::new(
                    ErrorKind::CpiError,
                    format!(
                        "calculate_vm_cloud_properties: '{key}' must be a non-negative integer"
                    ),
                ));
            };
            out.insert(key.to_string(), n.into());
        }
        Ok(Value::Object(out))
    }
}

/// Freezes (SIGSTOP) or thaws (SIGCONT) the agent of a VM: its processes stay, but it no
/// longer answers anything. Fails when the VM does not exist or has no agent process.
pub fn set_agent_frozen(state_dir: &Path, vm: &VmCid, frozen: bool) -> io::Result<()> {
    with_agent(state_dir, vm, |agent| process::freeze_group(agent, frozen))
}

/// Kills the agent of a VM as `kill -9` would (SIGKILL to the agent process only; its jobs
/// run on, orphaned, until the VM is deleted): a dead agent on a VM that is still there.
/// Fails when the VM does not exist or has no agent process.
pub fn kill_agent(state_dir: &Path, vm: &VmCid) -> io::Result<()> {
    with_agent(state_dir, vm, process::kill_leader)
}

/// Runs `f` on the agent process of VM `vm`, under the cloud's lock.
fn with_agent(state_dir: &Path, vm: &VmCid, f: impl FnOnce(&ProcessRecord)) -> io::Result<()> {
    let store = Store::open(state_dir)?;
    let _lock = store.lock()?;
    let record: VmRecord = store
        .read(Kind::Vm, vm.as_str())?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("VM '{vm}' not found")))?;
    let agent = record.agent.ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("VM '{vm}' has no agent"))
    })?;
    f(&agent);
    Ok(())
}

/// Why VMs could not be booted.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The local cloud's state could not be read.
    #[error("the local cloud's inventory: {0}")]
    Inventory(io::Error),
    /// The CPI refused to boot a VM.
    #[error("booting VM {vm}: {source}")]
    Reboot {
        /// The VM.
        vm: String,
        /// What the CPI said (boxed: it is large, and this error is rare).
        source: Box<crate::CpiError>,
    },
}

/// Boots every VM of the local cloud in `state_dir` whose agent is not running, through
/// `cpi`'s `reboot_vm` (a `kubosh cpi` process, as a director calls it, so the agent is
/// nobody's child): the agent starts again with the settings it was created with and starts
/// its jobs, as after a host's restart. VMs whose agents run are left as they are. The VMs
/// booted, by CID.
pub async fn boot_stopped_vms(
    cpi: &crate::ExternalCpi,
    state_dir: &Path,
) -> Result<Vec<String>, BootError> {
    use crate::Cloud as _;
    if !state_dir.exists() {
        return Ok(Vec::new());
    }
    let inventory = super::inventory(state_dir).map_err(BootError::Inventory)?;
    let mut booted = Vec::new();
    for vm in inventory.vms.into_iter().filter(|vm| !vm.agent_alive) {
        (cpi.reboot_vm(&VmCid(vm.cid.clone())).await).map_err(|source| BootError::Reboot {
            vm: vm.cid.clone(),
            source: Box::new(source),
        })?;
        booted.push(vm.cid);
    }
    Ok(booted)
}

/// Stops every VM's agent session (the agent and its job processes) after `grace`, leaving
/// the records: for test teardown, so a failed test leaves no process behind.
pub fn stop_all_agents(state_dir: &Path, grace: Duration) -> io::Result<()> {
    let store = Store::open(state_dir)?;
    let _lock = store.lock()?;
    for (_, record) in store.list::<VmRecord>(Kind::Vm)? {
        if let Some(agent) = record.agent {
            process::stop_group(&agent, grace);
        }
    }
    Ok(())
}
