//! Blob access for the agent (`bosh-protocols.md` §2.9), for the local cloud: the director
//! and the VMs share a directory (blobstore provider `local`, `<blobstore_path>/<blob_id>`).
//!
//! Lookups check the agent's own stores first, as the agent does: `data/sensitive_blobs`
//! (blobs delivered by `upload_blob`), then `data/blobs` (blobs PUT to the agent), then the
//! shared directory. New blobs (compiled packages) go to the shared directory, or to
//! `data/blobs` when there is none. Signed URLs and the `dav`/`s3`/`gcs` providers are not
//! handled here.

use std::path::{Path, PathBuf};

use super::layout::{InvalidName, Layout, check_name};
use kubosh_base::digest::{DigestError, MultiDigest};

/// Why a blob could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// A blob id that cannot be a file name.
    #[error(transparent)]
    InvalidId(#[from] InvalidName),
    /// No store has it.
    #[error("blob {0} not found")]
    NotFound(String),
    /// It does not match its digest.
    #[error("blob {id}: {source}")]
    Digest {
        /// The blob id.
        id: String,
        /// What is wrong.
        source: DigestError,
    },
    /// Reading or writing failed.
    #[error("blob {id}: {source}")]
    Io {
        /// The blob id.
        id: String,
        /// The error.
        source: std::io::Error,
    },
}

/// The blob stores of one VM.
#[derive(Debug, Clone)]
pub struct Blobstore {
    lookup: Vec<PathBuf>,
    store: PathBuf,
    sensitive: PathBuf,
}

impl Blobstore {
    /// The stores of `layout`, plus the shared `blobstore_path` of a `local` provider.
    pub fn new(layout: &Layout, blobstore_path: Option<PathBuf>) -> Self {
        let mut lookup = vec![layout.sensitive_blobs_dir(), layout.blobs_dir()];
        lookup.extend(blobstore_path.clone());
        Self {
            lookup,
            store: blobstore_path.unwrap_or_else(|| layout.blobs_dir()),
            sensitive: layout.sensitive_blobs_dir(),
        }
    }

    /// Where blob `id` is, if any store has it.
    pub fn find(&self, id: &str) -> Result<PathBuf, BlobError> {
        check_name("blob id", id)?;
        self.lookup
            .iter()
            .map(|dir| dir.join(id))
            .find(|p| p.is_file())
            .ok_or_else(|| BlobError::NotFound(id.to_string()))
    }

    /// The content of blob `id`.
    pub async fn get(&self, id: &str) -> Result<Vec<u8>, BlobError> {
        let path = self.find(id)?;
        tokio::fs::read(&path)
            .await
            .map_err(|source| BlobError::Io {
                id: id.to_string(),
                source,
            })
    }

    /// The content of blob `id`, checked against `digest` (sha1 hex or multi-digest).
    pub async fn get_verified(&self, id: &str, digest: &str) -> Result<Vec<u8>, BlobError> {
        let digest: MultiDigest = digest.parse().map_err(|source| BlobError::Digest {
            id: id.to_string(),
            source,
        })?;
        let bytes = self.get(id).await?;
        digest.verify(&bytes).map_err(|source| BlobError::Digest {
            id: id.to_string(),
            source,
        })?;
        Ok(bytes)
    }

    /// Stores `bytes` as a new blob; returns its id (a random UUID).
    pub async fn put(&self, bytes: &[u8]) -> Result<String, BlobError> {
        let id = kubosh_base::ids::uuid_v4();
        write_atomic(&self.store, &id, bytes).await?;
        Ok(id)
    }

    /// Stores `bytes` as blob `id` in `data/sensitive_blobs` (`upload_blob`), after checking
    /// `digest`.
    pub async fn put_sensitive(
        &self,
        id: &str,
        bytes: &[u8],
        digest: &str,
    ) -> Result<(), BlobError> {
        check_name("blob id", id)?;
        let parsed: MultiDigest = digest.parse().map_err(|source| BlobError::Digest {
            id: id.to_string(),
            source,
        })?;
        parsed.verify(bytes).map_err(|source| BlobError::Digest {
            id: id.to_string(),
            source,
        })?;
        write_atomic(&self.sensitive, id, bytes).await
    }

    /// Removes blob `id` from every store that has it.
    pub async fn delete(&self, id: &str) -> Result<(), BlobError> {
        check_name("blob id", id)?;
        for dir in &self.lookup {
            match tokio::fs::remove_file(dir.join(id)).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(BlobError::Io {
                        id: id.to_string(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }
}

async fn write_atomic(dir: &Path, id: &str, bytes: &[u8]) -> Result<(), BlobError> {
    let err = |source| BlobError::Io {
        id: id.to_string(),
        source,
    };
    tokio::fs::create_dir_all(dir).await.map_err(err)?;
    let tmp = dir.join(format!(".{id}.tmp"));
    tokio::fs::write(&tmp, bytes).await.map_err(err)?;
    tokio::fs::rename(&tmp, dir.join(id)).await.map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubosh_base::digest::sha1_hex;

    #[tokio::test]
    async fn stores_finds_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("vcap"));
        let shared = dir.path().join("shared");
        let bs = Blobstore::new(&layout, Some(shared.clone()));
        let id = bs.put(b"abc").await.unwrap();
        assert_eq!(id.len(), 36);
        assert!(shared.join(&id).is_file());
        assert_eq!(bs.get(&id).await.unwrap(), b"abc");
        bs.get_verified(&id, &sha1_hex(b"abc")).await.unwrap();
        assert!(matches!(
            bs.get_verified(&id, &sha1_hex(b"x")).await,
            Err(BlobError::Digest { .. })
        ));
        // upload_blob's store wins.
        bs.put_sensitive(&id, b"xyz", &sha1_hex(b"xyz"))
            .await
            .unwrap();
        assert_eq!(bs.get(&id).await.unwrap(), b"xyz");
        bs.delete(&id).await.unwrap();
        assert!(matches!(bs.get(&id).await, Err(BlobError::NotFound(_))));
        assert!(matches!(
            bs.get("../etc").await,
            Err(BlobError::InvalidId(_))
        ));
    }
}
