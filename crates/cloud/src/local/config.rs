//! Configuration of the local cloud: a JSON or YAML file, overridden key by key by the
//! request's `context` (where a director puts the CPI's properties from the cpi-config).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use kubosh_base::secret::Secret;

/// The keys a request's context may override.
pub const CONFIG_KEYS: &[&str] = &[
    "state_dir",
    "agent",
    "mbus",
    "blobstore",
    "ntp",
    "api_version",
    "stemcell_formats",
];

/// The local cloud's configuration.
///
/// ```yaml
/// state_dir: /var/lib/kubosh-cloud     # required; relative paths are relative to the file
/// agent:
///   command: ["{kubosh}", "agent", "-b", "{root}", "-C", "{agent_config}"]   # the default
///   env: {RUST_LOG: debug}
///   stop_timeout_seconds: 10
/// mbus: nats://10.0.0.1:4222           # settings `mbus` handed to agents
/// blobstore: {provider: local, options: {blobstore_path: /shared/blobs}}   # default: <state>/blobstore
/// ntp: []
/// api_version: 2                       # what `info` reports
/// stemcell_formats: [warden-tar, general-tar]
/// ```
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    /// Where the cloud keeps its VMs, disks, stemcells and snapshots.
    pub state_dir: PathBuf,
    /// How agents are started.
    #[serde(default)]
    pub agent: AgentConfig,
    /// The message bus URL written into every VM's agent settings.
    #[serde(default)]
    pub mbus: Option<Secret<String>>,
    /// The blobstore written into every VM's agent settings (`{provider, options}`).
    #[serde(default)]
    pub blobstore: Option<Secret<Value>>,
    /// NTP servers written into agent settings.
    #[serde(default)]
    pub ntp: Vec<String>,
    /// The CPI API version `info` reports (1 or 2).
    #[serde(default = "default_api_version")]
    pub api_version: u32,
    /// The stemcell formats `info` reports.
    #[serde(default = "default_stemcell_formats")]
    pub stemcell_formats: Vec<String>,
}

/// How the local cloud starts a VM's agent.
#[derive(Debug, Clone, Deserialize)]
pub struct AgentConfig {
    /// Program and arguments. Placeholders: `{kubosh}` (this executable), `{settings}` (the
    /// agent settings file), `{agent_config}` (the `agent.json`), `{root}` (the VM's
    /// `/var/vcap`), `{vm_dir}`, `{vm_cid}`, `{agent_id}`, `{state_dir}`.
    /// A real bosh-agent (dummy platform) runs under `kubosh vm run`, which gives it a
    /// private `/var/vcap` and makes its disk bookkeeping real:
    /// `["{kubosh}", vm, run, --root, "{root}", --dummy-disks, "{vm_dir}/dummy-disks.json",
    /// --, bosh-agent, -b, /var/vcap, -P, dummy, -M, dummy, -C, "{agent_config}"]`.
    #[serde(default = "default_agent_command")]
    pub command: Vec<String>,
    /// Environment variables added to the agent's (which is otherwise the CPI's).
    #[serde(default)]
    pub env: BTreeMap<String, Secret<String>>,
    /// How long an agent gets to exit after SIGTERM before SIGKILL.
    #[serde(default = "default_stop_timeout")]
    pub stop_timeout_seconds: f64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            command: default_agent_command(),
            env: BTreeMap::new(),
            stop_timeout_seconds: default_stop_timeout(),
        }
    }
}

fn default_api_version() -> u32 {
    2
}

fn default_stemcell_formats() -> Vec<String> {
    vec!["warden-tar".into(), "general-tar".into()]
}

fn default_agent_command() -> Vec<String> {
    ["{kubosh}", "agent", "-b", "{root}", "-C", "{agent_config}"]
        .into_iter()
        .map(String::from)
        .collect()
}

fn default_stop_timeout() -> f64 {
    10.0
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid local CPI configuration: {0}")]
pub struct ConfigError(pub String);

impl Config {
    /// Reads the file (if any), applies the context's overrides for [`CONFIG_KEYS`], and
    /// makes `state_dir` absolute (relative to the file's directory, or the working directory
    /// when it came from the context).
    pub fn load(file: Option<&Path>, context: &Map<String, Value>) -> Result<Config, ConfigError> {
        let mut merged = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
                match kubosh_base::yaml::parse_value(&text, &path.display().to_string())
                    .map_err(|e| ConfigError(e.to_string()))?
                {
                    Value::Object(map) => map,
                    Value::Null => Map::new(),
                    _ => return Err(ConfigError(format!("{} is not a mapping", path.display()))),
                }
            }
            None => Map::new(),
        };
        let mut state_dir_from_context = false;
        for key in CONFIG_KEYS {
            if let Some(value) = context.get(*key) {
                merged.insert((*key).to_string(), value.clone());
                state_dir_from_context |= *key == "state_dir";
            }
        }
        if !merged.contains_key("state_dir") {
            return Err(ConfigError(
                "state_dir is not set (config file, KUBOSH_CPI_CONFIG, or the context)".into(),
            ));
        }
        let mut config: Config = serde_json::from_value(Value::Object(merged))
            .map_err(|e| ConfigError(e.to_string()))?;
        if config.state_dir.is_relative()
            && !state_dir_from_context
            && let Some(dir) = file.and_then(Path::parent)
        {
            config.state_dir = dir.join(&config.state_dir);
        }
        config.state_dir = std::path::absolute(&config.state_dir)
            .map_err(|e| ConfigError(format!("state_dir: {e}")))?;
        // The agents get the blobstore as it is and run elsewhere: a local blobstore's path
        // is made absolute here, relative to the file as `state_dir` is.
        if let Some(blobstore) = &config.blobstore {
            let mut value = blobstore.expose().clone();
            if let Some(path) = value.pointer_mut("/options/blobstore_path")
                && let Some(relative) = path.as_str().map(PathBuf::from).filter(|p| p.is_relative())
            {
                let from_file = !context.contains_key("blobstore");
                let base = (file.and_then(Path::parent)).filter(|_| from_file);
                let joined = base.map_or_else(|| relative.clone(), |dir| dir.join(&relative));
                let absolute = std::path::absolute(&joined)
                    .map_err(|e| ConfigError(format!("blobstore_path: {e}")))?;
                *path = Value::String(absolute.display().to_string());
                config.blobstore = Some(kubosh_base::secret::Secret::new(value));
            }
        }
        if config.agent.command.is_empty() {
            return Err(ConfigError("agent.command is empty".into()));
        }
        if !(config.agent.stop_timeout_seconds.is_finite()
            && config.agent.stop_timeout_seconds >= 0.0)
        {
            return Err(ConfigError(
                "agent.stop_timeout_seconds must be a non-negative number".into(),
            ));
        }
        Ok(config)
    }

    /// The blobstore handed to agents: the configured one, or a `local` blobstore in
    /// `<state_dir>/blobstore`.
    pub fn agent_blobstore(&self) -> Value {
        match &self.blobstore {
            Some(b) => b.expose().clone(),
            None => serde_json::json!({
                "provider": "local",
                "options": {"blobstore_path": self.state_dir.join("blobstore")},
            }),
        }
    }
}

/// Placeholder values for the agent command.
#[derive(Debug, Clone, Serialize)]
pub struct Placeholders<'a> {
    pub settings: &'a Path,
    pub agent_config: &'a Path,
    pub root: &'a Path,
    pub vm_dir: &'a Path,
    pub vm_cid: &'a str,
    pub agent_id: &'a str,
    pub state_dir: &'a Path,
}

impl AgentConfig {
    /// The command with placeholders filled in.
    pub fn argv(&self, p: &Placeholders<'_>) -> Vec<String> {
        let kubosh = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "kubosh".into());
        let pairs = [
            ("{kubosh}", kubosh),
            ("{settings}", p.settings.display().to_string()),
            ("{agent_config}", p.agent_config.display().to_string()),
            ("{root}", p.root.display().to_string()),
            ("{vm_dir}", p.vm_dir.display().to_string()),
            ("{vm_cid}", p.vm_cid.to_string()),
            ("{agent_id}", p.agent_id.to_string()),
            ("{state_dir}", p.state_dir.display().to_string()),
        ];
        self.command
            .iter()
            .map(|arg| {
                pairs
                    .iter()
                    .fold(arg.clone(), |acc, (from, to)| acc.replace(from, to))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn context_overrides_the_file_and_relative_dirs_follow_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cpi.yml");
        std::fs::write(
            &file,
            "state_dir: state\nmbus: nats://file\napi_version: 1\n",
        )
        .unwrap();
        let ctx = json!({"director_uuid": "d", "mbus": "nats://ctx", "unrelated": 1});
        let config = Config::load(Some(&file), ctx.as_object().unwrap()).unwrap();
        assert_eq!(config.state_dir, dir.path().join("state"));
        assert_eq!(config.mbus.as_ref().unwrap().expose(), "nats://ctx");
        assert_eq!(config.api_version, 1);
        assert_eq!(config.agent.command, default_agent_command());
        assert_eq!(
            config.agent_blobstore()["options"]["blobstore_path"],
            json!(dir.path().join("state").join("blobstore"))
        );
        // A relative local blobstore path follows the file too (the agents get it as it is).
        std::fs::write(
            &file,
            "state_dir: state\nblobstore: {provider: local, options: {blobstore_path: blobs}}\n",
        )
        .unwrap();
        let config = Config::load(Some(&file), &Map::new()).unwrap();
        assert_eq!(
            config.agent_blobstore()["options"]["blobstore_path"],
            json!(dir.path().join("blobs"))
        );
    }

    #[test]
    fn missing_state_dir_and_bad_values_are_errors() {
        let none = Config::load(None, &Map::new()).unwrap_err();
        assert!(none.to_string().contains("state_dir is not set"), "{none}");
        let ctx = json!({"state_dir": "/tmp/x", "agent": {"command": []}});
        assert!(Config::load(None, ctx.as_object().unwrap()).is_err());
        let ctx = json!({"state_dir": 5});
        assert!(Config::load(None, ctx.as_object().unwrap()).is_err());
    }

    #[test]
    fn secrets_do_not_print() {
        let ctx = json!({"state_dir": "/tmp/x", "mbus": "nats://user:pw@h:4222"});
        let config = Config::load(None, ctx.as_object().unwrap()).unwrap();
        assert!(!format!("{config:?}").contains("pw@"));
    }
}
