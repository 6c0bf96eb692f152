//! The `/var/vcap` directory tree of one VM, rooted at a configurable base directory.
//!
//! Paths are the real agent's (`settings/directories/directories_provider.go`), relative to
//! the base: jobs and packages are installed under `data/` and switched on by symlinks in
//! `jobs/` and `packages/`; `sys` is a symlink to `data/sys` as on a stemcell, so
//! `sys/log/<job>` and `data/sys/log/<job>` are the same directory.

use std::io;
use std::path::{Path, PathBuf};

/// A job, package, script or blob name that cannot be used as one path component.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} name {name:?}: must be one non-empty path component")]
pub struct InvalidName {
    /// What the name names (`job`, `package`, ...).
    pub kind: &'static str,
    /// The name as given.
    pub name: String,
}

/// Checks that `name` is usable as a single path component: non-empty, not `.` or `..`, no
/// `/` and no NUL. Every name that reaches a path in this module goes through here first.
pub fn check_name(kind: &'static str, name: &str) -> Result<(), InvalidName> {
    let bad = name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']);
    if bad {
        return Err(InvalidName {
            kind,
            name: name.to_string(),
        });
    }
    Ok(())
}

/// The `/var/vcap` tree of one VM. Cheap to clone; computing a path does no I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    base: PathBuf,
}

impl Layout {
    /// The tree rooted at `base` (`/var/vcap` on a real VM).
    pub fn new(base: impl Into<PathBuf>) -> Self {
        Self { base: base.into() }
    }

    /// The base directory.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// `data`: the ephemeral data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.base.join("data")
    }

    /// `data/jobs`: installed job versions.
    pub fn data_jobs_dir(&self) -> PathBuf {
        self.data_dir().join("jobs")
    }

    /// `data/jobs/<job>/<version dir>`: one installed version of a job.
    pub fn data_job_dir(&self, job: &str, version_dir: &str) -> PathBuf {
        self.data_jobs_dir().join(job).join(version_dir)
    }

    /// `data/packages`: installed package versions.
    pub fn data_packages_dir(&self) -> PathBuf {
        self.data_dir().join("packages")
    }

    /// `data/packages/<package>/<version dir>`: one installed version of a package.
    pub fn data_package_dir(&self, package: &str, version_dir: &str) -> PathBuf {
        self.data_packages_dir().join(package).join(version_dir)
    }

    /// `data/<job>`: the job's own ephemeral data directory (created at apply).
    pub fn job_data_dir(&self, job: &str) -> PathBuf {
        self.data_dir().join(job)
    }

    /// `data/compile`: where `compile_package` unpacks sources.
    pub fn compile_dir(&self) -> PathBuf {
        self.data_dir().join("compile")
    }

    /// `data/blobs`: the agent's own blob store (blobs uploaded through the agent).
    pub fn blobs_dir(&self) -> PathBuf {
        self.data_dir().join("blobs")
    }

    /// `data/sensitive_blobs`: blobs from `upload_blob` (rendered templates over NATS).
    pub fn sensitive_blobs_dir(&self) -> PathBuf {
        self.data_dir().join("sensitive_blobs")
    }

    /// `data/tmp`: scratch space on the same file system as `data/jobs` and `data/packages`.
    pub fn tmp_dir(&self) -> PathBuf {
        self.data_dir().join("tmp")
    }

    /// `jobs`: one symlink per active job.
    pub fn jobs_dir(&self) -> PathBuf {
        self.base.join("jobs")
    }

    /// `jobs/<job>`: the active version of a job (a symlink into `data/jobs`).
    pub fn job_dir(&self, job: &str) -> PathBuf {
        self.jobs_dir().join(job)
    }

    /// `jobs/<job>/bin/<script>`: a job's lifecycle or drain script.
    pub fn job_script(&self, job: &str, script: &str) -> PathBuf {
        self.job_dir(job).join("bin").join(script)
    }

    /// `jobs/<job>/monit`: the job's monit file.
    pub fn job_monit_file(&self, job: &str) -> PathBuf {
        self.job_dir(job).join("monit")
    }

    /// `jobs/<job>/packages`: per-job symlinks to the packages of the instance.
    pub fn job_packages_dir(&self, job: &str) -> PathBuf {
        self.job_dir(job).join("packages")
    }

    /// `packages`: one symlink per active package.
    pub fn packages_dir(&self) -> PathBuf {
        self.base.join("packages")
    }

    /// `packages/<package>`: the active version of a package (a symlink into
    /// `data/packages`).
    pub fn package_dir(&self, package: &str) -> PathBuf {
        self.packages_dir().join(package)
    }

    /// `sys`: a symlink to `data/sys`, as on a stemcell.
    pub fn sys_dir(&self) -> PathBuf {
        self.base.join("sys")
    }

    /// `data/sys`: what `sys` points to.
    pub fn data_sys_dir(&self) -> PathBuf {
        self.data_dir().join("sys")
    }

    /// `sys/run`: pid files and sockets.
    pub fn sys_run_dir(&self) -> PathBuf {
        self.sys_dir().join("run")
    }

    /// `sys/run/<job>`.
    pub fn job_run_dir(&self, job: &str) -> PathBuf {
        self.sys_run_dir().join(job)
    }

    /// `sys/log`: job logs.
    pub fn sys_log_dir(&self) -> PathBuf {
        self.sys_dir().join("log")
    }

    /// `sys/log/<job>`.
    pub fn job_log_dir(&self, job: &str) -> PathBuf {
        self.sys_log_dir().join(job)
    }

    /// `store`: where the persistent disk is mounted.
    pub fn store_dir(&self) -> PathBuf {
        self.base.join("store")
    }

    /// `store_migration_target`: where a second persistent disk is mounted during
    /// `migrate_disk`.
    pub fn store_migration_dir(&self) -> PathBuf {
        self.base.join("store_migration_target")
    }

    /// `instance`: facts about the instance (`id`, `az`, `name`, `deployment`).
    pub fn instance_dir(&self) -> PathBuf {
        self.base.join("instance")
    }

    /// `instance/dns/records.json`: the DNS records `sync_dns` writes.
    pub fn dns_records_file(&self) -> PathBuf {
        self.instance_dir().join("dns").join("records.json")
    }

    /// `bosh`: the agent's own state.
    pub fn bosh_dir(&self) -> PathBuf {
        self.base.join("bosh")
    }

    /// `bosh/settings.json`: the cached agent settings.
    pub fn settings_file(&self) -> PathBuf {
        self.bosh_dir().join("settings.json")
    }

    /// `bosh/spec.json`: the last applied spec.
    pub fn spec_file(&self) -> PathBuf {
        self.bosh_dir().join("spec.json")
    }

    /// `bosh/persistent_disk_hints.json`: disk hints recorded by `add_persistent_disk`.
    pub fn persistent_disk_hints_file(&self) -> PathBuf {
        self.bosh_dir().join("persistent_disk_hints.json")
    }

    /// `bosh/managed_disk_settings.json`: the cid of the disk last mounted at `store`.
    pub fn managed_disk_settings_file(&self) -> PathBuf {
        self.bosh_dir().join("managed_disk_settings.json")
    }

    /// `bosh/log`: the agent's log directory.
    pub fn bosh_log_dir(&self) -> PathBuf {
        self.bosh_dir().join("log")
    }

    /// `bosh/etc`: blobstore client configuration and the like.
    pub fn bosh_etc_dir(&self) -> PathBuf {
        self.bosh_dir().join("etc")
    }

    /// `monit`: supervisor state.
    pub fn monit_dir(&self) -> PathBuf {
        self.base.join("monit")
    }

    /// `monit/stopped`: present while the jobs are stopped (the agent's marker, read by
    /// `get_state`).
    pub fn monit_stopped_file(&self) -> PathBuf {
        self.monit_dir().join("stopped")
    }

    /// `monit/logs/<service>.log`: output of a service's start and stop programs. Not a BOSH
    /// path (monit sends that output nowhere); kept for debugging.
    pub fn monit_service_log(&self, service: &str) -> PathBuf {
        self.monit_dir().join("logs").join(format!("{service}.log"))
    }

    /// Creates the skeleton: the directories above and the `sys -> data/sys` symlink.
    /// Idempotent; an existing `sys` directory (not a symlink) is left alone.
    pub fn create(&self) -> io::Result<()> {
        for dir in [
            self.data_jobs_dir(),
            self.data_packages_dir(),
            self.data_sys_dir().join("run"),
            self.data_sys_dir().join("log"),
            self.compile_dir(),
            self.blobs_dir(),
            self.sensitive_blobs_dir(),
            self.tmp_dir(),
            self.jobs_dir(),
            self.packages_dir(),
            self.store_dir(),
            self.instance_dir().join("dns"),
            self.bosh_log_dir(),
            self.bosh_etc_dir(),
            self.monit_dir(),
        ] {
            std::fs::create_dir_all(dir)?;
        }
        match std::fs::symlink_metadata(self.sys_dir()) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::os::unix::fs::symlink(Path::new("data").join("sys"), self.sys_dir())
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_boshs() {
        let l = Layout::new("/var/vcap");
        assert_eq!(l.job_dir("web"), Path::new("/var/vcap/jobs/web"));
        assert_eq!(
            l.job_script("web", "drain"),
            Path::new("/var/vcap/jobs/web/bin/drain")
        );
        assert_eq!(
            l.data_package_dir("nginx", "abc"),
            Path::new("/var/vcap/data/packages/nginx/abc")
        );
        assert_eq!(l.job_log_dir("web"), Path::new("/var/vcap/sys/log/web"));
        assert_eq!(l.job_run_dir("web"), Path::new("/var/vcap/sys/run/web"));
        assert_eq!(
            l.dns_records_file(),
            Path::new("/var/vcap/instance/dns/records.json")
        );
        assert_eq!(l.settings_file(), Path::new("/var/vcap/bosh/settings.json"));
        assert_eq!(l.store_dir(), Path::new("/var/vcap/store"));
    }

    #[test]
    fn names_are_one_component() {
        for bad in ["", ".", "..", "a/b", "/a", "a\0"] {
            assert!(check_name("job", bad).is_err(), "{bad:?}");
        }
        for good in ["web", "nginx-1.2", "a.b", "..a"] {
            assert!(check_name("job", good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn create_makes_sys_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let l = Layout::new(dir.path());
        l.create().unwrap();
        l.create().unwrap();
        let meta = std::fs::symlink_metadata(l.sys_dir()).unwrap();
        assert!(meta.file_type().is_symlink());
        assert!(l.job_log_dir("x").parent().unwrap().is_dir());
    }
}
