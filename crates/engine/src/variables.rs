//! Variables as `kubosh deploy` and create-env keep them: everything of
//! `kubosh_core::variables` (re-exported) and [`FileStore`], the vars-store file of
//! `bosh int --vars-store`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

pub use kubosh_core::variables::*;

/// A vars-store file, as `bosh interpolate --vars-store` / `bosh create-env --vars-store`
/// keep it: one YAML map of variable name to value, names sorted. Written atomically (a
/// temporary file in the same directory, renamed over), mode 0600. It has no room for
/// generation parameters, so `update_mode: converge` cannot notice changed options here (as
/// with bosh-cli, which ignores `update_mode`).
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
    lock: std::sync::Arc<Mutex<()>>,
}

impl FileStore {
    /// The store at `path`; the file need not exist yet.
    pub fn new(path: impl Into<PathBuf>) -> FileStore {
        FileStore {
            path: path.into(),
            lock: std::sync::Arc::new(Mutex::new(())),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every stored variable (empty when the file does not exist or is empty). bosh-cli uses
    /// all of them as variables, not only the ones a document defines.
    pub fn load(&self) -> Result<Map<String, Value>, StoreError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
            Err(e) => return Err(self.read_error(e.to_string())),
        };
        let origin = self.path.display().to_string();
        // The parser's message may quote the text; report only where it failed.
        match kubosh_base::yaml::parse_value(&text, &origin) {
            Ok(Value::Null) => Ok(Map::new()),
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(self.read_error("expected a map of variables".into())),
            Err(_) => Err(self.read_error("not valid YAML".into())),
        }
    }

    /// Holds `flock(2)` on the file's directory until the returned handle is dropped.
    fn lock_file(&self) -> Result<std::fs::File, StoreError> {
        use std::os::fd::AsRawFd as _;
        let failed = |message: String| StoreError::WriteFile {
            path: self.path.clone(),
            message,
        };
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::create_dir_all(dir).map_err(|e| failed(e.to_string()))?;
        let file = std::fs::File::open(dir)
            .map_err(|e| failed(format!("cannot open its directory to lock it: {e}")))?;
        // SAFETY: flock(2) on a descriptor this function owns; no memory involved.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(failed(format!("cannot lock it: {e}")));
        }
        Ok(file)
    }

    fn read_error(&self, message: String) -> StoreError {
        StoreError::ReadFile {
            path: self.path.clone(),
            message,
        }
    }

    fn save(&self, vars: &Map<String, Value>) -> Result<(), StoreError> {
        let write_error = |message: String| StoreError::WriteFile {
            path: self.path.clone(),
            message,
        };
        let mut sorted: Vec<(&String, &Value)> = vars.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let sorted: Map<String, Value> = sorted
            .into_iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let text = kubosh_base::yaml::to_string(&Value::Object(sorted))
            .map_err(|_| write_error("cannot serialize the variables".into()))?;
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // NamedTempFile is created 0600 and lives in the same directory, so the rename is
        // atomic and the file is never readable by others.
        let mut tmp = tempfile::Builder::new()
            .prefix(".vars-store-")
            .tempfile_in(dir)
            .map_err(|e| write_error(e.to_string()))?;
        tmp.write_all(text.as_bytes())
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| write_error(e.to_string()))?;
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o600))
                .map_err(|e| write_error(e.to_string()))?;
        }
        tmp.persist(&self.path)
            .map_err(|e| write_error(e.error.to_string()))?;
        Ok(())
    }

    /// Sets `name` (unless `only_if_absent` and it is there) under both this process's lock
    /// and an advisory lock on the file's directory: several processes sharing the file
    /// (deploys of one director sharing its director-wide variables) generate a value once.
    /// The directory, not the file: the file is replaced by a rename, and a lock file beside
    /// a user's vars store would be litter.
    fn update(&self, name: &str, value: &Value, only_if_absent: bool) -> Result<Value, StoreError> {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let _file_lock = self.lock_file()?;
        let mut vars = self.load()?;
        if only_if_absent && let Some(existing) = vars.get(name) {
            return Ok(existing.clone());
        }
        vars.insert(name.to_string(), value.clone());
        self.save(&vars)?;
        Ok(value.clone())
    }
}

impl VariableStore for FileStore {
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredVariable>, StoreError>> {
        Box::pin(async move {
            Ok(self.load()?.remove(name).map(|value| StoredVariable {
                value: SecretValue::new(value),
                options_digest: None,
            }))
        })
    }

    fn create<'a>(
        &'a self,
        name: &'a str,
        variable: &'a StoredVariable,
    ) -> BoxFuture<'a, Result<StoredVariable, StoreError>> {
        Box::pin(async move {
            let value = self.update(name, variable.value.expose(), true)?;
            Ok(StoredVariable {
                value: SecretValue::new(value),
                options_digest: None,
            })
        })
    }

    fn replace<'a>(
        &'a self,
        name: &'a str,
        variable: &'a StoredVariable,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.update(name, variable.value.expose(), false)?;
            Ok(())
        })
    }
}
