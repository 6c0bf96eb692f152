//! `create-env` and `delete-env`: the bosh-init single-VM flow (seed 002, `bosh-protocols.md`
//! §5, the research notes on bosh-cli v7), all of it in one place, driven through the edges:
//! the CPI release installed on this machine and run through
//! [`ExternalCpi`](kubosh_cloud::ExternalCpi), the agent over its HTTPS mbus
//! ([`HttpsTransport`](kubosh_transport::agent::HttpsTransport)), templates rendered with the
//! ERB renderer, bosh-cli's state file.
//!
//! The decisions are pure, in [`model`] (no I/O): the manifest split, bosh-cli's state file,
//! Skipping deploy, disk changes, the packages jobs need, the manifest digest. The rest does
//! the I/O:
//!
//! - [`install`]: validating the CPI release, compiling and installing it on this machine
//!   (`~/.kubosh/installations/<id>`), the cloud it gives;
//! - [`store`]: the state file, saved after every change, and kubosh's intents beside it;
//! - `recover.rs`: what a killed run left in the cloud, found through the intents;
//! - `instance.rs`: the old VM's shutdown and deletion, the new VM and its agent;
//! - `disks.rs`: create, attach, mount, migrate, delete unused;
//! - `jobs.rs`: rendering, compiling on the VM with a local compiled-package cache, apply,
//!   start, wait until running;
//! - `deploy.rs` and `delete.rs`: the two commands, stage by stage;
//! - [`events`]: what is shown, as typed events.
//!
//! Of the engine it uses the named locks ([`kubosh_engine::lock::FileLocks`]: one run per
//! state file), the durable file replace of its stores and the VM metadata's time format.

mod delete;
mod deploy;
mod disks;
pub mod events;
pub mod install;
mod instance;
mod jobs;
pub mod model;
mod recover;
pub mod store;

use std::path::{Path, PathBuf};

use serde_json::Value;

pub use delete::delete_env;
pub use deploy::{Deployed, create_env};
pub use events::{EnvEvent, EnvEventSink, StepOutcome, Ui};

use crate::install::InstallError;
use kubosh_cloud::CpiError;
use kubosh_core::validate::Problems;
use kubosh_transport::agent::AgentError;

/// What `create-env`/`delete-env` are given.
#[derive(Debug, Clone)]
pub struct EnvInput {
    /// The manifest file (shown, and the base of relative `file://` URLs).
    pub manifest_path: PathBuf,
    /// The state file.
    pub state_path: PathBuf,
    /// The manifest after ops files and variables, as bosh-cli reads it
    /// (`kubosh_base::yaml::parse_document`: non-string keys and `.inf` kept marked, for the
    /// digest to be bosh-cli's; the deploy works on its `plain` view).
    pub manifest: Value,
    /// kubosh's home (`~/.kubosh`): installations, the compiled-package cache, locks.
    pub home: PathBuf,
    /// `--recreate`: a new VM even when nothing changed.
    pub recreate: bool,
    /// `--recreate-persistent-disks`: new disks, the data migrated.
    pub recreate_persistent_disks: bool,
    /// `--skip-drain`: no drain before the old VM is stopped.
    pub skip_drain: bool,
}

impl EnvInput {
    /// The directory relative `file://` URLs are resolved against.
    fn manifest_dir(&self) -> PathBuf {
        match self.manifest_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// `~/.kubosh/installations/<id>`.
    fn installation_dir(&self, installation_id: &str) -> PathBuf {
        self.home.join("installations").join(installation_id)
    }
}

/// Why create-env or delete-env failed. Texts never carry secrets.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The manifest has problems (all of them, each at its path).
    #[error("Validating deployment manifest:\n{0}")]
    Invalid(Problems),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The state file is not usable.
    #[error("Loading deployment state {path}: {reason}")]
    State {
        /// The state file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A release or stemcell tarball is not usable (the step that read it names it).
    #[error("{reason}")]
    Artifact {
        /// `Validating release 'x'`, `Validating stemcell`.
        what: String,
        /// Why.
        reason: String,
    },
    /// The CPI release is not one kubosh can install.
    #[error("{0}")]
    CpiRelease(String),
    /// Installing the CPI failed.
    #[error(transparent)]
    Install(Box<InstallError>),
    /// Templates could not be rendered.
    #[error("Rendering job templates: {0}")]
    Render(String),
    /// The CPI failed.
    #[error(transparent)]
    Cpi(Box<CpiError>),
    /// The agent failed.
    #[error(transparent)]
    Agent(Box<AgentError>),
    /// The agent's blobstore failed.
    #[error("{0}")]
    Blob(String),
    /// The agent never answered.
    #[error("Waiting for the agent on VM '{vm}' at {mbus}: {reason}")]
    AgentUnreachable {
        /// The VM.
        vm: String,
        /// The mbus URL, without its password.
        mbus: String,
        /// Why.
        reason: String,
    },
    /// The job did not reach `running` in the watch time.
    #[error("Received non-running job state: '{0}'")]
    NotRunning(String),
    /// Another create-env holds the state file.
    #[error("{0}")]
    Locked(String),
    /// Something kubosh does not do.
    #[error("{0}")]
    Unsupported(String),
    /// A step failed: the step's name, then the cause.
    #[error("{step}:\n  {source}")]
    Step {
        /// The step.
        step: String,
        /// The cause.
        source: Box<EnvError>,
    },
}

impl From<InstallError> for EnvError {
    fn from(e: InstallError) -> Self {
        EnvError::Install(Box::new(e))
    }
}

impl From<CpiError> for EnvError {
    fn from(e: CpiError) -> Self {
        EnvError::Cpi(Box::new(e))
    }
}

impl From<AgentError> for EnvError {
    fn from(e: AgentError) -> Self {
        EnvError::Agent(Box::new(e))
    }
}

impl EnvError {
    fn io(path: impl AsRef<Path>, source: std::io::Error) -> EnvError {
        EnvError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// The innermost cause (past the step names).
    pub fn root(&self) -> &EnvError {
        match self {
            EnvError::Step { source, .. } => source.root(),
            other => other,
        }
    }

    /// What the operator can do about it.
    pub fn hint(&self) -> &'static str {
        match self.root() {
            EnvError::Invalid(_) => {
                "Fix the manifest (or the ops files and variables) and run the command again."
            }
            EnvError::Locked(_) => {
                "Wait for the other run to end, or make sure it is gone, and run the command again."
            }
            EnvError::State { .. } => {
                "Restore the state file from a backup, or move it away to start from nothing (what it recorded in the cloud is then not deleted)."
            }
            EnvError::Artifact { .. } | EnvError::CpiRelease(_) | EnvError::Unsupported(_) => {
                "Check the release and stemcell tarballs the manifest names, and run the command again."
            }
            EnvError::AgentUnreachable { .. } => {
                "Check that the VM can reach the mbus address and that cloud_provider.mbus, cloud_provider.cert and the agent's settings agree; running the command again recreates the VM."
            }
            _ => {
                "Run the command again: it continues from what the state file recorded; nothing created is forgotten."
            }
        }
    }
}

/// Runs `body` as a named step of `ui`, the error wrapped with the step's name.
async fn step<T>(
    ui: &Ui,
    name: &str,
    body: impl Future<Output = Result<(T, Option<String>), EnvError>>,
) -> Result<T, EnvError> {
    ui.step(name, body).await.map_err(|e| EnvError::Step {
        step: name.to_string(),
        source: Box::new(e),
    })
}

/// [`step`] for a body that is never skipped.
async fn run<T>(
    ui: &Ui,
    name: &str,
    body: impl Future<Output = Result<T, EnvError>>,
) -> Result<T, EnvError> {
    step(ui, name, async { body.await.map(|v| (v, None)) }).await
}

/// The mbus URL without its password, for messages.
fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((userinfo, host)) => {
                let user = userinfo.split(':').next().unwrap_or("");
                format!("{scheme}://{user}:<redacted>@{host}")
            }
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(
            redact_url("https://mbus:p@ss@10.0.0.6:6868"),
            "https://mbus:<redacted>@10.0.0.6:6868"
        );
        assert_eq!(redact_url("https://10.0.0.6:6868"), "https://10.0.0.6:6868");
    }
}
