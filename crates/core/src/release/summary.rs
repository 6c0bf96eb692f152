//! What `kubosh release inspect` shows: a serializable digest of a [`Release`].

use serde::Serialize;

use super::Release;

/// A release's metadata, without archive bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReleaseSummary {
    /// Release name.
    pub name: String,
    /// Release version.
    pub version: String,
    /// Commit of the release directory.
    pub commit_hash: String,
    /// Whether the directory had uncommitted changes.
    pub uncommitted_changes: bool,
    /// Jobs.
    pub jobs: Vec<JobSummary>,
    /// Source and compiled packages.
    pub packages: Vec<PackageSummary>,
    /// The license's fingerprint, if any.
    pub license: Option<String>,
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSummary {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Fingerprint.
    pub fingerprint: String,
    /// Archive digest.
    pub sha1: String,
    /// Run-time packages.
    pub packages: Vec<String>,
    /// Provided links, `name (type)`.
    pub provides: Vec<String>,
    /// Consumed links, `name (type)`, `optional` marked.
    pub consumes: Vec<String>,
}

/// One package.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PackageSummary {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Fingerprint.
    pub fingerprint: String,
    /// Archive digest.
    pub sha1: String,
    /// Dependencies.
    pub dependencies: Vec<String>,
    /// For a compiled package, the stemcell `<os>/<version>`.
    pub compiled_for: Option<String>,
}

impl Release {
    /// The metadata `kubosh release inspect` prints.
    pub fn summary(&self) -> ReleaseSummary {
        ReleaseSummary {
            name: self.manifest.name.clone(),
            version: self.manifest.version.clone(),
            commit_hash: self.manifest.commit_hash.clone(),
            uncommitted_changes: self.manifest.uncommitted_changes,
            jobs: self
                .jobs
                .iter()
                .map(|j| JobSummary {
                    name: j.name.clone(),
                    version: j.version.clone(),
                    fingerprint: j.fingerprint.clone(),
                    sha1: j.digest.to_string(),
                    packages: j.spec.packages.clone(),
                    provides: j
                        .spec
                        .provides
                        .iter()
                        .map(|l| format!("{} ({})", l.name, l.link_type))
                        .collect(),
                    consumes: j
                        .spec
                        .consumes
                        .iter()
                        .map(|l| {
                            let optional = if l.optional { ", optional" } else { "" };
                            format!("{} ({}{optional})", l.name, l.link_type)
                        })
                        .collect(),
                })
                .collect(),
            packages: self
                .packages
                .iter()
                .map(|p| PackageSummary {
                    name: p.name.clone(),
                    version: p.version.clone(),
                    fingerprint: p.fingerprint.clone(),
                    sha1: p.digest.to_string(),
                    dependencies: p.dependencies.clone(),
                    compiled_for: None,
                })
                .chain(self.compiled_packages.iter().map(|p| PackageSummary {
                    name: p.name.clone(),
                    version: p.version.clone(),
                    fingerprint: p.fingerprint.clone(),
                    sha1: p.digest.to_string(),
                    dependencies: p.dependencies.clone(),
                    compiled_for: Some(p.stemcell.to_string()),
                }))
                .collect(),
            license: self.license.as_ref().map(|l| l.fingerprint.clone()),
        }
    }
}
