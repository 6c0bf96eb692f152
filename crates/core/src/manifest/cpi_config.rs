//! The CPI config: the director's named clouds (`bosh update-cpi-config`). Each AZ of the
//! cloud config names the CPI that serves it (`azs[].cpi`); an AZ naming none is served by
//! the director's own CPI.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Map;
use super::scalar::free_form_schema;

/// A CPI config document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CpiConfig {
    /// The named CPIs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpis: Vec<Cpi>,
}

impl CpiConfig {
    /// The CPI named `name`.
    pub fn find(&self, name: &str) -> Option<&Cpi> {
        self.cpis.iter().find(|c| c.name == name)
    }

    /// The names of its CPIs, for messages (`a, b`, or `none`).
    pub fn names(&self) -> String {
        if self.cpis.is_empty() {
            return "none".into();
        }
        let names: Vec<&str> = self.cpis.iter().map(|c| c.name.as_str()).collect();
        names.join(", ")
    }
}

/// One named CPI: which CPI program (its `type`, one the director has installed) with which
/// properties (credentials, region, ...), sent to the program in every request's `context`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Cpi {
    /// The name AZs use (`azs[].cpi`).
    pub name: String,
    /// Which installed CPI program serves it (the Director's `<type>_cpi` job).
    #[serde(rename = "type")]
    pub kind: String,
    /// Merged into the `context` of every request to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub properties: Option<Map>,
    /// Earlier names of this CPI: VMs, disks and stemcells recorded under them are this
    /// CPI's (the cloud behind them is the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub migrated_from: Vec<CpiMigratedFrom>,
}

impl Cpi {
    /// Whether what was recorded under CPI `other` is this CPI's: the same name, or one it
    /// was migrated from.
    pub fn owns(&self, other: &str) -> bool {
        self.name == other || self.migrated_from.iter().any(|m| m.name == other)
    }
}

/// An earlier name of a CPI.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CpiMigratedFrom {
    /// The earlier name.
    pub name: String,
}
