//! IP reservations every deployment of a director shares (`bosh-protocols.md` §4.9:
//! `ip_addresses` is unique across the whole director): who holds which address, and the
//! rule that a claim overlapping another deployment's reservation changes nothing.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// An address (or delegated block) held by an instance, of this deployment or another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The address (the first of the block).
    pub ip: IpAddr,
    /// The block's prefix length: 32 or 128 for one address.
    pub prefix: u8,
    /// The network it was reserved on.
    pub network: String,
    /// The holder's instance group.
    pub group: String,
    /// The holder's UUID.
    pub instance_id: String,
    /// The holder's deployment.
    pub deployment: String,
    /// Reserved as a static IP.
    pub is_static: bool,
}

impl Reservation {
    /// The holder as the Director names it in messages: `group/uuid`.
    pub fn holder_name(&self) -> String {
        format!("{}/{}", self.group, self.instance_id)
    }
}

/// Every deployment's reservations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpTable {
    /// Reservations by deployment.
    pub deployments: BTreeMap<String, Vec<Reservation>>,
}

impl IpTable {
    /// The reservations of every deployment but `deployment`.
    pub fn elsewhere(&self, deployment: &str) -> Vec<Reservation> {
        self.deployments
            .iter()
            .filter(|(d, _)| d.as_str() != deployment)
            .flat_map(|(_, held)| held.iter().cloned())
            .collect()
    }

    /// Makes `held` the reservations of `deployment`, unless some overlap another
    /// deployment's: then nothing changes and the other deployments' overlapping
    /// reservations are returned. Kept in address order, so the same reservations claimed
    /// in another order change nothing.
    pub fn claim(&mut self, deployment: &str, mut held: Vec<Reservation>) -> Vec<Reservation> {
        held.sort_by(|a, b| {
            (a.ip, a.prefix, &a.network, &a.instance_id).cmp(&(
                b.ip,
                b.prefix,
                &b.network,
                &b.instance_id,
            ))
        });
        let conflicts: Vec<Reservation> = self
            .elsewhere(deployment)
            .into_iter()
            .filter(|other| held.iter().any(|mine| overlap(mine, other)))
            .collect();
        if conflicts.is_empty() {
            if held.is_empty() {
                self.deployments.remove(deployment);
            } else {
                self.deployments.insert(deployment.to_string(), held);
            }
        }
        conflicts
    }
}

/// Whether two reservations share an address (blocks included).
fn overlap(a: &Reservation, b: &Reservation) -> bool {
    match (IpNet::new(a.ip, a.prefix), IpNet::new(b.ip, b.prefix)) {
        (Ok(a), Ok(b)) => a.contains(&b.network()) || b.contains(&a.network()),
        _ => a.ip == b.ip,
    }
}
