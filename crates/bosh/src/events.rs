//! A deploy's progress as BOSH's event log (`bosh-protocols.md` §4.15): typed lines with the
//! exact JSON shape the Director writes (`{"time", "stage", "tags", "total", "task", "index",
//! "state", "progress", "data"}`, warnings, errors with codes), helpers that number a stage's
//! tasks and name instance tasks as BOSH does, and a renderer that prints them the way the
//! BOSH CLI shows a task (`Task 4 | 17:08:07 | Compiling packages: zookeeper/c98c52
//! (00:00:18)`). Pure: no I/O beyond the writer a renderer is given.

use std::collections::HashMap;
use std::io::Write;

use serde::{Deserialize, Serialize};

/// The state of a stage task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The task began.
    Started,
    /// The task reports progress (`data.status`).
    InProgress,
    /// The task succeeded.
    Finished,
    /// The task failed (`data.error`).
    Failed,
}

/// `data` of a stage event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventData {
    /// What the task is doing (`executing pre-start`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Why the task failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One task of a stage changing state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageEvent {
    /// Unix seconds.
    pub time: i64,
    /// The stage, e.g. `Updating instance`.
    pub stage: String,
    /// Tags, e.g. the instance group.
    pub tags: Vec<String>,
    /// Number of tasks in the stage.
    pub total: u64,
    /// The task, e.g. `web/8493a031-... (0) (canary)`.
    pub task: String,
    /// 1-based position of the task in the stage.
    pub index: u64,
    /// What happened.
    pub state: State,
    /// 0 to 100.
    pub progress: u8,
    /// Status or error.
    #[serde(default, skip_serializing_if = "is_empty_data")]
    pub data: EventData,
}

fn is_empty_data(d: &EventData) -> bool {
    d.status.is_none() && d.error.is_none()
}

/// A warning or deprecation line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoticeEvent {
    /// Unix seconds.
    pub time: i64,
    /// `warning` or `deprecation`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text.
    pub message: String,
}

/// The error that ended a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskError {
    /// BOSH's error code (e.g. 400007 for an instance that failed to start).
    pub code: u32,
    /// The message.
    pub message: String,
}

/// An error line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorEvent {
    /// Unix seconds.
    pub time: i64,
    /// The error.
    pub error: TaskError,
}

/// One line of the event log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EventLine {
    /// A stage task changed state.
    Stage(StageEvent),
    /// A warning or deprecation.
    Notice(NoticeEvent),
    /// The task's error.
    Error(ErrorEvent),
}

impl EventLine {
    /// The line as the Director writes it (one JSON object, no newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The steps of updating one instance, in order, as `data.status` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateStep {
    /// `executing pre-stop`
    PreStop,
    /// `executing drain`
    Drain,
    /// `stopping jobs`
    StopJobs,
    /// `executing post-stop`
    PostStop,
    /// `installing packages`
    InstallPackages,
    /// `configuring jobs`
    ConfigureJobs,
    /// `executing pre-start`
    PreStart,
    /// `starting jobs`
    StartJobs,
    /// `executing post-start`
    PostStart,
}

impl UpdateStep {
    /// The status text.
    pub fn status(self) -> &'static str {
        match self {
            UpdateStep::PreStop => "executing pre-stop",
            UpdateStep::Drain => "executing drain",
            UpdateStep::StopJobs => "stopping jobs",
            UpdateStep::PostStop => "executing post-stop",
            UpdateStep::InstallPackages => "installing packages",
            UpdateStep::ConfigureJobs => "configuring jobs",
            UpdateStep::PreStart => "executing pre-start",
            UpdateStep::StartJobs => "starting jobs",
            UpdateStep::PostStart => "executing post-start",
        }
    }
}

/// The task name of an instance: `<group>/<uuid> (<index>)`, plus ` (canary)` for canaries.
pub fn instance_task(group: &str, uuid: &str, index: u64, canary: bool) -> String {
    let mut s = format!("{group}/{uuid} ({index})");
    if canary {
        s.push_str(" (canary)");
    }
    s
}

/// Numbers the tasks of one stage and builds their events.
#[derive(Debug, Clone)]
pub struct Stage {
    name: String,
    tags: Vec<String>,
    total: u64,
    next: u64,
}

/// A task of a [`Stage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageTask {
    /// Its 1-based index.
    pub index: u64,
    /// Its name.
    pub name: String,
}

impl Stage {
    /// A stage of `total` tasks.
    pub fn new(name: impl Into<String>, tags: Vec<String>, total: u64) -> Stage {
        Stage {
            name: name.into(),
            tags,
            total,
            next: 1,
        }
    }

    /// Begins the next task: its handle and its `started` event.
    pub fn start(&mut self, task: impl Into<String>, time: i64) -> (StageTask, EventLine) {
        let t = StageTask {
            index: self.next,
            name: task.into(),
        };
        self.next += 1;
        let e = self.event(&t, State::Started, 0, EventData::default(), time);
        (t, e)
    }

    /// `in_progress` with a status.
    pub fn progress(&self, task: &StageTask, status: &str, progress: u8, time: i64) -> EventLine {
        let data = EventData {
            status: Some(status.to_string()),
            error: None,
        };
        self.event(task, State::InProgress, progress.min(100), data, time)
    }

    /// `finished`.
    pub fn finish(&self, task: &StageTask, time: i64) -> EventLine {
        self.event(task, State::Finished, 100, EventData::default(), time)
    }

    /// `failed` with the error.
    pub fn fail(&self, task: &StageTask, error: &str, time: i64) -> EventLine {
        let data = EventData {
            status: None,
            error: Some(error.to_string()),
        };
        self.event(task, State::Failed, 100, data, time)
    }

    fn event(
        &self,
        task: &StageTask,
        state: State,
        progress: u8,
        data: EventData,
        time: i64,
    ) -> EventLine {
        EventLine::Stage(StageEvent {
            time,
            stage: self.name.clone(),
            tags: self.tags.clone(),
            total: self.total,
            task: task.name.clone(),
            index: task.index,
            state,
            progress,
            data,
        })
    }
}

/// `HH:MM:SS` of a duration in seconds, as the BOSH CLI prints durations.
pub fn duration_text(secs: i64) -> String {
    let s = secs.max(0);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// `HH:MM:SS` (UTC) of a Unix time.
pub fn clock_text(time: i64) -> String {
    duration_text(time.rem_euclid(86_400))
}

/// `Mon Jan _2 15:04:05 UTC 2006` (Go's `time.UnixDate` in UTC) of a Unix time: how the BOSH
/// CLI prints a task's start and end.
pub fn full_time_text(time: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = time.div_euclid(86_400);
    let (year, month, day) = kubosh_base::civil::civil_from_days(days);
    format!(
        "{} {} {day:>2} {} UTC {year}",
        DAYS[usize::try_from(days.rem_euclid(7)).unwrap_or(0)],
        MONTHS[usize::try_from(month - 1).unwrap_or(0)],
        clock_text(time)
    )
}

/// A stage task's identity: stage, tags, task (bosh-cli's `Event.IsSame`).
type TaskKey = (String, Vec<String>, String);

fn key_of(e: &StageEvent) -> TaskKey {
    (e.stage.clone(), e.tags.clone(), e.task.clone())
}

/// Prints a task's events as the BOSH CLI shows a running task (bosh-cli's
/// `ui/task.ReporterImpl`): `Task <id>`, then a line per event, `Task <id> | <time> |
/// <stage> <tags>: <task>` when it starts, its duration added to that line when the next
/// event is its end (else a line of its own), `L <status>` under it, `L Error:` under a
/// failure, warnings and the task's error, and at the end the task's start, finish,
/// duration and state.
pub struct CliRenderer<W: Write> {
    out: W,
    task_id: String,
    /// When each stage task was first seen (what a finished one's duration counts from).
    began: HashMap<TaskKey, i64>,
    /// The task whose line was printed last, to finish it in place.
    last: Option<TaskKey>,
    /// The first and the latest event's time.
    span: Option<(i64, i64)>,
}

impl<W: Write> CliRenderer<W> {
    /// A renderer for task `task_id` (a number for the Director and `kubosh`'s commands,
    /// the controller's own ids otherwise) writing to `out`.
    pub fn new(out: W, task_id: impl std::fmt::Display) -> CliRenderer<W> {
        CliRenderer {
            out,
            task_id: task_id.to_string(),
            began: HashMap::new(),
            last: None,
            span: None,
        }
    }

    /// The writer back.
    pub fn into_inner(self) -> W {
        self.out
    }

    /// Says the task started: `Task <id>`, the line its events follow.
    pub fn start(&mut self) -> std::io::Result<()> {
        write!(self.out, "Task {}", self.task_id)?;
        self.out.flush()
    }

    /// Prints one event.
    pub fn render(&mut self, line: &EventLine) -> std::io::Result<()> {
        let id = self.task_id.clone();
        let time = match line {
            EventLine::Stage(e) => e.time,
            EventLine::Notice(n) => n.time,
            EventLine::Error(e) => e.time,
        };
        let mut text = String::new();
        match self.span {
            // The blank line between `Task <id>` and the first event.
            None => text.push('\n'),
            Some((first, _)) => self.span = Some((first, time)),
        }
        self.span.get_or_insert((time, time));
        let prefix = format!("\nTask {id} | {} | ", clock_text(time));
        match line {
            EventLine::Stage(e) => {
                let key = key_of(e);
                let began = *self.began.entry(key.clone()).or_insert(e.time);
                let duration = duration_text(e.time - began);
                let failure = || {
                    let pad = " ".repeat(id.to_string().len());
                    let error = e.data.error.as_deref().unwrap_or_default();
                    format!("\n     {pad}            L Error: {error}")
                };
                let status = e.data.status.as_deref().unwrap_or_default();
                if self.last.as_ref() == Some(&key) {
                    match e.state {
                        State::Started => {}
                        State::Finished => text.push_str(&format!(" ({duration})")),
                        State::InProgress => {
                            text.push_str(&format!("{prefix}L {status}: {}", e.task));
                        }
                        State::Failed => text.push_str(&format!(" ({duration}){}", failure())),
                    }
                } else {
                    let mut what = e.stage.clone();
                    if !e.tags.is_empty() {
                        what = format!("{what} {}", e.tags.join(", "));
                    }
                    let line = format!("{prefix}{what}: {}", e.task);
                    match e.state {
                        State::Started => text.push_str(&line),
                        State::InProgress => {
                            text.push_str(&format!("{line}{prefix}L {status}: {}", e.task));
                        }
                        State::Finished => text.push_str(&format!("{line} ({duration})")),
                        State::Failed => {
                            text.push_str(&format!("{line} ({duration}){}", failure()));
                        }
                    }
                }
                self.last = Some(key);
            }
            EventLine::Notice(n) => {
                let label = if n.kind == "deprecation" {
                    "Deprecation"
                } else {
                    "Warning"
                };
                text.push_str(&format!("{prefix}{label}: {}", n.message));
                self.last = None;
            }
            EventLine::Error(e) => {
                text.push_str(&format!("{prefix}Error: {}", e.error.message));
                self.last = None;
            }
        }
        self.out.write_all(text.as_bytes())?;
        self.out.flush()
    }

    /// Ends the last event's line (events start their own lines), for output that goes on
    /// without [`CliRenderer::finish`] (`kubosh plan`'s report).
    pub fn end_line(&mut self) -> std::io::Result<()> {
        if self.span.is_some() {
            self.out.write_all(b"\n")?;
        }
        self.out.flush()
    }

    /// Says the task ended in `state` (`done`, `error`, `cancelled`): its start, finish and
    /// duration when it had events, then the state.
    pub fn finish(&mut self, state: &str) -> std::io::Result<()> {
        let id = self.task_id.clone();
        match self.span {
            Some((first, last)) => write!(
                self.out,
                "\n\nTask {id} Started  {}\nTask {id} Finished {}\nTask {id} Duration {}\nTask {id} {state}\n",
                full_time_text(first),
                full_time_text(last),
                duration_text(last - first),
            )?,
            None => {
                let mut title = state.to_string();
                if let Some(first) = title.get_mut(..1) {
                    first.make_ascii_uppercase();
                }
                writeln!(self.out, ". {title}")?;
            }
        }
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_have_the_directors_shape() {
        let mut stage = Stage::new("Updating instance", vec!["web".into()], 3);
        let (task, started) = stage.start(instance_task("web", "8493a031", 0, true), 1712345678);
        let progress = stage.progress(&task, UpdateStep::PreStart.status(), 50, 1712345679);
        let v: serde_json::Value = serde_json::from_str(&progress.to_json()).unwrap();
        assert_eq!(
            v,
            json!({"time": 1712345679, "stage": "Updating instance", "tags": ["web"], "total": 3,
                   "task": "web/8493a031 (0) (canary)", "index": 1, "state": "in_progress",
                   "progress": 50, "data": {"status": "executing pre-start"}})
        );
        let v: serde_json::Value = serde_json::from_str(&started.to_json()).unwrap();
        assert_eq!(v["state"], "started");
        assert!(v.get("data").is_none());
        let (second, _) = stage.start("web/x (1)", 0);
        assert_eq!(second.index, 2);
        let warning = EventLine::Notice(NoticeEvent {
            time: 1,
            kind: "warning".into(),
            message: "m".into(),
        });
        assert_eq!(
            warning.to_json(),
            r#"{"time":1,"type":"warning","message":"m"}"#
        );
        let error = EventLine::Error(ErrorEvent {
            time: 1,
            error: TaskError {
                code: 400007,
                message: "'web/0' is not running after update".into(),
            },
        });
        assert_eq!(
            error.to_json(),
            r#"{"time":1,"error":{"code":400007,"message":"'web/0' is not running after update"}}"#
        );
        // Lines read back as the same variant.
        for line in [started, progress, warning, error] {
            let back: EventLine = serde_json::from_str(&line.to_json()).unwrap();
            assert_eq!(back, line);
        }
    }

    #[test]
    fn the_cli_rendering_is_bosh_clis() {
        let mut stage = Stage::new("Compiling packages", vec![], 1);
        let (t, started) = stage.start("zookeeper/c98c52", 61_687);
        let done = stage.finish(&t, 61_705);
        let mut upd = Stage::new("Updating instance", vec!["web".into()], 1);
        let (u, u_started) = upd.start(instance_task("web", "abc", 0, true), 61_710);
        let status = upd.progress(&u, UpdateStep::StartJobs.status(), 80, 61_711);
        let failed = upd.fail(&u, "'web/abc (0)' is not running after update", 61_740);
        let mut r = CliRenderer::new(Vec::new(), 4);
        r.start().unwrap();
        for e in [started, done, u_started, status, failed] {
            r.render(&e).unwrap();
        }
        r.finish("error").unwrap();
        let text = String::from_utf8(r.into_inner()).unwrap();
        assert_eq!(
            text,
            "Task 4\n\
             \nTask 4 | 17:08:07 | Compiling packages: zookeeper/c98c52 (00:00:18)\
             \nTask 4 | 17:08:30 | Updating instance web: web/abc (0) (canary)\
             \nTask 4 | 17:08:31 | L starting jobs: web/abc (0) (canary) (00:00:30)\
             \n                  L Error: 'web/abc (0)' is not running after update\
             \n\nTask 4 Started  Thu Jan  1 17:08:07 UTC 1970\
             \nTask 4 Finished Thu Jan  1 17:09:00 UTC 1970\
             \nTask 4 Duration 00:00:53\
             \nTask 4 error\n"
        );
    }

    /// Tasks that overlap: each end on a line of its own, timed from its start; warnings
    /// and the task's error on lines of their own (bosh-cli's `ReporterImpl.showEvent`).
    #[test]
    fn overlapping_tasks_end_on_lines_of_their_own() {
        let mut stage = Stage::new("Creating missing vms", vec![], 2);
        let (a, a_started) = stage.start("web/a (0)", 100);
        let (b, b_started) = stage.start("web/b (1)", 101);
        let a_done = stage.finish(&a, 130);
        let b_done = stage.finish(&b, 141);
        let warning = EventLine::Notice(NoticeEvent {
            time: 142,
            kind: "warning".into(),
            message: "w".into(),
        });
        let error = EventLine::Error(ErrorEvent {
            time: 143,
            error: TaskError {
                code: 1,
                message: "boom".into(),
            },
        });
        let mut r = CliRenderer::new(Vec::new(), 12);
        r.start().unwrap();
        for e in [a_started, b_started, a_done, b_done, warning, error] {
            r.render(&e).unwrap();
        }
        r.finish("done").unwrap();
        let text = String::from_utf8(r.into_inner()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..8],
            [
                "Task 12",
                "",
                "Task 12 | 00:01:40 | Creating missing vms: web/a (0)",
                "Task 12 | 00:01:41 | Creating missing vms: web/b (1)",
                "Task 12 | 00:02:10 | Creating missing vms: web/a (0) (00:00:30)",
                "Task 12 | 00:02:21 | Creating missing vms: web/b (1) (00:00:40)",
                "Task 12 | 00:02:22 | Warning: w",
                "Task 12 | 00:02:23 | Error: boom",
            ]
        );
        assert!(
            text.ends_with("Task 12 Duration 00:00:43\nTask 12 done\n"),
            "{text}"
        );
        // A task without events: bosh-cli's `Task 7. Done`.
        let mut quiet = CliRenderer::new(Vec::new(), 7);
        quiet.start().unwrap();
        quiet.finish("done").unwrap();
        assert_eq!(
            String::from_utf8(quiet.into_inner()).unwrap(),
            "Task 7. Done\n"
        );
        // Ending the line without ending the task (`kubosh plan`): only after an event.
        let mut plan = CliRenderer::new(Vec::new(), 9);
        plan.end_line().unwrap();
        let mut stage = Stage::new("Preparing deployment", vec![], 1);
        let (task, started) = stage.start("Rendering templates", 0);
        plan.render(&started).unwrap();
        plan.render(&stage.finish(&task, 1)).unwrap();
        plan.end_line().unwrap();
        assert_eq!(
            String::from_utf8(plan.into_inner()).unwrap(),
            "\n\nTask 9 | 00:00:00 | Preparing deployment: Rendering templates (00:00:01)\n"
        );
    }

    #[test]
    fn full_times_are_gos_unix_date() {
        assert_eq!(
            full_time_text(1_795_908_601),
            "Sat Nov 28 23:30:01 UTC 2026"
        );
        assert_eq!(
            full_time_text(1_709_168_523),
            "Thu Feb 29 01:02:03 UTC 2024"
        );
        assert_eq!(full_time_text(-1), "Wed Dec 31 23:59:59 UTC 1969");
    }

    #[test]
    fn durations_and_clock() {
        assert_eq!(duration_text(3_725), "01:02:05");
        assert_eq!(clock_text(86_400 + 61), "00:01:01");
        assert_eq!(duration_text(-5), "00:00:00");
    }
}
