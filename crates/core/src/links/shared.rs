//! Which other deployments a manifest consumes links from.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::manifest::DeploymentManifest;

/// The deployments `manifest` names in a consumed link's `deployment` (of an instance
/// group's job or an addon's), its own name aside: those whose shared providers its deploy
/// reads, and whose changes make it out of date.
pub fn consumed_deployments(manifest: &DeploymentManifest) -> BTreeSet<String> {
    let own = manifest.name.as_deref().unwrap_or_default();
    let group_jobs = manifest.instance_groups.iter().flat_map(|g| g.jobs.iter());
    let addon_jobs = manifest.addons.iter().flat_map(|a| a.jobs.iter());
    group_jobs
        .chain(addon_jobs)
        .filter_map(|job| job.consumes.as_ref())
        .flat_map(|consumes| consumes.values())
        .filter_map(|link| link.get("deployment").and_then(Value::as_str))
        .filter(|name| *name != own)
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_other_deployments_of_groups_and_addons_once() {
        let manifest: DeploymentManifest = serde_json::from_value(serde_json::json!({
            "name": "app",
            "instance_groups": [{"name": "web", "jobs": [
                {"name": "a", "release": "r", "consumes": {
                    "db": {"from": "db", "deployment": "data"},
                    "self": {"from": "x", "deployment": "app"},
                    "off": "nil",
                }},
                {"name": "b", "release": "r", "consumes": {"db": {"deployment": "data"}}},
            ]}],
            "addons": [{"name": "dns", "jobs": [
                {"name": "c", "release": "r", "consumes": {"api": {"deployment": "dns"}}},
            ]}],
        }))
        .unwrap();
        assert_eq!(
            consumed_deployments(&manifest)
                .into_iter()
                .collect::<Vec<_>>(),
            ["data", "dns"]
        );
    }
}
