//! `kubosh delete-deployment` and `kubosh clean-up`: `bosh delete-deployment` and `bosh
//! clean-up` for deployments made with `kubosh deploy`.
//!
//! A deleted deployment's persistent disks are kept as orphaned disks, as the Director keeps
//! them: a deployment of the same name gets them back, and `kubosh clean-up` deletes them
//! once they are older than the Director's `max_orphaned_age_in_days` (5 days; a director
//! without a scheduler does on request what the Director does on a schedule), or all of
//! them with `--all`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::deploy::{Failure, Task, run_command};
use super::out;
use kubosh_director::DirectorConfig;
use kubosh_engine::delete::{DiskDisposal, ORPHANED_DISK_MAX_AGE};

/// Arguments of `kubosh delete-deployment`.
#[derive(Debug, Args)]
pub struct DeleteDeploymentArgs {
    /// The director configuration file (state directory, CPI, NATS, blobstore).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// The deployment's name.
    pub name: String,
}

/// Arguments of `kubosh clean-up`.
#[derive(Debug, Args)]
pub struct CleanUpArgs {
    /// The director configuration file (state directory, CPI, NATS, blobstore).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// Delete every orphaned disk, not only those orphaned more than 5 days ago.
    #[arg(long)]
    pub all: bool,
}

fn run_async(work: impl std::future::Future<Output = Result<String, Failure>>) -> ExitCode {
    run_command(async { work.await.map(|text| (text, ExitCode::SUCCESS)) })
}

/// Runs `kubosh delete-deployment`.
pub fn run_delete(args: &DeleteDeploymentArgs) -> ExitCode {
    run_async(delete(args))
}

/// Runs `kubosh clean-up`.
pub fn run_clean_up(args: &CleanUpArgs) -> ExitCode {
    run_async(clean_up(args))
}

async fn delete(args: &DeleteDeploymentArgs) -> Result<String, Failure> {
    let config = DirectorConfig::load(&args.director).map_err(|e| e.to_string())?;
    let name = &args.name;
    if !kubosh_engine::source::is_path_component(name) {
        return Err(format!("the deployment name '{name}' cannot name a deployment").into());
    }
    // As bosh-cli: deleting a deployment the director does not have succeeds.
    if !config.deployment_dir(name).is_dir() {
        return Ok(String::from("\nSucceeded\n"));
    }
    let cpis = config.saved_cpi_config()?;
    out::progress(format_args!("Using deployment '{name}'\n\n"));
    let doing = format!("Deleting deployment '{name}'");
    let task = Task::start(&config, &doing, "delete deployment", Some(name))?;
    let engine = task.engine(&config, name, false, cpis).await?;
    let report = task.end(engine.delete_deployment(name, DiskDisposal::Orphan).await)?;
    let kept = match report.disks_orphaned.len() {
        0 => String::new(),
        n => format!("\n{n} persistent disk(s) kept as orphaned disks (kubosh clean-up)\n"),
    };
    Ok(format!("{kept}\nSucceeded\n"))
}

async fn clean_up(args: &CleanUpArgs) -> Result<String, Failure> {
    let config = DirectorConfig::load(&args.director).map_err(|e| e.to_string())?;
    let cpis = config.saved_cpi_config()?;
    let max_age = (!args.all).then_some(ORPHANED_DISK_MAX_AGE);
    let task = Task::start(&config, "Cleaning up resources", "clean up", None)?;
    let mut deleted = 0;
    for name in config.deployment_names()? {
        let engine = task.engine(&config, &name, false, cpis.clone()).await?;
        let cleaned = engine.clean_up_orphaned_disks(&name, max_age).await;
        deleted += task.continues(cleaned.map_err(|e| e.to_string()))?.len();
    }
    task.end(Ok::<(), String>(()))?;
    Ok(format!(
        "\nDeleted {deleted} orphaned disk(s)\n\nSucceeded\n"
    ))
}
