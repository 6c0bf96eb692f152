//! Opening a job archive (`jobs/<job>.tgz`) and checking it as the Director does on upload
//! (`jobs/release/release_job.rb`): `job.MF` present and named like the job, every template
//! present, a `monit` or `*.monit` file, `properties` and `logs` maps, links with `name` and
//! `type`, no `optional` on provides, no duplicate link names.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::manifest::{JobRef, JobSpec};
use super::tarball;
use super::{Job, ReleaseError};
use kubosh_base::digest::MultiDigest;

/// Parses the job archive `archive` listed as `r` (its digest already verified).
pub(super) fn parse(
    r: &JobRef,
    digest: MultiDigest,
    archive: Vec<u8>,
) -> Result<Job, ReleaseError> {
    let err = |message: String| ReleaseError::Job {
        job: r.name.clone(),
        message,
    };
    let files = tarball::read_all(&archive).map_err(|e| ReleaseError::Archive {
        what: format!("job '{}' (jobs/{}.tgz)", r.name, r.name),
        message: e.0,
    })?;
    let text = files
        .get("job.MF")
        .ok_or_else(|| err("missing job manifest (job.MF)".into()))?;
    let text = String::from_utf8_lossy(text).into_owned();
    let value = kubosh_base::yaml::parse_value(&text, "job.MF").map_err(|e| err(e.to_string()))?;
    check_spec_shape(&value).map_err(err)?;
    let spec: JobSpec = serde_json::from_value(value).map_err(|e| err(format!("job.MF: {e}")))?;
    if spec.name != r.name {
        return Err(err(format!(
            "inconsistent name: release manifest says '{}', job.MF says '{}'",
            r.name, spec.name
        )));
    }

    let mut templates = BTreeMap::new();
    for source in spec.templates.keys() {
        let path = format!("templates/{}", tarball::normalize(source));
        let data = files
            .get(&path)
            .ok_or_else(|| err(format!("missing template file '{source}'")))?;
        templates.insert(source.clone(), data.to_vec());
    }

    let monit = files
        .get("monit")
        .map(|m| String::from_utf8_lossy(m).into_owned());
    let extra_monit: BTreeMap<String, String> = files
        .files
        .iter()
        .filter(|(p, f)| !p.contains('/') && p.ends_with(".monit") && f.link_target.is_none())
        .map(|(p, f)| (p.clone(), String::from_utf8_lossy(&f.data).into_owned()))
        .collect();
    if monit.is_none() && extra_monit.is_empty() {
        return Err(err("missing monit file".into()));
    }

    let properties_schema = match files.get("properties_schema.json") {
        None => None,
        Some(data) => Some(
            serde_json::from_slice::<Value>(data)
                .map_err(|e| err(format!("properties_schema.json is not JSON: {e}")))?,
        ),
    };

    Ok(Job {
        name: r.name.clone(),
        version: r.version.clone(),
        fingerprint: r.fingerprint.clone().unwrap_or_else(|| r.version.clone()),
        digest,
        spec,
        monit,
        extra_monit,
        templates,
        properties_schema,
        archive,
    })
}

/// The Director's shape rules for `job.MF`, with its messages.
fn check_spec_shape(spec: &Value) -> Result<(), String> {
    let Some(spec) = spec.as_object() else {
        return Err("job.MF is not a map".into());
    };
    if let Some(t) = spec.get("templates").filter(|v| !v.is_null())
        && !t.is_object()
    {
        return Err("invalid templates spec format: must be a map".into());
    }
    if let Some(l) = spec.get("logs").filter(|v| !v.is_null())
        && !l.is_object()
    {
        return Err("invalid logs spec format".into());
    }
    if let Some(p) = spec.get("properties").filter(|v| !v.is_null())
        && !p.is_object()
    {
        return Err("invalid properties spec format".into());
    }
    for (key, word) in [("provides", "provides"), ("consumes", "consumes")] {
        let Some(links) = spec.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        let Some(links) = links.as_array() else {
            return Err(format!(
                "invalid spec format: '{word}' must be an array of hashes with name and type"
            ));
        };
        let mut names = BTreeSet::new();
        for link in links {
            let Some(link) = link.as_object() else {
                return Err(format!("'{word}' must be a list of hashes"));
            };
            let (Some(name), Some(_)) = (link.get("name"), link.get("type")) else {
                return Err(format!(
                    "each item in the '{word}' section must contain 'name' and 'type'"
                ));
            };
            let name = match name {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if key == "provides" && link.contains_key("optional") {
                return Err(format!(
                    "link '{name}' is a provides link, not allowed to have 'optional' key"
                ));
            }
            if !names.insert(name.clone()) {
                return Err(format!("duplicate {word} link with name '{name}'"));
            }
        }
    }
    Ok(())
}
