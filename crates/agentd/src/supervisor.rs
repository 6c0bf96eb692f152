//! Runs job processes for real, the way monit does on a BOSH VM, and reports them the way the
//! agent's monit job supervisor does (`jobsupervisor/monit_job_supervisor.go`).
//!
//! Each `check process` service is started with `/bin/sh -c "<start program>"` in a process
//! group of its own, with a clean environment ([`SupervisorConfig::env`] plus
//! `MONIT_SERVICE`). As with monit, the start program usually daemonizes and writes the pid
//! file; the pid in the pid file is then the service. A start program that keeps running
//! without writing the pid file (a foreground program) becomes the service itself after
//! [`SupervisorConfig::foreground_grace`], and so does any start program of a service without
//! a pid file.
//!
//! While monitored, a service that dies is started again after a backoff that doubles from
//! [`SupervisorConfig::restart_backoff`] up to [`SupervisorConfig::restart_backoff_max`]
//! (reset after running that long). `depends on` orders starts and stops: a service starts
//! once its dependencies run (a dependency with a pid file counts once the pid file names it,
//! or once it has run as a foreground program for its start timeout), and dependents stop
//! first. Unlike monit, restarting a crashed service does not restart its dependents.
//!
//! States are BOSH's (`jobsupervisor/monit/status.go`): a process is `running`, `starting`
//! (first start in progress), `failing` (not running, or restarting) or `unknown` (not
//! monitored: before `start`, after `unmonitor` and after `stop`). The `job_state` is
//! `stopped` while the stopped marker (`monit/stopped`) exists, else `starting` if any
//! process is starting, `failing` if any is not running, else `running`.
//!
//! Dropping the [`Supervisor`] SIGKILLs every process group it started and every pid it
//! tracked; [`Supervisor::shutdown`] stops them gracefully first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::exec;
use super::layout::{Layout, check_name};
use super::monit::{self, MonitService, MonitWarning};
use super::proc;

/// How the supervisor runs services.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// The VM's tree (stopped marker, program logs).
    pub layout: Layout,
    /// Environment of start and stop programs (plus `MONIT_SERVICE`).
    pub env: BTreeMap<String, String>,
    /// How often services are checked (monit's cycle).
    pub tick: Duration,
    /// How long a start may take when the monit file gives no `with timeout` (monit: 30 s).
    pub start_timeout: Duration,
    /// How long a stop may take before the process groups are killed (monit: 30 s).
    pub stop_timeout: Duration,
    /// Between SIGTERM and SIGKILL when killing what a stop left behind.
    pub kill_grace: Duration,
    /// How long a start program must keep running without writing its pid file before it is
    /// taken as the service itself.
    pub foreground_grace: Duration,
    /// First delay before restarting a dead service.
    pub restart_backoff: Duration,
    /// Longest delay before restarting a dead service.
    pub restart_backoff_max: Duration,
}

impl SupervisorConfig {
    /// Defaults: monit's timeouts (30 s), a 1 s check cycle, restarts after 1 s doubling up to
    /// 30 s, foreground programs adopted after 2 s, 5 s between SIGTERM and SIGKILL.
    pub fn new(layout: Layout) -> Self {
        Self {
            layout,
            env: super::default_env(),
            tick: Duration::from_secs(1),
            start_timeout: Duration::from_secs(30),
            stop_timeout: Duration::from_secs(30),
            kill_grace: Duration::from_secs(5),
            foreground_grace: Duration::from_secs(2),
            restart_backoff: Duration::from_secs(1),
            restart_backoff_max: Duration::from_secs(30),
        }
    }
}

/// A process's state, as `get_state` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    /// Monitored and running.
    Running,
    /// Monitored and not running (crashed, restarting, failed to start, waiting).
    Failing,
    /// Monitored, first start in progress.
    Starting,
    /// Not monitored.
    Unknown,
}

impl ProcessState {
    /// BOSH's string for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Failing => "failing",
            Self::Starting => "starting",
            Self::Unknown => "unknown",
        }
    }
}

/// The instance's `job_state`, as `get_state` reports it (the protocol's type; the agent
/// reports `running`, `failing`, `starting`, `stopped` or `unknown`).
pub use kubosh_transport::agent::protocol::JobState;

/// `uptime` of a process: `{"secs": N}`, `{}` when unknown.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Uptime {
    /// Seconds since the process started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secs: Option<u64>,
}

/// `mem` of a process and its children: `{"kb": N, "percent": P}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Memory {
    /// Resident KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kb: Option<u64>,
    /// Percent of the machine's memory.
    pub percent: f64,
}

/// `cpu` of a process and its children: `{"total": P}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cpu {
    /// Percent of the machine's CPU time, over the last check cycle.
    pub total: f64,
}

/// One entry of `get_state`'s `processes`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessStatus {
    /// The service name.
    pub name: String,
    /// Its state.
    pub state: ProcessState,
    /// Uptime.
    pub uptime: Uptime,
    /// Memory.
    pub mem: Memory,
    /// CPU.
    pub cpu: Cpu,
}

/// What `get_state` needs from the supervisor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SupervisorStatus {
    /// The overall state.
    pub job_state: JobState,
    /// One entry per service, in start order.
    pub processes: Vec<ProcessStatus>,
}

/// A service to supervise: a `check process` block and the job it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// The job whose monit file defines it.
    pub job: String,
    /// The parsed block.
    pub monit: MonitService,
}

/// Why the supervisor could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// Reading a job's monit files failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A job name that cannot be a path component.
    #[error(transparent)]
    InvalidName(#[from] super::layout::InvalidName),
    /// A monit file does not parse.
    #[error(transparent)]
    Monit(#[from] monit::MonitError),
    /// Two services with the same name.
    #[error("{second}: service {name:?} is already defined at {first}")]
    DuplicateService {
        /// The service name.
        name: String,
        /// `file:line` of the first definition.
        first: String,
        /// `file:line` of the second.
        second: String,
    },
    /// `depends on` a service that does not exist.
    #[error("{file}:{line}: service {service:?} depends on {dependency:?}, which is not defined")]
    UnknownDependency {
        /// The dependent service.
        service: String,
        /// The missing service.
        dependency: String,
        /// File of the `depends` statement.
        file: String,
        /// Line of the `depends` statement.
        line: usize,
    },
    /// `depends on` forms a cycle.
    #[error("services depend on each other in a cycle: {}", .services.join(", "))]
    DependencyCycle {
        /// The services in or behind the cycle.
        services: Vec<String>,
    },
    /// Writing or removing the stopped marker failed.
    #[error("updating {path}: {source}")]
    Marker {
        /// The marker file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Some processes were still alive after being killed.
    #[error("could not stop services: {}", .services.join(", "))]
    StopFailed {
        /// The services.
        services: Vec<String>,
    },
}

/// Reads the services of `jobs` from `jobs/<job>/monit` and `jobs/<job>/*.monit` (both
/// optional), as the agent does when it configures monit.
pub fn read_job_services(
    layout: &Layout,
    jobs: &[String],
) -> Result<(Vec<Service>, Vec<MonitWarning>), SupervisorError> {
    let mut services = Vec::new();
    let mut warnings = Vec::new();
    for job in jobs {
        check_name("job", job)?;
        let dir = layout.job_dir(job);
        let mut files = vec![layout.job_monit_file(job)];
        match std::fs::read_dir(&dir) {
            Ok(entries) => {
                let mut extra: Vec<PathBuf> = entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "monit"))
                    .collect();
                extra.sort();
                files.extend(extra);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(SupervisorError::Io { path: dir, source }),
        }
        for file in files {
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(SupervisorError::Io { path: file, source }),
            };
            let shown = file
                .strip_prefix(layout.base())
                .unwrap_or(&file)
                .display()
                .to_string();
            let parsed = monit::parse(&shown, &text)?;
            warnings.extend(parsed.warnings);
            services.extend(parsed.services.into_iter().map(|monit| Service {
                job: job.clone(),
                monit,
            }));
        }
    }
    Ok((services, warnings))
}

/// What the supervisor was last asked to do with a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Desired {
    /// Never started (or loaded, not yet started): not monitored.
    Idle,
    Monitor,
    Unmonitor,
    Stopped,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Down,
    Starting { since: Instant, deadline: Instant },
    Running { since: Instant },
    Backoff { until: Instant },
}

/// Process groups and the pid a service owns; read by `Drop` to kill everything.
#[derive(Debug, Default)]
struct Tracked {
    groups: BTreeSet<i32>,
    pid: Option<i32>,
}

struct SvcState {
    desired: Desired,
    phase: Phase,
    starter: Option<tokio::process::Child>,
    starter_pid: Option<i32>,
    starter_exit: Option<ExitStatus>,
    restarts: u32,
    cpu_sample: Option<(Instant, u64)>,
}

struct Svc {
    spec: Service,
    deps: Vec<String>,
    level: usize,
    state: tokio::sync::Mutex<SvcState>,
    snapshot: Mutex<ProcessStatus>,
    tracked: Mutex<Tracked>,
    /// Running, and good to start dependents: its pid file names it (or it has none), or it
    /// has run as a foreground program for its start timeout.
    ready: std::sync::atomic::AtomicBool,
}

impl Svc {
    fn name(&self) -> &str {
        &self.spec.monit.name
    }

    fn pidfile(&self) -> Option<PathBuf> {
        self.spec
            .monit
            .pidfile
            .as_ref()
            .map(|p| Path::new("/").join(p))
    }

    /// The live process named by the pid file, if any.
    fn pidfile_pid(&self) -> Option<i32> {
        self.pidfile()
            .and_then(|p| proc::read_pidfile(&p))
            .filter(|&p| proc::is_live(p))
    }

    fn set_state(&self, state: ProcessState) {
        if state != ProcessState::Running {
            self.set_ready(false);
        }
        let mut snap = lock(&self.snapshot);
        snap.state = state;
        if state != ProcessState::Running {
            snap.uptime = Uptime::default();
            snap.mem = Memory::default();
            snap.cpu = Cpu::default();
        }
    }

    fn set_ready(&self, ready: bool) {
        self.ready
            .store(ready, std::sync::atomic::Ordering::Relaxed);
    }

    fn ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn track_group(&self, pgid: i32) {
        if pgid > 1 {
            lock(&self.tracked).groups.insert(pgid);
        }
    }

    fn set_pid(&self, pid: Option<i32>) {
        lock(&self.tracked).pid = pid;
        if let Some(stat) = pid.and_then(proc::stat) {
            self.track_group(stat.pgrp);
        }
    }

    fn pid(&self) -> Option<i32> {
        lock(&self.tracked).pid
    }

    fn groups(&self) -> Vec<i32> {
        lock(&self.tracked).groups.iter().copied().collect()
    }

    /// Forgets groups with no live process left.
    fn prune_groups(&self, procs: &[proc::Stat]) {
        lock(&self.tracked)
            .groups
            .retain(|&g| procs.iter().any(|s| s.pgrp == g && s.is_live()));
    }

    /// SIGKILLs every tracked group and the tracked pid (synchronous: used by `Drop`).
    fn kill_all(&self) {
        let t = lock(&self.tracked);
        for &g in &t.groups {
            proc::signal_group(g, libc::SIGKILL);
        }
        if let Some(p) = t.pid {
            proc::signal_pid(p, libc::SIGKILL);
        }
    }
}

/// A poisoned lock only means another thread panicked while holding it; the data (plain
/// status values) is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Shared {
    config: SupervisorConfig,
    services: Mutex<Vec<Arc<Svc>>>,
    wake: Notify,
    machine: Machine,
}

/// Constants of the machine, for vitals.
struct Machine {
    clock_ticks: u64,
    page_kb: u64,
    mem_total_kb: Option<u64>,
    cpus: u64,
}

/// Runs and reports the job processes of one VM. Needs a Tokio runtime.
pub struct Supervisor {
    shared: Arc<Shared>,
    monitor: tokio::task::JoinHandle<()>,
}

impl Supervisor {
    /// A supervisor with no services; it checks them every [`SupervisorConfig::tick`].
    pub fn new(config: SupervisorConfig) -> Self {
        let shared = Arc::new(Shared {
            config,
            services: Mutex::new(Vec::new()),
            wake: Notify::new(),
            machine: Machine {
                clock_ticks: proc::clock_ticks(),
                page_kb: proc::page_size() / 1024,
                mem_total_kb: proc::mem_total_kb(),
                cpus: proc::cpu_count(),
            },
        });
        let monitor = tokio::spawn(monitor_loop(Arc::downgrade(&shared)));
        Self { shared, monitor }
    }

    /// Replaces the supervised services (the agent's "remove all jobs, add jobs, reload").
    /// Services that are gone or changed are stopped first; unchanged ones keep running.
    /// New services are not monitored until [`Supervisor::start`].
    pub async fn set_services(&self, services: Vec<Service>) -> Result<(), SupervisorError> {
        let ordered = order(services)?;
        let old: Vec<Arc<Svc>> = lock(&self.shared.services).clone();
        let (keep, drop): (Vec<_>, Vec<_>) = old
            .into_iter()
            .partition(|o| ordered.iter().any(|(s, _)| *s == o.spec));
        self.stop_services(&drop).await?;
        let mut next = Vec::new();
        for (spec, level) in ordered {
            if let Some(k) = keep.iter().find(|k| k.spec == spec) {
                next.push(k.clone());
                continue;
            }
            next.push(Arc::new(Svc {
                deps: spec
                    .monit
                    .depends_on
                    .iter()
                    .map(|d| d.name.clone())
                    .collect(),
                level,
                snapshot: Mutex::new(ProcessStatus {
                    name: spec.monit.name.clone(),
                    state: ProcessState::Unknown,
                    uptime: Uptime::default(),
                    mem: Memory::default(),
                    cpu: Cpu::default(),
                }),
                state: tokio::sync::Mutex::new(SvcState {
                    desired: Desired::Idle,
                    phase: Phase::Down,
                    starter: None,
                    starter_pid: None,
                    starter_exit: None,
                    restarts: 0,
                    cpu_sample: None,
                }),
                tracked: Mutex::new(Tracked::default()),
                ready: std::sync::atomic::AtomicBool::new(false),
                spec,
            }));
        }
        *lock(&self.shared.services) = next;
        Ok(())
    }

    /// Reads the jobs' monit files ([`read_job_services`]) and supervises their services
    /// ([`Supervisor::set_services`]). Returns what the monit files skipped.
    pub async fn load_jobs(&self, jobs: &[String]) -> Result<Vec<MonitWarning>, SupervisorError> {
        let (services, warnings) = read_job_services(&self.shared.config.layout, jobs)?;
        for w in &warnings {
            tracing::warn!("{w}");
        }
        self.set_services(services).await?;
        Ok(warnings)
    }

    /// Monitors every service and starts those that do not run, dependencies first, like
    /// `monit start`: returns at once; [`Supervisor::status`] shows the progress. Removes the
    /// stopped marker.
    pub async fn start(&self) -> Result<(), SupervisorError> {
        let marker = self.shared.config.layout.monit_stopped_file();
        match std::fs::remove_file(&marker) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(SupervisorError::Marker {
                    path: marker,
                    source,
                });
            }
        }
        for svc in self.services() {
            let mut st = svc.state.lock().await;
            if st.desired != Desired::Monitor {
                st.desired = Desired::Monitor;
                st.restarts = 0;
                if matches!(st.phase, Phase::Backoff { .. }) {
                    st.phase = Phase::Down;
                }
                if !matches!(st.phase, Phase::Running { .. }) {
                    svc.set_state(ProcessState::Starting);
                }
            }
        }
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Stops monitoring: processes keep running but are no longer restarted (the agent does
    /// this before running drain scripts). [`Supervisor::start`] monitors them again.
    pub async fn unmonitor(&self) {
        for svc in self.services() {
            let mut st = svc.state.lock().await;
            if st.desired == Desired::Monitor {
                st.desired = Desired::Unmonitor;
            }
            svc.set_state(ProcessState::Unknown);
        }
    }

    /// Stops every service and waits for its processes to be gone, dependents first: the
    /// stop program (if any), then, after its timeout, SIGTERM and SIGKILL to the service's
    /// process groups. Writes the stopped marker first, as the agent does.
    pub async fn stop(&self) -> Result<(), SupervisorError> {
        let marker = self.shared.config.layout.monit_stopped_file();
        let write = marker
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&marker, b""));
        if let Err(source) = write {
            return Err(SupervisorError::Marker {
                path: marker,
                source,
            });
        }
        let services = self.services();
        self.stop_services(&services).await
    }

    /// Stops every service as a machine going down does: the processes stop, dependents
    /// first, and the stopped marker is left as it is, so the jobs start again when the
    /// agent comes back ([`crate::service::Agent::resume`]) unless they were stopped on purpose.
    pub async fn power_off(&self) -> Result<(), SupervisorError> {
        let services = self.services();
        self.stop_services(&services).await
    }

    /// Stops everything gracefully ([`Supervisor::stop`]), then ends the supervisor.
    pub async fn shutdown(self) -> Result<(), SupervisorError> {
        self.stop().await
    }

    /// The `job_state` and `processes` of `get_state`.
    pub fn status(&self) -> SupervisorStatus {
        let processes: Vec<ProcessStatus> = self
            .services()
            .iter()
            .map(|s| lock(&s.snapshot).clone())
            .collect();
        let job_state = if self.monitor.is_finished() {
            JobState::Unknown
        } else if self.shared.config.layout.monit_stopped_file().exists() {
            JobState::Stopped
        } else if processes.iter().any(|p| p.state == ProcessState::Starting) {
            JobState::Starting
        } else if processes.iter().any(|p| p.state != ProcessState::Running) {
            JobState::Failing
        } else {
            JobState::Running
        };
        SupervisorStatus {
            job_state,
            processes,
        }
    }

    /// The pid of a service's process, when it has one.
    pub fn pid(&self, service: &str) -> Option<i32> {
        self.services()
            .iter()
            .find(|s| s.name() == service)
            .and_then(|s| s.pid())
    }

    fn services(&self) -> Vec<Arc<Svc>> {
        lock(&self.shared.services).clone()
    }

    async fn stop_services(&self, services: &[Arc<Svc>]) -> Result<(), SupervisorError> {
        let max_level = services.iter().map(|s| s.level).max().unwrap_or(0);
        let mut failed = Vec::new();
        for level in (0..=max_level).rev() {
            let batch = services
                .iter()
                .filter(|s| s.level == level)
                .map(|s| stop_one(&self.shared.config, s));
            for (name, ok) in futures::future::join_all(batch).await {
                if !ok {
                    failed.push(name);
                }
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(SupervisorError::StopFailed { services: failed })
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.monitor.abort();
        for svc in lock(&self.shared.services).iter() {
            svc.kill_all();
        }
    }
}

/// Validates names and dependencies; returns the services in start order with their level
/// (0: no dependencies; n: 1 + the highest level of a dependency).
fn order(services: Vec<Service>) -> Result<Vec<(Service, usize)>, SupervisorError> {
    let mut seen: BTreeMap<&str, &Service> = BTreeMap::new();
    for s in &services {
        if let Some(first) = seen.insert(&s.monit.name, s) {
            return Err(SupervisorError::DuplicateService {
                name: s.monit.name.clone(),
                first: format!("{}:{}", first.monit.file, first.monit.line),
                second: format!("{}:{}", s.monit.file, s.monit.line),
            });
        }
    }
    for s in &services {
        for d in &s.monit.depends_on {
            if !seen.contains_key(d.name.as_str()) {
                return Err(SupervisorError::UnknownDependency {
                    service: s.monit.name.clone(),
                    dependency: d.name.clone(),
                    file: s.monit.file.clone(),
                    line: d.line,
                });
            }
        }
    }
    let mut level: BTreeMap<String, usize> = BTreeMap::new();
    let mut pending: Vec<Service> = services;
    let mut out = Vec::new();
    while !pending.is_empty() {
        let (ready, rest): (Vec<_>, Vec<_>) = pending.into_iter().partition(|s| {
            s.monit
                .depends_on
                .iter()
                .all(|d| level.contains_key(&d.name))
        });
        if ready.is_empty() {
            return Err(SupervisorError::DependencyCycle {
                services: rest.into_iter().map(|s| s.monit.name).collect(),
            });
        }
        for s in ready {
            let l = s
                .monit
                .depends_on
                .iter()
                .filter_map(|d| level.get(&d.name))
                .map(|l| l + 1)
                .max()
                .unwrap_or(0);
            level.insert(s.monit.name.clone(), l);
            out.push((s, l));
        }
        pending = rest;
    }
    out.sort_by_key(|(_, l)| *l);
    Ok(out)
}

async fn monitor_loop(shared: std::sync::Weak<Shared>) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let tick = s.config.tick;
        check_all(&s).await;
        tokio::select! {
            () = tokio::time::sleep(tick) => {}
            () = s.wake.notified() => {}
        }
    }
}

/// One check cycle over all services, dependencies first.
async fn check_all(shared: &Shared) {
    let services: Vec<Arc<Svc>> = lock(&shared.services).clone();
    let procs = proc::all();
    for svc in &services {
        let Ok(mut st) = svc.state.try_lock() else {
            continue; // being stopped
        };
        let deps_running = svc.deps.iter().all(|d| {
            services
                .iter()
                .find(|s| s.name() == d)
                .is_some_and(|s| s.ready())
        });
        check(shared, svc, &mut st, deps_running, &procs);
    }
    // Forget groups that are gone, from a snapshot taken after this cycle's spawns.
    let after = proc::all();
    for svc in &services {
        svc.prune_groups(&after);
    }
}

fn backoff(config: &SupervisorConfig, restarts: u32) -> Duration {
    let factor = 1u32.checked_shl(restarts.min(16)).unwrap_or(u32::MAX);
    config
        .restart_backoff
        .saturating_mul(factor)
        .min(config.restart_backoff_max)
}

/// Advances one service's state machine.
fn check(shared: &Shared, svc: &Svc, st: &mut SvcState, deps_running: bool, procs: &[proc::Stat]) {
    let config = &shared.config;
    let now = Instant::now();
    reap_starter(st);

    if st.desired == Desired::Unmonitor {
        track_unmonitored(svc, st, now);
        return;
    }
    if st.desired != Desired::Monitor {
        svc.set_state(ProcessState::Unknown);
        return;
    }

    let not_yet = if st.restarts == 0 {
        ProcessState::Starting
    } else {
        ProcessState::Failing
    };
    match st.phase {
        Phase::Down => try_start(config, svc, st, deps_running, not_yet),
        Phase::Backoff { until } => {
            if now >= until {
                try_start(config, svc, st, deps_running, ProcessState::Failing);
            } else {
                svc.set_state(ProcessState::Failing);
            }
        }
        Phase::Starting { since, deadline } => {
            check_starting(config, svc, st, since, deadline, now, not_yet);
        }
        Phase::Running { since } => check_running(shared, svc, st, since, procs, now),
    }
}

/// Notes the start program's exit, if it has exited.
fn reap_starter(st: &mut SvcState) {
    if let Some(child) = st.starter.as_mut() {
        match child.try_wait() {
            Ok(Some(status)) => {
                st.starter_exit = Some(status);
                st.starter = None;
            }
            Ok(None) => {}
            Err(_) => st.starter = None,
        }
    }
}

/// Not monitored: only keep track of the process (no restarts).
fn track_unmonitored(svc: &Svc, st: &mut SvcState, now: Instant) {
    let alive = svc.pid().filter(|&p| proc::is_live(p));
    let pid = alive.or_else(|| svc.pidfile_pid());
    svc.set_pid(pid);
    st.phase = match (pid, st.phase) {
        (Some(_), Phase::Running { since }) => Phase::Running { since },
        (Some(_), _) => Phase::Running { since: now },
        (None, _) => Phase::Down,
    };
    svc.set_state(ProcessState::Unknown);
}

/// Starting since `since`: adopts the process once the pid file (or, for a foreground
/// program, the start program itself) names one; fails when the start program failed or
/// `deadline` passed.
fn check_starting(
    config: &SupervisorConfig,
    svc: &Svc,
    st: &mut SvcState,
    since: Instant,
    deadline: Instant,
    now: Instant,
    not_yet: ProcessState,
) {
    if let Some(pid) = svc.pidfile_pid() {
        adopt(svc, st, pid);
    } else if st.starter.is_some() {
        let foreground =
            svc.pidfile().is_none() || now.duration_since(since) >= config.foreground_grace;
        match st.starter_pid {
            Some(pid) if foreground => adopt(svc, st, pid),
            _ => svc.set_state(not_yet),
        }
    } else {
        let failed_exit = st.starter_exit.is_some_and(|s| !s.success());
        if failed_exit || svc.pidfile().is_none() || now >= deadline {
            let why = match st.starter_exit {
                Some(s) if !s.success() => {
                    format!("start program {}", exec::describe_status(&s))
                }
                _ if svc.pidfile().is_none() => "start program exited".to_string(),
                _ => "no live process in its pid file".to_string(),
            };
            failed(config, svc, st, &why);
        } else {
            svc.set_state(not_yet);
        }
    }
}

/// Running since `since`: follows the pid file, marks the service ready, resets the
/// restart count after a long enough run and samples vitals; fails when the process is
/// gone.
fn check_running(
    shared: &Shared,
    svc: &Svc,
    st: &mut SvcState,
    since: Instant,
    procs: &[proc::Stat],
    now: Instant,
) {
    let config = &shared.config;
    let current = svc.pid();
    if let Some(p) = svc.pidfile_pid().filter(|p| Some(*p) != current) {
        // The pid file names another live process: it is the service now.
        svc.set_pid(Some(p));
    }
    match svc.pid().filter(|&p| proc::is_live(p)) {
        Some(pid) => {
            let running_for = now.duration_since(since);
            if running_for >= config.restart_backoff_max {
                st.restarts = 0;
            }
            svc.set_state(ProcessState::Running);
            let start_timeout = svc
                .spec
                .monit
                .start
                .as_ref()
                .and_then(|p| p.timeout)
                .unwrap_or(config.start_timeout);
            svc.set_ready(
                svc.pidfile().is_none()
                    || svc.pidfile_pid() == Some(pid)
                    || running_for >= start_timeout,
            );
            vitals(shared, svc, st, pid, procs, now);
        }
        None => failed(config, svc, st, "process is not running"),
    }
}

fn try_start(
    config: &SupervisorConfig,
    svc: &Svc,
    st: &mut SvcState,
    deps_running: bool,
    waiting: ProcessState,
) {
    if !deps_running {
        svc.set_state(waiting);
        return;
    }
    if let Some(pid) = svc.pidfile_pid() {
        adopt(svc, st, pid);
        return;
    }
    let Some(start) = svc.spec.monit.start.as_ref() else {
        svc.set_state(ProcessState::Failing);
        return;
    };
    let log = config.layout.monit_service_log(svc.name());
    let mut cmd = exec::command("/bin/sh", &config.env);
    cmd.arg("-c")
        .arg(&start.command)
        .env("MONIT_SERVICE", svc.name());
    let (out, err) = log_files(&log);
    cmd.stdout(out).stderr(err);
    let now = Instant::now();
    match cmd.spawn() {
        Ok(child) => {
            let pid = child.id().map(|p| p as i32);
            if let Some(pid) = pid {
                svc.track_group(pid);
            }
            tracing::info!(service = svc.name(), job = %svc.spec.job, "starting");
            st.starter = Some(child);
            st.starter_pid = pid;
            st.starter_exit = None;
            st.phase = Phase::Starting {
                since: now,
                deadline: now + start.timeout.unwrap_or(config.start_timeout),
            };
            svc.set_state(waiting);
        }
        Err(e) => failed(config, svc, st, &format!("start program did not run: {e}")),
    }
}

fn log_files(path: &Path) -> (Stdio, Stdio) {
    let open = || {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    };
    match open().and_then(|f| Ok((f.try_clone()?, f))) {
        Ok((a, b)) => (Stdio::from(a), Stdio::from(b)),
        Err(_) => (Stdio::null(), Stdio::null()),
    }
}

fn adopt(svc: &Svc, st: &mut SvcState, pid: i32) {
    svc.set_pid(Some(pid));
    svc.set_ready(svc.pidfile().is_none() || svc.pidfile_pid() == Some(pid));
    st.phase = Phase::Running {
        since: Instant::now(),
    };
    st.cpu_sample = None;
    svc.set_state(ProcessState::Running);
}

/// The service is not running: clear what is left of it and schedule a restart.
fn failed(config: &SupervisorConfig, svc: &Svc, st: &mut SvcState, why: &str) {
    let delay = backoff(config, st.restarts);
    tracing::warn!(
        service = svc.name(),
        job = %svc.spec.job,
        restart_in = ?delay,
        "{why}"
    );
    for g in svc.groups() {
        proc::signal_group(g, libc::SIGKILL);
    }
    if let Some(child) = st.starter.as_mut() {
        let _ = child.start_kill();
    }
    svc.set_pid(None);
    st.restarts = st.restarts.saturating_add(1);
    st.phase = Phase::Backoff {
        until: Instant::now() + delay,
    };
    svc.set_state(ProcessState::Failing);
}

fn vitals(
    shared: &Shared,
    svc: &Svc,
    st: &mut SvcState,
    pid: i32,
    procs: &[proc::Stat],
    now: Instant,
) {
    let m = &shared.machine;
    let tree = proc::tree(pid, procs);
    let Some(root) = tree.first() else { return };
    let rss_kb: u64 = tree
        .iter()
        .map(|s| s.rss_pages.saturating_mul(m.page_kb))
        .sum();
    let ticks: u64 = tree.iter().map(|s| s.cpu_ticks).sum();
    let cpu = match st.cpu_sample {
        Some((at, before)) if now > at => {
            let secs = now.duration_since(at).as_secs_f64();
            let used = ticks.saturating_sub(before) as f64 / m.clock_ticks.max(1) as f64;
            round1(100.0 * used / secs / m.cpus.max(1) as f64)
        }
        _ => 0.0,
    };
    st.cpu_sample = Some((now, ticks));
    let uptime = proc::uptime_secs().map(|up| {
        let started = root.start_ticks as f64 / m.clock_ticks.max(1) as f64;
        (up - started).max(0.0) as u64
    });
    let mut snap = lock(&svc.snapshot);
    snap.uptime = Uptime { secs: uptime };
    snap.mem = Memory {
        kb: Some(rss_kb),
        percent: m
            .mem_total_kb
            .filter(|&t| t > 0)
            .map_or(0.0, |t| round1(100.0 * rss_kb as f64 / t as f64)),
    };
    snap.cpu = Cpu { total: cpu };
}

fn round1(x: f64) -> f64 {
    if x.is_finite() {
        (x * 10.0).round() / 10.0
    } else {
        0.0
    }
}

/// Stops one service; returns its name and whether nothing of it is left.
async fn stop_one(config: &SupervisorConfig, svc: &Svc) -> (String, bool) {
    let name = svc.name().to_string();
    let mut st = svc.state.lock().await;
    st.desired = Desired::Stopped;
    svc.set_state(ProcessState::Unknown);
    let spec = &svc.spec.monit;
    let timeout = spec
        .stop
        .as_ref()
        .and_then(|p| p.timeout)
        .unwrap_or(config.stop_timeout);
    let deadline = Instant::now() + timeout;
    if svc.pid().is_none() {
        svc.set_pid(svc.pidfile_pid());
    }
    let something_runs = svc.pid().is_some() || svc.groups().into_iter().any(proc::group_live);
    if something_runs {
        tracing::info!(service = %name, job = %svc.spec.job, "stopping");
        match &spec.stop {
            Some(stop) => {
                let mut cmd = exec::command("/bin/sh", &config.env);
                cmd.arg("-c").arg(&stop.command).env("MONIT_SERVICE", &name);
                let (out, err) = log_files(&config.layout.monit_service_log(&name));
                cmd.stdout(out).stderr(err);
                match cmd.spawn() {
                    Ok(mut child) => {
                        let pgid = child.id().map_or(0, |p| p as i32);
                        svc.track_group(pgid);
                        let left = deadline.saturating_duration_since(Instant::now());
                        if tokio::time::timeout(left, child.wait()).await.is_err() {
                            tracing::warn!(service = %name, "stop program timed out");
                            proc::signal_group(pgid, libc::SIGKILL);
                            let _ = child.wait().await;
                        }
                    }
                    Err(e) => tracing::warn!(service = %name, "stop program did not run: {e}"),
                }
            }
            None => {
                if let Some(p) = svc.pid() {
                    proc::signal_pid(p, libc::SIGTERM);
                }
                for g in svc.groups() {
                    proc::signal_group(g, libc::SIGTERM);
                }
            }
        }
        // Wait for the service to go.
        let left = deadline.saturating_duration_since(Instant::now());
        let gone = exec::wait_until(left, || svc.pid().is_none_or(|p| !proc::is_live(p))).await;
        if !gone {
            tracing::warn!(service = %name, "still running after {timeout:?}: killing it");
            if let Some(p) = svc.pid() {
                proc::signal_pid(p, libc::SIGTERM);
            }
        }
        // Whatever else is left in its process groups: TERM, grace, KILL.
        let groups = svc.groups();
        futures::future::join_all(
            groups
                .iter()
                .map(|&g| exec::terminate_group(g, config.kill_grace)),
        )
        .await;
        if let Some(p) = svc.pid().filter(|&p| proc::is_live(p)) {
            proc::signal_pid(p, libc::SIGKILL);
            exec::wait_until(Duration::from_secs(2), || !proc::is_live(p)).await;
        }
    }
    if let Some(mut child) = st.starter.take() {
        let _ = child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    }
    st.starter_pid = None;
    st.starter_exit = None;
    st.phase = Phase::Down;
    st.restarts = 0;
    let left_alive =
        svc.pid().is_some_and(proc::is_live) || svc.groups().into_iter().any(proc::group_live);
    svc.set_pid(None);
    lock(&svc.tracked).groups.retain(|&g| proc::group_live(g));
    svc.set_state(ProcessState::Unknown);
    (name, !left_alive)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(name: &str, deps: &[&str]) -> Service {
        let text = format!(
            "check process {name}\n  start program \"true\"\n  group vcap\n{}",
            deps.iter()
                .map(|d| format!("  depends on {d}\n"))
                .collect::<String>()
        );
        let mut f = monit::parse(&format!("{name}/monit"), &text).unwrap();
        Service {
            job: name.to_string(),
            monit: f.services.remove(0),
        }
    }

    #[test]
    fn orders_by_dependency_level() {
        let got = order(vec![
            svc("c", &["b"]),
            svc("b", &["a"]),
            svc("a", &[]),
            svc("d", &["a", "c"]),
        ])
        .unwrap();
        let names: Vec<(&str, usize)> = got
            .iter()
            .map(|(s, l)| (s.monit.name.as_str(), *l))
            .collect();
        assert_eq!(names, [("a", 0), ("b", 1), ("c", 2), ("d", 3)]);
    }

    #[test]
    fn rejects_bad_dependencies() {
        let err = order(vec![svc("a", &["nope"])]).unwrap_err();
        assert!(err.to_string().starts_with("a/monit:4:"), "{err}");
        let err = order(vec![svc("a", &["b"]), svc("b", &["a"]), svc("c", &[])]).unwrap_err();
        assert!(
            matches!(&err, SupervisorError::DependencyCycle { services } if services.len() == 2),
            "{err}"
        );
        let err = order(vec![svc("a", &[]), svc("a", &[])]).unwrap_err();
        assert!(matches!(err, SupervisorError::DuplicateService { .. }));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut c = SupervisorConfig::new(Layout::new("/x"));
        c.restart_backoff = Duration::from_millis(100);
        c.restart_backoff_max = Duration::from_millis(500);
        let got: Vec<u128> = (0..6).map(|r| backoff(&c, r).as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 500, 500, 500]);
        assert_eq!(backoff(&c, u32::MAX).as_millis(), 500);
    }

    #[test]
    fn status_serializes_like_the_agent() {
        let p = ProcessStatus {
            name: "web".into(),
            state: ProcessState::Running,
            uptime: Uptime { secs: Some(5) },
            mem: Memory {
                kb: Some(100),
                percent: 0.1,
            },
            cpu: Cpu { total: 0.5 },
        };
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"name":"web","state":"running","uptime":{"secs":5},"mem":{"kb":100,"percent":0.1},"cpu":{"total":0.5}}"#
        );
        let idle = ProcessStatus {
            state: ProcessState::Unknown,
            uptime: Uptime::default(),
            mem: Memory::default(),
            cpu: Cpu::default(),
            ..p
        };
        assert_eq!(
            serde_json::to_string(&idle).unwrap(),
            r#"{"name":"web","state":"unknown","uptime":{},"mem":{"percent":0.0},"cpu":{"total":0.0}}"#
        );
    }
}
