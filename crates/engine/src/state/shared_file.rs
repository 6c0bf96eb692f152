//! One JSON document that several processes (deploys of different deployments) update in
//! turn: each update holds a named lock while it reads and atomically rewrites the file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::StoreError;
use crate::lock::{Holder, Lock};

/// A JSON file shared by processes, serialized by a [`Lock`].
#[derive(Clone)]
pub struct SharedFile {
    file: PathBuf,
    locks: Arc<dyn Lock>,
    lock_name: &'static str,
    wait: Duration,
}

impl SharedFile {
    /// The document in `file`; updates hold `lock_name` of `locks`, waiting at most `wait`.
    pub fn new(
        file: PathBuf,
        locks: Arc<dyn Lock>,
        lock_name: &'static str,
        wait: Duration,
    ) -> SharedFile {
        SharedFile {
            file,
            locks,
            lock_name,
            wait,
        }
    }

    /// The document as last written (the default when there is none yet). Needs no lock:
    /// every write replaces the file whole.
    pub async fn read<T>(&self) -> Result<T, StoreError>
    where
        T: DeserializeOwned + Default + Send + 'static,
    {
        let file = self.file.clone();
        tokio::task::spawn_blocking(move || Ok(super::dir::read_record(&file)?.unwrap_or_default()))
            .await
            .map_err(|e| StoreError::Io(e.to_string()))?
    }

    /// Applies `change` to the document under the lock and writes it back if it changed,
    /// returning what `change` returned. `what` names the update for whoever waits for the lock.
    pub async fn update<T, R>(
        &self,
        what: String,
        change: impl FnOnce(&mut T) -> R + Send + 'static,
    ) -> Result<R, StoreError>
    where
        T: Serialize + DeserializeOwned + Default + Send + 'static,
        R: Send + 'static,
    {
        let holder = Holder::new(self.lock_name, what);
        let _guard = self
            .locks
            .acquire(self.lock_name, &holder, self.wait)
            .await
            .map_err(|e| StoreError::Io(e.to_string()))?;
        let file = self.file.clone();
        tokio::task::spawn_blocking(move || {
            let dir = file
                .parent()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."));
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            std::fs::create_dir_all(&dir).map_err(|e| StoreError::Io(e.to_string()))?;
            let mut document: T = super::dir::read_record(&file)?.unwrap_or_default();
            let before = serde_json::to_vec(&document).ok();
            let out = change(&mut document);
            // An update that changed nothing writes nothing.
            if serde_json::to_vec(&document).ok() != before {
                super::dir::replace_file(&dir, &name, &document)?;
            }
            Ok(out)
        })
        .await
        .map_err(|e| StoreError::Io(e.to_string()))?
    }
}
