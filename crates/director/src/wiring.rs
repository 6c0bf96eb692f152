//! The wiring: the concrete edges of a director built from its configuration: the CPI
//! (`ExternalCpi`), the NATS transport with the CA that signs each new agent's client
//! certificate, the agents' confinement (`NatsAuthorizationFile`), the local blobstore, the
//! ERB renderer, the state directory's store, locks and registries; and the health monitor's
//! ear on the bus.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::DirectorConfig;
use crate::config::CpiSettings;
use kubosh_artifacts::blobstore::LocalBlobstore;
use kubosh_artifacts::render::{Renderer, RendererConfig};
use kubosh_base::pki::{Ca, Leaf};
use kubosh_cloud::{Cloud, CpiCommand, ExternalCpi, PacedCloud, Pacer};
use kubosh_core::manifest::{Cpi, CpiConfig};
use kubosh_engine::agent_access::{AgentAccess, NatsAuthorizationFile};
use kubosh_engine::clouds::{CloudMaker, NamedClouds};
use kubosh_engine::lock::{FileLocks, Lock};
use kubosh_engine::state::{DirDnsRegistry, DirIpRegistry, DirLinkRegistry, DirStore};
use kubosh_engine::vm::mbus_cert_env;
use kubosh_engine::{AgentEnv, Engine, EngineConfig, EventSink};
use kubosh_transport::agent::health::{HealthError, HeartbeatMonitor, hm_identity};
use kubosh_transport::agent::{MbusTls, NatsOptions, NatsTransport};

/// The health monitor's connection name on the server.
const HM_CONNECTION_NAME: &str = "kubosh-health-monitor";

/// The director UUID the CPI sees in its context.
const DIRECTOR_UUID: &str = "kubosh";

impl DirectorConfig {
    /// The health monitor's NATS identity: the file's `hm_certificate`, else a certificate
    /// for `default.hm.bosh-internal` issued now by the CA.
    pub fn hm_tls(&self) -> Result<MbusTls, HealthError> {
        match &self.nats.hm_identity {
            Some((cert, key)) => Ok(MbusTls::new(
                self.nats.ca_certificate.clone(),
                cert.clone(),
                key.expose().clone(),
            )),
            None => hm_identity(&self.nats.ca),
        }
    }

    /// Connects a [`HeartbeatMonitor`] to the message bus with the health monitor's
    /// identity ([`DirectorConfig::hm_tls`]).
    pub async fn heartbeat_monitor(&self) -> Result<HeartbeatMonitor, String> {
        let mut options = NatsOptions::new(
            self.nats.url.clone(),
            self.hm_tls().map_err(|e| e.to_string())?,
        );
        options.name = HM_CONNECTION_NAME.into();
        HeartbeatMonitor::connect(&options)
            .await
            .map_err(|e| format!("cannot listen to heartbeats at {}: {e}", self.nats.url))
    }

    /// The agents' confinement on NATS (`nats.authorization`), if configured.
    pub fn agent_access(&self) -> Option<Arc<NatsAuthorizationFile>> {
        self.nats.authorization.as_ref().map(|a| {
            Arc::new(NatsAuthorizationFile::new(
                a.file.clone(),
                a.pid_file.clone(),
                a.director_subject.clone(),
                a.hm_subject.clone(),
            ))
        })
    }

    /// The engine for deployment `name`: connects to NATS, opens the blobstore; progress goes
    /// to `events`. `parallel_azs` forces the opt-in on. The named clouds are those of
    /// `cpis` (the CPI config given, or the one the director keeps: [`Self::saved_cpi_config`]).
    pub async fn engine(
        &self,
        name: &str,
        events: Arc<dyn EventSink>,
        parallel_azs: bool,
        cpis: CpiConfig,
    ) -> Result<Engine, String> {
        let mut engine = self
            .observed_engine(name, events, parallel_azs, None)
            .await?;
        engine.named_clouds = self.named_clouds(cpis, None)?;
        Ok(engine)
    }

    /// [`DirectorConfig::engine`] without named clouds (the controller makes them per task,
    /// from the namespace's `CpiConfig`s), its CPI telling `observer` of every call
    /// (metrics).
    pub async fn observed_engine(
        &self,
        name: &str,
        events: Arc<dyn EventSink>,
        parallel_azs: bool,
        observer: Option<Arc<dyn kubosh_cloud::CallObserver>>,
    ) -> Result<Engine, String> {
        let cpi = self.cpi_command(&self.cpi, Map::new());
        let transport = NatsTransport::connect(&NatsOptions::new(
            self.nats.url.clone(),
            MbusTls::new(
                self.nats.ca_certificate.clone(),
                self.nats.director_certificate.clone(),
                self.nats.director_private_key.expose().clone(),
            ),
        ))
        .await
        .map_err(|e| format!("cannot connect to NATS at {}: {e}", self.nats.url))?;
        let blobstore = LocalBlobstore::new(&self.blobstore_dir).map_err(|e| e.to_string())?;
        let renderer = Renderer::new(RendererConfig::default()).map_err(|e| e.to_string())?;
        let locks: Arc<dyn Lock> = Arc::new(FileLocks::new(self.state_dir.join("locks")));
        // Every deployment of this director shares one DNS dataset (§4.10).
        let dns_registry = DirDnsRegistry::new(
            self.state_dir.join("dns.json"),
            locks.clone(),
            EngineConfig::default().lock_wait,
        );
        // ... and one table of IP reservations (§4.9).
        let ip_registry = DirIpRegistry::new(
            self.state_dir.join("ips.json"),
            locks.clone(),
            EngineConfig::default().lock_wait,
        );
        // ... and the link providers they share with each other.
        let link_registry = DirLinkRegistry::new(
            self.state_dir.join("links.json"),
            locks.clone(),
            EngineConfig::default().lock_wait,
        );
        Ok(Engine {
            named_clouds: NamedClouds::default(),
            cloud: external_cpi(
                cpi,
                observer.as_ref(),
                Pacer::shared(
                    &format!("{} cpi", self.state_dir.display()),
                    self.cpi.limits,
                ),
            ),
            agents: Arc::new(transport),
            blobstore: Arc::new(blobstore),
            renderer: Arc::new(renderer),
            store: Arc::new(
                DirStore::new(self.deployment_dir(name))
                    .with_shared_stemcells(self.state_dir.join("uploaded-stemcells")),
            ),
            locks: locks.clone(),
            events,
            cancel: Default::default(),
            config: EngineConfig {
                agent_wait_timeout: self.engine.agent_wait_timeout,
                recovery_wait: self.engine.recovery_wait,
                parallel_azs: parallel_azs || self.engine.parallel_azs,
                trusted_certs: self.trusted_certs.clone(),
                agent_env: Some(agent_env(
                    self.nats.ca.clone(),
                    self.nats.ca_certificate.clone(),
                )),
                dns_registry: Some(Arc::new(dns_registry)),
                ip_registry: Some(Arc::new(ip_registry)),
                link_registry: Some(Arc::new(link_registry)),
                snapshots_enabled: self.disks.snapshots_enabled,
                enable_cpi_resize_disk: self.disks.enable_cpi_resize_disk,
                enable_cpi_update_disk: self.disks.enable_cpi_update_disk,
                agent_access: self.agent_access().map(|a| a as Arc<dyn AgentAccess>),
                ..EngineConfig::default()
            },
        })
    }
}

impl DirectorConfig {
    /// How `settings` is run, with `properties` merged over its own.
    fn cpi_command(&self, settings: &CpiSettings, properties: Map<String, Value>) -> CpiCommand {
        let mut merged = settings.properties.expose().clone();
        merged.extend(properties);
        CpiCommand::new(&settings.program)
            .args(settings.args.clone())
            .timeout(settings.timeout)
            .properties(merged)
            .current_dir(&self.base_dir)
    }

    /// Where the director keeps its variables (`((/name))`, one value for all its
    /// deployments), as a vars-store file.
    pub fn director_variables_file(&self) -> std::path::PathBuf {
        self.state_dir.join("director-variables.yml")
    }

    /// The next task id of this director: one more than the last one handed out, kept in
    /// `<state_dir>/last-task-id` and counted under an exclusive lock of that file, so two
    /// commands started together never share an id (the Director's task ids increase the
    /// same way).
    pub fn next_task_id(&self) -> Result<u64, String> {
        use std::io::{Read, Seek, Write};
        let path = self.state_dir.join("last-task-id");
        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
        std::fs::create_dir_all(&self.state_dir).map_err(fail)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(fail)?;
        file.lock().map_err(fail)?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(fail)?;
        let next = text.trim().parse::<u64>().unwrap_or(0) + 1;
        file.set_len(0).map_err(fail)?;
        file.rewind().map_err(fail)?;
        file.write_all(format!("{next}\n").as_bytes())
            .map_err(fail)?;
        file.sync_all().map_err(fail)?;
        Ok(next)
    }

    /// Where the director keeps its CPI config (`kubosh deploy --cpi-config` saves it, as
    /// `bosh update-cpi-config` does): every later command finds the named clouds there.
    pub fn cpi_config_file(&self) -> std::path::PathBuf {
        self.state_dir.join("cpi-config.json")
    }

    /// The CPI config the director keeps (none: no named CPIs).
    pub fn saved_cpi_config(&self) -> Result<CpiConfig, String> {
        let path = self.cpi_config_file();
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CpiConfig::default()),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Keeps `config` as the director's CPI config (readable by its owner only: its
    /// properties may be credentials).
    pub fn save_cpi_config(&self, config: &CpiConfig) -> Result<(), String> {
        let bytes = serde_json::to_vec_pretty(config).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&self.state_dir)
            .and_then(|()| {
                kubosh_engine::state::replace_private_bytes(
                    &self.state_dir,
                    "cpi-config.json",
                    &bytes,
                )
            })
            .map_err(|e| {
                format!(
                    "cannot save the CPI config in {}: {e}",
                    self.state_dir.display()
                )
            })
    }

    /// What makes the clouds of a CPI config's CPIs from the `cpi_types` this director
    /// installs, each call told to `observer`.
    pub fn cloud_maker(
        &self,
        observer: Option<Arc<dyn kubosh_cloud::CallObserver>>,
    ) -> Arc<dyn CloudMaker> {
        Arc::new(InstalledCpis {
            config: self.clone(),
            observer,
        })
    }

    /// The named clouds of `cpis` (empty when it has none): each CPI's type one of
    /// `cpi_types`.
    pub fn named_clouds(
        &self,
        cpis: CpiConfig,
        observer: Option<Arc<dyn kubosh_cloud::CallObserver>>,
    ) -> Result<NamedClouds, String> {
        NamedClouds::make(cpis, self.cloud_maker(observer).as_ref())
    }
}

/// The CPI programs of a director's `cpi_types`, making each CPI config entry's cloud.
struct InstalledCpis {
    config: DirectorConfig,
    observer: Option<Arc<dyn kubosh_cloud::CallObserver>>,
}

impl CloudMaker for InstalledCpis {
    fn make(&self, cpi: &Cpi) -> Result<Arc<dyn Cloud>, String> {
        let Some(settings) = self.config.cpi_types.get(&cpi.kind) else {
            let installed: Vec<&str> = self.config.cpi_types.keys().map(String::as_str).collect();
            return Err(format!(
                "its type '{}' is not a CPI this director installs (cpi_types: {})",
                cpi.kind,
                if installed.is_empty() {
                    "none".to_string()
                } else {
                    installed.join(", ")
                }
            ));
        };
        let command =
            (self.config).cpi_command(settings, cpi.properties.clone().unwrap_or_default());
        let key = format!("{} cpi {}", self.config.state_dir.display(), cpi.name);
        let pacer = Pacer::shared(&key, settings.limits);
        Ok(external_cpi(command, self.observer.as_ref(), pacer))
    }
}

/// A CPI run as `command`, each call told to `observer`, paced by `pacer` (shared by every
/// engine of this process that uses the same cloud).
fn external_cpi(
    command: CpiCommand,
    observer: Option<&Arc<dyn kubosh_cloud::CallObserver>>,
    pacer: Arc<Pacer>,
) -> Arc<dyn Cloud> {
    let cpi = match observer {
        Some(observer) => ExternalCpi::new(command, DIRECTOR_UUID).with_observer(observer.clone()),
        None => ExternalCpi::new(command, DIRECTOR_UUID),
    };
    Arc::new(PacedCloud::new(Arc::new(cpi), pacer))
}

/// Each new agent's NATS identity: a client certificate for `<agent_id>.agent.bosh-internal`
/// signed by the CA, in the VM's env.
fn agent_env(ca: Arc<Ca>, ca_pem: String) -> AgentEnv {
    Arc::new(move |agent_id: &str| {
        let common_name = format!("{agent_id}.agent.bosh-internal");
        let leaf = Leaf {
            common_name: &common_name,
            client: true,
            ..Leaf::default()
        };
        match ca.issue(&leaf) {
            Ok(cert) => mbus_cert_env(&ca_pem, &cert.cert_pem, &cert.key_pem),
            Err(e) => {
                // The agent will not reach NATS and the VM creation times out, naming it.
                tracing::error!(agent_id, error = %e, "cannot issue the agent's NATS certificate");
                Map::new()
            }
        }
    })
}
