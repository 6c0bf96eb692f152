//! The Kubernetes layer: the API types and CRDs ([`api`]), the reconcilers
//! ([`controller`]), Lease locks ([`lock`]), the engine's state in the apiserver ([`state`],
//! [`registry`]), the last deployed spec ([`deployed_spec`]) and Secret-backed variables
//! ([`variables`]).

pub mod api;
pub mod client;
pub mod controller;
pub mod deployed_spec;
pub mod left_behind;
pub mod lock;
pub mod metrics;
pub mod names;
pub mod registry;
pub mod state;
pub mod variables;
