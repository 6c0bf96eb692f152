//! Small scalar types shared by the manifest documents.

use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Schema of a free-form block (`properties`, `cloud_properties`, `env`, ...): any mapping,
/// kept verbatim. Kubernetes must not prune it, hence `x-kubernetes-preserve-unknown-fields`.
pub fn free_form_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A release or stemcell version: `"latest"`, `"283.1.6"`, `45` or `1.484`.
///
/// BOSH accepts YAML numbers here and uses their text, so a number becomes its decimal
/// rendering. (`1.10` written as a YAML number is `1.1`, exactly as in BOSH; quote versions.)
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version(pub String);

impl Version {
    /// The version text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for `latest`, which resolves to the newest uploaded version.
    pub fn is_latest(&self) -> bool {
        self.0 == "latest"
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Version {
    fn from(s: &str) -> Self {
        Version(s.to_string())
    }
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(Version(s)),
            serde_json::Value::Number(n) => Ok(Version(n.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "expected a version string, found {other}"
            ))),
        }
    }
}

impl JsonSchema for Version {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Version".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A version such as \"283.1.6\" or \"latest\".",
            "x-kubernetes-int-or-string": true,
            "x-kubosh-format": "version",
        })
    }
}
