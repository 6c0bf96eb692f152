//! Which packages a set of release jobs needs, in compile order, as bosh-cli collects them for
//! both compilations of create-env (the CPI's on this machine, the deployment's on the VM):
//! every package of every job plus their transitive dependencies, de-duplicated by name,
//! dependencies first. Each carries its compile key (name, fingerprint and bosh-cli's
//! `DependencyKey`: the sorted `name:fingerprint` of all transitive dependencies).

use std::collections::{BTreeMap, BTreeSet};

use kubosh_base::digest::MultiDigest;
use kubosh_core::release::{GraphError, PackageArchive, Release, graph};

/// One package to compile (or, from a compiled release, to take as it is).
#[derive(Debug, Clone)]
pub struct NeededPackage {
    /// Index of its release in the list given to [`needed_packages`].
    pub release: usize,
    /// Package name.
    pub name: String,
    /// Content fingerprint (the apply spec's `version`).
    pub fingerprint: String,
    /// Digest of its archive (`release.MF`).
    pub digest: MultiDigest,
    /// Direct dependencies, by name.
    pub dependencies: Vec<String>,
    /// Sorted `name:fingerprint` of every transitive dependency, joined by `,`.
    pub dependency_key: String,
    /// The archive: the source package, or the compiled one for a compiled release.
    pub archive: PackageArchive,
    /// From a compiled release: nothing to compile.
    pub precompiled: bool,
}

impl NeededPackage {
    /// The compile cache key: `name/fingerprint/dependency key`, plus `extra` (e.g. the
    /// stemcell a package is compiled on).
    pub fn cache_key(&self, extra: &str) -> String {
        let text = format!(
            "{}\n{}\n{}\n{}",
            self.name, self.fingerprint, self.dependency_key, extra
        );
        kubosh_base::digest::sha256_hex(text.as_bytes())
    }
}

/// A job or package that is not where a manifest says it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackagesError {
    /// The release has no such job.
    #[error("Job '{job}' not found in release '{release}'")]
    NoJob {
        /// The release.
        release: String,
        /// The job.
        job: String,
    },
    /// A job needs a package the release does not have.
    #[error("Package '{package}' of job '{job}' not found in release '{release}'")]
    NoPackage {
        /// The release.
        release: String,
        /// The job.
        job: String,
        /// The package.
        package: String,
    },
    /// A job names a release that is not there.
    #[error("Job '{job}' refers to release '{release}', which is not in releases")]
    NoRelease {
        /// The release.
        release: String,
        /// The job.
        job: String,
    },
    /// The dependency graph is broken.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// [`needed_packages`] for jobs given as (release name, job name).
pub fn needed_packages_by_name(
    releases: &[Release],
    jobs: &[(&str, &str)],
) -> Result<Vec<NeededPackage>, PackagesError> {
    let refs: Vec<&Release> = releases.iter().collect();
    let indexed = jobs
        .iter()
        .map(|&(release, job)| {
            releases
                .iter()
                .position(|r| r.name() == release)
                .map(|i| (i, job))
                .ok_or_else(|| PackagesError::NoRelease {
                    release: release.to_string(),
                    job: job.to_string(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    needed_packages(&refs, &indexed)
}

/// Every package the `jobs` (release index, job name) need, dependencies first.
pub fn needed_packages(
    releases: &[&Release],
    jobs: &[(usize, &str)],
) -> Result<Vec<NeededPackage>, PackagesError> {
    // name -> (release, fingerprint, digest, deps, archive, precompiled)
    let mut found: BTreeMap<String, NeededPackage> = BTreeMap::new();
    let mut todo: Vec<(usize, String, String)> = Vec::new();
    for &(ri, job) in jobs {
        let release = releases[ri];
        let spec = release.job(job).ok_or_else(|| PackagesError::NoJob {
            release: release.name().to_string(),
            job: job.to_string(),
        })?;
        for p in &spec.spec.packages {
            todo.push((ri, p.clone(), job.to_string()));
        }
    }
    while let Some((ri, name, job)) = todo.pop() {
        if found.contains_key(&name) {
            continue;
        }
        let release = releases[ri];
        let found_in = |fingerprint: &str,
                        digest: &MultiDigest,
                        deps: &[String],
                        archive: &PackageArchive,
                        precompiled| NeededPackage {
            release: ri,
            name: name.clone(),
            fingerprint: fingerprint.to_string(),
            digest: digest.clone(),
            dependencies: deps.to_vec(),
            dependency_key: String::new(),
            archive: archive.clone(),
            precompiled,
        };
        let package = if let Some(p) = release.package(&name) {
            found_in(
                &p.fingerprint,
                &p.digest,
                &p.dependencies,
                &p.archive,
                false,
            )
        } else if let Some(p) = release.compiled_packages.iter().find(|p| p.name == name) {
            found_in(&p.fingerprint, &p.digest, &p.dependencies, &p.archive, true)
        } else {
            return Err(PackagesError::NoPackage {
                release: release.name().to_string(),
                job,
                package: name,
            });
        };
        for d in &package.dependencies {
            todo.push((ri, d.clone(), job.clone()));
        }
        found.insert(name, package);
    }
    let order = graph::compile_order(
        found
            .values()
            .map(|p| (p.name.as_str(), p.dependencies.as_slice())),
    )?;
    let mut out: Vec<NeededPackage> = Vec::with_capacity(order.len());
    for name in order {
        let mut package = found[&name].clone();
        let mut transitive: BTreeSet<String> = BTreeSet::new();
        let mut stack: Vec<&str> = package.dependencies.iter().map(String::as_str).collect();
        while let Some(d) = stack.pop() {
            if transitive.insert(format!("{d}:{}", found[d].fingerprint)) {
                stack.extend(found[d].dependencies.iter().map(String::as_str));
            }
        }
        package.dependency_key = transitive.into_iter().collect::<Vec<_>>().join(",");
        out.push(package);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubosh_core::release::{Job, Package};

    fn package(name: &str, deps: &[&str]) -> Package {
        Package {
            name: name.into(),
            version: format!("{name}-fp"),
            fingerprint: format!("{name}-fp"),
            digest: "da39a3ee5e6b4b0d3255bfef95601890afd80709".parse().unwrap(),
            dependencies: deps.iter().map(|d| d.to_string()).collect(),
            archive: PackageArchive::Bytes(name.as_bytes().to_vec()),
        }
    }

    fn release(packages: Vec<Package>, jobs: &[(&str, &[&str])]) -> Release {
        let manifest: kubosh_core::release::ReleaseManifest =
            serde_json::from_value(serde_json::json!({"name": "r", "version": "1"})).unwrap();
        let jobs = jobs
            .iter()
            .map(|(name, ps)| Job {
                name: name.to_string(),
                version: "v".into(),
                fingerprint: "v".into(),
                digest: "da39a3ee5e6b4b0d3255bfef95601890afd80709".parse().unwrap(),
                spec: serde_json::from_value(serde_json::json!({"name": name, "packages": ps}))
                    .unwrap(),
                monit: None,
                extra_monit: Default::default(),
                templates: Default::default(),
                properties_schema: None,
                archive: Vec::new(),
            })
            .collect();
        Release {
            manifest,
            jobs,
            packages,
            compiled_packages: Vec::new(),
            license: None,
        }
    }

    #[test]
    fn transitive_dependencies_first_with_their_keys() {
        let r = release(
            vec![
                package("app", &["lib"]),
                package("lib", &["base"]),
                package("base", &[]),
                package("unused", &[]),
            ],
            &[("web", &["app"]), ("worker", &["lib"])],
        );
        let needed = needed_packages(&[&r], &[(0, "web"), (0, "worker")]).unwrap();
        let names: Vec<&str> = needed.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["base", "lib", "app"]);
        assert_eq!(needed[0].dependency_key, "");
        assert_eq!(needed[1].dependency_key, "base:base-fp");
        assert_eq!(needed[2].dependency_key, "base:base-fp,lib:lib-fp");
        assert_eq!(needed[2].dependencies, ["lib"]);
        assert_ne!(needed[2].cache_key("a"), needed[2].cache_key("b"));
    }

    #[test]
    fn missing_jobs_and_packages_are_named() {
        let r = release(vec![package("app", &[])], &[("web", &["nope"])]);
        assert_eq!(
            needed_packages(&[&r], &[(0, "db")])
                .unwrap_err()
                .to_string(),
            "Job 'db' not found in release 'r'"
        );
        assert_eq!(
            needed_packages(&[&r], &[(0, "web")])
                .unwrap_err()
                .to_string(),
            "Package 'nope' of job 'web' not found in release 'r'"
        );
    }
}
