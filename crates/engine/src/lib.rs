//! The deploy executor: runs the Director's `bosh deploy` steps (seed `000`,
//! `bosh-protocols.md` §4.1) against a [`Cloud`], agents reached through a [`Transport`], a
//! [`Blobstore`] and a [`StateStore`], planning with the pure [`kubosh_core::plan`] and reporting
//! progress as BOSH's event log.
//!
//! The executor never parses YAML and the planner never calls the cloud: a deploy takes
//! already-read documents, asks [`kubosh_core::plan`] what to do, and does it.

pub mod agent_access;
pub mod cancel;
pub mod compile;
pub mod delete;
pub mod deploy;
pub mod disks;
pub mod instance;
pub mod lock;
pub mod network;
pub mod pool;
pub mod progress;
pub mod recover;
pub mod resources;
pub mod snapshot;
pub mod source;
pub mod state;
pub mod templates;
pub mod variables;
pub mod vm;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map as JsonMap, Value};

use crate::lock::Lock;
use crate::state::{StateStore, Write};
use kubosh_artifacts::blobstore::{Blobstore, BlobstoreError};
use kubosh_artifacts::release::Release;
use kubosh_cloud::{Cloud, CpiError};
use kubosh_core::plan::changes::Requests;
use kubosh_core::plan::desired::StemcellInfo;
use kubosh_core::validate::Problems;
use kubosh_transport::agent::AgentError;
use kubosh_transport::agent::client::{ClientOptions, Transport};

pub use kubosh_artifacts::render::TemplateRenderer;
pub use progress::{EventLog, EventSink, InstanceName, Milestone, NoEvents};

/// Produces the env entries a new VM's agent needs to reach the message bus (its NATS client
/// certificate: `{"bosh": {"mbus": {"cert": ...}}}`), by agent id.
pub type AgentEnv = Arc<dyn Fn(&str) -> JsonMap<String, Value> + Send + Sync>;

/// What the engine may know of agents without asking them: what each said in its last
/// heartbeat. With it, a deploy whose inputs did not change and whose agents all reported
/// `running` recently makes no call at all.
pub use kubosh_bosh::agent::AgentHealth;
/// The token that stops a task between steps ([`Engine::cancel`]).
pub use tokio_util::sync::CancellationToken;

/// How the engine behaves.
#[derive(Clone)]
pub struct EngineConfig {
    /// Timeouts and retries of agent calls.
    pub agent_options: ClientOptions,
    /// How long a new VM's agent gets to answer `ping` (the Director's `agent_wait_timeout`,
    /// 600 s).
    pub agent_wait_timeout: Duration,
    /// Env added to every new VM (per agent).
    pub agent_env: Option<AgentEnv>,
    /// How many agents are asked for their state at once.
    pub get_state_concurrency: usize,
    /// How many VMs are created at once in "Creating missing vms".
    pub create_vm_concurrency: usize,
    /// Update all AZs of a group in one pass (our opt-in; BOSH updates AZ by AZ).
    pub parallel_azs: bool,
    /// The DNS root domain.
    pub dns_root_domain: String,
    /// How long one deployment lock acquisition waits (the Director: 10 s).
    pub lock_wait: Duration,
    /// How long recovery waits for the agent of a VM whose creation was interrupted.
    pub recovery_wait: Duration,
    /// Heartbeats, when the engine hears them.
    pub health: Option<Arc<dyn AgentHealth>>,
    /// How recent a heartbeat must be to stand in for `get_state` (the health monitor's
    /// agent timeout: 60 s).
    pub health_window: Duration,
    /// Where all deployments share their DNS records; without one, the deployment's records
    /// alone go to its own agents.
    pub dns_registry: Option<Arc<dyn crate::state::DnsRegistry>>,
    /// Where all deployments share their IP reservations; without one, the deployment
    /// assumes its networks are its own.
    pub ip_registry: Option<Arc<dyn crate::state::IpRegistry>>,
    /// The director's trusted CA certificates (PEM bundle; empty for none), sent to every
    /// new VM's agent in `update_settings`.
    pub trusted_certs: String,
    /// Snapshot an instance's persistent disks each time an update stops it (the Director's
    /// `snapshots.enabled`; off by default).
    pub snapshots_enabled: bool,
    /// Grow a disk in place with the CPI's `resize_disk` when only its size grew (the
    /// Director's `enable_cpi_resize_disk`; off by default: a new disk and a copy).
    pub enable_cpi_resize_disk: bool,
    /// Change a disk in place with the CPI's `update_disk` (the Director's
    /// `enable_cpi_update_disk`; off by default).
    pub enable_cpi_update_disk: bool,
    /// Who may use the message bus: each new VM's agent is admitted before `create_vm`,
    /// every recorded agent of the deployment at the start of a deploy, and an agent is
    /// revoked once its VM is deleted. Without one, the bus's permissions are left alone.
    pub agent_access: Option<Arc<dyn agent_access::AgentAccess>>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            agent_options: ClientOptions::default(),
            agent_wait_timeout: Duration::from_secs(600),
            agent_env: None,
            get_state_concurrency: 64,
            create_vm_concurrency: 32,
            parallel_azs: false,
            dns_root_domain: "bosh".into(),
            lock_wait: Duration::from_secs(10),
            recovery_wait: Duration::from_secs(60),
            health: None,
            health_window: Duration::from_secs(60),
            dns_registry: None,
            ip_registry: None,
            trusted_certs: String::new(),
            snapshots_enabled: false,
            enable_cpi_resize_disk: false,
            enable_cpi_update_disk: false,
            agent_access: None,
        }
    }
}

/// The deploy engine: the edges it drives and its configuration.
#[derive(Clone)]
pub struct Engine {
    /// The cloud.
    pub cloud: Arc<dyn Cloud>,
    /// How agents are reached.
    pub agents: Arc<dyn Transport>,
    /// The director's blobstore.
    pub blobstore: Arc<dyn Blobstore>,
    /// Job template rendering.
    pub renderer: Arc<dyn TemplateRenderer>,
    /// Durable state of the deployment.
    pub store: Arc<dyn StateStore>,
    /// Deployment locks.
    pub locks: Arc<dyn Lock>,
    /// Where progress goes.
    pub events: Arc<dyn EventSink>,
    /// Settings.
    pub config: EngineConfig,
    /// Cancelled when the task must start no new step ([`cancel`]).
    pub cancel: CancellationToken,
}

/// A stemcell the deployment may use, with its image for `create_stemcell`.
#[derive(Debug, Clone)]
pub struct StemcellSource {
    /// Name, version, OS.
    pub info: StemcellInfo,
    /// The extracted image.
    pub image_path: PathBuf,
    /// `cloud_properties` from `stemcell.MF`.
    pub cloud_properties: JsonMap<String, Value>,
}

/// What to deploy.
#[derive(Clone, Default)]
pub struct DeployRequest {
    /// The deployment manifest, interpolated (variables resolved).
    pub manifest: Value,
    /// The cloud config.
    pub cloud_config: Value,
    /// The releases the manifest names.
    pub releases: Vec<Arc<Release>>,
    /// The stemcells at hand.
    pub stemcells: Vec<StemcellSource>,
    /// `--recreate`, `restart`, ...
    pub requests: Requests,
    /// `bosh start|stop|restart|recreate`: what to do to the instances in `scope` (all when
    /// `None`); instances outside it are left as they are.
    pub action: Option<(InstanceAction, Option<Scope>)>,
}

impl DeployRequest {
    /// A digest of everything deployed (manifest, cloud config, release and stemcell
    /// versions): a deploy whose digest equals the last successful one's, with every agent
    /// running, changes nothing.
    pub fn inputs_digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let doc = serde_json::json!({
            "manifest": self.manifest,
            "cloud_config": self.cloud_config,
            "releases": self.releases.iter().map(|r| format!("{}/{}", r.name(), r.version())).collect::<Vec<_>>(),
            "stemcells": self.stemcells.iter().map(|s| s.info.key()).collect::<Vec<_>>(),
        });
        Sha256::digest(doc.to_string().as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// The instance commands (`bosh start`, `stop`, `stop --hard`, `restart`, `recreate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceAction {
    /// Start the jobs (and make the VM of a detached instance).
    Start,
    /// Stop the jobs, keep the VM.
    Stop,
    /// Stop the jobs and delete the VM, keeping disks and addresses (`stop --hard`).
    StopHard,
    /// Stop and start the jobs.
    Restart,
    /// Make a new VM.
    Recreate,
}

/// Which instances an [`InstanceAction`] is for: a group, or one instance of it (by uuid or
/// index).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// Instance group.
    pub group: String,
    /// `uuid` or index; `None` for the whole group.
    pub instance: Option<String>,
}

impl Scope {
    /// Whether the instance is in scope.
    pub fn contains(&self, record: &crate::state::InstanceRecord) -> bool {
        record.group == self.group
            && self
                .instance
                .as_ref()
                .is_none_or(|i| *i == record.uuid || *i == record.index.to_string())
    }
}

/// A deploy failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The documents are invalid (every problem, nothing was changed).
    #[error("{0}")]
    Invalid(Problems),
    /// Another task holds the deployment.
    #[error("{0}")]
    Lock(#[from] crate::lock::LockError),
    /// The state store failed.
    #[error("{0}")]
    Store(#[from] crate::state::StoreError),
    /// A cloud call failed (boxed: CPI errors are large and deploys return them rarely).
    #[error("{0}")]
    Cloud(Box<CpiError>),
    /// An agent call failed.
    #[error("{0}")]
    Agent(#[from] AgentError),
    /// Agents did not answer `get_state` before anything changed (each error, by text).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    AgentsUnanswered(Vec<AgentError>),
    /// The blobstore failed.
    #[error("{0}")]
    Blobstore(#[from] BlobstoreError),
    /// The message bus's permissions could not be changed for a new agent.
    #[error("{0}")]
    AgentAccess(#[from] agent_access::AccessError),
    /// Package archives a release references are not in the blobstore (one line each);
    /// whatever uploaded the release stores them again.
    #[error("{}", .0.join("\n"))]
    MissingArchives(Vec<String>),
    /// An instance's update ended without a VM record (a bug or a concurrent writer).
    #[error("instance {instance} has no VM after its update")]
    NoVmAfterUpdate {
        /// `group/uuid (index)`.
        instance: String,
    },
    /// Planning failed (IPs, stemcells, links, templates, packages): nothing was changed.
    #[error("{}", .0.join("\n"))]
    Plan(Vec<String>),
    /// The agent has a different persistent disk mounted than the record says (BOSH error
    /// 400010, `AgentDiskOutOfSync`).
    #[error(
        "'{instance}' has invalid disks: agent reports '{agent}' while director record shows '{recorded}'"
    )]
    AgentDiskOutOfSync {
        /// `group/uuid (index)`.
        instance: String,
        /// The disk the agent reports.
        agent: String,
        /// The disk the record shows.
        recorded: String,
    },
    /// Addresses this deploy chose were claimed by other deployments of the director in the
    /// meantime, at every attempt (many deploys planning at once): retried later.
    #[error(
        "{0}; other deployments of this director claimed addresses at the same time, so the deploy tries again later"
    )]
    AddressesContended(String),
    /// The task was cancelled, or lost its deployment lock, and stopped between steps (the
    /// Director's "Task cancelled").
    #[error("Task cancelled{}", if *.lock_lost { ": the deployment lock was lost (its renewal failed)" } else { "" })]
    Cancelled {
        /// The lock was lost (rather than the token cancelled).
        lock_lost: bool,
    },
    /// An instance did not reach running in its watch time (BOSH error 400007).
    #[error("'{instance}' is not running after update. Review logs for failed jobs: {}", .failing.join(", "))]
    NotRunning {
        /// `group/uuid (index)`.
        instance: String,
        /// Processes not running.
        failing: Vec<String>,
    },
}

impl EngineError {
    /// The Director's error code for the task's error line.
    pub fn code(&self) -> u32 {
        match self {
            EngineError::NotRunning { .. } => 400_007,
            EngineError::AgentDiskOutOfSync { .. } => 400_010,
            EngineError::Lock(_) => 100_001,
            EngineError::Invalid(_) => 190_000,
            EngineError::Agent(AgentError::Timeout { .. }) => 450_002,
            EngineError::AgentsUnanswered(errors)
                if matches!(errors.first(), Some(AgentError::Timeout { .. })) =>
            {
                450_002
            }
            _ => 100,
        }
    }

    /// What whoever drives the engine should do about this error: try again later (a fault
    /// of the cloud, an agent, the network, the store, or a lock another task holds), or
    /// stall until the input changes (invalid documents, an unsatisfiable plan, a failed
    /// canary, a disk the agent disagrees about, a CPI that refuses the request).
    pub fn disposition(&self) -> Disposition {
        match self {
            EngineError::Invalid(_)
            | EngineError::Plan(_)
            | EngineError::NotRunning { .. }
            | EngineError::AgentDiskOutOfSync { .. } => Disposition::Stall,
            EngineError::Cloud(e) => match e.as_ref() {
                CpiError::Cloud { kind, .. } if kind.is_refusal() => Disposition::Stall,
                CpiError::NoDiskHint { .. } | CpiError::ApiVersion(_) => Disposition::Stall,
                _ => Disposition::Retry,
            },
            EngineError::Agent(AgentError::Unsupported { .. }) => Disposition::Stall,
            EngineError::Lock(_)
            | EngineError::Store(_)
            | EngineError::Agent(_)
            | EngineError::AgentsUnanswered(_)
            | EngineError::Blobstore(_)
            | EngineError::AgentAccess(_)
            | EngineError::MissingArchives(_)
            | EngineError::NoVmAfterUpdate { .. }
            | EngineError::AddressesContended(_)
            | EngineError::Cancelled { .. } => Disposition::Retry,
        }
    }
}

impl From<CpiError> for EngineError {
    fn from(e: CpiError) -> EngineError {
        EngineError::Cloud(Box::new(e))
    }
}

/// What to do about a failed deploy ([`EngineError::disposition`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// A fault that may pass: try the same input again later, with backoff.
    Retry,
    /// The same input will fail the same way: wait until it changes.
    Stall,
}

impl Engine {
    /// Makes one state write durable.
    pub async fn write(&self, write: Write) -> Result<(), EngineError> {
        Ok(self.store.write(&write).await?)
    }
}

/// Merges `from` into `into` recursively (env and cloud properties).
pub fn desired_merge(into: &mut JsonMap<String, Value>, from: &JsonMap<String, Value>) {
    kubosh_core::plan::desired::deep_merge(into, from);
}

/// Releases by name.
pub fn releases_by_name(releases: &[Arc<Release>]) -> BTreeMap<String, Arc<Release>> {
    releases
        .iter()
        .map(|r| (r.name().to_string(), r.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubosh_cloud::ErrorKind;

    fn cpi(kind: ErrorKind) -> EngineError {
        EngineError::from(CpiError::Cloud {
            error_type: kind.to_string(),
            kind,
            message: "m".into(),
            ok_to_retry: false,
            method: "create_vm".into(),
            request_id: "r".into(),
        })
    }

    fn timeout(agent_id: &str) -> AgentError {
        AgentError::Timeout {
            method: "get_state".into(),
            instance: "web/0".into(),
            agent_id: agent_id.into(),
            after: Duration::from_secs(45),
        }
    }

    #[test]
    fn refusals_and_bad_input_stall_faults_are_retried() {
        assert_eq!(
            cpi(ErrorKind::NotSupported).disposition(),
            Disposition::Stall
        );
        assert_eq!(cpi(ErrorKind::CpiError).disposition(), Disposition::Stall);
        assert_eq!(cpi(ErrorKind::CloudError).disposition(), Disposition::Retry);
        assert_eq!(
            cpi(ErrorKind::VmCreationFailed).disposition(),
            Disposition::Retry
        );
        assert_eq!(
            EngineError::Plan(vec!["no".into()]).disposition(),
            Disposition::Stall
        );
        let canary = EngineError::NotRunning {
            instance: "web/0".into(),
            failing: vec!["hello".into()],
        };
        assert_eq!(canary.disposition(), Disposition::Stall);
        assert_eq!(
            EngineError::Agent(timeout("a")).disposition(),
            Disposition::Retry
        );
        assert_eq!(
            EngineError::Agent(AgentError::Unsupported {
                method: "sync_dns".into()
            })
            .disposition(),
            Disposition::Stall
        );
    }

    #[test]
    fn codes_come_from_the_error_not_its_text() {
        let timed_out = EngineError::Agent(timeout("a"));
        assert_eq!(timed_out.code(), 450_002);
        let several = EngineError::AgentsUnanswered(vec![timeout("a"), timeout("b")]);
        assert_eq!(several.code(), 450_002);
        assert_eq!(
            several.to_string(),
            format!("{}\n{}", timeout("a"), timeout("b"))
        );
        assert_eq!(cpi(ErrorKind::CloudError).code(), 100);
    }
}

/// The controller spawns deploys: their future must stay `Send` (a borrowing closure in a
/// stream held across an await breaks it, rust-lang/rust#102211). Checked at compile time.
#[cfg(test)]
mod send_check {
    fn is_send<T: Send>(_: &T) {}
    #[allow(dead_code)]
    fn deploy_is_send(engine: &super::Engine, request: &super::DeployRequest) {
        let f = engine.deploy(request);
        is_send(&f);
    }
}
