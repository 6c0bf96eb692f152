//! The Kubernetes layer: the API types and CRDs ([`api`]), the reconcilers
//! ([`controller`]), Lease locks ([`lock`]), the engine's state in the apiserver ([`state`],
//! [`registry`]), the last deployed spec ([`deployed_spec`]), Secret-backed variables
//! ([`variables`]) and the ops API behind kube-apiserver's aggregation layer ([`ops_api`]:
//! logs and ssh), and who may call the local cloud served over HTTP ([`token_review`]).

pub mod api;
pub mod client;
pub mod controller;
pub mod deployed_spec;
pub mod left_behind;
pub mod lock;
pub mod metrics;
pub mod names;
pub mod ops_api;
pub mod registry;
pub mod state;
pub mod task_history;
pub mod token_review;
pub mod variables;
