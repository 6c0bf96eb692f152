//! IP allocation for a deploy (`bosh-protocols.md` §4.9), as the Director's `IpProvider`,
//! `IpRepo`, `ReservationReconciler` and `VipPlanner` do it, but as one pure function over
//! typed inputs instead of rows in a shared `ip_addresses` table.
//!
//! [`allocate`] takes one [`IpRequest`] per (instance, network), the addresses this
//! deployment's instances held after the last deploy and the addresses other deployments
//! hold, and answers with an address per request (or every problem at once):
//!
//! 1. **Keep** what still fits. An instance's existing reservation serves its request on the
//!    same network (or on another network whose subnets can hold the address, after a
//!    rename) when its subnet is in the instance's AZ and its kind matches: a dynamic
//!    address still outside every restricted and static range for a dynamic request, the
//!    very address for a static request, any listed address on a vip network. So a
//!    redeploy changes nothing.
//! 2. **Reserve** the rest, in request order. Static IPs must lie in a subnet, outside the
//!    network, broadcast, gateway and reserved addresses, inside the `static` list, and be
//!    free; dynamic requests take the lowest free block (one address, or a delegated
//!    `prefix`) of the first subnet of the instance's AZ that has one, skipping restricted
//!    and static ranges and every address anyone holds. Addresses of reservations that
//!    this deploy releases still count as held, since the Director keeps their rows until
//!    the old holder is updated or deleted: moving or swapping a static IP between
//!    instances in one deploy fails with "already reserved by instance ...".
//! 3. **Release** the existing reservations no request kept.
//!
//! Vip networks whose cloud config lists addresses (`subnets[].static`) pick them in list
//! order; otherwise each instance brings its static IP. Dynamic networks reserve nothing.
//!
//! Free addresses are found by jumping over sorted intervals of taken addresses, never by
//! walking a range, so IPv6 subnets and thousands of instances cost `O(n log n)`.
//!
//! [`network_settings`] builds what the CPI and the agent get for each network,
//! [`default_for`] says what a network is the default for, and [`static_ip_azs`] gives the
//! AZs of static IPs, which decide where instances with static IPs are placed.

mod allocate;
mod error;
mod settings;
mod space;
mod view;

#[cfg(test)]
mod tests;

use std::net::IpAddr;

pub use allocate::{allocate, static_ip_azs};
pub use error::IpError;
pub use settings::{NetworkSettings, default_for, network_settings};

/// One instance's need for an address on one network of its instance group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpRequest {
    /// The instance group.
    pub group: String,
    /// The instance's index in its group.
    pub index: u32,
    /// The instance's UUID.
    pub instance_id: String,
    /// The instance's (desired) AZ.
    pub az: Option<String>,
    /// The network, by name.
    pub network: String,
    /// The instance's static IP on this network, if the group gives static IPs.
    pub static_ip: Option<IpAddr>,
    /// What this network is the default for in the group (see [`default_for`]).
    pub default_for: Vec<String>,
    /// The group network's `nic_group`.
    pub nic_group: Option<String>,
}

impl IpRequest {
    /// The instance as the Director names it in messages: `group/uuid (index)`.
    pub fn instance_display(&self) -> String {
        format!("{}/{} ({})", self.group, self.instance_id, self.index)
    }
}

pub use crate::state::Reservation;

/// The answer to one [`IpRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct Assigned {
    /// The reservation serving the request; `None` on dynamic networks, where the IaaS
    /// assigns the address.
    pub reservation: Option<Reservation>,
    /// The reservation is the instance's existing one (on dynamic networks: always false,
    /// there is nothing to keep; compare the settings instead).
    pub kept: bool,
    /// The network settings for the CPI and the agent.
    pub settings: NetworkSettings,
}

impl Assigned {
    /// The reserved address, if any.
    pub fn ip(&self) -> Option<IpAddr> {
        self.reservation.as_ref().map(|r| r.ip)
    }

    /// True when the address is a static IP.
    pub fn is_static(&self) -> bool {
        self.reservation.as_ref().is_some_and(|r| r.is_static)
    }
}

/// The outcome of [`allocate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// One answer per request, in request order.
    pub assigned: Vec<Assigned>,
    /// Existing reservations that no request kept, in input order. Their holders keep them
    /// until they are updated or deleted; then they are free.
    pub released: Vec<Reservation>,
}

impl Allocation {
    /// Every reservation held after this deploy: the next deploy's `existing`.
    pub fn held(&self) -> Vec<Reservation> {
        self.assigned
            .iter()
            .filter_map(|a| a.reservation.clone())
            .collect()
    }
}
