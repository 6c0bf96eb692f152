//! A deploy's event log turned into what a kubectl user sees: the current stage and its
//! count in `status.progress`, and Events for the milestones regarding the `Instance` where
//! one applies: from the event log, a task's end (canary updated, instance updated or
//! failed, instance deleted, VM creation failed); from the engine's typed milestones, what
//! the log does not spell out (VM created, recreated or deleted, disk created, migrated or
//! orphaned, agent unresponsive, DNS synced).
//!
//! The engine emits synchronously; [`DeployProgress`] keeps the latest stage and queues
//! milestones, and [`DeployProgress::drain`] hands them to the async side (which publishes
//! Events and writes the status at a bounded rate). Never one Event per line or per poll.

use std::sync::{Mutex, PoisonError};

use kube::runtime::events::EventType;

use crate::api::Progress;
use kubosh_bosh::events::{EventLine, State};
use kubosh_engine::{EventSink, InstanceName, Lost, Milestone as EngineMilestone};

/// The reason of the Event of an instance given a new VM because it lost its agent or VM.
pub const RESURRECTED: &str = "VMResurrected";

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

/// One stage's count, and its canaries.
#[derive(Debug, Default)]
struct StageCount {
    progress: Progress,
    canaries_started: u32,
    canaries_done: u32,
    failed: u32,
}

impl StageCount {
    /// `Updating instance group web: 3/10, canary done`.
    fn message(&self, stage: &str, tags: &[String]) -> String {
        let what = match (stage, tags) {
            ("Updating instance", [group]) => format!("Updating instance group {group}"),
            _ => self.progress.stage.clone(),
        };
        let canaries = match (self.canaries_started, self.canaries_done) {
            (0, _) => String::new(),
            (1, 1) => ", canary done".into(),
            (1, _) => ", canary updating".into(),
            (n, d) if d == n => format!(", {n} canaries done"),
            (n, d) => format!(", canaries {d}/{n}"),
        };
        format!(
            "{what}: {}/{}{canaries}",
            self.progress.done, self.progress.total
        )
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Each stage seen, by its name with its tags (`Updating instance web`): groups updated
    /// side by side count apart.
    stages: std::collections::BTreeMap<String, StageCount>,
    /// The stage that moved last.
    progress: Option<Progress>,
    changed: bool,
    milestones: Vec<Milestone>,
    /// Instances the deploy resurrects (their new VM is a `VMResurrected`), by
    /// `(group, index)`, with what they lost.
    resurrecting: std::collections::BTreeMap<(String, u64), Lost>,
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

    /// Puts back `milestones` a reader took but did not tell yet, before any seen since.
    pub fn requeue(&self, mut milestones: Vec<Milestone>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        milestones.append(&mut inner.milestones);
        inner.milestones = milestones;
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

/// Why an instance was resurrected, as its Event says it.
fn lost_what(lost: Lost) -> &'static str {
    match lost {
        Lost::Agent => "its agent did not respond",
        Lost::Vm => "the cloud no longer had its VM",
    }
}

/// The Event of one of the engine's typed milestones; a new VM of an instance in
/// `resurrecting` is its resurrection.
///
/// Long: one arm per milestone, a table best read in one piece.
fn typed_milestone(
    m: EngineMilestone,
    resurrecting: &std::collections::BTreeMap<(String, u64), Lost>,
) -> Milestone {
    let about = |i: &InstanceName| Some((i.group.clone(), i.index));
    let lost = |i: &InstanceName| resurrecting.get(&(i.group.clone(), i.index)).copied();
    let (kind, reason, note, instance) = match m {
        EngineMilestone::VmCreated { instance, cid }
        | EngineMilestone::VmRecreated {
            instance,
            new_cid: cid,
            ..
        } if lost(&instance).is_some() => (
            EventType::Normal,
            RESURRECTED,
            format!(
                "Resurrected {} on VM {cid}: {}",
                instance.display,
                lost(&instance).map_or("", lost_what)
            ),
            about(&instance),
        ),
        EngineMilestone::VmCreated { instance, cid } => (
            EventType::Normal,
            "VMCreated",
            format!("Created VM {cid} for {}", instance.display),
            about(&instance),
        ),
        EngineMilestone::VmRecreated {
            instance,
            old_cid,
            new_cid,
        } => (
            EventType::Normal,
            "VMRecreated",
            format!(
                "Replaced VM {old_cid} of {} with VM {new_cid}",
                instance.display
            ),
            about(&instance),
        ),
        EngineMilestone::VmDeleted { instance, cid } => (
            EventType::Normal,
            "VMDeleted",
            format!("Deleted VM {cid} of {}", instance.display),
            about(&instance),
        ),
        EngineMilestone::DiskCreated {
            instance,
            cid,
            size_mib,
        } => (
            EventType::Normal,
            "DiskCreated",
            format!(
                "Created disk {cid} ({size_mib} MiB) for {}",
                instance.display
            ),
            about(&instance),
        ),
        EngineMilestone::DiskMigrated {
            instance,
            old_cid,
            new_cid,
            size_mib,
        } => (
            EventType::Normal,
            "DiskMigrated",
            format!(
                "Copied the data of {} from disk {old_cid} to disk {new_cid} ({size_mib} MiB); {old_cid} is kept as an orphaned disk",
                instance.display
            ),
            about(&instance),
        ),
        EngineMilestone::DiskOrphaned { instance, cid } => (
            EventType::Normal,
            "DiskOrphaned",
            format!(
                "Disk {cid} of {} is orphaned: kept with its data until it expires or is deleted",
                instance.display
            ),
            about(&instance),
        ),
        EngineMilestone::Resurrecting {
            instance,
            cid,
            lost,
        } => (
            EventType::Warning,
            "Resurrecting",
            format!(
                "Giving {} a new VM on its persistent disks: {} (VM {cid})",
                instance.display,
                lost_what(lost)
            ),
            about(&instance),
        ),
        EngineMilestone::AgentUnresponsive { instance, error } => (
            EventType::Warning,
            "AgentUnresponsive",
            format!("The agent of {} did not answer: {error}", instance.display),
            about(&instance),
        ),
        EngineMilestone::DnsSynced {
            version,
            agents,
            failed,
        } => (
            EventType::Normal,
            "DNSSynced",
            match failed {
                0 => format!("Sent DNS records version {version} to {agents} agent(s)"),
                _ => format!(
                    "Sent DNS records version {version} to {agents} agent(s); {failed} did not acknowledge"
                ),
            },
            None,
        ),
    };
    Milestone {
        kind,
        reason,
        note,
        instance,
    }
}

impl EventSink for DeployProgress {
    fn milestone(&self, milestone: EngineMilestone) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let EngineMilestone::Resurrecting { instance, lost, .. } = &milestone {
            (inner.resurrecting).insert((instance.group.clone(), instance.index), *lost);
        }
        let m = typed_milestone(milestone, &inner.resurrecting);
        inner.milestones.push(m);
    }

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
        let count = inner
            .stages
            .entry(stage.clone())
            .or_insert_with(|| StageCount {
                progress: Progress {
                    stage,
                    total: i32::try_from(event.total).unwrap_or(i32::MAX),
                    ..Progress::default()
                },
                ..StageCount::default()
            });
        let canary = event.task.ends_with("(canary)");
        match event.state {
            State::Started if canary => count.canaries_started += 1,
            State::Finished if canary => count.canaries_done += 1,
            State::Failed => count.failed += 1,
            _ => {}
        }
        if done {
            count.progress.done += 1;
        }
        count.progress.message = count.message(&event.stage, &event.tags);
        let compiled = (event.stage == COMPILING
            && done
            && count.failed == 0
            && count.progress.done == count.progress.total)
            .then_some(count.progress.total);
        inner.progress = Some(count.progress.clone());
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
        // Told when compilation ends, not when the deploy does.
        if let Some(packages) = compiled {
            inner.milestones.push(Milestone {
                kind: EventType::Normal,
                reason: "PackagesCompiled",
                note: format!("Compiled {packages} package(s)"),
                instance: None,
            });
        }
    }
}

/// The stage that compiles packages.
const COMPILING: &str = "Compiling packages";

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
        assert_eq!(progress.message, "Updating instance: 2/3, canary done");
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
        let db = |state| {
            let mut l = line("Updating instance", "db/u3 (0) (canary)", 2, state);
            if let EventLine::Stage(e) = &mut l {
                e.tags = vec!["db".into()];
            }
            l
        };
        p.emit(db(State::Started));
        assert_eq!(
            p.take_progress().unwrap().message,
            "Updating instance group db: 0/2, canary updating"
        );
        p.emit(db(State::Finished));
        let progress = p.take_progress().unwrap();
        assert_eq!(
            (progress.stage.as_str(), progress.done, progress.total),
            ("Updating instance db", 1, 2)
        );
        assert_eq!(
            progress.message,
            "Updating instance group db: 1/2, canary done"
        );
        p.drain();
        p.emit(line("Compiling packages", "pkg/1", 5, State::Finished));
        let progress = p.take_progress().unwrap();
        assert_eq!(progress.stage, "Compiling packages");
        assert_eq!(progress.message, "Compiling packages: 1/5");
        assert!(
            p.drain().is_empty(),
            "a compiled package is not an Event of its own"
        );
        for n in 2..=5 {
            p.emit(line(
                "Compiling packages",
                &format!("pkg/{n}"),
                5,
                State::Finished,
            ));
        }
        let told: Vec<(&str, String)> = p.drain().into_iter().map(|m| (m.reason, m.note)).collect();
        assert_eq!(
            told,
            vec![("PackagesCompiled", "Compiled 5 package(s)".to_string())],
            "said once, when the last package is compiled"
        );
    }

    #[test]
    fn typed_milestones_are_events_about_their_instance() {
        let p = DeployProgress::new();
        let web1 = InstanceName {
            group: "web".into(),
            index: 1,
            display: "web/u2 (1)".into(),
        };
        p.milestone(EngineMilestone::VmRecreated {
            instance: web1.clone(),
            old_cid: "vm-a".into(),
            new_cid: "vm-b".into(),
        });
        p.milestone(EngineMilestone::DiskMigrated {
            instance: web1.clone(),
            old_cid: "disk-a".into(),
            new_cid: "disk-b".into(),
            size_mib: 96,
        });
        p.milestone(EngineMilestone::AgentUnresponsive {
            instance: web1,
            error: "Timed out sending 'get_state' to agent-1 after 45 seconds".into(),
        });
        p.milestone(EngineMilestone::DnsSynced {
            version: 7,
            agents: 3,
            failed: 1,
        });
        let m = p.drain();
        let reasons: Vec<_> = m.iter().map(|m| (m.reason, m.kind)).collect();
        assert_eq!(
            reasons,
            vec![
                ("VMRecreated", EventType::Normal),
                ("DiskMigrated", EventType::Normal),
                ("AgentUnresponsive", EventType::Warning),
                ("DNSSynced", EventType::Normal),
            ]
        );
        assert_eq!(m[0].note, "Replaced VM vm-a of web/u2 (1) with VM vm-b");
        assert!(
            m[1].note
                .contains("from disk disk-a to disk disk-b (96 MiB)")
        );
        assert!(m[2].note.contains("Timed out sending 'get_state'"));
        assert_eq!(
            m[3].note,
            "Sent DNS records version 7 to 3 agent(s); 1 did not acknowledge"
        );
        for about_web1 in &m[..3] {
            assert_eq!(about_web1.instance, Some(("web".into(), 1)));
        }
        assert_eq!(m[3].instance, None, "DNS is the deployment's");
    }

    #[test]
    fn a_new_vm_of_an_instance_that_lost_its_agent_or_vm_is_its_resurrection() {
        let p = DeployProgress::new();
        let name = |index: u64| InstanceName {
            group: "web".into(),
            index,
            display: format!("web/u{index} ({index})"),
        };
        p.milestone(EngineMilestone::Resurrecting {
            instance: name(0),
            cid: "vm-a".into(),
            lost: Lost::Agent,
        });
        p.milestone(EngineMilestone::Resurrecting {
            instance: name(1),
            cid: "vm-b".into(),
            lost: Lost::Vm,
        });
        p.milestone(EngineMilestone::VmRecreated {
            instance: name(0),
            old_cid: "vm-a".into(),
            new_cid: "vm-c".into(),
        });
        p.milestone(EngineMilestone::VmCreated {
            instance: name(1),
            cid: "vm-d".into(),
        });
        p.milestone(EngineMilestone::VmCreated {
            instance: name(2),
            cid: "vm-e".into(),
        });
        let m = p.drain();
        let reasons: Vec<_> = m.iter().map(|m| m.reason).collect();
        assert_eq!(
            reasons,
            [
                "Resurrecting",
                "Resurrecting",
                RESURRECTED,
                RESURRECTED,
                "VMCreated"
            ]
        );
        assert_eq!(
            m[2].note,
            "Resurrected web/u0 (0) on VM vm-c: its agent did not respond"
        );
        assert_eq!(
            m[3].note,
            "Resurrected web/u1 (1) on VM vm-d: the cloud no longer had its VM"
        );
        assert_eq!(m[3].instance, Some(("web".into(), 1)));
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
