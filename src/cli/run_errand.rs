//! `kubosh run-errand`: `bosh run-errand` for errands colocated on the instances of a
//! deployment made with `kubosh deploy` (a job with `bin/run` on a service instance group):
//! the task, then bosh-cli's summary of each instance's exit code, stdout and stderr; the
//! command fails (exit 1) when an errand did, as bosh-cli does.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::deploy::{Failure, Task, end};
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
}

/// Runs `kubosh run-errand`.
pub fn run(args: &RunErrandArgs) -> ExitCode {
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Refused(format!("cannot start the runtime: {e}")))
        .and_then(|runtime| runtime.block_on(run_errand(args)));
    end(result)
}

async fn run_errand(args: &RunErrandArgs) -> Result<(String, ExitCode), Failure> {
    let config = DirectorConfig::load(&args.director).map_err(|e| e.to_string())?;
    let name = &args.name;
    if !config.deployment_dir(name).is_dir() {
        return Err(format!("Deployment '{name}' doesn't exist").into());
    }
    let cpis = config.saved_cpi_config()?;
    out::progress(format_args!("Using deployment '{name}'\n\n"));
    let doing = format!("Running errand '{}'", args.errand);
    let task = Task::start(
        &config,
        &doing,
        &format!("run errand {}", args.errand),
        Some(name),
    )?;
    let engine = task.engine(&config, name, false, cpis).await?;
    let mut chosen = Vec::new();
    let slugs: Vec<Option<&str>> = match args.instances.is_empty() {
        true => vec![None],
        false => args.instances.iter().map(|s| Some(s.as_str())).collect(),
    };
    for slug in slugs {
        let found = engine
            .instances_named(name, slug)
            .await
            .map_err(|e| e.to_string());
        for record in task.continues(found)? {
            if !chosen
                .iter()
                .any(|c: &kubosh_engine::state::InstanceRecord| c.uuid == record.uuid)
            {
                chosen.push(record);
            }
        }
    }
    let ran = engine.run_errand(name, &args.errand, chosen).await;
    let outcomes = task.continues(ran.map_err(|e| e.to_string()))?;
    task.end(Ok::<(), String>(()))?;
    let summary = summary(&outcomes, stdout_is_tty());
    let failed = outcomes.iter().rev().find(|o| o.exit_code != 0);
    match failed {
        None => Ok((format!("\n{summary}\nSucceeded\n"), ExitCode::SUCCESS)),
        Some(o) => {
            out::progress(format_args!("\n{summary}"));
            let how = if o.exit_code > 128 {
                "was canceled"
            } else {
                "completed with error"
            };
            Err(Failure::Task(format!(
                "Errand '{}' {how} (exit code {})\n\nExit code 1\n",
                args.errand, o.exit_code
            )))
        }
    }
}

/// bosh-cli's errand summary (a transposed table): `Instance`, `Exit Code`, `Stdout`,
/// `Stderr` for each run, then the count; for a pipe, the values only.
fn summary(outcomes: &[ErrandOutcome], tty: bool) -> String {
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
