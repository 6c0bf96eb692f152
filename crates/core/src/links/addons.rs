//! Which instance groups a deployment's addon applies to (`addon/addon.rb`,
//! `addon/filter.rb`), so that addon jobs provide and consume links there too.

use crate::manifest::{Addon, AddonFilter, DeploymentManifest, InstanceGroup, Lifecycle};

/// True when `addon` (of `manifest`'s `addons`) adds its jobs to `group`: its `include`
/// filter matches (or there is none) and its `exclude` filter does not.
///
/// Deployment-level semantics: `teams` are ignored, and `deployments` (which the Director
/// rejects in a deployment's addons) match the deployment's own name.
pub fn addon_applies(manifest: &DeploymentManifest, addon: &Addon, group: &InstanceGroup) -> bool {
    let included = addon
        .include
        .as_ref()
        .is_none_or(|f| matches(manifest, f, group, true));
    let excluded = addon
        .exclude
        .as_ref()
        .is_some_and(|f| matches(manifest, f, group, false));
    included && !excluded
}

/// `Filter#applies?`.
fn matches(
    manifest: &DeploymentManifest,
    f: &AddonFilter,
    group: &InstanceGroup,
    include: bool,
) -> bool {
    if let Some(lifecycle) = f.lifecycle {
        let own = group.lifecycle.unwrap_or(Lifecycle::Service);
        if own != lifecycle {
            return false;
        }
    }
    if !f.azs.is_empty() && !group.azs.iter().any(|az| f.azs.contains(az)) {
        return false;
    }
    if !f.stemcell.is_empty() {
        let os = group.stemcell.as_ref().and_then(|alias| {
            manifest
                .stemcells
                .iter()
                .find(|s| &s.alias == alias)
                .and_then(|s| s.os.as_deref())
        });
        if !f.stemcell.iter().any(|s| Some(s.os.as_str()) == os) {
            return false;
        }
    }
    if !f.networks.is_empty() && !group.networks.iter().any(|n| f.networks.contains(&n.name)) {
        return false;
    }
    let deployment_ok = f.deployments.is_empty()
        || manifest
            .name
            .as_ref()
            .is_some_and(|n| f.deployments.contains(n));
    let jobs_ok = f.jobs.is_empty()
        || f.jobs.iter().any(|j| {
            group
                .jobs
                .iter()
                .any(|g| g.name == j.name && g.release == j.release)
        });
    let groups_ok = f.instance_groups.is_empty() || f.instance_groups.contains(&group.name);
    if f.deployments.is_empty() && f.jobs.is_empty() && f.instance_groups.is_empty() {
        return include
            || !f.stemcell.is_empty()
            || !f.networks.is_empty()
            || !f.azs.is_empty()
            || f.lifecycle.is_some();
    }
    deployment_ok && jobs_ok && groups_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> DeploymentManifest {
        kubosh_base::yaml::parse(
            r#"
name: dep
stemcells: [{alias: default, os: ubuntu-jammy}]
instance_groups:
- {name: web, azs: [z1], stemcell: default, networks: [{name: a}], jobs: [{name: nginx, release: r}]}
- {name: worker, azs: [z2], lifecycle: errand, networks: [{name: b}], jobs: []}
addons:
- {name: all}
- {name: web-only, include: {instance_groups: [web]}}
- {name: not-web, exclude: {jobs: [{name: nginx, release: r}]}}
- {name: errands, include: {lifecycle: errand}}
- {name: not-z1, exclude: {azs: [z1]}}
- {name: jammy, include: {stemcell: [{os: ubuntu-jammy}]}}
- {name: exclude-nothing, exclude: {}}
"#,
            "m",
        )
        .unwrap()
    }

    #[test]
    fn filters_select_groups_as_the_director_does() {
        let m = manifest();
        let applies = |addon: &str| -> Vec<&str> {
            let a = m.addons.iter().find(|a| a.name == addon).unwrap();
            m.instance_groups
                .iter()
                .filter(|g| addon_applies(&m, a, g))
                .map(|g| g.name.as_str())
                .collect()
        };
        assert_eq!(applies("all"), ["web", "worker"]);
        assert_eq!(applies("web-only"), ["web"]);
        assert_eq!(applies("not-web"), ["worker"]);
        assert_eq!(applies("errands"), ["worker"]);
        assert_eq!(applies("not-z1"), ["worker"]);
        assert_eq!(applies("jammy"), ["web"]);
        assert_eq!(applies("exclude-nothing"), ["web", "worker"]);
    }
}
