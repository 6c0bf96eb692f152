//! Runtime configs applied to a deployment manifest, as the Director applies its named
//! runtime configs to every deploy: their releases added to the manifest's (a release the
//! manifest names too must be the same version), their addons after the manifest's own (each
//! `include`/`exclude` filter, `deployments` too, decides where its jobs land), their
//! variables after the manifest's, their tags under the manifest's. Works on the documents
//! before interpolation, so `((variables))` in addons are filled in with the manifest's.

use std::borrow::Borrow;

use serde_json::{Map, Value, json};

use super::problem::{Document, Path, Problems};
use super::{RUNTIME_CONFIG_SHAPE, Validated, finish, typed};
use crate::manifest::RuntimeConfig;

/// Validates a runtime config on its own.
pub fn runtime_config(value: &Value) -> Result<Validated<RuntimeConfig>, Problems> {
    let mut problems = Problems::default();
    let rc: Option<RuntimeConfig> = typed(
        &RUNTIME_CONFIG_SHAPE,
        Document::RuntimeConfig,
        value,
        &mut problems,
    );
    finish(rc, problems)
}

/// `manifest` with the runtime configs `configs` (each its name and document, in the order
/// to apply them) applied, for a deployment of `team` (the Director's teams: the controller
/// passes the deployment's namespace, `kubosh deploy` no team; see [`for_team`]); every
/// problem of every config at once, each naming its config. Warnings are returned (unknown
/// keys, as for the other documents).
pub fn apply_runtime_configs<N: AsRef<str>, D: Borrow<Value>>(
    manifest: &mut Value,
    configs: &[(N, D)],
    team: Option<&str>,
) -> Result<Problems, Problems> {
    let mut problems = Problems::default();
    let mut warnings = Problems::default();
    let Some(target) = manifest.as_object_mut() else {
        // The manifest's own validation says what is wrong with it.
        return Ok(warnings);
    };
    for (name, document) in configs {
        let (name, document) = (name.as_ref(), document.borrow());
        let about = format!("runtime config '{name}'");
        match runtime_config(document) {
            Err(p) => problems.extend(p.about(&about)),
            Ok(v) => {
                warnings.extend(v.warnings.about(&about));
                let mut found = Problems::default();
                apply_one(target, document, team, &mut found);
                problems.extend(found.about(&about));
            }
        }
    }
    if problems.has_errors() {
        Err(problems)
    } else {
        Ok(warnings)
    }
}

/// Applies one shape-checked runtime config to `manifest`.
fn apply_one(
    manifest: &mut Map<String, Value>,
    config: &Value,
    team: Option<&str>,
    problems: &mut Problems,
) {
    let list = |key: &str| (config.get(key).and_then(Value::as_array)).cloned();
    if let Some(releases) = list("releases") {
        add_releases(manifest, &releases, problems);
    }
    for key in ["addons", "variables"] {
        let Some(mut items) = list(key) else {
            continue;
        };
        if key == "addons" {
            items = (items.into_iter())
                .filter_map(|addon| for_team(addon, team))
                .collect();
        }
        let into = manifest
            .entry(key)
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(existing) = into {
            for (i, item) in items.into_iter().enumerate() {
                let same_name =
                    |e: &Value| e.get("name").is_some() && e.get("name") == item.get("name");
                match existing.iter().find(|e| same_name(e)) {
                    // Two runtime configs (or the manifest) asking for the same variable
                    // the same way agree.
                    Some(e) if key == "variables" && *e == item => {}
                    Some(_) if key == "variables" => problems.error(
                        Document::RuntimeConfig,
                        Path::root().key(key).index(i).key("name"),
                        format!(
                            "variable '{}' is defined differently elsewhere (the manifest or another runtime config)",
                            item["name"].as_str().unwrap_or_default()
                        ),
                    ),
                    _ => existing.push(item),
                }
            }
        }
    }
    if let Some(Value::Object(tags)) = config.get("tags") {
        let into = manifest
            .entry("tags")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(existing) = into {
            for (k, v) in tags {
                existing.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
}

/// A runtime config's addon as it applies to a deployment of `team`, its `teams` filters
/// decided here (a namespace is one team): `include.teams` not naming the team (any team,
/// for a deployment of none) leaves the addon out; naming it, the filter's other criteria
/// decide. `exclude.teams` naming the team excludes by the other criteria (all of the
/// deployment when there are none); not naming it, the exclusion is no exclusion. An empty
/// `teams` list filters nothing.
fn for_team(mut addon: Value, team: Option<&str>) -> Option<Value> {
    let names_team = |teams: &Value| {
        (teams.as_array()).is_none_or(|t| t.is_empty() || t.iter().any(|x| x.as_str() == team))
    };
    let filter = |addon: &mut Value, key: &str| -> Option<Value> {
        addon.get_mut(key)?.as_object_mut()?.remove("teams")
    };
    if let Some(teams) = filter(&mut addon, "include")
        && !names_team(&teams)
    {
        return None;
    }
    if let Some(teams) = filter(&mut addon, "exclude") {
        let criteria = (addon.get("exclude").and_then(Value::as_object))
            .is_some_and(|f| f.values().any(|v| !v.is_null() && v != &json!([])));
        let empty = teams.as_array().is_some_and(Vec::is_empty);
        if names_team(&teams) && !empty && !criteria {
            return None;
        }
        if !names_team(&teams)
            && let Some(addon) = addon.as_object_mut()
        {
            addon.remove("exclude");
        }
    }
    Some(addon)
}

/// Adds `releases` to the manifest's; one it names already must be the same version.
fn add_releases(manifest: &mut Map<String, Value>, releases: &[Value], problems: &mut Problems) {
    let into = manifest
        .entry("releases")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(existing) = into else {
        return;
    };
    for (i, release) in releases.iter().enumerate() {
        let name = release
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let version = |r: &Value| r.get("version").map(version_text);
        match existing.iter().find(|r| r.get("name").and_then(Value::as_str) == Some(name)) {
            None => existing.push(release.clone()),
            Some(there) if version(there) == version(release) => {}
            Some(there) => problems.error(
                Document::RuntimeConfig,
                Path::root().key("releases").index(i).key("version"),
                format!(
                    "Runtime manifest specifies release '{name}' with version as '{}'. This conflicts with version '{}' specified in the deployment manifest.",
                    version(release).unwrap_or_default(),
                    version(there).unwrap_or_default()
                ),
            ),
        }
    }
}

/// A version as text (`1.2` may be written as a number).
fn version_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn releases_addons_variables_and_tags_are_added() {
        let mut manifest = json!({
            "name": "d", "releases": [{"name": "app", "version": "1"}],
            "addons": [{"name": "own", "jobs": []}],
            "variables": [{"name": "p", "type": "password"}],
            "tags": {"team": "mine"},
        });
        let dns = json!({
            "releases": [{"name": "bosh-dns", "version": "1.39.28"}, {"name": "app", "version": "1"}],
            "addons": [{"name": "bosh-dns", "jobs": [{"name": "bosh-dns", "release": "bosh-dns"}],
                        "include": {"stemcell": [{"os": "ubuntu-jammy"}]}}],
            "variables": [{"name": "/dns_ca", "type": "certificate", "options": {"is_ca": true, "common_name": "ca"}}],
            "tags": {"team": "theirs", "cost": "ops"},
        });
        let warnings = apply_runtime_configs(&mut manifest, &[("dns", &dns)], None).unwrap();
        assert!(warnings.is_empty(), "{warnings}");
        assert_eq!(
            manifest["releases"],
            json!([{"name": "app", "version": "1"}, {"name": "bosh-dns", "version": "1.39.28"}])
        );
        let addons: Vec<&str> = (manifest["addons"].as_array().unwrap().iter())
            .map(|a| a["name"].as_str().unwrap())
            .collect();
        assert_eq!(addons, ["own", "bosh-dns"], "after the manifest's own");
        assert_eq!(manifest["variables"].as_array().unwrap().len(), 2);
        assert_eq!(manifest["tags"], json!({"team": "mine", "cost": "ops"}));
    }

    #[test]
    fn teams_filters_are_decided_by_the_deployments_team() {
        let config = json!({"addons": [
            {"name": "ours", "jobs": [], "include": {"teams": ["ns1"]}},
            {"name": "ours-web", "jobs": [], "include": {"teams": ["ns1"], "instance_groups": ["web"]}},
            {"name": "theirs", "jobs": [], "include": {"teams": ["ns2"]}},
            {"name": "not-ours", "jobs": [], "exclude": {"teams": ["ns1"]}},
            {"name": "not-ours-web", "jobs": [], "exclude": {"teams": ["ns1"], "instance_groups": ["web"]}},
            {"name": "not-theirs", "jobs": [], "exclude": {"teams": ["ns2"], "instance_groups": ["web"]}},
            {"name": "any", "jobs": [], "include": {"teams": []}},
        ]});
        let addons = |team: Option<&str>| {
            let mut manifest = json!({"name": "d"});
            apply_runtime_configs(&mut manifest, &[("rc", &config)], team).unwrap();
            manifest["addons"].as_array().unwrap().clone()
        };
        let ns1 = addons(Some("ns1"));
        let names: Vec<&str> = ns1.iter().map(|a| a["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["ours", "ours-web", "not-ours-web", "not-theirs", "any"]
        );
        assert_eq!(ns1[1]["include"], json!({"instance_groups": ["web"]}));
        assert_eq!(ns1[2]["exclude"], json!({"instance_groups": ["web"]}));
        assert!(
            ns1[3].get("exclude").is_none(),
            "another team's exclusion excludes nothing"
        );
        let none = addons(None);
        let names: Vec<&str> = none.iter().map(|a| a["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["not-ours", "not-ours-web", "not-theirs", "any"]);
    }

    #[test]
    fn every_problem_of_every_config_names_it() {
        let mut manifest = json!({"releases": [{"name": "bpm", "version": "1.0"}],
                                  "variables": [{"name": "/x", "type": "password"}]});
        let bpm = json!({"releases": [{"name": "bpm", "version": "0.8.0"}],
                         "variables": [{"name": "/x", "type": "certificate"}]});
        let bad = json!({"addons": [{"jobs": []}], "nonsense": 1});
        let problems = apply_runtime_configs(&mut manifest, &[("bpm", &bpm), ("bad", &bad)], None)
            .unwrap_err()
            .to_string();
        for expected in [
            "runtime-config: releases[0].version: runtime config 'bpm': Runtime manifest specifies release 'bpm' with version as '0.8.0'. This conflicts with version '1.0' specified in the deployment manifest.",
            "runtime-config: variables[0].name: runtime config 'bpm': variable '/x' is defined differently",
            "runtime-config: addons[0]",
            "runtime config 'bad'",
        ] {
            assert!(problems.contains(expected), "{expected}\n{problems}");
        }
    }
}
