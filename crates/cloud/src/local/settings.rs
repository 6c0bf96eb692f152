//! What a VM's agent reads at boot: the settings (`bosh-protocols.md` §1.8, the agent's
//! `settings.Settings`), in the format of the agent's `File` settings source, and the
//! `agent.json` (§2.8) that points the agent at them.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use kubosh_bosh::agent::settings::{AgentConfig, DiskSettings, Settings, VmSettings};

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
/// in the settings). Fails when `env` is not the shape agents read.
pub fn agent_settings(
    config: &Config,
    agent_id: &str,
    vm_cid: &str,
    networks: Map<String, Value>,
    env: Map<String, Value>,
    paths: &VmPaths,
) -> Result<Settings, serde_json::Error> {
    let blobstore = serde_json::from_value(config.agent_blobstore())?;
    let env = serde_json::from_value(Value::Object(env))?;
    Ok(Settings {
        agent_id: agent_id.to_string(),
        vm: VmSettings {
            name: vm_cid.to_string(),
        },
        mbus: config
            .mbus
            .as_ref()
            .map(|m| m.expose().clone())
            .unwrap_or_default(),
        ntp: Some(json!(config.ntp)),
        blobstore: Some(blobstore),
        networks,
        disks: DiskSettings {
            system: json!(paths.root()),
            ephemeral: json!({"path": paths.ephemeral()}),
            persistent: Map::new(),
            extra: [("raw_ephemeral".to_string(), Value::Null)]
                .into_iter()
                .collect(),
        },
        env,
        extra: Map::new(),
    })
}

/// The hint under which a disk is attached: `{"path": <its data directory>}` (the agent's
/// `path` hint; a local agent bind-mounts or links it).
pub fn disk_hint(data_dir: &Path) -> Value {
    json!({"path": data_dir})
}

/// `agent.json` with one `File` settings source.
pub fn agent_json(paths: &VmPaths) -> AgentConfig {
    AgentConfig::file_source(&paths.settings())
}
