//! Reading the agent's settings (the model is `kubosh_bosh::agent::settings`, re-exported):
//! from the `File` settings source an `agent.json` (§2.8) names, or from a file given directly.

use std::path::{Path, PathBuf};

pub use kubosh_transport::agent::settings::*;

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
    read(&settings_path_of(agent_json)?)
}

/// The `SettingsPath` of the first `File` source of an `agent.json`.
pub fn settings_path_of(agent_json: &Path) -> Result<PathBuf, SettingsError> {
    let bytes = std::fs::read(agent_json).map_err(|source| SettingsError::Read {
        path: agent_json.to_path_buf(),
        source,
    })?;
    let config: AgentConfig = serde_json::from_slice(&bytes).map_err(|e| SettingsError::Parse {
        path: agent_json.to_path_buf(),
        reason: e.to_string(),
    })?;
    config
        .settings_path()
        .map(Path::to_path_buf)
        .ok_or_else(|| SettingsError::NoFileSource(agent_json.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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
        assert_eq!(from_agent_config(&agent_json).unwrap().agent_id, "agent-1");
        std::fs::write(&agent_json, "{}").unwrap();
        assert!(matches!(
            settings_path_of(&agent_json),
            Err(SettingsError::NoFileSource(_))
        ));
    }
}
