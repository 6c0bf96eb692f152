//! Installing jobs and packages for `prepare`/`apply`, as the agent does
//! (`agent/applier/`, `bundlecollection/file_bundle*.go`, `jobs/rendered_job_applier.go`,
//! `packages/compiled_package_applier.go`).
//!
//! - A compiled package tarball (its contents at the root) is unpacked into
//!   `data/packages/<name>/<sha1("<version>-<digest>")>`.
//! - Jobs come from the one rendered templates archive of the instance (`<job>/monit`,
//!   `<job>/bin/...`, `<job>/config/...`, with or without a leading `./`), each unpacked into
//!   `data/jobs/<job>/<sha1("<version>-<archive digest>")>`, with the agent's permissions
//!   (directories and `bin/*` 0750, other files 0640; ownership is left alone).
//! - Activation switches the symlinks `packages/<name>`, `jobs/<job>` and
//!   `jobs/<job>/packages/<name>` (every package of the instance, as the agent does), creates
//!   `sys/log/<job>`, `sys/run/<job>` and `data/<job>`, and removes every other installed
//!   version and stale link.
//!
//! Unlike the agent, symlinks are relative (`jobs/web -> ../data/jobs/web/<v>`), so the tree
//! stays valid wherever the base directory is mounted (for example at `/var/vcap` inside the
//! VM's own view).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::compile::{replace_symlink, unpack_into};
use super::layout::{InvalidName, Layout, check_name};
use kubosh_base::digest::{DigestError, MultiDigest, sha1_hex};

/// A job of the instance (`job.templates[]` of the apply spec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRef {
    /// Job name.
    pub name: String,
    /// Job version (fingerprint).
    pub version: String,
}

/// A compiled package of the instance (`packages.*` of the apply spec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageRef {
    /// Package name.
    pub name: String,
    /// Version (`<version>.<build>`).
    pub version: String,
    /// Digest of the compiled tarball.
    pub digest: String,
    /// Blob id of the compiled tarball.
    pub blobstore_id: String,
}

/// What an apply installs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstallPlan {
    /// The jobs (empty when the spec has no rendered templates archive).
    pub jobs: Vec<JobRef>,
    /// Digest of the rendered templates archive.
    pub templates_digest: String,
    /// Blob id of the rendered templates archive.
    pub templates_blobstore_id: String,
    /// The packages.
    pub packages: Vec<PackageRef>,
}

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A name that cannot be a path component.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// A spec field missing or of the wrong type.
    #[error("apply spec: {0}")]
    Spec(String),
    /// A blob that does not match its digest, or a digest that does not parse.
    #[error("{what}: {source}")]
    Digest {
        /// Which blob.
        what: String,
        /// What is wrong.
        source: DigestError,
    },
    /// The archive lacks a job.
    #[error("job {0:?} is not in the rendered templates archive")]
    MissingJob(String),
    /// Activation of something not installed.
    #[error("{0} is not installed")]
    NotInstalled(String),
    /// A file-system step failed.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> InstallError {
    let what = what.into();
    move |source| InstallError::Io { what, source }
}

fn text(v: &Value, field: &str, what: &str) -> Result<String, InstallError> {
    v[field]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| InstallError::Spec(format!("{what} has no string {field:?}")))
}

impl InstallPlan {
    /// Reads the plan from an apply spec as the director sends it.
    pub fn from_apply_spec(spec: &Value) -> Result<Self, InstallError> {
        let archive = &spec["rendered_templates_archive"];
        let templates_digest = archive["sha1"].as_str().unwrap_or_default().to_string();
        let templates_blobstore_id = archive["blobstore_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut jobs = Vec::new();
        if !templates_digest.is_empty() || !templates_blobstore_id.is_empty() {
            for t in spec["job"]["templates"].as_array().into_iter().flatten() {
                let job = JobRef {
                    name: text(t, "name", "a job template")?,
                    version: text(t, "version", "a job template")?,
                };
                check_name("job", &job.name)?;
                jobs.push(job);
            }
        }
        let mut packages = Vec::new();
        for (key, p) in spec["packages"].as_object().into_iter().flatten() {
            let what = format!("package {key:?}");
            let pkg = PackageRef {
                name: p["name"].as_str().unwrap_or(key).to_string(),
                version: text(p, "version", &what)?,
                digest: text(p, "sha1", &what)?,
                blobstore_id: p["blobstore_id"].as_str().unwrap_or_default().to_string(),
            };
            check_name("package", &pkg.name)?;
            packages.push(pkg);
        }
        Ok(Self {
            jobs,
            templates_digest,
            templates_blobstore_id,
            packages,
        })
    }
}

/// The version directory name: sha1 of `<version>-<canonical digest>`, as the agent's
/// bundle collections name them.
fn version_dir(version: &str, digest: &str, what: &str) -> Result<String, InstallError> {
    let d: MultiDigest = digest.parse().map_err(|source| InstallError::Digest {
        what: what.to_string(),
        source,
    })?;
    Ok(sha1_hex(format!("{version}-{d}").as_bytes()))
}

/// Installs and activates jobs and packages in one VM's tree.
#[derive(Debug, Clone)]
pub struct Installer {
    layout: Layout,
}

impl Installer {
    /// An installer for `layout`.
    pub fn new(layout: Layout) -> Self {
        Self { layout }
    }

    /// `data/packages/<name>/<version dir>` of a package.
    pub fn package_install_dir(&self, pkg: &PackageRef) -> Result<PathBuf, InstallError> {
        check_name("package", &pkg.name)?;
        let v = version_dir(&pkg.version, &pkg.digest, &format!("package {}", pkg.name))?;
        Ok(self.layout.data_package_dir(&pkg.name, &v))
    }

    /// `data/jobs/<name>/<version dir>` of a job of `plan`.
    pub fn job_install_dir(
        &self,
        plan: &InstallPlan,
        job: &JobRef,
    ) -> Result<PathBuf, InstallError> {
        check_name("job", &job.name)?;
        let v = version_dir(
            &job.version,
            &plan.templates_digest,
            "rendered templates archive",
        )?;
        Ok(self.layout.data_job_dir(&job.name, &v))
    }

    /// Whether a package is installed already (then its blob need not be fetched).
    pub fn is_package_installed(&self, pkg: &PackageRef) -> bool {
        self.package_install_dir(pkg).is_ok_and(|d| d.is_dir())
    }

    /// Checks `tarball` against the package's digest and unpacks it into its install
    /// directory (nothing to do if installed). Returns the directory.
    pub async fn install_package(
        &self,
        pkg: &PackageRef,
        tarball: Vec<u8>,
    ) -> Result<PathBuf, InstallError> {
        let dir = self.package_install_dir(pkg)?;
        if dir.is_dir() {
            return Ok(dir);
        }
        let what = format!("package {}", pkg.name);
        let digest: MultiDigest = pkg.digest.parse().map_err(|source| InstallError::Digest {
            what: what.clone(),
            source,
        })?;
        let tmp = self.scratch_dir()?;
        let dest = dir.clone();
        blocking(move || {
            if let Err(source) = digest.verify(&tarball) {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(InstallError::Digest { what, source });
            }
            let r = unpack_into(&tarball, &tmp)
                .map_err(io("unpacking package"))
                .and_then(|()| move_into_place(&tmp, &dest));
            let _ = std::fs::remove_dir_all(&tmp);
            r
        })
        .await??;
        Ok(dir)
    }

    /// Checks the rendered templates archive against the plan's digest and unpacks each job
    /// of the plan into its install directory (jobs installed already are left alone).
    pub async fn install_jobs(
        &self,
        plan: &InstallPlan,
        archive: Vec<u8>,
    ) -> Result<Vec<PathBuf>, InstallError> {
        let mut targets = Vec::new();
        for job in &plan.jobs {
            targets.push((job.name.clone(), self.job_install_dir(plan, job)?));
        }
        let what = "rendered templates archive".to_string();
        let digest: MultiDigest =
            plan.templates_digest
                .parse()
                .map_err(|source| InstallError::Digest {
                    what: what.clone(),
                    source,
                })?;
        let tmp = self.scratch_dir()?;
        let jobs = targets.clone();
        blocking(move || {
            let r = (|| {
                digest
                    .verify(&archive)
                    .map_err(|source| InstallError::Digest { what, source })?;
                unpack_into(&archive, &tmp).map_err(io("unpacking rendered templates"))?;
                if let Some((name, _)) = jobs.iter().find(|(n, _)| !tmp.join(n).is_dir()) {
                    return Err(InstallError::MissingJob(name.clone()));
                }
                for (name, dest) in &jobs {
                    if dest.is_dir() {
                        continue;
                    }
                    let src = tmp.join(name);
                    fix_permissions(&src)
                        .map_err(io(format!("setting permissions of job {name}")))?;
                    move_into_place(&src, dest)?;
                }
                Ok(())
            })();
            let _ = std::fs::remove_dir_all(&tmp);
            r
        })
        .await??;
        Ok(targets.into_iter().map(|(_, d)| d).collect())
    }

    /// Switches `packages/<name>` to an installed package (for `compile_package`'s
    /// dependencies), leaving everything else as it is.
    pub fn enable_package(&self, pkg: &PackageRef) -> Result<(), InstallError> {
        let dir = self.package_install_dir(pkg)?;
        if !dir.is_dir() {
            return Err(InstallError::NotInstalled(format!("package {}", pkg.name)));
        }
        let l = &self.layout;
        replace_symlink(&relative_to(l.base(), &dir, 1), &l.package_dir(&pkg.name))
            .map_err(io(format!("enabling package {}", pkg.name)))
    }

    /// Switches the instance to `plan` (see the module documentation). Everything in it
    /// must be installed.
    pub fn activate(&self, plan: &InstallPlan) -> Result<(), InstallError> {
        let l = &self.layout;
        let mut package_dirs = Vec::new();
        for pkg in &plan.packages {
            let dir = self.package_install_dir(pkg)?;
            if !dir.is_dir() {
                return Err(InstallError::NotInstalled(format!("package {}", pkg.name)));
            }
            package_dirs.push((pkg.name.clone(), dir));
        }
        let mut job_dirs = Vec::new();
        for job in &plan.jobs {
            let dir = self.job_install_dir(plan, job)?;
            if !dir.is_dir() {
                return Err(InstallError::NotInstalled(format!("job {}", job.name)));
            }
            job_dirs.push((job.name.clone(), dir));
        }
        for (name, dir) in &package_dirs {
            let link = l.package_dir(name);
            replace_symlink(&relative_to(l.base(), dir, 1), &link)
                .map_err(io(format!("enabling package {name}")))?;
        }
        for (name, dir) in &job_dirs {
            for d in [
                l.job_log_dir(name),
                l.job_run_dir(name),
                l.job_data_dir(name),
            ] {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o770)
                    .create(&d)
                    .map_err(io(format!("creating {}", d.display())))?;
            }
            // jobs/<job>/packages/<pkg> -> ../../../../packages/<pkg>/<v>, relative to
            // data/jobs/<job>/<v>/packages/.
            let pkgs = dir.join("packages");
            for (pkg, pdir) in &package_dirs {
                let target = Path::new("../../..").join(relative_to(&l.data_dir(), pdir, 1));
                replace_symlink(&target, &pkgs.join(pkg))
                    .map_err(io(format!("linking package {pkg} into job {name}")))?;
            }
            let keep: Vec<&str> = package_dirs.iter().map(|(n, _)| n.as_str()).collect();
            remove_entries_except(&pkgs, &keep)?;
            replace_symlink(&relative_to(l.base(), dir, 1), &l.job_dir(name))
                .map_err(io(format!("enabling job {name}")))?;
        }
        let keep_jobs: Vec<&Path> = job_dirs.iter().map(|(_, d)| d.as_path()).collect();
        let keep_pkgs: Vec<&Path> = package_dirs.iter().map(|(_, d)| d.as_path()).collect();
        let job_names: Vec<&str> = job_dirs.iter().map(|(n, _)| n.as_str()).collect();
        let pkg_names: Vec<&str> = package_dirs.iter().map(|(n, _)| n.as_str()).collect();
        remove_entries_except(&l.jobs_dir(), &job_names)?;
        remove_entries_except(&l.packages_dir(), &pkg_names)?;
        keep_only_versions(&l.data_jobs_dir(), &keep_jobs)?;
        keep_only_versions(&l.data_packages_dir(), &keep_pkgs)?;
        Ok(())
    }

    fn scratch_dir(&self) -> Result<PathBuf, InstallError> {
        let tmp = self.layout.tmp_dir();
        std::fs::create_dir_all(&tmp).map_err(io(format!("creating {}", tmp.display())))?;
        tempfile::Builder::new()
            .prefix("install-")
            .tempdir_in(&tmp)
            .map(|d| d.keep())
            .map_err(io("creating a scratch directory"))
    }
}

/// `dir` relative to `base`, prefixed with `up` `..` components.
fn relative_to(base: &Path, dir: &Path, up: usize) -> PathBuf {
    let mut p = PathBuf::new();
    for _ in 0..up {
        p.push("..");
    }
    p.join(dir.strip_prefix(base).unwrap_or(dir))
}

fn move_into_place(src: &Path, dest: &Path) -> Result<(), InstallError> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(io(format!("creating {}", parent.display())))?;
    }
    std::fs::rename(src, dest).map_err(io(format!("installing {}", dest.display())))
}

/// The agent's permissions: directories and files under `bin/` 0750, other files 0640.
fn fix_permissions(root: &Path) -> std::io::Result<()> {
    let bin = root.join("bin");
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750))?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            let ft = entry.file_type()?;
            if ft.is_dir() {
                stack.push(path);
            } else if ft.is_file() {
                let mode = if path.starts_with(&bin) { 0o750 } else { 0o640 };
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            }
        }
    }
    Ok(())
}

/// Removes every entry of `dir` not named in `keep` (symlinks and files; directories too).
fn remove_entries_except(dir: &Path, keep: &[&str]) -> Result<(), InstallError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(format!("reading {}", dir.display()))(e)),
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if keep.iter().any(|k| name.as_os_str() == *k) {
            continue;
        }
        let path = entry.path();
        let r = match entry.file_type() {
            Ok(ft) if ft.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        r.map_err(io(format!("removing {}", path.display())))?;
    }
    Ok(())
}

/// In `root/<name>/<version>`, removes every version not in `keep`, and emptied names.
fn keep_only_versions(root: &Path, keep: &[&Path]) -> Result<(), InstallError> {
    let names = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(format!("reading {}", root.display()))(e)),
    };
    for name in names.flatten() {
        let ndir = name.path();
        let Ok(versions) = std::fs::read_dir(&ndir) else {
            continue;
        };
        for v in versions.flatten() {
            let vdir = v.path();
            if !keep.contains(&vdir.as_path()) {
                std::fs::remove_dir_all(&vdir)
                    .map_err(io(format!("removing {}", vdir.display())))?;
            }
        }
        if std::fs::read_dir(&ndir).is_ok_and(|mut d| d.next().is_none()) {
            let _ = std::fs::remove_dir(&ndir);
        }
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, InstallError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io("background task")(std::io::Error::other(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_from_apply_spec() {
        let spec = serde_json::json!({
            "job": {"name": "web", "templates": [{"name": "nginx", "version": "v1", "sha1": "x", "blobstore_id": "y"}]},
            "packages": {"nginx": {"name": "nginx", "version": "1.2.3", "sha1": "abc", "blobstore_id": "b1"}},
            "rendered_templates_archive": {"blobstore_id": "rta", "sha1": "def"},
        });
        let plan = InstallPlan::from_apply_spec(&spec).unwrap();
        assert_eq!(
            plan.jobs,
            [JobRef {
                name: "nginx".into(),
                version: "v1".into()
            }]
        );
        assert_eq!(plan.templates_blobstore_id, "rta");
        assert_eq!(plan.packages[0].blobstore_id, "b1");
        let mut bad = spec.clone();
        bad["packages"]["nginx"]["name"] = "../x".into();
        assert!(matches!(
            InstallPlan::from_apply_spec(&bad),
            Err(InstallError::InvalidName(_))
        ));
        let mut bad = spec;
        bad["packages"]["nginx"]["version"] = 5.into();
        assert!(matches!(
            InstallPlan::from_apply_spec(&bad),
            Err(InstallError::Spec(_))
        ));
        assert_eq!(
            InstallPlan::from_apply_spec(&Value::Null).unwrap(),
            InstallPlan::default()
        );
    }

    #[test]
    fn version_dirs_are_the_agents() {
        // sha1("1.0-abc"): the digest in its canonical form.
        assert_eq!(
            version_dir("1.0", "sha1:abc", "x").unwrap(),
            sha1_hex(b"1.0-abc")
        );
        assert_eq!(
            version_dir("1.0", "abc;sha256:def", "x").unwrap(),
            sha1_hex(b"1.0-abc;sha256:def")
        );
        assert_eq!(
            relative_to(Path::new("/b"), Path::new("/b/data/x"), 1),
            Path::new("../data/x")
        );
    }
}
