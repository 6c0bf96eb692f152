//! `kubosh logs`: `bosh logs` for deployments made with `kubosh deploy`. Each chosen
//! instance's agent packs its logs into a tarball (`fetch_logs` through the blobstore, as the
//! Director's task does); one instance's tarball is written as
//! `<deployment>.<group>.<id>-<time>.tgz`, several are bundled into
//! `<deployment>[.<group>]-<time>.tgz` holding `<group>.<uuid>.<time>.tgz` each, as the
//! Director bundles a group's logs.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::deploy::{Failure, Task, run_command};
use super::out;
use kubosh_director::DirectorConfig;
use kubosh_engine::logs::LogsRequest;

/// Arguments of `kubosh logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The director configuration file (state directory, CPI, NATS, blobstore).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// The deployment.
    pub name: String,
    /// The instances: `GROUP`, `GROUP/INDEX` or `GROUP/ID`; without it, every instance.
    pub instance: Option<String>,
    /// Only this job's logs (repeatable).
    #[arg(long = "job", value_name = "NAME")]
    pub jobs: Vec<String>,
    /// Only the log files matching this glob, relative to the log directory (repeatable,
    /// or comma-separated), e.g. `hello/*.stderr.log`.
    #[arg(long = "only", value_name = "GLOB", value_delimiter = ',')]
    pub only: Vec<String>,
    /// The agent's logs instead of the jobs'.
    #[arg(long)]
    pub agent: bool,
    /// Where to write the tarball.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
}

/// Runs `kubosh logs`.
pub fn run(args: &LogsArgs) -> ExitCode {
    run_command(async { logs(args).await.map(|text| (text, ExitCode::SUCCESS)) })
}

async fn logs(args: &LogsArgs) -> Result<String, Failure> {
    let config = DirectorConfig::load(&args.director).map_err(|e| e.to_string())?;
    let name = &args.name;
    if !config.deployment_dir(name).is_dir() {
        return Err(format!("Deployment '{name}' doesn't exist").into());
    }
    let cpis = config.saved_cpi_config()?;
    let request = LogsRequest {
        log_type: if args.agent { "agent" } else { "job" }.into(),
        filters: (args.jobs.iter().map(|job| format!("{job}/**")))
            .chain(args.only.iter().cloned())
            .collect(),
    };
    let scratch = tempfile::tempdir_in(&args.dir)
        .map_err(|e| format!("cannot write into {}: {e}", args.dir.display()))?;
    out::progress(format_args!("Using deployment '{name}'\n\n"));
    let doing = format!("Fetching logs for deployment '{name}'");
    let task = Task::start(&config, &doing, "fetch logs", Some(name))?;
    let engine = task.engine(&config, name, false, cpis).await?;
    let chosen = engine.instances_named(name, args.instance.as_deref()).await;
    let chosen = task.continues(chosen.map_err(|e| e.to_string()))?;
    let fetched = engine.fetch_logs(chosen, &request, scratch.path()).await;
    let fetched = task.continues(fetched.map_err(|e| e.to_string()))?;
    task.end(Ok::<(), String>(()))?;

    let time = kubosh_engine::logs::download_stamp();
    let path = args
        .dir
        .join(archive_name(name, args.instance.as_deref(), &time));
    let written = kubosh_engine::logs::write_archive(&fetched, &time, &path);
    written.map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(format!(
        "\nLogs written to '{}'\n\nSucceeded\n",
        path.display()
    ))
}

/// bosh-cli's name of a logs download: `<deployment>[.<group>[.<id>]]-<time>.tgz`.
pub(super) fn archive_name(deployment: &str, slug: Option<&str>, time: &str) -> String {
    let mut prefix = deployment.to_string();
    if let Some(slug) = slug {
        prefix.push('.');
        prefix.push_str(&slug.replace('/', "."));
    }
    format!("{prefix}-{time}.tgz")
}
