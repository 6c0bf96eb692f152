//! `Disk` (`disks.kubosh.io`): a persistent disk in the IaaS, attached or orphaned.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kubosh_core::manifest::Map;

/// A persistent disk kubosh created, written by kubosh: `kubectl get bdisk` is `bosh disks`
/// (and, with orphaned ones, `bosh disks --orphaned`).
///
/// Labelled [`labels::DEPLOYMENT`](crate::api::labels::DEPLOYMENT) and
/// [`labels::INSTANCE_GROUP`](crate::api::labels::INSTANCE_GROUP). There is no status: every
/// field is a record of what exists in the IaaS, which nothing could observe or derive again,
/// so it all lives in the spec.
///
/// An orphaned disk (its instance was deleted or got a new disk) is kept for a while so it
/// can be reattached; deleting the resource deletes the disk in the IaaS.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "Disk",
    plural = "disks",
    shortname = "bdisk",
    category = "bosh",
    namespaced,
    derive = "Default",
    derive = "PartialEq",
    doc = "A persistent disk of a BOSH deployment, managed by kubosh: attached to an Instance, \
           or orphaned (kept for a while after its instance let go of it).",
    selectable = ".spec.deployment",
    printcolumn(name = "CID", type_ = "string", json_path = ".spec.cid"),
    printcolumn(
        name = "Size",
        type_ = "integer",
        description = "Size in MiB",
        json_path = ".spec.size"
    ),
    printcolumn(name = "Deployment", type_ = "string", json_path = ".spec.deployment"),
    printcolumn(name = "Instance", type_ = "string", json_path = ".spec.instance"),
    printcolumn(name = "AZ", type_ = "string", json_path = ".spec.az"),
    printcolumn(name = "Orphaned", type_ = "date", json_path = ".spec.orphanedAt"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".spec.diskType",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DiskSpec {
    /// IaaS identifier of the disk.
    pub cid: String,
    /// Size in MiB.
    pub size: i64,
    /// The deployment the disk was created for.
    pub deployment: String,
    /// Its instance group.
    pub instance_group: String,
    /// Name of the disk within the instance group (`persistent_disks[].name`); empty for
    /// the single `persistent_disk`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The `Instance` it is attached to; empty once orphaned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Availability zone of the disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub az: Option<String>,
    /// Disk type from the cloud config it was created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_type: Option<String>,
    /// IaaS properties it was created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "kubosh_core::manifest::free_form_schema")]
    pub cloud_properties: Option<Map>,
    /// No instance uses the disk any more; it is deleted after the orphan retention time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub orphaned: bool,
    /// When the disk was orphaned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphaned_at: Option<Time>,
    /// `group/id` of the instance an orphaned disk came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphaned_from: Option<String>,
    /// The index of that instance: when its instance group comes back, the instance at
    /// this index gets the disk back (same name, size, cloud properties and AZ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphaned_from_index: Option<i64>,
    /// IaaS identifiers of the disk's snapshots, oldest first; deleting the disk deletes
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<String>,
}
