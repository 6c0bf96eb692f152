//! A director on the local cloud, as files in one directory: the NATS PKI (a CA whose key
//! signs each new agent's certificate), nats-server confined as BOSH confines agents, the
//! local cloud's configuration (`cpi.json`: `kubosh cpi`, whose VMs are agent processes)
//! and the director configuration `kubosh deploy` and `kubosh controller` read
//! (`director.yml`). The e2e tests and `kubosh up` share it.
//!
//! ```text
//! <dir>/director.yml  cpi.json          the configurations (paths relative to <dir>)
//!       pki/          ca.crt ca.key     the NATS CA; nats.crt/.key, director.crt/.key
//!       nats/         nats.conf nats.log nats.pid authorization.json (confined only)
//!       cloud/        the local cloud's VMs, disks and stemcells
//!       blobs/        the blobstore, shared by the director and the agents
//!       state/        the director's state (kubosh deploy) or scratch space (controller)
//! ```

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use kubosh_base::pki::{Ca, CertifiedKey, Leaf, PkiError};

use super::files;
use super::nats::{NatsError, NatsServer};

/// Why a director's files could not be written or its NATS started.
#[derive(Debug, thiserror::Error)]
pub enum DirectorError {
    /// A certificate could not be issued or read.
    #[error("NATS certificates: {0}")]
    Pki(#[from] PkiError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The NATS authorization could not be built.
    #[error("NATS authorization: {0}")]
    Authorization(#[from] kubosh_bosh::agent::nats_auth::NatsAuthError),
    /// nats-server did not start.
    #[error(transparent)]
    Nats(#[from] NatsError),
}

/// The NATS identities of a director: a CA (its key signs every agent's certificate, so it
/// is kept as long as the agents are), the server's certificate
/// (`default.nats.bosh-internal`, valid for 127.0.0.1) and the director's client
/// certificate (`default.director.bosh-internal`). `Debug` prints no key.
pub struct NatsPki {
    ca_cert_pem: String,
    ca_key_pem: String,
    server: CertifiedKey,
    director: CertifiedKey,
}

impl std::fmt::Debug for NatsPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsPki").finish_non_exhaustive()
    }
}

impl NatsPki {
    /// The names of the files [`NatsPki::write_into`] writes (under `<dir>/pki` for
    /// [`NatsPki::write`]), in [`NatsPki::files`] order: the CA's certificate and key,
    /// nats-server's, the director's.
    pub const FILES: [&str; 6] = [
        "ca.crt",
        "ca.key",
        "nats.crt",
        "nats.key",
        "director.crt",
        "director.key",
    ];

    /// A new CA and the certificates it issues, nats-server's valid for 127.0.0.1.
    pub fn generate() -> Result<NatsPki, DirectorError> {
        NatsPki::generate_for(&["127.0.0.1"])
    }

    /// A new CA and the certificates it issues, nats-server's valid for `hosts` (the
    /// addresses and DNS names agents and the director reach it by).
    pub fn generate_for(hosts: &[&str]) -> Result<NatsPki, DirectorError> {
        // rcgen directly: `pki::Ca` keeps its key to itself, and the director configuration
        // needs it as PEM to sign agents' certificates.
        let key = rcgen::KeyPair::generate().map_err(PkiError::from)?;
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(PkiError::from)?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "nats-ca");
        let ca_cert_pem = params.self_signed(&key).map_err(PkiError::from)?.pem();
        let ca_key_pem = key.serialize_pem();
        let ca = Ca::from_pem(&ca_cert_pem, &ca_key_pem)?;
        Ok(NatsPki {
            server: ca.issue(&Leaf {
                alternative_names: hosts,
                ..Leaf::loopback_server("default.nats.bosh-internal")
            })?,
            director: ca.issue(&Leaf {
                common_name: "default.director.bosh-internal",
                client: true,
                ..Leaf::default()
            })?,
            ca_cert_pem,
            ca_key_pem,
        })
    }

    /// The PKI kept in `<dir>/pki`, or a new one written there; true when it was kept.
    pub fn load_or_generate(dir: &Path) -> Result<(NatsPki, bool), DirectorError> {
        let pki = dir.join("pki");
        let read = |name: &str| {
            let path = pki.join(name);
            std::fs::read_to_string(&path).map_err(|source| DirectorError::File { path, source })
        };
        if Self::FILES.iter().all(|f| pki.join(f).is_file()) {
            let loaded = NatsPki {
                ca_cert_pem: read("ca.crt")?,
                ca_key_pem: read("ca.key")?,
                server: CertifiedKey {
                    cert_pem: read("nats.crt")?,
                    key_pem: read("nats.key")?,
                },
                director: CertifiedKey {
                    cert_pem: read("director.crt")?,
                    key_pem: read("director.key")?,
                },
            };
            // A CA whose key does not match fails here rather than at the first agent.
            Ca::from_pem(&loaded.ca_cert_pem, &loaded.ca_key_pem)?;
            return Ok((loaded, true));
        }
        let generated = NatsPki::generate()?;
        generated.write(dir)?;
        Ok((generated, false))
    }

    /// Writes the PKI into `<dir>/pki` (keys readable by their owner only).
    pub fn write(&self, dir: &Path) -> Result<(), DirectorError> {
        self.write_into(&dir.join("pki"))
    }

    /// The authorization file nats-server starts with: the director's and the health
    /// monitor's users (`CN=default.hm.bosh-internal`, the identity the director's CA issues
    /// it) and no agent yet; the director adds each agent as it creates its VM.
    pub fn authorization_seed(&self) -> Result<serde_json::Value, DirectorError> {
        let director = kubosh_base::pki::subject_dn(&self.director.cert_pem)?;
        Ok(kubosh_bosh::agent::nats_auth::authorization(
            &director,
            "CN=default.hm.bosh-internal",
            &[],
        )?)
    }

    /// Writes the PKI's files ([`NatsPki::FILES`]) into `pki`, which is created.
    pub fn write_into(&self, pki: &Path) -> Result<(), DirectorError> {
        create_dir(pki)?;
        for (name, text) in Self::FILES.iter().zip(self.files()) {
            write_private(&pki.join(name), text)?;
        }
        Ok(())
    }

    fn files(&self) -> [&str; 6] {
        [
            &self.ca_cert_pem,
            &self.ca_key_pem,
            &self.server.cert_pem,
            &self.server.key_pem,
            &self.director.cert_pem,
            &self.director.key_pem,
        ]
    }

    /// The CA certificate, PEM.
    pub fn ca_cert_pem(&self) -> &str {
        &self.ca_cert_pem
    }

    /// The CA's private key, PEM: never print it.
    pub fn ca_key_pem(&self) -> &str {
        &self.ca_key_pem
    }

    /// nats-server's certificate and key.
    pub fn server(&self) -> &CertifiedKey {
        &self.server
    }

    /// The director's client certificate and key.
    pub fn director(&self) -> &CertifiedKey {
        &self.director
    }
}

/// How the director reaches its cloud and its agents: what [`LocalDirector::write_configs`]
/// writes into `cpi.json` and `director.yml`.
#[derive(Debug, Clone)]
pub struct DirectorSettings {
    /// The `kubosh` executable: the CPI (`kubosh cpi`) and, through `{kubosh}`, the agent.
    pub kubosh: PathBuf,
    /// The NATS URL the director and the agents use.
    pub nats_url: String,
    /// The local cloud's agent command (placeholders as `kubosh_cloud::local::AgentConfig`).
    pub agent_command: Vec<String>,
    /// Each agent's log filter (`KUBOSH_LOG`).
    pub agent_log: String,
    /// Keep each agent to its own subjects on NATS (`nats.authorization`, see
    /// [`LocalDirector::start_confined_nats`]).
    pub confined: bool,
    /// Per CPI call, at most.
    pub cpi_timeout_seconds: u64,
    /// How long the director waits for a new VM's agent.
    pub agent_wait_timeout_seconds: u64,
    /// How long recovery waits for an agent of a VM a killed run left.
    pub recovery_wait_seconds: u64,
}

/// kubosh's agent in a VM of the local cloud, its VM directory mounted on `/var/vcap` so
/// real releases' scripts find their files (`--bind-base`: as root, or in a user namespace
/// of its own when `/var/vcap` exists).
pub fn kubosh_agent_command() -> Vec<String> {
    [
        "{kubosh}",
        "agent",
        "--bind-base",
        "{root}",
        "-b",
        "/var/vcap",
        "-C",
        "{agent_config}",
    ]
    .map(String::from)
    .to_vec()
}

/// A director's directory (see the module documentation for its layout).
#[derive(Debug, Clone)]
pub struct LocalDirector {
    dir: PathBuf,
}

impl LocalDirector {
    /// The director whose files are (or will be) in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> LocalDirector {
        LocalDirector { dir: dir.into() }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The director configuration (`kubosh deploy -d`, `kubosh controller -d`).
    pub fn director_config(&self) -> PathBuf {
        self.dir.join("director.yml")
    }

    /// The local cloud's configuration (`kubosh cpi --config`).
    pub fn cpi_config(&self) -> PathBuf {
        self.dir.join("cpi.json")
    }

    /// The local cloud's state directory (for `kubosh_cloud::local::inventory`).
    pub fn cloud(&self) -> PathBuf {
        self.dir.join("cloud")
    }

    /// The blobstore directory.
    pub fn blobs(&self) -> PathBuf {
        self.dir.join("blobs")
    }

    /// The director's `state_dir`.
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// nats-server's directory (configuration, log, pid file, authorization file).
    pub fn nats_dir(&self) -> PathBuf {
        self.dir.join("nats")
    }

    /// The authorization file the director keeps and nats-server includes.
    pub fn authorization_file(&self) -> PathBuf {
        self.nats_dir().join("authorization.json")
    }

    /// Writes `cpi.json` and `director.yml` (paths in them relative to the directory).
    pub fn write_configs(&self, settings: &DirectorSettings) -> Result<(), DirectorError> {
        let cpi = json!({
            "state_dir": self.cloud(),
            "mbus": settings.nats_url,
            "blobstore": {"provider": "local", "options": {"blobstore_path": self.blobs()}},
            "agent": {
                "command": settings.agent_command,
                "env": {"KUBOSH_LOG": settings.agent_log},
                "stop_timeout_seconds": 20,
            },
        });
        write_json(&self.cpi_config(), &cpi)?;
        let mut nats = json!({
            "url": settings.nats_url,
            "ca_certificate_path": "pki/ca.crt",
            "ca_private_key_path": "pki/ca.key",
            "director_certificate_path": "pki/director.crt",
            "director_private_key_path": "pki/director.key",
        });
        if settings.confined {
            nats["authorization"] = json!({
                "file": "nats/authorization.json", "pid_file": "nats/nats.pid",
            });
        }
        let kubosh = settings.kubosh.display().to_string();
        let cpi_command = json!([kubosh, "cpi", "--config", "cpi.json"]);
        let director = json!({
            "state_dir": "state",
            "cpi": {
                "command": cpi_command,
                "timeout_seconds": settings.cpi_timeout_seconds,
                "properties": {},
            },
            // The local cloud is also a CPI type a CPI config may name: each named CPI of
            // type `local` is another local cloud, its `state_dir` in its properties.
            "cpi_types": {
                "local": {"command": cpi_command, "timeout_seconds": settings.cpi_timeout_seconds},
            },
            "nats": nats,
            "blobstore": {"local": {"path": "blobs"}},
            "engine": {
                "agent_wait_timeout_seconds": settings.agent_wait_timeout_seconds,
                "recovery_wait_seconds": settings.recovery_wait_seconds,
            },
        });
        // JSON is YAML.
        write_json(&self.director_config(), &director)
    }

    /// Starts nats-server on `port` as a director with per-agent permissions runs it: mutual
    /// TLS with `pki`, client certificates mapped to users (`verify_and_map`), the
    /// authorization file the director keeps included (seeded with the director's and the
    /// health monitor's users when it does not exist yet; kept otherwise, with the agents
    /// it lets in) and a pid file the director signals to reload it.
    pub fn start_confined_nats(
        &self,
        port: u16,
        pki: &NatsPki,
    ) -> Result<NatsServer, DirectorError> {
        let nats = self.nats_dir();
        create_dir(&nats)?;
        let authorization = self.authorization_file();
        if !authorization.is_file() {
            write_json(&authorization, &pki.authorization_seed()?)?;
        }
        let pki_file = |name: &str| self.dir.join("pki").join(name);
        // `include` is relative to the configuration's directory (even an absolute-looking
        // path); `pid_file` to the working directory, so it is absolute.
        let config = format!(
            "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify_and_map: true\n  timeout: 5\n}}\npid_file: {:?}\ninclude \"authorization.json\"\n",
            pki_file("nats.crt"),
            pki_file("nats.key"),
            pki_file("ca.crt"),
            nats.join("nats.pid"),
        );
        Ok(NatsServer::start_in(&nats, port, None, &config)?)
    }
}

fn create_dir(dir: &Path) -> Result<(), DirectorError> {
    std::fs::create_dir_all(dir).map_err(|source| DirectorError::File {
        path: dir.to_path_buf(),
        source,
    })
}

fn write_json(path: &Path, value: &Value) -> Result<(), DirectorError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| DirectorError::File {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    std::fs::write(path, text).map_err(|source| DirectorError::File {
        path: path.to_path_buf(),
        source,
    })
}

fn write_private(path: &Path, text: &str) -> Result<(), DirectorError> {
    files::write_private(path, text).map_err(|source| DirectorError::File {
        path: path.to_path_buf(),
        source,
    })
}
