//! The simulated world both sides share: the cloud's inventory and the agents living on its
//! VMs. Plain data under one lock ([`super::Shared`]); the cloud and the agents change it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde_json::{Map, Value};

use kubosh_cloud::Object;

/// A stemcell (an image) in the simulated cloud.
#[derive(Debug, Clone, PartialEq)]
pub struct SimStemcell {
    /// Its CID.
    pub cid: String,
    /// The image path it was uploaded from.
    pub image_path: String,
    /// Its `cloud_properties`.
    pub cloud_properties: Object,
}

/// A VM in the simulated cloud.
#[derive(Debug, Clone, PartialEq)]
pub struct SimVm {
    /// Its CID.
    pub cid: String,
    /// The agent id it was created with (its agent answers under this id).
    pub agent_id: String,
    /// The stemcell it booted.
    pub stemcell_cid: String,
    /// Its `cloud_properties`.
    pub cloud_properties: Object,
    /// Its networks as the cloud answered them (dynamic networks got an address).
    pub networks: Object,
    /// The `disk_cids` placement hint of `create_vm`.
    pub disk_cids: Vec<String>,
    /// The `env` it was created with.
    pub env: Object,
    /// Its metadata (`set_vm_metadata`, merged).
    pub metadata: Object,
    /// The disks attached to it.
    pub disks: BTreeSet<String>,
    /// How often it was rebooted.
    pub reboots: u32,
}

/// A persistent disk in the simulated cloud.
#[derive(Debug, Clone, PartialEq)]
pub struct SimDisk {
    /// Its CID.
    pub cid: String,
    /// Size in MiB.
    pub size_mib: u64,
    /// Its `cloud_properties`.
    pub cloud_properties: Object,
    /// The `vm_cid` locality hint of `create_disk`.
    pub vm_locality: Option<String>,
    /// Its metadata (`set_disk_metadata`, merged).
    pub metadata: Object,
    /// The VM it is attached to.
    pub attached_to: Option<String>,
    /// Its simulated contents: path ⇒ file content. `migrate_disk` copies them.
    pub files: BTreeMap<String, String>,
    /// The request id it was created with ([`kubosh_cloud::Cloud::create_disk_with_request_id`]).
    pub request_id: Option<String>,
}

/// A disk snapshot in the simulated cloud.
#[derive(Debug, Clone, PartialEq)]
pub struct SimSnapshot {
    /// Its CID.
    pub cid: String,
    /// The disk it copies.
    pub disk_cid: String,
    /// Its metadata.
    pub metadata: Object,
    /// The disk's files when it was taken.
    pub files: BTreeMap<String, String>,
    /// The `context.request_id` of the `snapshot_disk` call that made it, when the caller
    /// gave one.
    pub request_id: Option<String>,
}

/// Everything the simulated cloud holds (for leak checks and assertions).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimInventory {
    /// Stemcells, by CID.
    pub stemcells: Vec<SimStemcell>,
    /// VMs, by CID.
    pub vms: Vec<SimVm>,
    /// Disks, by CID.
    pub disks: Vec<SimDisk>,
    /// Snapshots, by CID.
    pub snapshots: Vec<SimSnapshot>,
    /// The ids of the agents that exist (one per VM).
    pub agents: Vec<String>,
}

impl SimInventory {
    /// True when the cloud holds nothing at all.
    pub fn is_empty(&self) -> bool {
        self.stemcells.is_empty()
            && self.vms.is_empty()
            && self.disks.is_empty()
            && self.snapshots.is_empty()
            && self.agents.is_empty()
    }
}

/// An agent task.
#[derive(Debug, Clone, PartialEq)]
pub enum Task {
    /// Still running; `cancellable` as [`kubosh_transport::agent::Method::is_cancellable`] says.
    Running { cancellable: bool },
    /// Finished with a value or the cause of its failure.
    Done(Result<Value, String>),
}

/// A task whose latency is still passing: its action takes effect at `at`, by its own timer
/// or by the first `get_task` at or after `at`, whichever the runtime runs first.
#[derive(Debug, Clone)]
pub struct DueTask {
    pub at: tokio::time::Instant,
    pub method: kubosh_transport::agent::Method,
    pub args: Vec<Value>,
    pub failure: Option<String>,
}

/// How many finished tasks an agent remembers (the director polls once more after the end;
/// long benchmarks must not grow without bound).
const KEEP_FINISHED_TASKS: usize = 64;

/// The simulated agent of one VM.
#[derive(Debug, Clone)]
pub struct AgentState {
    pub vm_cid: String,
    /// False: the agent answers nothing (frozen, powered off).
    pub responsive: bool,
    /// The jobs' processes never reach `running`.
    pub jobs_never_running: bool,
    /// The VM's networks, as its settings give them.
    pub networks: Object,
    /// The last applied spec, as the agent persists it.
    pub spec: Value,
    /// The last spec given to `prepare`.
    pub prepared: Option<Value>,
    /// `start` was called since the last `stop`.
    pub started: bool,
    /// `stop` was called since the last `start` (the stopped marker).
    pub stopped: bool,
    /// Disk hints from `add_persistent_disk`, by disk CID.
    pub disk_hints: BTreeMap<String, Value>,
    /// The disk mounted at `store`.
    pub store: Option<String>,
    /// The disk mounted at `store_migration_target`.
    pub migration_target: Option<String>,
    pub dns_version: Option<u64>,
    pub settings: Option<Value>,
    pub scripts: Vec<String>,
    pub drains: Vec<String>,
    pub uploaded_blobs: Vec<String>,
    pub arp_deleted: Vec<String>,
    /// Tasks by id (a few per agent: a B-tree allocates once where a hash map regrows).
    pub tasks: BTreeMap<String, Task>,
    /// Tasks with a latency, by id, until they end.
    pub due: BTreeMap<String, DueTask>,
    finished: VecDeque<String>,
}

impl AgentState {
    pub fn new(
        vm_cid: String,
        networks: Object,
        responsive: bool,
        jobs_never_running: bool,
    ) -> AgentState {
        AgentState {
            vm_cid,
            responsive,
            jobs_never_running,
            networks,
            spec: Value::Object(Map::new()),
            prepared: None,
            started: false,
            stopped: false,
            disk_hints: BTreeMap::new(),
            store: None,
            migration_target: None,
            dns_version: None,
            settings: None,
            scripts: Vec::new(),
            drains: Vec::new(),
            uploaded_blobs: Vec::new(),
            arp_deleted: Vec::new(),
            tasks: BTreeMap::new(),
            due: BTreeMap::new(),
            finished: VecDeque::new(),
        }
    }

    /// Records the end of a task, unless it already ended (cancelled).
    pub fn finish_task(&mut self, id: &str, result: Result<Value, String>) {
        let Some(task) = self.tasks.get_mut(id) else {
            return;
        };
        if matches!(task, Task::Done(_)) {
            return;
        }
        *task = Task::Done(result);
        self.finished.push_back(id.to_string());
        while self.finished.len() > KEEP_FINISHED_TASKS {
            if let Some(old) = self.finished.pop_front() {
                self.tasks.remove(&old);
            }
        }
    }

    /// The disks mounted at `store` and `store_migration_target`, sorted.
    pub fn mounted(&self) -> Vec<String> {
        let mut cids: Vec<String> = self
            .store
            .iter()
            .chain(self.migration_target.iter())
            .cloned()
            .collect();
        cids.sort();
        cids
    }
}

/// What new agents are like (set on the cloud, applied by `create_vm`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NewAgents {
    /// New agents never answer.
    pub unresponsive: bool,
    /// The jobs of new agents never reach `running`.
    pub jobs_never_running: bool,
}

/// The shared state.
#[derive(Debug, Default)]
pub struct World {
    next_id: u64,
    pub stemcells: BTreeMap<String, SimStemcell>,
    pub vms: BTreeMap<String, SimVm>,
    pub disks: BTreeMap<String, SimDisk>,
    pub snapshots: BTreeMap<String, SimSnapshot>,
    /// IP address ⇒ the VM holding it.
    pub ips: HashMap<String, String>,
    pub agents: HashMap<String, AgentState>,
    pub new_agents: NewAgents,
}

impl World {
    /// A fresh id with `prefix`: deterministic (a counter), so runs compare.
    pub fn next_id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{}", self.next_id)
    }

    /// A fresh number (dynamic addresses, request ids).
    pub fn next_number(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn inventory(&self) -> SimInventory {
        let mut agents: Vec<String> = self.agents.keys().cloned().collect();
        agents.sort();
        SimInventory {
            stemcells: self.stemcells.values().cloned().collect(),
            vms: self.vms.values().cloned().collect(),
            disks: self.disks.values().cloned().collect(),
            snapshots: self.snapshots.values().cloned().collect(),
            agents,
        }
    }
}
