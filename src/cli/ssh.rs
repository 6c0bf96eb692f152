//! `kubosh ssh`: `bosh ssh` for deployments made with `kubosh deploy`: a one-time user with
//! a key pair made here set up on each chosen instance by its agent (`ssh setup`), a session
//! there (or, with `-c`, a command on each), the user removed after (`ssh cleanup`). On the
//! local cloud a session is a shell in the VM's directory.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::deploy::{Failure, run_command};
use super::kubectl_ops::{one_time_user, sessions};
use kubosh_director::DirectorConfig;

/// Arguments of `kubosh ssh`.
#[derive(Debug, Args)]
pub struct SshArgs {
    /// The director configuration file (state directory, CPI, NATS, blobstore).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// The deployment.
    pub name: String,
    /// The instances: `GROUP/INDEX` or `GROUP/ID` (a session), or `GROUP` with `-c`.
    pub instance: String,
    /// Run this command instead of an interactive session.
    #[arg(short = 'c', long = "command", value_name = "CMD")]
    pub command: Option<String>,
}

/// Runs `kubosh ssh`.
pub fn run(args: &SshArgs) -> ExitCode {
    run_command(ssh(args))
}

async fn ssh(args: &SshArgs) -> Result<(String, ExitCode), Failure> {
    let config = DirectorConfig::load(&args.director).map_err(|e| e.to_string())?;
    let name = &args.name;
    if !config.deployment_dir(name).is_dir() {
        return Err(format!("Deployment '{name}' doesn't exist").into());
    }
    let cpis = config.saved_cpi_config()?;
    let engine = config
        .engine(name, Arc::new(kubosh_engine::NoEvents), false, cpis)
        .await?;
    let chosen =
        (engine.instances_named(name, Some(&args.instance)).await).map_err(|e| e.to_string())?;
    let (user, key) = one_time_user()?;
    let hosts = engine
        .ssh_setup(chosen.clone(), &user, &key.ssh_authorized_key())
        .await;
    let hosts = hosts.map_err(|e| e.to_string())?;
    let ran = sessions(&hosts, user.as_str(), &key, args.command.as_deref());
    if let Err(e) = engine.ssh_cleanup(chosen, &user).await {
        eprintln!(
            "warning: the one-time user {} was not removed: {e}",
            user.as_str()
        );
    }
    match ran? {
        None => Ok((String::new(), ExitCode::SUCCESS)),
        Some(failed) => Err(Failure::Task(format!("{failed}\n\nExit code 1\n"))),
    }
}
