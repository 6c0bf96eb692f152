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

    /// The lowest address of `range` that can never be handed out (network, broadcast,
    /// gateway or reserved), with why. Computed from the restricted addresses, never by
    /// walking the range, which may be an IPv6 block of 2^64 addresses.
    pub fn first_restricted_in(&self, range: &IpRange) -> Option<(IpAddr, &'static str)> {
        let mut candidates: Vec<IpAddr> = self.gateway.into_iter().collect();
        if let Some(n) = self.range {
            candidates.extend([n.network(), n.broadcast()]);
        }
        candidates.extend(
            self.reserved
                .iter()
                .filter(|r| r.overlaps(range))
                .map(|r| r.first.max(range.first)),
        );
        candidates
            .into_iter()
            .filter(|ip| range.contains(*ip))
            .filter_map(|ip| Some((ip, self.restriction(ip)?)))
            .min()
    }

    /// Why `ip` can never be handed out, for messages: `the gateway`, `reserved`, ...
    pub fn restriction(&self, ip: IpAddr) -> Option<&'static str> {
        let edges = self
            .range
            .filter(|n| n.max_prefix_len() != n.prefix_len())
            .map(|n| (n.network(), n.broadcast()));
        if self.gateway == Some(ip) {
            Some("the gateway")
        } else if edges.is_some_and(|(network, _)| ip == network) {
            Some("the network address")
        } else if edges.is_some_and(|(_, broadcast)| ip == broadcast) {
            Some("the broadcast address")
        } else if self.reserved.iter().any(|r| r.contains(ip)) {
            Some("reserved")
        } else {
            None
        }
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

/// The address rules of a network's subnets, wherever the network is defined (a cloud
/// config, or a create-env manifest): required range and gateway on manual networks,
/// addresses that parse, gateway, reserved and static ranges inside the range and apart,
/// subnets that do not overlap.
pub fn check_subnets(document: Document, network: &Network, path: &Path, problems: &mut Problems) {
    let manual = network.network_type() == NetworkType::Manual;
    for (si, subnet) in network.subnets.iter().enumerate() {
        let sp = path.key("subnets").index(si);
        if manual && network.managed != Some(true) {
            if subnet.range.is_none() {
                problems.error(document, sp.key("range"), "is required on a manual network");
            }
            if subnet.gateway.is_none() {
                problems.error(
                    document,
                    sp.key("gateway"),
                    "is required on a manual network",
                );
            }
        }
        for (di, dns) in subnet.dns.iter().enumerate() {
            if dns.trim().parse::<IpAddr>().is_err() {
                problems.error(
                    document,
                    sp.key("dns").index(di),
                    format!("'{dns}' is not an IP address"),
                );
            }
        }
    }
    let subnets = parse_subnets(network, path, Some((document, &mut *problems)));
    if !manual {
        return;
    }
    for (si, s) in subnets.iter().enumerate() {
        check_subnet_addresses(document, &network.subnets[si], s, problems);
        for other in &subnets[..si] {
            if let (Some(a), Some(b)) = (s.range, other.range)
                && (a.contains(&b.network()) || b.contains(&a.network()))
            {
                problems.error(
                    document,
                    s.path.key("range"),
                    format!(
                        "subnet {a} overlaps subnet {b} (at {}) of the same network",
                        other.path
                    ),
                );
            }
        }
    }
}

fn check_subnet_addresses(
    document: Document,
    subnet: &Subnet,
    s: &ParsedSubnet,
    problems: &mut Problems,
) {
    let Some(net) = s.range else { return };
    if net.prefix_len() == net.max_prefix_len() {
        // BOSH manual_network_subnet.rb: "should include at least 2 IPs".
        problems.error(
            document,
            s.path.key("range"),
            format!("range {net} holds a single address; a subnet needs at least 2"),
        );
        return;
    }
    if let Some(g) = s.gateway {
        if !net.contains(&g) {
            problems.error(
                document,
                s.path.key("gateway"),
                format!("gateway {g} is outside the subnet range {net}"),
            );
        } else if net.prefix_len() != net.max_prefix_len()
            && (g == net.network() || g == net.broadcast())
        {
            problems.error(
                document,
                s.path.key("gateway"),
                format!("gateway {g} is the network or broadcast address of {net}"),
            );
        }
    }
    let inside = |r: &IpRange| net.contains(&r.first) && net.contains(&r.last);
    for (i, text) in subnet.reserved.iter().enumerate() {
        let Ok(r) = IpRange::parse(text) else {
            continue;
        };
        if !inside(&r) {
            problems.error(
                document,
                s.path.key("reserved").index(i),
                format!("reserved range '{text}' is outside the subnet range {net}"),
            );
        }
    }
    for (i, text) in subnet.static_ips.iter().enumerate() {
        let Ok(r) = IpRange::parse(text) else {
            continue;
        };
        if !inside(&r) {
            problems.error(
                document,
                s.path.key("static").index(i),
                format!("static range '{text}' is outside the subnet range {net}"),
            );
        } else if let Some((ip, why)) = s.first_restricted_in(&r) {
            problems.error(
                document,
                s.path.key("static").index(i),
                format!("static range '{text}' includes {ip}, which is {why} and can never be handed out"),
            );
        }
    }
}

/// `AZs z1, z2`, `no AZ`, or `AZ z1 and subnets without AZs`, for messages.
pub fn az_list(azs: &[Option<&str>]) -> String {
    let named: Vec<&str> = azs.iter().flatten().copied().collect();
    let unzoned = azs.contains(&None);
    match (named.as_slice(), unzoned) {
        ([], _) => "no AZ".to_string(),
        ([one], false) => format!("AZ {one}"),
        (many, false) => format!("AZs {}", many.join(", ")),
        (many, true) => format!("AZs {} and subnets without AZs", many.join(", ")),
    }
}

/// Parses the subnets of a network, reporting malformed addresses when `report` is given.
pub fn parse_subnets(
    network: &Network,
    net_path: &Path,
    mut report_to: Option<(Document, &mut Problems)>,
) -> Vec<ParsedSubnet> {
    let mut out = Vec::new();
    for (si, subnet) in network.subnets.iter().enumerate() {
        let path = net_path.key("subnets").index(si);
        let mut report = |p: Path, m: String| {
            if let Some((document, problems)) = report_to.as_mut() {
                problems.error(*document, p, m);
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

    #[test]
    fn restricted_addresses_are_found_without_walking_huge_ranges() {
        let network = Network {
            name: "v6".into(),
            subnets: vec![Subnet {
                range: Some("fd00::/56".into()),
                gateway: Some("fd00::1".into()),
                reserved: vec!["fd00:0:0:2::5 - fd00:0:0:2::9".into()],
                ..Subnet::default()
            }],
            ..Network::default()
        };
        let s = &parse_subnets(&network, &Path::root(), None)[0];
        // A /64 of 2^64 addresses: walking it would never end.
        let clean = IpRange::parse("fd00:0:0:1::/64").unwrap();
        assert_eq!(s.first_restricted_in(&clean), None);
        let with_reserved = IpRange::parse("fd00:0:0:2::/64").unwrap();
        assert_eq!(
            s.first_restricted_in(&with_reserved),
            Some(("fd00:0:0:2::5".parse().unwrap(), "reserved"))
        );
        let with_gateway = IpRange::parse("fd00::/64").unwrap();
        assert_eq!(
            s.first_restricted_in(&with_gateway),
            Some(("fd00::".parse().unwrap(), "the network address"))
        );
    }
}
