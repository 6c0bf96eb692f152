//! Reading a release tarball into a [`Release`].

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use super::manifest::{ReleaseManifest, parse_yaml};
use super::tarball::{self, TarFiles};
use super::{
    Job, License, Package, PackageArchive, PrecompiledPackage, Release, ReleaseError, StemcellRef,
    graph, job,
};
use kubosh_base::digest::MultiDigest;

/// Names and versions the Director accepts (`Models::VALID_ID`).
pub fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'+' | b'.'))
}

impl Release {
    /// Reads and verifies a release tarball from a stream.
    pub fn from_reader(reader: impl Read) -> Result<Self, ReleaseError> {
        let files = tarball::read_stream(reader).map_err(|e| ReleaseError::Archive {
            what: "release tarball".into(),
            message: e.0,
        })?;
        Self::from_files(files)
    }

    /// Reads and verifies a release tarball held in memory.
    pub fn from_bytes(data: &[u8]) -> Result<Self, ReleaseError> {
        let files = tarball::read_all(data).map_err(|e| ReleaseError::Archive {
            what: "release tarball".into(),
            message: e.0,
        })?;
        Self::from_files(files)
    }

    fn from_files(mut files: TarFiles) -> Result<Self, ReleaseError> {
        let text = files
            .get("release.MF")
            .ok_or_else(|| ReleaseError::Missing {
                what: "release.MF".into(),
                container: "release tarball".into(),
            })?;
        let manifest = parse_release_manifest(text)?;
        let license = files.files.remove("license.tgz").map(|f| f.data);
        let take = |path: &str| {
            files
                .files
                .remove(path)
                .filter(|f| f.link_target.is_none())
                .map(|f| PackageArchive::Bytes(f.data))
        };
        Self::assemble(manifest, take, license, "release tarball")
    }

    /// A release by reference: `release.MF`, the job archives by job name (each verified
    /// against its digest and parsed) and, by package name, the blobstore id of each package
    /// and compiled package archive, stored when the release was uploaded (trusted: the id is
    /// the content's sha256). Checked as a tarball is, except the packages' bytes.
    pub fn by_reference(
        release_mf: &[u8],
        mut jobs: BTreeMap<String, Vec<u8>>,
        packages: &BTreeMap<String, String>,
    ) -> Result<Self, ReleaseError> {
        let manifest = parse_release_manifest(release_mf)?;
        let take = |path: &str| {
            let (dir, file) = path.split_once('/')?;
            let name = file.strip_suffix(".tgz")?;
            match dir {
                "jobs" => jobs.remove(name).map(PackageArchive::Bytes),
                _ => packages.get(name).cloned().map(PackageArchive::Stored),
            }
        };
        Self::assemble(manifest, take, None, "release catalog")
    }

    /// A release from its manifest and its archives: `take` gives the archive at a tarball
    /// path (`jobs/<name>.tgz`, `packages/<name>.tgz`, `compiled_packages/<name>.tgz`).
    fn assemble(
        manifest: ReleaseManifest,
        mut take_archive: impl FnMut(&str) -> Option<PackageArchive>,
        license: Option<Vec<u8>>,
        container: &str,
    ) -> Result<Self, ReleaseError> {
        check_identifiers(&manifest)?;
        let mut take =
            |dir: &str, name: &str, what: &str| -> Result<PackageArchive, ReleaseError> {
                let path = format!("{dir}/{name}.tgz");
                take_archive(&path).ok_or_else(|| ReleaseError::Missing {
                    what: format!("{what} '{name}' ({path})"),
                    container: container.into(),
                })
            };

        let packages = read_packages(&manifest, &mut take)?;
        let compiled_packages = read_compiled_packages(&manifest, &mut take)?;
        graph::compile_order(
            packages
                .iter()
                .map(|p| (p.name.as_str(), p.dependencies.as_slice())),
        )?;
        graph::compile_order(
            compiled_packages
                .iter()
                .map(|p| (p.name.as_str(), p.dependencies.as_slice())),
        )?;

        let available: BTreeSet<&str> = packages
            .iter()
            .map(|p| p.name.as_str())
            .chain(compiled_packages.iter().map(|p| p.name.as_str()))
            .collect();
        let jobs = read_jobs(&manifest, &available, &mut take, container)?;
        let license = verified_license(&manifest, license)?;

        Ok(Release {
            manifest,
            jobs,
            packages,
            compiled_packages,
            license,
        })
    }
}

/// Gives the archive of a `(directory, name, what)`, or says it is missing.
type TakeArchive<'a> = dyn FnMut(&str, &str, &str) -> Result<PackageArchive, ReleaseError> + 'a;

/// The manifest's source packages, each archive verified against its digest.
fn read_packages(
    manifest: &ReleaseManifest,
    take: &mut TakeArchive<'_>,
) -> Result<Vec<Package>, ReleaseError> {
    let mut packages = Vec::new();
    for p in &manifest.packages {
        let what = format!("package '{}' (packages/{}.tgz)", p.name, p.name);
        let archive = take("packages", &p.name, "package")?;
        let digest = verify_archive(&what, &p.sha1, &archive)?;
        packages.push(Package {
            name: p.name.clone(),
            version: p.version.clone(),
            fingerprint: p.fingerprint.clone().unwrap_or_else(|| p.version.clone()),
            digest,
            dependencies: p.dependencies.clone(),
            archive,
        });
    }
    Ok(packages)
}

/// The manifest's compiled packages, each with its `os/version` stemcell and its archive
/// verified against its digest.
fn read_compiled_packages(
    manifest: &ReleaseManifest,
    take: &mut TakeArchive<'_>,
) -> Result<Vec<PrecompiledPackage>, ReleaseError> {
    let mut compiled_packages = Vec::new();
    for p in &manifest.compiled_packages {
        let what = format!(
            "compiled package '{}' (compiled_packages/{}.tgz)",
            p.name, p.name
        );
        let stemcell = match p.stemcell.split_once('/') {
            Some((os, version)) if !os.is_empty() && !version.is_empty() => StemcellRef {
                os: os.to_string(),
                version: version.to_string(),
            },
            _ => {
                return Err(ReleaseError::BadStemcell {
                    package: p.name.clone(),
                    stemcell: p.stemcell.clone(),
                });
            }
        };
        let archive = take("compiled_packages", &p.name, "compiled package")?;
        let digest = verify_archive(&what, &p.sha1, &archive)?;
        compiled_packages.push(PrecompiledPackage {
            name: p.name.clone(),
            version: p.version.clone(),
            fingerprint: p.fingerprint.clone().unwrap_or_else(|| p.version.clone()),
            digest,
            stemcell,
            dependencies: p.dependencies.clone(),
            archive,
        });
    }
    Ok(compiled_packages)
}

/// The manifest's jobs, each archive verified and parsed, each package it names one of
/// `available`.
fn read_jobs(
    manifest: &ReleaseManifest,
    available: &BTreeSet<&str>,
    take: &mut TakeArchive<'_>,
    container: &str,
) -> Result<Vec<Job>, ReleaseError> {
    let mut jobs = Vec::new();
    for j in &manifest.jobs {
        let what = format!("job '{}' (jobs/{}.tgz)", j.name, j.name);
        let PackageArchive::Bytes(archive) = take("jobs", &j.name, "job")? else {
            return Err(ReleaseError::Missing {
                what: format!("the bytes of {what}"),
                container: container.into(),
            });
        };
        let digest = verify(&what, &j.sha1, &archive)?;
        let job = job::parse(j, digest, archive)?;
        for p in job.spec.packages.iter().chain(&j.packages) {
            if !available.contains(p.as_str()) {
                return Err(ReleaseError::MissingJobPackage {
                    job: j.name.clone(),
                    package: p.clone(),
                });
            }
        }
        jobs.push(job);
    }
    Ok(jobs)
}

/// The license, verified, when the manifest lists one and its archive is here.
fn verified_license(
    manifest: &ReleaseManifest,
    license: Option<Vec<u8>>,
) -> Result<Option<License>, ReleaseError> {
    let (Some(l), Some(data)) = (&manifest.license, license) else {
        // bosh-cli and the Director ignore a license entry without the archive.
        return Ok(None);
    };
    let digest = verify("license (license.tgz)", &l.sha1, &data)?;
    Ok(Some(License {
        version: l.version.clone(),
        fingerprint: l.fingerprint.clone().unwrap_or_else(|| l.version.clone()),
        digest,
        archive: data,
    }))
}

/// `release.MF`, parsed.
fn parse_release_manifest(data: &[u8]) -> Result<ReleaseManifest, ReleaseError> {
    let text = String::from_utf8_lossy(data);
    // The Ruby CLI wrote invalid `!binary` tags; bosh-cli rewrites them the same way.
    let text = text
        .replace("sha1: !binary |-", "sha1: !!binary |-")
        .replace("version: !binary |-", "version: !!binary |-")
        .replace("fingerprint: !binary |-", "fingerprint: !!binary |-");
    parse_yaml(&text, "release.MF").map_err(|message| ReleaseError::Manifest {
        file: "release.MF".into(),
        message,
    })
}

/// Parses `digest` and checks the archive against it when its bytes are here (a stored
/// archive's id is its content's sha256, checked when it was stored).
fn verify_archive(
    what: &str,
    digest: &str,
    archive: &PackageArchive,
) -> Result<MultiDigest, ReleaseError> {
    match archive {
        PackageArchive::Bytes(data) => verify(what, digest, data),
        PackageArchive::Stored(_) => digest.parse().map_err(|source| ReleaseError::Digest {
            what: what.to_string(),
            source,
        }),
    }
}

/// Parses `digest` and checks `data` against it.
fn verify(what: &str, digest: &str, data: &[u8]) -> Result<MultiDigest, ReleaseError> {
    let wrap = |source| ReleaseError::Digest {
        what: what.to_string(),
        source,
    };
    let parsed: MultiDigest = digest.parse().map_err(wrap)?;
    parsed.verify(data).map_err(wrap)?;
    Ok(parsed)
}

fn check_identifiers(m: &ReleaseManifest) -> Result<(), ReleaseError> {
    let check = |value: &str, label: String| {
        if valid_id(value) {
            Ok(())
        } else {
            Err(ReleaseError::InvalidIdentifier {
                label,
                value: value.to_string(),
            })
        }
    };
    check(&m.name, "release name".into())?;
    check(&m.version, "release version".into())?;
    let mut seen = BTreeSet::new();
    for (i, p) in m.packages.iter().enumerate() {
        check(&p.name, format!("package {} name", i + 1))?;
        check(&p.version, format!("package {} version", i + 1))?;
        if !seen.insert(p.name.as_str()) {
            return Err(ReleaseError::Duplicate {
                kind: "package",
                name: p.name.clone(),
            });
        }
    }
    let mut seen = BTreeSet::new();
    for (i, p) in m.compiled_packages.iter().enumerate() {
        check(&p.name, format!("compiled package {} name", i + 1))?;
        check(&p.version, format!("compiled package {} version", i + 1))?;
        if !seen.insert(p.name.as_str()) {
            return Err(ReleaseError::Duplicate {
                kind: "compiled package",
                name: p.name.clone(),
            });
        }
    }
    let mut seen = BTreeSet::new();
    for (i, j) in m.jobs.iter().enumerate() {
        check(&j.name, format!("job {} name", i + 1))?;
        check(&j.version, format!("job {} version", i + 1))?;
        if !seen.insert(j.name.as_str()) {
            return Err(ReleaseError::Duplicate {
                kind: "job",
                name: j.name.clone(),
            });
        }
    }
    Ok(())
}
