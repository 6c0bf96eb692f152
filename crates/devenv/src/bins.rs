//! Where the control-plane binaries are: `$KUBOSH_BIN_DIR`, else the newest build under
//! `~/.cache/kubosh/bin/` (made by `tools/testbins.sh`). etcd comes from its crates.io crate.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// A binary that is not installed.
#[derive(Debug, thiserror::Error)]
#[error("{name} not found (looked in {looked}); run tools/testbins.sh or set KUBOSH_BIN_DIR")]
pub struct BinError {
    /// The binary's name.
    pub name: String,
    /// Where it was looked for.
    pub looked: String,
}

/// The directory [`install_bins`] chose for this process, before anything else.
static CHOSEN: OnceLock<PathBuf> = OnceLock::new();

/// Where the tools' builds are cached (`KUBOSH_CACHE`, else `~/.cache/kubosh`): the binaries
/// under `bin/`, the node's images under `images/`.
pub(crate) fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("KUBOSH_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kubosh")))
}

/// The directory holding kube-apiserver, kubectl, helm, nats-server, bosh (bosh-cli),
/// bosh-agent (the real agent), gitops-health (tools/gitops-health) and moto_server (a link
/// into its venv).
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = CHOSEN.get() {
        return Some(dir.clone());
    }
    if let Some(dir) = std::env::var_os("KUBOSH_BIN_DIR") {
        return Some(PathBuf::from(dir));
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cache_dir()?.join("bin"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("kube-apiserver").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// The path of a binary: etcd from its crate, the others from [`bin_dir`].
pub fn binary(name: &str) -> Result<PathBuf, BinError> {
    if name == "etcd" {
        let Ok(vendored) = etcd_bin_vendored_linux_amd64::etcd_bin_path();
        if vendored.is_file() {
            return Ok(vendored.to_path_buf());
        }
    }
    let dir = bin_dir();
    if let Some(p) = dir.as_ref().map(|d| d.join(name)).filter(|p| p.is_file()) {
        return Ok(p);
    }
    Err(BinError {
        name: name.to_string(),
        looked: dir.map_or_else(
            || "no KUBOSH_BIN_DIR and no ~/.cache/kubosh/bin".into(),
            |d| d.display().to_string(),
        ),
    })
}

/// A set-up script (the control-plane binaries, the node's images) failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The script is not where the source tree had it.
    #[error("{0} not found: run kubosh from its source tree, or set {1}")]
    NoScript(PathBuf, &'static str),
    /// The script could not run.
    #[error("running {script}: {source}")]
    Run {
        /// The script.
        script: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The script failed.
    #[error("{script} failed ({status}); its output is above")]
    Failed {
        /// The script.
        script: PathBuf,
        /// How it exited.
        status: std::process::ExitStatus,
    },
}

/// Where the binaries come from: `$KUBOSH_BIN_DIR` as it is, or the cached build of
/// `<source tree>/tools/testbins.sh` (the one the tests use: it builds what is missing and
/// prints the directory), made this process's [`bin_dir`]. Each line of the script's
/// progress goes to `progress` as it comes: a first build takes minutes.
pub fn install_bins(
    source_tree: &Path,
    progress: impl FnMut(&str),
) -> Result<PathBuf, InstallError> {
    if let Some(dir) = std::env::var_os("KUBOSH_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let dir = run_setup_script(source_tree, "tools/testbins.sh", "KUBOSH_BIN_DIR", progress)?;
    let _ = CHOSEN.set(dir.clone());
    Ok(dir)
}

/// The directory [`install_images`] chose for this process.
static CHOSEN_IMAGES: OnceLock<PathBuf> = OnceLock::new();

/// Where the node's images come from, as [`install_bins`] does for the binaries:
/// `$KUBOSH_IMAGE_DIR` as it is, or `<source tree>/tools/images.sh`'s cached build (the
/// repository's Dockerfile, NATS, CoreDNS, the Pod sandbox; a first build takes many
/// minutes), made this process's image directory.
pub fn install_images(
    source_tree: &Path,
    progress: impl FnMut(&str),
) -> Result<PathBuf, InstallError> {
    if let Some(dir) = std::env::var_os("KUBOSH_IMAGE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let dir = run_setup_script(source_tree, "tools/images.sh", "KUBOSH_IMAGE_DIR", progress)?;
    let _ = CHOSEN_IMAGES.set(dir.clone());
    Ok(dir)
}

/// The node's image directory: [`install_images`]'s choice, `$KUBOSH_IMAGE_DIR`, else
/// `~/.cache/kubosh/images`.
pub(crate) fn image_dir() -> Option<PathBuf> {
    (CHOSEN_IMAGES.get().cloned())
        .or_else(|| std::env::var_os("KUBOSH_IMAGE_DIR").map(PathBuf::from))
        .or_else(|| Some(cache_dir()?.join("images")))
}

/// Runs `<source tree>/<script>`, which builds what is missing and prints its directory as
/// its last stdout line, its progress on stderr (each line to `progress`); that directory.
fn run_setup_script(
    source_tree: &Path,
    script: &str,
    override_var: &'static str,
    mut progress: impl FnMut(&str),
) -> Result<PathBuf, InstallError> {
    let script = source_tree.join(script);
    if !script.is_file() {
        return Err(InstallError::NoScript(script, override_var));
    }
    let run = |source| InstallError::Run {
        script: script.clone(),
        source,
    };
    let mut child = Command::new(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(run)?;
    let stdout = child.stdout.take().map(|out| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(out), &mut text);
            text
        })
    });
    if let Some(err) = child.stderr.take() {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            progress(&line);
        }
    }
    let status = child.wait().map_err(run)?;
    let printed = stdout
        .and_then(|reader| reader.join().ok())
        .unwrap_or_default();
    let dir = printed.lines().last().map(str::trim).unwrap_or_default();
    if !status.success() || dir.is_empty() {
        return Err(InstallError::Failed { script, status });
    }
    Ok(PathBuf::from(dir))
}
