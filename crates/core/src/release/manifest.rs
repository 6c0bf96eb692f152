//! The documents inside a release: `release.MF` (the release manifest), `job.MF` (a job's
//! `spec`) and a package's `spec` in a release directory.
//!
//! Scalars the Director converts with `to_s` (names, versions, digests) accept YAML numbers
//! too; lists and maps written as `~` are empty. Unknown keys are kept in `extra` maps where
//! they may matter to later stages (job specs, property definitions, links) and ignored
//! elsewhere, as the Director and bosh-cli ignore them.

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// `release.MF`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseManifest {
    /// Release name.
    #[serde(deserialize_with = "string_like")]
    pub name: String,
    /// Release version (`1.2`, `0+dev.3`).
    #[serde(deserialize_with = "string_like")]
    pub version: String,
    /// Short git commit of the release directory (`non-git` outside git).
    #[serde(default, deserialize_with = "string_like")]
    pub commit_hash: String,
    /// Whether the directory had uncommitted changes.
    #[serde(default, deserialize_with = "null_default")]
    pub uncommitted_changes: bool,
    /// Jobs (`jobs/<name>.tgz`).
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub jobs: Vec<JobRef>,
    /// Source packages (`packages/<name>.tgz`).
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub packages: Vec<PackageRef>,
    /// Compiled packages (`compiled_packages/<name>.tgz`).
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub compiled_packages: Vec<CompiledPackageRef>,
    /// The license (`license.tgz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<LicenseRef>,
    /// The outer tarball and packages are plain tar, not gzip.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "is_false"
    )]
    pub no_compression: bool,
}

/// A job entry of `release.MF`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRef {
    /// Job name.
    #[serde(deserialize_with = "string_like")]
    pub name: String,
    /// Version (for releases built by bosh-cli: the fingerprint).
    #[serde(deserialize_with = "string_like")]
    pub version: String,
    /// Content fingerprint (old releases lack it: the version stands in).
    #[serde(default, deserialize_with = "opt_string_like")]
    pub fingerprint: Option<String>,
    /// Multi-digest of `jobs/<name>.tgz`.
    #[serde(deserialize_with = "string_like")]
    pub sha1: String,
    /// Packages the job needs at run time.
    #[serde(default, deserialize_with = "null_default")]
    pub packages: Vec<String>,
}

/// A package entry of `release.MF`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackageRef {
    /// Package name.
    #[serde(deserialize_with = "string_like")]
    pub name: String,
    /// Version (the fingerprint for releases built by bosh-cli).
    #[serde(deserialize_with = "string_like")]
    pub version: String,
    /// Content fingerprint.
    #[serde(default, deserialize_with = "opt_string_like")]
    pub fingerprint: Option<String>,
    /// Multi-digest of `packages/<name>.tgz`.
    #[serde(deserialize_with = "string_like")]
    pub sha1: String,
    /// Compile-time dependencies (package names).
    #[serde(default, deserialize_with = "null_default")]
    pub dependencies: Vec<String>,
}

/// A compiled package entry of `release.MF`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompiledPackageRef {
    /// Package name.
    #[serde(deserialize_with = "string_like")]
    pub name: String,
    /// Version.
    #[serde(deserialize_with = "string_like")]
    pub version: String,
    /// Content fingerprint.
    #[serde(default, deserialize_with = "opt_string_like")]
    pub fingerprint: Option<String>,
    /// Multi-digest of `compiled_packages/<name>.tgz`.
    #[serde(deserialize_with = "string_like")]
    pub sha1: String,
    /// The stemcell it was compiled on, `<os>/<version>`.
    #[serde(deserialize_with = "string_like")]
    pub stemcell: String,
    /// Dependencies (compiled package names).
    #[serde(default, deserialize_with = "null_default")]
    pub dependencies: Vec<String>,
}

/// The license entry of `release.MF`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LicenseRef {
    /// Version (the fingerprint).
    #[serde(deserialize_with = "string_like")]
    pub version: String,
    /// Content fingerprint.
    #[serde(default, deserialize_with = "opt_string_like")]
    pub fingerprint: Option<String>,
    /// Multi-digest of `license.tgz`.
    #[serde(deserialize_with = "string_like")]
    pub sha1: String,
}

/// A job's spec (`jobs/<job>/spec` in a release directory, `job.MF` in a job tarball).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Job name.
    #[serde(deserialize_with = "string_like")]
    pub name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<Value>,
    /// Template source (under `templates/`) to destination (under `/var/vcap/jobs/<job>/`).
    #[serde(default, deserialize_with = "null_default")]
    pub templates: IndexMap<String, String>,
    /// Packages the job needs at run time.
    #[serde(default, deserialize_with = "null_default")]
    pub packages: Vec<String>,
    /// Property definitions, by dotted name.
    #[serde(default, deserialize_with = "null_default")]
    pub properties: IndexMap<String, PropertyDefinition>,
    /// Links the job provides.
    #[serde(default, deserialize_with = "null_default")]
    pub provides: Vec<ProvidedLink>,
    /// Links the job consumes.
    #[serde(default, deserialize_with = "null_default")]
    pub consumes: Vec<ConsumedLink>,
    /// Other keys (`logs`, `provides`-less legacy keys, ...), verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One property definition of a job spec.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PropertyDefinition {
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<Value>,
    /// The value used when the deployment sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// An example value (documentation only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<Value>,
    /// A type hint (`certificate`, `password`, ...), used by config servers.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Value>,
    /// Other keys, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `provides` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProvidedLink {
    /// Link name.
    #[serde(deserialize_with = "string_like")]
    pub name: String,
    /// Link type.
    #[serde(rename = "type", deserialize_with = "string_like")]
    pub link_type: String,
    /// Properties of the providing job the link exposes.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub properties: Vec<String>,
    /// Other keys, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `consumes` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumedLink {
    /// Link name.
    #[serde(deserialize_with = "string_like")]
    pub name: String,
    /// Link type.
    #[serde(rename = "type", deserialize_with = "string_like")]
    pub link_type: String,
    /// Whether the deployment may leave it unresolved.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "is_false"
    )]
    pub optional: bool,
    /// Other keys, verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A package's `spec` in a release directory.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct PackageSpec {
    /// Package name.
    #[serde(deserialize_with = "string_like")]
    pub name: String,
    /// Compile-time dependencies.
    #[serde(default, deserialize_with = "null_default")]
    pub dependencies: Vec<String>,
    /// Globs (relative to `src/` and `blobs/`) of the files the package contains.
    #[serde(default, deserialize_with = "null_default")]
    pub files: Vec<String>,
    /// Globs removed from `files`.
    #[serde(default, deserialize_with = "null_default")]
    pub excluded_files: Vec<String>,
    /// Ship the package as plain tar.
    #[serde(default, deserialize_with = "null_default")]
    pub no_compression: bool,
}

/// Parses a YAML document (through a [`Value`], as all kubosh YAML) into `T`.
pub fn parse_yaml<T: serde::de::DeserializeOwned>(text: &str, origin: &str) -> Result<T, String> {
    let value = kubosh_base::yaml::parse_value(text, origin).map_err(|e| e.to_string())?;
    serde_json::from_value(value).map_err(|e| format!("{origin}: {e}"))
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `~` as the type's default (empty list, empty map, false).
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A string, or a number / boolean converted the way Ruby's `to_s` would.
pub fn string_like<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = Value::deserialize(d)?;
    scalar_to_string(&v)
        .ok_or_else(|| serde::de::Error::custom(format!("expected a string, got {}", describe(&v))))
}

fn opt_string_like<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = Value::deserialize(d)?;
    if v.is_null() {
        return Ok(None);
    }
    scalar_to_string(&v)
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("expected a string, got {}", describe(&v))))
}

fn scalar_to_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.1}"),
            _ => n.to_string(),
        }),
        _ => None,
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_manifest_accepts_numbers_and_nulls() {
        let m: ReleaseManifest = parse_yaml(
            "name: r\nversion: 12\ncommit_hash: 1234567\nuncommitted_changes: false\njobs: ~\npackages:\n- {name: p, version: 1.0, sha1: abc, dependencies: ~}\n",
            "release.MF",
        )
        .unwrap();
        assert_eq!(m.version, "12");
        assert_eq!(m.commit_hash, "1234567");
        assert!(m.jobs.is_empty());
        assert_eq!(m.packages[0].version, "1.0");
        assert!(m.packages[0].dependencies.is_empty());
    }

    #[test]
    fn release_manifest_round_trips_through_yaml() {
        let m = ReleaseManifest {
            name: "hello".into(),
            version: "0+dev.1".into(),
            commit_hash: "0123456".into(),
            uncommitted_changes: true,
            jobs: vec![JobRef {
                name: "j".into(),
                version: "1".into(),
                fingerprint: Some("1".into()),
                sha1: "sha256:00".into(),
                packages: vec![],
            }],
            packages: vec![],
            compiled_packages: vec![],
            license: None,
            no_compression: false,
        };
        let text = kubosh_base::yaml::to_string(&m).unwrap();
        let back: ReleaseManifest = parse_yaml(&text, "again").unwrap();
        assert_eq!(back, m);
        assert!(!text.contains("no_compression"), "{text}");
        // Hex that looks like a number stays a string.
        for tricky in ["0000000000", "1e10", "0x1f", "123", "true", "~", "0+dev.1"] {
            let mut m2 = m.clone();
            m2.jobs[0].sha1 = tricky.into();
            m2.jobs[0].version = tricky.into();
            let text = kubosh_base::yaml::to_string(&m2).unwrap();
            let back: ReleaseManifest = parse_yaml(&text, "again").unwrap();
            assert_eq!(back.jobs[0].sha1, tricky, "{text}");
        }
    }

    #[test]
    fn job_spec_keeps_links_and_unknown_keys() {
        let s: JobSpec = parse_yaml(
            "name: web\ntemplates: {ctl.erb: bin/ctl}\npackages: ~\nproperties:\n  port: {description: p, default: 80}\nprovides: [{name: web, type: http, properties: [port]}]\nconsumes: [{name: db, type: db, optional: true}]\nlogs: {a: b}\n",
            "spec",
        )
        .unwrap();
        assert_eq!(s.templates["ctl.erb"], "bin/ctl");
        assert_eq!(s.properties["port"].default, Some(serde_json::json!(80)));
        assert_eq!(s.provides[0].properties, ["port"]);
        assert!(s.consumes[0].optional);
        assert!(s.extra.contains_key("logs"));
    }
}
