//! What a deploy did, or would do: the report `kubosh deploy` prints.

use std::collections::BTreeMap;

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
