//! The runtime config: what the Director adds to every deployment (bosh-dns, bpm, syslog,
//! os-conf): releases, addons with their `include`/`exclude` filters, variables and tags.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Addon, Map, Release, Variable, free_form_schema};

/// A BOSH runtime config document (`bosh update-runtime-config`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Releases the addons' jobs come from, added to every deployment's releases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub releases: Vec<Release>,
    /// Jobs added to the instance groups their filters match, in every deployment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addons: Vec<Addon>,
    /// Variables the addons use; `((/name))` ones are the director's, shared by every
    /// deployment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<Variable>,
    /// Metadata sent to the CPI for every VM and disk of every deployment (a deployment's own
    /// tags win).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub tags: Option<Map>,
}
