//! Following the deploy: a line whenever the deployment's state (its kstatus conditions and
//! `status.progress`) or an instance's changes, until a deploy task of this run's
//! controller made the deployment Ready for its generation, every instance runs, and each
//! answers on the job's port.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use kube::api::{Api, ListParams};
use kubosh_kube::api::condition::{READY, RECONCILING};
use kubosh_kube::api::{Deployment, Instance, ProcessState, TaskSummary};
use kubosh_kube::controller::status::{is_ready, not_ready_because};

use super::Say;

/// An instance and what its job answered.
pub(super) struct Answer {
    /// `<group>/<index>`.
    pub name: String,
    /// Its address.
    pub ip: String,
    /// The job's port.
    pub port: u16,
    /// The body of `GET /`.
    pub body: String,
}

/// A converged deployment.
pub(super) struct Converged {
    /// The deploy task that made it so (from an earlier run, when nothing changed since).
    pub last_task: Option<TaskSummary>,
    /// Every instance's answer.
    pub answers: Vec<Answer>,
}

/// How often the deployment is read.
const POLL: Duration = Duration::from_millis(500);

/// The controller a run follows the deploy of.
pub(super) trait Watched {
    /// Why it cannot go on (it exited), with the end of its log; `None` while it runs.
    fn gone(&mut self) -> Option<String>;
    /// Where its log is and its last lines, for a deploy that did not converge in time.
    fn log_tail(&self) -> String;
    /// Whether the instances' addresses are reachable from here (each is asked `GET /`).
    fn reaches_instances(&self) -> bool;
}

/// Follows deployment `name` until it converged, for at most `limit`. Only a deploy task
/// that started after `controller_started` counts: the status an earlier run left says
/// nothing of this one (a controller deploys, or finds nothing to do, when it starts).
pub(super) async fn converge(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    controller_started: SystemTime,
    limit: Duration,
    controller: &mut dyn Watched,
    say: Say,
) -> Result<Converged, String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let instances: Api<Instance> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + limit;
    let mut lines = Lines::new(say);
    loop {
        if Instant::now() > deadline {
            return Err(format!(
                "deployment {name} did not converge within {}; {}",
                humantime::format_duration(limit),
                controller.log_tail()
            ));
        }
        if let Some(why) = controller.gone() {
            return Err(why);
        }
        let Some((d, mine)) = lines.observe(&deployments, &instances, name).await? else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        let status = d.status.clone().unwrap_or_default();
        let generation = d.metadata.generation;
        if let Some(why) = not_ready_because(&status.conditions, generation)
            && why.starts_with("Stalled")
        {
            return Err(format!("deployment {name} is {why}"));
        }
        let ready = status.observed_generation == generation
            && is_ready(&status.conditions, generation)
            && started_after(status.last_task.as_ref(), controller_started);
        let desired = usize::try_from(status.desired_instances.unwrap_or(0)).unwrap_or(0);
        let all_running = mine.len() == desired
            && mine.iter().all(|i| {
                i.status.as_ref().and_then(|s| s.process_state) == Some(ProcessState::Running)
            });
        if ready && all_running {
            if !controller.reaches_instances() {
                return Ok(Converged {
                    last_task: status.last_task,
                    answers: Vec::new(),
                });
            }
            let port = hello_port(&d);
            let answers: Vec<Answer> = mine.iter().filter_map(|i| answer(i, port)).collect();
            if answers.len() == mine.len() {
                return Ok(Converged {
                    last_task: status.last_task,
                    answers,
                });
            }
            lines.show(
                name,
                format!("{name}: Ready; waiting for every instance to answer on port {port}"),
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Keeps following deployment `name` once it converged, a line per change (a deploy of an
/// edited example, an instance that fails), until the future is dropped.
pub(super) async fn follow(client: &kube::Client, namespace: &str, name: &str, say: Say) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let instances: Api<Instance> = Api::namespaced(client.clone(), namespace);
    let mut lines = Lines::new(say);
    // The state the report showed is not news.
    lines.quiet = true;
    loop {
        let _ = lines.observe(&deployments, &instances, name).await;
        lines.quiet = false;
        tokio::time::sleep(POLL * 2).await;
    }
}

/// The lines printed so far, one per subject (the deployment, each instance): a subject's
/// line is printed again only when it changes.
struct Lines {
    say: Say,
    printed: BTreeMap<String, String>,
    /// Remember without printing.
    quiet: bool,
}

impl Lines {
    fn new(say: Say) -> Lines {
        Lines {
            say,
            printed: BTreeMap::new(),
            quiet: false,
        }
    }

    fn show(&mut self, subject: &str, line: String) {
        if self.printed.get(subject) != Some(&line) {
            if !self.quiet {
                self.say.line(&line);
            }
            self.printed.insert(subject.to_string(), line);
        }
    }

    /// Reads deployment `name` and its instances and shows their state; `None` while the
    /// deployment does not exist.
    async fn observe(
        &mut self,
        deployments: &Api<Deployment>,
        instances: &Api<Instance>,
        name: &str,
    ) -> Result<Option<(Deployment, Vec<Instance>)>, String> {
        let Some(d) = deployments.get_opt(name).await.map_err(|e| e.to_string())? else {
            self.show(name, format!("{name}: waiting for the Deployment"));
            return Ok(None);
        };
        self.show(name, format!("{name}: {}", describe(&d)));
        let mine = instances_of(instances, name).await?;
        for i in &mine {
            let label = format!("{}/{}", i.spec.instance_group, i.spec.index);
            self.show(
                &format!("instance {label}"),
                format!("  {label}: {}", describe_instance(i)),
            );
        }
        Ok(Some((d, mine)))
    }
}

/// The deployment's state in one line: Ready, or what its running task does, or why it
/// waits.
fn describe(d: &Deployment) -> String {
    let Some(status) = d.status.as_ref() else {
        return "waiting for the controller".into();
    };
    let generation = d.metadata.generation;
    let instances = status
        .instances
        .as_deref()
        .map(|i| format!(" ({i} instances)"))
        .unwrap_or_default();
    if status.observed_generation == generation && is_ready(&status.conditions, generation) {
        let message = (status.conditions.iter())
            .find(|c| c.type_ == READY)
            .map(|c| c.message.trim())
            .filter(|m| !m.is_empty())
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        return format!("Ready{instances}{message}");
    }
    let reconciling = status
        .conditions
        .iter()
        .find(|c| c.type_ == RECONCILING && c.status == "True");
    if let Some(progress) = &status.progress {
        let message = if progress.message.is_empty() {
            format!("{}: {}/{}", progress.stage, progress.done, progress.total)
        } else {
            progress.message.clone()
        };
        return format!("Reconciling: {message}{instances}");
    }
    if let Some(c) = reconciling {
        return match c.message.trim() {
            "" => format!("Reconciling: {}", c.reason),
            message => format!("Reconciling ({}): {message}", c.reason),
        };
    }
    not_ready_because(&status.conditions, generation)
        .unwrap_or_else(|| "waiting for the controller".into())
}

fn describe_instance(i: &Instance) -> String {
    let ip = i
        .spec
        .networks
        .iter()
        .find_map(|n| n.ip.clone())
        .unwrap_or_else(|| "-".into());
    let state = i
        .status
        .as_ref()
        .and_then(|s| s.process_state)
        .map_or_else(|| "starting".to_string(), |s| format!("{s:?}"));
    format!(
        "{state} at {ip} (VM {})",
        i.spec.vm_cid.as_deref().unwrap_or("-")
    )
}

/// The hello job's port in the deployment's manifest (the job's default: 8080).
fn hello_port(d: &Deployment) -> u16 {
    let spec = serde_json::to_value(&d.spec).unwrap_or_default();
    let groups = spec["manifest"]["instance_groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    groups
        .iter()
        .flat_map(|g| g["jobs"].as_array().cloned().unwrap_or_default())
        .filter(|j| j["name"] == "hello")
        .find_map(|j| j["properties"]["hello"]["port"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(8080)
}

/// `GET /` on the instance's address, if it answers.
fn answer(i: &Instance, port: u16) -> Option<Answer> {
    let ip = i.spec.networks.iter().find_map(|n| n.ip.clone())?;
    let body = kubosh_devenv::http_get(&ip, port)?;
    Some(Answer {
        name: format!("{}/{}", i.spec.instance_group, i.spec.index),
        ip,
        port,
        body,
    })
}

/// The last lines of a log.
pub(super) fn tail(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Whether `task` started at `since` or later (the API keeps whole seconds).
fn started_after(task: Option<&TaskSummary>, since: SystemTime) -> bool {
    let since = since
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    task.and_then(|t| t.started.as_ref())
        .and_then(|t| u64::try_from(t.0.as_second()).ok())
        .is_some_and(|started| started >= since)
}

/// How long booted VMs get to start their jobs again.
const JOBS_BACK_WITHIN: Duration = Duration::from_secs(60);

/// After the VMs an earlier run powered off booted: waits (at most a minute) until every
/// instance of deployment `name` answers on the job's port again, and a little longer, so
/// each agent reports its jobs `running` when the controller asks: a controller that
/// finds an instance whose jobs do not run restarts them, as the Director does, where
/// there is nothing to do.
pub(super) async fn wait_for_jobs(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    say: Say,
) -> Result<(), String> {
    let Some(d) = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(());
    };
    let port = hello_port(&d);
    let mine = instances_of(&Api::namespaced(client.clone(), namespace), name).await?;
    say.line(&format!(
        "waiting for the booted VMs' jobs to answer on port {port} again"
    ));
    let deadline = Instant::now() + JOBS_BACK_WITHIN;
    while Instant::now() < deadline {
        if mine.iter().all(|i| answer(i, port).is_some()) {
            say.line("every instance answers again");
            // The agent's supervisor sees a started process at its next check (every
            // second): two of them.
            tokio::time::sleep(Duration::from_secs(2)).await;
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
    say.line("not every instance answers yet; the controller takes over from here");
    Ok(())
}

/// The instances of deployment `name`, by group and index.
async fn instances_of(api: &Api<Instance>, name: &str) -> Result<Vec<Instance>, String> {
    let mut mine: Vec<Instance> = (api.list(&ListParams::default()).await)
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .filter(|i| i.spec.deployment == name)
        .collect();
    mine.sort_by_key(|i| (i.spec.instance_group.clone(), i.spec.index));
    Ok(mine)
}
