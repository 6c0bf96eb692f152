//! `kubosh interpolate`: `bosh interpolate`, for manifests and any other YAML.

use super::out::out;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::input::DocumentArgs;
use kubosh_core::ops::{Pointer, find};

/// Arguments of `kubosh interpolate`.
#[derive(Debug, Args)]
pub struct InterpolateArgs {
    /// The YAML document.
    pub file: PathBuf,
    #[command(flatten)]
    pub input: DocumentArgs,
    /// Print only the value at this go-patch path, e.g. `/instance_groups/name=web/instances`.
    #[arg(long)]
    pub path: Option<String>,
    /// Load variables from, and save generated ones to, this YAML file: variables the
    /// document's `variables:` section defines and no other source gives are generated once
    /// (`bosh interpolate --vars-store`).
    #[arg(long = "vars-store", value_name = "PATH")]
    pub vars_store: Option<PathBuf>,
}

/// Runs the command.
pub fn run(args: &InterpolateArgs) -> ExitCode {
    match interpolate(args) {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            // As bosh-cli ends: the error, then `Exit code 1`, with the blank line its
            // output padding puts on stdout between them.
            eprintln!("{e}");
            out!("\n");
            eprintln!("Exit code 1");
            ExitCode::FAILURE
        }
    }
}

fn interpolate(args: &InterpolateArgs) -> Result<String, String> {
    let mut doc = match &args.vars_store {
        None => args.input.load(&args.file)?,
        Some(store) => args.input.load_with_vars_store(&args.file, store)?,
    };
    if let Some(path) = &args.path {
        let pointer = Pointer::parse(path).map_err(|e| e.to_string())?;
        doc = find(&doc, &pointer).map_err(|e| e.to_string())?;
        // As bosh-cli: a string found by `--path` is printed as it is (a certificate
        // readable, not YAML-quoted).
        if let Some(text) = doc.as_str()
            && kubosh_base::yaml::mark::unmark(text).is_none()
        {
            return Ok(format!("{text}\n"));
        }
    }
    kubosh_base::yaml::to_string(&doc).map_err(|e| e.to_string())
}
