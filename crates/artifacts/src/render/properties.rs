//! A job's properties, as the Director binds them before rendering.
//!
//! 1. [`property_source`]: the job's `properties` block when the manifest has one, else the
//!    instance group's `properties` deep-merged over the global `properties`
//!    (`instance_group_spec_parser.rb`; the CLI's create-env rule is the same, §5.4).
//! 2. [`PropertyBinder::bind`]: only properties declared in the job spec are kept, each looked
//!    up by its dotted name, else its spec default; hashes inside a value are key-sorted
//!    (`DeploymentPlan::Job#bind_properties`). Then `properties_schema.json`, when the job has
//!    one, validates the result (`JobSchemaValidator`: JSON Schema 2020-12 plus BOSH's
//!    `certificate` type).
//!
//! Error texts never contain property values (they may be secrets).

use jsonschema::Validator;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;

use super::RenderError;
use super::job::JobTemplates;
use kubosh_core::manifest::Map;

/// The draft `properties_schema.json` must declare, as the Director requires.
pub const SCHEMA_DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The format kubosh substitutes for BOSH's `certificate` type.
const CERTIFICATE_FORMAT: &str = "bosh-certificate";

/// Where a job's properties come from: its own `properties` when given (even `{}`), else the
/// group's deep-merged over the global ones.
pub fn property_source(global: Option<&Map>, group: Option<&Map>, job: Option<&Map>) -> Map {
    if let Some(job) = job {
        return job.clone();
    }
    let mut merged = global.cloned().unwrap_or_default();
    if let Some(group) = group {
        deep_merge(&mut merged, group);
    }
    merged
}

/// Ruby's `recursive_merge`: hashes merge key by key, anything else is replaced.
fn deep_merge(base: &mut Map, over: &Map) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            (Some(Value::Object(old)), Value::Object(new)) => deep_merge(old, new),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Binds one job's properties: declared properties only, defaults filled, schema checked.
/// Build it once per job and use it for every instance (the schema is compiled here).
pub struct PropertyBinder<'a> {
    job: &'a JobTemplates,
    schema: Option<Validator>,
}

impl std::fmt::Debug for PropertyBinder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PropertyBinder")
            .field("job", &self.job.name)
            .field("schema", &self.schema.is_some())
            .finish()
    }
}

impl<'a> PropertyBinder<'a> {
    /// Prepares binding for `job`; fails when its `properties_schema.json` is unusable.
    pub fn new(job: &'a JobTemplates) -> Result<Self, RenderError> {
        let schema = match &job.properties_schema {
            None => None,
            Some(schema) => Some(compile_schema(job, schema)?),
        };
        Ok(Self { job, schema })
    }

    /// The job's bound properties from `source` (see [`property_source`]).
    pub fn bind(&self, source: &Map) -> Result<Map, RenderError> {
        let mut bound = Map::new();
        for (name, definition) in &self.job.properties {
            let provided = lookup(source, name).map_err(|received| RenderError::PropertyType {
                release: self.job.release.clone(),
                job: self.job.name.clone(),
                property: name.clone(),
                received,
            })?;
            let value = match provided {
                Some(value) if !value.is_null() => sorted(value),
                _ => definition
                    .default
                    .as_ref()
                    .map(sorted)
                    .unwrap_or(Value::Null),
            };
            set(&mut bound, name, value);
        }
        if let Some(schema) = &self.schema {
            let instance = Value::Object(bound);
            let errors: Vec<String> = schema
                .iter_errors(&instance)
                .map(|e| {
                    let path = e.instance_path().to_string();
                    let path = if path.is_empty() {
                        "/".to_string()
                    } else {
                        path
                    };
                    let message = if is_certificate_error(&e) {
                        "value is not a certificate".to_string()
                    } else {
                        e.masked().to_string()
                    };
                    format!("value at `{path}`: {message}")
                })
                .collect();
            if !errors.is_empty() {
                return Err(RenderError::Schema {
                    release: self.job.release.clone(),
                    job: self.job.name.clone(),
                    errors,
                });
            }
            let Value::Object(bound) = instance else {
                unreachable!("built as an object above")
            };
            return Ok(bound);
        }
        Ok(bound)
    }
}

/// Looks a dotted name up, failing (with the Ruby class name of what was found) when a value
/// on the way is not a hash, as `validate_properties_format` does.
fn lookup<'v>(source: &'v Map, name: &str) -> Result<Option<&'v Value>, String> {
    let mut keys = name.split('.');
    let Some(first) = keys.next() else {
        return Ok(None);
    };
    let mut current = match source.get(first) {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => value,
    };
    for key in keys {
        let Value::Object(map) = current else {
            return Err(ruby_class(current).to_string());
        };
        current = match map.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(value) => value,
        };
    }
    Ok(Some(current))
}

/// Sets a dotted name, creating the hashes on the way.
fn set(target: &mut Map, name: &str, value: Value) {
    let keys: Vec<&str> = name.split('.').collect();
    let (last, parents) = keys.split_last().expect("split yields at least one item");
    let mut current = target;
    for key in parents {
        let entry = current
            .entry((*key).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        let Value::Object(map) = entry else {
            unreachable!("made an object above")
        };
        current = map;
    }
    current.insert((*last).to_string(), value);
}

/// Hash keys sorted at every level reached through hashes (`sort_property`: arrays are left
/// as they are, hashes inside them too).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted(v)))
                    .collect(),
            )
        }
        other => other.clone(),
    }
}

/// The Ruby class a JSON value becomes, for error texts.
fn ruby_class(value: &Value) -> &'static str {
    match value {
        Value::Null => "NilClass",
        Value::Bool(true) => "TrueClass",
        Value::Bool(false) => "FalseClass",
        Value::Number(n) if n.is_f64() => "Float",
        Value::Number(_) => "Integer",
        Value::String(_) => "String",
        Value::Array(_) => "Array",
        Value::Object(_) => "Hash",
    }
}

fn compile_schema(job: &JobTemplates, schema: &Value) -> Result<Validator, RenderError> {
    let invalid = |reason: String| RenderError::InvalidSchema {
        release: job.release.clone(),
        job: job.name.clone(),
        reason,
    };
    let draft = schema.get("$schema").and_then(Value::as_str).unwrap_or("");
    if draft.is_empty() {
        return Err(invalid(
            "You must declare your $schema draft version".into(),
        ));
    }
    if draft.trim_end_matches('#') != SCHEMA_DRAFT {
        return Err(invalid(format!(
            "Only {SCHEMA_DRAFT} schema is currently supported"
        )));
    }
    let mut schema = schema.clone();
    rewrite_certificate_type(&mut schema);
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .with_format(CERTIFICATE_FORMAT, is_certificate)
        .build(&schema)
        .map_err(|e| invalid(e.masked().to_string()))
}

/// BOSH's `certificate` type becomes `string` with a format checking the certificate (a type
/// list that already allows any string keeps allowing it).
fn rewrite_certificate_type(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let mut add_format = false;
            match map.get_mut("type") {
                Some(Value::String(t)) if t == "certificate" => {
                    *t = "string".into();
                    add_format = true;
                }
                Some(Value::Array(types)) if types.iter().any(|t| t == "certificate") => {
                    let had_string = types.iter().any(|t| t == "string");
                    types.retain(|t| t != "certificate");
                    if !had_string {
                        types.push(Value::String("string".into()));
                        add_format = true;
                    }
                }
                _ => {}
            }
            if add_format {
                map.insert("format".into(), Value::String(CERTIFICATE_FORMAT.into()));
            }
            for (_, child) in map.iter_mut() {
                rewrite_certificate_type(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_certificate_type),
        _ => {}
    }
}

/// A PEM certificate (or several), or the empty string, as BOSH's `certificate` type allows.
fn is_certificate(text: &str) -> bool {
    if text.is_empty() {
        return true;
    }
    let mut any = false;
    for cert in CertificateDer::pem_slice_iter(text.as_bytes()) {
        let Ok(cert) = cert else { return false };
        if webpki::EndEntityCert::try_from(&cert).is_err() {
            return false;
        }
        any = true;
    }
    any
}

fn is_certificate_error(error: &jsonschema::ValidationError<'_>) -> bool {
    matches!(error.kind(), jsonschema::error::ValidationErrorKind::Format { format } if format == CERTIFICATE_FORMAT)
}
