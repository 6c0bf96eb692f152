//! The director's blobstore (`bosh-protocols.md` §2.9, §4.11–§4.12, §5.5): job and package
//! archives, compiled packages and rendered-templates archives, stored where agents can
//! fetch them. A protocol edge: no Kubernetes, no planner logic.
//!
//! [`Blobstore`] is the engine's view; two implementations, both on the `object_store`
//! crate:
//!
//! * [`LocalBlobstore`] (the default): a directory. Blob `<id>` is the plain file
//!   `<dir>/<id>`, because agents of the local cloud read `<blobstore_path>/<id>` directly
//!   (`provider: local`). For agents without that directory, a small HTTPS endpoint
//!   ([`endpoint`]) serves the directory through HMAC-signed, time-limited URLs
//!   ([`HmacSigner`]).
//! * [`S3Blobstore`]: an S3 bucket (AWS or any S3-compatible server); agents get presigned
//!   URLs, or the `s3` provider settings.
//!
//! Blobs the director stores are content-addressed: the id is the sha256 of the content
//! (lowercase hex), so storing the same bytes twice is one blob. Blobs agents upload under a
//! director-chosen id (a UUID, as BOSH picks them for compiled packages) are kept under that
//! id. Writes never leave a partial blob under its final id: content is staged under
//! `.staging/` (never a valid id) or written by the backend's atomic put, then moved into
//! place. Reads are verified against a BOSH multi-digest while they stream.
//! [`collect_garbage`] removes blobs nothing references any more.

mod core;
pub mod endpoint;
mod gc;
mod hmac;
mod local;
mod s3;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use url::Url;

use kubosh_base::digest::{DigestError, MultiDigest};

pub use gc::collect_garbage;
pub use hmac::{HmacSigner, SignatureError};
pub use local::LocalBlobstore;
pub use s3::{S3Blobstore, S3Config};

/// The future every [`Blobstore`] method returns (boxed, so `dyn Blobstore` works).
pub type BlobFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BlobstoreError>> + Send + 'a>>;

/// Why a blobstore operation failed. Never contains credentials or signing keys.
#[derive(Debug, thiserror::Error)]
pub enum BlobstoreError {
    /// Not a blob id (see [`check_id`]).
    #[error(
        "invalid blob id {0:?}: only letters, digits, '-', '_' and '.' (not first), at most 128"
    )]
    InvalidId(String),
    /// No such blob.
    #[error("blob {0} not found")]
    NotFound(String),
    /// The content does not match the expected digest (or the digest does not parse).
    #[error("blob {id}: {source}")]
    Digest {
        /// The blob id.
        id: String,
        /// What is wrong.
        source: DigestError,
    },
    /// The content of a content-addressed upload does not hash to its id.
    #[error("blob {id}: content has sha256 {actual}, not its id")]
    NotItsId {
        /// The id the upload was for.
        id: String,
        /// The sha256 of what was uploaded.
        actual: String,
    },
    /// A local file could not be read or written.
    #[error("blob {id}: {path}: {source}")]
    Io {
        /// The blob id (or `-` before it is known).
        id: String,
        /// The local file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The object store failed.
    #[error("blob {id}: {source}")]
    Store {
        /// The blob id (or `-` before it is known).
        id: String,
        /// The error.
        source: object_store::Error,
    },
    /// The store could not be configured.
    #[error("blobstore configuration: {0}")]
    Config(String),
}

/// A stored blob: its id and its digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// The blob id (for content-addressed blobs: the sha256, lowercase hex).
    pub id: String,
    /// sha1, lowercase hex (what BOSH's `sha1` fields carry).
    pub sha1: String,
    /// sha256, lowercase hex.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

impl BlobRef {
    /// The multi-digest `<sha1>;sha256:<sha256>`, as BOSH writes digests.
    pub fn digest(&self) -> MultiDigest {
        format!("{};sha256:{}", self.sha1, self.sha256)
            .parse()
            .expect("two hex digests always parse")
    }
}

/// One entry of [`Blobstore::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    /// The blob id.
    pub id: String,
    /// Size in bytes.
    pub size: u64,
    /// When it was last written.
    pub last_modified: SystemTime,
}

/// What a signed URL allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignedMethod {
    /// Download the blob.
    Get,
    /// Upload the blob.
    Put,
}

impl SignedMethod {
    /// `GET` or `PUT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Put => "PUT",
        }
    }
}

/// A blobstore, as the deploy engine uses it.
pub trait Blobstore: Send + Sync + std::fmt::Debug {
    /// Stores `bytes` content-addressed; storing the same bytes again is a no-op.
    fn put_bytes(&self, bytes: bytes::Bytes) -> BlobFuture<'_, BlobRef>;

    /// Stores the content of the file at `path` content-addressed, streaming it (never
    /// whole in memory).
    fn put_file<'a>(&'a self, path: &'a Path) -> BlobFuture<'a, BlobRef>;

    /// Streams blob `id` into the file `dest` (replaced only once the whole blob arrived and
    /// matches `digest`); returns its size. A mismatch is [`BlobstoreError::Digest`] naming
    /// the blob, and leaves `dest` untouched.
    fn get<'a>(
        &'a self,
        id: &'a str,
        digest: &'a MultiDigest,
        dest: &'a Path,
    ) -> BlobFuture<'a, u64>;

    /// Blob `id` in memory, checked against `digest`.
    fn get_bytes<'a>(
        &'a self,
        id: &'a str,
        digest: &'a MultiDigest,
    ) -> BlobFuture<'a, bytes::Bytes>;

    /// True if blob `id` exists.
    fn exists<'a>(&'a self, id: &'a str) -> BlobFuture<'a, bool>;

    /// Removes blob `id`; removing a missing blob is not an error.
    fn delete<'a>(&'a self, id: &'a str) -> BlobFuture<'a, ()>;

    /// Every blob, in no particular order (staged uploads are not blobs).
    fn list(&self) -> BlobFuture<'_, Vec<BlobInfo>>;

    /// Removes uploads staged longer than `older_than` ago and never moved into place (left
    /// by a crash); returns how many.
    fn sweep_staging(&self, older_than: Duration) -> BlobFuture<'_, usize>;

    /// A URL that allows `method` on blob `id` for `ttl`, without credentials; `None` if this
    /// store has no way to sign one.
    fn signed_url<'a>(
        &'a self,
        id: &'a str,
        method: SignedMethod,
        ttl: Duration,
    ) -> BlobFuture<'a, Option<Url>>;

    /// The agent settings' `blobstore` value for this store (`{"provider", "options"}`). May
    /// contain credentials (the `s3` provider's keys): it belongs in agent settings only.
    fn agent_settings(&self) -> Value;
}

/// Checks that `id` is a blob id: 1 to 128 ASCII letters, digits, `-`, `_` and `.`, not
/// starting with `.` (so a blob is a plain, visible file in a local store's directory and a
/// top-level key in a bucket; UUIDs and hex digests qualify).
pub fn check_id(id: &str) -> Result<(), BlobstoreError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(BlobstoreError::InvalidId(id.to_string()))
    }
}

/// True if `id` is content-addressed: 64 lowercase hex digits (a sha256).
pub fn is_content_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        for good in [
            "a",
            "2f1e0c9a-4a4c-4e55-9b7c-1d2b3c4d5e6f",
            "x.tgz",
            &"a".repeat(128),
        ] {
            check_id(good).unwrap();
        }
        for bad in ["", ".hidden", "a/b", "..", "a b", "é", &"a".repeat(129)] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
        assert!(is_content_id(&"ab".repeat(32)));
        assert!(!is_content_id(&"AB".repeat(32)));
        assert!(!is_content_id("2f1e0c9a-4a4c-4e55-9b7c-1d2b3c4d5e6f"));
    }

    #[test]
    fn blob_ref_digest() {
        let r = BlobRef {
            id: "x".into(),
            sha1: kubosh_base::digest::sha1_hex(b"abc"),
            sha256: kubosh_base::digest::sha256_hex(b"abc"),
            size: 3,
        };
        r.digest().verify(b"abc").unwrap();
        assert_eq!(
            r.digest().strongest().algorithm,
            kubosh_base::digest::Algorithm::Sha256
        );
    }
}
