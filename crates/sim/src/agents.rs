//! [`SimAgents`]: the simulated agents of the [`super::SimCloud`]'s VMs, reached as a
//! [`Transport`], so [`AgentClient`] drives them exactly as it drives real agents over NATS.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::actions;
use super::instruments::{AgentEffect, AgentFault, Instruments};
use super::spec::{self, JobsStatus};
use super::world::{DueTask, Task};
use super::{Shared, SimError, lock};
use kubosh_transport::agent::client::{Mode, Transport, TransportError};
use kubosh_transport::agent::protocol::Reply;
use kubosh_transport::agent::{AgentClient, Method};

/// The agents of the simulated cloud's VMs, answering the agent protocol as kubosh's agent
/// does (reply values, `Action Failed ...` and `unknown message ...` exceptions, tasks for
/// asynchronous actions per [`Method::mode`]).
///
/// An agent that does not exist (its VM was deleted, or never created) or does not answer
/// ([`SimAgents::set_unresponsive`], `shutdown`) behaves like no reply: the request waits its
/// timeout and fails with [`TransportError::Timeout`], which [`AgentClient`] words as the
/// Director does ("Timed out sending ...").
///
/// Latencies: a synchronous action replies after its latency (a latency of at least the
/// request's timeout is a timeout); an asynchronous one answers its task handle at once and
/// the task finishes after the latency. The effect of a synchronous action is immediate; an
/// asynchronous one takes effect when its task finishes (a `get_task` at that very instant
/// sees it finished).
pub struct SimAgents {
    shared: Arc<Shared>,
    instruments: Mutex<Instruments<AgentEffect>>,
    /// `compile_package`'s latency by package name, over the method's.
    compile_latencies: Mutex<std::collections::BTreeMap<String, Duration>>,
}

impl std::fmt::Debug for SimAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimAgents")
            .field("protocol", &self.shared.config.agent_protocol)
            .finish_non_exhaustive()
    }
}

/// What one simulated agent holds, for assertions.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentView {
    /// The agent id.
    pub agent_id: String,
    /// The VM it runs on.
    pub vm_cid: String,
    /// Whether it answers.
    pub responsive: bool,
    /// Whether its jobs never reach `running`.
    pub jobs_never_running: bool,
    /// The last applied spec, as the agent keeps it.
    pub spec: Value,
    /// The last spec given to `prepare`.
    pub prepared: Option<Value>,
    /// `start` was called since the last `stop`.
    pub started: bool,
    /// `stop` was called since the last `start`.
    pub stopped: bool,
    /// Disks known from `add_persistent_disk` (or mounted from the cloud's attachment).
    pub persistent_disks: Vec<String>,
    /// The disk mounted at `store`.
    pub store: Option<String>,
    /// The disk mounted at `store_migration_target`.
    pub migration_target: Option<String>,
    /// The highest `sync_dns` version received.
    pub dns_version: Option<u64>,
    /// The last `update_settings` argument.
    pub settings: Option<Value>,
    /// The scripts `run_script` ran, in order (`pre-start`, `post-start`, ...).
    pub scripts: Vec<String>,
    /// The `drain` types received, in order.
    pub drains: Vec<String>,
    /// Blob ids received with `upload_blob`.
    pub uploaded_blobs: Vec<String>,
    /// IPs received with `delete_arp_entries`.
    pub arp_deleted: Vec<String>,
    /// How many tasks are still running.
    pub running_tasks: usize,
}

/// A synchronous reply after `latency`; a latency of at least `timeout` is a timeout.
async fn reply_after(
    latency: Duration,
    timeout: Duration,
    reply: Reply,
) -> Result<Reply, TransportError> {
    if latency >= timeout {
        tokio::time::sleep(timeout).await;
        return Err(TransportError::Timeout);
    }
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    Ok(reply)
}

/// Runs the action of task `task_id`, unless the task is gone or already ended (its agent
/// was replaced or deleted, or it was cancelled), and records its result.
async fn run_task(
    shared: &Shared,
    agent_id: &str,
    task_id: &str,
    method: Method,
    args: &[Value],
    failure: Option<String>,
) {
    let still_running = |world: &super::world::World| {
        world
            .agents
            .get(agent_id)
            .and_then(|a| a.tasks.get(task_id))
            .is_some_and(|t| matches!(t, Task::Running { .. }))
    };
    if method != Method::CompilePackage || failure.is_some() {
        // One critical section: check, act, record.
        let mut world = shared.world();
        if let Some(agent) = world.agents.get_mut(agent_id) {
            agent.due.remove(task_id);
        }
        if !still_running(&world) {
            return;
        }
        let result = match failure {
            Some(cause) => Err(cause),
            None => actions::run(&mut world, agent_id, method, args),
        };
        if let Some(agent) = world.agents.get_mut(agent_id) {
            agent.finish_task(task_id, result);
        }
        return;
    }
    if !still_running(&shared.world()) {
        return;
    }
    let result = compile(shared, args).await;
    if let Some(agent) = shared.world().agents.get_mut(agent_id) {
        agent.finish_task(task_id, result);
    }
}

/// `compile_package`: the deterministic compiled bytes, stored in the blobstore when there
/// is one; the value names their blob id (sha256) and sha1.
async fn compile(shared: &Shared, args: &[Value]) -> Result<Value, String> {
    let (name, bytes) = actions::compiled_bytes(args)?;
    let (id, sha1) = match &shared.config.blobstore {
        Some(store) => {
            let blob = store
                .put_bytes(bytes.into())
                .await
                .map_err(|e| format!("Compiling package {name}: {e}"))?;
            (blob.id, blob.sha1)
        }
        None => (
            kubosh_base::digest::sha256_hex(&bytes),
            kubosh_base::digest::sha1_hex(&bytes),
        ),
    };
    Ok(json!({"result": {"blobstore_id": id, "sha1": sha1}}))
}

impl SimAgents {
    pub fn new(shared: Arc<Shared>) -> SimAgents {
        let record = shared.config.record_calls;
        SimAgents {
            shared,
            instruments: Mutex::new(Instruments::new(record)),
            compile_latencies: Mutex::default(),
        }
    }

    /// How long `compile_package` of package `name` takes (a release's packages compile in
    /// seconds to many minutes), instead of the method's latency.
    pub fn set_compile_latency(&self, name: &str, latency: Duration) {
        lock(&self.compile_latencies).insert(name.to_string(), latency);
    }

    /// A task's latency: `compile_package`'s by its package (the third argument) when set,
    /// else the method's.
    fn task_latency(&self, name: &str, args: &[Value], method_latency: Duration) -> Duration {
        let package = (name == "compile_package")
            .then(|| args.get(2).and_then(Value::as_str))
            .flatten();
        package
            .and_then(|p| lock(&self.compile_latencies).get(p).copied())
            .unwrap_or(method_latency)
    }

    /// An [`AgentClient`] for `agent_id` over these agents, with the Director's options.
    pub fn client(self: &Arc<Self>, agent_id: impl Into<String>) -> AgentClient {
        AgentClient::new(self.clone(), agent_id)
    }

    // ---- steering and observing ---------------------------------------------------------

    super::instruments::forward_to_instruments!(AgentFault, "an agent id");

    /// The ids of the agents that exist, sorted.
    pub fn agent_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.shared.world().agents.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// What agent `agent_id` holds.
    pub fn agent(&self, agent_id: &str) -> Option<AgentView> {
        let world = self.shared.world();
        let a = world.agents.get(agent_id)?;
        Some(AgentView {
            agent_id: agent_id.to_string(),
            vm_cid: a.vm_cid.clone(),
            responsive: a.responsive,
            jobs_never_running: a.jobs_never_running,
            spec: a.spec.clone(),
            prepared: a.prepared.clone(),
            started: a.started,
            stopped: a.stopped,
            persistent_disks: a.disk_hints.keys().cloned().collect(),
            store: a.store.clone(),
            migration_target: a.migration_target.clone(),
            dns_version: a.dns_version,
            settings: a.settings.clone(),
            scripts: a.scripts.clone(),
            drains: a.drains.clone(),
            uploaded_blobs: a.uploaded_blobs.clone(),
            arp_deleted: a.arp_deleted.clone(),
            running_tasks: a
                .tasks
                .values()
                .filter(|t| matches!(t, Task::Running { .. }))
                .count(),
        })
    }

    fn with_agent<T>(
        &self,
        agent_id: &str,
        f: impl FnOnce(&mut super::world::AgentState) -> T,
    ) -> Result<T, SimError> {
        let mut world = self.shared.world();
        let agent = world
            .agents
            .get_mut(agent_id)
            .ok_or_else(|| SimError::AgentNotFound(agent_id.to_string()))?;
        Ok(f(agent))
    }

    /// Makes an agent stop answering (`true`) or answer again (`false`).
    pub fn set_unresponsive(&self, agent_id: &str, unresponsive: bool) -> Result<(), SimError> {
        self.with_agent(agent_id, |a| a.responsive = !unresponsive)
    }

    /// Makes an agent's jobs never reach `running` (`get_state` says `failing` and lists
    /// every job's process as failing), or behave again.
    pub fn set_jobs_never_running(&self, agent_id: &str, never: bool) -> Result<(), SimError> {
        self.with_agent(agent_id, |a| a.jobs_never_running = never)
    }

    /// Writes a file onto the disk mounted at the agent's `store` (`/var/vcap/store`).
    pub fn write_store_file(
        &self,
        agent_id: &str,
        path: &str,
        content: &str,
    ) -> Result<(), SimError> {
        let mut world = self.shared.world();
        let store = world
            .agents
            .get(agent_id)
            .ok_or_else(|| SimError::AgentNotFound(agent_id.to_string()))?
            .store
            .clone()
            .ok_or_else(|| SimError::NoPersistentDisk(agent_id.to_string()))?;
        let disk = world
            .disks
            .get_mut(&store)
            .ok_or(SimError::DiskNotFound(store))?;
        disk.files.insert(path.to_string(), content.to_string());
        Ok(())
    }

    /// A file on the disk mounted at the agent's `store` (`None`: no such file).
    pub fn read_store_file(&self, agent_id: &str, path: &str) -> Result<Option<String>, SimError> {
        let world = self.shared.world();
        let store = world
            .agents
            .get(agent_id)
            .ok_or_else(|| SimError::AgentNotFound(agent_id.to_string()))?
            .store
            .as_deref()
            .ok_or_else(|| SimError::NoPersistentDisk(agent_id.to_string()))?;
        let disk = world
            .disks
            .get(store)
            .ok_or_else(|| SimError::DiskNotFound(store.to_string()))?;
        Ok(disk.files.get(path).cloned())
    }

    // ---- the protocol -------------------------------------------------------------------

    /// Decides a request under one lock: no answer (unknown or unresponsive agent), a
    /// synchronous reply, or a new task of the agent.
    fn begin(&self, agent_id: &str, name: &str, args: &[Value], failure: Option<String>) -> Begun {
        let mut world = self.shared.world();
        if !world.agents.get(agent_id).is_some_and(|a| a.responsive) {
            return Begun::NoAnswer;
        }
        let Some(method) = Method::from_name(name).filter(|m| actions::implements(*m)) else {
            return Begun::Reply(Reply::exception(format!("unknown message {name}")));
        };
        match method.mode(self.shared.config.agent_protocol) {
            Mode::Sync => {
                let result = match failure {
                    Some(cause) => Err(cause),
                    None => actions::run(&mut world, agent_id, method, args),
                };
                Begun::Reply(match result {
                    Ok(v) => Reply::Value(v),
                    Err(cause) => Reply::exception(format!("Action Failed {name}: {cause}")),
                })
            }
            Mode::Async => {
                let task_id = world.next_id("task");
                if let Some(agent) = world.agents.get_mut(agent_id) {
                    let cancellable = method.is_cancellable();
                    agent
                        .tasks
                        .insert(task_id.clone(), Task::Running { cancellable });
                }
                Begun::Task {
                    method,
                    task_id,
                    failure,
                }
            }
        }
    }

    /// Runs a new task now (no latency: it is done before its handle is answered, and the
    /// handle still says `running`, as the agent's first answer always does) or after
    /// `latency`.
    async fn run_or_spawn(
        &self,
        agent_id: &str,
        task_id: String,
        method: Method,
        args: &[Value],
        latency: Duration,
        failure: Option<String>,
    ) {
        if latency.is_zero() {
            run_task(&self.shared, agent_id, &task_id, method, args, failure).await;
        } else {
            let args = args.to_vec();
            // A poll at the instant the task ends sees it ended (compile_package, which
            // stores its result asynchronously, ends by its timer only).
            if method != Method::CompilePackage || failure.is_some() {
                let due = DueTask {
                    at: tokio::time::Instant::now() + latency,
                    method,
                    args: args.clone(),
                    failure: failure.clone(),
                };
                if let Some(agent) = self.shared.world().agents.get_mut(agent_id) {
                    agent.due.insert(task_id.clone(), due);
                }
            }
            let shared = self.shared.clone();
            let agent_id = agent_id.to_string();
            tokio::spawn(async move {
                tokio::time::sleep(latency).await;
                run_task(&shared, &agent_id, &task_id, method, &args, failure).await;
            });
        }
    }

    /// Puts an agent call on the shared timeline.
    fn record(&self, agent_id: &str, name: &str, args: &[Value]) {
        self.shared.record(|| super::Step {
            side: super::Side::Agent,
            method: name.to_string(),
            target: agent_id.to_string(),
            arg: args
                .first()
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        });
    }

    async fn request_inner(
        &self,
        agent_id: &str,
        name: &str,
        args: &[Value],
        timeout: Duration,
    ) -> Result<Reply, TransportError> {
        let entry = lock(&self.instruments).enter(name, agent_id);
        self.record(agent_id, name, args);
        let failure = match entry.fault {
            Some(AgentEffect::NoReply) => {
                tokio::time::sleep(timeout).await;
                return Err(TransportError::Timeout);
            }
            Some(AgentEffect::Fail(cause)) => Some(cause),
            None => None,
        };
        match self.begin(agent_id, name, args, failure) {
            Begun::NoAnswer => {
                tokio::time::sleep(timeout).await;
                Err(TransportError::Timeout)
            }
            Begun::Reply(reply) => reply_after(entry.latency, timeout, reply).await,
            Begun::Task {
                method,
                task_id,
                failure,
            } => {
                let handle = json!({"agent_task_id": task_id, "state": "running"});
                let latency = self.task_latency(name, args, entry.latency);
                self.run_or_spawn(agent_id, task_id, method, args, latency, failure)
                    .await;
                Ok(Reply::Value(handle))
            }
        }
    }

    async fn notify_inner(&self, agent_id: &str, name: &str, args: &[Value]) {
        let entry = lock(&self.instruments).enter(name, agent_id);
        self.record(agent_id, name, args);
        let failure = match entry.fault {
            Some(AgentEffect::NoReply) => return,
            Some(AgentEffect::Fail(cause)) => Some(cause),
            None => None,
        };
        // Nobody reads the answer of a fire-and-forget message.
        if let Begun::Task {
            method,
            task_id,
            failure,
        } = self.begin(agent_id, name, args, failure)
        {
            self.run_or_spawn(agent_id, task_id, method, args, entry.latency, failure)
                .await;
        }
    }
}

/// How a request starts.
enum Begun {
    /// Nothing answers: the caller times out.
    NoAnswer,
    /// The synchronous reply.
    Reply(Reply),
    /// A task was started.
    Task {
        method: Method,
        task_id: String,
        failure: Option<String>,
    },
}

/// A live agent heartbeats all the time: every responsive agent has just reported the
/// `job_state` its `get_state` would answer (an unresponsive or deleted one reported
/// nothing). Asking costs no agent call, so a no-op deploy with this as
/// `kubosh_engine::EngineConfig::health` calls nothing.
impl kubosh_bosh::agent::AgentHealth for SimAgents {
    /// An agent made unresponsive has been silent as long as anyone asks.
    fn silent_for(&self, agent_id: &str, _at_least: Duration) -> bool {
        let world = self.shared.world();
        world.agents.get(agent_id).is_some_and(|a| !a.responsive)
    }

    fn recent_job_state(&self, agent_id: &str, _within: Duration) -> Option<String> {
        let world = self.shared.world();
        let agent = world.agents.get(agent_id).filter(|a| a.responsive)?;
        let jobs = JobsStatus {
            started: agent.started,
            stopped: agent.stopped,
            never_running: agent.jobs_never_running,
        };
        Some(
            jobs.job_state(spec::job_names(&agent.spec).len())
                .to_string(),
        )
    }
}

impl Transport for SimAgents {
    fn request<'a>(
        &'a self,
        agent_id: &'a str,
        method: &'a str,
        arguments: &'a [Value],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Reply, TransportError>> {
        Box::pin(self.request_inner(agent_id, method, arguments, timeout))
    }

    fn notify<'a>(
        &'a self,
        agent_id: &'a str,
        method: &'a str,
        arguments: &'a [Value],
    ) -> BoxFuture<'a, Result<(), TransportError>> {
        Box::pin(async move {
            self.notify_inner(agent_id, method, arguments).await;
            Ok(())
        })
    }

    fn protocol(&self) -> Option<u32> {
        self.shared.config.agent_protocol
    }
}
