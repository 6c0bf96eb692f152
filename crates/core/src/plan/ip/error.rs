//! Why an address cannot be reserved or described, in the Director's words and with its
//! error codes (`errors.rb`; texts from `ip_provider.rb`, `ip_repo.rb`,
//! `network_reservation.rb`, the network classes and the instance group parsers).
//!
//! The Director prints reservation IPs as CIDRs (`'10.0.0.5/32'`): its reservations are
//! `IpAddrOrCidr`s whose `to_s` includes the prefix. The variants keep address and prefix
//! apart and print them the same way.

use std::net::IpAddr;

/// An IP allocation or network settings problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpError {
    /// The address is held by another instance (of this or another deployment); this is
    /// also what moving or swapping a static IP between instances in one deploy gives,
    /// since the old holder keeps its address until it is updated or deleted.
    #[error(
        "Failed to reserve IP '{ip}/{prefix}' for instance '{instance}': already reserved by instance '{holder}' from deployment '{deployment}'"
    )]
    AlreadyInUse {
        /// The address.
        ip: IpAddr,
        /// Its prefix.
        prefix: u8,
        /// The instance asking, `group/uuid (index)`.
        instance: String,
        /// The holder, `group/uuid`.
        holder: String,
        /// The holder's deployment.
        deployment: String,
    },
    /// No free address left in the subnets of the instance's AZ.
    #[error(
        "Failed to reserve IP for '{instance}' for {network_type} network '{network}': no more available"
    )]
    NoMoreAvailable {
        /// The instance asking, `group/uuid (index)`.
        instance: String,
        /// `manual` or `vip`.
        network_type: &'static str,
        /// The network.
        network: String,
    },
    /// A static IP outside every subnet range of the network.
    #[error(
        "Provided static IP '{ip}/{prefix}' does not belong to any subnet in network '{network}'"
    )]
    OutsideSubnets {
        /// The address.
        ip: IpAddr,
        /// Its prefix.
        prefix: u8,
        /// The network.
        network: String,
    },
    /// A static IP that is the network, broadcast or gateway address or reserved.
    #[error(
        "Failed to reserve IP '{ip}/{prefix}' for network '{network}': IP belongs to reserved range"
    )]
    InReservedRange {
        /// The address.
        ip: IpAddr,
        /// Its prefix.
        prefix: u8,
        /// The network.
        network: String,
    },
    /// A static IP that is not in the subnet's `static` list.
    #[error("IP '{ip}/{prefix}' on network '{network}' does not belong to static pool")]
    NotInStaticPool {
        /// The address.
        ip: IpAddr,
        /// Its prefix.
        prefix: u8,
        /// The network.
        network: String,
    },
    /// Static IPs on a vip network whose addresses the cloud config lists.
    #[error("IPs cannot be specified in both the instance group and the cloud config")]
    VipIpsTwice,
    /// A vip network that is the default for something.
    #[error("Can't provide any defaults since this is a VIP network")]
    VipDefault,
    /// A vip network without cloud config addresses and an instance without a static IP
    /// on it (validation prevents this; the Director has no words for it).
    #[error(
        "Failed to reserve IP for '{instance}' for vip network '{network}': the instance group gives no static IP for it"
    )]
    VipWithoutIp {
        /// The instance asking, `group/uuid (index)`.
        instance: String,
        /// The network.
        network: String,
    },
    /// Network settings asked for a manual network without an address.
    #[error("Can't generate network settings without an IP")]
    SettingsWithoutIp,
    /// Network settings for an address outside every subnet.
    #[error("Provided IP '{ip}/{prefix}' does not belong to any subnet")]
    NotInAnySubnet {
        /// The address.
        ip: IpAddr,
        /// Its prefix.
        prefix: u8,
    },
    /// A dynamic network without a subnet in the instance's AZ.
    #[error("Network '{network}' has no matching subnet for availability zone '{az}'")]
    NoSubnetForAz {
        /// The network.
        network: String,
        /// The AZ.
        az: String,
    },
    /// A network the cloud config does not define.
    #[error("Instance group '{group}' references an unknown network '{network}'")]
    UnknownNetwork {
        /// The instance group.
        group: String,
        /// The network.
        network: String,
    },
    /// Static IPs on a dynamic network.
    #[error(
        "Instance group '{group}' using dynamic network '{network}' cannot specify static IP(s)"
    )]
    StaticIpOnDynamicNetwork {
        /// The instance group.
        group: String,
        /// The network.
        network: String,
    },
    /// A static IP that no subnet lists as static.
    #[error(
        "Instance group '{group}' with network '{network}' declares static ip '{ip}/{prefix}', which belongs to no subnet"
    )]
    StaticIpInNoSubnet {
        /// The instance group.
        group: String,
        /// The network.
        network: String,
        /// The address.
        ip: IpAddr,
        /// Its prefix (one address).
        prefix: u8,
    },
}

impl IpError {
    /// The Director's error code (`errors.rb`).
    pub fn code(&self) -> u32 {
        match self {
            IpError::AlreadyInUse { .. } => 130008,
            IpError::NoMoreAvailable { .. } => 130011,
            IpError::OutsideSubnets { .. } => 130012,
            IpError::InReservedRange { .. } => 130013,
            IpError::NotInStaticPool { .. } => 130009,
            IpError::VipIpsTwice => 130014,
            IpError::VipDefault => 130007,
            IpError::VipWithoutIp { .. } | IpError::SettingsWithoutIp => 130005,
            IpError::NotInAnySubnet { .. } => 130001,
            IpError::NoSubnetForAz { .. } => 160009,
            IpError::UnknownNetwork { .. } => 150001,
            IpError::StaticIpOnDynamicNetwork { .. } => 150008,
            IpError::StaticIpInNoSubnet { .. } => 150002,
        }
    }
}
