//! `create-env` and `delete-env`: the bosh-init single-VM flow.
//!
//! - [`model`]: pure (no I/O): the manifest split, bosh-cli's state file and the decisions
//!   taken from them;
//! - [`install`]: the CPI installed on this machine.

pub mod install;
pub mod model;
