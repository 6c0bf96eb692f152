//! The cloud config: the IaaS-specific half of a deployment (AZs, networks, VM and disk types,
//! compilation workers), shared by all deployments.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Map;
use super::deployment::VmResources;
use super::scalar::free_form_schema;

/// A cloud config document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CloudConfig {
    /// Availability zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub azs: Vec<Az>,
    /// Named VM shapes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vm_types: Vec<VmType>,
    /// Named additions to VM cloud properties (load balancers, bigger disks, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vm_extensions: Vec<VmExtension>,
    /// Named persistent disk shapes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disk_types: Vec<DiskType>,
    /// Networks instances can join.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Network>,
    /// Where and how packages are compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compilation: Option<Compilation>,
}

/// An availability zone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Az {
    /// AZ name.
    pub name: String,
    /// IaaS properties merged into every VM in this AZ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub cloud_properties: Option<Map>,
    /// Name of the CPI config entry serving this AZ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpi: Option<String>,
}

/// A named VM shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct VmType {
    /// VM type name.
    pub name: String,
    /// IaaS properties of the VM (instance type, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub cloud_properties: Option<Map>,
}

/// A named addition to VM cloud properties.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct VmExtension {
    /// VM extension name.
    pub name: String,
    /// IaaS properties merged into the VM's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub cloud_properties: Option<Map>,
}

/// A named persistent disk shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct DiskType {
    /// Disk type name.
    pub name: String,
    /// Size in MiB; required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size: Option<u64>,
    /// IaaS properties of the disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub cloud_properties: Option<Map>,
}

/// The kind of a network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetworkType {
    /// kubosh assigns IPs from the subnets (the default).
    #[default]
    Manual,
    /// The IaaS assigns IPs; kubosh learns them from the agent.
    Dynamic,
    /// Public/floating IPs attached to VMs.
    Vip,
}

/// A network.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Network {
    /// Network name.
    pub name: String,
    /// `manual` (default), `dynamic` or `vip`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<NetworkType>,
    /// The network is created through the CPI (`create_network`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed: Option<bool>,
    /// Subnets (manual networks; optional for dynamic and vip).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
    /// DNS servers (dynamic networks without subnets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// IaaS properties (dynamic and vip networks without subnets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub cloud_properties: Option<Map>,
}

impl Network {
    /// The network's type, `manual` when not given.
    pub fn network_type(&self) -> NetworkType {
        self.kind.unwrap_or_default()
    }
}

/// A subnet of a network.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Subnet {
    /// CIDR, e.g. `10.0.0.0/24`; required on manual networks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    /// Gateway IP inside the range; required on manual networks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// DNS servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// IPs and ranges (`a - b`) never handed out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved: Vec<String>,
    /// IPs and ranges usable only as `static_ips`.
    #[serde(default, rename = "static", skip_serializing_if = "Vec::is_empty")]
    pub static_ips: Vec<String>,
    /// The AZ this subnet is in (or give `azs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub az: Option<String>,
    /// The AZs this subnet spans (or give `az`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub azs: Vec<String>,
    /// Prefix length delegated to each VM (secondary networks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<u32>,
    /// Name of the IaaS subnet (managed networks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// IaaS properties of the subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub cloud_properties: Option<Map>,
}

impl Subnet {
    /// The AZs of this subnet, from `az` or `azs`.
    pub fn az_names(&self) -> Vec<&str> {
        match &self.az {
            Some(az) => vec![az.as_str()],
            None => self.azs.iter().map(String::as_str).collect(),
        }
    }
}

/// Compilation workers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Compilation {
    /// Number of compilation VMs (at least 1); required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u64>,
    /// Network the workers join; required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// AZ of the workers; required when the cloud config has AZs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub az: Option<String>,
    /// VM type of the workers (or `vm_resources`, or `cloud_properties`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_type: Option<String>,
    /// Resources of the workers (or `vm_type`, or `cloud_properties`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_resources: Option<VmResources>,
    /// IaaS properties of the workers (or `vm_type`, or `vm_resources`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub cloud_properties: Option<Map>,
    /// VM extensions for the workers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vm_extensions: Vec<String>,
    /// Keep workers between packages instead of one VM per package.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_compilation_vms: Option<bool>,
    /// Orphan (delete in the background) rather than delete workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphan_workers: Option<bool>,
    /// Agent environment of the workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub env: Option<Map>,
}
