//! Installing the CPI on this machine: the local installation directory
//! ([`Installation`]).

mod archive;
mod installation;

pub use installation::{InstallError, Installation, LocalCompiled};
