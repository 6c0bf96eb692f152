//! The BOSH manifest model: deployment manifests (v2), cloud configs, runtime configs, CPI configs and the bosh-init (v1)
//! manifest that `create-env` reads, typed the way BOSH users write them.
//!
//! Pure data: no I/O, no Kubernetes. Keys are snake_case exactly as in BOSH. Job `properties`,
//! `cloud_properties`, agent `env` and other free-form blocks are kept verbatim as
//! [`serde_json::Value`]s (so `((variable))` placeholders inside them survive untouched).
//!
//! The serde derives describe the happy path; [`crate::validate`] reports every way a document
//! can be wrong, using the JSON schema derived from these same types (one place for the shape).

mod cloud_config;
mod cpi_config;
mod deployment;
mod init;
mod ip;
mod runtime_config;
mod scalar;
mod update;

pub use cloud_config::{
    Az, CloudConfig, Compilation, DiskType, Network, NetworkType, Subnet, VmExtension, VmType,
};
pub use cpi_config::{Cpi, CpiConfig, CpiMigratedFrom};
pub use deployment::{
    Addon, AddonFilter, AddonJobFilter, AddonStemcellFilter, CustomProvider, DeploymentManifest,
    Features, InstanceGroup, JobRef, Lifecycle, MigratedFrom, NamedDisk, NetworkRef, Release,
    ReleaseStemcell, StemcellRef, Variable, VmResources,
};
pub use init::{
    CloudProvider, CpiTemplate, DiskPool, InitInstanceGroup, InitManifest, InitStemcell,
    ResourcePool, SshTunnel,
};
pub use ip::{IpRange, IpRangeError, parse_ip_ranges};
pub use runtime_config::RuntimeConfig;
pub use scalar::{Version, free_form_schema};
pub use update::{
    AzUpdateStrategy, Quantity, QuantityError, Update, VmStrategy, WatchTime, WatchTimeError,
};

/// A free-form mapping (job properties, cloud properties, agent env), kept verbatim.
pub type Map = serde_json::Map<String, serde_json::Value>;
