//! Keys kubosh accepts (BOSH documents carry them) but does not act on: each present one is
//! a warning naming its path, `<path>: accepted and not acted on (<why>)`, so nothing is
//! parsed and silently ignored. The table in `docs/accepted-keys.md` lists them; a key that
//! gets implemented leaves this module.

use super::problem::{Document, Path, Problems};
use crate::manifest::{AddonFilter, CloudConfig, DeploymentManifest};

/// The warning text of a key not acted on.
fn not_acted_on(why: &str) -> String {
    format!("accepted and not acted on ({why})")
}

/// Warns of the manifest's keys not acted on.
pub(super) fn manifest(m: &DeploymentManifest, problems: &mut Problems) {
    let doc = Document::Manifest;
    let root = Path::root();
    let mut warn = |path: Path, why: &str| problems.warning(doc, path, not_acted_on(why));
    if m.director_uuid.is_some() {
        warn(
            root.key("director_uuid"),
            "a CLI v1 key the Director ignores too",
        );
    }
    if let Some(f) = &m.features {
        let features = root.key("features");
        if f.randomize_az_placement.is_some() {
            warn(
                features.key("randomize_az_placement"),
                "AZ ties are always broken alphabetically",
            );
        }
        if f.use_tmpfs_config.is_some() {
            warn(
                features.key("use_tmpfs_config"),
                "agents keep their settings where they always do",
            );
        }
    }
    for (i, r) in m.releases.iter().enumerate() {
        // `url` and `sha1` are not warned of: every real manifest carries them, and they
        // only tell `bosh deploy` where to upload a missing release from; a missing release
        // is an error naming the versions there are (`release_versions`).
        let at = root.key("releases").index(i);
        let compiled = "compiled packages are matched to stemcells from the release itself";
        if r.stemcell.is_some() {
            warn(at.key("stemcell"), compiled);
        }
        if !r.exported_from.is_empty() {
            warn(at.key("exported_from"), compiled);
        }
    }
    for (i, g) in m.instance_groups.iter().enumerate() {
        if g.tags.is_some() {
            warn(
                root.key("instance_groups").index(i).key("tags"),
                "VMs and disks get the deployment's tags",
            );
        }
    }
    for (i, v) in m.variables.iter().enumerate() {
        let at = root.key("variables").index(i);
        if v.update.is_some() {
            warn(at.key("update"), "no rotation; update_mode decides");
        }
        if v.consumes.is_some() {
            warn(
                at.key("consumes"),
                "certificate names come from the variable's options",
            );
        }
    }
    for (i, a) in m.addons.iter().enumerate() {
        let at = root.key("addons").index(i);
        for (key, filter) in [("include", &a.include), ("exclude", &a.exclude)] {
            if filter
                .as_ref()
                .is_some_and(|f: &AddonFilter| !f.teams.is_empty())
            {
                warn(
                    at.key(key).key("teams"),
                    "teams filter in runtime configs only, where a namespace is one team",
                );
            }
        }
    }
}

/// Warns of the cloud config's keys not acted on.
pub(super) fn cloud_config(cc: &CloudConfig, problems: &mut Problems) {
    let doc = Document::CloudConfig;
    let root = Path::root();
    let mut warn = |path: Path, why: &str| problems.warning(doc, path, not_acted_on(why));
    for (i, n) in cc.networks.iter().enumerate() {
        let at = root.key("networks").index(i);
        if n.managed.is_some() {
            warn(
                at.key("managed"),
                "networks are never created through the CPI",
            );
        }
        for (j, s) in n.subnets.iter().enumerate() {
            if s.name.is_some() {
                warn(
                    at.key("subnets").index(j).key("name"),
                    "networks are never created through the CPI",
                );
            }
        }
    }
    if let Some(c) = &cc.compilation
        && c.orphan_workers.is_some()
    {
        warn(
            root.key("compilation").key("orphan_workers"),
            "compilation VMs are always deleted",
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// The warnings `validate::deployment` gives, as `path: message`.
    fn warnings(manifest: serde_json::Value, cloud: serde_json::Value) -> Vec<String> {
        let validated =
            super::super::deployment(&manifest, &cloud).unwrap_or_else(|p| panic!("{p:?}"));
        validated
            .warnings
            .all()
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect()
    }

    #[test]
    fn every_key_not_acted_on_is_a_warning_naming_its_path() {
        let cloud = json!({
            "azs": [{"name": "z1"}],
            "vm_types": [{"name": "small"}],
            "networks": [{"name": "default", "type": "manual", "managed": false, "subnets": [{
                "range": "10.0.0.0/24", "gateway": "10.0.0.1", "az": "z1", "name": "net-a",
            }]}],
            "compilation": {"workers": 1, "network": "default", "az": "z1", "vm_type": "small",
                            "orphan_workers": true},
        });
        let manifest = json!({
            "name": "d",
            "director_uuid": "ignored",
            "features": {"randomize_az_placement": true, "use_tmpfs_config": true},
            "releases": [{"name": "r", "version": "1", "url": "https://x/r.tgz", "sha1": "abc",
                          "stemcell": {"os": "ubuntu-jammy", "version": "1"},
                          "exported_from": [{"os": "ubuntu-jammy", "version": "1"}]}],
            "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
            "update": {"canaries": 1, "max_in_flight": 1, "canary_watch_time": 1000,
                       "update_watch_time": 1000},
            "instance_groups": [{"name": "web", "instances": 1, "azs": ["z1"], "vm_type": "small",
                                 "stemcell": "default", "networks": [{"name": "default"}],
                                 "jobs": [{"name": "j", "release": "r"}], "tags": {"a": "b"}}],
            "variables": [{"name": "v", "type": "password", "update": {"strategy": "x"},
                           "consumes": {"alternative_name": {"from": "l"}}}],
            "addons": [{"name": "a", "jobs": [], "include": {"teams": ["t"]},
                        "exclude": {"teams": ["u"]}}],
        });
        let got = warnings(manifest, cloud);
        let paths: Vec<&str> = got
            .iter()
            .filter(|w| w.contains("accepted and not acted on"))
            .map(|w| w.split(": ").next().unwrap_or_default())
            .collect();
        assert_eq!(
            paths,
            [
                "networks[0].managed",
                "networks[0].subnets[0].name",
                "compilation.orphan_workers",
                "director_uuid",
                "features.randomize_az_placement",
                "features.use_tmpfs_config",
                "releases[0].stemcell",
                "releases[0].exported_from",
                "instance_groups[0].tags",
                "variables[0].update",
                "variables[0].consumes",
                "addons[0].include.teams",
                "addons[0].exclude.teams",
            ],
            "{got:#?}"
        );
    }

    #[test]
    fn a_document_without_them_gets_no_such_warning() {
        let cloud = json!({
            "azs": [{"name": "z1"}],
            "vm_types": [{"name": "small"}],
            "networks": [{"name": "default", "subnets": [{
                "range": "10.0.0.0/24", "gateway": "10.0.0.1", "az": "z1"}]}],
            "compilation": {"workers": 1, "network": "default", "az": "z1", "vm_type": "small"},
        });
        let manifest = json!({
            "name": "d",
            "releases": [{"name": "r", "version": "1"}],
            "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
            "update": {"canaries": 1, "max_in_flight": 1, "canary_watch_time": 1000,
                       "update_watch_time": 1000, "vm_strategy": "create-swap-delete"},
            "instance_groups": [{"name": "web", "instances": 1, "azs": ["z1"], "vm_type": "small",
                                 "stemcell": "default", "networks": [{"name": "default"}],
                                 "jobs": [{"name": "j", "release": "r"}]}],
        });
        let got = warnings(manifest, cloud);
        assert!(!got.iter().any(|w| w.contains("not acted on")), "{got:#?}");
    }
}
