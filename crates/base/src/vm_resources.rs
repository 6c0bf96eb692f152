//! `vm_resources`: what the manifest asks of a VM instead of naming a `vm_type`, and the very
//! value the CPI's `calculate_vm_cloud_properties` takes (`bosh-protocols.md` §1.6).
//!
//! It lives here, below both the manifest model (`kubosh-core`) and the CPI wire types
//! (`kubosh-bosh`), so that one type serves both without either crate depending on the other.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Resources the CPI maps to a VM type (also the argument of the CPI's
/// `calculate_vm_cloud_properties`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct VmResources {
    /// Number of CPUs.
    pub cpu: u64,
    /// RAM in MiB.
    pub ram: u64,
    /// Ephemeral disk size in MiB.
    pub ephemeral_disk_size: u64,
}
