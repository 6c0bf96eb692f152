//! BOSH release tarballs as files and release directories: the [`Release`] model of
//! `kubosh-core` (re-exported here), [`ReleaseFile`] to read and write tarball files, and
//! [`create::create`], which builds a release from a release directory with bosh-cli's
//! fingerprints (`bosh create-release`; package globs in [`glob`]).

pub mod create;
mod file;
pub mod fingerprint;
pub mod glob;

pub use create::{CreateError, CreateOptions};
pub use file::ReleaseFile;
pub use kubosh_core::release::*;
