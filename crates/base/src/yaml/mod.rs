//! YAML in and out, as the BOSH CLI reads and writes it (go-yaml v2, YAML 1.1).
//!
//! Everything kubosh reads as YAML (manifests, cloud, runtime and CPI configs, ops files,
//! vars files, `-v` values, release and job manifests) goes through one reader ([`read`])
//! into a [`serde_json::Value`]: a tree that ops files, interpolation and validation walk,
//! and that the typed model is then built from. Plain scalars mean what they mean to
//! bosh-cli ([`resolve`]: `0644` is 420, `y` is true, `1e3` a float); mapping order is kept.
//! [`parse_document`] keeps what JSON cannot hold marked ([`mark`]: `y:` as a key, `.inf`),
//! for `kubosh interpolate` to write back exactly; [`parse_value`] gives the Director's view.
//! Everything kubosh writes as YAML goes through one writer ([`emit`]), byte for byte what
//! go-yaml v2's `Marshal` writes (sorted keys), so bosh-cli, kubectl and kubosh read it alike.

mod emit;
pub mod mark;
mod read;
pub mod resolve;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use mark::{NotJson, plain};
pub use read::{MAX_DEPTH, MAX_NODES, MAX_TEXT_BYTES};

/// A document that is not valid YAML, or a value that could not be written as YAML.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// The text is not valid YAML (the message carries line and column).
    #[error("{origin} is not valid YAML: {message}")]
    Parse {
        /// What was being read: a file name or a description such as "ops file".
        origin: String,
        /// The parser's explanation, with its location.
        message: String,
    },
    /// The document breaks one of the reader's limits (size, depth).
    #[error("{origin} cannot be read: {limit}")]
    Limit {
        /// What was being read.
        origin: String,
        /// Which limit, with its value and where in the text.
        limit: String,
    },
    /// The document holds a number JSON cannot (`.inf`, `.nan`) where the Director's view
    /// is asked for.
    #[error("{origin}: {source}")]
    NotJson {
        /// What was being read.
        origin: String,
        /// Where and what.
        source: NotJson,
    },
    /// The document is YAML but not of the type asked for.
    #[error("{origin}: {message}")]
    Shape {
        /// What was being read.
        origin: String,
        /// Where in the document (`jobs[0].name`) and what was expected.
        message: String,
    },
    /// A value could not be serialized.
    #[error("cannot write YAML: {0}")]
    Write(String),
}

/// Reads one YAML document as go-yaml v2 reads it into a generic tree, keeping non-string
/// keys and non-finite floats marked ([`mark`]). An empty document is `null`.
pub fn parse_document(text: &str, origin: &str) -> Result<Value, YamlError> {
    read::read(text).map_err(|e| {
        let origin = origin.to_string();
        let at = format!("at line {} column {}", e.line, e.column);
        match e.kind {
            read::ReadErrorKind::Syntax(message) | read::ReadErrorKind::Meaning(message) => {
                YamlError::Parse {
                    origin,
                    message: format!("{message} {at}"),
                }
            }
            read::ReadErrorKind::Limit(limit) => YamlError::Limit {
                origin,
                limit: format!("{} ({at})", beyond_limit(limit)),
            },
        }
    })
}

/// Reads one YAML document as the Director sees it: [`parse_document`], then [`plain`]
/// (non-string keys as their text; `.inf` and `.nan` refused). An empty document is `null`.
pub fn parse_value(text: &str, origin: &str) -> Result<Value, YamlError> {
    plain(parse_document(text, origin)?).map_err(|source| YamlError::NotJson {
        origin: origin.to_string(),
        source,
    })
}

/// Reads one YAML document into any deserializable type (through [`parse_value`]).
pub fn parse<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T, YamlError> {
    let value = parse_value(text, origin)?;
    serde_path_to_error::deserialize(value).map_err(|e| YamlError::Shape {
        origin: origin.to_string(),
        message: match e.path().to_string().as_str() {
            "." => e.inner().to_string(),
            path => format!("{path}: {}", e.inner()),
        },
    })
}

/// Which of the reader's limits a document breaks, named with the limit. The limits keep
/// a hostile document (an alias bomb, a deep nesting) from exhausting memory or stack; no
/// BOSH manifest, config or vars file comes near them (cf-deployment is ~40,000 nodes).
fn beyond_limit(limit: read::Limit) -> String {
    match limit {
        read::Limit::Nodes => format!(
            "it holds more than {MAX_NODES} YAML nodes (keys, values and list items, aliases \
             counted at their full size), the most kubosh reads in one document"
        ),
        read::Limit::Depth => {
            format!("it nests more than {MAX_DEPTH} levels deep, the most kubosh reads")
        }
        read::Limit::Text => format!(
            "its values hold more than {} MiB of text (aliases counted at their full size), \
             the most kubosh reads in one document",
            MAX_TEXT_BYTES >> 20
        ),
    }
}

/// Writes a value as a YAML document, byte for byte as go-yaml v2 `Marshal`s the same
/// generic tree (`bosh int`'s output): keys sorted, marked scalars written back as the
/// scalars they stand for.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, YamlError> {
    let value = serde_json::to_value(value).map_err(|e| YamlError::Write(e.to_string()))?;
    Ok(emit::to_string(&value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_mapping_order_and_scalars() {
        let v = parse_value("b: 1\na: '2'\nc: [true, ~, 1.5]\n", "test").unwrap();
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"b":1,"a":"2","c":[true,null,1.5]}"#
        );
    }

    #[test]
    fn reports_where_the_text_is_broken() {
        let err = parse_value("a: [1, 2\nb: 3\n", "manifest.yml").unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("manifest.yml is not valid YAML"), "{text}");
    }

    #[test]
    fn a_document_beyond_a_limit_names_the_limit() {
        let text: String = (0..130_000).map(|i| format!("k{i}: v\n")).collect();
        let message = parse_value(&text, "vars.yml").unwrap_err().to_string();
        assert!(
            message.starts_with("vars.yml cannot be read: it holds more than 250000 YAML nodes"),
            "{message}"
        );
        assert!(!message.contains("Nodes {"), "{message}");
        let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        let message = parse_value(&deep, "deep.yml").unwrap_err().to_string();
        assert!(
            message.contains("nests more than 64 levels deep"),
            "{message}"
        );
    }

    #[test]
    fn round_trips_through_text() {
        let v = parse_value("x:\n  y: [1, two]\n  z: \"((var))\"\n", "test").unwrap();
        let again = parse_value(&to_string(&v).unwrap(), "again").unwrap();
        assert_eq!(v, again);
    }
}
