//! Which release each `releases[]` entry of a manifest deploys, among those available (the
//! controller's Ready `Release` resources, `kubosh deploy`'s tarballs): its version exactly,
//! or with `latest` (or no version) the highest one, as the Director picks. A version that
//! is not there is the manifest's error, said at its path in the Director's words.

use super::problem::{Document, Path, Problems};
use crate::manifest::DeploymentManifest;
use crate::plan::desired::compare_versions;

/// For each entry of `manifest.releases`, the index in `available` (`(name, version)`) of
/// the release it deploys; `None` for a name none of `available` has (whether that is an
/// error or a wait is the caller's to say). A version none has is a problem at
/// `releases[i].version`: `Release version 'hello/9.9.9' doesn't exist (available:
/// hello/1.0.0)`.
pub fn choose_releases(
    manifest: &DeploymentManifest,
    available: &[(&str, &str)],
) -> Result<Vec<Option<usize>>, Problems> {
    let mut problems = Problems::default();
    let mut chosen = Vec::with_capacity(manifest.releases.len());
    for (i, wanted) in manifest.releases.iter().enumerate() {
        let named = || (available.iter().enumerate()).filter(|(_, (n, _))| *n == wanted.name);
        if named().next().is_none() {
            chosen.push(None);
            continue;
        }
        let version = wanted.version.as_ref().map(|v| v.as_str());
        let pick = match version {
            None | Some("latest") => {
                named().max_by(|(_, (_, a)), (_, (_, b))| compare_versions(a, b))
            }
            Some(exact) => named().find(|(_, (_, v))| *v == exact),
        };
        match (pick, version) {
            (Some((index, _)), _) => chosen.push(Some(index)),
            (None, version) => {
                let mut versions: Vec<&str> = named().map(|(_, (_, v))| *v).collect();
                versions.sort_by(|a, b| compare_versions(a, b));
                let versions: Vec<String> = (versions.iter())
                    .map(|v| format!("{}/{v}", wanted.name))
                    .collect();
                problems.error(
                    Document::Manifest,
                    Path::root().key("releases").index(i).key("version"),
                    format!(
                        "Release version '{}/{}' doesn't exist (available: {})",
                        wanted.name,
                        version.unwrap_or("latest"),
                        versions.join(", ")
                    ),
                );
                chosen.push(None);
            }
        }
    }
    if problems.has_errors() {
        Err(problems)
    } else {
        Ok(chosen)
    }
}

/// [`choose_releases`] where every release must be there: a name none of `available` has
/// is a problem at `releases[i].name` (`Release 'hello' doesn't exist`), said with those of
/// the versions missing.
pub fn require_releases(
    manifest: &DeploymentManifest,
    available: &[(&str, &str)],
) -> Result<Vec<usize>, Problems> {
    let (chosen, mut problems) = match choose_releases(manifest, available) {
        Ok(chosen) => (chosen, Problems::default()),
        Err(problems) => (Vec::new(), problems),
    };
    for (i, wanted) in manifest.releases.iter().enumerate() {
        if !available.iter().any(|(name, _)| *name == wanted.name) {
            problems.error(
                Document::Manifest,
                Path::root().key("releases").index(i).key("name"),
                format!("Release '{}' doesn't exist", wanted.name),
            );
        }
    }
    if problems.has_errors() {
        return Err(problems);
    }
    Ok(chosen.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(releases: &str) -> DeploymentManifest {
        serde_json::from_value(serde_json::json!({
            "name": "d",
            "releases": serde_json::from_str::<serde_json::Value>(releases).unwrap(),
            "stemcells": [],
            "instance_groups": [],
            "update": {"canaries": 1, "max_in_flight": 1, "canary_watch_time": 1, "update_watch_time": 1},
        }))
        .unwrap()
    }

    const AVAILABLE: &[(&str, &str)] = &[
        ("hello", "1.0.0"),
        ("bpm", "1.2.9"),
        ("hello", "1.10.0"),
        ("hello", "1.9.0"),
    ];

    #[test]
    fn exact_versions_and_latest_as_the_director_picks() {
        let m = manifest(
            r#"[{"name": "hello", "version": "1.9.0"}, {"name": "bpm", "version": "latest"},
                {"name": "absent", "version": "1"}]"#,
        );
        assert_eq!(
            choose_releases(&m, AVAILABLE).unwrap(),
            vec![Some(3), Some(1), None]
        );
        let m = manifest(r#"[{"name": "hello"}]"#);
        assert_eq!(
            choose_releases(&m, AVAILABLE).unwrap(),
            vec![Some(2)],
            "1.10.0 is newer than 1.9.0"
        );
    }

    #[test]
    fn a_version_not_there_is_an_error_at_its_path_naming_what_is() {
        let m = manifest(
            r#"[{"name": "bpm", "version": "1.2.9"}, {"name": "hello", "version": "9.9.9"}]"#,
        );
        let problems = choose_releases(&m, AVAILABLE).unwrap_err();
        assert_eq!(
            problems.to_string().trim(),
            "error: manifest: releases[1].version: Release version 'hello/9.9.9' doesn't exist (available: hello/1.0.0, hello/1.9.0, hello/1.10.0)"
        );
    }

    #[test]
    fn required_releases_name_what_is_missing_too() {
        let m = manifest(
            r#"[{"name": "absent", "version": "1"}, {"name": "hello", "version": "9.9.9"}, {"name": "bpm"}]"#,
        );
        let problems = require_releases(&m, AVAILABLE).unwrap_err().to_string();
        assert!(
            problems.contains("releases[0].name: Release 'absent' doesn't exist"),
            "{problems}"
        );
        assert!(
            problems.contains("releases[1].version: Release version 'hello/9.9.9' doesn't exist"),
            "{problems}"
        );
        let m = manifest(r#"[{"name": "bpm"}, {"name": "hello", "version": "1.0.0"}]"#);
        assert_eq!(require_releases(&m, AVAILABLE).unwrap(), vec![1, 0]);
    }
}
