//! The CPI protocol (`bosh-protocols.md` §1), as data and a trait: the wire types
//! ([`protocol`]) exactly as the director writes and reads them, the `Bosh::Clouds::*`
//! errors ([`CpiError`], [`ErrorKind`]) with `ok_to_retry`, and [`Cloud`], the engine's view
//! of a cloud: one typed method per CPI method ([`types`]). Running a CPI executable is in
//! `kubosh-cloud`.

mod cloud;
mod error;
pub mod ids;
pub mod protocol;
pub mod types;

pub use cloud::{Cloud, CloudFuture, FIND_DISK, FIND_SNAPSHOT, FIND_STEMCELL, FIND_VM};
pub use error::{CpiError, ErrorKind, Pushback};
pub use kubosh_base::secret::Secret;
pub use types::*;
