//! The per-network settings the Director sends to the CPI (`create_vm`) and the agent (the
//! apply spec's `networks`): `network_settings` of `manual_network.rb`,
//! `dynamic_network.rb` and `vip_network.rb`, keys in the order they write them.

use std::net::IpAddr;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::IpRequest;
use super::error::IpError;
use super::view::{CloudView, NetView};
use crate::manifest::{CloudConfig, Map, NetworkRef, NetworkType};

/// What an instance group network can be the default for (`Network.valid_defaults`).
const VALID_DEFAULTS: [&str; 3] = ["addressable", "dns", "gateway"];
/// What the only network of a group is the default for (`Network::REQUIRED_DEFAULTS`).
const REQUIRED_DEFAULTS: [&str; 2] = ["dns", "gateway"];

/// One network's settings for one instance. Serializes to the Director's JSON exactly:
/// - manual: `type, ip, prefix, netmask, cloud_properties, default?, nic_group?, dns?,
///   gateway?`
/// - dynamic: `type, cloud_properties, prefix, dns?, default?`, then `ip`, `netmask`,
///   `gateway` when known (the Director copies them from the agent's state once the VM
///   reported them, so the configuration hash matches the agent's)
/// - vip: `type, ip, cloud_properties, prefix, nic_group?`
///
/// `default` is written only when the network is the default for something.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkSettings {
    /// `manual`, `dynamic` or `vip`.
    pub network_type: NetworkType,
    /// The address (always on manual and vip networks; learned on dynamic ones).
    pub ip: Option<IpAddr>,
    /// The reservation's prefix length, as the string the Director sends (`"32"`).
    pub prefix: String,
    /// The subnet's netmask (manual; learned on dynamic networks).
    pub netmask: Option<String>,
    /// The subnet's gateway (manual; learned on dynamic networks).
    pub gateway: Option<IpAddr>,
    /// DNS servers of the subnet (or of a dynamic network without subnets).
    pub dns: Option<Vec<String>>,
    /// Sorted properties this network is the default for: `addressable`, `dns`, `gateway`.
    pub default: Vec<String>,
    /// IaaS properties of the subnet (of the network, for vip networks and dynamic ones
    /// without subnets).
    pub cloud_properties: Map,
    /// The NIC group, as the Director writes it (an integer's text).
    pub nic_group: Option<String>,
}

impl NetworkSettings {
    /// The settings as a JSON value (same keys and order as the serialization).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

impl Serialize for NetworkSettings {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let ip = self.ip.map(|ip| ip.to_string());
        let gateway = self.gateway.map(|ip| ip.to_string());
        match self.network_type {
            NetworkType::Manual => {
                map.serialize_entry("type", "manual")?;
                map.serialize_entry("ip", &ip)?;
                map.serialize_entry("prefix", &self.prefix)?;
                map.serialize_entry("netmask", &self.netmask)?;
                map.serialize_entry("cloud_properties", &self.cloud_properties)?;
                if !self.default.is_empty() {
                    map.serialize_entry("default", &self.default)?;
                }
                if let Some(nic_group) = &self.nic_group {
                    map.serialize_entry("nic_group", nic_group)?;
                }
                if let Some(dns) = &self.dns {
                    map.serialize_entry("dns", dns)?;
                }
                if let Some(gateway) = &gateway {
                    map.serialize_entry("gateway", gateway)?;
                }
            }
            NetworkType::Dynamic => {
                map.serialize_entry("type", "dynamic")?;
                map.serialize_entry("cloud_properties", &self.cloud_properties)?;
                map.serialize_entry("prefix", &self.prefix)?;
                if let Some(dns) = &self.dns {
                    map.serialize_entry("dns", dns)?;
                }
                if !self.default.is_empty() {
                    map.serialize_entry("default", &self.default)?;
                }
                if let Some(ip) = &ip {
                    map.serialize_entry("ip", ip)?;
                }
                if let Some(netmask) = &self.netmask {
                    map.serialize_entry("netmask", netmask)?;
                }
                if let Some(gateway) = &gateway {
                    map.serialize_entry("gateway", gateway)?;
                }
            }
            NetworkType::Vip => {
                map.serialize_entry("type", "vip")?;
                map.serialize_entry("ip", &ip)?;
                map.serialize_entry("cloud_properties", &self.cloud_properties)?;
                map.serialize_entry("prefix", &self.prefix)?;
                if let Some(nic_group) = &self.nic_group {
                    map.serialize_entry("nic_group", nic_group)?;
                }
            }
        }
        map.end()
    }
}

/// The properties network `name` of an instance group is the default for, sorted: `dns`
/// and `gateway` when it is the group's only network, else the valid entries of its
/// `default` list (`InstanceGroupNetworksParser#validate_default_networks`).
pub fn default_for(group_networks: &[NetworkRef], name: &str) -> Vec<String> {
    let mut defaults: Vec<String> = if group_networks.len() == 1 {
        if group_networks[0].name != name {
            return Vec::new();
        }
        REQUIRED_DEFAULTS.iter().map(|d| d.to_string()).collect()
    } else {
        group_networks
            .iter()
            .filter(|n| n.name == name)
            .flat_map(|n| &n.default)
            .filter(|d| VALID_DEFAULTS.contains(&d.as_str()))
            .cloned()
            .collect()
    };
    defaults.sort();
    defaults.dedup();
    defaults
}

/// The settings of `request`'s network for its instance, holding `ip` (the instance's
/// reservation; `None` on dynamic networks).
pub fn network_settings(
    cloud_config: &CloudConfig,
    request: &IpRequest,
    ip: Option<IpAddr>,
) -> Result<NetworkSettings, IpError> {
    let view = CloudView::new(cloud_config);
    let (_, net) = view
        .find(&request.network)
        .ok_or_else(|| IpError::UnknownNetwork {
            group: request.group.clone(),
            network: request.network.clone(),
        })?;
    settings_for(net, request, ip)
}

/// [`network_settings`] on an already parsed network.
pub(super) fn settings_for(
    net: &NetView<'_>,
    request: &IpRequest,
    ip: Option<IpAddr>,
) -> Result<NetworkSettings, IpError> {
    let mut default = request.default_for.clone();
    default.sort();
    default.dedup();
    let nic_group = request.nic_group.as_deref().map(ruby_integer_text);
    let prefix = net.prefix.to_string();
    match net.kind {
        NetworkType::Manual => {
            let ip = ip.ok_or(IpError::SettingsWithoutIp)?;
            let subnet = net.subnet_containing(ip).ok_or(IpError::NotInAnySubnet {
                ip,
                prefix: net.prefix,
            })?;
            Ok(NetworkSettings {
                network_type: NetworkType::Manual,
                ip: Some(ip),
                prefix,
                netmask: subnet.range.map(|r| netmask_text(r.netmask())),
                gateway: subnet.gateway,
                dns: dns_list(&subnet.subnet.dns),
                default,
                cloud_properties: subnet.subnet.cloud_properties.clone().unwrap_or_default(),
                nic_group,
            })
        }
        NetworkType::Dynamic => {
            let (dns, cloud_properties) = if net.subnets.is_empty() {
                if let Some(az) = &request.az {
                    return Err(IpError::NoSubnetForAz {
                        network: net.name().to_string(),
                        az: az.clone(),
                    });
                }
                (&net.network.dns, &net.network.cloud_properties)
            } else {
                let subnet = net
                    .subnets_for_az(request.az.as_deref())
                    .next()
                    .ok_or_else(|| IpError::NoSubnetForAz {
                        network: net.name().to_string(),
                        az: request.az.clone().unwrap_or_default(),
                    })?;
                (&subnet.subnet.dns, &subnet.subnet.cloud_properties)
            };
            Ok(NetworkSettings {
                network_type: NetworkType::Dynamic,
                ip: None,
                prefix,
                netmask: None,
                gateway: None,
                dns: dns_list(dns),
                default,
                cloud_properties: cloud_properties.clone().unwrap_or_default(),
                nic_group: None,
            })
        }
        NetworkType::Vip => {
            if !default.is_empty() {
                return Err(IpError::VipDefault);
            }
            Ok(NetworkSettings {
                network_type: NetworkType::Vip,
                ip,
                prefix,
                netmask: None,
                gateway: None,
                dns: None,
                default,
                cloud_properties: net.network.cloud_properties.clone().unwrap_or_default(),
                nic_group,
            })
        }
    }
}

/// DNS servers as the Director writes them (each parsed and printed again), `None` when
/// there are none.
fn dns_list(dns: &[String]) -> Option<Vec<String>> {
    if dns.is_empty() {
        return None;
    }
    Some(
        dns.iter()
            .map(|d| match d.trim().parse::<IpAddr>() {
                Ok(ip) => ip.to_string(),
                Err(_) => d.clone(),
            })
            .collect(),
    )
}

/// A netmask as Ruby's `IPAddr#netmask` prints it: dotted for IPv4, eight four-digit
/// groups for IPv6 (`ffff:ffff:ffff:ffff:0000:0000:0000:0000`).
fn netmask_text(mask: IpAddr) -> String {
    match mask {
        IpAddr::V4(m) => m.to_string(),
        IpAddr::V6(m) => m
            .segments()
            .iter()
            .map(|s| format!("{s:04x}"))
            .collect::<Vec<_>>()
            .join(":"),
    }
}

/// Ruby's `to_i.to_s` of a text: its leading integer, `0` when there is none.
fn ruby_integer_text(text: &str) -> String {
    let t = text.trim_start();
    let (negative, rest) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let digits = digits.trim_start_matches('0');
    match (digits.is_empty(), negative) {
        (true, _) => "0".to_string(),
        (false, true) => format!("-{digits}"),
        (false, false) => digits.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nic_groups_and_netmasks_print_as_the_director_prints_them() {
        assert_eq!(ruby_integer_text("1"), "1");
        assert_eq!(ruby_integer_text("007"), "7");
        assert_eq!(ruby_integer_text("x"), "0");
        assert_eq!(ruby_integer_text("-2a"), "-2");
        assert_eq!(
            netmask_text("ffff:ffff:ffff:ffff::".parse().unwrap()),
            "ffff:ffff:ffff:ffff:0000:0000:0000:0000"
        );
        assert_eq!(
            netmask_text("255.255.255.0".parse().unwrap()),
            "255.255.255.0"
        );
    }
}
