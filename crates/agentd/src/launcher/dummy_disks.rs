//! Persistent disks for bosh-agent's dummy platform: it records mounts and migrations in
//! `<base>/bosh` but never moves a byte (`kubosh_bosh::agent::dummy`), so on the local cloud
//! the launcher makes `store` and `store_migration_target` be the disks' directories
//! (symbolic links, which outlive the agent and so survive a reboot) and copies the data when
//! the agent records a migration, the way a Linux agent mounts and copies.
//!
//! Which disk is where is decided from the agent's files and what was applied before
//! (`dummy-disks.json`, in the VM's directory): the disk at `store` stays until the agent
//! unmounts it or a migration moves its data to the other mounted disk; a newly mounted disk
//! goes to `store` when it is free, else to `store_migration_target`. (The dummy platform
//! looks the migration's cids up by mount point and records them the wrong way round after
//! a second resize without a reboot, so only the number of migrations is trusted.)

use std::path::{Path, PathBuf};

use kubosh_bosh::agent::dummy::{self, LauncherState};
use serde_json::Value;

/// Why the disks could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum DummyDiskError {
    /// A file could not be read or written, or a link made.
    #[error("{what} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file the agent wrote is not what the dummy platform writes.
    #[error("{}: {source}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The error.
        source: serde_json::Error,
    },
    /// A mounted disk has no directory in the agent's hints or settings.
    #[error("disk {0} is mounted but its directory is unknown (no hint and no settings entry)")]
    UnknownDisk(String),
    /// The copy of a migration failed.
    #[error("copying disk {from} to {to}: {source}")]
    Copy {
        /// The old disk.
        from: String,
        /// The new disk.
        to: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> DummyDiskError {
    let path = path.to_path_buf();
    move |source| DummyDiskError::Io { what, path, source }
}

/// The disks of one VM as its launcher keeps them.
#[derive(Debug)]
pub struct DummyDisks {
    /// The agent's base directory (`/var/vcap` inside the VM's namespace).
    base: PathBuf,
    /// The launcher's record (`<vm dir>/dummy-disks.json`).
    state_file: PathBuf,
    state: LauncherState,
}

impl DummyDisks {
    /// The disks of the agent at `base`, with what was applied before read from
    /// `state_file` (none when it does not exist).
    pub fn open(base: &Path, state_file: PathBuf) -> Result<DummyDisks, DummyDiskError> {
        let state = match read_optional(&state_file)? {
            Some(bytes) => {
                serde_json::from_slice(&bytes).map_err(|source| DummyDiskError::Parse {
                    path: state_file.clone(),
                    source,
                })?
            }
            None => LauncherState::default(),
        };
        Ok(DummyDisks {
            base: base.to_path_buf(),
            state_file,
            state,
        })
    }

    fn bosh_file(&self, name: &str) -> PathBuf {
        self.base.join("bosh").join(name)
    }

    /// The directory the agent watches for changes.
    pub fn watched_dir(&self) -> PathBuf {
        self.base.join("bosh")
    }

    /// Brings `store` and `store_migration_target` in line with the agent's files, copying
    /// data for every migration not carried out yet. True when something was applied
    /// (false when the files are as last applied).
    pub fn apply(&mut self) -> Result<bool, DummyDiskError> {
        let mounts_path = self.bosh_file(dummy::MOUNTS);
        let migrations_path = self.bosh_file(dummy::DISK_MIGRATIONS);
        let mounts_bytes = read_optional(&mounts_path)?;
        let migrations_bytes = read_optional(&migrations_path)?;
        let fingerprint = dummy::fingerprint(mounts_bytes.as_deref(), migrations_bytes.as_deref());
        if fingerprint == self.state.applied {
            return Ok(false);
        }
        let mounts = dummy::parse_mounts(mounts_bytes.as_deref()).map_err(|source| {
            DummyDiskError::Parse {
                path: mounts_path.clone(),
                source,
            }
        })?;
        let migrations =
            dummy::parse_migrations(migrations_bytes.as_deref()).map_err(|source| {
                DummyDiskError::Parse {
                    path: migrations_path,
                    source,
                }
            })?;
        let mut mounted: Vec<&str> = Vec::new();
        for m in &mounts {
            if !mounted.contains(&m.disk_cid.as_str()) {
                mounted.push(&m.disk_cid);
            }
        }
        let is_mounted =
            |cid: &Option<String>| cid.as_deref().is_some_and(|c| mounted.contains(&c));
        let mut state = self.state.clone();
        if !is_mounted(&state.store) {
            state.store = None;
        }
        if !is_mounted(&state.migration_target) {
            state.migration_target = None;
        }
        state
            .migrated_away
            .retain(|c| mounted.contains(&c.as_str()));
        while state.migrations_applied < migrations.len() {
            let to = mounted
                .iter()
                .find(|c| {
                    state.store.as_deref() != Some(**c)
                        && !state.migrated_away.iter().any(|m| m == **c)
                })
                .map(|c| c.to_string());
            if let (Some(from), Some(to)) = (state.store.clone(), to) {
                state.migrated_away.push(from.clone());
                let (from_dir, to_dir) = (self.disk_dir(&from)?, self.disk_dir(&to)?);
                copy_disk(&from_dir, &to_dir).map_err(|source| DummyDiskError::Copy {
                    from: from.clone(),
                    to: to.clone(),
                    source,
                })?;
                tracing::info!(from = %from, to = %to, "copied the persistent disk's data");
                state.store = Some(to);
                state.migration_target = None;
            }
            state.migrations_applied += 1;
        }
        if state.store.is_none() {
            let store_dir = self.base.join("store");
            let usable: Vec<_> = (mounts.iter())
                .filter(|m| !state.migrated_away.contains(&m.disk_cid))
                .collect();
            state.store = (usable.iter())
                .find(|m| Path::new(&m.mount_dir) == store_dir)
                .or_else(|| usable.first())
                .map(|m| m.disk_cid.clone());
        }
        state.migration_target = mounted
            .iter()
            .find(|c| {
                state.store.as_deref() != Some(**c) && !state.migrated_away.iter().any(|m| m == **c)
            })
            .map(|c| c.to_string());
        let store_dir = state
            .store
            .as_deref()
            .map(|c| self.disk_dir(c))
            .transpose()?;
        let target_dir = (state.migration_target.as_deref())
            .map(|c| self.disk_dir(c))
            .transpose()?;
        link(&self.base.join("store"), store_dir.as_deref(), true)?;
        link(
            &self.base.join("store_migration_target"),
            target_dir.as_deref(),
            false,
        )?;
        state.applied = fingerprint;
        let bytes = serde_json::to_vec(&state).unwrap_or_default();
        write_atomic(&self.state_file, &bytes)?;
        self.state = state;
        Ok(true)
    }

    /// A disk's directory: the `path` of its hint (`persistent_disk_hints.json`), else of its
    /// entry in the settings the agent loaded (`disks.persistent`).
    fn disk_dir(&self, cid: &str) -> Result<PathBuf, DummyDiskError> {
        let hints_path = self.bosh_file(dummy::PERSISTENT_DISK_HINTS);
        if let Some(bytes) = read_optional(&hints_path)? {
            let paths = dummy::hint_paths(&bytes).map_err(|source| DummyDiskError::Parse {
                path: hints_path,
                source,
            })?;
            if let Some(path) = paths.get(cid) {
                return Ok(PathBuf::from(path));
            }
        }
        let settings_path = self.bosh_file("settings.json");
        if let Some(bytes) = read_optional(&settings_path)?
            && let Ok(settings) = serde_json::from_slice::<Value>(&bytes)
        {
            let entry = &settings["disks"]["persistent"][cid];
            let path = entry.as_str().or_else(|| entry["path"].as_str());
            if let Some(path) = path.filter(|p| !p.is_empty()) {
                return Ok(PathBuf::from(path));
            }
        }
        Err(DummyDiskError::UnknownDisk(cid.to_string()))
    }
}

/// Copies a disk's contents onto another (kubosh's agent's copy: modes, links, times).
fn copy_disk(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    crate::disk::copy_tree(from, to)
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, DummyDiskError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("reading", path)(e)),
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DummyDiskError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io_err("writing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err("renaming", path))
}

/// Makes `point` a link to `dir`, or, without a disk, an empty directory (`keep_dir`, as an
/// unmounted mount point looks) or nothing. Files written at a mount point while no disk was
/// there are moved aside, as a mount hides them, never deleted.
fn link(point: &Path, dir: Option<&Path>, keep_dir: bool) -> Result<(), DummyDiskError> {
    let current = std::fs::symlink_metadata(point).ok();
    let is_link = current.as_ref().is_some_and(|m| m.file_type().is_symlink());
    if is_link && dir.is_some_and(|d| std::fs::read_link(point).ok().as_deref() == Some(d)) {
        return Ok(());
    }
    if is_link {
        std::fs::remove_file(point).map_err(io_err("removing the link", point))?;
    } else if current.is_some() && (dir.is_some() || !keep_dir) {
        // A directory (or file) of the root file system: empty ones go, others are hidden.
        if std::fs::remove_dir(point).is_err() {
            let hidden = point.with_file_name(format!(
                ".{}.hidden-{}",
                point
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("store"),
                kubosh_base::ids::uuid_v4()
            ));
            std::fs::rename(point, &hidden).map_err(io_err("moving aside", point))?;
            tracing::warn!(from = %point.display(), to = %hidden.display(), "moved files written while no disk was mounted aside");
        }
    }
    match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
            std::os::unix::fs::symlink(dir, point).map_err(io_err("linking", point))
        }
        None if keep_dir => std::fs::create_dir_all(point).map_err(io_err("creating", point)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Vm {
        _dir: tempfile::TempDir,
        base: PathBuf,
        disks: PathBuf,
        state: PathBuf,
    }

    impl Vm {
        fn new() -> Vm {
            let dir = tempfile::tempdir().unwrap();
            let base = dir.path().join("root");
            std::fs::create_dir_all(base.join("bosh")).unwrap();
            let disks = dir.path().join("disks");
            let state = dir.path().join(dummy::LAUNCHER_STATE);
            Vm {
                base,
                disks,
                state,
                _dir: dir,
            }
        }

        fn write(&self, name: &str, value: serde_json::Value) {
            std::fs::write(self.base.join("bosh").join(name), value.to_string()).unwrap();
        }

        /// The agent's files after `add_persistent_disk` of `cids` and these mounts and
        /// migrations.
        fn agent(&self, cids: &[&str], mounts: &[(&str, &str)], migrations: usize) {
            let hints: serde_json::Map<String, Value> = cids
                .iter()
                .map(|c| {
                    let path = self.disks.join(c);
                    ((*c).to_string(), serde_json::json!({"ID": c, "Path": path}))
                })
                .collect();
            self.write(dummy::PERSISTENT_DISK_HINTS, Value::Object(hints));
            let mounts: Vec<Value> = mounts
                .iter()
                .map(|(point, cid)| {
                    serde_json::json!({"MountDir": self.base.join(point), "MountOptions": null, "DiskCid": cid})
                })
                .collect();
            self.write(dummy::MOUNTS, Value::Array(mounts));
            let migrations: Vec<Value> = (0..migrations)
                .map(|_| serde_json::json!({"FromDiskCid": "x", "ToDiskCid": "y"}))
                .collect();
            self.write(dummy::DISK_MIGRATIONS, Value::Array(migrations));
        }

        fn store(&self) -> Option<PathBuf> {
            std::fs::read_link(self.base.join("store")).ok()
        }

        fn target(&self) -> Option<PathBuf> {
            std::fs::read_link(self.base.join("store_migration_target")).ok()
        }
    }

    #[test]
    fn a_mounted_disk_is_the_store_and_its_data_follows_every_migration() {
        let vm = Vm::new();
        let mut disks = DummyDisks::open(&vm.base, vm.state.clone()).unwrap();
        vm.agent(&["d1"], &[("store", "d1")], 0);
        assert!(disks.apply().unwrap());
        assert_eq!(vm.store(), Some(vm.disks.join("d1")));
        std::fs::write(vm.base.join("store/marker"), "kept").unwrap();
        assert!(!disks.apply().unwrap(), "nothing new");

        // Resize: the new disk at the migration target, then the migration, then the old one
        // unmounted and removed.
        vm.agent(
            &["d1", "d2"],
            &[("store", "d1"), ("store_migration_target", "d2")],
            0,
        );
        disks.apply().unwrap();
        assert_eq!(vm.target(), Some(vm.disks.join("d2")));
        vm.agent(
            &["d1", "d2"],
            &[("store", "d1"), ("store_migration_target", "d2")],
            1,
        );
        disks.apply().unwrap();
        assert_eq!(vm.store(), Some(vm.disks.join("d2")));
        assert_eq!(vm.target(), None);
        assert_eq!(
            std::fs::read_to_string(vm.base.join("store/marker")).unwrap(),
            "kept"
        );
        vm.agent(&["d2"], &[("store_migration_target", "d2")], 1);
        disks.apply().unwrap();
        assert_eq!(vm.store(), Some(vm.disks.join("d2")));

        // A second resize before any reboot: the dummy platform puts the new disk at `store`
        // (nothing is recorded there); the data still goes from d2 to d3.
        vm.agent(
            &["d2", "d3"],
            &[("store_migration_target", "d2"), ("store", "d3")],
            2,
        );
        // A launcher started again (a reboot) reads what it applied.
        let mut disks = DummyDisks::open(&vm.base, vm.state.clone()).unwrap();
        disks.apply().unwrap();
        assert_eq!(vm.store(), Some(vm.disks.join("d3")));
        assert_eq!(
            std::fs::read_to_string(vm.disks.join("d3/marker")).unwrap(),
            "kept"
        );

        // Unmounted: an empty directory where the disk was; the data stays on the disk.
        vm.agent(&[], &[], 2);
        disks.apply().unwrap();
        assert_eq!(vm.store(), None);
        assert!(vm.base.join("store").is_dir());
        assert!(vm.disks.join("d3/marker").is_file());
    }

    #[test]
    fn files_written_without_a_disk_are_moved_aside_not_lost() {
        let vm = Vm::new();
        std::fs::create_dir_all(vm.base.join("store")).unwrap();
        std::fs::write(vm.base.join("store/early"), "x").unwrap();
        let mut disks = DummyDisks::open(&vm.base, vm.state.clone()).unwrap();
        vm.agent(&["d1"], &[("store", "d1")], 0);
        disks.apply().unwrap();
        assert_eq!(vm.store(), Some(vm.disks.join("d1")));
        let hidden: Vec<_> = std::fs::read_dir(&vm.base)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".store.hidden-")
            })
            .collect();
        assert_eq!(hidden.len(), 1);
        assert!(hidden[0].path().join("early").is_file());
    }

    #[test]
    fn a_mounted_disk_without_a_directory_is_an_error() {
        let vm = Vm::new();
        let mut disks = DummyDisks::open(&vm.base, vm.state.clone()).unwrap();
        vm.agent(&[], &[("store", "d9")], 0);
        let err = disks.apply().unwrap_err();
        assert!(
            matches!(err, DummyDiskError::UnknownDisk(ref c) if c == "d9"),
            "{err}"
        );
    }
}
