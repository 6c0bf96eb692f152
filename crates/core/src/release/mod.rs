//! BOSH releases: reading release tarballs (`bosh-protocols.md` §6.1–6.3) and building them
//! from release directories with bosh-cli's fingerprints.
//!
//! - [`Release::from_bytes`] opens a tarball: `release.MF`, every job (`job.MF`, `monit`,
//!   templates, `properties_schema.json`), package and compiled package archive; verifies
//!   every digest; validates job specs as the Director does on upload; rejects missing
//!   package dependencies and dependency cycles. Nothing is extracted to disk, and no input
//!   makes it panic.
//! - [`Release::to_tarball`] writes it as a tarball; reading and writing files and building
//!   releases from release directories (`bosh create-release`) are in `kubosh-artifacts`.
//!
//! Each job and package keeps its archive bytes ([`Job::archive`], [`Package::archive`]), so
//! later stages can store them content-addressed by their digest. A release *by reference*
//! ([`Release::by_reference`]) holds `release.MF` and its jobs (specs and templates, small)
//! but only the blobstore ids of its packages: what a deploy needs, without the packages'
//! bytes in memory.
//!
//! Pure: tarballs are read and written in memory; no file, no Kubernetes, no agent.

pub mod graph;
mod job;
pub mod manifest;
mod read;
pub mod summary;
pub mod tarball;
mod write;

use std::collections::BTreeMap;

use serde_json::Value;

pub use graph::GraphError;
use kubosh_base::digest::{DigestError, MultiDigest};
pub use manifest::{
    CompiledPackageRef, ConsumedLink, JobRef, JobSpec, LicenseRef, PackageRef, PackageSpec,
    PropertyDefinition, ProvidedLink, ReleaseManifest,
};

/// A release tarball that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The file could not be read.
    #[error("cannot read release '{path}': {message}")]
    Io {
        /// The tarball.
        path: String,
        /// The system's explanation.
        message: String,
    },
    /// Not a (gzipped) tar archive, or a corrupt one.
    #[error("{what} is not a valid archive: {message}")]
    Archive {
        /// Which archive (`release tarball`, `job 'web' (jobs/web.tgz)`).
        what: String,
        /// The explanation.
        message: String,
    },
    /// A file the format requires is absent.
    #[error("{what} not found in {container}")]
    Missing {
        /// The file (`release.MF`, `jobs/web.tgz`).
        what: String,
        /// Where it was looked for.
        container: String,
    },
    /// `release.MF` or `job.MF` is not valid YAML or has the wrong shape.
    #[error("invalid {file}: {message}")]
    Manifest {
        /// The document.
        file: String,
        /// The parser's explanation.
        message: String,
    },
    /// A name or version the Director refuses (`^[-0-9A-Za-z_+.]+$`).
    #[error("invalid {label} in release manifest: {value:?}")]
    InvalidIdentifier {
        /// What it names (`release name`, `job 2 version`).
        label: String,
        /// The value.
        value: String,
    },
    /// Two jobs or two packages of the same name.
    #[error("duplicate {kind} '{name}' in release manifest")]
    Duplicate {
        /// `job`, `package` or `compiled package`.
        kind: &'static str,
        /// The repeated name.
        name: String,
    },
    /// An archive's digest is malformed or does not match its contents.
    #[error("{what}: {source}")]
    Digest {
        /// Which archive.
        what: String,
        /// The mismatch or parse problem.
        #[source]
        source: DigestError,
    },
    /// A job's archive contradicts the rules the Director checks on upload.
    #[error("job '{job}': {message}")]
    Job {
        /// The job.
        job: String,
        /// What is wrong.
        message: String,
    },
    /// A job needs a package the release does not have.
    #[error("job '{job}' needs package '{package}', which is not in the release")]
    MissingJobPackage {
        /// The job.
        job: String,
        /// The package.
        package: String,
    },
    /// A compiled package names a stemcell not written `<os>/<version>`.
    #[error("compiled package '{package}': stemcell '{stemcell}' is not '<os>/<version>'")]
    BadStemcell {
        /// The package.
        package: String,
        /// The value.
        stemcell: String,
    },
    /// Missing dependencies or a cycle among (compiled) packages.
    #[error("{0}")]
    Graph(#[from] GraphError),
    /// Writing the tarball failed.
    #[error("cannot write release tarball '{path}': {message}")]
    Write {
        /// The destination.
        path: String,
        /// The explanation.
        message: String,
    },
}

/// A release, read from a tarball or built from a directory.
#[derive(Debug, Clone)]
pub struct Release {
    /// The release manifest as read (or as it will be written).
    pub manifest: ReleaseManifest,
    /// Jobs, in manifest order.
    pub jobs: Vec<Job>,
    /// Source packages, in manifest order.
    pub packages: Vec<Package>,
    /// Compiled packages, in manifest order.
    pub compiled_packages: Vec<PrecompiledPackage>,
    /// The license, if the release has one.
    pub license: Option<License>,
}

/// A job of a release.
#[derive(Debug, Clone)]
pub struct Job {
    /// Name.
    pub name: String,
    /// Version (the fingerprint, for releases bosh-cli or kubosh built).
    pub version: String,
    /// Content fingerprint.
    pub fingerprint: String,
    /// Digest of the archive, as listed in `release.MF`.
    pub digest: MultiDigest,
    /// The parsed `job.MF`.
    pub spec: JobSpec,
    /// The `monit` file (absent when the job ships only `*.monit` files).
    pub monit: Option<String>,
    /// Other monit files (`*.monit`), by file name.
    pub extra_monit: BTreeMap<String, String>,
    /// Template sources by their path under `templates/`, as listed in the spec.
    pub templates: BTreeMap<String, Vec<u8>>,
    /// `properties_schema.json`, when the job has one.
    pub properties_schema: Option<Value>,
    /// The job archive (`jobs/<name>.tgz`), as stored in the release.
    pub archive: Vec<u8>,
}

/// A source package of a release.
#[derive(Debug, Clone)]
pub struct Package {
    /// Name.
    pub name: String,
    /// Version (the fingerprint, for releases bosh-cli or kubosh built).
    pub version: String,
    /// Content fingerprint.
    pub fingerprint: String,
    /// Digest of the archive.
    pub digest: MultiDigest,
    /// Compile-time dependencies.
    pub dependencies: Vec<String>,
    /// The package archive (`packages/<name>.tgz`), or where it is stored.
    pub archive: PackageArchive,
}

/// A package archive: its bytes, or only where kubosh's blobstore keeps them (a release by
/// reference, [`Release::by_reference`]: packages can be large, and a deploy needs only
/// their ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackageArchive {
    /// The bytes, read from a tarball or built from a directory.
    Bytes(Vec<u8>),
    /// Stored content-addressed: the blob id, which is the sha256 of the bytes (lowercase
    /// hex).
    Stored(String),
}

impl PackageArchive {
    /// The bytes, when held.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            PackageArchive::Bytes(b) => Some(b),
            PackageArchive::Stored(_) => None,
        }
    }

    /// The id of the archive in a content-addressed blobstore: the stored id, or the sha256
    /// of the bytes.
    pub fn blob_id(&self) -> String {
        match self {
            PackageArchive::Bytes(b) => kubosh_base::digest::sha256_hex(b),
            PackageArchive::Stored(id) => id.clone(),
        }
    }
}

/// The stemcell a compiled package was built on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StemcellRef {
    /// Operating system (`ubuntu-jammy`).
    pub os: String,
    /// Stemcell version (`1.500`).
    pub version: String,
}

impl std::fmt::Display for StemcellRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.version)
    }
}

/// A package compiled in advance, shipped in a compiled release (`compiled_packages/`).
#[derive(Debug, Clone)]
pub struct PrecompiledPackage {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Content fingerprint.
    pub fingerprint: String,
    /// Digest of the archive.
    pub digest: MultiDigest,
    /// The stemcell it was compiled for.
    pub stemcell: StemcellRef,
    /// Dependencies (other compiled packages).
    pub dependencies: Vec<String>,
    /// The archive (`compiled_packages/<name>.tgz`), or where it is stored.
    pub archive: PackageArchive,
}

/// A release's license archive.
#[derive(Debug, Clone)]
pub struct License {
    /// Version (the fingerprint).
    pub version: String,
    /// Content fingerprint.
    pub fingerprint: String,
    /// Digest of `license.tgz`.
    pub digest: MultiDigest,
    /// `license.tgz`.
    pub archive: Vec<u8>,
}

impl Release {
    /// Release name.
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// Release version.
    pub fn version(&self) -> &str {
        &self.manifest.version
    }

    /// Whether the release carries compiled packages only (an exported release).
    pub fn is_compiled(&self) -> bool {
        self.packages.is_empty() && !self.compiled_packages.is_empty()
    }

    /// The job named `name`.
    pub fn job(&self, name: &str) -> Option<&Job> {
        self.jobs.iter().find(|j| j.name == name)
    }

    /// The source package named `name`.
    pub fn package(&self, name: &str) -> Option<&Package> {
        self.packages.iter().find(|p| p.name == name)
    }

    /// Source package names in compile order (dependencies first).
    pub fn compile_order(&self) -> Result<Vec<String>, GraphError> {
        graph::compile_order(
            self.packages
                .iter()
                .map(|p| (p.name.as_str(), p.dependencies.as_slice())),
        )
    }
}
