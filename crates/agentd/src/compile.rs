//! `compile_package`, as the agent does it (`agent/compiler/concrete_compiler.go`,
//! `compiler_unix.go`).
//!
//! The source tarball is checked against its digest (the strongest of a multi-digest) and
//! unpacked into `data/compile/<name>`. A fresh install directory
//! `data/packages/<name>/<sha1(version)>` is switched on as `packages/<name>`. The package's
//! `packaging` script (if any) runs as `bash -x packaging` in the source directory with
//! `BOSH_COMPILE_TARGET` (the source directory), `BOSH_INSTALL_TARGET` (`packages/<name>`),
//! `BOSH_PACKAGE_NAME` and `BOSH_PACKAGE_VERSION`, which is what the agent sets, plus
//! `BOSH_PACKAGES_DIR` (`<base>/packages`), which the agent does not set but packaging
//! scripts conventionally read as `${BOSH_PACKAGES_DIR:-/var/vcap/packages}`, so that
//! packages compile under any base directory. Its output goes to
//! `sys/log/compilation/packaging.std{out,err}.log` (fresh each time). The install directory
//! is then archived (gzip unless the source was a plain tar, as the agent does) and removed,
//! with the source directory; dependencies must already be installed at `packages/<dep>`.
//!
//! Archives are read and written with the `tar` and `flate2` crates: in-process (no `tar`
//! binary and its flag differences), `tar`'s unpacking refuses paths that escape the target
//! directory, and `flate2`'s default backend is pure Rust.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::exec;
use super::layout::{InvalidName, Layout, check_name};
use kubosh_base::digest::{DigestError, MultiDigest, sha1_hex, sha256_hex};

/// How much of the packaging script's stdout and stderr an error carries (the agent: 10 KiB).
const OUTPUT_TAIL: usize = 10 * 1024;

/// Where the source tarball is.
#[derive(Debug, Clone)]
pub enum PackageSource {
    /// In memory.
    Bytes(Vec<u8>),
    /// In a file.
    Path(PathBuf),
}

/// What to compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileRequest {
    /// Package name.
    pub name: String,
    /// Version as the director sends it (`<version>.<build>`).
    pub version: String,
    /// Digest of the source tarball: sha1 hex or a multi-digest.
    pub digest: String,
    /// Names of the (compiled) dependencies, already installed at `packages/<name>`.
    pub dependencies: Vec<String>,
}

/// What `compile_package` produced: the archive of the package's install directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledArchive {
    /// The archive of the install directory.
    pub tarball: Vec<u8>,
    /// Its sha1, hex.
    pub sha1: String,
    /// Its sha256, hex.
    pub sha256: String,
    /// Whether it is gzipped (it is not when the source was a plain tar).
    pub compressed: bool,
}

impl CompiledArchive {
    /// `<sha1>;sha256:<sha256>`, a multi-digest of the archive.
    pub fn multi_digest(&self) -> String {
        format!("{};sha256:{}", self.sha1, self.sha256)
    }
}

/// Why a compilation failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// A package name that cannot be a path component.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// An empty version.
    #[error("package {0:?} has an empty version")]
    EmptyVersion(String),
    /// The source does not match its digest (or the digest does not parse).
    #[error("package {name}: {source}")]
    Digest {
        /// The package.
        name: String,
        /// What is wrong.
        source: DigestError,
    },
    /// A dependency is not installed.
    #[error("dependency {dependency:?} of package {name:?} is not installed at {}", .path.display())]
    MissingDependency {
        /// The package.
        name: String,
        /// The dependency.
        dependency: String,
        /// Where it should be.
        path: PathBuf,
    },
    /// A file-system step failed.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The packaging script could not run.
    #[error("Running packaging script of {name}: {reason}")]
    Run {
        /// The package.
        name: String,
        /// Why.
        reason: String,
    },
    /// The packaging script failed.
    #[error("Running packaging script of {name}: {status}; Stdout: {stdout}, Stderr: {stderr}")]
    Packaging {
        /// The package.
        name: String,
        /// `exited with status N`.
        status: String,
        /// The tail of its stdout.
        stdout: String,
        /// The tail of its stderr.
        stderr: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CompileError {
    let what = what.into();
    move |source| CompileError::Io { what, source }
}

/// Compiles packages on one VM.
#[derive(Debug, Clone)]
pub struct Compiler {
    layout: Layout,
    env: BTreeMap<String, String>,
    timeout: Option<Duration>,
}

impl Compiler {
    /// Compiles in `layout` with [`super::default_env`] and no timeout (as the agent).
    pub fn new(layout: Layout) -> Self {
        Self {
            layout,
            env: super::default_env(),
            timeout: None,
        }
    }

    /// Replaces the base environment of the packaging script.
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Self {
        self.env = env;
        self
    }

    /// Kills a packaging script that runs longer than `timeout`.
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Compiles one package (see the module documentation).
    pub async fn compile(
        &self,
        source: PackageSource,
        req: &CompileRequest,
    ) -> Result<CompiledArchive, CompileError> {
        check_name("package", &req.name)?;
        if req.version.is_empty() {
            return Err(CompileError::EmptyVersion(req.name.clone()));
        }
        for dep in &req.dependencies {
            check_name("package", dep)?;
            let path = self.layout.package_dir(dep);
            if !path.is_dir() {
                return Err(CompileError::MissingDependency {
                    name: req.name.clone(),
                    dependency: dep.clone(),
                    path,
                });
            }
        }
        let digest: MultiDigest = req.digest.parse().map_err(|source| CompileError::Digest {
            name: req.name.clone(),
            source,
        })?;
        let bytes = match source {
            PackageSource::Bytes(b) => b,
            PackageSource::Path(p) => tokio::fs::read(&p)
                .await
                .map_err(io(format!("reading {}", p.display())))?,
        };
        let (bytes, verified) = blocking(move || {
            let r = digest.verify(&bytes);
            (bytes, r)
        })
        .await?;
        verified.map_err(|source| CompileError::Digest {
            name: req.name.clone(),
            source,
        })?;

        let compile_dir = self.layout.compile_dir().join(&req.name);
        let install_dir = self
            .layout
            .data_package_dir(&req.name, &sha1_hex(req.version.as_bytes()));
        let enable = self.layout.package_dir(&req.name);
        let result = self
            .compile_in(bytes, req, &compile_dir, &install_dir, &enable)
            .await;
        // Leave nothing behind, as the agent (which also wipes the dependencies).
        let _ = tokio::fs::remove_dir_all(&compile_dir).await;
        if std::fs::read_link(&enable).is_ok() {
            let _ = tokio::fs::remove_file(&enable).await;
        }
        let _ = tokio::fs::remove_dir_all(&install_dir).await;
        result
    }

    async fn compile_in(
        &self,
        bytes: Vec<u8>,
        req: &CompileRequest,
        compile_dir: &Path,
        install_dir: &Path,
        enable: &Path,
    ) -> Result<CompiledArchive, CompileError> {
        let compressed = is_gzip(&bytes);
        let dir = compile_dir.to_path_buf();
        blocking(move || unpack_fresh(&bytes, &dir)).await??;

        let _ = std::fs::remove_dir_all(install_dir);
        std::fs::create_dir_all(install_dir)
            .map_err(io(format!("creating {}", install_dir.display())))?;
        let target = Path::new("..").join(
            install_dir
                .strip_prefix(self.layout.base())
                .unwrap_or(install_dir),
        );
        replace_symlink(&target, enable).map_err(io(format!("enabling {}", enable.display())))?;

        if compile_dir.join("packaging").exists() {
            self.run_packaging(req, compile_dir, enable).await?;
        }

        let dir = install_dir.to_path_buf();
        let tarball = blocking(move || pack(&dir, compressed)).await??;
        let (sha1, sha256) = (sha1_hex(&tarball), sha256_hex(&tarball));
        Ok(CompiledArchive {
            tarball,
            sha1,
            sha256,
            compressed,
        })
    }

    async fn run_packaging(
        &self,
        req: &CompileRequest,
        compile_dir: &Path,
        enable: &Path,
    ) -> Result<(), CompileError> {
        let log_dir = self.layout.sys_log_dir().join("compilation");
        let _ = std::fs::remove_dir_all(&log_dir);
        std::fs::create_dir_all(&log_dir).map_err(io(format!("creating {}", log_dir.display())))?;
        let stdout_log = log_dir.join("packaging.stdout.log");
        let stderr_log = log_dir.join("packaging.stderr.log");
        let out = std::fs::File::create(&stdout_log)
            .map_err(io(format!("creating {}", stdout_log.display())))?;
        let err = std::fs::File::create(&stderr_log)
            .map_err(io(format!("creating {}", stderr_log.display())))?;

        let mut env = self.env.clone();
        let path = |p: &Path| p.to_string_lossy().into_owned();
        env.insert("BOSH_COMPILE_TARGET".into(), path(compile_dir));
        env.insert("BOSH_INSTALL_TARGET".into(), path(enable));
        env.insert("BOSH_PACKAGE_NAME".into(), req.name.clone());
        env.insert("BOSH_PACKAGE_VERSION".into(), req.version.clone());
        env.insert(
            "BOSH_PACKAGES_DIR".into(),
            path(&self.layout.packages_dir()),
        );
        let mut cmd = exec::command("bash", &env);
        cmd.args(["-x", "packaging"])
            .current_dir(compile_dir)
            .stdout(out)
            .stderr(err);
        tracing::info!(package = %req.name, version = %req.version, "running packaging script");
        let done = exec::run(
            cmd,
            false,
            self.timeout,
            std::future::pending(),
            Duration::from_secs(10),
        )
        .await
        .map_err(|e| CompileError::Run {
            name: req.name.clone(),
            reason: e.to_string(),
        })?;
        if done.status.success() {
            return Ok(());
        }
        let tail = |p: &Path| exec::tail_text(&std::fs::read(p).unwrap_or_default(), OUTPUT_TAIL);
        Err(CompileError::Packaging {
            name: req.name.clone(),
            status: exec::describe_status(&done.status),
            stdout: tail(&stdout_log),
            stderr: tail(&stderr_log),
        })
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CompileError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CompileError::Io {
            what: "background task".into(),
            source: std::io::Error::other(e.to_string()),
        })
}

/// Whether `bytes` start with the gzip magic number.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// Unpacks a tar or tar.gz into `dir`, which is emptied first. Entries that would land
/// outside `dir` are refused by `tar`.
pub fn unpack_into(bytes: &[u8], dir: &Path) -> std::io::Result<()> {
    let reader: Box<dyn Read> = if is_gzip(bytes) {
        Box::new(flate2::read::GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    };
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    archive.unpack(dir)
}

/// Unpacks into `dir` through a sibling temporary directory, then renames it into place.
fn unpack_fresh(bytes: &[u8], dir: &Path) -> Result<(), CompileError> {
    let tmp = PathBuf::from(format!("{}-bosh-agent-unpack", dir.display()));
    for d in [dir, tmp.as_path()] {
        match std::fs::remove_dir_all(d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(format!("removing {}", d.display()))(e)),
        }
    }
    std::fs::create_dir_all(&tmp).map_err(io(format!("creating {}", tmp.display())))?;
    if let Err(e) = unpack_into(bytes, &tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(io("uncompressing package source")(e));
    }
    std::fs::rename(&tmp, dir).map_err(io(format!("moving into {}", dir.display())))
}

/// Archives the contents of `dir` (a `./` entry, then relative paths; symlinks kept as
/// symlinks), gzipped if `compressed`.
pub fn pack(dir: &Path, compressed: bool) -> Result<Vec<u8>, CompileError> {
    fn build<W: Write>(w: W, dir: &Path) -> std::io::Result<W> {
        let mut b = tar::Builder::new(w);
        b.follow_symlinks(false);
        b.mode(tar::HeaderMode::Complete);
        b.append_dir_all(".", dir)?;
        b.into_inner()
    }
    let err = io("compressing compiled package");
    if compressed {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        build(gz, dir).and_then(|gz| gz.finish()).map_err(err)
    } else {
        build(Vec::new(), dir).map_err(err)
    }
}

/// Points `link` at `target`, replacing what is there (a symlink atomically; a directory
/// is removed first).
pub fn replace_symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    if let Some(parent) = link.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(link)
        && meta.is_dir()
    {
        std::fs::remove_dir_all(link)?;
    }
    let name = link
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = link.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_and_unpack_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("bin")).unwrap();
        std::fs::write(src.join("bin/x"), "x").unwrap();
        std::os::unix::fs::symlink("bin/x", src.join("link")).unwrap();
        for compressed in [true, false] {
            let bytes = pack(&src, compressed).unwrap();
            assert_eq!(is_gzip(&bytes), compressed);
            let out = dir.path().join(format!("out-{compressed}"));
            std::fs::create_dir_all(&out).unwrap();
            unpack_into(&bytes, &out).unwrap();
            assert_eq!(std::fs::read_to_string(out.join("bin/x")).unwrap(), "x");
            assert_eq!(
                std::fs::read_link(out.join("link")).unwrap(),
                Path::new("bin/x")
            );
        }
        let names: Vec<String> =
            tar::Archive::new(flate2::read::GzDecoder::new(&pack(&src, true).unwrap()[..]))
                .entries()
                .unwrap()
                .map(|e| e.unwrap().path().unwrap().display().to_string())
                .collect();
        assert_eq!(names, ["./", "bin", "bin/x", "link"]);
    }

    #[test]
    fn garbage_does_not_unpack() {
        let dir = tempfile::tempdir().unwrap();
        assert!(unpack_into(b"\x1f\x8bnot gzip at all", dir.path()).is_err());
    }
}
