//! `kubosh run-errand`: `bosh run-errand` for deployments made with `kubosh deploy`. An
//! errand colocated on instances (a job with `bin/run` on a service instance group) runs on
//! them; an instance group with `lifecycle: errand` gets its VMs for the run (the deploy's
//! inputs are needed for that: `--manifest` and the flags `kubosh deploy` takes) and loses
//! them after it unless `--keep-alive`. The task, then bosh-cli's summary of each instance's
//! exit code, stdout and stderr; the command fails (exit 1) when an errand did, as bosh-cli
//! does.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::deploy::{DeployArgs, Failure, Task, read_request, run_command};
use super::input::DocumentArgs;
use super::out;
use super::table::stdout_is_tty;
use kubosh_director::DirectorConfig;
use kubosh_engine::errand::ErrandOutcome;

/// Arguments of `kubosh run-errand`.
#[derive(Debug, Args)]
pub struct RunErrandArgs {
    /// The director configuration file (state directory, CPI, NATS, blobstore).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// The deployment.
    pub name: String,
    /// The errand: a job with `bin/run` on the deployment's instances.
    pub errand: String,
    /// Only on these instances: `GROUP`, `GROUP/INDEX` or `GROUP/ID` (repeatable).
    #[arg(long = "instance", value_name = "GROUP[/ID]")]
    pub instances: Vec<String>,
    /// Keep an errand instance group's VMs after the run.
    #[arg(long = "keep-alive")]
    pub keep_alive: bool,
    /// The deployment manifest: needed to run an instance group with `lifecycle: errand`
    /// (its VMs are deployed for the run), with the inputs `kubosh deploy` takes.
    #[arg(long, value_name = "PATH")]
    pub manifest: Option<PathBuf>,
    #[command(flatten)]
    pub input: DocumentArgs,
    /// As `kubosh deploy --vars-store`.
    #[arg(long = "vars-store", value_name = "PATH")]
    pub vars_store: Option<PathBuf>,
    /// As `kubosh deploy --cloud-config` (repeatable).
    #[arg(long = "cloud-config", value_name = "PATH")]
    pub cloud_config: Vec<PathBuf>,
    /// As `kubosh deploy --runtime-config` (repeatable).
    #[arg(long = "runtime-config", value_name = "PATH")]
    pub runtime_configs: Vec<PathBuf>,
    /// As `kubosh deploy --release` (repeatable).
    #[arg(long = "release", value_name = "TGZ")]
    pub releases: Vec<PathBuf>,
    /// As `kubosh deploy --stemcell` (repeatable).
    #[arg(long = "stemcell", value_name = "TGZ")]
    pub stemcells: Vec<PathBuf>,
}

impl RunErrandArgs {
    /// The deploy the errand group's VMs come from, when a manifest is given.
    fn deploy_args(&self) -> Option<DeployArgs> {
        Some(DeployArgs {
            director: self.director.clone(),
            manifest: self.manifest.clone()?,
            input: self.input.clone(),
            vars_store: self.vars_store.clone(),
            cloud_config: self.cloud_config.clone(),
            runtime_configs: self.runtime_configs.clone(),
            cpi_configs: Vec::new(),
            releases: self.releases.clone(),
            stemcells: self.stemcells.clone(),
            recreate: false,
            fix: false,
            parallel_azs: false,
        })
    }
}

/// Runs `kubosh run-errand`.
pub fn run(args: &RunErrandArgs) -> ExitCode {
    run_command(run_errand(args))
}

async fn run_errand(args: &RunErrandArgs) -> Result<(String, ExitCode), Failure> {
    let config = DirectorConfig::load(&args.director).map_err(|e| e.to_string())?;
    let name = &args.name;
    if !config.deployment_dir(name).is_dir() {
        return Err(format!("Deployment '{name}' doesn't exist").into());
    }
    // With the deploy's inputs, the errand may be an instance group of its own.
    let request = match args.deploy_args() {
        Some(deploy) => {
            let (manifest_name, request, _) = read_request(&deploy, &config, true)?;
            if manifest_name != *name {
                let other = format!("the manifest is deployment '{manifest_name}', not '{name}'");
                return Err(other.into());
            }
            let lifecycle = (request.manifest().instance_groups.iter())
                .any(|g| g.name == args.errand && g.is_errand());
            lifecycle.then_some(request)
        }
        None => None,
    };
    let cpis = config.saved_cpi_config()?;
    out::progress(format_args!("Using deployment '{name}'\n\n"));
    let doing = format!("Running errand '{}'", args.errand);
    let description = format!("run errand {}", args.errand);
    let task = Task::start(&config, &doing, &description, Some(name))?;
    let engine = task.engine(&config, name, false, cpis).await?;
    if let Some(request) = request {
        let ran = engine
            .run_lifecycle_errand(&request, &args.errand, args.keep_alive)
            .await;
        let outcomes = task.continues(ran.map_err(|e| e.to_string()))?;
        task.end(Ok::<(), String>(()))?;
        return summarized(&args.errand, &outcomes);
    }
    let found = engine
        .instances_selected(name, &args.instances)
        .await
        .map_err(|e| e.to_string());
    let chosen = task.continues(found)?;
    let ran = engine.run_errand(name, &args.errand, chosen).await;
    let outcomes = task.continues(ran.map_err(|e| e.to_string()))?;
    task.end(Ok::<(), String>(()))?;
    summarized(&args.errand, &outcomes)
}

/// The summary, and success only when every run exited 0 (bosh-cli's errors otherwise).
fn summarized(errand: &str, outcomes: &[ErrandOutcome]) -> Result<(String, ExitCode), Failure> {
    let summary = summary(outcomes, stdout_is_tty());
    match failure(errand, outcomes) {
        None => Ok((format!("\n{summary}\nSucceeded\n"), ExitCode::SUCCESS)),
        Some(error) => {
            out::progress(format_args!("\n{summary}"));
            Err(Failure::Task(format!("{error}\n\nExit code 1\n")))
        }
    }
}

/// bosh-cli's error when a run did not exit 0: `Errand 'E' completed with error (exit code
/// N)` (of the last such run), or `was canceled` when it was killed by a signal.
pub(super) fn failure(errand: &str, outcomes: &[ErrandOutcome]) -> Option<String> {
    let failed = outcomes.iter().rev().find(|o| o.exit_code != 0)?;
    let how = if failed.exit_code > 128 {
        "was canceled"
    } else {
        "completed with error"
    };
    Some(format!(
        "Errand '{errand}' {how} (exit code {})",
        failed.exit_code
    ))
}

/// bosh-cli's errand summary (a transposed table): `Instance`, `Exit Code`, `Stdout`,
/// `Stderr` for each run, then the count; for a pipe, the values only.
pub(super) fn summary(outcomes: &[ErrandOutcome], tty: bool) -> String {
    let mut sorted: Vec<&ErrandOutcome> = outcomes.iter().collect();
    sorted.sort_by(|a, b| (&a.group, &a.id).cmp(&(&b.group, &b.id)));
    let mut out = String::new();
    for (i, o) in sorted.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let fields = [
            ("Instance", format!("{}/{}", o.group, o.id)),
            ("Exit Code", o.exit_code.to_string()),
            ("Stdout", o.stdout.trim_end_matches('\n').to_string()),
            ("Stderr", o.stderr.trim_end_matches('\n').to_string()),
        ];
        for (title, value) in fields {
            let value = if value.is_empty() {
                "-".to_string()
            } else {
                value
            };
            for (n, line) in value.split('\n').enumerate() {
                match (tty, n) {
                    (true, 0) => out.push_str(&format!("{title:<9}  {line}  \n")),
                    (true, _) => out.push_str(&format!("{:<9}  {line}  \n", "")),
                    (false, _) => out.push_str(&format!("{line}\t\n")),
                }
            }
        }
    }
    if tty {
        out.push_str(&format!("\n{} errand(s)\n", outcomes.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_is_bosh_cli_s() {
        let outcome = ErrandOutcome {
            group: "api".into(),
            id: "abc".into(),
            exit_code: 1,
            stdout: "a: ok\nb: ok\n".into(),
            stderr: String::new(),
        };
        assert_eq!(
            summary(&[outcome], true),
            "Instance   api/abc  \nExit Code  1  \nStdout     a: ok  \n           b: ok  \nStderr     -  \n\n1 errand(s)\n"
        );
    }
}
