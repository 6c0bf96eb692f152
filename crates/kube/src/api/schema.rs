//! Finishing touches on the CRD schemas kube-derive generates, so the apiserver accepts them
//! and treats keyed lists well under server-side apply.
//!
//! kube's `CustomResourceExt::crd()` already makes the schemars output structural: it inlines
//! everything, rewrites `Option<T>` into `nullable`, drops `additionalProperties: false` next
//! to `properties` (what `#[schemars(deny_unknown_fields)]` produces) and, because the schema
//! passes through the typed `JSONSchemaProps`, silently drops every key Kubernetes does not
//! know (such as the model's private `x-kubosh-format`). [`finish`] then:
//!
//! - removes any `x-kubosh-*` key and any `additionalProperties` beside `properties` that might
//!   still be there (defensive: both are rejected or meaningless in a CRD);
//! - joins rustdoc's hard-wrapped lines in descriptions, which `kubectl explain` would
//!   otherwise print ragged;
//! - removes `format`s the apiserver does not know (schemars' `uint64`, `uint32` for unsigned
//!   integers; their `minimum: 0` stays), which it would warn about on every apply;
//! - removes `default`s inside embedded BOSH documents, so the apiserver stores the manifest
//!   and cloud config exactly as written (their defaults are kubosh's business);
//! - marks the BOSH documents' keyed lists (`instance_groups` by `name`, ...) as
//!   `x-kubernetes-list-type: map`, which [`kubosh_core::manifest`] must not know about.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Map, Value, json};

/// Schema of a value that may be anything at all (an ops file's `value`): a scalar, a list
/// or a mapping, even `null`. Kubernetes keeps it verbatim.
pub fn any_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Formats the apiserver knows; any other draws a warning on every apply.
#[rustfmt::skip]
pub const KNOWN_FORMATS: &[&str] = &[
    "int32", "int64", "float", "double", "byte", "password", "date", "date-time", "datetime",
    "duration", "uri", "email", "hostname", "ipv4", "ipv6", "cidr", "mac", "uuid", "uuid3",
    "uuid4", "uuid5", "bsonobjectid", "isbn", "isbn10", "isbn13", "creditcard", "ssn",
    "hexcolor", "rgbcolor",
];

/// What [`finish`] does to one CRD beyond the generic clean-up.
///
/// Paths name properties from the schema root, with `[]` after a list whose items they go
/// into: `spec.manifest.instance_groups[].jobs`.
#[derive(Default)]
pub struct Tweaks {
    /// Subtrees holding an embedded BOSH document, stored as written (no schema defaults).
    pub verbatim: &'static [&'static str],
    /// Lists keyed by some of their items' fields: `(path, keys)`.
    pub keyed: &'static [(&'static str, &'static [&'static str])],
}

/// The finished form of a CRD that kube-derive generated: see the module documentation.
///
/// # Panics
///
/// When a path in `tweaks` does not exist, a keyed path is not a list, or a key is not a
/// required field of the list's items (the apiserver would reject the CRD). All are mistakes
/// in static tables, which the unit tests exercise.
pub fn finish(mut crd: CustomResourceDefinition, tweaks: &Tweaks) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(props) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let mut value = serde_json::to_value(&*props).expect("JSONSchemaProps serializes");
        clean(&mut value);
        for path in tweaks.verbatim {
            strip_defaults(node_at(&mut value, path));
        }
        for (path, keys) in tweaks.keyed {
            mark_keyed(node_at(&mut value, path), path, keys);
        }
        *props = serde_json::from_value::<JSONSchemaProps>(value)
            .expect("a cleaned schema is still a JSONSchemaProps");
    }
    crd
}

/// Removes private extension keys, unknown formats, and `additionalProperties` beside
/// `properties`, everywhere.
fn clean(value: &mut Value) {
    each_schema(value, &mut |map| {
        map.retain(|k, _| !k.starts_with("x-kubosh-"));
        if map.contains_key("properties") {
            map.remove("additionalProperties");
        }
        if let Some(Value::String(text)) = map.get_mut("description") {
            *text = reflow(text);
        }
        if map
            .get("format")
            .and_then(Value::as_str)
            .is_some_and(|f| !KNOWN_FORMATS.contains(&f))
        {
            map.remove("format");
        }
    });
}

/// Joins the lines of each paragraph of a doc comment: `kubectl explain` wraps text itself and
/// keeps every line break it finds, so rustdoc's hard wraps would come out ragged. Paragraph
/// breaks and list items (`- `) stay on their own lines.
fn reflow(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, paragraph) in text.split("\n\n").enumerate() {
        if i > 0 {
            out.push_str("\n\n");
        }
        for (j, line) in paragraph.lines().enumerate() {
            let line = line.trim();
            if j > 0 {
                out.push(if line.starts_with("- ") { '\n' } else { ' ' });
            }
            out.push_str(line);
        }
    }
    out
}

fn strip_defaults(value: &mut Value) {
    each_schema(value, &mut |map| {
        map.remove("default");
    });
}

/// Calls `f` on `schema` and every schema nested in it (`properties`, `items`,
/// `additionalProperties`, junctors), never on data such as `default` or `enum`.
fn each_schema(schema: &mut Value, f: &mut impl FnMut(&mut Map<String, Value>)) {
    let Value::Object(map) = schema else { return };
    f(map);
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" => {
                if let Value::Object(props) = child {
                    props.values_mut().for_each(|p| each_schema(p, f));
                }
            }
            "items" | "additionalProperties" | "not" => each_schema(child, f),
            "anyOf" | "oneOf" | "allOf" => {
                if let Value::Array(branches) = child {
                    branches.iter_mut().for_each(|b| each_schema(b, f));
                }
            }
            _ => {}
        }
    }
}

/// The schema at `path` (see [`Tweaks`]).
fn node_at<'a>(root: &'a mut Value, path: &str) -> &'a mut Value {
    let mut node = root;
    for segment in path.split('.') {
        let (name, into_items) = match segment.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (segment, false),
        };
        node = node
            .get_mut("properties")
            .and_then(|p| p.get_mut(name))
            .unwrap_or_else(|| panic!("{path}: no property {name:?}"));
        if into_items {
            node = node
                .get_mut("items")
                .unwrap_or_else(|| panic!("{path}: {name:?} is not a list"));
        }
    }
    node
}

fn mark_keyed(list: &mut Value, path: &str, keys: &[&str]) {
    let items = list
        .get("items")
        .unwrap_or_else(|| panic!("{path}: not a list"));
    let required = items.get("required").and_then(Value::as_array);
    for key in keys {
        let is_required = required.is_some_and(|r| r.iter().any(|k| k == key));
        assert!(
            is_required,
            "{path}: list map key {key:?} must be a required field of the items"
        );
    }
    let obj = list.as_object_mut().expect("a list schema is an object");
    obj.insert("x-kubernetes-list-type".into(), json!("map"));
    obj.insert("x-kubernetes-list-map-keys".into(), json!(keys));
}

#[cfg(test)]
pub mod tests {
    //! Structural-schema checks over every CRD kubosh generates.

    use serde_json::Value;

    /// Every rule of a structural schema we can check without an apiserver, as a list of
    /// violations (`path: problem`).
    pub fn structural_problems(schema: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        walk(schema, "", &mut problems);
        problems
    }

    fn walk(node: &Value, path: &str, problems: &mut Vec<String>) {
        let Some(map) = node.as_object() else {
            problems.push(format!("{path}: schema is not an object"));
            return;
        };
        let mut report = |what: &str| problems.push(format!("{path}: {what}"));
        for key in map.keys() {
            if key.starts_with("x-") && !key.starts_with("x-kubernetes-") {
                report(&format!("unknown extension key {key}"));
            }
            if [
                "$ref",
                "$defs",
                "$schema",
                "definitions",
                "const",
                "uniqueItems",
            ]
            .contains(&key.as_str())
            {
                report(&format!("keyword {key} is not allowed in a CRD"));
            }
        }
        let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        let ty = map.get("type").and_then(Value::as_str);
        if ty.is_none() && !preserve && !int_or_string {
            report("no type (only int-or-string or preserve-unknown-fields may leave it out)");
        }
        if map.contains_key("properties") {
            if ty != Some("object") {
                report("properties without type: object");
            }
            if map.contains_key("additionalProperties") {
                report("additionalProperties beside properties");
            }
        }
        if ty == Some("object") && !map.contains_key("properties") && !preserve {
            match map.get("additionalProperties") {
                Some(Value::Object(_)) => {}
                _ => report("object without properties must preserve unknown fields or be a map"),
            }
        }
        if ty == Some("array") && !map.contains_key("items") {
            report("array without items");
        }
        for junctor in ["anyOf", "oneOf", "allOf", "not"] {
            if map.contains_key(junctor) {
                // Kubernetes allows value validations under junctors, but nothing that
                // declares structure; kubosh needs none at all.
                report(&format!("{junctor} present"));
            }
        }
        if let Some(Value::Object(props)) = map.get("properties") {
            for (name, child) in props {
                walk(child, &format!("{path}.{name}"), problems);
            }
        }
        if let Some(items) = map.get("items") {
            walk(items, &format!("{path}[]"), problems);
        }
        if let Some(additional @ Value::Object(_)) = map.get("additionalProperties") {
            walk(additional, &format!("{path}{{}}"), problems);
        }
        if map.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
            let required = map
                .get("items")
                .and_then(|i| i.get("required"))
                .and_then(Value::as_array);
            let keys = map
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array);
            match (keys, required) {
                (Some(keys), Some(required)) if keys.iter().all(|k| required.contains(k)) => {}
                _ => problems.push(format!("{path}: list-map keys are not required fields")),
            }
        }
    }

    #[test]
    fn reflow_joins_lines_but_keeps_paragraphs_and_items() {
        assert_eq!(
            super::reflow("One\nsentence.\n\nItems:\n- a\n- b\n  continued"),
            "One sentence.\n\nItems:\n- a\n- b continued"
        );
    }

    #[test]
    fn the_checker_catches_what_it_should() {
        let bad = serde_json::json!({
            "type": "object",
            "properties": {
                "a": {"type": "object", "properties": {"b": {"type": "string"}},
                      "additionalProperties": false},
                "c": {"x-kubosh-format": "version", "x-kubernetes-int-or-string": true},
                "d": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "e": {"type": "object"},
            }
        });
        let problems = structural_problems(&bad);
        assert_eq!(problems.len(), 5, "{problems:#?}");
    }
}
