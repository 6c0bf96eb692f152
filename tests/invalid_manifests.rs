//! The corpus of invalid manifests in `tests/invalid/`: every case must produce exactly the
//! errors it lists, each at its path, with a message an operator can read.
//!
//! A case is one YAML document:
//!
//! ```yaml
//! description: static IP outside every subnet
//! expect:                      # exactly these errors, as "<document>: <path>"
//! - "manifest: instance_groups[0].networks[0].static_ips[1]"
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

use kubosh::validate::{self, Path, Problems};
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
    kubosh::yaml::parse_value(&text, &path.display().to_string()).unwrap_or_else(|e| panic!("{e}"))
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
        for (i, op) in case
            .get(ops_key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            ops::apply(&mut value, op).map_err(|e| format!("{ops_key}[{i}]: {e}"))?;
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

#[test]
fn the_ops_used_by_the_corpus_behave_like_bosh_ops_files() {
    let mut v = serde_json::json!({"igs": [{"name": "a", "n": 1}, {"name": "b"}]});
    let op =
        |t: &str, p: &str, value: Value| serde_json::json!({"type": t, "path": p, "value": value});
    ops::apply(&mut v, &op("replace", "/igs/name=a/n", 2.into())).unwrap();
    ops::apply(&mut v, &op("replace", "/igs/-", "c".into())).unwrap();
    ops::apply(&mut v, &op("replace", "/igs/1/x?/y", 3.into())).unwrap();
    ops::apply(&mut v, &op("remove", "/igs/0/name", Value::Null)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"igs": [{"n": 2}, {"name": "b", "x": {"y": 3}}, "c"]})
    );
    assert!(ops::apply(&mut v, &op("replace", "/igs/name=zz/n", 1.into())).is_err());
    assert!(ops::apply(&mut v, &op("remove", "/nope", Value::Null)).is_err());
}

/// The part of BOSH ops files the corpus needs (go-patch `replace` and `remove`).
///
/// Kept here rather than borrowed from `kubosh::ops` so the corpus does not depend on the
/// code under test beyond the validator.
mod ops {
    use serde_json::Value;

    enum Token {
        Index(usize),
        Append,
        Matching(String, String),
        Key(String),
    }

    fn tokens(path: &str) -> Result<Vec<(Token, bool)>, String> {
        let rest = path
            .strip_prefix('/')
            .ok_or_else(|| format!("path '{path}' must start with '/'"))?;
        rest.split('/')
            .map(|raw| {
                let raw = raw.replace("~1", "/").replace("~0", "~");
                let (text, optional) = match raw.strip_suffix('?') {
                    Some(t) => (t.to_string(), true),
                    None => (raw, false),
                };
                let token = if text == "-" {
                    Token::Append
                } else if let Ok(i) = text.parse() {
                    Token::Index(i)
                } else if let Some((k, v)) = text.split_once('=') {
                    Token::Matching(k.to_string(), v.to_string())
                } else {
                    Token::Key(text)
                };
                Ok((token, optional))
            })
            .collect()
    }

    fn position(items: &[Value], key: &str, want: &str) -> Option<usize> {
        items
            .iter()
            .position(|i| i.get(key).and_then(Value::as_str) == Some(want))
    }

    /// The child a token names, created (as a mapping) when the token is optional.
    fn child<'a>(
        node: &'a mut Value,
        token: &Token,
        optional: bool,
    ) -> Result<&'a mut Value, String> {
        match (token, node) {
            (Token::Index(i), Value::Array(items)) => {
                items.get_mut(*i).ok_or_else(|| format!("no item {i}"))
            }
            (Token::Matching(k, v), Value::Array(items)) => match position(items, k, v) {
                Some(i) => Ok(&mut items[i]),
                None if optional => {
                    items.push(serde_json::json!({ k.as_str(): v.as_str() }));
                    Ok(items.last_mut().expect("just pushed"))
                }
                None => Err(format!("no item with {k}={v}")),
            },
            (Token::Key(k), Value::Object(map)) => match map.contains_key(k) {
                true => Ok(map.get_mut(k).expect("present")),
                false if optional => Ok(map
                    .entry(k.clone())
                    .or_insert(Value::Object(Default::default()))),
                false => Err(format!("no key '{k}'")),
            },
            _ => Err("path does not match the document".into()),
        }
    }

    fn set(node: &mut Value, token: &Token, value: Value) -> Result<(), String> {
        match (token, node) {
            (Token::Append, Value::Array(items)) => items.push(value),
            (Token::Index(i), Value::Array(items)) if *i < items.len() => items[*i] = value,
            (Token::Matching(k, v), Value::Array(items)) => match position(items, k, v) {
                Some(i) => items[i] = value,
                None => return Err(format!("no item with {k}={v}")),
            },
            (Token::Key(k), Value::Object(map)) => {
                map.insert(k.clone(), value);
            }
            _ => return Err("cannot replace there".into()),
        }
        Ok(())
    }

    fn remove(node: &mut Value, token: &Token) -> Result<(), String> {
        match (token, node) {
            (Token::Index(i), Value::Array(items)) if *i < items.len() => {
                items.remove(*i);
            }
            (Token::Matching(k, v), Value::Array(items)) => match position(items, k, v) {
                Some(i) => {
                    items.remove(i);
                }
                None => return Err(format!("no item with {k}={v}")),
            },
            (Token::Key(k), Value::Object(map)) => {
                map.shift_remove(k).ok_or_else(|| format!("no key '{k}'"))?;
            }
            _ => return Err("cannot remove there".into()),
        }
        Ok(())
    }

    /// Applies one `{type, path, value}` operation.
    pub fn apply(doc: &mut Value, op: &Value) -> Result<(), String> {
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or("op without path")?;
        let mut toks = tokens(path)?;
        let (last, _) = toks.pop().ok_or("empty path")?;
        let mut node = doc;
        for (token, optional) in &toks {
            node = child(node, token, *optional).map_err(|e| format!("{path}: {e}"))?;
        }
        match op.get("type").and_then(Value::as_str) {
            Some("replace") => {
                let value = op.get("value").cloned().unwrap_or(Value::Null);
                set(node, &last, value)
            }
            Some("remove") => remove(node, &last),
            other => Err(format!("unsupported op type {other:?}")),
        }
        .map_err(|e| format!("{path}: {e}"))
    }
}
