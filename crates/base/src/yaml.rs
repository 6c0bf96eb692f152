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
    serde_saphyr::from_str(text).map_err(|e| YamlError::Parse {
        origin: origin.to_string(),
        message: e.to_string(),
    })
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
    fn round_trips_through_text() {
        let v = parse_value("x:\n  y: [1, two]\n  z: \"((var))\"\n", "test").unwrap();
        let again = parse_value(&to_string(&v).unwrap(), "again").unwrap();
        assert_eq!(v, again);
    }
}
