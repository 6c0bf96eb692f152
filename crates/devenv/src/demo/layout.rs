//! Where everything of the demo lives in its state directory.

use std::path::{Path, PathBuf};

use crate::LocalDirector;

/// The paths of a demo state directory (see the module documentation).
#[derive(Debug, Clone)]
pub struct DemoLayout {
    root: PathBuf,
}

impl DemoLayout {
    /// The layout of `root`, made absolute (it ends up in configuration files that other
    /// processes read from other working directories).
    pub fn new(root: &Path) -> std::io::Result<DemoLayout> {
        Ok(DemoLayout {
            root: std::path::absolute(root)?,
        })
    }

    /// The state directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The director on the local cloud whose files are in the state directory.
    pub fn director(&self) -> LocalDirector {
        LocalDirector::new(&self.root)
    }

    /// etcd's data and the apiserver's credentials, logs and kubeconfig.
    pub fn control_plane(&self) -> PathBuf {
        self.root.join("control-plane")
    }

    /// The kubeconfig of the demo's cluster (the same path on every run).
    pub fn kubeconfig(&self) -> PathBuf {
        self.control_plane().join("kubeconfig")
    }

    /// The release and stemcell tarballs.
    pub fn artifacts(&self) -> PathBuf {
        self.root.join("artifacts")
    }

    /// The generated Release and Stemcell objects.
    pub fn manifests(&self) -> PathBuf {
        self.root.join("manifests")
    }

    /// `kubosh controller`'s log.
    pub fn controller_log(&self) -> PathBuf {
        self.root.join("controller.log")
    }

    /// The ports of the last run.
    pub fn ports(&self) -> PathBuf {
        self.root.join("ports.json")
    }

    /// The lock one running demo holds.
    pub fn lock(&self) -> PathBuf {
        self.root.join("lock")
    }
}
