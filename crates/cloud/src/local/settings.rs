//! What a VM's agent reads at boot: the settings (`bosh-protocols.md` §1.8, the agent's
//! `settings.Settings`), in the format of the agent's `File` settings source, and the
//! `agent.json` (§2.8) that points the agent at them.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::config::Config;

/// The files and directories of one VM.
#[derive(Debug, Clone)]
pub struct VmPaths {
    /// `<state>/vms/<cid>` (or its staging directory while being built).
    pub dir: PathBuf,
}

impl VmPaths {
    pub fn new(dir: PathBuf) -> Self {
        VmPaths { dir }
    }

    /// The agent settings (the "user data").
    pub fn settings(&self) -> PathBuf {
        self.dir.join("settings.json")
    }

    /// The VM's `/var/vcap`: the agent's base directory.
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    /// `agent.json`, where a stemcell has it: `<root>/bosh/agent.json`.
    pub fn agent_config(&self) -> PathBuf {
        self.root().join("bosh").join("agent.json")
    }

    /// The ephemeral disk.
    pub fn ephemeral(&self) -> PathBuf {
        self.dir.join("ephemeral")
    }

    /// The agent's stdout and stderr.
    pub fn log(&self) -> PathBuf {
        self.dir.join("agent.log")
    }
}

/// The agent settings of a new VM. `paths` must be the VM's final location (the paths end up
/// in the settings).
pub fn agent_settings(
    config: &Config,
    agent_id: &str,
    vm_cid: &str,
    networks: &Value,
    env: &Value,
    paths: &VmPaths,
) -> Value {
    json!({
        "agent_id": agent_id,
        "vm": {"name": vm_cid},
        "mbus": config.mbus.as_ref().map(|m| m.expose().as_str()).unwrap_or_default(),
        "ntp": config.ntp,
        "blobstore": config.agent_blobstore(),
        "networks": networks,
        "disks": {
            "system": paths.root(),
            "ephemeral": {"path": paths.ephemeral()},
            "persistent": {},
            "raw_ephemeral": null,
        },
        "env": env,
    })
}

/// The hint under which a disk is attached: `{"path": <its data directory>}` (the agent's
/// `path` hint; a local agent bind-mounts or links it).
pub fn disk_hint(data_dir: &Path) -> Value {
    json!({"path": data_dir})
}

/// Sets (`Some`) or removes (`None`) `disks.persistent.<disk_cid>` in a settings document.
pub fn set_persistent_disk(settings: &mut Value, disk_cid: &str, hint: Option<Value>) {
    let Value::Object(root) = settings else {
        return;
    };
    let disks = root
        .entry("disks")
        .or_insert_with(|| Value::Object(Map::new()));
    if !disks.is_object() {
        *disks = Value::Object(Map::new());
    }
    let Some(disks) = disks.as_object_mut() else {
        return;
    };
    let persistent = disks
        .entry("persistent")
        .or_insert_with(|| Value::Object(Map::new()));
    if !persistent.is_object() {
        *persistent = Value::Object(Map::new());
    }
    if let Some(persistent) = persistent.as_object_mut() {
        match hint {
            Some(hint) => {
                persistent.insert(disk_cid.to_string(), hint);
            }
            None => {
                persistent.remove(disk_cid);
            }
        }
    }
}

/// `agent.json` with one `File` settings source.
pub fn agent_json(paths: &VmPaths) -> Value {
    json!({
        "Infrastructure": {
            "Settings": {
                "Sources": [{"Type": "File", "SettingsPath": paths.settings()}],
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistent_disks_are_added_and_removed() {
        let mut s = json!({"disks": {"system": "/", "persistent": {}}});
        set_persistent_disk(&mut s, "disk-1", Some(json!({"path": "/d1"})));
        assert_eq!(s["disks"]["persistent"], json!({"disk-1": {"path": "/d1"}}));
        set_persistent_disk(&mut s, "disk-1", None);
        assert_eq!(s["disks"]["persistent"], json!({}));
        let mut bare = json!({});
        set_persistent_disk(&mut bare, "d", Some(json!("x")));
        assert_eq!(bare, json!({"disks": {"persistent": {"d": "x"}}}));
    }
}
