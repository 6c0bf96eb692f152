//! [`ExternalCpi`]: a [`Cloud`] backed by a real CPI executable, one process per call.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use kubosh_process::{Exchange, ExchangeError, Exchanged};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use super::protocol::{self, Request};
use super::types::*;
use crate::{Cloud, CloudFuture, FIND_DISK, FIND_SNAPSHOT, FIND_STEMCELL, FIND_VM};
use crate::{CpiError, ErrorKind};
use kubosh_base::secret::{Secret, collect_strings, excerpt, scrub};

/// The highest CPI API version kubosh speaks (the director's `preferred_api_version`).
pub const MAX_API_VERSION: u32 = 2;

/// Stdout beyond this is not a CPI response.
const MAX_STDOUT: u64 = 64 * 1024 * 1024;

/// How much of a bad stdout an error message quotes.
const EXCERPT_CHARS: usize = 200;

/// Which environment the CPI process gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvMode {
    /// The director's way: a wiped environment with only
    /// `PATH=/usr/sbin:/usr/bin:/sbin:/bin` and kubosh's `TMPDIR` and `HOME` (when set).
    Director,
    /// The BOSH CLI's way (`create-env`): kubosh's environment, plus `BOSH_PACKAGES_DIR` and
    /// `BOSH_JOBS_DIR` (the local CPI installation) when given.
    Cli {
        /// Value of `BOSH_PACKAGES_DIR`.
        packages_dir: Option<PathBuf>,
        /// Value of `BOSH_JOBS_DIR`.
        jobs_dir: Option<PathBuf>,
    },
}

/// How to run a CPI executable.
#[derive(Clone)]
pub struct CpiCommand {
    /// The executable (a CPI release's `bin/cpi`).
    pub path: PathBuf,
    /// Arguments (real CPIs take none; wrappers may).
    pub args: Vec<String>,
    /// The environment's base.
    pub env_mode: EnvMode,
    /// Variables set on top of [`env_mode`](Self::env_mode); values are not logged.
    pub env: Vec<(String, Secret<String>)>,
    /// The CPI's properties (cpi-config `properties`), merged into every request's context.
    /// They carry IaaS credentials and are never logged.
    pub properties: Secret<Object>,
    /// Per-call time limit; the process (group) is killed when it is exceeded.
    pub timeout: Duration,
    /// Per-method overrides of [`timeout`](Self::timeout), e.g. a longer one for
    /// `create_stemcell`.
    pub method_timeouts: BTreeMap<String, Duration>,
    /// The process's working directory (default: kubosh's own).
    pub current_dir: Option<PathBuf>,
}

impl CpiCommand {
    /// A command for `path`, director-style environment, no properties, 600 s per call.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        CpiCommand {
            path: path.into(),
            args: Vec::new(),
            env_mode: EnvMode::Director,
            env: Vec::new(),
            properties: Secret::default(),
            timeout: Duration::from_secs(600),
            method_timeouts: BTreeMap::new(),
            current_dir: None,
        }
    }

    /// Sets the arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the environment mode.
    pub fn env_mode(mut self, mode: EnvMode) -> Self {
        self.env_mode = mode;
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), Secret::new(value.into())));
        self
    }

    /// Sets the context properties.
    pub fn properties(mut self, properties: Object) -> Self {
        self.properties = Secret::new(properties);
        self
    }

    /// Sets the per-call time limit.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the time limit of one method.
    pub fn method_timeout(mut self, method: &str, timeout: Duration) -> Self {
        self.method_timeouts.insert(method.to_string(), timeout);
        self
    }

    /// Sets the working directory of the CPI process.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    fn timeout_for(&self, method: &str) -> Duration {
        self.method_timeouts
            .get(method)
            .copied()
            .unwrap_or(self.timeout)
    }

    fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.path);
        cmd.args(&self.args);
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        match &self.env_mode {
            EnvMode::Director => {
                cmd.env_clear();
                cmd.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
                for key in ["TMPDIR", "HOME"] {
                    if let Some(value) = std::env::var_os(key) {
                        cmd.env(key, value);
                    }
                }
            }
            EnvMode::Cli {
                packages_dir,
                jobs_dir,
            } => {
                if let Some(dir) = packages_dir {
                    cmd.env("BOSH_PACKAGES_DIR", dir);
                }
                if let Some(dir) = jobs_dir {
                    cmd.env("BOSH_JOBS_DIR", dir);
                }
            }
        }
        for (key, value) in &self.env {
            cmd.env(key, value.expose());
        }
        cmd
    }
}

impl std::fmt::Debug for CpiCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpiCommand")
            .field("path", &self.path)
            .field("args", &self.args)
            .field("env_mode", &self.env_mode)
            .field(
                "env",
                &self.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            )
            .field("properties", &self.properties)
            .field("timeout", &self.timeout)
            .field("method_timeouts", &self.method_timeouts)
            .field("current_dir", &self.current_dir)
            .finish()
    }
}

/// When and how often a failed call is repeated (exponential backoff with jitter).
///
/// A call is repeated when the CPI answered with `ok_to_retry: true` (any method: the CPI
/// vouches for it), or — for idempotent and read-only methods only (`info`, `has_vm`,
/// `has_disk`, `get_disks`, `set_vm_metadata`, `set_disk_metadata`,
/// `calculate_vm_cloud_properties`) — when the process could not be talked to or answered
/// garbage. Creates are never repeated on the CPI's silence: the first call may have created
/// something. Timeouts are never repeated (the limit is meant as the call's whole budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, including the first (the director's `max_vm_create_tries` is 5).
    pub max_attempts: usize,
    /// Delay before the first repeat.
    pub min_delay: Duration,
    /// Upper bound of any delay.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            min_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// No repeats.
    pub fn never() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..Self::default()
        }
    }
}

/// Whether repeating a method after a lost answer is harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Safety {
    Idempotent,
    Once,
}

fn should_retry(err: &CpiError, safety: Safety) -> bool {
    match err {
        CpiError::Cloud { ok_to_retry, .. } => *ok_to_retry,
        CpiError::InvalidResponse { .. } | CpiError::Io { .. } => safety == Safety::Idempotent,
        _ => false,
    }
}

/// A successful call's result and the request ID it had.
struct Reply {
    result: Value,
    request_id: String,
}

/// Told of every CPI process as it ends (metrics): the method, how long it took, and its
/// error, if it failed.
pub trait CallObserver: Send + Sync {
    /// One call of `method` ended after `elapsed`.
    fn cpi_call(&self, method: &str, elapsed: Duration, error: Option<&CpiError>);
}

/// A [`Cloud`] that runs a CPI executable per call (`bosh-protocols.md` §1.1).
///
/// Before the first call it runs `info` and uses `api_version = min(CPI's, 2)` in every
/// request after that (the negotiation is shared by clones). Every request gets a fresh
/// `request_id` (`cpi-<6 digits>`). Cloning is cheap.
#[derive(Clone)]
pub struct ExternalCpi {
    command: Arc<CpiCommand>,
    director_uuid: Arc<str>,
    stemcell_api_version: Option<u32>,
    retry: RetryPolicy,
    min_api_version: u32,
    negotiated: Arc<OnceCell<u32>>,
    secrets: Arc<Vec<String>>,
    observer: Option<Arc<dyn CallObserver>>,
}

impl std::fmt::Debug for ExternalCpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalCpi")
            .field("command", &self.command)
            .field("director_uuid", &self.director_uuid)
            .field("stemcell_api_version", &self.stemcell_api_version)
            .field("retry", &self.retry)
            .field("min_api_version", &self.min_api_version)
            .field("negotiated", &self.negotiated.get())
            .finish_non_exhaustive()
    }
}

impl ExternalCpi {
    /// A CPI client for `command`, identifying as director `director_uuid`.
    ///
    /// Defaults: [`RetryPolicy::default`], minimum CPI API version 2 (as the director and
    /// `create-env` require), no stemcell API version in the context.
    pub fn new(command: CpiCommand, director_uuid: impl Into<String>) -> Self {
        let mut secrets = Vec::new();
        collect_strings(
            &Value::Object(command.properties.expose().clone()),
            &mut secrets,
        );
        for (_, value) in &command.env {
            collect_strings(&Value::String(value.expose().clone()), &mut secrets);
        }
        ExternalCpi {
            command: Arc::new(command),
            director_uuid: director_uuid.into().into(),
            stemcell_api_version: None,
            retry: RetryPolicy::default(),
            min_api_version: MAX_API_VERSION,
            negotiated: Arc::new(OnceCell::new()),
            secrets: Arc::new(secrets),
            observer: None,
        }
    }

    /// Tells `observer` of every CPI process as it ends.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The same CPI, sending `context.vm.stemcell.api_version` (the director makes one cloud
    /// per stemcell API version). Shares the negotiated CPI API version.
    pub fn with_stemcell_api_version(&self, version: Option<u32>) -> Self {
        ExternalCpi {
            stemcell_api_version: version,
            ..self.clone()
        }
    }

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Accepts CPIs down to this API version (1 allows v1 CPIs, as the BOSH CLI does; they
    /// return v1 result shapes).
    pub fn with_min_api_version(mut self, version: u32) -> Self {
        self.min_api_version = version;
        self
    }

    /// The command this client runs.
    pub fn command(&self) -> &CpiCommand {
        &self.command
    }

    /// The negotiated API version: `min(info.api_version, 2)`, asked once.
    pub async fn api_version(&self) -> Result<u32, CpiError> {
        self.negotiated
            .get_or_try_init(|| async {
                let info = match self.info_call().await {
                    Ok(info) => info,
                    Err(e) if e.is(&ErrorKind::NotImplemented) => {
                        return Err(CpiError::ApiVersion(
                            "CPI must report api_version via info".into(),
                        ));
                    }
                    Err(e) => return Err(e),
                };
                let version = info.api_version.min(MAX_API_VERSION);
                if version < self.min_api_version {
                    return Err(CpiError::ApiVersion(format!(
                        "CPI API version {version} is not supported. Minimum required version is {}.",
                        self.min_api_version
                    )));
                }
                tracing::debug!(
                    cpi = %self.command.path.display(),
                    cpi_api_version = info.api_version,
                    using = version,
                    "negotiated CPI API version"
                );
                Ok(version)
            })
            .await
            .copied()
    }

    async fn info_call(&self) -> Result<CpiInfo, CpiError> {
        let reply = self
            .call_with_version("info", Vec::new(), Safety::Idempotent, None, None)
            .await?;
        let Value::Object(map) = &reply.result else {
            return Err(CpiError::ApiVersion(
                "CPI must report api_version via info".into(),
            ));
        };
        if !map.get("api_version").is_some_and(Value::is_u64) {
            return Err(CpiError::ApiVersion(
                "CPI must report api_version via info".into(),
            ));
        }
        serde_json::from_value(reply.result.clone())
            .map_err(|_| unexpected("info", &reply, "an object with api_version"))
    }

    /// Calls `method` (after negotiation).
    async fn call(
        &self,
        method: &'static str,
        arguments: Vec<Value>,
        safety: Safety,
    ) -> Result<Reply, CpiError> {
        let api_version = self.api_version().await?;
        self.call_with_version(method, arguments, safety, Some(api_version), None)
            .await
    }

    /// Calls `method` with the given `api_version` in the request, repeating per the retry
    /// policy. `request_id` replaces the generated `cpi-NNNNNN` id (every try sends it).
    async fn call_with_version(
        &self,
        method: &'static str,
        arguments: Vec<Value>,
        safety: Safety,
        api_version: Option<u32>,
        request_id: Option<&str>,
    ) -> Result<Reply, CpiError> {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.retry.min_delay)
            .with_max_delay(self.retry.max_delay)
            .with_max_times(self.retry.max_attempts.saturating_sub(1))
            .with_jitter();
        let arguments = &arguments;
        (|| self.observed_invoke(method, arguments, api_version, request_id))
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(|e| should_retry(e, safety))
            .notify(|e, delay| {
                tracing::warn!(method, "CPI call failed, retrying in {delay:?}: {e}");
            })
            .await
    }

    /// [`ExternalCpi::invoke`], its duration and outcome told to the observer.
    async fn observed_invoke(
        &self,
        method: &str,
        arguments: &[Value],
        api_version: Option<u32>,
        request_id: Option<&str>,
    ) -> Result<Reply, CpiError> {
        let started = std::time::Instant::now();
        let result = self
            .invoke(method, arguments, api_version, request_id)
            .await;
        if let Some(observer) = &self.observer {
            observer.cpi_call(method, started.elapsed(), result.as_ref().err());
        }
        result
    }

    /// One CPI process: write the request, read the response, within the time limit.
    async fn invoke(
        &self,
        method: &str,
        arguments: &[Value],
        api_version: Option<u32>,
        request_id: Option<&str>,
    ) -> Result<Reply, CpiError> {
        let request_id = request_id.map_or_else(super::ids::request_id, str::to_string);
        let request = Request {
            method: method.to_string(),
            arguments: arguments.to_vec(),
            context: protocol::context(
                &self.director_uuid,
                &request_id,
                self.stemcell_api_version,
                self.command.properties.expose(),
            ),
            api_version,
        };
        let body = serde_json::to_vec(&request).map_err(|e| CpiError::Io {
            method: method.to_string(),
            source: std::io::Error::other(e),
        })?;

        let (redacted_args, mut secrets) = protocol::redact_arguments(method, arguments);
        secrets.extend(self.secrets.iter().cloned());
        if tracing::enabled!(tracing::Level::DEBUG) {
            self.log_request(&request, redacted_args, &request_id);
        }

        let timeout = self.command.timeout_for(method);
        let exchange = Exchange {
            max_stdout: MAX_STDOUT,
            timeout,
        };
        let log_stderr = |line: &[u8]| {
            let text = String::from_utf8_lossy(line);
            tracing::debug!(
                request_id = %request_id,
                method,
                "CPI stderr: {}",
                scrub(text.trim_end(), &secrets)
            );
        };
        let Exchanged {
            stdout,
            status,
            overflowed,
        } = exchange
            .run(self.command.command(), &body, log_stderr)
            .await
            .map_err(|e| match e {
                ExchangeError::Spawn(source) => CpiError::Spawn {
                    path: self.command.path.clone(),
                    source,
                },
                ExchangeError::Io(source) => CpiError::Io {
                    method: method.to_string(),
                    source,
                },
                ExchangeError::Timeout(timeout) => CpiError::Timeout {
                    method: method.to_string(),
                    request_id: request_id.clone(),
                    timeout,
                },
            })?;
        tracing::debug!(request_id = %request_id, method, %status, "CPI exited");
        read_response(method, request_id, &stdout, overflowed, &secrets)
    }

    /// Logs `request` at debug level, its arguments replaced by `redacted_args` and the
    /// CPI's properties in its context redacted.
    fn log_request(&self, request: &Request, redacted_args: Vec<Value>, request_id: &str) {
        let mut redacted = request.clone();
        redacted.arguments = redacted_args;
        for (key, value) in redacted.context.iter_mut() {
            if self.command.properties.expose().contains_key(key) {
                *value = Value::String("<redacted>".into());
            }
        }
        tracing::debug!(
            request_id = %request_id,
            method = request.method.as_str(),
            cpi = %self.command.path.display(),
            "CPI request: {}",
            serde_json::to_string(&redacted).unwrap_or_default()
        );
    }

    /// `create_disk`, with the caller's request id when given.
    async fn create_stemcell_call(
        &self,
        req: &CreateStemcell,
        request_id: Option<&str>,
    ) -> Result<StemcellCid, CpiError> {
        let args = vec![
            json!(req.image_path.to_string_lossy()),
            Value::Object(req.cloud_properties.clone()),
        ];
        self.call_cid("create_stemcell", args, request_id)
            .await
            .map(StemcellCid)
    }

    async fn create_disk_call(
        &self,
        req: &CreateDisk,
        request_id: Option<&str>,
    ) -> Result<DiskCid, CpiError> {
        let args = vec![
            json!(req.size_mib),
            Value::Object(req.cloud_properties.clone()),
            to_value(&req.vm_cid),
        ];
        self.call_cid("create_disk", args, request_id)
            .await
            .map(DiskCid)
    }

    /// A kubosh `find` extension: the CID `method(key)` answers, or `None` for `null`.
    async fn find_cid(
        &self,
        method: &'static str,
        key: &str,
        expected: &'static str,
    ) -> Result<Option<String>, CpiError> {
        let reply = self
            .call(method, vec![json!(key)], Safety::Idempotent)
            .await?;
        match &reply.result {
            Value::Null => Ok(None),
            Value::String(cid) if !cid.is_empty() => Ok(Some(cid.clone())),
            _ => Err(unexpected(method, &reply, expected)),
        }
    }

    /// `snapshot_disk`, with the caller's request id when given.
    async fn snapshot_disk_call(
        &self,
        cid: &DiskCid,
        metadata: &Object,
        request_id: Option<&str>,
    ) -> Result<SnapshotCid, CpiError> {
        let method = "snapshot_disk";
        let args = vec![json!(cid), Value::Object(metadata.clone())];
        let api_version = self.api_version().await?;
        let reply = self
            .call_with_version(method, args, Safety::Once, Some(api_version), request_id)
            .await?;
        match &reply.result {
            Value::String(cid) => Ok(SnapshotCid(cid.clone())),
            _ => Err(unexpected(method, &reply, "a string")),
        }
    }

    async fn call_unit(
        &self,
        method: &'static str,
        arguments: Vec<Value>,
        safety: Safety,
    ) -> Result<(), CpiError> {
        // Results of these methods are ignored, as the director does (`detach_disk` may
        // answer `true`).
        self.call(method, arguments, safety).await.map(|_| ())
    }

    /// A creating call that answers a CID, sent once, with `request_id` as the request's
    /// `context.request_id` when given (so kubosh's `find` extensions can find its result).
    async fn call_cid(
        &self,
        method: &'static str,
        arguments: Vec<Value>,
        request_id: Option<&str>,
    ) -> Result<String, CpiError> {
        let api_version = self.api_version().await?;
        let reply = self
            .call_with_version(
                method,
                arguments,
                Safety::Once,
                Some(api_version),
                request_id,
            )
            .await?;
        match &reply.result {
            Value::String(s) => Ok(s.clone()),
            _ => Err(unexpected(method, &reply, "a string")),
        }
    }

    async fn call_bool(
        &self,
        method: &'static str,
        arguments: Vec<Value>,
    ) -> Result<bool, CpiError> {
        let reply = self.call(method, arguments, Safety::Idempotent).await?;
        reply
            .result
            .as_bool()
            .ok_or_else(|| unexpected(method, &reply, "a boolean"))
    }
}

/// The CPI's answer on `stdout` (`overflowed`: it was longer than [`MAX_STDOUT`]): its
/// `result`, or its `error` as a [`CpiError::Cloud`]; `secrets` are scrubbed from what is
/// logged and quoted.
// `CpiError` is what every call returns; the async methods around this one return it as
// large, where the lint does not look.
#[allow(clippy::result_large_err)]
fn read_response(
    method: &str,
    request_id: String,
    stdout: &[u8],
    overflowed: bool,
    secrets: &[String],
) -> Result<Reply, CpiError> {
    let invalid = |reason: String| CpiError::InvalidResponse {
        method: method.to_string(),
        request_id: request_id.clone(),
        reason,
        excerpt: excerpt(
            &scrub(&String::from_utf8_lossy(stdout), secrets),
            EXCERPT_CHARS,
        ),
    };
    if overflowed {
        return Err(invalid(format!("stdout exceeds {MAX_STDOUT} bytes")));
    }
    let response: Value = serde_json::from_slice(stdout).map_err(|e| {
        invalid(if stdout.iter().all(u8::is_ascii_whitespace) {
            "empty stdout".to_string()
        } else {
            format!("not JSON ({e})")
        })
    })?;
    let Value::Object(mut response) = response else {
        return Err(invalid("not a JSON object".into()));
    };
    match response.get("log") {
        None | Some(Value::Null) => {}
        Some(Value::String(log)) => {
            if !log.is_empty() {
                tracing::debug!(request_id = %request_id, method, "CPI log: {}", scrub(log, secrets));
            }
        }
        Some(_) => return Err(invalid("'log' is not a string".into())),
    }
    match response.remove("error").unwrap_or(Value::Null) {
        Value::Null => Ok(Reply {
            result: response.remove("result").unwrap_or(Value::Null),
            request_id,
        }),
        Value::Object(error) => {
            let (Some(Value::String(error_type)), Some(Value::String(message))) =
                (error.get("type"), error.get("message"))
            else {
                return Err(invalid("'error' needs string 'type' and 'message'".into()));
            };
            let ok_to_retry = match error.get("ok_to_retry") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(invalid("'error.ok_to_retry' is not a boolean".into())),
            };
            Err(CpiError::Cloud {
                kind: ErrorKind::classify(error_type, message),
                error_type: error_type.clone(),
                message: scrub(message, secrets),
                ok_to_retry,
                method: method.to_string(),
                request_id,
            })
        }
        _ => Err(invalid("'error' is neither null nor an object".into())),
    }
}

fn unexpected(method: &str, reply: &Reply, expected: &'static str) -> CpiError {
    CpiError::UnexpectedResult {
        method: method.to_string(),
        request_id: reply.request_id.clone(),
        expected,
        excerpt: excerpt(&reply.result.to_string(), EXCERPT_CHARS),
    }
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    // Serializing these plain data types cannot fail.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

impl Cloud for ExternalCpi {
    fn info(&self) -> CloudFuture<'_, CpiInfo> {
        Box::pin(self.info_call())
    }

    fn create_stemcell<'a>(&'a self, req: &'a CreateStemcell) -> CloudFuture<'a, StemcellCid> {
        Box::pin(self.create_stemcell_call(req, None))
    }

    fn create_stemcell_with_request_id<'a>(
        &'a self,
        req: &'a CreateStemcell,
        request_id: &'a str,
    ) -> CloudFuture<'a, StemcellCid> {
        Box::pin(self.create_stemcell_call(req, Some(request_id)))
    }

    fn find_stemcell_by_request<'a>(
        &'a self,
        request_id: &'a str,
    ) -> CloudFuture<'a, Option<StemcellCid>> {
        Box::pin(async move {
            let cid = self
                .find_cid(FIND_STEMCELL, request_id, "a stemcell CID or null")
                .await?;
            Ok(cid.map(StemcellCid))
        })
    }

    fn delete_stemcell<'a>(&'a self, cid: &'a StemcellCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call_unit("delete_stemcell", vec![json!(cid)], Safety::Once))
    }

    fn create_vm<'a>(&'a self, req: &'a CreateVm) -> CloudFuture<'a, VmCreated> {
        Box::pin(async move {
            let args = vec![
                json!(req.agent_id),
                json!(req.stemcell_cid),
                Value::Object(req.cloud_properties.clone()),
                to_value(&req.networks),
                to_value(&req.disk_cids),
                Value::Object(req.env.clone()),
            ];
            let reply = self.call("create_vm", args, Safety::Once).await?;
            if self.api_version().await? >= 2 {
                match &reply.result {
                    Value::Array(items) => match (items.first(), items.get(1)) {
                        (Some(Value::String(cid)), networks) => Ok(VmCreated {
                            cid: VmCid(cid.clone()),
                            networks: networks.and_then(Value::as_object).cloned(),
                        }),
                        _ => Err(unexpected("create_vm", &reply, "[vm_cid, networks]")),
                    },
                    _ => Err(unexpected("create_vm", &reply, "[vm_cid, networks]")),
                }
            } else {
                match &reply.result {
                    Value::String(cid) => Ok(VmCreated {
                        cid: VmCid(cid.clone()),
                        networks: None,
                    }),
                    _ => Err(unexpected("create_vm", &reply, "a vm_cid string")),
                }
            }
        })
    }

    fn delete_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call_unit("delete_vm", vec![json!(cid)], Safety::Once))
    }

    fn has_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, bool> {
        Box::pin(self.call_bool("has_vm", vec![json!(cid)]))
    }

    fn reboot_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call_unit("reboot_vm", vec![json!(cid)], Safety::Once))
    }

    fn set_vm_metadata<'a>(&'a self, cid: &'a VmCid, metadata: &'a Object) -> CloudFuture<'a, ()> {
        Box::pin(self.call_unit(
            "set_vm_metadata",
            vec![json!(cid), Value::Object(metadata.clone())],
            Safety::Idempotent,
        ))
    }

    fn calculate_vm_cloud_properties<'a>(
        &'a self,
        resources: &'a VmResources,
    ) -> CloudFuture<'a, Object> {
        Box::pin(async move {
            let method = "calculate_vm_cloud_properties";
            let reply = self
                .call(method, vec![to_value(resources)], Safety::Idempotent)
                .await?;
            match &reply.result {
                Value::Object(map) => Ok(map.clone()),
                _ => Err(unexpected(method, &reply, "an object")),
            }
        })
    }

    fn create_disk<'a>(&'a self, req: &'a CreateDisk) -> CloudFuture<'a, DiskCid> {
        Box::pin(self.create_disk_call(req, None))
    }

    fn create_disk_with_request_id<'a>(
        &'a self,
        req: &'a CreateDisk,
        request_id: &'a str,
    ) -> CloudFuture<'a, DiskCid> {
        Box::pin(self.create_disk_call(req, Some(request_id)))
    }

    fn find_vm_by_agent<'a>(&'a self, agent_id: &'a str) -> CloudFuture<'a, Option<VmCid>> {
        Box::pin(async move {
            let cid = self.find_cid(FIND_VM, agent_id, "a VM CID or null").await?;
            Ok(cid.map(VmCid))
        })
    }

    fn find_disk_by_request<'a>(&'a self, request_id: &'a str) -> CloudFuture<'a, Option<DiskCid>> {
        Box::pin(async move {
            let cid = self
                .find_cid(FIND_DISK, request_id, "a disk CID or null")
                .await?;
            Ok(cid.map(DiskCid))
        })
    }

    fn delete_disk<'a>(&'a self, cid: &'a DiskCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call_unit("delete_disk", vec![json!(cid)], Safety::Once))
    }

    fn has_disk<'a>(&'a self, cid: &'a DiskCid) -> CloudFuture<'a, bool> {
        Box::pin(self.call_bool("has_disk", vec![json!(cid)]))
    }

    fn attach_disk<'a>(
        &'a self,
        vm: &'a VmCid,
        disk: &'a DiskCid,
    ) -> CloudFuture<'a, Option<DiskHint>> {
        Box::pin(async move {
            let reply = self
                .call("attach_disk", vec![json!(vm), json!(disk)], Safety::Once)
                .await?;
            if self.api_version().await? < 2 {
                return Ok(None);
            }
            let empty = match &reply.result {
                Value::Null => true,
                Value::String(s) => s.is_empty(),
                Value::Object(m) => m.is_empty(),
                _ => {
                    return Err(unexpected(
                        "attach_disk",
                        &reply,
                        "a disk hint (string or object)",
                    ));
                }
            };
            if empty {
                return Err(CpiError::NoDiskHint {
                    vm_cid: vm.to_string(),
                    disk_cid: disk.to_string(),
                    request_id: reply.request_id,
                });
            }
            Ok(Some(DiskHint(reply.result)))
        })
    }

    fn detach_disk<'a>(&'a self, vm: &'a VmCid, disk: &'a DiskCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call_unit("detach_disk", vec![json!(vm), json!(disk)], Safety::Once))
    }

    fn get_disks<'a>(&'a self, vm: &'a VmCid) -> CloudFuture<'a, Vec<DiskCid>> {
        Box::pin(async move {
            let reply = self
                .call("get_disks", vec![json!(vm)], Safety::Idempotent)
                .await?;
            serde_json::from_value::<Vec<DiskCid>>(reply.result.clone())
                .map_err(|_| unexpected("get_disks", &reply, "an array of disk CIDs"))
        })
    }

    fn resize_disk<'a>(&'a self, cid: &'a DiskCid, new_size_mib: u64) -> CloudFuture<'a, ()> {
        Box::pin(self.call_unit(
            "resize_disk",
            vec![json!(cid), json!(new_size_mib)],
            Safety::Once,
        ))
    }

    fn update_disk<'a>(&'a self, req: &'a UpdateDisk) -> CloudFuture<'a, Option<DiskCid>> {
        Box::pin(async move {
            let args = vec![
                json!(req.disk_cid),
                json!(req.new_size_mib),
                Value::Object(req.cloud_properties.clone()),
            ];
            let reply = self.call("update_disk", args, Safety::Once).await?;
            match &reply.result {
                Value::Null => Ok(None),
                Value::String(cid) if *cid == req.disk_cid.0 => Ok(None),
                Value::String(cid) => Ok(Some(DiskCid(cid.clone()))),
                _ => Err(unexpected("update_disk", &reply, "a disk CID or null")),
            }
        })
    }

    fn set_disk_metadata<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
    ) -> CloudFuture<'a, ()> {
        Box::pin(self.call_unit(
            "set_disk_metadata",
            vec![json!(cid), Value::Object(metadata.clone())],
            Safety::Idempotent,
        ))
    }

    fn snapshot_disk<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
    ) -> CloudFuture<'a, SnapshotCid> {
        Box::pin(self.snapshot_disk_call(cid, metadata, None))
    }

    fn snapshot_disk_with_request_id<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
        request_id: &'a str,
    ) -> CloudFuture<'a, SnapshotCid> {
        Box::pin(self.snapshot_disk_call(cid, metadata, Some(request_id)))
    }

    fn find_snapshot_by_request<'a>(
        &'a self,
        request_id: &'a str,
    ) -> CloudFuture<'a, Option<SnapshotCid>> {
        Box::pin(async move {
            let cid = self
                .find_cid(FIND_SNAPSHOT, request_id, "a snapshot CID or null")
                .await?;
            Ok(cid.map(SnapshotCid))
        })
    }

    fn delete_snapshot<'a>(&'a self, cid: &'a SnapshotCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call_unit("delete_snapshot", vec![json!(cid)], Safety::Once))
    }

    fn create_network<'a>(&'a self, spec: &'a CreateNetwork) -> CloudFuture<'a, Value> {
        Box::pin(async move {
            self.call(
                "create_network",
                vec![Value::Object(spec.0.clone())],
                Safety::Once,
            )
            .await
            .map(|r| r.result)
        })
    }

    fn delete_network<'a>(&'a self, network_id: &'a str) -> CloudFuture<'a, ()> {
        Box::pin(self.call_unit("delete_network", vec![json!(network_id)], Safety::Once))
    }
}
