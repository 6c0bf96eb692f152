//! `vm_resources` (`bosh-protocols.md` §1.6 `calculate_vm_cloud_properties`): a group (or
//! the compilation workers) may ask for CPUs, RAM and ephemeral disk instead of naming a
//! `vm_type`; the CPI turns each distinct request into cloud properties once per deploy,
//! before any VM is made.

use std::collections::BTreeMap;

use serde_json::{Map as JsonMap, Value};

use super::{Engine, EngineError};
use kubosh_cloud::VmResources;

/// The cloud properties each CPI calculated, per distinct `vm_resources`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CalculatedProperties(BTreeMap<Key, JsonMap<String, Value>>);

/// `VmResources` in the cloud of a CPI, as an ordered key.
type Key = (Option<String>, u64, u64, u64);

fn key(r: &VmResources, cpi: Option<&str>) -> Key {
    (cpi.map(str::to_string), r.cpu, r.ram, r.ephemeral_disk_size)
}

impl CalculatedProperties {
    /// What the CPI `cpi` answered for `resources` (`None` without resources, or when they
    /// were not asked for).
    pub fn get(
        &self,
        resources: Option<&VmResources>,
        cpi: Option<&str>,
    ) -> Option<&JsonMap<String, Value>> {
        self.0.get(&key(resources?, cpi))
    }
}

impl Engine {
    /// Asks each CPI once per distinct entry of `wanted` (its `vm_resources`, and the CPI
    /// whose VMs get them) with `calculate_vm_cloud_properties`, in a stable order.
    pub(crate) async fn calculate_vm_resources(
        &self,
        wanted: impl IntoIterator<Item = (VmResources, Option<String>)>,
    ) -> Result<CalculatedProperties, EngineError> {
        let distinct: BTreeMap<Key, VmResources> = (wanted.into_iter())
            .map(|(r, cpi)| (key(&r, cpi.as_deref()), r))
            .collect();
        let mut out = CalculatedProperties::default();
        for (k, resources) in distinct {
            let properties = self
                .cloud_of(k.0.as_deref(), "vm_resources")?
                .calculate_vm_cloud_properties(&resources)
                .await
                .map_err(EngineError::from)?;
            out.0.insert(k, properties);
        }
        Ok(out)
    }
}

/// The compilation workers' `vm_resources`, as the CPI takes them.
pub(crate) fn compilation_resources(
    compilation: Option<&kubosh_core::manifest::Compilation>,
) -> Option<VmResources> {
    compilation
        .and_then(|c| c.vm_resources.as_ref())
        .map(|r| VmResources {
            cpu: r.cpu,
            ram: r.ram,
            ephemeral_disk_size: r.ephemeral_disk_size,
        })
}
