//! A deploy's event log turned into what a kubectl user sees: the current stage and its
//! count in `status.progress`, and Events for the milestones (VM created, canary updated,
//! instance updated or failed, instance deleted) regarding the `Instance` where one applies.
//!
//! The engine emits lines synchronously; [`DeployProgress`] keeps the latest stage and
//! queues milestones, and [`DeployProgress::drain`] hands them to the async side (which
//! publishes Events and writes the status at a bounded rate). Never one Event per line:
//! only a task's end is a milestone.

use std::sync::{Mutex, PoisonError};

use kube::runtime::events::EventType;

use crate::api::Progress;
use kubosh_bosh::events::{EventLine, State};
use kubosh_engine::EventSink;

/// A milestone of a deploy, to publish as an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Milestone {
    /// Normal or Warning.
    pub kind: EventType,
    /// PascalCase reason, e.g. `CanaryUpdated`.
    pub reason: &'static str,
    /// What a human reads.
    pub note: String,
    /// The instance it concerns, `(group, index)`, when one does and its `Instance` still
    /// exists.
    pub instance: Option<(String, u64)>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each stage seen, by its name with its tags (`Updating instance web`): groups updated
    /// side by side count apart.
    stages: std::collections::BTreeMap<String, Progress>,
    /// The stage that moved last.
    progress: Option<Progress>,
    changed: bool,
    milestones: Vec<Milestone>,
}

/// The engine's event sink of one deploy.
#[derive(Debug, Default)]
pub struct DeployProgress {
    inner: Mutex<Inner>,
}

/// `group` and index of a task named `group/uuid (index)` or `group/uuid (index) (canary)`.
fn instance_of(task: &str) -> Option<(String, u64)> {
    let (group, rest) = task.split_once('/')?;
    let index = rest.split_once(" (")?.1.split_once(')')?.0.parse().ok()?;
    Some((group.to_string(), index))
}

impl DeployProgress {
    /// A sink with nothing seen yet.
    pub fn new() -> DeployProgress {
        DeployProgress::default()
    }

    /// The current stage, when it changed since the last call.
    pub fn take_progress(&self) -> Option<Progress> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if !inner.changed {
            return None;
        }
        inner.changed = false;
        inner.progress.clone()
    }

    /// The milestones seen since the last call.
    pub fn drain(&self) -> Vec<Milestone> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut inner.milestones)
    }
}

fn milestone(stage: &str, task: &str, state: State, error: Option<&str>) -> Option<Milestone> {
    let instance = instance_of(task);
    let (kind, reason, note) = match (stage, state) {
        ("Creating missing vms", State::Finished) => (
            EventType::Normal,
            "VMCreated",
            format!("Created the VM of {task}"),
        ),
        ("Updating instance", State::Finished) if task.ends_with("(canary)") => (
            EventType::Normal,
            "CanaryUpdated",
            format!("Canary {} updated", task.trim_end_matches(" (canary)")),
        ),
        ("Updating instance", State::Finished) => (
            EventType::Normal,
            "InstanceUpdated",
            format!("Updated {task}"),
        ),
        ("Updating instance", State::Failed) => (
            EventType::Warning,
            "InstanceUpdateFailed",
            format!(
                "Updating {task} failed: {}",
                error.unwrap_or("no reason given")
            ),
        ),
        ("Creating missing vms", State::Failed) => (
            EventType::Warning,
            "VMCreationFailed",
            format!(
                "Creating the VM of {task} failed: {}",
                error.unwrap_or("no reason given")
            ),
        ),
        ("Deleting unneeded instances", State::Finished) => {
            // Its Instance is gone: the event is about the deployment.
            return Some(Milestone {
                kind: EventType::Normal,
                reason: "InstanceDeleted",
                note: format!("Deleted {task}, no longer in the manifest"),
                instance: None,
            });
        }
        _ => return None,
    };
    // A canary is a milestone of the deployment as a whole (`kubectl describe bd`).
    let instance = if reason == "CanaryUpdated" {
        None
    } else {
        instance
    };
    Some(Milestone {
        kind,
        reason,
        note,
        instance,
    })
}

impl EventSink for DeployProgress {
    fn emit(&self, line: EventLine) {
        let EventLine::Stage(event) = line else {
            return;
        };
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let done = matches!(event.state, State::Finished | State::Failed);
        let stage = match &event.tags[..] {
            [] => event.stage.clone(),
            tags => format!("{} {}", event.stage, tags.join(", ")),
        };
        let progress = inner
            .stages
            .entry(stage.clone())
            .or_insert_with(|| Progress {
                stage,
                done: 0,
                total: i32::try_from(event.total).unwrap_or(i32::MAX),
            });
        if done {
            progress.done += 1;
        }
        inner.progress = Some(progress.clone());
        inner.changed = true;
        if done
            && let Some(m) = milestone(
                &event.stage,
                &event.task,
                event.state,
                event.data.error.as_deref(),
            )
        {
            inner.milestones.push(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubosh_bosh::events::{EventData, StageEvent};

    fn line(stage: &str, task: &str, total: u64, state: State) -> EventLine {
        EventLine::Stage(StageEvent {
            time: 0,
            stage: stage.into(),
            tags: vec![],
            total,
            task: task.into(),
            index: 1,
            state,
            progress: 0,
            data: EventData::default(),
        })
    }

    #[test]
    fn stages_count_and_task_ends_are_milestones() {
        let p = DeployProgress::new();
        p.emit(line(
            "Updating instance",
            "web/u1 (0) (canary)",
            3,
            State::Started,
        ));
        assert_eq!(p.drain(), vec![]);
        p.emit(line(
            "Updating instance",
            "web/u1 (0) (canary)",
            3,
            State::Finished,
        ));
        p.emit(line(
            "Updating instance",
            "web/u2 (1)",
            3,
            State::InProgress,
        ));
        p.emit(line("Updating instance", "web/u2 (1)", 3, State::Finished));
        let progress = p.take_progress().unwrap();
        assert_eq!(
            (progress.stage.as_str(), progress.done, progress.total),
            ("Updating instance", 2, 3)
        );
        assert_eq!(p.take_progress(), None, "unchanged since");
        let m = p.drain();
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[0].reason, m[0].instance.clone()),
            ("CanaryUpdated", None)
        );
        assert_eq!(m[0].note, "Canary web/u1 (0) updated");
        assert_eq!(
            (m[1].reason, m[1].instance.clone()),
            ("InstanceUpdated", Some(("web".into(), 1)))
        );
        // Another group's stage of the same name counts apart.
        let mut db = line(
            "Updating instance",
            "db/u3 (0) (canary)",
            2,
            State::Finished,
        );
        if let EventLine::Stage(e) = &mut db {
            e.tags = vec!["db".into()];
        }
        p.emit(db);
        let progress = p.take_progress().unwrap();
        assert_eq!(
            (progress.stage.as_str(), progress.done, progress.total),
            ("Updating instance db", 1, 2)
        );
        p.drain();
        p.emit(line("Compiling packages", "pkg/1", 5, State::Finished));
        assert_eq!(p.take_progress().unwrap().stage, "Compiling packages");
        assert!(
            p.drain().is_empty(),
            "a compiled package is not an Event of its own"
        );
    }

    #[test]
    fn instance_names_parse() {
        assert_eq!(
            instance_of("diego_cell/abc (12) (canary)"),
            Some(("diego_cell".into(), 12))
        );
        assert_eq!(instance_of("nothing"), None);
    }
}
