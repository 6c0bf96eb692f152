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

/// A message bus as a BOSH director sets one up: a CA, a nats-server whose certificate CN is
/// `default.nats.bosh-internal`, client certificates mapped to users with BOSH's production
/// permissions (bosh-nats-sync's `auth.json`: the director publishes `agent.*` and
/// subscribes `director.>`; the health monitor subscribes `hm.*`; each agent may only
/// subscribe `agent.<id>` and publish its own `hm.agent.*.<id>` and `director.*.<id>.*`).
pub struct BoshNats {
    ca: crate::pki::Ca,
    /// The running server.
    pub server: NatsServer,
}

/// Why [`BoshNats`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum BoshNatsError {
    /// Issuing a certificate failed.
    #[error(transparent)]
    Pki(#[from] crate::pki::PkiError),
    /// nats-server did not start.
    #[error(transparent)]
    Nats(#[from] NatsError),
}

/// PEM text of a client identity.
#[derive(Clone)]
pub struct ClientPem {
    /// The CA that signed the server and every client.
    pub ca_pem: String,
    /// The client certificate.
    pub cert_pem: String,
    /// Its key.
    pub key_pem: String,
}

impl std::fmt::Debug for ClientPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientPem").finish_non_exhaustive()
    }
}

impl BoshNats {
    /// Starts nats-server with users for the director, the health monitor and `agent_ids`.
    pub fn start(agent_ids: &[&str]) -> Result<BoshNats, BoshNatsError> {
        let ca = crate::pki::Ca::new("nats-ca")?;
        let server = ca.issue(&crate::pki::Leaf::loopback_server(
            "default.nats.bosh-internal",
        ))?;
        let dir = tempfile::Builder::new()
            .prefix("kubosh-bosh-nats-")
            .tempdir()
            .map_err(NatsError::from)?;
        let write = |name: &str, text: &str| -> Result<String, NatsError> {
            let p = dir.path().join(name);
            std::fs::write(&p, text)?;
            Ok(p.display().to_string())
        };
        let agent_users: Vec<String> = agent_ids
            .iter()
            .map(|id| {
                format!(
                    r#"{{ user: "CN={id}.agent.bosh-internal", permissions: {{
                 publish: ["hm.agent.heartbeat.{id}", "hm.agent.alert.{id}", "hm.agent.shutdown.{id}", "director.*.{id}.*"],
                 subscribe: ["agent.{id}"] }} }}"#
                )
            })
            .collect();
        let config = format!(
            r#"tls {{
  cert_file: {:?}
  key_file: {:?}
  ca_file: {:?}
  verify_and_map: true
  timeout: 5
}}
authorization {{
  users = [
    {{ user: "CN=default.director.bosh-internal", permissions: {{ publish: ["agent.*", "hm.director.alert"], subscribe: ["director.>"] }} }}
    {{ user: "CN=default.hm.bosh-internal", permissions: {{ publish: [], subscribe: ["hm.agent.heartbeat.*", "hm.agent.alert.*", "hm.agent.shutdown.*", "hm.director.alert"] }} }}
    {}
  ]
}}
"#,
            write("server.crt", &server.cert_pem)?,
            write("server.key", &server.key_pem)?,
            write("ca.crt", &ca.cert_pem())?,
            agent_users.join("\n    "),
        );
        let server = NatsServer::start(None, &config)?;
        Ok(BoshNats { ca, server })
    }

    /// A client identity with common name `cn`.
    pub fn client(&self, cn: &str) -> Result<ClientPem, BoshNatsError> {
        let c = self.ca.issue(&crate::pki::Leaf {
            common_name: cn,
            client: true,
            ..crate::pki::Leaf::default()
        })?;
        Ok(ClientPem {
            ca_pem: self.ca.cert_pem(),
            cert_pem: c.cert_pem,
            key_pem: c.key_pem,
        })
    }

    /// The director's identity (`default.director.bosh-internal`).
    pub fn director(&self) -> Result<ClientPem, BoshNatsError> {
        self.client("default.director.bosh-internal")
    }

    /// The identity of agent `id` (`<id>.agent.bosh-internal`).
    pub fn agent(&self, id: &str) -> Result<ClientPem, BoshNatsError> {
        self.client(&format!("{id}.agent.bosh-internal"))
    }

    /// The server URL.
    pub fn url(&self) -> String {
        self.server.url()
    }
}
