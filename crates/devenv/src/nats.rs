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
    dir: PathBuf,
    /// Removed when the server is dropped, for a server started in a directory of its own.
    _temporary: Option<tempfile::TempDir>,
    /// The generated part of the configuration (listen address, TLS), before the caller's.
    base_config: String,
}

impl NatsServer {
    /// Starts nats-server on a free port, its configuration and log in a temporary directory
    /// removed with it. `extra_config` is appended to the generated configuration file (for
    /// `authorization` blocks and the like).
    pub fn start(tls: Option<&NatsTls>, extra_config: &str) -> Result<NatsServer, NatsError> {
        let temporary = tempfile::Builder::new().prefix("kubosh-nats-").tempdir()?;
        let mut server = NatsServer::start_in(temporary.path(), free_port()?, tls, extra_config)?;
        server._temporary = Some(temporary);
        Ok(server)
    }

    /// Starts nats-server on `port` with its configuration (`nats.conf`) and log
    /// (`nats.log`, appended) in `dir`, which outlives it: relative paths in `extra_config`
    /// (an `include`, a `pid_file`) are relative to `dir`.
    pub fn start_in(
        dir: &Path,
        port: u16,
        tls: Option<&NatsTls>,
        extra_config: &str,
    ) -> Result<NatsServer, NatsError> {
        let bin = binary("nats-server")?;
        std::fs::create_dir_all(dir)?;
        let mut conf = format!("listen: 127.0.0.1:{port}\n");
        if let Some(t) = tls {
            let write = |name: &str, text: &str| -> std::io::Result<String> {
                let p = dir.join(name);
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
        let base_config = conf.clone();
        conf.push_str(extra_config);
        let conf_path = dir.join("nats.conf");
        std::fs::write(&conf_path, conf)?;
        let log = dir.join("nats.log");
        let out = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log)?;
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
            dir: dir.to_path_buf(),
            _temporary: None,
            base_config,
        };
        server.wait_listening(&log)?;
        Ok(server)
    }

    /// Replaces the caller's part of the configuration and has the server reload it
    /// (SIGHUP), waiting until it says it did.
    pub fn reload(&self, extra_config: &str) -> Result<(), NatsError> {
        let log = self.dir.join("nats.log");
        let reloads = |log: &Path| {
            std::fs::read_to_string(log)
                .map(|t| t.matches("Reloaded server configuration").count())
                .unwrap_or(0)
        };
        let before = reloads(&log);
        std::fs::write(
            self.dir.join("nats.conf"),
            format!("{}{extra_config}", self.base_config),
        )?;
        let pid = libc::pid_t::try_from(self.child.id())
            .map_err(|_| NatsError::Io(std::io::Error::other("nats-server pid out of range")))?;
        // SAFETY: kill(2) with a pid of our own child and a valid signal number.
        if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
            return Err(NatsError::Io(std::io::Error::last_os_error()));
        }
        let within = Duration::from_secs(10);
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if reloads(&log) > before {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(NatsError::NotReady(within, log))
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
        &self.dir
    }

    /// True while the server runs.
    pub fn is_running(&mut self) -> bool {
        self.child.is_running()
    }

    /// Stops the server (SIGTERM, then SIGKILL after a few seconds); dropping it does the same.
    pub fn stop(&mut self) {
        self.child.stop(Duration::from_secs(5));
    }
}

/// A message bus as a BOSH director sets one up: a CA, a nats-server whose certificate CN is
/// `default.nats.bosh-internal`, client certificates mapped to users with BOSH's production
/// permissions (bosh-nats-sync's `auth.json`: the director publishes `agent.*` and
/// subscribes `director.>`; the health monitor subscribes `hm.*`; each agent may only
/// subscribe `agent.<id>` and publish its own `hm.agent.*.<id>` and `director.*.<id>.*`).
pub struct BoshNats {
    ca: kubosh_base::pki::Ca,
    /// The running server.
    pub server: NatsServer,
    /// Server certificate, key and CA files.
    files: [String; 3],
    /// Agents allowed in.
    agents: std::sync::Mutex<Vec<String>>,
    _dir: tempfile::TempDir,
}

/// The server's TLS and authorization configuration for these agents.
fn bosh_config(files: &[String; 3], agents: &[String]) -> String {
    let agent_users: Vec<String> = agents
        .iter()
        .map(|id| {
            format!(
                r#"{{ user: "CN={id}.agent.bosh-internal", permissions: {{
                 publish: ["hm.agent.heartbeat.{id}", "hm.agent.alert.{id}", "hm.agent.shutdown.{id}", "director.*.{id}.*"],
                 subscribe: ["agent.{id}"] }} }}"#
            )
        })
        .collect();
    format!(
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
        files[0],
        files[1],
        files[2],
        agent_users.join("\n    "),
    )
}

/// Why [`BoshNats`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum BoshNatsError {
    /// Issuing a certificate failed.
    #[error(transparent)]
    Pki(#[from] kubosh_base::pki::PkiError),
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
        let ca = kubosh_base::pki::Ca::new("nats-ca")?;
        let server = ca.issue(&kubosh_base::pki::Leaf::loopback_server(
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
        let files = [
            write("server.crt", &server.cert_pem)?,
            write("server.key", &server.key_pem)?,
            write("ca.crt", &ca.cert_pem())?,
        ];
        let agents: Vec<String> = agent_ids.iter().map(|id| id.to_string()).collect();
        let server = NatsServer::start(None, &bosh_config(&files, &agents))?;
        Ok(BoshNats {
            ca,
            server,
            files,
            agents: std::sync::Mutex::new(agents),
            _dir: dir,
        })
    }

    /// Lets agent `id` in (what bosh-nats-sync does when the director creates a VM) and
    /// returns its identity.
    pub fn allow_agent(&self, id: &str) -> Result<ClientPem, BoshNatsError> {
        let mut agents = self
            .agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !agents.iter().any(|a| a == id) {
            agents.push(id.to_string());
            self.server.reload(&bosh_config(&self.files, &agents))?;
        }
        drop(agents);
        self.agent(id)
    }

    /// A client identity with common name `cn`.
    pub fn client(&self, cn: &str) -> Result<ClientPem, BoshNatsError> {
        let c = self.ca.issue(&kubosh_base::pki::Leaf {
            common_name: cn,
            client: true,
            ..kubosh_base::pki::Leaf::default()
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
