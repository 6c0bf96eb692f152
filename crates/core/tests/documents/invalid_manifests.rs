//! The corpus of invalid manifests in `tests/invalid/`: every case must produce exactly the
//! errors it lists, each at its path, with a message an operator can read.
//!
//! A case is one YAML document:
//!
//! ```yaml
//! description: static IP outside every subnet
//! expect:                      # exactly these errors, as "<document>: <path>"
//! - "manifest: instance_groups[0].networks[0].static_ips[1]"
//! says: [belongs to no subnet] # optional: words some error's message must contain
//! ops:                         # applied to base-manifest.yml (or to `manifest`)
//! - type: replace
//!   path: /instance_groups/name=db/networks/name=default/static_ips/1
//!   value: 10.0.9.10
//! cloud_config_ops: [...]      # applied to base-cloud-config.yml (or to `cloud_config`)
//! manifest: {...}              # optional: a whole manifest instead of the base
//! cloud_config: {...}          # optional: a whole cloud config instead of the base
//! ```
//!
//! `ops` use the BOSH ops-file syntax (`replace`/`remove`, `/name=x`, `/-`, `?`), so every
//! case reads as "the valid base, with this one mistake". Cases in `tests/invalid/init/` are
//! `create-env` manifests, made from `tests/invalid/init/base-manifest.yml`. Files in
//! `tests/valid/` have the same form without `expect`: variants BOSH accepts, which must
//! validate without errors.
//!
//! `KUBOSH_CORPUS_SHOW=1 cargo test --test invalid_manifests -- --nocapture` prints what
//! every case reports, to review the messages.

use std::fs;
use std::path::{Path as FsPath, PathBuf};

use kubosh_core::validate::{self, Path, Problems};
use serde_json::Value;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/invalid");

/// Which validator a case goes through.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Deployment,
    Init,
    /// A deployment that must validate (`tests/valid`).
    Valid,
}

fn read_yaml(path: &FsPath) -> Value {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    kubosh_base::yaml::parse_value(&text, &path.display().to_string())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The case files of a directory, sorted, without the base documents.
fn case_files(dir: &FsPath) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .filter(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("base-"))
        })
        .collect();
    files.sort();
    files
}

/// Runs the validator a case is for, on the documents it describes.
fn run_case(kind: Kind, case: &Value, dir: &FsPath) -> Result<Problems, String> {
    let doc = |key: &str, ops_key: &str, base: &str| -> Result<Value, String> {
        let mut value = match case.get(key) {
            Some(v) => v.clone(),
            None => read_yaml(&dir.join(base)),
        };
        if let Some(ops) = case.get(ops_key) {
            let file = kubosh_core::ops::OpsFile::from_value(ops.clone(), ops_key)
                .map_err(|e| e.to_string())?;
            file.apply(&mut value).map_err(|e| e.to_string())?;
        }
        Ok(value)
    };
    let manifest = doc("manifest", "ops", "base-manifest.yml")?;
    let problems = match kind {
        Kind::Deployment => {
            let cloud_config = doc("cloud_config", "cloud_config_ops", "base-cloud-config.yml")?;
            validate::deployment(&manifest, &cloud_config).err()
        }
        Kind::Init => validate::init_manifest(&manifest).err(),
        Kind::Valid => unreachable!("valid variants run as deployments"),
    };
    Ok(problems.unwrap_or_default())
}

/// "<document>: <path>" of every error, sorted (repeats kept, so duplicates show).
fn error_locations(problems: &Problems) -> Vec<String> {
    let mut found: Vec<String> = problems
        .errors()
        .map(|p| format!("{}: {}", p.document, p.path))
        .collect();
    found.sort();
    found
}

/// Debug formatting leaking into a message an operator reads.
fn noise_in(message: &str) -> Option<&'static str> {
    ["Some(", "None", "\\\"", "Value::", "String(", "Number("]
        .into_iter()
        .find(|n| message.contains(n))
}

/// Checks one case file; returns what is wrong with it, if anything.
fn check_case(kind: Kind, file: &FsPath) -> Result<(), String> {
    let case = read_yaml(file);
    let description = case
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    if description.trim().is_empty() {
        return Err("has no description".into());
    }
    let mut expected: Vec<String> = Vec::new();
    for e in case
        .get("expect")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = e.as_str().ok_or("expect entries must be strings")?;
        let (document, path) = text
            .split_once(": ")
            .ok_or_else(|| format!("expect entry '{text}' is not '<document>: <path>'"))?;
        let parsed = Path::parse(path).ok_or_else(|| format!("bad path in '{text}'"))?;
        if parsed.to_string() != path || !["manifest", "cloud-config"].contains(&document) {
            return Err(format!("expect entry '{text}' is not written canonically"));
        }
        expected.push(text.to_string());
    }
    if expected.is_empty() {
        return Err("expects no error: every case must be invalid".into());
    }
    expected.sort();
    let dir = file.parent().expect("case file has a directory");
    let problems = run_case(kind, &case, dir)?;
    let found = error_locations(&problems);
    if std::env::var_os("KUBOSH_CORPUS_SHOW").is_some() {
        eprintln!("--- {}: {description}\n{problems}", file.display());
    }
    if found != expected {
        return Err(format!(
            "{description}\n  expected: {expected:?}\n  found:    {found:?}\n{problems}"
        ));
    }
    for words in case
        .get("says")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let words = words.as_str().ok_or("says entries must be strings")?;
        if !problems.all().iter().any(|p| p.message.contains(words)) {
            return Err(format!(
                "{description}: no message says '{words}'\n{problems}"
            ));
        }
    }
    for p in problems.all() {
        if p.message.trim().is_empty() {
            return Err(format!("empty message at {}", p.path));
        }
        if let Some(noise) = noise_in(&p.message) {
            return Err(format!("message has debug noise '{noise}': {p}"));
        }
    }
    Ok(())
}

/// Checks a variant that must stay valid (BOSH accepts it); its base is in `tests/invalid`.
fn check_valid_case(file: &FsPath) -> Result<(), String> {
    let case = read_yaml(file);
    let description = case
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    if description.trim().is_empty() || case.get("expect").is_some() {
        return Err("needs a description and no 'expect'".into());
    }
    let problems = run_case(Kind::Deployment, &case, FsPath::new(CORPUS))?;
    match problems.has_errors() {
        false => Ok(()),
        true => Err(format!("{description}: BOSH accepts this\n{problems}")),
    }
}

fn check_corpus(kind: Kind, dir: &FsPath) -> usize {
    let files = case_files(dir);
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let result = match kind {
                Kind::Valid => check_valid_case(f),
                _ => check_case(kind, f),
            };
            result
                .err()
                .map(|e| format!("{}: {e}", f.file_name().unwrap().to_string_lossy()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
    files.len()
}

#[test]
fn base_documents_are_valid() {
    let dir = FsPath::new(CORPUS);
    let manifest = read_yaml(&dir.join("base-manifest.yml"));
    let cloud_config = read_yaml(&dir.join("base-cloud-config.yml"));
    if let Err(problems) = validate::deployment(&manifest, &cloud_config) {
        panic!("the base deployment must be valid:\n{problems}");
    }
    let v = validate::deployment(&manifest, &cloud_config).unwrap();
    assert!(
        v.warnings.is_empty(),
        "the base has warnings:\n{}",
        v.warnings
    );
    let init = read_yaml(&dir.join("init/base-manifest.yml"));
    if let Err(problems) = validate::init_manifest(&init) {
        panic!("the base create-env manifest must be valid:\n{problems}");
    }
}

/// `max_in_flight: 0` is run as 1, as the Director runs it, and said where it is written:
/// in the deployment's update block and in an instance group's.
#[test]
fn no_flight_is_run_as_one_and_said_where_written() {
    let dir = FsPath::new(CORPUS);
    let mut manifest = read_yaml(&dir.join("base-manifest.yml"));
    let cloud_config = read_yaml(&dir.join("base-cloud-config.yml"));
    manifest["update"]["max_in_flight"] = serde_json::json!(0);
    manifest["instance_groups"][1]["update"] = serde_json::json!({"max_in_flight": "0%"});
    let v = validate::deployment(&manifest, &cloud_config).expect("valid, with warnings");
    let at: Vec<String> = (v.warnings.all().iter())
        .filter(|w| w.message.contains("0 is treated as 1"))
        .map(|w| w.path.to_string())
        .collect();
    assert_eq!(
        at,
        [
            "update.max_in_flight",
            "instance_groups[1].update.max_in_flight"
        ],
        "{}",
        v.warnings
    );
}

#[test]
fn every_invalid_deployment_reports_exactly_its_errors() {
    let n = check_corpus(Kind::Deployment, FsPath::new(CORPUS));
    assert!(
        n >= 45,
        "the corpus should hold at least 45 cases, found {n}"
    );
}

#[test]
fn every_invalid_create_env_manifest_reports_exactly_its_errors() {
    let n = check_corpus(Kind::Init, &FsPath::new(CORPUS).join("init"));
    assert!(n >= 3, "expected the create-env cases, found {n}");
}

/// Variants of the base that BOSH accepts, so kubosh must too (guards against rules
/// stricter than the Director's). Same format as the invalid cases, without `expect`.
#[test]
fn every_valid_variant_validates() {
    let dir = FsPath::new(env!("CARGO_MANIFEST_DIR")).join("tests/valid");
    let n = check_corpus(Kind::Valid, &dir);
    assert!(n >= 1, "no valid variants found");
}
