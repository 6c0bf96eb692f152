//! `RuntimeConfig` (`runtimeconfigs.kubosh.io`): what the director adds to every deployment
//! of its namespace (bosh-dns, bpm, syslog, os-conf).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A BOSH runtime config (releases, addons, variables, tags), with BOSH's own snake_case keys
/// directly under `spec`: an existing runtime config YAML becomes the spec by indenting it
/// under `spec:`.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "RuntimeConfig",
    plural = "runtimeconfigs",
    shortname = "brc",
    category = "bosh",
    namespaced,
    derive = "Default",
    derive = "PartialEq",
    doc = "A BOSH runtime config: releases, addons (jobs added to the instance groups their \
           include/exclude filters match), variables and tags applied to every Deployment of \
           this namespace. Several merge in name order, as the Director merges named runtime \
           configs; a change rolls out every deployment it changes.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct RuntimeConfigSpec {
    /// The runtime config document, flattened into the spec (`kubectl explain
    /// runtimeconfig.spec` lists `releases`, `addons`, `variables`, `tags`).
    #[serde(flatten)]
    pub config: kubosh_core::manifest::RuntimeConfig,
}
