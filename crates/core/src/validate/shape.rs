//! Shape checks: every key, type and format of a document against the JSON schema derived
//! from the typed model, so the Rust types stay the one description of a document's shape.
//!
//! Unlike deserializing, this walks the whole document and reports every problem with its
//! path. Keys BOSH does not know are warnings (the Director ignores them), with a suggestion
//! when they look like a typo.

use serde_json::{Map, Value};

use super::problem::{Document, Path, Problems, Segment};
use crate::manifest::{Quantity, WatchTime};

/// A key the typed model does not know but BOSH rejects (a v1 leftover such as `networks`
/// in a deployment manifest): an error with its explanation, where other unknown keys get
/// the "is ignored" warning.
#[derive(Debug, Clone, Copy)]
pub struct RejectedKey {
    /// Path of the mapping holding the key, `"[]"` standing for any list index.
    pub within: &'static [&'static str],
    /// The key.
    pub key: &'static str,
    /// Why BOSH rejects it and what to write instead.
    pub message: &'static str,
}

impl RejectedKey {
    fn matches(&self, parent: &Path, key: &str) -> bool {
        let segments = parent.segments();
        key == self.key
            && segments.len() == self.within.len()
            && segments.iter().zip(self.within).all(|(s, w)| match s {
                Segment::Index(_) => *w == "[]",
                Segment::Key(k) => k == w,
            })
    }
}

/// A schema plus the document kind it describes, ready to check values against.
pub struct ShapeChecker {
    root: Value,
    document: Document,
    rejected: &'static [RejectedKey],
}

impl ShapeChecker {
    /// A checker for the type `T`.
    pub fn for_type<T: schemars::JsonSchema>(document: Document) -> ShapeChecker {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
        ShapeChecker {
            root: schema.to_value(),
            document,
            rejected: &[],
        }
    }

    /// This checker, reporting `keys` as errors rather than as ignored unknown keys.
    pub fn rejecting(self, keys: &'static [RejectedKey]) -> ShapeChecker {
        ShapeChecker {
            rejected: keys,
            ..self
        }
    }

    /// Checks `value`, recording every problem.
    pub fn check(&self, value: &Value, problems: &mut Problems) {
        self.walk(&self.root, value, &Path::root(), problems);
    }

    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        let mut s = schema;
        // A $ref chain is at most a few links long; bound it anyway.
        for _ in 0..8 {
            match s
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
            {
                Some(name) => match self.root.get("$defs").and_then(|d| d.get(name)) {
                    Some(target) => s = target,
                    None => return s,
                },
                None => return s,
            }
        }
        s
    }

    fn walk(&self, schema: &Value, value: &Value, path: &Path, problems: &mut Problems) {
        let schema = self.resolve(schema);
        if let Some(branches) = schema.get("anyOf").and_then(Value::as_array) {
            return self.walk_any_of(branches, value, path, problems);
        }
        if let Some(branches) = schema.get("oneOf").and_then(Value::as_array) {
            return self.walk_choice(branches, value, path, problems);
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
            if !allowed.contains(value) {
                problems.error(self.document, path.clone(), one_of_message(allowed, value));
            }
            return;
        }
        if let Some(c) = schema.get("const") {
            if c != value {
                problems.error(
                    self.document,
                    path.clone(),
                    one_of_message(std::slice::from_ref(c), value),
                );
            }
            return;
        }
        if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            return self.check_format(schema, value, path, problems);
        }
        if !type_matches(schema.get("type"), value) {
            problems.error(
                self.document,
                path.clone(),
                format!(
                    "expected {}, found {}",
                    expected_text(schema.get("type")),
                    describe(value)
                ),
            );
            return;
        }
        match value {
            Value::Object(map)
                if schema.get("x-kubernetes-preserve-unknown-fields")
                    != Some(&Value::Bool(true)) =>
            {
                self.walk_object(schema, map, path, problems);
            }
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.walk(item_schema, item, &path.index(i), problems);
                    }
                }
            }
            Value::Number(n) => self.check_number_range(schema, n, path, problems),
            _ => {}
        }
    }

    fn walk_any_of(&self, branches: &[Value], value: &Value, path: &Path, problems: &mut Problems) {
        let non_null: Vec<&Value> = branches
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) != Some("null"))
            .collect();
        if value.is_null() && non_null.len() < branches.len() {
            return;
        }
        let mut best: Option<Problems> = None;
        for branch in &non_null {
            let mut attempt = Problems::default();
            self.walk(branch, value, path, &mut attempt);
            if !attempt.has_errors() {
                problems.extend(attempt);
                return;
            }
            if best.as_ref().is_none_or(|b| attempt.len() < b.len()) {
                best = Some(attempt);
            }
        }
        if let Some(b) = best {
            problems.extend(b);
        }
    }

    fn walk_choice(&self, branches: &[Value], value: &Value, path: &Path, problems: &mut Problems) {
        let consts: Vec<Value> = branches
            .iter()
            .filter_map(|b| {
                b.get("const")
                    .cloned()
                    .or_else(|| b.get("enum")?.get(0).cloned())
            })
            .collect();
        if consts.len() == branches.len() {
            if !consts.contains(value) {
                problems.error(self.document, path.clone(), one_of_message(&consts, value));
            }
            return;
        }
        self.walk_any_of(branches, value, path, problems);
    }

    fn walk_object(
        &self,
        schema: &Value,
        map: &Map<String, Value>,
        path: &Path,
        problems: &mut Problems,
    ) {
        let empty = Map::new();
        let props = schema
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for key in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(key) {
                    problems.error(self.document, path.key(key), "is required");
                }
            }
        }
        let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
        for (key, v) in map {
            match props.get(key) {
                Some(prop_schema) => self.walk(prop_schema, v, &path.key(key), problems),
                None if closed => {
                    if let Some(r) = self.rejected.iter().find(|r| r.matches(path, key)) {
                        problems.error(self.document, path.key(key), r.message);
                        continue;
                    }
                    let known: Vec<&str> = props.keys().map(String::as_str).collect();
                    problems.warning(
                        self.document,
                        path.key(key),
                        unknown_key_message(key, &known),
                    );
                }
                None => {}
            }
        }
    }

    fn check_number_range(
        &self,
        schema: &Value,
        n: &serde_json::Number,
        path: &Path,
        problems: &mut Problems,
    ) {
        let max = match schema.get("format").and_then(Value::as_str) {
            Some("uint8") => Some(u64::from(u8::MAX)),
            Some("uint16") => Some(u64::from(u16::MAX)),
            Some("uint32") => Some(u64::from(u32::MAX)),
            _ => None,
        };
        let min = schema.get("minimum").and_then(Value::as_f64);
        let f = n.as_f64().unwrap_or(0.0);
        if min.is_some_and(|m| f < m) {
            problems.error(
                self.document,
                path.clone(),
                format!("must not be negative, found {n}"),
            );
        } else if let (Some(max), Some(v)) = (max, n.as_u64())
            && v > max
        {
            problems.error(
                self.document,
                path.clone(),
                format!("must be at most {max}, found {n}"),
            );
        }
    }

    fn check_format(&self, schema: &Value, value: &Value, path: &Path, problems: &mut Problems) {
        let format = schema
            .get("x-kubosh-format")
            .and_then(Value::as_str)
            .unwrap_or("");
        // Any number goes through the format's own parser, so 1.5 canaries read "expected a
        // whole number ..." rather than "expected a number or a string, found the number".
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                let expected = match format {
                    "quantity" => "a whole number or an integer percentage like \"25%\"",
                    "watch-time" => "milliseconds like 30000 or a range like \"5000-60000\"",
                    _ => "a number or a string",
                };
                problems.error(
                    self.document,
                    path.clone(),
                    format!("expected {expected}, found {}", describe(other)),
                );
                return;
            }
        };
        let result = match format {
            "quantity" => Quantity::parse(&text).map(drop).map_err(|e| e.to_string()),
            "watch-time" => WatchTime::parse(&text).map(drop).map_err(|e| e.to_string()),
            _ => Ok(()),
        };
        if let Err(message) = result {
            problems.error(
                self.document,
                path.clone(),
                with_variable_hint(message, value),
            );
        }
    }
}

fn type_matches(ty: Option<&Value>, value: &Value) -> bool {
    match ty {
        None => true,
        Some(Value::String(t)) => one_type_matches(t, value),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .any(|t| one_type_matches(t, value)),
        Some(_) => true,
    }
}

fn one_type_matches(t: &str, value: &Value) -> bool {
    match (t, value) {
        ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("string", Value::String(_)) => true,
        ("boolean", Value::Bool(_)) | ("null", Value::Null) | ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

fn expected_text(ty: Option<&Value>) -> String {
    let names: Vec<&str> = match ty {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => vec![],
    };
    let words: Vec<&str> = names
        .iter()
        .map(|t| match *t {
            "object" => "a mapping",
            "array" => "a list",
            "string" => "a string",
            "integer" => "a whole number",
            "number" => "a number",
            "boolean" => "true or false",
            _ => "a value",
        })
        .collect();
    if words.is_empty() {
        "a value".into()
    } else {
        words.join(" or ")
    }
}

/// Says what a value is, for messages: `a string "z1"`, `a list`, `nothing (null)`.
pub fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing (null)".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => {
            let shown: String = s.chars().take(60).collect();
            let ellipsis = if shown.len() < s.len() { "..." } else { "" };
            let base = format!("the string {shown:?}{ellipsis}");
            with_variable_hint(base, value)
        }
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a mapping".into(),
    }
}

fn with_variable_hint(message: String, value: &Value) -> String {
    match value.as_str().map(str::trim) {
        Some(s) if s.starts_with("((") && s.ends_with("))") => format!(
            "{message} (the variable {s} was not interpolated: give it with -v/-l, or in spec.vars)"
        ),
        _ => message,
    }
}

fn one_of_message(allowed: &[Value], value: &Value) -> String {
    let names: Vec<String> = allowed
        .iter()
        .map(|v| {
            v.as_str()
                .map(|s| format!("'{s}'"))
                .unwrap_or_else(|| v.to_string())
        })
        .collect();
    format!(
        "expected one of {}, found {}",
        names.join(", "),
        describe(value)
    )
}

fn unknown_key_message(key: &str, known: &[&str]) -> String {
    let suggestion = known
        .iter()
        .map(|k| (strsim::jaro_winkler(key, k), *k))
        .filter(|(score, _)| *score > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| format!("; did you mean '{k}'?"))
        .unwrap_or_default();
    format!("unknown key '{key}' is ignored{suggestion}")
}
