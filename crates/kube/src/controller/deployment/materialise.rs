//! The engine's [`DeployRequest`] from a deployment's [`Inputs`]: each release by reference
//! (`release.MF` and the job archives read from the blobstore, the packages left there by
//! id), each stemcell's tarball fetched into the scratch space and extracted once.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use kube::ResourceExt;

use super::super::inputs::Inputs;
use super::DeploymentContext;
use crate::api::{Release as ReleaseResource, Stemcell as StemcellResource};
use kubosh_artifacts::blobstore::BlobstoreError;
use kubosh_artifacts::release::{Release, ReleaseError};
use kubosh_base::digest::{DigestError, MultiDigest};
use kubosh_engine::{DeployRequest, StemcellSource};

/// A release or stemcell could not be made ready for the engine. Each may pass (a resource
/// not stored yet, the blobstore, the scratch space), so a deploy that fails with one is
/// retried.
#[derive(Debug, thiserror::Error)]
pub enum MaterialiseError {
    /// The `Release` resource has no `release.MF` in the blobstore yet.
    #[error("release {release} is not in the blobstore yet")]
    ReleaseNotStored {
        /// The resource's name.
        release: String,
    },
    /// A part of the release is not in the blobstore yet.
    #[error("release {release}: {part} is not in the blobstore yet")]
    ReleasePartNotStored {
        /// The resource's name.
        release: String,
        /// Which part.
        part: ReleasePart,
    },
    /// Reading a part of the release from the blobstore failed.
    #[error("release {release}: {part}: {source}")]
    ReleaseBlob {
        /// The resource's name.
        release: String,
        /// Which part.
        part: ReleasePart,
        /// What the blobstore said (boxed: its errors are large, and rare).
        source: Box<BlobstoreError>,
    },
    /// The release's parts do not make a release.
    #[error("release {release}: {source}")]
    Release {
        /// The resource's name.
        release: String,
        /// What is wrong.
        source: ReleaseError,
    },
    /// The `Stemcell` resource has no tarball in the blobstore yet.
    #[error("stemcell {stemcell} has no tarball in the blobstore yet")]
    StemcellNotStored {
        /// The resource's name.
        stemcell: String,
    },
    /// The stemcell's tarball could not be read or extracted.
    #[error("stemcell {stemcell}: {message}")]
    Stemcell {
        /// The resource's name.
        stemcell: String,
        /// What `StemcellSource::prepare` said (the engine gives it as text).
        message: String,
    },
    /// The extraction's blocking task did not end (it panicked or was cancelled).
    #[error(transparent)]
    Extraction(#[from] tokio::task::JoinError),
    /// A blob id that is no sha256 (content-addressed blobs are named by theirs).
    #[error("blob {id}: {source}")]
    BlobId {
        /// The blob id.
        id: String,
        /// Why it is no digest.
        source: DigestError,
    },
    /// Fetching a blob into the scratch space failed.
    #[error("blob {id}: {source}")]
    Blob {
        /// The blob id.
        id: String,
        /// What the blobstore said (boxed: its errors are large, and rare).
        source: Box<BlobstoreError>,
    },
    /// The scratch space could not be made.
    #[error("{}: {source}", dir.display())]
    WorkDir {
        /// The directory.
        dir: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// A part of a release in the blobstore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleasePart {
    /// `release.MF`.
    Manifest,
    /// A job's archive, by job name.
    Job(String),
}

impl std::fmt::Display for ReleasePart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReleasePart::Manifest => f.write_str("release.MF"),
            ReleasePart::Job(name) => write!(f, "job {name}"),
        }
    }
}

/// How many releases by reference the controller keeps in memory, at most.
const RELEASE_CACHE_MAX: usize = 64;

/// Releases by reference, by the blob id of their `release.MF`: every deploy of a release
/// version reads it from the blobstore once.
#[derive(Default)]
pub(super) struct ReleaseCache(Mutex<HashMap<String, Arc<Release>>>);

impl ReleaseCache {
    fn get(&self, manifest_id: &str) -> Option<Arc<Release>> {
        let cache = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        cache.get(manifest_id).cloned()
    }

    fn insert(&self, manifest_id: String, release: Arc<Release>) {
        let mut cache = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Bounded: release versions come and go; the ones in use are read again once.
        if cache.len() >= RELEASE_CACHE_MAX {
            cache.clear();
        }
        cache.insert(manifest_id, release);
    }
}

/// The engine's request: each release by reference (its packages stay in the blobstore),
/// each stemcell's image extracted once.
pub(super) async fn request_of(
    ctx: &DeploymentContext,
    inputs: &Inputs,
) -> Result<DeployRequest, MaterialiseError> {
    let mut releases = Vec::new();
    for r in &inputs.releases {
        releases.push(release_of(ctx, r).await?);
    }
    let mut stemcells = Vec::new();
    for s in &inputs.stemcells {
        stemcells.push(stemcell_of(ctx, s).await?);
    }
    Ok(DeployRequest {
        releases,
        stemcells,
        ..DeployRequest::new(inputs.documents.clone())
    })
}

/// The digest of a content-addressed blob: its id is its sha256.
fn blob_digest(id: &str) -> Result<MultiDigest, MaterialiseError> {
    format!("sha256:{id}")
        .parse()
        .map_err(|source| MaterialiseError::BlobId {
            id: id.to_string(),
            source,
        })
}

/// Fetches blob `id` into `dir/<id>` unless it is there already.
async fn fetch_blob(
    ctx: &DeploymentContext,
    id: &str,
    dir: &str,
) -> Result<PathBuf, MaterialiseError> {
    let dir = ctx.work_dir.join(dir);
    if let Err(source) = std::fs::create_dir_all(&dir) {
        return Err(MaterialiseError::WorkDir { dir, source });
    }
    let path = dir.join(id);
    if !path.is_file() {
        let digest = blob_digest(id)?;
        ctx.engine
            .blobstore
            .get(id, &digest, &path)
            .await
            .map_err(|source| MaterialiseError::Blob {
                id: id.to_string(),
                source: Box::new(source),
            })?;
    }
    Ok(path)
}

/// The release of `resource` by reference: `release.MF` and the job archives fetched from
/// the blobstore (small), the packages only by id (cached by `release.MF` blob id).
async fn release_of(
    ctx: &DeploymentContext,
    resource: &ReleaseResource,
) -> Result<Arc<Release>, MaterialiseError> {
    let name = resource.name_any();
    let status = resource.status.clone().unwrap_or_default();
    let Some(manifest_id) = status.manifest_blob_id.clone() else {
        return Err(MaterialiseError::ReleaseNotStored { release: name });
    };
    if let Some(release) = ctx.releases.get(&manifest_id) {
        return Ok(release);
    }
    let name = name.as_str();
    let blob = |id: Option<String>, part: ReleasePart| async move {
        let Some(id) = id else {
            return Err(MaterialiseError::ReleasePartNotStored {
                release: name.to_string(),
                part,
            });
        };
        let digest = blob_digest(&id)?;
        (ctx.engine.blobstore.get_bytes(&id, &digest).await)
            .map(|b| b.to_vec())
            .map_err(|source| MaterialiseError::ReleaseBlob {
                release: name.to_string(),
                part,
                source: Box::new(source),
            })
    };
    let release_mf = blob(Some(manifest_id.clone()), ReleasePart::Manifest).await?;
    let mut jobs = BTreeMap::new();
    for job in &status.jobs {
        let archive = blob(job.blob_id.clone(), ReleasePart::Job(job.name.clone())).await?;
        jobs.insert(job.name.clone(), archive);
    }
    let packages: BTreeMap<String, String> = (status.packages.iter())
        .filter_map(|p| Some((p.name.clone(), p.blob_id.clone()?)))
        .collect();
    let release = Release::by_reference(&release_mf, jobs, &packages)
        .map(Arc::new)
        .map_err(|source| MaterialiseError::Release {
            release: name.to_string(),
            source,
        })?;
    ctx.releases.insert(manifest_id, release.clone());
    Ok(release)
}

/// The stemcell of `resource`: its tarball fetched from the blobstore (once) and its image
/// extracted (once, by `StemcellSource::prepare`).
async fn stemcell_of(
    ctx: &DeploymentContext,
    resource: &StemcellResource,
) -> Result<StemcellSource, MaterialiseError> {
    let id = resource
        .status
        .as_ref()
        .and_then(|s| s.blob_id.clone())
        .ok_or_else(|| MaterialiseError::StemcellNotStored {
            stemcell: resource.name_any(),
        })?;
    let tarball = fetch_blob(ctx, &id, "stemcell-tarballs").await?;
    let dir = ctx.work_dir.join("stemcells");
    tokio::task::spawn_blocking(move || StemcellSource::prepare(&dir, &tarball, true))
        .await?
        .map_err(|message| MaterialiseError::Stemcell {
            stemcell: resource.name_any(),
            message,
        })
}
