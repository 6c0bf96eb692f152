//! The BOSH agent protocol, director side (`bosh-protocols.md` §2): everything of
//! `kubosh_bosh::agent` (the wire types, re-exported), a transport-independent client with a typed method per agent action
//! ([`client`]), and its two transports: NATS with mutual TLS ([`nats`]) and the
//! create-env HTTPS mbus with the agent's blobstore ([`https`]).
//!
//! This is a protocol edge: no Kubernetes here. The agent's settings (what a CPI hands to a
//! new VM) live in a sibling module.

pub mod client;
pub mod health;
pub mod https;
pub mod nats;

pub use client::{
    AgentClient, AgentError, ClientOptions, Method, Mode, Started, Transport, TransportError,
};
pub use health::{HealthError, HeartbeatMonitor};
pub use https::{HttpsError, HttpsTransport};
pub use kubosh_bosh::agent::*;
pub use nats::{Heartbeats, MbusTls, NatsError, NatsOptions, NatsTransport, heartbeats};
