//! `Instance` (`instances.kubosh.io`): one BOSH instance (one VM slot) of a deployment.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One instance of an instance group, created and owned by kubosh: `kubectl get binst` is
/// `bosh instances`.
///
/// Named `<deployment>-<group>-<index>`, owned by its `Deployment`, and labelled
/// [`labels::DEPLOYMENT`](crate::api::labels::DEPLOYMENT),
/// [`labels::INSTANCE_GROUP`](crate::api::labels::INSTANCE_GROUP) and
/// [`labels::INDEX`](crate::api::labels::INDEX) so that `kubectl get binst -l
/// kubosh.io/deployment=zookeeper` selects a deployment's instances.
///
/// The whole spec is written by kubosh, from its record of the instance
/// ([`RECORD_ANNOTATION`]). The identifiers (instance ID, VM CID, agent ID, IPs, disk CIDs)
/// cannot be derived again, so they live in the spec and that annotation, not the status: a
/// status is not kept by backups or by moving resources between clusters, and losing a CID
/// would leak a VM or a disk in the IaaS.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "Instance",
    plural = "instances",
    shortname = "binst",
    category = "bosh",
    namespaced,
    status = "InstanceStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "One instance of a BOSH deployment (a VM running the jobs of its instance group), \
           managed by kubosh. Labelled kubosh.io/deployment, kubosh.io/instance-group and \
           kubosh.io/index.",
    selectable = ".spec.deployment",
    printcolumn(name = "Deployment", type_ = "string", json_path = ".spec.deployment"),
    printcolumn(name = "Group", type_ = "string", json_path = ".spec.instanceGroup"),
    printcolumn(name = "Index", type_ = "integer", json_path = ".spec.index"),
    printcolumn(name = "AZ", type_ = "string", json_path = ".spec.az"),
    printcolumn(
        name = "IP",
        type_ = "string",
        description = "IP on the default gateway network",
        json_path = ".spec.networks[0].ip"
    ),
    printcolumn(name = "VM", type_ = "string", json_path = ".spec.vmCid"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.processState"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "ID", type_ = "string", json_path = ".spec.id", priority = 1),
    printcolumn(
        name = "Desired",
        type_ = "string",
        json_path = ".spec.state",
        priority = 1
    ),
    printcolumn(
        name = "Bootstrap",
        type_ = "boolean",
        json_path = ".spec.bootstrap",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InstanceSpec {
    /// Name of the `Deployment` this instance belongs to.
    pub deployment: String,
    /// Name of its instance group in the manifest.
    pub instance_group: String,
    /// Index within the instance group, stable for the instance's life.
    pub index: i32,
    /// BOSH instance ID (a UUID), as in `group/id` and in job templates' `spec.id`.
    pub id: String,
    /// Availability zone, when the instance group has AZs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub az: Option<String>,
    /// The one instance of its group that runs bootstrap-only work (`spec.bootstrap`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bootstrap: bool,
    /// What the instance should be doing: `Started` (the default), `Stopped` (VM kept, jobs
    /// stopped, like `bosh stop`) or `Detached` (VM deleted, disks kept, like `bosh stop
    /// --hard`).
    #[serde(default)]
    pub state: InstanceState,
    /// IaaS identifier of the VM, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_cid: Option<String>,
    /// Identifier the VM's agent answers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The networks the instance joins, with its address on each; the default gateway
    /// network first (its IP is the one `kubectl get` shows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub networks: Vec<InstanceNetwork>,
    /// IaaS identifiers of its persistent disks (see the `Disk` resources).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disk_cids: Vec<String>,
    /// The stemcell (`name/version`) its VM was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stemcell: Option<String>,
}

/// Annotation of an `Instance` with kubosh's own record of it (JSON), the source the spec's
/// fields are copied from: the VM and disks with what they were made with, addresses,
/// whether the last update completed, and what it applied (the baseline of change
/// detection, as the Director's database keeps it). An annotation, not a spec field, so an
/// update that changes only what was applied leaves the `generation` (and the status that
/// observed it) as they are. Written by kubosh; not for editing.
pub const RECORD_ANNOTATION: &str = "kubosh.io/record";

/// The instance's address on one network.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceNetwork {
    /// Network name from the cloud config.
    pub name: String,
    /// The IP address (for a dynamic network, as the agent reported it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
}

/// What an instance should be doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum InstanceState {
    /// VM running, jobs started.
    #[default]
    Started,
    /// VM running, jobs stopped (`bosh stop`).
    Stopped,
    /// No VM; persistent disks kept (`bosh stop --hard`).
    Detached,
}

/// The observed state of an `Instance`, as its agent reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Ready` when the instance is in its desired state with all jobs running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Vec<Condition>,

    /// The jobs' state taken together, as `bosh instances` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_state: Option<ProcessState>,

    /// Each monitored process, as `bosh instances --ps` shows it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub processes: Vec<Process>,

    /// When the agent last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Time>,
}

/// The observed state of an instance's jobs, or of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ProcessState {
    /// Everything is running.
    Running,
    /// Something is failing or restarting.
    Failing,
    /// Stopped on purpose.
    Stopped,
    /// The agent does not answer.
    Unresponsive,
    /// The agent answered, but not with a known state.
    Unknown,
}

/// One monitored process of an instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// Process name (from the jobs' monit files).
    pub name: String,
    /// Its state.
    pub state: ProcessState,
}
