//! A state store in a directory: one JSON file per record, each replaced atomically
//! (write a temporary file, fsync, rename, fsync the directory), so a crash leaves either
//! the old or the new record, never a torn one.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{DeploymentState, StateStore, StoreError, StoreFuture, Write};

const INSTANCES: &str = "instances";
const INTENTS: &str = "intents";
const ORPHANED_DISKS: &str = "orphaned-disks";
const COMPILED_PACKAGES: &str = "compiled-packages";
const STEMCELLS: &str = "stemcells";
const META: &str = "meta.json";

/// State in a directory (created on first write).
#[derive(Debug, Clone)]
pub struct DirStore {
    dir: PathBuf,
    /// Where the stemcell records are kept, when the director's deployments share them.
    stemcells: Option<PathBuf>,
}

impl DirStore {
    /// A store in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> DirStore {
        DirStore {
            dir: dir.into(),
            stemcells: None,
        }
    }

    /// The same store, its stemcell records in `dir`, which the director's deployments
    /// share (each stemcell is uploaded once per CPI for all of them). Records a deployment
    /// kept in its own directory before are still read.
    pub fn with_shared_stemcells(mut self, dir: impl Into<PathBuf>) -> DirStore {
        self.stemcells = Some(dir.into());
        self
    }

    /// The stemcell records: the deployment's own (older ones), then the shared ones.
    fn stemcells_sync(&self) -> Result<super::StemcellMap, StoreError> {
        let mut stemcells = read_kind(&self.dir.join(STEMCELLS))?;
        if let Some(shared) = &self.stemcells {
            stemcells.extend(read_kind(shared)?);
        }
        Ok(rekey(stemcells, |r| r.key()))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn load_sync(&self) -> Result<DeploymentState, StoreError> {
        let mut state = DeploymentState {
            instances: read_kind(&self.dir.join(INSTANCES))?,
            intents: read_kind(&self.dir.join(INTENTS))?,
            orphaned_disks: read_kind(&self.dir.join(ORPHANED_DISKS))?,
            compiled_packages: read_kind(&self.dir.join(COMPILED_PACKAGES))?,
            stemcells: self.stemcells_sync()?,
            ..DeploymentState::default()
        };
        // Keys are the records' own, not the (encoded) file names.
        state.instances = rekey(state.instances, |r| r.uuid.clone());
        state.intents = rekey(state.intents, |r| r.id.clone());
        state.orphaned_disks = rekey(state.orphaned_disks, |r| r.disk.cid.clone());
        state.compiled_packages = rekey(state.compiled_packages, super::compiled_package_key);
        if let Some(meta) = read_record(&self.dir.join(META))? {
            state.meta = meta;
        }
        Ok(state)
    }

    fn write_sync(&self, write: &Write) -> Result<(), StoreError> {
        match write {
            Write::Instance(r) => self.put(INSTANCES, &r.uuid, r),
            Write::DeleteInstance(uuid) => self.remove(INSTANCES, uuid),
            Write::Intent(r) => self.put(INTENTS, &r.id, r),
            Write::DeleteIntent(id) => self.remove(INTENTS, id),
            Write::OrphanedDisk(r) => self.put(ORPHANED_DISKS, &r.disk.cid, r),
            Write::DeleteOrphanedDisk(cid) => self.remove(ORPHANED_DISKS, cid),
            Write::CompiledPackage(r) => {
                self.put(COMPILED_PACKAGES, &super::compiled_package_key(r), r)
            }
            Write::Stemcell(r) => match &self.stemcells {
                Some(shared) => put_in(shared, &r.key(), r),
                None => self.put(STEMCELLS, &r.key(), r),
            },
            Write::DeleteStemcell(key) => {
                if let Some(shared) = &self.stemcells {
                    remove_from(shared, key)?;
                }
                self.remove(STEMCELLS, key)
            }
            Write::Meta(m) => {
                fs::create_dir_all(&self.dir).map_err(io_error)?;
                replace_file(&self.dir, META, m)
            }
        }
    }

    fn put(&self, kind: &str, key: &str, record: &impl Serialize) -> Result<(), StoreError> {
        put_in(&self.dir.join(kind), key, record)
    }

    fn remove(&self, kind: &str, key: &str) -> Result<(), StoreError> {
        remove_from(&self.dir.join(kind), key)
    }
}

/// Writes `record` as `key`'s file in `dir`.
fn put_in(dir: &Path, key: &str, record: &impl Serialize) -> Result<(), StoreError> {
    fs::create_dir_all(dir).map_err(io_error)?;
    replace_file(dir, &file_name(key), record)
}

/// Removes `key`'s file from `dir` (already gone is removed).
fn remove_from(dir: &Path, key: &str) -> Result<(), StoreError> {
    match fs::remove_file(dir.join(file_name(key))) {
        Ok(()) => sync_dir(dir).map_err(io_error),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(e)),
    }
}

impl StateStore for DirStore {
    fn load_records(&self) -> StoreFuture<'_, DeploymentState> {
        let store = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.load_sync())
                .await
                .map_err(|e| StoreError::Io(e.to_string()))?
        })
    }

    /// Only the orphaned disks' directory: every disk an update creates asks (a whole load
    /// per disk made a deploy quadratic in its instances).
    fn orphaned_disks(
        &self,
    ) -> StoreFuture<'_, std::collections::BTreeMap<String, super::OrphanedDisk>> {
        let dir = self.dir.join(ORPHANED_DISKS);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                read_kind(&dir).map(|m| rekey(m, |r: &super::OrphanedDisk| r.disk.cid.clone()))
            })
            .await
            .map_err(|e| StoreError::Io(e.to_string()))?
        })
    }

    /// Only the stemcells' directories.
    fn stemcells(&self) -> StoreFuture<'_, super::StemcellMap> {
        let store = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.stemcells_sync())
                .await
                .map_err(|e| StoreError::Io(e.to_string()))?
        })
    }

    fn write<'a>(&'a self, write: &'a Write) -> StoreFuture<'a, ()> {
        let store = self.clone();
        let write = write.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.write_sync(&write))
                .await
                .map_err(|e| StoreError::Io(e.to_string()))?
        })
    }
}

/// A key as a file name: `[A-Za-z0-9._-]` kept, every other byte `%XX` (CIDs and keys may
/// hold `/` or anything else).
fn file_name(key: &str) -> String {
    let mut name = String::with_capacity(key.len() + 5);
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') && !name.is_empty() {
            name.push(b as char);
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    if name.is_empty() {
        name.push('%');
    }
    // File names are limited (255 bytes on most file systems); long keys (compiled
    // packages carry their dependency key) are named by their digest.
    if name.len() > 200 {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(key.as_bytes());
        name = format!(
            "%{}",
            digest
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
    }
    name.push_str(".json");
    name
}

pub(super) fn replace_file(
    dir: &Path,
    name: &str,
    record: &impl Serialize,
) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(record).map_err(|e| StoreError::Io(e.to_string()))?;
    replace_bytes(dir, name, &bytes).map_err(io_error)
}

/// Replaces `dir/name` with `bytes` durably: a temporary file (`.name.tmp`) written and
/// synced, renamed into place, the directory synced. A crash leaves the old file or the new.
pub fn replace_bytes(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    replace_with_mode(dir, name, bytes, 0o644)
}

/// [`replace_bytes`] for a file only its owner may read (it holds credentials).
pub fn replace_private_bytes(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    replace_with_mode(dir, name, bytes, 0o600)
}

fn replace_with_mode(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

fn read_kind<T: DeserializeOwned>(
    dir: &Path,
) -> Result<std::collections::BTreeMap<String, T>, StoreError> {
    let mut out = std::collections::BTreeMap::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_error(e)),
    };
    for entry in entries {
        let path = entry.map_err(io_error)?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Leftover temporaries of an interrupted write are not records.
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        if let Some(record) = read_record(&path)? {
            out.insert(name, record);
        }
    }
    Ok(out)
}

pub(super) fn read_record<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| StoreError::Corrupt {
            record: path.display().to_string(),
            reason: e.to_string(),
        })
}

fn rekey<T>(
    map: std::collections::BTreeMap<String, T>,
    key: impl Fn(&T) -> String,
) -> std::collections::BTreeMap<String, T> {
    map.into_values().map(|r| (key(&r), r)).collect()
}

fn io_error(e: io::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::*;

    fn instance(uuid: &str) -> InstanceRecord {
        InstanceRecord {
            group: "web".into(),
            index: 0,
            uuid: uuid.into(),
            az: Some("z1".into()),
            bootstrap: true,
            state: InstanceState::Started,
            update_completed: true,
            vm: None,
            disks: vec![],
            ips: Default::default(),
            applied: None,
            inactive_vm: None,
        }
    }

    #[tokio::test]
    async fn writes_read_back_as_the_memory_store_applies_them() {
        let tmp = tempfile::tempdir().unwrap();
        let store = DirStore::new(tmp.path().join("state"));
        let memory = MemoryStore::new();
        let writes = vec![
            Write::Instance(Box::new(instance("a"))),
            Write::Instance(Box::new(instance("b"))),
            Write::Intent(Intent {
                id: "i-1".into(),
                kind: IntentKind::CreateDisk {
                    instance: "a".into(),
                    name: String::new(),
                },
                cid: None,
                cpi: None,
            }),
            Write::OrphanedDisk(OrphanedDisk {
                disk: DiskRecord {
                    cid: "disk/with:odd chars".into(),
                    name: String::new(),
                    size_mib: 1024,
                    cloud_properties: serde_json::json!({}),
                    snapshots: vec!["snap/1".into()],
                    cpi: None,
                },
                instance: "web/a".into(),
                index: Some(0),
                az: Some("z1".into()),
                orphaned_at: "2026-11-22T00:00:00Z".into(),
            }),
            Write::DeleteInstance("b".into()),
            Write::Meta(DeploymentMeta {
                dns_version: 3,
                ..DeploymentMeta::default()
            }),
        ];
        for w in &writes {
            store.write(w).await.unwrap();
            memory.write(w).await.unwrap();
        }
        assert_eq!(store.load().await.unwrap(), memory.snapshot());
        assert_eq!(memory.writes(), writes.len() as u64);
        let loaded = store.load().await.unwrap();
        assert_eq!(loaded.instances.keys().collect::<Vec<_>>(), ["a"]);
        assert!(loaded.orphaned_disks.contains_key("disk/with:odd chars"));
        assert_eq!(loaded.meta.dns_version, 3);
    }

    #[tokio::test]
    async fn a_torn_temporary_file_is_not_a_record_and_a_corrupt_record_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let store = DirStore::new(tmp.path());
        store
            .write(&Write::Instance(Box::new(instance("a"))))
            .await
            .unwrap();
        fs::write(tmp.path().join(INSTANCES).join(".b.json.tmp"), "{").unwrap();
        assert_eq!(store.load().await.unwrap().instances.len(), 1);
        fs::write(tmp.path().join(INSTANCES).join("c.json"), "{").unwrap();
        let err = store.load().await.unwrap_err().to_string();
        assert!(err.contains("c.json"), "{err}");
    }

    #[test]
    fn file_names_are_safe() {
        assert_eq!(file_name("abc-1.2_x"), "abc-1.2_x.json");
        assert_eq!(file_name("a/b"), "a%2Fb.json");
        assert_eq!(file_name(".."), "%2E..json");
        assert_eq!(file_name(""), "%.json");
        let long = file_name(&"x".repeat(300));
        assert!(long.starts_with('%') && long.len() == 1 + 64 + 5, "{long}");
    }
}
