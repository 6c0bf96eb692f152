//! Clouds: the CPI protocol's executable side (`bosh-protocols.md` §1). Everything of
//! `kubosh_bosh::cpi` (the wire types, [`Cloud`], [`CpiError`]) is re-exported here.
//!
//! A CPI is an external executable, spawned once per call: one JSON request on stdin
//! (`{method, arguments, context, api_version}`), one JSON response on stdout
//! (`{result, error, log}`), free-form debug output on stderr, exit code ignored.
//!
//! - [`protocol`]: the wire types, exactly as the director writes and reads them.
//! - [`CpiError`] and [`ErrorKind`]: the `Bosh::Clouds::*` error types the director
//!   understands, with `ok_to_retry`.
//! - [`Cloud`]: the engine's view of a cloud, one method per CPI method, typed arguments and
//!   results ([`types`]).
//! - [`ExternalCpi`]: a [`Cloud`] that runs a real CPI executable ([`CpiCommand`]), negotiates
//!   the API version with `info`, and retries only where that is safe.
//! - [`PacedCloud`]: any [`Cloud`] paced by what it answers (rate limits, capacity,
//!   latency) instead of fixed concurrency caps, within the limits configured for it.
//! - [`local`]: kubosh's own CPI (`kubosh cpi`), a cloud of local processes and directories.
//!
//! This module does no Kubernetes.

mod external;
pub mod local;
mod paced;

pub use external::{CallObserver, CpiCommand, EnvMode, ExternalCpi, MAX_API_VERSION, RetryPolicy};
pub use kubosh_bosh::cpi::*;
pub use paced::{CloudLimits, INITIAL_RATE, Pace, PaceStats, PacedCloud, Pacer};
