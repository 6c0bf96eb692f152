//! The files bosh-agent's dummy platform (`-P dummy`, `platform/dummy_platform.go`) keeps in
//! `<base>/bosh` instead of mounting anything, as it writes them; and the record kubosh's VM
//! launcher keeps of what it made of them (the local cloud emulates the dummy platform's
//! disks with directories: `kubosh vm run --dummy-disks`).
//!
//! The dummy platform never moves data: `mount_disk` appends to `mounts.json` (at
//! `store_migration_target` when `store` is taken) and writes the cid to
//! `managed_disk_settings.json`, `migrate_disk` appends `{from, to}` to
//! `disk_migrations.json`, `unmount_disk` drops the disk's entries from `mounts.json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `mounts.json`: every mount the dummy platform recorded, oldest first.
pub const MOUNTS: &str = "mounts.json";
/// `disk_migrations.json`: every `migrate_disk`, oldest first.
pub const DISK_MIGRATIONS: &str = "disk_migrations.json";
/// `persistent_disk_hints.json`: the hints of `add_persistent_disk`, by disk cid.
pub const PERSISTENT_DISK_HINTS: &str = "persistent_disk_hints.json";
/// `managed_disk_settings.json`: the cid of the last disk mounted (never cleared by the
/// agent; at boot it mounts that disk again and fails when the disk is gone).
pub const MANAGED_DISK_SETTINGS: &str = "managed_disk_settings.json";
/// The launcher's record of what it applied, in the VM's directory (outside its root).
pub const LAUNCHER_STATE: &str = "dummy-disks.json";

/// One entry of `mounts.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// The mount point, as the agent sees it (e.g. `/var/vcap/store`).
    #[serde(rename = "MountDir")]
    pub mount_dir: String,
    /// The disk.
    #[serde(rename = "DiskCid")]
    pub disk_cid: String,
}

/// One entry of `disk_migrations.json` (the dummy platform looks both cids up by mount point,
/// so after a second resize without a reboot they can be the wrong way round: the launcher
/// only counts them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskMigration {
    /// The disk at `store` when `migrate_disk` ran.
    #[serde(rename = "FromDiskCid")]
    pub from_disk_cid: String,
    /// The disk at `store_migration_target`.
    #[serde(rename = "ToDiskCid")]
    pub to_disk_cid: String,
}

/// `mounts.json` as read from its bytes (absent or `null`: no mounts).
pub fn parse_mounts(bytes: Option<&[u8]>) -> Result<Vec<Mount>, serde_json::Error> {
    parse_list(bytes)
}

/// `disk_migrations.json` as read from its bytes (absent or `null`: none).
pub fn parse_migrations(bytes: Option<&[u8]>) -> Result<Vec<DiskMigration>, serde_json::Error> {
    parse_list(bytes)
}

fn parse_list<T: serde::de::DeserializeOwned>(
    bytes: Option<&[u8]>,
) -> Result<Vec<T>, serde_json::Error> {
    match bytes {
        None => Ok(Vec::new()),
        Some(b) if b.iter().all(u8::is_ascii_whitespace) => Ok(Vec::new()),
        Some(b) => Ok(serde_json::from_slice::<Option<Vec<T>>>(b)?.unwrap_or_default()),
    }
}

/// The directory paths of the disks in `persistent_disk_hints.json` (the agent's
/// `DiskSettings`, whose `Path` is the hint's `path`), by cid.
pub fn hint_paths(bytes: &[u8]) -> Result<BTreeMap<String, String>, serde_json::Error> {
    let hints: BTreeMap<String, Value> = serde_json::from_slice(bytes)?;
    Ok(hints
        .into_iter()
        .filter_map(|(cid, v)| {
            let path = v.get("Path").and_then(Value::as_str)?.to_string();
            (!path.is_empty()).then_some((cid, path))
        })
        .collect())
}

/// What the agent's bookkeeping said when the launcher applied it: a digest of `mounts.json`
/// and `disk_migrations.json` (absent files count as empty). The CPI compares it with the
/// files' current digest to know the launcher caught up.
pub fn fingerprint(mounts: Option<&[u8]>, migrations: Option<&[u8]>) -> String {
    let mut bytes = Vec::new();
    for part in [mounts, migrations] {
        let part = part.unwrap_or_default();
        bytes.extend_from_slice(&(part.len() as u64).to_be_bytes());
        bytes.extend_from_slice(part);
    }
    kubosh_base::digest::sha256_hex(&bytes)
}

/// The launcher's record (`dummy-disks.json`): which disk it made `store` and
/// `store_migration_target`, how many migrations it carried out, and the
/// [`fingerprint`] of the files it last applied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LauncherState {
    /// The disk at `store`.
    #[serde(default)]
    pub store: Option<String>,
    /// The disk at `store_migration_target`.
    #[serde(default)]
    pub migration_target: Option<String>,
    /// How many entries of `disk_migrations.json` were carried out (copied).
    #[serde(default)]
    pub migrations_applied: usize,
    /// Disks whose data a migration moved away while the agent still lists them as mounted
    /// (a Linux agent unmounts them): never linked again until the agent unmounts them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub migrated_away: Vec<String>,
    /// The [`fingerprint`] of the files last applied.
    #[serde(default)]
    pub applied: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dummy_platforms_files_parse_as_it_writes_them() {
        let mounts = br#"[{"MountDir":"/var/vcap/store","MountOptions":null,"DiskCid":"d1"}]"#;
        assert_eq!(
            parse_mounts(Some(mounts)).unwrap(),
            [Mount {
                mount_dir: "/var/vcap/store".into(),
                disk_cid: "d1".into()
            }]
        );
        assert!(parse_mounts(Some(b"null")).unwrap().is_empty());
        assert!(parse_mounts(None).unwrap().is_empty());
        let migrations = br#"[{"FromDiskCid":"d1","ToDiskCid":"d2"}]"#;
        assert_eq!(parse_migrations(Some(migrations)).unwrap().len(), 1);
        let hints = br#"{"d1":{"ID":"d1","Path":"/disks/d1","VolumeID":""},"d2":{"ID":"d2"}}"#;
        assert_eq!(
            hint_paths(hints).unwrap(),
            BTreeMap::from([("d1".to_string(), "/disks/d1".to_string())])
        );
        assert!(parse_mounts(Some(b"{")).is_err());
    }

    #[test]
    fn the_fingerprint_tells_the_files_apart() {
        let a = fingerprint(Some(b"[1]"), None);
        assert_eq!(a, fingerprint(Some(b"[1]"), Some(b"")));
        assert_ne!(a, fingerprint(None, Some(b"[1]")));
        assert_ne!(a, fingerprint(Some(b"[1]"), Some(b"[]")));
    }
}
