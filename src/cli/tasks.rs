//! `kubosh tasks` and `kubosh task`: `bosh tasks --recent` and `bosh task ID` for the tasks
//! of a director's commands, from its task history ([`kubosh_director::tasks`]): a task's
//! output is replayed from its event log as it was printed while it ran.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::out::out;
use super::table::{Table, stdout_is_tty};
use kubosh_bosh::events::{CliRenderer, EventLine, full_time_text};
use kubosh_director::DirectorConfig;
use kubosh_director::tasks;

/// Arguments of `kubosh tasks`.
#[derive(Debug, Args)]
pub struct TasksArgs {
    /// The director configuration file (its state directory keeps the history).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// Only this deployment's tasks.
    #[arg(long)]
    pub deployment: Option<String>,
    /// How many of the newest tasks to show.
    #[arg(short = 'r', long, default_value_t = 30)]
    pub recent: usize,
    /// Print for a terminal (header, count) even when stdout is not one.
    #[arg(long)]
    pub tty: bool,
}

/// Arguments of `kubosh task`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The director configuration file (its state directory keeps the history).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// The task's id.
    pub id: u64,
    /// The raw event log (one JSON object per line), as the Director keeps it.
    #[arg(long)]
    pub event: bool,
}

/// Runs `kubosh tasks`.
pub fn run_tasks(args: &TasksArgs) -> ExitCode {
    let config = match DirectorConfig::load(&args.director) {
        Ok(config) => config,
        Err(e) => return fail(&e.to_string()),
    };
    let rows = (tasks::list(&config.tasks_dir()).into_iter())
        .filter(|t| args.deployment.is_none() || t.deployment == args.deployment)
        .take(args.recent)
        .map(|t| TaskRow {
            id: t.id.to_string(),
            state: t.state,
            started_at: t.started_at,
            finished_at: t.finished_at,
            deployment: t.deployment.unwrap_or_default(),
            description: t.description,
        });
    let table = tasks_table(rows);
    let tty = args.tty || stdout_is_tty();
    out!("{}", table.render(tty));
    if tty {
        out!("\nSucceeded\n");
    }
    ExitCode::SUCCESS
}

/// Runs `kubosh task`.
pub fn run_task(args: &TaskArgs) -> ExitCode {
    let config = match DirectorConfig::load(&args.director) {
        Ok(config) => config,
        Err(e) => return fail(&e.to_string()),
    };
    let (record, lines) = match tasks::read(&config.tasks_dir(), args.id) {
        Ok(task) => task,
        Err(e) => return fail(&e),
    };
    out!(
        "{}",
        task_output(&record.id.to_string(), &record.state, &lines, args.event)
    );
    match task_failure(&record.id.to_string(), &record.state) {
        None => ExitCode::SUCCESS,
        Some(message) => fail(&message),
    }
}

/// One row of `bosh tasks`.
pub(super) struct TaskRow {
    pub id: String,
    pub state: String,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub deployment: String,
    pub description: String,
}

/// bosh-cli's tasks table.
pub(super) fn tasks_table(rows: impl Iterator<Item = TaskRow>) -> Table {
    let rows = rows
        .map(|t| {
            vec![vec![
                t.id,
                t.state,
                full_time_text(t.started_at),
                t.finished_at.map(full_time_text).unwrap_or_default(),
                String::new(),
                t.deployment,
                t.description,
                String::new(),
            ]]
        })
        .collect();
    let header = [
        "ID",
        "State",
        "Started At",
        "Finished At",
        "User",
        "Deployment",
        "Description",
        "Result",
    ];
    Table {
        title: String::new(),
        content: "tasks".into(),
        header: header.map(String::from).to_vec(),
        sections: rows,
        sort: false,
    }
}

/// What `bosh task ID` prints of task `id` that ended in `state` with the event log
/// `lines`: the log itself (`--event`), or its output replayed as the task printed it; then
/// `Succeeded` when it did.
pub(super) fn task_output(id: &str, state: &str, lines: &[String], event: bool) -> String {
    let mut text = if event {
        lines.iter().map(|l| format!("{l}\n")).collect()
    } else {
        let mut renderer = CliRenderer::new(Vec::new(), id);
        let _ = renderer.start();
        for line in lines {
            if let Ok(event) = serde_json::from_str::<EventLine>(line) {
                let _ = renderer.render(&event);
            }
        }
        let _ = renderer.finish(state);
        String::from_utf8_lossy(&renderer.into_inner()).into_owned()
    };
    if state == "done" {
        text.push_str("\nSucceeded\n");
    }
    text
}

/// bosh-cli's error for a task that did not succeed.
pub(super) fn task_failure(id: &str, state: &str) -> Option<String> {
    (state != "done").then(|| format!("Expected task '{id}' to succeed but state is '{state}'"))
}

fn fail(message: &str) -> ExitCode {
    eprintln!("{message}\n\nExit code 1");
    ExitCode::FAILURE
}
