//! What the engine remembers between deploys, as plain records (serde data, no I/O): every
//! instance, disk, intent, compiled package and stemcell of a deployment, and what all
//! deployments of a director share (DNS entries, IP reservations, shared link providers). Stores that make these
//! durable live with the engine (`kubosh-engine`) and the controller (`kubosh-kube`).

mod dns;
mod ips;
mod links;
mod records;

pub use dns::{DnsDataset, DnsInstance};
pub use ips::{IpTable, Reservation};
pub use links::{LinkTable, SharedLink};
pub use records::*;
