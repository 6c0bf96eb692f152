//! The manifest against the releases a deploy will use: every job it names (in instance
//! groups and addons) must be in its release. Checked once the releases are known (the
//! controller's Ready `Release` resources, `kubosh deploy`'s tarballs), before any agent
//! or cloud call.

use std::collections::{BTreeMap, BTreeSet};

use super::problem::{Document, Path, Problems};
use crate::manifest::{DeploymentManifest, JobRef};

/// Every job of `manifest` that its release lacks, with its path
/// (`instance_groups[0].jobs[1].name`) and the Director's words (`DeploymentUnknownTemplate`,
/// "Can't find job '<name>'") naming the release too. `releases` are the releases the deploy
/// uses, each as its name, version and job names. A release not among them is not checked
/// here (waiting for it, or its absence, is reported elsewhere); of two releases of one name,
/// the later is the one deployed, as the engine takes it.
pub fn release_jobs<'a, J>(
    manifest: &DeploymentManifest,
    releases: impl IntoIterator<Item = (&'a str, &'a str, J)>,
) -> Problems
where
    J: IntoIterator<Item = &'a str>,
{
    let by_name: BTreeMap<&str, (&str, BTreeSet<&str>)> = (releases.into_iter())
        .map(|(name, version, jobs)| (name, (version, jobs.into_iter().collect())))
        .collect();
    let mut problems = Problems::default();
    let mut check = |job: &JobRef, path: Path| {
        let Some((version, jobs)) = by_name.get(job.release.as_str()) else {
            return;
        };
        if !jobs.contains(job.name.as_str()) {
            problems.error(
                Document::Manifest,
                path.key("name"),
                format!(
                    "Can't find job '{}' in release '{}/{version}'",
                    job.name, job.release
                ),
            );
        }
    };
    let root = Path::root();
    for (gi, group) in manifest.instance_groups.iter().enumerate() {
        for (ji, job) in group.jobs.iter().enumerate() {
            check(
                job,
                root.key("instance_groups").index(gi).key("jobs").index(ji),
            );
        }
    }
    for (ai, addon) in manifest.addons.iter().enumerate() {
        for (ji, job) in addon.jobs.iter().enumerate() {
            check(job, root.key("addons").index(ai).key("jobs").index(ji));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_missing_from_its_release_is_named_by_its_path() {
        let manifest: DeploymentManifest = serde_json::from_value(json!({
            "name": "d",
            "releases": [{"name": "hello", "version": "1"}, {"name": "other", "version": "2"}],
            "instance_groups": [{"name": "web", "jobs": [
                {"name": "hello", "release": "hello"},
                {"name": "helo", "release": "hello"},
                {"name": "unchecked", "release": "other"},
            ]}],
            "addons": [{"name": "a", "jobs": [{"name": "nope", "release": "hello"}]}],
        }))
        .unwrap();
        let old = ("hello", "0", vec!["helo", "nope"]);
        let hello = ("hello", "1", vec!["hello"]);
        let problems = release_jobs(&manifest, [old, hello.clone()]);
        assert_eq!(
            problems.to_string(),
            "error: manifest: instance_groups[0].jobs[1].name: Can't find job 'helo' in release 'hello/1'\n\
             error: manifest: addons[0].jobs[0].name: Can't find job 'nope' in release 'hello/1'\n"
        );
        assert!(release_jobs(&manifest, [hello]).has_errors());
        assert!(release_jobs(&manifest, Vec::<(&str, &str, Vec<&str>)>::new()).is_empty());
    }
}
