//! The template spec: what a job's templates see as `spec`, `p(...)` and `link(...)`.
//!
//! This is the Director's `TemplateSpec` (`instance_spec.rb`, `bosh-protocols.md` §4.11) for
//! one job of one instance, after the renderer's per-job steps: `properties` are this job's
//! bound properties (see [`super::properties`]), `links` are this job's consumed links and
//! `release` is the job's release.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use kubosh_core::manifest::Map;

/// A release by name and version (`spec.release`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReleaseRef {
    /// Release name.
    pub name: String,
    /// Release version, as written in the release (`"1.2.3"`, `"0+dev.4"`).
    pub version: String,
}

impl std::fmt::Display for ReleaseRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.name, self.version)
    }
}

/// The template context of one job on one instance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateSpec {
    /// Deployment name (`spec.deployment`).
    pub deployment: String,
    /// The instance group as the Director describes it (`spec.job`; "job" is BOSH v1 naming
    /// for the instance group).
    pub job: InstanceGroupSpec,
    /// Instance index within its group (`spec.index`, also `index`).
    pub index: u64,
    /// True on the group's bootstrap instance (`spec.bootstrap`).
    pub bootstrap: bool,
    /// Instance group name (`spec.name`, also `name`).
    pub name: String,
    /// Instance UUID (`spec.id`).
    pub id: String,
    /// Availability zone, or none (`spec.az`).
    pub az: Option<String>,
    /// The instance's networks by name (`spec.networks.<name>.ip`).
    pub networks: IndexMap<String, NetworkSpec>,
    /// Always true in the Director's template spec (the renderer picks this job's properties).
    #[serde(default = "yes")]
    pub properties_need_filtering: bool,
    /// Root DNS domain, `bosh` by default (`spec.dns_domain_name`).
    pub dns_domain_name: String,
    /// Persistent disk size in MiB, 0 without one (`spec.persistent_disk`).
    #[serde(default)]
    pub persistent_disk: u64,
    /// The instance's address: its IP, or its DNS name when DNS addresses are used.
    pub address: Option<String>,
    /// IP on the default gateway network (`spec.ip`).
    pub ip: Option<String>,
    /// This job's properties, bound and defaulted (`p(...)`, `properties`).
    #[serde(default, serialize_with = "go_json::map")]
    pub properties: Map,
    /// This job's consumed links by name (`link(name)`).
    #[serde(default)]
    pub links: IndexMap<String, LinkSpec>,
    /// The job's release (`spec.release.name`, `spec.release.version`).
    pub release: ReleaseRef,
}

fn yes() -> bool {
    true
}

/// `spec.job`: the instance group, by name (other keys the Director puts there are kept).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceGroupSpec {
    /// Instance group name.
    pub name: String,
    /// Anything else (`templates`, `version`, ...), passed through.
    #[serde(flatten)]
    pub extra: Map,
}

/// One network of the instance (`spec.networks.<name>`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkSpec {
    /// `manual`, `dynamic` or `vip`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The instance's IP (dynamic networks: `127.0.0.1` until the agent reports one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// Netmask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netmask: Option<String>,
    /// Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Which defaults this network provides (`dns`, `gateway`, `addressable`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default: Vec<String>,
    /// DNS servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// The instance's DNS record name on this network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_record_name: Option<String>,
    /// IaaS properties of the network.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub cloud_properties: Map,
    /// Anything else, passed through.
    #[serde(flatten)]
    pub extra: Map,
}

/// A consumed link as templates see it (the Director's whitelisted link keys).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// A fixed address (manual links): `link(...).address` answers it whatever is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The provider's default network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_network: Option<String>,
    /// The provider's deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_name: Option<String>,
    /// Root DNS domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// The link group name (`<link name>-<type>`), used with link DNS names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    /// The provider's instance group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_group: Option<String>,
    /// The provider's instances.
    #[serde(default)]
    pub instances: Vec<LinkInstance>,
    /// The provided properties (`link(...).p(...)`).
    #[serde(serialize_with = "go_json::optional_map")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<Map>,
    /// Addresses use link group names (`q-...` under the link group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_link_dns_names: Option<bool>,
    /// Addresses are short DNS names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_short_dns_addresses: Option<bool>,
}

/// One instance behind a link (`link(...).instances[i]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkInstance {
    /// Instance group name.
    pub name: String,
    /// Instance index.
    pub index: u64,
    /// Instance UUID.
    pub id: String,
    /// Availability zone.
    #[serde(default)]
    pub az: Option<String>,
    /// The instance's address on the link's network.
    #[serde(default)]
    pub address: Option<String>,
    /// True on the group's bootstrap instance.
    #[serde(default)]
    pub bootstrap: bool,
    /// Per-instance properties (rare; most links carry properties at link level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<Value>,
}

/// The numbers the Director's DNS encoder assigns, so `link(...).address(...)` can build
/// `q-...` queries: AZ, network and instance numbers, and service group ids.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DnsTables {
    /// AZ name → number (`a<n>` in a query).
    #[serde(default)]
    pub az_ids: IndexMap<String, u64>,
    /// Network name → number (`n<n>`, short DNS only).
    #[serde(default)]
    pub network_ids: IndexMap<String, u64>,
    /// Instance UUID → number (`m<n>`, short DNS only).
    #[serde(default)]
    pub instance_ids: IndexMap<String, u64>,
    /// Service groups (`q-g<id>`, short DNS only).
    #[serde(default)]
    pub groups: Vec<DnsGroup>,
}

/// A service group of the DNS encoder.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DnsGroup {
    /// `instance-group` or `link`.
    pub group_type: String,
    /// Group name.
    pub group_name: String,
    /// Deployment name.
    pub deployment: String,
    /// Group id.
    pub id: u64,
}

/// Properties written as bosh-cli hands them to the template renderer, through Go's
/// `encoding/json`: a float with an integral value is written as an integer (`1e3` and
/// `1000.0` in a manifest are `1000` to a template, as in BOSH, not `1000.0`).
mod go_json {
    use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
    use serde_json::Value;

    use super::Map;

    pub fn map<S: Serializer>(map: &Map, s: S) -> Result<S::Ok, S::Error> {
        GoNumbers::Map(map).serialize(s)
    }

    pub fn optional_map<S: Serializer>(map: &Option<Map>, s: S) -> Result<S::Ok, S::Error> {
        match map {
            Some(map) => GoNumbers::Map(map).serialize(s),
            None => s.serialize_none(),
        }
    }

    enum GoNumbers<'a> {
        Value(&'a Value),
        Map(&'a Map),
    }

    impl Serialize for GoNumbers<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let map = match self {
                GoNumbers::Map(map) => map,
                GoNumbers::Value(Value::Object(map)) => map,
                GoNumbers::Value(Value::Array(items)) => {
                    let mut seq = s.serialize_seq(Some(items.len()))?;
                    for item in items.iter() {
                        seq.serialize_element(&GoNumbers::Value(item))?;
                    }
                    return seq.end();
                }
                GoNumbers::Value(Value::Number(n)) if n.is_f64() => {
                    let f = n.as_f64().unwrap_or_default();
                    // Exactly representable as i64: Go writes the digits, no point.
                    return if f.fract() == 0.0 && f.abs() < 9.0e18 {
                        s.serialize_i64(f as i64)
                    } else {
                        s.serialize_f64(f)
                    };
                }
                GoNumbers::Value(other) => return other.serialize(s),
            };
            let mut out = s.serialize_map(Some(map.len()))?;
            for (key, value) in map.iter() {
                out.serialize_entry(key, &GoNumbers::Value(value))?;
            }
            out.end()
        }
    }

    #[cfg(test)]
    mod tests {
        use serde_json::json;

        #[test]
        fn integral_floats_are_written_as_integers() {
            let Ok(serde_json::Value::Object(props)) = serde_json::to_value(json!({
                "a": 1000.0, "b": 1.5, "c": [2.0, {"d": -3.0}], "e": 7, "f": 1e300, "g": "1.0"
            })) else {
                unreachable!()
            };
            let mut out = Vec::new();
            super::map(&props, &mut serde_json::Serializer::new(&mut out)).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                r#"{"a":1000,"b":1.5,"c":[2,{"d":-3}],"e":7,"f":1e+300,"g":"1.0"}"#
            );
        }
    }
}
