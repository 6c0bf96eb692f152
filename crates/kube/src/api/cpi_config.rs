//! `CpiConfig` (`cpiconfigs.kubosh.io`): the director's named CPIs, each serving the AZs of
//! the cloud config that name it (`azs[].cpi`).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::VarsSource;

/// A BOSH CPI config (`cpis: [{name, type, properties, migrated_from}]`), with BOSH's own
/// snake_case keys directly under `spec`: an existing `cpi-config.yml` becomes the spec by
/// indenting it under `spec:`. `type` names a CPI program the controller's director
/// configuration installs (`cpi_types:` there); `properties` (credentials, region, ...) reach the
/// program in every request's `context`, and their `((variables))` come from `varsFrom`.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "CpiConfig",
    plural = "cpiconfigs",
    shortname = "bcpi",
    category = "bosh",
    namespaced,
    derive = "Default",
    derive = "PartialEq",
    doc = "A BOSH CPI config: named CPIs, each a CPI program the controller has installed \
           (its type) with its properties, serving the AZs of this namespace's cloud config \
           that name it. Several merge in name order. Whoever may write a CpiConfig drives \
           the clouds with the credentials it names: grant it as you grant Secrets.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct CpiConfigSpec {
    /// The CPI config document, flattened into the spec (`kubectl explain cpiconfig.spec`
    /// lists `cpis`).
    #[serde(flatten)]
    pub config: kubosh_core::manifest::CpiConfig,

    /// Where the `((variables))` of the CPIs' properties get their values (credentials in a
    /// Secret), as a Deployment's `varsFrom`. Values are never shown in a status or Event.
    #[serde(default, rename = "varsFrom", skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub vars_from: Vec<VarsSource>,
}
