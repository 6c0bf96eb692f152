//! The deployment manifest (v2): what `bosh deploy` reads.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Map;
use super::scalar::{Version, free_form_schema};
use super::update::Update;

/// Resources the CPI maps to a VM type: one type shared with the CPI's wire types, so it
/// lives in `kubosh-base`.
pub use kubosh_base::vm_resources::VmResources;

/// A BOSH deployment manifest, v2 (`instance_groups`, `stemcells`, `variables`, ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct DeploymentManifest {
    /// Deployment name. In a `Deployment` resource it comes from `metadata.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Ignored (CLI v1 relic); accepted so old manifests still parse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub director_uuid: Option<String>,
    /// Opt-in behaviours such as `use_dns_addresses`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Features>,
    /// Releases used by the deployment's jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub releases: Vec<Release>,
    /// Stemcells by alias.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stemcells: Vec<StemcellRef>,
    /// How instances are rolled out; required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<Update>,
    /// The groups of identical instances that make up the deployment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_groups: Vec<InstanceGroup>,
    /// Jobs added to matching instance groups (runtime-config semantics).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addons: Vec<Addon>,
    /// Deprecated global properties, used by jobs that have no `properties` of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub properties: Option<Map>,
    /// Variables generated and stored by kubosh, referenced as `((name))`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<Variable>,
    /// Metadata sent to the CPI for every VM and disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub tags: Option<Map>,
}

/// The `features` block.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Features {
    /// Links and `spec.address` return DNS names instead of IPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_dns_addresses: Option<bool>,
    /// Use short (`q-...`) DNS names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_short_dns_addresses: Option<bool>,
    /// Links carry DNS names of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_link_dns_names: Option<bool>,
    /// Break AZ placement ties at random instead of alphabetically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub randomize_az_placement: Option<bool>,
    /// Regenerate variables whose options changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub converge_variables: Option<bool>,
    /// Keep agent settings and job configuration on tmpfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_tmpfs_config: Option<bool>,
}

/// A release the deployment uses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Release {
    /// Release name.
    pub name: String,
    /// `"latest"`, `"create"` or an exact version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Version>,
    /// Where to fetch the tarball (`https://`, `file://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Digest of the tarball: plain sha1 hex or `sha256:...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha1: Option<String>,
    /// For a compiled release: the stemcell it was compiled against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stemcell: Option<ReleaseStemcell>,
    /// Stemcells this release was exported for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exported_from: Vec<ReleaseStemcell>,
}

/// A stemcell OS and version, as on a compiled release.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ReleaseStemcell {
    /// Operating system, e.g. `ubuntu-jammy`.
    pub os: String,
    /// Stemcell version.
    pub version: Version,
}

/// A stemcell the deployment uses, by alias.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StemcellRef {
    /// The name instance groups use in their `stemcell` key.
    pub alias: String,
    /// Operating system (give `os` or `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// Full stemcell name (give `os` or `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Exact version or `"latest"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Version>,
}

/// An instance group: `instances` identical VMs running the same jobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct InstanceGroup {
    /// Unique name within the deployment.
    pub name: String,
    /// AZs from the cloud config to spread instances over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub azs: Vec<String>,
    /// Number of instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<u64>,
    /// Jobs (from releases) to run on every instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobRef>,
    /// VM type from the cloud config (or give `vm_resources`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_type: Option<String>,
    /// Resources the CPI turns into a VM type (or give `vm_type`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_resources: Option<VmResources>,
    /// VM extensions from the cloud config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vm_extensions: Vec<String>,
    /// Stemcell alias from `stemcells`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stemcell: Option<String>,
    /// Persistent disk size in MiB (0 = none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_disk: Option<u64>,
    /// Persistent disk type from the cloud config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_disk_type: Option<String>,
    /// Several named persistent disks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub persistent_disks: Vec<NamedDisk>,
    /// Networks the instances join.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<NetworkRef>,
    /// Overrides of the deployment's `update` block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<Update>,
    /// `service` (default, long-running) or `errand` (run on demand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Groups whose instances this group adopts (renames, AZ collapses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub migrated_from: Vec<MigratedFrom>,
    /// Agent environment (`bosh.password`, `persistent_disk_fs`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub env: Option<Map>,
    /// Deprecated group-level properties, used by jobs that have none of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub properties: Option<Map>,
    /// Merged over the deployment's tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub tags: Option<Map>,
}

impl InstanceGroup {
    /// True when this group runs on demand rather than as a service.
    pub fn is_errand(&self) -> bool {
        self.lifecycle == Some(Lifecycle::Errand)
    }
}

/// `service` or `errand`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Lifecycle {
    /// Long-running processes (the default).
    Service,
    /// Runs once when asked (`bosh run-errand`).
    Errand,
}

/// A job of a release placed on an instance group (or an addon).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct JobRef {
    /// Job name within its release.
    pub name: String,
    /// Release name from `releases`.
    #[serde(default)]
    pub release: String,
    /// This job's properties; when present, group and global properties are not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub properties: Option<Map>,
    /// Links consumed, by link name: `{from, deployment, network, ip_addresses}`, or `nil`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub consumes: Option<Map>,
    /// Links provided, by link name: `{as, shared, aliases}`, or `nil`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub provides: Option<Map>,
    /// Extra link providers declared in the manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub custom_provider_definitions: Vec<CustomProvider>,
}

/// A link provider declared in the manifest rather than in the job spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CustomProvider {
    /// Link name.
    pub name: String,
    /// Link type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Property names exposed through the link.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<String>,
}

/// One of several named persistent disks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct NamedDisk {
    /// Disk name, unique within the instance group.
    pub name: String,
    /// Disk type from the cloud config.
    #[serde(rename = "type")]
    pub disk_type: String,
}

/// A network an instance group joins.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct NetworkRef {
    /// Network name from the cloud config.
    pub name: String,
    /// Static IPs (or ranges `a - b`), one per instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub static_ips: Vec<String>,
    /// What this network is the default for: `dns`, `gateway`, `addressable`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default: Vec<String>,
    /// Groups networks onto one NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_group: Option<Version>,
}

/// A group whose instances are adopted by the group that names it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MigratedFrom {
    /// The old instance group name.
    pub name: String,
    /// The AZ the old group's instances are in (for groups that had no AZs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub az: Option<String>,
}

/// A variable kubosh generates (or reads from the user), referenced as `((name))`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Variable {
    /// Variable name.
    pub name: String,
    /// `password`, `certificate`, `ssh`, `rsa` (and config-server types `value`, `json`, `user`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Generation options, e.g. `common_name`, `is_ca`, `ca`, `length`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub options: Option<Map>,
    /// `no-overwrite` (default), `overwrite` or `converge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_mode: Option<String>,
    /// Rotation policy, e.g. `{strategy: on-deploy}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub update: Option<Map>,
    /// Links consumed to fill in certificate names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub consumes: Option<Map>,
}

/// Jobs added to every instance group an `include`/`exclude` filter selects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Addon {
    /// Addon name.
    pub name: String,
    /// Jobs to add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobRef>,
    /// Only instance groups matching this filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<AddonFilter>,
    /// Never instance groups matching this filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<AddonFilter>,
    /// Properties for the addon's jobs that have none of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_schema")]
    pub properties: Option<Map>,
}

/// Which instance groups an addon applies to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AddonFilter {
    /// Deployment names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployments: Vec<String>,
    /// Groups that have one of these jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<AddonJobFilter>,
    /// Instance group names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instance_groups: Vec<String>,
    /// Groups on one of these networks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<String>,
    /// Groups in one of these AZs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub azs: Vec<String>,
    /// Teams owning the deployment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<String>,
    /// Groups using a stemcell with one of these OSes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stemcell: Vec<AddonStemcellFilter>,
    /// `service` or `errand`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
}

/// A job in an addon filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AddonJobFilter {
    /// Job name.
    pub name: String,
    /// Release name.
    pub release: String,
}

/// A stemcell OS in an addon filter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AddonStemcellFilter {
    /// Operating system, e.g. `ubuntu-jammy`.
    pub os: String,
}
