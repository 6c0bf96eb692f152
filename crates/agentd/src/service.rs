//! The agent's actions (`bosh-protocols.md` §2.4): one [`Agent`] per VM answers the requests
//! the message bus delivers ([`super::mbus::Handler`]) with the machinery of this module's
//! siblings — install, supervisor, scripts, drain, compile, disks, blobs.
//!
//! Dispatch follows bosh-agent's `action_dispatcher.go`: an unknown method answers
//! `unknown message <method>`; a synchronous action answers its value or `Action Failed
//! <method>: <cause>`; an asynchronous one (per [`Method::mode`] and the request's protocol)
//! answers a task handle at once and runs on ([`super::tasks`]). Argument errors read as the
//! agent's action runner words them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::blobs::{BlobError, Blobstore};
use super::compile::{CompileError, CompileRequest, Compiler, PackageSource};
use super::disk::{DiskError, Disks};
use super::drain::{DrainError, DrainParams, DrainSpec, DrainType, Drainer};
use super::install::{InstallError, InstallPlan, Installer, PackageRef};
use super::layout::Layout;
use super::mbus::Handler;
use super::scripts::{ScriptRunner, ScriptsError};
use super::settings::Settings;
use super::supervisor::{Supervisor, SupervisorConfig, SupervisorError};
use super::tasks::{Cancellation, TaskError, Tasks};
use super::vitals::{self, VitalsDisks};
use kubosh_base::digest::{DigestError, MultiDigest};
use kubosh_transport::agent::Method;
use kubosh_transport::agent::apply_spec;
use kubosh_transport::agent::client::Mode;
use kubosh_transport::agent::protocol::{Reply, Request, UploadBlob};

/// How many packages `prepare`/`apply` fetch at once (the agent's `env.bosh.parallel`
/// default).
const DEFAULT_PARALLEL: usize = 5;

/// Why an action failed; the text is the cause after `Action Failed <method>: `.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The arguments do not fit the action.
    #[error("Extracting method arguments from payload: {0}")]
    Arguments(String),
    /// A task request failed.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// Installing jobs or packages failed.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// The job supervisor failed.
    #[error(transparent)]
    Supervisor(#[from] SupervisorError),
    /// A lifecycle script failed.
    #[error(transparent)]
    Scripts(#[from] ScriptsError),
    /// A drain script failed.
    #[error(transparent)]
    Drain(#[from] DrainError),
    /// A disk action failed.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// A blob could not be read or stored.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// Anything else, already worded.
    #[error("{0}")]
    Other(String),
}

impl ActionError {
    fn context<E: Into<ActionError>>(
        what: impl std::fmt::Display,
    ) -> impl FnOnce(E) -> ActionError {
        move |e| ActionError::Other(format!("{what}: {}", e.into()))
    }
}

/// What the agent publishes besides replies, for the message bus to send on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A `drain shutdown` started (`hm.agent.shutdown.<agent_id>`).
    Shutdown,
    /// `update_settings` changed the mbus or blobstores: the agent restarts (the real agent
    /// exits and is restarted by its service manager).
    Restart,
}

/// How an [`Agent`] runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The VM's `/var/vcap`.
    pub layout: Layout,
    /// The settings the CPI wrote.
    pub settings: Settings,
    /// How job processes are supervised.
    pub supervisor: SupervisorConfig,
    /// How long one second a drain script asks for lasts (tests shrink it).
    pub drain_second: Duration,
}

impl AgentOptions {
    /// Options with the agent's defaults for `settings` under `layout`.
    pub fn new(layout: Layout, settings: Settings) -> AgentOptions {
        AgentOptions {
            supervisor: SupervisorConfig::new(layout.clone()),
            layout,
            settings,
            drain_second: Duration::from_secs(1),
        }
    }
}

/// kubosh's BOSH agent: the actions of one VM. Cheap to clone.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

struct Inner {
    layout: Layout,
    settings: Mutex<Settings>,
    supervisor: Supervisor,
    blobs: Blobstore,
    installer: Installer,
    compiler: Compiler,
    scripts: ScriptRunner,
    drainer: Drainer,
    disks: Disks,
    tasks: Tasks,
    /// The current apply spec, as last persisted in `bosh/spec.json`.
    spec: Mutex<Value>,
    dns_lock: tokio::sync::Mutex<()>,
    notices: broadcast::Sender<Notice>,
    http: reqwest::Client,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Agent {
    /// Sets up the VM's tree, caches the settings in `bosh/settings.json`, reads the spec
    /// of a previous run and loads its jobs into the supervisor (not started: the director
    /// or [`Agent::resume`] starts them). Needs a Tokio runtime.
    pub async fn new(options: AgentOptions) -> Result<Agent, ActionError> {
        let layout = options.layout;
        layout.create().map_err(|e| {
            ActionError::Other(format!("creating {}: {e}", layout.base().display()))
        })?;
        let settings = options.settings;
        write_json(
            &layout.settings_file(),
            &serde_json::to_value(&settings).unwrap_or_default(),
        )?;
        // Held in the shape the agent persists (as `apply` stores it), so `get_state` reads it
        // as it is.
        let spec = match std::fs::read(layout.spec_file()) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({})),
            Err(_) => json!({}),
        };
        let spec = Value::Object(apply_spec::persisted(&spec));
        let blobs = Blobstore::new(&layout, settings.local_blobstore_path());
        let http = signed_url_client(&settings)?;
        let (notices, _) = broadcast::channel(16);
        let agent = Agent {
            inner: Arc::new(Inner {
                supervisor: Supervisor::new(options.supervisor),
                installer: Installer::new(layout.clone()),
                compiler: Compiler::new(layout.clone()),
                scripts: ScriptRunner::new(layout.clone()),
                drainer: Drainer::new(layout.clone()).with_second(options.drain_second),
                disks: Disks::new(layout.clone()),
                tasks: Tasks::default(),
                spec: Mutex::new(spec),
                dns_lock: tokio::sync::Mutex::new(()),
                settings: Mutex::new(settings),
                blobs,
                layout,
                notices,
                http,
            }),
        };
        let jobs = agent.inner.current_jobs();
        if !jobs.is_empty() {
            agent.inner.supervisor.load_jobs(&jobs).await?;
        }
        Ok(agent)
    }

    /// After an agent restart: starts the jobs again unless they were stopped on purpose
    /// (the stopped marker), as monit does when the VM boots.
    pub async fn resume(&self) -> Result<(), ActionError> {
        let stopped = self.inner.layout.monit_stopped_file().exists();
        if !stopped && !self.inner.current_jobs().is_empty() {
            self.inner.supervisor.start().await?;
        }
        Ok(())
    }

    /// The agent ID from the settings.
    pub fn agent_id(&self) -> String {
        lock(&self.inner.settings).agent_id.clone()
    }

    /// The settings in effect.
    pub fn settings(&self) -> Settings {
        lock(&self.inner.settings).clone()
    }

    /// Notices for the message bus ([`Notice`]).
    pub fn notices(&self) -> broadcast::Receiver<Notice> {
        self.inner.notices.subscribe()
    }

    /// The heartbeat payload (§2.7).
    pub fn heartbeat(&self) -> Value {
        let spec = lock(&self.inner.spec).clone();
        let status = self.inner.supervisor.status();
        json!({
            "deployment": spec["deployment"].as_str().unwrap_or_default(),
            "job": spec["job"]["name"].as_str(),
            "index": spec["index"].as_u64(),
            "job_state": status.job_state.as_str(),
            "vitals": self.inner.vitals(),
            "node_id": spec["id"].as_str().unwrap_or_default(),
            "number_of_processes": status.processes.len(),
        })
    }

    /// Stops every job process (the agent is going away, as when its VM shuts down): the
    /// jobs start again when it comes back, unless they were stopped on purpose.
    pub async fn shutdown(&self) {
        if let Err(e) = self.inner.supervisor.power_off().await {
            tracing::warn!("stopping jobs on shutdown: {e}");
        }
    }

    /// Handles one request (see the module documentation).
    pub async fn dispatch(&self, request: Request) -> Reply {
        let Some(method) = Method::from_name(&request.method) else {
            tracing::error!(method = %request.method, "unknown action");
            return Reply::exception(format!("unknown message {}", request.method));
        };
        if !Inner::implements(method) {
            tracing::error!(method = %request.method, "action not implemented");
            return Reply::exception(format!("unknown message {}", request.method));
        }
        tracing::info!(method = method.name(), "received request");
        let protocol = request.protocol.unwrap_or(0);
        let args = request.arguments;
        match method.mode(request.protocol) {
            Mode::Async => {
                let inner = self.inner.clone();
                Reply::value(self.inner.tasks.start(
                    method.is_cancellable(),
                    move |cancel| async move {
                        inner
                            .run(method, args, protocol, cancel)
                            .await
                            .map_err(|e| e.to_string())
                    },
                ))
            }
            Mode::Sync => {
                let never = Cancellation::never();
                match self.inner.run(method, args, protocol, never).await {
                    Ok(v) => Reply::value(v),
                    Err(e) => {
                        let message = format!("Action Failed {}: {e}", method.name());
                        tracing::error!("{message}");
                        Reply::exception(message)
                    }
                }
            }
        }
    }
}

impl Handler for Agent {
    fn handle(&self, request: Request) -> BoxFuture<'_, Reply> {
        Box::pin(self.dispatch(request))
    }
}

/// Argument `i` as `T`, worded like the agent's action runner.
fn arg<T: DeserializeOwned>(args: &[Value], i: usize, needed: usize) -> Result<T, ActionError> {
    let v = args.get(i).ok_or_else(|| {
        ActionError::Arguments(format!(
            "Not enough arguments, expected {needed}, got {}",
            args.len()
        ))
    })?;
    serde_json::from_value(v.clone())
        .map_err(|e| ActionError::Arguments(format!("Unmarshalling action argument: {e}")))
}

fn write_json(path: &std::path::Path, value: &Value) -> Result<(), ActionError> {
    let text = serde_json::to_vec(value).unwrap_or_default();
    write_atomic(path, &text)
}

fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<(), ActionError> {
    let err = |e: std::io::Error| ActionError::Other(format!("writing {}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

impl Inner {
    /// The methods kubosh's agent answers; the rest answer `unknown message`, as an old
    /// agent would (the director copes with that for the optional ones).
    fn implements(method: Method) -> bool {
        !matches!(
            method,
            Method::CompilePackageWithSignedUrl
                | Method::FetchLogsWithSignedUrl
                | Method::SyncDnsWithSignedUrl
                | Method::AddDynamicDisk
                | Method::RemoveDynamicDisk
                | Method::BundleLogs
                | Method::RemoveFile
        )
    }

    /// Runs one action on its arguments: the answer to a sync call, or the result of an
    /// async call's task.
    async fn run(
        self: &Arc<Self>,
        method: Method,
        args: Vec<Value>,
        protocol: u32,
        cancel: Cancellation,
    ) -> Result<Value, ActionError> {
        match method {
            Method::Ping => Ok(json!("pong")),
            Method::Info => Ok(json!({"api_version": 1})),
            Method::GetTask => Ok(self.tasks.get(&arg::<String>(&args, 0, 1)?)?),
            Method::CancelTask => {
                self.tasks.cancel(&arg::<String>(&args, 0, 1)?)?;
                Ok(json!("canceled"))
            }
            Method::GetState => {
                let full = args.first().and_then(Value::as_str) == Some("full");
                Ok(self.state(full))
            }
            Method::Prepare => {
                let spec: Value = arg(&args, 0, 1)?;
                self.install(&spec).await?;
                Ok(json!("prepared"))
            }
            Method::Apply => self.apply(arg(&args, 0, 1)?).await,
            Method::Start => {
                let jobs = self.current_jobs();
                self.supervisor.load_jobs(&jobs).await?;
                self.supervisor.start().await?;
                Ok(json!("started"))
            }
            Method::Stop => {
                let _ = protocol;
                self.supervisor.stop().await?;
                Ok(json!("stopped"))
            }
            Method::Drain => self.drain(&args, cancel).await,
            Method::RunErrand => self.run_errand(&args, cancel).await,
            Method::RunScript => self.run_script(&args).await,
            Method::CompilePackage => self.compile_package(&args).await,
            Method::MountDisk => {
                let cid: String = arg(&args, 0, 1)?;
                self.sync_disk_hint(&cid)?;
                self.disks
                    .mount_disk(&cid)
                    .map_err(|e| ActionError::Other(format!("Mounting persistent disk: {e}")))?;
                Ok(json!({}))
            }
            Method::UnmountDisk => self.unmount_disk(&args),
            Method::AddPersistentDisk => {
                let cid: String = arg(&args, 0, 2)?;
                let hint: Value = arg(&args, 1, 2)?;
                self.disks.add_persistent_disk(&cid, &hint)?;
                Ok(json!({}))
            }
            Method::RemovePersistentDisk => {
                let cid: String = arg(&args, 0, 1)?;
                self.disks.remove_persistent_disk(&cid)?;
                Ok(json!({}))
            }
            Method::MigrateDisk => {
                let disks = self.disks.clone();
                tokio::task::spawn_blocking(move || disks.migrate_disk())
                    .await
                    .map_err(|e| ActionError::Other(e.to_string()))??;
                Ok(json!({}))
            }
            Method::ListDisk => Ok(json!(self.disks.list_disk()?)),
            Method::SyncDns => self.sync_dns(&args).await,
            Method::UpdateSettings => self.update_settings(arg(&args, 0, 1)?),
            Method::UploadBlob => self.upload_blob(&args).await,
            Method::FetchLogs => self.fetch_logs(&args).await,
            Method::Ssh => {
                let networks = lock(&self.settings).networks.clone();
                let host_root = std::env::var_os(super::ssh::VM_ROOT_ENV).map(PathBuf::from);
                super::ssh::ssh(self.layout.base(), host_root.as_deref(), &networks, &args)
            }
            Method::DeleteArpEntries => {
                // `{"ips": [...]}`; there is no ARP cache to clear on a local VM.
                let _: Map<String, Value> = arg(&args, 0, 1)?;
                Ok(json!({}))
            }
            Method::Shutdown => Ok(json!("")),
            _ => Err(ActionError::Other(format!(
                "unknown message {}",
                method.name()
            ))),
        }
    }

    /// `run_script(name, {env})`: the script of every current job that has it.
    async fn run_script(&self, args: &[Value]) -> Result<Value, ActionError> {
        let script: String = arg(args, 0, 2)?;
        let options: Value = arg(args, 1, 2)?;
        let env: BTreeMap<String, String> =
            serde_json::from_value(options["env"].clone()).unwrap_or_default();
        self.scripts
            .run(&script, &self.current_jobs(), &env)
            .await?;
        Ok(json!({}))
    }

    /// `run_errand [job]` (bosh-agent's `run_errand.go`): runs `jobs/<job>/bin/run` (the
    /// named job, or the first of the applied spec) with the agent's environment and
    /// answers `{"exit_code", "stdout", "stderr"}` (the tails of the output); a script that
    /// fails is an answer, not an error. Cancelled (`cancel_task`), its process group gets
    /// SIGTERM, then SIGKILL.
    async fn run_errand(&self, args: &[Value], cancel: Cancellation) -> Result<Value, ActionError> {
        let job = match args.first() {
            Some(_) => arg::<String>(args, 0, 1)?,
            None => (self.current_jobs().into_iter().next())
                .ok_or_else(|| ActionError::Other("Running errand: the spec has no job".into()))?,
        };
        if job.is_empty() || job.contains('/') || job.starts_with('.') {
            return Err(ActionError::Other(format!(
                "Running errand: bad job name '{job}'"
            )));
        }
        let script = self.layout.job_script(&job, "run");
        if !script.is_file() {
            return Err(ActionError::Other(format!(
                "Running errand script: job '{job}' has no bin/run ({})",
                script.display()
            )));
        }
        let command = crate::exec::command(&script, &crate::default_env());
        let grace = std::time::Duration::from_secs(10);
        let finished = crate::exec::run(command, true, None, cancel.cancelled(), grace)
            .await
            .map_err(|e| ActionError::Other(format!("Running errand script: {e}")))?;
        Ok(json!({
            "exit_code": finished.status.code().unwrap_or(-1),
            "stdout": String::from_utf8_lossy(&finished.stdout),
            "stderr": String::from_utf8_lossy(&finished.stderr),
        }))
    }

    /// `unmount_disk(cid)`, answered with the agent's message.
    fn unmount_disk(&self, args: &[Value]) -> Result<Value, ActionError> {
        let cid: String = arg(args, 0, 1)?;
        let unmounted = self
            .disks
            .unmount_disk(&cid)
            .map_err(|e| ActionError::Other(format!("Unmounting persistent disk: {e}")))?;
        let message = if unmounted {
            format!("Unmounted partition of {{ID:{cid}}}")
        } else {
            format!("Partition of {{ID:{cid}}} is not mounted")
        };
        Ok(json!({ "message": message }))
    }

    /// `upload_blob({blob_id, payload, checksum})`: the payload stored as a sensitive blob
    /// once it matches its checksum.
    async fn upload_blob(&self, args: &[Value]) -> Result<Value, ActionError> {
        let blob: UploadBlob = arg(args, 0, 1)?;
        let bytes = base64_decode(&blob.payload)?;
        self.blobs
            .put_sensitive(&blob.blob_id, &bytes, &blob.checksum)
            .await
            .map_err(|e| match e {
                // The agent's words (`upload_blob.go`, bosh-utils `digest.go`): the
                // canonical multi-digest, then which digest was checked and what the
                // payload hashes to.
                BlobError::Digest {
                    source: DigestError::Mismatch { expected, actual },
                    ..
                } => ActionError::Other(format!(
                    "Payload corrupted. Checksum mismatch. Expected '{}': Expected \
                     stream to have digest '{expected}' but was '{actual}'",
                    blob.checksum
                        .parse::<MultiDigest>()
                        .map_or_else(|_| blob.checksum.clone(), |d| d.to_string())
                )),
                BlobError::Digest { source, .. } => {
                    ActionError::Arguments(format!("Unmarshalling action argument: {source}"))
                }
                other => other.into(),
            })?;
        Ok(json!(blob.blob_id))
    }

    fn current_jobs(&self) -> Vec<String> {
        DrainSpec::from_apply_spec(&lock(&self.spec)).jobs
    }

    fn vitals(&self) -> Value {
        let l = &self.layout;
        let store = l.store_dir();
        let data = l.data_dir();
        let persistent = (!self.disks.list_disk().unwrap_or_default().is_empty()).then_some(store);
        let v = vitals::read(&VitalsDisks {
            system: Some(l.base()),
            ephemeral: Some(&data),
            persistent: persistent.as_deref(),
        });
        serde_json::to_value(v).unwrap_or_default()
    }

    /// `get_state`: the spec in bosh-agent's `V1ApplySpec` shape ([`apply_spec::persisted`]; nil
    /// `networks`, `resource_pool` and `packages` as `{}`) plus `agent_id`, `job_state`, `processes`, `vm` and, with
    /// `full`, `vitals`.
    fn state(&self, full: bool) -> Value {
        let spec = lock(&self.spec).clone();
        let settings = lock(&self.settings).clone();
        let status = self.supervisor.status();
        let mut out = apply_spec::state_base(&spec, 6);
        out.insert("agent_id".into(), json!(settings.agent_id));
        out.insert("job_state".into(), json!(status.job_state.as_str()));
        if full {
            out.insert("vitals".into(), self.vitals());
        }
        if !status.processes.is_empty() {
            out.insert(
                "processes".into(),
                serde_json::to_value(&status.processes).unwrap_or_default(),
            );
        }
        out.insert("vm".into(), json!({"name": settings.vm.name}));
        Value::Object(out)
    }

    /// Fetches a blob: from its signed URL when the director gave one, else from the
    /// blobstore; the digest is verified either way.
    async fn fetch_blob(
        &self,
        blobstore_id: &str,
        digest: &str,
        signed_url: Option<&str>,
        headers: Option<&Map<String, Value>>,
    ) -> Result<Vec<u8>, ActionError> {
        let Some(url) = signed_url.filter(|u| !u.is_empty()) else {
            return Ok(self.blobs.get_verified(blobstore_id, digest).await?);
        };
        let mut req = self.http.get(url);
        for (k, v) in headers.into_iter().flatten() {
            if let Some(v) = v.as_str() {
                req = req.header(k, v);
            }
        }
        let fail =
            |reason: String| ActionError::Other(format!("Getting blob from signed URL: {reason}"));
        let resp = req
            .send()
            .await
            .map_err(|e| fail(e.without_url().to_string()))?;
        if !resp.status().is_success() {
            return Err(fail(format!("status {}", resp.status())));
        }
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| fail(e.without_url().to_string()))?;
        let d: kubosh_base::digest::MultiDigest = digest
            .parse()
            .map_err(|e| fail(format!("digest {digest:?}: {e}")))?;
        d.verify(&bytes).map_err(|e| fail(e.to_string()))?;
        Ok(bytes.to_vec())
    }

    /// `prepare`: fetches and unpacks every package and the rendered jobs, activating
    /// nothing.
    async fn install(&self, spec: &Value) -> Result<InstallPlan, ActionError> {
        let plan = InstallPlan::from_apply_spec(spec)?;
        let parallel = lock(&self.settings)
            .env
            .bosh
            .extra
            .get("parallel")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_PARALLEL, |p| p.clamp(1, 64) as usize);
        futures::stream::iter(plan.packages.iter().map(Ok::<_, ActionError>))
            .try_for_each_concurrent(parallel, |pkg| async move {
                if self.installer.is_package_installed(pkg) {
                    return Ok(());
                }
                let entry = package_entry(spec, &pkg.name);
                let bytes = self
                    .fetch_blob(
                        &pkg.blobstore_id,
                        &pkg.digest,
                        entry["signed_url"].as_str(),
                        entry["blobstore_headers"].as_object(),
                    )
                    .await
                    .map_err(ActionError::context(format!(
                        "Fetching package {}",
                        pkg.name
                    )))?;
                self.installer.install_package(pkg, bytes).await?;
                Ok(())
            })
            .await?;
        if !plan.jobs.is_empty() {
            let archive = &spec["rendered_templates_archive"];
            let bytes = self
                .fetch_blob(
                    &plan.templates_blobstore_id,
                    &plan.templates_digest,
                    archive["signed_url"].as_str(),
                    archive["blobstore_headers"].as_object(),
                )
                .await
                .map_err(ActionError::context("Fetching rendered templates archive"))?;
            self.installer.install_jobs(&plan, bytes).await?;
        }
        Ok(plan)
    }

    /// `apply`: with a configuration hash, installs and activates the spec's jobs and
    /// packages and hands the jobs to the supervisor (stopped); always records the spec.
    async fn apply(&self, mut spec: Value) -> Result<Value, ActionError> {
        if !spec.is_object() {
            return Err(ActionError::Arguments(
                "Unmarshalling action argument: the apply spec is not an object".into(),
            ));
        }
        let has_hash = spec["configuration_hash"]
            .as_str()
            .is_some_and(|h| !h.is_empty());
        if has_hash {
            let plan = self.install(&spec).await?;
            self.installer.activate(&plan)?;
            let jobs: Vec<String> = plan.jobs.iter().map(|j| j.name.clone()).collect();
            self.supervisor.load_jobs(&jobs).await?;
        }
        self.fill_dynamic_networks(&mut spec);
        // The agent persists the spec as its typed `V1ApplySpec`: unknown keys dropped.
        let spec = Value::Object(apply_spec::persisted(&spec));
        write_json(&self.layout.spec_file(), &spec)?;
        for key in ["id", "az", "name", "deployment"] {
            let text = spec[key].as_str().unwrap_or_default();
            write_atomic(&self.layout.instance_dir().join(key), text.as_bytes())?;
        }
        *lock(&self.spec) = spec;
        Ok(json!("applied"))
    }

    /// Dynamic networks get the address the VM actually has (here: what the settings say).
    fn fill_dynamic_networks(&self, spec: &mut Value) {
        apply_spec::fill_dynamic_networks(spec, &lock(&self.settings).networks);
    }

    async fn drain(&self, args: &[Value], cancel: Cancellation) -> Result<Value, ActionError> {
        let kind: String = arg(args, 0, 1)?;
        let kind: DrainType = kind.parse().map_err(DrainError::from)?;
        let new_spec = args
            .get(1)
            .filter(|v| v.is_object())
            .map(DrainSpec::from_apply_spec);
        let current = DrainSpec::from_apply_spec(&lock(&self.spec));
        let params = DrainParams::for_request(kind, &current, new_spec.as_ref())?;
        if kind == DrainType::Shutdown {
            let _ = self.notices.send(Notice::Shutdown);
        }
        self.supervisor.unmonitor().await;
        self.drainer
            .run_cancellable(&current.jobs, &params, cancel.cancelled())
            .await?;
        Ok(json!(0))
    }

    async fn compile_package(&self, args: &[Value]) -> Result<Value, ActionError> {
        let blobstore_id: String = arg(args, 0, 5)?;
        let digest: String = arg(args, 1, 5)?;
        let name: String = arg(args, 2, 5)?;
        let version: String = arg(args, 3, 5)?;
        let deps: Map<String, Value> = arg(args, 4, 5)?;
        let wrap = ActionError::context(format!("Compiling package {name}"));
        let result = async {
            let mut dep_names = Vec::new();
            for (key, dep) in &deps {
                let pkg = PackageRef {
                    name: dep["name"].as_str().unwrap_or(key).to_string(),
                    version: dep["version"].as_str().unwrap_or_default().to_string(),
                    digest: dep["sha1"].as_str().unwrap_or_default().to_string(),
                    blobstore_id: dep["blobstore_id"].as_str().unwrap_or_default().to_string(),
                };
                if !self.installer.is_package_installed(&pkg) {
                    let bytes = self
                        .fetch_blob(&pkg.blobstore_id, &pkg.digest, None, None)
                        .await
                        .map_err(ActionError::context(format!(
                            "Fetching dependency {}",
                            pkg.name
                        )))?;
                    self.installer.install_package(&pkg, bytes).await?;
                }
                self.installer.enable_package(&pkg)?;
                dep_names.push(pkg.name);
            }
            let source = self.fetch_blob(&blobstore_id, &digest, None, None).await?;
            let compiled = self
                .compiler
                .compile(
                    PackageSource::Bytes(source),
                    &CompileRequest {
                        name: name.clone(),
                        version,
                        digest,
                        dependencies: dep_names,
                    },
                )
                .await
                .map_err(|e: CompileError| ActionError::Other(e.to_string()))?;
            let id = self.blobs.put(&compiled.tarball).await?;
            Ok::<_, ActionError>(json!({"result": {"blobstore_id": id, "sha1": compiled.sha1}}))
        }
        .await;
        result.map_err(wrap)
    }

    /// The hint `add_persistent_disk` recorded wins; without one, the CPI's settings entry
    /// for the disk is used (as the agent refreshes its settings before mounting).
    fn sync_disk_hint(&self, cid: &str) -> Result<(), ActionError> {
        if self.disks.has_hint(cid)? {
            return Ok(());
        }
        let hint = lock(&self.settings).disks.persistent.get(cid).cloned();
        if let Some(hint) = hint {
            self.disks.add_persistent_disk(cid, &hint)?;
        }
        Ok(())
    }

    async fn sync_dns(&self, args: &[Value]) -> Result<Value, ActionError> {
        let blobstore_id: String = arg(args, 0, 3)?;
        let digest: String = arg(args, 1, 3)?;
        let version: u64 = arg(args, 2, 3)?;
        let _guard = self.dns_lock.lock().await;
        let path = self.layout.dns_records_file();
        let local_version = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v["version"].as_u64());
        if local_version.is_some_and(|v| v >= version) {
            return Ok(json!("synced"));
        }
        let bytes = self
            .fetch_blob(&blobstore_id, &digest, None, None)
            .await
            .map_err(ActionError::context(format!(
                "getting {blobstore_id} from blobstore"
            )))?;
        let records: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ActionError::Other(format!("unmarshalling DNS records: {e}")))?;
        if records["version"].as_u64() != Some(version) {
            return Err(ActionError::Other(
                "version from unpacked dns blob does not match version supplied by director".into(),
            ));
        }
        write_atomic(&path, &bytes).map_err(ActionError::context("saving local DNS state"))?;
        Ok(json!("synced"))
    }

    fn update_settings(&self, update: Value) -> Result<Value, ActionError> {
        let parsed: kubosh_transport::agent::protocol::UpdateSettings =
            serde_json::from_value(update.clone()).map_err(|e| {
                ActionError::Arguments(format!("Unmarshalling action argument: {e}"))
            })?;
        write_json(
            &self.layout.bosh_dir().join("update_settings.json"),
            &update,
        )?;
        let restart = parsed.mbus.is_some() || parsed.blobstores.is_some();
        {
            let mut settings = lock(&self.settings);
            if let Some(mbus) = parsed.mbus {
                settings.env.bosh.mbus.cert = mbus.cert;
                if let Some(urls) = mbus.urls {
                    settings.env.bosh.mbus.urls = urls;
                }
            }
            if let Some(blobstores) = parsed.blobstores {
                settings.env.bosh.blobstores = blobstores;
            }
            write_json(
                &self.layout.settings_file(),
                &serde_json::to_value(&*settings).unwrap_or_default(),
            )?;
        }
        if restart {
            let _ = self.notices.send(Notice::Restart);
        }
        Ok(json!("ok"))
    }

    async fn fetch_logs(&self, args: &[Value]) -> Result<Value, ActionError> {
        let log_type: String = arg(args, 0, 2)?;
        let filters: Vec<String> = arg(args, 1, 2).unwrap_or_default();
        // Comma-separated types, as `logs_tar_provider.go` reads them. `system` is the
        // host's `/var/log` there; a local VM has no system logs of its own, so it adds
        // nothing (as on a non-Linux agent).
        let mut dirs: Vec<PathBuf> = Vec::new();
        for log_type in log_type.split(',') {
            match log_type {
                "job" => dirs.push(self.layout.sys_log_dir()),
                "agent" => dirs.push(self.layout.bosh_log_dir()),
                "system" => {}
                _ => return Err(ActionError::Other("Invalid log type".into())),
            }
        }
        let tarball = tokio::task::spawn_blocking(move || logs_tarball(&dirs, &filters))
            .await
            .map_err(|e| ActionError::Other(e.to_string()))?
            .map_err(|e| ActionError::Other(format!("Building logs tarball: {e}")))?;
        let sha1 = kubosh_base::digest::sha1_hex(&tarball);
        let id = self
            .blobs
            .put(&tarball)
            .await
            .map_err(ActionError::context("Create file on blobstore"))?;
        Ok(json!({"blobstore_id": id, "sha1": sha1}))
    }
}

/// The HTTP client for signed URLs: HTTPS trusts the CA of the agent's mbus identity (the
/// director's CA), plain HTTP works as is. Without a CA nothing is trusted over HTTPS (and
/// the TLS configuration is still given: reqwest has no crypto provider of its own here).
fn signed_url_client(settings: &Settings) -> Result<reqwest::Client, ActionError> {
    let fail = |e: String| ActionError::Other(format!("building the HTTP client: {e}"));
    let ca = &settings.env.bosh.mbus.cert.ca;
    let config = if ca.is_empty() {
        kubosh_transport::tls::client_config_trusting_nothing()
    } else {
        kubosh_transport::tls::client_config(ca, None, false)
    }
    .map_err(|e| fail(e.to_string()))?;
    reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(config)
        .build()
        .map_err(|e| fail(e.to_string()))
}

fn package_entry<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec["packages"]
        .as_object()
        .and_then(|p| {
            p.get(name)
                .or_else(|| p.values().find(|v| v["name"] == name))
        })
        .unwrap_or(&Value::Null)
}

fn base64_decode(payload: &str) -> Result<Vec<u8>, ActionError> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_err(|e| ActionError::Other(format!("Decoding payload: {e}")))
}

/// A gzipped tarball of the files under `dirs` (each at the tarball's root) whose path
/// relative to its directory matches one of `filters` (`*` within a path segment, `**`
/// across segments); no filters: everything.
fn logs_tarball(dirs: &[PathBuf], filters: &[String]) -> std::io::Result<Vec<u8>> {
    let enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(enc);
    tar.follow_symlinks(false);
    for dir in dirs {
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let ft = entry.file_type()?;
                if ft.is_dir() {
                    stack.push(path);
                } else if ft.is_file() {
                    let rel = path.strip_prefix(dir).unwrap_or(&path);
                    let rel_text = rel.to_string_lossy();
                    if filters.is_empty() || filters.iter().any(|f| glob_match(f, &rel_text)) {
                        tar.append_path_with_name(&path, rel)?;
                    }
                }
            }
        }
    }
    tar.into_inner()?.finish()
}

/// Matches `text` against a glob: `**` matches anything (also `/`), `*` anything but `/`,
/// `?` one character.
fn glob_match(pattern: &str, text: &str) -> bool {
    fn go(p: &[u8], t: &[u8]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some((b'*', rest)) if rest.first() == Some(&b'*') => {
                let rest = rest[1..].strip_prefix(b"/").unwrap_or(&rest[1..]);
                (0..=t.len()).any(|i| go(rest, &t[i..]))
            }
            Some((b'*', rest)) => (0..=t.len())
                .take_while(|&i| i == 0 || t[i - 1] != b'/')
                .any(|i| go(rest, &t[i..])),
            Some((b'?', rest)) => !t.is_empty() && t[0] != b'/' && go(rest, &t[1..]),
            Some((c, rest)) => t.first() == Some(c) && go(rest, &t[1..]),
        }
    }
    go(pattern.as_bytes(), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_the_agent_filters() {
        assert!(glob_match("**/*", "web/web.stdout.log"));
        assert!(glob_match("**/*", "top.log"));
        assert!(glob_match("web/*.log", "web/a.log"));
        assert!(!glob_match("web/*.log", "web/sub/a.log"));
        assert!(glob_match("web/**/*.log", "web/sub/a.log"));
        assert!(!glob_match("*.log", "web/a.log"));
        assert!(glob_match("a?c", "abc"));
    }

    #[test]
    fn missing_arguments_read_as_the_agent_says() {
        let err = arg::<String>(&[], 0, 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Extracting method arguments from payload: Not enough arguments, expected 1, got 0"
        );
        let err = arg::<String>(&[json!(1)], 0, 1).unwrap_err();
        assert!(
            err.to_string().contains("Unmarshalling action argument"),
            "{err}"
        );
    }
}
