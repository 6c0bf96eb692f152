//! `CloudConfig` (`cloudconfigs.kubosh.io`): the IaaS half of deployments.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A BOSH cloud config (AZs, networks, VM types, VM extensions, disk types, compilation
/// workers), with BOSH's own snake_case keys directly under `spec`: an existing
/// `cloud-config.yml` becomes the spec by indenting it under `spec:`.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "CloudConfig",
    plural = "cloudconfigs",
    shortname = "bcc",
    category = "bosh",
    namespaced,
    status = "CloudConfigStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A BOSH cloud config: the AZs, networks, VM types, VM extensions, disk types and \
           compilation workers that Deployments in this namespace are placed on. A Deployment \
           uses the one named in its spec.cloudConfigRef, or else every CloudConfig of the \
           namespace merged in name order, as the Director merges named cloud configs.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct CloudConfigSpec {
    /// The cloud config document, flattened into the spec rather than nested under a
    /// `spec.config` field: pasting a `cloud-config.yml` under `spec:` is all it takes, and
    /// `kubectl explain cloudconfig.spec` lists `azs`, `networks`, `vm_types`, ... at once.
    /// Fields kubosh may add of its own will be camelCase, so they cannot clash with a BOSH key.
    #[serde(flatten)]
    pub config: kubosh_core::manifest::CloudConfig,
}

/// The observed state of a `CloudConfig`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudConfigStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Ready` once the cloud config is valid; `Stalled` (with the problems in its message)
    /// when it is not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Vec<Condition>,
}
