//! What a deploy did, or would do: the report `kubosh deploy` prints.

use std::collections::{BTreeMap, BTreeSet};

use super::compile::Packages;
use super::instances::Planned;
use crate::state::{DeploymentState, InstanceRecord};
use kubosh_core::plan::changes::Observed;

/// What a deploy did (or, from [`crate::prepare::DeployPlan::report`], would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeployReport {
    /// Nothing needed changing.
    pub noop: bool,
    /// Every desired instance: what it gets and why.
    pub plan: Vec<InstancePlan>,
    /// Instances to delete (`group/uuid (index)`).
    pub obsolete: Vec<String>,
    /// Packages to compile (`name/version` on `stemcell`).
    pub to_compile: Vec<String>,
    /// Instances updated (created, changed, recreated).
    pub updated: Vec<String>,
    /// Instances deleted.
    pub deleted: Vec<String>,
    /// Packages compiled.
    pub compiled: usize,
}

/// What the plan holds for one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstancePlan {
    /// `group/uuid (index)`.
    pub instance: String,
    /// `create`, `recreate`, `update`, `dns/tags only` or `none`.
    pub action: &'static str,
    /// The Director's change names.
    pub changes: Vec<&'static str>,
    /// Addresses by network.
    pub ips: BTreeMap<String, String>,
    /// AZ.
    pub az: Option<String>,
}

impl std::fmt::Display for DeployReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for name in &self.obsolete {
            writeln!(f, "{name}: delete (no longer in the manifest)")?;
        }
        for p in &self.to_compile {
            writeln!(f, "compile {p}")?;
        }
        for i in &self.plan {
            let ips: Vec<String> = i.ips.iter().map(|(n, ip)| format!("{n}={ip}")).collect();
            write!(f, "{}: {}", i.instance, i.action)?;
            if !i.changes.is_empty() {
                write!(f, " ({})", i.changes.join(", "))?;
            }
            if let Some(az) = &i.az {
                write!(f, " az={az}")?;
            }
            if !ips.is_empty() {
                write!(f, " {}", ips.join(" "))?;
            }
            writeln!(f)?;
        }
        if self.noop {
            writeln!(f, "no changes")?;
        }
        Ok(())
    }
}

impl DeployReport {
    /// What `planned` instances get, the `obsolete` ones (uuids, named from `state`) and the
    /// packages compiled (or to compile); `noop`, `updated` and `deleted` are the caller's
    /// ([`DeployReport::changes_nothing`]).
    pub(crate) fn of(
        planned: &[Planned],
        obsolete: &[String],
        state: &DeploymentState,
        packages: &Packages,
    ) -> DeployReport {
        DeployReport {
            compiled: packages.compiled,
            plan: planned.iter().map(instance_plan).collect(),
            obsolete: obsolete
                .iter()
                .filter_map(|u| state.instances.get(u))
                .map(InstanceRecord::display_name)
                .collect(),
            to_compile: packages.to_compile.clone(),
            ..DeployReport::default()
        }
    }

    /// Whether a deploy of `planned` changes nothing: no instance to delete (`obsolete`),
    /// no package to compile (`compiles`), no instance with a change. A deploy that gets
    /// past the early no-op checks (its inputs' digest differs, say, after an errand) and
    /// then finds this reports `noop` all the same: it did nothing.
    pub(crate) fn changes_nothing(
        planned: &[Planned],
        obsolete: &[String],
        compiles: bool,
    ) -> bool {
        obsolete.is_empty() && !compiles && planned.iter().all(|p| p.changes.is_empty())
    }

    /// A deploy that found nothing to do.
    pub(crate) fn nothing_to_do() -> DeployReport {
        DeployReport {
            noop: true,
            ..DeployReport::default()
        }
    }
}

/// What the plan does to `p`: `create`, `recreate`, `update`, `dns/tags only` or `none`.
fn action_of(p: &Planned) -> &'static str {
    // Without a VM when planned: "Creating missing vms" may have made it since.
    let vm_missing = p.record.vm.is_none() || p.observed == Observed::NoVm;
    if p.changes.is_empty() {
        "none"
    } else if vm_missing && p.record.applied.is_none() {
        "create"
    } else if p.changes.recreates_vm() || vm_missing {
        "recreate"
    } else if p.changes.is_minimal() {
        "dns/tags only"
    } else {
        "update"
    }
}

/// The plan of one instance, for reports.
pub(crate) fn instance_plan(p: &Planned) -> InstancePlan {
    InstancePlan {
        instance: p.record.display_name(),
        action: action_of(p),
        changes: p.changes.names(),
        ips: p
            .record
            .ips
            .iter()
            .map(|(n, r)| (n.clone(), r.ip.clone()))
            .collect(),
        az: p.placed.az.clone(),
    }
}

/// What a plan changes, group by group: what a deploy says when it starts
/// ([`crate::Milestone::Planned`]), and the counts a status shows while it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanSummary {
    /// Each instance group with instances wanted or deleted, in the manifest's order (groups
    /// no longer in it last).
    pub groups: Vec<GroupPlan>,
    /// Packages to compile.
    pub to_compile: usize,
}

/// What a plan does to one instance group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupPlan {
    /// Its name.
    pub group: String,
    /// Instances the manifest wants.
    pub desired: usize,
    /// Of those, instances the plan leaves alone.
    pub unchanged: usize,
    /// Instances given their first VM.
    pub create: usize,
    /// Instances given a new VM.
    pub recreate: usize,
    /// Instances updated on their VM (DNS and tags only included).
    pub update: usize,
    /// Instances deleted.
    pub delete: usize,
    /// The Director's names of what changed, across the group's updated and recreated
    /// instances.
    pub changes: BTreeSet<&'static str>,
}

impl PlanSummary {
    /// The summary of `planned` instances, `obsolete` ones (uuids, looked up in `state`) and
    /// `to_compile` packages.
    pub(crate) fn of(
        planned: &[Planned],
        obsolete: &[String],
        state: &DeploymentState,
        to_compile: usize,
    ) -> PlanSummary {
        let mut summary = PlanSummary {
            groups: Vec::new(),
            to_compile,
        };
        for p in planned {
            let g = summary.group(&p.record.group);
            g.desired += 1;
            match action_of(p) {
                "none" => g.unchanged += 1,
                // A new instance is new; what made it so says nothing more.
                "create" => g.create += 1,
                "recreate" => {
                    g.recreate += 1;
                    g.changes.extend(p.changes.names());
                }
                _ => {
                    g.update += 1;
                    g.changes.extend(p.changes.names());
                }
            }
        }
        for record in obsolete.iter().filter_map(|u| state.instances.get(u)) {
            summary.group(&record.group).delete += 1;
        }
        summary
    }

    fn group(&mut self, name: &str) -> &mut GroupPlan {
        match self.groups.iter().position(|g| g.group == name) {
            Some(i) => &mut self.groups[i],
            None => {
                self.groups.push(GroupPlan {
                    group: name.to_string(),
                    ..GroupPlan::default()
                });
                self.groups.last_mut().expect("just pushed")
            }
        }
    }

    /// Whether the plan changes anything.
    pub fn changes_anything(&self) -> bool {
        self.to_compile > 0 || self.groups.iter().any(GroupPlan::changes_anything)
    }
}

impl GroupPlan {
    /// Whether the plan changes anything in the group.
    pub fn changes_anything(&self) -> bool {
        self.create + self.recreate + self.update + self.delete > 0
    }
}

/// `web: 1 to create, 2 to update (properties); db: 1 to delete; 2 packages to compile`,
/// or `nothing to change`.
impl std::fmt::Display for PlanSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = (self.groups.iter())
            .filter(|g| g.changes_anything())
            .map(|g| {
                let counts: Vec<String> = [
                    (g.create, "to create"),
                    (g.recreate, "to recreate"),
                    (g.update, "to update"),
                    (g.delete, "to delete"),
                ]
                .into_iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}"))
                .collect();
                let why = if g.changes.is_empty() {
                    String::new()
                } else {
                    let names: Vec<&str> = g.changes.iter().copied().collect();
                    format!(" ({})", names.join(", "))
                };
                format!("{}: {}{why}", g.group, counts.join(", "))
            })
            .collect();
        match self.to_compile {
            0 => {}
            1 => parts.push("1 package to compile".into()),
            n => parts.push(format!("{n} packages to compile")),
        }
        if parts.is_empty() {
            return f.write_str("nothing to change");
        }
        f.write_str(&parts.join("; "))
    }
}
