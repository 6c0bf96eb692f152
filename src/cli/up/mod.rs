//! `kubosh up`: the one-command demo. Everything a BOSH deployment needs, on this machine,
//! from one state directory: the control-plane binaries (the cached build of
//! `tools/testbins.sh`), etcd + kube-apiserver, nats-server with mutual TLS and per-agent
//! permissions, a local blobstore, the local cloud (`kubosh cpi`, whose VMs are `kubosh
//! agent` processes) and `kubosh controller`; then the example release and a stemcell
//! built, `examples/local/` applied with `kubectl apply --server-side`, the deploy followed
//! until the `hello` deployment is Ready and its job answers on its port, its errand
//! `smoke-tests` run (an `ErrandRun`), and the result printed. It runs until Ctrl-C (SIGINT or SIGTERM), or with `--exit-when-ready` until
//! then, and stops everything it started. While it runs it looks after what it started: a
//! controller that exits is started again, etcd, kube-apiserver or nats-server ending stops
//! the run. The stack itself is `kubosh_devenv::demo`; this
//! module applies, follows and prints. `--in-cluster` is the same demo with the controller
//! as Pods (`in_cluster`).

mod apply;
mod errand;
mod in_cluster;
mod progress;
mod report;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use super::signals::StopSignals;
use kubosh_devenv::ControlPlane;
use kubosh_devenv::demo::{
    DemoLayout, Ended, Stack, example_release_artifact, local_stemcell_artifact,
};

/// Arguments of `kubosh up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Where everything is kept between runs: etcd's data, certificates, the VMs, the built
    /// release and stemcell, logs (default: `$HOME/.kubosh/demo`; with `--in-cluster`,
    /// `$HOME/.kubosh/demo-in-cluster`, which keeps the tarballs only).
    #[arg(long = "state-dir", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The controller as Pods instead: a dev cluster with a node (as root; the images of
    /// tools/images.sh, built first when missing), NATS and `helm install` of
    /// charts/kubosh as README's "Install on a cluster" says, then the same example. The
    /// cluster is removed when it stops.
    #[arg(long = "in-cluster")]
    pub in_cluster: bool,
    /// Stop everything and exit once the deployment is Ready and its job answers (for
    /// scripts and tests).
    #[arg(long = "exit-when-ready")]
    pub exit_when_ready: bool,
    /// Give up when the deployment is not Ready and answering within this long: `15m`.
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// The namespace the demo deploys into (the examples' namespace).
const NAMESPACE: &str = "bosh";
/// The example deployment.
const DEPLOYMENT: &str = "hello";

/// Prints the demo's progress lines to stdout, each with the time since the start.
#[derive(Clone, Copy)]
pub(super) struct Say {
    started: Instant,
}

impl Say {
    /// One line.
    pub(super) fn line(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "[{:>6.1}s] {text}",
            self.started.elapsed().as_secs_f64()
        );
        let _ = out.flush();
    }
}

/// A run stopped by SIGINT or SIGTERM before it converged: exit code 130.
fn interrupted(say: Say) -> ExitCode {
    say.line("interrupted: stopping everything");
    ExitCode::from(130)
}

/// A run that cannot go on: why, on stderr.
fn failed(why: &str, say: Say) -> ExitCode {
    eprintln!("kubosh up: {why}");
    say.line("stopping everything");
    ExitCode::FAILURE
}

/// How a run ended.
enum Outcome {
    /// Converged; what to print (boxed: the other variant is empty).
    Ready(Box<report::Report>),
    /// Ctrl-C or SIGTERM before it converged.
    Interrupted,
}

/// Runs `kubosh up`.
pub fn run(args: &UpArgs) -> ExitCode {
    let say = Say {
        started: Instant::now(),
    };
    match up(args, say) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kubosh up: {e}");
            ExitCode::FAILURE
        }
    }
}

fn up(args: &UpArgs, say: Say) -> Result<ExitCode, String> {
    let default_dir = if args.in_cluster {
        ".kubosh/demo-in-cluster"
    } else {
        ".kubosh/demo"
    };
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => std::env::var_os("HOME")
            .map(|home| PathBuf::from(home).join(default_dir))
            .ok_or("HOME is not set: give --state-dir")?,
    };
    let layout =
        DemoLayout::new(&state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    say.line(&format!("kubosh up: state in {}", layout.root().display()));
    if args.in_cluster {
        return in_cluster::up(args, &layout, say);
    }
    check_privileges(say)?;
    check_tools()?;
    let kubosh = kubosh_executable()?;
    // Before the runtime: the script takes minutes on a fresh machine, and Ctrl-C during it
    // simply ends both.
    install_binaries(say)?;
    let (runtime, mut stop) = runtime_and_stop_signals()?;
    let mut stack: Option<Stack> = None;
    let outcome = runtime.block_on(async {
        tokio::select! {
            result = converge(args, &layout, &kubosh, &mut stack, say) => result.map(|report| Outcome::Ready(Box::new(report))),
            () = stop.requested() => Ok(Outcome::Interrupted),
        }
    });
    let code = match outcome {
        Ok(Outcome::Ready(report)) => {
            let metrics = stack.as_ref().map_or(0, |s| s.ports().metrics);
            report.print(
                &layout.kubeconfig(),
                &format!(
                    "The controller's metrics: curl http://127.0.0.1:{metrics}/metrics\nLogs: the controller's {}, each VM's agent {}/vms/<vm>/agent.log",
                    layout.controller_log().display(),
                    layout.director().cloud().display(),
                ),
            );
            let mut code = ExitCode::SUCCESS;
            if args.exit_when_ready {
                say.line("--exit-when-ready: stopping everything");
            } else {
                say.line("running; Ctrl-C stops everything (the next `kubosh up` starts where this one stops)");
                match runtime.block_on(follow_until_stopped(stack.as_mut(), &mut stop, say)) {
                    Ok(()) => say.line("stopping everything"),
                    Err(e) => code = failed(&e, say),
                }
            }
            code
        }
        Ok(Outcome::Interrupted) => interrupted(say),
        Err(e) => failed(&e, say),
    };
    if let Some(mut stack) = stack.take() {
        stack.stop(&mut |text| say.line(text));
        say.line("stopped: nothing of this run is running any more");
    }
    Ok(code)
}

/// This `kubosh`, which the demo runs as its controller, CPI and agents.
fn kubosh_executable() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the kubosh executable: {e}"))
}

/// The repository kubosh was built from: its tools/ scripts and examples/.
fn source_tree() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The control-plane binaries, built by tools/testbins.sh unless `KUBOSH_BIN_DIR` names them.
fn install_binaries(say: Say) -> Result<(), String> {
    if std::env::var_os("KUBOSH_BIN_DIR").is_none() {
        say.line("installing or reusing the control-plane binaries (tools/testbins.sh; a first build takes minutes)");
    }
    let bins = kubosh_devenv::install_bins(&source_tree(), |line| eprintln!("    {line}"))
        .map_err(|e| e.to_string())?;
    say.line(&format!("control-plane binaries: {}", bins.display()));
    Ok(())
}

/// The run's async runtime, and one stop listener for the whole run: a Ctrl-C between
/// converging and following is kept.
fn runtime_and_stop_signals() -> Result<(tokio::runtime::Runtime, StopSignals), String> {
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let stop = {
        let _runtime = runtime.enter();
        StopSignals::listen()
    };
    Ok((runtime, stop))
}

/// Prints the deployment's changes (an edited example applied again, an instance that
/// fails) until SIGINT or SIGTERM, and looks after what it started as a Deployment would: a
/// controller that exits is started again (unless it keeps exiting); etcd, kube-apiserver
/// or nats-server ending stops everything. An error when the run cannot go on.
async fn follow_until_stopped(
    stack: Option<&mut Stack>,
    stop: &mut StopSignals,
    say: Say,
) -> Result<(), String> {
    let Some(stack) = stack else {
        stop.requested().await;
        return Ok(());
    };
    let client = client_of(stack.control_plane()).await;
    let follow = follow_deployment(client, say);
    tokio::pin!(follow);
    let mut supervisor = Supervisor::default();
    let mut check = tokio::time::interval(SUPERVISE_EVERY);
    loop {
        tokio::select! {
            () = &mut follow => return Ok(()),
            () = stop.requested() => return Ok(()),
            _ = check.tick() => supervisor.check(stack, say)?,
        }
    }
}

/// An admin client of `cluster`, when there is one and it can be made.
async fn client_of(cluster: Option<&ControlPlane>) -> Option<kube::Client> {
    cluster?.client().await.ok()
}

/// Prints the example deployment's changes (a line each) for as long as it is polled; with
/// no client, waits forever.
async fn follow_deployment(client: Option<kube::Client>, say: Say) {
    match client {
        Some(client) => progress::follow(&client, NAMESPACE, DEPLOYMENT, say).await,
        None => std::future::pending().await,
    }
}

/// How often `kubosh up` checks that what it started still runs.
const SUPERVISE_EVERY: Duration = Duration::from_secs(2);

/// A controller that exits this often within [`RESTART_WINDOW`] is not started again.
const RESTARTS_AT_MOST: usize = 3;
const RESTART_WINDOW: Duration = Duration::from_secs(600);

/// The controller's recent restarts.
#[derive(Default)]
struct Supervisor {
    restarts: Vec<Instant>,
}

impl Supervisor {
    /// Acts on a part of `stack` that ended: the controller is started again, anything else
    /// ends the run.
    fn check(&mut self, stack: &mut Stack, say: Say) -> Result<(), String> {
        let Some(ended) = stack.ended() else {
            return Ok(());
        };
        let log = stack.layout().controller_log();
        if !matches!(ended, Ended::Controller(_)) {
            return Err(format!("{ended}: the demo cannot go on"));
        }
        self.restarts.retain(|at| at.elapsed() < RESTART_WINDOW);
        if self.restarts.len() >= RESTARTS_AT_MOST {
            return Err(format!(
                "{ended} again, {} times within {}; not starting it again. The end of its log ({}):\n{}",
                self.restarts.len() + 1,
                humantime::format_duration(RESTART_WINDOW),
                log.display(),
                progress::tail(&log)
            ));
        }
        self.restarts.push(Instant::now());
        say.line(&format!(
            "{ended}; starting it again (its log: {})",
            log.display()
        ));
        stack
            .start_controller(NAMESPACE, &ops_api_args(stack))
            .map_err(|e| format!("cannot start kubosh controller again: {e}"))
    }
}

/// Starts the stack into `stack`, applies the examples and follows the deploy until it
/// converged.
async fn converge(
    args: &UpArgs,
    layout: &DemoLayout,
    kubosh: &std::path::Path,
    stack: &mut Option<Stack>,
    say: Say,
) -> Result<report::Report, String> {
    let release = example_release_artifact(&layout.artifacts()).map_err(|e| e.to_string())?;
    say.line(&if release.built {
        format!(
            "built the example release hello/1.0.0: {}",
            release.path.display()
        )
    } else {
        format!(
            "reusing the example release hello/1.0.0 (source unchanged): {}",
            release.path.display()
        )
    });
    let stemcell = local_stemcell_artifact(&layout.artifacts()).map_err(|e| e.to_string())?;
    say.line(&if stemcell.built {
        format!("built the stemcell: {}", stemcell.path.display())
    } else {
        format!("reusing the stemcell: {}", stemcell.path.display())
    });

    let started = Stack::start(
        layout.clone(),
        kubosh,
        &kubosh_kube::api::crds(),
        &mut |text| say.line(text),
    )
    .await
    .map_err(|e| e.to_string())?;
    let stack = stack.insert(started);
    let cp = stack
        .control_plane()
        .ok_or("the control plane is not running")?;
    apply::apply_namespace(cp, layout, NAMESPACE, say)?;
    let client = cp.client().await.map_err(|e| e.to_string())?;
    if !stack.booted_vms().is_empty() {
        progress::wait_for_jobs(&client, NAMESPACE, DEPLOYMENT, say).await?;
    }
    let controller_started = std::time::SystemTime::now();
    stack
        .start_controller(NAMESPACE, &ops_api_args(stack))
        .map_err(|e| e.to_string())?;
    say.line(&format!(
        "started kubosh controller (namespace {NAMESPACE}; log: {})",
        layout.controller_log().display()
    ));
    register_ops_api(&client, stack.ports().ops_api, say).await;
    let cp = stack
        .control_plane()
        .ok_or("the control plane is not running")?;
    apply::apply_examples(
        cp,
        layout,
        &release.on_this_machine(),
        &stemcell.on_this_machine(),
        NAMESPACE,
        say,
    )?;
    let converged = progress::converge(
        &client,
        NAMESPACE,
        DEPLOYMENT,
        controller_started,
        args.timeout,
        &mut LocalController(stack),
        say,
    )
    .await?;
    let cp = stack
        .control_plane()
        .ok_or("the control plane is not running")?;
    let errand = errand::run_smoke_tests(cp, &client, NAMESPACE, args.timeout, say).await?;
    Ok(report::Report::new(cp, NAMESPACE, converged, errand))
}

/// The demo's `kubosh controller`, a process of the stack.
struct LocalController<'a>(&'a mut Stack);

impl progress::Watched for LocalController<'_> {
    fn gone(&mut self) -> Option<String> {
        let running = self.0.controller_running();
        (!running).then(|| format!("kubosh controller exited; {}", self.log_tail()))
    }

    fn log_tail(&self) -> String {
        let log = self.0.layout().controller_log();
        format!(
            "the end of the controller's log ({}):\n{}",
            log.display(),
            progress::tail(&log)
        )
    }

    fn reaches_instances(&self) -> bool {
        true
    }
}

/// The controller's ops API arguments: served on every address (kube-apiserver reaches it at
/// this machine's address), its certificate made for the Service `register_local` creates.
fn ops_api_args(stack: &Stack) -> Vec<String> {
    use kubosh_kube::ops_api::register::SERVICE;
    vec![
        "--ops-api-bind-address".into(),
        format!("0.0.0.0:{}", stack.ports().ops_api),
        "--ops-api-service".into(),
        format!("{NAMESPACE}/{SERVICE}"),
    ]
}

/// Registers the controller's ops API with kube-apiserver (`kubectl bosh logs`, `ssh`); a
/// failure only says so: the demo runs without them.
async fn register_ops_api(client: &kube::Client, port: u16, say: Say) {
    use kubosh_kube::ops_api::register::register_local;
    let Some(address) = kubosh_devenv::host_address() else {
        say.line("no address on a default route: kubectl bosh logs and ssh are not available");
        return;
    };
    let within = Duration::from_secs(60);
    match register_local(client, NAMESPACE, address, port, None, within).await {
        Ok(()) => say.line(&format!(
            "the ops API (kubectl bosh logs, ssh) is served at {address}:{port}"
        )),
        Err(e) => say.line(&format!("kubectl bosh logs and ssh are not available: {e}")),
    }
}

/// What the example needs on this machine besides kubosh: `ruby` renders job templates
/// (the Director's ERB), `cc` compiles the release's packages on the VMs. Checked first, so
/// a missing one fails in a second rather than as a failed deploy minutes later.
fn check_tools() -> Result<(), String> {
    let missing: Vec<&str> = [("ruby", "ruby"), ("cc", "build-essential")]
        .into_iter()
        .filter(|(tool, _)| !on_path(tool))
        .map(|(_, package)| package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the example needs ruby (job templates) and a C compiler (its packages): apt-get install {}",
        missing.join(" ")
    ))
}

/// Whether `tool` is a file in a directory of `PATH`.
fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| dir.join(tool).is_file())
}

/// The hello job's scripts use `/var/vcap` literally, so each VM's agent mounts its VM
/// directory there in a mount namespace of its own (`--bind-base`): as root that needs
/// nothing; any other user's agent enters a user namespace first (unprivileged), and then
/// `/var/vcap` must exist, which only root can create.
fn check_privileges(say: Say) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    if !std::path::Path::new("/var/vcap").is_dir() {
        return Err("not running as root: the VMs' agents mount their directories on /var/vcap inside user namespaces of their own, and /var/vcap must exist for that; create it once (sudo mkdir -p /var/vcap) or run as root".into());
    }
    say.line("not running as root: each VM's agent runs in a user namespace of its own (its VM directory mounted on /var/vcap there)");
    Ok(())
}
