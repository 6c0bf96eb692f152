//! The demo's processes, started in order from its state directory and stopped in the
//! reverse order: etcd + kube-apiserver, nats-server, the VMs' agents, the controller.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::layout::DemoLayout;
use super::ports::{DemoPorts, PortsError};
use super::vms::{VmError, power_off_vms, power_on_vms};
use crate::director::{DirectorError, DirectorSettings, NatsPki, kubosh_agent_command};
use crate::{ControlPlane, ControlPlaneError, ManagedChild, NatsServer, spawn_logged};

/// Why the demo's stack could not start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Another process runs a demo from the same state directory.
    #[error("another kubosh up is running from {0}")]
    Busy(PathBuf),
    /// A file or directory could not be made.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The ports could not be chosen.
    #[error(transparent)]
    Ports(#[from] PortsError),
    /// etcd or kube-apiserver did not start.
    #[error(transparent)]
    ControlPlane(#[from] ControlPlaneError),
    /// The NATS PKI, nats-server or the director's files failed.
    #[error(transparent)]
    Director(#[from] DirectorError),
    /// VMs could not be booted.
    #[error(transparent)]
    Vms(#[from] VmError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DemoError {
    let what = what.into();
    move |source| DemoError::Io { what, source }
}

/// How long the controller gets to finish the steps in flight when asked to stop.
const CONTROLLER_GRACE: Duration = Duration::from_secs(60);

/// A part of the stack that ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// etcd or kube-apiserver.
    ControlPlane,
    /// nats-server.
    Nats,
    /// `kubosh controller`, with how it ended.
    Controller(std::process::ExitStatus),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::ControlPlane => f.write_str("etcd or kube-apiserver exited"),
            Ended::Nats => f.write_str("nats-server exited"),
            Ended::Controller(status) => write!(f, "kubosh controller exited ({status})"),
        }
    }
}

/// The running demo. [`Stack::stop`] (or dropping it) stops everything it started.
pub struct Stack {
    layout: DemoLayout,
    kubosh: PathBuf,
    ports: DemoPorts,
    controller: Option<ManagedChild>,
    nats: Option<NatsServer>,
    control_plane: Option<ControlPlane>,
    /// The VMs this start booted.
    booted: Vec<String>,
    /// Set once everything was stopped.
    stopped: bool,
    /// Held while the stack runs: one demo per state directory.
    _lock: File,
}

impl Stack {
    /// Starts etcd + kube-apiserver (with `crds`), nats-server confined as BOSH confines
    /// agents, writes the local cloud's and the director's configuration (`kubosh` being the
    /// executable they run), and boots the VMs an earlier run powered off. Each step is
    /// told to `say` before it starts. Everything kept in the state directory is used
    /// again: etcd's data, credentials, certificates, ports where free, the VMs.
    pub async fn start(
        layout: DemoLayout,
        kubosh: &Path,
        crds: &[CustomResourceDefinition],
        say: &mut dyn FnMut(&str),
    ) -> Result<Stack, DemoError> {
        create_private_dir(layout.root())?;
        let lock = File::create(layout.lock()).map_err(io("create the lock file"))?;
        if lock.try_lock().is_err() {
            return Err(DemoError::Busy(layout.root().to_path_buf()));
        }
        let ports = DemoPorts::choose(&layout.ports())?;
        let mut stack = Stack {
            layout,
            kubosh: kubosh.to_path_buf(),
            ports,
            controller: None,
            nats: None,
            control_plane: None,
            booted: Vec::new(),
            stopped: false,
            _lock: lock,
        };
        let layout = stack.layout.clone();

        let etcd_data = layout.control_plane().join("etcd");
        say(&if etcd_data.is_dir() {
            format!(
                "starting etcd + kube-apiserver on the data of the last run ({})",
                etcd_data.display()
            )
        } else {
            format!(
                "starting etcd + kube-apiserver (new data in {})",
                etcd_data.display()
            )
        });
        create_private_dir(&layout.control_plane())?;
        let mut cp = ControlPlane::start_in(&layout.control_plane(), ports.control_plane()).await?;
        cp.install_crds(crds).await?;
        // A deleted deployment's owned objects (its Instances, task history, variables) go,
        // as on a cluster.
        cp.start_garbage_collector()?;
        say(&format!(
            "kube-apiserver ready at {} with kubosh's CRDs (kube-controller-manager collects garbage)",
            cp.server()
        ));
        stack.control_plane = Some(cp);

        let director = layout.director();
        let (pki, kept) = NatsPki::load_or_generate(director.dir())?;
        say(&format!(
            "starting nats-server on 127.0.0.1:{} (mutual TLS, each agent confined to its own subjects; {} certificates)",
            ports.nats,
            if kept { "the last run's" } else { "new" }
        ));
        stack.nats = Some(director.start_confined_nats(ports.nats, &pki)?);
        director.write_configs(&DirectorSettings {
            kubosh: kubosh.to_path_buf(),
            nats_url: format!("nats://127.0.0.1:{}", ports.nats),
            agent_command: kubosh_agent_command(),
            agent_log: "kubosh=info".into(),
            confined: true,
            cpi_timeout_seconds: 120,
            agent_wait_timeout_seconds: 120,
            recovery_wait_seconds: 10,
        })?;

        let booted = power_on_vms(&director, kubosh).await?;
        if !booted.is_empty() {
            say(&format!(
                "booted the {} VM(s) the last run powered off (the CPI's reboot_vm): {}",
                booted.len(),
                booted.join(", ")
            ));
        }
        stack.booted = booted;
        Ok(stack)
    }

    /// Starts `kubosh controller` for `namespace` with the director's configuration and
    /// `more` arguments, its log (`$KUBOSH_LOG`, else `info`) appended to the state
    /// directory's `controller.log`. Its identity is fixed, so a controller of the next run
    /// takes over the last one's Lease and locks at once.
    pub fn start_controller(&mut self, namespace: &str, more: &[String]) -> Result<(), DemoError> {
        let mut cmd = Command::new(&self.kubosh);
        cmd.arg("controller")
            .arg("-d")
            .arg(self.layout.director().director_config())
            .args(["-n", namespace, "--identity", "kubosh-up"])
            .arg("--metrics-bind-address")
            .arg(format!("127.0.0.1:{}", self.ports.metrics))
            .args(more)
            .env("KUBECONFIG", self.layout.kubeconfig())
            .env(
                "KUBOSH_LOG",
                std::env::var("KUBOSH_LOG").unwrap_or_else(|_| "info".into()),
            );
        let log = self.layout.controller_log();
        let child = spawn_logged(cmd, &log)
            .map_err(io(format!("start kubosh controller ({})", log.display())))?;
        self.controller = Some(child);
        Ok(())
    }

    /// True while the controller started by [`Stack::start_controller`] runs.
    pub fn controller_running(&mut self) -> bool {
        self.controller
            .as_mut()
            .is_some_and(ManagedChild::is_running)
    }

    /// The first part of the running stack found ended by itself (killed, crashed), if any.
    pub fn ended(&mut self) -> Option<Ended> {
        if self.stopped {
            return None;
        }
        if self
            .control_plane
            .as_mut()
            .is_some_and(|cp| !cp.is_running())
        {
            return Some(Ended::ControlPlane);
        }
        if self.nats.as_mut().is_some_and(|n| !n.is_running()) {
            return Some(Ended::Nats);
        }
        let status = self
            .controller
            .as_mut()
            .and_then(ManagedChild::exit_status)?;
        Some(Ended::Controller(status))
    }

    /// The control plane.
    pub fn control_plane(&self) -> Option<&ControlPlane> {
        self.control_plane.as_ref()
    }

    /// The VMs an earlier run powered off that this one booted, by CID.
    pub fn booted_vms(&self) -> &[String] {
        &self.booted
    }

    /// The ports of this run.
    pub fn ports(&self) -> DemoPorts {
        self.ports
    }

    /// The state directory's layout.
    pub fn layout(&self) -> &DemoLayout {
        &self.layout
    }

    /// Stops everything, telling `say` each step: the controller (its steps in flight
    /// finish), the VMs' agents and their jobs (the VMs stay, powered off), nats-server,
    /// kube-apiserver and etcd. Calling it again does nothing.
    pub fn stop(&mut self, say: &mut dyn FnMut(&str)) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        if let Some(mut controller) = self.controller.take() {
            say("stopping the controller");
            controller.stop(CONTROLLER_GRACE);
        }
        say("powering off the VMs (their agents and jobs stop; the VMs stay for the next run)");
        if let Err(e) = power_off_vms(&self.layout.director()) {
            say(&format!("powering off the VMs: {e}"));
        }
        if let Some(mut nats) = self.nats.take() {
            say("stopping nats-server");
            nats.stop();
        }
        if let Some(mut cp) = self.control_plane.take() {
            say("stopping kube-apiserver and etcd");
            cp.stop();
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.stop(&mut |_| {});
    }
}

/// Creates `dir` (and its parents); the state directory holds keys, so only its owner may
/// enter it.
fn create_private_dir(dir: &Path) -> Result<(), DemoError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(format!("create {}", dir.display())))
}
