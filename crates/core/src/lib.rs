//! The pure core of kubosh: BOSH's documents and every decision made from them, with no
//! I/O, no async runtime and no Kubernetes (the crate's dependency list is the proof).
//!
//! - [`manifest`], [`validate`], [`ops`], [`variables`]: the typed documents, every problem
//!   at once with its path, ops files and interpolation, generated variables;
//! - [`links`], [`release`]: BOSH links and the release model (tarballs read in memory);
//! - [`plan`], [`state`]: the deploy planner and the records it plans from;
//!
//! The small pieces every layer shares (digests, ids, secrets, the certificate authority,
//! YAML) are in `kubosh-base`, below this crate.

pub mod links;
pub mod manifest;
pub mod ops;
pub mod plan;
pub mod release;
pub mod state;
pub mod validate;
pub mod variables;
