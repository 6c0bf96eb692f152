//! The deploy executor: runs the Director's `bosh deploy` steps (seed `000`,
//! `bosh-protocols.md` §4.1) against a [`Cloud`], agents reached through a [`Transport`], a
//! [`Blobstore`] and a [`StateStore`], planning with the pure [`kubosh_core::plan`] and reporting
//! progress as BOSH's event log.
//!
//! A deploy is prepared, then executed: [`Engine::prepare`] decides everything with the
//! pure [`kubosh_core::plan`] and writes nothing (a [`DeployPlan`]); the executor carries the
//! plan out (`deploy.rs` orchestrates, `execute/` changes the world). The engine never parses
//! YAML and never validates: a [`DeployRequest`] carries documents its caller validated once.

pub mod agent_access;
mod cancel;
pub mod cck;
pub mod clouds;
pub mod delete;
pub mod deploy;
mod disks;
pub mod errand;
mod error;
mod execute;
mod instance;
pub mod instances;
pub mod lock;
pub mod logs;
pub mod pool;
mod prepare;
mod progress;
mod recover;
mod resources;
mod snapshot;
pub mod source;
pub mod ssh;
pub mod state;
mod swap;
mod templates;
pub mod variables;
pub mod vm;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map as JsonMap, Value};

use crate::lock::Lock;
use crate::state::{StateStore, Write};
use kubosh_artifacts::blobstore::Blobstore;
use kubosh_artifacts::release::Release;
use kubosh_cloud::Cloud;
use kubosh_core::manifest::{CloudConfig, DeploymentManifest};
use kubosh_core::plan::changes::Requests;
use kubosh_core::plan::desired::StemcellInfo;
use kubosh_core::validate::{Problems, Validated};
use kubosh_transport::agent::client::{ClientOptions, Transport};

pub use error::{DiskInOtherCloud, Disposition, EngineError, PlanError, Unanswered, Unheard};
pub use kubosh_artifacts::render::TemplateRenderer;
pub use prepare::{DeployPlan, GroupPlan, PlanSummary};
pub use progress::{
    EventLog, EventSink, InstanceName, Lost, Milestone, NoEvents, error as task_error, warning_line,
};

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
    /// Where all deployments share their `shared: true` link providers; without one, a
    /// link consumed from another deployment finds no such deployment.
    pub link_registry: Option<Arc<dyn crate::state::LinkRegistry>>,
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
            parallel_azs: false,
            dns_root_domain: "bosh".into(),
            lock_wait: Duration::from_secs(10),
            recovery_wait: Duration::from_secs(60),
            health: None,
            health_window: Duration::from_secs(60),
            dns_registry: None,
            ip_registry: None,
            link_registry: None,
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
    /// The director's own cloud: AZs that name no CPI, and whatever was recorded without one.
    pub cloud: Arc<dyn Cloud>,
    /// The CPI config's named clouds, each serving the AZs that name it ([`clouds`]).
    pub named_clouds: clouds::NamedClouds,
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
#[derive(Clone)]
pub struct DeployRequest {
    /// The deployment manifest, interpolated (variables resolved), and its cloud config,
    /// validated together once by whoever asks (`kubosh deploy`, the controller): the engine
    /// plans from them as they are and never validates again. Their warnings go to the
    /// deploy's event log.
    pub documents: Validated<(DeploymentManifest, CloudConfig)>,
    /// The releases the manifest names.
    pub releases: Vec<Arc<Release>>,
    /// The stemcells at hand.
    pub stemcells: Vec<StemcellSource>,
    /// `--recreate`, `restart`, ...
    pub requests: Requests,
    /// `bosh start|stop|restart|recreate`: what to do to the instances in `scope` (all when
    /// `None`); instances outside it are updated only where they differ from the manifest
    /// (what any deploy does), so the deployment ends as its manifest says.
    pub action: Option<(InstanceAction, Option<Scope>)>,
    /// Instances (by uuid) to give a new VM on their disks, whether their agents answer or
    /// not (cck's `recreate_vm`).
    pub recreate_instances: std::collections::BTreeSet<String>,
    /// Instance groups with `lifecycle: errand` whose instances this deploy brings up (the
    /// VMs `run-errand` runs them on); every other errand group has none.
    pub errands: std::collections::BTreeSet<String>,
}

impl DeployRequest {
    /// A request for the validated documents, with no releases, stemcells or requests yet.
    pub fn new(documents: Validated<(DeploymentManifest, CloudConfig)>) -> DeployRequest {
        DeployRequest {
            documents,
            releases: Vec::new(),
            stemcells: Vec::new(),
            requests: Requests::default(),
            action: None,
            recreate_instances: Default::default(),
            errands: Default::default(),
        }
    }

    /// A request for `manifest` on `cloud_config` once both are valid together; every
    /// problem of either when not.
    pub fn validated(manifest: &Value, cloud_config: &Value) -> Result<DeployRequest, Problems> {
        kubosh_core::validate::deployment(manifest, cloud_config).map(DeployRequest::new)
    }

    /// The manifest.
    pub fn manifest(&self) -> &DeploymentManifest {
        &self.documents.document.0
    }

    /// The cloud config.
    pub fn cloud_config(&self) -> &CloudConfig {
        &self.documents.document.1
    }

    /// The deployment's name.
    pub fn name(&self) -> &str {
        self.manifest().name.as_deref().unwrap_or_default()
    }

    /// A digest of everything deployed (manifest, cloud config, release and stemcell
    /// versions): a deploy whose digest equals the last successful one's, with every agent
    /// running, changes nothing.
    pub fn inputs_digest(&self) -> String {
        let releases: Vec<String> = (self.releases.iter())
            .map(|r| format!("{}/{}", r.name(), r.version()))
            .collect();
        let stemcells: Vec<String> = self.stemcells.iter().map(|s| s.info.key()).collect();
        inputs_digest(&self.documents, &releases, &stemcells)
    }
}

/// The digest of a deploy's inputs: the validated documents, and the releases and stemcells
/// (`name/version`, in the request's order). [`DeployRequest::inputs_digest`] is this of its
/// request; the controller computes the same from its resources before it materialises
/// anything, so both speak of one digest.
pub fn inputs_digest(
    documents: &Validated<(DeploymentManifest, CloudConfig)>,
    releases: &[String],
    stemcells: &[String],
) -> String {
    let doc = serde_json::json!({
        "manifest": documents.document.0,
        "cloud_config": documents.document.1,
        "releases": releases,
        "stemcells": stemcells,
    });
    kubosh_base::digest::sha256_hex(doc.to_string().as_bytes())
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
    /// `GROUP` or `GROUP/ID` (`ID` an index or a uuid), as bosh-cli's instance slugs read;
    /// `None` when the group or the id is empty.
    pub fn parse(slug: &str) -> Option<Scope> {
        let (group, instance) = match slug.split_once('/') {
            Some((group, id)) => (group, Some(id)),
            None => (slug, None),
        };
        (!group.is_empty() && !instance.is_some_and(str::is_empty)).then(|| Scope {
            group: group.to_string(),
            instance: instance.map(str::to_string),
        })
    }

    /// Whether the instance is in scope.
    pub fn contains(&self, record: &crate::state::InstanceRecord) -> bool {
        record.group == self.group
            && self
                .instance
                .as_ref()
                .is_none_or(|i| *i == record.uuid || *i == record.index.to_string())
    }
}

impl Engine {
    /// Makes one state write durable.
    pub async fn write(&self, write: Write) -> Result<(), EngineError> {
        Ok(self.store.write(&write).await?)
    }
}

/// Merges `from` into `into` recursively (env and cloud properties).
pub(crate) fn desired_merge(into: &mut JsonMap<String, Value>, from: &JsonMap<String, Value>) {
    kubosh_core::plan::desired::deep_merge(into, from);
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
    #[allow(dead_code)]
    fn cck_is_send(
        engine: &super::Engine,
        choices: &[(super::cck::Problem, super::cck::Resolution)],
        request: Option<&super::DeployRequest>,
    ) {
        is_send(&engine.scan("d"));
        is_send(&engine.resolve_problems("d", choices, request));
    }
}
