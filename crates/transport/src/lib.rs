//! How the director reaches agents: the agent client over NATS (mutual TLS) and HTTPS
//! ([`agent`]) and the heartbeat monitor, the TLS configurations ([`tls`]), and the HTTPS
//! server loop the VM-side agent and the blob endpoint share ([`https_server`]), and a CPI
//! executable served over HTTP ([`cpi_http`]).

pub mod agent;
pub mod cpi_http;
pub mod https_server;
pub mod tls;
