//! Validation of manifests and cloud configs: every problem at once, each with its path.
//!
//! Three passes, all pure:
//! 1. [`shape`]: keys, types and formats against the schema of the typed model
//!    (unknown keys are warnings, as the Director ignores them);
//! 2. the typed model is built (it cannot fail once the shape is right);
//! 3. semantic rules: names unique, references resolve against the cloud config, static IPs
//!    fit subnets, update settings make sense, and the other rules the Director enforces.
//!
//! Semantic rules run only on documents whose shape is right, so a type error is never
//! followed by confusing knock-on errors.

mod capacity;
mod cloud_config;
mod cloud_configs;
mod cpi_configs;
mod deployment;
mod init;
pub mod network;
mod problem;
mod release_jobs;
mod release_versions;
mod runtime_configs;
pub mod shape;
mod unused;

use std::sync::LazyLock;

use serde::de::DeserializeOwned;
use serde_json::Value;

pub use cloud_configs::merge_cloud_configs;
pub use cpi_configs::{azs_on_cpis, cpi_config, merge_cpi_configs};
pub use problem::{Document, Path, Problem, Problems, Segment, Severity};
pub use release_jobs::release_jobs;
pub use release_versions::{choose_releases, require_releases};
pub use runtime_configs::{apply_runtime_configs, runtime_config};
use shape::ShapeChecker;

use crate::manifest::{CloudConfig, CpiConfig, DeploymentManifest, InitManifest, RuntimeConfig};

/// A document that passed validation, with the warnings found on the way.
#[derive(Debug, Clone)]
pub struct Validated<T> {
    /// The typed document.
    pub document: T,
    /// Warnings (never errors).
    pub warnings: Problems,
}

static MANIFEST_SHAPE: LazyLock<ShapeChecker> = LazyLock::new(|| {
    ShapeChecker::for_type::<DeploymentManifest>(Document::Manifest).rejecting(deployment::V1_KEYS)
});
static CLOUD_CONFIG_SHAPE: LazyLock<ShapeChecker> =
    LazyLock::new(|| ShapeChecker::for_type::<CloudConfig>(Document::CloudConfig));
static RUNTIME_CONFIG_SHAPE: LazyLock<ShapeChecker> =
    LazyLock::new(|| ShapeChecker::for_type::<RuntimeConfig>(Document::RuntimeConfig));
static CPI_CONFIG_SHAPE: LazyLock<ShapeChecker> =
    LazyLock::new(|| ShapeChecker::for_type::<CpiConfig>(Document::CpiConfig));
static INIT_SHAPE: LazyLock<ShapeChecker> =
    LazyLock::new(|| ShapeChecker::for_type::<InitManifest>(Document::Manifest));

/// Checks the shape of `value` and builds the typed document from it.
fn typed<T: DeserializeOwned>(
    checker: &ShapeChecker,
    document: Document,
    value: &Value,
    problems: &mut Problems,
) -> Option<T> {
    if !value.is_object() {
        problems.error(
            document,
            Path::root(),
            format!(
                "expected a mapping of keys, found {}",
                shape::describe(value)
            ),
        );
        return None;
    }
    checker.check(value, problems);
    if problems.has_errors() {
        return None;
    }
    match serde_json::from_value(value.clone()) {
        Ok(t) => Some(t),
        Err(e) => {
            // The shape check mirrors the types, so this is a kubosh bug; still report it.
            problems.error(document, Path::root(), format!("cannot be read: {e}"));
            None
        }
    }
}

fn finish<T>(document: Option<T>, problems: Problems) -> Result<Validated<T>, Problems> {
    match document {
        Some(document) if !problems.has_errors() => Ok(Validated {
            document,
            warnings: problems,
        }),
        _ => Err(problems),
    }
}

/// Validates a cloud config on its own.
pub fn cloud_config(value: &Value) -> Result<Validated<CloudConfig>, Problems> {
    let mut problems = Problems::default();
    let cc: Option<CloudConfig> = typed(
        &CLOUD_CONFIG_SHAPE,
        Document::CloudConfig,
        value,
        &mut problems,
    );
    if let Some(cc) = &cc {
        cloud_config::check(cc, &mut problems);
        unused::cloud_config(cc, &mut problems);
    }
    finish(cc, problems)
}

/// Validates a deployment manifest against a cloud config, reporting the problems of both.
pub fn deployment(
    manifest: &Value,
    cloud_config_value: &Value,
) -> Result<Validated<(DeploymentManifest, CloudConfig)>, Problems> {
    let mut problems = Problems::default();
    let cc: Option<CloudConfig> = typed(
        &CLOUD_CONFIG_SHAPE,
        Document::CloudConfig,
        cloud_config_value,
        &mut problems,
    );
    if let Some(cc) = &cc {
        cloud_config::check(cc, &mut problems);
        unused::cloud_config(cc, &mut problems);
    }
    let mut manifest_problems = Problems::default();
    let dm: Option<DeploymentManifest> = typed(
        &MANIFEST_SHAPE,
        Document::Manifest,
        manifest,
        &mut manifest_problems,
    );
    if let (Some(dm), Some(cc)) = (&dm, &cc) {
        deployment::check(dm, cc, &mut manifest_problems);
        unused::manifest(dm, &mut manifest_problems);
    }
    problems.extend(manifest_problems);
    finish(dm.zip(cc), problems)
}

/// Validates a `create-env` (bosh-init) manifest.
pub fn init_manifest(value: &Value) -> Result<Validated<InitManifest>, Problems> {
    let mut problems = Problems::default();
    let m: Option<InitManifest> = typed(&INIT_SHAPE, Document::Manifest, value, &mut problems);
    if let Some(m) = &m {
        init::check(m, &mut problems);
    }
    finish(m, problems)
}

/// Reports every name used more than once, pointing at the repeat and naming the first use.
fn unique_names<'a>(
    document: Document,
    what: &str,
    names: impl IntoIterator<Item = (&'a str, Path)>,
    problems: &mut Problems,
) {
    let mut seen: std::collections::HashMap<&str, Path> = std::collections::HashMap::new();
    for (name, path) in names {
        match seen.get(name) {
            Some(first) => problems.error(
                document,
                path,
                format!("{what} '{name}' is defined more than once (first at {first})"),
            ),
            None => {
                seen.insert(name, path);
            }
        }
    }
}

/// The name BOSH derives for DNS (`Canonicalizer.canonicalize`): lower case, `_` as `-`,
/// anything but letters, digits and `-` dropped.
fn canonical_name(name: &str) -> String {
    name.to_lowercase()
        .replace('_', "-")
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .collect()
}

/// Names BOSH also uses in DNS (instance groups, networks) must stay distinct and valid once
/// canonicalized: `web_1` and `Web-1` are the same host name, `web_` is no host name at all.
/// Names repeated verbatim are left to [`unique_names`].
fn canonical_names<'a>(
    document: Document,
    what: &str,
    names: impl IntoIterator<Item = (&'a str, Path)>,
    problems: &mut Problems,
) {
    let mut seen: std::collections::HashMap<String, (&str, Path)> =
        std::collections::HashMap::new();
    for (name, path) in names {
        let canonical = canonical_name(name);
        if canonical.starts_with('-') || canonical.ends_with('-') {
            problems.error(
                document,
                path.clone(),
                format!("{what} name '{name}' becomes '{canonical}' in DNS, which cannot start or end with '-'"),
            );
        }
        match seen.get(&canonical) {
            Some((first, at)) if *first != name => problems.error(
                document,
                path,
                format!("{what} '{name}' has the same DNS name '{canonical}' as '{first}' (at {at}); rename one"),
            ),
            Some(_) => {}
            None => {
                seen.insert(canonical, (name, path));
            }
        }
    }
}

/// Suggests the closest known name for an unknown one.
fn did_you_mean(name: &str, known: &[&str]) -> String {
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), *k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| format!(" (did you mean '{k}'?)"))
        .unwrap_or_default()
}

/// Reports a reference to a name that is not defined.
fn must_exist(
    document: Document,
    path: Path,
    what: &str,
    name: &str,
    known: &[&str],
    where_defined: &str,
    problems: &mut Problems,
) {
    if !known.contains(&name) {
        let hint = did_you_mean(name, known);
        problems.error(
            document,
            path,
            format!("{what} '{name}' is not defined in {where_defined}{hint}"),
        );
    }
}
