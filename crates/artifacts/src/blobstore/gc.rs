//! Garbage collection: blobs nothing references any more.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use super::{Blobstore, BlobstoreError};

/// Deletes every blob of `store` that is not in `referenced` and was last written more than
/// `min_age` ago (so a blob uploaded by a deploy still in flight, not yet recorded anywhere,
/// survives), and uploads staged longer than `min_age` ago and never completed. Returns the
/// ids removed, sorted.
///
/// The caller computes `referenced` from everything that records blob ids (releases,
/// compiled packages, instances' rendered templates and DNS records).
pub async fn collect_garbage(
    store: &dyn Blobstore,
    referenced: &HashSet<String>,
    min_age: Duration,
) -> Result<Vec<String>, BlobstoreError> {
    let cutoff = SystemTime::now()
        .checked_sub(min_age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut removed = Vec::new();
    for blob in store.list().await? {
        if referenced.contains(&blob.id) || blob.last_modified > cutoff {
            continue;
        }
        store.delete(&blob.id).await?;
        tracing::info!(blob = %blob.id, size = blob.size, "blobstore: removed unreferenced blob");
        removed.push(blob.id);
    }
    let swept = store.sweep_staging(min_age).await?;
    if swept > 0 {
        tracing::info!(count = swept, "blobstore: removed stale staged uploads");
    }
    removed.sort();
    Ok(removed)
}
