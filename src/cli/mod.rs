//! The `kubosh` command line: thin wrappers that read files, call the library and print.

mod dev;
mod input;
mod interpolate;
mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// kubosh: BOSH deployments as Kubernetes resources.
#[derive(Debug, Parser)]
#[command(name = "kubosh", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check a deployment manifest against a cloud config; print every problem.
    Validate(validate::ValidateArgs),
    /// Apply ops files and variables to a YAML document and print it (`bosh interpolate`).
    Interpolate(interpolate::InterpolateArgs),
    /// Print the CustomResourceDefinitions kubosh serves, as YAML.
    Crd,
    /// Development helpers (a local control plane).
    #[command(subcommand)]
    Dev(dev::DevCommand),
}

/// Entry point of the `kubosh` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Validate(args) => validate::run(&args),
        Command::Dev(command) => dev::run(&command),
        Command::Interpolate(args) => interpolate::run(&args),
        Command::Crd => match crate::api::crds_yaml() {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("kubosh crd: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
