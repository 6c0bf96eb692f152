//! The `kubosh` command line: thin wrappers that read files, call the library and print.

mod agent;
mod cck;
mod controller;
mod cpi;
mod create_env;
mod delete_deployment;
mod deploy;
mod dev;
mod input;
mod instances;
mod interpolate;
mod kubectl_ops;
mod kubectl_plugin;
mod logs;
mod nats_pki;
mod out;
mod release;
mod run_errand;
mod signals;
mod ssh;
mod stemcell;
mod table;
mod tasks;
mod up;
mod validate;
mod vm;

use self::out::out;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// kubosh: BOSH deployments as Kubernetes resources.
#[derive(Debug, Parser)]
#[command(name = "kubosh", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines (stderr) are written: `text`, or `json` (one object a line, with the
    /// deployment's and instance's span fields) for log collectors.
    #[arg(long = "log-format", global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The one-command demo: start a control plane, NATS, the local cloud and the controller
    /// on this machine, deploy the example `hello` release, show it answering, run until
    /// Ctrl-C (state kept in `--state-dir` for the next run).
    Up(up::UpArgs),
    /// Check a deployment manifest against a cloud config; print every problem.
    Validate(validate::ValidateArgs),
    /// Apply ops files and variables to a YAML document and print it (`bosh interpolate`).
    Interpolate(interpolate::InterpolateArgs),
    /// Print the CustomResourceDefinitions kubosh serves, as YAML.
    Crd(CrdArgs),
    /// Deploy a manifest with the deploy engine, no cluster (`-d` director config); prints
    /// the task as the BOSH CLI does.
    Deploy(deploy::DeployArgs),
    /// Reconcile Deployment, Release and Stemcell resources of the cluster (`KUBECONFIG`)
    /// with the CPI, NATS and blobstore of a director configuration (`-d`).
    Controller(controller::ControllerArgs),
    /// What `kubosh deploy` would do, per instance and why; changes nothing.
    Plan(deploy::DeployArgs),
    /// Scan a `kubosh deploy` deployment for missing VMs, silent agents, missing or unmounted
    /// disks (`bosh cck`); resolve them with `--auto` or `--resolution`.
    Cck(cck::CckArgs),
    /// `bosh delete-deployment`: stops and deletes a deployment's instances and VMs, keeps
    /// its persistent disks as orphaned disks.
    DeleteDeployment(delete_deployment::DeleteDeploymentArgs),
    /// `bosh clean-up`: deletes orphaned disks older than 5 days (all with `--all`).
    CleanUp(delete_deployment::CleanUpArgs),
    /// `bosh instances`: each instance's process state, AZ and addresses; `--ps` its
    /// processes, `--vitals` its machine's and processes' vitals (from the agents).
    Instances(instances::InstancesArgs),
    /// `bosh logs`: the jobs' (or `--agent`'s) log files of a deployment's instances, as a
    /// tarball, through each agent's `fetch_logs`.
    Logs(logs::LogsArgs),
    /// `bosh run-errand`: runs an errand colocated on a deployment's instances (a job with
    /// `bin/run`), prints each instance's exit code, stdout and stderr.
    RunErrand(run_errand::RunErrandArgs),
    /// `bosh ssh`: a session on an instance (on the local cloud, a shell in its VM's
    /// directory), or `-c` a command on each chosen instance, with a one-time user and key.
    Ssh(ssh::SshArgs),
    /// `bosh tasks --recent`: the director's newest tasks, from its task history.
    Tasks(tasks::TasksArgs),
    /// `bosh task ID`: a task's output, replayed from its event log (`--event`: the log).
    Task(tasks::TaskArgs),
    /// Create or update a single-VM environment from a bosh-init manifest, installing its CPI
    /// on this machine (`bosh create-env`); the state is bosh-cli's state file.
    CreateEnv(create_env::EnvArgs),
    /// Delete the VM, disk and stemcell of a `create-env` environment, its CPI installation
    /// and its state file (`bosh delete-env`).
    DeleteEnv(create_env::EnvArgs),
    /// Write the certificates a director's NATS needs (a CA that signs each agent's,
    /// nats-server's, the director's) and print the configurations that use them.
    NatsPki(nats_pki::NatsPkiArgs),
    /// The local cloud as a CPI executable: a JSON request on stdin, a JSON response on stdout.
    Cpi(cpi::CpiArgs),
    /// kubosh's BOSH agent: serves a VM's agent settings over NATS (started by a CPI).
    Agent(agent::AgentArgs),
    /// A local-cloud VM's processes: run another agent (the real bosh-agent) in a VM.
    #[command(subcommand)]
    Vm(vm::VmCommand),
    /// BOSH release tarballs: build one from a release directory, inspect one.
    #[command(subcommand)]
    Release(release::ReleaseCommand),
    /// BOSH stemcell tarballs: create a minimal one, inspect one.
    #[command(subcommand)]
    Stemcell(stemcell::StemcellCommand),
    /// Development helpers (a local control plane).
    #[command(subcommand)]
    Dev(dev::DevCommand),
}

/// Arguments of `kubosh crd`.
#[derive(Debug, clap::Args)]
struct CrdArgs {
    /// Instead of printing, write one file per CRD into DIR (`<plural>.kubosh.io.yaml`) and
    /// delete any other `*.kubosh.io.yaml` there.
    #[arg(long, value_name = "DIR")]
    write: Option<std::path::PathBuf>,
}

/// Entry point of the `kubosh` binary.
pub fn main() -> ExitCode {
    if kubectl_plugin::invoked_as_plugin() {
        init_logging(LogFormat::Text, "warn", false);
        return kubectl_plugin::main();
    }
    let cli = Cli::parse();
    // `kubosh up` polls an apiserver that is starting: the client's errors while it does are
    // expected, and the demo prints its own progress.
    init_logging(
        cli.log_format,
        match cli.command {
            Command::Up(_) => "warn,kube_client=off",
            _ => "warn",
        },
        matches!(cli.command, Command::Controller(_)),
    );
    match cli.command {
        Command::Up(args) => up::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Dev(command) => dev::run(&command),
        Command::Cpi(args) => cpi::run(&args),
        Command::CreateEnv(args) => create_env::run(create_env::EnvCommand::Create, &args),
        Command::DeleteEnv(args) => create_env::run(create_env::EnvCommand::Delete, &args),
        Command::Deploy(args) => deploy::run_deploy(&args),
        Command::Plan(args) => deploy::run_plan(&args),
        Command::Cck(args) => cck::run(&args),
        Command::DeleteDeployment(args) => delete_deployment::run_delete(&args),
        Command::CleanUp(args) => delete_deployment::run_clean_up(&args),
        Command::Instances(args) => instances::run(&args),
        Command::Logs(args) => logs::run(&args),
        Command::RunErrand(args) => run_errand::run(&args),
        Command::Ssh(args) => ssh::run(&args),
        Command::Tasks(args) => tasks::run_tasks(&args),
        Command::Task(args) => tasks::run_task(&args),
        Command::Controller(args) => controller::run_controller(&args),
        Command::Agent(args) => agent::run(&args),
        Command::Vm(command) => vm::run(&command),
        Command::Interpolate(args) => interpolate::run(&args),
        Command::NatsPki(args) => nats_pki::run(&args),
        Command::Release(command) => release::run(&command),
        Command::Stemcell(command) => stemcell::run(&command),
        Command::Crd(args) => match crd(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("kubosh crd: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn crd(args: &CrdArgs) -> Result<(), Box<dyn std::error::Error>> {
    let Some(dir) = &args.write else {
        out!("{}", kubosh_kube::api::crds_yaml()?);
        return Ok(());
    };
    let files = kubosh_kube::api::crd_files()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for entry in
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?
    {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.ends_with(".kubosh.io.yaml") && !files.iter().any(|(f, _)| f == name) {
            std::fs::remove_file(&path)
                .map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
            eprintln!("removed {}", path.display());
        }
    }
    for (name, yaml) in files {
        let path = dir.join(name);
        std::fs::write(&path, yaml).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Logs go to stderr, filtered by `KUBOSH_LOG` (e.g. `KUBOSH_LOG=kubosh=debug`), else by
/// `default` (warnings), as text or JSON lines. stdout stays reserved for command output (a
/// CPI's JSON response, YAML). With `task_debug` (the controller), each task's debug log is
/// kept as well, whatever the filter lets through ([`kubosh_kube::task_history`]).
fn init_logging(format: LogFormat, default: &str, task_debug: bool) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("KUBOSH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format {
        LogFormat::Text => lines.boxed(),
        LogFormat::Json => lines
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
    };
    let debug = task_debug.then(|| {
        let kubosh =
            tracing_subscriber::filter::Targets::new().with_target("kubosh", tracing::Level::DEBUG);
        kubosh_kube::task_history::TaskDebugLayer.with_filter(kubosh)
    });
    let _ = tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(debug)
        .try_init();
}

/// Runs a long-running command's `work` on a multi-threaded tokio runtime: success, or
/// `<command>: <error>` on stderr and failure.
fn run_async<E: std::fmt::Display>(
    command: &str,
    work: impl std::future::Future<Output = Result<(), E>>,
) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{command}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{command}: {e}");
            ExitCode::FAILURE
        }
    }
}
