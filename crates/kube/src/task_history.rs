//! The controller's task history: each task that announces itself (a deploy that changes
//! something, an instance action, a repair, a scan or resolution, a deletion, an errand run)
//! keeps its event log (the Director's event log, one JSON line per event, as `kubosh
//! deploy` keeps it) in a ConfigMap `<deployment>.task.<id>` of the deployment's namespace,
//! gzipped, with what the task was (`task.json`), owned by the `Deployment`; so `kubectl
//! bosh tasks` and `kubectl bosh task ID` show it long after the Events (an hour) expired.
//! Bounded: the newest [`KEEP_TASKS`] tasks of each deployment are kept, and a task's log
//! stops growing at [`MAX_EVENT_BYTES`] (before compression; an object holds 1 MiB). The
//! log is scrubbed of the deployment's secrets before it is written. Best effort: a task
//! never fails because its history could not be written.
//!
//! Each task also keeps its debug log (`kubectl bosh task ID --debug`, the Director's
//! debug log's counterpart): the controller's log lines, debug level included, of the task's
//! span ([`TaskRecorder::span`]), caught by [`TaskDebugLayer`], bounded and scrubbed alike.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read as _, Write as _};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use kubosh_bosh::events::EventLine;
use kubosh_engine::{EventSink, Milestone, warning_line};
use serde::{Deserialize, Serialize};

use crate::api::labels;

/// The label naming a task's id (on its ConfigMap).
pub const TASK_LABEL: &str = "kubosh.io/task";
/// How many tasks of a deployment are kept.
pub const KEEP_TASKS: usize = 50;
/// The most bytes of one task's event log (uncompressed).
pub const MAX_EVENT_BYTES: usize = 4 << 20;

/// The ConfigMap key of the task's record.
const RECORD_KEY: &str = "task.json";
/// The ConfigMap key of its gzipped event log.
const EVENTS_KEY: &str = "event.gz";
/// The ConfigMap key of its gzipped debug log.
const DEBUG_KEY: &str = "debug.gz";
/// The most bytes of one task's debug log (uncompressed; the oldest lines go first).
pub const MAX_DEBUG_BYTES: usize = 2 << 20;

/// A task's debug log, shared by its recorder and the layer.
type DebugLog = Arc<Mutex<Vec<u8>>>;

/// The debug logs of the running tasks, by the key their span carries.
static DEBUG_LOGS: std::sync::LazyLock<Mutex<HashMap<String, DebugLog>>> =
    std::sync::LazyLock::new(Mutex::default);

/// The span field naming the task a span's events belong to.
const TASK_FIELD: &str = "kubosh_task";

/// What the history says of one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskEntry {
    /// The task's id (`lastTask.id` of the deployment's status).
    pub id: String,
    /// What it did.
    pub description: String,
    /// The deployment.
    pub deployment: String,
    /// `done`, `error` or `cancelled`, as the Director says.
    pub state: String,
    /// Unix seconds.
    pub started_at: i64,
    /// Unix seconds.
    pub finished_at: i64,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An event sink that keeps the log of a task while passing every event on to `inner`, and
/// the task's debug log.
pub struct TaskRecorder {
    inner: Arc<dyn EventSink>,
    log: Mutex<Vec<u8>>,
    key: String,
    debug: DebugLog,
}

impl Drop for TaskRecorder {
    fn drop(&mut self) {
        (DEBUG_LOGS.lock().unwrap_or_else(PoisonError::into_inner)).remove(&self.key);
    }
}

impl TaskRecorder {
    /// A recorder in front of `inner`.
    pub fn new(inner: Arc<dyn EventSink>) -> TaskRecorder {
        let key = kubosh_base::ids::uuid_v4();
        let debug = Arc::new(Mutex::new(Vec::new()));
        (DEBUG_LOGS.lock().unwrap_or_else(PoisonError::into_inner))
            .insert(key.clone(), debug.clone());
        TaskRecorder {
            inner,
            log: Mutex::new(Vec::new()),
            key,
            debug,
        }
    }

    /// The span to run the task in: what is logged inside it is its debug log.
    pub fn span(&self) -> tracing::Span {
        tracing::info_span!("task", kubosh_task = %self.key)
    }

    /// The debug log so far.
    pub fn debug_log(&self) -> Vec<u8> {
        (self.debug.lock().unwrap_or_else(PoisonError::into_inner)).clone()
    }

    fn record(&self, line: &EventLine) {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        let json = line.to_json();
        if log.len() + json.len() < MAX_EVENT_BYTES {
            log.extend_from_slice(json.as_bytes());
            log.push(b'\n');
        }
    }

    /// The log so far.
    pub fn log(&self) -> Vec<u8> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl EventSink for TaskRecorder {
    fn emit(&self, line: EventLine) {
        self.record(&line);
        self.inner.emit(line);
    }

    fn milestone(&self, milestone: Milestone) {
        // The Director's task log shows these as warnings; the inner sink tells them its
        // own way.
        if let Some(notice) = milestone.notice() {
            self.record(&warning_line(notice));
        }
        self.inner.milestone(milestone);
    }
}

/// The ConfigMap name of task `id` of `deployment`.
pub fn config_map_name(deployment: &str, id: &str) -> String {
    format!("{deployment}.task.{id}")
}

/// Keeps `entry` with its event log `log` (scrubbed of `secrets`) in `namespace`, owned by
/// `owner`, and drops the deployment's oldest beyond [`KEEP_TASKS`].
pub async fn keep(
    client: &kube::Client,
    namespace: &str,
    owner: Option<OwnerReference>,
    entry: &TaskEntry,
    (log, debug): (&[u8], &[u8]),
    secrets: &[String],
) {
    if let Err(e) = write(client, namespace, owner, entry, (log, debug), secrets).await {
        tracing::warn!(task = %entry.id, error = %e, "cannot keep the task's history");
    }
}

async fn write(
    client: &kube::Client,
    namespace: &str,
    owner: Option<OwnerReference>,
    entry: &TaskEntry,
    (log, debug): (&[u8], &[u8]),
    secrets: &[String],
) -> Result<(), kube::Error> {
    let gzipped = |bytes: &[u8]| {
        let text = kubosh_base::secret::scrub(&String::from_utf8_lossy(bytes), secrets);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        (gz.write_all(text.as_bytes()).and_then(|()| gz.finish())).unwrap_or_default()
    };
    let name = config_map_name(&entry.deployment, &entry.id);
    let map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([
                (labels::DEPLOYMENT.to_string(), entry.deployment.clone()),
                (TASK_LABEL.to_string(), entry.id.clone()),
            ])),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            RECORD_KEY.to_string(),
            serde_json::to_string(entry).unwrap_or_default(),
        )])),
        binary_data: Some(BTreeMap::from([
            (EVENTS_KEY.to_string(), ByteString(gzipped(log))),
            (DEBUG_KEY.to_string(), ByteString(gzipped(debug))),
        ])),
        ..ConfigMap::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let params = PatchParams::apply(crate::state::FIELD_MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(&map)).await?;
    let mut kept = list(client, namespace, Some(&entry.deployment)).await?;
    for old in kept.split_off(KEEP_TASKS.min(kept.len())) {
        let name = config_map_name(&old.deployment, &old.id);
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    Ok(())
}

/// The tasks kept in `namespace` (of `deployment`, or every deployment's), newest first.
pub async fn list(
    client: &kube::Client,
    namespace: &str,
    deployment: Option<&str>,
) -> Result<Vec<TaskEntry>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let selector = match deployment {
        Some(d) => format!("{TASK_LABEL},{}={d}", labels::DEPLOYMENT),
        None => TASK_LABEL.to_string(),
    };
    let maps = api.list(&ListParams::default().labels(&selector)).await?;
    let mut entries: Vec<TaskEntry> = (maps.items.iter())
        .filter_map(|m| serde_json::from_str(m.data.as_ref()?.get(RECORD_KEY)?).ok())
        .collect();
    entries.sort_by(|a: &TaskEntry, b| (b.started_at, &b.id).cmp(&(a.started_at, &a.id)));
    Ok(entries)
}

/// A kept task: what it was, its event log lines and its debug log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptTask {
    /// What the task was.
    pub entry: TaskEntry,
    /// The Director's event log, one JSON object per line.
    pub events: Vec<String>,
    /// The controller's log lines of the task.
    pub debug: String,
}

/// Task `id` of `namespace`; `None` when it is not kept.
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    id: &str,
) -> Result<Option<KeptTask>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{TASK_LABEL}={id}");
    let maps = api.list(&ListParams::default().labels(&selector)).await?;
    let Some(map) = maps.items.into_iter().next() else {
        return Ok(None);
    };
    let entry = (map.data.as_ref())
        .and_then(|d| d.get(RECORD_KEY))
        .and_then(|text| serde_json::from_str::<TaskEntry>(text).ok());
    let Some(entry) = entry else {
        return Ok(None);
    };
    let gunzipped = |key: &str| {
        let mut text = String::new();
        if let Some(gz) = map.binary_data.as_ref().and_then(|b| b.get(key)) {
            let _ = flate2::read::GzDecoder::new(gz.0.as_slice()).read_to_string(&mut text);
        }
        text
    };
    Ok(Some(KeptTask {
        entry,
        events: gunzipped(EVENTS_KEY).lines().map(String::from).collect(),
        debug: gunzipped(DEBUG_KEY),
    }))
}

/// The tracing layer that keeps each running task's debug log: every event inside a span
/// with the field `kubosh_task` (a [`TaskRecorder::span`]) goes, formatted as a log line,
/// into that task's log. Installed by `kubosh controller` with its own filter (debug for
/// kubosh's crates), beside the process's log.
pub struct TaskDebugLayer;

/// The task key a span carries.
struct TaskKey(String);

impl<S> tracing_subscriber::Layer<S> for TaskDebugLayer
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut found = FieldText::of(TASK_FIELD);
        attrs.record(&mut found);
        if let (Some(key), Some(span)) = (found.value, ctx.span(id)) {
            span.extensions_mut().insert(TaskKey(key));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let Some(scope) = ctx.event_scope(event) else {
            return;
        };
        let key = scope
            .into_iter()
            .find_map(|span| span.extensions().get::<TaskKey>().map(|k| k.0.clone()));
        let Some(key) = key else { return };
        let buffer = (DEBUG_LOGS.lock().unwrap_or_else(PoisonError::into_inner))
            .get(&key)
            .cloned();
        let Some(buffer) = buffer else { return };
        let mut line = FieldText::all();
        event.record(&mut line);
        let meta = event.metadata();
        let text = format!(
            "{} {:>5} {}: {}\n",
            k8s_openapi::jiff::Timestamp::now(),
            meta.level(),
            meta.target(),
            line.text
        );
        let mut log = buffer.lock().unwrap_or_else(PoisonError::into_inner);
        log.extend_from_slice(text.as_bytes());
        if log.len() > MAX_DEBUG_BYTES {
            // The oldest lines go (from a line's start on).
            let cut = log.len() - MAX_DEBUG_BYTES;
            let from =
                (log[cut..].iter().position(|b| *b == b'\n')).map_or(log.len(), |p| cut + p + 1);
            log.drain(..from);
        }
    }
}

/// A field's text (or all fields as `message k=v ...`) of a span or event.
struct FieldText {
    only: Option<&'static str>,
    value: Option<String>,
    text: String,
}

impl FieldText {
    fn of(field: &'static str) -> FieldText {
        FieldText {
            only: Some(field),
            value: None,
            text: String::new(),
        }
    }

    fn all() -> FieldText {
        FieldText {
            only: None,
            value: None,
            text: String::new(),
        }
    }
}

impl tracing::field::Visit for FieldText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match self.only {
            Some(only) if field.name() == only => self.value = Some(format!("{value:?}")),
            Some(_) => {}
            None if field.name() == "message" => {
                let message = format!("{value:?}");
                self.text.insert_str(0, &message);
            }
            None => {
                use std::fmt::Write as _;
                let _ = write!(self.text, " {}={value:?}", field.name());
            }
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match self.only {
            Some(only) if field.name() == only => self.value = Some(value.to_string()),
            _ => self.record_debug(field, &value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubosh_engine::NoEvents;

    #[test]
    fn the_recorder_keeps_each_line_and_the_notices_within_its_bound() {
        let recorder = TaskRecorder::new(Arc::new(NoEvents));
        recorder.emit(warning_line("first".into()));
        let log = String::from_utf8(recorder.log()).unwrap();
        assert_eq!(log.lines().count(), 1);
        assert!(log.contains("\"first\""), "{log}");
        let big = "x".repeat(MAX_EVENT_BYTES / 2);
        for _ in 0..4 {
            recorder.emit(warning_line(big.clone()));
        }
        assert!(recorder.log().len() < MAX_EVENT_BYTES);
    }
}
