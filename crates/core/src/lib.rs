//! The pure core of kubosh: BOSH's documents and every decision made from them, with no
//! I/O, no async runtime and no Kubernetes (the crate's dependency list is the proof).
//!
//! - [`manifest`], [`validate`], [`ops`], [`variables`]: the typed documents, every problem
//!   at once with its path, ops files and interpolation, generated variables;
//! - [`links`], [`release`]: BOSH links and the release model (tarballs read in memory);
//! - [`plan`], [`state`]: the deploy planner and the records it plans from;
//! - [`yaml`], [`digest`], [`ids`], [`pki`], [`secret`]: small shared pieces.

pub mod digest;
pub mod ids;
pub mod links;
pub mod manifest;
pub mod ops;
pub mod pki;
pub mod plan;
pub mod release;
pub mod secret;
pub mod state;
pub mod validate;
pub mod variables;
pub mod yaml;
