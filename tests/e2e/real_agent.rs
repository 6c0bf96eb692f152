//! The real bosh-agent (cloudfoundry/bosh-agent, dummy platform, built by tools/testbins.sh)
//! as the local cloud's VMs, each scenario run twice: under `kubosh deploy` and under
//! `kubosh controller` (a `Deployment` applied; its agents confined on NATS). Each VM's first
//! process is `kubosh vm run`, which gives the agent a private `/var/vcap` and makes its disk
//! bookkeeping real.
//! With `-M dummy` the agent starts no job process, so what the jobs did is read from the
//! lifecycle scripts' traces (hello's `pre-start` makes `/var/vcap/sys/run/hello` and prints
//! the greeting into its log) and from the agent's own files in the VM's root.

use crate::director_world;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use director_world::{
    AgentKind, World, cloud_config, edit_json as edit, hello_deployment, walkdir, write_json,
};
use kubosh_cloud::{Cloud as _, CpiCommand, ExternalCpi, VmCid};
use kubosh_engine::state::{DeploymentState, InstanceRecord};
use kubosh_kube::api::{Instance, ProcessState};
use serde_json::{Value, json};

/// `path` as the VM sees it, resolved on the host under the VM's root `root` (the agent's
/// links are absolute `/var/vcap/...` paths, meaningful only inside the VM).
fn in_vm(root: &Path, path: &str) -> PathBuf {
    let mut at = root.to_path_buf();
    let inside = path.strip_prefix("/var/vcap/").unwrap_or(path);
    for part in inside.split('/').filter(|p| !p.is_empty()) {
        at.push(part);
        for _ in 0..8 {
            let Ok(target) = std::fs::read_link(&at) else {
                break;
            };
            at = match target.strip_prefix("/var/vcap") {
                Ok(rest) => root.join(rest),
                Err(_) if target.is_absolute() => target,
                Err(_) => at.parent().unwrap().join(target),
            };
        }
    }
    at
}

fn deploy(w: &World) -> String {
    deploy_with(w, &[])
}

fn deploy_with(w: &World, args: &[&str]) -> String {
    let mut command = w.command("deploy");
    command.args(args);
    let (ok, stdout, stderr) = w.output(command);
    assert!(ok, "deploy failed:\n{stdout}\n{stderr}\n{}", agent_logs(w));
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some("Succeeded"),
        "{stdout}"
    );
    stdout
}

/// The tail of every VM's agent log, for failure messages.
fn agent_logs(w: &World) -> String {
    let mut out = String::new();
    for vm in std::fs::read_dir(w.cloud().join("vms"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let log = std::fs::read_to_string(vm.path().join("agent.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        out.push_str(&format!("--- {}\n", vm.path().display()));
        for line in tail.into_iter().rev() {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn instances<'a>(state: &'a DeploymentState, group: &str) -> Vec<&'a InstanceRecord> {
    let mut v: Vec<_> = state
        .instances
        .values()
        .filter(|i| i.group == group)
        .collect();
    v.sort_by_key(|i| i.index);
    v
}

fn root_of(w: &World, i: &InstanceRecord) -> PathBuf {
    w.vm_root(&i.vm.as_ref().expect("a VM").cid)
}

/// Everything under the host's `/var/vcap` (nothing a VM does may land there).
fn host_var_vcap() -> Vec<PathBuf> {
    walkdir(Path::new("/var/vcap"))
}

/// How a scenario deploys: `kubosh deploy`, or a `Deployment` applied to a running
/// `kubosh controller`.
enum Driver {
    Cli,
    Controller {
        client: kube::Client,
        namespace: String,
        _controller: crate::controller::ControllerProcess,
    },
}

impl Driver {
    /// A controller for world `w` in a namespace of its own, its inputs applied, started
    /// with `args`.
    async fn controller(w: &World, namespace: &str, args: &[&str]) -> Driver {
        let cp = crate::controller::control_plane().await;
        cp.create_namespace(namespace).await.unwrap();
        let client = cp.client().await.unwrap();
        crate::controller::apply_inputs(&client, namespace, w).await;
        // The world's cloud config as the scenario set it (disk types included).
        let cloud_config = read_json(&w.dir.path().join("cloud-config.yml"));
        crate::controller::apply(
            &client,
            namespace,
            json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "CloudConfig",
                   "metadata": {"name": "default"}, "spec": cloud_config}),
        )
        .await;
        let controller =
            crate::controller::start_replica_with(w, cp, namespace, "real-agent", args);
        Driver::Controller {
            client,
            namespace: namespace.into(),
            _controller: controller,
        }
    }

    fn deployments(&self) -> Option<kube::Api<kubosh_kube::api::Deployment>> {
        match self {
            Driver::Cli => None,
            Driver::Controller {
                client, namespace, ..
            } => Some(kube::Api::namespaced(client.clone(), namespace)),
        }
    }

    /// The deployment's state, wherever it is kept.
    async fn state(&self, w: &World) -> DeploymentState {
        match self {
            Driver::Cli => w.state().await,
            Driver::Controller {
                client, namespace, ..
            } => crate::controller::stored_state(client, namespace, "hello").await,
        }
    }

    /// Deploys `manifest` to the end; the state after.
    async fn apply(&self, w: &World, manifest: &Value) -> DeploymentState {
        match self {
            Driver::Cli => {
                w.write_manifest(manifest);
                deploy(w);
            }
            Driver::Controller {
                client, namespace, ..
            } => {
                let object = crate::controller::deployment_object("hello", manifest.clone());
                let generation =
                    crate::controller::apply_deployment(client, namespace, &object).await;
                let api = self.deployments().unwrap();
                crate::controller::ready_at(&api, "hello", w, generation).await;
            }
        }
        self.state(w).await
    }

    /// Deploys the same manifest again (`kubosh deploy`, or a reconcile request), with
    /// `--recreate` (the `recreate` action) when asked; whether it did nothing.
    async fn again(&self, w: &World, recreate: bool) -> bool {
        match self {
            Driver::Cli => {
                let stdout = deploy_with(w, if recreate { &["--recreate"] } else { &[] });
                stdout.contains("No changes")
            }
            Driver::Controller { .. } => {
                let api = self.deployments().unwrap();
                let (key, value) = if recreate {
                    (
                        "kubosh.io/action",
                        format!("recreate @{}", kubosh_base::ids::uuid_v4()),
                    )
                } else {
                    ("kubosh.io/reconcile-request", kubosh_base::ids::uuid_v4())
                };
                api.patch(
                    "hello",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
                )
                .await
                .unwrap();
                let field = if recreate {
                    "lastHandledAction"
                } else {
                    "lastHandledReconcileRequest"
                };
                let d = crate::controller::wait_for(
                    &api,
                    "hello",
                    std::time::Duration::from_secs(300),
                    w,
                    |d| serde_json::to_value(&d.status).unwrap()[field] == json!(value),
                )
                .await;
                assert!(crate::controller::is_ready(&d), "{:?}", d.status);
                crate::controller::condition(&d, "Ready")
                    .is_some_and(|c| c.message.starts_with("No changes"))
            }
        }
    }

    /// Lets the director hear every agent's heartbeat (bosh-agent beats at start, then every
    /// 30 s), so a deploy with nothing to do needs to ask no agent.
    async fn hear_heartbeats(&self, w: &World) {
        match self {
            Driver::Cli => edit(&w.dir.path().join("director.yml"), |d| {
                d["health"] = json!({"listen_for": 31})
            }),
            // The controller listens all the time.
            Driver::Controller { .. } => {
                tokio::time::sleep(std::time::Duration::from_secs(31)).await
            }
        }
    }

    /// Instance `lost`, whose agent or VM is gone, on a new VM; the state after. The
    /// controller does it unasked, without a spec change, the deployment `Ready` again with
    /// the instance `Running`. `kubosh deploy` fails once, at once, naming it and `--fix`;
    /// `--fix` does it.
    async fn repaired(&self, w: &World, lost: &InstanceRecord) -> DeploymentState {
        let old = lost.vm.as_ref().map(|v| v.cid.clone());
        match self {
            Driver::Cli => {
                // Listening longer than bosh-agent's 30 s between heartbeats: every live agent
                // is heard, and the dead one is proven silent, not asked (45 s timeouts).
                edit(&w.dir.path().join("director.yml"), |d| {
                    d["health"] = json!({"listen_for": 35, "agent_timeout": 35})
                });
                let started = Instant::now();
                let (ok, stdout, stderr) = w.output(w.command("deploy"));
                assert!(!ok, "{stdout}");
                assert!(
                    started.elapsed() < Duration::from_secs(35 + 20),
                    "no get_state timeouts: {:?}",
                    started.elapsed()
                );
                let named = format!("No answer from the agent of {}", lost.display_name());
                assert!(stderr.contains(&named), "{stderr}");
                assert!(stderr.contains("kubosh deploy --fix"), "{stderr}");
                let state = w.state().await;
                assert_eq!(state.instances[&lost.uuid].vm, lost.vm, "nothing changed");
                deploy_with(w, &["--fix"]);
                self.stop_hearing(w);
            }
            Driver::Controller {
                client, namespace, ..
            } => {
                let api = self.deployments().unwrap();
                let generation = api.get("hello").await.unwrap().metadata.generation;
                let instances: kube::Api<Instance> =
                    kube::Api::namespaced(client.clone(), namespace);
                let replaced = |d: &kubosh_kube::api::Deployment| {
                    let listed = futures::executor::block_on(instances.list(&Default::default()));
                    let replaced = listed.unwrap().items.into_iter().any(|i| {
                        i.spec.id == lost.uuid
                            && i.spec.vm_cid.is_some()
                            && i.spec.vm_cid != old
                            && i.status.and_then(|s| s.process_state) == Some(ProcessState::Running)
                    });
                    let all = d.status.as_ref().and_then(|s| s.instances.as_deref()) == Some("2/2");
                    replaced && all && crate::controller::is_ready(d)
                };
                let d = crate::controller::wait_for(
                    &api,
                    "hello",
                    Duration::from_secs(180),
                    w,
                    replaced,
                )
                .await;
                assert_eq!(d.metadata.generation, generation, "no spec change");
            }
        }
        self.state(w).await
    }

    /// Under the controller: the `VMResurrected` Event of instance `now` on its VM says
    /// `why`.
    async fn said_resurrected(&self, now: &InstanceRecord, why: &str) {
        let Driver::Controller {
            client, namespace, ..
        } = self
        else {
            return;
        };
        let cid = &now.vm.as_ref().unwrap().cid;
        let events = crate::controller::events_of(client, namespace).await;
        let notes: Vec<String> = (events.iter())
            .filter(|e| e.reason.as_deref() == Some("VMResurrected"))
            .filter_map(|e| e.note.clone())
            .collect();
        let expected = format!("Resurrected {} on VM {cid}: {why}", now.display_name());
        assert!(notes.contains(&expected), "{expected} in {notes:#?}");
    }

    /// Stops [`Driver::hear_heartbeats`]' listening where it costs time.
    fn stop_hearing(&self, w: &World) {
        if let Driver::Cli = self {
            edit(&w.dir.path().join("director.yml"), |d| {
                d.as_object_mut().unwrap().remove("health");
            });
        }
    }
}

/// The requests every agent handled so far (bosh-agent logs each one), over all VMs.
fn agent_requests(w: &World) -> usize {
    let vms = std::fs::read_dir(w.cloud().join("vms"))
        .into_iter()
        .flatten()
        .flatten();
    vms.map(|vm| {
        let log = std::fs::read_to_string(vm.path().join("agent.log")).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("Received request with action"))
            .count()
    })
    .sum()
}

/// The hello job's rendered configuration on an instance.
fn hello_config(w: &World, i: &InstanceRecord) -> Value {
    let path = in_vm(&root_of(w, i), "/var/vcap/jobs/hello/config/config.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// hello's pre-start ran on the instance (it makes its run directory).
fn pre_start_ran(w: &World, i: &InstanceRecord) -> bool {
    in_vm(&root_of(w, i), "/var/vcap/sys/run/hello").is_dir()
}

fn vm_count(w: &World) -> usize {
    std::fs::read_dir(w.cloud().join("vms")).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.path().join("meta.json").is_file())
            .count()
    })
}

/// A second group of the example job.
fn api_group(port: u16) -> Value {
    json!({
        "name": "api", "instances": 1, "azs": ["z1"], "vm_type": "small",
        "stemcell": "default", "networks": [{"name": "default"}],
        "jobs": [{"name": "hello", "release": "hello", "consumes": {"peers": "nil"},
                  "properties": {"hello": {"port": port, "bind": "instance", "greeting": "Hi"}}},
                 {"name": "smoke-test", "release": "hello",
                  "consumes": {"greeters": {"from": "web_greeter"}}}],
    })
}

/// Fresh deploy (compiling libhello, then hello-server against it), a no-op that asks no
/// agent anything because every heartbeat was heard, a property change, scaling 1 → 3 → 1
/// and a group's removal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agent_is_deployed_left_alone_updated_scaled_and_removed() {
    let w = World::with_agent(31, AgentKind::Bosh);
    deployed_left_alone_updated_scaled_and_removed(&w, &Driver::Cli).await;
}

/// [`the_real_agent_is_deployed_left_alone_updated_scaled_and_removed`] under the
/// controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agent_under_the_controller_is_deployed_left_alone_updated_scaled_and_removed() {
    let w = World::confined(33, AgentKind::Bosh);
    let driver = Driver::controller(&w, "real-agent-scale", &[]).await;
    deployed_left_alone_updated_scaled_and_removed(&w, &driver).await;
}

async fn deployed_left_alone_updated_scaled_and_removed(w: &World, driver: &Driver) {
    let host_before = host_var_vcap();
    let mut manifest = hello_deployment(w.port, "Hello");
    manifest["instance_groups"][0]["instances"] = json!(1);
    let state = driver.apply(w, &manifest).await;
    // Both packages compiled (hello-server against libhello), on the agent.
    let compiled: Vec<&str> = (state.compiled_packages.values())
        .map(|p| p.name.as_str())
        .collect();
    for package in ["libhello", "hello-server"] {
        assert!(compiled.contains(&package), "{compiled:?}");
    }
    let web0 = instances(&state, "web")[0].clone();
    assert!(pre_start_ran(w, &web0), "{}", agent_logs(w));
    assert_eq!(hello_config(w, &web0)["greeting"], "Hello");
    assert_eq!(vm_count(w), 1, "the compilation VMs are gone");

    // No-op: the director hears every agent's heartbeat (bosh-agent beats at start, then
    // every 30 s), so it asks none of them anything and calls no CPI method.
    driver.hear_heartbeats(w).await;
    let (requests, calls) = (agent_requests(w), w.calls());
    assert!(driver.again(w, false).await, "the deploy did nothing");
    assert_eq!(agent_requests(w), requests, "a no-op deploy asked an agent");
    assert_eq!(w.calls(), calls, "a no-op deploy called the cloud");
    driver.stop_hearing(w);

    // A property: the same VM, rendered again, its pre-start run again.
    std::fs::remove_dir_all(in_vm(&root_of(w, &web0), "/var/vcap/sys/run/hello")).unwrap();
    manifest["instance_groups"][0]["jobs"][0]["properties"]["hello"]["greeting"] = json!("Howdy");
    let state = driver.apply(w, &manifest).await;
    let now = instances(&state, "web")[0].clone();
    assert_eq!(now.vm, web0.vm, "a property change keeps the VM");
    assert_eq!(hello_config(w, &now)["greeting"], "Howdy");
    assert!(pre_start_ran(w, &now));

    // 1 → 3, and a second group.
    manifest["instance_groups"][0]["instances"] = json!(3);
    manifest["instance_groups"]
        .as_array_mut()
        .unwrap()
        .push(api_group(w.port));
    let state = driver.apply(w, &manifest).await;
    let web = instances(&state, "web");
    assert_eq!(web.iter().map(|i| i.index).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(web[0].vm, web0.vm);
    for i in &web {
        assert!(pre_start_ran(w, i), "{}", i.name());
        // Every web instance's peers link lists the three.
        let peers = std::fs::read_to_string(in_vm(
            &root_of(w, i),
            "/var/vcap/jobs/hello/config/peers.txt",
        ))
        .unwrap();
        assert_eq!(
            peers.lines().filter(|l| l.contains(":")).count(),
            3,
            "{peers}"
        );
    }
    assert_eq!(instances(&state, "api").len(), 1);
    assert_eq!(vm_count(w), 4);
    if matches!(driver, Driver::Cli) {
        day_two_on_the_real_agent(w);
    }

    // 3 → 1 and the api group removed: their VMs (and agents) are gone.
    manifest["instance_groups"][0]["instances"] = json!(1);
    manifest["instance_groups"]
        .as_array_mut()
        .unwrap()
        .truncate(1);
    let state = driver.apply(w, &manifest).await;
    assert_eq!(state.instances.len(), 1);
    assert_eq!(instances(&state, "web")[0].vm, web0.vm);
    assert_eq!(vm_count(w), 1);
    assert_eq!(
        host_var_vcap(),
        host_before,
        "a VM wrote into the host's /var/vcap"
    );
}

/// `kubosh run-errand`, `kubosh logs` and `kubosh ssh` against the real bosh-agent: its
/// `run_errand` answers the errand's exit code and output (the dummy platform starts no job
/// process, so the smoke test finds no web instance answering and fails, which is what it
/// should say), its `fetch_logs` tarball arrives through the blobstore, and its `ssh` sets a
/// one-time user up and cleans it up.
fn day_two_on_the_real_agent(w: &World) {
    let kubosh = |args: &[&str]| w.output(w.director_command(args));
    let (ok, stdout, stderr) = kubosh(&["run-errand", "hello", "smoke-test"]);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("| Running errand: api/"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("does not answer"), "{stdout}\n{stderr}");
    assert!(
        stderr.starts_with("Errand 'smoke-test' completed with error (exit code 1)"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = kubosh(&[
        "logs",
        "hello",
        "web/0",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    let tarball = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("hello.web.0-"));
    let tarball = tarball.unwrap_or_else(|| panic!("no tarball:\n{stdout}"));
    let bytes = std::fs::read(tarball.path()).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    assert!(
        archive.entries().unwrap().all(|e| e.is_ok()),
        "a readable tarball"
    );
    // `ssh`: the real agent sets the one-time user up and answers its address and host key
    // (the dummy platform's); no sshd runs there, so the session itself fails to connect,
    // and the user is cleaned up after.
    let (ok, stdout, stderr) = kubosh(&["ssh", "hello", "web/0", "-c", "true"]);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(stderr.contains("Running SSH on web/"), "{stdout}\n{stderr}");
    assert!(!stderr.contains("Action Failed"), "{stderr}");
    assert!(!stderr.contains("was not removed"), "{stderr}");
}

/// Reboots a VM through the CPI (`reboot_vm`), as `bosh cck` does.
async fn reboot(w: &World, vm_cid: &str) {
    let cpi = ExternalCpi::new(
        CpiCommand::new(director_world::KUBOSH)
            .args(["cpi", "--config", &w.path("cpi.json")])
            .timeout(std::time::Duration::from_secs(60)),
        "director-uuid",
    );
    cpi.reboot_vm(&VmCid(vm_cid.to_string())).await.unwrap();
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Every leaf of a JSON document with its path (`disks.ephemeral.path`); empty objects and
/// arrays count as leaves.
fn leaves(value: &Value, at: &str, out: &mut Vec<(String, Value)>) {
    let key = |k: &str| {
        if at.is_empty() {
            k.to_string()
        } else {
            format!("{at}.{k}")
        }
    };
    match value {
        Value::Object(m) if !m.is_empty() => m.iter().for_each(|(k, v)| leaves(v, &key(k), out)),
        Value::Array(a) if !a.is_empty() => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| leaves(v, &key(&i.to_string()), out)),
        _ => out.push((at.to_string(), value.clone())),
    }
}

/// A disk on a VM that stays, resized by copy with its data, a named disk on a VM that
/// stays, `--recreate`, both disks removed and the VMs rebooted through the CPI; and the
/// settings the CPI wrote as the agent read them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agent_keeps_disk_data_through_resize_and_recreate_and_reboots_after_removal() {
    let w = World::with_agent(32, AgentKind::Bosh);
    with_disk_types(&w);
    keeps_disk_data_through_resize_and_recreate_and_reboots(&w, &Driver::Cli).await;
}

/// [`the_real_agent_keeps_disk_data_through_resize_and_recreate_and_reboots_after_removal`]
/// under the controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agent_under_the_controller_keeps_disk_data_and_reboots_after_removal() {
    let w = World::confined(34, AgentKind::Bosh);
    with_disk_types(&w);
    // bosh-agent heartbeats at start and then every 30 s (hard-coded in its app.go): an
    // agent timeout under 30 s would find every healthy agent silent between two beats and
    // resurrect it. The test reboots VMs behind the controller's back, so an agent may be
    // silent for up to 30 s plus its boot: the health monitor's 60 s leaves its boot 30 s
    // on a loaded machine (40 s, tried, left 10 s, and a slow boot was resurrected).
    let driver = Driver::controller(&w, "real-agent-disks", &["--agent-timeout", "60s"]).await;
    keeps_disk_data_through_resize_and_recreate_and_reboots(&w, &driver).await;
}

/// The world's cloud config with a disk type `small` (32 MiB), before anything reads it.
fn with_disk_types(w: &World) {
    let mut cc = cloud_config(w.net);
    cc["disk_types"] = json!([{"name": "small", "disk_size": 32, "cloud_properties": {}}]);
    write_json(&w.dir.path().join("cloud-config.yml"), &cc);
}

async fn keeps_disk_data_through_resize_and_recreate_and_reboots(w: &World, driver: &Driver) {
    let mut manifest = hello_deployment(w.port, "Hello");
    manifest["instance_groups"][0]["instances"] = json!(1);
    manifest["instance_groups"]
        .as_array_mut()
        .unwrap()
        .push(api_group(w.port));
    let state = driver.apply(w, &manifest).await;
    let (web0, api0) = (
        instances(&state, "web")[0].clone(),
        instances(&state, "api")[0].clone(),
    );

    // The settings round-trip: the agent re-serialises what it loaded into bosh/settings.json;
    // every key the CPI wrote is in its model, with the same value.
    let vm_dir = w.cloud().join("vms").join(&web0.vm.as_ref().unwrap().cid);
    let (mut written, mut loaded) = (Vec::new(), Vec::new());
    leaves(&read_json(&vm_dir.join("settings.json")), "", &mut written);
    leaves(
        &read_json(&vm_dir.join("root/bosh/settings.json")),
        "",
        &mut loaded,
    );
    // (A network's `cloud_properties` are the CPI's: the Director puts them in the network
    // settings and every agent ignores them.)
    let lost: Vec<_> = (written.iter())
        .filter(|leaf| !loaded.contains(leaf))
        .filter(|(key, _)| !(key.starts_with("networks.") && key.ends_with(".cloud_properties")))
        .collect();
    assert!(
        lost.is_empty(),
        "keys the agent's settings model lost or changed: {lost:#?}"
    );

    // A disk added to a VM that stays: mounted at /var/vcap/store.
    manifest["instance_groups"][0]["persistent_disk"] = json!(64);
    let state = driver.apply(w, &manifest).await;
    let web = instances(&state, "web")[0].clone();
    assert_eq!(web.vm, web0.vm);
    let first_disk = web.disks[0].cid.clone();
    let root = root_of(w, &web);
    let disk_dir = |cid: &str| w.cloud().join("disks").join(cid).join("data");
    assert_eq!(
        std::fs::read_link(root.join("store")).unwrap(),
        disk_dir(&first_disk)
    );
    std::fs::write(root.join("store/marker"), "keep me").unwrap();

    // Resized by copy: the data is on the new disk, the old one is orphaned with it.
    manifest["instance_groups"][0]["persistent_disk"] = json!(128);
    let state = driver.apply(w, &manifest).await;
    let web = instances(&state, "web")[0].clone();
    assert_eq!(web.vm, web0.vm);
    let second_disk = web.disks[0].cid.clone();
    assert_ne!(second_disk, first_disk);
    assert_eq!(
        std::fs::read_link(root.join("store")).unwrap(),
        disk_dir(&second_disk)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("store/marker")).unwrap(),
        "keep me"
    );
    assert!(state.orphaned_disks.contains_key(&first_disk));
    assert_eq!(
        std::fs::read_to_string(disk_dir(&first_disk).join("marker")).unwrap(),
        "keep me"
    );

    // A named disk on a VM that stays: attached and associated, never mounted.
    manifest["instance_groups"][1]["persistent_disks"] = json!([{"name": "data", "type": "small"}]);
    let state = driver.apply(w, &manifest).await;
    let api = instances(&state, "api")[0].clone();
    assert_eq!(api.vm, api0.vm);
    let data = api.disks[0].cid.clone();
    let bosh = root_of(w, &api).join("bosh");
    assert_eq!(
        read_json(&bosh.join("disk_associations.json")),
        json!(["data"])
    );
    assert_eq!(
        read_json(&bosh.join("update_settings.json"))["disk_associations"],
        json!([{"name": "data", "cid": data}])
    );
    let mounts = std::fs::read_to_string(bosh.join("mounts.json")).unwrap_or_default();
    assert!(
        !mounts.contains(&data),
        "a named disk was mounted: {mounts}"
    );

    // --recreate: new VMs, the disks come along, the data too.
    driver.again(w, true).await;
    let state = driver.state(w).await;
    let web = instances(&state, "web")[0].clone();
    let api = instances(&state, "api")[0].clone();
    assert_ne!(web.vm, web0.vm);
    assert_ne!(api.vm, api0.vm);
    assert_eq!(web.disks[0].cid, second_disk);
    let root = root_of(w, &web);
    assert_eq!(
        std::fs::read_to_string(root.join("store/marker")).unwrap(),
        "keep me"
    );
    let bosh = root_of(w, &api).join("bosh");
    assert_eq!(
        read_json(&bosh.join("update_settings.json"))["disk_associations"],
        json!([{"name": "data", "cid": data}])
    );

    // Self-healing: a dead agent's instance, then (controller) a deleted VM's, on new VMs
    // with their disks.
    resurrected_on_their_disks(w, driver, &data).await;

    // Both disks removed, then both VMs rebooted through the CPI: the agents come back
    // (the next deploy asks each for its state and starts its jobs again).
    manifest["instance_groups"][0]
        .as_object_mut()
        .unwrap()
        .remove("persistent_disk");
    manifest["instance_groups"][1]
        .as_object_mut()
        .unwrap()
        .remove("persistent_disks");
    let state = driver.apply(w, &manifest).await;
    assert!(state.instances.values().all(|i| i.disks.is_empty()));
    assert!(state.orphaned_disks.contains_key(&second_disk));
    assert!(state.orphaned_disks.contains_key(&data));
    assert_eq!(
        std::fs::read_to_string(disk_dir(&second_disk).join("marker")).unwrap(),
        "keep me"
    );
    // bosh-agent never forgets the last disk it mounted; at boot it would mount it again
    // and, the disk being gone, never come up. The local cloud's reboot_vm forgets it.
    let web = instances(&state, "web")[0].clone();
    let managed = root_of(w, &web).join("bosh/managed_disk_settings.json");
    assert_eq!(std::fs::read_to_string(&managed).unwrap(), second_disk);
    for i in state.instances.values() {
        reboot(w, &i.vm.as_ref().unwrap().cid).await;
    }
    assert!(!managed.exists());
    driver.again(w, false).await;
    let after = driver.state(w).await;
    for i in after.instances.values() {
        assert_eq!(
            i.vm,
            state.instances[&i.uuid].vm,
            "{} kept its VM",
            i.name()
        );
        let log =
            std::fs::read_to_string(root_of(w, i).parent().unwrap().join("agent.log")).unwrap();
        assert!(!log.contains("Mounting last mounted disk"), "{log}");
    }
}

/// kill -9 of the real bosh-agent of VM `cid` (the process whose command line names the VM's
/// directory; the VM's first process, `kubosh vm run`, then ends too). Not
/// `kubosh_cloud::local::kill_agent`: it kills that first process, and the agent would run
/// on, orphaned, still heartbeating.
fn kill_bosh_agent(w: &World, cid: &str) {
    let vm_dir = format!("{}/", w.cloud().join("vms").join(cid).display());
    let killed = crate::director_world::kill_processes(|args| {
        let agent = args.first().is_some_and(|a| a.ends_with("/bosh-agent"));
        agent && args.iter().any(|a| a.starts_with(&vm_dir))
    });
    assert_eq!(killed.len(), 1, "one bosh-agent runs on {cid}: {killed:?}");
}

/// Whether the local cloud still has VM `cid`.
fn vm_exists(w: &World, cid: &str) -> bool {
    w.cloud().join("vms").join(cid).join("meta.json").is_file()
}

/// Self-healing with the real agent (issue 24). web/0's agent killed (kill -9; its VM stays,
/// as a hung VM's would): under the controller it is given a new VM without being asked;
/// with `kubosh deploy`, a plain deploy fails at once naming it and the fix, and `--fix`
/// does it. Either way: the same identity, addresses and disk, the data on it intact, the
/// old VM gone. Under the controller, api/0's VM then deleted in the cloud behind its back
/// is recreated the same way, its named disk `named` associated again.
async fn resurrected_on_their_disks(w: &World, driver: &Driver, named: &str) {
    let state = driver.state(w).await;
    let web = lost_and_replaced(w, driver, instances(&state, "web")[0], Loss::Agent).await;
    assert_eq!(
        std::fs::read_to_string(root_of(w, &web).join("store/marker")).unwrap(),
        "keep me"
    );
    if let Driver::Cli = driver {
        return;
    }
    let state = driver.state(w).await;
    let api = lost_and_replaced(w, driver, instances(&state, "api")[0], Loss::Vm).await;
    assert_eq!(
        read_json(&root_of(w, &api).join("bosh/update_settings.json"))["disk_associations"],
        json!([{"name": "data", "cid": named}])
    );
}

/// What an instance loses.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// Its agent (kill -9).
    Agent,
    /// Its VM, deleted in the cloud.
    Vm,
}

/// Instance `lost` loses `loss` and gets a new VM ([`Driver::repaired`]) with its
/// identity, addresses and disks; the old VM is gone. Its record after.
async fn lost_and_replaced(
    w: &World,
    driver: &Driver,
    lost: &InstanceRecord,
    loss: Loss,
) -> InstanceRecord {
    let old = lost.vm.as_ref().unwrap().cid.clone();
    let why = match loss {
        Loss::Agent => {
            kill_bosh_agent(w, &old);
            "its agent did not respond"
        }
        Loss::Vm => {
            w.delete_vm_in_cloud(&old);
            "the cloud no longer had its VM"
        }
    };
    let after = driver.repaired(w, lost).await;
    let now = after.instances[&lost.uuid].clone();
    assert_ne!(now.vm.as_ref().unwrap().cid, old, "{loss:?}: a new VM");
    assert_eq!(
        (&now.ips, &now.disks),
        (&lost.ips, &lost.disks),
        "{loss:?}: same addresses, same disks"
    );
    assert!(!vm_exists(w, &old), "{loss:?}: the old VM is gone");
    driver.said_resurrected(&now, why).await;
    now
}
