//! `kubosh vm run`: a local-cloud VM's first process for an agent other than kubosh's — the
//! real bosh-agent with its dummy platform — in a private `/var/vcap`
//! (`kubosh_agentd::launcher`). The local cloud's configuration starts it as the agent
//! command:
//!
//! ```json
//! ["{kubosh}", "vm", "run", "--root", "{root}", "--dummy-disks", "{vm_dir}/dummy-disks.json",
//!  "--", "/path/to/bosh-agent", "-b", "/var/vcap", "-P", "dummy", "-M", "dummy",
//!  "-C", "/var/vcap/bosh/agent.json"]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use kubosh_agentd::launcher::{self, LaunchOptions};

/// `kubosh vm ...`.
#[derive(Debug, clap::Subcommand)]
pub enum VmCommand {
    /// Run an agent as a VM's first process: private mount namespace (plus a user namespace
    /// when not root) with the VM's root directory on /var/vcap; stays the agent's parent.
    Run(VmRunArgs),
}

/// Arguments of `kubosh vm run`.
#[derive(Debug, clap::Args)]
pub struct VmRunArgs {
    /// The VM's root directory on the host (the local cloud's `{root}`).
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// Where the VM sees its root.
    #[arg(long, value_name = "DIR", default_value = "/var/vcap")]
    base: PathBuf,
    /// Make bosh-agent's dummy-platform disk bookkeeping real: `store` and
    /// `store_migration_target` become the disks' directories and migrations copy the data.
    /// FILE is the launcher's record, in the VM's directory: `{vm_dir}/dummy-disks.json`,
    /// where the local cloud's `detach_disk` looks for it.
    #[arg(long, value_name = "FILE")]
    dummy_disks: Option<PathBuf>,
    /// The agent's program and arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    argv: Vec<String>,
}

/// Runs the command; the agent's exit code.
pub fn run(command: &VmCommand) -> ExitCode {
    let VmCommand::Run(args) = command;
    let options = LaunchOptions {
        root: args.root.clone(),
        base: args.base.clone(),
        dummy_disks: args.dummy_disks.clone(),
        argv: args.argv.clone(),
    };
    match launcher::run(&options) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("kubosh vm run: {e}");
            ExitCode::FAILURE
        }
    }
}
