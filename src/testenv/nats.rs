//! A real nats-server on a free loopback port, optionally with (mutual) TLS.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::bins::{BinError, binary};
use super::process::{ManagedChild, free_port, spawn_tied};

/// Why nats-server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// nats-server is not installed.
    #[error(transparent)]
    Binary(#[from] BinError),
    /// A file or process operation failed.
    #[error("nats-server: {0}")]
    Io(#[from] std::io::Error),
    /// The server did not accept connections in time.
    #[error("nats-server did not listen within {0:?}; its log is in {1}")]
    NotReady(Duration, PathBuf),
}

/// TLS settings of the server, PEM text.
#[derive(Debug, Clone)]
pub struct NatsTls {
    /// CA that signed the server certificate and (with `verify`) the client certificates.
    pub ca_pem: String,
    /// Server certificate.
    pub cert_pem: String,
    /// Server private key.
    pub key_pem: String,
    /// Require and verify client certificates (mutual TLS).
    pub verify_clients: bool,
}

/// A running nats-server. Stopped when dropped.
pub struct NatsServer {
    child: ManagedChild,
    port: u16,
    tls: bool,
    dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts nats-server. `extra_config` is appended to the generated configuration file
    /// (for `authorization` blocks and the like).
    pub fn start(tls: Option<&NatsTls>, extra_config: &str) -> Result<NatsServer, NatsError> {
        let bin = binary("nats-server")?;
        let dir = tempfile::Builder::new().prefix("kubosh-nats-").tempdir()?;
        let port = free_port()?;
        let mut conf = format!("listen: 127.0.0.1:{port}\n");
        if let Some(t) = tls {
            let write = |name: &str, text: &str| -> std::io::Result<String> {
                let p = dir.path().join(name);
                std::fs::write(&p, text)?;
                Ok(p.display().to_string())
            };
            conf.push_str(&format!(
                "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify: {}\n  timeout: 5\n}}\n",
                write("server.crt", &t.cert_pem)?,
                write("server.key", &t.key_pem)?,
                write("ca.crt", &t.ca_pem)?,
                t.verify_clients
            ));
        }
        conf.push_str(extra_config);
        let conf_path = dir.path().join("nats.conf");
        std::fs::write(&conf_path, conf)?;
        let log = dir.path().join("nats.log");
        let out = std::fs::File::create(&log)?;
        let mut cmd = Command::new(bin);
        cmd.arg("-c")
            .arg(&conf_path)
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(std::process::Stdio::null());
        let child = spawn_tied(cmd)?;
        let server = NatsServer {
            child,
            port,
            tls: tls.is_some(),
            dir,
        };
        server.wait_listening(&log)?;
        Ok(server)
    }

    fn wait_listening(&self, log: &Path) -> Result<(), NatsError> {
        let within = Duration::from_secs(20);
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(NatsError::NotReady(within, log.to_path_buf()))
    }

    /// The client URL, `nats://127.0.0.1:<port>` (or `tls://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "tls" } else { "nats" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory with the configuration and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// True while the server runs.
    pub fn is_running(&mut self) -> bool {
        self.child.is_running()
    }
}
