//! `create-env` and `delete-env`: the bosh-init single-VM flow.
//!
//! - [`model`]: pure (no I/O): the manifest split, bosh-cli's state file and the decisions
//!   taken from them.

pub mod model;
