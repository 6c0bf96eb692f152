//! [`allocate`]: keep, reserve, release (see the module documentation), and
//! [`static_ip_azs`].

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use indexmap::IndexMap;

use super::error::IpError;
use super::settings::settings_for;
use super::space::{Family, IntervalSet, address, family, host_mask, host_prefix, number};
use super::view::{CloudView, NetView, SubnetView};
use super::{Allocation, Assigned, IpRequest, Reservation};
use crate::manifest::{CloudConfig, IpRange, NetworkType};

/// Assigns an address to every request (see the module documentation).
///
/// `existing` are the reservations this deployment's instances hold from the last deploy
/// (including instances this deploy deletes); `elsewhere` those of other deployments,
/// never taken. Errors come in request order, at most one per request.
pub fn allocate(
    deployment: &str,
    cloud_config: &CloudConfig,
    requests: &[IpRequest],
    existing: &[Reservation],
    elsewhere: &[Reservation],
) -> Result<Allocation, Vec<IpError>> {
    let view = CloudView::new(cloud_config);
    let mut table = Table::default();
    for r in existing.iter().chain(elsewhere) {
        table.hold(r);
    }
    // Each problem with the request it is about, at most one per request.
    let mut errors: Vec<(usize, IpError)> = Vec::new();
    let mut error_at: Vec<bool> = vec![false; requests.len()];

    // The network of each request, once the request makes sense on it.
    let mut networks: Vec<Option<usize>> = Vec::with_capacity(requests.len());
    for (i, r) in requests.iter().enumerate() {
        match check_request(&view, r) {
            Ok(n) => networks.push(Some(n)),
            Err(e) => {
                networks.push(None);
                errors.push((i, e));
                error_at[i] = true;
            }
        }
    }

    // 1. Keep: reconcile each instance's existing reservations with its requests.
    let Kept {
        mut served,
        request: kept_request,
        existing: kept_existing,
    } = keep_existing(&view, requests, existing, &networks);

    // 2. Reserve what was not kept, in request order.
    for (i, r) in requests.iter().enumerate() {
        let Some(n) = networks[i] else { continue };
        if kept_request[i] {
            continue;
        }
        match table.reserve(&view, n, deployment, r) {
            Ok(reservation) => served[i] = reservation,
            Err(e) => {
                errors.push((i, e));
                error_at[i] = true;
            }
        }
    }

    // 3. Release what no request kept, unless its holder reserved the address again.
    let released = to_release(existing, &kept_existing, &served);

    // 4. Settings.
    let mut assigned = Vec::with_capacity(requests.len());
    for (i, r) in requests.iter().enumerate() {
        let Some(n) = networks[i] else { continue };
        if error_at[i] {
            continue;
        }
        let reservation = served[i].take();
        match settings_for(&view.networks[n], r, reservation.as_ref().map(|s| s.ip)) {
            Ok(settings) => assigned.push(Assigned {
                kept: kept_request[i],
                reservation,
                settings,
            }),
            Err(e) => errors.push((i, e)),
        }
    }

    if errors.is_empty() {
        Ok(Allocation { assigned, released })
    } else {
        errors.sort_by_key(|(i, _)| *i);
        Err(errors.into_iter().map(|(_, e)| e).collect())
    }
}

/// What the keep step decided, by position in the requests and in the existing
/// reservations.
struct Kept {
    /// The reservation serving each request, when one was kept for it.
    served: Vec<Option<Reservation>>,
    /// True for each request an existing reservation serves.
    request: Vec<bool>,
    /// True for each existing reservation that serves a request.
    existing: Vec<bool>,
}

/// Step 1: each instance's existing reservations reconciled with its requests (those with
/// a network), instance by instance in request order.
fn keep_existing(
    view: &CloudView<'_>,
    requests: &[IpRequest],
    existing: &[Reservation],
    networks: &[Option<usize>],
) -> Kept {
    let mut kept = Kept {
        served: vec![None; requests.len()],
        request: vec![false; requests.len()],
        existing: vec![false; existing.len()],
    };
    let mut existing_of: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, e) in existing.iter().enumerate() {
        existing_of
            .entry(e.instance_id.as_str())
            .or_default()
            .push(i);
    }
    let mut requests_of: IndexMap<&str, Vec<usize>> = IndexMap::new();
    for (i, r) in requests.iter().enumerate() {
        if networks[i].is_some() {
            requests_of
                .entry(r.instance_id.as_str())
                .or_default()
                .push(i);
        }
    }
    for (instance_id, mut open) in requests_of {
        let az = requests[open[0]].az.as_deref();
        for &ei in existing_of.get(instance_id).map_or(&[][..], Vec::as_slice) {
            let e = &existing[ei];
            let Some(found) = keep(view, e, az, &open, requests, networks) else {
                continue;
            };
            let ri = open.remove(found);
            kept.existing[ei] = true;
            kept.request[ri] = true;
            let net = networks[ri].map(|n| &view.networks[n]);
            kept.served[ri] = Some(Reservation {
                network: net.map_or_else(|| e.network.clone(), |n| n.name().to_string()),
                is_static: net.is_some_and(|n| desired_static(n, &requests[ri])),
                ..e.clone()
            });
        }
    }
    kept
}

/// Step 3: the existing reservations no request kept, unless their holder reserved the
/// same address again.
fn to_release(
    existing: &[Reservation],
    kept_existing: &[bool],
    served: &[Option<Reservation>],
) -> Vec<Reservation> {
    let reserved_again: HashSet<(&str, IpAddr)> = served
        .iter()
        .flatten()
        .map(|r| (r.instance_id.as_str(), r.ip))
        .collect();
    existing
        .iter()
        .zip(kept_existing)
        .filter(|(e, kept)| !**kept && !reserved_again.contains(&(e.instance_id.as_str(), e.ip)))
        .map(|(e, _)| e.clone())
        .collect()
}

/// The AZs of the subnet listing each static IP of instance group `group` on `network`
/// (`NetworksToStaticIps`): instances with static IPs are placed in those AZs. An empty
/// list means a subnet without AZs. Only manual networks place instances (the Director
/// leaves vip networks out of placement).
pub fn static_ip_azs(
    cloud_config: &CloudConfig,
    group: &str,
    network: &str,
    ips: &[IpAddr],
) -> Result<Vec<(IpAddr, Vec<String>)>, IpError> {
    let view = CloudView::new(cloud_config);
    let (_, net) = view.find(network).ok_or_else(|| IpError::UnknownNetwork {
        group: group.to_string(),
        network: network.to_string(),
    })?;
    if net.kind == NetworkType::Dynamic {
        return Err(IpError::StaticIpOnDynamicNetwork {
            group: group.to_string(),
            network: network.to_string(),
        });
    }
    ips.iter()
        .map(|&ip| {
            net.subnets
                .iter()
                .find(|s| s.is_static(ip))
                .map(|s| (ip, s.azs.clone()))
                .ok_or_else(|| IpError::StaticIpInNoSubnet {
                    group: group.to_string(),
                    network: network.to_string(),
                    ip,
                    prefix: host_prefix(ip),
                })
        })
        .collect()
}

/// The network of a request, if the request makes sense on it.
fn check_request(view: &CloudView<'_>, r: &IpRequest) -> Result<usize, IpError> {
    let (n, net) = view
        .find(&r.network)
        .ok_or_else(|| IpError::UnknownNetwork {
            group: r.group.clone(),
            network: r.network.clone(),
        })?;
    match net.kind {
        NetworkType::Dynamic if r.static_ip.is_some() => Err(IpError::StaticIpOnDynamicNetwork {
            group: r.group.clone(),
            network: r.network.clone(),
        }),
        NetworkType::Vip if net.allocates_vips() && r.static_ip.is_some() => {
            Err(IpError::VipIpsTwice)
        }
        _ => Ok(n),
    }
}

/// True when the request wants a static reservation (`DesiredNetworkReservation.new_static`):
/// a static IP, or any address on a vip network without cloud config addresses.
fn desired_static(net: &NetView<'_>, r: &IpRequest) -> bool {
    r.static_ip.is_some() || (net.kind == NetworkType::Vip && !net.allocates_vips())
}

/// The position in `open` of the request existing reservation `e` serves, if any
/// (`ReservationReconciler#reconcile` for one existing reservation).
fn keep(
    view: &CloudView<'_>,
    e: &Reservation,
    az: Option<&str>,
    open: &[usize],
    requests: &[IpRequest],
    networks: &[Option<usize>],
) -> Option<usize> {
    let en = network_of_existing(view, e)?;
    let enet = &view.networks[en];
    if !az_matches(enet, e, az) {
        return None;
    }
    // The first request whose network can hold the address, as the Director matches them.
    let position = open.iter().position(|&ri| {
        let r = &requests[ri];
        networks[ri].is_some_and(|rn| {
            holds_address(view, en, rn, e, az)
                && (!desired_static(&view.networks[rn], r) || r.static_ip == Some(e.ip))
        })
    })?;
    let ri = open[position];
    let r = &requests[ri];
    let rnet = &view.networks[networks[ri]?];
    let wants_static = desired_static(rnet, r);
    let same_kind = match existing_is_static(enet, e) {
        Some(is_static) => is_static == wants_static && (!is_static || r.static_ip == Some(e.ip)),
        None => false,
    };
    let both_vip = enet.kind == NetworkType::Vip && rnet.kind == NetworkType::Vip;
    // A delegated prefix that changed cannot serve: the settings would not match the
    // subnet (the Director fails there with 130015).
    let prefix_fits = rnet.kind != NetworkType::Manual || e.prefix == rnet.prefix;
    ((same_kind || both_vip) && prefix_fits).then_some(position)
}

/// The network an existing reservation belongs to now (`InstanceNetworkReservations#
/// find_network`): its own when dynamic or a vip network without cloud config addresses,
/// else the first of its own and then all networks whose subnets can hold the address;
/// `None` when none can (the reservation is obsolete).
fn network_of_existing(view: &CloudView<'_>, e: &Reservation) -> Option<usize> {
    let named = view.find(&e.network);
    if let Some((n, net)) = named
        && (net.kind == NetworkType::Dynamic
            || (net.kind == NetworkType::Vip && !net.allocates_vips()))
    {
        return Some(n);
    }
    named
        .map(|(n, _)| n)
        .into_iter()
        .chain(0..view.networks.len())
        .find(|&n| {
            let net = &view.networks[n];
            net.kind != NetworkType::Dynamic && net.is_reservable(e.ip, e.prefix)
        })
}

/// True when the existing reservation's AZs include the instance's (`able_to_match_az`).
fn az_matches(enet: &NetView<'_>, e: &Reservation, az: Option<&str>) -> bool {
    let names: Vec<String> = if enet.kind == NetworkType::Vip && !enet.allocates_vips() {
        az.map(String::from).into_iter().collect()
    } else {
        enet.az_names_for_ip(e.ip)
    };
    match az {
        None => names.is_empty(),
        Some(az) => names.iter().any(|n| n == az),
    }
}

/// Whether the existing reservation counts as static (`reserve_existing_ips` resolving its
/// type); `None` when it cannot serve at all (an address on a dynamic network).
fn existing_is_static(enet: &NetView<'_>, e: &Reservation) -> Option<bool> {
    match enet.kind {
        NetworkType::Manual => Some(enet.is_static(e.ip)),
        NetworkType::Dynamic => None,
        NetworkType::Vip => Some(!enet.allocates_vips()),
    }
}

/// True when desired network `rn` can take over existing reservation `e` on `en`
/// (`reservation_contains_assigned_address?`).
fn holds_address(
    view: &CloudView<'_>,
    en: usize,
    rn: usize,
    e: &Reservation,
    az: Option<&str>,
) -> bool {
    if en == rn {
        return true;
    }
    let (enet, rnet) = (&view.networks[en], &view.networks[rn]);
    if enet.kind == NetworkType::Dynamic || rnet.kind == NetworkType::Dynamic {
        return false;
    }
    if enet.prefix != rnet.prefix {
        return false;
    }
    rnet.subnets.iter().any(|s| {
        (s.azs.is_empty() || az.is_some_and(|az| s.azs.iter().any(|a| a == az)))
            && s.is_reservable(rnet.kind, e.ip, e.prefix)
    })
}

/// Who holds an address.
#[derive(Debug, Clone)]
struct Holder {
    /// `group/uuid`.
    name: String,
    instance_id: String,
    deployment: String,
}

/// Every held address: the Director's `ip_addresses` table, in memory.
#[derive(Debug, Default)]
struct Table {
    /// Held blocks per family.
    used: [IntervalSet; 2],
    /// The holder of each reserved address (first address of its block), as the table's
    /// unique `address_str` sees it.
    holders: HashMap<(Family, u128), Holder>,
    /// Per (network, subnet): every block below this number is known to be taken. Only
    /// grows, since nothing is freed during an allocation.
    cursors: HashMap<(usize, usize), u128>,
}

impl Table {
    /// Marks a reservation's block as held.
    fn hold(&mut self, r: &Reservation) {
        let fam = family(r.ip);
        let first = number(r.ip);
        self.used[fam].insert(first, first | host_mask(fam, r.prefix));
        self.holders.entry((fam, first)).or_insert_with(|| Holder {
            name: r.holder_name(),
            instance_id: r.instance_id.clone(),
            deployment: r.deployment.clone(),
        });
    }

    /// Fails when another instance holds `ip` (`validate_instance_and_update_reservation_type`).
    fn check_free(
        &self,
        ip: IpAddr,
        prefix: u8,
        deployment: &str,
        r: &IpRequest,
    ) -> Result<(), IpError> {
        match self.holders.get(&(family(ip), number(ip))) {
            Some(h) if h.instance_id != r.instance_id || h.deployment != deployment => {
                Err(IpError::AlreadyInUse {
                    ip,
                    prefix,
                    instance: r.instance_display(),
                    holder: h.name.clone(),
                    deployment: h.deployment.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Reserves an address for `r` on network `n` (`IpProvider#reserve`); `None` on
    /// dynamic networks.
    fn reserve(
        &mut self,
        view: &CloudView<'_>,
        n: usize,
        deployment: &str,
        r: &IpRequest,
    ) -> Result<Option<Reservation>, IpError> {
        let net = &view.networks[n];
        let new = |ip: IpAddr, prefix: u8, is_static: bool| Reservation {
            ip,
            prefix,
            network: net.name().to_string(),
            group: r.group.clone(),
            instance_id: r.instance_id.clone(),
            deployment: deployment.to_string(),
            is_static,
        };
        let reservation = match (net.kind, r.static_ip) {
            (NetworkType::Dynamic, _) => return Ok(None),
            (NetworkType::Manual, Some(ip)) => {
                let prefix = net.prefix;
                let network = || net.name().to_string();
                let subnet = net
                    .subnet_containing(ip)
                    .ok_or_else(|| IpError::OutsideSubnets {
                        ip,
                        prefix,
                        network: network(),
                    })?;
                if subnet.is_restricted(ip) {
                    return Err(IpError::InReservedRange {
                        ip,
                        prefix,
                        network: network(),
                    });
                }
                self.check_free(ip, prefix, deployment, r)?;
                if !net.is_static(ip) {
                    return Err(IpError::NotInStaticPool {
                        ip,
                        prefix,
                        network: network(),
                    });
                }
                new(ip, prefix, true)
            }
            (NetworkType::Manual, None) => {
                let az = r.az.as_deref();
                let found = net
                    .subnets
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.serves_az(az))
                    .find_map(|(s, subnet)| self.lowest_free((n, s), subnet, net.prefix));
                let ip = found.ok_or_else(|| IpError::NoMoreAvailable {
                    instance: r.instance_display(),
                    network_type: "manual",
                    network: net.name().to_string(),
                })?;
                new(ip, net.prefix, false)
            }
            (NetworkType::Vip, _) if net.allocates_vips() => {
                let ip = net
                    .subnets_for_az(r.az.as_deref())
                    .find_map(|s| self.first_free_listed(&s.statics))
                    .ok_or_else(|| IpError::NoMoreAvailable {
                        instance: r.instance_display(),
                        network_type: "vip",
                        network: net.name().to_string(),
                    })?;
                new(ip, host_prefix(ip), false)
            }
            (NetworkType::Vip, Some(ip)) => {
                self.check_free(ip, host_prefix(ip), deployment, r)?;
                new(ip, host_prefix(ip), true)
            }
            (NetworkType::Vip, None) => {
                return Err(IpError::VipWithoutIp {
                    instance: r.instance_display(),
                    network: net.name().to_string(),
                });
            }
        };
        self.hold(&reservation);
        Ok(Some(reservation))
    }

    /// The lowest free `prefix`-long block of a manual subnet (`try_to_allocate_dynamic_ip`).
    fn lowest_free(
        &mut self,
        key: (usize, usize),
        subnet: &SubnetView<'_>,
        prefix: u8,
    ) -> Option<IpAddr> {
        let range = subnet.range?;
        let fam = family(range.network());
        let first = number(range.network());
        let from = self.cursors.get(&key).map_or(first, |&c| c.max(first));
        let start = self.used[fam].lowest_free_block(
            &subnet.unavailable,
            from,
            number(range.broadcast()),
            host_mask(fam, prefix),
        )?;
        self.cursors.insert(key, start);
        Some(address(fam, start))
    }

    /// The first address of a vip subnet's `static` list nobody holds, in list order
    /// (`try_to_allocate_vip_ip`).
    fn first_free_listed(&self, statics: &[IpRange]) -> Option<IpAddr> {
        for r in statics {
            let fam = family(r.first);
            let (mut next, last) = (number(r.first), number(r.last));
            while next <= last {
                match self.used[fam].first_overlap(next, next) {
                    Some((_, taken_to)) => match taken_to.checked_add(1) {
                        Some(n) => next = n,
                        None => break,
                    },
                    None => return Some(address(fam, next)),
                }
            }
        }
        None
    }
}
