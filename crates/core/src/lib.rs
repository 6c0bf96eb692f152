//! The pure core of kubosh: BOSH's documents and every decision made from them, with no
//! I/O, no async runtime and no Kubernetes (the crate's dependency list is the proof).
//!
//! - [`manifest`], [`validate`], [`ops`], [`variables`]: the typed documents, every problem
//!   at once with its path, ops files and interpolation, generated variables;
//! - [`links`], [`release`]: BOSH links and the release model (tarballs read in memory);
//! - [`plan`], [`state`]: the deploy planner and the records it plans from;
//! - [`yaml`], [`digest`], [`ids`], [`pki`], [`secret`]: small shared pieces, which live in
//!   `kubosh-base` and are re-exported here.

pub mod links;
pub mod manifest;
pub mod ops;
pub mod plan;
pub mod release;
pub mod state;
pub mod validate;
pub mod variables;

// The small shared pieces moved down to `kubosh-base` (so the agent, transports and clouds
// need not link the model); re-exported so `kubosh_core::digest` and friends keep working
// for the crates above until their imports name `kubosh_base` directly.
pub use kubosh_base::{digest, ids, pki, secret, yaml};
