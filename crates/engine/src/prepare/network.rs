//! Step 4 of the seed, planned: every planned instance's addresses and network settings,
//! decided before anything changes (`bosh-protocols.md` §4.9). Claiming them among the
//! director's deployments is the executor's first change (`execute::addresses`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::instances::Planned;
use crate::state::{DeploymentState, InstanceRecord, IpRecord};
use crate::{Engine, EngineError, PlanError};
use kubosh_core::manifest::{CloudConfig, DeploymentManifest};
use kubosh_core::plan::desired::GroupSpec;
use kubosh_core::plan::ip::{self, IpRequest, Reservation};
use kubosh_core::plan::placement::StaticIpAz;

/// The AZs of a group's static IPs (the first network that has static IPs decides), for
/// placement; `None` when the group has none.
pub fn static_ip_azs(
    cloud: &CloudConfig,
    group: &GroupSpec,
) -> Result<Option<Vec<StaticIpAz>>, EngineError> {
    let Some(net) = group.networks.iter().find(|n| !n.static_ips.is_empty()) else {
        return Ok(None);
    };
    let ips = parse_ips(&group.name, &net.static_ips)?;
    let azs = ip::static_ip_azs(cloud, &group.name, &net.name, &ips)
        .map_err(|e| PlanError::Ip(vec![e]))?;
    Ok(Some(
        azs.into_iter()
            .map(|(ip, azs)| StaticIpAz {
                ip: ip.to_string(),
                azs,
            })
            .collect(),
    ))
}

/// Assigns addresses to every planned instance: kept where still valid, new ones picked as
/// the Director picks them; every problem reported at once with the Director's text.
/// `elsewhere` are the other deployments' reservations, never taken.
pub(crate) fn plan_networks(
    manifest: &DeploymentManifest,
    cloud: &CloudConfig,
    groups: &[GroupSpec],
    planned: &mut [Planned],
    state: &DeploymentState,
    elsewhere: &[Reservation],
) -> Result<(), EngineError> {
    let deployment = manifest.name.clone().unwrap_or_default();
    let mut existing = reservations(&deployment, state.instances.values())?;
    // A VM replaced create-swap-delete keeps its addresses until it is gone: they are the
    // old VM's, not the instance's, so its new VM gets new ones (the Director's
    // `network_plan_with_dynamic_reservation`).
    let swapping: BTreeSet<&str> = (planned.iter())
        .filter(|p| p.swap)
        .map(|p| p.record.uuid.as_str())
        .collect();
    for r in existing
        .iter_mut()
        .filter(|r| swapping.contains(r.instance_id.as_str()))
    {
        r.instance_id = format!("{} (previous VM)", r.instance_id);
    }
    let mut requests = Vec::new();
    let mut owners = Vec::new();
    let mut errors = Vec::new();
    for (gi, group) in groups.iter().enumerate() {
        let members: Vec<usize> = (0..planned.len())
            .filter(|&i| planned[i].group == gi)
            .collect();
        for net in &group.networks {
            let statics = match static_assignment(cloud, group, net, &members, planned) {
                Ok(s) => s,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let default_for = ip::default_for(&group.networks, &net.name);
            for &i in &members {
                let p = &planned[i];
                requests.push(IpRequest {
                    group: group.name.clone(),
                    index: u32::try_from(p.placed.index).unwrap_or(u32::MAX),
                    instance_id: p.placed.uuid.clone(),
                    az: p.placed.az.clone(),
                    network: net.name.clone(),
                    static_ip: statics.get(&i).copied(),
                    default_for: default_for.clone(),
                    nic_group: net.nic_group.as_ref().map(|v| v.as_str().to_string()),
                });
                owners.push(i);
            }
        }
    }
    if !errors.is_empty() {
        return Err(PlanError::all(errors).into());
    }
    let allocation =
        ip::allocate(&deployment, cloud, &requests, &existing, elsewhere).map_err(PlanError::Ip)?;
    for p in planned.iter_mut() {
        p.networks.clear();
        p.record.ips.clear();
    }
    for ((request, assigned), owner) in requests.iter().zip(allocation.assigned).zip(owners) {
        let p = &mut planned[owner];
        if let Some(ip) = assigned.ip() {
            p.record.ips.insert(
                request.network.clone(),
                IpRecord {
                    ip: ip.to_string(),
                    is_static: assigned.is_static(),
                },
            );
        }
        p.networks
            .insert(request.network.clone(), assigned.settings.to_json());
    }
    Ok(())
}

/// The addresses step 4 decided around: this deployment's during the deploy (see
/// [`held_during_deploy`]) and the other deployments' (empty without an IP registry).
pub struct Addresses {
    /// What this deployment's instances hold while the deploy runs.
    pub held: Vec<Reservation>,
    /// What the other deployments hold.
    pub elsewhere: Vec<Reservation>,
}

impl Engine {
    /// Step 4 among all the director's deployments, planned: addresses around what the
    /// other deployments hold now. Nothing is claimed ([`Engine::claim_addresses`] does,
    /// once everything else is planned).
    pub(crate) async fn plan_addresses(
        &self,
        manifest: &DeploymentManifest,
        cloud: &CloudConfig,
        groups: &[GroupSpec],
        planned: &mut [Planned],
        state: &DeploymentState,
    ) -> Result<Addresses, EngineError> {
        let deployment = manifest.name.clone().unwrap_or_default();
        let elsewhere = match &self.config.ip_registry {
            Some(registry) => registry.held_elsewhere(&deployment).await?,
            None => Vec::new(),
        };
        plan_networks(manifest, cloud, groups, planned, state, &elsewhere)?;
        let held = held_during_deploy(&deployment, state, planned)?;
        Ok(Addresses { held, elsewhere })
    }
}

/// Which static IP each member of a group gets on `net`: an instance keeps its address when
/// it is still listed and in its AZ; the others take the remaining addresses of their AZ in
/// list order.
fn static_assignment(
    cloud: &CloudConfig,
    group: &GroupSpec,
    net: &kubosh_core::manifest::NetworkRef,
    members: &[usize],
    planned: &[Planned],
) -> Result<BTreeMap<usize, IpAddr>, PlanError> {
    let mut out = BTreeMap::new();
    if net.static_ips.is_empty() {
        return Ok(out);
    }
    let ips = parse_ips(&group.name, &net.static_ips)?;
    let azs = ip::static_ip_azs(cloud, &group.name, &net.name, &ips)
        .map_err(|e| PlanError::Ip(vec![e]))?;
    let mut free: BTreeSet<IpAddr> = ips.iter().copied().collect();
    for &i in members {
        let kept = planned[i]
            .record
            .ips
            .get(&net.name)
            .and_then(|r| r.ip.parse::<IpAddr>().ok())
            .filter(|ip| free.contains(ip));
        if let Some(ip) = kept {
            free.remove(&ip);
            out.insert(i, ip);
        }
    }
    for &i in members {
        if out.contains_key(&i) {
            continue;
        }
        let az = planned[i].placed.az.clone();
        let pick = azs
            .iter()
            .find(|(ip, subnet_azs)| {
                free.contains(ip)
                    && (az.is_none()
                        || subnet_azs.is_empty()
                        || subnet_azs.iter().any(|a| Some(a) == az.as_ref()))
            })
            .map(|(ip, _)| *ip);
        if let Some(ip) = pick {
            free.remove(&ip);
            out.insert(i, ip);
        }
    }
    Ok(out)
}

/// Every address this deployment's instances hold while the deploy runs: what they held
/// before (instances about to be deleted or moved included) and what they hold now.
fn held_during_deploy(
    deployment: &str,
    state: &DeploymentState,
    planned: &[Planned],
) -> Result<Vec<Reservation>, EngineError> {
    let mut out = reservations(deployment, state.instances.values())?;
    for r in reservations(deployment, planned.iter().map(|p| &p.record))? {
        if !out.iter().any(|o| o.ip == r.ip) {
            out.push(r);
        }
    }
    Ok(out)
}

/// The reservations `instances` of `deployment` hold.
pub fn reservations<'a>(
    deployment: &str,
    instances: impl IntoIterator<Item = &'a InstanceRecord>,
) -> Result<Vec<Reservation>, EngineError> {
    let mut out = Vec::new();
    for inst in instances {
        for (network, r) in inst.held_ips() {
            let ip: IpAddr = r.ip.parse().map_err(|_| PlanError::UnreadableAddress {
                instance: inst.display_name(),
                ip: r.ip.clone(),
                network: network.clone(),
            })?;
            out.push(Reservation {
                ip,
                prefix: if ip.is_ipv4() { 32 } else { 128 },
                network: network.clone(),
                group: inst.group.clone(),
                instance_id: inst.uuid.clone(),
                deployment: deployment.to_string(),
                is_static: r.is_static,
            });
        }
    }
    Ok(out)
}

/// Static IP entries (single addresses or `a - b` ranges) as addresses.
fn parse_ips(group: &str, entries: &[String]) -> Result<Vec<IpAddr>, PlanError> {
    let (ranges, bad) = kubosh_core::manifest::parse_ip_ranges(entries);
    if let Some((i, e)) = bad.first() {
        return Err(PlanError::InvalidStaticIp {
            group: group.to_string(),
            entry: entries[*i].clone(),
            reason: e.to_string(),
        });
    }
    Ok(ranges.iter().flat_map(|r| r.addresses()).collect())
}
