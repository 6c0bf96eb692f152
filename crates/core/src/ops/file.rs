//! Ops files: a YAML list of `{type, path, value, absent, error}` operations, read and
//! applied the way `bosh int -o FILE` does (bosh-cli `cmd/opts/ops_file_arg.go` on top of
//! go-patch `patch/op_definition.go` and `patch/descriptive_op.go`).

use serde_json::{Map, Value};

use super::patch::{self, PatchError};
use super::pointer::Pointer;
use kubosh_base::yaml::{self, YamlError};

/// An ops file that could not be read or applied.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The text is not YAML.
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// The YAML is not a list of operation maps.
    #[error("Deserializing ops file '{origin}': {message}")]
    Deserialize {
        /// The file, as the caller named it.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// An operation is malformed (unknown type, missing path or value, bad pointer). The
    /// message is go-patch's, including its JSON rendering of the operation.
    #[error("Building ops: {message}")]
    Build {
        /// The file, as the caller named it.
        origin: String,
        /// The operation's position in the file, from 0.
        index: usize,
        /// go-patch's text, e.g. `Replace operation [0]: Missing value within\n{...}`.
        message: String,
    },
    /// An operation failed on the document.
    #[error("Error 'operation [{index}] in {origin} failed': {}", described(.description, .source))]
    Apply {
        /// The file, as the caller named it.
        origin: String,
        /// The operation's position in the file, from 0.
        index: usize,
        /// The operation's own `error:` text, if it has one.
        description: Option<String>,
        /// go-patch's reason.
        source: Box<PatchError>,
    },
}

fn described(description: &Option<String>, source: &PatchError) -> String {
    match description {
        Some(d) => format!("Error '{d}': {source}"),
        None => source.to_string(),
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Replace {
        path: Pointer,
        value: Value,
    },
    Remove {
        path: Pointer,
    },
    Test {
        path: Pointer,
        value: Value,
        absent: bool,
    },
}

#[derive(Debug, Clone)]
struct Op {
    kind: Kind,
    description: Option<String>,
}

/// A parsed ops file: operations in order, plus the name errors report it by.
#[derive(Debug, Clone)]
pub struct OpsFile {
    origin: String,
    ops: Vec<Op>,
}

/// The fields of one operation as written (go-patch `OpDefinition`).
#[derive(Default)]
struct Definition {
    kind: String,
    path: Option<String>,
    value: Option<Value>,
    absent: Option<bool>,
    error: Option<String>,
}

impl OpsFile {
    /// Parses ops-file YAML text. `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<OpsFile, OpsError> {
        let value = yaml::parse_document(text, origin)?;
        OpsFile::from_value(value, origin)
    }

    /// Reads operations from an already-parsed document: a list (or nothing). Unknown keys on
    /// an operation (`name:`, `release:`, ...) are ignored, as go-patch does.
    pub fn from_value(value: Value, origin: &str) -> Result<OpsFile, OpsError> {
        let items = match value {
            Value::Null => Vec::new(),
            Value::Array(items) => items,
            other => {
                return Err(OpsError::Deserialize {
                    origin: origin.to_string(),
                    message: format!("expected a list of operations, found {}", kind_of(&other)),
                });
            }
        };
        // Like yaml.v2 + go-patch: the whole list is deserialized before any op is built.
        let defs = items
            .into_iter()
            .enumerate()
            .map(|(index, item)| definition(item, index))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|message| OpsError::Deserialize {
                origin: origin.to_string(),
                message,
            })?;
        let mut ops = Vec::with_capacity(defs.len());
        for (index, def) in defs.into_iter().enumerate() {
            let description = def.error.clone();
            let kind = build(&def, index, origin).map_err(|message| OpsError::Build {
                origin: origin.to_string(),
                index,
                message,
            })?;
            ops.push(Op { kind, description });
        }
        Ok(OpsFile {
            origin: origin.to_string(),
            ops,
        })
    }

    /// The name errors report this file by.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// How many operations the file holds.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the file holds no operations.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Applies the operations in order. On error the document is left unchanged.
    pub fn apply(&self, doc: &mut Value) -> Result<(), OpsError> {
        let mut work = doc.clone();
        self.apply_to_copy(&mut work)?;
        *doc = work;
        Ok(())
    }

    /// Applies the operations to a document the caller throws away on error.
    fn apply_to_copy(&self, work: &mut Value) -> Result<(), OpsError> {
        for (index, op) in self.ops.iter().enumerate() {
            let result = match &op.kind {
                Kind::Replace { path, value } => patch::replace(work, path, value),
                Kind::Remove { path } => patch::remove(work, path),
                Kind::Test {
                    path, absent: true, ..
                } => patch::test_absent(work, path),
                Kind::Test { path, value, .. } => patch::test_value(work, path, value),
            };
            result.map_err(|source| OpsError::Apply {
                origin: self.origin.clone(),
                index,
                description: op.description.clone(),
                source: Box::new(source),
            })?;
        }
        Ok(())
    }
}

/// Applies several ops files in order, like repeated `-o` flags. On error the document is
/// left unchanged.
pub fn apply_all(files: &[OpsFile], doc: &mut Value) -> Result<(), OpsError> {
    let mut work = doc.clone();
    for file in files {
        file.apply_to_copy(&mut work)?;
    }
    *doc = work;
    Ok(())
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// A scalar as yaml.v2 would put it in a Go string field; `null` means "not given".
fn scalar_text(value: Value, field: &str, index: usize) -> Result<Option<String>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        Value::Bool(b) => Ok(Some(b.to_string())),
        Value::Number(n) => Ok(Some(n.to_string())),
        other => Err(format!(
            "operation [{index}]: expected '{field}' to be a string, found {}",
            kind_of(&other)
        )),
    }
}

fn definition(item: Value, index: usize) -> Result<Definition, String> {
    let map = match item {
        Value::Null => return Ok(Definition::default()),
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "operation [{index}]: expected a map, found {}",
                kind_of(&other)
            ));
        }
    };
    let mut def = Definition::default();
    for (key, value) in map {
        match key.as_str() {
            "type" => def.kind = scalar_text(value, "type", index)?.unwrap_or_default(),
            "path" => def.path = scalar_text(value, "path", index)?,
            "error" => def.error = scalar_text(value, "error", index)?,
            // yaml.v2 leaves a pointer field nil for an explicit null.
            "value" => def.value = (!value.is_null()).then_some(value),
            "absent" => {
                def.absent = match value {
                    Value::Null => None,
                    Value::Bool(b) => Some(b),
                    other => {
                        return Err(format!(
                            "operation [{index}]: expected 'absent' to be a boolean, found {}",
                            kind_of(&other)
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(def)
}

fn build(def: &Definition, index: usize, origin: &str) -> Result<Kind, String> {
    let within = || format!(" within\n{}", render(def, index, origin));
    let path = |op: &str| -> Result<Pointer, String> {
        let Some(text) = &def.path else {
            return Err(format!(
                "{op} operation [{index}]: Missing path{}",
                within()
            ));
        };
        Pointer::parse(text)
            .map_err(|e| format!("{op} operation [{index}]: Invalid path: {e}{}", within()))
    };
    match def.kind.as_str() {
        "replace" => {
            if def.path.is_none() {
                return Err(format!(
                    "Replace operation [{index}]: Missing path{}",
                    within()
                ));
            }
            let Some(value) = &def.value else {
                return Err(format!(
                    "Replace operation [{index}]: Missing value{}",
                    within()
                ));
            };
            Ok(Kind::Replace {
                path: path("Replace")?,
                value: value.clone(),
            })
        }
        "remove" => {
            if def.path.is_none() {
                return Err(format!(
                    "Remove operation [{index}]: Missing path{}",
                    within()
                ));
            }
            if def.value.is_some() {
                return Err(format!(
                    "Remove operation [{index}]: Cannot specify value{}",
                    within()
                ));
            }
            Ok(Kind::Remove {
                path: path("Remove")?,
            })
        }
        "test" => {
            if def.path.is_none() {
                return Err(format!(
                    "Test operation [{index}]: Missing path{}",
                    within()
                ));
            }
            if def.value.is_none() && def.absent.is_none() {
                return Err(format!(
                    "Test operation [{index}]: Missing value or absent{}",
                    within()
                ));
            }
            Ok(Kind::Test {
                path: path("Test")?,
                value: def.value.clone().unwrap_or(Value::Null),
                absent: def.absent.unwrap_or(false),
            })
        }
        other => Err(format!(
            "Unknown operation [{index}] with type '{other}'{}",
            within()
        )),
    }
}

/// go-patch's indented JSON of an operation, value redacted. As in the CLI, `Error` is the
/// "operation [i] in FILE failed" text the CLI sets on every operation.
fn render(def: &Definition, index: usize, origin: &str) -> String {
    let mut map = Map::new();
    if !def.kind.is_empty() {
        map.insert("Type".into(), Value::String(def.kind.clone()));
    }
    if let Some(path) = &def.path {
        map.insert("Path".into(), Value::String(path.clone()));
    }
    if def.value.is_some() {
        map.insert("Value".into(), Value::String("<redacted>".into()));
    }
    if let Some(absent) = def.absent {
        map.insert("Absent".into(), Value::Bool(absent));
    }
    map.insert(
        "Error".into(),
        Value::String(format!("operation [{index}] in {origin} failed")),
    );
    serde_json::to_string_pretty(&Value::Object(map))
        .unwrap_or_else(|_| "<unknown>".into())
        .replace('&', "\\u0026")
}
