//! The agent's settings (`bosh-protocols.md` §1.8, bosh-agent `settings/settings.go`): what
//! a CPI hands to a new VM and the agent reads at boot, in the format of the agent's `File`
//! settings source, and the `agent.json` (§2.8) that points the agent at them. One model for
//! both sides: kubosh's local cloud writes it, kubosh's agent reads it.
//!
//! Only the parts kubosh's agent acts on are typed; everything else is kept verbatim so a
//! settings file read and written again is what the CPI wrote. `Debug` never shows the mbus
//! credentials, the client key or blobstore options.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::protocol::{BlobstoreSettings, CertKeyPair};

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Why settings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A file could not be read.
    #[error("reading {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file is not the JSON expected.
    #[error("parsing {}: {reason}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `agent.json` names no settings source kubosh's agent can read.
    #[error("{}: no settings source of type \"File\" with a SettingsPath", .0.display())]
    NoFileSource(PathBuf),
    /// A required field is missing or empty.
    #[error("settings: {0}")]
    Invalid(String),
}

/// The settings of one VM.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The agent's ID: its NATS subject is `agent.<agent_id>`.
    pub agent_id: String,
    /// `{"name": <vm cid>}`.
    #[serde(default)]
    pub vm: VmSettings,
    /// The message bus: `nats://host:port` or `https://user:password@host:port`.
    #[serde(default)]
    pub mbus: String,
    /// NTP servers, verbatim (kept here so a written file has bosh's key order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntp: Option<Value>,
    /// The blobstore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blobstore: Option<BlobstoreSettings>,
    /// Networks by name, verbatim.
    #[serde(default)]
    pub networks: Map<String, Value>,
    /// Disks.
    #[serde(default)]
    pub disks: DiskSettings,
    /// `env` of `create_vm`.
    #[serde(default)]
    pub env: EnvSettings,
    /// Everything else, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("agent_id", &self.agent_id)
            .field("vm", &self.vm)
            .field("mbus_scheme", &self.mbus.split_once("://").map(|(s, _)| s))
            .field("blobstore", &self.blobstore)
            .field("networks", &self.networks.keys().collect::<Vec<_>>())
            .field("disks", &self.disks)
            .finish_non_exhaustive()
    }
}

/// `vm` of the settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmSettings {
    /// The VM's CID.
    #[serde(default)]
    pub name: String,
}

/// `disks` of the settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskSettings {
    /// The system disk (a device path; kubosh's local cloud writes the VM's root).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub system: Value,
    /// The ephemeral disk: a device path or a hint object.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub ephemeral: Value,
    /// Attached persistent disks: CID to hint.
    #[serde(default)]
    pub persistent: Map<String, Value>,
    /// Everything else, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `env` of the settings.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvSettings {
    /// `env.bosh`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub bosh: BoshEnv,
    /// Everything else, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl std::fmt::Debug for EnvSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvSettings")
            .field("bosh", &self.bosh)
            .finish_non_exhaustive()
    }
}

/// `env.bosh`.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BoshEnv {
    /// `env.bosh.mbus`: the TLS identity and URLs that override the top-level `mbus`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub mbus: MbusEnv,
    /// `env.bosh.blobstores`: override the top-level `blobstore` (the first is used).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blobstores: Vec<BlobstoreSettings>,
    /// Everything else (`password`, `keep_root_password`, `parallel`, ...), verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl std::fmt::Debug for BoshEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoshEnv")
            .field("mbus", &self.mbus)
            .field("blobstores", &self.blobstores)
            .finish_non_exhaustive()
    }
}

/// `env.bosh.mbus`.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MbusEnv {
    /// The agent's certificate and key and the CA it trusts.
    #[serde(default, skip_serializing_if = "is_default")]
    pub cert: CertKeyPair,
    /// NATS URLs that take precedence over the top-level `mbus`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
    /// Everything else, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl std::fmt::Debug for MbusEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MbusEnv")
            .field("cert", &self.cert)
            .field("urls", &self.urls.len())
            .finish_non_exhaustive()
    }
}

impl Settings {
    /// Parses settings JSON; `path` names the source in errors.
    pub fn from_slice(bytes: &[u8], path: &Path) -> Result<Settings, SettingsError> {
        let settings: Settings =
            serde_json::from_slice(bytes).map_err(|e| SettingsError::Parse {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        if settings.agent_id.is_empty() {
            return Err(SettingsError::Invalid("agent_id is empty".into()));
        }
        Ok(settings)
    }

    /// The NATS or HTTPS URLs to serve on: `env.bosh.mbus.urls` when set, else `mbus`.
    pub fn mbus_urls(&self) -> Vec<String> {
        if self.env.bosh.mbus.urls.is_empty() {
            vec![self.mbus.clone()]
        } else {
            self.env.bosh.mbus.urls.clone()
        }
    }

    /// The blobstore in effect: the first of `env.bosh.blobstores`, else `blobstore`.
    pub fn effective_blobstore(&self) -> Option<&BlobstoreSettings> {
        self.env.bosh.blobstores.first().or(self.blobstore.as_ref())
    }

    /// The shared directory of a `local` blobstore (`options.blobstore_path`).
    pub fn local_blobstore_path(&self) -> Option<PathBuf> {
        let b = self.effective_blobstore()?;
        if b.provider != "local" {
            return None;
        }
        b.options
            .get("blobstore_path")
            .and_then(Value::as_str)
            .map(PathBuf::from)
    }

    /// Attaches (`Some(hint)`) or forgets (`None`) persistent disk `disk_cid`
    /// (`disks.persistent`).
    pub fn set_persistent_disk(&mut self, disk_cid: &str, hint: Option<Value>) {
        match hint {
            Some(hint) => {
                self.disks.persistent.insert(disk_cid.to_string(), hint);
            }
            None => {
                self.disks.persistent.remove(disk_cid);
            }
        }
    }
}

/// `agent.json`, as far as the settings source goes: `{"Infrastructure": {"Settings":
/// {"Sources": [{"Type": "File", "SettingsPath": ...}]}}}`. Other keys are kept verbatim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentConfig {
    /// `Infrastructure`.
    #[serde(rename = "Infrastructure", default)]
    pub infrastructure: Infrastructure,
    /// Everything else, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `Infrastructure` of `agent.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Infrastructure {
    /// `Settings`.
    #[serde(rename = "Settings", default)]
    pub settings: SettingsSources,
    /// Everything else, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `Infrastructure.Settings` of `agent.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SettingsSources {
    /// `Sources`, in the order the agent tries them.
    #[serde(rename = "Sources", default)]
    pub sources: Vec<SettingsSource>,
    /// Everything else, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One settings source: kubosh's agent reads `{"Type": "File", "SettingsPath": ...}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SettingsSource {
    /// `File`, `CDROM`, `HTTP`, `ConfigDrive`, ...
    #[serde(rename = "Type")]
    pub kind: String,
    /// The settings file of a `File` source.
    #[serde(
        rename = "SettingsPath",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub settings_path: Option<PathBuf>,
    /// Everything else, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AgentConfig {
    /// An `agent.json` with one `File` source at `settings_path`.
    pub fn file_source(settings_path: &Path) -> AgentConfig {
        AgentConfig {
            infrastructure: Infrastructure {
                settings: SettingsSources {
                    sources: vec![SettingsSource {
                        kind: "File".into(),
                        settings_path: Some(settings_path.to_path_buf()),
                        extra: Map::new(),
                    }],
                    extra: Map::new(),
                },
                extra: Map::new(),
            },
            extra: Map::new(),
        }
    }

    /// The `SettingsPath` of the first `File` source.
    pub fn settings_path(&self) -> Option<&Path> {
        self.infrastructure
            .settings
            .sources
            .iter()
            .find(|s| s.kind == "File")
            .and_then(|s| s.settings_path.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn agent_json_names_its_file_source() {
        let config = AgentConfig::file_source(Path::new("/vm/settings.json"));
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            json!({"Infrastructure": {"Settings": {"Sources": [
                {"Type": "File", "SettingsPath": "/vm/settings.json"}]}}})
        );
        let read: AgentConfig = serde_json::from_value(json!({"Infrastructure": {"Settings":
            {"Sources": [{"Type": "CDROM"}, {"Type": "File", "SettingsPath": "/s"}]}}}))
        .unwrap();
        assert_eq!(read.settings_path(), Some(Path::new("/s")));
    }

    #[test]
    fn persistent_disks_are_added_and_removed() {
        let mut s = Settings::default();
        s.set_persistent_disk("disk-1", Some(json!({"path": "/d1"})));
        assert_eq!(s.disks.persistent["disk-1"], json!({"path": "/d1"}));
        s.set_persistent_disk("disk-1", None);
        assert!(s.disks.persistent.is_empty());
    }

    #[test]
    fn an_empty_env_is_written_empty() {
        let s: Settings = serde_json::from_value(json!({"agent_id": "a", "env": {}})).unwrap();
        assert_eq!(serde_json::to_value(&s).unwrap()["env"], json!({}));
    }
}
