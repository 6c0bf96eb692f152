//! The BOSH agent protocol's wire types (`bosh-protocols.md` §2): requests, replies, the
//! apply spec, `get_state`, heartbeats and every action's arguments and results
//! ([`protocol`]), and [`AgentHealth`], what the engine asks of a heartbeat listener.
//! Transports and the client are in `kubosh-transport`.

pub mod apply_spec;
pub mod dummy;
mod health;
pub mod nats_auth;
pub mod protocol;
pub mod settings;

pub use health::AgentHealth;
