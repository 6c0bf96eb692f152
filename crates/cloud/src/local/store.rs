//! The local cloud's state directory: layout, the lock, atomic record files.
//!
//! ```text
//! <state>/
//!   .lock                      flock(2) target: exclusive for changes, shared for reads
//!   faults.json                fault switches (tests)
//!   calls.jsonl                one line per CPI call
//!   blobstore/                 default `local` blobstore handed to agents
//!   tmp/                       objects being built, and trash being removed
//!   stemcells/<cid>/meta.json, image
//!   vms/<cid>/meta.json, settings.json, agent.log, ephemeral/, root/bosh/agent.json
//!   disks/<cid>/meta.json, data/
//!   snapshots/<cid>/meta.json, data/
//! ```
//!
//! Every record is written to a temporary file and renamed over the old one, and new objects
//! are built under `tmp/` and renamed into place, so a reader never sees half of anything.
//! Changes happen under an exclusive lock on `.lock`, so concurrent CPI processes never lose
//! each other's updates.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The kinds of objects the cloud holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Stemcell,
    Vm,
    Disk,
    Snapshot,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Stemcell, Kind::Vm, Kind::Disk, Kind::Snapshot];

    fn dir(self) -> &'static str {
        match self {
            Kind::Stemcell => "stemcells",
            Kind::Vm => "vms",
            Kind::Disk => "disks",
            Kind::Snapshot => "snapshots",
        }
    }

    /// The prefix of the CIDs of this kind.
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Stemcell => "sc",
            Kind::Vm => "vm",
            Kind::Disk => "disk",
            Kind::Snapshot => "snap",
        }
    }
}

/// True for CIDs that are safe as one path component (they come from requests).
pub fn valid_cid(cid: &str) -> bool {
    !cid.is_empty()
        && cid.len() <= 200
        && !cid.starts_with('.')
        && cid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// A held lock on the state directory; released when dropped.
pub struct Lock {
    _file: File,
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    /// Opens (creating as needed) the state directory.
    pub fn open(root: &Path) -> io::Result<Store> {
        for kind in Kind::ALL {
            fs::create_dir_all(root.join(kind.dir()))?;
        }
        fs::create_dir_all(root.join("tmp"))?;
        fs::create_dir_all(root.join("blobstore"))?;
        Ok(Store {
            root: root.to_path_buf(),
        })
    }

    /// The state directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Takes the exclusive lock (waits for it).
    pub fn lock(&self) -> io::Result<Lock> {
        self.flock(libc::LOCK_EX)
    }

    /// Takes a shared lock, for consistent reads.
    pub fn lock_shared(&self) -> io::Result<Lock> {
        self.flock(libc::LOCK_SH)
    }

    fn flock(&self, how: i32) -> io::Result<Lock> {
        // std opens files with O_CLOEXEC, so agents started under the lock do not inherit it.
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.root.join(".lock"))?;
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
                return Ok(Lock { _file: file });
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    /// The directory of one object.
    pub fn dir(&self, kind: Kind, cid: &str) -> PathBuf {
        self.root.join(kind.dir()).join(cid)
    }

    /// A fresh CID of `kind` with a directory under `tmp/` to build it in.
    pub fn staging(&self, kind: Kind) -> io::Result<(String, PathBuf)> {
        let cid = format!("{}-{}", kind.prefix(), kubosh_base::ids::uuid_v4());
        let dir = self.root.join("tmp").join(&cid);
        fs::create_dir_all(&dir)?;
        Ok((cid, dir))
    }

    /// Moves a staged object into place (call under the lock).
    pub fn commit(&self, kind: Kind, cid: &str, staged: &Path) -> io::Result<()> {
        fs::rename(staged, self.dir(kind, cid))
    }

    /// Removes an object: renames it into `tmp/` (atomic), then deletes it.
    pub fn remove(&self, kind: Kind, cid: &str) -> io::Result<()> {
        let trash = self
            .root
            .join("tmp")
            .join(format!("trash-{cid}-{}", kubosh_base::ids::uuid_v4()));
        fs::rename(self.dir(kind, cid), &trash)?;
        remove_tree(&trash)
    }

    /// Reads an object's record; `None` when the object does not exist.
    pub fn read<T: DeserializeOwned>(&self, kind: Kind, cid: &str) -> io::Result<Option<T>> {
        if !valid_cid(cid) {
            return Ok(None);
        }
        read_json(&self.dir(kind, cid).join("meta.json"))
    }

    /// Writes an object's record atomically.
    pub fn write<T: Serialize>(&self, kind: Kind, cid: &str, record: &T) -> io::Result<()> {
        write_json(&self.dir(kind, cid).join("meta.json"), record)
    }

    /// Every record of a kind, sorted by CID. Unreadable records are skipped.
    pub fn list<T: DeserializeOwned>(&self, kind: Kind) -> io::Result<Vec<(String, T)>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(self.root.join(kind.dir()))? {
            let entry = entry?;
            let Some(cid) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !valid_cid(&cid) {
                continue;
            }
            if let Ok(Some(record)) = read_json(&entry.path().join("meta.json")) {
                out.push((cid, record));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Names left in `tmp/` (objects whose creation or removal was interrupted).
    pub fn leftovers(&self) -> io::Result<Vec<String>> {
        let mut out: Vec<String> = fs::read_dir(self.root.join("tmp"))?
            .filter_map(|e| e.ok()?.file_name().to_str().map(str::to_string))
            .collect();
        out.sort();
        Ok(out)
    }
}

/// Reads a JSON file; `None` when it does not exist.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `value` as JSON to `path` atomically (a temporary file in the same directory, then
/// a rename).
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    write_atomic(path, &bytes)
}

/// Writes `bytes` to `path` atomically with respect to concurrent readers (no fsync: the local
/// cloud does not promise to survive a power cut).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.tmp", kubosh_base::ids::uuid_v4()));
    let result = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes a directory tree; a missing tree is fine.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Copies a directory tree (files, directories, symlinks).
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Now, as RFC 3339 UTC with seconds (`2026-08-22T10:43:39Z`).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    rfc3339(secs)
}

/// Seconds since the epoch as RFC 3339 UTC.
pub fn rfc3339(secs: u64) -> String {
    let rem = secs % 86_400;
    let (year, month, day) =
        kubosh_base::civil::civil_from_days(i64::try_from(secs / 86_400).unwrap_or(i64::MAX));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cids_that_could_escape_the_state_dir_are_invalid() {
        for bad in ["", ".", "..", "../x", "a/b", ".hidden", "a b", "x\0"] {
            assert!(!valid_cid(bad), "{bad:?}");
        }
        assert!(valid_cid("vm-3b241101-e2bb-4255-8caf-4136c566a962"));
    }

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_787_395_419), "2026-08-22T10:43:39Z");
    }

    #[test]
    fn records_round_trip_and_list_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for cid in ["vm-b", "vm-a"] {
            let (_, staged) = store.staging(Kind::Vm).unwrap();
            store.commit(Kind::Vm, cid, &staged).unwrap();
            store
                .write(Kind::Vm, cid, &serde_json::json!({"cid": cid}))
                .unwrap();
        }
        let listed: Vec<(String, serde_json::Value)> = store.list(Kind::Vm).unwrap();
        assert_eq!(listed[0].0, "vm-a");
        assert_eq!(listed.len(), 2);
        assert!(
            store
                .read::<serde_json::Value>(Kind::Vm, "../vms")
                .unwrap()
                .is_none()
        );
        store.remove(Kind::Vm, "vm-a").unwrap();
        assert!(
            store
                .read::<serde_json::Value>(Kind::Vm, "vm-a")
                .unwrap()
                .is_none()
        );
        assert!(store.leftovers().unwrap().is_empty());
    }
}
