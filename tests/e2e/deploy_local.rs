//! The deploy engine on the local cloud, every part real: the `kubosh` binary as CPI (one
//! process per call) starts `kubosh agent` processes as VMs, each in its own mount namespace
//! with its VM directory on `/var/vcap`; they reach a real nats-server with BOSH's
//! production permissions and mutual TLS; the example release is compiled from C source by
//! `cc` on compilation VMs, its ERB templates rendered by Ruby, and its job started by the
//! agent's supervisor. Each instance listens on its own loopback address.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kubosh_artifacts::blobstore::LocalBlobstore;
use kubosh_artifacts::release::Release;
use kubosh_artifacts::render::{Renderer, RendererConfig};
use kubosh_artifacts::stemcell::Stemcell;
use kubosh_cloud::local::{self, read_calls};
use kubosh_cloud::{CpiCommand, ExternalCpi};
use kubosh_core::plan::changes::Requests;
use kubosh_core::plan::desired::StemcellInfo;
use kubosh_devenv::{BoshNats, http_get};
use kubosh_engine::deploy::DeployReport;
use kubosh_engine::state::{DeploymentState, DirStore, InstanceRecord, StateStore};
use kubosh_engine::vm::mbus_cert_env;
use kubosh_engine::{DeployRequest, Engine, EngineConfig, EventLog, StemcellSource};
use kubosh_kube::lock::FileLocks;
use kubosh_transport::agent::{ClientOptions, MbusTls, NatsOptions, NatsTransport};
use serde_json::{Value, json};

const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");

/// Stops every agent of a local cloud when dropped: a failing test leaves no process behind.
struct StopAgents(PathBuf);

impl Drop for StopAgents {
    fn drop(&mut self) {
        let _ = local::stop_all_agents(&self.0, Duration::from_secs(5));
    }
}

struct World {
    _stop_agents: StopAgents,
    dir: tempfile::TempDir,
    _nats: Arc<BoshNats>,
    engine: Engine,
    events: EventLog,
    store: DirStore,
    release: Arc<Release>,
    stemcell: StemcellSource,
    port: u16,
    /// The third octet of this world's loopback subnet (tests run side by side).
    net: u8,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl World {
    async fn new(net: u8, agent_timeout: Duration) -> World {
        let nats = Arc::new(BoshNats::start(&[]).expect("nats-server starts"));
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("cloud");
        let config = dir.path().join("cpi.json");
        std::fs::write(
            &config,
            json!({
                "state_dir": state,
                "mbus": nats.url(),
                "agent": {
                    "command": ["{kubosh}", "agent", "--bind-base", "{root}", "-b", "/var/vcap", "-C", "{agent_config}"],
                    "env": {"KUBOSH_LOG": "kubosh=info"},
                    "stop_timeout_seconds": 20,
                },
            })
            .to_string(),
        )
        .unwrap();
        let cpi = ExternalCpi::new(
            CpiCommand::new(KUBOSH)
                .args(["cpi", "--config", config.to_str().unwrap()])
                .timeout(Duration::from_secs(60)),
            "director-uuid",
        );
        let pem = nats.director().unwrap();
        let transport = NatsTransport::connect(&NatsOptions::new(
            nats.url(),
            MbusTls::new(pem.ca_pem, pem.cert_pem, pem.key_pem),
        ))
        .await
        .expect("director connects");
        let events = EventLog::new();
        let store = DirStore::new(dir.path().join("deployment-state"));
        let agent_nats = nats.clone();
        let renderer = Renderer::new(RendererConfig {
            cache_dir: dir.path().join("render"),
            ..RendererConfig::default()
        })
        .unwrap();
        let engine = Engine {
            cloud: Arc::new(cpi),
            agents: Arc::new(transport),
            blobstore: Arc::new(LocalBlobstore::new(state.join("blobstore")).unwrap()),
            renderer: Arc::new(renderer),
            store: Arc::new(store.clone()),
            locks: Arc::new(FileLocks::new(dir.path().join("locks"))),
            events: Arc::new(events.clone()),
            cancel: Default::default(),
            config: EngineConfig {
                agent_options: ClientOptions {
                    timeout: agent_timeout,
                    poll_interval: Duration::from_millis(100),
                    ..ClientOptions::default()
                },
                agent_wait_timeout: Duration::from_secs(60),
                agent_env: Some(Arc::new(move |agent_id: &str| {
                    let pem = agent_nats.allow_agent(agent_id).expect("agent certificate");
                    mbus_cert_env(&pem.ca_pem, &pem.cert_pem, &pem.key_pem)
                })),
                recovery_wait: Duration::from_secs(5),
                ..EngineConfig::default()
            },
            named_clouds: Default::default(),
        };
        let stemcell = stemcell(dir.path());
        World {
            _stop_agents: StopAgents(state),
            dir,
            _nats: nats,
            engine,
            events,
            store,
            release: Arc::new(
                kubosh_devenv::example_release().expect("the example release builds"),
            ),
            stemcell,
            port: free_port(),
            net,
        }
    }

    fn cloud_state(&self) -> PathBuf {
        self.dir.path().join("cloud")
    }

    fn request(&self, manifest: Value) -> DeployRequest {
        self.request_on(manifest, cloud_config(self.net, 49))
    }

    /// A request for `manifest` on `cloud`, validated as every caller of the engine does.
    fn request_on(&self, manifest: Value, cloud: Value) -> DeployRequest {
        DeployRequest {
            releases: vec![self.release.clone()],
            stemcells: vec![self.stemcell.clone()],
            requests: Requests::default(),
            action: None,
            ..DeployRequest::validated(&manifest, &cloud).unwrap_or_else(|p| panic!("{p}"))
        }
    }

    async fn try_deploy(&self, request: &DeployRequest) -> Result<DeployReport, String> {
        self.engine.deploy(request).await.map_err(|e| e.to_string())
    }

    async fn deploy(&self, manifest: Value) -> DeployReport {
        match self.engine.deploy(&self.request(manifest)).await {
            Ok(report) => report,
            Err(e) => panic!(
                "deploy failed: {e}\nevents:\n{}",
                self.events
                    .lines()
                    .iter()
                    .map(|l| l.to_json())
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        }
    }

    async fn state(&self) -> DeploymentState {
        self.store.load().await.unwrap()
    }

    fn calls(&self) -> Vec<String> {
        read_calls(&self.cloud_state())
            .unwrap()
            .into_iter()
            .map(|c| c.method)
            .collect()
    }

    /// The host path of an instance's `/var/vcap`.
    fn vm_root(&self, vm_cid: &str) -> PathBuf {
        self.cloud_state().join("vms").join(vm_cid).join("root")
    }
}

fn stemcell(dir: &Path) -> StemcellSource {
    let tarball = dir.join("stemcell.tgz");
    kubosh_devenv::write_local_stemcell(&tarball).unwrap();
    let extracted = Stemcell::extract(&tarball, &dir.join("stemcell")).unwrap();
    StemcellSource {
        info: StemcellInfo {
            name: extracted.stemcell.manifest.name.clone(),
            version: extracted.stemcell.manifest.version.clone(),
            os: extracted.stemcell.manifest.operating_system.clone(),
        },
        image_path: extracted.image_path,
        cloud_properties: Default::default(),
    }
}

/// A cloud config on `127.0.<net>.0/24` whose dynamic range is `.2` up to `.<last>`.
fn cloud_config(net: u8, last: u8) -> Value {
    let n = |host: u8| format!("127.0.{net}.{host}");
    json!({
        "azs": [{"name": "z1"}],
        "vm_types": [{"name": "small", "cloud_properties": {}}],
        "disk_types": [{"name": "small", "disk_size": 64}],
        "networks": [{
            "name": "default",
            "type": "manual",
            "subnets": [{
                "range": format!("127.0.{net}.0/24"),
                "gateway": n(1),
                "az": "z1",
                "reserved": if last < 49 {
                    json!([format!("{} - {}", n(last + 1), n(49)), format!("{} - {}", n(61), n(254))])
                } else {
                    json!([format!("{} - {}", n(61), n(254))])
                },
                "static": [format!("{} - {}", n(50), n(60))],
            }],
        }],
        "compilation": {
            "workers": 2, "network": "default", "az": "z1", "vm_type": "small",
            "reuse_compilation_vms": true,
        },
    })
}

fn manifest(net: u8, port: u16, web_greeting: &str, disk: u64, with_api: bool) -> Value {
    let mut groups = vec![json!({
        "name": "web",
        "instances": 2,
        "azs": ["z1"],
        "vm_type": "small",
        "stemcell": "default",
        "persistent_disk": disk,
        "networks": [{"name": "default"}],
        "jobs": [{"name": "hello", "release": "hello",
                  "provides": {"greeter": {"as": "web_greeter"}},
                  "consumes": {"peers": {"from": "web_greeter"}},
                  "properties": {"hello": {"port": port, "bind": "instance", "greeting": web_greeting}}}],
    })];
    if with_api {
        groups.push(json!({
            "name": "api",
            "instances": 1,
            "azs": ["z1"],
            "vm_type": "small",
            "stemcell": "default",
            "networks": [{"name": "default", "static_ips": [format!("127.0.{net}.50")]}],
            "jobs": [{"name": "hello", "release": "hello",
                      "consumes": {"peers": "nil"},
                      "properties": {"hello": {"port": port, "bind": "instance", "greeting": "Hi"}}}],
        }));
    }
    json!({
        "name": "hello",
        "releases": [{"name": "hello", "version": "1.0.0"}],
        "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
        "update": {
            "canaries": 1, "max_in_flight": 2,
            "canary_watch_time": "500-30000", "update_watch_time": "500-30000",
        },
        "instance_groups": groups,
    })
}

fn ip_of(state: &DeploymentState, group: &str, index: u64) -> String {
    state
        .instances
        .values()
        .find(|i| i.group == group && i.index == index)
        .and_then(|i| i.ips.get("default"))
        .map(|r| r.ip.clone())
        .unwrap_or_else(|| panic!("{group}/{index} has no address"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_is_created_left_alone_updated_and_shrunk() {
    let w = World::new(1, Duration::from_secs(20)).await;

    // A fresh deploy: compile from source, create VMs, start the jobs.
    let report = w.deploy(manifest(w.net, w.port, "Hello", 64, true)).await;
    assert!(!report.noop);
    assert_eq!(report.updated.len(), 3, "{report:?}");
    assert_eq!(report.compiled, 2, "libhello and hello-server");
    let state = w.state().await;
    assert_eq!(state.instances.len(), 3);
    assert!(state.intents.is_empty(), "{:?}", state.intents);
    assert_eq!(ip_of(&state, "api", 0), "127.0.1.50");
    assert!(
        w.events
            .lines()
            .iter()
            .any(|l| l.to_json().contains(r#""task":"web/"#) && l.to_json().contains("(canary)")),
        "the first web instance is a canary"
    );
    for (group, index, greeting) in [("web", 0, "Hello"), ("web", 1, "Hello"), ("api", 0, "Hi")] {
        let ip = ip_of(&state, group, index);
        let body =
            http_get(&ip, w.port).unwrap_or_else(|| panic!("{group}/{index} answers on {ip}"));
        assert!(body.starts_with(greeting), "{group}/{index}: {body}");
    }
    let inventory = local::inventory(&w.cloud_state()).unwrap();
    assert_eq!(
        inventory.vms.len(),
        3,
        "compilation VMs are gone: {inventory:?}"
    );
    assert_eq!(inventory.disks.len(), 2);

    // A marker on web/0's persistent disk, written through the VM's /var/vcap/store.
    let web0 = record_of(&state, "web", 0);
    let root = w.vm_root(&web0.vm.as_ref().unwrap().cid);
    std::fs::write(root.join("store").join("marker"), "keep me").unwrap();

    // The same deploy again: no cloud call at all.
    let before = w.calls().len();
    let report = w.deploy(manifest(w.net, w.port, "Hello", 64, true)).await;
    assert!(report.noop, "{report:?}");
    assert_eq!(w.calls().len(), before, "a no-op deploy calls the cloud");

    // A property of one group: only its instances restart; no cloud call.
    let before = w.calls().len();
    let report = w.deploy(manifest(w.net, w.port, "Howdy", 64, true)).await;
    assert_eq!(report.updated.len(), 2, "{report:?}");
    assert!(
        report.updated.iter().all(|n| n.starts_with("web/")),
        "{report:?}"
    );
    assert_eq!(w.calls().len(), before, "{:?}", &w.calls()[before..]);
    let state = w.state().await;
    assert!(
        http_get(&ip_of(&state, "web", 1), w.port)
            .unwrap()
            .starts_with("Howdy")
    );
    assert!(
        http_get(&ip_of(&state, "api", 0), w.port)
            .unwrap()
            .starts_with("Hi")
    );

    // A bigger disk: the data moves to the new disk, the old one is orphaned.
    let report = w.deploy(manifest(w.net, w.port, "Howdy", 128, true)).await;
    assert_eq!(report.updated.len(), 2, "{report:?}");
    let state = w.state().await;
    let web0 = state.instances.get(&web0.uuid).unwrap();
    assert_eq!(web0.disks[0].size_mib, 128);
    let root = w.vm_root(&web0.vm.as_ref().unwrap().cid);
    assert_eq!(
        std::fs::read_to_string(root.join("store").join("marker")).unwrap(),
        "keep me"
    );
    assert_eq!(state.orphaned_disks.len(), 2);

    // The api group leaves the manifest: its VM goes.
    let report = w.deploy(manifest(w.net, w.port, "Howdy", 128, false)).await;
    assert_eq!(report.deleted.len(), 1, "{report:?}");
    let state = w.state().await;
    assert_eq!(state.instances.len(), 2);
    let inventory = local::inventory(&w.cloud_state()).unwrap();
    assert_eq!(inventory.vms.len(), 2);
    let recorded: Vec<String> = state
        .instances
        .values()
        .filter_map(|i| i.vm.as_ref().map(|v| v.cid.clone()))
        .collect();
    for vm in &inventory.vms {
        assert!(recorded.contains(&vm.cid), "leaked VM {vm:?}");
    }
}

/// Bad news is found before anything changes, and told in the Director's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_reported_as_bosh_reports_them_and_change_nothing() {
    let w = World::new(2, Duration::from_secs(2)).await;
    // Three dynamic addresses: two for web, one for a spare group.
    let base = |greeting: &str| {
        let mut m = manifest(w.net, w.port, greeting, 64, true);
        let mut spare = m["instance_groups"][1].clone();
        spare["name"] = json!("spare");
        spare["networks"] = json!([{"name": "default"}]);
        m["instance_groups"].as_array_mut().unwrap().push(spare);
        m
    };
    let small = |m: Value| w.request_on(m, cloud_config(w.net, 4));
    // The first deploy compiles: its workers need addresses of their own (.5 and .6), so
    // it runs with the whole range; the instances take the lowest ones, .2 to .4.
    w.try_deploy(&w.request(base("Hello"))).await.unwrap();
    let state = w.state().await;

    // The spare group goes and web grows by one: the spare's address is still held while
    // addresses are chosen (it is deleted later in the deploy), so there is none for web.
    let calls = w.calls().len();
    let mut bigger = base("Hello");
    bigger["instance_groups"][0]["instances"] = json!(3);
    bigger["instance_groups"].as_array_mut().unwrap().pop();
    let err = w.try_deploy(&small(bigger)).await.unwrap_err();
    assert!(
        err.starts_with("Failed to reserve IP for 'web/")
            && err.ends_with("(2)' for manual network 'default': no more available"),
        "{err}"
    );
    assert_eq!(w.calls().len(), calls);
    assert_eq!(w.state().await, state);

    // Two groups swapping their static IPs in one deploy.
    let mut swapped = base("Hello");
    swapped["instance_groups"][0]["networks"][0]["static_ips"] =
        json!([format!("127.0.{}.50", w.net), format!("127.0.{}.51", w.net)]);
    swapped["instance_groups"][1]["networks"][0]["static_ips"] =
        json!([format!("127.0.{}.52", w.net)]);
    let err = w.try_deploy(&small(swapped)).await.unwrap_err();
    assert!(
        err.contains(&format!("127.0.{}.50/32", w.net))
            && err.contains("already reserved by instance"),
        "{err}"
    );
    assert_eq!(w.calls().len(), calls);
    assert_eq!(w.state().await, state);

    // An agent that does not answer: BOSH's timeout, and nothing changed.
    let api = state
        .instances
        .values()
        .find(|i| i.group == "api")
        .unwrap()
        .clone();
    let api_vm = api.vm.clone().unwrap();
    local::set_agent_frozen(
        &w.cloud_state(),
        &kubosh_cloud::VmCid(api_vm.cid.clone()),
        true,
    )
    .unwrap();
    let err = w.try_deploy(&small(base("Howdy"))).await.unwrap_err();
    let expected = format!(
        "Timed out sending 'get_state' to instance: '{}', agent-id: '{}' after 2 seconds",
        api.name(),
        api_vm.agent_id
    );
    assert!(err.contains(&expected), "{err}\nexpected: {expected}");
    // The only cloud call asks whether the VM still exists (it does).
    assert_eq!(w.calls()[calls..], ["has_vm"]);
    assert_eq!(w.state().await, state);
    local::set_agent_frozen(
        &w.cloud_state(),
        &kubosh_cloud::VmCid(api_vm.cid.clone()),
        false,
    )
    .unwrap();

    // A canary that never runs stops the deploy; the other instances are untouched.
    let web: Vec<_> = {
        let mut v: Vec<_> = state
            .instances
            .values()
            .filter(|i| i.group == "web")
            .cloned()
            .collect();
        v.sort_by_key(|i| i.index);
        v
    };
    let taken = free_port();
    let blocker = std::net::TcpListener::bind((ip_of(&state, "web", 0).as_str(), taken)).unwrap();
    let mut failing = base("Hello");
    failing["update"]["canary_watch_time"] = json!("500-3000");
    failing["instance_groups"][0]["jobs"][0]["properties"]["hello"]["port"] = json!(taken);
    let err = w.try_deploy(&small(failing)).await.unwrap_err();
    assert_eq!(
        err,
        format!(
            "'{}' is not running after update. Review logs for failed jobs: hello",
            web[0].display_name()
        )
    );
    drop(blocker);
    let after = w.state().await;
    assert_eq!(
        after.instances.get(&web[1].uuid),
        state.instances.get(&web[1].uuid)
    );
    assert!(
        !after.instances.get(&web[0].uuid).unwrap().update_completed,
        "the canary is dirty"
    );
    assert!(
        http_get(&ip_of(&state, "web", 1), w.port)
            .unwrap()
            .starts_with("Hello")
    );

    // Fixed: the next deploy redoes the dirty canary and goes on.
    let report = w.try_deploy(&small(base("Hello"))).await.unwrap();
    assert_eq!(report.updated, vec![web[0].display_name()], "{report:?}");
    assert!(
        http_get(&ip_of(&state, "web", 0), w.port)
            .unwrap()
            .starts_with("Hello")
    );
}

/// `bosh stop`, `start`, `stop --hard`, `recreate`, `restart` on a group or one instance:
/// VMs come and go, addresses and disk data stay; then a new stemcell with
/// `vm_strategy: create-swap-delete`: new VMs with new addresses, made before the old ones
/// go, the disk data kept, no VM leaked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_stop_start_detach_recreate_and_move_to_a_new_stemcell() {
    use kubosh_engine::{InstanceAction, Scope};
    let w = World::new(3, Duration::from_secs(20)).await;
    let m = manifest(w.net, w.port, "Hello", 64, false);
    w.deploy(m.clone()).await;
    let state = w.state().await;
    let ip = |i: u64| ip_of(&state, "web", i);
    let uuid_of = |i: u64| {
        state
            .instances
            .values()
            .find(|r| r.group == "web" && r.index == i)
            .unwrap()
            .uuid
            .clone()
    };
    let vm_of =
        |s: &DeploymentState, uuid: &str| s.instances[uuid].vm.as_ref().map(|v| v.cid.clone());
    let (web0, web1) = (uuid_of(0), uuid_of(1));
    let root = w.vm_root(&vm_of(&state, &web0).unwrap());
    std::fs::write(root.join("store").join("marker"), "keep me").unwrap();
    let act = |action: InstanceAction, instance: Option<&str>| DeployRequest {
        action: Some((
            action,
            Some(Scope {
                group: "web".into(),
                instance: instance.map(String::from),
            }),
        )),
        ..w.request(m.clone())
    };

    // stop web/0: its server stops, web/1 goes on.
    let report = w
        .try_deploy(&act(InstanceAction::Stop, Some("0")))
        .await
        .unwrap();
    assert_eq!(report.updated.len(), 1, "{report:?}");
    assert!(http_get(&ip(0), w.port).is_none());
    assert!(http_get(&ip(1), w.port).is_some());
    // A plain deploy keeps it stopped.
    assert!(w.deploy(m.clone()).await.noop);

    // start web/0 (by uuid).
    w.try_deploy(&act(InstanceAction::Start, Some(&web0)))
        .await
        .unwrap();
    assert!(http_get(&ip(0), w.port).unwrap().starts_with("Hello"));

    // stop --hard the group: no VM left, disks and addresses kept.
    w.try_deploy(&act(InstanceAction::StopHard, None))
        .await
        .unwrap();
    let detached = w.state().await;
    assert!(detached.instances.values().all(|i| i.vm.is_none()));
    assert_eq!(local::inventory(&w.cloud_state()).unwrap().vms.len(), 0);
    assert_eq!(local::inventory(&w.cloud_state()).unwrap().disks.len(), 2);
    assert!(
        w.deploy(m.clone()).await.noop,
        "detached instances stay detached"
    );

    // start the group: new VMs, same addresses, the disk data is back.
    w.try_deploy(&act(InstanceAction::Start, None))
        .await
        .unwrap();
    let started = w.state().await;
    assert_eq!(ip_of(&started, "web", 0), ip(0));
    let root = w.vm_root(&vm_of(&started, &web0).unwrap());
    assert_eq!(
        std::fs::read_to_string(root.join("store").join("marker")).unwrap(),
        "keep me"
    );
    assert!(http_get(&ip(1), w.port).unwrap().starts_with("Hello"));

    // recreate web/1: a new VM; restart web/0: the same VM.
    let before = w.state().await;
    w.try_deploy(&act(InstanceAction::Recreate, Some("1")))
        .await
        .unwrap();
    w.try_deploy(&act(InstanceAction::Restart, Some("0")))
        .await
        .unwrap();
    let after = w.state().await;
    assert_ne!(vm_of(&after, &web1), vm_of(&before, &web1));
    assert_eq!(vm_of(&after, &web0), vm_of(&before, &web0));
    assert!(http_get(&ip(1), w.port).unwrap().starts_with("Hello"));

    // A new stemcell version with web's `vm_strategy: create-swap-delete`: each VM is
    // replaced by one made ahead with new addresses, the disk and its data move to it, and
    // the old VM goes only then.
    let newer = {
        let dir = w.dir.path().join("stemcell-1.1");
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = stemcell(&dir);
        s.info.version = "1.1".into();
        s
    };
    let mut swapping = m.clone();
    swapping["instance_groups"][0]["update"] = json!({"vm_strategy": "create-swap-delete"});
    let mut request = w.request(swapping);
    request.stemcells.push(newer);
    let calls = w.calls().len();
    let milestones = w.events.milestones().len();
    let report = w.try_deploy(&request).await.unwrap();
    assert_eq!(report.updated.len(), 2, "{report:?}");
    assert!(
        report.plan.iter().all(|p| p.changes.contains(&"stemcell")),
        "{report:?}"
    );
    let moved = w.state().await;
    assert_swapped(&w, &after, &moved, calls, milestones);
    for uuid in [&web0, &web1] {
        assert_eq!(
            moved.instances[uuid].vm.as_ref().unwrap().stemcell,
            "bosh-kubosh-local-ubuntu-jammy/1.1"
        );
    }
    let root = w.vm_root(&vm_of(&moved, &web0).unwrap());
    assert_eq!(
        std::fs::read_to_string(root.join("store").join("marker")).unwrap(),
        "keep me"
    );
    for i in [0, 1] {
        let (old, new) = (ip_of(&after, "web", i), ip_of(&moved, "web", i));
        assert!(http_get(&new, w.port).unwrap().starts_with("Hello"));
        assert!(http_get(&old, w.port).is_none(), "web/{i}'s old VM is gone");
    }

    // The same deploy again: no cloud call, nothing changes.
    let calls = w.calls().len();
    let report = w.try_deploy(&request).await.unwrap();
    assert!(report.noop, "{report:?}");
    assert!(w.calls()[calls..].is_empty(), "{:?}", &w.calls()[calls..]);
    assert_eq!(w.state().await, moved);
}

/// Each instance of `before` was swapped to a new VM create-swap-delete by the deploy that
/// left `after`, as the local cloud's call log from `calls` on, the milestones from
/// `milestones` on and the cloud's inventory show: the new VM, with new addresses, was made
/// (every one before any old VM went: "Creating missing vms" makes them ahead), the disk
/// came off the old VM and onto it, and only then was the old VM deleted (the log is in
/// answer order, the engine's calls for one instance one after another); the cloud holds exactly the recorded VMs, at the recorded addresses, and
/// each disk is attached to its instance's VM.
fn assert_swapped(
    w: &World,
    before: &DeploymentState,
    after: &DeploymentState,
    calls: usize,
    milestones: usize,
) {
    let log = read_calls(&w.cloud_state()).unwrap()[calls..].to_vec();
    let at = |method: &str, args: &[&str]| {
        (log.iter())
            .position(|c| {
                c.method == method
                    && c.error.is_none()
                    && (args.iter().enumerate())
                        .all(|(i, a)| c.arguments.get(i).and_then(Value::as_str) == Some(*a))
            })
            .unwrap_or_else(|| panic!("no {method} {args:?} in {log:#?}"))
    };
    let recreated = w.events.milestones()[milestones..].to_vec();
    let (mut last_created, mut first_deleted) = (0, usize::MAX);
    for old in before.instances.values() {
        let new = &after.instances[&old.uuid];
        let (old_vm, new_vm) = (old.vm.as_ref().unwrap(), new.vm.as_ref().unwrap());
        let name = old.name();
        assert_ne!(new_vm.cid, old_vm.cid, "{name}: a new VM");
        assert_ne!(new.ips, old.ips, "{name}: new addresses");
        assert!(new.inactive_vm.is_none(), "{name}: {:?}", new.inactive_vm);
        assert_eq!(new.disks, old.disks, "{name}: the same disk");
        let disk = old.disks[0].cid.as_str();
        let created = at("create_vm", &[&new_vm.agent_id]);
        let detached = at("detach_disk", &[&old_vm.cid, disk]);
        let attached = at("attach_disk", &[&new_vm.cid, disk]);
        let deleted = at("delete_vm", &[&old_vm.cid]);
        assert!(
            created < detached && detached < attached && attached < deleted,
            "{name}: create_vm {created}, detach_disk {detached}, attach_disk {attached}, delete_vm {deleted}"
        );
        last_created = last_created.max(created);
        first_deleted = first_deleted.min(deleted);
        assert!(
            recreated.contains(&kubosh_engine::Milestone::VmRecreated {
                instance: kubosh_engine::InstanceName {
                    group: old.group.clone(),
                    index: old.index,
                    display: old.display_name(),
                },
                old_cid: old_vm.cid.clone(),
                new_cid: new_vm.cid.clone(),
            }),
            "{name}: {recreated:?}"
        );
    }
    assert!(
        last_created < first_deleted,
        "every new VM is made before any old one goes"
    );
    assert!(after.intents.is_empty(), "{:?}", after.intents);
    let inventory = local::inventory(&w.cloud_state()).unwrap();
    let mut held: Vec<(String, Vec<String>)> = (inventory.vms.iter())
        .map(|v| (v.cid.clone(), v.ips.clone()))
        .collect();
    let mut recorded: Vec<(String, Vec<String>)> = (after.instances.values())
        .map(|i| {
            let ips = i.ips.values().map(|r| r.ip.clone()).collect();
            (i.vm.as_ref().unwrap().cid.clone(), ips)
        })
        .collect();
    held.sort();
    recorded.sort();
    assert_eq!(held, recorded, "no VM leaked: {inventory:?}");
    for disk in &inventory.disks {
        let owner = (after.instances.values())
            .find(|i| i.disks.iter().any(|d| d.cid == disk.cid))
            .unwrap_or_else(|| panic!("unrecorded disk {disk:?}"));
        assert_eq!(disk.attached_to, owner.vm.as_ref().map(|v| v.cid.clone()));
    }
}

/// New VMs get `update_settings`, calculated `vm_resources`, the group's env with their
/// NATS certificate, and tagged metadata; a VM deleted behind the director's back is made
/// again by the next deploy, its disk data kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_vms_are_set_up_as_the_director_does_and_lost_vms_come_back() {
    let mut w = World::new(4, Duration::from_secs(5)).await;
    let certs = "-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n";
    w.engine.config.trusted_certs = certs.into();
    let mut m = manifest(w.net, w.port, "Hello", 64, false);
    m["tags"] = json!({"team": "blue"});
    let web = &mut m["instance_groups"][0];
    web.as_object_mut().unwrap().remove("vm_type");
    web["vm_resources"] = json!({"cpu": 1, "ram": 256, "ephemeral_disk_size": 1024});
    web["env"] = json!({"bosh": {"password": "$6$hash", "remove_dev_tools": true}});
    w.deploy(m.clone()).await;

    let state = w.state().await;
    let web0 = record_of(&state, "web", 0);
    let cid = web0.vm.as_ref().unwrap().cid.clone();
    let vm_dir = w.cloud_state().join("vms").join(&cid);
    let read = |p: PathBuf| -> Value {
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}")))
            .unwrap()
    };
    // What the agent persisted of update_settings.
    let update = read(w.vm_root(&cid).join("bosh").join("update_settings.json"));
    assert_eq!(
        update,
        json!({"trusted_certs": certs, "disk_associations": []})
    );
    // The local CPI's answer to calculate_vm_cloud_properties, as the VM's properties.
    let meta = read(vm_dir.join("meta.json"));
    assert_eq!(
        meta["cloud_properties"],
        json!({"cpu": 1, "ram": 256, "ephemeral_disk_size": 1024})
    );
    // The group's env verbatim, the NATS certificate merged under bosh.mbus.
    let settings = read(vm_dir.join("settings.json"));
    assert_eq!(settings["env"]["bosh"]["password"], "$6$hash");
    assert_eq!(settings["env"]["bosh"]["remove_dev_tools"], true);
    assert!(
        settings["env"]["bosh"]["mbus"]["cert"]["certificate"]
            .as_str()
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    let inventory = local::inventory(&w.cloud_state()).unwrap();
    let entry = inventory.vms.iter().find(|v| v.cid == cid).unwrap();
    assert_eq!(entry.metadata["team"], "blue");
    assert_eq!(entry.metadata["director"], "kubosh");
    assert_eq!(entry.metadata["name"], format!("web/{}", web0.uuid));
    assert!(entry.metadata.contains_key("created_at"));

    // The VM goes behind the director's back: the next deploy makes a new one.
    std::fs::write(w.vm_root(&cid).join("store").join("marker"), "keep me").unwrap();
    w.engine
        .cloud
        .delete_vm(&kubosh_cloud::VmCid(cid.clone()))
        .await
        .unwrap();
    let report = w.deploy(m.clone()).await;
    assert_eq!(report.updated, vec![web0.display_name()], "{report:?}");
    let after = w.state().await;
    let again = &after.instances[&web0.uuid];
    let new_cid = again.vm.as_ref().unwrap().cid.clone();
    assert_ne!(new_cid, cid);
    assert_eq!(again.disks, web0.disks);
    assert_eq!(again.ips, web0.ips);
    assert_eq!(
        std::fs::read_to_string(w.vm_root(&new_cid).join("store").join("marker")).unwrap(),
        "keep me"
    );
    assert!(
        w.events.lines().iter().any(|l| l
            .to_json()
            .contains(&format!("with cloud ID '{cid}' missing."))),
        "the warning names the lost VM"
    );
    assert!(
        http_get(&ip_of(&after, "web", 0), w.port)
            .unwrap()
            .starts_with("Hello")
    );
}

/// With snapshots and CPI disk resizing enabled: the first deploy snapshots nothing (nothing
/// ran), a restart snapshots each stopped instance's disk (a real copy in the local cloud,
/// listed on the disk's record), and a bigger disk grows in place, keeping its CID and data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_snapshot_disks_and_a_bigger_disk_is_resized_in_place() {
    let mut w = World::new(5, Duration::from_secs(20)).await;
    w.engine.config.snapshots_enabled = true;
    w.engine.config.enable_cpi_resize_disk = true;
    let m = |greeting: &str, disk: u64| manifest(w.net, w.port, greeting, disk, false);
    w.deploy(m("Hello", 64)).await;
    assert!(!w.calls().iter().any(|c| c == "snapshot_disk"));
    let state = w.state().await;
    let web0 = record_of(&state, "web", 0);
    let root = w.vm_root(&web0.vm.as_ref().unwrap().cid);
    std::fs::write(root.join("store").join("marker"), "keep me").unwrap();

    // A property change restarts web: each disk is snapshotted once its jobs stopped.
    let before = w.calls().len();
    let report = w.deploy(m("Howdy", 64)).await;
    assert_eq!(report.updated.len(), 2, "{report:?}");
    let calls = w.calls()[before..].to_vec();
    assert_eq!(
        calls.iter().filter(|c| *c == "snapshot_disk").count(),
        2,
        "{calls:?}"
    );
    let state = w.state().await;
    assert!(state.intents.is_empty(), "{:?}", state.intents);
    let inventory = local::inventory(&w.cloud_state()).unwrap();
    assert_eq!(inventory.snapshots.len(), 2);
    for i in state.instances.values() {
        assert_eq!(i.disks[0].snapshots.len(), 1, "{}", i.name());
        let snapshot = &i.disks[0].snapshots[0];
        assert!(
            inventory
                .snapshots
                .iter()
                .any(|s| &s.cid == snapshot && s.disk_cid == i.disks[0].cid),
            "{inventory:?}"
        );
    }
    let web0_snapshot = &state.instances[&web0.uuid].disks[0].snapshots[0];
    assert_eq!(
        std::fs::read_to_string(
            w.cloud_state()
                .join("snapshots")
                .join(web0_snapshot)
                .join("data")
                .join("marker")
        )
        .unwrap(),
        "keep me",
        "the snapshot is a copy of the disk"
    );

    // A bigger disk: resize_disk on the detached disk, no new disk, nothing orphaned.
    let before = w.calls().len();
    w.deploy(m("Howdy", 128)).await;
    let calls = w.calls()[before..].to_vec();
    assert_eq!(
        calls.iter().filter(|c| *c == "resize_disk").count(),
        2,
        "{calls:?}"
    );
    assert!(!calls.iter().any(|c| c == "create_disk"), "{calls:?}");
    let state = w.state().await;
    assert!(state.orphaned_disks.is_empty());
    let now = &state.instances[&web0.uuid];
    assert_eq!(now.disks[0].cid, web0.disks[0].cid);
    assert_eq!(now.disks[0].size_mib, 128);
    assert_eq!(
        now.disks[0].snapshots.len(),
        2,
        "the restart snapshotted again"
    );
    let root = w.vm_root(&now.vm.as_ref().unwrap().cid);
    assert_eq!(
        std::fs::read_to_string(root.join("store").join("marker")).unwrap(),
        "keep me"
    );
    let inventory = local::inventory(&w.cloud_state()).unwrap();
    assert!(
        inventory.disks.iter().all(|d| d.size_mib == 128),
        "{inventory:?}"
    );
    assert!(
        http_get(&ip_of(&state, "web", 0), w.port)
            .unwrap()
            .starts_with("Howdy")
    );
}

/// The record of `group/index`.
fn record_of(state: &DeploymentState, group: &str, index: u64) -> InstanceRecord {
    state
        .instances
        .values()
        .find(|i| i.group == group && i.index == index)
        .unwrap_or_else(|| panic!("no {group}/{index}"))
        .clone()
}

/// Errors that point at their cause (issue 24, item 6). A `create_vm` the CPI answered
/// with an error made no VM: it leaves no intent, so the next deploy neither warns that a
/// run "stopped before the cloud answered" nor waits for that VM's agent. A VM deleted
/// because its agent never answered leaves no CID in its instance record, so the next
/// deploy does not ask a VM that no longer exists for its state (three timeouts, then
/// `has_vm`) before it makes a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_abandoned_vms_leave_no_intent_and_no_record() {
    use kubosh_cloud::ErrorKind;
    use kubosh_cloud::local::{Fault, Faults};
    use kubosh_engine::{InstanceAction, Scope};
    let mut w = World::new(6, Duration::from_secs(2)).await;
    let m = manifest(w.net, w.port, "Hello", 64, false);

    // The CPI refuses the first VM (a compilation worker's): the deploy fails with its
    // words, and nothing is left to recover.
    let mut faults = Faults::default();
    faults.methods.insert(
        "create_vm".into(),
        Fault::fail(ErrorKind::VmCreationFailed, "no capacity in z1", false).times(1),
    );
    faults.save(&w.cloud_state()).unwrap();
    let err = w.try_deploy(&w.request(m.clone())).await.unwrap_err();
    assert!(err.contains("no capacity in z1"), "{err}");
    let state = w.state().await;
    assert!(state.intents.is_empty(), "{:?}", state.intents);
    assert!(local::inventory(&w.cloud_state()).unwrap().vms.is_empty());
    w.deploy(m.clone()).await;
    let said = w.events.warnings();
    assert!(
        !said.iter().any(|s| s.contains("before the cloud answered")),
        "{said:?}"
    );

    // web/0 is recreated while new agents never start: its new VM is deleted after the
    // agent wait, and its record says it has none.
    let state = w.state().await;
    let web0 = record_of(&state, "web", 0);
    Faults {
        start_agents_frozen: true,
        ..Faults::default()
    }
    .save(&w.cloud_state())
    .unwrap();
    w.engine.config.agent_wait_timeout = Duration::from_secs(3);
    let recreate = DeployRequest {
        action: Some((
            InstanceAction::Recreate,
            Some(Scope {
                group: "web".into(),
                instance: Some("0".into()),
            }),
        )),
        ..w.request(m.clone())
    };
    let err = w.try_deploy(&recreate).await.unwrap_err();
    assert!(err.starts_with("Timed out pinging VM '"), "{err}");
    let after = w.state().await;
    assert_eq!(after.instances[&web0.uuid].vm, None, "no VM in the record");
    assert!(after.intents.is_empty(), "{:?}", after.intents);
    let vms = local::inventory(&w.cloud_state()).unwrap().vms;
    assert_eq!(vms.len(), 1, "only web/1's VM is left: {vms:?}");

    // The next deploy gives web/0 a VM without asking the deleted one anything.
    Faults::clear(&w.cloud_state()).unwrap();
    w.engine.config.agent_wait_timeout = Duration::from_secs(60);
    let calls = w.calls().len();
    let report = w.deploy(m.clone()).await;
    assert!(!report.noop, "{report:?}");
    assert!(
        !w.calls()[calls..].iter().any(|c| c == "has_vm"),
        "{:?}",
        &w.calls()[calls..]
    );
    let last = w.state().await;
    assert!(last.instances[&web0.uuid].vm.is_some());
    assert!(
        http_get(&ip_of(&last, "web", 0), w.port)
            .unwrap()
            .starts_with("Hello")
    );
}
