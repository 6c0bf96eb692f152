//! Persistent disks in the local cloud, where a disk is a directory: the agent's
//! `add_persistent_disk`, `remove_persistent_disk`, `mount_disk`, `unmount_disk`,
//! `migrate_disk` and `list_disk` (`agent/action/*_disk.go`, `platform/linux_platform.go`).
//!
//! "Mounting" makes `store` (or `store_migration_target`, when `store` already holds another
//! disk) a symlink to the disk's directory; unmounting puts an empty directory back, as an
//! unmounted mount point looks. The disk hint the CPI returned from `attach_disk` is recorded
//! per disk cid in `bosh/persistent_disk_hints.json`; it is the directory path as a string,
//! or an object with a `path`. A missing disk directory is created on mount (the agent
//! formats a new disk). `migrate_disk` copies everything from `store` to
//! `store_migration_target` (modes, symlinks, FIFOs, times, and ownership when permitted;
//! hard links become separate files), then makes the new disk `store`.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::layout::Layout;

/// Why a disk action failed.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// No hint was recorded for the cid.
    #[error("Persistent disk with volume id '{0}' could not be found")]
    UnknownDisk(String),
    /// The hint names no absolute directory.
    #[error(
        "disk {cid}: unusable disk hint {hint}: expected an absolute path or {{\"path\": ...}}"
    )]
    BadHint {
        /// The disk.
        cid: String,
        /// The hint, as JSON.
        hint: String,
    },
    /// The mount point holds files of its own.
    #[error("{} is a non-empty directory; refusing to hide its files", .0.display())]
    MountPointInUse(PathBuf),
    /// Both mount points hold other disks.
    #[error("disk {0}: store and store_migration_target are both in use")]
    NoMountPoint(String),
    /// `migrate_disk` without two mounted disks.
    #[error("migrate_disk needs disks mounted at store and store_migration_target")]
    NothingToMigrate,
    /// A file-system step failed.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DiskError {
    let what = what.into();
    move |source| DiskError::Io { what, source }
}

/// Where `mount_disk` put a disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mounted {
    /// At `store`.
    Store,
    /// At `store_migration_target` (another disk is at `store`).
    MigrationTarget,
    /// It was mounted already.
    AlreadyMounted,
}

/// The persistent disks of one VM.
#[derive(Debug, Clone)]
pub struct Disks {
    layout: Layout,
}

impl Disks {
    /// Disks of `layout`.
    pub fn new(layout: Layout) -> Self {
        Self { layout }
    }

    fn hints(&self) -> Result<BTreeMap<String, Value>, DiskError> {
        let path = self.layout.persistent_disk_hints_file();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| DiskError::Io {
                what: format!("reading {}", path.display()),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(io(format!("reading {}", path.display()))(e)),
        }
    }

    fn save_hints(&self, hints: &BTreeMap<String, Value>) -> Result<(), DiskError> {
        let path = self.layout.persistent_disk_hints_file();
        let what = format!("writing {}", path.display());
        let text = serde_json::to_vec(hints).map_err(|e| DiskError::Io {
            what: what.clone(),
            source: std::io::Error::other(e),
        })?;
        write_atomic(&path, &text).map_err(io(what))
    }

    /// `add_persistent_disk`: records the hint of disk `cid`.
    pub fn add_persistent_disk(&self, cid: &str, hint: &Value) -> Result<(), DiskError> {
        device_of(cid, hint)?;
        let mut hints = self.hints()?;
        hints.insert(cid.to_string(), hint.clone());
        self.save_hints(&hints)
    }

    /// `remove_persistent_disk`: forgets disk `cid`.
    pub fn remove_persistent_disk(&self, cid: &str) -> Result<(), DiskError> {
        let mut hints = self.hints()?;
        if hints.remove(cid).is_some() {
            self.save_hints(&hints)?;
        }
        Ok(())
    }

    /// Whether `add_persistent_disk` recorded a hint for `cid`.
    pub fn has_hint(&self, cid: &str) -> Result<bool, DiskError> {
        Ok(self.hints()?.contains_key(cid))
    }

    fn device(&self, cid: &str) -> Result<PathBuf, DiskError> {
        let hints = self.hints()?;
        let hint = hints
            .get(cid)
            .ok_or_else(|| DiskError::UnknownDisk(cid.to_string()))?;
        device_of(cid, hint)
    }

    /// `mount_disk`: makes disk `cid` the `store` (or the migration target when `store`
    /// holds another disk), and records it in `bosh/managed_disk_settings.json`.
    pub fn mount_disk(&self, cid: &str) -> Result<Mounted, DiskError> {
        let device = self.device(cid)?;
        std::fs::create_dir_all(&device).map_err(io(format!("creating {}", device.display())))?;
        let store = self.layout.store_dir();
        let migration = self.layout.store_migration_dir();
        let at_store = mounted_at(&store);
        let at_migration = mounted_at(&migration);
        if at_store.as_deref() == Some(device.as_path())
            || at_migration.as_deref() == Some(device.as_path())
        {
            return Ok(Mounted::AlreadyMounted);
        }
        let (point, result) = match (at_store, at_migration) {
            (None, _) => (store, Mounted::Store),
            (Some(_), None) => (migration, Mounted::MigrationTarget),
            (Some(_), Some(_)) => return Err(DiskError::NoMountPoint(cid.to_string())),
        };
        mount(&device, &point)?;
        let managed = self.layout.managed_disk_settings_file();
        write_atomic(&managed, cid.as_bytes())
            .map_err(io(format!("writing {}", managed.display())))?;
        tracing::info!(cid, mount_point = %point.display(), "mounted persistent disk");
        Ok(result)
    }

    /// `unmount_disk`: unmounts disk `cid` wherever it is; whether it was mounted.
    pub fn unmount_disk(&self, cid: &str) -> Result<bool, DiskError> {
        let device = self.device(cid)?;
        for point in [self.layout.store_dir(), self.layout.store_migration_dir()] {
            if mounted_at(&point).as_deref() == Some(device.as_path()) {
                unmount(&point)?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// `list_disk`: the cids of the mounted disks, sorted.
    pub fn list_disk(&self) -> Result<Vec<String>, DiskError> {
        let mounted: Vec<PathBuf> = [self.layout.store_dir(), self.layout.store_migration_dir()]
            .iter()
            .filter_map(|p| mounted_at(p))
            .collect();
        Ok(self
            .hints()?
            .iter()
            .filter(|(cid, hint)| device_of(cid, hint).is_ok_and(|d| mounted.contains(&d)))
            .map(|(cid, _)| cid.clone())
            .collect())
    }

    /// `migrate_disk`: copies all of `store` onto the disk at `store_migration_target`, then
    /// that disk becomes `store` and the old one is unmounted.
    pub fn migrate_disk(&self) -> Result<(), DiskError> {
        let store = self.layout.store_dir();
        let migration = self.layout.store_migration_dir();
        let (Some(from), Some(to)) = (mounted_at(&store), mounted_at(&migration)) else {
            return Err(DiskError::NothingToMigrate);
        };
        copy_tree(&from, &to).map_err(io(format!(
            "copying files from {} to {}",
            from.display(),
            to.display()
        )))?;
        unmount(&migration)?;
        unmount(&store)?;
        mount(&to, &store)?;
        if let Some(cid) = self
            .hints()?
            .iter()
            .find(|(cid, hint)| device_of(cid, hint).is_ok_and(|d| d == to))
            .map(|(cid, _)| cid.clone())
        {
            let managed = self.layout.managed_disk_settings_file();
            write_atomic(&managed, cid.as_bytes())
                .map_err(io(format!("writing {}", managed.display())))?;
        }
        Ok(())
    }
}

/// The disk directory a hint names.
fn device_of(cid: &str, hint: &Value) -> Result<PathBuf, DiskError> {
    let path = match hint {
        Value::String(s) => Some(s.as_str()),
        Value::Object(o) => o.get("path").and_then(Value::as_str),
        _ => None,
    };
    match path.map(PathBuf::from) {
        Some(p) if p.is_absolute() => Ok(p),
        _ => Err(DiskError::BadHint {
            cid: cid.to_string(),
            hint: hint.to_string(),
        }),
    }
}

/// The disk directory mounted at `point`, if `point` is a symlink.
fn mounted_at(point: &Path) -> Option<PathBuf> {
    std::fs::read_link(point).ok()
}

fn mount(device: &Path, point: &Path) -> Result<(), DiskError> {
    match std::fs::symlink_metadata(point) {
        Ok(m) if m.is_dir() => {
            let empty = std::fs::read_dir(point)
                .map_err(io(format!("reading {}", point.display())))?
                .next()
                .is_none();
            if !empty {
                return Err(DiskError::MountPointInUse(point.to_path_buf()));
            }
            std::fs::remove_dir(point).map_err(io(format!("removing {}", point.display())))?;
        }
        Ok(_) => {
            std::fs::remove_file(point).map_err(io(format!("removing {}", point.display())))?
        }
        Err(_) => {}
    }
    std::os::unix::fs::symlink(device, point).map_err(io(format!(
        "mounting {} at {}",
        device.display(),
        point.display()
    )))
}

fn unmount(point: &Path) -> Result<(), DiskError> {
    std::fs::remove_file(point).map_err(io(format!("unmounting {}", point.display())))?;
    std::fs::create_dir_all(point).map_err(io(format!("creating {}", point.display())))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Copies the contents of `from` into `to`, preserving what `tar -p` would.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    // Directories get their mode and times after their contents are written.
    let mut dirs: Vec<(PathBuf, std::fs::Metadata)> = Vec::new();
    let mut stack = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((src, dst)) = stack.pop() {
        for entry in std::fs::read_dir(&src)? {
            let entry = entry?;
            let s = entry.path();
            let d = dst.join(entry.file_name());
            let meta = std::fs::symlink_metadata(&s)?;
            let ft = meta.file_type();
            if ft.is_dir() {
                if !std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir()) {
                    remove_any(&d)?;
                    std::fs::create_dir(&d)?;
                }
                stack.push((s, d.clone()));
                dirs.push((d, meta));
                continue;
            }
            remove_any(&d)?;
            if ft.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&s)?, &d)?;
            } else if ft.is_file() {
                std::fs::copy(&s, &d)?;
                std::fs::set_permissions(
                    &d,
                    std::fs::Permissions::from_mode(meta.mode() & 0o7777),
                )?;
            } else if is_fifo(&meta) {
                mkfifo(&d, meta.mode() & 0o7777)?;
            } else {
                tracing::warn!(path = %s.display(), "not copied: sockets and devices are skipped");
                continue;
            }
            set_owner_and_times(&d, &meta);
        }
    }
    let root = std::fs::metadata(from)?;
    dirs.push((to.to_path_buf(), root));
    for (d, meta) in dirs.iter().rev() {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        set_owner_and_times(d, meta);
    }
    Ok(())
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn is_fifo(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    meta.file_type().is_fifo()
}

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

fn mkfifo(path: &Path, mode: u32) -> std::io::Result<()> {
    let p = c_path(path)?;
    // SAFETY: p is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::mkfifo(p.as_ptr(), mode as libc::mode_t) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Ownership (only possible as root; ignored otherwise) and access/modification times,
/// without following symlinks.
fn set_owner_and_times(path: &Path, meta: &std::fs::Metadata) {
    let Ok(p) = c_path(path) else { return };
    let times = [
        libc::timespec {
            tv_sec: meta.atime() as libc::time_t,
            tv_nsec: meta.atime_nsec() as _,
        },
        libc::timespec {
            tv_sec: meta.mtime() as libc::time_t,
            tv_nsec: meta.mtime_nsec() as _,
        },
    ];
    // SAFETY: p is a valid NUL-terminated path and times points to two timespecs, both
    // alive for the duration of the calls.
    unsafe {
        libc::lchown(p.as_ptr(), meta.uid(), meta.gid());
        libc::utimensat(
            libc::AT_FDCWD,
            p.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_are_paths() {
        assert_eq!(device_of("d", &Value::from("/x")).unwrap(), Path::new("/x"));
        assert_eq!(
            device_of("d", &serde_json::json!({"path": "/y", "lun": "0"})).unwrap(),
            Path::new("/y")
        );
        for bad in [
            Value::from("rel"),
            Value::Null,
            serde_json::json!({"id": "x"}),
        ] {
            assert!(device_of("d", &bad).is_err(), "{bad}");
        }
    }
}
