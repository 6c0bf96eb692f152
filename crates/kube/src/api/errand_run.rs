//! `ErrandRun` (`errandruns.kubosh.io`): one run of a deployment's errand, `bosh
//! run-errand` as a resource.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One run of an errand of a `Deployment` in the same namespace, written by you (or by
/// `kubectl bosh run-errand`): `bosh run-errand DEPLOYMENT ERRAND` as a resource. It runs
/// once, when the deployment has no deploy in progress; its status says how it went. To run
/// the errand again, create another (the spec cannot be changed).
///
/// The errand is an instance group with `lifecycle: errand` (its VMs are created for the
/// run through the deploy's crash-safe path and deleted after it, unless `keepAlive`) or a
/// job with `bin/run` colocated on a service instance group (run on each of its instances,
/// or those `instances` names). It works as an Argo CD `PostSync` hook: Progressing while
/// it waits or runs, Healthy once it succeeded, Degraded when it failed.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "ErrandRun",
    plural = "errandruns",
    shortname = "berr",
    category = "bosh",
    namespaced,
    status = "ErrandRunStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "One run of a BOSH errand of a Deployment (bosh run-errand), run once by kubosh; \
           its status carries each instance's exit code and output.",
    validation = Rule::new("self.spec == oldSelf.spec")
        .message("an ErrandRun runs once: create another to run the errand again"),
    selectable = ".spec.deployment",
    printcolumn(name = "Deployment", type_ = "string", json_path = ".spec.deployment"),
    printcolumn(name = "Errand", type_ = "string", json_path = ".spec.errand"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Exit",
        type_ = "integer",
        description = "The highest exit code of its instances",
        json_path = ".status.exitCode"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ErrandRunSpec {
    /// The `Deployment` (in this namespace) whose errand runs.
    #[schemars(length(min = 1))]
    pub deployment: String,
    /// The errand: an instance group with `lifecycle: errand`, or a job with `bin/run`
    /// colocated on the deployment's instances.
    #[schemars(length(min = 1))]
    pub errand: String,
    /// Only on these instances of a colocated errand: `GROUP`, `GROUP/INDEX` or `GROUP/ID`
    /// (`bosh run-errand --instance`); all that have the job when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<String>,
    /// Keep the VMs of a `lifecycle: errand` group after the run (`--keep-alive`); the next
    /// deploy of the deployment deletes them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_alive: bool,
    /// Skip the run when an earlier `ErrandRun` of the same errand succeeded on the same
    /// deployment, unchanged since (`--when-changed`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub when_changed: bool,
}

/// How an errand run is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ErrandPhase {
    /// Waiting for the deployment (missing, or a deploy in progress).
    #[default]
    Pending,
    /// Running.
    Running,
    /// Every instance's run exited 0 (or the run was skipped: `whenChanged`, unchanged).
    Succeeded,
    /// An instance's run exited non-zero, or the errand could not run.
    Failed,
}

impl ErrandPhase {
    /// Whether the run is over (it never runs again).
    pub fn is_final(self) -> bool {
        matches!(self, ErrandPhase::Succeeded | ErrandPhase::Failed)
    }
}

/// The observed state of an `ErrandRun`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrandRunStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Ready` (succeeded), `Reconciling` (waiting or running) and `Stalled` (failed), the
    /// kstatus trio.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Vec<Condition>,

    /// Where the run is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ErrandPhase>,

    /// The highest exit code of the instances' runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,

    /// When it started running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Time>,

    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<Time>,

    /// The deployment's generation it ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_generation: Option<i64>,

    /// What the deployment was made of when it ran (its generation and inputs), compared by
    /// a later run with `whenChanged`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_digest: Option<String>,

    /// Each instance's run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["instance"]))]
    pub instances: Vec<ErrandInstanceResult>,
}

/// One instance's run of the errand.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrandInstanceResult {
    /// The instance, `GROUP/ID`.
    pub instance: String,
    /// `bin/run`'s exit code.
    pub exit_code: i64,
    /// The end of its stdout.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stdout: String,
    /// The end of its stderr.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    /// Where the errand's full logs are: its job's log directory on the instance (gone with
    /// the VM of a `lifecycle: errand` group that was not kept alive).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub logs: String,
}
