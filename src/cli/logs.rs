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
    let single = chosen.len() == 1;
    let fetched = engine.fetch_logs(chosen, &request, scratch.path()).await;
    let fetched = task.continues(fetched.map_err(|e| e.to_string()))?;
    task.end(Ok::<(), String>(()))?;

    let time = timestamp();
    let mut prefix = name.clone();
    if let Some(slug) = &args.instance {
        prefix.push('.');
        prefix.push_str(&slug.replace('/', "."));
    }
    let path = args.dir.join(format!("{prefix}-{time}.tgz"));
    let written = match (single, fetched.first()) {
        (true, Some(one)) => std::fs::rename(&one.path, &path),
        _ => bundle(&fetched, &time).and_then(|bytes| std::fs::write(&path, bytes)),
    };
    written.map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(format!(
        "\nLogs written to '{}'\n\nSucceeded\n",
        path.display()
    ))
}

/// Several instances' tarballs in one, as the Director bundles them.
fn bundle(fetched: &[kubosh_engine::logs::FetchedLogs], time: &str) -> std::io::Result<Vec<u8>> {
    let mut tar = kubosh_core::release::tarball::TarWriter::new();
    for logs in fetched {
        let bytes = std::fs::read(&logs.path)?;
        let i = &logs.instance;
        tar.file(
            &format!("./{}.{}.{time}.tgz", i.group, i.uuid),
            &bytes,
            false,
        )?;
    }
    tar.finish(false)
}

/// Now as bosh-cli stamps downloads (`20060102-150405-999999999`, UTC here).
fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (y, m, d) = kubosh_base::civil::civil_from_days((secs / 86_400) as i64);
    let rest = secs % 86_400;
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}-{:09}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        now.subsec_nanos()
    )
}
