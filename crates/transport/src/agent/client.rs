//! The Director's agent client (`director/agent_client.rb`), independent of the transport:
//! typed methods for every agent action, task polling, retries and the Director's error
//! texts.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::Value;
// The tokio clock, so that a paused test clock also runs out `stop`'s and
// `wait_until_ready`'s limits.
use tokio::time::Instant;

use super::protocol::{
    AgentState, ApplySpec, BundleLogsArgs, BundleLogsResult, CompilePackageArgs,
    CompilePackageResult, CompilePackageWithSignedUrlArgs, DeleteArpEntries, DiskHint, DrainType,
    ErrandResult, FetchLogsResult, FetchLogsWithSignedUrlArgs, FetchLogsWithSignedUrlResult, Info,
    Reply, ReplyError, RunScriptOptions, SshCommand, SshResult, SyncDnsWithSignedUrlArgs,
    TaskHandle, TaskStatus, UnmountDiskResult, UpdateSettings, UploadBlob,
};

/// Why a transport could not deliver a request or bring back its reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// No reply within the timeout.
    #[error("no reply within the timeout")]
    Timeout,
    /// The reply could not be read.
    #[error(transparent)]
    Reply(#[from] ReplyError),
    /// The agent id cannot be used (e.g. it is not a single NATS subject token).
    #[error("invalid agent id {0:?}")]
    InvalidAgentId(String),
    /// The HTTPS agent answered with a status other than 200.
    #[error("Agent responded with non-successful status code: {0}")]
    Status(u16),
    /// The connection failed or closed.
    #[error("{0}")]
    Connection(String),
    /// The message bus itself cannot be reached (its connection has been down for a
    /// while): no agent can answer. The text names the bus (`NATS at nats://host:port`,
    /// never credentials) and for how long it has been down.
    #[error("{0}")]
    Unreachable(String),
}

/// One way of reaching agents: NATS ([`super::nats::NatsTransport`]) or HTTPS
/// ([`super::https::HttpsTransport`]). One call is one request and its one reply.
pub trait Transport: Send + Sync {
    /// Sends `method(arguments)` to `agent_id` and waits at most `timeout` for the reply.
    fn request<'a>(
        &'a self,
        agent_id: &'a str,
        method: &'a str,
        arguments: &'a [Value],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Reply, TransportError>>;

    /// Sends `method(arguments)` without waiting for a reply (the Director's
    /// `fire_and_forget`).
    fn notify<'a>(
        &'a self,
        agent_id: &'a str,
        method: &'a str,
        arguments: &'a [Value],
    ) -> BoxFuture<'a, Result<(), TransportError>>;

    /// The `protocol` the agent sees: `Some(3)` over NATS, `None` over HTTPS (no `protocol`
    /// key, so the agent uses protocol 0 semantics).
    fn protocol(&self) -> Option<u32>;
}

/// An agent call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// No reply in time. The text is the Director's (`agent_client.rb#handle_method`).
    #[error(
        "Timed out sending '{method}' to instance: '{instance}', agent-id: '{agent_id}' after {} seconds",
        seconds(*.after)
    )]
    Timeout {
        /// The method.
        method: String,
        /// The instance name (`unknown` when not given).
        instance: String,
        /// The agent id.
        agent_id: String,
        /// The timeout.
        after: Duration,
    },
    /// The agent never answered `ping` (`agent_client.rb#wait_until_ready`).
    #[error("Timed out pinging VM '{vm_cid}' with agent '{agent_id}' after {} seconds", seconds(*.after))]
    PingTimeout {
        /// The VM.
        vm_cid: String,
        /// The agent id.
        agent_id: String,
        /// How long kubosh waited.
        after: Duration,
    },
    /// The agent replied with an exception. The text is the agent's, verbatim (e.g.
    /// `Action Failed get_task: Task 1 result: ...`), followed by backtrace lines if any.
    #[error("{message}")]
    Remote {
        /// The method.
        method: String,
        /// The agent's message.
        message: String,
        /// A blob with more output, if the agent named one.
        blobstore_id: Option<String>,
    },
    /// An old agent does not know the action (`upload_blob`).
    #[error("Unsupported action: {method}")]
    Unsupported {
        /// The method.
        method: String,
    },
    /// A Windows agent could not open its blob store (`upload_blob`).
    #[error("'Upload blob' action: failed to open blob")]
    UploadBlobUnableToOpenFile,
    /// The reply does not have the shape the protocol gives for this method.
    #[error("malformed reply to '{method}' from agent '{agent_id}': {reason}")]
    MalformedReply {
        /// The method.
        method: String,
        /// The agent id.
        agent_id: String,
        /// What was wrong.
        reason: String,
    },
    /// The request could not be delivered.
    #[error("sending '{method}' to agent '{agent_id}': {reason}")]
    Transport {
        /// The method.
        method: String,
        /// The agent id.
        agent_id: String,
        /// What failed.
        reason: String,
    },
    /// The message bus (NATS) cannot be reached, so no agent can: the cause is the bus, not
    /// the agent (not a timeout: the agent's VM may well be fine).
    #[error("{reason}: cannot send '{method}' to instance: '{instance}', agent-id: '{agent_id}'")]
    Unreachable {
        /// The method.
        method: String,
        /// The instance name (`unknown` when not given).
        instance: String,
        /// The agent id.
        agent_id: String,
        /// Which bus, since when (`NATS at nats://10.0.0.6:4222 is unreachable: ...`).
        reason: String,
    },
    /// Waiting was cancelled; the agent task was sent `cancel_task`.
    #[error("'{method}' on agent '{agent_id}' was cancelled")]
    Cancelled {
        /// The method.
        method: String,
        /// The agent id.
        agent_id: String,
    },
}

impl AgentError {
    /// True for an exception saying the agent does not know the method (old agents).
    pub fn is_unknown_message(&self) -> bool {
        matches!(self, AgentError::Remote { message, .. } if message.contains("unknown message"))
    }

    /// True when no reply came in time (from an agent behind a working bus: an unreachable
    /// bus is [`AgentError::is_unreachable`], not a timeout).
    pub fn is_timeout(&self) -> bool {
        matches!(self, AgentError::Timeout { .. })
    }

    /// True when the message bus could not be reached: nothing is known of the agent.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, AgentError::Unreachable { .. })
    }
}

/// Seconds as the Director prints them: `45`, or `0.5` for fractions.
fn seconds(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{}", d.as_secs_f64())
    }
}

/// Whether an action answers directly or returns a task to poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The reply value is the result.
    Sync,
    /// The reply is `{"agent_task_id", "state": "running"}`; poll `get_task`.
    Async,
}

macro_rules! methods {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// Every agent action (`agent/action/concrete_factory.go`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Method { $(
            #[doc = concat!("`", $name, "`")]
            $variant,
        )* }

        impl Method {
            /// All methods.
            pub const ALL: &'static [Method] = &[$(Method::$variant),*];

            /// The wire name.
            pub fn name(self) -> &'static str {
                match self { $(Method::$variant => $name),* }
            }

            /// The method with this wire name.
            pub fn from_name(name: &str) -> Option<Method> {
                match name { $($name => Some(Method::$variant),)* _ => None }
            }
        }
    };
}

methods! {
    Ping => "ping",
    Info => "info",
    GetTask => "get_task",
    CancelTask => "cancel_task",
    GetState => "get_state",
    Prepare => "prepare",
    Apply => "apply",
    Start => "start",
    Stop => "stop",
    Drain => "drain",
    RunScript => "run_script",
    RunErrand => "run_errand",
    CompilePackage => "compile_package",
    CompilePackageWithSignedUrl => "compile_package_with_signed_url",
    MountDisk => "mount_disk",
    UnmountDisk => "unmount_disk",
    AddPersistentDisk => "add_persistent_disk",
    RemovePersistentDisk => "remove_persistent_disk",
    MigrateDisk => "migrate_disk",
    ListDisk => "list_disk",
    AddDynamicDisk => "add_dynamic_disk",
    RemoveDynamicDisk => "remove_dynamic_disk",
    SyncDns => "sync_dns",
    SyncDnsWithSignedUrl => "sync_dns_with_signed_url",
    UpdateSettings => "update_settings",
    UploadBlob => "upload_blob",
    DeleteArpEntries => "delete_arp_entries",
    FetchLogs => "fetch_logs",
    FetchLogsWithSignedUrl => "fetch_logs_with_signed_url",
    BundleLogs => "bundle_logs",
    Ssh => "ssh",
    Shutdown => "shutdown",
    RemoveFile => "remove_file",
}

impl Method {
    /// Whether the agent answers directly or with a task, for the `protocol` it is sent
    /// with (`None` over HTTPS). From each action's `IsAsynchronous`.
    pub fn mode(self, protocol: Option<u32>) -> Mode {
        use Method::*;
        match self {
            Prepare
            | Apply
            | Stop
            | Drain
            | RunScript
            | RunErrand
            | CompilePackage
            | CompilePackageWithSignedUrl
            | MountDisk
            | UnmountDisk
            | AddPersistentDisk
            | RemovePersistentDisk
            | MigrateDisk
            | AddDynamicDisk
            | UpdateSettings
            | UploadBlob
            | FetchLogs
            | FetchLogsWithSignedUrl => Mode::Async,
            ListDisk if protocol.unwrap_or(0) >= 3 => Mode::Async,
            _ => Mode::Sync,
        }
    }

    /// Whether `cancel_task` can stop the task (`drain`, `run_errand`).
    pub fn is_cancellable(self) -> bool {
        matches!(self, Method::Drain | Method::RunErrand)
    }

    /// Whether the Director sends it without waiting for a reply.
    pub fn is_fire_and_forget(self) -> bool {
        matches!(self, Method::Shutdown | Method::DeleteArpEntries)
    }
}

/// Timeouts, polling and retries. [`ClientOptions::default`] is the Director's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Reply timeout of one message (45 s).
    pub timeout: Duration,
    /// `get_task` polling interval (`DEFAULT_POLL_INTERVAL`, 1 s).
    pub poll_interval: Duration,
    /// How long `stop` waits for its task before going on (`STOP_MESSAGE_TIMEOUT`, 300 s).
    pub stop_timeout: Duration,
    /// Reply timeout of `sync_dns` (`SYNC_DNS_MESSAGE_TIMEOUT`, 10 s).
    pub sync_dns_timeout: Duration,
    /// Extra attempts of `get_state` after a timeout (2).
    pub get_state_retries: u32,
    /// Extra attempts of `get_task` after a timeout (4).
    pub get_task_retries: u32,
    /// Extra attempts of `upload_blob` after a timeout (3).
    pub upload_blob_retries: u32,
    /// Also retry (the same counts) when the transport fails to deliver, not only on
    /// timeouts. The BOSH CLI does this over HTTPS (it tolerates 10 failed `get_task`s).
    pub retry_transport_errors: bool,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            timeout: Duration::from_secs(45),
            poll_interval: Duration::from_secs(1),
            stop_timeout: Duration::from_secs(300),
            sync_dns_timeout: Duration::from_secs(10),
            get_state_retries: 2,
            get_task_retries: 4,
            upload_blob_retries: 3,
            retry_transport_errors: false,
        }
    }
}

impl ClientOptions {
    /// The BOSH CLI's create-env settings over HTTPS: `get_task` every second, up to 10
    /// failed deliveries of `get_task` and `get_state` tolerated.
    pub fn create_env() -> ClientOptions {
        ClientOptions {
            get_state_retries: 10,
            get_task_retries: 10,
            retry_transport_errors: true,
            ..ClientOptions::default()
        }
    }

    fn retries(&self, method: Method) -> u32 {
        match method {
            Method::GetState => self.get_state_retries,
            Method::GetTask => self.get_task_retries,
            Method::UploadBlob => self.upload_blob_retries,
            _ => 0,
        }
    }
}

/// The first reply to an action: its result, or a task to wait for.
#[derive(Debug, Clone, PartialEq)]
pub enum Started {
    /// The action answered directly.
    Done(Value),
    /// The action runs as a task.
    Task(TaskHandle),
}

/// A client for one agent. Cheap to clone; clones share the transport.
#[derive(Clone)]
pub struct AgentClient {
    transport: Arc<dyn Transport>,
    agent_id: String,
    instance: String,
    options: ClientOptions,
}

impl std::fmt::Debug for AgentClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentClient")
            .field("agent_id", &self.agent_id)
            .field("instance", &self.instance)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl AgentClient {
    /// A client for `agent_id` over `transport`, with the Director's options.
    pub fn new(transport: Arc<dyn Transport>, agent_id: impl Into<String>) -> AgentClient {
        AgentClient {
            transport,
            agent_id: agent_id.into(),
            instance: "unknown".into(),
            options: ClientOptions::default(),
        }
    }

    /// Names the instance in error messages (`<group>/<uuid>`; default `unknown`).
    pub fn with_instance_name(mut self, instance: impl Into<String>) -> AgentClient {
        self.instance = instance.into();
        self
    }

    /// Replaces the options.
    pub fn with_options(mut self, options: ClientOptions) -> AgentClient {
        self.options = options;
        self
    }

    /// The agent id.
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    /// The options in use.
    pub fn options(&self) -> &ClientOptions {
        &self.options
    }

    // ---- generic calls ------------------------------------------------------------------

    /// Sends one message and returns the reply value (no task handling), retrying timeouts
    /// as the Director does for `get_state`, `get_task` and `upload_blob`.
    pub async fn send(&self, method: Method, arguments: &[Value]) -> Result<Value, AgentError> {
        self.send_with_timeout(method, arguments, self.options.timeout)
            .await
    }

    async fn send_with_timeout(
        &self,
        method: Method,
        arguments: &[Value],
        timeout: Duration,
    ) -> Result<Value, AgentError> {
        let mut retries = self.options.retries(method);
        loop {
            match self.send_once(method, arguments, timeout).await {
                Err(e) if retries > 0 && self.retryable(&e) => {
                    retries -= 1;
                    tracing::debug!(agent_id = %self.agent_id, method = method.name(), error = %e, "retrying");
                }
                other => return other,
            }
        }
    }

    fn retryable(&self, e: &AgentError) -> bool {
        match e {
            AgentError::Timeout { .. } => true,
            AgentError::Transport { .. } => self.options.retry_transport_errors,
            _ => false,
        }
    }

    async fn send_once(
        &self,
        method: Method,
        arguments: &[Value],
        timeout: Duration,
    ) -> Result<Value, AgentError> {
        let name = method.name();
        tracing::debug!(agent_id = %self.agent_id, method = name, "SENT");
        tracing::trace!(agent_id = %self.agent_id, method = name, arguments = %sanitized_arguments(method, arguments), "SENT arguments");
        let reply = self
            .transport
            .request(&self.agent_id, name, arguments, timeout)
            .await
            .map_err(|e| self.transport_error(name, e, timeout))?;
        match reply {
            Reply::Value(v) => {
                tracing::debug!(agent_id = %self.agent_id, method = name, "RECEIVED value");
                Ok(v)
            }
            Reply::Exception(e) => {
                tracing::debug!(agent_id = %self.agent_id, method = name, message = %e.message, "RECEIVED exception");
                Err(AgentError::Remote {
                    method: name.to_string(),
                    message: e.formatted(),
                    blobstore_id: e.blobstore_id,
                })
            }
        }
    }

    fn transport_error(&self, method: &str, e: TransportError, timeout: Duration) -> AgentError {
        match e {
            TransportError::Timeout => AgentError::Timeout {
                method: method.to_string(),
                instance: self.instance.clone(),
                agent_id: self.agent_id.clone(),
                after: timeout,
            },
            TransportError::Unreachable(reason) => AgentError::Unreachable {
                method: method.to_string(),
                instance: self.instance.clone(),
                agent_id: self.agent_id.clone(),
                reason,
            },
            TransportError::Reply(r) => AgentError::MalformedReply {
                method: method.to_string(),
                agent_id: self.agent_id.clone(),
                reason: r.to_string(),
            },
            other => AgentError::Transport {
                method: method.to_string(),
                agent_id: self.agent_id.clone(),
                reason: other.to_string(),
            },
        }
    }

    /// Sends an action and reads its first reply as a result or a task, by the method's
    /// [`Mode`].
    pub async fn start_task(
        &self,
        method: Method,
        arguments: &[Value],
    ) -> Result<Started, AgentError> {
        let value = self.send(method, arguments).await?;
        Ok(match method.mode(self.transport.protocol()) {
            Mode::Sync => Started::Done(value),
            Mode::Async => match TaskStatus::from_value(value) {
                TaskStatus::Running(handle) => Started::Task(handle),
                TaskStatus::Done(v) => Started::Done(v),
            },
        })
    }

    /// Polls `get_task` every `poll_interval` until the task is no longer running and
    /// returns its result. A failed task is an [`AgentError::Remote`] with the agent's
    /// message (`Action Failed get_task: Task <id> result: <cause>`).
    pub async fn wait_for_task(&self, task: &TaskHandle) -> Result<Value, AgentError> {
        self.poll_task(task, None)
            .await
            .map(|v| v.unwrap_or(Value::Null))
    }

    /// Like [`AgentClient::wait_for_task`], but gives up after `limit` (returning
    /// `Ok(None)`, the task left running) as the Director does for `stop`.
    pub async fn wait_for_task_at_most(
        &self,
        task: &TaskHandle,
        limit: Duration,
    ) -> Result<Option<Value>, AgentError> {
        self.poll_task(task, Some(limit)).await
    }

    /// Like [`AgentClient::wait_for_task`], but when `cancel` completes first, sends
    /// `cancel_task` and returns [`AgentError::Cancelled`].
    pub async fn wait_for_task_cancellable(
        &self,
        method: Method,
        task: &TaskHandle,
        cancel: impl Future<Output = ()>,
    ) -> Result<Value, AgentError> {
        tokio::select! {
            result = self.wait_for_task(task) => result,
            () = cancel => {
                if let Err(e) = self.cancel_task(&task.agent_task_id).await {
                    tracing::warn!(agent_id = %self.agent_id, method = method.name(), error = %e, "cancel_task failed");
                }
                Err(AgentError::Cancelled { method: method.name().into(), agent_id: self.agent_id.clone() })
            }
        }
    }

    async fn poll_task(
        &self,
        task: &TaskHandle,
        limit: Option<Duration>,
    ) -> Result<Option<Value>, AgentError> {
        let started = Instant::now();
        let mut status = self.get_task(&task.agent_task_id).await?;
        loop {
            match status {
                TaskStatus::Done(v) => return Ok(Some(v)),
                TaskStatus::Running(_) => {
                    if limit.is_some_and(|l| started.elapsed() >= l) {
                        tracing::debug!(agent_id = %self.agent_id, task = %task.agent_task_id, "task timed out");
                        return Ok(None);
                    }
                    tokio::time::sleep(self.options.poll_interval).await;
                    status = self.get_task(&task.agent_task_id).await?;
                }
            }
        }
    }

    /// Sends an action and, if it runs as a task, waits for it (`send_message`).
    pub async fn call(&self, method: Method, arguments: &[Value]) -> Result<Value, AgentError> {
        match self.start_task(method, arguments).await? {
            Started::Done(v) => Ok(v),
            Started::Task(t) => self.wait_for_task(&t).await,
        }
    }

    async fn call_typed<T: DeserializeOwned>(
        &self,
        method: Method,
        arguments: &[Value],
    ) -> Result<T, AgentError> {
        let v = self.call(method, arguments).await?;
        self.decode(method, v)
    }

    fn decode<T: DeserializeOwned>(&self, method: Method, v: Value) -> Result<T, AgentError> {
        serde_json::from_value(v).map_err(|e| AgentError::MalformedReply {
            method: method.name().into(),
            agent_id: self.agent_id.clone(),
            reason: e.to_string(),
        })
    }

    /// Like [`AgentClient::call`], but an "unknown message" exception (old agents) is
    /// success (`safe_send_message`).
    async fn call_safe(&self, method: Method, arguments: &[Value]) -> Result<(), AgentError> {
        match self.call(method, arguments).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_unknown_message() => {
                tracing::warn!(agent_id = %self.agent_id, method = method.name(), error = %e, "ignoring 'unknown message' error from the agent");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Sends without waiting; failures are logged and ignored (`fire_and_forget`).
    async fn fire_and_forget(&self, method: Method, arguments: &[Value]) {
        tracing::debug!(agent_id = %self.agent_id, method = method.name(), "SENT (fire and forget)");
        if let Err(e) = self
            .transport
            .notify(&self.agent_id, method.name(), arguments)
            .await
        {
            tracing::warn!(agent_id = %self.agent_id, method = method.name(), error = %e, "ignoring error from the agent");
        }
    }

    // ---- typed methods ------------------------------------------------------------------

    /// `ping` ⇒ `"pong"`.
    pub async fn ping(&self) -> Result<String, AgentError> {
        self.call_typed(Method::Ping, &[]).await
    }

    /// Pings until the agent answers (1 s per attempt), for at most `deadline`; "restarting
    /// agent" exceptions and undelivered requests are retried too
    /// (`agent_client.rb#wait_until_ready`). An unreachable bus ends the wait at once.
    pub async fn wait_until_ready(
        &self,
        vm_cid: &str,
        deadline: Duration,
    ) -> Result<(), AgentError> {
        let attempt_timeout = Duration::from_secs(1);
        let end = Instant::now() + deadline;
        loop {
            let started = Instant::now();
            let err = match self.send_once(Method::Ping, &[], attempt_timeout).await {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            let retry = match &err {
                AgentError::Timeout { .. } | AgentError::Transport { .. } => true,
                AgentError::Remote { message, .. } => message.starts_with("restarting agent"),
                _ => false,
            };
            if !retry {
                return Err(err);
            }
            if Instant::now() >= end {
                return Err(match err {
                    AgentError::Remote { .. } => err,
                    _ => AgentError::PingTimeout {
                        vm_cid: vm_cid.to_string(),
                        agent_id: self.agent_id.clone(),
                        after: deadline,
                    },
                });
            }
            // Failures that come back at once (connection refused) are paced like timeouts.
            if let Some(rest) = attempt_timeout.checked_sub(started.elapsed()) {
                tokio::time::sleep(rest.min(end.saturating_duration_since(Instant::now()))).await;
            }
        }
    }

    /// `info` ⇒ `{"api_version"}`; an agent that does not know `info` is API version 0.
    pub async fn info(&self) -> Result<Info, AgentError> {
        match self.call_typed(Method::Info, &[]).await {
            Err(e) if e.is_unknown_message() => Ok(Info::default()),
            other => other,
        }
    }

    /// `get_state`, or `get_state ["full"]` with vitals.
    pub async fn get_state(&self, full: bool) -> Result<AgentState, AgentError> {
        let args: Vec<Value> = if full { vec!["full".into()] } else { vec![] };
        self.call_typed(Method::GetState, &args).await
    }

    /// `get_task [id]`: the task's state, its result, or its failure.
    pub async fn get_task(&self, agent_task_id: &str) -> Result<TaskStatus, AgentError> {
        let v = self.send(Method::GetTask, &[agent_task_id.into()]).await?;
        Ok(TaskStatus::from_value(v))
    }

    /// `cancel_task [id]` ⇒ `"canceled"`.
    pub async fn cancel_task(&self, agent_task_id: &str) -> Result<String, AgentError> {
        let v = self
            .send(Method::CancelTask, &[agent_task_id.into()])
            .await?;
        self.decode(Method::CancelTask, v)
    }

    /// `prepare <spec>` (task) ⇒ `"prepared"`.
    pub async fn prepare(&self, spec: &ApplySpec) -> Result<String, AgentError> {
        let args = [self.encode(Method::Prepare, spec)?];
        self.call_typed(Method::Prepare, &args).await
    }

    /// `apply <spec>` (task) ⇒ `"applied"`.
    pub async fn apply(&self, spec: &ApplySpec) -> Result<String, AgentError> {
        let args = [self.encode(Method::Apply, spec)?];
        self.call_typed(Method::Apply, &args).await
    }

    /// `start` (synchronous) ⇒ `"started"`.
    pub async fn start(&self) -> Result<String, AgentError> {
        self.call_typed(Method::Start, &[]).await
    }

    /// `stop` (task). Waits at most `stop_timeout` for the task, then goes on; an agent
    /// error containing "Timed out waiting for service" is ignored too (`agent_client.rb#stop`).
    pub async fn stop(&self) -> Result<(), AgentError> {
        let outcome: Result<(), AgentError> = async {
            match self.start_task(Method::Stop, &[]).await? {
                Started::Done(_) => Ok(()),
                Started::Task(t) => {
                    if self
                        .wait_for_task_at_most(&t, self.options.stop_timeout)
                        .await?
                        .is_none()
                    {
                        tracing::warn!(agent_id = %self.agent_id, "stop task still running after {} seconds; going on", seconds(self.options.stop_timeout));
                    }
                    Ok(())
                }
            }
        }
        .await;
        match outcome {
            Err(e) if e.to_string().contains("Timed out waiting for service") => {
                tracing::warn!(agent_id = %self.agent_id, error = %e, "ignoring stop timeout error from the agent");
                Ok(())
            }
            other => other,
        }
    }

    /// `drain <type> [<spec>]` (task) ⇒ seconds to wait (0 from current agents, which run
    /// the dynamic drain loop themselves; negative ⇒ ask again with [`DrainType::Status`]).
    pub async fn drain(
        &self,
        kind: DrainType,
        spec: Option<&ApplySpec>,
    ) -> Result<i64, AgentError> {
        self.drain_cancellable(kind, spec, std::future::pending())
            .await
    }

    /// Like [`AgentClient::drain`]; when `cancel` completes first the agent task gets
    /// `cancel_task` (the drain script is terminated) and this returns
    /// [`AgentError::Cancelled`].
    pub async fn drain_cancellable(
        &self,
        kind: DrainType,
        spec: Option<&ApplySpec>,
        cancel: impl Future<Output = ()>,
    ) -> Result<i64, AgentError> {
        let mut args = vec![Value::from(kind.as_str())];
        if let Some(spec) = spec {
            args.push(self.encode(Method::Drain, spec)?);
        }
        let v = match self.start_task(Method::Drain, &args).await? {
            Started::Done(v) => v,
            Started::Task(t) => {
                self.wait_for_task_cancellable(Method::Drain, &t, cancel)
                    .await?
            }
        };
        self.decode(Method::Drain, v)
    }

    /// `run_script <name> <options>` (task); runs `pre-start`, `post-start`, `post-deploy`,
    /// `pre-stop` or `post-stop` of every job. "unknown message" (old agents) is success.
    pub async fn run_script(
        &self,
        script: &str,
        options: &RunScriptOptions,
    ) -> Result<(), AgentError> {
        let args = [script.into(), self.encode(Method::RunScript, options)?];
        self.call_safe(Method::RunScript, &args).await
    }

    /// `run_errand [<name>]` (task, cancellable like [`AgentClient::drain_cancellable`]).
    pub async fn run_errand(
        &self,
        errand: Option<&str>,
        cancel: impl Future<Output = ()>,
    ) -> Result<ErrandResult, AgentError> {
        let args: Vec<Value> = errand.map(Value::from).into_iter().collect();
        let v = match self.start_task(Method::RunErrand, &args).await? {
            Started::Done(v) => v,
            Started::Task(t) => {
                self.wait_for_task_cancellable(Method::RunErrand, &t, cancel)
                    .await?
            }
        };
        self.decode(Method::RunErrand, v)
    }

    /// `compile_package <blobstore_id> <sha1> <name> <version> <deps>` (task) ⇒
    /// `{"result": {"blobstore_id", "sha1"}}`.
    pub async fn compile_package(
        &self,
        args: &CompilePackageArgs,
    ) -> Result<CompilePackageResult, AgentError> {
        let args = [
            args.blobstore_id.clone().into(),
            args.sha1.clone().into(),
            args.name.clone().into(),
            args.version.clone().into(),
            self.encode(Method::CompilePackage, &args.dependencies)?,
        ];
        self.call_typed(Method::CompilePackage, &args).await
    }

    /// `compile_package_with_signed_url {..}` (task) ⇒ `{"result": {"sha1"}}`.
    pub async fn compile_package_with_signed_url(
        &self,
        args: &CompilePackageWithSignedUrlArgs,
    ) -> Result<CompilePackageResult, AgentError> {
        let args = [self.encode(Method::CompilePackageWithSignedUrl, args)?];
        self.call_typed(Method::CompilePackageWithSignedUrl, &args)
            .await
    }

    /// `mount_disk <cid>` (task).
    pub async fn mount_disk(&self, disk_cid: &str) -> Result<Value, AgentError> {
        self.call(Method::MountDisk, &[disk_cid.into()]).await
    }

    /// `unmount_disk <cid>` (task) ⇒ `{"message"}`.
    pub async fn unmount_disk(&self, disk_cid: &str) -> Result<UnmountDiskResult, AgentError> {
        self.call_typed(Method::UnmountDisk, &[disk_cid.into()])
            .await
    }

    /// `add_persistent_disk <cid> <hint>` (task); "unknown message" is success.
    pub async fn add_persistent_disk(
        &self,
        disk_cid: &str,
        hint: &DiskHint,
    ) -> Result<(), AgentError> {
        let args = [
            disk_cid.into(),
            self.encode(Method::AddPersistentDisk, hint)?,
        ];
        self.call_safe(Method::AddPersistentDisk, &args).await
    }

    /// `remove_persistent_disk <cid>` (task); "unknown message" is success.
    pub async fn remove_persistent_disk(&self, disk_cid: &str) -> Result<(), AgentError> {
        self.call_safe(Method::RemovePersistentDisk, &[disk_cid.into()])
            .await
    }

    /// `add_dynamic_disk <cid> <hint>` (task); "unknown message" is success.
    pub async fn add_dynamic_disk(
        &self,
        disk_cid: &str,
        hint: &DiskHint,
    ) -> Result<(), AgentError> {
        let args = [disk_cid.into(), self.encode(Method::AddDynamicDisk, hint)?];
        self.call_safe(Method::AddDynamicDisk, &args).await
    }

    /// `remove_dynamic_disk <cid>`; "unknown message" is success.
    pub async fn remove_dynamic_disk(&self, disk_cid: &str) -> Result<(), AgentError> {
        self.call_safe(Method::RemoveDynamicDisk, &[disk_cid.into()])
            .await
    }

    /// `migrate_disk <old cid> <new cid>` (task; the agent ignores the arguments).
    pub async fn migrate_disk(
        &self,
        old_disk_cid: &str,
        new_disk_cid: &str,
    ) -> Result<Value, AgentError> {
        self.call(
            Method::MigrateDisk,
            &[old_disk_cid.into(), new_disk_cid.into()],
        )
        .await
    }

    /// `list_disk` ⇒ CIDs of the mounted persistent disks (a task with protocol 3).
    pub async fn list_disk(&self) -> Result<Vec<String>, AgentError> {
        let v = self.call(Method::ListDisk, &[]).await?;
        if v.is_null() {
            return Ok(Vec::new());
        }
        self.decode(Method::ListDisk, v)
    }

    /// `sync_dns <blobstore_id> <sha1> <version>` ⇒ `"synced"`, with the Director's 10 s
    /// reply timeout.
    pub async fn sync_dns(
        &self,
        blobstore_id: &str,
        sha1: &str,
        version: u64,
    ) -> Result<String, AgentError> {
        let v = self
            .send_with_timeout(
                Method::SyncDns,
                &[blobstore_id.into(), sha1.into(), version.into()],
                self.options.sync_dns_timeout,
            )
            .await?;
        self.decode(Method::SyncDns, v)
    }

    /// `sync_dns_with_signed_url {..}` ⇒ `"synced"`.
    pub async fn sync_dns_with_signed_url(
        &self,
        args: &SyncDnsWithSignedUrlArgs,
    ) -> Result<String, AgentError> {
        let args = [self.encode(Method::SyncDnsWithSignedUrl, args)?];
        let v = self
            .send_with_timeout(
                Method::SyncDnsWithSignedUrl,
                &args,
                self.options.sync_dns_timeout,
            )
            .await?;
        self.decode(Method::SyncDnsWithSignedUrl, v)
    }

    /// `update_settings {..}` (persistent task) ⇒ `"ok"`; "unknown message" is success. If
    /// mbus or blobstores change the agent restarts and the reply may never come.
    pub async fn update_settings(&self, settings: &UpdateSettings) -> Result<(), AgentError> {
        let args = [self.encode(Method::UpdateSettings, settings)?];
        self.call_safe(Method::UpdateSettings, &args).await
    }

    /// `upload_blob {blob_id, checksum, payload}` (task) ⇒ the blob id. An agent that does
    /// not know it is [`AgentError::Unsupported`].
    pub async fn upload_blob(&self, blob: &UploadBlob) -> Result<String, AgentError> {
        let args = [self.encode(Method::UploadBlob, blob)?];
        match self.call_typed(Method::UploadBlob, &args).await {
            Err(e) if e.is_unknown_message() => Err(AgentError::Unsupported {
                method: Method::UploadBlob.name().into(),
            }),
            Err(AgentError::Remote { message, .. }) if windows_blob_dir_missing(&message) => {
                Err(AgentError::UploadBlobUnableToOpenFile)
            }
            other => other,
        }
    }

    /// `delete_arp_entries {"ips": [..]}`, fire and forget.
    pub async fn delete_arp_entries(&self, ips: &[String]) {
        let arg = DeleteArpEntries { ips: ips.to_vec() };
        match serde_json::to_value(arg) {
            Ok(v) => self.fire_and_forget(Method::DeleteArpEntries, &[v]).await,
            Err(e) => tracing::warn!(error = %e, "delete_arp_entries not sent"),
        }
    }

    /// `shutdown`, fire and forget (the agent powers off).
    pub async fn shutdown(&self) {
        self.fire_and_forget(Method::Shutdown, &[]).await
    }

    /// `fetch_logs <type> <filters>` (task) ⇒ `{"blobstore_id", "sha1"}`.
    pub async fn fetch_logs(
        &self,
        log_type: &str,
        filters: &[String],
    ) -> Result<FetchLogsResult, AgentError> {
        self.call_typed(
            Method::FetchLogs,
            &[log_type.into(), filters.to_vec().into()],
        )
        .await
    }

    /// `fetch_logs_with_signed_url {..}` (task) ⇒ `{"sha1"}`.
    pub async fn fetch_logs_with_signed_url(
        &self,
        args: &FetchLogsWithSignedUrlArgs,
    ) -> Result<FetchLogsWithSignedUrlResult, AgentError> {
        let args = [self.encode(Method::FetchLogsWithSignedUrl, args)?];
        self.call_typed(Method::FetchLogsWithSignedUrl, &args).await
    }

    /// `bundle_logs {..}` ⇒ `{"logs_tar_path", "sha512"}`.
    pub async fn bundle_logs(&self, args: &BundleLogsArgs) -> Result<BundleLogsResult, AgentError> {
        let args = [self.encode(Method::BundleLogs, args)?];
        self.call_typed(Method::BundleLogs, &args).await
    }

    /// `ssh setup|cleanup {..}`.
    pub async fn ssh(&self, command: &SshCommand) -> Result<SshResult, AgentError> {
        self.call_typed(Method::Ssh, &command.arguments()).await
    }

    /// `remove_file <path>` ⇒ the path.
    pub async fn remove_file(&self, path: &str) -> Result<String, AgentError> {
        self.call_typed(Method::RemoveFile, &[path.into()]).await
    }

    fn encode<T: serde::Serialize>(&self, method: Method, value: &T) -> Result<Value, AgentError> {
        serde_json::to_value(value).map_err(|e| AgentError::Transport {
            method: method.name().into(),
            agent_id: self.agent_id.clone(),
            reason: format!("cannot encode arguments: {e}"),
        })
    }
}

fn windows_blob_dir_missing(message: &str) -> bool {
    message.contains(r"Opening blob store file: open \var\vcap\data\blobs")
        && message.contains("The system cannot find the path specified")
}

/// The arguments as the Director logs them: `upload_blob`'s checksum and payload and
/// `update_settings`' mbus and blobstores are `<redacted>` (`nats_rpc.rb#sanitize_log_message`).
pub fn sanitized_arguments(method: Method, arguments: &[Value]) -> String {
    let redact: &[&str] = match method {
        Method::UploadBlob => &["checksum", "payload"],
        Method::UpdateSettings => &["mbus", "blobstores"],
        _ => &[],
    };
    if redact.is_empty() {
        return Value::from(arguments.to_vec()).to_string();
    }
    let mut args = arguments.to_vec();
    if let Some(Value::Object(first)) = args.first_mut() {
        for key in redact {
            first.insert((*key).to_string(), "<redacted>".into());
        }
    }
    Value::from(args).to_string()
}
