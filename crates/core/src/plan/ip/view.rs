//! The networks of a cloud config as IP allocation sees them: subnets with their addresses
//! parsed once (by `validate::network::parse_subnets`), restricted and static intervals per
//! subnet, and each network's delegated prefix.

use std::net::IpAddr;

use ipnet::IpNet;

use super::space::{IntervalSet, family, host_mask, number};
use crate::manifest::{CloudConfig, IpRange, Network, NetworkType, Subnet};
use crate::validate::Path;
use crate::validate::network::parse_subnets;

/// IPv4 default prefix of a reservation (`Network::IPV4_DEFAULT_PREFIX_SIZE`).
pub(super) const IPV4_PREFIX: u8 = 32;
/// IPv6 default prefix of a reservation (`Network::IPV6_DEFAULT_PREFIX_SIZE`).
pub(super) const IPV6_PREFIX: u8 = 128;

/// All networks of a cloud config.
pub(super) struct CloudView<'a> {
    pub(super) networks: Vec<NetView<'a>>,
}

/// One network.
pub(super) struct NetView<'a> {
    pub(super) network: &'a Network,
    pub(super) kind: NetworkType,
    pub(super) subnets: Vec<SubnetView<'a>>,
    /// The prefix of every reservation on this network, as BOSH takes it: the first
    /// subnet's (all subnets must agree), else 32.
    pub(super) prefix: u8,
}

/// One subnet.
pub(super) struct SubnetView<'a> {
    pub(super) subnet: &'a Subnet,
    pub(super) range: Option<IpNet>,
    pub(super) gateway: Option<IpAddr>,
    /// Network address, broadcast address, gateway and `reserved` (`restricted_ips`).
    restricted: Vec<IpRange>,
    /// The `static` list, in its order.
    pub(super) statics: Vec<IpRange>,
    /// Restricted and static addresses as one set of the range's family, for the dynamic
    /// allocator.
    pub(super) unavailable: IntervalSet,
    pub(super) azs: Vec<String>,
}

impl<'a> CloudView<'a> {
    /// Parses every network of `cloud_config`.
    pub(super) fn new(cloud_config: &'a CloudConfig) -> CloudView<'a> {
        CloudView {
            networks: cloud_config.networks.iter().map(NetView::new).collect(),
        }
    }

    /// The network called `name`, with its position.
    pub(super) fn find(&self, name: &str) -> Option<(usize, &NetView<'a>)> {
        self.networks
            .iter()
            .enumerate()
            .find(|(_, n)| n.network.name == name)
    }
}

impl<'a> NetView<'a> {
    /// Parses one network.
    pub(super) fn new(network: &'a Network) -> NetView<'a> {
        let kind = network.network_type();
        let parsed = parse_subnets(network, &Path::root(), None);
        let subnets: Vec<SubnetView<'a>> = network
            .subnets
            .iter()
            .zip(parsed)
            .map(|(subnet, p)| {
                let mut restricted = Vec::new();
                if kind == NetworkType::Manual {
                    if let Some(net) = p.range {
                        restricted.push(IpRange::single(net.network()));
                        restricted.push(IpRange::single(net.broadcast()));
                    }
                    restricted.extend(p.gateway.map(IpRange::single));
                    restricted.extend(p.reserved.iter().copied());
                }
                let mut unavailable = IntervalSet::default();
                if let Some(net) = p.range {
                    let fam = family(net.network());
                    for r in restricted.iter().chain(&p.static_ranges) {
                        if family(r.first) == fam {
                            unavailable.insert(number(r.first), number(r.last));
                        }
                    }
                }
                SubnetView {
                    subnet,
                    range: p.range,
                    gateway: p.gateway,
                    restricted,
                    statics: p.static_ranges,
                    unavailable,
                    azs: p.azs,
                }
            })
            .collect();
        let prefix = match kind {
            NetworkType::Dynamic => IPV4_PREFIX,
            _ => subnets.first().map_or(IPV4_PREFIX, SubnetView::prefix),
        };
        NetView {
            network,
            kind,
            subnets,
            prefix,
        }
    }

    /// The network's name.
    pub(super) fn name(&self) -> &str {
        &self.network.name
    }

    /// A vip network whose addresses the cloud config lists (`subnets[].static`), so BOSH
    /// picks them (`globally_allocate_ip?`).
    pub(super) fn allocates_vips(&self) -> bool {
        self.kind == NetworkType::Vip && !self.subnets.is_empty()
    }

    /// The first subnet whose range holds `ip` (`find_subnet_containing`).
    pub(super) fn subnet_containing(&self, ip: IpAddr) -> Option<&SubnetView<'a>> {
        self.subnets.iter().find(|s| s.contains(ip))
    }

    /// True when `ip` is in some subnet's `static` list (`ip_type`).
    pub(super) fn is_static(&self, ip: IpAddr) -> bool {
        self.subnets.iter().any(|s| s.is_static(ip))
    }

    /// True when some subnet could hold a reservation of `ip` (`is_reservable?`): inside
    /// the range and not restricted on manual networks, listed as static on vip networks.
    pub(super) fn is_reservable(&self, ip: IpAddr, prefix: u8) -> bool {
        self.subnets
            .iter()
            .any(|s| s.is_reservable(self.kind, ip, prefix))
    }

    /// The AZs of the subnet owning `ip` (`find_az_names_for_ip`); all AZs of a dynamic
    /// network.
    pub(super) fn az_names_for_ip(&self, ip: IpAddr) -> Vec<String> {
        match self.kind {
            NetworkType::Manual => self
                .subnet_containing(ip)
                .map(|s| s.azs.clone())
                .unwrap_or_default(),
            NetworkType::Vip => self
                .subnets
                .iter()
                .find(|s| s.is_static(ip))
                .map(|s| s.azs.clone())
                .unwrap_or_default(),
            NetworkType::Dynamic => {
                let mut azs: Vec<String> = Vec::new();
                for az in self.subnets.iter().flat_map(|s| &s.azs) {
                    if !azs.contains(az) {
                        azs.push(az.clone());
                    }
                }
                azs
            }
        }
    }

    /// The subnets an instance in `az` may take addresses from, in order
    /// (`filter_subnet_by_instance_az`): all of them for an instance without an AZ.
    pub(super) fn subnets_for_az(&self, az: Option<&str>) -> impl Iterator<Item = &SubnetView<'a>> {
        self.subnets.iter().filter(move |s| s.serves_az(az))
    }
}

impl SubnetView<'_> {
    /// The subnet's delegated prefix: `prefix`, else one address of its range's family.
    pub(super) fn prefix(&self) -> u8 {
        match self.subnet.prefix {
            Some(p) => u8::try_from(p).unwrap_or(u8::MAX),
            None if self.range.is_some_and(|r| r.network().is_ipv6()) => IPV6_PREFIX,
            None => IPV4_PREFIX,
        }
    }

    /// True when the range holds `ip`.
    pub(super) fn contains(&self, ip: IpAddr) -> bool {
        self.range.is_some_and(|r| r.contains(&ip))
    }

    /// True when `ip` is the network, broadcast or gateway address or reserved.
    pub(super) fn is_restricted(&self, ip: IpAddr) -> bool {
        self.restricted.iter().any(|r| r.contains(ip))
    }

    /// True when `ip` is in the `static` list.
    pub(super) fn is_static(&self, ip: IpAddr) -> bool {
        self.statics.iter().any(|r| r.contains(ip))
    }

    /// `is_reservable?` for a `prefix`-long block at `ip`.
    pub(super) fn is_reservable(&self, kind: NetworkType, ip: IpAddr, prefix: u8) -> bool {
        match kind {
            NetworkType::Vip => self.is_static(ip),
            NetworkType::Dynamic => false,
            NetworkType::Manual => {
                let first = number(ip);
                let last = first | host_mask(family(ip), prefix);
                let last_ip = super::space::address(family(ip), last);
                self.contains(ip)
                    && self.contains(last_ip)
                    && !self.restricted.iter().any(|r| {
                        family(r.first) == family(ip)
                            && number(r.first) <= last
                            && first <= number(r.last)
                    })
            }
        }
    }

    /// True when an instance in `az` may use this subnet.
    pub(super) fn serves_az(&self, az: Option<&str>) -> bool {
        az.is_none_or(|az| self.azs.iter().any(|a| a == az))
    }
}
