//! Where the control-plane binaries are: `$KUBOSH_BIN_DIR`, else the newest build under
//! `~/.cache/kubosh/bin/` (made by `tools/testbins.sh`). etcd comes from its crates.io crate.

use std::path::PathBuf;

/// A binary that is not installed.
#[derive(Debug, thiserror::Error)]
#[error("{name} not found (looked in {looked}); run tools/testbins.sh or set KUBOSH_BIN_DIR")]
pub struct BinError {
    /// The binary's name.
    pub name: String,
    /// Where it was looked for.
    pub looked: String,
}

/// The directory holding kube-apiserver, kubectl, helm, nats-server, bosh (bosh-cli),
/// bosh-agent (the real agent), gitops-health (tools/gitops-health) and moto_server (a link
/// into its venv).
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KUBOSH_BIN_DIR") {
        return Some(PathBuf::from(dir));
    }
    let cache = std::env::var_os("KUBOSH_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kubosh")))?;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cache.join("bin"))
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
