//! How the director reaches agents: the agent client over NATS (mutual TLS) and HTTPS
//! ([`agent`]) and the heartbeat monitor, the TLS configurations ([`tls`]), and the HTTPS
//! server loop the VM-side agent and the blob endpoint share ([`https_server`]).

pub mod agent;
pub mod https_server;
pub mod tls;
