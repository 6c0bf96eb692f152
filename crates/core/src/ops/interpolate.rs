//! `((variable))` interpolation with the semantics of bosh-cli `director/template/template.go`.
//!
//! - A string that is exactly one placeholder becomes the variable's value, with its type.
//! - Placeholders inside a longer string are replaced by the value's text; only strings and
//!   integers may be embedded (anything else is an error, as upstream).
//! - `((name.sub.0))` looks into a variable's value with a go-patch pointer (`/sub/0`,
//!   retried as keys `/sub/0` if the index form fails).
//! - `((!name))` is `((name))`. Map keys are interpolated too.
//! - Variable values are not interpolated again.
//! - Variables missing a value are left in place; the strict mode reports them all at once.
//! - Definitions in the document's `variables:` section whose value is provided are removed
//!   from it, as `bosh int` does; the ones not provided count as missing.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::gofmt;
use super::patch::{self, PatchError};
use super::pointer::{Pointer, Token};
use super::tracker::{Shared, Tracker, definitions};
use super::vars::Vars;

/// The placeholder pattern of bosh-cli (`\(\( ?(!?[-/\.\w\pL]+) ?\)\)`, Go's `\w` is ASCII).
static PLACEHOLDER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\(\( ?(!?[-/.0-9A-Za-z_\p{L}]+) ?\)\)").expect("placeholder regex is valid")
});
static WHOLE_PLACEHOLDER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\A\(\( ?(!?[-/.0-9A-Za-z_\p{L}]+) ?\)\)\z").expect("placeholder regex is valid")
});

/// What to do about placeholders no variable is given for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MissingVars {
    /// Leave them in place (`bosh int` without `--var-errs`).
    #[default]
    Leave,
    /// Fail, listing every missing variable (`--var-errs`).
    Error,
}

/// Interpolation settings beyond the missing-variable mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InterpolateOptions {
    /// What to do about missing variables.
    pub missing: MissingVars,
    /// Fail when a given variable is never used (`--var-errs-unused`).
    pub error_on_unused: bool,
}

/// The outcome of a successful interpolation.
#[derive(Debug, Clone, PartialEq)]
pub struct Interpolated {
    /// The interpolated document.
    pub value: Value,
    /// Variables with no value (top-level names, sorted), left in place.
    pub missing: Vec<String>,
    /// Given variables nothing used (sorted).
    pub unused: Vec<String>,
}

/// Interpolation failures. Texts follow bosh-cli's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterpolationError {
    /// Strict checks failed: `Expected to find variables: a\nb` and/or
    /// `Expected to use variables: c`.
    #[error("{}", vars_text(.missing, .unused))]
    Variables {
        /// Missing variables (sorted); empty unless the missing check is on.
        missing: Vec<String>,
        /// Unused variables (sorted); empty unless the unused check is on.
        unused: Vec<String>,
    },
    /// Looking a variable up failed (e.g. its value has no such sub-key).
    #[error("Finding variable '{name}': {source}")]
    Finding {
        /// The placeholder's name, e.g. `cert.ca`.
        name: String,
        /// Why.
        source: Box<InterpolationError>,
    },
    /// A sub-key or index look-up into a variable's value failed.
    #[error(transparent)]
    Patch(#[from] PatchError),
    /// A map, list, float, boolean or null embedded in a longer string.
    #[error(
        "Invalid type '{type_name}' for value '{value}' and variable '{name}'. Supported types for interpolation within a string are integers and strings."
    )]
    InvalidType {
        /// The variable's name.
        name: String,
        /// Go's name for the value's type.
        type_name: &'static str,
        /// Go's rendering of the value.
        value: String,
    },
    /// A map key became a map or a list.
    #[error("Invalid type '{type_name}' for value '{value}' used as a map key")]
    InvalidKey {
        /// Go's name for the value's type.
        type_name: &'static str,
        /// Go's rendering of the value.
        value: String,
    },
    /// Definitions refer to each other in a cycle through their `options`.
    #[error("Detected recursion")]
    Recursion,
    /// Definitions refer to each other too deeply, or too many look-ups were needed.
    #[error("Variable definitions refer to each other too deeply")]
    TooDeep,
    /// Interpolating a definition's `options` failed.
    #[error("Interpolating variable '{name}' definition options: {source}")]
    DefinitionOptions {
        /// The definition's name.
        name: String,
        /// Why.
        source: Box<InterpolationError>,
    },
    /// Resolving the `variables:` section failed.
    #[error("Getting all variables from variable definitions sections: {0}")]
    Definitions(Box<InterpolationError>),
    /// The `variables:` section is not a list of `{name, type, options}` maps.
    #[error("Reading variable definitions: {0}")]
    MalformedDefinitions(String),
}

impl InterpolationError {
    /// The error as the BOSH CLI prints it (bosh-cli's `MultilineError`): a wrapping message
    /// on a line of its own with its cause indented under it, the strict checks' names as
    /// bulleted lists (`- Expected to find variables:` / `    - name`).
    pub fn multiline(&self) -> String {
        self.as_go_error().multiline()
    }

    /// The shape bosh-cli's error has (which errors wrap which, which are lists).
    fn as_go_error(&self) -> GoError {
        let wrap = |message: String, cause: &InterpolationError| {
            GoError::Wrap(message, Box::new(cause.as_go_error()))
        };
        match self {
            InterpolationError::Variables { missing, unused } => {
                let list = |head: &str, names: &[String]| {
                    let names = names.iter().map(|n| GoError::Text(n.clone())).collect();
                    GoError::Wrap(head.to_string(), Box::new(GoError::List(names)))
                };
                let mut checks = Vec::new();
                if !missing.is_empty() {
                    checks.push(list("Expected to find variables", missing));
                }
                if !unused.is_empty() {
                    checks.push(list("Expected to use variables", unused));
                }
                GoError::List(checks)
            }
            InterpolationError::Finding { name, source } => {
                wrap(format!("Finding variable '{name}'"), source)
            }
            InterpolationError::DefinitionOptions { name, source } => wrap(
                format!("Interpolating variable '{name}' definition options"),
                source,
            ),
            InterpolationError::Definitions(source) => wrap(
                "Getting all variables from variable definitions sections".into(),
                source,
            ),
            other => GoError::Text(other.to_string()),
        }
    }
}

/// An error as bosh-utils builds them: plain text, a message wrapping a cause
/// (`ComplexError`), or a list (`MultiError`).
enum GoError {
    Text(String),
    Wrap(String, Box<GoError>),
    List(Vec<GoError>),
}

impl GoError {
    /// bosh-cli's `MultilineError`.
    fn multiline(&self) -> String {
        let mut out = Vec::new();
        self.lines("", "", &mut out);
        out.join("\n")
    }

    /// `prefixingMultilineError`: `prefix` before each entry, `bullet` before this one.
    fn lines(&self, prefix: &str, bullet: &str, out: &mut Vec<String>) {
        let inner = format!("{prefix}{}", " ".repeat(bullet.len()));
        match self {
            GoError::Text(text) => out.push(format!("{prefix}{bullet}{text}")),
            GoError::Wrap(message, cause) => {
                out.push(format!("{prefix}{bullet}{message}:"));
                cause.lines(&format!("{inner}  "), "", out);
            }
            GoError::List(items) => {
                for item in items {
                    item.lines(&inner, "- ", out);
                }
            }
        }
    }
}

fn vars_text(missing: &[String], unused: &[String]) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!(
            "Expected to find variables: {}",
            missing.join("\n")
        ));
    }
    if !unused.is_empty() {
        parts.push(format!("Expected to use variables: {}", unused.join("\n")));
    }
    parts.join("\n")
}

/// Interpolates `doc` with `vars`, leaving or rejecting missing variables per `mode`.
pub fn interpolate(
    doc: &Value,
    vars: &Vars,
    mode: MissingVars,
) -> Result<Value, InterpolationError> {
    let options = InterpolateOptions {
        missing: mode,
        error_on_unused: false,
    };
    interpolate_with(doc, vars, &options).map(|done| done.value)
}

/// Interpolates `doc` with `vars` and reports what was missing or unused.
pub fn interpolate_with(
    doc: &Value,
    vars: &Vars,
    options: &InterpolateOptions,
) -> Result<Interpolated, InterpolationError> {
    let values = vars.resolved();
    let defs = definitions(doc)?;
    let lookups = Cell::new(0);
    let shared = Shared::new(&values, &defs, &lookups);
    let mut tracker = Tracker::new(&shared, Vec::new());

    // Definitions first, in order, so that their options are resolved (upstream: a
    // poor man's dependency order).
    for def in defs.iter().filter(|d| !d.kind.is_empty()) {
        tracker
            .get(&def.name)
            .map_err(|e| InterpolationError::Definitions(Box::new(e)))?;
    }

    let mut value = interpolate_node(doc.clone(), &mut tracker)?;

    let mut found = Vec::new();
    for def in &defs {
        let got = tracker
            .get(&def.name)
            .map_err(|e| InterpolationError::Definitions(Box::new(e)))?;
        if got.is_some() {
            found.push(def.name.clone());
        }
    }
    for name in found {
        let path = Pointer::from_tokens(vec![
            Token::Key {
                key: "variables".into(),
                optional: false,
            },
            Token::Matching {
                key: "name".into(),
                value: name,
                optional: false,
                modifiers: Vec::new(),
            },
        ]);
        patch::remove(&mut value, &path)?;
    }

    let missing: Vec<String> = tracker.missing.iter().cloned().collect();
    let mut unused: Vec<String> = values
        .keys()
        .filter(|name| !tracker.visited_all.contains(*name))
        .cloned()
        .collect();
    unused.sort();

    let report_missing = options.missing == MissingVars::Error && !missing.is_empty();
    let report_unused = options.error_on_unused && !unused.is_empty();
    if report_missing || report_unused {
        return Err(InterpolationError::Variables {
            missing: if report_missing { missing } else { Vec::new() },
            unused: if report_unused { unused } else { Vec::new() },
        });
    }
    Ok(Interpolated {
        value,
        missing,
        unused,
    })
}

/// Every placeholder name in `doc` (values and map keys), `!` stripped, in document order,
/// each once. Names are whole (`cert.ca`); see [`variable_of`] for the variable.
pub fn placeholders(doc: &Value) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    collect(doc, &mut seen, &mut out);
    out
}

/// The variable a placeholder name refers to: the part before the first `.`.
pub fn variable_of(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

fn collect(value: &Value, seen: &mut HashSet<String>, out: &mut Vec<String>) {
    let add = |s: &str, seen: &mut HashSet<String>, out: &mut Vec<String>| {
        for name in extract_names(s) {
            if seen.insert(name.clone()) {
                out.push(name);
            }
        }
    };
    match value {
        Value::String(s) => add(s, seen, out),
        Value::Array(items) => items.iter().for_each(|v| collect(v, seen, out)),
        Value::Object(map) => {
            for (k, v) in map {
                add(k, seen, out);
                collect(v, seen, out);
            }
        }
        _ => {}
    }
}

fn extract_names(s: &str) -> Vec<String> {
    PLACEHOLDER
        .captures_iter(s)
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str().trim_start_matches('!').to_string())
        .collect()
}

pub(super) fn interpolate_node(
    node: Value,
    tracker: &mut Tracker,
) -> Result<Value, InterpolationError> {
    match node {
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (key, value) in map {
                let value = interpolate_node(value, tracker)?;
                let original = key.clone();
                let key = match interpolate_string(key, tracker)? {
                    Value::String(s) => s,
                    Value::Null => "null".into(),
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) => n.to_string(),
                    other => {
                        return Err(InterpolationError::InvalidKey {
                            type_name: gofmt::type_name(&other),
                            value: gofmt::value(&other),
                        });
                    }
                };
                // Upstream renames keys inside the map it is walking: a renamed entry
                // overwrites one whose key did not change, whichever comes first.
                if key == original && out.contains_key(&key) {
                    continue;
                }
                out.insert(key, value);
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => items
            .into_iter()
            .map(|item| interpolate_node(item, tracker))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::String(s) => interpolate_string(s, tracker),
        other => Ok(other),
    }
}

fn interpolate_string(s: String, tracker: &mut Tracker) -> Result<Value, InterpolationError> {
    let names = extract_names(&s);
    let mut current = s;
    for name in names {
        let found = tracker
            .lookup(&name)
            .map_err(|e| InterpolationError::Finding {
                name: name.clone(),
                source: Box::new(e),
            })?;
        let Some(value) = found else { continue };
        // The whole string is one placeholder: keep the value's type.
        if WHOLE_PLACEHOLDER.is_match(&current) {
            return Ok(value);
        }
        let text = match &value {
            Value::String(s) => s.clone(),
            Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            other => {
                return Err(InterpolationError::InvalidType {
                    name,
                    type_name: gofmt::type_name(other),
                    value: gofmt::value(other),
                });
            }
        };
        // Upstream replaces only the exact `((name))` / `((!name))` spellings.
        current = current
            .replace(&format!("(({name}))"), &text)
            .replace(&format!("((!{name}))"), &text);
    }
    Ok(Value::String(current))
}
