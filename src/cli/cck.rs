//! `kubosh cck`: `bosh cck` for deployments made with `kubosh deploy`. Scans the deployment
//! (its records, the cloud, the agents) and prints each problem; with `--auto` or
//! `--resolution` applies resolutions. Never asks: without either it only reports (and exits 1
//! when it found problems, as `bosh cck --report` does).

use super::out;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::deploy::{DeployArgs, Failure, TaskOutput, read_request, run_command, task_failed};
use kubosh_director::DirectorConfig;
use kubosh_engine::cck::{Problem, Resolution};

/// Arguments of `kubosh cck`.
#[derive(Debug, Args)]
pub struct CckArgs {
    #[command(flatten)]
    pub deploy: DeployArgs,
    /// Apply each problem's automatic resolution (`recreate_vm` for a missing VM, `ignore`
    /// for the rest).
    #[arg(long)]
    pub auto: bool,
    /// Apply this resolution to every problem that offers it (repeatable), e.g.
    /// `--resolution recreate_vm --resolution delete_disk_reference`.
    #[arg(long = "resolution", value_name = "RESOLUTION", value_parser = parse_resolution)]
    pub resolutions: Vec<Resolution>,
    /// Only report the problems (the default without `--auto` or `--resolution`).
    #[arg(long)]
    pub report: bool,
}

fn parse_resolution(text: &str) -> Result<Resolution, String> {
    Resolution::parse(text).ok_or_else(|| {
        let names: Vec<&str> = Resolution::ALL.iter().map(|r| r.name()).collect();
        format!("unknown resolution '{text}' (one of: {})", names.join(", "))
    })
}

/// Runs `kubosh cck`.
pub fn run(args: &CckArgs) -> ExitCode {
    run_command(async {
        let (text, clean) = cck(args).await?;
        let code = if clean {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
        Ok((text, code))
    })
}

/// The text to print last, and whether the deployment ends without unresolved problems.
async fn cck(args: &CckArgs) -> Result<(String, bool), Failure> {
    let config = DirectorConfig::load(&args.deploy.director).map_err(|e| e.to_string())?;
    let resolving = !args.report && (args.auto || !args.resolutions.is_empty());
    let (name, request, cpis) = read_request(&args.deploy, &config, resolving)?;
    out::progress(format_args!("Using deployment '{name}'\n\n"));
    // As `bosh cck`: a task that scans, the problems, a task that applies resolutions.
    let scan_task = config.next_task_id()?;
    let events = Arc::new(TaskOutput::start(
        &config,
        scan_task,
        "scan cloud",
        Some(&name),
    ));
    let engine = config.engine(&name, events.clone(), false, cpis.config.clone());
    let scanned = match engine.await {
        Ok(engine) => engine.scan(&name).await.map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let problems = ended(&events, scanned, "Performing cloud check", scan_task)?;
    let listed = format!("\n{}", table(&problems));
    if !resolving || problems.is_empty() {
        return Ok((listed, problems.is_empty()));
    }
    let choices: Vec<(Problem, Resolution)> = (problems.iter())
        .filter_map(|p| choose(p, args).map(|r| (p.clone(), r)))
        .collect();
    out::progress(format_args!("{listed}\n"));
    let fix_task = config.next_task_id()?;
    let events = Arc::new(TaskOutput::start(
        &config,
        fix_task,
        "apply resolutions",
        Some(&name),
    ));
    let engine = config
        .engine(&name, events.clone(), false, cpis.config)
        .await;
    let fixed = match engine {
        Ok(engine) => {
            let resolve = engine.resolve_problems(&name, &choices, Some(&request));
            match resolve.await {
                // What is left, scanned again within the task.
                Ok(resolved) => (engine.scan(&name).await)
                    .map(|left| (resolved, left))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
        Err(e) => Err(e),
    };
    let (resolved, left) = ended(&events, fixed, "Applying problem resolutions", fix_task)?;
    let mut text = String::from("\n");
    for (id, resolution) in &resolved.applied {
        text.push_str(&format!("Resolved problem {id}: {}\n", resolution.name()));
    }
    text.push_str(&format!("\n{} problem(s) left\n", left.len()));
    Ok((text, left.is_empty()))
}

/// Ends a task's output after `result`: a failure told as the task's error line, then as the
/// BOSH CLI ends a failed task.
fn ended<T>(
    events: &TaskOutput,
    result: Result<T, String>,
    doing: &str,
    task: u64,
) -> Result<T, Failure> {
    match result {
        Ok(value) => {
            events.finish("done");
            Ok(value)
        }
        Err(e) => {
            events.error(&e);
            events.finish("error");
            Err(Failure::Task(task_failed(doing, task, None)))
        }
    }
}

/// The resolution `args` choose for `problem`: the first `--resolution` it offers, else its
/// automatic one with `--auto`.
fn choose(problem: &Problem, args: &CckArgs) -> Option<Resolution> {
    (args.resolutions.iter())
        .find(|r| problem.resolutions().contains(r))
        .copied()
        .or_else(|| args.auto.then(|| problem.kind.auto()))
}

/// The problems as `bosh cck` lists them.
fn table(problems: &[Problem]) -> String {
    let mut out = String::from("ID        Type                 Description\n");
    for p in problems {
        let description = p.description.replace('\n', " ");
        out.push_str(&format!(
            "{:<9} {:<20} {description}\n",
            p.id,
            p.kind.name()
        ));
        let offered: Vec<&str> = p.resolutions().iter().map(|r| r.name()).collect();
        out.push_str(&format!("          resolutions: {}\n", offered.join(", ")));
    }
    out.push_str(&format!("\n{} problem(s)\n", problems.len()));
    out
}
