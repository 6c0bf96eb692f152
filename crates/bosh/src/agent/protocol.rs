//! The BOSH agent wire format (`bosh-protocols.md` §2): request envelopes, replies, task
//! handles and the JSON shapes of every method's arguments and results.
//!
//! Pure types, no I/O. Field order follows what the Director sends (Ruby hash order), so the
//! JSON kubosh puts on the wire reads like the Director's. Objects that a real `bosh-agent`
//! may extend keep the keys kubosh does not know in an `extra` map, so a `get_state` value
//! deserializes and serializes back to the same JSON.
//!
//! Nullable keys that may also be absent are `Option<Option<T>>`: `None` leaves the key out,
//! `Some(None)` writes `null` (the Director sends `"az": null` for instance groups without
//! AZs, and a partial apply spec leaves `az` out entirely).

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

/// The protocol version the Director sends over NATS (`AgentClient::PROTOCOL_VERSION`).
/// It makes `stop` wait for processes and `list_disk` asynchronous.
pub const PROTOCOL_VERSION: u32 = 3;

/// Serde helper for `Option<Option<T>>`: absent key ⇒ `None`, `null` ⇒ `Some(None)`.
mod nullable {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize>(
        value: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

// ---------------------------------------------------------------------------------------
// Envelopes
// ---------------------------------------------------------------------------------------

/// A request to the agent.
///
/// Over NATS: `{"protocol":3,"method":..,"arguments":[..],"reply_to":"director.<uuid>.<agent>.<req>"}`
/// published to `agent.<agent_id>`. Over HTTPS (`POST /agent`) the same without `protocol`,
/// and `reply_to` is the director id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Protocol version; absent over HTTPS (the agent then applies protocol 0 semantics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
    /// The action name, e.g. `get_state`.
    pub method: String,
    /// Positional arguments.
    #[serde(default)]
    pub arguments: Vec<Value>,
    /// Where the agent publishes its reply.
    #[serde(default)]
    pub reply_to: String,
}

/// The agent's answer to one request: `{"value": ..}` or `{"exception": {"message": ..}}`.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Success. For asynchronous actions this is a [`TaskHandle`].
    Value(Value),
    /// Failure, with the agent's message.
    Exception(RemoteException),
}

/// Why a reply could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The reply had no bytes.
    #[error("empty reply")]
    Empty,
    /// The reply is not JSON.
    #[error("reply is not JSON: {0}")]
    Json(String),
    /// The reply is JSON but not an object.
    #[error("reply is not a JSON object")]
    NotAnObject,
}

impl Reply {
    /// A success reply.
    pub fn value(value: impl Into<Value>) -> Reply {
        Reply::Value(value.into())
    }

    /// A failure reply with `message`.
    pub fn exception(message: impl Into<String>) -> Reply {
        Reply::Exception(RemoteException::new(message))
    }

    /// Reads a reply the way the Director does (`agent_client.rb#handle_method`): an object
    /// with an `exception` key is a failure; otherwise its `value` (null when absent) is the
    /// result.
    pub fn from_slice(bytes: &[u8]) -> Result<Reply, ReplyError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ReplyError::Empty);
        }
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| ReplyError::Json(e.to_string()))?;
        Reply::from_json(value)
    }

    /// Like [`Reply::from_slice`], from parsed JSON.
    pub fn from_json(value: Value) -> Result<Reply, ReplyError> {
        let Value::Object(mut obj) = value else {
            return Err(ReplyError::NotAnObject);
        };
        if let Some(exception) = obj.get("exception") {
            return Ok(Reply::Exception(RemoteException::from_json(exception)));
        }
        Ok(Reply::Value(obj.remove("value").unwrap_or(Value::Null)))
    }

    /// The JSON the agent sends for this reply.
    pub fn to_json(&self) -> Value {
        match self {
            Reply::Value(v) => serde_json::json!({ "value": v }),
            Reply::Exception(e) => serde_json::json!({ "exception": e.to_json() }),
        }
    }

    /// The reply as bytes, as the agent sends it.
    pub fn to_vec(&self) -> Vec<u8> {
        self.to_json().to_string().into_bytes()
    }
}

/// The `exception` object of a failure reply.
///
/// The agent sends only `message` (`"Action Failed <method>: <cause>"`, `"unknown message
/// <method>"`, ...). The Director also understands `backtrace` and `blobstore_id` (a blob
/// with more output); they are kept when present.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoteException {
    /// The message, verbatim.
    pub message: String,
    /// Backtrace lines, if the sender included any.
    pub backtrace: Vec<String>,
    /// A blob holding more output, if the sender named one.
    pub blobstore_id: Option<String>,
}

impl RemoteException {
    /// An exception with just a message.
    pub fn new(message: impl Into<String>) -> RemoteException {
        RemoteException {
            message: message.into(),
            ..RemoteException::default()
        }
    }

    /// Reads an `exception` value leniently, as the Director's `format_exception` does: a
    /// non-object becomes the message; a missing message is empty.
    pub fn from_json(value: &Value) -> RemoteException {
        let Value::Object(obj) = value else {
            return RemoteException::new(ruby_to_s(value));
        };
        let message = obj.get("message").map(ruby_to_s).unwrap_or_default();
        let backtrace = match obj.get("backtrace") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => Vec::new(),
            Some(Value::Array(lines)) => lines.iter().map(ruby_to_s).collect(),
            Some(other) => vec![ruby_to_s(other)],
        };
        let blobstore_id = match obj.get("blobstore_id") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        RemoteException {
            message,
            backtrace,
            blobstore_id,
        }
    }

    /// The JSON form (`{"message": ..}` plus `backtrace`/`blobstore_id` when set).
    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("message".into(), Value::String(self.message.clone()));
        if !self.backtrace.is_empty() {
            obj.insert("backtrace".into(), self.backtrace.clone().into());
        }
        if let Some(id) = &self.blobstore_id {
            obj.insert("blobstore_id".into(), Value::String(id.clone()));
        }
        Value::Object(obj)
    }

    /// The text the Director raises: the message, then the backtrace lines.
    pub fn formatted(&self) -> String {
        let mut text = self.message.clone();
        if !self.backtrace.is_empty() {
            text.push('\n');
            text.push_str(&self.backtrace.join("\n"));
        }
        text
    }
}

/// Ruby's `to_s` for a JSON value: strings bare, `nil` empty, everything else as JSON.
fn ruby_to_s(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Asynchronous tasks (§2.3)
// ---------------------------------------------------------------------------------------

/// The value an asynchronous action replies with at once, and `get_task` while it runs:
/// `{"agent_task_id": "<uuid>", "state": "running"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskHandle {
    /// The agent's task id, for `get_task` and `cancel_task`.
    pub agent_task_id: String,
    /// `running` while the task runs.
    pub state: String,
}

impl TaskHandle {
    /// A running task.
    pub fn running(agent_task_id: impl Into<String>) -> TaskHandle {
        TaskHandle {
            agent_task_id: agent_task_id.into(),
            state: "running".into(),
        }
    }
}

/// What a reply value says about a task, read the way the Director reads it
/// (`AgentMessageConverter.convert_old_message_to_new`).
#[derive(Debug, Clone, PartialEq)]
pub enum TaskStatus {
    /// The task is still running.
    Running(TaskHandle),
    /// The task is done and this is its result.
    Done(Value),
}

impl TaskStatus {
    /// Interprets a reply value. An object with `agent_task_id` and `state` but no `value` is
    /// a task (running if `state` is `"running"`; any other state finished without a value);
    /// an object with `value` is that value (legacy form); anything else is the result itself.
    pub fn from_value(value: Value) -> TaskStatus {
        let Value::Object(mut obj) = value else {
            return TaskStatus::Done(value);
        };
        if let Some(v) = obj.remove("value") {
            let running = obj.get("state").and_then(Value::as_str) == Some("running");
            return match (running, obj.get("agent_task_id")) {
                (true, Some(Value::String(id))) => TaskStatus::Running(TaskHandle::running(id)),
                _ => TaskStatus::Done(v),
            };
        }
        match (obj.get("agent_task_id"), obj.get("state")) {
            (Some(Value::String(id)), Some(Value::String(state))) => {
                if state == "running" {
                    TaskStatus::Running(TaskHandle::running(id))
                } else {
                    TaskStatus::Done(Value::Null)
                }
            }
            _ => TaskStatus::Done(Value::Object(obj)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Apply spec (§2.5)
// ---------------------------------------------------------------------------------------

/// The apply spec the Director sends to `prepare`, `apply` and `drain`
/// (`deployment_plan/instance_spec.rb#ApplySpec`), and the spec part of `get_state`.
///
/// Every key is optional because the Director also sends partial specs (after creating a
/// VM: only `deployment`, `job`, `index`, `id`, `networks`). Keys the Director never sends
/// (`bootstrap`, `vm_type`, `stemcell`, `env`, `properties`, ...) are not fields; put them
/// in `extra` if an agent needs them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplySpec {
    /// Deployment name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// The instance group (legacy name `job`). `null` for a group without jobs; `{}` for a
    /// jobless spec.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nullable")]
    pub job: Option<Option<JobSpec>>,
    /// Instance index (`null` from an agent that has none yet).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nullable")]
    pub index: Option<Option<u64>>,
    /// Instance group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Instance UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Availability zone (`null` without AZs).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nullable")]
    pub az: Option<Option<String>>,
    /// Network settings by network name, verbatim (the Director compares them for equality).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networks: Option<Map<String, Value>>,
    /// Compiled packages by name (run-time dependencies of the jobs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<IndexMap<String, PackageSpec>>,
    /// The DNS root domain, e.g. `bosh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_domain_name: Option<String>,
    /// Persistent disk size in MiB, 0 without a (single managed) disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_disk: Option<u64>,
    /// SHA1 of each job's rendered templates, by job name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_hashes: Option<IndexMap<String, String>>,
    /// The rendered templates archive the agent installs jobs from.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nullable")]
    pub rendered_templates_archive: Option<Option<RenderedTemplatesArchive>>,
    /// Hash over all rendered templates; empty or absent ⇒ `apply` only records the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration_hash: Option<String>,
    /// Keys not modelled above, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `job` entry of an apply spec (the instance group and its jobs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Instance group name (an agent may report `null`).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nullable")]
    pub name: Option<Option<String>>,
    /// The jobs (an agent may report `null`).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nullable")]
    pub templates: Option<Option<Vec<JobTemplateSpec>>>,
    /// Name of the first job (legacy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Version (fingerprint) of the first job (legacy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Release name (reported by agents, not sent by the Director).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Keys not modelled above, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One job of an instance group in an apply spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobTemplateSpec {
    /// Job name.
    pub name: String,
    /// Job fingerprint.
    pub version: String,
    /// SHA1 of the job tarball (ignored by the agent; it installs from the rendered archive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha1: Option<String>,
    /// Blob of the job tarball (ignored by the agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blobstore_id: Option<String>,
    /// The job's `logs` spec, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<Value>,
    /// Keys not modelled above, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A compiled package in an apply spec, or a dependency of `compile_package`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PackageSpec {
    /// Package name.
    pub name: String,
    /// `<package version>.<build>` for compiled packages.
    pub version: String,
    /// Digest of the compiled tarball (SHA1 hex or multi-digest string).
    pub sha1: String,
    /// Blob holding the compiled tarball.
    pub blobstore_id: String,
    /// Pre-signed download URL (only with signed URLs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_url: Option<String>,
    /// Headers for the signed URL (agents report `null` when there are none).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "nullable")]
    pub blobstore_headers: Option<Option<IndexMap<String, String>>>,
    /// Keys not modelled above, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A blob reference: `{"name", "version", "sha1", "blobstore_id"}` (compile dependencies).
pub type PackageRef = PackageSpec;

/// The rendered templates archive of an apply spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderedTemplatesArchive {
    /// Blob holding the `.tgz`.
    pub blobstore_id: String,
    /// SHA1 of the `.tgz`.
    pub sha1: String,
}

// ---------------------------------------------------------------------------------------
// get_state (§2.6) and heartbeats (§2.7)
// ---------------------------------------------------------------------------------------

/// The value of `get_state`: the agent's persisted apply spec plus its own state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    /// The last applied spec (keys the agent keeps: it drops `template_hashes` and
    /// `dns_domain_name`, and reports only name and version of each job).
    #[serde(flatten)]
    pub spec: ApplySpec,
    /// `{"logging": {"max_log_file_size": ..}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<Value>,
    /// Legacy resource pool, `{}` on current agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_pool: Option<Value>,
    /// The agent id from its settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Aggregate state of the jobs' processes.
    pub job_state: JobState,
    /// Process states (monit), absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<Vec<Process>>,
    /// `{"name": <vm name>}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmInfo>,
    /// Only with `get_state ["full"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vitals: Option<Vitals>,
}

impl AgentState {
    /// Names of the processes that are not `running` (what the Director lists in "is not
    /// running after update").
    pub fn failing_processes(&self) -> Vec<&str> {
        self.processes
            .iter()
            .flatten()
            .filter(|p| p.state != "running")
            .map(|p| p.name.as_str())
            .collect()
    }
}

/// `job_state` of `get_state` and heartbeats.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum JobState {
    /// All processes run.
    Running,
    /// Some process is not monitored or not running.
    Failing,
    /// The agent's stopped marker exists.
    Stopped,
    /// Some process is starting.
    Starting,
    /// The supervisor cannot be queried (also the dummy supervisor before `start`).
    #[default]
    Unknown,
    /// The Director's own marker for an agent that did not answer.
    Unresponsive,
    /// Any other text, verbatim.
    Other(String),
}

impl JobState {
    /// The wire text.
    pub fn as_str(&self) -> &str {
        match self {
            JobState::Running => "running",
            JobState::Failing => "failing",
            JobState::Stopped => "stopped",
            JobState::Starting => "starting",
            JobState::Unknown => "unknown",
            JobState::Unresponsive => "unresponsive",
            JobState::Other(s) => s,
        }
    }
}

impl From<String> for JobState {
    fn from(s: String) -> JobState {
        match s.as_str() {
            "running" => JobState::Running,
            "failing" => JobState::Failing,
            "stopped" => JobState::Stopped,
            "starting" => JobState::Starting,
            "unknown" => JobState::Unknown,
            "unresponsive" => JobState::Unresponsive,
            _ => JobState::Other(s),
        }
    }
}

impl From<JobState> for String {
    fn from(s: JobState) -> String {
        match s {
            JobState::Other(s) => s,
            known => known.as_str().to_string(),
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One supervised process in `get_state`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Process {
    /// Process name (monit service).
    pub name: String,
    /// `running`, `failing`, ...
    pub state: String,
    /// `{"secs": n}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime: Option<ProcessUptime>,
    /// `{"kb": n, "percent": x}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem: Option<ProcessMem>,
    /// `{"total": x}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<ProcessCpu>,
    /// Keys not modelled above, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Process uptime. Numbers stay as sent (`0` and `0.0` differ on the wire).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessUptime {
    /// Seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secs: Option<Number>,
}

/// Process memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessMem {
    /// Resident KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kb: Option<Number>,
    /// Share of memory, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<Number>,
}

/// Process CPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessCpu {
    /// Total CPU, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<Number>,
}

/// `vm` of `get_state`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmInfo {
    /// The VM name from the agent settings.
    #[serde(default)]
    pub name: String,
    /// Keys not modelled above, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Machine vitals (`get_state ["full"]`, heartbeats). The agent sends numbers as strings,
/// except `uptime.secs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Vitals {
    /// CPU percentages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuVitals>,
    /// Disk usage by disk (`system`, `ephemeral`, `persistent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<IndexMap<String, DiskVitals>>,
    /// 1, 5 and 15 minute load averages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<Vec<String>>,
    /// Memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem: Option<MemVitals>,
    /// Swap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<MemVitals>,
    /// Machine uptime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime: Option<UptimeVitals>,
    /// Keys not modelled above, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// CPU vitals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuVitals {
    /// System CPU percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sys: Option<String>,
    /// User CPU percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// IO wait percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
}

/// Usage of one disk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskVitals {
    /// Inode usage percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inode_percent: Option<String>,
    /// Space usage percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<String>,
}

/// Memory or swap vitals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemVitals {
    /// KiB used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kb: Option<String>,
    /// Percent used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<String>,
}

/// Machine uptime.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UptimeVitals {
    /// Seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secs: Option<u64>,
}

/// A heartbeat, published by the agent on `hm.agent.heartbeat.<agent_id>` at start and
/// every 30 s (agent `agent/heartbeat.go`). All keys are always present.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Deployment name (empty before the first apply).
    #[serde(default)]
    pub deployment: String,
    /// Instance group name.
    #[serde(default)]
    pub job: Option<String>,
    /// Instance index.
    #[serde(default)]
    pub index: Option<u64>,
    /// Aggregate job state.
    #[serde(default)]
    pub job_state: JobState,
    /// Machine vitals.
    #[serde(default)]
    pub vitals: Vitals,
    /// Instance UUID.
    #[serde(default)]
    pub node_id: String,
    /// Number of supervised processes (`null` if the supervisor could not be asked).
    #[serde(default)]
    pub number_of_processes: Option<u64>,
}

// ---------------------------------------------------------------------------------------
// Method arguments and results (§2.4)
// ---------------------------------------------------------------------------------------

/// `info` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Info {
    /// Agent API version (1 today; the Director treats "unknown message" as 0).
    pub api_version: u64,
    /// Keys not modelled above, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The first argument of `drain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DrainType {
    /// The instance is updated in place; the new spec is required.
    Update,
    /// The instance stops or its VM goes away.
    Shutdown,
    /// Re-check a dynamic drain (old agents).
    Status,
}

impl DrainType {
    /// The wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            DrainType::Update => "update",
            DrainType::Shutdown => "shutdown",
            DrainType::Status => "status",
        }
    }
}

/// A `drain` type other than `update`, `shutdown` and `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownDrainType(pub String);

impl std::str::FromStr for DrainType {
    type Err = UnknownDrainType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "update" => Ok(Self::Update),
            "shutdown" => Ok(Self::Shutdown),
            "status" => Ok(Self::Status),
            other => Err(UnknownDrainType(other.to_string())),
        }
    }
}

/// The second argument of `run_script`: `{}` or `{"env": {..}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunScriptOptions {
    /// Extra environment for the scripts (the Director passes `BOSH_*_NEXT_STATE` to
    /// `pre-stop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<IndexMap<String, String>>,
}

/// Arguments of `compile_package` (sent positionally: blobstore_id, sha1, name, version,
/// dependencies).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompilePackageArgs {
    /// Blob of the source package.
    pub blobstore_id: String,
    /// Digest of the source package (SHA1 hex or multi-digest).
    pub sha1: String,
    /// Package name.
    pub name: String,
    /// Package version (with build suffix as the Director sends it).
    pub version: String,
    /// Compiled dependencies by name.
    pub dependencies: IndexMap<String, PackageRef>,
}

/// Value of `compile_package`: `{"result": {"blobstore_id", "sha1"}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompilePackageResult {
    /// The compiled package.
    pub result: CompiledBlob,
}

/// A compiled package as stored by the agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompiledBlob {
    /// Blob id of the compiled tarball (chosen by the agent; by the Director with signed URLs).
    #[serde(default)]
    pub blobstore_id: String,
    /// Digest of the compiled tarball.
    pub sha1: String,
    /// Keys not modelled above (`compile_log_id` on old agents), verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The argument of `compile_package_with_signed_url`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompilePackageWithSignedUrlArgs {
    /// Download URL of the source package.
    pub package_get_signed_url: String,
    /// Upload URL for the compiled package.
    pub upload_signed_url: String,
    /// Digest of the source package.
    pub digest: String,
    /// Package name.
    pub name: String,
    /// Package version.
    pub version: String,
    /// Dependencies with their signed download URLs.
    pub deps: IndexMap<String, SignedPackageRef>,
    /// Headers for the signed URLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blobstore_headers: Option<IndexMap<String, String>>,
}

/// A compile dependency with a signed download URL.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SignedPackageRef {
    /// Package name.
    pub name: String,
    /// Compiled version.
    pub version: String,
    /// Digest.
    pub sha1: String,
    /// Blob id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blobstore_id: Option<String>,
    /// Signed download URL.
    pub package_get_signed_url: String,
    /// Headers for the signed URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blobstore_headers: Option<IndexMap<String, String>>,
}

/// Where the CPI attached a disk (`attach_disk` v2 result), forwarded verbatim to
/// `add_persistent_disk`: a device path/number, or an object (`{"path"}`, `{"volume_id"}`,
/// `{"lun", "host_device_id"}`, `{"iscsi_settings"}`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DiskHint {
    /// `"/dev/sdf"`, `"3"`.
    Path(String),
    /// Any object form.
    Object(Map<String, Value>),
}

/// Value of `unmount_disk`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmountDiskResult {
    /// `"Unmounted partition of ..."` or `"Partition of ... is not mounted"`.
    #[serde(default)]
    pub message: String,
}

/// Argument of `sync_dns_with_signed_url`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncDnsWithSignedUrlArgs {
    /// Download URL of the records blob.
    pub signed_url: String,
    /// Digest of the blob.
    pub multi_digest: String,
    /// Records version.
    pub version: u64,
    /// Headers for the signed URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blobstore_headers: Option<IndexMap<String, String>>,
}

/// Argument of `update_settings`. `Debug` hides the mbus private key and blobstore options.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateSettings {
    /// PEM bundle of trusted CA certificates (the Director always sends it).
    #[serde(default)]
    pub trusted_certs: String,
    /// Unmanaged persistent disks by name.
    #[serde(default)]
    pub disk_associations: Vec<DiskAssociation>,
    /// New blobstores (only when the blobstore config changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blobstores: Option<Vec<BlobstoreSettings>>,
    /// A new NATS client certificate (rotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mbus: Option<MbusSettings>,
}

impl std::fmt::Debug for UpdateSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdateSettings")
            .field(
                "trusted_certs",
                &format_args!("<{} bytes>", self.trusted_certs.len()),
            )
            .field("disk_associations", &self.disk_associations)
            .field(
                "blobstores",
                &self.blobstores.as_ref().map(|_| "<redacted>"),
            )
            .field("mbus", &self.mbus.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// `{"name": <disk name>, "cid": <disk cid>}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskAssociation {
    /// The disk's name in the manifest.
    pub name: String,
    /// The disk CID.
    pub cid: String,
}

/// A blobstore in `update_settings`: `{"provider", "options"}`.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BlobstoreSettings {
    /// `dav`, `s3`, `gcs`, `local`.
    pub provider: String,
    /// Provider options (may hold credentials).
    #[serde(default)]
    pub options: Map<String, Value>,
}

impl std::fmt::Debug for BlobstoreSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobstoreSettings")
            .field("provider", &self.provider)
            .field("options", &"<redacted>")
            .finish()
    }
}

/// `mbus` in `update_settings`.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MbusSettings {
    /// The new client certificate, key and the NATS CA.
    pub cert: CertKeyPair,
    /// New NATS URLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub urls: Option<Vec<String>>,
}

impl std::fmt::Debug for MbusSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MbusSettings")
            .field("cert", &self.cert)
            .field("urls", &self.urls.as_ref().map(|u| u.len()))
            .finish()
    }
}

/// `{"ca", "certificate", "private_key"}`, PEM. `Debug` hides the key.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertKeyPair {
    /// CA certificate(s).
    pub ca: String,
    /// Certificate.
    pub certificate: String,
    /// Private key.
    pub private_key: String,
}

impl std::fmt::Debug for CertKeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertKeyPair")
            .field("ca", &format_args!("<{} bytes>", self.ca.len()))
            .field(
                "certificate",
                &format_args!("<{} bytes>", self.certificate.len()),
            )
            .field("private_key", &"<redacted>")
            .finish()
    }
}

/// Argument of `upload_blob`. `Debug` hides the payload and checksum, as the Director's log
/// does.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadBlob {
    /// Id to store the blob under.
    pub blob_id: String,
    /// Multi-digest of the decoded payload.
    pub checksum: String,
    /// The blob, base64 (standard alphabet, padded).
    pub payload: String,
}

impl UploadBlob {
    /// Encodes `bytes` as the payload.
    pub fn new(blob_id: impl Into<String>, checksum: impl Into<String>, bytes: &[u8]) -> Self {
        use base64::Engine as _;
        UploadBlob {
            blob_id: blob_id.into(),
            checksum: checksum.into(),
            payload: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

impl std::fmt::Debug for UploadBlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadBlob")
            .field("blob_id", &self.blob_id)
            .field("checksum", &"<redacted>")
            .field(
                "payload",
                &format_args!("<{} bytes base64>", self.payload.len()),
            )
            .finish()
    }
}

/// Argument of `delete_arp_entries`: `{"ips": [..]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteArpEntries {
    /// IP addresses whose ARP entries go.
    pub ips: Vec<String>,
}

/// Value of `fetch_logs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchLogsResult {
    /// Blob with the logs `.tgz`.
    pub blobstore_id: String,
    /// Its digest.
    pub sha1: String,
}

/// Argument of `fetch_logs_with_signed_url`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchLogsWithSignedUrlArgs {
    /// Upload URL.
    pub signed_url: String,
    /// `job`, `agent` or `system`.
    pub log_type: String,
    /// Path filters.
    pub filters: Vec<String>,
    /// Headers for the signed URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blobstore_headers: Option<IndexMap<String, String>>,
}

/// Value of `fetch_logs_with_signed_url`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchLogsWithSignedUrlResult {
    /// Digest of the uploaded `.tgz`.
    pub sha1: String,
}

/// Argument of `bundle_logs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleLogsArgs {
    /// User that should own the tarball.
    pub owning_user: String,
    /// `job`, `agent` or `system`.
    pub log_type: String,
    /// Path filters.
    pub filters: Vec<String>,
}

/// Value of `bundle_logs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleLogsResult {
    /// Path of the tarball on the VM.
    pub logs_tar_path: String,
    /// Its SHA512.
    pub sha512: String,
}

/// Value of `run_errand`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrandResult {
    /// Captured stdout.
    #[serde(default)]
    pub stdout: String,
    /// Captured stderr.
    #[serde(default)]
    pub stderr: String,
    /// Exit code of `bin/run`.
    #[serde(default)]
    pub exit_code: i64,
}

/// The `ssh` command and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SshCommand {
    /// `["setup", {"user", "public_key"}]`.
    Setup {
        /// User to create.
        user: String,
        /// Its authorized key.
        public_key: String,
    },
    /// `["cleanup", {"user_regex"}]`.
    Cleanup {
        /// Users to delete.
        user_regex: String,
    },
}

/// A user name `ssh setup` may create: `[a-z_][a-z0-9_-]*`, what `useradd` takes (and
/// nothing a cleanup's regular expression would read as more than the name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshUser(String);

impl SshUser {
    /// `name`, if it is one.
    pub fn new(name: &str) -> Option<SshUser> {
        let mut chars = name.chars();
        let first = chars.next()?;
        let valid = (first.is_ascii_lowercase() || first == '_')
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        valid.then(|| SshUser(name.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `user_regex` of its cleanup: `^<user>`, as bosh-cli asks.
    pub fn cleanup_regex(&self) -> String {
        format!("^{}", self.0)
    }
}

impl SshCommand {
    /// The positional arguments.
    pub fn arguments(&self) -> Vec<Value> {
        match self {
            SshCommand::Setup { user, public_key } => vec![
                "setup".into(),
                serde_json::json!({ "user": user, "public_key": public_key }),
            ],
            SshCommand::Cleanup { user_regex } => vec![
                "cleanup".into(),
                serde_json::json!({ "user_regex": user_regex }),
            ],
        }
    }
}

/// Value of `ssh`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshResult {
    /// `setup` or `cleanup`.
    #[serde(default)]
    pub command: String,
    /// `success`.
    #[serde(default)]
    pub status: String,
    /// The VM's IP (setup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The host key (setup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_public_key: Option<String>,
    /// kubosh's agent only (bosh-agent never sends it): the VM's base directory on its
    /// host, for a VM that is a directory of its host (the local cloud), where a session is a
    /// shell rather than `ssh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_root: Option<String>,
}

#[cfg(test)]
mod tests;
