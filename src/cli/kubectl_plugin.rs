//! `kubectl bosh`: the `kubosh` binary answers as the kubectl plugin `kubectl-bosh` (a
//! binary of that name on `PATH` makes `kubectl bosh ...` work; a symlink to `kubosh` does).
//! It reads the cluster as kubectl does: `KUBECONFIG` or `~/.kube/config`, `--kubeconfig`,
//! `--context`, and `-n`/`--namespace` (else the context's namespace), and each command is
//! an ordinary API request, so the operator's RBAC decides what it may see.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::out::out;
use super::table::{Table, stdout_is_tty};
use kubosh_kube::api::{Instance, ProcessState, labels};

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
    /// addresses, from its `Instance` resources.
    Instances {
        /// The Deployment.
        deployment: String,
        /// Print for a terminal (title, header, count) even when stdout is not one.
        #[arg(long)]
        tty: bool,
    },
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
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(plugin: &Plugin) -> Result<String, String> {
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
        PluginCommand::Instances { deployment, tty } => {
            let api: Api<Instance> = Api::namespaced(client, &namespace);
            let selector = format!("{}={deployment}", labels::DEPLOYMENT);
            let list = (api.list(&ListParams::default().labels(&selector)).await).map_err(|e| {
                format!("listing the instances of '{deployment}' in '{namespace}': {e}")
            })?;
            Ok(instances_table(deployment, &list.items).render(*tty || stdout_is_tty()))
        }
    }
}

/// The instances as `bosh instances` prints them (without `--ps`, `--vitals`).
fn instances_table(deployment: &str, instances: &[Instance]) -> Table {
    let sections = (instances.iter())
        .map(|i| {
            let state = i.status.as_ref().and_then(|s| s.process_state.as_ref());
            let ips: Vec<&str> = (i.spec.networks.iter())
                .filter_map(|n| n.ip.as_deref())
                .collect();
            vec![vec![
                format!("{}/{}", i.spec.instance_group, i.spec.id),
                state.map(process_state).unwrap_or_default().to_string(),
                i.spec.az.clone().unwrap_or_default(),
                ips.join("\n"),
                deployment.to_string(),
            ]]
        })
        .collect();
    let header = ["Instance", "Process State", "AZ", "IPs", "Deployment"];
    Table {
        title: format!("Deployment '{deployment}'"),
        content: "instances".into(),
        header: header.map(String::from).to_vec(),
        sections,
        sort: true,
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
