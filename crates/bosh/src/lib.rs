//! BOSH's wire formats and the traits the engine drives them through: the CPI protocol and
//! [`cpi::Cloud`], the agent protocol and [`agent::AgentHealth`], and the event log
//! ([`events`]). Data and traits only: no process, network, file or Kubernetes.

pub mod agent;
pub mod cpi;
pub mod events;
