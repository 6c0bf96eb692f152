//! Benchmark: the Deployment controller (`kubosh_kube::controller`) at scale, against a real
//! kube-apiserver + etcd (`kubosh_devenv::ControlPlane`), with the simulated cloud and agents
//! (`kubosh_sim`) and the controller running in this process, wired as `kubosh controller`
//! wires it (`kubosh_kube::controller::serve`): no client-side request budget (as
//! `kubosh controller` by default; `BENCH_KUBE_QPS` sets one), `--max-deploys 32`, `--agent-timeout 10s` (the health watch, the
//! deploys' `health_window` and the resurrector's settle check as `kubosh controller` derives
//! them), heartbeats from the agents (the simulated agents' `AgentHealth`, with a killed
//! agent last heard at its death: [`Heartbeats`]), no leader election, releases by
//! reference, no cloud for the artifact controllers (`ArtifactContext::cloud: None`).
//!
//! `cargo bench --bench controller` deploys N deployments of M instances each, each in a
//! namespace of its own (the controller watches all namespaces), each namespace with its
//! `CloudConfig` (its own subnets: the simulated cloud refuses an address twice), a
//! `Release` of the example release `examples/releases/hello` and a `Stemcell`, the same
//! `file://` tarballs for all. `BENCH_ONE_NAMESPACE=1` puts them all in one namespace
//! instead (one director: shared IP and DNS registries, one `CloudConfig`, `Release` and
//! `Stemcell`); the bench stops as soon as a deployment is Stalled. Each deployment has two
//! instance groups, `web`
//! (60% of M, no disk) and `db` (40%, a 1 GiB persistent disk), both over two AZs, with
//! `canaries: 1`, `max_in_flight: 20%`. The simulated latencies are real time (the tokio
//! clock cannot be paused with a real apiserver): `create_vm` 200 ms, `delete_vm` 100 ms,
//! disks 50 ms, `compile_package` 500 ms, `apply` 50 ms, `stop`/`start` 20 ms, `drain` and
//! each `run_script` 10 ms, watch times' minimum 500 ms, `get_task` polled every 50 ms. For
//! each size, in a process of its own (so peak RSS and the apiserver are the size's own),
//! it prints:
//!
//! 1. converge: from applying the N `Deployment`s until every one is Ready for its
//!    generation, divided by the engine's own bound: `ceil(N / max_deploys) × T₁`, where
//!    `T₁` is the time one deployment of M instances takes through `Engine::deploy` alone (a
//!    `MemoryStore`, a simulated cloud of its own with the same latencies), measured first
//!    in the same process. Both the fresh deploy and the update (a property of every group changed) are
//!    measured that way; and, with a request budget, divided by the floor it sets (the
//!    controller's requests, without the bench's own, ÷ qps);
//! 2. API writes per instance updated: requests the apiserver served with verb POST, PUT,
//!    PATCH, APPLY (server-side apply) or DELETE during the update (its own
//!    `apiserver_request_total`, scraped from `/metrics` through the admin client), minus
//!    the bench's own N patches, ÷ N × M; target ≤ 3. The "net" figure also takes off what
//!    the apiserver writes by itself (its identity Lease), at the write rate seen idle;
//! 3. peak RSS of the bench process (`getrusage` `ru_maxrss`): the controller, the
//!    simulated cloud and agents, the engine-alone reference run, the bench; and of a
//!    process of its own that deploys the same N × M through `Engine::deploy` alone
//!    (MemoryStores, the same simulated world, `max_deploys` at once, fresh then update):
//!    the difference is the controller's share (its client, caches, status and Events);
//!    goal ≤ 256 MiB for that share;
//! 4. apiserver requests per second once converged with nothing changing, all verbs, over
//!    60 s (`BENCH_IDLE_SECS`), without the bench's own `/metrics` scrapes (what one scrape
//!    adds is measured at start); goal ≤ 1;
//! 5. resurrection, after the update: 1 % of the instances (at least one; every 100th by
//!    namespace and name, the place moving within each stride so both groups lose some)
//!    lose their agent at once, the controller running with BOSH's and its own default
//!    agent timeout (60 s; `BENCH_AGENT_TIMEOUT_SECS=10` is the stress setting, where the
//!    controller's own work weighs six times as much in the ratio). From the deaths until every killed `Instance` is `Running`
//!    on a new VM CID (and until its deployment is Ready for its generation again), seen
//!    through watches on `Instance`s, `Deployment`s and Events, divided by the bound: the
//!    agent timeout, plus the health watch's settle check (one `check_every(agent
//!    timeout)`: the resurrector asks for a repair one check after it saw an instance down),
//!    plus the deploys of the deployments that lost instances, `max_deploys` at once
//!    (`phase_lower_bound`), each `rollout_lower_bound` of just its dead instances (canaries,
//!    `max_in_flight`, AZ phases, groups in order), each instance a recreate's calls
//!    (`delete_vm`, `create_vm`, `set_vm_metadata`, `ping`, for `db` `detach_disk`,
//!    `attach_disk`, `add_persistent_disk`, `mount_disk`, then `update_settings`, `apply`,
//!    pre-start, `start`, the watch minimum, post-start), then post-deploy on each of its
//!    instances; target ≤ 1.2. The apiserver's writes during the phase (total, per killed
//!    instance) and the writes the watches saw to healthy objects: `Instance`s not killed,
//!    `Deployment`s that lost none, and Events about either (target 0). Peak RSS (3) is
//!    taken after this phase.
//!
//! `BENCH_SIZES` (`20x50`; e.g. `20x50,100x100`), `BENCH_ONE_NAMESPACE`,
//! `BENCH_MAX_DEPLOYS` (32), `BENCH_KUBE_QPS`/`BENCH_KUBE_BURST` (none; e.g. 20/30), `BENCH_LATENCIES`
//! (`create_vm=0.2,apply=0.05`, seconds), `BENCH_WATCH_MIN_MS` (500), `BENCH_POLL_MS` (50),
//! `BENCH_IDLE_SECS` (60), `BENCH_AGENT_TIMEOUT_SECS` (60) and `BENCH_LOG` (a tracing
//! filter; `warn`, without kube_client's retries while the apiserver starts) change it.
//! Needs `KUBOSH_BIN_DIR` (etcd, kube-apiserver: `tools/testbins.sh` prints it).

/// The controller's allocator, as the `kubosh` binary has it (`src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "common/bound.rs"]
mod bound;
#[path = "common/knobs.rs"]
mod knobs;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bound::{Calls, rollout_bound};
use futures::{FutureExt, StreamExt};
use knobs::{apply_latencies, env_number, latencies_from_env};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::Reporter;
use kubosh_artifacts::blobstore::LocalBlobstore;
use kubosh_artifacts::release::Release;
use kubosh_core::plan::bound::{StageTerms, phase_lower_bound};
use kubosh_core::plan::rollout::InstanceInput;
use kubosh_devenv::ControlPlane;
use kubosh_engine::state::MemoryStore;
use kubosh_engine::{AgentHealth, DeployRequest, Engine, EngineConfig, NoEvents, StemcellSource};
use kubosh_kube::api::{
    Deployment, Instance, ProcessState, Release as ReleaseResource, Stemcell as StemcellResource,
};
use kubosh_kube::client::RequestBudget;
use kubosh_kube::controller::artifacts::ArtifactContext;
use kubosh_kube::controller::deployment::DeploymentContext;
use kubosh_kube::controller::health::{HealthWatch, check_every};
use kubosh_kube::controller::resurrection::{MeltdownPolicy, Resurrection};
use kubosh_kube::controller::run::{Scope, run};
use kubosh_kube::controller::status::is_ready;
use kubosh_kube::lock::{FileLocks, Process};
use kubosh_sim::{LiteralRenderer, SimAgents, SimCloud, SimConfig};
use kubosh_transport::agent::ClientOptions;
use serde_json::{Value, json};

/// The namespace of every deployment with `BENCH_ONE_NAMESPACE=1`.
const ONE_NAMESPACE: &str = "bench";

/// Milliseconds per call; every other method answers at once.
const DEFAULT_LATENCIES: [(&str, u64); 11] = [
    ("create_vm", 200),
    ("delete_vm", 100),
    ("create_disk", 50),
    ("attach_disk", 50),
    ("detach_disk", 50),
    ("compile_package", 500),
    ("drain", 10),
    ("stop", 20),
    ("apply", 50),
    ("start", 20),
    ("run_script", 10),
];

/// (group, share of M in percent, persistent disk in MiB).
const GROUPS: [(&str, usize, u64); 2] = [("web", 60, 0), ("db", 40, 1024)];

/// Verbs of `apiserver_request_total` that write.
const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// The knobs, from the environment.
#[derive(Debug, Clone)]
struct Settings {
    latencies: BTreeMap<String, u64>,
    watch_min_ms: u64,
    poll_ms: u64,
    max_deploys: usize,
    budget: RequestBudget,
    idle_secs: u64,
    /// All deployments in one namespace (else one namespace each).
    one_namespace: bool,
    /// `kubosh controller --agent-timeout`: how long an agent may be silent before its
    /// instance is `Unresponsive` (and resurrected).
    agent_timeout: Duration,
}

impl Settings {
    fn from_env() -> Settings {
        let latencies =
            latencies_from_env(DEFAULT_LATENCIES.iter().map(|(m, ms)| (m.to_string(), *ms)));
        let default_budget = RequestBudget::default();
        Settings {
            latencies,
            watch_min_ms: env_number("BENCH_WATCH_MIN_MS", 500),
            poll_ms: env_number("BENCH_POLL_MS", 50),
            max_deploys: env_number("BENCH_MAX_DEPLOYS", 32),
            budget: RequestBudget {
                qps: env_number("BENCH_KUBE_QPS", default_budget.qps),
                burst: env_number("BENCH_KUBE_BURST", default_budget.burst),
            },
            idle_secs: env_number("BENCH_IDLE_SECS", 60),
            one_namespace: env_number("BENCH_ONE_NAMESPACE", 0u8) != 0,
            agent_timeout: Duration::from_secs(env_number("BENCH_AGENT_TIMEOUT_SECS", 60)),
        }
    }

    /// The latencies and watch minimum, as the bounds take them.
    fn calls(&self) -> Calls {
        Calls {
            latencies: self.latencies.clone(),
            watch_min_ms: self.watch_min_ms,
        }
    }

    fn apply_to(&self, cloud: &SimCloud, agents: &SimAgents) {
        apply_latencies(&self.latencies, cloud, agents);
    }
}

/// Two AZs, a /16 of a manual network in each (room for 100 × 100 instances and the
/// compilation workers), two compilation workers. Namespaces are directors of their own
/// on one simulated cloud, which refuses an address twice: namespace `k`'s subnets are
/// `10.(2k+1)/16` and `10.(2k+2)/16`.
fn cloud_config(k: usize) -> Value {
    assert!(k < 127, "at most 127 namespaces");
    let subnet = |az: usize| {
        let n = 2 * k + az;
        json!({
            "range": format!("10.{n}.0.0/16"), "gateway": format!("10.{n}.0.1"),
            "az": format!("z{az}"), "reserved": [format!("10.{n}.0.2 - 10.{n}.0.9")],
            "cloud_properties": {"subnet": format!("s{n}")},
        })
    };
    json!({
        "azs": [{"name": "z1"}, {"name": "z2"}],
        "vm_types": [{"name": "small", "cloud_properties": {"cpu": 2}}],
        "networks": [{"name": "default", "type": "manual", "subnets": [subnet(1), subnet(2)]}],
        "compilation": {"workers": 2, "network": "default", "az": "z1", "vm_type": "small",
                        "reuse_compilation_vms": true},
    })
}

/// How many instances each group gets out of `total`.
fn group_sizes(total: usize) -> Vec<usize> {
    let first = (total * GROUPS[0].1 / 100).max(1);
    vec![first, total.saturating_sub(first).max(1)]
}

/// The manifest of one deployment of `total` instances (without its name when `name` is
/// `None`: a `Deployment` resource's name is the deployment's).
fn manifest(name: Option<&str>, total: usize, greeting: &str, watch_min_ms: u64) -> Value {
    let watch = format!("{watch_min_ms}-60000");
    let groups: Vec<Value> = GROUPS
        .iter()
        .zip(group_sizes(total))
        .map(|((group, _, disk), instances)| {
            let mut g = json!({
                "name": group, "instances": instances, "azs": ["z1", "z2"], "vm_type": "small",
                "stemcell": "default", "networks": [{"name": "default"}],
                "jobs": [{"name": "hello", "release": "hello",
                          "provides": {"greeter": {"as": format!("{group}_greeter")}},
                          "consumes": {"peers": "nil"},
                          "properties": {"hello": {"greeting": greeting}}}],
            });
            if *disk > 0 {
                g["persistent_disk"] = json!(disk);
            }
            g
        })
        .collect();
    let mut m = json!({
        "releases": [{"name": "hello", "version": "1.0.0"}],
        "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
        "update": {"canaries": 1, "max_in_flight": "20%",
                   "canary_watch_time": watch, "update_watch_time": watch},
        "instance_groups": groups,
    });
    if let Some(name) = name {
        m["name"] = json!(name);
    }
    m
}

fn deployment_name(i: usize) -> String {
    format!("bench-{i:03}")
}

/// The namespace of deployment `i`.
fn namespace_of(i: usize, settings: &Settings) -> String {
    if settings.one_namespace {
        ONE_NAMESPACE.into()
    } else {
        deployment_name(i)
    }
}

fn deployment_object(name: &str, total: usize, greeting: &str, watch_min_ms: u64) -> Value {
    json!({
        "apiVersion": "kubosh.io/v1alpha1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"manifest": manifest(None, total, greeting, watch_min_ms)},
    })
}

/// Peak resident set of this process, in MiB.
fn peak_rss_mib() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage struct.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    usage.ru_maxrss as f64 / 1024.0
}

/// `apiserver_request_total` by (verb, group/resource/subresource).
#[derive(Debug, Clone, Default)]
struct Requests(BTreeMap<(String, String), f64>);

impl Requests {
    fn parse(text: &str) -> Requests {
        let mut out: BTreeMap<(String, String), f64> = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let labels = parse_labels(labels);
            let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
            let mut what = match (get("group"), get("resource")) {
                (g, r) if g.is_empty() && r.is_empty() => "(non-resource)".to_string(),
                (g, r) if g.is_empty() => r,
                (g, r) => format!("{r}.{g}"),
            };
            let sub = get("subresource");
            if !sub.is_empty() {
                what = format!("{what}/{sub}");
            }
            *out.entry((get("verb"), what)).or_default() += value;
        }
        Requests(out)
    }

    /// What happened between `before` and `self`.
    fn since(&self, before: &Requests) -> Requests {
        Requests(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v - before.0.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v > 0.0)
                .collect(),
        )
    }

    fn total(&self) -> f64 {
        self.0.values().fold(0.0, |a, b| a + b)
    }

    fn writes(&self) -> f64 {
        (self.0.iter())
            .filter(|((verb, _), _)| WRITE_VERBS.contains(&verb.as_str()))
            .fold(0.0, |a, (_, v)| a + v)
    }

    /// The largest entries, `verb what count` each.
    fn top(&self, n: usize, only_writes: bool) -> String {
        let mut entries: Vec<(&(String, String), &f64)> = (self.0.iter())
            .filter(|((verb, _), _)| !only_writes || WRITE_VERBS.contains(&verb.as_str()))
            .collect();
        entries.sort_by(|a, b| b.1.total_cmp(a.1));
        entries
            .iter()
            .take(n)
            .map(|((verb, what), v)| format!("{verb} {what} {v:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `k="v",k2="v2"` (values without escaped quotes, as these labels are).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let Some((value, tail)) = after.split_once('"') else {
            break;
        };
        labels.insert(
            key.trim_start_matches(',').trim().to_string(),
            value.to_string(),
        );
        rest = tail;
    }
    labels
}

/// The apiserver's request counters now.
async fn scrape(admin: &kube::Client) -> Requests {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    let text = admin
        .request_text(request)
        .await
        .expect("the apiserver's /metrics");
    Requests::parse(&text)
}

/// Server-side applies `object` as the bench's user.
async fn apply<K>(api: &Api<K>, object: &Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object["metadata"]["name"].as_str().expect("a name");
    api.patch(
        name,
        &PatchParams::apply("bench-user"),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

/// Waits until all `count` deployments are Ready for their generation; how many times it
/// listed them (requests of the bench's own, not the controller's). Fails at once when one
/// is Stalled (it would not move without a change of its spec).
async fn wait_ready(api: &Api<Deployment>, count: usize, limit: Duration, what: &str) -> f64 {
    let start = Instant::now();
    let mut last_report = Instant::now();
    let mut lists = 0.0;
    loop {
        lists += 1.0;
        let list = api
            .list(&Default::default())
            .await
            .expect("list deployments");
        let ready = (list.items.iter())
            .filter(|d| {
                let conditions = d.status.as_ref().map(|s| &s.conditions[..]).unwrap_or(&[]);
                is_ready(conditions, d.metadata.generation)
            })
            .count();
        if ready == count && list.items.len() == count {
            return lists;
        }
        let stalled: Vec<String> = (list.items.iter())
            .filter_map(|d| {
                let c = (d.status.as_ref()?.conditions.iter()).find(|c| {
                    c.type_ == "Stalled"
                        && c.status == "True"
                        && c.observed_generation == d.metadata.generation
                })?;
                Some(format!("{}: {}", d.name_any(), c.message))
            })
            .collect();
        if !stalled.is_empty() {
            panic!(
                "{what}: {ready}/{count} Ready after {:.0} s, {} Stalled:\n{}",
                start.elapsed().as_secs_f64(),
                stalled.len(),
                stalled.join("\n")
            );
        }
        if start.elapsed() > limit {
            let stuck: Vec<String> = (list.items.iter())
                .filter(|d| {
                    let conditions = d.status.as_ref().map(|s| &s.conditions[..]).unwrap_or(&[]);
                    !is_ready(conditions, d.metadata.generation)
                })
                .take(5)
                .map(|d| {
                    let conditions = d.status.as_ref().map(|s| s.conditions.clone());
                    format!("{}: {conditions:?}", d.name_any())
                })
                .collect();
            panic!(
                "{what}: {ready}/{count} Ready after {limit:?}; not ready:\n{}",
                stuck.join("\n")
            );
        }
        if last_report.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "  {what}: {ready}/{count} Ready after {:.0} s",
                start.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the resource's status says Ready for its generation.
async fn wait_artifact<K>(
    api: &Api<K>,
    name: &str,
    conditions: impl Fn(&K) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let start = Instant::now();
    loop {
        let object = api.get(name).await.expect("get");
        if is_ready(&conditions(&object), object.meta().generation) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{name} not Ready: {:?}",
            conditions(&object)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A stemcell tarball the simulated cloud takes, `bosh-sim-ubuntu-jammy/1.0`.
fn stemcell_tarball(dir: &Path) -> std::path::PathBuf {
    let image = dir.join("image");
    std::fs::write(&image, vec![7u8; 64 * 1024]).expect("an image");
    let tarball = dir.join("stemcell.tgz");
    kubosh_artifacts::stemcell::create(
        &kubosh_artifacts::stemcell::CreateStemcellOptions {
            name: "bosh-sim-ubuntu-jammy".into(),
            version: "1.0".into(),
            operating_system: "ubuntu-jammy".into(),
            image: Some(image),
            stemcell_formats: vec!["sim-raw".into()],
            api_version: 3,
            cloud_properties: Default::default(),
        },
        &tarball,
    )
    .expect("a stemcell tarball");
    tarball
}

/// One size's numbers.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Row {
    deployments: usize,
    instances: usize,
    /// The engine alone, one deployment of M: fresh deploy and update (seconds).
    engine_fresh: f64,
    engine_update: f64,
    /// Store writes per instance of the engine-alone update (its `MemoryStore`).
    engine_writes_per_instance: f64,
    /// ceil(N / max_deploys).
    rounds: usize,
    fresh: f64,
    fresh_writes_per_instance: f64,
    update: f64,
    writes: f64,
    writes_net: f64,
    peak_rss_mib: f64,
    /// Peak RSS of the same N × M deployed through the engine alone (its own process).
    reference_rss_mib: f64,
    idle_rps: f64,
    idle_writes_per_sec: f64,
    scrape_cost: f64,
    wall: f64,
    /// Requests the controller made during the fresh deploy and the update (all verbs).
    fresh_requests: f64,
    update_requests: f64,
    /// 1 % of the agents dying at once.
    resurrection: Resurrected,
}

impl Row {
    fn fresh_bound(&self) -> f64 {
        self.rounds as f64 * self.engine_fresh
    }

    fn update_bound(&self) -> f64 {
        self.rounds as f64 * self.engine_update
    }

    /// The row as the line a size's process prints for the parent.
    fn to_line(&self) -> String {
        format!(
            "ROW {}",
            serde_json::to_string(self).expect("a row serializes")
        )
    }

    fn from_line(line: &str) -> Option<Row> {
        serde_json::from_str(line.strip_prefix("ROW ")?).ok()
    }
}

/// The agents' heartbeats as the controller's health monitor hears them: a live simulated
/// agent has just sent one; an agent the bench kills ([`Heartbeats::kill`]) was last heard
/// at its death, so its silence is proven one whole agent timeout later, as the monitor's
/// `HeartbeatTable` proves it (the simulated agents alone call a dead agent silent at once).
struct Heartbeats {
    agents: Arc<SimAgents>,
    /// When each killed agent died.
    deaths: Mutex<HashMap<String, Instant>>,
}

impl Heartbeats {
    /// Agent `agent_id` dies now: it answers nothing and sends no heartbeat.
    fn kill(&self, agent_id: &str) {
        (self.deaths.lock().unwrap_or_else(PoisonError::into_inner))
            .insert(agent_id.to_string(), Instant::now());
        (self.agents)
            .set_unresponsive(agent_id, true)
            .expect("the agent exists");
    }

    /// How long ago agent `agent_id` died, if the bench killed it.
    fn dead_for(&self, agent_id: &str) -> Option<Duration> {
        let deaths = self.deaths.lock().unwrap_or_else(PoisonError::into_inner);
        deaths.get(agent_id).map(Instant::elapsed)
    }
}

impl AgentHealth for Heartbeats {
    /// A killed agent's last heartbeat said `running`.
    fn recent_job_state(&self, agent_id: &str, within: Duration) -> Option<String> {
        (self.agents.recent_job_state(agent_id, within))
            .or_else(|| (self.dead_for(agent_id)? < within).then(|| "running".to_string()))
    }

    fn silent_for(&self, agent_id: &str, at_least: Duration) -> bool {
        self.agents.silent_for(agent_id, at_least)
            && self.dead_for(agent_id).is_none_or(|d| d >= at_least)
    }

    /// A killed agent is silent from its death on; a live one keeps being heard.
    fn silent_from(&self, agent_id: &str, at_least: Duration) -> Option<Instant> {
        let deaths = self.deaths.lock().unwrap_or_else(PoisonError::into_inner);
        deaths.get(agent_id).map(|died| *died + at_least)
    }
}

/// The simulated world and the engine's edges the controller and the reference share, the
/// engine hearing heartbeats as `kubosh controller` wires it (silence proven after the agent
/// timeout).
fn base_engine(settings: &Settings, dir: &Path) -> (Engine, Arc<Heartbeats>) {
    let blobstore = Arc::new(LocalBlobstore::new(dir.join("blobstore")).expect("a blobstore"));
    let (cloud, agents) = kubosh_sim::pair(SimConfig {
        record_calls: false,
        blobstore: Some(blobstore.clone()),
        ..SimConfig::default()
    });
    settings.apply_to(&cloud, &agents);
    let heartbeats = Arc::new(Heartbeats {
        agents: agents.clone(),
        deaths: Mutex::default(),
    });
    let engine = Engine {
        cloud,
        agents,
        blobstore,
        renderer: Arc::new(LiteralRenderer),
        store: Arc::new(MemoryStore::new()),
        locks: Arc::new(FileLocks::new(dir.join("locks"))),
        events: Arc::new(NoEvents),
        cancel: Default::default(),
        config: EngineConfig {
            agent_options: ClientOptions {
                poll_interval: Duration::from_millis(settings.poll_ms),
                ..ClientOptions::default()
            },
            health: Some(heartbeats.clone()),
            health_window: settings.agent_timeout,
            ..EngineConfig::default()
        },
        named_clouds: Default::default(),
    };
    (engine, heartbeats)
}

/// `T₁`: one deployment of `m` instances through `Engine::deploy` alone, fresh and updated
/// (seconds), and the update's store writes per instance.
async fn engine_alone(
    base: &Engine,
    release: Arc<Release>,
    stemcell: StemcellSource,
    m: usize,
    settings: &Settings,
) -> (f64, f64, f64) {
    let store = MemoryStore::new();
    let engine = Engine {
        store: Arc::new(store.clone()),
        ..base.clone()
    };
    let request = |greeting: &str| DeployRequest {
        releases: vec![release.clone()],
        stemcells: vec![stemcell.clone()],
        ..DeployRequest::validated(
            &manifest(Some("reference"), m, greeting, settings.watch_min_ms),
            &cloud_config(0),
        )
        .expect("a valid reference deployment")
    };
    let start = Instant::now();
    let report = engine
        .deploy(&request("Hello"))
        .await
        .unwrap_or_else(|e| panic!("the reference deploy: {e}"));
    let fresh = start.elapsed().as_secs_f64();
    assert_eq!(report.updated.len(), m, "every instance is created");
    let writes_before = store.writes();
    let start = Instant::now();
    let report = engine
        .deploy(&request("Howdy"))
        .await
        .unwrap_or_else(|e| panic!("the reference update: {e}"));
    let update = start.elapsed().as_secs_f64();
    assert_eq!(report.updated.len(), m, "every instance is updated");
    let writes = (store.writes() - writes_before) as f64 / m as f64;
    (fresh, update, writes)
}

/// An `Instance` as the resurrection phase needs it.
struct Member {
    namespace: String,
    name: String,
    deployment: String,
    /// As the rollout takes it (keyed by its group).
    input: InstanceInput<String>,
    agent_id: Option<String>,
    vm_cid: Option<String>,
}

impl Member {
    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn deployment_key(&self) -> String {
        format!("{}/{}", self.namespace, self.deployment)
    }
}

/// Every `Instance`, read a page at a time (the bench's own reads, before the phase), sorted
/// by namespace and name.
async fn members(admin: &kube::Client) -> Vec<Member> {
    let api: Api<Instance> = Api::all(admin.clone());
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.expect("list the instances");
        out.extend(page.items.iter().map(|i| Member {
            namespace: i.namespace().unwrap_or_default(),
            name: i.name_any(),
            deployment: i.spec.deployment.clone(),
            input: InstanceInput {
                key: i.spec.instance_group.clone(),
                az: i.spec.az.clone(),
                bootstrap: i.spec.bootstrap,
                sort_key: format!("{}/{}", i.spec.instance_group, i.spec.id),
                changed: false,
            },
            agent_id: i.spec.agent_id.clone(),
            vm_cid: i.spec.vm_cid.clone(),
        }));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// Which of `total` instances (by position) die: 1 % of them, at least one, one in every
/// stride of `total / count`, at a place that moves within each stride (so both groups lose
/// some).
fn victims(total: usize) -> BTreeSet<usize> {
    let count = (total / 100).max(1);
    let stride = (total / count).max(1);
    (0..count).map(|k| k * stride + (k * 41) % stride).collect()
}

/// Whether group `group` has a persistent disk.
fn has_disk(group: &str) -> bool {
    GROUPS.iter().any(|(g, _, disk)| *g == group && *disk > 0)
}

/// The phase's bound (ms): the agent timeout, the health watch's settle check (one
/// `check_every`: the resurrector asks for a repair one check after it saw the instance
/// down), then the deploys of the deployments that lost instances, `max_deploys` at once
/// (`phase_lower_bound`), each the rollout of just its dead instances (canaries,
/// `max_in_flight`, AZ phases, groups in order; `rollout_lower_bound`), each instance a
/// recreate's calls ([`Calls::recreate`]), then post-deploy on each of its instances.
fn resurrection_bound(members: &[Member], dead: &BTreeSet<usize>, settings: &Settings) -> u64 {
    let calls = settings.calls();
    let mut by_deployment: BTreeMap<String, Vec<InstanceInput<String>>> = BTreeMap::new();
    for (i, member) in members.iter().enumerate() {
        by_deployment
            .entry(member.deployment_key())
            .or_default()
            .push(InstanceInput {
                changed: dead.contains(&i),
                ..member.input.clone()
            });
    }
    let deploys: Vec<u64> = (by_deployment.values())
        .filter(|instances| instances.iter().any(|i| i.changed))
        .map(|instances| {
            // The update blocks are those of every deployment's manifest.
            let manifest = manifest(None, instances.len(), "", settings.watch_min_ms);
            rollout_bound(
                &manifest,
                false,
                instances,
                |group| calls.recreate(has_disk(group)),
                StageTerms {
                    post_deploy: calls.post_deploy(instances.len()),
                    ..StageTerms::default()
                },
            )
        })
        .collect();
    let detection = settings.agent_timeout + check_every(settings.agent_timeout);
    u64::try_from(detection.as_millis()).expect("a short timeout")
        + phase_lower_bound(&deploys, settings.max_deploys)
}

/// A change one of the phase's watches saw.
enum Change {
    Instance(Box<WatchEvent<Instance>>),
    Deployment(Box<WatchEvent<Deployment>>),
    Event(Box<WatchEvent<k8s_openapi::api::core::v1::Event>>),
}

/// The resource version of `api`'s collection now: where a watch of what changes from now
/// on starts.
async fn current_version<K>(api: &Api<K>) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = api
        .list_metadata(&ListParams::default().limit(1))
        .await
        .expect("a list");
    list.metadata.resource_version.expect("a resource version")
}

/// Sends every change of `api` from now on (`wrap`ped) to `tx`, watching again where a
/// watch ends, until aborted or `tx`'s receiver is gone.
async fn follow<K>(
    api: Api<K>,
    tx: tokio::sync::mpsc::UnboundedSender<Change>,
    wrap: fn(WatchEvent<K>) -> Change,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut version = current_version(&api).await;
    tokio::spawn(async move {
        loop {
            let stream = api.watch(&WatchParams::default(), &version).await;
            let mut stream = stream.expect("a watch").boxed();
            while let Some(event) = stream.next().await {
                let event = event.expect("a watch event");
                match &event {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                        version = o.resource_version().unwrap_or(version);
                    }
                    WatchEvent::Bookmark(b) => version = b.metadata.resource_version.clone(),
                    WatchEvent::Error(e) => panic!("a watch failed: {e}"),
                }
                if tx.send(wrap(event)).is_err() {
                    return;
                }
            }
        }
    })
}

/// What the phase's watches saw.
#[derive(Debug, Default)]
struct Tally {
    /// Each killed instance (`namespace/name`): its VM before, and when (seconds after the
    /// deaths) it was first seen `Running` on another.
    killed: BTreeMap<String, (Option<String>, Option<f64>)>,
    /// Whether each deployment that lost an instance is Ready for its generation, as last
    /// seen (they all were before).
    ready: BTreeMap<String, bool>,
    /// Writes the watches saw to healthy instances, deployments that lost none, and Events
    /// regarding either.
    healthy_instances: usize,
    healthy_deployments: usize,
    healthy_events: usize,
    /// Which healthy objects were written (the first few).
    healthy_names: BTreeSet<String>,
    /// Events published during the phase, by reason.
    events: BTreeMap<String, usize>,
}

impl Tally {
    fn new(members: &[Member], dead: &BTreeSet<usize>) -> Tally {
        let mut tally = Tally::default();
        for member in dead.iter().map(|&i| &members[i]) {
            (tally.killed).insert(member.key(), (member.vm_cid.clone(), None));
            tally.ready.insert(member.deployment_key(), true);
        }
        tally
    }

    /// Every killed instance runs on a new VM and every deployment that lost one is Ready.
    fn done(&self) -> bool {
        self.killed.values().all(|(_, at)| at.is_some()) && self.ready.values().all(|r| *r)
    }

    fn healthy(&mut self, counter: fn(&mut Tally) -> &mut usize, name: String) {
        *counter(self) += 1;
        if self.healthy_names.len() < 5 {
            self.healthy_names.insert(name);
        }
    }

    /// What `change`, seen `at` seconds after the deaths, says.
    fn see(&mut self, change: Change, at: f64) {
        match change {
            Change::Instance(event) => {
                let Some(i) = written(*event) else { return };
                let key = format!("{}/{}", i.namespace().unwrap_or_default(), i.name_any());
                let Some((old, recovered)) = self.killed.get_mut(&key) else {
                    return self.healthy(|t| &mut t.healthy_instances, key);
                };
                let running = (i.status.as_ref()).and_then(|s| s.process_state)
                    == Some(ProcessState::Running);
                if running && i.spec.vm_cid.is_some() && i.spec.vm_cid != *old {
                    recovered.get_or_insert(at);
                }
            }
            Change::Deployment(event) => {
                let Some(d) = written(*event) else { return };
                let key = format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any());
                let conditions = d.status.as_ref().map(|s| &s.conditions[..]).unwrap_or(&[]);
                match self.ready.get_mut(&key) {
                    Some(ready) => *ready = is_ready(conditions, d.metadata.generation),
                    None => self.healthy(|t| &mut t.healthy_deployments, key),
                }
            }
            Change::Event(event) => {
                let Some(e) = written(*event) else { return };
                let reason = e.reason.clone().unwrap_or_default();
                *self.events.entry(reason.clone()).or_default() += 1;
                let about = &e.involved_object;
                let key = format!(
                    "{}/{}",
                    about.namespace.clone().unwrap_or_default(),
                    about.name.clone().unwrap_or_default()
                );
                let healthy = match about.kind.as_deref() {
                    Some("Instance") => !self.killed.contains_key(&key),
                    Some("Deployment") => !self.ready.contains_key(&key),
                    _ => false,
                };
                if healthy {
                    self.healthy(|t| &mut t.healthy_events, format!("{key} ({reason})"));
                }
            }
        }
    }
}

/// The object `event` added or modified, if it did.
fn written<K>(event: WatchEvent<K>) -> Option<K> {
    match event {
        WatchEvent::Added(object) | WatchEvent::Modified(object) => Some(object),
        _ => None,
    }
}

/// What the resurrection phase measured.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Resurrected {
    killed: usize,
    /// Deployments that lost an instance.
    deployments: usize,
    /// The phase's bound ([`resurrection_bound`]), seconds.
    bound: f64,
    /// From the deaths until every killed instance was `Running` on a new VM.
    running: f64,
    /// ... and every deployment that lost one Ready for its generation again.
    ready: f64,
    /// The apiserver's requests (all verbs but WATCH, without the closing scrape) and
    /// writes during the phase.
    requests: f64,
    writes: f64,
    healthy_instance_writes: usize,
    healthy_deployment_writes: usize,
    healthy_events: usize,
    /// The largest write counts, `verb what count`.
    top_writes: String,
}

/// 1 % of the agents (at least one) die at once, the bench's [`Heartbeats`] last hearing them
/// at their death; the controller's health watch finds them silent one agent timeout later,
/// its resurrector wakes their deployments, whose deploys (`Requests::fix`) recreate them.
/// Measured through watches on `Instance`s, `Deployment`s and Events from the deaths until
/// every killed instance runs on a new VM and its deployment is Ready, and 3 s beyond.
async fn resurrection(
    admin: &kube::Client,
    heartbeats: &Heartbeats,
    settings: &Settings,
    scrape_cost: f64,
) -> Resurrected {
    let members = members(admin).await;
    let dead = victims(members.len());
    let bound = resurrection_bound(&members, &dead, settings) as f64 / 1000.0;
    let mut tally = Tally::new(&members, &dead);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watches = [
        follow(Api::all(admin.clone()), tx.clone(), |e| {
            Change::Instance(Box::new(e))
        })
        .await,
        follow(Api::all(admin.clone()), tx.clone(), |e| {
            Change::Deployment(Box::new(e))
        })
        .await,
        follow(Api::all(admin.clone()), tx, |e| Change::Event(Box::new(e))).await,
    ];
    let before = scrape(admin).await;
    let start = Instant::now();
    for member in dead.iter().map(|&i| &members[i]) {
        heartbeats.kill(member.agent_id.as_deref().expect("a VM's agent"));
    }
    let limit = start + settings.agent_timeout + Duration::from_secs(600);
    let mut last_report = Instant::now();
    while !tally.done() {
        let change = tokio::time::timeout_at(limit.into(), rx.recv()).await;
        let change = change
            .unwrap_or_else(|_| panic!("resurrection: not done after {limit:?}: {tally:?}"))
            .expect("the watches run");
        tally.see(change, start.elapsed().as_secs_f64());
        if last_report.elapsed() > Duration::from_secs(15) {
            let back = tally.killed.values().filter(|(_, at)| at.is_some()).count();
            eprintln!(
                "  resurrection: {back}/{} running again after {:.0} s",
                dead.len(),
                start.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
    }
    let ready = start.elapsed().as_secs_f64();
    // Writes that land just after count too.
    let grace = Instant::now() + Duration::from_secs(3);
    while let Ok(Some(change)) = tokio::time::timeout_at(grace.into(), rx.recv()).await {
        tally.see(change, start.elapsed().as_secs_f64());
    }
    watches.iter().for_each(tokio::task::JoinHandle::abort);
    let requests = scrape(admin).await.since(&before);
    let watches: f64 = (requests.0.iter())
        .filter(|((verb, _), _)| verb == "WATCH")
        .map(|(_, v)| v)
        .sum();
    if !tally.healthy_names.is_empty() {
        eprintln!(
            "  resurrection: healthy objects written: {:?}",
            tally.healthy_names
        );
    }
    eprintln!("  resurrection: events {:?}", tally.events);
    Resurrected {
        killed: dead.len(),
        deployments: tally.ready.len(),
        bound,
        running: (tally.killed.values())
            .filter_map(|(_, at)| *at)
            .fold(0.0, f64::max),
        ready,
        requests: requests.total() - watches - scrape_cost,
        writes: requests.writes(),
        healthy_instance_writes: tally.healthy_instances,
        healthy_deployment_writes: tally.healthy_deployments,
        healthy_events: tally.healthy_events,
        top_writes: requests.top(12, true),
    }
}

/// Runs one size, N deployments × M instances, in this process.
async fn run_size(n: usize, m: usize, settings: &Settings) -> Row {
    let wall = Instant::now();
    let dir = tempfile::tempdir().expect("a tempdir");
    let release = kubosh_devenv::example_release().expect("the example release builds");
    let tarball = release.to_tarball().expect("the release's tarball");
    let release_path = dir.path().join("hello.tgz");
    std::fs::write(&release_path, tarball).expect("write the release tarball");
    let stemcell_path = stemcell_tarball(dir.path());

    // The engine's bound: one deployment of M alone, on a simulated cloud of its own (its
    // VMs would hold addresses the namespace's registry does not know of) with the same
    // latencies.
    let stemcell = StemcellSource::prepare(&dir.path().join("ref-stemcells"), &stemcell_path, true)
        .expect("the stemcell");
    let (engine_fresh, engine_update, engine_writes_per_instance) = {
        let (reference, _) = base_engine(settings, &dir.path().join("reference"));
        engine_alone(&reference, Arc::new(release), stemcell, m, settings).await
    };
    let (engine, heartbeats) = base_engine(settings, dir.path());
    eprintln!(
        "  engine alone, 1 × {m}: fresh {engine_fresh:.1} s, update {engine_update:.1} s, \
         {engine_writes_per_instance:.1} store writes per instance updated"
    );

    // The control plane, and the bench's own (admin, unlimited) client.
    let cp = ControlPlane::start()
        .await
        .expect("etcd + kube-apiserver start");
    cp.install_crds(&kubosh_kube::api::crds())
        .await
        .expect("the CRDs");
    let namespaces: Vec<String> = (0..n).map(|i| namespace_of(i, settings)).collect();
    let mut distinct = namespaces.clone();
    distinct.dedup();
    for ns in &distinct {
        cp.create_namespace(ns).await.expect("a namespace");
    }
    let admin = cp.client().await.expect("the admin client");
    // What a scrape of /metrics adds to the counters itself.
    let mut scrape_cost = f64::MAX;
    let mut previous = scrape(&admin).await;
    for _ in 0..3 {
        let next = scrape(&admin).await;
        scrape_cost = scrape_cost.min(next.since(&previous).total());
        previous = next;
    }

    // The controller, wired as `kubosh controller` wires it.
    let kubeconfig = Kubeconfig::read_from(cp.kubeconfig_path()).expect("the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &KubeConfigOptions {
            context: Some("admin".into()),
            ..KubeConfigOptions::default()
        },
    )
    .await
    .expect("the kubeconfig's admin context");
    let client = kubosh_kube::client::client(config, settings.budget).expect("a client");
    let work_dir = dir.path().join("controller");
    let mut deployments = DeploymentContext::new(
        client.clone(),
        engine.clone(),
        work_dir.clone(),
        Reporter {
            controller: "kubosh".into(),
            instance: Some("bench".into()),
        },
        settings.max_deploys,
    );
    deployments.process = Some(Process::new("bench"));
    // As `kubosh controller --agent-timeout` sets it: a repair is asked one health check
    // after the instance is seen down.
    deployments.resurrection = Arc::new(
        Resurrection::new(true, MeltdownPolicy::default())
            .with_settle(check_every(settings.agent_timeout)),
    );
    let cancel = deployments.cancel.clone();
    let tasks = deployments.tasks.clone();
    let artifacts = ArtifactContext {
        client,
        blobstore: engine.blobstore.clone(),
        cloud: None,
        cloud_maker: Arc::new(kubosh_engine::clouds::NoCpiTypes),
        work_dir: work_dir.join("downloads"),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        let _ = stop_rx.await;
    }
    .boxed()
    .shared();
    // `-n bench` with one namespace, else all namespaces.
    let scope = Scope {
        namespace: settings.one_namespace.then(|| ONE_NAMESPACE.into()),
    };
    let health = Some(HealthWatch::new(heartbeats.clone(), settings.agent_timeout));
    let controller = tokio::spawn(run(Arc::new(deployments), artifacts, scope, health, stop));

    // The inputs in every namespace, Ready before any deployment is applied.
    for (k, namespace) in distinct.iter().enumerate() {
        let cloud_configs: Api<kubosh_kube::api::CloudConfig> =
            Api::namespaced(admin.clone(), namespace);
        apply(
            &cloud_configs,
            &json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "CloudConfig",
                    "metadata": {"name": "default"}, "spec": cloud_config(k)}),
        )
        .await;
        let releases: Api<ReleaseResource> = Api::namespaced(admin.clone(), namespace);
        apply(
            &releases,
            &json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "Release",
                    "metadata": {"name": "hello-1.0.0"},
                    "spec": {"name": "hello", "version": "1.0.0",
                             "url": format!("file://{}", release_path.display())}}),
        )
        .await;
        let stemcells: Api<StemcellResource> = Api::namespaced(admin.clone(), namespace);
        apply(
            &stemcells,
            &json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "Stemcell",
                    "metadata": {"name": "jammy-1.0"},
                    "spec": {"name": "bosh-sim-ubuntu-jammy", "version": "1.0",
                             "url": format!("file://{}", stemcell_path.display())}}),
        )
        .await;
    }
    for namespace in &distinct {
        let releases: Api<ReleaseResource> = Api::namespaced(admin.clone(), namespace);
        wait_artifact(&releases, "hello-1.0.0", |r| {
            r.status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default()
        })
        .await;
        let stemcells: Api<StemcellResource> = Api::namespaced(admin.clone(), namespace);
        wait_artifact(&stemcells, "jammy-1.0", |s| {
            s.status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default()
        })
        .await;
    }

    // (1) The fresh deploy of N deployments.
    let all: Api<Deployment> = Api::all(admin.clone());
    let api = |i: usize| Api::<Deployment>::namespaced(admin.clone(), &namespaces[i]);
    let limit = Duration::from_secs(3600);
    let before = scrape(&admin).await;
    let start = Instant::now();
    for i in 0..n {
        apply(
            &api(i),
            &deployment_object(&deployment_name(i), m, "Hello", settings.watch_min_ms),
        )
        .await;
    }
    let fresh_lists = wait_ready(&all, n, limit, "fresh deploy").await;
    let fresh = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fresh_requests = scrape(&admin).await.since(&before);
    let fresh_writes_per_instance = (fresh_requests.writes() - n as f64) / (n * m) as f64;
    eprintln!(
        "  fresh deploy of {n} × {m}: {fresh:.1} s; {:.0} requests, {:.0} writes; \
         writes: {}",
        fresh_requests.total(),
        fresh_requests.writes(),
        fresh_requests.top(12, true)
    );

    // (4) Nothing changing: what the apiserver serves.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let before = scrape(&admin).await;
    tokio::time::sleep(Duration::from_secs(settings.idle_secs)).await;
    let idle = scrape(&admin).await.since(&before);
    let idle_secs = settings.idle_secs.max(1) as f64;
    let idle_rps = (idle.total() - scrape_cost).max(0.0) / idle_secs;
    let idle_writes_per_sec = idle.writes() / idle_secs;
    eprintln!(
        "  idle {idle_secs:.0} s: {:.0} requests (one scrape: {scrape_cost:.0}): {}",
        idle.total(),
        idle.top(12, false)
    );

    // (2) A property of every deployment changes: each instance is updated in place.
    let before = scrape(&admin).await;
    let start = Instant::now();
    for i in 0..n {
        apply(
            &api(i),
            &deployment_object(&deployment_name(i), m, "Howdy", settings.watch_min_ms),
        )
        .await;
    }
    let update_lists = wait_ready(&all, n, limit, "update").await;
    let update = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let update_window = start.elapsed().as_secs_f64();
    let update_requests = scrape(&admin).await.since(&before);
    let writes = (update_requests.writes() - n as f64) / (n * m) as f64;
    let writes_net = (update_requests.writes() - n as f64 - idle_writes_per_sec * update_window)
        / (n * m) as f64;
    eprintln!(
        "  update of {n} × {m}: {update:.1} s; {:.0} requests, {:.0} writes; writes: {}; \
         reads: {}",
        update_requests.total(),
        update_requests.writes(),
        update_requests.top(12, true),
        Requests(
            (update_requests.0.iter())
                .filter(|((v, _), _)| !WRITE_VERBS.contains(&v.as_str()))
                .map(|(k, v)| (k.clone(), *v))
                .collect()
        )
        .top(8, false)
    );

    // (5) 1 % of the agents die at once: the resurrector recreates their VMs.
    let resurrected = resurrection(&admin, &heartbeats, settings, scrape_cost).await;
    eprintln!(
        "  resurrection of {} instance(s) in {} deployment(s): running {:.1} s, ready {:.1} s \
         (bound {:.1} s); {:.0} requests, {:.0} writes: {}; writes of healthy instances {}, \
         deployments {}, Events about them {}",
        resurrected.killed,
        resurrected.deployments,
        resurrected.running,
        resurrected.ready,
        resurrected.bound,
        resurrected.requests,
        resurrected.writes,
        resurrected.top_writes,
        resurrected.healthy_instance_writes,
        resurrected.healthy_deployment_writes,
        resurrected.healthy_events,
    );

    // (3) Peak RSS (the resurrection included), then stop the controller.
    let peak_rss_mib = peak_rss_mib();
    let _ = stop_tx.send(());
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), controller).await;
    tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(30), tasks.wait()).await;
    drop(cp);

    Row {
        deployments: n,
        instances: m,
        engine_fresh,
        engine_update,
        engine_writes_per_instance,
        rounds: n.div_ceil(settings.max_deploys.max(1)),
        fresh,
        fresh_writes_per_instance,
        update,
        writes,
        writes_net,
        peak_rss_mib,
        // Measured by the parent, in a process of its own.
        reference_rss_mib: 0.0,
        idle_rps,
        idle_writes_per_sec,
        scrape_cost,
        wall: wall.elapsed().as_secs_f64(),
        // The controller's: without the bench's applies, lists and the closing scrape.
        fresh_requests: fresh_requests.total() - n as f64 - fresh_lists - scrape_cost,
        update_requests: update_requests.total() - n as f64 - update_lists - scrape_cost,
        resurrection: resurrected,
    }
}

/// This bench again, told by `role` (an environment variable) which part of size n × m to
/// run, in a process of its own so that its peak RSS is that part's alone.
fn run_child(exe: &Path, role: &str, n: usize, m: usize) -> std::process::Output {
    std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(role, format!("{n}x{m}"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {role}={n}x{m}: {e}"))
}

/// `NxM` pairs from `BENCH_SIZES`.
fn sizes() -> Vec<(usize, usize)> {
    let spec = std::env::var("BENCH_SIZES").unwrap_or_else(|_| "20x50".into());
    spec.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            let (n, m) = s
                .trim()
                .split_once('x')
                .unwrap_or_else(|| panic!("BENCH_SIZES: '{s}' is not NxM"));
            (
                n.parse().expect("BENCH_SIZES: N"),
                m.parse().expect("BENCH_SIZES: M"),
            )
        })
        .collect()
}

/// The environment variable that makes this process run one size (`NxM`) and print its row.
const CHILD: &str = "BENCH_CONTROLLER_SIZE";

/// The environment variable that makes this process deploy one size (`NxM`) through the
/// engine alone and print its peak RSS (`RSS <MiB>`).
const REFERENCE: &str = "BENCH_REFERENCE_SIZE";

/// N deployments × M instances through `Engine::deploy` alone (a `MemoryStore` each, the
/// same simulated world, `max_deploys` at once), fresh then updated: what the simulated
/// cloud and agents and the engine hold at that size, without a controller.
async fn reference_at_scale(n: usize, m: usize, settings: &Settings) {
    let dir = tempfile::tempdir().expect("a tempdir");
    let release = Arc::new(kubosh_devenv::example_release().expect("the example release"));
    let stemcell_path = stemcell_tarball(dir.path());
    let stemcell = StemcellSource::prepare(&dir.path().join("stemcells"), &stemcell_path, true)
        .expect("the stemcell");
    let (base, _agents) = base_engine(settings, dir.path());
    let slots = Arc::new(tokio::sync::Semaphore::new(settings.max_deploys.max(1)));
    // Each deployment keeps its store from the fresh deploy to the update.
    let engines: Vec<Engine> = (0..n)
        .map(|_| Engine {
            store: Arc::new(MemoryStore::new()),
            ..base.clone()
        })
        .collect();
    for greeting in ["Hello", "Howdy"] {
        let deploys = (0..n).map(|i| {
            let engine = engines[i].clone();
            let (release, stemcell, slots) = (release.clone(), stemcell.clone(), slots.clone());
            let name = deployment_name(i);
            let watch_min_ms = settings.watch_min_ms;
            async move {
                let _slot = slots.acquire().await.expect("the slots stay open");
                let request = DeployRequest {
                    releases: vec![release],
                    stemcells: vec![stemcell],
                    ..DeployRequest::validated(
                        &manifest(Some(&name), m, greeting, watch_min_ms),
                        &cloud_config(i),
                    )
                    .unwrap_or_else(|p| panic!("{name}: {p}"))
                };
                (engine.deploy(&request).await).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        });
        futures::future::join_all(deploys).await;
    }
}

fn main() {
    let settings = Settings::from_env();
    if let Ok(size) = std::env::var(REFERENCE) {
        let (n, m) = size.split_once('x').expect("NxM");
        let (n, m): (usize, usize) = (n.parse().expect("N"), m.parse().expect("M"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(reference_at_scale(n, m, &settings));
        println!("RSS {}", peak_rss_mib());
        std::process::exit(0);
    }
    if let Ok(size) = std::env::var(CHILD) {
        let filter = std::env::var("BENCH_LOG")
            .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into());
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
        let (n, m) = size.split_once('x').expect("NxM");
        let (n, m): (usize, usize) = (n.parse().expect("N"), m.parse().expect("M"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let row = runtime.block_on(run_size(n, m, &settings));
        println!("{}", row.to_line());
        // The controller's watches and the children end with the process.
        std::process::exit(0);
    }

    let latencies: Vec<String> = settings
        .latencies
        .iter()
        .map(|(m, ms)| format!("{m} {ms} ms"))
        .collect();
    println!(
        "latencies: {}; watch min {} ms; get_task every {} ms; max_deploys {}; \
         kube API budget {}; canaries 1, max_in_flight 20%",
        latencies.join(", "),
        settings.watch_min_ms,
        settings.poll_ms,
        settings.max_deploys,
        if settings.budget.is_limited() {
            format!(
                "{} qps, burst {}",
                settings.budget.qps, settings.budget.burst
            )
        } else {
            "none (the apiserver's API Priority and Fairness)".to_string()
        },
    );
    println!(
        "{}; each deployment: {}\n",
        if settings.one_namespace {
            "all deployments in one namespace"
        } else {
            "a namespace per deployment"
        },
        GROUPS
            .iter()
            .map(|(g, share, disk)| format!(
                "{g} {share}% over 2 AZs{}",
                if *disk > 0 { ", disk" } else { "" }
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let exe = std::env::current_exe().expect("this binary");
    let mut rows = Vec::new();
    for (n, m) in sizes() {
        eprintln!("{n} deployments × {m} instances:");
        let output = run_child(&exe, CHILD, n, m);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let row = stdout.lines().find_map(Row::from_line);
        let mut row = match row {
            Some(row) if output.status.success() => row,
            _ => panic!("{n}x{m} failed ({}): {stdout}", output.status),
        };
        eprintln!("  the same through the engine alone (memory reference) ...");
        let reference = run_child(&exe, REFERENCE, n, m);
        row.reference_rss_mib = String::from_utf8_lossy(&reference.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("RSS ")?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{n}x{m}: the reference failed ({})", reference.status));
        rows.push(row);
    }

    println!(
        "{:>9} | {:>15} | {:>25} | {:>25} | {:>20} | {:>25} | {:>13} | {:>6}",
        "",
        "engine alone",
        "fresh deploy",
        "update (property)",
        "writes/inst (update)",
        "peak RSS (MiB)",
        "idle",
        ""
    );
    println!(
        "{:>9} | {:>7} {:>7} | {:>8} {:>7} {:>8} | {:>8} {:>7} {:>8} | {:>6} {:>6} {:>6} | {:>5} {:>5} {:>6} {:>6} | {:>6} {:>6} | {:>6}",
        "N × M",
        "fresh",
        "update",
        "converge",
        "bound",
        "÷bound",
        "converge",
        "bound",
        "÷bound",
        "gross",
        "net",
        "÷3",
        "all",
        "ref",
        "ctrl",
        "÷256",
        "req/s",
        "÷1",
        "wall",
    );
    for r in &rows {
        println!(
            "{:>9} | {:>6.1}s {:>6.1}s | {:>7.1}s {:>6.1}s {:>8.2} | {:>7.1}s {:>6.1}s {:>8.2} | {:>6.2} {:>6.2} {:>6.2} | {:>5.0} {:>5.0} {:>6.0} {:>6.2} | {:>6.2} {:>6.2} | {:>5.0}s",
            format!("{} × {}", r.deployments, r.instances),
            r.engine_fresh,
            r.engine_update,
            r.fresh,
            r.fresh_bound(),
            r.fresh / r.fresh_bound().max(f64::MIN_POSITIVE),
            r.update,
            r.update_bound(),
            r.update / r.update_bound().max(f64::MIN_POSITIVE),
            r.writes,
            r.writes_net,
            r.writes_net / 3.0,
            r.peak_rss_mib,
            r.reference_rss_mib,
            r.peak_rss_mib - r.reference_rss_mib,
            (r.peak_rss_mib - r.reference_rss_mib) / 256.0,
            r.idle_rps,
            r.idle_rps / 1.0,
            r.wall,
        );
    }
    println!(
        "\nbound: ceil(N / max_deploys) × T₁, T₁ the engine alone's time for one deployment of \
         M (same latencies, a MemoryStore); writes/inst: apiserver writes (POST, PUT, PATCH, \
         APPLY, DELETE) during the update minus the bench's N patches, ÷ N×M (net: also minus \
         the apiserver's own writes at the rate seen idle; target ≤ 3); peak RSS: ru_maxrss of \
         the process running the size (all: controller, simulated cloud and agents, engine-alone \
         run), of a process deploying the same through the engine alone (ref: simulated \
         cloud and agents, engine), their difference (ctrl: the controller's share; goal ≤ \
         256 MiB); idle: apiserver requests/s over {} s with nothing changing, \
         the bench's /metrics scrapes excluded (goal ≤ 1); wall: the size's whole run.",
        settings.idle_secs,
    );
    for r in &rows {
        println!(
            "{} × {}: engine-alone update {:.1} store writes/instance; fresh deploy {:.2} API \
             writes/instance; idle writes {:.3}/s; a /metrics scrape counts {:.0} request(s)",
            r.deployments,
            r.instances,
            r.engine_writes_per_instance,
            r.fresh_writes_per_instance,
            r.idle_writes_per_sec,
            r.scrape_cost,
        );
        // What the request budget alone allows: the requests made ÷ qps.
        let floor = |requests: f64| settings.budget.floor(requests).as_secs_f64();
        println!(
            "{} × {}: requests fresh {:.0} (budget floor {:.0} s, converge ÷ floor {:.2}), \
             update {:.0} (budget floor {:.0} s, converge ÷ floor {:.2})",
            r.deployments,
            r.instances,
            r.fresh_requests,
            floor(r.fresh_requests),
            ratio(r.fresh, floor(r.fresh_requests)),
            r.update_requests,
            floor(r.update_requests),
            ratio(r.update, floor(r.update_requests)),
        );
    }
    print_resurrections(&rows, &settings);
}

/// `a ÷ b`, or NaN (printed as such) when `b` is zero: no budget, no floor.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// The resurrection phase's table.
fn print_resurrections(rows: &[Row], settings: &Settings) {
    println!(
        "\nresurrection: 1 % of the instances (at least one) lose their agent at once; agent \
         timeout {:.0} s, health check every {:.0} s",
        settings.agent_timeout.as_secs_f64(),
        check_every(settings.agent_timeout).as_secs_f64(),
    );
    println!(
        "{:>9} | {:>4} {:>5} | {:>6} | {:>7} {:>6} | {:>7} {:>6} | {:>6} {:>6} | {:>7} {:>7} {:>7} | {:>6} {:>6} {:>7}",
        "N × M",
        "dead",
        "depl",
        "bound",
        "running",
        "÷bound",
        "ready",
        "÷bound",
        "writes",
        "/dead",
        "healthy",
        "depl",
        "events",
        "reqs",
        "floor",
        "÷budget",
    );
    for r in rows {
        let x = &r.resurrection;
        let bound = x.bound.max(f64::MIN_POSITIVE);
        let floor = settings.budget.floor(x.requests).as_secs_f64();
        let detection =
            (settings.agent_timeout + check_every(settings.agent_timeout)).as_secs_f64();
        println!(
            "{:>9} | {:>4} {:>5} | {:>5.1}s | {:>6.1}s {:>6.2} | {:>6.1}s {:>6.2} | {:>6.0} {:>6.1} | {:>7} {:>7} {:>7} | {:>6.0} {:>5.1}s {:>7.2}",
            format!("{} × {}", r.deployments, r.instances),
            x.killed,
            x.deployments,
            x.bound,
            x.running,
            x.running / bound,
            x.ready,
            x.ready / bound,
            x.writes,
            x.writes / x.killed.max(1) as f64,
            x.healthy_instance_writes,
            x.healthy_deployment_writes,
            x.healthy_events,
            x.requests,
            floor,
            x.running / (detection + floor),
        );
    }
    println!(
        "\nbound: agent timeout + one health check (the resurrector's settle) + the deploys of \
         the deployments that lost instances, max_deploys at once, each the rollout of its dead \
         instances (each a recreate: delete_vm, create_vm, set_vm_metadata, ping, its disk's \
         detach/attach/mount, update_settings, apply, pre-start, start, watch, post-start) and \
         post-deploy; running: until every killed instance is Running on a new VM; ready: and \
         its deployment Ready for its generation; writes: apiserver writes during the phase \
         (/dead: per killed instance); healthy: writes to Instances not killed, to Deployments \
         that lost none, and Events about either (target 0); reqs: the controller's requests \
         during the phase, floor: ÷ qps; ÷budget: running ÷ (agent timeout + one check + \
         floor), what the request budget allows once the silence is proven."
    );
}
