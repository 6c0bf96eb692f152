//! The bosh-init manifest that `create-env` reads: one VM described with `resource_pools`,
//! `disk_pools`, `networks` and a `cloud_provider` block that installs the CPI locally.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Map;
use super::cloud_config::Network;
use super::deployment::{JobRef, NetworkRef, Release, Variable};
use super::scalar::free_form_schema;
use super::update::Update;

/// A `create-env` manifest (bosh-init v1 shape; `instance_groups` or legacy `jobs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct InitManifest {
    /// Deployment name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Releases, the CPI release included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub releases: Vec<Release>,
    /// VM shapes (one is used).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_pools: Vec<ResourcePool>,
    /// Persistent disk shapes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disk_pools: Vec<DiskPool>,
    /// Networks, in cloud-config form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Network>,
    /// The single instance group (exactly one, with one instance).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_groups: Vec<InitInstanceGroup>,
    /// Legacy name of `instance_groups`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<InitInstanceGroup>,
    /// How to install and reach the CPI and the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_provider: Option<CloudProvider>,
    /// Variables generated into the vars store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<Variable>,
    /// Deprecated global properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub properties: Option<Map>,
    /// Metadata sent to the CPI for the VM and disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub tags: Option<Map>,
    /// Accepted and ignored, as bosh-init did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<Update>,
}

/// A VM shape in a bosh-init manifest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ResourcePool {
    /// Pool name.
    pub name: String,
    /// Network of the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Stemcell tarball location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stemcell: Option<InitStemcell>,
    /// IaaS properties of the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub cloud_properties: Option<Map>,
    /// Agent environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub env: Option<Map>,
}

/// Where the stemcell tarball of a resource pool comes from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct InitStemcell {
    /// `https://` URL or local path of the tarball.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Digest of the tarball.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha1: Option<String>,
}

/// A persistent disk shape in a bosh-init manifest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct DiskPool {
    /// Pool name.
    pub name: String,
    /// Size in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size: Option<u64>,
    /// IaaS properties of the disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub cloud_properties: Option<Map>,
}

/// The instance group of a bosh-init manifest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct InitInstanceGroup {
    /// Group name.
    pub name: String,
    /// Must be 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<u64>,
    /// Jobs to run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobRef>,
    /// Legacy name of `jobs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<JobRef>,
    /// Resource pool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_pool: Option<String>,
    /// Persistent disk size in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_disk: Option<u64>,
    /// Disk pool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_disk_pool: Option<String>,
    /// Networks of the VM.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<NetworkRef>,
    /// Properties for jobs that have none of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub properties: Option<Map>,
    /// Accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<Update>,
}

/// The `cloud_provider` block: the CPI job to install and how to reach the agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CloudProvider {
    /// The CPI job (or give `templates`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<CpiTemplate>,
    /// Several CPI jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<CpiTemplate>,
    /// HTTPS URL of the agent, `https://mbus:<password>@<ip>:6868`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mbus: Option<String>,
    /// Certificate (with `ca`) the agent's mbus endpoint presents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<Value>,
    /// Properties for rendering the CPI job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub properties: Option<Map>,
    /// Reverse SSH tunnel to reach a registry on this machine (legacy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_tunnel: Option<SshTunnel>,
}

/// A CPI job reference.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CpiTemplate {
    /// Job name.
    pub name: String,
    /// Release name.
    pub release: String,
}

/// SSH tunnel settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SshTunnel {
    /// Host to connect to.
    pub host: String,
    /// SSH port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// SSH user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Private key (path or PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<String>,
}
