//! Where the engine's event log goes, and the stage bookkeeping concurrent tasks share.

use std::sync::{Arc, Mutex, PoisonError};

use kubosh_bosh::events::{
    ErrorEvent, EventLine, NoticeEvent, Stage, StageTask, TaskError, UpdateStep,
};

/// A consumer of the event log: the controller (status and Kubernetes Events), create-env
/// (the terminal), tests.
pub trait EventSink: Send + Sync {
    /// One line of the log.
    fn emit(&self, line: EventLine);

    /// A milestone of the deploy that BOSH's event log does not spell out (a VM replaced, a
    /// disk migrated, an agent silent, DNS synced). Typed, so no driver reads task names
    /// or messages for them. A sink that does not take them gets the warning line of those
    /// the Director's task log shows ([`Milestone::notice`]); one that takes them tells them
    /// its own way (the controller: an Event).
    fn milestone(&self, milestone: Milestone) {
        if let Some(notice) = milestone.notice() {
            self.emit(warning_line(notice));
        }
    }
}

/// An instance as milestones name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceName {
    /// Its group.
    pub group: String,
    /// Its index in the group.
    pub index: u64,
    /// `group/uuid (index)`, as BOSH names it in messages.
    pub display: String,
}

impl InstanceName {
    /// The name of `record`.
    pub fn of(record: &crate::state::InstanceRecord) -> InstanceName {
        InstanceName {
            group: record.group.clone(),
            index: record.index,
            display: record.display_name(),
        }
    }
}

/// What changed in the cloud or on an agent, as a kubectl user hears of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Milestone {
    /// A VM was made for an instance that had none.
    VmCreated {
        /// Whose.
        instance: InstanceName,
        /// The cloud's id.
        cid: String,
    },
    /// An instance's VM was replaced by a new one (stemcell, cloud properties, `recreate`).
    VmRecreated {
        /// Whose.
        instance: InstanceName,
        /// The deleted VM.
        old_cid: String,
        /// The new VM.
        new_cid: String,
    },
    /// An instance's VM was deleted and not replaced (`stop --hard`, deleting the deployment).
    VmDeleted {
        /// Whose.
        instance: InstanceName,
        /// The deleted VM.
        cid: String,
    },
    /// A new persistent disk was made for an instance.
    DiskCreated {
        /// Whose.
        instance: InstanceName,
        /// The cloud's id.
        cid: String,
        /// Its size.
        size_mib: u64,
    },
    /// An instance's data was copied from its disk to a new one (the old one is orphaned).
    DiskMigrated {
        /// Whose.
        instance: InstanceName,
        /// The disk the data came from.
        old_cid: String,
        /// The disk the data is on now.
        new_cid: String,
        /// The new disk's size.
        size_mib: u64,
    },
    /// A disk was taken off an instance and kept as an orphan (the group no longer asks for
    /// it, the instance or deployment is gone).
    DiskOrphaned {
        /// Whose it was.
        instance: InstanceName,
        /// The cloud's id.
        cid: String,
    },
    /// An instance lost its VM or its agent, and the deploy gives it a new VM on its
    /// persistent disks (the resurrector, `--fix`, a `recreate` of it): its `VmCreated` or
    /// `VmRecreated` follows.
    Resurrecting {
        /// Whose.
        instance: InstanceName,
        /// The VM it had.
        cid: String,
        /// What was lost.
        lost: Lost,
    },
    /// An instance's agent has not answered `get_state` within one message timeout; it is
    /// asked again (said while the deploy waits, not only when it gives up).
    AgentNotAnswering {
        /// Whose.
        instance: InstanceName,
        /// How long it was waited for so far.
        waited: std::time::Duration,
        /// How long the deploy waits for it at most.
        at_most: std::time::Duration,
    },
    /// An instance's agent did not answer (the deploy fails before it changes anything).
    AgentUnresponsive {
        /// Whose.
        instance: InstanceName,
        /// What the request said.
        error: String,
    },
    /// The deploy is planned: what it will change (sent before it changes anything).
    Planned(crate::prepare::PlanSummary),
    /// A new DNS records version was sent to every agent of every deployment.
    DnsSynced {
        /// The records version.
        version: u64,
        /// Agents asked.
        agents: usize,
        /// Agents that did not acknowledge.
        failed: usize,
    },
}

/// What an instance being resurrected lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// Its agent does not answer.
    Agent,
    /// The cloud no longer has its VM (`has_vm` false).
    Vm,
}

impl Milestone {
    /// The warning line the Director's task log shows for it, if any: an instance given a
    /// new VM because its VM is gone or its agent silent.
    pub fn notice(&self) -> Option<String> {
        match self {
            Milestone::Resurrecting {
                instance,
                cid,
                lost: Lost::Vm,
            } => Some(format!(
                "VM for '{}' with cloud ID '{cid}' missing.",
                instance.display
            )),
            Milestone::Resurrecting {
                instance,
                cid,
                lost: Lost::Agent,
            } => Some(format!(
                "Agent of '{}' does not respond: its VM '{cid}' is recreated",
                instance.display
            )),
            _ => None,
        }
    }
}

/// Keeps every line and milestone (tests).
#[derive(Debug, Default, Clone)]
pub struct EventLog {
    lines: Arc<Mutex<Vec<EventLine>>>,
    milestones: Arc<Mutex<Vec<Milestone>>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> EventLog {
        EventLog::default()
    }

    /// The lines so far.
    pub fn lines(&self) -> Vec<EventLine> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The warnings (notices) so far, by text.
    pub fn warnings(&self) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter_map(|l| match l {
                EventLine::Notice(n) => Some(n.message),
                _ => None,
            })
            .collect()
    }

    /// The milestones so far.
    pub fn milestones(&self) -> Vec<Milestone> {
        self.milestones
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl EventSink for EventLog {
    fn emit(&self, line: EventLine) {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
    }

    fn milestone(&self, milestone: Milestone) {
        if let Some(notice) = milestone.notice() {
            warn(self, notice);
        }
        self.milestones
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(milestone);
    }
}

/// Drops every line.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _line: EventLine) {}
}

/// Seconds since the epoch, the event log's clock.
pub fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// One stage being run, shared by the tasks running in it.
pub struct StageRun {
    stage: Mutex<Stage>,
    sink: Arc<dyn EventSink>,
}

impl StageRun {
    /// Opens stage `name` with `total` tasks.
    pub fn new(
        sink: Arc<dyn EventSink>,
        name: &str,
        tags: Vec<String>,
        total: usize,
    ) -> Arc<StageRun> {
        Arc::new(StageRun {
            stage: Mutex::new(Stage::new(name, tags, total as u64)),
            sink,
        })
    }

    /// Starts a task.
    pub fn start(&self, task: impl Into<String>) -> StageTask {
        let (task, line) = self
            .stage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .start(task, now());
        self.sink.emit(line);
        task
    }

    /// Reports an update step of a task.
    pub fn step(&self, task: &StageTask, step: UpdateStep, progress: u8) {
        let line = self
            .stage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .progress(task, step.status(), progress, now());
        self.sink.emit(line);
    }

    /// Ends a task, finished or failed.
    pub fn end<T, E: std::fmt::Display>(&self, task: &StageTask, result: &Result<T, E>) {
        let stage = self.stage.lock().unwrap_or_else(PoisonError::into_inner);
        let line = match result {
            Ok(_) => stage.finish(task, now()),
            Err(e) => stage.fail(task, &e.to_string(), now()),
        };
        drop(stage);
        self.sink.emit(line);
    }

    /// Runs `work` as one task of the stage.
    pub async fn task<T, E: std::fmt::Display>(
        &self,
        name: impl Into<String>,
        work: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let task = self.start(name);
        let result = work.await;
        self.end(&task, &result);
        result
    }
}

/// Emits a warning line.
pub fn warn(sink: &dyn EventSink, message: impl Into<String>) {
    sink.emit(warning_line(message.into()));
}

/// A warning line of the event log.
pub fn warning_line(message: String) -> EventLine {
    EventLine::Notice(NoticeEvent {
        time: now(),
        kind: "warning".into(),
        message,
    })
}

/// Emits the task's error line.
pub fn error(sink: &dyn EventSink, code: u32, message: impl Into<String>) {
    sink.emit(EventLine::Error(ErrorEvent {
        time: now(),
        error: TaskError {
            code,
            message: message.into(),
        },
    }));
}
