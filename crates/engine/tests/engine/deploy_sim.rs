//! The deploy engine on the simulated cloud and agents (`kubosh_sim`): every scenario of a
//! deployment's life on a paused tokio clock, so minutes of simulated CPI and agent latency
//! run in milliseconds and the engine's concurrency can be read off the event log. The
//! example release is built in process; templates are rendered by `LiteralRenderer` (no
//! Ruby), state is in memory, the blobstore and locks are real files in a tempdir.
//!
//! Every scenario ends with [`Sim::assert_no_leak`]: the cloud holds exactly what the state
//! records (VMs of instances, active or inactive, disks of instances plus orphaned disks, one
//! agent per VM, the recorded stemcells) and no intent is pending. `swap.rs` has the
//! scenarios of `vm_strategy: create-swap-delete`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kubosh_artifacts::blobstore::LocalBlobstore;
use kubosh_artifacts::release::Release;
use kubosh_bosh::events::{EventLine, State};
use kubosh_cloud::{CloudLimits, PacedCloud, Pacer, VmCid};
use kubosh_core::plan::changes::Requests;
use kubosh_core::plan::desired::StemcellInfo;
use kubosh_engine::deploy::DeployReport;
use kubosh_engine::lock::{FileLocks, Guard, Holder, Lock, LockError};
use kubosh_engine::state::{
    DeploymentState, DnsDataset, DnsInstance, DnsRegistry, InstanceRecord, IpRegistry,
    MemoryDnsRegistry, MemoryIpRegistry, MemoryStore, StoreFuture,
};
use kubosh_engine::{
    DeployRequest, Disposition, Engine, EngineConfig, EngineError, EventLog, Milestone,
    StemcellSource,
};
use kubosh_sim::{LiteralRenderer, SimAgents, SimCloud, SimConfig};
use kubosh_transport::agent::ClientOptions;
use serde_json::{Value, json};

/// The example release, built once per test binary. Building it runs `git`, and a child
/// forked while another test holds its deployment lock inherits the lock's descriptor until
/// it execs: on a paused clock the other test's next deploy then waits its whole lock
/// timeout in no real time and fails. Built before any world exists, it forks no more.
fn shared_release() -> Arc<Release> {
    static RELEASE: std::sync::LazyLock<Arc<Release>> = std::sync::LazyLock::new(|| {
        Arc::new(kubosh_devenv::example_release().expect("the example release builds"))
    });
    RELEASE.clone()
}

/// A stemcell whose image path names no file at all: the simulated cloud only records it.
fn stemcell(dir: &Path, version: &str) -> StemcellSource {
    StemcellSource {
        info: StemcellInfo {
            name: "bosh-sim-ubuntu-jammy".into(),
            version: version.into(),
            os: "ubuntu-jammy".into(),
        },
        image_path: dir.join(format!("no-such-image-{version}")),
        cloud_properties: Default::default(),
    }
}

/// Two AZs, a manual network with a subnet per AZ (static ranges from .50), a dynamic
/// network, two compilation workers.
fn cloud_config() -> Value {
    json!({
        "azs": [{"name": "z1", "cloud_properties": {"zone": "a"}},
                {"name": "z2", "cloud_properties": {"zone": "b"}}],
        "vm_types": [{"name": "small", "cloud_properties": {"cpu": 1}}],
        "disk_types": [{"name": "small", "disk_size": 2048, "cloud_properties": {"type": "ssd"}}],
        "networks": [
            {
                "name": "default",
                "type": "manual",
                "subnets": [
                    {"range": "10.0.1.0/24", "gateway": "10.0.1.1", "az": "z1",
                     "reserved": ["10.0.1.2 - 10.0.1.9"], "static": ["10.0.1.50 - 10.0.1.60"],
                     "cloud_properties": {"subnet": "s1"}},
                    {"range": "10.0.2.0/24", "gateway": "10.0.2.1", "az": "z2",
                     "reserved": ["10.0.2.2 - 10.0.2.9"], "static": ["10.0.2.50 - 10.0.2.60"],
                     "cloud_properties": {"subnet": "s2"}},
                ],
            },
            {"name": "dyn", "type": "dynamic",
             "subnets": [{"azs": ["z1", "z2"], "cloud_properties": {"net": "dyn"}}]},
        ],
        "compilation": {
            "workers": 2, "network": "default", "az": "z1", "vm_type": "small",
            "reuse_compilation_vms": true,
        },
    })
}

/// The hello job of group `group`, providing its greeter as `<group>_greeter`; `web`
/// consumes its own peers, the others none.
fn hello_job(group: &str, greeting: &str) -> Value {
    let peers = if group == "web" {
        json!({"from": "web_greeter"})
    } else {
        json!("nil")
    };
    json!({
        "name": "hello", "release": "hello",
        "provides": {"greeter": {"as": format!("{group}_greeter")}},
        "consumes": {"peers": peers},
        "properties": {"hello": {"greeting": greeting}},
    })
}

/// web (3 instances over both AZs, a 1 GiB disk, dynamic addresses of the manual network),
/// api (2 static addresses in z1, a disk type) and worker (2 instances on the dynamic
/// network, no disk).
fn manifest() -> Value {
    json!({
        "name": "sim",
        "releases": [{"name": "hello", "version": "1.0.0"}],
        "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
        "update": {
            "canaries": 1, "max_in_flight": 2,
            "canary_watch_time": "1000-30000", "update_watch_time": "1000-30000",
        },
        "instance_groups": [
            {
                "name": "web", "instances": 3, "azs": ["z1", "z2"], "vm_type": "small",
                "stemcell": "default", "persistent_disk": 1024,
                "networks": [{"name": "default"}],
                "jobs": [hello_job("web", "Hello")],
            },
            {
                "name": "api", "instances": 2, "azs": ["z1"], "vm_type": "small",
                "stemcell": "default", "persistent_disk_type": "small",
                "networks": [{"name": "default", "static_ips": ["10.0.1.50", "10.0.1.51"]}],
                "jobs": [hello_job("api", "Hi")],
            },
            {
                "name": "worker", "instances": 2, "azs": ["z1", "z2"], "vm_type": "small",
                "stemcell": "default",
                "networks": [{"name": "dyn"}],
                "jobs": [hello_job("worker", "Yo")],
            },
        ],
    })
}

/// The position of instance group `name` in a manifest.
fn group_mut<'a>(manifest: &'a mut Value, name: &str) -> &'a mut Value {
    manifest["instance_groups"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("no group {name}"))
}

struct Sim {
    dir: tempfile::TempDir,
    cloud: Arc<SimCloud>,
    agents: Arc<SimAgents>,
    engine: Engine,
    events: EventLog,
    store: MemoryStore,
    release: Arc<Release>,
    stemcells: Vec<StemcellSource>,
}

impl Sim {
    fn new() -> Sim {
        Sim::with_config(SimConfig::default())
    }

    /// A world whose simulated pair behaves as `config` says (its blobstore is the world's).
    fn with_config(config: SimConfig) -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let blobstore = Arc::new(LocalBlobstore::new(dir.path().join("blobstore")).unwrap());
        let (cloud, agents) = kubosh_sim::pair(SimConfig {
            blobstore: Some(blobstore.clone()),
            ..config
        });
        let events = EventLog::new();
        let store = MemoryStore::new();
        let engine = Engine {
            cloud: cloud.clone(),
            agents: agents.clone(),
            blobstore,
            renderer: Arc::new(LiteralRenderer),
            store: Arc::new(store.clone()),
            locks: Arc::new(FileLocks::new(dir.path().join("locks"))),
            events: Arc::new(events.clone()),
            cancel: Default::default(),
            config: EngineConfig {
                agent_options: ClientOptions::default(),
                ..EngineConfig::default()
            },
            named_clouds: Default::default(),
        };
        let stemcells = vec![stemcell(dir.path(), "1.0")];
        Sim {
            dir,
            cloud,
            agents,
            engine,
            events,
            store,
            release: shared_release(),
            stemcells,
        }
    }

    /// The same world, with the agents' heartbeats standing in for `get_state`.
    fn with_health(&self) -> Engine {
        let mut engine = self.engine.clone();
        engine.config.health = Some(self.agents.clone());
        engine
    }

    fn request(&self, manifest: Value) -> DeployRequest {
        self.request_on(manifest, cloud_config())
    }

    /// A request for `manifest` on `cloud`, validated as every caller of the engine does.
    fn request_on(&self, manifest: Value, cloud: Value) -> DeployRequest {
        DeployRequest {
            releases: vec![self.release.clone()],
            stemcells: self.stemcells.clone(),
            requests: Requests::default(),
            action: None,
            ..DeployRequest::validated(&manifest, &cloud).unwrap_or_else(|p| panic!("{p}"))
        }
    }

    fn event_text(&self) -> String {
        self.events
            .lines()
            .iter()
            .map(EventLine::to_json)
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn deploy_with(&self, engine: &Engine, request: &DeployRequest) -> DeployReport {
        match engine.deploy(request).await {
            Ok(report) => report,
            Err(e) => panic!("deploy failed: {e}\nevents:\n{}", self.event_text()),
        }
    }

    async fn deploy(&self, manifest: Value) -> DeployReport {
        self.deploy_with(&self.engine, &self.request(manifest))
            .await
    }

    /// The state as a deploy loads it (announced updates not finished marked dirty).
    fn state(&self) -> DeploymentState {
        let mut state = self.store.snapshot();
        state.mark_unfinished_updates();
        state
    }

    /// The instances of `group`, by index.
    fn group(&self, group: &str) -> Vec<InstanceRecord> {
        let mut v: Vec<InstanceRecord> = self
            .state()
            .instances
            .into_values()
            .filter(|i| i.group == group)
            .collect();
        v.sort_by_key(|i| i.index);
        v
    }

    fn vm_cid(record: &InstanceRecord) -> String {
        record
            .vm
            .as_ref()
            .expect("the instance has a VM")
            .cid
            .clone()
    }

    fn agent_id(record: &InstanceRecord) -> String {
        record
            .vm
            .as_ref()
            .expect("the instance has a VM")
            .agent_id
            .clone()
    }

    /// The cloud holds exactly what the state records, and nothing is pending.
    fn assert_no_leak(&self) {
        let state = self.state();
        let inventory = self.cloud.inventory();
        assert!(state.intents.is_empty(), "pending: {:?}", state.intents);
        // An instance's inactive VM (create-swap-delete) is recorded too.
        let recorded_vms: BTreeSet<String> = (state.instances.values())
            .flat_map(|i| i.vm.iter().chain(i.inactive_vm.iter().map(|x| &x.vm)))
            .map(|vm| vm.cid.clone())
            .collect();
        let cloud_vms: BTreeSet<String> = inventory.vms.iter().map(|v| v.cid.clone()).collect();
        assert_eq!(cloud_vms, recorded_vms, "VMs in the cloud vs the state");
        let recorded_agents: BTreeSet<String> = (state.instances.values())
            .flat_map(|i| i.agent_ids().map(String::from).collect::<Vec<_>>())
            .collect();
        let cloud_agents: BTreeSet<String> = inventory.agents.iter().cloned().collect();
        assert_eq!(cloud_agents, recorded_agents, "agents vs the state");
        let instance_disks: BTreeSet<String> = state
            .instances
            .values()
            .flat_map(|i| i.disks.iter().map(|d| d.cid.clone()))
            .collect();
        let orphaned: BTreeSet<String> = state.orphaned_disks.keys().cloned().collect();
        assert!(
            instance_disks.is_disjoint(&orphaned),
            "a disk in use is orphaned: {:?}",
            instance_disks.intersection(&orphaned).collect::<Vec<_>>()
        );
        let recorded_disks: BTreeSet<String> = instance_disks.union(&orphaned).cloned().collect();
        let cloud_disks: BTreeSet<String> = inventory.disks.iter().map(|d| d.cid.clone()).collect();
        assert_eq!(
            cloud_disks, recorded_disks,
            "disks in the cloud vs the state"
        );
        // Active disks are attached to their instance's VM; orphaned ones to nothing.
        for i in state.instances.values() {
            for d in &i.disks {
                let disk = inventory.disks.iter().find(|x| x.cid == d.cid).unwrap();
                assert_eq!(
                    disk.attached_to,
                    i.vm.as_ref().map(|vm| vm.cid.clone()),
                    "disk {} of {}",
                    d.cid,
                    i.name()
                );
            }
        }
        for cid in &orphaned {
            let disk = inventory.disks.iter().find(|x| &x.cid == cid).unwrap();
            assert_eq!(disk.attached_to, None, "orphaned disk {cid} is attached");
        }
        let recorded_stemcells: BTreeSet<String> =
            state.stemcells.values().map(|s| s.cid.clone()).collect();
        let cloud_stemcells: BTreeSet<String> =
            inventory.stemcells.iter().map(|s| s.cid.clone()).collect();
        assert_eq!(cloud_stemcells, recorded_stemcells);
    }

    /// The `marker` file on disk `disk`, if it is there.
    fn marker_on(&self, disk: &kubosh_cloud::DiskCid) -> Option<String> {
        self.cloud.disk_files(disk)?.get("marker").cloned()
    }

    /// Every agent call since the counters were reset, by method.
    fn agent_counts(&self) -> BTreeMap<String, u64> {
        self.agents.counts()
    }

    fn reset_calls(&self) {
        self.cloud.reset_calls();
        self.agents.reset_calls();
    }

    /// The milestones since the start, as `(kind, instance display name, cids)`.
    fn milestones(&self) -> Vec<(&'static str, String, Vec<String>)> {
        (self.events.milestones().into_iter())
            .map(|m| match m {
                Milestone::VmCreated { instance, cid } => {
                    ("VmCreated", instance.display, vec![cid])
                }
                Milestone::VmRecreated {
                    instance,
                    old_cid,
                    new_cid,
                } => ("VmRecreated", instance.display, vec![old_cid, new_cid]),
                Milestone::VmDeleted { instance, cid } => {
                    ("VmDeleted", instance.display, vec![cid])
                }
                Milestone::DiskCreated { instance, cid, .. } => {
                    ("DiskCreated", instance.display, vec![cid])
                }
                Milestone::DiskMigrated {
                    instance,
                    old_cid,
                    new_cid,
                    ..
                } => ("DiskMigrated", instance.display, vec![old_cid, new_cid]),
                Milestone::DiskOrphaned { instance, cid } => {
                    ("DiskOrphaned", instance.display, vec![cid])
                }
                Milestone::Resurrecting { instance, cid, .. } => {
                    ("Resurrecting", instance.display, vec![cid])
                }
                Milestone::AgentUnresponsive { instance, .. } => {
                    ("AgentUnresponsive", instance.display, vec![])
                }
                Milestone::AgentNotAnswering {
                    instance,
                    waited,
                    at_most,
                } => (
                    "AgentNotAnswering",
                    instance.display,
                    vec![waited.as_secs().to_string(), at_most.as_secs().to_string()],
                ),
                Milestone::DnsSynced { version, .. } => {
                    ("DnsSynced", String::new(), vec![version.to_string()])
                }
                Milestone::Planned(plan) => ("Planned", plan.to_string(), vec![]),
            })
            .collect()
    }

    /// What the last deploy that planned said it would change.
    fn last_plan(&self) -> Option<String> {
        (self.milestones().into_iter().rev())
            .find(|(kind, _, _)| *kind == "Planned")
            .map(|(_, plan, _)| plan)
    }

    /// What the agents were last sent of this deployment's DNS records (the blob the engine
    /// stored): instance uuid => (agent id, address).
    async fn published_dns(&self) -> BTreeMap<String, (String, String)> {
        let meta = self.state().meta;
        let Some(blob_id) = meta.dns_blob else {
            return BTreeMap::new();
        };
        let digest: kubosh_base::digest::MultiDigest = format!("sha256:{blob_id}").parse().unwrap();
        let blob = self
            .engine
            .blobstore
            .get_bytes(&blob_id, &digest)
            .await
            .unwrap();
        let blob: Value = serde_json::from_slice(&blob).unwrap();
        assert_eq!(blob["version"], meta.dns_version);
        (blob["record_infos"].as_array().unwrap().iter())
            .filter(|row| row[8] == "sim")
            .map(|row| {
                let agent = row[11].as_str().unwrap().to_string();
                (
                    row[0].as_str().unwrap().into(),
                    (agent, row[9].as_str().unwrap().into()),
                )
            })
            .collect()
    }

    /// Every instance with a VM as the state has it: uuid => (agent id, address: its
    /// reservation, or on the dynamic network the one its VM got).
    fn live_agents(&self) -> BTreeMap<String, (String, String)> {
        (self.state().instances.into_values())
            .filter_map(|i| {
                let vm = i.vm?;
                let ip = match i.ips.values().next() {
                    Some(r) => r.ip.clone(),
                    None => vm.networks["dyn"]["ip"].as_str()?.to_string(),
                };
                Some((i.uuid, (vm.agent_id, ip)))
            })
            .collect()
    }

    /// The milestones of `kind` since the start, as `(instance, cids)`, sorted.
    fn milestones_of(&self, kind: &str) -> Vec<(String, Vec<String>)> {
        let mut v: Vec<_> = (self.milestones().into_iter())
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, i, cids)| (i, cids))
            .collect();
        v.sort();
        v
    }
}

/// The `Updating instance` tasks of `group` as `(task, state)` in log order.
fn update_events(events: &EventLog, group: &str) -> Vec<(String, State)> {
    events
        .lines()
        .into_iter()
        .filter_map(|l| match l {
            EventLine::Stage(e)
                if e.stage == "Updating instance"
                    && e.tags == [group.to_string()]
                    && e.state != State::InProgress =>
            {
                Some((e.task, e.state))
            }
            _ => None,
        })
        .collect()
}

/// The most tasks open at once in `(task, state)` order.
fn max_open(events: &[(String, State)]) -> usize {
    let mut open = BTreeSet::new();
    let mut most = 0;
    for (task, state) in events {
        match state {
            State::Started => {
                open.insert(task.clone());
                most = most.max(open.len());
            }
            _ => {
                open.remove(task);
            }
        }
    }
    most
}

#[tokio::test(start_paused = true)]
async fn a_fresh_deploy_creates_everything_and_a_second_one_calls_nothing() {
    let sim = Sim::new();
    let report = sim.deploy(manifest()).await;
    assert!(!report.noop);
    assert_eq!(report.updated.len(), 7, "{report:?}");
    assert_eq!(report.compiled, 2, "libhello and hello-server");
    sim.assert_no_leak();

    let inventory = sim.cloud.inventory();
    assert_eq!(inventory.vms.len(), 7, "the compilation VMs are gone");
    assert_eq!(inventory.disks.len(), 5, "web's 3 and api's 2");
    assert_eq!(inventory.stemcells.len(), 1);
    assert_eq!(
        inventory.stemcells[0].image_path,
        sim.dir
            .path()
            .join("no-such-image-1.0")
            .display()
            .to_string(),
        "the simulated cloud records the image path and never reads it"
    );
    // hello-server needs libhello: a chain, compiled on one reused worker.
    assert_eq!(sim.cloud.count("create_vm"), 7 + 1);
    assert_eq!(sim.cloud.count("delete_vm"), 1);
    // Milestones: a VM per instance (compilation workers are not instances), a disk per
    // instance with one, DNS once.
    let mut vms: Vec<(String, Vec<String>)> = (sim.state().instances.values())
        .map(|i| (i.display_name(), vec![Sim::vm_cid(i)]))
        .collect();
    vms.sort();
    assert_eq!(sim.milestones_of("VmCreated"), vms);
    let mut disks: Vec<(String, Vec<String>)> = (sim.state().instances.values())
        .flat_map(|i| {
            i.disks
                .iter()
                .map(|d| (i.display_name(), vec![d.cid.clone()]))
        })
        .collect();
    disks.sort();
    assert_eq!(sim.milestones_of("DiskCreated"), disks);
    assert_eq!(sim.milestones_of("DnsSynced").len(), 1);

    let web = sim.group("web");
    let api = sim.group("api");
    let worker = sim.group("worker");
    assert_eq!(
        web.iter().map(|i| i.index).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    let azs: BTreeSet<_> = web.iter().map(|i| i.az.clone().unwrap()).collect();
    assert_eq!(azs.len(), 2, "web is spread over both AZs");
    for i in &web {
        let ip = &i.ips["default"].ip;
        let subnet = if i.az.as_deref() == Some("z1") {
            "10.0.1."
        } else {
            "10.0.2."
        };
        assert!(
            ip.starts_with(subnet) && !i.ips["default"].is_static,
            "{ip}"
        );
        assert_eq!(i.disks.len(), 1);
        assert_eq!(i.disks[0].size_mib, 1024);
    }
    let api_ips: Vec<&str> = api.iter().map(|i| i.ips["default"].ip.as_str()).collect();
    assert_eq!(api_ips, vec!["10.0.1.50", "10.0.1.51"]);
    assert!(api.iter().all(|i| i.ips["default"].is_static));
    assert!(api.iter().all(|i| i.disks[0].size_mib == 2048));
    for i in &worker {
        assert!(i.disks.is_empty());
        // The cloud chose the address of the dynamic network; the agent got it.
        let vm = sim.cloud.vm(&VmCid(Sim::vm_cid(i))).unwrap();
        let ip = vm.networks["dyn"]["ip"].as_str().unwrap().to_string();
        assert!(ip.starts_with("100."), "{ip}");
        let agent = sim.agents.agent(&Sim::agent_id(i)).unwrap();
        assert_eq!(agent.spec["networks"]["dyn"]["ip"], json!(ip));
    }
    // Every instance's jobs run, with its disk mounted.
    for i in web.iter().chain(&api).chain(&worker) {
        let agent = sim.agents.agent(&Sim::agent_id(i)).unwrap();
        assert!(agent.started && !agent.stopped, "{}", i.name());
        assert_eq!(agent.store, i.disks.first().map(|d| d.cid.clone()));
        assert_eq!(agent.spec["id"], json!(i.uuid));
        // post-deploy runs on every instance once the deploy changed something.
        assert_eq!(
            agent.scripts,
            vec!["pre-start", "post-start", "post-deploy"]
        );
    }

    // The same deploy again: the cloud is not called, each agent is asked its state once.
    sim.reset_calls();
    let report = sim.deploy(manifest()).await;
    assert!(report.noop, "{report:?}");
    assert_eq!(sim.cloud.counts(), BTreeMap::new());
    assert_eq!(
        sim.agent_counts(),
        BTreeMap::from([("get_state".to_string(), 7)])
    );

    // With the agents' heartbeats, not even that.
    sim.reset_calls();
    let engine = sim.with_health();
    let report = sim.deploy_with(&engine, &sim.request(manifest())).await;
    assert!(report.noop, "{report:?}");
    assert_eq!(sim.cloud.counts(), BTreeMap::new());
    assert_eq!(sim.agent_counts(), BTreeMap::new());

    // An agent whose jobs fail makes the heartbeat shortcut ask again, and its instance
    // is redone.
    sim.agents
        .set_jobs_never_running(&Sim::agent_id(&worker[0]), true)
        .unwrap();
    let err = engine
        .deploy(&sim.request(manifest()))
        .await
        .expect_err("the failing instance cannot be brought back");
    assert!(
        err.to_string().starts_with(&format!(
            "'{}' is not running after update",
            worker[0].display_name()
        )),
        "{err}"
    );
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn after_an_errand_run_the_same_deploy_is_a_no_op_that_asks_nothing() {
    let sim = Sim::new();
    let mut m = manifest();
    (m["instance_groups"].as_array_mut().unwrap()).push(json!({
        "name": "smoke-tests", "lifecycle": "errand", "instances": 1, "azs": ["z1"],
        "vm_type": "small", "stemcell": "default", "networks": [{"name": "default"}],
        "jobs": [{
            "name": "smoke-test", "release": "hello",
            "consumes": {"greeters": {"from": "web_greeter"}},
        }],
    }));
    sim.deploy(m.clone()).await;
    assert!(
        sim.group("smoke-tests").is_empty(),
        "no errand VM between runs"
    );
    let outcomes = sim
        .engine
        .run_lifecycle_errand(&sim.request(m.clone()), "smoke-tests", false)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", sim.event_text()));
    let ran: Vec<(i64, &str)> = (outcomes.iter())
        .map(|o| (o.exit_code, o.stdout.as_str()))
        .collect();
    assert_eq!(ran, [(0, "ran smoke-test")]);
    assert!(sim.group("smoke-tests").is_empty(), "its VM went again");

    // The errand's own deploy is not the deployment's last: what it is now is.
    sim.reset_calls();
    let engine = sim.with_health();
    let report = sim.deploy_with(&engine, &sim.request(m.clone())).await;
    assert!(report.noop, "{report:?}");
    assert_eq!(sim.cloud.counts(), BTreeMap::new());
    assert_eq!(sim.agent_counts(), BTreeMap::new());

    // A deploy whose inputs differ (errand VMs asked of a group that is no errand) but
    // whose plan changes nothing did nothing, and says so.
    let mut request = sim.request(m);
    request.errands.insert("web".into());
    let report = sim.deploy_with(&engine, &request).await;
    assert!(report.noop, "{report:?}");
    assert!(
        report.updated.is_empty() && report.deleted.is_empty(),
        "{report:?}"
    );
    assert_eq!(sim.cloud.counts(), BTreeMap::new());
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn scaling_up_and_down_keeps_indexes_and_orphans_the_disks_of_removed_instances() {
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let before = sim.group("web");

    let mut bigger = manifest();
    group_mut(&mut bigger, "web")["instances"] = json!(5);
    let report = sim.deploy(bigger).await;
    assert_eq!(report.updated.len(), 2, "{report:?}");
    assert_eq!(sim.last_plan().as_deref(), Some("web: 2 to create"));
    let web = sim.group("web");
    assert_eq!(
        web.iter().map(|i| i.index).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    for old in &before {
        assert_eq!(
            web.iter().find(|i| i.uuid == old.uuid).unwrap().vm,
            old.vm,
            "existing instances keep their VM"
        );
    }
    sim.assert_no_leak();

    let mut smaller = manifest();
    group_mut(&mut smaller, "web")["instances"] = json!(2);
    let report = sim.deploy(smaller).await;
    assert_eq!(sim.last_plan().as_deref(), Some("web: 3 to delete"));
    let removed: Vec<&InstanceRecord> = web.iter().filter(|i| i.index >= 2).collect();
    let mut expected: Vec<String> = removed.iter().map(|i| i.display_name()).collect();
    expected.sort();
    assert_eq!(report.deleted, expected, "the highest indexes go");
    assert!(report.updated.is_empty(), "{report:?}");
    let kept = sim.group("web");
    assert_eq!(kept.iter().map(|i| i.index).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(kept[0].vm, web[0].vm);
    assert_eq!(kept[1].vm, web[1].vm);
    let state = sim.state();
    for r in &removed {
        let disk = &r.disks[0].cid;
        let orphan = state
            .orphaned_disks
            .get(disk)
            .unwrap_or_else(|| panic!("{disk} of {} is orphaned", r.name()));
        assert_eq!(orphan.instance, r.name());
        assert!(
            sim.cloud
                .disk(&kubosh_cloud::DiskCid(disk.clone()))
                .is_some()
        );
        assert!(sim.cloud.vm(&VmCid(Sim::vm_cid(r))).is_none());
    }
    assert_eq!(sim.cloud.inventory().vms.len(), 2 + 2 + 2);
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn a_property_change_restarts_only_its_group_canary_first_within_max_in_flight() {
    let sim = Sim::new();
    let with_greeting = |greeting: &str| {
        let mut m = manifest();
        let web = group_mut(&mut m, "web");
        web["instances"] = json!(10);
        web["azs"] = json!(["z1"]);
        web["jobs"] = json!([hello_job("web", greeting)]);
        web["update"] = json!({"canaries": 1, "max_in_flight": 3});
        m
    };
    sim.deploy(with_greeting("Hello")).await;
    let before = sim.state();
    let others: Vec<InstanceRecord> = sim
        .group("api")
        .into_iter()
        .chain(sim.group("worker"))
        .collect();
    // Applying takes 5 s, so updates overlap.
    sim.agents.set_latency("apply", Duration::from_secs(5));
    sim.reset_calls();
    let events_before = sim.events.lines().len();

    let report = sim.deploy(with_greeting("Howdy")).await;
    assert_eq!(report.updated.len(), 10, "{report:?}");
    assert_eq!(
        sim.last_plan().as_deref(),
        Some("web: 10 to update (configuration)")
    );
    assert!(report.updated.iter().all(|n| n.starts_with("web/")));
    assert!(
        report
            .plan
            .iter()
            .filter(|p| p.instance.starts_with("web/"))
            .all(|p| p.action == "update" && p.changes == vec!["configuration"]),
        "{report:?}"
    );
    assert_eq!(sim.cloud.counts(), BTreeMap::new(), "no VM is touched");
    // The other groups' agents were asked their state and ran post-deploy (every instance
    // does once a deploy changed something), nothing else.
    let calls = sim.agents.calls();
    for other in &others {
        let id = Sim::agent_id(other);
        let methods: Vec<&str> = calls
            .iter()
            .filter(|c| c.target == id)
            .map(|c| c.method.as_str())
            .collect();
        assert!(
            methods
                .iter()
                .all(|m| ["get_state", "sync_dns", "run_script", "get_task"].contains(m)),
            "{}: {methods:?}",
            other.name()
        );
        let agent = sim.agents.agent(&id).unwrap();
        assert_eq!(
            agent.scripts.last().map(String::as_str),
            Some("post-deploy"),
            "{}",
            other.name()
        );
    }
    let after = sim.state();
    for other in &others {
        assert_eq!(after.instances[&other.uuid], before.instances[&other.uuid]);
    }

    // The order of the log: the canary alone, then never more than 3 at once.
    let log = EventLog::new();
    for line in sim.events.lines().into_iter().skip(events_before) {
        kubosh_engine::EventSink::emit(&log, line);
    }
    let events = update_events(&log, "web");
    assert_eq!(events.len(), 20, "{events:?}");
    let canary = &events[0].0;
    assert!(canary.ends_with("(canary)"), "{events:?}");
    assert!(
        canary.contains("(0)"),
        "the bootstrap instance is the canary"
    );
    assert_eq!(events[1], (canary.clone(), State::Finished), "{events:?}");
    assert_eq!(max_open(&events), 3, "{events:?}");
    // Work-conserving: after the canary, three start before any finishes.
    assert!(
        events[2..5].iter().all(|(_, s)| *s == State::Started),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_stemcell_recreates_every_vm_and_a_subnet_change_recreates_its_instances() {
    let mut sim = Sim::new();
    sim.deploy(manifest()).await;
    let before = sim.state();
    let newer = stemcell(sim.dir.path(), "1.1");
    sim.stemcells.push(newer);

    let report = sim.deploy(manifest()).await;
    assert_eq!(report.updated.len(), 7, "{report:?}");
    assert!(
        report.plan.iter().all(|p| p.changes.contains(&"stemcell")),
        "{report:?}"
    );
    let after = sim.state();
    let mut recreated: Vec<(String, Vec<String>)> = (before.instances.values())
        .map(|old| {
            let new = &after.instances[&old.uuid];
            (old.display_name(), vec![Sim::vm_cid(old), Sim::vm_cid(new)])
        })
        .collect();
    recreated.sort();
    assert_eq!(sim.milestones_of("VmRecreated"), recreated);
    assert_eq!(
        sim.milestones_of("VmCreated").len(),
        7,
        "only the first deploy's"
    );
    for (uuid, old) in &before.instances {
        let new = &after.instances[uuid];
        let (old_vm, new_vm) = (old.vm.as_ref().unwrap(), new.vm.as_ref().unwrap());
        assert_ne!(old_vm.cid, new_vm.cid, "{} is recreated", old.name());
        assert_eq!(new_vm.stemcell, "bosh-sim-ubuntu-jammy/1.1");
        assert_eq!(new.ips, old.ips, "{} keeps its addresses", old.name());
        assert_eq!(new.disks, old.disks, "{} keeps its disks", old.name());
    }
    assert_eq!(
        sim.published_dns().await,
        sim.live_agents(),
        "the records name the new VMs' agents"
    );
    sim.assert_no_leak();

    // The z2 subnet of the manual network gets new cloud properties: the instances on it
    // are recreated, nothing else.
    let on_z2: BTreeSet<String> = after
        .instances
        .values()
        .filter(|i| i.az.as_deref() == Some("z2") && i.ips.contains_key("default"))
        .map(|i| i.uuid.clone())
        .collect();
    assert!(!on_z2.is_empty());
    let mut cloud = cloud_config();
    cloud["networks"][0]["subnets"][1]["cloud_properties"] = json!({"subnet": "s2-new"});
    let request = sim.request_on(manifest(), cloud.clone());
    let report = sim.deploy_with(&sim.engine, &request).await;
    let updated: BTreeSet<String> = report
        .updated
        .iter()
        .map(|n| n.split(['/', ' ']).nth(1).unwrap().to_string())
        .collect();
    assert_eq!(updated, on_z2, "{report:?}");
    let recreated = sim.state();
    for (uuid, i) in &recreated.instances {
        let moved = i.vm != after.instances[uuid].vm;
        assert_eq!(moved, on_z2.contains(uuid), "{}", i.name());
        assert_eq!(i.ips, after.instances[uuid].ips);
    }
    for uuid in &on_z2 {
        let vm = sim
            .cloud
            .vm(&VmCid(Sim::vm_cid(&recreated.instances[uuid])))
            .unwrap();
        assert_eq!(
            vm.networks["default"]["cloud_properties"],
            json!({"subnet": "s2-new"})
        );
    }
    sim.assert_no_leak();

    // A new static address for api/1: it alone is recreated, on the new address.
    let api1 = sim.group("api")[1].clone();
    let mut m = manifest();
    group_mut(&mut m, "api")["networks"][0]["static_ips"] = json!(["10.0.1.50", "10.0.1.52"]);
    let request = sim.request_on(m, cloud);
    let report = sim.deploy_with(&sim.engine, &request).await;
    assert_eq!(report.updated, vec![api1.display_name()], "{report:?}");
    let moved = &sim.state().instances[&api1.uuid];
    assert_eq!(moved.ips["default"].ip, "10.0.1.52");
    assert_ne!(moved.vm, api1.vm);
    assert_eq!(moved.disks, api1.disks);
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn a_bigger_disk_carries_the_data_over_and_orphans_the_old_disk() {
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let web = sim.group("web");
    for i in &web {
        sim.agents
            .write_store_file(
                &Sim::agent_id(i),
                "data/marker",
                &format!("from {}", i.uuid),
            )
            .unwrap();
    }

    let mut m = manifest();
    group_mut(&mut m, "web")["persistent_disk"] = json!(4096);
    let report = sim.deploy(m).await;
    assert_eq!(report.updated.len(), 3, "{report:?}");
    assert!(
        report
            .plan
            .iter()
            .filter(|p| p.instance.starts_with("web/"))
            .all(|p| p.action == "update" && p.changes == vec!["persistent_disk"]),
        "{report:?}"
    );
    let state = sim.state();
    for old in &web {
        let new = &state.instances[&old.uuid];
        assert_eq!(new.vm, old.vm, "a disk change keeps the VM");
        assert_eq!(new.disks.len(), 1);
        assert_eq!(new.disks[0].size_mib, 4096);
        assert_ne!(new.disks[0].cid, old.disks[0].cid);
        assert_eq!(
            sim.agents
                .read_store_file(&Sim::agent_id(new), "data/marker")
                .unwrap(),
            Some(format!("from {}", old.uuid))
        );
        let orphan = &state.orphaned_disks[&old.disks[0].cid];
        assert_eq!(orphan.instance, old.name());
        assert_eq!(
            sim.cloud
                .disk_files(&kubosh_cloud::DiskCid(old.disks[0].cid.clone()))
                .unwrap()["data/marker"],
            format!("from {}", old.uuid),
            "the orphaned disk keeps its data"
        );
    }
    assert_eq!(state.orphaned_disks.len(), 3);
    let mut migrated: Vec<(String, Vec<String>)> = (web.iter())
        .map(|old| {
            let new = &state.instances[&old.uuid].disks[0].cid;
            (
                old.display_name(),
                vec![old.disks[0].cid.clone(), new.clone()],
            )
        })
        .collect();
    migrated.sort();
    assert_eq!(sim.milestones_of("DiskMigrated"), migrated);
    assert!(
        sim.milestones_of("DiskOrphaned").is_empty(),
        "a migration says where the data went"
    );
    sim.assert_no_leak();
}

/// A removed group that comes back gets its disks back: each instance the orphan of the
/// same index (same AZ, name, size, cloud properties), with its data, and no new disk; a
/// disk with another size stays orphaned. Deleting orphaned disks by CID deletes them.
#[tokio::test(start_paused = true)]
async fn a_group_that_comes_back_gets_its_orphaned_disks_again() {
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let api = sim.group("api");
    for i in &api {
        let cid = kubosh_cloud::DiskCid(i.disks[0].cid.clone());
        sim.cloud
            .write_disk_file(&cid, "data/marker", &format!("from {}", i.index))
            .unwrap();
    }
    let mut without = manifest();
    without["instance_groups"]
        .as_array_mut()
        .unwrap()
        .retain(|g| g["name"] != "api");
    sim.deploy(without).await;
    assert_eq!(sim.state().orphaned_disks.len(), 2);

    sim.cloud.reset_calls();
    sim.deploy(manifest()).await;
    let back = sim.group("api");
    assert_eq!(sim.cloud.counts().get("create_disk"), None, "no new disk");
    for (old, new) in api.iter().zip(&back) {
        assert_eq!(new.index, old.index);
        assert_ne!(new.uuid, old.uuid, "a new instance");
        assert_eq!(new.disks[0].cid, old.disks[0].cid, "its old disk");
        let cid = kubosh_cloud::DiskCid(new.disks[0].cid.clone());
        assert_eq!(
            sim.cloud.disk_files(&cid).unwrap()["data/marker"],
            format!("from {}", old.index)
        );
    }
    assert!(sim.state().orphaned_disks.is_empty());
    assert!(
        sim.events
            .lines()
            .iter()
            .any(|l| l.to_json().contains("Attached orphaned disk"))
    );
    sim.assert_no_leak();

    // Orphaned again; back with a bigger disk: new disks, the old ones stay orphaned, and
    // deleting them by CID deletes them (an attached one is never deleted).
    let mut without = manifest();
    without["instance_groups"]
        .as_array_mut()
        .unwrap()
        .retain(|g| g["name"] != "api");
    sim.deploy(without).await;
    let mut bigger = manifest();
    group_mut(&mut bigger, "api")["persistent_disk_type"] = json!(null);
    group_mut(&mut bigger, "api")["persistent_disk"] = json!(8192);
    sim.deploy(bigger).await;
    let state = sim.state();
    let orphans: Vec<String> = state.orphaned_disks.keys().cloned().collect();
    assert_eq!(orphans.len(), 2);
    let attached = sim.group("api")[0].disks[0].cid.clone();
    assert!(!orphans.contains(&attached));
    let mut cids = orphans.clone();
    cids.push(attached.clone());
    // An attached CID passed by mistake is not an orphan: nothing to do.
    sim.engine
        .delete_orphaned_disks("sim", &cids)
        .await
        .unwrap();
    assert!(sim.state().orphaned_disks.is_empty());
    for cid in &orphans {
        assert!(
            sim.cloud
                .disk_files(&kubosh_cloud::DiskCid(cid.clone()))
                .is_none()
        );
    }
    assert!(
        sim.cloud
            .disk_files(&kubosh_cloud::DiskCid(attached))
            .is_some()
    );
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn a_removed_group_loses_its_vms_and_its_disks_are_orphaned() {
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let api = sim.group("api");
    let mut m = manifest();
    m["instance_groups"]
        .as_array_mut()
        .unwrap()
        .retain(|g| g["name"] != "api");
    let report = sim.deploy(m).await;
    let mut expected: Vec<String> = api.iter().map(InstanceRecord::display_name).collect();
    expected.sort();
    assert_eq!(report.deleted, expected);
    assert!(report.updated.is_empty(), "{report:?}");
    let state = sim.state();
    assert!(state.instances.values().all(|i| i.group != "api"));
    for i in &api {
        assert!(sim.cloud.vm(&VmCid(Sim::vm_cid(i))).is_none());
        assert!(state.orphaned_disks.contains_key(&i.disks[0].cid));
        assert!(sim.agents.agent(&Sim::agent_id(i)).is_none());
    }
    let gone = |cid: fn(&InstanceRecord) -> String| {
        let mut v: Vec<_> = api
            .iter()
            .map(|i| (i.display_name(), vec![cid(i)]))
            .collect();
        v.sort();
        v
    };
    assert_eq!(sim.milestones_of("VmDeleted"), gone(Sim::vm_cid));
    assert_eq!(
        sim.milestones_of("DiskOrphaned"),
        gone(|i| i.disks[0].cid.clone())
    );
    assert_eq!(sim.cloud.inventory().vms.len(), 5);
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn every_deployment_shares_one_dns_dataset_and_every_agent_receives_it() {
    let sim = Sim::new();
    let registry = Arc::new(MemoryDnsRegistry::default());
    let mut first = sim.engine.clone();
    first.config.dns_registry = Some(registry.clone());
    // The deployments share the compilation network too.
    first.config.ip_registry = Some(Arc::new(MemoryIpRegistry::default()));
    sim.deploy_with(&first, &sim.request(manifest())).await;
    let first_version = sim.state().meta.dns_version;

    // A second deployment on the same director: its own state, the shared registry.
    let other_store = MemoryStore::new();
    let mut second = first.clone();
    second.store = Arc::new(other_store.clone());
    let other = json!({
        "name": "other",
        "releases": [{"name": "hello", "version": "1.0.0"}],
        "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
        "update": {"canaries": 1, "max_in_flight": 1,
                   "canary_watch_time": 1000, "update_watch_time": 1000},
        "instance_groups": [{
            "name": "solo", "instances": 1, "azs": ["z1"], "vm_type": "small",
            "stemcell": "default", "networks": [{"name": "dyn"}],
            "jobs": [hello_job("solo", "Hey")],
        }],
    });
    sim.deploy_with(&second, &sim.request(other)).await;
    let other_meta = other_store.snapshot().meta;
    assert!(
        other_meta.dns_version > first_version,
        "a later blob has a higher version, whichever deployment made it"
    );

    // Every agent of both deployments was sent the new dataset.
    let agents = sim.agents.agent_ids();
    assert_eq!(agents.len(), 8, "7 instances of sim and 1 of other");
    for agent in &agents {
        assert_eq!(
            sim.agents.agent(agent).unwrap().dns_version,
            Some(other_meta.dns_version),
            "agent {agent}"
        );
    }
    // And it names the instances of both.
    let blob_id = other_meta.dns_blob.clone().unwrap();
    // Blob ids are the sha256 of the content.
    let digest: kubosh_base::digest::MultiDigest = format!("sha256:{blob_id}").parse().unwrap();
    let blob = first.blobstore.get_bytes(&blob_id, &digest).await.unwrap();
    let blob: Value = serde_json::from_slice(&blob).unwrap();
    let deployments: BTreeSet<&str> = blob["record_infos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row[8].as_str().unwrap())
        .collect();
    assert_eq!(deployments, BTreeSet::from(["other", "sim"]));
    assert_eq!(blob["version"], other_meta.dns_version);
}

/// A one-group deployment `name` of `instances` on the manual network of [`cloud_config`].
fn small_deployment(name: &str, instances: u64, static_ips: &[&str]) -> Value {
    let mut network = json!({"name": "default"});
    if !static_ips.is_empty() {
        network["static_ips"] = json!(static_ips);
    }
    json!({
        "name": name,
        "releases": [{"name": "hello", "version": "1.0.0"}],
        "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
        "update": {"canaries": 1, "max_in_flight": 1,
                   "canary_watch_time": 1000, "update_watch_time": 1000},
        "instance_groups": [{
            "name": "solo", "instances": instances, "azs": ["z1"], "vm_type": "small",
            "stemcell": "default", "networks": [network],
            "jobs": [hello_job("solo", "Hey")],
        }],
    })
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_cloud_is_paced_by_its_answers_and_fails_no_deploy() {
    // Unpaced, the engine's first refused create_vm fails the deploy.
    let sim = Sim::new();
    sim.cloud.set_rate_limit("create_vm", 2.0, 2);
    let err = (sim.engine)
        .deploy(&sim.request(small_deployment("sim", 40, &[])))
        .await
        .expect_err("a refused create_vm fails an unpaced deploy");
    assert!(err.to_string().contains("RequestLimitExceeded"), "{err}");

    // Paced, the same cloud takes every VM: the limit is found and kept to.
    let sim = Sim::new();
    sim.cloud.set_rate_limit("create_vm", 2.0, 2);
    let pacer = Arc::new(Pacer::new(CloudLimits::default()));
    let mut engine = sim.engine.clone();
    engine.cloud = Arc::new(PacedCloud::new(sim.cloud.clone(), pacer.clone()));
    let report = (sim.deploy_with(&engine, &sim.request(small_deployment("sim", 100, &[])))).await;
    assert_eq!(report.updated.len(), 100);
    let refused = sim.cloud.rate_limited("create_vm");
    let calls = pacer.stats()["create_vm"].calls;
    assert!(refused > 0, "the limit was met");
    assert!(
        refused * 20 <= calls,
        "{refused} of {calls} calls refused: more than 5 %"
    );
    // The instances' VMs came at the limit's pace (2 a second), not slower.
    let instances: BTreeSet<String> = (sim.state().instances.values())
        .filter_map(|i| Some(i.vm.as_ref()?.agent_id.clone()))
        .collect();
    let vms: Vec<tokio::time::Instant> = (sim.cloud.rate_limit_admitted("create_vm").into_iter())
        .filter(|(_, agent)| instances.contains(agent))
        .map(|(at, _)| at)
        .collect();
    assert_eq!(vms.len(), 100);
    let span = vms[99].duration_since(vms[0]).as_secs_f64();
    assert!(99.0 / span >= 1.8, "{:.2} VMs a second", 99.0 / span);
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn deployments_sharing_a_network_never_share_an_address() {
    let sim = Sim::new();
    let registry = Arc::new(MemoryIpRegistry::default());
    let mut first = sim.engine.clone();
    first.config.ip_registry = Some(registry.clone());
    sim.deploy_with(&first, &sim.request(manifest())).await;
    let taken: BTreeSet<String> = sim
        .state()
        .instances
        .values()
        .flat_map(|i| i.ips.values().map(|r| r.ip.clone()))
        .collect();
    assert!(taken.contains("10.0.1.10") && taken.contains("10.0.1.50"));

    let other_store = MemoryStore::new();
    let mut second = first.clone();
    second.store = Arc::new(other_store.clone());
    // A static address the first deployment holds: the Director's 130008, nothing made.
    let vms_before = sim.cloud.inventory().vms.len();
    let err = second
        .deploy(&sim.request(small_deployment("other", 1, &["10.0.1.50"])))
        .await
        .expect_err("the address is taken");
    let text = err.to_string();
    assert!(
        text.contains("Failed to reserve IP '10.0.1.50/32'")
            && text.contains("from deployment 'sim'"),
        "{text}"
    );
    assert_eq!(sim.cloud.inventory().vms.len(), vms_before);
    assert!(other_store.snapshot().instances.is_empty());

    // Dynamic addresses go around the first deployment's.
    sim.deploy_with(&second, &sim.request(small_deployment("other", 3, &[])))
        .await;
    let theirs: BTreeSet<String> = other_store
        .snapshot()
        .instances
        .values()
        .flat_map(|i| i.ips.values().map(|r| r.ip.clone()))
        .collect();
    assert_eq!(theirs.len(), 3);
    assert!(theirs.is_disjoint(&taken), "{theirs:?} vs {taken:?}");

    // Scaling the first deployment down frees addresses the other may then take.
    let mut smaller = manifest();
    group_mut(&mut smaller, "api")["instances"] = json!(1);
    group_mut(&mut smaller, "api")["networks"][0]["static_ips"] = json!(["10.0.1.50"]);
    sim.deploy_with(&first, &sim.request(smaller)).await;
    let other_view = registry.held_elsewhere("other").await.unwrap();
    assert!(other_view.iter().all(|r| r.ip.to_string() != "10.0.1.51"));
    // The cloud holds the VMs of both deployments, nothing else.
    let recorded = sim.state().instances.len() + other_store.snapshot().instances.len();
    assert_eq!(sim.cloud.inventory().vms.len(), recorded);
}

#[tokio::test(start_paused = true)]
async fn a_canary_that_never_runs_fails_the_deploy_and_leaves_the_others_alone() {
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let before = sim.state();
    let web = sim.group("web");
    let canary = web.iter().find(|i| i.bootstrap).unwrap().clone();
    sim.agents
        .set_jobs_never_running(&Sim::agent_id(&canary), true)
        .unwrap();
    let mut m = manifest();
    group_mut(&mut m, "web")["jobs"] = json!([hello_job("web", "Howdy")]);
    m["update"]["canary_watch_time"] = json!("1000-10000");
    sim.reset_calls();
    let start = tokio::time::Instant::now();
    let err = sim.engine.deploy(&sim.request(m)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "'{}' is not running after update. Review logs for failed jobs: hello",
            canary.display_name()
        )
    );
    assert_eq!(err.code(), 400_007);
    // The canary watch time bounds the wait.
    assert!(
        start.elapsed() >= Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(
        start.elapsed() < Duration::from_secs(12),
        "{:?}",
        start.elapsed()
    );
    let after = sim.state();
    assert!(
        !after.instances[&canary.uuid].update_completed,
        "the canary is dirty"
    );
    for (uuid, i) in &before.instances {
        if *uuid != canary.uuid {
            assert_eq!(&after.instances[uuid], i, "{} is untouched", i.name());
        }
    }
    let calls = sim.agents.calls();
    let canary_agent = Sim::agent_id(&canary);
    assert!(
        calls
            .iter()
            .filter(|c| c.target != canary_agent)
            .all(|c| c.method == "get_state"),
        "{calls:?}"
    );
    assert!(sim.events.lines().iter().any(|l| matches!(l,
        EventLine::Error(e) if e.error.code == 400_007)));
    sim.assert_no_leak();
}

/// An instance whose first update never completed (its record has nothing applied): a
/// `--recreate` still gives it a new VM (it was taken for merely dirty and updated in place
/// on the old one).
#[tokio::test(start_paused = true)]
async fn a_recreate_replaces_the_vm_of_an_instance_whose_first_update_never_completed() {
    use kubosh_engine::state::{StateStore, Write};
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let mut never = sim.group("web")[0].clone();
    never.applied = None;
    never.update_completed = false;
    sim.store
        .write(&Write::Instance(Box::new(never.clone())))
        .await
        .unwrap();
    let old_vm = never.vm.clone().unwrap().cid;
    let mut request = sim.request(manifest());
    request.requests.recreate = true;
    let report = sim.engine.prepare(&request).await.unwrap().report();
    assert!(
        report
            .to_string()
            .contains(&format!("{}: recreate", never.display_name())),
        "{report}"
    );
    sim.deploy_with(&sim.engine, &request).await;
    let after = &sim.state().instances[&never.uuid];
    assert_ne!(after.vm.as_ref().unwrap().cid, old_vm, "a new VM");
    assert!(after.update_completed && after.applied.is_some());
    sim.assert_no_leak();
}

/// One publish: the instances named (uuid => agent id), and the agents whose VMs the cloud
/// held at that moment.
type Publish = (BTreeMap<String, String>, BTreeSet<String>);

/// A DNS registry that remembers each publish.
struct RecordingDnsRegistry {
    inner: MemoryDnsRegistry,
    cloud: Arc<SimCloud>,
    publishes: std::sync::Mutex<Vec<Publish>>,
}

impl RecordingDnsRegistry {
    fn new(cloud: Arc<SimCloud>) -> RecordingDnsRegistry {
        RecordingDnsRegistry {
            inner: MemoryDnsRegistry::default(),
            cloud,
            publishes: Default::default(),
        }
    }

    fn publishes(&self) -> Vec<Publish> {
        self.publishes.lock().unwrap().clone()
    }
}

impl DnsRegistry for RecordingDnsRegistry {
    fn publish<'a>(
        &'a self,
        deployment: &'a str,
        instances: Option<Vec<DnsInstance>>,
        at_least: u64,
    ) -> StoreFuture<'a, DnsDataset> {
        let named = (instances.iter().flatten())
            .map(|i| (i.uuid.clone(), i.agent_id.clone().unwrap_or_default()))
            .collect();
        let vms = self.cloud.inventory().agents.into_iter().collect();
        self.publishes.lock().unwrap().push((named, vms));
        self.inner.publish(deployment, instances, at_least)
    }
}

/// A deploy that scales web up and worker down, then fails on api's canary: the records it
/// leaves name web's new instance (made and running) and not worker's deleted one, every
/// agent has them, and worker/1 left them before its VM went. Two publishes: one before
/// the deletion, one once the new VM exists; the rollout recreated no VM, and the failure
/// changed nothing more.
#[tokio::test(start_paused = true)]
async fn a_deploy_that_fails_midway_leaves_dns_records_of_the_instances_as_they_are() {
    let mut sim = Sim::new();
    let registry = Arc::new(RecordingDnsRegistry::new(sim.cloud.clone()));
    sim.engine.config.dns_registry = Some(registry.clone());
    sim.deploy(manifest()).await;
    assert_eq!(sim.published_dns().await, sim.live_agents());
    let worker1 = sim.group("worker").remove(1);
    let api_canary = sim.group("api").into_iter().find(|i| i.bootstrap).unwrap();
    sim.agents
        .set_jobs_never_running(&Sim::agent_id(&api_canary), true)
        .unwrap();
    let mut m = manifest();
    group_mut(&mut m, "web")["instances"] = json!(4);
    group_mut(&mut m, "worker")["instances"] = json!(1);
    group_mut(&mut m, "api")["jobs"] = json!([hello_job("api", "Howdy")]);
    m["update"]["canary_watch_time"] = json!("1000-10000");
    let earlier = registry.publishes().len();
    let err = sim.engine.deploy(&sim.request(m)).await.unwrap_err();
    assert_eq!(err.code(), 400_007, "{err}");

    let web3 = sim.group("web").remove(3);
    assert!(web3.update_completed, "web/3 was made and runs");
    assert!(!sim.state().instances.contains_key(&worker1.uuid));
    let published = sim.published_dns().await;
    assert_eq!(published, sim.live_agents(), "the records name what is");
    assert_eq!(published[&web3.uuid].0, Sim::agent_id(&web3));
    assert!(!published.contains_key(&worker1.uuid));
    let version = sim.state().meta.dns_version;
    for agent in sim.agents.agent_ids() {
        assert_eq!(
            sim.agents.agent(&agent).unwrap().dns_version,
            Some(version),
            "agent {agent}"
        );
    }
    let publishes = registry.publishes()[earlier..].to_vec();
    assert_eq!(publishes.len(), 2, "{publishes:?}");
    let (withdrawn, vms) = &publishes[0];
    assert!(!withdrawn.contains_key(&worker1.uuid));
    assert!(
        vms.contains(&Sim::agent_id(&worker1)),
        "worker/1 left the records while its VM existed"
    );
    for (named, vms) in &publishes {
        for agent in named.values() {
            assert!(vms.contains(agent), "{agent} is named without a VM");
        }
    }
    sim.assert_no_leak();
}

/// Drops a deploy at growing virtual deadlines: each time the next full deploy converges
/// to what an uninterrupted one gives, and nothing leaks.
#[tokio::test(start_paused = true)]
async fn an_interrupted_deploy_is_finished_by_the_next_one_without_leaks() {
    let latencies = |sim: &Sim| {
        sim.cloud.set_latency("create_vm", Duration::from_secs(20));
        sim.cloud.set_latency("delete_vm", Duration::from_secs(5));
        sim.cloud.set_latency("create_disk", Duration::from_secs(3));
        sim.cloud.set_latency("attach_disk", Duration::from_secs(2));
        sim.cloud
            .set_latency("create_stemcell", Duration::from_secs(4));
        sim.agents.set_latency("apply", Duration::from_secs(3));
        sim.agents
            .set_latency("compile_package", Duration::from_secs(7));
        sim.agents
            .set_latency("migrate_disk", Duration::from_secs(4));
    };
    // An update that recreates VMs and replaces disks, from a deployed start.
    let changed = || {
        let mut m = manifest();
        group_mut(&mut m, "web")["persistent_disk"] = json!(4096);
        group_mut(&mut m, "web")["instances"] = json!(5);
        group_mut(&mut m, "worker")["instances"] = json!(1);
        m
    };
    for fresh in [true, false] {
        let mut interrupted_at = Vec::new();
        let mut deadline = Duration::ZERO;
        loop {
            let mut sim = Sim::new();
            sim.engine.config.recovery_wait = Duration::from_secs(5);
            latencies(&sim);
            let target = if fresh {
                manifest()
            } else {
                sim.deploy(manifest()).await;
                sim.stemcells.push(stemcell(sim.dir.path(), "1.1"));
                changed()
            };
            let request = sim.request(target.clone());
            let dropped = tokio::time::timeout(deadline, sim.engine.deploy(&request))
                .await
                .is_err();
            // Stopped anywhere, a run leaves no deleted instance in the records, and names
            // an instance without a VM only while its update is unfinished (a VM replaced).
            let state = sim.state();
            for uuid in sim.published_dns().await.keys() {
                let i = (state.instances.get(uuid))
                    .unwrap_or_else(|| panic!("{uuid} is deleted and named at {deadline:?}"));
                assert!(
                    i.vm.is_some() || !i.update_completed,
                    "{} is named without a VM at {deadline:?}",
                    i.name()
                );
            }
            let report = sim.deploy(target).await;
            sim.assert_no_leak();
            assert_eq!(sim.published_dns().await, sim.live_agents());
            let state = sim.state();
            let expected = if fresh { 3 + 2 + 2 } else { 5 + 2 + 1 };
            assert_eq!(state.instances.len(), expected);
            assert!(state.instances.values().all(|i| i.update_completed));
            for i in state.instances.values() {
                let agent = sim.agents.agent(&Sim::agent_id(i)).unwrap();
                assert!(agent.started, "{} runs", i.name());
                assert_eq!(agent.spec["id"], json!(i.uuid));
                let vm = i.vm.as_ref().unwrap();
                assert_eq!(
                    vm.stemcell,
                    if fresh {
                        "bosh-sim-ubuntu-jammy/1.0"
                    } else {
                        "bosh-sim-ubuntu-jammy/1.1"
                    }
                );
                if i.group == "web" {
                    assert_eq!(i.disks[0].size_mib, if fresh { 1024 } else { 4096 });
                    assert_eq!(agent.store.as_ref(), Some(&i.disks[0].cid));
                }
            }
            // Once the deploy ran to the end, the next one has nothing to do.
            if !dropped {
                assert!(report.noop, "{report:?}");
                break;
            }
            interrupted_at.push(deadline);
            deadline += Duration::from_secs(7);
        }
        assert!(
            interrupted_at.len() >= 10,
            "interrupted at only {interrupted_at:?}"
        );
    }
}

/// The IPv4 addresses of a VM's networks.
fn vm_ips(networks: &serde_json::Map<String, Value>) -> Vec<String> {
    networks
        .values()
        .filter_map(|n| n.get("ip")?.as_str().map(String::from))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn compilation_workers_reserve_addresses_apart_from_every_instance() {
    let sim = Sim::new();
    // Compiling takes a while, so the workers can be seen while they exist.
    sim.agents
        .set_latency("compile_package", Duration::from_secs(30));
    let done = std::sync::atomic::AtomicBool::new(false);
    let request = sim.request(manifest());
    let deploy = async {
        let report = sim.deploy_with(&sim.engine, &request).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        report
    };
    let watch = async {
        let mut seen: BTreeMap<String, (Value, Vec<String>)> = BTreeMap::new();
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            for vm in sim.cloud.inventory().vms {
                if vm.metadata.contains_key("compiling") {
                    seen.insert(
                        vm.cid.clone(),
                        (Value::Object(vm.networks.clone()), vm_ips(&vm.networks)),
                    );
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        seen
    };
    let (report, workers) = tokio::join!(deploy, watch);
    assert_eq!(report.compiled, 2);
    assert!(!workers.is_empty(), "no compilation VM was seen");
    let instance_ips: BTreeSet<String> = sim
        .state()
        .instances
        .values()
        .flat_map(|i| i.ips.values().map(|r| r.ip.clone()))
        .collect();
    for (cid, (networks, ips)) in &workers {
        // A manual reservation in the compilation AZ's subnet, with the subnet's settings.
        let settings = &networks["default"];
        assert_eq!(settings["type"], "manual", "{cid}: {networks}");
        assert_eq!(settings["netmask"], "255.255.255.0");
        assert_eq!(settings["gateway"], "10.0.1.1");
        assert_eq!(settings["cloud_properties"], json!({"subnet": "s1"}));
        assert_eq!(ips.len(), 1);
        let ip = &ips[0];
        let host: u8 = ip.strip_prefix("10.0.1.").unwrap().parse().unwrap();
        assert!(
            (10..=254).contains(&host) && !(50..=60).contains(&host),
            "{ip}: outside the reserved and static ranges"
        );
        assert!(!instance_ips.contains(ip), "{ip} is an instance's address");
    }
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn a_vm_deleted_behind_the_directors_back_is_recreated_with_its_disk() {
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let web0 = sim.group("web").remove(0);
    let disk = kubosh_cloud::DiskCid(web0.disks[0].cid.clone());
    sim.cloud
        .write_disk_file(&disk, "marker", "keep me")
        .unwrap();
    let old_vm = Sim::vm_cid(&web0);
    kubosh_cloud::Cloud::delete_vm(sim.cloud.as_ref(), &VmCid(old_vm.clone()))
        .await
        .unwrap();

    sim.reset_calls();
    let report = sim.deploy(manifest()).await;
    assert_eq!(sim.cloud.count("create_vm"), 1, "one new VM");
    assert_eq!(report.updated, vec![web0.display_name()], "{report:?}");
    assert_eq!(sim.published_dns().await, sim.live_agents());
    let after = sim.group("web").remove(0);
    assert_ne!(Sim::vm_cid(&after), old_vm, "a new VM");
    assert_eq!(after.disks, web0.disks, "the same disk");
    assert_eq!(after.ips, web0.ips, "the same address");
    assert!(after.update_completed);
    assert_eq!(sim.marker_on(&disk).as_deref(), Some("keep me"));
    let warning = format!(
        "VM for '{}' with cloud ID '{old_vm}' missing.",
        web0.display_name()
    );
    assert!(sim.event_text().contains(&warning), "{}", sim.event_text());
    sim.assert_no_leak();

    // An agent that does not answer on a VM the cloud still has: BOSH's timeout, as before.
    let web1 = sim.group("web").remove(1);
    sim.cloud
        .set_agent_unresponsive(&VmCid(Sim::vm_cid(&web1)), true)
        .unwrap();
    let mut changed = manifest();
    group_mut(&mut changed, "web")["jobs"][0]["properties"]["hello"]["greeting"] = json!("Hey");
    let err = sim
        .engine
        .deploy(&sim.request(changed.clone()))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("Timed out sending 'get_state' to instance: 'web/"),
        "{err}"
    );
    assert_eq!(sim.group("web")[1].vm, web1.vm, "nothing changed");
    assert_eq!(
        sim.milestones_of("AgentUnresponsive"),
        vec![(web1.display_name(), vec![])]
    );
    // Said while it waited, after the first message timeout (45 s of the 135 s). web/0's
    // agent, whose VM was gone, was not waited for beyond that first timeout: the cloud
    // said its VM was gone.
    assert_eq!(
        sim.milestones_of("AgentNotAnswering"),
        vec![(web1.display_name(), vec!["45".into(), "135".into()])]
    );
    // It stalls (no retry helps) and names the instance.
    assert_eq!(err.disposition(), kubosh_engine::Disposition::Stall);
    let named: Vec<&str> = (err.unanswered().iter())
        .map(|u| u.instance.display.as_str())
        .collect();
    assert_eq!(named, vec![web1.display_name().as_str()]);

    // `--fix`: the silent instance gets a new VM on its disk, and the change goes out.
    sim.cloud
        .write_disk_file(
            &kubosh_cloud::DiskCid(web1.disks[0].cid.clone()),
            "marker",
            "web1 data",
        )
        .unwrap();
    let fix = DeployRequest {
        requests: Requests {
            fix: true,
            ..Requests::default()
        },
        ..sim.request(changed.clone())
    };
    let published_before = sim.milestones_of("DnsSynced").len();
    let report = sim.deploy_with(&sim.engine, &fix).await;
    assert!(report.updated.contains(&web1.display_name()), "{report:?}");
    assert_eq!(
        sim.milestones_of("DnsSynced").len() - published_before,
        1,
        "the new VM's agent published once"
    );
    let fixed = sim.group("web").remove(1);
    assert_ne!(Sim::vm_cid(&fixed), Sim::vm_cid(&web1), "a new VM");
    assert_eq!(fixed.disks, web1.disks, "the same disk");
    assert_eq!(fixed.ips, web1.ips, "the same address");
    let resurrecting: std::collections::BTreeSet<_> =
        sim.milestones_of("Resurrecting").into_iter().collect();
    assert_eq!(
        resurrecting,
        [
            (web1.display_name(), vec![Sim::vm_cid(&web1)]),
            (web0.display_name(), vec![old_vm.clone()]),
        ]
        .into(),
        "web/1 now (its agent), web/0 before (its VM)"
    );
    let disk = kubosh_cloud::DiskCid(fixed.disks[0].cid.clone());
    assert_eq!(sim.marker_on(&disk).as_deref(), Some("web1 data"));
    sim.assert_no_leak();

    // A `recreate` of a silent instance recreates it without asking it anything.
    sim.cloud
        .set_agent_unresponsive(&VmCid(Sim::vm_cid(&fixed)), true)
        .unwrap();
    let scope = kubosh_engine::Scope {
        group: "web".into(),
        instance: Some("1".into()),
    };
    let recreate = DeployRequest {
        action: Some((kubosh_engine::InstanceAction::Recreate, Some(scope))),
        ..sim.request(changed.clone())
    };
    sim.deploy_with(&sim.engine, &recreate).await;
    let again = sim.group("web").remove(1);
    assert_ne!(Sim::vm_cid(&again), Sim::vm_cid(&fixed), "recreated");
    assert!(again.update_completed);
    sim.assert_no_leak();

    // A `recreate` of an instance whose VM is gone (the way out of a dead agent before
    // `--fix`): the VM made for it in "Creating missing vms" is its new VM, not one more
    // to delete and make again.
    kubosh_cloud::Cloud::delete_vm(sim.cloud.as_ref(), &VmCid(Sim::vm_cid(&again)))
        .await
        .unwrap();
    sim.reset_calls();
    let recreate = DeployRequest {
        action: Some((
            kubosh_engine::InstanceAction::Recreate,
            Some(kubosh_engine::Scope {
                group: "web".into(),
                instance: Some("1".into()),
            }),
        )),
        ..sim.request(changed)
    };
    sim.deploy_with(&sim.engine, &recreate).await;
    assert_eq!(sim.cloud.count("create_vm"), 1, "one new VM");
    assert_eq!(sim.cloud.count("delete_vm"), 0, "none to delete");
    let back = sim.group("web").remove(1);
    assert_ne!(Sim::vm_cid(&back), Sim::vm_cid(&again));
    assert_eq!(back.disks, again.disks, "the same disk");
    assert!(back.update_completed);
    sim.assert_no_leak();
}

/// A health monitor that has listened long and hears the feed, but not yet these agents: a
/// new bosh-agent's first heartbeat is lost (sent before it connects to NATS), so it is heard
/// 30 s after it started. An agent is silent unless it answered the director.
#[derive(Default)]
struct NotHeardYet {
    answered: std::sync::Mutex<BTreeSet<String>>,
}

impl kubosh_engine::AgentHealth for NotHeardYet {
    fn recent_job_state(&self, _: &str, _: Duration) -> Option<String> {
        None
    }

    fn silent_for(&self, agent_id: &str, _: Duration) -> bool {
        !self.answered.lock().unwrap().contains(agent_id)
    }

    fn answered(&self, agent_id: &str) {
        self.answered.lock().unwrap().insert(agent_id.to_string());
    }
}

/// The agents of the VMs a deploy made are alive to the next deploy before their first
/// heartbeat: a deploy right after neither stalls on them nor, with `--fix`, recreates them.
#[tokio::test(start_paused = true)]
async fn new_vms_agents_are_not_silent_before_their_first_heartbeat() {
    let sim = Sim::new();
    let mut engine = sim.engine.clone();
    engine.config.health = Some(Arc::new(NotHeardYet::default()));
    sim.deploy_with(&engine, &sim.request(manifest())).await;
    let vms = |sim: &Sim| sim.group("web").iter().map(Sim::vm_cid).collect::<Vec<_>>();
    let before = vms(&sim);
    let mut changed = manifest();
    group_mut(&mut changed, "web")["jobs"][0]["properties"]["hello"]["greeting"] = json!("Hey");
    sim.deploy_with(&engine, &sim.request(changed.clone()))
        .await;
    let fix = DeployRequest {
        requests: Requests {
            fix: true,
            ..Requests::default()
        },
        ..sim.request(changed)
    };
    sim.deploy_with(&engine, &fix).await;
    assert_eq!(vms(&sim), before, "no VM recreated");
    assert_eq!(sim.milestones_of("Resurrecting"), vec![]);
    sim.assert_no_leak();
}

/// New trusted certificates on the director reach every running VM: each instance is
/// updated (its VM kept) with the change `trusted_certs` and the certificates in
/// `update_settings`; the next deploy has nothing to do.
#[tokio::test(start_paused = true)]
async fn new_trusted_certificates_reach_every_running_vm() {
    let mut sim = Sim::new();
    sim.deploy(manifest()).await;
    let before = sim.state();
    sim.engine.config.trusted_certs = "-----BEGIN CERTIFICATE-----\nNEW CA\n".into();
    let report = sim.deploy(manifest()).await;
    assert_eq!(report.updated.len(), before.instances.len(), "{report:?}");
    assert!(
        (report.plan.iter()).all(|p| p.action == "update" && p.changes == vec!["trusted_certs"]),
        "{report:?}"
    );
    for (uuid, old) in &before.instances {
        let now = &sim.state().instances[uuid];
        assert_eq!(now.vm, old.vm, "{} keeps its VM", old.name());
        let agent = sim.agents.agent(&Sim::agent_id(now)).unwrap();
        assert_eq!(
            agent.settings.unwrap()["trusted_certs"],
            "-----BEGIN CERTIFICATE-----\nNEW CA\n"
        );
    }
    let report = sim.deploy(manifest()).await;
    assert!(report.noop, "{report:?}");
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn new_vms_get_settings_metadata_env_and_calculated_cloud_properties() {
    let mut sim = Sim::new();
    sim.engine.config.trusted_certs = "-----BEGIN CERTIFICATE-----\nCA\n".into();
    sim.engine.config.agent_env = Some(Arc::new(|agent_id: &str| {
        kubosh_engine::vm::mbus_cert_env("nats-ca", &format!("cert-{agent_id}"), "key")
    }));
    let mut m = manifest();
    m["tags"] = json!({"team": "blue", "director": "not-this"});
    let env = json!({"bosh": {
        "password": "$6$hash", "keep_root_password": true, "remove_dev_tools": true,
        "authorized_keys": ["ssh-ed25519 AAAA"],
        "mbus": {"urls": ["nats://elsewhere:4222"]},
    }});
    {
        let worker = group_mut(&mut m, "worker");
        worker.as_object_mut().unwrap().remove("vm_type");
        worker["vm_resources"] = json!({"cpu": 2, "ram": 1024, "ephemeral_disk_size": 4096});
        worker["vm_extensions"] = json!([]);
        worker["env"] = env.clone();
        worker["persistent_disks"] = json!([{"name": "data", "type": "small"}]);
    }
    sim.deploy(m.clone()).await;

    let worker = sim.group("worker");
    // One calculate_vm_cloud_properties call for the one distinct vm_resources.
    assert_eq!(sim.cloud.count("calculate_vm_cloud_properties"), 1);
    for w in &worker {
        let vm = sim.cloud.vm(&VmCid(Sim::vm_cid(w))).unwrap();
        let zone = if w.az.as_deref() == Some("z1") {
            "a"
        } else {
            "b"
        };
        assert_eq!(
            Value::Object(vm.cloud_properties.clone()),
            json!({"zone": zone, "cpu": 2, "ram": 1024, "ephemeral_disk_size": 4096}),
            "the AZ's, then the calculated ones"
        );
        // The group's env verbatim, the agent's NATS certificate merged under bosh.mbus.
        let mut expected = env.clone();
        expected["bosh"]["mbus"]["cert"] = json!({
            "ca": "nats-ca", "certificate": format!("cert-{}", Sim::agent_id(w)),
            "private_key": "key",
        });
        assert_eq!(Value::Object(vm.env.clone()), expected);
        // Tags under the director's own keys.
        assert_eq!(vm.metadata["team"], "blue");
        assert_eq!(vm.metadata["director"], "kubosh");
        assert_eq!(vm.metadata["deployment"], "sim");
        assert_eq!(vm.metadata["id"], w.uuid.as_str());
        assert_eq!(vm.metadata["index"], w.index.to_string());
        assert_eq!(vm.metadata["name"], format!("worker/{}", w.uuid));
        let created = vm.metadata["created_at"].as_str().unwrap();
        assert_eq!(created.len(), 20, "{created}");
        assert!(created.ends_with('Z'), "{created}");
        // Its disk is labelled as the Director labels disks: the manifest's tags, then the
        // director's keys.
        let disk = sim
            .cloud
            .disk(&kubosh_cloud::DiskCid(w.disks[0].cid.clone()))
            .unwrap();
        assert_eq!(disk.metadata["team"], "blue");
        assert_eq!(disk.metadata["director"], "kubosh");
        assert_eq!(disk.metadata["deployment"], "sim");
        assert_eq!(disk.metadata["instance_id"], w.uuid.as_str());
        assert_eq!(disk.metadata["instance_index"], w.index.to_string());
        assert_eq!(disk.metadata["instance_group"], "worker");
        assert!(
            disk.metadata["attached_at"]
                .as_str()
                .unwrap()
                .ends_with('Z')
        );
        // update_settings came before the first apply, with the trusted certificates and
        // the named disk the update made.
        let agent = sim.agents.agent(&Sim::agent_id(w)).unwrap();
        assert_eq!(
            agent.settings,
            Some(json!({
                "trusted_certs": "-----BEGIN CERTIFICATE-----\nCA\n",
                "disk_associations": [{"name": "data", "cid": w.disks[0].cid}],
            }))
        );
    }

    // A recreated worker gets its named disk back and associated by name.
    let mut request = sim.request(m.clone());
    request.requests.recreate = true;
    sim.deploy_with(&sim.engine, &request).await;
    for w in sim.group("worker") {
        let agent = sim.agents.agent(&Sim::agent_id(&w)).unwrap();
        assert_eq!(
            agent.settings.unwrap()["disk_associations"],
            json!([{"name": "data", "cid": w.disks[0].cid}])
        );
    }
    // One more call for the second deploy.
    assert_eq!(sim.cloud.count("calculate_vm_cloud_properties"), 2);
    sim.assert_no_leak();
}

// ---- persistent disks: snapshots, recovery by request id, sync check, in-place changes ----

/// An update in place writes each instance's record once: the deploy announces its updates
/// in one write instead of marking every record not completed first.
#[tokio::test(start_paused = true)]
async fn an_update_in_place_writes_each_record_once() {
    let sim = Sim::new();
    sim.deploy(web_says("Hello")).await;
    let before = sim.store.writes();
    let report = sim.deploy(web_says("Howdy")).await;
    assert_eq!(report.updated.len(), 3, "{report:?}");
    let writes = sim.store.writes() - before;
    // 3 records, the announcement, the deploy's end.
    assert_eq!(writes, 3 + 2, "{writes} writes");
    assert!(sim.state().meta.updating.is_empty());
    assert!(sim.state().instances.values().all(|i| i.update_completed));
}

/// A deploy dropped in the middle of a rollout (a killed process): the next deploy of the
/// same manifest redoes the instances whose update did not finish and leaves the ones that
/// finished alone.
#[tokio::test(start_paused = true)]
async fn a_rollout_killed_midway_is_finished_without_redoing_finished_instances() {
    let sim = Sim::new();
    sim.deploy(web_says("Hello")).await;
    let before = sim.state().instances;
    sim.agents.set_latency("apply", Duration::from_secs(3));
    let request = sim.request(web_says("Howdy"));
    let updated = |r: &InstanceRecord| r.update_completed && r.applied != before[&r.uuid].applied;
    // Dropped once the canary finished, while the others are being updated.
    tokio::select! {
        result = sim.engine.deploy(&request) => panic!("the deploy ended: {result:?}"),
        () = async {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if sim.store.snapshot().instances.values().any(updated) {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    return;
                }
            }
        } => {}
    }
    let raw = sim.store.snapshot();
    let finished: BTreeSet<String> = (raw.instances.values())
        .filter(|r| updated(r))
        .map(Sim::agent_id)
        .collect();
    assert_eq!(finished.len(), 1, "the canary finished alone");
    // Their records still look completed; the announcement makes them dirty.
    let state = sim.state();
    let dirty: BTreeSet<String> = (state.instances.values())
        .filter(|r| !r.update_completed)
        .map(Sim::agent_id)
        .collect();
    assert_eq!(dirty.len(), 2, "{dirty:?}");
    assert!(dirty.is_disjoint(&finished));

    sim.reset_calls();
    sim.deploy(web_says("Howdy")).await;
    let applied: BTreeSet<String> = (sim.agents.calls().iter())
        .filter(|c| c.method == "apply")
        .map(|c| c.target.clone())
        .collect();
    assert_eq!(applied, dirty, "only the unfinished ones are updated again");
    let state = sim.state();
    assert!(state.instances.values().all(|i| i.update_completed));
    assert!(state.meta.updating.is_empty());
    sim.assert_no_leak();
}

/// `manifest()` with web's job saying `greeting` (a change that restarts web only).
fn web_says(greeting: &str) -> Value {
    let mut m = manifest();
    group_mut(&mut m, "web")["jobs"] = json!([hello_job("web", greeting)]);
    m
}

#[tokio::test(start_paused = true)]
async fn snapshots_are_taken_when_an_update_stops_an_instance_and_go_with_its_disk() {
    let mut sim = Sim::new();
    sim.engine.config.snapshots_enabled = true;
    sim.deploy(manifest()).await;
    assert_eq!(
        sim.cloud.count("snapshot_disk"),
        0,
        "nothing ran before the first deploy"
    );
    let web = sim.group("web");

    sim.deploy(web_says("Howdy")).await;
    assert_eq!(sim.cloud.count("snapshot_disk"), 3, "one per web disk");
    let state = sim.state();
    let inventory = sim.cloud.inventory();
    assert_eq!(inventory.snapshots.len(), 3);
    for old in &web {
        let disk = &state.instances[&old.uuid].disks[0];
        assert_eq!(disk.snapshots.len(), 1, "{}", old.name());
        let snapshot = inventory
            .snapshots
            .iter()
            .find(|s| s.cid == disk.snapshots[0])
            .unwrap();
        assert_eq!(snapshot.disk_cid, disk.cid);
        assert_eq!(
            Value::Object(snapshot.metadata.clone()),
            json!({
                "deployment": "sim", "job": "web", "index": old.index,
                "director_name": "kubosh", "director_uuid": "kubosh",
                "agent_id": Sim::agent_id(old), "instance_id": old.uuid,
            })
        );
    }
    assert!(state.intents.is_empty());

    // A bigger disk: another snapshot when web stops, then the old disk is orphaned with
    // both of its snapshots; the new disk has none yet.
    let mut m = web_says("Howdy");
    group_mut(&mut m, "web")["persistent_disk"] = json!(4096);
    sim.deploy(m).await;
    let state = sim.state();
    for old in &web {
        let orphan = &state.orphaned_disks[&old.disks[0].cid];
        assert_eq!(orphan.disk.snapshots.len(), 2, "{}", old.name());
        assert!(state.instances[&old.uuid].disks[0].snapshots.is_empty());
    }
    assert_eq!(sim.cloud.inventory().snapshots.len(), 6);
    sim.assert_no_leak();

    // Deleting an orphaned disk deletes its snapshots first.
    let cid = web[0].disks[0].cid.clone();
    let snapshots = state.orphaned_disks[&cid].disk.snapshots.clone();
    sim.engine.delete_orphaned_disk(&cid).await.unwrap();
    let inventory = sim.cloud.inventory();
    assert_eq!(inventory.snapshots.len(), 4);
    assert!(
        inventory
            .snapshots
            .iter()
            .all(|s| !snapshots.contains(&s.cid))
    );
    assert!(!sim.state().orphaned_disks.contains_key(&cid));
    sim.assert_no_leak();
    // An unknown disk is nothing to delete.
    sim.engine
        .delete_orphaned_disk("no-such-disk")
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn recovery_keeps_the_snapshots_a_disk_lists_and_deletes_the_others() {
    use kubosh_cloud::Cloud as _;
    use kubosh_engine::state::{Intent, IntentKind, StateStore as _, Write};
    let mut sim = Sim::new();
    sim.engine.config.snapshots_enabled = true;
    sim.deploy(manifest()).await;
    sim.deploy(web_says("Howdy")).await;
    let web0 = sim.group("web")[0].clone();
    let disk = web0.disks[0].cid.clone();
    let listed = web0.disks[0].snapshots[0].clone();
    // A run that died after snapshot_disk answered, before the disk's record listed it.
    let stray = sim
        .cloud
        .snapshot_disk(&kubosh_cloud::DiskCid(disk.clone()), &Default::default())
        .await
        .unwrap();
    for (id, cid) in [
        ("listed", Some(listed.clone())),
        ("stray", Some(stray.0.clone())),
        ("unanswered", None),
    ] {
        sim.store
            .write(&Write::Intent(Intent {
                id: id.into(),
                kind: IntentKind::SnapshotDisk { disk: disk.clone() },
                cid,
                cpi: None,
            }))
            .await
            .unwrap();
    }
    sim.deploy(web_says("Howdy")).await;
    let inventory = sim.cloud.inventory();
    let cids: BTreeSet<String> = inventory.snapshots.iter().map(|s| s.cid.clone()).collect();
    assert!(cids.contains(&listed));
    assert!(!cids.contains(&stray.0));
    assert_eq!(cids.len(), 3);
    sim.assert_no_leak();
}

/// A pending `create_disk` intent without a CID, whose disk the cloud did make (the run died
/// before the answer), as the next deploy finds it.
async fn an_unanswered_disk_creation(sim: &Sim) -> kubosh_cloud::DiskCid {
    use kubosh_cloud::Cloud as _;
    use kubosh_engine::state::{Intent, IntentKind, StateStore as _, Write};
    let web0 = sim.group("web")[0].clone();
    let intent = Intent {
        id: "intent-unanswered".into(),
        kind: IntentKind::CreateDisk {
            instance: web0.uuid.clone(),
            name: String::new(),
        },
        cid: None,
        cpi: None,
    };
    sim.store
        .write(&Write::Intent(intent.clone()))
        .await
        .unwrap();
    sim.cloud
        .create_disk_with_request_id(
            &kubosh_cloud::CreateDisk {
                size_mib: 4096,
                cloud_properties: Default::default(),
                vm_cid: Some(VmCid(Sim::vm_cid(&web0))),
            },
            &intent.id,
        )
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_disk_whose_creation_was_never_answered_is_found_by_request_id_and_deleted() {
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let made = an_unanswered_disk_creation(&sim).await;
    sim.deploy(manifest()).await;
    assert!(sim.cloud.disk(&made).is_none(), "the found disk is deleted");
    assert_eq!(sim.cloud.count("kubosh_find_disk"), 1);
    assert!(!sim.event_text().contains("cannot be found"));
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn a_cloud_that_cannot_find_disks_by_request_id_gets_the_old_warning() {
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let made = an_unanswered_disk_creation(&sim).await;
    sim.cloud.inject(
        "kubosh_find_disk",
        kubosh_sim::CloudFault::fail(
            kubosh_cloud::ErrorKind::NotImplemented,
            "Must call implemented method: Unknown method 'kubosh_find_disk'",
            false,
        ),
    );
    sim.deploy(manifest()).await;
    assert!(
        sim.event_text().contains(
            "the cloud did not report its CID, so it cannot be found: check the cloud for an unattached disk"
        ),
        "{}",
        sim.event_text()
    );
    assert!(sim.state().intents.is_empty(), "the intent is settled");
    assert!(sim.cloud.disk(&made).is_some(), "nobody could find it");
}

/// A creation the cloud answered with an error made nothing: its intent is settled at
/// once, and the next deploy neither looks for it nor warns of a run that "stopped before
/// the cloud answered".
#[tokio::test(start_paused = true)]
async fn creations_the_cloud_refused_leave_no_intent() {
    let sim = Sim::new();
    for method in ["create_stemcell", "create_disk"] {
        let refused = kubosh_sim::CloudFault::fail(
            kubosh_cloud::ErrorKind::CloudError,
            "quota exceeded",
            false,
        );
        sim.cloud.inject(method, refused.times(1));
        let err = sim
            .engine
            .deploy(&sim.request(manifest()))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("quota exceeded"),
            "{method}: {err}"
        );
        assert!(
            sim.state().intents.is_empty(),
            "{method}: {:?}",
            sim.state().intents
        );
    }
    sim.deploy(manifest()).await;
    assert_eq!(sim.cloud.count("kubosh_find_disk"), 0, "nothing looked for");
    assert!(
        !sim.event_text().contains("before the cloud answered"),
        "{}",
        sim.event_text()
    );
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn an_agent_without_its_disk_gets_it_back_before_the_disk_changes() {
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let web0 = sim.group("web")[0].clone();
    let agent_id = Sim::agent_id(&web0);
    sim.agents
        .write_store_file(&agent_id, "data/marker", "keep me")
        .unwrap();
    sim.agents
        .client(agent_id.clone())
        .unmount_disk(&web0.disks[0].cid)
        .await
        .unwrap();
    assert_eq!(sim.agents.agent(&agent_id).unwrap().store, None);

    let mut m = manifest();
    group_mut(&mut m, "web")["persistent_disk"] = json!(4096);
    sim.deploy(m).await;
    let now = &sim.state().instances[&web0.uuid];
    assert_eq!(now.disks[0].size_mib, 4096);
    assert_eq!(
        sim.agents
            .read_store_file(&agent_id, "data/marker")
            .unwrap(),
        Some("keep me".into()),
        "the disk was mounted again, so its data moved to the new disk"
    );
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn an_agent_with_another_disk_mounted_fails_the_disk_change_as_out_of_sync() {
    use kubosh_cloud::Cloud as _;
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    let web0 = sim.group("web")[0].clone();
    let vm = VmCid(Sim::vm_cid(&web0));
    let other = sim
        .cloud
        .create_disk(&kubosh_cloud::CreateDisk {
            size_mib: 10,
            cloud_properties: Default::default(),
            vm_cid: None,
        })
        .await
        .unwrap();
    let hint = sim.cloud.attach_disk(&vm, &other).await.unwrap().unwrap();
    let agent = sim.agents.client(Sim::agent_id(&web0));
    agent
        .add_persistent_disk(other.as_str(), &serde_json::from_value(hint.0).unwrap())
        .await
        .unwrap();
    agent.unmount_disk(&web0.disks[0].cid).await.unwrap();
    agent.mount_disk(other.as_str()).await.unwrap();

    let mut m = manifest();
    group_mut(&mut m, "web")["persistent_disk"] = json!(4096);
    let err = sim.engine.deploy(&sim.request(m)).await.unwrap_err();
    assert_eq!(err.code(), 400_010);
    assert_eq!(
        err.to_string(),
        format!(
            "'{}' has invalid disks: agent reports '{other}' while director record shows '{}'",
            web0.display_name(),
            web0.disks[0].cid
        )
    );
    assert_eq!(
        sim.state().instances[&web0.uuid].disks,
        web0.disks,
        "nothing changed"
    );
}

#[tokio::test(start_paused = true)]
async fn with_cpi_resize_a_bigger_disk_grows_in_place() {
    let mut sim = Sim::new();
    sim.engine.config.enable_cpi_resize_disk = true;
    sim.deploy(manifest()).await;
    let web = sim.group("web");
    for i in &web {
        sim.agents
            .write_store_file(&Sim::agent_id(i), "data/marker", &i.uuid)
            .unwrap();
    }
    sim.cloud.reset_calls();
    let mut m = manifest();
    group_mut(&mut m, "web")["persistent_disk"] = json!(4096);
    let report = sim.deploy(m).await;
    assert_eq!(report.updated.len(), 3, "{report:?}");
    assert_eq!(sim.cloud.count("resize_disk"), 3);
    assert_eq!(sim.cloud.count("create_disk"), 0);
    let state = sim.state();
    assert!(state.orphaned_disks.is_empty());
    for old in &web {
        let now = &state.instances[&old.uuid];
        assert_eq!(now.disks[0].cid, old.disks[0].cid, "the same disk");
        assert_eq!(now.disks[0].size_mib, 4096);
        assert_eq!(
            sim.cloud
                .disk(&kubosh_cloud::DiskCid(now.disks[0].cid.clone()))
                .unwrap()
                .size_mib,
            4096
        );
        assert_eq!(
            sim.agents
                .read_store_file(&Sim::agent_id(now), "data/marker")
                .unwrap(),
            Some(old.uuid.clone())
        );
    }
    sim.assert_no_leak();
    // And the next deploy of the same manifest has nothing to do.
    let mut m = manifest();
    group_mut(&mut m, "web")["persistent_disk"] = json!(4096);
    assert!(sim.deploy(m).await.noop);
}

#[tokio::test(start_paused = true)]
async fn a_cpi_without_resize_gets_the_disk_copied_instead() {
    let mut sim = Sim::with_config(SimConfig {
        resize_disk: false,
        ..SimConfig::default()
    });
    sim.engine.config.enable_cpi_resize_disk = true;
    sim.deploy(manifest()).await;
    let web = sim.group("web");
    for i in &web {
        sim.agents
            .write_store_file(&Sim::agent_id(i), "data/marker", &i.uuid)
            .unwrap();
    }
    sim.cloud.reset_calls();
    let mut m = manifest();
    group_mut(&mut m, "web")["persistent_disk"] = json!(4096);
    sim.deploy(m).await;
    assert_eq!(sim.cloud.count("resize_disk"), 3, "tried first");
    assert_eq!(sim.cloud.count("create_disk"), 3);
    let state = sim.state();
    for old in &web {
        let now = &state.instances[&old.uuid];
        assert_ne!(now.disks[0].cid, old.disks[0].cid);
        assert!(state.orphaned_disks.contains_key(&old.disks[0].cid));
        assert_eq!(
            sim.agents
                .read_store_file(&Sim::agent_id(now), "data/marker")
                .unwrap(),
            Some(old.uuid.clone())
        );
    }
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn with_cpi_update_a_new_disk_type_is_changed_in_place() {
    let mut sim = Sim::new();
    sim.engine.config.enable_cpi_update_disk = true;
    sim.deploy(manifest()).await;
    let api = sim.group("api");
    sim.cloud.reset_calls();
    let mut cloud = cloud_config();
    cloud["disk_types"][0]["cloud_properties"] = json!({"type": "hdd"});
    cloud["disk_types"][0]["disk_size"] = json!(3072);
    let request = sim.request_on(manifest(), cloud);
    let report = sim.deploy_with(&sim.engine, &request).await;
    assert_eq!(report.updated.len(), 2, "{report:?}");
    assert_eq!(sim.cloud.count("update_disk"), 2);
    assert_eq!(sim.cloud.count("create_disk"), 0);
    let state = sim.state();
    assert!(state.orphaned_disks.is_empty());
    for old in &api {
        let now = &state.instances[&old.uuid];
        assert_eq!(now.disks[0].cid, old.disks[0].cid);
        assert_eq!(now.disks[0].size_mib, 3072);
        assert_eq!(now.disks[0].cloud_properties, json!({"type": "hdd"}));
        let disk = sim
            .cloud
            .disk(&kubosh_cloud::DiskCid(now.disks[0].cid.clone()))
            .unwrap();
        assert_eq!(disk.size_mib, 3072);
        assert_eq!(Value::Object(disk.cloud_properties), json!({"type": "hdd"}));
    }
    sim.assert_no_leak();
}

/// A release that cannot be used on the deployment's stemcell (its packages have no source
/// and were compiled for another OS) fails the deploy before anything changes: the
/// Director's "Can't use release" error, no CPI call at all (no stemcell uploaded), no record
/// written (no link group ids, no intent).
#[tokio::test(start_paused = true)]
async fn an_unusable_release_fails_before_anything_changes() {
    let mut sim = Sim::new();
    sim.release = unusable_release();
    let err = sim
        .engine
        .deploy(&sim.request(manifest()))
        .await
        .expect_err("the release cannot be used");
    assert!(
        err.to_string().contains("Can't use release 'hello/1.0.0'"),
        "{err}"
    );
    assert!(sim.cloud.calls().is_empty(), "{:?}", sim.cloud.counts());
    assert!(sim.agents.calls().is_empty(), "{:?}", sim.agents.counts());
    let state = sim.state();
    assert!(state.meta.link_group_ids.is_empty(), "{:?}", state.meta);
    assert!(state.stemcells.is_empty() && state.intents.is_empty());
    assert!(state.instances.is_empty() && state.compiled_packages.is_empty());
    sim.assert_no_leak();
}

/// A release version the deploy does not bring is the Director's ReleaseVersionNotFound,
/// before anything changes; with `latest` the highest version given is deployed.
#[tokio::test(start_paused = true)]
async fn a_release_version_not_given_fails_before_anything_changes() {
    let sim = Sim::new();
    let mut wrong = manifest();
    wrong["releases"][0]["version"] = json!("9.9.9");
    let err = sim
        .engine
        .deploy(&sim.request(wrong))
        .await
        .expect_err("hello/9.9.9 is not given");
    assert_eq!(err.code(), 30_006, "{err}");
    assert_eq!(
        err.to_string().trim(),
        "error: manifest: releases[0].version: Release version 'hello/9.9.9' doesn't exist (available: hello/1.0.0)"
    );
    assert!(sim.cloud.calls().is_empty(), "{:?}", sim.cloud.counts());
    assert!(sim.agents.calls().is_empty(), "{:?}", sim.agents.counts());
    assert!(sim.state().instances.is_empty());

    let mut latest = manifest();
    latest["releases"][0]["version"] = json!("latest");
    let report = sim.deploy(latest).await;
    assert_eq!(report.updated.len(), 7, "{report:?}");
    sim.assert_no_leak();
}

/// The release made unusable for the sim's stemcell (its packages compiled for another OS
/// only).
fn unusable_release() -> Arc<Release> {
    use kubosh_artifacts::release::{PrecompiledPackage, StemcellRef};
    let mut release = (*shared_release()).clone();
    release.compiled_packages = (release.packages.drain(..))
        .map(|p| PrecompiledPackage {
            name: p.name,
            version: p.version,
            fingerprint: p.fingerprint,
            digest: p.digest,
            stemcell: StemcellRef {
                os: "windows2019".into(),
                version: "1".into(),
            },
            dependencies: p.dependencies,
            archive: p.archive,
        })
        .collect();
    Arc::new(release)
}

/// On a deployment that exists, a scale-up onto a new stemcell line with a release that cannot
/// be used there (compiled for another OS only) fails while planning: no address of the new
/// instances is ever claimed among the director's deployments, no cloud call, no record
/// changes.
#[tokio::test(start_paused = true)]
async fn an_unusable_release_on_a_scale_up_claims_no_address() {
    let mut sim = Sim::new();
    let registry = Arc::new(TestRegistry::default());
    sim.engine.config.ip_registry = Some(registry.clone());
    sim.deploy(manifest()).await;
    let before = sim.state();
    let held_before: BTreeSet<String> = (registry.inner.held_elsewhere("other").await.unwrap())
        .iter()
        .map(|r| r.ip.to_string())
        .collect();
    registry.claims.lock().unwrap().clear();
    sim.reset_calls();

    sim.release = unusable_release();
    // A new major version: no package compiled for 1.x is used on it.
    let newer = stemcell(sim.dir.path(), "2.0");
    sim.stemcells.push(newer);
    let mut m = manifest();
    group_mut(&mut m, "web")["instances"] = json!(5);
    let err = sim.engine.deploy(&sim.request(m)).await.unwrap_err();
    assert!(
        err.to_string().contains("Can't use release 'hello/1.0.0'"),
        "{err}"
    );
    assert!(sim.cloud.calls().is_empty(), "{:?}", sim.cloud.counts());
    assert_eq!(sim.state(), before, "no record changed");
    for claim in registry.claims.lock().unwrap().iter() {
        let ips: BTreeSet<String> = claim.iter().map(|r| r.ip.to_string()).collect();
        assert!(
            ips.is_subset(&held_before),
            "a claim of addresses the deployment did not hold: {:?}",
            ips.difference(&held_before).collect::<Vec<_>>()
        );
    }
    let held_after: BTreeSet<String> = (registry.inner.held_elsewhere("other").await.unwrap())
        .iter()
        .map(|r| r.ip.to_string())
        .collect();
    assert_eq!(held_after, held_before);
    sim.assert_no_leak();
}

/// A release by reference (`release.MF`, jobs, and only the blob ids of its packages)
/// deploys like the release it was made from, compiling from the stored archives; a package
/// archive missing from the blobstore fails the deploy before anything changes, naming it.
#[tokio::test(start_paused = true)]
async fn a_release_by_reference_deploys_from_the_blobstore() {
    use kubosh_artifacts::release::PackageArchive;
    let full = shared_release();
    let by_reference = || {
        let jobs: BTreeMap<String, Vec<u8>> = (full.jobs.iter())
            .map(|j| (j.name.clone(), j.archive.clone()))
            .collect();
        let ids: BTreeMap<String, String> = (full.packages.iter())
            .map(|p| (p.name.clone(), p.archive.blob_id()))
            .collect();
        let release_mf = full.manifest_yaml().unwrap();
        Arc::new(Release::by_reference(release_mf.as_bytes(), jobs, &ids).unwrap())
    };

    // Nothing stored yet: refused before any call, every missing archive named.
    let mut sim = Sim::new();
    sim.release = by_reference();
    let err = sim
        .engine
        .deploy(&sim.request(manifest()))
        .await
        .expect_err("the packages are not in the blobstore");
    assert!(
        matches!(err, EngineError::MissingArchives(ref m) if m.len() == 2),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("Package 'libhello' of release 'hello' is missing from the blobstore"),
        "{err}"
    );
    assert_eq!(err.disposition(), Disposition::Retry);
    assert!(sim.cloud.calls().is_empty(), "{:?}", sim.cloud.counts());
    assert!(sim.state().intents.is_empty() && sim.state().stemcells.is_empty());

    // Stored (as the Release reconciler stores them): the deploy compiles from them.
    for p in &full.packages {
        let bytes = p.archive.bytes().unwrap().to_vec();
        let stored = sim.engine.blobstore.put_bytes(bytes.into()).await.unwrap();
        assert_eq!(
            PackageArchive::Stored(stored.id),
            sim.release.package(&p.name).unwrap().archive
        );
    }
    sim.engine.deploy(&sim.request(manifest())).await.unwrap();
    assert_eq!(sim.agents.counts().get("compile_package"), Some(&2));
    assert_eq!(sim.state().compiled_packages.len(), 2);
    sim.assert_no_leak();
}

/// A world whose VMs take 20 s to make and whose packages take a minute each to compile.
fn compiling_slowly() -> Sim {
    let sim = Sim::new();
    sim.cloud.set_latency("create_vm", Duration::from_secs(20));
    sim.agents
        .set_latency("compile_package", Duration::from_secs(60));
    sim
}

/// Missing VMs and their first disks are made while packages compile (issue 29):
/// compilation's first worker's VM is made first (a refused one stops the instances' VMs:
/// e2e `refused_and_abandoned_vms_…`), every instance's `create_vm` and
/// `create_disk` come before the last `compile_package`, and each instance's disk is
/// mounted before its jobs are applied. The deploy is no slower than compilation plus the
/// rollout: the VMs cost it nothing.
#[tokio::test(start_paused = true)]
async fn missing_vms_and_their_disks_are_made_while_packages_compile() {
    use kubosh_sim::Side;
    let sim = compiling_slowly();
    let began = tokio::time::Instant::now();
    let report = sim.deploy(manifest()).await;
    let took = began.elapsed();
    let actions: BTreeSet<&str> = report.plan.iter().map(|p| p.action).collect();
    assert_eq!(
        actions,
        BTreeSet::from(["create"]),
        "made ahead, still a create"
    );
    let timeline = sim.cloud.timeline();
    let at = |side: Side, method: &str| -> Vec<(usize, String)> {
        (timeline.iter().enumerate())
            .filter(|(_, s)| s.side == side && s.method == method)
            .map(|(i, s)| (i, s.target.clone()))
            .collect()
    };
    let compiles = at(Side::Agent, "compile_package");
    assert_eq!(compiles.len(), 2, "libhello, then hello-server");
    let workers: BTreeSet<&String> = compiles.iter().map(|(_, agent)| agent).collect();
    let creates = at(Side::Cloud, "create_vm");
    assert!(
        workers.contains(&creates[0].1),
        "a worker asks first: {creates:?}"
    );
    let last_compile = compiles[1].0;
    let instances: BTreeSet<String> = (sim.state().instances.values())
        .filter_map(|i| i.vm.as_ref().map(|vm| vm.agent_id.clone()))
        .collect();
    assert_eq!(instances.len(), 7);
    let made: Vec<usize> = (creates.iter())
        .filter(|(_, agent)| instances.contains(agent))
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(made.len(), 7);
    assert!(
        made.iter().all(|&i| i < last_compile),
        "VMs made while compiling"
    );
    let disks = at(Side::Cloud, "create_disk");
    assert_eq!(disks.len(), 5, "web's 3 and api's 2");
    assert!(
        disks.iter().all(|(i, _)| *i < last_compile),
        "disks made while compiling"
    );
    for agent in &instances {
        let mounted = at(Side::Agent, "mount_disk")
            .into_iter()
            .find(|(_, a)| a == agent);
        let applied = at(Side::Agent, "apply")
            .into_iter()
            .find(|(_, a)| a == agent);
        if let Some((mounted, _)) = mounted {
            assert!(
                mounted < applied.expect("applied").0,
                "mounted before apply"
            );
        }
    }
    // Compilation: a worker's VM, then two packages one after the other.
    let compilation = Duration::from_secs(20 + 60 + 60);
    assert!(
        took < compilation + Duration::from_secs(60),
        "the VMs' 20 s are not on top of compilation: {took:?}"
    );
    sim.assert_no_leak();
}

/// A group whose packages are ready rolls out while a later group's packages still compile
/// (issue 29): `checks` (the smoke-test job: no packages), first in the manifest, is
/// updated before the last `compile_package` comes; `web`, `api` and `worker` (the hello
/// job) only after it compiled; the groups still go in the manifest's order, canaries
/// first. A compilation that fails then stops the rollout before the next group; a canary
/// that fails stops compilation before its next package.
#[tokio::test(start_paused = true)]
async fn a_group_rolls_out_while_later_groups_packages_compile() {
    use kubosh_sim::Side;
    let with_checks = || {
        let mut m = manifest();
        (m["instance_groups"].as_array_mut().unwrap()).insert(
            0,
            json!({
                "name": "checks", "instances": 2, "azs": ["z1"],
                "vm_type": "small", "stemcell": "default", "networks": [{"name": "default"}],
                "jobs": [{
                    "name": "smoke-test", "release": "hello",
                    "consumes": {"greeters": {"from": "web_greeter"}},
                }],
            }),
        );
        m
    };
    let sim = compiling_slowly();
    let report = sim.deploy(with_checks()).await;
    assert_eq!(report.updated.len(), 9, "{report:?}");
    let timeline = sim.cloud.timeline();
    let applied_at = |group: &str| -> Vec<usize> {
        let agents: BTreeSet<String> = (sim.group(group).iter())
            .filter_map(|i| Some(i.vm.as_ref()?.agent_id.clone()))
            .collect();
        (timeline.iter().enumerate())
            .filter(|(_, s)| s.side == Side::Agent && s.method == "apply")
            .filter(|(_, s)| agents.contains(&s.target))
            .map(|(i, _)| i)
            .collect()
    };
    let compiles: Vec<usize> = (timeline.iter().enumerate())
        .filter(|(_, s)| s.method == "compile_package")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(compiles.len(), 2);
    let checks = applied_at("checks");
    assert_eq!(checks.len(), 2);
    assert!(
        checks.iter().all(|&i| i < compiles[1]),
        "checks while compiling"
    );
    for group in ["web", "api", "worker"] {
        let applied = applied_at(group);
        assert!(!applied.is_empty(), "{group}");
        assert!(
            applied.iter().all(|&i| i > compiles[1]),
            "{group} after compiling"
        );
    }
    // The manifest's order, one group after another, as in any deploy.
    let mut order: Vec<String> = (sim.events.lines().into_iter())
        .filter_map(|l| match l {
            EventLine::Stage(e) if e.stage == "Updating instance" && e.state == State::Started => {
                e.tags.first().cloned()
            }
            _ => None,
        })
        .collect();
    order.dedup();
    assert_eq!(order, ["checks", "web", "api", "worker"]);
    assert_eq!(
        max_open(&update_events(&sim.events, "web")),
        1,
        "web's canary alone"
    );
    sim.assert_no_leak();

    // hello-server fails to compile while checks roll out: web is never started.
    let sim = compiling_slowly();
    deploy_failing_second_compile(&sim, with_checks()).await;
    let state = sim.state();
    let applied = |group: &str| {
        (state.instances.values())
            .filter(|i| i.group == group && i.applied.is_some())
            .count()
    };
    assert_eq!(applied("checks"), 2, "rolled out while compiling");
    assert_eq!(applied("web"), 0, "never started");
    // Their announcements name what they got: done, as the next deploy sees them.
    assert!(
        (state.instances.values())
            .filter(|i| i.group == "checks")
            .all(|i| i.update_completed)
    );
    sim.assert_no_leak();

    // checks' canary fails while libhello compiles: the deploy fails with the canary's
    // words as soon as libhello is done; hello-server is never started.
    let sim = compiling_slowly();
    sim.agents
        .inject("apply", kubosh_sim::AgentFault::fail("bad config").times(1));
    let began = tokio::time::Instant::now();
    let err = (sim.engine.deploy(&sim.request(with_checks())))
        .await
        .expect_err("the canary fails");
    assert!(err.to_string().contains("bad config"), "{err}");
    assert_eq!(
        sim.agents.count("compile_package"),
        1,
        "hello-server never started"
    );
    assert!(
        began.elapsed() < Duration::from_secs(20 + 60 + 60),
        "not after all of compilation: {:?}",
        began.elapsed()
    );
    assert_eq!(sim.state().compiled_packages.len(), 1, "libhello kept");
    sim.assert_no_leak();
}

/// Groups updated side by side (`serial: false`) each start as soon as their own packages
/// compiled: `checks` (no packages) is updated while hello-server compiles, `web` (run
/// together with it) once it compiled; the next serial group after both.
#[tokio::test(start_paused = true)]
async fn groups_updated_together_each_start_when_their_packages_compiled() {
    use kubosh_sim::Side;
    let mut m = manifest();
    (m["instance_groups"].as_array_mut().unwrap()).insert(
        0,
        json!({
            "name": "checks", "instances": 2, "azs": ["z1"],
            "vm_type": "small", "stemcell": "default", "networks": [{"name": "default"}],
            "update": {"serial": false},
            "jobs": [{
                "name": "smoke-test", "release": "hello",
                "consumes": {"greeters": {"from": "web_greeter"}},
            }],
        }),
    );
    group_mut(&mut m, "web")["update"] = json!({"serial": false});
    let sim = compiling_slowly();
    let report = sim.deploy(m).await;
    assert_eq!(report.updated.len(), 9, "{report:?}");
    let timeline = sim.cloud.timeline();
    let at = |side: Side, method: &str, group: &str| -> Vec<usize> {
        let agents: BTreeSet<String> = (sim.group(group).iter())
            .filter_map(|i| Some(i.vm.as_ref()?.agent_id.clone()))
            .collect();
        (timeline.iter().enumerate())
            .filter(|(_, s)| s.side == side && s.method == method)
            .filter(|(_, s)| group.is_empty() || agents.contains(&s.target))
            .map(|(i, _)| i)
            .collect()
    };
    let last_compile = *at(Side::Agent, "compile_package", "").last().unwrap();
    assert!(
        at(Side::Agent, "apply", "checks")
            .iter()
            .all(|&i| i < last_compile)
    );
    let web = at(Side::Agent, "apply", "web");
    assert!(!web.is_empty() && web.iter().all(|&i| i > last_compile));
    // api (serial) only once both are done.
    let api = at(Side::Agent, "apply", "api");
    assert!(api.iter().all(|&i| i > *web.iter().max().unwrap()));
    let state = sim.state();
    assert!(state.instances.values().all(|i| i.update_completed));
    assert!(state.meta.updating.is_empty(), "{:?}", state.meta.updating);
    sim.assert_no_leak();
}

/// Deploys `manifest` with its second compile failing (libhello compiles first,
/// hello-server after it): the deploy fails and says why.
async fn deploy_failing_second_compile(sim: &Sim, manifest: Value) {
    sim.agents.inject(
        "compile_package",
        kubosh_sim::AgentFault::fail("out of disk")
            .after(1)
            .times(1),
    );
    let err = (sim.engine.deploy(&sim.request(manifest)))
        .await
        .expect_err("hello-server does not compile");
    assert!(err.to_string().contains("out of disk"), "{err}");
}

/// A compile that succeeded is kept when another compile of the same deploy fails: the
/// failed deploy records libhello, and the next deploy compiles only hello-server.
#[tokio::test(start_paused = true)]
async fn a_compile_that_succeeded_is_kept_when_another_fails() {
    let sim = Sim::new();
    deploy_failing_second_compile(&sim, manifest()).await;
    let kept: Vec<String> = sim
        .state()
        .compiled_packages
        .values()
        .map(|p| p.name.clone())
        .collect();
    assert_eq!(kept, ["libhello"]);
    sim.reset_calls();
    sim.deploy(manifest()).await;
    assert_eq!(sim.agents.count("compile_package"), 1);
    let mut names: Vec<String> = sim
        .state()
        .compiled_packages
        .values()
        .map(|p| p.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["hello-server", "libhello"]);
    sim.assert_no_leak();
}

#[tokio::test(start_paused = true)]
async fn deleting_a_deployment_deletes_its_vms_and_deletes_or_orphans_its_disks() {
    use kubosh_engine::delete::DiskDisposal;
    for disposal in [DiskDisposal::Delete, DiskDisposal::Orphan] {
        let sim = Sim::new();
        sim.deploy(manifest()).await;
        let disks: BTreeSet<String> = sim
            .state()
            .instances
            .values()
            .flat_map(|i| i.disks.iter().map(|d| d.cid.clone()))
            .collect();
        assert_eq!(disks.len(), 5);
        let name = manifest()["name"].as_str().unwrap().to_string();
        let report = sim.engine.delete_deployment(&name, disposal).await.unwrap();
        assert_eq!(report.instances.len(), 7);
        let state = sim.state();
        assert!(state.instances.is_empty());
        assert!(state.intents.is_empty());
        let inventory = sim.cloud.inventory();
        assert!(inventory.vms.is_empty(), "{disposal:?}: every VM is gone");
        let in_cloud: BTreeSet<String> = inventory.disks.iter().map(|d| d.cid.clone()).collect();
        match disposal {
            DiskDisposal::Delete => {
                assert!(in_cloud.is_empty(), "{in_cloud:?}");
                assert!(state.orphaned_disks.is_empty());
                assert_eq!(report.disks_deleted.len(), 5);
            }
            DiskDisposal::Orphan => {
                assert_eq!(in_cloud, disks);
                let orphaned: BTreeSet<String> = state.orphaned_disks.keys().cloned().collect();
                assert_eq!(orphaned, disks);
            }
        }
        assert!(
            sim.cloud.count("delete_vm") >= 7,
            "VMs are deleted, not left running"
        );
        // A second delete finds nothing to do.
        let again = sim.engine.delete_deployment(&name, disposal).await.unwrap();
        assert!(again.instances.is_empty());
    }
}

/// Slow enough that a deploy spends seconds in every stage.
fn slow(sim: &Sim) {
    sim.cloud.set_latency("create_vm", Duration::from_secs(20));
    sim.cloud.set_latency("create_disk", Duration::from_secs(3));
    sim.agents.set_latency("apply", Duration::from_secs(3));
    sim.agents
        .set_latency("compile_package", Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_deploy_starts_nothing_new_leaves_nothing_pending_and_the_next_one_finishes() {
    let mut cancelled_at = Vec::new();
    let mut after = Duration::from_secs(1);
    loop {
        let sim = Sim::new();
        slow(&sim);
        let engine = Engine {
            cancel: kubosh_engine::CancellationToken::new(),
            ..sim.engine.clone()
        };
        let cancel = engine.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            cancel.cancel();
        });
        let request = sim.request(manifest());
        let result = engine.deploy(&request).await;
        let Err(e) = result else {
            break;
        };
        assert!(
            matches!(e, EngineError::Cancelled { lock_lost: false }),
            "{e}"
        );
        assert_eq!(e.to_string(), "Task cancelled");
        assert_eq!(e.disposition(), Disposition::Retry);
        // The steps in flight finished: every creation is recorded, nothing pending.
        sim.assert_no_leak();
        let report = sim.deploy(manifest()).await;
        assert!(!report.noop);
        sim.assert_no_leak();
        assert_eq!(sim.state().instances.len(), 7);
        assert!(sim.state().instances.values().all(|i| i.update_completed));
        cancelled_at.push(after);
        after += Duration::from_secs(6);
    }
    assert!(
        cancelled_at.len() >= 8,
        "cancelled only at {cancelled_at:?}"
    );
}

/// Locks whose every guard is lost `after` its acquisition (its renewal failed).
struct LostLocks {
    after: Duration,
}

impl Lock for LostLocks {
    fn acquire<'a>(
        &'a self,
        _name: &'a str,
        _holder: &'a Holder,
        _wait: Duration,
    ) -> futures::future::BoxFuture<'a, Result<Guard, LockError>> {
        let after = self.after;
        Box::pin(async move {
            let (lost_tx, lost) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let _ = lost_tx.send(true);
                // Keep the sender: a closed channel is not a loss.
                std::future::pending::<()>().await;
            });
            Ok(Guard::new(lost, Box::new(|| {})))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_deploy_that_loses_its_lock_stops_between_steps_without_leaks() {
    let sim = Sim::new();
    slow(&sim);
    let engine = Engine {
        locks: Arc::new(LostLocks {
            after: Duration::from_secs(30),
        }),
        ..sim.engine.clone()
    };
    let e = engine
        .deploy(&sim.request(manifest()))
        .await
        .expect_err("the deploy stops");
    assert!(
        matches!(e, EngineError::Cancelled { lock_lost: true }),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "Task cancelled: the deployment lock was lost (its renewal failed)"
    );
    sim.assert_no_leak();
    assert!(
        sim.state().instances.values().any(|i| !i.update_completed)
            || sim.state().instances.len() < 7,
        "the deploy stopped before the end"
    );
    sim.deploy(manifest()).await;
    sim.assert_no_leak();
    assert!(sim.state().instances.values().all(|i| i.update_completed));
}

/// An IP registry that remembers every claim and, `intrusions` times, lets deployment
/// `intruder` claim the addresses of this deploy's compilation workers just before this
/// deploy claims them (deploys of one director planning at once).
#[derive(Default)]
struct TestRegistry {
    inner: MemoryIpRegistry,
    intrusions: std::sync::atomic::AtomicUsize,
    claims: std::sync::Mutex<Vec<Vec<kubosh_engine::state::Reservation>>>,
}

impl TestRegistry {
    fn intruded(times: usize) -> TestRegistry {
        TestRegistry {
            intrusions: times.into(),
            ..TestRegistry::default()
        }
    }
}

impl kubosh_engine::state::IpRegistry for TestRegistry {
    fn held_elsewhere<'a>(
        &'a self,
        deployment: &'a str,
    ) -> kubosh_engine::state::StoreFuture<'a, Vec<kubosh_engine::state::Reservation>> {
        self.inner.held_elsewhere(deployment)
    }

    fn claim<'a>(
        &'a self,
        deployment: &'a str,
        held: Vec<kubosh_engine::state::Reservation>,
    ) -> kubosh_engine::state::StoreFuture<'a, Vec<kubosh_engine::state::Reservation>> {
        self.claims.lock().unwrap().push(held.clone());
        Box::pin(async move {
            let workers: Vec<_> = (held.iter())
                .filter(|r| r.group.starts_with("compilation-"))
                .collect();
            let left = self.intrusions.load(std::sync::atomic::Ordering::SeqCst);
            if deployment != "intruder" && !workers.is_empty() && left > 0 {
                self.intrusions
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                let mut theirs: Vec<_> = (self.inner.held_elsewhere(deployment).await?)
                    .into_iter()
                    .filter(|r| r.deployment == "intruder")
                    .collect();
                for r in workers {
                    theirs.push(kubosh_engine::state::Reservation {
                        deployment: "intruder".into(),
                        group: "db".into(),
                        instance_id: format!("db-{}", r.ip),
                        ..r.clone()
                    });
                }
                assert!(self.inner.claim("intruder", theirs).await?.is_empty());
            }
            self.inner.claim(deployment, held).await
        })
    }
}

/// Compilation workers' addresses taken by another deployment between planning and claiming
/// are replaced by free ones; when that keeps happening the deploy is retried, not stalled.
#[tokio::test(start_paused = true)]
async fn compilation_addresses_taken_meanwhile_are_chosen_again_and_contention_is_retried() {
    let mut sim = Sim::new();
    let registry = Arc::new(TestRegistry::intruded(2));
    sim.engine.config.ip_registry = Some(registry.clone());
    sim.deploy(manifest()).await;
    let intruders: BTreeSet<String> = (registry.inner.held_elsewhere("sim").await.unwrap())
        .iter()
        .map(|r| r.ip.to_string())
        .collect();
    assert_eq!(
        intruders.len(),
        4,
        "two workers, taken twice: {intruders:?}"
    );
    let ours: BTreeSet<String> = (sim.state().instances.values())
        .flat_map(|i| i.ips.values().map(|r| r.ip.clone()))
        .collect();
    assert!(ours.is_disjoint(&intruders));
    sim.assert_no_leak();

    // Taken at every attempt: retried later, with what happened said.
    let sim = {
        let mut sim = Sim::new();
        sim.engine.config.ip_registry = Some(Arc::new(TestRegistry::intruded(100)));
        sim
    };
    let err = sim
        .engine
        .deploy(&sim.request(manifest()))
        .await
        .unwrap_err();
    assert_eq!(err.disposition(), Disposition::Retry, "{err}");
    assert!(
        err.to_string()
            .contains("other deployments of this director claimed addresses at the same time"),
        "{err}"
    );
    assert!(
        sim.cloud.inventory().vms.is_empty(),
        "no worker was made with an address held elsewhere"
    );
}

// ---- the Director's disk messages, in order ----

/// A deployment of one `web` instance with a managed disk and one `worker` without disks.
fn one_of_each() -> Value {
    let mut m = manifest();
    m["instance_groups"]
        .as_array_mut()
        .unwrap()
        .retain(|g| g["name"] != "api");
    group_mut(&mut m, "web")["instances"] = json!(1);
    group_mut(&mut m, "worker")["instances"] = json!(1);
    m
}

impl Sim {
    /// The disk-related calls (and `apply`, to see what came before it) of the instance of
    /// `group`, on both sides, in order since the last reset: `"agent mount_disk <disk>"`,
    /// `"cloud attach_disk <disk>"`, with disk CIDs replaced by the names in `names`.
    fn disk_steps(&self, agent_id: &str, names: &[(&str, &str)]) -> Vec<String> {
        self.disk_steps_of(&[agent_id], names)
    }

    /// [`Sim::disk_steps`] of the instance whose VM was `agent_ids[0]`, then the next, ....
    fn disk_steps_of(&self, agent_ids: &[&str], names: &[(&str, &str)]) -> Vec<String> {
        const METHODS: &[&str] = &[
            "ping",
            "list_disk",
            "mount_disk",
            "unmount_disk",
            "migrate_disk",
            "add_persistent_disk",
            "remove_persistent_disk",
            "update_settings",
            "apply",
            "create_disk",
            "attach_disk",
            "detach_disk",
            "delete_vm",
            "create_vm",
        ];
        let named = |cid: &str| {
            (names.iter().find(|(c, _)| *c == cid)).map_or(cid.to_string(), |(_, n)| n.to_string())
        };
        (self.cloud.timeline().into_iter())
            .filter(|s| METHODS.contains(&s.method.as_str()))
            .filter_map(|s| match s.side {
                kubosh_sim::Side::Agent if agent_ids.contains(&s.target.as_str()) => Some(
                    format!("agent {} {}", s.method, named(&s.arg))
                        .trim_end()
                        .to_string(),
                ),
                kubosh_sim::Side::Cloud
                    if s.method.ends_with("_vm") || s.method == "create_disk" =>
                {
                    Some(format!("cloud {}", s.method))
                }
                kubosh_sim::Side::Cloud => Some(
                    format!("cloud {} {}", s.method, named(&s.target))
                        .trim_end()
                        .to_string(),
                ),
                _ => None,
            })
            .collect()
    }
}

/// The messages of each disk change match the Director's (`disk_manager.rb`,
/// `update_procedure.rb#converge_vm`): only the managed disk is mounted, unmounted and
/// migrated; a detached disk is first removed from the agent; every converge of a kept VM
/// ends its disk changes with `update_settings` before `apply`.
#[tokio::test(start_paused = true)]
async fn disk_changes_send_the_directors_messages_in_the_directors_order() {
    let sim = Sim::new();
    sim.deploy(one_of_each()).await;
    let web = sim.group("web")[0].clone();
    let worker = sim.group("worker")[0].clone();
    let (web_agent, worker_agent) = (Sim::agent_id(&web), Sim::agent_id(&worker));
    let first = web.disks[0].cid.clone();

    // Resize by copy.
    sim.cloud.reset_timeline();
    let mut m = one_of_each();
    group_mut(&mut m, "web")["persistent_disk"] = json!(4096);
    sim.deploy(m.clone()).await;
    let bigger = sim.group("web")[0].disks[0].cid.clone();
    let names = [(first.as_str(), "old"), (bigger.as_str(), "new")];
    assert_eq!(
        sim.disk_steps(&web_agent, &names),
        [
            "agent list_disk",
            "cloud create_disk",
            "cloud attach_disk new",
            "agent ping",
            "agent add_persistent_disk new",
            "agent ping",
            "agent mount_disk new",
            "agent migrate_disk old",
            // The migration unmounted the old disk (as a Linux agent's does): not listed, so
            // not unmounted.
            "agent list_disk",
            "agent remove_persistent_disk old",
            "cloud detach_disk old",
            "agent update_settings",
            "agent apply",
        ]
    );

    // A named disk added to a VM that stays: attached and associated, never mounted.
    sim.cloud.reset_timeline();
    group_mut(&mut m, "worker")["persistent_disks"] = json!([{"name": "data", "type": "small"}]);
    sim.deploy(m.clone()).await;
    let data = sim.group("worker")[0].disks[0].cid.clone();
    assert_eq!(sim.group("worker")[0].vm, worker.vm, "the VM stays");
    assert_eq!(
        sim.disk_steps(&worker_agent, &[(data.as_str(), "data")]),
        [
            "cloud create_disk",
            "cloud attach_disk data",
            "agent ping",
            "agent add_persistent_disk data",
            "agent update_settings",
            "agent apply",
        ]
    );
    let settings = sim.agents.agent(&worker_agent).unwrap().settings.unwrap();
    assert_eq!(
        settings["disk_associations"],
        json!([{"name": "data", "cid": data}])
    );
    assert_eq!(sim.agents.agent(&worker_agent).unwrap().store, None);

    // --recreate: the managed disk is unmounted and every disk detached before the VM goes;
    // the new VM gets them attached, the managed one mounted, then its settings.
    sim.cloud.reset_timeline();
    let mut request = sim.request(m.clone());
    request.requests.recreate = true;
    sim.deploy_with(&sim.engine, &request).await;
    let new_web_agent = Sim::agent_id(&sim.group("web")[0]);
    let steps = sim.disk_steps_of(&[&web_agent, &new_web_agent], &names);
    let web_done = steps.iter().position(|s| s == "agent apply").unwrap();
    assert_eq!(
        steps[..=web_done],
        [
            "agent list_disk",
            "agent unmount_disk new",
            "agent remove_persistent_disk new",
            "cloud detach_disk new",
            "cloud delete_vm",
            "cloud create_vm",
            "agent ping",
            "cloud attach_disk new",
            "agent ping",
            "agent add_persistent_disk new",
            "agent ping",
            "agent mount_disk new",
            "agent update_settings",
            "agent apply",
        ]
    );

    // Removing the named disk: removed from the agent and detached, no unmount; the
    // association goes with the next settings.
    sim.cloud.reset_timeline();
    let worker = sim.group("worker")[0].clone();
    let worker_agent = Sim::agent_id(&worker);
    group_mut(&mut m, "worker")
        .as_object_mut()
        .unwrap()
        .remove("persistent_disks");
    sim.deploy(m.clone()).await;
    assert_eq!(
        sim.disk_steps(&worker_agent, &[(data.as_str(), "data")]),
        [
            "agent remove_persistent_disk data",
            "cloud detach_disk data",
            "agent update_settings",
            "agent apply",
        ]
    );
    let settings = sim.agents.agent(&worker_agent).unwrap().settings.unwrap();
    assert_eq!(settings["disk_associations"], json!([]));

    // Removing the managed disk: the sync check, then unmount and detach.
    sim.cloud.reset_timeline();
    group_mut(&mut m, "web")
        .as_object_mut()
        .unwrap()
        .remove("persistent_disk");
    sim.deploy(m).await;
    assert_eq!(
        sim.disk_steps(&new_web_agent, &names),
        [
            "agent list_disk",
            "agent list_disk",
            "agent unmount_disk new",
            "agent remove_persistent_disk new",
            "cloud detach_disk new",
            "agent update_settings",
            "agent apply",
        ]
    );
    assert!(sim.group("web")[0].disks.is_empty());
    sim.assert_no_leak();
}

/// What the engine told the message bus: every agent admitted, in order, and those revoked.
#[derive(Default)]
struct RecordedAccess {
    cloud: std::sync::Mutex<Option<Arc<SimCloud>>>,
    admitted: std::sync::Mutex<Vec<String>>,
    revoked: std::sync::Mutex<Vec<String>>,
    /// Agents admitted while the cloud already had their VM (must stay empty).
    late: std::sync::Mutex<Vec<String>>,
}

impl kubosh_engine::agent_access::AgentAccess for RecordedAccess {
    fn admit<'a>(
        &'a self,
        agent_ids: &'a [String],
    ) -> futures::future::BoxFuture<'a, Result<(), kubosh_engine::agent_access::AccessError>> {
        let cloud = self.cloud.lock().unwrap().clone().unwrap();
        let existing: BTreeSet<String> = cloud.inventory().agents.into_iter().collect();
        for id in agent_ids {
            let recorded_before = self.admitted.lock().unwrap().contains(id);
            if existing.contains(id) && !recorded_before {
                self.late.lock().unwrap().push(id.clone());
            }
            self.admitted.lock().unwrap().push(id.clone());
        }
        Box::pin(async { Ok(()) })
    }

    fn revoke<'a>(
        &'a self,
        agent_ids: &'a [String],
    ) -> futures::future::BoxFuture<'a, Result<(), kubosh_engine::agent_access::AccessError>> {
        self.revoked
            .lock()
            .unwrap()
            .extend(agent_ids.iter().cloned());
        Box::pin(async { Ok(()) })
    }
}

/// Every agent is let onto the bus before its VM exists and locked out once the VM is gone
/// (compilation workers, scaled-down and recreated instances alike), so what stays admitted
/// is exactly the agents of the VMs that stay.
#[tokio::test(start_paused = true)]
async fn agents_are_admitted_before_their_vms_and_revoked_after() {
    let mut sim = Sim::new();
    let access = Arc::new(RecordedAccess::default());
    *access.cloud.lock().unwrap() = Some(sim.cloud.clone());
    sim.engine.config.agent_access = Some(access.clone());
    sim.deploy(manifest()).await;
    let mut m = manifest();
    group_mut(&mut m, "web")["instances"] = json!(1);
    sim.deploy(m.clone()).await;
    let mut request = sim.request(m);
    request.requests.recreate = true;
    sim.deploy_with(&sim.engine, &request).await;

    assert!(
        access.late.lock().unwrap().is_empty(),
        "admitted after create_vm"
    );
    let admitted: BTreeSet<String> = access.admitted.lock().unwrap().iter().cloned().collect();
    let revoked: BTreeSet<String> = access.revoked.lock().unwrap().iter().cloned().collect();
    let left: BTreeSet<String> = admitted.difference(&revoked).cloned().collect();
    let agents: BTreeSet<String> = sim.cloud.inventory().agents.into_iter().collect();
    assert_eq!(
        left, agents,
        "admitted and not revoked = the agents of the VMs left"
    );
    assert!(
        revoked.len() > 6,
        "compilation workers, scaled-down and recreated VMs: {revoked:?}"
    );
    sim.assert_no_leak();
}

/// `bosh cck`: a scan names each problem in BOSH's words (a VM gone, an agent silent, a disk
/// gone, a disk not mounted) and changes nothing; each chosen resolution is applied, and a
/// scan afterwards finds nothing.
#[tokio::test(start_paused = true)]
async fn cck_finds_each_problem_and_applies_the_chosen_resolutions() {
    use kubosh_engine::cck::{ProblemKind, Resolution};
    let sim = Sim::new();
    sim.deploy(manifest()).await;
    assert_eq!(
        sim.engine.scan("sim").await.unwrap(),
        vec![],
        "a healthy deployment"
    );
    let web = sim.group("web");
    let api = sim.group("api");
    // web/0: its VM deleted; web/1: its agent silent; web/2: its disk not mounted;
    // api/0: its disk deleted.
    kubosh_cloud::Cloud::delete_vm(sim.cloud.as_ref(), &VmCid(Sim::vm_cid(&web[0])))
        .await
        .unwrap();
    sim.cloud
        .set_agent_unresponsive(&VmCid(Sim::vm_cid(&web[1])), true)
        .unwrap();
    let agent2 = web[2].vm.as_ref().unwrap().agent_id.clone();
    sim.agents
        .client(agent2.as_str())
        .unmount_disk(&web[2].disks[0].cid)
        .await
        .unwrap();
    let api_disk = kubosh_cloud::DiskCid(api[0].disks[0].cid.clone());
    let api_vm = VmCid(Sim::vm_cid(&api[0]));
    kubosh_cloud::Cloud::detach_disk(sim.cloud.as_ref(), &api_vm, &api_disk)
        .await
        .unwrap();
    kubosh_cloud::Cloud::delete_disk(sim.cloud.as_ref(), &api_disk)
        .await
        .unwrap();
    sim.reset_calls();
    let problems = sim.engine.scan("sim").await.unwrap();
    let found: Vec<(ProblemKind, String)> = (problems.iter())
        .map(|p| (p.kind, p.instance.display.clone()))
        .collect();
    assert_eq!(
        found,
        vec![
            (ProblemKind::MissingDisk, api[0].display_name()),
            (ProblemKind::MissingVm, web[0].display_name()),
            (ProblemKind::UnresponsiveAgent, web[1].display_name()),
            (ProblemKind::MountInfoMismatch, web[2].display_name()),
        ]
    );
    assert_eq!(
        problems[1].description,
        format!(
            "VM for '{}' with cloud ID '{}' missing.",
            web[0].display_name(),
            Sim::vm_cid(&web[0])
        )
    );
    assert!(
        problems[2].description.ends_with("is not responding."),
        "{}",
        problems[2].description
    );
    assert_eq!(
        sim.engine.scan("sim").await.unwrap(),
        problems,
        "the same ids again"
    );
    let changes: Vec<String> = (sim.cloud.counts().into_keys())
        .filter(|m| !["has_vm", "has_disk", "info"].contains(&m.as_str()))
        .collect();
    assert_eq!(changes, Vec::<String>::new(), "a scan changes nothing");

    // A resolution a problem does not offer is refused before anything changes.
    let refused = sim
        .engine
        .resolve_problems(
            "sim",
            &[(problems[1].clone(), Resolution::ReattachDisk)],
            None,
        )
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("does not resolve missing_vm"),
        "{refused}"
    );

    let request = sim.request(manifest());
    let choices = vec![
        (problems[0].clone(), Resolution::DeleteDiskReference),
        (problems[1].clone(), Resolution::RecreateVm),
        (problems[2].clone(), Resolution::RecreateVm),
        (problems[3].clone(), Resolution::ReattachDisk),
    ];
    let done = sim
        .engine
        .resolve_problems("sim", &choices, Some(&request))
        .await
        .unwrap();
    assert_eq!(done.applied.len(), 4);
    let web_after = sim.group("web");
    assert_ne!(Sim::vm_cid(&web_after[0]), Sim::vm_cid(&web[0]));
    assert_ne!(Sim::vm_cid(&web_after[1]), Sim::vm_cid(&web[1]));
    assert_eq!(web_after[0].disks, web[0].disks, "recreated on its disk");
    assert_eq!(web_after[1].disks, web[1].disks, "recreated on its disk");
    assert_eq!(
        Sim::vm_cid(&web_after[2]),
        Sim::vm_cid(&web[2]),
        "reattached in place"
    );
    let api_after = sim.group("api");
    assert_ne!(api_after[0].disks[0].cid, api[0].disks[0].cid, "a new disk");
    assert_eq!(
        sim.engine.scan("sim").await.unwrap(),
        vec![],
        "nothing left"
    );
    sim.assert_no_leak();
}

/// [`LiteralRenderer`] with each instance's consumed links in every file it renders (as a
/// template that lists a link's addresses shows them), remembering the links of the last
/// unit of each deployment it rendered.
#[derive(Default)]
struct LinkRenderer {
    seen: std::sync::Mutex<BTreeMap<String, Value>>,
}

impl kubosh_engine::TemplateRenderer for LinkRenderer {
    fn render<'a>(
        &'a self,
        units: &'a [kubosh_artifacts::render::RenderUnit],
    ) -> futures::future::BoxFuture<
        'a,
        Vec<Result<kubosh_artifacts::render::RenderedJob, kubosh_artifacts::render::RenderError>>,
    > {
        Box::pin(async move {
            let rendered = LiteralRenderer.render(units).await;
            let mut seen = self.seen.lock().unwrap();
            (units.iter().zip(rendered))
                .map(|(unit, job)| {
                    let links = serde_json::to_value(&unit.spec.links).unwrap();
                    seen.insert(unit.spec.deployment.clone(), links.clone());
                    job.map(|mut job| {
                        for file in &mut job.files {
                            file.content.push_str(&format!("{links}\n"));
                        }
                        job
                    })
                })
                .collect()
        })
    }
}

/// The addresses of the `peers` link deployment `deployment` was last rendered with.
fn peer_addresses(renderer: &LinkRenderer, deployment: &str) -> Vec<String> {
    let seen = renderer.seen.lock().unwrap();
    let links = &seen[deployment];
    (links["peers"]["instances"].as_array().unwrap().iter())
        .map(|i| i["address"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_link_consumed_from_another_deployment_follows_its_provider() {
    let sim = Sim::new();
    let renderer = Arc::new(LinkRenderer::default());
    let mut director = sim.engine.clone();
    director.renderer = renderer.clone();
    director.config.ip_registry = Some(Arc::new(MemoryIpRegistry::default()));
    director.config.link_registry =
        Some(Arc::new(kubosh_engine::state::MemoryLinkRegistry::default()));
    let engine_of = |store: &MemoryStore| {
        let mut engine = director.clone();
        engine.store = Arc::new(store.clone());
        engine
    };
    let (zk_store, app_store) = (MemoryStore::new(), MemoryStore::new());
    let (zk, app) = (engine_of(&zk_store), engine_of(&app_store));
    let provider = |instances: u64| {
        let mut m = small_deployment("zk", instances, &[]);
        m["instance_groups"][0]["jobs"][0]["provides"]["greeter"]["shared"] = json!(true);
        m
    };
    let mut consumer = small_deployment("app", 1, &[]);
    consumer["instance_groups"][0]["name"] = json!("front");
    consumer["instance_groups"][0]["jobs"][0]["consumes"] =
        json!({"peers": {"from": "solo_greeter", "deployment": "zk"}});

    // No such deployment yet: the Director's words, with the link's path; nothing made.
    let error = app
        .deploy(&sim.request(consumer.clone()))
        .await
        .unwrap_err();
    assert_eq!(error.disposition(), Disposition::Stall);
    assert!(
        error.to_string().contains(
            "instance_groups[0].jobs[0].consumes.peers.deployment: Link 'solo_greeter' in job \
             'hello' from instance group 'front' consumes from deployment 'zk', but the \
             deployment does not exist."
        ),
        "{error}"
    );
    assert!(sim.cloud.inventory().vms.is_empty());

    let ips = |report: &DeployReport| -> Vec<String> {
        report
            .plan
            .iter()
            .map(|p| p.ips["default"].clone())
            .collect()
    };
    let one = sim.deploy_with(&zk, &sim.request(provider(1))).await;
    sim.deploy_with(&app, &sim.request(consumer.clone())).await;
    assert_eq!(peer_addresses(&renderer, "app"), ips(&one));
    let again = sim.deploy_with(&app, &sim.request(consumer.clone())).await;
    assert!(again.noop, "nothing changed: {:?}", again.plan);

    // The provider scales out: the consumer's next deploy is no no-op, and renders both.
    let two = sim.deploy_with(&zk, &sim.request(provider(2))).await;
    assert_eq!(ips(&two).len(), 2);
    let followed = sim.deploy_with(&app, &sim.request(consumer.clone())).await;
    assert!(!followed.noop);
    assert_eq!(followed.updated.len(), 1, "{followed:?}");
    assert_eq!(peer_addresses(&renderer, "app"), ips(&two));

    // Deleted, its providers go with it.
    zk.delete_deployment("zk", kubosh_engine::delete::DiskDisposal::Delete)
        .await
        .unwrap();
    let error = app.deploy(&sim.request(consumer)).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("but the deployment does not exist"),
        "{error}"
    );
}

mod cpis;
mod swap;
