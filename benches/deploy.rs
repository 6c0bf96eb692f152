//! Benchmark: the deploy engine on the simulated cloud (`kubosh_sim`) against the lower
//! bound of `perf-reliability.md` §3 (`plan::bound`), and what the engine itself costs.
//!
//! `cargo bench --bench deploy` deploys 10, 100, 1,000 and 10,000 instances of a release
//! built in process with a realistic package graph (`common/synthetic.rs`: 50 packages of
//! `graph::random_graph`, 5 s to 27 min each; a job per group listing its own packages;
//! `LiteralRenderer`, state in memory, a blobstore in a tempdir) on 6 compilation workers, in
//! three instance groups — `router` (10%, one AZ, no disk), `api` (20%, two AZs, a disk) and
//! `cell` (70%, three AZs, a disk) — with `canaries: 1` and `max_in_flight: 10%`, on a paused
//! tokio clock: every CPI and agent call takes its simulated latency in virtual time
//! (`create_vm` 30 to 60 s, each call its own), so the deploy's virtual duration is exact and
//! its real duration is the engine's (and the simulation's) CPU. For each size it prints:
//!
//! - fresh deploy and update (a property of every group changed): virtual duration ÷ the
//!   physical bound (`÷phys`, `physical_lower_bound` over the same rollout: every VM made at
//!   once, a group's packages ready after a worker's VM and the package graph's critical
//!   path, a new instance's disk made, attached and mounted meanwhile, post-deploy
//!   everywhere at once after the rollout; nothing of the engine's own; targets ≤ 1.10 fresh,
//!   ≤ 1.05 update), and against the Director's schedule on the same world: for the fresh
//!   deploy how many times faster (`×Dir`, target ≥ 2 at 1,000), for the update the ratio
//!   (`÷Dir`). That schedule is `rollout_lower_bound` over the rollout the engine plans
//!   (AZ by AZ, canaries, `max_in_flight`), each instance's `Tᵢ` the sum of the latencies of
//!   the calls its update must make (its disk's included), after the stages in sequence:
//!   compilation as the Director's queue runs it (one worker's `create_vm`, then the package
//!   graph on the cloud config's workers, the last package ready first, in virtual time),
//!   missing VMs (`phase_lower_bound` of one `create_vm` + `set_vm_metadata` per VM at the
//!   Director's `max_threads`, 32), and post-deploy (`phase_lower_bound` of one `run_script`
//!   per instance, `max_threads` at a time);
//! - real time per instance updated (all of the deploy's CPU, the simulation's included:
//!   latencies are free on the paused clock);
//! - `Engine::plan` of the update (real time);
//! - a no-op redeploy (real time and cloud/agent calls) with the simulated agents'
//!   heartbeats (`AgentHealth`); the target at 1,000 instances is ≤ 2 s and 0 calls;
//! - 1 % of the agents dying at once (issue 24): from their death to the resurrector's
//!   deploy's end — the controller's detection (agent timeout, 60 s, plus two 5 s checks) and
//!   the deploy with `--fix` — over the agent timeout plus `rollout_lower_bound` of just those
//!   instances, each `Tᵢ` a recreate's calls (`create_vm` fixed at its least, 30 s, for this
//!   part: the bound adds up each instance's calls). Target ≤ 1.1 (one instance) and ≤ 1.2.
//!
//! Latencies (seconds) default to [`DEFAULT_LATENCIES`]; `BENCH_LATENCIES` overrides them
//! (`create_vm=45,apply=5.5`; `create_vm`'s is its least), `BENCH_CREATE_VM_MOST` its most
//! (60), `BENCH_WATCH_MIN_MS` the watch times' minimum (1000),
//! `BENCH_POLL_MS` the engine's `get_task` interval (1000, the Director's) and `BENCH_SIZES`
//! the sizes (`10,100,1000,10000`). The engine's cloud is a [`PacedCloud`] with no limit
//! configured, as a director's is.
//!
//! Then a rate-limited cloud (issue 29): a fresh deploy of 1,000 instances on a cloud whose
//! `create_vm` takes 10 calls a second (bursts of 10) and refuses the rest with EC2's
//! `RequestLimitExceeded`, as IaaS APIs do; kubosh is not told the limit. It prints the
//! share of `create_vm` calls refused (target ≤ 5 %), the throughput of "Creating missing
//! vms" (the instances' calls admitted, first to last) over the limit (target ≥ 90 %), and
//! the deploy ÷ its physical bound with that limit. `BENCH_RATE_LIMITED_SIZE` changes its
//! size.

#[path = "common/bound.rs"]
mod bound;
#[path = "common/graph.rs"]
mod graph;
#[path = "common/knobs.rs"]
mod knobs;
#[path = "common/synthetic.rs"]
mod synthetic;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bound::{Calls, DIRECTOR_MAX_THREADS, planned_rollout, rollout_bound};
use graph::virtual_makespan;
use knobs::{apply_latencies, env_number, latencies_from_env};
use kubosh_artifacts::blobstore::LocalBlobstore;
use kubosh_artifacts::release::Release;
use kubosh_cloud::{CloudLimits, PacedCloud, Pacer};
use kubosh_core::plan::bound::{
    PhysicalTerms, StageTerms, compile_lower_bound, phase_lower_bound, physical_lower_bound,
};
use kubosh_core::plan::changes::Requests;
use kubosh_core::plan::desired::StemcellInfo;
use kubosh_core::plan::rollout::InstanceInput;
use kubosh_engine::pool::ReadyOrder;
use kubosh_engine::state::{DeploymentState, MemoryStore};
use kubosh_engine::{DeployRequest, Engine, EngineConfig, NoEvents, StemcellSource};
use kubosh_sim::{LiteralRenderer, SimAgents, SimCloud, SimConfig};
use kubosh_transport::agent::ClientOptions;
use serde_json::{Value, json};
use synthetic::{Synthetic, package_name, synthetic_release};

const SIZES: [usize; 4] = [10, 100, 1_000, 10_000];

/// Seconds per call; every other method answers at once.
const DEFAULT_LATENCIES: [(&str, u64); 10] = [
    ("create_vm", 30),
    ("delete_vm", 10),
    ("create_disk", 5),
    ("attach_disk", 5),
    ("detach_disk", 5),
    ("drain", 1),
    ("stop", 2),
    ("apply", 5),
    ("start", 2),
    ("run_script", 1),
];

/// (group, share of the instances in percent, AZs, persistent disk in MiB).
const GROUPS: [(&str, usize, &[&str], u64); 3] = [
    ("router", 10, &["z1"], 0),
    ("api", 20, &["z1", "z2"], 1024),
    ("cell", 70, &["z1", "z2", "z3"], 10_240),
];

/// Latencies in milliseconds by method, the watch time's minimum, and the engine's knobs
/// that shape the deploy's duration.
struct Timing {
    /// The simulated calls' latencies and the watch time's minimum.
    calls: Calls,
    /// `get_task` polling (`ClientOptions::poll_interval`, the Director's 1 s).
    poll_ms: u64,
    /// `create_vm` takes from its latency (the least) to this many milliseconds, each call
    /// its own (`kubosh_sim::spread_latency`); `BENCH_CREATE_VM_MOST` (seconds) changes it.
    create_vm_most: u64,
}

/// `create_vm` takes 30 s (`DEFAULT_LATENCIES`) to this many seconds.
const CREATE_VM_MOST_SECS: u64 = 60;

/// The release's package graph: this many packages (`graph::random_graph`, drawn with
/// `PACKAGE_SEED`), and how many each group's job lists (their dependencies come with them).
const PACKAGES: usize = 50;
const PACKAGE_SEED: u64 = 29;
const JOB_PACKAGES: [(&str, usize); 3] = [("router", 3), ("api", 6), ("cell", 10)];

/// The cloud config's compilation workers.
const COMPILATION_WORKERS: usize = 6;

/// The rate-limited cloud's scenario: `create_vm` limited to this many calls a second (bursts
/// of as many), refused beyond it as EC2 refuses them, `RATE_LIMITED_SIZE` instances.
const RATE_LIMIT: u32 = 10;
const RATE_LIMITED_SIZE: usize = 1_000;

impl Timing {
    fn from_env() -> Timing {
        let latencies = latencies_from_env(
            DEFAULT_LATENCIES
                .iter()
                .map(|(m, s)| (m.to_string(), s * 1000)),
        );
        Timing {
            calls: Calls {
                latencies,
                watch_min_ms: env_number("BENCH_WATCH_MIN_MS", 1000),
            },
            poll_ms: env_number("BENCH_POLL_MS", 1000),
            create_vm_most: env_number("BENCH_CREATE_VM_MOST", CREATE_VM_MOST_SECS) * 1000,
        }
    }

    fn apply_to(&self, cloud: &SimCloud, agents: &SimAgents) {
        apply_latencies(&self.calls.latencies, cloud, agents);
        let (least, most) = self.create_vm_range();
        cloud.set_latency_range("create_vm", least, most);
    }

    /// What a `create_vm` takes, least and most.
    fn create_vm_range(&self) -> (Duration, Duration) {
        let least = self.calls.ms("create_vm");
        (
            Duration::from_millis(least),
            Duration::from_millis(self.create_vm_most.max(least)),
        )
    }

    /// "Creating missing vms" of `n` VMs as the Director's schedule has them: each VM's
    /// `create_vm` as the simulated cloud's `n` first calls take it, `max_threads` at a time.
    fn director_missing_vms(&self, n: usize) -> u64 {
        let (least, most) = self.create_vm_range();
        let rest = self.calls.missing_vm() - self.calls.ms("create_vm");
        let vms: Vec<u64> = (1..=n as u64)
            .map(|k| kubosh_sim::spread_latency(least, most, k).as_millis() as u64 + rest)
            .collect();
        phase_lower_bound(&vms, DIRECTOR_MAX_THREADS)
    }

    /// The first update of an instance whose VM was just made: its disk (when it has one)
    /// created, attached and mounted, then apply, pre-start, start, watch, post-start.
    fn first_update(&self, disk: bool) -> u64 {
        let disk_calls = if disk {
            self.calls.sum(&[
                "create_disk",
                "attach_disk",
                "add_persistent_disk",
                "mount_disk",
            ])
        } else {
            0
        };
        self.calls.sum(&["prepare"]) + disk_calls + self.calls.start_and_watch()
    }

    /// An update in place (configuration): prepare, pre-stop, drain, stop, post-stop, then
    /// as a first update without the disk.
    fn update_in_place(&self) -> u64 {
        self.calls
            .sum(&["prepare", "run_script", "drain", "stop", "run_script"])
            + self.calls.start_and_watch()
    }
}

/// Three AZs, a /16 of a manual network in each, two compilation workers.
fn cloud_config() -> Value {
    let subnet = |n: u8| {
        json!({
            "range": format!("10.{n}.0.0/16"), "gateway": format!("10.{n}.0.1"),
            "az": format!("z{n}"), "reserved": [format!("10.{n}.0.2 - 10.{n}.0.9")],
            "cloud_properties": {"subnet": format!("s{n}")},
        })
    };
    json!({
        "azs": [{"name": "z1"}, {"name": "z2"}, {"name": "z3"}],
        "vm_types": [{"name": "small", "cloud_properties": {"cpu": 2}}],
        "networks": [{"name": "default", "type": "manual",
                      "subnets": [subnet(1), subnet(2), subnet(3)]}],
        "compilation": {"workers": COMPILATION_WORKERS, "network": "default", "az": "z1", "vm_type": "small",
                        "reuse_compilation_vms": true},
    })
}

/// How many instances each group gets out of `total`.
fn group_sizes(total: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = GROUPS
        .iter()
        .map(|(_, share, _, _)| (total * share / 100).max(1))
        .collect();
    let rest: usize = sizes[..sizes.len() - 1].iter().sum();
    if let Some(last) = sizes.last_mut() {
        *last = total.saturating_sub(rest).max(1);
    }
    sizes
}

fn manifest(total: usize, greeting: &str, watch_min_ms: u64) -> Value {
    let watch = format!("{watch_min_ms}-600000");
    let groups: Vec<Value> = GROUPS
        .iter()
        .zip(group_sizes(total))
        .map(|((name, _, azs, disk), instances)| {
            let mut g = json!({
                "name": name, "instances": instances, "azs": azs, "vm_type": "small",
                "stemcell": "default", "networks": [{"name": "default"}],
                "jobs": [{"name": name, "release": "synthetic",
                          "properties": {"greeting": greeting}}],
            });
            if *disk > 0 {
                g["persistent_disk"] = json!(disk);
            }
            g
        })
        .collect();
    json!({
        "name": "bench",
        "releases": [{"name": "synthetic", "version": "1"}],
        "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
        "update": {"canaries": 1, "max_in_flight": "10%",
                   "canary_watch_time": watch, "update_watch_time": watch},
        "instance_groups": groups,
    })
}

/// One simulated world and an engine wired to it.
struct World {
    _dir: tempfile::TempDir,
    cloud: Arc<SimCloud>,
    /// How the engine paces the cloud ([`PacedCloud`]: nothing of its own caps it).
    pacer: Arc<Pacer>,
    agents: Arc<SimAgents>,
    engine: Engine,
    store: MemoryStore,
    release: Arc<Release>,
    stemcell: StemcellSource,
}

impl World {
    fn new(workload: &Synthetic, timing: &Timing) -> World {
        let dir = tempfile::tempdir().expect("a tempdir");
        let blobstore =
            Arc::new(LocalBlobstore::new(dir.path().join("blobstore")).expect("a blobstore"));
        let (cloud, agents) = kubosh_sim::pair(SimConfig {
            record_calls: false,
            blobstore: Some(blobstore.clone()),
            ..SimConfig::default()
        });
        timing.apply_to(&cloud, &agents);
        for (i, secs) in workload.graph.seconds.iter().enumerate() {
            agents.set_compile_latency(&package_name(i), Duration::from_secs(*secs));
        }
        let store = MemoryStore::new();
        let pacer = Arc::new(Pacer::new(CloudLimits::default()));
        let engine = Engine {
            cloud: Arc::new(PacedCloud::new(cloud.clone(), pacer.clone())),
            agents: agents.clone(),
            blobstore,
            renderer: Arc::new(LiteralRenderer),
            store: Arc::new(store.clone()),
            locks: Arc::new(kubosh_kube::lock::FileLocks::new(dir.path().join("locks"))),
            events: Arc::new(NoEvents),
            cancel: Default::default(),
            config: EngineConfig {
                agent_options: ClientOptions {
                    poll_interval: Duration::from_millis(timing.poll_ms),
                    ..ClientOptions::default()
                },
                ..EngineConfig::default()
            },
            named_clouds: Default::default(),
        };
        let stemcell = StemcellSource {
            info: StemcellInfo {
                name: "bosh-sim-ubuntu-jammy".into(),
                version: "1.0".into(),
                os: "ubuntu-jammy".into(),
            },
            image_path: dir.path().join("image"),
            cloud_properties: Default::default(),
        };
        World {
            _dir: dir,
            cloud,
            pacer,
            agents,
            engine,
            store,
            release: workload.release.clone(),
            stemcell,
        }
    }

    fn request(&self, manifest: Value) -> DeployRequest {
        DeployRequest {
            releases: vec![self.release.clone()],
            stemcells: vec![self.stemcell.clone()],
            requests: Requests::default(),
            action: None,
            ..DeployRequest::validated(&manifest, &cloud_config()).unwrap_or_else(|p| panic!("{p}"))
        }
    }

    fn calls(&self) -> u64 {
        self.cloud.counts().values().sum::<u64>() + self.agents.counts().values().sum::<u64>()
    }

    fn reset_calls(&self) {
        self.cloud.reset_calls();
        self.agents.reset_calls();
    }
}

/// `state`'s instances as the rollout takes them (`changed` says which, by uuid).
fn rollout_instances(
    state: &DeploymentState,
    changed: &dyn Fn(&str) -> bool,
) -> Vec<InstanceInput<String>> {
    (state.instances.values())
        .map(|i| InstanceInput {
            key: i.group.clone(),
            az: i.az.clone(),
            bootstrap: i.bootstrap,
            sort_key: i.name(),
            changed: changed(&i.uuid),
        })
        .collect()
}

/// When group `group`'s packages can be ready at the earliest: a worker's VM, then the
/// critical path of the packages its job needs, a worker for each.
fn packages_ready(workload: &Synthetic, timing: &Timing, group: &str) -> u64 {
    let graph = workload.needed_graph(|job| job == group);
    let durations: Vec<u64> = graph.seconds.iter().map(|s| s * 1000).collect();
    timing.calls.missing_vm()
        + compile_lower_bound(&durations, &graph.depends_on, usize::MAX)
            .expect("a sound package graph")
}

/// The Director's compilation on `workers` (issue 29, item 4), run in virtual time: a
/// worker's VM, then the packages the jobs need scheduled as its queue does (the package
/// that became ready last goes first: `ReadyOrder::Lifo`), each compile its latency.
async fn director_compilation(workload: &Synthetic, timing: &Timing, workers: usize) -> u64 {
    let graph = workload.needed_graph(|_| true);
    let priorities = vec![0; graph.seconds.len()];
    let compiling = virtual_makespan(&graph, workers, &priorities, ReadyOrder::Lifo).await;
    timing.calls.missing_vm() + compiling
}

/// Whether each group of [`GROUPS`] has a persistent disk, by name.
fn groups_with_disks() -> BTreeMap<&'static str, bool> {
    GROUPS
        .iter()
        .map(|(name, _, _, disk)| (*name, *disk > 0))
        .collect()
}

/// A fresh deploy's physical bound: every VM (and a worker per package) made at once (or
/// as fast as `vm_rate`, `create_vm` calls per second, lets), a group's packages ready
/// after a worker's VM and the package graph's critical path, its disks made meanwhile,
/// post-deploy everywhere at once after the rollout.
fn fresh_physical_bound(
    manifest: &Value,
    state: &DeploymentState,
    workload: &Synthetic,
    timing: &Timing,
    vm_rate: Option<u64>,
) -> u64 {
    let rollout = planned_rollout(manifest, true, &rollout_instances(state, &|_| true));
    physical_lower_bound(
        &rollout,
        // A new instance's disk needs only its VM: made, attached and mounted meanwhile.
        |_: &String| timing.first_update(false),
        |group| packages_ready(workload, timing, group),
        PhysicalTerms {
            vm: timing.calls.missing_vm(),
            vms: state.instances.len() + workload.graph.seconds.len(),
            vm_rate: vm_rate.map(|r| r * 1000),
            post_deploy: timing.calls.ms("run_script"),
            ..PhysicalTerms::default()
        },
    )
}

/// The rate-limited cloud's fresh deploy: what the pacing did.
struct RateLimited {
    instances: usize,
    virtual_secs: f64,
    physical_secs: f64,
    calls: u64,
    refused: u64,
    throughput: f64,
}

/// A runtime on a paused clock: every simulated latency passes in no real time.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

fn run_rate_limited(total: usize, workload: &Synthetic, timing: &Timing) -> RateLimited {
    paused_runtime().block_on(async {
        let world = World::new(workload, timing);
        world
            .cloud
            .set_rate_limit("create_vm", f64::from(RATE_LIMIT), RATE_LIMIT);
        let manifest = manifest(total, "Hello", timing.calls.watch_min_ms);
        let (virtual_secs, _, report) =
            measure(&world.engine, &world.request(manifest.clone())).await;
        assert_eq!(report.updated.len(), total, "every instance is created");
        let state = world.store.snapshot();
        let physical = fresh_physical_bound(
            &manifest,
            &state,
            workload,
            timing,
            Some(u64::from(RATE_LIMIT)),
        );
        // The instances' VMs (compilation's workers ask before and during them).
        let agents: BTreeSet<String> = (state.instances.values())
            .filter_map(|i| Some(i.vm.as_ref()?.agent_id.clone()))
            .collect();
        let instances: Vec<tokio::time::Instant> =
            (world.cloud.rate_limit_admitted("create_vm").into_iter())
                .filter(|(_, agent)| agents.contains(agent))
                .map(|(at, _)| at)
                .collect();
        let span = match (instances.first(), instances.last()) {
            (Some(first), Some(last)) => last.duration_since(*first).as_secs_f64(),
            _ => 0.0,
        };
        let stats = world.pacer.stats();
        let create_vm = stats.get("create_vm").cloned().unwrap_or_default();
        RateLimited {
            instances: total,
            virtual_secs,
            physical_secs: physical as f64 / 1000.0,
            calls: create_vm.calls,
            refused: world.cloud.rate_limited("create_vm"),
            throughput: (instances.len().saturating_sub(1)) as f64 / span.max(f64::MIN_POSITIVE),
        }
    })
}

/// One size's numbers.
struct Row {
    instances: usize,
    fresh: Measured,
    update: Measured,
    plan_secs: f64,
    noop_secs: f64,
    noop_calls: u64,
    noop_calls_without_health: u64,
    resurrection: Measured,
}

/// One deploy: virtual duration, its bounds (the Director's schedule's, the physical one),
/// real time, instances updated.
struct Measured {
    virtual_secs: f64,
    bound_secs: f64,
    physical_secs: f64,
    real_secs: f64,
    updated: usize,
}

impl Measured {
    /// Over the Director's schedule (the stages in sequence, the engine's caps).
    fn ratio(&self) -> f64 {
        self.virtual_secs / self.bound_secs.max(f64::MIN_POSITIVE)
    }

    /// How many times faster than the Director's schedule.
    fn speedup(&self) -> f64 {
        self.bound_secs / self.virtual_secs.max(f64::MIN_POSITIVE)
    }

    /// Over the physical bound (`plan::bound::physical_lower_bound`).
    fn physical_ratio(&self) -> f64 {
        self.virtual_secs / self.physical_secs.max(f64::MIN_POSITIVE)
    }

    fn cpu_ms_per_instance(&self) -> f64 {
        self.real_secs * 1000.0 / self.updated.max(1) as f64
    }
}

/// Runs `deploy` on the engine, measuring virtual and real time.
async fn measure(
    engine: &Engine,
    request: &DeployRequest,
) -> (f64, f64, kubosh_engine::deploy::DeployReport) {
    let virtual_start = tokio::time::Instant::now();
    let real_start = std::time::Instant::now();
    let report = engine
        .deploy(request)
        .await
        .unwrap_or_else(|e| panic!("deploy failed: {e}"));
    (
        virtual_start.elapsed().as_secs_f64(),
        real_start.elapsed().as_secs_f64(),
        report,
    )
}

fn run_size(total: usize, workload: &Synthetic, timing: &Timing) -> Row {
    paused_runtime().block_on(async {
        let world = World::new(workload, timing);
        let disk_of = groups_with_disks();

        // A fresh deploy.
        let fresh_manifest = manifest(total, "Hello", timing.calls.watch_min_ms);
        let request = world.request(fresh_manifest.clone());
        let (virtual_secs, real_secs, report) = measure(&world.engine, &request).await;
        assert_eq!(report.updated.len(), total, "every instance is created");
        let state = world.store.snapshot();
        // The Director's schedule on the same world: its stages one after another, its
        // compilation queue on the cloud config's two workers, VMs `max_threads` at a
        // time, each instance's disk made in its update.
        let stages = StageTerms {
            prepare: 0,
            compile: director_compilation(workload, timing, COMPILATION_WORKERS).await,
            missing_vms: timing.director_missing_vms(total),
            post_deploy: timing.calls.post_deploy(total),
        };
        let bound = rollout_bound(
            &fresh_manifest,
            true,
            &rollout_instances(&state, &|_| true),
            |group| timing.first_update(disk_of.get(group).copied().unwrap_or(false)),
            stages,
        );
        let physical = fresh_physical_bound(&fresh_manifest, &state, workload, timing, None);
        let fresh = Measured {
            virtual_secs,
            bound_secs: bound as f64 / 1000.0,
            physical_secs: physical as f64 / 1000.0,
            real_secs,
            updated: report.updated.len(),
        };

        // A property of every group changes: each instance is updated in place.
        let changed_manifest = manifest(total, "Howdy", timing.calls.watch_min_ms);
        let changed = world.request(changed_manifest.clone());
        let plan_start = std::time::Instant::now();
        let plan = world.engine.prepare(&changed).await.expect("plan").report();
        let plan_secs = plan_start.elapsed().as_secs_f64();
        assert!(plan.plan.iter().all(|p| p.action == "update"), "{plan}");
        let (virtual_secs, real_secs, report) = measure(&world.engine, &changed).await;
        assert_eq!(report.updated.len(), total, "every instance is updated");
        let bound = rollout_bound(
            &changed_manifest,
            false,
            &rollout_instances(&world.store.snapshot(), &|_| true),
            |_| timing.update_in_place(),
            StageTerms {
                post_deploy: timing.calls.post_deploy(total),
                ..StageTerms::default()
            },
        );
        let rollout = planned_rollout(
            &changed_manifest,
            false,
            &rollout_instances(&world.store.snapshot(), &|_| true),
        );
        let physical = physical_lower_bound(
            &rollout,
            |_: &String| timing.update_in_place(),
            |_| 0,
            PhysicalTerms {
                post_deploy: timing.calls.ms("run_script"),
                ..PhysicalTerms::default()
            },
        );
        let update = Measured {
            virtual_secs,
            bound_secs: bound as f64 / 1000.0,
            physical_secs: physical as f64 / 1000.0,
            real_secs,
            updated: report.updated.len(),
        };

        // The same again: without heartbeats every agent is asked once; with them nothing
        // is called.
        world.reset_calls();
        let (_, _, report) = measure(&world.engine, &changed).await;
        assert!(report.noop);
        let noop_calls_without_health = world.calls();
        world.reset_calls();
        let mut with_health = world.engine.clone();
        with_health.config.health = Some(world.agents.clone());
        let (_, noop_secs, report) = measure(&with_health, &changed).await;
        assert!(report.noop);
        let noop_calls = world.calls();
        // Recreates' bound adds up each instance's calls: their `create_vm` at its least.
        world
            .cloud
            .set_latency("create_vm", timing.create_vm_range().0);
        let resurrection = resurrect(
            &world,
            &with_health,
            &changed,
            &changed_manifest,
            timing,
            &disk_of,
        )
        .await;

        Row {
            instances: total,
            fresh,
            update,
            plan_secs,
            noop_secs,
            noop_calls,
            noop_calls_without_health,
            resurrection,
        }
    })
}

/// How long the controller takes to notice a silent agent, at most: the health monitor's
/// agent timeout, then the health watch's next check (every 5 s) and the one after it (the
/// resurrector lets one check pass, so agents that died together count together).
const DETECTION: (u64, u64) = (60_000, 10_000);

/// 1 % of the agents (at least one, spread over the groups) die at once; the resurrector's
/// deploy (`--fix`, heartbeats proving them silent) gives them new VMs on their disks. The
/// time from their death to the deploy's end — detection (agent timeout plus the health
/// watch's check interval) and the deploy — over its bound: the agent timeout, then the
/// rollout of just those instances (canaries, `max_in_flight`, groups in order), each
/// instance's `Tᵢ` a recreate's calls ([`Timing::recreate`]), then post-deploy.
async fn resurrect(
    world: &World,
    engine: &Engine,
    request: &DeployRequest,
    manifest: &Value,
    timing: &Timing,
    disk_of: &BTreeMap<&str, bool>,
) -> Measured {
    let state = world.store.snapshot();
    let mut records: Vec<_> = state.instances.values().collect();
    records.sort_by_key(|r| r.name());
    let dead: std::collections::BTreeSet<String> = (records.iter())
        .step_by(100)
        .map(|r| r.uuid.clone())
        .collect();
    for record in records.iter().filter(|r| dead.contains(&r.uuid)) {
        let agent = &record.vm.as_ref().expect("a VM").agent_id;
        (world.agents)
            .set_unresponsive(agent, true)
            .expect("the agent exists");
    }
    let fix = DeployRequest {
        requests: Requests {
            fix: true,
            ..request.requests
        },
        ..request.clone()
    };
    let (virtual_secs, real_secs, report) = measure(engine, &fix).await;
    assert_eq!(
        report.updated.len(),
        dead.len(),
        "every dead instance is recreated"
    );
    let recreate = |group: &str| {
        timing
            .calls
            .recreate(disk_of.get(group).copied().unwrap_or(false))
    };
    let dead_ones = rollout_instances(&state, &|uuid| dead.contains(uuid));
    let bound = DETECTION.0
        + rollout_bound(
            manifest,
            false,
            &dead_ones,
            recreate,
            StageTerms {
                post_deploy: timing.calls.post_deploy(state.instances.len()),
                ..StageTerms::default()
            },
        );
    let physical = DETECTION.0
        + physical_lower_bound(
            &planned_rollout(manifest, false, &dead_ones),
            |group: &String| recreate(group),
            |_| 0,
            PhysicalTerms {
                post_deploy: timing.calls.ms("run_script"),
                ..PhysicalTerms::default()
            },
        );
    Measured {
        virtual_secs: virtual_secs + (DETECTION.0 + DETECTION.1) as f64 / 1000.0,
        bound_secs: bound as f64 / 1000.0,
        physical_secs: physical as f64 / 1000.0,
        real_secs,
        updated: report.updated.len(),
    }
}

fn main() {
    let timing = Timing::from_env();
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .ok()
        .map(|s| {
            s.split(',')
                .map(|n| n.trim().parse().expect("BENCH_SIZES: numbers"))
                .collect()
        })
        .unwrap_or_else(|| SIZES.to_vec());
    let workload = synthetic_release(PACKAGES, PACKAGE_SEED, &JOB_PACKAGES);
    let latencies: Vec<String> = (timing.calls.latencies.iter())
        .map(|(m, ms)| format!("{m} {}s", *ms as f64 / 1000.0))
        .collect();
    println!(
        "latencies: {} (create_vm up to {} s, each call its own); watch min {} s; get_task \
         every {} s; the cloud paced by its answers (no limit configured); canaries 1, \
         max_in_flight 10%",
        latencies.join(", "),
        timing.create_vm_most / 1000,
        timing.calls.watch_min_ms as f64 / 1000.0,
        timing.poll_ms as f64 / 1000.0,
    );
    let seconds = &workload.graph.seconds;
    let needed = workload.needed_graph(|_| true);
    let critical = compile_lower_bound(&needed.seconds, &needed.depends_on, usize::MAX)
        .expect("a sound package graph");
    let needed_count = needed.seconds.iter().filter(|s| **s > 0).count();
    let needs: Vec<String> = (workload.needs.iter())
        .map(|(job, needs)| format!("{job} {}", needs.len()))
        .collect();
    println!(
        "release: {} packages (seed {PACKAGE_SEED}), compile_package {}–{} s each; the jobs \
         need {needed_count} of them, {} s in all, critical path {critical} s; each group's \
         job: {}; {COMPILATION_WORKERS} compilation workers",
        seconds.len(),
        seconds.iter().min().unwrap_or(&0),
        seconds.iter().max().unwrap_or(&0),
        needed.seconds.iter().sum::<u64>(),
        needs.join(", "),
    );
    println!(
        "groups: {}\n",
        GROUPS
            .iter()
            .map(|(n, share, azs, disk)| format!(
                "{n} {share}% over {} AZ{}{}",
                azs.len(),
                if azs.len() > 1 { "s" } else { "" },
                if *disk > 0 { ", disk" } else { "" }
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    println!(
        "{:>9} | {:>35} | {:>35} | {:>8} | {:>16} | {:>31}",
        "", "fresh deploy", "update (property)", "plan", "no-op redeploy", "1 % of agents die"
    );
    println!(
        "{:>9} | {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} {:>8} | {:>8} | {:>8} {:>7} | {:>4} {:>8} {:>8} {:>8}",
        "instances",
        "virtual",
        "÷phys",
        "×Dir",
        "ms/inst",
        "virtual",
        "÷phys",
        "÷Dir",
        "ms/inst",
        "real",
        "real",
        "calls",
        "dead",
        "virtual",
        "÷phys",
        "÷Dir"
    );
    for n in sizes {
        let row = run_size(n, &workload, &timing);
        println!(
            "{:>9} | {:>7.0}s {:>8.3} {:>8.3} {:>8.2} | {:>7.0}s {:>8.3} {:>8.3} {:>8.2} | {:>7.2}s | {:>6.0}ms {:>7} | {:>4} {:>7.0}s {:>8.3} {:>8.3}",
            row.instances,
            row.fresh.virtual_secs,
            row.fresh.physical_ratio(),
            row.fresh.speedup(),
            row.fresh.cpu_ms_per_instance(),
            row.update.virtual_secs,
            row.update.physical_ratio(),
            row.update.ratio(),
            row.update.cpu_ms_per_instance(),
            row.plan_secs,
            row.noop_secs * 1000.0,
            format!("{} ({})", row.noop_calls, row.noop_calls_without_health),
            row.resurrection.updated,
            row.resurrection.virtual_secs,
            row.resurrection.physical_ratio(),
            row.resurrection.ratio(),
        );
    }
    let limited = run_rate_limited(
        env_number("BENCH_RATE_LIMITED_SIZE", RATE_LIMITED_SIZE as u64) as usize,
        &workload,
        &timing,
    );
    println!(
        "\nrate-limited cloud (create_vm {RATE_LIMIT}/s, bursts of {RATE_LIMIT}, refused beyond; \
         kubosh not told): {} instances fresh in {:.0}s virtual, ÷phys {:.3}; {} create_vm \
         calls, {} refused ({:.1} %); Creating missing vms at {:.2}/s ({:.0} % of the limit)",
        limited.instances,
        limited.virtual_secs,
        limited.virtual_secs / limited.physical_secs.max(f64::MIN_POSITIVE),
        limited.calls,
        limited.refused,
        100.0 * limited.refused as f64 / limited.calls.max(1) as f64,
        limited.throughput,
        100.0 * limited.throughput / f64::from(RATE_LIMIT),
    );
    println!(
        "\nvirtual: the deploy's duration on the simulated clock; ÷phys: that over \
         plan::bound's physical lower bound (real dependencies, the user's constraints, the \
         cloud's limits, nothing of the engine's); ×Dir: how many times faster than the \
         Director's schedule on the same world (stages in sequence, its LIFO compilation \
         queue on the cloud config's workers, max_threads 32, AZ by AZ, disks in the update), ÷Dir: \
         over that schedule; ms/inst: real time per instance updated; plan: \
         Engine::plan of the update; no-op calls: with heartbeats (without); 1 % of agents \
         die: from their death (agent timeout 60 s + two of the health watch's 5 s checks) to the \
         resurrector's deploy's end, over the agent timeout + the rollout of their recreates \
         (create_vm 30 s each there)."
    );
}
