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
use kubosh_engine::{EventSink, InstanceName, Lost, Milestone as EngineMilestone, PlanSummary};

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
    /// What the deploy planned, until a reader takes it.
    plan: Option<PlanSummary>,
    /// Per group, the instances the plan changes and their updates so far; `None` until
    /// planned.
    rollout: Option<Vec<GroupRollout>>,
}

/// One instance group's counts during a rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRollout {
    /// Its name.
    pub group: String,
    /// Instances the manifest wants.
    pub desired: usize,
    /// Instances left alone by the plan or updated since.
    pub up_to_date: usize,
}

/// The engine's event sink of one deploy.
#[derive(Debug, Default)]
pub struct DeployProgress {
    inner: Mutex<Inner>,
    /// Woken at each new stage, milestone and plan: what is new is told at once, not at the
    /// next poll.
    news: tokio::sync::Notify,
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

    /// The plan, once: when the deploy planned since the last call.
    pub fn take_plan(&self) -> Option<PlanSummary> {
        (self.inner.lock().unwrap_or_else(PoisonError::into_inner))
            .plan
            .take()
    }

    /// Each group's counts during the rollout, once planned.
    pub fn rollout(&self) -> Option<Vec<GroupRollout>> {
        (self.inner.lock().unwrap_or_else(PoisonError::into_inner))
            .rollout
            .clone()
    }

    /// Resolves when something new was heard since the last wake-up (one wake-up is kept for
    /// a reader not waiting yet).
    pub async fn news(&self) {
        self.news.notified().await
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
) -> Option<Milestone> {
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
        EngineMilestone::AgentNotAnswering {
            instance,
            waited,
            at_most,
        } => (
            EventType::Warning,
            "AgentNotAnswering",
            format!(
                "The agent of {} has not answered for {} s; asked again, the deploy waits up to {} s for it (with resurrection on, its VM is recreated instead once the health monitor finds it silent)",
                instance.display,
                waited.as_secs(),
                at_most.as_secs()
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
        // Not an Event of its own: the deploy's announcement tells it.
        EngineMilestone::Planned(_) => return None,
    };
    Some(Milestone {
        kind,
        reason,
        note,
        instance,
    })
}

impl DeployProgress {
    /// A warning of the deploy, told as a Warning Event about the deployment.
    fn warning(&self, note: String) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.milestones.push(Milestone {
            kind: EventType::Warning,
            reason: "DeployWarning",
            note,
            instance: None,
        });
        drop(inner);
        self.news.notify_one();
    }
}

impl EventSink for DeployProgress {
    fn milestone(&self, milestone: EngineMilestone) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match milestone {
            EngineMilestone::Planned(plan) => {
                inner.rollout = Some(
                    (plan.groups.iter())
                        .map(|g| GroupRollout {
                            group: g.group.clone(),
                            desired: g.desired,
                            up_to_date: g.unchanged,
                        })
                        .collect(),
                );
                inner.plan = Some(plan);
            }
            milestone => {
                if let EngineMilestone::Resurrecting { instance, lost, .. } = &milestone {
                    (inner.resurrecting).insert((instance.group.clone(), instance.index), *lost);
                }
                if let Some(m) = typed_milestone(milestone, &inner.resurrecting) {
                    inner.milestones.push(m);
                }
            }
        }
        drop(inner);
        self.news.notify_one();
    }

    fn emit(&self, line: EventLine) {
        let event = match line {
            EventLine::Stage(event) => event,
            // Validation warnings, agents that did not take DNS records, recovery's finds:
            // what `kubosh deploy` prints, as Warning Events.
            EventLine::Notice(notice) => return self.warning(notice.message),
            _ => return,
        };
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let done = matches!(event.state, State::Finished | State::Failed);
        let stage = match &event.tags[..] {
            [] => event.stage.clone(),
            tags => format!("{} {}", event.stage, tags.join(", ")),
        };
        let mut news = !inner.stages.contains_key(&stage);
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
            news = true;
        }
        if event.stage == UPDATING && event.state == State::Finished {
            inner.count_updated(&event.task);
        }
        // Told when compilation ends, not when the deploy does.
        if let Some(packages) = compiled {
            inner.milestones.push(Milestone {
                kind: EventType::Normal,
                reason: "PackagesCompiled",
                note: format!("Compiled {packages} package(s)"),
                instance: None,
            });
            news = true;
        }
        drop(inner);
        if news {
            self.news.notify_one();
        }
    }
}

/// The stage that compiles packages.
const COMPILING: &str = "Compiling packages";

/// The stage that updates (and creates) instances.
const UPDATING: &str = "Updating instance";

impl Inner {
    /// One more instance of `task`'s group up to date.
    fn count_updated(&mut self, task: &str) {
        let Some((group, _)) = instance_of(task) else {
            return;
        };
        let rollout = self.rollout.iter_mut().flatten();
        if let Some(g) = rollout.into_iter().find(|g| g.group == group) {
            g.up_to_date = (g.up_to_date + 1).min(g.desired);
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
    fn warnings_are_warning_events_and_resurrections_are_told_once() {
        let p = DeployProgress::new();
        p.emit(EventLine::Notice(kubosh_bosh::events::NoticeEvent {
            time: 0,
            kind: "warning".into(),
            message: "manifest: director_uuid: accepted and not acted on".into(),
        }));
        let web0 = InstanceName {
            group: "web".into(),
            index: 0,
            display: "web/u1 (0)".into(),
        };
        p.milestone(EngineMilestone::Resurrecting {
            instance: web0,
            cid: "vm-a".into(),
            lost: Lost::Agent,
        });
        let told: Vec<(&str, EventType)> = p.drain().iter().map(|m| (m.reason, m.kind)).collect();
        assert_eq!(
            told,
            vec![
                ("DeployWarning", EventType::Warning),
                ("Resurrecting", EventType::Warning),
            ],
            "the resurrection's task-log warning is not told a second time"
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

    #[test]
    fn a_plan_is_kept_for_the_announcement_and_counts_the_rollout() {
        let p = DeployProgress::new();
        let plan = PlanSummary {
            groups: vec![
                kubosh_engine::GroupPlan {
                    group: "web".into(),
                    desired: 3,
                    unchanged: 1,
                    create: 1,
                    update: 1,
                    changes: ["configuration", "properties"].into(),
                    ..Default::default()
                },
                kubosh_engine::GroupPlan {
                    group: "old".into(),
                    delete: 2,
                    ..Default::default()
                },
            ],
            to_compile: 2,
        };
        p.milestone(EngineMilestone::Planned(plan.clone()));
        assert_eq!(p.drain(), vec![], "the plan is no Event of its own");
        assert_eq!(
            plan.to_string(),
            "web: 1 to create, 1 to update (configuration, properties); old: 2 to delete; 2 packages to compile"
        );
        assert_eq!(p.take_plan(), Some(plan));
        assert_eq!(p.take_plan(), None, "taken once");
        let web = |up_to_date| GroupRollout {
            group: "web".into(),
            desired: 3,
            up_to_date,
        };
        let old = GroupRollout {
            group: "old".into(),
            desired: 0,
            up_to_date: 0,
        };
        assert_eq!(p.rollout(), Some(vec![web(1), old.clone()]));
        for task in ["web/u1 (1) (canary)", "web/u2 (2)", "web/u3 (3)"] {
            p.emit(line("Updating instance", task, 2, State::Finished));
        }
        assert_eq!(p.rollout(), Some(vec![web(3), old]), "never above desired");
        assert_eq!(PlanSummary::default().to_string(), "nothing to change");
    }

    #[tokio::test]
    async fn news_wakes_a_reader_at_a_new_stage_or_milestone_not_at_each_count() {
        let p = DeployProgress::new();
        let woken = |p: &DeployProgress| futures::FutureExt::now_or_never(p.news()).is_some();
        p.emit(line("Updating instance", "web/u1 (1)", 3, State::Started));
        assert!(woken(&p), "a new stage");
        assert!(!woken(&p), "one wake-up per news");
        p.emit(line("Updating instance", "web/u2 (2)", 3, State::Started));
        assert!(!woken(&p), "a count");
        p.emit(line("Updating instance", "web/u1 (1)", 3, State::Finished));
        assert!(woken(&p), "a milestone (InstanceUpdated)");
    }
}
