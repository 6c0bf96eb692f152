//! kubosh: the BOSH Director's deploy flow as a Kubernetes reconciling controller.
//!
//! The crate is layered (see `ARCHITECTURE.md`):
//! - a pure core ([`manifest`], [`validate`], [`ops`], [`links`]) with no I/O and no Kubernetes,
//! - the protocol edges: the CPI ([`cpi`]) and the BOSH agent protocol ([`agent`]),
//! - release and stemcell tarballs ([`release`], [`stemcell`]),
//! - the VM side of kubosh's own agent ([`agentd`]),
//! - job template rendering with Ruby's ERB ([`render`]),
//! - the Kubernetes API types ([`api`]) and their reconcilers ([`controller`]),
//! - the command line ([`cli`]).

pub mod agent;
pub mod agentd;
pub mod api;
pub mod blobstore;
pub mod cli;
pub mod controller;
pub mod cpi;
pub mod digest;
pub mod engine;
pub mod events;
mod https_server;
pub mod ids;
pub mod links;
pub mod lock;
pub mod manifest;
pub mod ops;
pub mod pki;
pub mod plan;
pub mod release;
pub mod render;
pub mod sim;
pub mod state;
pub mod stemcell;
pub mod testenv;
pub mod validate;
pub mod variables;
pub mod yaml;
