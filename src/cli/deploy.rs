//! `kubosh deploy` and `kubosh plan`: the deploy engine as a command, without a cluster.
//!
//! Both read the director configuration file (`-d`, see [`kubosh_director`]), the manifest
//! (ops files, variables and `--vars-store` as `kubosh interpolate` reads them; every
//! `((variable))` must get a value), the cloud config, the release tarballs and the stemcell
//! tarballs. `deploy` extracts each stemcell once into
//! `<state_dir>/stemcells/<name>-<version>/` and runs [`kubosh_engine::Engine::deploy`],
//! printing the event log as the BOSH CLI shows a task, then `Succeeded` or the error (exit
//! code 1) as the last line. `plan` runs [`kubosh_engine::Engine::plan`] and prints the
//! [`DeployReport`]: it writes nothing (no state, no stemcell extraction, no CPI call;
//! generated variables go to a throwaway copy of the vars store) and its progress goes to
//! stderr.
//!
//! With `health: {listen_for: N}` in the director configuration, `deploy` listens to the
//! agents' heartbeats (a [`kubosh_transport::agent::HeartbeatMonitor`] with the health monitor's
//! identity) from its start until N seconds have passed, then deploys with what it heard as
//! [`kubosh_engine::EngineConfig::health`]: when nothing changed and every agent reported
//! `running`, no agent is asked anything. A one-shot process only hears what is sent while
//! it listens, so N should exceed the agents' heartbeat interval (30 s) to hear them all.

use super::out;
use kubosh_artifacts::release::ReleaseFile as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};

use clap::Args;
use serde_json::Value;

use super::input::{DocumentArgs, read_cloud_configs, read_cpi_configs};
use kubosh_artifacts::release::Release;
use kubosh_bosh::events::{CliRenderer, EventLine};
use kubosh_core::manifest::CpiConfig;
use kubosh_core::plan::changes::Requests;
use kubosh_director::DirectorConfig;
use kubosh_director::tasks::TaskLog;
use kubosh_engine::deploy::DeployReport;
use kubosh_engine::{DeployRequest, EngineError, EventSink, StemcellSource};

/// Arguments of `kubosh deploy` and `kubosh plan`.
#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The director configuration file (state directory, CPI, NATS, blobstore).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// The deployment manifest.
    pub manifest: PathBuf,
    #[command(flatten)]
    pub input: DocumentArgs,
    /// Load variables from, and save generated ones to, this YAML file (`plan` saves
    /// nothing).
    #[arg(long = "vars-store", value_name = "PATH")]
    pub vars_store: Option<PathBuf>,
    /// The cloud config; repeatable: several are merged as the Director merges named cloud
    /// configs.
    #[arg(long = "cloud-config", value_name = "PATH", required = true)]
    pub cloud_config: Vec<PathBuf>,
    /// A runtime config applied to the manifest (releases, addons, variables, tags), as the
    /// Director applies its runtime configs; repeatable, applied in order.
    #[arg(long = "runtime-config", value_name = "PATH")]
    pub runtime_configs: Vec<PathBuf>,
    /// The director's CPI config (named CPIs the cloud config's AZs name); repeatable,
    /// merged. `deploy` keeps it in the state directory for every later command, as `bosh
    /// update-cpi-config` does; without it, the kept one applies.
    #[arg(long = "cpi-config", value_name = "PATH")]
    pub cpi_configs: Vec<PathBuf>,
    /// A release tarball the manifest uses; repeatable.
    #[arg(long = "release", value_name = "TGZ")]
    pub releases: Vec<PathBuf>,
    /// A stemcell tarball the manifest uses; repeatable.
    #[arg(long = "stemcell", value_name = "TGZ")]
    pub stemcells: Vec<PathBuf>,
    /// Recreate every VM.
    #[arg(long)]
    pub recreate: bool,
    /// Recreate the VMs of instances whose agents do not answer, on their persistent disks
    /// (without it, such a deploy fails before it changes anything).
    #[arg(long)]
    pub fix: bool,
    /// Update all AZs of an instance group at once (kubosh's opt-in; BOSH goes AZ by AZ).
    #[arg(long = "parallel-azs")]
    pub parallel_azs: bool,
}

/// Which command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Deploy,
    Plan,
}

/// Runs `kubosh deploy`.
pub fn run_deploy(args: &DeployArgs) -> ExitCode {
    run(args, Mode::Deploy)
}

/// Runs `kubosh plan`.
pub fn run_plan(args: &DeployArgs) -> ExitCode {
    run(args, Mode::Plan)
}

fn run(args: &DeployArgs, mode: Mode) -> ExitCode {
    run_command(async {
        execute(args, mode)
            .await
            .map(|text| (text, ExitCode::SUCCESS))
    })
}

/// Runs a director command's `work` (its last text and exit code) on a runtime of its own,
/// and ends as [`end`] does.
pub(super) fn run_command(
    work: impl std::future::Future<Output = Result<(String, ExitCode), Failure>>,
) -> ExitCode {
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Refused(format!("cannot start the runtime: {e}")))
        .and_then(|runtime| runtime.block_on(work));
    end(result)
}

/// Prints how a command ended, and its exit code: its last text on stdout, a refusal's
/// problems on stdout, a failed task's end on stderr (a closed stream leaves nothing to
/// tell).
pub(super) fn end(result: Result<(String, ExitCode), Failure>) -> ExitCode {
    let (text, code, mut stream): (String, ExitCode, Box<dyn Write>) = match result {
        Ok((text, code)) => (text, code, Box::new(std::io::stdout().lock())),
        Err(Failure::Refused(e)) => (
            error_text(&e),
            ExitCode::FAILURE,
            Box::new(std::io::stdout().lock()),
        ),
        Err(Failure::Task(text)) => (text, ExitCode::FAILURE, Box::new(std::io::stderr().lock())),
    };
    let _ = stream
        .write_all(text.as_bytes())
        .and_then(|()| stream.flush());
    code
}

/// A director task as the BOSH CLI shows one: its id, its output, and what the CLI says it
/// was doing when it fails (`Updating deployment`, `Deleting deployment 'x'`).
pub(super) struct Task {
    /// Its id (increasing per director).
    pub id: u64,
    /// Its output on stdout, started (`Task N`).
    pub events: Arc<TaskOutput>,
    doing: String,
}

impl Task {
    /// Takes the director's next task id and starts the task's output and history:
    /// `description` as the Director describes such a task (`create deployment`), `doing`
    /// as bosh-cli says it when it fails (`Updating deployment`).
    pub fn start(
        config: &DirectorConfig,
        doing: &str,
        description: &str,
        deployment: Option<&str>,
    ) -> Result<Task, Failure> {
        let id = config.next_task_id()?;
        Ok(Task {
            id,
            events: Arc::new(TaskOutput::start(config, id, description, deployment)),
            doing: doing.to_string(),
        })
    }

    /// The engine for deployment `name`, its progress in the task; an engine that cannot be
    /// had (NATS, blobstore) fails the task.
    pub async fn engine(
        &self,
        config: &DirectorConfig,
        name: &str,
        parallel_azs: bool,
        cpis: kubosh_core::manifest::CpiConfig,
    ) -> Result<kubosh_engine::Engine, Failure> {
        match config
            .engine(name, self.events.clone(), parallel_azs, cpis)
            .await
        {
            Ok(engine) => Ok(engine),
            Err(e) => {
                self.events.error(&e);
                Err(self.failed())
            }
        }
    }

    /// Ends the task after `result`, whose error the engine already told in the task's
    /// event log: `done`, or `error` and the BOSH CLI's ending.
    pub fn end<T, E>(&self, result: Result<T, E>) -> Result<T, Failure> {
        match result {
            Ok(value) => {
                self.events.finish("done");
                Ok(value)
            }
            Err(_) => Err(self.failed()),
        }
    }

    /// `result` of one step of the task: its value, or its error told in the task's event
    /// log and the task failed.
    pub fn continues<T>(&self, result: Result<T, String>) -> Result<T, Failure> {
        result.map_err(|e| {
            self.events.error(&e);
            self.failed()
        })
    }

    fn failed(&self) -> Failure {
        self.events.finish("error");
        Failure::Task(task_failed(&self.doing, self.id, None))
    }
}

/// How a command failed.
pub(super) enum Failure {
    /// Before its task started (a manifest problem, an unreadable input): the message ends
    /// the output on stdout, as the validator's problems do.
    Refused(String),
    /// Its task failed: the task's lines said why (`L Error:`, `Error:`); what ends the
    /// output is the BOSH CLI's, on stderr ([`task_failed`]).
    Task(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Refused(message)
    }
}

/// The BOSH CLI's words after a failed task (`bosh deploy`: the task's state, wrapped in
/// what the command was doing, then the exit code), with kubosh's hint when there is one.
pub(super) fn task_failed(doing: &str, task: u64, hint: Option<&str>) -> String {
    let hint = hint.map(|h| format!("\n{h}\n")).unwrap_or_default();
    format!(
        "{doing}:\n  Expected task '{task}' to succeed but state is 'error'\n{hint}\nExit code 1\n"
    )
}

/// The failure as the last line(s): `Error: <message>`, or the validator's problems as they
/// are (each line already says `error: ...`).
pub(super) fn error_text(message: &str) -> String {
    let message = message.trim_end();
    if message.starts_with("error: ") {
        format!("{message}\n")
    } else {
        format!("Error: {message}\n")
    }
}

/// Does the work; the text to print last (the report, or `Succeeded`).
async fn execute(args: &DeployArgs, mode: Mode) -> Result<String, Failure> {
    let config = DirectorConfig::load(&args.director).map_err(|e| e.to_string())?;
    // Started first, so it listens while the inputs are read.
    let monitor = match (&config.health, mode) {
        (Some(health), Mode::Deploy) => Some((config.heartbeat_monitor().await?, health)),
        _ => None,
    };
    let (name, request, cpis) = read_request(args, &config, mode == Mode::Deploy)?;
    match mode {
        Mode::Deploy => {
            if cpis.given {
                config.save_cpi_config(&cpis.config)?;
            }
            out::progress(format_args!("Using deployment '{name}'\n\n"));
            let task = Task::start(
                &config,
                "Updating deployment",
                "create deployment",
                Some(&name),
            )?;
            let mut engine = task
                .engine(&config, &name, args.parallel_azs, cpis.config)
                .await?;
            let (events, task) = (task.events.clone(), task.id);
            if let Some((monitor, health)) = monitor {
                let rest = health.listen_for.saturating_sub(monitor.listening_for());
                tokio::time::sleep(rest).await;
                engine.config.health = Some(Arc::new(monitor));
                engine.config.health_window = health.agent_timeout;
            }
            let deployed = engine.deploy(&request).await;
            events.finish(if deployed.is_ok() { "done" } else { "error" });
            let report = deployed.map_err(|e| {
                let hint = fix_hint(&e);
                Failure::Task(task_failed("Updating deployment", task, hint.as_deref()))
            })?;
            Ok(format!("\n{}\n\nSucceeded\n", summary(&report)))
        }
        Mode::Plan => {
            let task = u64::from(std::process::id());
            let events = Arc::new(TaskOutput::new(Box::new(std::io::stderr()), task));
            let engine = config.engine(&name, events.clone(), args.parallel_azs, cpis.config);
            let prepared = engine.await?.prepare(&request).await;
            // The report (or the error) starts on a line of its own on a terminal.
            events.end_line();
            let report = prepared
                .map_err(|e| match fix_hint(&e) {
                    Some(hint) => format!("{e}\n\n{hint}"),
                    None => e.to_string(),
                })?
                .report();
            Ok(report.to_string())
        }
    }
}

/// The deployment's name and the request `args` make: the manifest with ops files and
/// variables (a scratch vars store unless `saving`), validated with the cloud config before a
/// release is read (its AZs naming only CPIs of the CPI config: the one given, else the
/// director's); the releases (every job checked against them); the stemcells (extracted
/// when `saving`). The CPI config it uses.
pub(super) fn read_request(
    args: &DeployArgs,
    config: &DirectorConfig,
    saving: bool,
) -> Result<(String, DeployRequest, ChosenCpis), String> {
    let mode = if saving { Mode::Deploy } else { Mode::Plan };
    let manifest = read_manifest(args, mode, &config.director_variables_file())?;
    let cloud_config = read_cloud_configs(&args.cloud_config)?;
    let name = deployment_name(&manifest, &cloud_config)?;
    // Validated once, before a release is read or a stemcell extracted: the engine plans
    // from the typed documents and never validates.
    let documents =
        DeployRequest::validated(&manifest, &cloud_config).map_err(|p| p.to_string())?;
    let cpis = match &args.cpi_configs[..] {
        [] => ChosenCpis {
            config: config.saved_cpi_config()?,
            given: false,
        },
        paths => ChosenCpis {
            config: read_cpi_configs(paths, &args.input.vars()?)?,
            given: true,
        },
    };
    let problems =
        kubosh_core::validate::azs_on_cpis(&documents.documents.document.1, &cpis.config);
    if problems.has_errors() {
        return Err(problems.to_string());
    }
    let releases = args
        .releases
        .iter()
        .map(|path| {
            Release::read(path)
                .map(Arc::new)
                .map_err(|e| format!("release {}: {e}", path.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // A release or version not given, or a job its release lacks, is the manifest's fault:
    // said with its path before any stemcell is extracted or any agent or cloud asked.
    let available: Vec<(&str, &str)> = (releases.iter()).map(|r| (r.name(), r.version())).collect();
    let chosen = kubosh_core::validate::require_releases(documents.manifest(), &available)
        .map_err(|p| p.to_string())?;
    let deployed: Vec<Arc<Release>> = chosen.iter().map(|&i| releases[i].clone()).collect();
    check_release_jobs(documents.manifest(), &deployed)?;
    let stemcells = args
        .stemcells
        .iter()
        .map(|path| {
            StemcellSource::prepare(&config.stemcells_dir(), path, saving)
                .map_err(|e| format!("stemcell {}: {e}", path.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let request = DeployRequest {
        releases,
        stemcells,
        requests: Requests {
            recreate: args.recreate,
            fix: args.fix,
            ..Requests::default()
        },
        ..documents
    };
    Ok((name, request, cpis))
}

/// The CPI config a command uses: the one given (`--cpi-config`), else the one the director
/// keeps.
pub(super) struct ChosenCpis {
    /// The CPI config.
    pub config: CpiConfig,
    /// It was given on the command line (`deploy` keeps it for the director).
    pub given: bool,
}

/// When agents did not answer (and only that failed the deploy): which instances, and what
/// recreates them.
fn fix_hint(error: &EngineError) -> Option<String> {
    let silent: Vec<&str> = (error.unanswered().iter())
        .map(|u| u.instance.display.as_str())
        .collect();
    if silent.is_empty() || !error.unanswered().iter().all(|u| u.error.is_silence()) {
        return None;
    }
    Some(format!(
        "No answer from the agent of {}: `kubosh deploy --fix` recreates their VMs (on their persistent disks)",
        silent.join(", ")
    ))
}

/// Every job of the manifest is in the release it names (among `releases`), or the
/// problems as the validator words them.
fn check_release_jobs(
    manifest: &kubosh_core::manifest::DeploymentManifest,
    releases: &[Arc<Release>],
) -> Result<(), String> {
    let problems = kubosh_core::validate::release_jobs(
        manifest,
        (releases.iter()).map(|r| {
            (
                r.name(),
                r.version(),
                r.jobs.iter().map(|j| j.name.as_str()),
            )
        }),
    );
    if problems.has_errors() {
        Err(problems.to_string())
    } else {
        Ok(())
    }
}

/// The manifest with ops files and variables applied. Every variable must have a value.
/// `plan` generates missing variables into a throwaway copy of the vars store.
/// Director-wide variables (`((/name))`) are the director's (`director_vars`, its
/// `director-variables.yml`), shared by all its deployments.
fn read_manifest(args: &DeployArgs, mode: Mode, director_vars: &Path) -> Result<Value, String> {
    let input = DocumentArgs {
        var_errs: true,
        runtime_configs: args.runtime_configs.clone(),
        ..args.input.clone()
    };
    let store = args.vars_store.as_deref();
    let document = match mode {
        Mode::Deploy => input.load_for_director(&args.manifest, store, director_vars),
        Mode::Plan => {
            let scratch = tempfile::tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let copy = |file: &Path, name: &str| -> Result<PathBuf, String> {
                let copy = scratch.path().join(name);
                if file.exists() {
                    std::fs::copy(file, &copy)
                        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
                }
                Ok(copy)
            };
            let store = store.map(|s| copy(s, "vars-store.yml")).transpose()?;
            let director = copy(director_vars, "director-variables.yml")?;
            input.load_for_director(&args.manifest, store.as_deref(), &director)
        }
    }?;
    super::input::director_view(document, &args.manifest)
}

/// The deployment's name, which names its state directory. A manifest without a usable
/// name gets every validation problem reported, as the engine would.
fn deployment_name(manifest: &Value, cloud_config: &Value) -> Result<String, String> {
    match manifest.get("name").and_then(Value::as_str) {
        Some(name) if kubosh_engine::source::is_path_component(name) => Ok(name.to_string()),
        Some(name) => Err(format!(
            "the deployment name '{name}' cannot name a directory"
        )),
        None => Err(
            match kubosh_core::validate::deployment(manifest, cloud_config) {
                Err(problems) => problems.to_string(),
                Ok(_) => "the manifest has no 'name'".to_string(),
            },
        ),
    }
}

/// One line on what a deploy did.
fn summary(report: &DeployReport) -> String {
    if report.noop {
        return "No changes: the deployment is up to date".to_string();
    }
    format!(
        "Updated {} instance(s), deleted {}, compiled {} package(s)",
        report.updated.len(),
        report.deleted.len(),
        report.compiled
    )
}

/// The event log printed as the BOSH CLI shows a task. The task's error line is left out:
/// the command prints the error itself, last.
pub(super) struct TaskOutput {
    renderer: Mutex<CliRenderer<Box<dyn Write + Send>>>,
    /// The director's history of the task, if it keeps one ([`kubosh_director::tasks`]).
    log: Option<TaskLog>,
}

impl TaskOutput {
    /// The events of task `task` on `out`, as they come (`kubosh plan`'s: no task around
    /// them).
    pub(super) fn new(out: Box<dyn Write + Send>, task: u64) -> TaskOutput {
        TaskOutput {
            renderer: Mutex::new(CliRenderer::new(out, task)),
            log: None,
        }
    }

    /// Task `task` of `config`'s director on stdout, started (`Task <id>`, then its events as
    /// they come) and kept in the director's task history as `description` of `deployment`.
    pub(super) fn start(
        config: &DirectorConfig,
        task: u64,
        description: &str,
        deployment: Option<&str>,
    ) -> TaskOutput {
        let mut output = TaskOutput::new(Box::new(std::io::stdout()), task);
        // History is best effort, as output is: neither fails the task.
        output.log = TaskLog::create(&config.tasks_dir(), task, description, deployment).ok();
        let _ = output.renderer().start();
        output
    }

    /// The task's error line, for a failure no engine event told.
    pub(super) fn error(&self, message: &str) {
        // BOSH's code for an error it has no more specific code for.
        kubosh_engine::task_error(self, 100, message);
    }

    /// Ends the last event's line, without the task's ending (`plan`).
    pub(super) fn end_line(&self) {
        let _ = self.renderer().end_line();
    }

    /// Ends the task's output: its start, finish, duration and `state`.
    pub(super) fn finish(&self, state: &str) {
        let _ = self.renderer().finish(state);
        if let Some(log) = &self.log {
            log.finish(state);
        }
    }

    fn renderer(&self) -> std::sync::MutexGuard<'_, CliRenderer<Box<dyn Write + Send>>> {
        self.renderer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl EventSink for TaskOutput {
    fn emit(&self, line: EventLine) {
        if let Some(log) = &self.log {
            log.append(&line.to_json());
        }
        let _ = self.renderer().render(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_end_the_output() {
        assert_eq!(error_text("boom\n"), "Error: boom\n");
        assert_eq!(
            error_text("error: a: x\nerror: b: y"),
            "error: a: x\nerror: b: y\n"
        );
    }

    #[test]
    fn the_deployment_name_must_name_a_directory() {
        assert_eq!(
            deployment_name(&json!({"name": "web"}), &json!({})).unwrap(),
            "web"
        );
        for bad in ["", ".", "..", "a/b"] {
            let e = deployment_name(&json!({"name": bad}), &json!({})).unwrap_err();
            assert!(e.contains("cannot name a directory"), "{bad}: {e}");
        }
        // No name: the validator's problems first, all of them.
        let e = deployment_name(&json!({"instance_groups": "x"}), &json!({})).unwrap_err();
        assert!(e.contains("manifest: instance_groups"), "{e}");
        assert!(e.contains("cloud-config: compilation"), "{e}");
    }

    fn args(dir: &std::path::Path, vars_store: Option<PathBuf>) -> DeployArgs {
        DeployArgs {
            director: dir.join("director.yml"),
            manifest: dir.join("manifest.yml"),
            input: DocumentArgs::default(),
            vars_store,
            cloud_config: vec![dir.join("cloud-config.yml")],
            runtime_configs: vec![],
            cpi_configs: vec![],
            releases: vec![],
            stemcells: vec![],
            recreate: false,
            fix: false,
            parallel_azs: false,
        }
    }

    #[test]
    fn variables_must_resolve_and_plan_saves_no_generated_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("manifest.yml"),
            "name: web\nvariables: [{name: pw, type: password}]\nproperties: {a: ((pw)), b: ((given))}\n",
        )
        .unwrap();
        let store = dir.path().join("vars.yml");
        let director = dir.path().join("director-variables.yml");
        let mut a = args(dir.path(), Some(store.clone()));
        let e = read_manifest(&a, Mode::Plan, &director).unwrap_err();
        assert!(e.contains("given"), "{e}");
        a.input.vars = vec!["given=1".into()];
        let planned = read_manifest(&a, Mode::Plan, &director).unwrap();
        assert_eq!(planned["properties"]["a"].as_str().map(str::len), Some(20));
        assert!(!store.exists(), "plan saved a generated variable");
        let deployed = read_manifest(&a, Mode::Deploy, &director).unwrap();
        assert!(store.exists());
        // Stored once: the next read (plan or deploy) sees the same value.
        let again = read_manifest(&a, Mode::Plan, &director).unwrap();
        assert_eq!(again["properties"]["a"], deployed["properties"]["a"]);
        assert_eq!(deployed["properties"]["b"], 1);
    }

    #[test]
    fn director_variables_are_one_value_for_every_deployment_even_without_a_vars_store() {
        let dir = tempfile::tempdir().unwrap();
        let director = dir.path().join("director-variables.yml");
        let manifest = |name: &str| {
            format!(
                "name: {name}\nvariables: [{{name: /shared, type: password}}, {{name: own, type: password}}]\nproperties: {{s: ((/shared)), o: ((own))}}\n"
            )
        };
        std::fs::write(dir.path().join("manifest.yml"), manifest("one")).unwrap();
        let one_store = dir.path().join("one.yml");
        let one = read_manifest(
            &args(dir.path(), Some(one_store.clone())),
            Mode::Deploy,
            &director,
        )
        .unwrap();
        let kept = std::fs::read_to_string(&director).unwrap();
        assert!(kept.contains("/shared"), "{kept}");
        assert!(
            !kept.contains("own"),
            "a deployment's variable stays the deployment's"
        );
        assert!(
            !std::fs::read_to_string(&one_store)
                .unwrap()
                .contains("/shared")
        );
        std::fs::write(dir.path().join("manifest.yml"), manifest("two")).unwrap();
        let two_store = dir.path().join("two.yml");
        let two =
            read_manifest(&args(dir.path(), Some(two_store)), Mode::Deploy, &director).unwrap();
        assert_eq!(one["properties"]["s"], two["properties"]["s"], "one value");
        assert_ne!(one["properties"]["o"], two["properties"]["o"]);
        // Without a vars store the director's variable is still there; the deployment's
        // must be given.
        let e = read_manifest(&args(dir.path(), None), Mode::Deploy, &director).unwrap_err();
        assert!(e.contains("own") && !e.contains("/shared"), "{e}");
        let mut given = args(dir.path(), None);
        given.input.vars = vec!["own=x".into()];
        let three = read_manifest(&given, Mode::Deploy, &director).unwrap();
        assert_eq!(three["properties"]["s"], one["properties"]["s"]);
        let mode = std::fs::metadata(&director).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
    }
}
