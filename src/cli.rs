//! The `kubosh` command line.
use std::process::ExitCode;

/// Entry point of the `kubosh` binary.
pub fn main() -> ExitCode {
    ExitCode::SUCCESS
}
