//! `kubosh cpi`: the local cloud as a CPI executable (one JSON request on stdin, one JSON
//! response on stdout), and `kubosh cpi inventory`.

use super::out::outln;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use kubosh_cloud::local;
use kubosh_cloud::protocol::Response;

/// Arguments of `kubosh cpi`.
#[derive(Debug, clap::Args)]
pub struct CpiArgs {
    /// The local cloud's configuration (JSON or YAML); the request's context may override
    /// its keys.
    #[arg(long, env = "KUBOSH_CPI_CONFIG", global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<CpiCommand>,
}

#[derive(Debug, Subcommand)]
enum CpiCommand {
    /// Print every VM (with whether its agent runs), disk, stemcell and snapshot, as JSON.
    Inventory,
}

/// Runs `kubosh cpi`. Serving always exits 0: the answer is the JSON, as for any CPI.
pub fn run(args: &CpiArgs) -> ExitCode {
    match args.command {
        None => serve(args),
        Some(CpiCommand::Inventory) => inventory(args),
    }
}

fn serve(args: &CpiArgs) -> ExitCode {
    let mut input = Vec::new();
    let response = match std::io::stdin().read_to_end(&mut input) {
        Ok(_) => local::serve(&input, args.config.as_deref()),
        Err(e) => Response::err(
            "Bosh::Clouds::CpiError",
            format!("cannot read the request from stdin: {e}"),
            false,
        ),
    };
    let mut text = serde_json::to_string(&response).unwrap_or_else(|_| {
        r#"{"result":null,"error":{"type":"Bosh::Clouds::CpiError","message":"cannot write the response","ok_to_retry":false},"log":""}"#.to_string()
    });
    text.push('\n');
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn inventory(args: &CpiArgs) -> ExitCode {
    let result = local::Config::load(args.config.as_deref(), &serde_json::Map::new())
        .map_err(|e| e.to_string())
        .and_then(|config| {
            local::inventory(&config.state_dir)
                .map_err(|e| format!("cannot read {}: {e}", config.state_dir.display()))
        });
    match result {
        Ok(inventory) => {
            outln!(
                "{}",
                serde_json::to_string_pretty(&inventory).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kubosh cpi inventory: {e}");
            ExitCode::FAILURE
        }
    }
}
