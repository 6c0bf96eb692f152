//! The director's task history: every task a command runs (deploy, delete, cck, logs,
//! clean-up) keeps its event log under `<state_dir>/tasks/<id>/` (`task.json`: what, which
//! deployment, state, start and end; `event`: the Director's event log, one JSON line per
//! event), so `kubosh tasks` and `kubosh task ID` show it later, as `bosh tasks` and `bosh
//! task` do. Bounded: the newest [`KEEP_TASKS`] tasks are kept, and a task's event log stops
//! growing at [`MAX_EVENT_BYTES`]. Keeping history is best effort: a task never fails
//! because its log could not be written.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// How many tasks the history keeps (the Director keeps `max_tasks`, 2000 by default, in
/// its database; these are files).
pub const KEEP_TASKS: usize = 200;
/// The most bytes of one task's event log.
pub const MAX_EVENT_BYTES: u64 = 8 << 20;

/// What the history says of one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task id.
    pub id: u64,
    /// What it does (`create deployment`, `delete deployment hello`, ...).
    pub description: String,
    /// The deployment it works on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// `processing` while it runs (or if its command was killed), then `done` or `error`.
    pub state: String,
    /// Unix seconds.
    pub started_at: i64,
    /// Unix seconds, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
}

/// A running task's history, written as it goes.
#[derive(Debug)]
pub struct TaskLog {
    dir: PathBuf,
    record: Mutex<TaskRecord>,
    event: Mutex<Option<(std::fs::File, u64)>>,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl TaskLog {
    /// Starts task `id`'s history in `tasks_dir` (dropping the oldest beyond [`KEEP_TASKS`]).
    pub fn create(
        tasks_dir: &Path,
        id: u64,
        description: &str,
        deployment: Option<&str>,
    ) -> Result<TaskLog, String> {
        let dir = tasks_dir.join(id.to_string());
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let event = std::fs::File::create(dir.join("event"))
            .map_err(|e| format!("{}: {e}", dir.join("event").display()))?;
        let log = TaskLog {
            dir,
            record: Mutex::new(TaskRecord {
                id,
                description: description.to_string(),
                deployment: deployment.map(str::to_string),
                state: "processing".into(),
                started_at: now(),
                finished_at: None,
            }),
            event: Mutex::new(Some((event, 0))),
        };
        log.save();
        prune(tasks_dir, KEEP_TASKS);
        Ok(log)
    }

    /// Appends one event (a JSON line), until the log reaches [`MAX_EVENT_BYTES`].
    pub fn append(&self, json_line: &str) {
        let mut event = self.event.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((file, written)) = event.as_mut() {
            let bytes = json_line.len() as u64 + 1;
            if *written + bytes > MAX_EVENT_BYTES || writeln!(file, "{json_line}").is_err() {
                *event = None;
            } else {
                *written += bytes;
            }
        }
    }

    /// Records the task's end in `state`.
    pub fn finish(&self, state: &str) {
        {
            let mut record = self.record.lock().unwrap_or_else(|e| e.into_inner());
            record.state = state.to_string();
            record.finished_at = Some(now());
        }
        self.save();
    }

    fn save(&self) {
        let record = self
            .record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let text = serde_json::to_string_pretty(&record).unwrap_or_default();
        let tmp = self.dir.join("task.json.tmp");
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, self.dir.join("task.json"));
        }
    }
}

/// The tasks in `tasks_dir`, newest first.
pub fn list(tasks_dir: &Path) -> Vec<TaskRecord> {
    let mut tasks: Vec<TaskRecord> = task_ids(tasks_dir)
        .into_iter()
        .filter_map(|id| read_record(tasks_dir, id).ok())
        .collect();
    tasks.sort_by_key(|t| std::cmp::Reverse(t.id));
    tasks
}

/// Task `id`'s record and event log (its JSON lines).
pub fn read(tasks_dir: &Path, id: u64) -> Result<(TaskRecord, Vec<String>), String> {
    let record = read_record(tasks_dir, id)?;
    let path = tasks_dir.join(id.to_string()).join("event");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((record, text.lines().map(str::to_string).collect()))
}

fn read_record(tasks_dir: &Path, id: u64) -> Result<TaskRecord, String> {
    let path = tasks_dir.join(id.to_string()).join("task.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "Task {id} doesn't exist (the history keeps the newest {KEEP_TASKS})"
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn task_ids(tasks_dir: &Path) -> Vec<u64> {
    (std::fs::read_dir(tasks_dir).into_iter().flatten().flatten())
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Removes all but the newest `keep` tasks.
fn prune(tasks_dir: &Path, keep: usize) {
    let mut ids = task_ids(tasks_dir);
    ids.sort_unstable_by_key(|id| std::cmp::Reverse(*id));
    for id in ids.into_iter().skip(keep) {
        let _ = std::fs::remove_dir_all(tasks_dir.join(id.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_kept_with_its_events_and_the_oldest_go() {
        let dir = tempfile::tempdir().unwrap();
        for id in 1..=3 {
            let log = TaskLog::create(dir.path(), id, "create deployment", Some("hello")).unwrap();
            log.append(r#"{"time":1,"stage":"x","tags":[],"total":1,"task":"t","index":1,"state":"started","progress":0}"#);
            if id < 3 {
                log.finish("done");
            }
        }
        let tasks = list(dir.path());
        assert_eq!(tasks.iter().map(|t| t.id).collect::<Vec<_>>(), [3, 2, 1]);
        assert_eq!(tasks[0].state, "processing");
        assert_eq!(tasks[1].state, "done");
        assert!(tasks[1].finished_at.is_some());
        let (record, lines) = read(dir.path(), 2).unwrap();
        assert_eq!(record.deployment.as_deref(), Some("hello"));
        assert_eq!(lines.len(), 1);
        prune(dir.path(), 2);
        assert_eq!(list(dir.path()).len(), 2);
        assert!(
            read(dir.path(), 1)
                .unwrap_err()
                .contains("Task 1 doesn't exist")
        );
    }

    #[test]
    fn an_event_log_stops_at_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let log = TaskLog::create(dir.path(), 7, "x", None).unwrap();
        let line = "y".repeat(1 << 20);
        for _ in 0..20 {
            log.append(&line);
        }
        let size = std::fs::metadata(dir.path().join("7/event")).unwrap().len();
        assert!(size <= MAX_EVENT_BYTES, "{size}");
    }
}
