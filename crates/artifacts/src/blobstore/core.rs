//! What both stores share: content addressing, staged uploads and verified reads over any
//! `object_store::ObjectStore`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use futures::{Stream, StreamExt as _, TryStreamExt as _};
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use sha1::Digest as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{BlobInfo, BlobRef, BlobstoreError, check_id, is_content_id};
use kubosh_base::digest::{MultiDigest, to_hex};

/// The [`super::Blobstore`] methods every store implements by handing them to its `core`
/// field (a [`Core`]): storing, reading, listing and deleting are the same on every backend.
macro_rules! forward_to_core {
    () => {
        fn put_bytes(&self, bytes: bytes::Bytes) -> super::BlobFuture<'_, super::BlobRef> {
            Box::pin(self.core.put_bytes(bytes))
        }

        fn put_file<'a>(
            &'a self,
            path: &'a std::path::Path,
        ) -> super::BlobFuture<'a, super::BlobRef> {
            Box::pin(self.core.put_file(path))
        }

        fn get<'a>(
            &'a self,
            id: &'a str,
            digest: &'a kubosh_base::digest::MultiDigest,
            dest: &'a std::path::Path,
        ) -> super::BlobFuture<'a, u64> {
            Box::pin(self.core.get(id, digest, dest))
        }

        fn get_bytes<'a>(
            &'a self,
            id: &'a str,
            digest: &'a kubosh_base::digest::MultiDigest,
        ) -> super::BlobFuture<'a, bytes::Bytes> {
            Box::pin(self.core.get_bytes(id, digest))
        }

        fn exists<'a>(&'a self, id: &'a str) -> super::BlobFuture<'a, bool> {
            Box::pin(self.core.exists(id))
        }

        fn delete<'a>(&'a self, id: &'a str) -> super::BlobFuture<'a, ()> {
            Box::pin(self.core.delete(id))
        }

        fn list(&self) -> super::BlobFuture<'_, Vec<super::BlobInfo>> {
            Box::pin(self.core.list())
        }
    };
}
pub(super) use forward_to_core;

/// The prefix of staged uploads: starts with `.`, so it is never a blob id.
pub(super) const STAGING: &str = ".staging";

/// How much of a local file is read at a time when uploading it.
const READ_CHUNK: usize = 1024 * 1024;

/// Where a staged upload goes.
pub(super) enum Naming<'a> {
    /// Under the sha256 of its content.
    Content,
    /// Under this id; a content id must match the content.
    Id(&'a str),
}

/// An `ObjectStore` holding blobs at the top level.
#[derive(Debug, Clone)]
pub(super) struct Core {
    pub(super) store: Arc<dyn ObjectStore>,
}

/// The object path of blob `id` (checked).
pub(super) fn location(id: &str) -> Result<ObjectPath, BlobstoreError> {
    check_id(id)?;
    Ok(ObjectPath::from(id))
}

fn store_err(id: &str) -> impl FnOnce(object_store::Error) -> BlobstoreError + '_ {
    move |source| match source {
        object_store::Error::NotFound { .. } => BlobstoreError::NotFound(id.to_string()),
        source => BlobstoreError::Store {
            id: id.to_string(),
            source,
        },
    }
}

fn io_err(id: &str, path: &Path) -> impl FnOnce(std::io::Error) -> BlobstoreError {
    let (id, path) = (id.to_string(), path.to_path_buf());
    move |source| BlobstoreError::Io { id, path, source }
}

/// sha1 and sha256 of data fed in pieces.
#[derive(Default)]
struct Hashes {
    sha1: sha1::Sha1,
    sha256: sha2::Sha256,
    size: u64,
}

impl Hashes {
    fn update(&mut self, data: &[u8]) {
        self.sha1.update(data);
        self.sha256.update(data);
        self.size += data.len() as u64;
    }

    fn finish(self, id: Option<String>) -> BlobRef {
        let sha256 = to_hex(&self.sha256.finalize());
        BlobRef {
            id: id.unwrap_or_else(|| sha256.clone()),
            sha1: to_hex(&self.sha1.finalize()),
            sha256,
            size: self.size,
        }
    }
}

impl Core {
    pub(super) async fn exists(&self, id: &str) -> Result<bool, BlobstoreError> {
        match self.store.head(&location(id)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_err(id)(e)),
        }
    }

    /// Stores `bytes` under the sha256 of its content (the backend's put is atomic).
    pub(super) async fn put_bytes(&self, bytes: Bytes) -> Result<BlobRef, BlobstoreError> {
        let mut h = Hashes::default();
        h.update(&bytes);
        let blob = h.finish(None);
        if !self.exists(&blob.id).await? {
            self.store
                .put(&location(&blob.id)?, PutPayload::from_bytes(bytes))
                .await
                .map_err(store_err(&blob.id))?;
        }
        Ok(blob)
    }

    /// Stores the file at `path` under the sha256 of its content, streaming it.
    pub(super) async fn put_file(&self, path: &Path) -> Result<BlobRef, BlobstoreError> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(io_err("-", path))?;
        let chunks = futures::stream::try_unfold(file, |mut file| async move {
            let mut buf = vec![0u8; READ_CHUNK];
            let n = file.read(&mut buf).await?;
            if n == 0 {
                return Ok(None);
            }
            buf.truncate(n);
            Ok(Some((Bytes::from(buf), file)))
        });
        let path = path.to_path_buf();
        self.put_stream(
            chunks.map_err(move |e| io_err("-", &path)(e)),
            Naming::Content,
        )
        .await
    }

    /// Streams `chunks` into a staged object while hashing them, then moves it into place
    /// under its name (or drops it: content already stored, or content not matching its
    /// content id). The staged object is removed whatever fails.
    pub(super) async fn put_stream(
        &self,
        chunks: impl Stream<Item = Result<Bytes, BlobstoreError>> + Send,
        naming: Naming<'_>,
    ) -> Result<BlobRef, BlobstoreError> {
        if let Naming::Id(id) = naming {
            check_id(id)?;
        }
        let staged = ObjectPath::from(format!("{STAGING}/{}", kubosh_base::ids::uuid_v4()));
        let staged_id = staged.to_string();
        let mut writer = BufWriter::new(self.store.clone(), staged.clone());
        let mut hashes = Hashes::default();
        let written: Result<(), BlobstoreError> = async {
            futures::pin_mut!(chunks);
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk?;
                hashes.update(&chunk);
                writer.put(chunk).await.map_err(store_err(&staged_id))?;
            }
            writer
                .shutdown()
                .await
                .map_err(io_err(&staged_id, Path::new(&staged_id)))
        }
        .await;
        if let Err(e) = written {
            let _ = writer.abort().await;
            self.remove_staged(&staged).await;
            return Err(e);
        }
        let blob = match naming {
            Naming::Content => hashes.finish(None),
            Naming::Id(id) => hashes.finish(Some(id.to_string())),
        };
        let published = self.publish(&staged, &blob).await;
        if published.is_err() {
            self.remove_staged(&staged).await;
        }
        published.map(|()| blob)
    }

    async fn publish(&self, staged: &ObjectPath, blob: &BlobRef) -> Result<(), BlobstoreError> {
        let content_addressed = is_content_id(&blob.id);
        if content_addressed && blob.id != blob.sha256 {
            return Err(BlobstoreError::NotItsId {
                id: blob.id.clone(),
                actual: blob.sha256.clone(),
            });
        }
        if content_addressed && self.exists(&blob.id).await? {
            self.remove_staged(staged).await;
            return Ok(());
        }
        self.store
            .rename(staged, &location(&blob.id)?)
            .await
            .map_err(store_err(&blob.id))
    }

    async fn remove_staged(&self, staged: &ObjectPath) {
        if let Err(e) = self.store.delete(staged).await
            && !matches!(e, object_store::Error::NotFound { .. })
        {
            tracing::warn!(staged = %staged, error = %e, "blobstore: removing a staged upload");
        }
    }

    /// Streams blob `id` into a temporary file next to `dest`, verifying `digest`, then
    /// renames it to `dest`.
    pub(super) async fn get(
        &self,
        id: &str,
        digest: &MultiDigest,
        dest: &Path,
    ) -> Result<u64, BlobstoreError> {
        let mut verifier = digest.verifier().map_err(|source| BlobstoreError::Digest {
            id: id.to_string(),
            source,
        })?;
        let result = self
            .store
            .get(&location(id)?)
            .await
            .map_err(store_err(id))?;
        let dir = dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let tmp = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || {
                tempfile::Builder::new()
                    .prefix(".blob-")
                    .tempfile_in(dir)
                    .map(tempfile::NamedTempFile::into_parts)
            }
        })
        .await
        .map_err(|e| io_err(id, &dir)(std::io::Error::other(e)))?
        .map_err(io_err(id, &dir))?;
        let (file, tmp_path) = tmp;
        let mut file = tokio::fs::File::from_std(file);
        let mut size = 0u64;
        let mut stream = result.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(store_err(id))?;
            verifier.update(&chunk);
            size += chunk.len() as u64;
            file.write_all(&chunk).await.map_err(io_err(id, dest))?;
        }
        verifier.finish().map_err(|source| BlobstoreError::Digest {
            id: id.to_string(),
            source,
        })?;
        file.sync_all().await.map_err(io_err(id, dest))?;
        drop(file);
        let target: PathBuf = dest.to_path_buf();
        tokio::task::spawn_blocking(move || tmp_path.persist(target))
            .await
            .map_err(|e| io_err(id, dest)(std::io::Error::other(e)))?
            .map_err(|e| io_err(id, dest)(e.error))?;
        Ok(size)
    }

    pub(super) async fn get_bytes(
        &self,
        id: &str,
        digest: &MultiDigest,
    ) -> Result<Bytes, BlobstoreError> {
        let bytes = self
            .store
            .get(&location(id)?)
            .await
            .map_err(store_err(id))?
            .bytes()
            .await
            .map_err(store_err(id))?;
        digest
            .verify(&bytes)
            .map_err(|source| BlobstoreError::Digest {
                id: id.to_string(),
                source,
            })?;
        Ok(bytes)
    }

    pub(super) async fn delete(&self, id: &str) -> Result<(), BlobstoreError> {
        match self.store.delete(&location(id)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_err(id)(e)),
        }
    }

    pub(super) async fn list(&self) -> Result<Vec<BlobInfo>, BlobstoreError> {
        let listed = self
            .store
            .list_with_delimiter(None)
            .await
            .map_err(store_err("-"))?;
        Ok(listed
            .objects
            .into_iter()
            .filter_map(|meta| {
                let id = meta.location.to_string();
                check_id(&id).ok()?;
                Some(BlobInfo {
                    id,
                    size: meta.size,
                    last_modified: SystemTime::from(meta.last_modified),
                })
            })
            .collect())
    }

    /// Staged objects (as the store lists them) older than `cutoff`, removed.
    pub(super) async fn sweep_staging(&self, cutoff: SystemTime) -> Result<usize, BlobstoreError> {
        let prefix = ObjectPath::from(STAGING);
        let stale: Vec<ObjectPath> = self
            .store
            .list(Some(&prefix))
            .try_filter(|meta| std::future::ready(SystemTime::from(meta.last_modified) < cutoff))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(store_err(STAGING))?;
        for path in &stale {
            self.remove_staged(path).await;
        }
        Ok(stale.len())
    }
}
