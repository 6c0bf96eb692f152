//! The local CPI installation of create-env (the research notes §2): the CPI release's
//! packages compiled on this machine and installed, its job rendered and installed, under
//! one directory per environment (`~/.kubosh/installations/<installation_id>/`):
//!
//! ```text
//! blobs/<uuid>               compiled packages (kept: the compile cache)
//! compiled_packages.json     index: (name, fingerprint, dependency key) -> blob
//! packages/<name>/           installed compiled packages (BOSH_PACKAGES_DIR)
//! jobs/<job>/                the rendered CPI job (BOSH_JOBS_DIR), removed after each run
//! tmp/                       scratch space, wiped at the start of each run
//! ```
//!
//! Packages compile as bosh-cli compiles them: `bash -x packaging` in the extracted source,
//! with the inherited environment plus `BOSH_COMPILE_TARGET`, `BOSH_INSTALL_TARGET`,
//! `BOSH_PACKAGE_NAME` and `BOSH_PACKAGES_DIR`, direct dependencies extracted under the
//! packages directory first. A package whose key is in the index is not compiled again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::NeededPackage;
use kubosh_artifacts::render::RenderedJob;
use kubosh_base::digest::{MultiDigest, sha256_hex};

use super::archive::{pack_dir, unpack};

/// How long one packaging script may run.
const PACKAGING_TIMEOUT: Duration = Duration::from_secs(3600);

/// How much of a failed packaging script's output an error carries.
const OUTPUT_TAIL: usize = 10 * 1024;

/// Why installing the CPI failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The packaging script could not run or failed.
    #[error("Compiling package '{name}': running packaging script: {reason}")]
    Packaging {
        /// The package.
        name: String,
        /// Exit status and the end of its output.
        reason: String,
    },
    /// A package archive is not in the release (a release held by reference).
    #[error("package '{0}' has no archive in its release tarball")]
    NoArchive(String),
    /// A stored compiled package does not match its digest.
    #[error("compiled package '{name}' in {path}: {reason}")]
    Corrupt {
        /// The package.
        name: String,
        /// Its blob.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> InstallError {
    let path = path.into();
    move |source| InstallError::Io { path, source }
}

/// A package compiled on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalCompiled {
    /// Package name.
    pub name: String,
    /// Its blob under `blobs/`.
    pub blob_id: String,
    /// `sha256:<hex>` of the blob.
    pub digest: String,
}

/// One entry of `compiled_packages.json` (bosh-cli's index shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct IndexEntry {
    #[serde(rename = "Key")]
    key: IndexKey,
    #[serde(rename = "Value")]
    value: IndexValue,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct IndexKey {
    #[serde(rename = "PackageName")]
    package_name: String,
    #[serde(rename = "PackageFingerprint")]
    package_fingerprint: String,
    #[serde(rename = "DependencyKey")]
    dependency_key: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct IndexValue {
    #[serde(rename = "BlobID")]
    blob_id: String,
    #[serde(rename = "BlobSHA1")]
    blob_sha1: String,
}

/// One environment's CPI installation directory.
#[derive(Debug, Clone)]
pub struct Installation {
    root: PathBuf,
}

impl Installation {
    /// The installation at `root` (`~/.kubosh/installations/<installation_id>`).
    pub fn new(root: impl Into<PathBuf>) -> Installation {
        Installation { root: root.into() }
    }

    /// The installation's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Installed compiled packages (`BOSH_PACKAGES_DIR`).
    pub fn packages_dir(&self) -> PathBuf {
        self.root.join("packages")
    }

    /// Installed rendered jobs (`BOSH_JOBS_DIR`).
    pub fn jobs_dir(&self) -> PathBuf {
        self.root.join("jobs")
    }

    /// Scratch space of this run.
    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    fn blobs_dir(&self) -> PathBuf {
        self.root.join("blobs")
    }

    fn index_path(&self) -> PathBuf {
        self.root.join("compiled_packages.json")
    }

    /// Creates the directories and wipes `tmp/` (a killed run's leftovers).
    pub fn prepare(&self) -> Result<(), InstallError> {
        let tmp = self.tmp_dir();
        remove_dir(&tmp)?;
        for dir in [self.root.clone(), self.blobs_dir(), tmp] {
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        Ok(())
    }

    fn load_index(&self) -> Vec<IndexEntry> {
        std::fs::read(self.index_path())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn save_index(&self, index: &[IndexEntry]) -> Result<(), InstallError> {
        let bytes = serde_json::to_vec(index).unwrap_or_default();
        write_atomic(&self.index_path(), &bytes)
    }

    /// The compiled package of `package` from the index, if its blob is still there.
    pub fn cached(&self, package: &NeededPackage) -> Option<LocalCompiled> {
        let key = key_of(package);
        let entry = self.load_index().into_iter().find(|e| e.key == key)?;
        let path = self.blobs_dir().join(&entry.value.blob_id);
        path.is_file().then(|| LocalCompiled {
            name: package.name.clone(),
            blob_id: entry.value.blob_id,
            digest: entry.value.blob_sha1,
        })
    }

    /// Compiles `package` (its direct dependencies compiled before, in `compiled`), or takes
    /// it from the index; true when it was compiled now. A compiled release's package is
    /// stored as it is.
    pub async fn compile(
        &self,
        package: &NeededPackage,
        compiled: &BTreeMap<String, LocalCompiled>,
    ) -> Result<(LocalCompiled, bool), InstallError> {
        if let Some(hit) = self.cached(package) {
            return Ok((hit, false));
        }
        let source = package
            .archive
            .bytes()
            .ok_or_else(|| InstallError::NoArchive(package.name.clone()))?;
        let tarball = if package.precompiled {
            source.to_vec()
        } else {
            self.run_packaging(package, source, compiled).await?
        };
        let blob_id = kubosh_base::ids::uuid_v4();
        let path = self.blobs_dir().join(&blob_id);
        write_atomic(&path, &tarball)?;
        let result = LocalCompiled {
            name: package.name.clone(),
            blob_id: blob_id.clone(),
            digest: format!("sha256:{}", sha256_hex(&tarball)),
        };
        let key = key_of(package);
        let mut index = self.load_index();
        index.retain(|e| e.key != key);
        index.push(IndexEntry {
            key,
            value: IndexValue {
                blob_id,
                blob_sha1: result.digest.clone(),
            },
        });
        self.save_index(&index)?;
        Ok((result, true))
    }

    async fn run_packaging(
        &self,
        package: &NeededPackage,
        source: &[u8],
        compiled: &BTreeMap<String, LocalCompiled>,
    ) -> Result<Vec<u8>, InstallError> {
        let packages = self.packages_dir();
        // As bosh-cli: the whole packages directory is scratch space while compiling; the
        // "Installing packages" step fills it again.
        remove_dir(&packages)?;
        let result = async {
            for dep in &package.dependencies {
                let dep_compiled = compiled.get(dep).ok_or_else(|| InstallError::Packaging {
                    name: package.name.clone(),
                    reason: format!("dependency '{dep}' was not compiled first"),
                })?;
                let bytes = self.read_blob(dep_compiled)?;
                unpack(&bytes, &packages.join(dep)).map_err(io(packages.join(dep)))?;
            }
            let install_target = packages.join(&package.name);
            std::fs::create_dir_all(&install_target).map_err(io(&install_target))?;
            let compile_target = self.tmp_dir().join(format!("compile-{}", package.name));
            remove_dir(&compile_target)?;
            unpack(source, &compile_target).map_err(io(&compile_target))?;
            if compile_target.join("packaging").is_file() {
                let mut cmd = tokio::process::Command::new("bash");
                cmd.args(["-x", "packaging"])
                    .current_dir(&compile_target)
                    .env("BOSH_COMPILE_TARGET", &compile_target)
                    .env("BOSH_INSTALL_TARGET", &install_target)
                    .env("BOSH_PACKAGE_NAME", &package.name)
                    .env("BOSH_PACKAGES_DIR", &packages);
                let mut stderr = Vec::new();
                let exchange = kubosh_process::Exchange {
                    max_stdout: 64 * 1024 * 1024,
                    timeout: PACKAGING_TIMEOUT,
                };
                let out = exchange
                    .run(cmd, b"", |line| {
                        stderr.extend_from_slice(line);
                        if stderr.len() > 4 * OUTPUT_TAIL {
                            stderr.drain(..stderr.len() - OUTPUT_TAIL);
                        }
                    })
                    .await
                    .map_err(|e| InstallError::Packaging {
                        name: package.name.clone(),
                        reason: e.to_string(),
                    })?;
                if !out.status.success() {
                    return Err(InstallError::Packaging {
                        name: package.name.clone(),
                        reason: format!(
                            "{}; Stdout: {}, Stderr: {}",
                            out.status,
                            tail(&out.stdout),
                            tail(&stderr)
                        ),
                    });
                }
            }
            let tarball = pack_dir(&install_target).map_err(io(&install_target))?;
            remove_dir(&compile_target)?;
            Ok(tarball)
        }
        .await;
        remove_dir(&packages)?;
        result
    }

    fn read_blob(&self, compiled: &LocalCompiled) -> Result<Vec<u8>, InstallError> {
        let path = self.blobs_dir().join(&compiled.blob_id);
        let bytes = std::fs::read(&path).map_err(io(&path))?;
        let digest: MultiDigest =
            compiled
                .digest
                .parse()
                .map_err(
                    |e: kubosh_base::digest::DigestError| InstallError::Corrupt {
                        name: compiled.name.clone(),
                        path: path.clone(),
                        reason: e.to_string(),
                    },
                )?;
        digest.verify(&bytes).map_err(|e| InstallError::Corrupt {
            name: compiled.name.clone(),
            path: path.clone(),
            reason: e.to_string(),
        })?;
        Ok(bytes)
    }

    /// Installs the compiled packages under `packages/<name>` (replacing what is there).
    pub fn install_packages(&self, compiled: &[LocalCompiled]) -> Result<(), InstallError> {
        let packages = self.packages_dir();
        remove_dir(&packages)?;
        std::fs::create_dir_all(&packages).map_err(io(&packages))?;
        for c in compiled {
            let bytes = self.read_blob(c)?;
            let dir = packages.join(&c.name);
            unpack(&bytes, &dir).map_err(io(&dir))?;
        }
        Ok(())
    }

    /// Installs a rendered CPI job under `jobs/<name>`, its `bin/*` executable.
    pub fn install_job(&self, job: &RenderedJob) -> Result<(), InstallError> {
        let dir = self.jobs_dir().join(&job.name);
        remove_dir(&dir)?;
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        for file in &job.files {
            let path = dir.join(&file.destination);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            std::fs::write(&path, &file.content).map_err(io(&path))?;
            // The rendered files may hold the CPI's credentials.
            let executable = file.destination.starts_with("bin/");
            set_mode(&path, if executable { 0o700 } else { 0o600 })?;
        }
        let monit = dir.join("monit");
        std::fs::write(&monit, &job.monit).map_err(io(&monit))?;
        Ok(())
    }

    /// Removes the rendered jobs (they hold the CPI's credentials; bosh-cli's "Cleaning up
    /// rendered CPI jobs").
    pub fn remove_jobs(&self) -> Result<(), InstallError> {
        remove_dir(&self.jobs_dir())
    }

    /// Removes the whole installation (delete-env).
    pub fn uninstall(&self) -> Result<(), InstallError> {
        remove_dir(&self.root)
    }
}

fn key_of(package: &NeededPackage) -> IndexKey {
    IndexKey {
        package_name: package.name.clone(),
        package_fingerprint: package.fingerprint.clone(),
        dependency_key: package.dependency_key.clone(),
    }
}

fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(OUTPUT_TAIL);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

fn remove_dir(dir: &Path) -> Result<(), InstallError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(dir)(e)),
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), InstallError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(path))
}

/// Writes through a temporary file renamed into place, so a killed run leaves the old file
/// or the new one.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), InstallError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(io(dir))?;
    std::fs::write(tmp.path(), bytes).map_err(io(tmp.path()))?;
    tmp.persist(path).map_err(|e| io(path)(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubosh_core::release::PackageArchive;
    use kubosh_core::release::tarball::TarWriter;

    fn source(packaging: &str, files: &[(&str, &str)]) -> Vec<u8> {
        let mut w = TarWriter::new();
        w.file("packaging", packaging.as_bytes(), false).unwrap();
        for (path, text) in files {
            w.file(path, text.as_bytes(), false).unwrap();
        }
        w.finish(false).unwrap()
    }

    fn needed(name: &str, deps: &[&str], archive: Vec<u8>) -> NeededPackage {
        NeededPackage {
            release: 0,
            name: name.into(),
            fingerprint: format!("{name}-fp"),
            digest: "da39a3ee5e6b4b0d3255bfef95601890afd80709".parse().unwrap(),
            dependencies: deps.iter().map(|d| d.to_string()).collect(),
            dependency_key: deps
                .iter()
                .map(|d| format!("{d}:{d}-fp"))
                .collect::<Vec<_>>()
                .join(","),
            archive: PackageArchive::Bytes(archive),
            precompiled: false,
        }
    }

    #[tokio::test]
    async fn packages_compile_with_bosh_cli_s_environment_once_and_install() {
        let dir = tempfile::tempdir().unwrap();
        let inst = Installation::new(dir.path().join("inst"));
        inst.prepare().unwrap();
        let base = needed(
            "base",
            &[],
            source(
                "set -e\necho \"$BOSH_PACKAGE_NAME\" > \"$BOSH_INSTALL_TARGET/name\"\ncp lib.txt \"$BOSH_INSTALL_TARGET/\"\n",
                &[("lib.txt", "base library")],
            ),
        );
        let app = needed(
            "app",
            &["base"],
            source(
                "set -e\ncat \"$BOSH_PACKAGES_DIR/base/lib.txt\" > \"$BOSH_INSTALL_TARGET/built\"\necho \"$BOSH_COMPILE_TARGET\" > \"$BOSH_INSTALL_TARGET/from\"\n",
                &[],
            ),
        );
        let mut compiled = BTreeMap::new();
        for p in [&base, &app] {
            let (c, fresh) = inst.compile(p, &compiled).await.unwrap();
            assert!(fresh);
            compiled.insert(p.name.clone(), c);
        }
        // Compiling leaves no scratch packages behind; installing puts them in place.
        assert!(!inst.packages_dir().exists());
        let all: Vec<LocalCompiled> = compiled.values().cloned().collect();
        inst.install_packages(&all).unwrap();
        let read = |p: &str| std::fs::read_to_string(inst.packages_dir().join(p)).unwrap();
        assert_eq!(read("base/name"), "base\n");
        assert_eq!(read("app/built"), "base library");
        assert!(read("app/from").contains("tmp/compile-app"));
        // A second run takes both from the index.
        let again = Installation::new(dir.path().join("inst"));
        again.prepare().unwrap();
        let (c, fresh) = again.compile(&app, &compiled).await.unwrap();
        assert!(!fresh);
        assert_eq!(c, compiled["app"]);
    }

    #[tokio::test]
    async fn a_failing_packaging_script_is_named_with_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let inst = Installation::new(dir.path());
        inst.prepare().unwrap();
        let bad = needed(
            "bad",
            &[],
            source("echo to-stdout\necho oops >&2\nexit 3\n", &[]),
        );
        let err = inst
            .compile(&bad, &BTreeMap::new())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("Compiling package 'bad': running packaging script: exit status: 3"),
            "{err}"
        );
        assert!(err.contains("to-stdout") && err.contains("oops"), "{err}");
        assert!(inst.cached(&bad).is_none());
    }

    #[test]
    fn jobs_install_with_executable_bin_files_and_go_away() {
        let dir = tempfile::tempdir().unwrap();
        let inst = Installation::new(dir.path());
        let job = RenderedJob {
            name: "cpi".into(),
            release: Default::default(),
            monit: String::new(),
            files: vec![
                kubosh_artifacts::render::RenderedFile {
                    source_path: "cpi.erb".into(),
                    destination: "bin/cpi".into(),
                    content: "#!/bin/sh\n".into(),
                },
                kubosh_artifacts::render::RenderedFile {
                    source_path: "c.erb".into(),
                    destination: "config/cpi.json".into(),
                    content: "{}".into(),
                },
            ],
        };
        inst.install_job(&job).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &str| {
            std::fs::metadata(inst.jobs_dir().join("cpi").join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("bin/cpi"), 0o700);
        assert_eq!(mode("config/cpi.json"), 0o600);
        inst.remove_jobs().unwrap();
        assert!(!inst.jobs_dir().exists());
    }
}
