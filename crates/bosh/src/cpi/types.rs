//! Typed arguments and results of the CPI methods (`bosh-protocols.md` §1.6).
//!
//! Free-form blocks (`cloud_properties`, `env`, metadata) stay JSON objects, verbatim.

use std::path::PathBuf;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

macro_rules! cid {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// The ID as the cloud spells it.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_string())
            }
        }
    };
}

cid!(
    /// A VM's cloud ID.
    VmCid
);
cid!(
    /// A persistent disk's cloud ID.
    DiskCid
);
cid!(
    /// A stemcell's cloud ID (an image).
    StemcellCid
);
cid!(
    /// A disk snapshot's cloud ID.
    SnapshotCid
);

/// A JSON object: cloud properties, `env`, metadata.
pub type Object = Map<String, Value>;

/// What `info` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpiInfo {
    /// The highest CPI API version the CPI implements.
    pub api_version: u32,
    /// Stemcell formats the CPI accepts (multi-CPI stemcell routing).
    #[serde(default)]
    pub stemcell_formats: Vec<String>,
    /// Anything else the CPI reported.
    #[serde(flatten)]
    pub other: Object,
}

/// Arguments of `create_stemcell`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateStemcell {
    /// Local path of the stemcell's extracted `image` file.
    pub image_path: PathBuf,
    /// `cloud_properties` from `stemcell.MF`.
    pub cloud_properties: Object,
}

/// One network of a VM, as the director sends it in `create_vm` and the agent reads it in its
/// settings: `type` (`manual`, `dynamic`, `vip`), `ip`, `prefix` (a string), `netmask`,
/// `gateway`, `dns`, `default`, `cloud_properties`, ...
///
/// Kept as an ordered JSON object, verbatim: the director's key order differs per network
/// type, and every key a future director or agent adds passes through.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NetworkSettings(pub Object);

impl NetworkSettings {
    /// A network of the given `type`.
    pub fn new(kind: &str) -> Self {
        NetworkSettings(Object::new()).with("type", kind)
    }

    /// Sets a key (appended, or replaced in place).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.0.insert(key.to_string(), value.into());
        self
    }

    /// A key's value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// `type`.
    pub fn kind(&self) -> Option<&str> {
        self.get("type").and_then(Value::as_str)
    }

    /// `ip`.
    pub fn ip(&self) -> Option<&str> {
        self.get("ip").and_then(Value::as_str)
    }
}

/// The `networks` argument of `create_vm`: network name ⇒ settings, in manifest order.
pub type Networks = IndexMap<String, NetworkSettings>;

/// Arguments of `create_vm`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateVm {
    /// The agent ID the VM's agent will use.
    pub agent_id: String,
    /// The image to boot.
    pub stemcell_cid: StemcellCid,
    /// AZ + vm_type + vm_extensions cloud properties (shallow-merged by the caller).
    pub cloud_properties: Object,
    /// The networks to attach.
    pub networks: Networks,
    /// Persistent disks the VM will likely get (placement hint).
    pub disk_cids: Vec<DiskCid>,
    /// The instance group's `env` plus the director's `bosh` keys; holds credentials.
    pub env: Object,
}

/// Result of `create_vm`.
#[derive(Debug, Clone, PartialEq)]
pub struct VmCreated {
    /// The new VM.
    pub cid: VmCid,
    /// The networks the CPI reports (API v2 only; may be empty).
    pub networks: Option<Object>,
}

/// Arguments of `create_disk`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateDisk {
    /// Size in MiB.
    pub size_mib: u64,
    /// The disk type's cloud properties.
    pub cloud_properties: Object,
    /// The VM the disk is for (locality hint), if any.
    pub vm_cid: Option<VmCid>,
}

/// Where the agent finds an attached disk: a device path or ID string, or a hash such as
/// `{"path": ...}`, `{"volume_id": ...}`, `{"lun": ..., "host_device_id": ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DiskHint(pub Value);

/// Arguments of `update_disk`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateDisk {
    /// The disk to change.
    pub disk_cid: DiskCid,
    /// New size in MiB.
    pub new_size_mib: u64,
    /// The new disk type's cloud properties.
    pub cloud_properties: Object,
}

/// Argument of `calculate_vm_cloud_properties`: the manifest's `vm_resources`.
pub use kubosh_base::vm_resources::VmResources;

/// Arguments of `create_network` (managed networks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateNetwork(pub Object);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn network_settings_are_verbatim_and_ordered() {
        let n = NetworkSettings::new("manual")
            .with("ip", "10.0.0.6")
            .with("prefix", "32")
            .with("cloud_properties", json!({"subnet": "s"}));
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            r#"{"type":"manual","ip":"10.0.0.6","prefix":"32","cloud_properties":{"subnet":"s"}}"#
        );
        assert_eq!((n.kind(), n.ip()), (Some("manual"), Some("10.0.0.6")));
        let back: NetworkSettings = serde_json::from_value(json!({"z": 1, "a": 2})).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), r#"{"z":1,"a":2}"#);
    }
}
