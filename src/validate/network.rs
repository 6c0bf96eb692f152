//! Subnets of the cloud config with their addresses parsed, for the IP rules of §4.9.

use std::net::IpAddr;

use ipnet::IpNet;

use super::problem::{Document, Path, Problems};
use crate::manifest::{IpRange, Network, NetworkType, Subnet};

/// A subnet whose range, gateway, reserved and static lists parsed.
#[derive(Debug, Clone)]
pub struct ParsedSubnet {
    /// Path of the subnet in the cloud config.
    pub path: Path,
    /// The CIDR block, when given and valid.
    pub range: Option<IpNet>,
    /// The gateway, when given and valid.
    pub gateway: Option<IpAddr>,
    /// Addresses never handed out.
    pub reserved: Vec<IpRange>,
    /// Addresses usable only as static IPs.
    pub static_ranges: Vec<IpRange>,
    /// AZ names of the subnet.
    pub azs: Vec<String>,
}

impl ParsedSubnet {
    /// True when `ip` is one of this subnet's static addresses.
    pub fn is_static(&self, ip: IpAddr) -> bool {
        self.static_ranges.iter().any(|r| r.contains(ip))
    }

    /// True when `ip` can never be handed out: network, broadcast, gateway or reserved.
    pub fn is_restricted(&self, ip: IpAddr) -> bool {
        let edge = self.range.is_some_and(|n| {
            n.max_prefix_len() != n.prefix_len() && (ip == n.network() || ip == n.broadcast())
        });
        edge || self.gateway == Some(ip) || self.reserved.iter().any(|r| r.contains(ip))
    }

    /// Number of addresses dynamic reservations can use.
    pub fn dynamic_capacity(&self) -> u128 {
        let Some(net) = self.range else { return 0 };
        let whole = IpRange {
            first: net.network(),
            last: net.broadcast(),
        };
        let mut excluded: Vec<IpRange> = self.reserved.clone();
        excluded.extend(self.static_ranges.iter().copied());
        if let Some(g) = self.gateway {
            excluded.push(IpRange::single(g));
        }
        if net.max_prefix_len() != net.prefix_len() {
            excluded.push(IpRange::single(net.network()));
            excluded.push(IpRange::single(net.broadcast()));
        }
        whole.len().saturating_sub(covered(&whole, &excluded))
    }
}

/// How many addresses of `within` the ranges cover (overlaps counted once).
fn covered(within: &IpRange, ranges: &[IpRange]) -> u128 {
    let mut clipped: Vec<IpRange> = ranges
        .iter()
        .filter(|r| r.overlaps(within))
        .map(|r| IpRange {
            first: r.first.max(within.first),
            last: r.last.min(within.last),
        })
        .collect();
    clipped.sort();
    let mut total = 0u128;
    let mut current: Option<IpRange> = None;
    for r in clipped {
        match current {
            Some(c) if r.first <= c.last => {
                current = Some(IpRange {
                    first: c.first,
                    last: c.last.max(r.last),
                });
            }
            Some(c) => {
                total += c.len();
                current = Some(r);
            }
            None => current = Some(r),
        }
    }
    total + current.map_or(0, |c| c.len())
}

/// The AZs a network can place instances in, as BOSH's `has_azs?` sees them: the AZs of its
/// subnets, `None` standing for a subnet without AZs (and for a dynamic network without
/// subnets, which BOSH cannot use in any AZ). `None` overall for vip networks, which fit
/// any AZ.
pub fn network_azs(network: &Network) -> Option<Vec<Option<&str>>> {
    match network.network_type() {
        NetworkType::Vip => None,
        NetworkType::Dynamic if network.subnets.is_empty() => Some(vec![None]),
        _ => {
            let mut azs: Vec<Option<&str>> = Vec::new();
            for subnet in &network.subnets {
                let names = subnet.az_names();
                if names.is_empty() && !azs.contains(&None) {
                    azs.push(None);
                }
                for az in names {
                    if !azs.contains(&Some(az)) {
                        azs.push(Some(az));
                    }
                }
            }
            Some(azs)
        }
    }
}

/// Parses the subnets of a network, reporting malformed addresses when `problems` is given.
pub fn parse_subnets(
    network: &Network,
    net_path: &Path,
    mut problems: Option<&mut Problems>,
) -> Vec<ParsedSubnet> {
    let mut out = Vec::new();
    for (si, subnet) in network.subnets.iter().enumerate() {
        let path = net_path.key("subnets").index(si);
        let mut report = |p: Path, m: String| {
            if let Some(problems) = problems.as_deref_mut() {
                problems.error(Document::CloudConfig, p, m);
            }
        };
        let range = parse_range(network, subnet, &path, &mut report);
        let gateway = subnet
            .gateway
            .as_deref()
            .and_then(|g| match g.trim().parse::<IpAddr>() {
                Ok(ip) => Some(ip),
                Err(_) => {
                    report(path.key("gateway"), format!("'{g}' is not an IP address"));
                    None
                }
            });
        let mut list = |key: &str, entries: &[String]| -> Vec<IpRange> {
            let mut ranges = Vec::new();
            for (i, e) in entries.iter().enumerate() {
                match IpRange::parse(e) {
                    Ok(r) => ranges.push(r),
                    Err(err) => report(path.key(key).index(i), err.to_string()),
                }
            }
            ranges
        };
        let reserved = list("reserved", &subnet.reserved);
        let static_ranges = list("static", &subnet.static_ips);
        out.push(ParsedSubnet {
            path,
            range,
            gateway,
            reserved,
            static_ranges,
            azs: subnet.az_names().into_iter().map(String::from).collect(),
        });
    }
    out
}

fn parse_range(
    network: &Network,
    subnet: &Subnet,
    path: &Path,
    report: &mut impl FnMut(Path, String),
) -> Option<IpNet> {
    let text = subnet.range.as_deref()?;
    match text.trim().parse::<IpNet>() {
        Ok(net) if net.trunc() == net => Some(net),
        Ok(net) => {
            report(
                path.key("range"),
                format!(
                    "'{text}' is not a network address; did you mean '{}'?",
                    net.trunc()
                ),
            );
            Some(net.trunc())
        }
        Err(_) if network.network_type() == NetworkType::Manual => {
            let hint = if text.trim().starts_with("((") {
                " (an unresolved variable)"
            } else {
                ""
            };
            report(
                path.key("range"),
                format!("'{text}' is not a CIDR block like 10.0.0.0/24{hint}"),
            );
            None
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_excludes_edges_gateway_reserved_and_static() {
        let network = Network {
            name: "n".into(),
            subnets: vec![Subnet {
                range: Some("10.0.0.0/24".into()),
                gateway: Some("10.0.0.1".into()),
                reserved: vec!["10.0.0.1 - 10.0.0.10".into()],
                static_ips: vec!["10.0.0.11 - 10.0.0.20".into()],
                ..Subnet::default()
            }],
            ..Network::default()
        };
        let subnets = parse_subnets(&network, &Path::root(), None);
        // 256 - network - broadcast - .1..=.10 (gateway inside) - .11..=.20
        assert_eq!(subnets[0].dynamic_capacity(), 256 - 2 - 10 - 10);
    }
}
