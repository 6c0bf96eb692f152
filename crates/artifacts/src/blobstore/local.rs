//! The local store: a directory, blob `<id>` at `<dir>/<id>` (the contract of the agent's
//! `local` provider, `agentd::blobs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use object_store::local::LocalFileSystem;
use serde_json::{Value, json};
use url::Url;

use super::core::{Core, STAGING};
use super::{BlobFuture, Blobstore, BlobstoreError, HmacSigner, SignedMethod};

/// A blobstore in a local directory, shared with the agents of the local cloud (`provider:
/// local`). With an [`HmacSigner`] it also hands out signed URLs for the HTTPS endpoint
/// ([`super::endpoint`]) serving the same directory, for agents that cannot see it.
#[derive(Debug, Clone)]
pub struct LocalBlobstore {
    core: Core,
    dir: PathBuf,
    agent_path: PathBuf,
    signer: Option<HmacSigner>,
}

impl LocalBlobstore {
    /// The store in `dir` (created if missing).
    pub fn new(dir: impl Into<PathBuf>) -> Result<LocalBlobstore, BlobstoreError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| BlobstoreError::Io {
            id: "-".into(),
            path: dir.clone(),
            source,
        })?;
        let dir = dir.canonicalize().map_err(|source| BlobstoreError::Io {
            id: "-".into(),
            path: dir.clone(),
            source,
        })?;
        let fs = LocalFileSystem::new_with_prefix(&dir)
            .map_err(|e| BlobstoreError::Config(e.to_string()))?;
        Ok(LocalBlobstore {
            core: Core {
                store: Arc::new(fs),
            },
            agent_path: dir.clone(),
            dir,
            signer: None,
        })
    }

    /// Tells agents the directory is at `path` (where their machines mount it), instead of
    /// the path the director uses.
    pub fn with_agent_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.agent_path = path.into();
        self
    }

    /// Signs URLs for the HTTPS endpoint with `signer`, so [`Blobstore::signed_url`]
    /// answers.
    pub fn with_signer(mut self, signer: HmacSigner) -> Self {
        self.signer = Some(signer);
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of blob `id` (which may not exist).
    pub fn path_of(&self, id: &str) -> Result<PathBuf, BlobstoreError> {
        super::check_id(id)?;
        Ok(self.dir.join(id))
    }

    pub(super) fn core(&self) -> &Core {
        &self.core
    }
}

impl Blobstore for LocalBlobstore {
    super::core::forward_to_core!();

    /// Removes old files under `<dir>/.staging/`, including the backend's own `#<n>`
    /// staging files there (which the object listing hides).
    fn sweep_staging(&self, older_than: Duration) -> BlobFuture<'_, usize> {
        let staging = self.dir.join(STAGING);
        Box::pin(async move {
            let cutoff = SystemTime::now() - older_than;
            tokio::task::spawn_blocking(move || sweep_dir(&staging, cutoff))
                .await
                .map_err(|e| BlobstoreError::Config(format!("sweeping: {e}")))?
        })
    }

    fn signed_url<'a>(
        &'a self,
        id: &'a str,
        method: SignedMethod,
        ttl: Duration,
    ) -> BlobFuture<'a, Option<Url>> {
        Box::pin(async move {
            super::check_id(id)?;
            Ok(self.signer.as_ref().map(|s| s.sign(method, id, ttl)))
        })
    }

    fn agent_settings(&self) -> Value {
        json!({
            "provider": "local",
            "options": {"blobstore_path": self.agent_path.display().to_string()},
        })
    }
}

fn sweep_dir(dir: &Path, cutoff: SystemTime) -> Result<usize, BlobstoreError> {
    let io = |source| BlobstoreError::Io {
        id: "-".into(),
        path: dir.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(e)),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(io)?;
        let meta = entry.metadata().map_err(io)?;
        let old = meta.modified().map_err(io)? < cutoff;
        if old && meta.is_file() {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(e)),
            }
        }
    }
    Ok(removed)
}
