//! The agent's settings (`bosh-protocols.md` §1.8, bosh-agent `settings/settings.go`): what
//! the CPI hands to a new VM, read from the `File` settings source an `agent.json` (§2.8)
//! names, or from a file given directly.
//!
//! Only the parts kubosh's agent acts on are typed; everything else is kept verbatim so the
//! cached copy (`<base>/bosh/settings.json`) is what the CPI wrote. `Debug` never shows the
//! mbus credentials, the client key or blobstore options.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use kubosh_transport::agent::protocol::{BlobstoreSettings, CertKeyPair};

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
    /// Everything else (`ntp`, ...), verbatim.
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
    #[serde(default)]
    pub system: Value,
    /// The ephemeral disk: a device path or a hint object.
    #[serde(default)]
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
    #[serde(default)]
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
    #[serde(default)]
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
    #[serde(default)]
    pub cert: CertKeyPair,
    /// NATS URLs that take precedence over the top-level `mbus`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
}

impl std::fmt::Debug for MbusEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MbusEnv")
            .field("cert", &self.cert)
            .field("urls", &self.urls.len())
            .finish()
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

    /// Reads a settings file.
    pub fn read(path: &Path) -> Result<Settings, SettingsError> {
        let bytes = std::fs::read(path).map_err(|source| SettingsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Settings::from_slice(&bytes, path)
    }

    /// Reads the settings an `agent.json` points at (its first `File` source).
    pub fn from_agent_config(agent_json: &Path) -> Result<Settings, SettingsError> {
        Settings::read(&settings_path_of(agent_json)?)
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
}

/// The `SettingsPath` of the first `File` source of an `agent.json`.
pub fn settings_path_of(agent_json: &Path) -> Result<PathBuf, SettingsError> {
    let bytes = std::fs::read(agent_json).map_err(|source| SettingsError::Read {
        path: agent_json.to_path_buf(),
        source,
    })?;
    let config: Value = serde_json::from_slice(&bytes).map_err(|e| SettingsError::Parse {
        path: agent_json.to_path_buf(),
        reason: e.to_string(),
    })?;
    config["Infrastructure"]["Settings"]["Sources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["Type"] == "File")
        .and_then(|s| s["SettingsPath"].as_str())
        .map(PathBuf::from)
        .ok_or_else(|| SettingsError::NoFileSource(agent_json.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "agent_id": "agent-1",
            "vm": {"name": "vm-1"},
            "mbus": "nats://127.0.0.1:4222",
            "ntp": ["0.pool.ntp.org"],
            "blobstore": {"provider": "local", "options": {"blobstore_path": "/blobs"}},
            "networks": {"default": {"type": "manual", "ip": "10.0.0.5"}},
            "disks": {"system": "/dev/sda", "ephemeral": {"path": "/e"}, "persistent": {}, "raw_ephemeral": null},
            "env": {"bosh": {"mbus": {"cert": {"ca": "CA", "certificate": "CERT", "private_key": "SECRET-KEY"}}, "password": "SECRET-PW"}, "persistent_disk_fs": "ext4"}
        })
    }

    #[test]
    fn reads_and_round_trips_verbatim() {
        let v = sample();
        let s = Settings::from_slice(v.to_string().as_bytes(), Path::new("s.json")).unwrap();
        assert_eq!(s.agent_id, "agent-1");
        assert_eq!(s.vm.name, "vm-1");
        assert_eq!(s.env.bosh.mbus.cert.private_key, "SECRET-KEY");
        assert_eq!(s.mbus_urls(), vec!["nats://127.0.0.1:4222"]);
        assert_eq!(s.local_blobstore_path(), Some(PathBuf::from("/blobs")));
        assert_eq!(serde_json::to_value(&s).unwrap(), v);
        let debug = format!("{s:?}");
        assert!(!debug.contains("SECRET"), "{debug}");
    }

    #[test]
    fn env_overrides_win() {
        let mut v = sample();
        v["env"]["bosh"]["mbus"]["urls"] = json!(["nats://10.0.0.1:4222"]);
        v["env"]["bosh"]["blobstores"] =
            json!([{"provider": "local", "options": {"blobstore_path": "/other"}}]);
        let s = Settings::from_slice(v.to_string().as_bytes(), Path::new("s.json")).unwrap();
        assert_eq!(s.mbus_urls(), vec!["nats://10.0.0.1:4222"]);
        assert_eq!(s.local_blobstore_path(), Some(PathBuf::from("/other")));
    }

    #[test]
    fn bad_settings_are_reported() {
        let err = Settings::from_slice(b"{}", Path::new("s.json")).unwrap_err();
        assert!(err.to_string().contains("agent_id"), "{err}");
        let err = Settings::from_slice(b"[", Path::new("s.json")).unwrap_err();
        assert!(err.to_string().starts_with("parsing s.json"), "{err}");
    }

    #[test]
    fn agent_json_names_the_file_source() {
        let dir = tempfile::tempdir().unwrap();
        let settings = dir.path().join("settings.json");
        std::fs::write(&settings, sample().to_string()).unwrap();
        let agent_json = dir.path().join("agent.json");
        std::fs::write(
            &agent_json,
            json!({"Infrastructure": {"Settings": {"Sources": [
                {"Type": "CDROM"}, {"Type": "File", "SettingsPath": settings}
            ]}}})
            .to_string(),
        )
        .unwrap();
        assert_eq!(
            Settings::from_agent_config(&agent_json).unwrap().agent_id,
            "agent-1"
        );
        std::fs::write(&agent_json, "{}").unwrap();
        assert!(matches!(
            settings_path_of(&agent_json),
            Err(SettingsError::NoFileSource(_))
        ));
    }
}
