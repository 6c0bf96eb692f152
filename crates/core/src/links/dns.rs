//! BOSH DNS names for links (`dns/dns_encoder.rb`, `dns/canonicalizer.rb`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Why a DNS name cannot be formed (texts as the Director's encoder and canonicalizer word
/// them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsNameError {
    /// The canonical form of a label starts with `-`.
    #[error("Invalid DNS canonical name '{0}', cannot start with a hyphen")]
    LeadingHyphen(String),
    /// The canonical form of a label ends with `-`.
    #[error("Invalid DNS canonical name '{0}', cannot end with a hyphen")]
    TrailingHyphen(String),
    /// Short names were asked for without the numeric encodings.
    #[error("short DNS names need the Director's numeric encodings")]
    NoShortIds,
    /// The instance has no short-name number.
    #[error("Unknown instance UUID: '{0}'")]
    UnknownInstance(String),
    /// The network has no short-name number.
    #[error("Unknown Network: '{0}'")]
    UnknownNetwork(String),
    /// The group has no short-name number.
    #[error("Unknown DNS group '{group}' of deployment '{deployment}'")]
    UnknownGroup {
        /// The group's name.
        group: String,
        /// Its deployment.
        deployment: String,
    },
}

/// How the Director forms addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsSettings {
    /// The DNS root domain (`bosh` by default).
    pub root_domain: String,
    /// Local DNS is enabled: `use_dns_addresses` gives DNS names (otherwise only dynamic
    /// networks do, as in the Director).
    pub local_dns_enabled: bool,
    /// Numeric encodings for short (`q-…`) names; needed only with
    /// `use_short_dns_addresses` or `use_link_dns_names`.
    pub short: Option<ShortDnsIds>,
}

impl Default for DnsSettings {
    fn default() -> Self {
        DnsSettings {
            root_domain: "bosh".into(),
            local_dns_enabled: true,
            short: None,
        }
    }
}

/// What a DNS group is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GroupType {
    /// All instances of an instance group (`instance-group`).
    #[serde(rename = "instance-group")]
    InstanceGroup,
    /// All instances providing a link (`link`; group name `<link name>-<type>`).
    #[serde(rename = "link")]
    Link,
}

/// The small integers short DNS names use (the Director keeps them in its database:
/// instance ids, `local_dns_encoded_networks`, `local_dns_encoded_groups`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShortDnsIds {
    /// Instance number by instance id (uuid).
    pub instances: BTreeMap<String, u64>,
    /// Network number by network name.
    pub networks: BTreeMap<String, u64>,
    /// Group number by (type, group name, deployment).
    pub groups: BTreeMap<(GroupType, String, String), u64>,
}

/// A DNS label as BOSH makes it: lowercase, `_` → `-`, characters outside `[a-z0-9-]`
/// dropped; a leading or trailing `-` is an error.
pub fn canonicalize(text: &str) -> Result<String, DnsNameError> {
    let s: String = text
        .to_lowercase()
        .replace('_', "-")
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .collect();
    if s.starts_with('-') {
        return Err(DnsNameError::LeadingHyphen(s));
    }
    if s.ends_with('-') {
        return Err(DnsNameError::TrailingHyphen(s));
    }
    Ok(s)
}

/// What to encode (`DnsEncoder#encode_query`'s criteria; no AZ or health filter: `s0`).
pub(super) struct Query<'a> {
    pub group_type: GroupType,
    pub group_name: &'a str,
    pub network: &'a str,
    pub deployment: &'a str,
    pub root_domain: &'a str,
    pub uuid: Option<&'a str>,
    pub short: bool,
}

/// `DnsEncoder#encode_query`: `<uuid>.<group>.<network>.<deployment>.<domain>` for one
/// instance, `q-s0.<group>.<network>.<deployment>.<domain>` for a group, and with short
/// names `q-m<instance>n<network>s0.q-g<group>.<domain>` / `q-n<network>s0.q-g<group>.<domain>`.
pub(super) fn encode(q: &Query<'_>, ids: Option<&ShortDnsIds>) -> Result<String, DnsNameError> {
    let mut octets = Vec::new();
    if q.short {
        let ids = ids.ok_or(DnsNameError::NoShortIds)?;
        let mut slug = Vec::new();
        if let Some(uuid) = q.uuid {
            let n = ids
                .instances
                .get(uuid)
                .ok_or_else(|| DnsNameError::UnknownInstance(uuid.to_string()))?;
            slug.push(format!("m{n}"));
        }
        let n = ids
            .networks
            .get(q.network)
            .ok_or_else(|| DnsNameError::UnknownNetwork(q.network.to_string()))?;
        slug.push(format!("n{n}"));
        slug.push("s0".into());
        slug.sort();
        octets.push(format!("q-{}", slug.concat()));
        let key = (
            q.group_type,
            q.group_name.to_string(),
            q.deployment.to_string(),
        );
        let g = ids
            .groups
            .get(&key)
            .ok_or_else(|| DnsNameError::UnknownGroup {
                group: q.group_name.to_string(),
                deployment: q.deployment.to_string(),
            })?;
        octets.push(format!("q-g{g}"));
    } else {
        octets.push(match q.uuid {
            Some(uuid) => uuid.to_string(),
            None => "q-s0".into(),
        });
        octets.push(canonicalize(q.group_name)?);
        octets.push(canonicalize(q.network)?);
        octets.push(canonicalize(q.deployment)?);
    }
    octets.push(q.root_domain.to_string());
    Ok(octets.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query<'a>(uuid: Option<&'a str>, short: bool) -> Query<'a> {
        Query {
            group_type: GroupType::InstanceGroup,
            group_name: "Web_Server",
            network: "default",
            deployment: "cf",
            root_domain: "bosh",
            uuid,
            short,
        }
    }

    #[test]
    fn long_names() {
        assert_eq!(
            encode(&query(Some("abc-123"), false), None).unwrap(),
            "abc-123.web-server.default.cf.bosh"
        );
        assert_eq!(
            encode(&query(None, false), None).unwrap(),
            "q-s0.web-server.default.cf.bosh"
        );
    }

    #[test]
    fn short_names() {
        let mut ids = ShortDnsIds::default();
        ids.instances.insert("abc-123".into(), 12);
        ids.networks.insert("default".into(), 3);
        ids.groups.insert(
            (GroupType::InstanceGroup, "Web_Server".into(), "cf".into()),
            7,
        );
        assert_eq!(
            encode(&query(Some("abc-123"), true), Some(&ids)).unwrap(),
            "q-m12n3s0.q-g7.bosh"
        );
        assert_eq!(
            encode(&query(None, true), Some(&ids)).unwrap(),
            "q-n3s0.q-g7.bosh"
        );
        assert!(encode(&query(None, true), None).is_err());
    }

    #[test]
    fn canonical_names() {
        assert_eq!(canonicalize("My_Group.1").unwrap(), "my-group1");
        assert_eq!(
            canonicalize("_x").unwrap_err().to_string(),
            "Invalid DNS canonical name '-x', cannot start with a hyphen"
        );
        assert!(canonicalize("x_").is_err());
    }
}
