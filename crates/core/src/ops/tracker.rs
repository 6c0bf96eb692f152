//! The variable look-up side of interpolation: the document's `variables:` definitions and
//! bosh-cli's `varsTracker` (which records missing and used names and resolves definitions'
//! `options` before their values count as found).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashSet};

use serde_json::{Map, Value};

use super::gofmt;
use super::interpolate::{InterpolationError, interpolate_node};
use super::patch::{self, PatchError};
use super::pointer::{Pointer, Token};

/// How deep variable definitions may refer to each other through their `options`.
const MAX_DEFINITION_DEPTH: usize = 64;
/// How many variable look-ups one interpolation may make (guards against blow-up through
/// definitions that share dependencies).
const MAX_LOOKUPS: usize = 100_000;

/// One entry of the document's `variables:` section.
pub(super) struct Definition {
    pub(super) name: String,
    pub(super) kind: String,
    pub(super) options: Option<Value>,
}

pub(super) fn definitions(doc: &Value) -> Result<Vec<Definition>, InterpolationError> {
    let bad = |msg: String| InterpolationError::MalformedDefinitions(msg);
    let section = match doc.as_object().and_then(|m| m.get("variables")) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(bad(format!(
                "expected 'variables' to be a list, found '{}'",
                gofmt::type_name(other)
            )));
        }
    };
    let text = |v: Option<&Value>, field: &str, i: usize| -> Result<String, InterpolationError> {
        match v {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(Value::Bool(b)) => Ok(b.to_string()),
            Some(other) => Err(bad(format!(
                "expected variables[{i}].{field} to be a string, found '{}'",
                gofmt::type_name(other)
            ))),
        }
    };
    let mut defs = Vec::with_capacity(section.len());
    for (i, item) in section.iter().enumerate() {
        let map = match item {
            Value::Object(map) => map,
            Value::Null => continue,
            other => {
                return Err(bad(format!(
                    "expected variables[{i}] to be a map, found '{}'",
                    gofmt::type_name(other)
                )));
            }
        };
        defs.push(Definition {
            name: text(map.get("name"), "name", i)?,
            kind: text(map.get("type"), "type", i)?,
            options: map.get("options").filter(|v| !v.is_null()).cloned(),
        });
    }
    Ok(defs)
}

pub(super) struct Shared<'a> {
    values: &'a Map<String, Value>,
    /// Definition names, in section order.
    names: Vec<&'a str>,
    /// Definition options, by position. Upstream interpolates them in place (they are Go
    /// maps), so what one look-up substituted is what later look-ups see; kept here.
    options: RefCell<Vec<Option<Value>>>,
    lookups: &'a Cell<usize>,
}

impl<'a> Shared<'a> {
    pub(super) fn new(
        values: &'a Map<String, Value>,
        defs: &'a [Definition],
        lookups: &'a Cell<usize>,
    ) -> Self {
        Shared {
            values,
            names: defs.iter().map(|d| d.name.as_str()).collect(),
            options: RefCell::new(defs.iter().map(|d| d.options.clone()).collect()),
            lookups,
        }
    }
}

/// bosh-cli's `varsTracker`: looks variables up, records missing and used names, and
/// checks definitions' options (which must themselves be resolvable).
pub(super) struct Tracker<'s, 'a> {
    shared: &'s Shared<'a>,
    /// Definitions being resolved, outermost first (for recursion detection).
    visiting: Vec<String>,
    /// Variables looked up and not found (top-level names).
    pub(super) missing: BTreeSet<String>,
    /// Every variable looked up.
    pub(super) visited_all: HashSet<String>,
}

impl<'s, 'a> Tracker<'s, 'a> {
    pub(super) fn new(shared: &'s Shared<'a>, visiting: Vec<String>) -> Self {
        Tracker {
            shared,
            visiting,
            missing: BTreeSet::new(),
            visited_all: HashSet::new(),
        }
    }

    /// The value of top-level variable `name`, if it has one.
    pub(super) fn get(&mut self, name: &str) -> Result<Option<Value>, InterpolationError> {
        self.visited_all.insert(name.to_string());
        if self.visiting.iter().any(|v| v == name) {
            return Err(InterpolationError::Recursion);
        }
        let count = self.shared.lookups.get() + 1;
        self.shared.lookups.set(count);
        if count > MAX_LOOKUPS || self.visiting.len() >= MAX_DEFINITION_DEPTH {
            return Err(InterpolationError::TooDeep);
        }

        // The first definition of that name, as upstream's `Find`.
        let position = self.shared.names.iter().position(|n| *n == name);
        let options = position.and_then(|i| self.shared.options.borrow().get(i).cloned().flatten());
        if let (Some(i), Some(options)) = (position, options) {
            let in_place = matches!(options, Value::Object(_) | Value::Array(_));
            let mut visiting = self.visiting.clone();
            visiting.push(name.to_string());
            let mut scoped = Tracker::new(self.shared, visiting);
            let done = interpolate_node(options, &mut scoped).map_err(|e| {
                InterpolationError::DefinitionOptions {
                    name: name.to_string(),
                    source: Box::new(e),
                }
            })?;
            if in_place && let Some(slot) = self.shared.options.borrow_mut().get_mut(i) {
                *slot = Some(done);
            }
            // Upstream: a definition whose options need a missing variable is itself not
            // found, and (quirk kept) not reported as missing.
            if !scoped.missing.is_empty() {
                return Ok(None);
            }
        }

        match self.shared.values.get(name) {
            Some(v) => Ok(Some(v.clone())),
            None => {
                self.missing.insert(name.to_string());
                Ok(None)
            }
        }
    }

    /// bosh-cli's `varsLookup.Get`: `a.b.0` is variable `a`, then pointer `/b/0`.
    pub(super) fn lookup(&mut self, full: &str) -> Result<Option<Value>, InterpolationError> {
        let (first, rest) = match full.split_once('.') {
            Some((first, rest)) => (first, Some(rest)),
            None => (full, None),
        };
        let Some(value) = self.get(first)? else {
            return Ok(None);
        };
        let Some(rest) = rest else {
            return Ok(Some(value));
        };
        let pointer = Pointer::parse(&format!("/{}", rest.replace('.', "/")))
            .map_err(|e| PatchError::Other(e.to_string()))?;
        match patch::find(&value, &pointer) {
            Ok(found) => Ok(Some(found)),
            Err(_) => {
                // Retry with indexes read as map keys (`((a.0))` on `{"0": ...}`).
                let as_keys = pointer
                    .tokens()
                    .iter()
                    .map(|t| match t {
                        Token::Index { index, .. } => Token::Key {
                            key: index.to_string(),
                            optional: false,
                        },
                        other => other.clone(),
                    })
                    .collect();
                Ok(Some(patch::find(&value, &Pointer::from_tokens(as_keys))?))
            }
        }
    }
}
