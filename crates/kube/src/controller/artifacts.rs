//! `Release` and `Stemcell` resources: fetch the tarball the spec names, check its digest,
//! read it, store what deploys need in the blobstore, and report `Ready` with what was found
//! or `Stalled` with the reason (`bosh upload-release` / `bosh upload-stemcell`).
//!
//! A reconcile of a resource already Ready for its generation makes no download. A download
//! that fails (network, server error) leaves the resource not Ready and is an error, so the
//! caller retries with backoff; anything the tarball itself gets wrong (digest, name,
//! version, format) is Stalled until the spec changes.

use kubosh_artifacts::release::ReleaseFile as _;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;

use super::fetch::{self, Credentials, DigestCheck, FetchError, Fetched};
use super::status;
use crate::api::{
    Release as ReleaseResource, ReleaseItem, ReleaseStatus, Stemcell as StemcellResource,
    StemcellStatus, StemcellVersion,
};
use kubosh_artifacts::blobstore::{Blobstore, BlobstoreError};
use kubosh_artifacts::release::{PackageArchive, ReleaseError};
use kubosh_artifacts::stemcell::StemcellError;
use kubosh_cloud::{Cloud, CpiError, StemcellCid};

/// The field manager of kubosh's status writes.
pub const FIELD_MANAGER: &str = "kubosh";

/// The finalizer of `Stemcell` resources: the cloud's copy goes with the resource.
pub const STEMCELL_FINALIZER: &str = "kubosh.io/stemcell";

/// What the artifact reconcilers need.
#[derive(Clone)]
pub struct ArtifactContext {
    /// The Kubernetes client.
    pub client: kube::Client,
    /// Where jobs, packages and stemcells go.
    pub blobstore: Arc<dyn Blobstore>,
    /// The cloud stemcells are uploaded to: with one, a deleted `Stemcell` is deleted there
    /// too (its finalizer); without, stemcells in the cloud are not this process's to
    /// delete.
    pub cloud: Option<Arc<dyn Cloud>>,
    /// Makes the clouds of the namespace's `CpiConfig`s, whose copies of a deleted
    /// `Stemcell` go too.
    pub cloud_maker: Arc<dyn kubosh_engine::clouds::CloudMaker>,
    /// Scratch space for downloads (removed after each reconcile).
    pub work_dir: PathBuf,
}

/// Why a reconcile must be retried.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The download failed; the status says so and the reconcile is retried.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The Kubernetes API failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The credentials Secret does not exist.
    #[error("credentials secret {name}: not found")]
    CredentialsNotFound {
        /// The Secret.
        name: String,
    },
    /// The blobstore failed (boxed: its errors are large, and rare).
    #[error("blobstore: {0}")]
    Blobstore(#[source] Box<BlobstoreError>),
    /// Local scratch space failed.
    #[error("scratch space in {}: {source}", dir.display())]
    Scratch {
        /// Where the scratch space goes.
        dir: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A deleted stemcell is still in use: deleted once nothing uses it.
    #[error("Stemcell '{stemcell}' is still in use by: {}", users.join(", "))]
    InUse {
        /// `name/version`.
        stemcell: String,
        /// What uses it (`instance x`, `deployment y (deploying)`).
        users: Vec<String>,
    },
    /// A copy of a stemcell is in a named CPI's cloud that cannot be had.
    #[error("deleting stemcell {stemcell}: {reason}")]
    NoCloud {
        /// `name/version`.
        stemcell: String,
        /// Why its cloud cannot be reached.
        reason: String,
    },
    /// The cloud refused or failed to delete a stemcell.
    #[error("deleting stemcell {stemcell} from the cloud: {source}")]
    Cloud {
        /// `name/version`.
        stemcell: String,
        /// The CPI's error.
        source: Box<CpiError>,
    },
}

impl From<BlobstoreError> for ReconcileError {
    fn from(e: BlobstoreError) -> ReconcileError {
        ReconcileError::Blobstore(Box::new(e))
    }
}

/// A problem with the tarball itself: the resource is Stalled (its condition's reason is
/// [`TarballError::reason`]) until its spec changes.
#[derive(Debug, thiserror::Error)]
enum TarballError {
    /// `spec.sha1` is no digest.
    #[error("spec.sha1 {0}")]
    InvalidDigest(String),
    /// The download could not be read back to check its digest.
    #[error("{0}")]
    Unreadable(String),
    /// The download has another digest than `spec.sha1`.
    #[error("{0}")]
    DigestMismatch(String),
    /// Not a release tarball.
    #[error("{0}")]
    Release(#[from] ReleaseError),
    /// Not a stemcell tarball.
    #[error("{0}")]
    Stemcell(#[from] StemcellError),
    /// The tarball holds another release or stemcell than the spec names.
    #[error("the tarball is {kind} {found}, not {expected}")]
    NameMismatch {
        /// `release` or `stemcell`.
        kind: &'static str,
        /// `name/version` in the tarball.
        found: String,
        /// `name/version` in the spec.
        expected: String,
    },
}

impl TarballError {
    /// The Stalled condition's reason.
    fn reason(&self) -> &'static str {
        match self {
            TarballError::InvalidDigest(_) => "InvalidDigest",
            TarballError::Unreadable(_) => "DownloadFailed",
            TarballError::DigestMismatch(_) => "DigestMismatch",
            TarballError::Release(_) | TarballError::Stemcell(_) => "InvalidTarball",
            TarballError::NameMismatch { .. } => "NameMismatch",
        }
    }
}

impl From<DigestCheck> for TarballError {
    fn from(check: DigestCheck) -> TarballError {
        match check {
            DigestCheck::Invalid(what) => TarballError::InvalidDigest(what),
            DigestCheck::Unreadable(what) => TarballError::Unreadable(what),
            DigestCheck::Mismatch(what) => TarballError::DigestMismatch(what),
        }
    }
}

/// Says in `conditions` that the tarball is wrong: Stalled, with the problem's reason.
fn stalled(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    problem: &TarballError,
    generation: Option<i64>,
) {
    let message = problem.to_string();
    status::outcome(conditions, Err((problem.reason(), &message)), generation);
}

async fn credentials(
    client: &kube::Client,
    namespace: &str,
    secret: Option<&str>,
) -> Result<Credentials, ReconcileError> {
    let Some(name) = secret else {
        return Ok(Credentials::default());
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = api
        .get_opt(name)
        .await?
        .ok_or_else(|| ReconcileError::CredentialsNotFound {
            name: name.to_string(),
        })?;
    let text = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    Ok(Credentials {
        username: text("username"),
        password: text("password"),
        token: text("token"),
        ca_pem: text("ca.crt"),
    })
}

/// Checks a downloaded file against the spec's digest (any BOSH multi-digest).
fn check_digest(fetched: &Fetched, expected: Option<&str>) -> Result<(), TarballError> {
    let Some(expected) = expected.filter(|e| !e.is_empty()) else {
        return Ok(());
    };
    Ok(fetched.check(expected)?)
}

fn scratch(ctx: &ArtifactContext) -> Result<tempfile::TempDir, ReconcileError> {
    std::fs::create_dir_all(&ctx.work_dir)
        .and_then(|()| tempfile::tempdir_in(&ctx.work_dir))
        .map_err(|source| ReconcileError::Scratch {
            dir: ctx.work_dir.clone(),
            source,
        })
}

/// Stores the fetched tarball in the blobstore; its blob id.
async fn store_tarball(ctx: &ArtifactContext, fetched: &Fetched) -> Result<String, ReconcileError> {
    let blob = ctx.blobstore.put_file(&fetched.path).await?;
    Ok(blob.id)
}

/// Downloads `url` (with the resource's credentials Secret) into fresh scratch space, which
/// lives as long as the returned directory. The inner error is a failed download.
async fn download<K: ResourceExt>(
    ctx: &ArtifactContext,
    resource: &K,
    url: &str,
    secret: Option<&str>,
) -> Result<Result<(tempfile::TempDir, Fetched), FetchError>, ReconcileError> {
    let namespace = resource.namespace().unwrap_or_default();
    let creds = credentials(&ctx.client, &namespace, secret).await?;
    let dir = scratch(ctx)?;
    Ok(fetch::fetch(url, &creds, dir.path())
        .await
        .map(|f| (dir, f)))
}

/// A failed download: not Ready, and still Reconciling (it is retried).
fn download_failed(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    error: &FetchError,
    generation: Option<i64>,
) {
    use crate::api::condition::{READY, RECONCILING};
    let message = error.to_string();
    for (kind, value) in [(READY, false), (RECONCILING, true)] {
        status::set_condition(
            conditions,
            status::condition(kind, value, "DownloadFailed", &message, generation),
        );
    }
}

/// Reconciles one `Release`: returns the status written.
pub async fn reconcile_release(
    resource: &ReleaseResource,
    ctx: &ArtifactContext,
) -> Result<ReleaseStatus, ReconcileError> {
    let generation = resource.metadata.generation;
    let current = resource.status.clone().unwrap_or_default();
    if status::is_ready(&current.conditions, generation) && blobs_present(ctx, &current).await {
        return Ok(current);
    }
    let mut next = ReleaseStatus {
        observed_generation: generation,
        conditions: current.conditions.clone(),
        ..ReleaseStatus::default()
    };
    let spec = &resource.spec;
    let download = download(ctx, resource, &spec.url, spec.credentials_secret.as_deref()).await?;
    let (_dir, fetched) = match download {
        Ok(d) => d,
        Err(e) => {
            download_failed(&mut next.conditions, &e, generation);
            status::apply_status(&ctx.client, resource, &next).await?;
            return Err(e.into());
        }
    };
    match read_release(&fetched, resource, ctx).await? {
        Ok((release_mf, jobs, packages, compiled_for)) => {
            let message = format!("{} jobs, {} packages", jobs.len(), packages.len());
            next.jobs = jobs;
            next.packages = packages;
            next.compiled_for = compiled_for;
            next.manifest_blob_id = Some(release_mf);
            status::outcome(&mut next.conditions, Ok(&message), generation);
        }
        Err(e) => stalled(&mut next.conditions, &e, generation),
    }
    status::apply_status(&ctx.client, resource, &next).await?;
    Ok(next)
}

/// What a release tarball holds, stored: the blob ids of `release.MF`, jobs and packages.
type ReadRelease = (
    String,
    Vec<ReleaseItem>,
    Vec<ReleaseItem>,
    Option<StemcellVersion>,
);

async fn read_release(
    fetched: &Fetched,
    resource: &ReleaseResource,
    ctx: &ArtifactContext,
) -> Result<Result<ReadRelease, TarballError>, ReconcileError> {
    if let Err(e) = check_digest(fetched, resource.spec.sha1.as_deref()) {
        return Ok(Err(e));
    }
    let release = match kubosh_artifacts::release::Release::read(&fetched.path) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e.into())),
    };
    let (name, version) = (&release.manifest.name, &release.manifest.version);
    if name != &resource.spec.name || version != resource.spec.version.as_str() {
        return Ok(Err(TarballError::NameMismatch {
            kind: "release",
            found: format!("{name}/{version}"),
            expected: format!("{}/{}", resource.spec.name, resource.spec.version),
        }));
    }
    let release_mf = match release.manifest_yaml() {
        Ok(text) => text.into_bytes(),
        Err(e) => return Ok(Err(e.into())),
    };
    let store = |archive: Vec<u8>| {
        let blobstore = ctx.blobstore.clone();
        async move {
            blobstore
                .put_bytes(archive.into())
                .await
                .map(|b| b.id)
                .map_err(ReconcileError::from)
        }
    };
    let store_archive = |archive: &PackageArchive| {
        let bytes = archive.bytes().map(<[u8]>::to_vec);
        let id = archive.blob_id();
        async move {
            match bytes {
                Some(bytes) => store(bytes).await,
                None => Ok(id),
            }
        }
    };
    let mut jobs = Vec::new();
    for job in &release.jobs {
        jobs.push(ReleaseItem {
            name: job.name.clone(),
            version: job.version.clone(),
            fingerprint: job.fingerprint.clone(),
            dependencies: job.spec.packages.clone(),
            blob_id: Some(store(job.archive.clone()).await?),
        });
    }
    let mut packages = Vec::new();
    for pkg in &release.packages {
        packages.push(ReleaseItem {
            name: pkg.name.clone(),
            version: pkg.version.clone(),
            fingerprint: pkg.fingerprint.clone(),
            dependencies: pkg.dependencies.clone(),
            blob_id: Some(store_archive(&pkg.archive).await?),
        });
    }
    let mut compiled_for = None;
    for pkg in &release.compiled_packages {
        compiled_for = Some(StemcellVersion {
            os: pkg.stemcell.os.clone(),
            version: pkg.stemcell.version.clone(),
        });
        packages.push(ReleaseItem {
            name: pkg.name.clone(),
            version: pkg.version.clone(),
            fingerprint: pkg.fingerprint.clone(),
            dependencies: pkg.dependencies.clone(),
            blob_id: Some(store_archive(&pkg.archive).await?),
        });
    }
    let release_mf = store(release_mf).await?;
    Ok(Ok((release_mf, jobs, packages, compiled_for)))
}

async fn blobs_present(ctx: &ArtifactContext, status: &ReleaseStatus) -> bool {
    let ids = status
        .jobs
        .iter()
        .chain(&status.packages)
        .map(|item| &item.blob_id)
        .chain([&status.manifest_blob_id]);
    for id in ids {
        let Some(id) = id else {
            return false;
        };
        if !ctx.blobstore.exists(id).await.unwrap_or(false) {
            return false;
        }
    }
    true
}

/// Reconciles one `Stemcell`: returns the status written.
pub async fn reconcile_stemcell(
    resource: &StemcellResource,
    ctx: &ArtifactContext,
) -> Result<StemcellStatus, ReconcileError> {
    let generation = resource.metadata.generation;
    let current = resource.status.clone().unwrap_or_default();
    if status::is_ready(&current.conditions, generation) {
        let present = match &current.blob_id {
            Some(id) => ctx.blobstore.exists(id).await.unwrap_or(false),
            None => false,
        };
        if present {
            return Ok(current);
        }
    }
    let mut next = StemcellStatus {
        observed_generation: generation,
        conditions: current.conditions.clone(),
        ..StemcellStatus::default()
    };
    let spec = &resource.spec;
    let download = download(ctx, resource, &spec.url, spec.credentials_secret.as_deref()).await?;
    let (_dir, fetched) = match download {
        Ok(d) => d,
        Err(e) => {
            download_failed(&mut next.conditions, &e, generation);
            status::apply_status(&ctx.client, resource, &next).await?;
            return Err(e.into());
        }
    };
    let outcome: Result<(), TarballError> = async {
        check_digest(&fetched, resource.spec.sha1.as_deref())?;
        let stemcell = kubosh_artifacts::stemcell::Stemcell::read(&fetched.path)?;
        let m = &stemcell.manifest;
        if m.name != resource.spec.name || m.version != resource.spec.version.as_str() {
            return Err(TarballError::NameMismatch {
                kind: "stemcell",
                found: format!("{}/{}", m.name, m.version),
                expected: format!("{}/{}", resource.spec.name, resource.spec.version),
            });
        }
        next.os = Some(m.operating_system.clone());
        next.api_version = m.api_version.and_then(|v| i32::try_from(v).ok());
        Ok(())
    }
    .await;
    match outcome {
        Ok(()) => {
            next.blob_id = Some(store_tarball(ctx, &fetched).await?);
            let message = format!("{} stemcell", next.os.as_deref().unwrap_or_default());
            status::outcome(&mut next.conditions, Ok(&message), generation);
        }
        Err(e) => stalled(&mut next.conditions, &e, generation),
    }
    status::apply_status(&ctx.client, resource, &next).await?;
    Ok(next)
}

/// Deletes each cloud's copy of the stemcell (`copies`: CPI and CID, the director's own
/// CPI's first); a named CPI's annotation goes as soon as its copy is gone, so a retry
/// does not ask that cloud again.
async fn delete_copies(
    resource: &StemcellResource,
    ctx: &ArtifactContext,
    cloud: &dyn Cloud,
    copies: &[(Option<String>, String)],
) -> Result<(), ReconcileError> {
    let namespace = resource.namespace().unwrap_or_default();
    let key = format!("{}/{}", resource.spec.name, resource.spec.version.as_str());
    let failed = |source: CpiError| ReconcileError::Cloud {
        stemcell: key.clone(),
        source: Box::new(source),
    };
    let named = if copies.iter().any(|(cpi, _)| cpi.is_some()) {
        super::cpis::named_clouds(&ctx.client, &namespace, ctx.cloud_maker.as_ref())
            .await
            .map_err(|reason| ReconcileError::NoCloud {
                stemcell: key.clone(),
                reason,
            })?
    } else {
        Default::default()
    };
    let api = Api::<StemcellResource>::namespaced(ctx.client.clone(), &namespace);
    for (cpi, cid) in copies.iter().rev() {
        let cid = StemcellCid::from(cid.as_str());
        let Some(cpi) = cpi else {
            cloud.delete_stemcell(&cid).await.map_err(failed)?;
            continue;
        };
        let Some(named_cloud) = named.cloud(cpi) else {
            return Err(ReconcileError::NoCloud {
                stemcell: key.clone(),
                reason: format!(
                    "its copy in CPI '{cpi}' cannot be deleted: no CpiConfig defines that CPI"
                ),
            });
        };
        named_cloud.delete_stemcell(&cid).await.map_err(failed)?;
        let gone = serde_json::json!({"metadata": {"annotations": {
            crate::api::cid_annotation(Some(cpi)): null
        }}});
        api.patch(
            &resource.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&gone),
        )
        .await?;
    }
    Ok(())
}

/// `bosh delete-stemcell` for a deleted `Stemcell`: waits while an instance runs on it or a
/// deploy in the namespace is running (it may be creating VMs from it), then deletes the
/// cloud's copy (the CID its annotation records) and the packages compiled for it (unless
/// another `Stemcell` has the same OS and version). Until this succeeds the finalizer keeps
/// the resource, so its CID is never lost.
pub async fn delete_stemcell(
    resource: &StemcellResource,
    ctx: &ArtifactContext,
    cloud: &dyn Cloud,
) -> Result<(), ReconcileError> {
    let namespace = resource.namespace().unwrap_or_default();
    let key = format!("{}/{}", resource.spec.name, resource.spec.version.as_str());
    let annotations = resource.annotations();
    let copies = crate::api::recorded_cids(annotations);
    if copies.is_empty() {
        return Ok(());
    }
    let mut users = Vec::new();
    let instances = Api::<crate::api::Instance>::namespaced(ctx.client.clone(), &namespace)
        .list(&Default::default())
        .await?;
    for i in &instances {
        if i.spec.stemcell.as_deref() == Some(key.as_str()) {
            users.push(format!("instance {}", i.name_any()));
        }
    }
    let deployments = Api::<crate::api::Deployment>::namespaced(ctx.client.clone(), &namespace)
        .list(&Default::default())
        .await?;
    for d in &deployments {
        let task = d.status.as_ref().and_then(|s| s.last_task.as_ref());
        if task.is_some_and(|t| t.state == crate::api::TaskState::Processing) {
            users.push(format!("deployment {} (deploying)", d.name_any()));
        }
    }
    if !users.is_empty() {
        let in_use = ReconcileError::InUse {
            stemcell: key,
            users,
        };
        let message = in_use.to_string();
        // Said where `kubectl describe` shows it: deletion waits, it did not fail. The
        // deletion bumped the generation; the stemcell is as usable as before (deploys
        // still pick it), so its conditions describe this generation too.
        let mut status = resource.status.clone().unwrap_or_default();
        let generation = resource.metadata.generation;
        if status::is_ready(&status.conditions, status.observed_generation) {
            status.observed_generation = generation;
            for c in &mut status.conditions {
                c.observed_generation = generation;
            }
        }
        status::set_condition(
            &mut status.conditions,
            status::condition(
                crate::api::condition::RECONCILING,
                true,
                "InUse",
                &message,
                resource.metadata.generation,
            ),
        );
        status::apply_status(&ctx.client, resource, &status).await?;
        return Err(in_use);
    }
    delete_copies(resource, ctx, cloud, &copies).await?;
    let os = annotations.get(crate::api::OS_ANNOTATION).cloned();
    let version = resource.spec.version.as_str().to_string();
    let twins = Api::<StemcellResource>::namespaced(ctx.client.clone(), &namespace)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|s| s.uid() != resource.uid())
        .any(|s| {
            s.annotations().get(crate::api::OS_ANNOTATION) == os.as_ref()
                && s.spec.version.as_str() == version
        });
    if twins {
        return Ok(());
    }
    let compiled: Api<crate::api::CompiledPackage> =
        Api::namespaced(ctx.client.clone(), &namespace);
    for p in compiled.list(&Default::default()).await? {
        let spec = &p.spec;
        if Some(&spec.stemcell.os) == os.as_ref() && spec.stemcell.version == version {
            // The record first: a crash in between leaves an unreferenced blob, never a
            // record of a missing one.
            match compiled.delete(&p.name_any(), &Default::default()).await {
                Ok(_) => {}
                Err(e) if crate::state::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
            ctx.blobstore.delete(&spec.blobstore_id).await?;
        }
    }
    Ok(())
}
