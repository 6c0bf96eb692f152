//! What a deploy did, or would do: the report `kubosh deploy` prints.

use std::collections::BTreeMap;

use super::compile::Packages;
use super::instances::Planned;
use crate::state::{DeploymentState, InstanceRecord};

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
    /// packages compiled (or to compile); `noop`, `updated` and `deleted` are the caller's.
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

    /// A deploy that found nothing to do.
    pub(crate) fn nothing_to_do() -> DeployReport {
        DeployReport {
            noop: true,
            ..DeployReport::default()
        }
    }
}

/// The plan of one instance, for reports.
fn instance_plan(p: &Planned) -> InstancePlan {
    let action = if p.changes.is_empty() {
        "none"
    } else if p.record.vm.is_none() && p.record.applied.is_none() {
        "create"
    } else if p.changes.recreates_vm() || p.record.vm.is_none() {
        "recreate"
    } else if p.changes.is_minimal() {
        "dns/tags only"
    } else {
        "update"
    };
    InstancePlan {
        instance: p.record.display_name(),
        action,
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
