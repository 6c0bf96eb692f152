//! The Kubernetes layer: the API types and CRDs ([`api`]), the reconcilers
//! ([`controller`]), Lease locks ([`lock`]) and Secret-backed variables ([`variables`]).

pub mod api;
pub mod controller;
pub mod lock;
pub mod names;
pub mod state;
pub mod variables;
