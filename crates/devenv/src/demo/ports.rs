//! The demo's ports, kept between runs: the agents' settings name the NATS port, so it must
//! not move; the others stay put when they can, so a `kubectl` that read the kubeconfig
//! keeps working.

use std::io;
use std::net::TcpListener;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::ControlPlanePorts;
use crate::process::free_port;

/// The loopback ports of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemoPorts {
    /// etcd's client port.
    pub etcd_client: u16,
    /// etcd's peer port.
    pub etcd_peer: u16,
    /// kube-apiserver's port.
    pub apiserver: u16,
    /// nats-server's port, written into every VM's agent settings.
    pub nats: u16,
    /// The controller's `/metrics`, `/healthz` and `/readyz` (0 in a file of a run before
    /// it had one: then a fresh one). Never its default, port 8080 on every address, which
    /// the example's jobs listen on.
    #[serde(default)]
    pub metrics: u16,
    /// The controller's ops API (`kubectl bosh logs`, `ssh`), on every address so
    /// kube-apiserver reaches it at this machine's address (0 in a file of a run before it
    /// had one: then a fresh one).
    #[serde(default)]
    pub ops_api: u16,
}

/// Why the ports could not be chosen.
#[derive(Debug, thiserror::Error)]
pub enum PortsError {
    /// The NATS port of the last run is taken by another process.
    #[error(
        "port {0} (this state directory's NATS server, which its VMs' agents dial) is in use by another process; stop it, or start over with another --state-dir"
    )]
    NatsPortTaken(u16),
    /// No port could be found, or the file not written.
    #[error("choosing ports ({path}): {source}")]
    Io {
        /// The ports file.
        path: String,
        /// The underlying error.
        source: io::Error,
    },
}

impl DemoPorts {
    /// The ports in `file` (from the last run) where they are free, fresh ones for the rest
    /// and for a first run; the result is written back. The NATS port never changes once
    /// chosen: when another process holds it, this fails.
    pub fn choose(file: &Path) -> Result<DemoPorts, PortsError> {
        let failed = |source| PortsError::Io {
            path: file.display().to_string(),
            source,
        };
        let last = DemoPorts::read(file);
        let nats = match last.map(|l| l.nats) {
            Some(p) if !is_free(p) => return Err(PortsError::NatsPortTaken(p)),
            Some(p) => p,
            None => fresh(&[]).map_err(failed)?,
        };
        let mut chosen = vec![nats];
        let previous = [
            last.map(|l| l.etcd_client),
            last.map(|l| l.etcd_peer),
            last.map(|l| l.apiserver),
            last.map(|l| l.metrics),
            last.map(|l| l.ops_api),
        ];
        for port in previous {
            let port = match port.filter(|&p| is_free(p) && !chosen.contains(&p)) {
                Some(p) => p,
                None => fresh(&chosen).map_err(failed)?,
            };
            chosen.push(port);
        }
        let ports = DemoPorts {
            nats,
            etcd_client: chosen[1],
            etcd_peer: chosen[2],
            apiserver: chosen[3],
            metrics: chosen[4],
            ops_api: chosen[5],
        };
        let json = serde_json::to_vec_pretty(&ports).map_err(|e| failed(e.into()))?;
        std::fs::write(file, json).map_err(failed)?;
        Ok(ports)
    }

    /// The ports `file` holds (as [`DemoPorts::choose`] wrote them), if it holds any.
    pub fn read(file: &Path) -> Option<DemoPorts> {
        let bytes = std::fs::read(file).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The control plane's share.
    pub fn control_plane(&self) -> ControlPlanePorts {
        ControlPlanePorts {
            etcd_client: self.etcd_client,
            etcd_peer: self.etcd_peer,
            apiserver: self.apiserver,
        }
    }

    /// All of them, for checks that nothing listens any more.
    pub fn all(&self) -> [u16; 6] {
        [
            self.etcd_client,
            self.etcd_peer,
            self.apiserver,
            self.nats,
            self.metrics,
            self.ops_api,
        ]
    }
}

/// A free port none of `taken`.
fn fresh(taken: &[u16]) -> io::Result<u16> {
    loop {
        let port = free_port()?;
        if !taken.contains(&port) {
            return Ok(port);
        }
    }
}

fn is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok() && TcpListener::bind(("0.0.0.0", port)).is_ok()
}
