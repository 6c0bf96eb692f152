//! Step 4 of the seed: every planned instance's addresses and network settings, decided
//! before anything changes (`bosh-protocols.md` §4.9).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::deploy::Planned;
use super::{Engine, EngineError};
use crate::state::{DeploymentState, InstanceRecord, IpRecord};
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
        .map_err(|e| EngineError::Plan(vec![e.to_string()]))?;
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
pub fn plan_networks(
    manifest: &DeploymentManifest,
    cloud: &CloudConfig,
    groups: &[GroupSpec],
    planned: &mut [Planned],
    state: &DeploymentState,
    elsewhere: &[Reservation],
) -> Result<(), EngineError> {
    let deployment = manifest.name.clone().unwrap_or_default();
    let existing = reservations(&deployment, state.instances.values())?;
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
        return Err(EngineError::Plan(errors));
    }
    let allocation = ip::allocate(&deployment, cloud, &requests, &existing, elsewhere)
        .map_err(|e| EngineError::Plan(e.iter().map(ToString::to_string).collect()))?;
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

/// How often a deploy plans again when a concurrent deploy of another deployment claimed
/// an address first.
pub(crate) const CLAIM_ATTEMPTS: usize = 3;

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
    pub async fn plan_addresses(
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

    /// Claims what [`Engine::plan_addresses`] planned (this deployment's current
    /// reservations included, as their holders keep them until they are updated or
    /// deleted), before anything changes. `Ok(None)` when claimed; `Ok(Some(error))` when
    /// another deployment claimed one of them since it was planned (plan again).
    pub async fn claim_addresses(
        &self,
        deployment: &str,
        addresses: &Addresses,
    ) -> Result<Option<EngineError>, EngineError> {
        let Some(registry) = &self.config.ip_registry else {
            return Ok(None);
        };
        let conflicts = registry.claim(deployment, addresses.held.clone()).await?;
        Ok(conflicts
            .first()
            .map(|first| claim_conflict(&addresses.held, first)))
    }

    /// After a deploy (or a failed one): the deployment holds exactly the addresses of
    /// `instances`, its recorded instances (deleted instances, compilation workers and
    /// instances never made let theirs go).
    pub async fn release_unused_ips(
        &self,
        deployment: &str,
        instances: Vec<&InstanceRecord>,
    ) -> Result<(), EngineError> {
        let Some(registry) = &self.config.ip_registry else {
            return Ok(());
        };
        let held = reservations(deployment, instances)?;
        let conflicts = registry.claim(deployment, held).await?;
        if !conflicts.is_empty() {
            tracing::warn!(
                deployment,
                ?conflicts,
                "addresses the deployment kept are held elsewhere"
            );
        }
        Ok(())
    }
}

/// The error of a claim of `ours` that another deployment's reservation `other` overlaps
/// after every attempt: the Director's error when it is one of our static IPs (the
/// manifests disagree), else contention (the address was free when planned).
pub(crate) fn claim_conflict(ours: &[Reservation], other: &Reservation) -> EngineError {
    if ours.iter().any(|r| r.is_static && r.ip == other.ip) {
        return taken_elsewhere(other);
    }
    match taken_elsewhere(other) {
        EngineError::Plan(mut lines) => EngineError::AddressesContended(lines.remove(0)),
        e => e,
    }
}

/// The error of a claim another deployment's reservation `other` overlaps.
pub fn taken_elsewhere(other: &Reservation) -> EngineError {
    EngineError::Plan(vec![format!(
        "Failed to reserve IP '{}/{}': already reserved by instance '{}' from deployment '{}'",
        other.ip,
        other.prefix,
        other.holder_name(),
        other.deployment
    )])
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
) -> Result<BTreeMap<usize, IpAddr>, String> {
    let mut out = BTreeMap::new();
    if net.static_ips.is_empty() {
        return Ok(out);
    }
    let ips = parse_ips(&group.name, &net.static_ips).map_err(|e| e.to_string())?;
    let azs = ip::static_ip_azs(cloud, &group.name, &net.name, &ips).map_err(|e| e.to_string())?;
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
        for (network, r) in &inst.ips {
            let ip: IpAddr = r.ip.parse().map_err(|_| {
                EngineError::Plan(vec![format!(
                    "instance {} holds an unreadable address '{}' on network '{network}'",
                    inst.display_name(),
                    r.ip
                )])
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
fn parse_ips(group: &str, entries: &[String]) -> Result<Vec<IpAddr>, EngineError> {
    let (ranges, bad) = kubosh_core::manifest::parse_ip_ranges(entries);
    if let Some((i, e)) = bad.first() {
        return Err(EngineError::Plan(vec![format!(
            "Instance group '{group}' has an invalid static IP '{}': {e}",
            entries[*i]
        )]));
    }
    Ok(ranges.iter().flat_map(|r| r.addresses()).collect())
}
