//! The `kubosh` command line: the thin binary over the workspace's crates.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
