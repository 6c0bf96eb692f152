//! `kubectl bosh`: the `kubosh` binary answers as the kubectl plugin `kubectl-bosh` (a
//! binary of that name on `PATH` makes `kubectl bosh ...` work; a symlink to `kubosh` does).
//! It reads the cluster as kubectl does: `KUBECONFIG` or `~/.kube/config`, `--kubeconfig`,
//! `--context`, and `-n`/`--namespace` (else the context's namespace), and each command is
//! an ordinary API request, so the operator's RBAC decides what it may see.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::instances::Shown;
use super::out::{self, out};
use super::table::stdout_is_tty;
use kubosh_engine::errand::ErrandOutcome;
use kubosh_engine::instances::InstanceInfo;
use kubosh_kube::api::{
    ErrandPhase, ErrandRun, ErrandRunSpec, ErrandRunStatus, Instance, InstanceState, ProcessState,
    labels,
};

/// The plugin's name: `kubectl` finds `kubectl-bosh` on `PATH` for `kubectl bosh`.
pub const PLUGIN: &str = "kubectl-bosh";

/// `kubectl bosh`: BOSH's day-2 commands for kubosh's resources.
#[derive(Debug, Parser)]
#[command(name = "kubectl bosh", version)]
struct Plugin {
    /// The kubeconfig file (default: `KUBECONFIG`, else `~/.kube/config`).
    #[arg(long, global = true, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,
    /// The namespace (default: the context's).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    namespace: Option<String>,
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// `bosh instances`: each instance of a Deployment with its process state, AZ and
    /// addresses, from its `Instance` resources; with `--ps` and `--vitals` what its agent
    /// last said (refreshed by the controller every `--instance-details-interval`).
    Instances {
        /// The Deployment.
        deployment: String,
        #[command(flatten)]
        shown: Shown,
        /// Print for a terminal (title, header, count) even when stdout is not one.
        #[arg(long)]
        tty: bool,
    },
    /// `bosh logs`: each chosen instance's logs as a tarball (one instance's, or a bundle
    /// of them), through the controller's ops API (RBAC: `get` on `boshdeployments/logs`
    /// in `ops.kubosh.io`).
    Logs(super::kubectl_ops::LogsArgs),
    /// `bosh ssh`: a session on an instance (on the local cloud, a shell in its VM's
    /// directory), or `-c` a command on each chosen instance, with a one-time user and key
    /// (RBAC: `create` on `boshdeployments/ssh` in `ops.kubosh.io`).
    Ssh(super::kubectl_ops::SshArgs),
    /// `bosh tasks`: the tasks the controller kept (deploys, actions, repairs, scans,
    /// deletions, errand runs), newest first.
    Tasks {
        /// Only this Deployment's tasks.
        deployment: Option<String>,
        /// How many of the newest tasks to show.
        #[arg(short = 'r', long, default_value_t = 30)]
        recent: usize,
        /// Print for a terminal (header, count) even when stdout is not one.
        #[arg(long)]
        tty: bool,
    },
    /// `bosh task ID`: a task's output replayed from its kept event log.
    Task {
        /// The task's id (`kubectl bosh tasks`, or a Deployment's `status.lastTask.id`).
        id: String,
        /// The raw event log (one JSON object per line), as the Director keeps it.
        #[arg(long, conflicts_with = "debug")]
        event: bool,
        /// The controller's debug log of the task (its log lines, debug level included).
        #[arg(long)]
        debug: bool,
    },
    /// `bosh run-errand`: creates an `ErrandRun` of the Deployment's errand and follows it
    /// to its end; exits 1 when the errand failed, as bosh-cli does.
    RunErrand(RunErrand),
}

/// `kubectl bosh run-errand DEPLOYMENT ERRAND`.
#[derive(Debug, clap::Args)]
struct RunErrand {
    /// The Deployment.
    deployment: String,
    /// The errand: an instance group with `lifecycle: errand`, or a colocated job.
    errand: String,
    /// Only on these instances: `GROUP`, `GROUP/INDEX` or `GROUP/ID` (repeatable).
    #[arg(long = "instance", value_name = "GROUP[/ID]")]
    instances: Vec<String>,
    /// Keep an errand instance group's VMs after the run.
    #[arg(long = "keep-alive")]
    keep_alive: bool,
    /// Run only when the deployment changed since the errand last succeeded.
    #[arg(long = "when-changed")]
    when_changed: bool,
    /// Print for a terminal (title, header, count) even when stdout is not one.
    #[arg(long)]
    tty: bool,
}

/// Whether the binary was started as the kubectl plugin.
pub fn invoked_as_plugin() -> bool {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|name| name == PLUGIN)
}

/// Runs `kubectl bosh ...`.
pub fn main() -> ExitCode {
    let plugin = Plugin::parse();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
        .and_then(|runtime| runtime.block_on(run(&plugin)));
    match result {
        Ok(Done { stdout, failure }) => {
            out!("{stdout}");
            match failure {
                None => ExitCode::SUCCESS,
                Some(message) => {
                    eprintln!("{message}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a command that ran prints: its output, and why it failed when it did.
struct Done {
    stdout: String,
    failure: Option<String>,
}

impl From<String> for Done {
    fn from(stdout: String) -> Done {
        Done {
            stdout,
            failure: None,
        }
    }
}

async fn run(plugin: &Plugin) -> Result<Done, String> {
    let options = KubeConfigOptions {
        context: plugin.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &plugin.kubeconfig {
        Some(path) => {
            let file =
                Kubeconfig::read_from(path).map_err(|e| format!("{}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options).await
        }
        None => kube::Config::from_kubeconfig(&options).await,
    }
    .map_err(|e| format!("cannot read the kubeconfig: {e}"))?;
    let namespace = plugin
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    match &plugin.command {
        PluginCommand::Instances {
            deployment,
            shown,
            tty,
        } => {
            let api: Api<Instance> = Api::namespaced(client, &namespace);
            let selector = format!("{}={deployment}", labels::DEPLOYMENT);
            let list = (api.list(&ListParams::default().labels(&selector)).await).map_err(|e| {
                format!("listing the instances of '{deployment}' in '{namespace}': {e}")
            })?;
            let infos: Vec<InstanceInfo> = list.items.iter().map(instance_info).collect();
            Ok(super::instances::table(deployment, &infos, shown)
                .render(*tty || stdout_is_tty())
                .into())
        }
        PluginCommand::RunErrand(args) => run_errand(client, &namespace, args).await,
        PluginCommand::Tasks {
            deployment,
            recent,
            tty,
        } => {
            let kept = kubosh_kube::task_history::list(&client, &namespace, deployment.as_deref())
                .await
                .map_err(|e| format!("listing the tasks in '{namespace}': {e}"))?;
            let rows = kept
                .into_iter()
                .take(*recent)
                .map(|t| super::tasks::TaskRow {
                    id: t.id,
                    state: t.state,
                    started_at: t.started_at,
                    finished_at: Some(t.finished_at),
                    deployment: t.deployment,
                    description: t.description,
                });
            let tty = *tty || stdout_is_tty();
            let mut text = super::tasks::tasks_table(rows).render(tty);
            if tty {
                text.push_str("\nSucceeded\n");
            }
            Ok(text.into())
        }
        PluginCommand::Task { id, event, debug } => {
            let kept = kubosh_kube::task_history::read(&client, &namespace, id)
                .await
                .map_err(|e| format!("reading task '{id}' in '{namespace}': {e}"))?;
            let Some(kept) = kept else {
                return Err(format!(
                    "Task '{id}' is not kept in namespace '{namespace}'"
                ));
            };
            let task = &kept.entry;
            let stdout = match debug {
                true => kept.debug.clone(),
                false => super::tasks::task_output(&task.id, &task.state, &kept.events, *event),
            };
            Ok(Done {
                stdout,
                failure: super::tasks::task_failure(&task.id, &task.state),
            })
        }
        PluginCommand::Logs(args) => {
            (super::kubectl_ops::logs(client, &namespace, args).await).map(Done::from)
        }
        PluginCommand::Ssh(args) => {
            let failure = super::kubectl_ops::ssh(client, &namespace, args).await?;
            Ok(Done {
                stdout: String::new(),
                failure,
            })
        }
    }
}

/// Creates the `ErrandRun`, says how it waits and runs (stderr), and prints bosh-cli's
/// summary once it ended.
async fn run_errand(
    client: kube::Client,
    namespace: &str,
    args: &RunErrand,
) -> Result<Done, String> {
    use futures::TryStreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let api: Api<ErrandRun> = Api::namespaced(client, namespace);
    let mut run = ErrandRun::new(
        "",
        ErrandRunSpec {
            deployment: args.deployment.clone(),
            errand: args.errand.clone(),
            instances: args.instances.clone(),
            keep_alive: args.keep_alive,
            when_changed: args.when_changed,
        },
    );
    run.metadata.name = None;
    run.metadata.generate_name = Some(format!("{}-{}-", args.deployment, args.errand));
    let created = (api.create(&PostParams::default(), &run).await)
        .map_err(|e| format!("creating an ErrandRun in '{namespace}': {e}"))?;
    let name = created.name_any();
    out::progress(format_args!(
        "Using deployment '{}'\n\nErrandRun '{name}' created\n",
        args.deployment
    ));
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut changes = std::pin::pin!(watcher(api, config).applied_objects());
    let mut said = String::new();
    let ended = loop {
        let Some(run) =
            (changes.try_next().await).map_err(|e| format!("watching ErrandRun '{name}': {e}"))?
        else {
            return Err(format!("the watch of ErrandRun '{name}' ended"));
        };
        let Some(status) = run.status else { continue };
        if status.phase.is_some_and(|p| p.is_final()) {
            break status;
        }
        let now = (status.conditions.iter())
            .find(|c| c.type_ == "Reconciling" && c.status == "True")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        if !now.is_empty() && now != said {
            out::progress(format_args!("{now}\n"));
            said = now;
        }
    };
    errand_done(&args.errand, &ended, args.tty || stdout_is_tty())
}

/// bosh-cli's summary of an ended run, and its error when the errand failed or could not
/// run.
fn errand_done(errand: &str, status: &ErrandRunStatus, tty: bool) -> Result<Done, String> {
    let ready = (status.conditions.iter()).find(|c| c.type_ == "Ready");
    let message = ready.map(|c| c.message.clone()).unwrap_or_default();
    let outcomes: Vec<ErrandOutcome> = (status.instances.iter())
        .map(|r| {
            let (group, id) = r.instance.split_once('/').unwrap_or((&r.instance, ""));
            ErrandOutcome {
                group: group.to_string(),
                id: id.to_string(),
                exit_code: r.exit_code,
                stdout: r.stdout.clone(),
                stderr: r.stderr.clone(),
            }
        })
        .collect();
    if outcomes.is_empty() {
        // Skipped, or it never ran: the condition says why.
        return Ok(match status.phase {
            Some(ErrandPhase::Succeeded) => Done::from(format!("\n{message}\n\nSucceeded\n")),
            _ => Done {
                stdout: String::new(),
                failure: Some(message),
            },
        });
    }
    let summary = super::run_errand::summary(&outcomes, tty);
    Ok(match super::run_errand::failure(errand, &outcomes) {
        None => Done::from(format!("\n{summary}\nSucceeded\n")),
        Some(failure) => Done {
            stdout: format!("\n{summary}"),
            failure: Some(failure),
        },
    })
}

/// An `Instance` resource as `bosh instances` describes an instance.
fn instance_info(i: &Instance) -> InstanceInfo {
    let status = i.status.as_ref();
    let state = status.and_then(|s| s.process_state.as_ref());
    InstanceInfo {
        group: i.spec.instance_group.clone(),
        id: i.spec.id.clone(),
        index: u64::try_from(i.spec.index).unwrap_or_default(),
        az: i.spec.az.clone(),
        ips: (i.spec.networks.iter())
            .filter_map(|n| n.ip.clone())
            .collect(),
        bootstrap: i.spec.bootstrap,
        state: match i.spec.state {
            InstanceState::Started => "started",
            InstanceState::Stopped => "stopped",
            InstanceState::Detached => "detached",
        }
        .to_string(),
        vm_cid: i.spec.vm_cid.clone(),
        agent_id: i.spec.agent_id.clone(),
        disk_cids: i.spec.disk_cids.clone(),
        process_state: state.map(process_state).unwrap_or_default().to_string(),
        processes: (status.iter().flat_map(|s| &s.processes))
            .map(|p| p.to_wire())
            .collect(),
        vitals: status.and_then(|s| s.vitals.as_ref()).map(|v| v.to_wire()),
    }
}

/// The Director's words for a process state.
fn process_state(state: &ProcessState) -> &'static str {
    match state {
        ProcessState::Running => "running",
        ProcessState::Failing => "failing",
        ProcessState::Stopped => "stopped",
        ProcessState::Unresponsive => "unresponsive agent",
        ProcessState::Unknown => "unknown",
    }
}
