//! YAML text in and out, on top of `serde-saphyr`.
//!
//! Everything kubosh reads as YAML (manifests, cloud configs, ops files, vars files) first
//! becomes a [`serde_json::Value`]: a plain tree that ops files, interpolation and validation
//! can walk, and that the typed model is then built from. Mapping order is preserved.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

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
    /// The document breaks one of the reader's limits (size, depth, aliases).
    #[error("{origin} cannot be read: {limit}")]
    Limit {
        /// What was being read.
        origin: String,
        /// Which limit, with its value and where in the text.
        limit: String,
    },
    /// A value could not be serialized.
    #[error("cannot write YAML: {0}")]
    Write(String),
}

/// Parses one YAML document into a generic value. An empty document is `null`.
pub fn parse_value(text: &str, origin: &str) -> Result<Value, YamlError> {
    parse(text, origin)
}

/// Parses one YAML document into any deserializable type.
pub fn parse<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T, YamlError> {
    let origin = origin.to_string();
    serde_saphyr::from_str(text).map_err(|e| match e.without_snippet() {
        serde_saphyr::Error::Budget { breach, location } => {
            let at = if location.line() > 0 {
                format!(
                    " (at line {} column {})",
                    location.line(),
                    location.column()
                )
            } else {
                String::new()
            };
            YamlError::Limit {
                origin,
                limit: format!("{}{at}", beyond_limit(breach)),
            }
        }
        _ => YamlError::Parse {
            origin,
            message: e.to_string(),
        },
    })
}

/// Which of the reader's limits a document breaks, named with the limit. The limits
/// (serde-saphyr's defaults) keep a hostile document from exhausting memory or stack; no
/// BOSH manifest, config or vars file comes near them (cf-deployment is ~40,000 nodes).
fn beyond_limit(breach: &serde_saphyr::budget::BudgetBreach) -> String {
    use serde_saphyr::budget::BudgetBreach as B;
    let limits = serde_saphyr::Budget::default();
    let more = |n: usize, what: &str| {
        format!("it holds more than {n} {what}, the most kubosh reads in one document")
    };
    match breach {
        B::Nodes { .. } => more(limits.max_nodes, "YAML nodes (keys, values and list items)"),
        B::Events { .. } => more(limits.max_events, "YAML parser events"),
        B::Depth { .. } => format!("it nests more than {} levels deep, the most kubosh reads", limits.max_depth),
        B::Documents { .. } => more(limits.max_documents, "documents"),
        B::Aliases { .. } => more(limits.max_aliases, "aliases (*name)"),
        B::Anchors { .. } => more(limits.max_anchors, "anchors (&name)"),
        B::MergeKeys { .. } => more(limits.max_merge_keys, "merge keys (<<)"),
        B::ScalarBytes { .. } => format!("its values hold more than {} MiB of text, the most kubosh reads in one document", limits.max_total_scalar_bytes >> 20),
        B::AliasAnchorRatio { aliases, anchors } => format!("it uses {aliases} aliases of {anchors} anchors, more than {} per anchor: kubosh refuses documents that expand like an alias bomb", limits.alias_anchor_ratio_multiplier),
        _ => "it expands beyond the limits kubosh reads a YAML document within (aliases, anchors or size)".to_string(),
    }
}

/// Writes a value as a YAML document.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, YamlError> {
    serde_saphyr::to_string(value).map_err(|e| YamlError::Write(e.to_string()))
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
