//! `Deployment` (`boshdeployments.kubosh.io`): a BOSH deployment manifest plus how to render it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kubosh_core::manifest::{DeploymentManifest, Map};

/// The desired state of a BOSH deployment: the manifest, the cloud config it is placed
/// against, and the ops files and variables that are applied to it before deploying.
///
/// kubosh renders the manifest like `bosh deploy manifest.yml -o ops... -l vars...`: first the
/// `ops` are applied in order, then `((variables))` are filled in from `varsFrom` and `vars`
/// (later sources win, `vars` wins over all of them), and from the variables the manifest
/// generates itself.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "Deployment",
    plural = "boshdeployments",
    singular = "boshdeployment",
    shortname = "bd",
    category = "bosh",
    namespaced,
    status = "DeploymentStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A BOSH deployment: instance groups of VMs running release jobs, rolled out by kubosh \
           the way `bosh deploy` would. The deployment name is `metadata.name`. Listed by \
           `kubectl get boshdeployments` (short name `bd`), so that `deployments` still means \
           apps/v1.",
    validation = Rule::new("!has(self.spec.manifest.name) || self.spec.manifest.name == self.metadata.name")
        .message("must be left out or equal metadata.name")
        .field_path(".spec.manifest.name"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Instances",
        type_ = "string",
        description = "Ready instances / desired instances",
        json_path = ".status.instances"
    ),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        description = "Instances running the current manifest",
        json_path = ".status.upToDateInstances"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Paused", type_ = "boolean", json_path = ".spec.paused", priority = 1),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentSpec {
    /// The BOSH deployment manifest (v2), inline and in BOSH's own snake_case keys, exactly as
    /// `bosh deploy` reads it. `name` may be left out: the deployment is named after
    /// `metadata.name`. `((variables))` are kept verbatim here and filled in at deploy time.
    pub manifest: DeploymentManifest,

    /// The `CloudConfig` (in this namespace) that supplies the AZs, networks, VM and disk
    /// types the manifest refers to. Unset: every `CloudConfig` of the namespace, merged in
    /// name order as the Director merges named cloud configs (their lists joined, a name
    /// defined twice an error naming both, `compilation` from the one that has it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_config_ref: Option<CloudConfigRef>,

    /// go-patch operations (an ops file) applied to the manifest, in order, before variables
    /// are filled in; like `bosh deploy -o`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<Operation>,

    /// Values for `((variables))`, by variable name; like `bosh deploy -v` and `-l`. Wins over
    /// `varsFrom`. Put secrets in a Secret and list it in `varsFrom` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "kubosh_core::manifest::free_form_schema")]
    pub vars: Option<Map>,

    /// Secrets and ConfigMaps (in this namespace) holding variable values, read in order: a
    /// later source wins over an earlier one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vars_from: Vec<VarsSource>,

    /// Stop rolling out changes. A task that is running finishes the instances in flight and
    /// then stops; nothing else is created, updated or deleted until unpaused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    /// What happens to the persistent disks when this resource is deleted (the VMs are
    /// deleted either way, like `bosh delete-deployment`): `Delete` (the default) deletes
    /// them; `Orphan` keeps them as orphaned `Disk`s, with their data, until they expire
    /// (`--orphaned-disk-max-age`) or their `Disk` is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// Whether an instance whose agent falls silent for longer than the agent timeout, or
    /// whose VM the cloud no longer has, gets a new VM on its persistent disks without being
    /// asked (BOSH's resurrector, and `bosh deploy --fix` for deploys that meet one). On
    /// when unset; the controller's `--no-resurrection` turns it off for every deployment.
    /// Stops on its own in a meltdown (more than 5 instances and 20 % of the deployment down
    /// within 10 minutes), said by the `Resurrection` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resurrection: Option<bool>,
}

impl DeploymentSpec {
    /// Whether this deployment asks for resurrection (`resurrection`, on when unset).
    pub fn resurrection(&self) -> bool {
        self.resurrection.unwrap_or(true)
    }

    /// Whether the `CloudConfig` named `name` is one this deployment uses: the one
    /// `cloudConfigRef` names, else every one of the namespace.
    pub fn uses_cloud_config(&self, name: &str) -> bool {
        self.cloud_config_ref
            .as_ref()
            .is_none_or(|r| r.name == name)
    }
}

/// A reference to a `CloudConfig` in the same namespace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudConfigRef {
    /// Name of the `CloudConfig`.
    pub name: String,
}

/// One go-patch operation, as in a BOSH ops file.
//
// No CEL rule checks that `replace` has a value and `remove` has none: CEL cannot see a field
// without a type (`value` may be anything), so the apiserver refuses such a rule. The ops
// engine reports it instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// `replace` (set or add the value at the path), `remove` (delete what is at the path) or
    /// `test` (fail unless the value at the path equals `value`, or is missing when `absent`).
    #[serde(rename = "type")]
    pub op: OperationType,
    /// Where to operate: a go-patch path such as
    /// `/instance_groups/name=zookeeper/jobs/name=zookeeper/properties/port?`.
    pub path: String,
    /// The value to put (`replace`) or to compare with (`test`): any YAML value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::api::schema::any_value")]
    pub value: Option<serde_json::Value>,
    /// For `test`: succeed only when nothing is at the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absent: Option<bool>,
    /// A message shown instead of go-patch's own when this operation fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The kind of a go-patch operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OperationType {
    /// Set the value at the path, creating it (and missing parents marked `?`) if needed.
    Replace,
    /// Delete what is at the path.
    Remove,
    /// Check the value at the path.
    Test,
}

/// A Secret or ConfigMap to read variable values from. Give exactly one of `secretRef` and
/// `configMapRef`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, kube::KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.secretRef) != has(self.configMapRef)")
    .message("give exactly one of secretRef and configMapRef"))]
pub struct VarsSource {
    /// A Secret in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<VarsKeyRef>,
    /// A ConfigMap in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<VarsKeyRef>,
    /// Deploy anyway when the Secret, ConfigMap or key does not exist.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// Which object, and which of its keys, hold variable values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VarsKeyRef {
    /// Name of the Secret or ConfigMap.
    pub name: String,
    /// A key whose content is a YAML vars file (a mapping from variable names to values,
    /// like `bosh deploy -l`). Without `key`, every key of the object is one variable and
    /// its content the variable's string value (like `bosh deploy --var-file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// What deleting a `Deployment` does to its VMs and disks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Delete the VMs and the disks, like `bosh delete-deployment`.
    #[default]
    Delete,
    /// Delete the VMs; keep the disks as orphaned `Disk`s (with their data) until they
    /// expire or are deleted.
    Orphan,
}

/// The observed state of a `Deployment`. Everything here can be rebuilt from the `Instance`
/// resources and the IaaS; nothing is lost if it is wiped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Ready`, `Reconciling` (a task is running) and `Stalled` (kubosh gave up until the spec
    /// changes), each with the generation it was computed for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Vec<Condition>,

    /// Ready instances out of desired ones, e.g. `3/5` (for `kubectl get`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<String>,

    /// Instances the manifest asks for, over all instance groups (errands excluded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_instances: Option<i32>,

    /// Instances whose jobs are all running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_instances: Option<i32>,

    /// Instances that run the current manifest, releases and stemcells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_instances: Option<i32>,

    /// The same counters per instance group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub instance_groups: Vec<InstanceGroupStatus>,

    /// What the running task is doing, when one is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,

    /// The most recent deploy task, running or finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_task: Option<TaskSummary>,

    /// The last `kubosh.io/action` annotation value handled (done, failed for good, or
    /// unreadable: see the events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_action: Option<String>,

    /// The last `kubosh.io/reconcile-request` annotation value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_request: Option<String>,

    /// What the last scan (`kubosh.io/action: cck`, `bosh cck`) found wrong: resolve one with
    /// `kubosh.io/action: resolve <ID> <RESOLUTION>`, or all that offer a resolution with
    /// `resolve all <RESOLUTION>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<ProblemStatus>,

    /// The `RuntimeConfig`s of the namespace the last successful deploy applied, with the
    /// versions it read: one changed since means the deployment is out of date and is
    /// rolled out again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_configs: Vec<RuntimeConfigRef>,
}

/// A problem a scan found (`bosh cck`'s list).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProblemStatus {
    /// Its id, the same in every scan while it lasts.
    pub id: String,
    /// BOSH's problem type: `missing_vm`, `unresponsive_agent`, `missing_disk`,
    /// `mount_info_mismatch`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The instance, `group/uuid (index)`.
    pub instance: String,
    /// What is wrong, in BOSH's words.
    pub description: String,
    /// The resolutions offered, the automatic one first.
    #[serde(default)]
    pub resolutions: Vec<String>,
}

/// A `RuntimeConfig` a deploy applied, at the version it read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeConfigRef {
    /// Its name.
    pub name: String,
    /// Its `metadata.resourceVersion` when read.
    pub resource_version: String,
}

/// Instance counters of one instance group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceGroupStatus {
    /// Instance group name.
    pub name: String,
    /// Instances the manifest asks for.
    #[serde(default)]
    pub desired: i32,
    /// Instances whose jobs are all running.
    #[serde(default)]
    pub ready: i32,
    /// Instances that run the current manifest, releases and stemcells.
    #[serde(default)]
    pub up_to_date: i32,
    /// Instances with a failing or unresponsive job.
    #[serde(default)]
    pub failing: i32,
}

/// The stage a running task is in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Stage name, as `bosh task` shows it, e.g. `Updating instance`, `Compiling packages`.
    pub stage: String,
    /// Steps of the stage finished so far.
    #[serde(default)]
    pub done: i32,
    /// Steps of the stage in total.
    #[serde(default)]
    pub total: i32,
    /// What a human reads, e.g. `Updating instance group web: 3/10, canary done`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A deploy task, in brief. Its full log is in the controller's log and in Events.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskSummary {
    /// Task identifier, unique within this deployment.
    pub id: String,
    /// Where the task is.
    pub state: TaskState,
    /// What the task does, e.g. `create deployment`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// When the task started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Time>,
    /// When the task ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<Time>,
    /// How long the task ran, in seconds (once it ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<i64>,
    /// Why the task failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The state of a task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaskState {
    /// Waiting to start.
    #[default]
    Queued,
    /// Running.
    Processing,
    /// Finished without error.
    Succeeded,
    /// Finished with an error.
    Failed,
    /// Stopped on request before it finished.
    Cancelled,
}
