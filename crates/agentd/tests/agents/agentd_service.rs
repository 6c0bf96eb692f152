//! The agent's side of the contract: a real [`Agent`] (real directories, files and processes)
//! driven through `dispatch` with requests written as the Director sends them, and every
//! reply compared as the exact JSON the agent publishes (`bosh-protocols.md` §2.1–§2.7,
//! bosh-agent `agent/action/*.go`).

use crate::agentd_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentd_common::{tgz, unique_secs};
use kubosh_agentd::layout::Layout;
use kubosh_agentd::service::{Agent, AgentOptions, Notice};
use kubosh_agentd::settings::Settings;
use kubosh_agentd::supervisor::SupervisorConfig;
use kubosh_base::digest::{sha1_hex, sha256_hex};
use kubosh_transport::agent::protocol::Request;
use serde_json::{Value, json};

const AGENT_ID: &str = "agent-contract-1";
const VM_CID: &str = "vm-cid-1";

/// One VM: its `/var/vcap`, the director's shared blobstore and the agent.
struct Vm {
    dir: tempfile::TempDir,
    layout: Layout,
    agent: Agent,
}

impl Vm {
    async fn new() -> Vm {
        let dir = tempfile::tempdir().unwrap();
        let settings = json!({
            "agent_id": AGENT_ID,
            "vm": {"name": VM_CID},
            "mbus": "nats://127.0.0.1:4222",
            "blobstore": {"provider": "local", "options": {"blobstore_path": dir.path().join("blobstore")}},
            "networks": {"default": {"type": "manual", "ip": "10.0.0.5", "netmask": "255.255.255.0", "gateway": "10.0.0.1"}},
            "disks": {"system": "/dev/sda", "ephemeral": null, "persistent": {}},
            "env": {"bosh": {"mbus": {"cert": {"ca": "", "certificate": "", "private_key": ""}}}},
        });
        let settings =
            Settings::from_slice(settings.to_string().as_bytes(), Path::new("settings.json"))
                .unwrap();
        let layout = Layout::new(dir.path().join("vcap"));
        let mut options = AgentOptions::new(layout.clone(), settings);
        options.supervisor = SupervisorConfig {
            tick: Duration::from_millis(100),
            stop_timeout: Duration::from_secs(5),
            kill_grace: Duration::from_secs(1),
            ..SupervisorConfig::new(layout.clone())
        };
        options.drain_second = Duration::from_millis(10);
        let agent = Agent::new(options).await.expect("agent starts");
        Vm { dir, layout, agent }
    }

    fn root(&self) -> &Path {
        self.layout.base()
    }

    fn blobstore(&self) -> PathBuf {
        self.dir.path().join("blobstore")
    }

    /// Stores `bytes` in the shared blobstore, as the director does.
    fn put_blob(&self, bytes: &[u8]) -> String {
        std::fs::create_dir_all(self.blobstore()).unwrap();
        let id = kubosh_base::ids::uuid_v4();
        std::fs::write(self.blobstore().join(&id), bytes).unwrap();
        id
    }

    /// Dispatches a raw request and returns the reply as the agent publishes it.
    async fn raw(&self, request: Value) -> Value {
        let request: Request = serde_json::from_value(request).expect("a request");
        self.agent.dispatch(request).await.to_json()
    }

    /// A request as the Director sends it over NATS (protocol 3).
    async fn send(&self, method: &str, arguments: Value) -> Value {
        self.raw(json!({
            "protocol": 3,
            "method": method,
            "arguments": arguments,
            "reply_to": format!("director.director-uuid.{AGENT_ID}.{}", kubosh_base::ids::uuid_v4()),
        }))
        .await
    }

    /// The task id of an asynchronous action's first reply, checking its exact shape.
    fn task_id(started: &Value) -> String {
        let id = started["value"]["agent_task_id"]
            .as_str()
            .unwrap_or_else(|| panic!("not a task handle: {started}"))
            .to_string();
        assert_eq!(
            started,
            &json!({"value": {"agent_task_id": id, "state": "running"}})
        );
        id
    }

    /// Polls `get_task` through `dispatch` until the task is no longer running; its reply.
    async fn wait_task(&self, id: &str) -> Value {
        for _ in 0..1200 {
            let reply = self.send("get_task", json!([id])).await;
            if reply != json!({"value": {"agent_task_id": id, "state": "running"}}) {
                return reply;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("task {id} still running after 30 s");
    }

    /// Sends an asynchronous action and waits for its end.
    async fn run(&self, method: &str, arguments: Value) -> Value {
        let started = self.send(method, arguments).await;
        let id = Vm::task_id(&started);
        self.wait_task(&id).await
    }

    /// `Action Failed get_task: Task <id> result: <cause>` for a failing async action.
    async fn run_failing(&self, method: &str, arguments: Value) -> String {
        let started = self.send(method, arguments).await;
        let id = Vm::task_id(&started);
        let reply = self.wait_task(&id).await;
        let message = reply["exception"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} did not fail: {reply}"))
            .to_string();
        assert_eq!(reply, json!({"exception": {"message": message}}));
        let prefix = format!("Action Failed get_task: Task {id} result: ");
        message
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("{message:?} does not start with {prefix:?}"))
            .to_string()
    }

    fn read(&self, path: impl AsRef<Path>) -> String {
        std::fs::read_to_string(self.root().join(path)).unwrap()
    }
}

fn exception(message: &str) -> Value {
    json!({"exception": {"message": message}})
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

/// The `GetStateV1ApplySpec` of an agent that was never applied: Go's zero values
/// (`get_state.go` fills nil `networks`, `resource_pool`, `packages` with `{}`).
fn fresh_state() -> Value {
    json!({
        "properties": {"logging": {"max_log_file_size": ""}},
        "job": {"name": null, "release": "", "template": "", "version": "", "templates": null},
        "packages": {},
        "configuration_hash": "",
        "networks": {},
        "resource_pool": {},
        "deployment": "",
        "name": "",
        "index": null,
        "id": "",
        "az": "",
        "persistent_disk": 0,
        "rendered_templates_archive": null,
        "agent_id": AGENT_ID,
        "job_state": "running",
        "vm": {"name": VM_CID},
    })
}

fn networks() -> Value {
    json!({"default": {
        "type": "manual", "ip": "10.0.0.5", "netmask": "255.255.255.0", "gateway": "10.0.0.1",
        "dns": ["10.0.0.2"], "default": ["dns", "gateway"], "cloud_properties": {},
    }})
}

#[tokio::test]
async fn ping_info_unknown_methods_and_argument_errors() {
    let vm = Vm::new().await;
    assert_eq!(vm.send("ping", json!([])).await, json!({"value": "pong"}));
    assert_eq!(
        vm.send("info", json!([])).await,
        json!({"value": {"api_version": 1}})
    );
    // Over HTTPS there is no protocol and the reply_to is the director id.
    assert_eq!(
        vm.raw(json!({"method": "ping", "arguments": [], "reply_to": "director-id"}))
            .await,
        json!({"value": "pong"})
    );
    assert_eq!(
        vm.send("frobnicate", json!([])).await,
        exception("unknown message frobnicate")
    );
    // Actions kubosh does not implement answer as an old agent would.
    assert_eq!(
        vm.send("bundle_logs", json!([{}])).await,
        exception("unknown message bundle_logs")
    );
    // Synchronous: the runner's words, wrapped by the dispatcher.
    assert_eq!(
        vm.send("get_task", json!([])).await,
        exception(
            "Action Failed get_task: Extracting method arguments from payload: Not enough arguments, expected 1, got 0"
        )
    );
    assert_eq!(
        vm.send("sync_dns", json!(["blob", "sha256:00"])).await,
        exception(
            "Action Failed sync_dns: Extracting method arguments from payload: Not enough arguments, expected 3, got 2"
        )
    );
    assert_eq!(
        vm.send("delete_arp_entries", json!([])).await,
        exception(
            "Action Failed delete_arp_entries: Extracting method arguments from payload: Not enough arguments, expected 1, got 0"
        )
    );
    // Asynchronous: the task fails with them.
    assert_eq!(
        vm.run_failing("add_persistent_disk", json!(["disk-1"]))
            .await,
        "Extracting method arguments from payload: Not enough arguments, expected 2, got 1"
    );
    assert_eq!(
        vm.run_failing("mount_disk", json!([])).await,
        "Extracting method arguments from payload: Not enough arguments, expected 1, got 0"
    );
    assert_eq!(
        vm.send("delete_arp_entries", json!([{"ips": ["10.0.0.7"]}]))
            .await,
        json!({"value": {}})
    );
    assert_eq!(vm.send("shutdown", json!([])).await, json!({"value": ""}));
}

#[tokio::test]
async fn get_state_of_a_fresh_agent_has_go_zero_values() {
    let vm = Vm::new().await;
    let state = vm.send("get_state", json!([])).await;
    assert_eq!(state, json!({"value": fresh_state()}));

    let full = vm.send("get_state", json!(["full"])).await;
    let vitals = full["value"]["vitals"].clone();
    let mut expected = fresh_state();
    expected["vitals"] = vitals.clone();
    assert_eq!(full, json!({"value": expected}));
    // Vitals as `platform/vitals/vitals.go` marshals them (strings, load as 3 strings).
    assert_eq!(
        keys(&vitals),
        ["cpu", "disk", "load", "mem", "swap", "uptime"]
    );
    assert_eq!(keys(&vitals["cpu"]), ["sys", "user", "wait"]);
    assert_eq!(keys(&vitals["mem"]), ["kb", "percent"]);
    assert!(vitals["mem"]["kb"].is_string(), "{vitals}");
    assert_eq!(vitals["load"].as_array().unwrap().len(), 3);
    assert!(vitals["load"][0].is_string(), "{vitals}");
    assert!(vitals["uptime"]["secs"].is_u64(), "{vitals}");
    assert_eq!(keys(&vitals["disk"]), ["ephemeral", "system"]);
    assert_eq!(
        keys(&vitals["disk"]["system"]),
        ["inode_percent", "percent"]
    );
    // Any other filter is not "full".
    assert_eq!(
        vm.send("get_state", json!(["other"])).await,
        json!({"value": fresh_state()})
    );
}

#[tokio::test]
async fn apply_without_configuration_hash_only_records_the_spec() {
    let vm = Vm::new().await;
    // The director's first apply on a new VM: networks only, no jobs.
    let spec = json!({
        "deployment": "dep1",
        "name": "web",
        "index": 0,
        "id": "b5c1c1a0-0000-4000-8000-000000000001",
        "az": "z1",
        "job": {"name": "web", "templates": []},
        "packages": {},
        "networks": networks(),
        "dns_domain_name": "bosh",
        "configuration_hash": "",
        "template_hashes": {},
        "persistent_disk": 0,
        "properties": {"logging": {"max_log_file_size": "10M"}, "other": {"x": 1}},
    });
    assert_eq!(
        vm.run("apply", json!([spec])).await,
        json!({"value": "applied"})
    );
    for (file, text) in [
        ("id", "b5c1c1a0-0000-4000-8000-000000000001"),
        ("az", "z1"),
        ("name", "web"),
        ("deployment", "dep1"),
    ] {
        assert_eq!(vm.read(format!("instance/{file}")), text, "instance/{file}");
    }
    // Nothing installed.
    assert!(
        std::fs::read_dir(vm.layout.jobs_dir())
            .map(|d| d.count() == 0)
            .unwrap_or(true)
    );

    let expected = json!({
        "properties": {"logging": {"max_log_file_size": "10M"}},
        "job": {"name": "web", "release": "", "template": "", "version": "", "templates": []},
        "packages": {},
        "configuration_hash": "",
        "networks": networks(),
        "resource_pool": {},
        "deployment": "dep1",
        "name": "web",
        "index": 0,
        "id": "b5c1c1a0-0000-4000-8000-000000000001",
        "az": "z1",
        "persistent_disk": 0,
        "rendered_templates_archive": null,
        "agent_id": AGENT_ID,
        "job_state": "running",
        "vm": {"name": VM_CID},
    });
    assert_eq!(
        vm.send("get_state", json!([])).await,
        json!({"value": expected})
    );
    // Persisted as the agent's typed spec (no `dns_domain_name`, `template_hashes`, ...):
    // a new agent on the same tree reports the same.
    let persisted: Value = serde_json::from_str(&vm.read("bosh/spec.json")).unwrap();
    assert_eq!(
        keys(&persisted),
        [
            "az",
            "configuration_hash",
            "deployment",
            "id",
            "index",
            "job",
            "name",
            "networks",
            "packages",
            "persistent_disk",
            "properties",
            "rendered_templates_archive",
            "resource_pool",
        ]
    );
}

/// The job of the lifecycle test: a monit-supervised `sleep`, lifecycle scripts steered by
/// marker files under the VM root, a drain script that can be made slow.
fn job_archive(root: &Path, secs: u64) -> Vec<u8> {
    let r = root.display();
    let monit = format!(
        "check process web\n  with pidfile {r}/sys/run/web/web.pid\n  start program \"{r}/jobs/web/bin/ctl start\"\n  stop program \"{r}/jobs/web/bin/ctl stop\"\n  group vcap\n"
    );
    let ctl = format!(
        "#!/bin/sh\nmkdir -p {r}/sys/run/web {r}/sys/log/web\ncase $1 in\n  start) echo starting >> {r}/sys/log/web/web.log; sleep {secs} >/dev/null 2>&1 & echo $! > {r}/sys/run/web/web.pid ;;\n  stop) kill $(cat {r}/sys/run/web/web.pid) ;;\nesac\n"
    );
    let pre_start = format!(
        "#!/bin/sh\necho pre-start ran\nif [ -f {r}/fail-pre-start ]; then echo broken >&2; exit 3; fi\n"
    );
    let post_deploy = format!("#!/bin/sh\nwhile [ ! -f {r}/go ]; do sleep 0.05; done\n");
    let drain = format!(
        "#!/bin/sh\necho \"$@\" >> {r}/drain-args\nif [ -f {r}/slow-drain ]; then sleep {} ; fi\necho 0\n",
        secs + 1
    );
    tgz(&[
        ("web/monit", &monit, 0o644),
        ("web/bin/ctl", &ctl, 0o755),
        ("web/bin/pre-start", &pre_start, 0o755),
        ("web/bin/post-deploy", &post_deploy, 0o755),
        ("web/bin/drain", &drain, 0o755),
    ])
}

/// A compiled package tarball (what `compile_package` uploads).
fn package_tgz() -> Vec<u8> {
    tgz(&[("bin/tool", "#!/bin/sh\necho tool\n", 0o755)])
}

fn job_spec(vm: &Vm, secs: u64) -> Value {
    let package = package_tgz();
    let package_id = vm.put_blob(&package);
    let archive = job_archive(vm.root(), secs);
    let archive_id = vm.put_blob(&archive);
    json!({
        "deployment": "dep1",
        "name": "web",
        "index": 1,
        "id": "b5c1c1a0-0000-4000-8000-000000000002",
        "az": "z1",
        "job": {
            "name": "web",
            "template": "web",
            "version": "job-fp",
            "templates": [{"name": "web", "version": "job-fp", "sha1": "unused", "blobstore_id": "unused", "logs": []}],
        },
        "packages": {"tool": {"name": "tool", "version": "1.0.1", "sha1": sha1_hex(&package), "blobstore_id": package_id}},
        "networks": networks(),
        "dns_domain_name": "bosh",
        "configuration_hash": "config-hash-1",
        "template_hashes": {"web": "template-hash"},
        "persistent_disk": 1024,
        "rendered_templates_archive": {"blobstore_id": archive_id, "sha1": sha1_hex(&archive)},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_prepared_applied_started_drained_and_stopped() {
    let vm = Vm::new().await;
    let secs = unique_secs();
    let spec = job_spec(&vm, secs);
    let root = vm.root().to_path_buf();

    assert_eq!(
        vm.run("prepare", json!([spec])).await,
        json!({"value": "prepared"})
    );
    assert_eq!(
        vm.run("apply", json!([spec])).await,
        json!({"value": "applied"})
    );
    assert!(vm.layout.job_script("web", "pre-start").is_file());
    assert!(vm.layout.package_dir("tool").join("bin/tool").is_file());

    // get_state: the typed spec (job templates keep name and version; packages gain
    // signed_url and blobstore_headers), jobs loaded but not started.
    let state = vm.send("get_state", json!([])).await;
    let expected = json!({
        "properties": {"logging": {"max_log_file_size": ""}},
        "job": {
            "name": "web", "release": "", "template": "web", "version": "job-fp",
            "templates": [{"name": "web", "version": "job-fp"}],
        },
        "packages": {"tool": {
            "name": "tool", "version": "1.0.1", "sha1": spec["packages"]["tool"]["sha1"],
            "blobstore_id": spec["packages"]["tool"]["blobstore_id"],
            "signed_url": "", "blobstore_headers": null,
        }},
        "configuration_hash": "config-hash-1",
        "networks": networks(),
        "resource_pool": {},
        "deployment": "dep1",
        "name": "web",
        "index": 1,
        "id": "b5c1c1a0-0000-4000-8000-000000000002",
        "az": "z1",
        "persistent_disk": 1024,
        "rendered_templates_archive": spec["rendered_templates_archive"],
        "agent_id": AGENT_ID,
        "job_state": "failing",
        "processes": [{"name": "web", "state": "unknown", "uptime": {}, "mem": {"percent": 0.0}, "cpu": {"total": 0.0}}],
        "vm": {"name": VM_CID},
    });
    assert_eq!(state, json!({"value": expected}));
    // A loaded, never started service is not monitored: `failing`, as monit has it.

    // pre-start: `{}`, output in sys/log/<job>/.
    assert_eq!(
        vm.run("run_script", json!(["pre-start", {"env": {"BOSH_X": "1"}}]))
            .await,
        json!({"value": {}})
    );
    assert_eq!(
        vm.read("sys/log/web/pre-start.stdout.log"),
        "pre-start ran\n"
    );
    // A script the job does not have is skipped.
    assert_eq!(
        vm.run("run_script", json!(["post-stop", {}])).await,
        json!({"value": {}})
    );
    // A failing pre-start fails the task with the agent's summary (kubosh adds the reason).
    std::fs::write(root.join("fail-pre-start"), "").unwrap();
    let cause = vm.run_failing("run_script", json!(["pre-start", {}])).await;
    // note: bosh-agent's message ends after "Failed Jobs: web."; kubosh appends each
    // job's reason (exit status and where its output is).
    assert_eq!(
        cause,
        "1 of 1 pre-start scripts failed. Failed Jobs: web. web pre-start: exited with status 3 \
         (see sys/log/web/pre-start.stderr.log)."
    );
    assert_eq!(vm.read("sys/log/web/pre-start.stderr.log"), "broken\n");
    std::fs::remove_file(root.join("fail-pre-start")).unwrap();

    // start is synchronous.
    assert_eq!(
        vm.send("start", json!([])).await,
        json!({"value": "started"})
    );
    let mut processes = Value::Null;
    for _ in 0..400 {
        let state = vm.send("get_state", json!([])).await;
        if state["value"]["job_state"] == "running" {
            processes = state["value"]["processes"].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let process = &processes[0];
    assert_eq!(processes.as_array().unwrap().len(), 1, "{processes}");
    assert_eq!(process["name"], "web");
    assert_eq!(process["state"], "running");
    assert_eq!(keys(process), ["cpu", "mem", "name", "state", "uptime"]);
    assert_eq!(keys(&process["cpu"]), ["total"]);
    assert!(process["mem"]["percent"].is_number(), "{process}");

    // fetch_logs: a tgz in the blobstore with the job's logs, its sha1 as given.
    std::fs::write(vm.layout.job_log_dir("web").join("extra.log"), "extra\n").unwrap();
    let logs = vm.run("fetch_logs", json!(["job", []])).await;
    let blob_id = logs["value"]["blobstore_id"].as_str().unwrap().to_string();
    assert_eq!(keys(&logs["value"]), ["blobstore_id", "sha1"]);
    let tarball = std::fs::read(vm.blobstore().join(&blob_id)).unwrap();
    assert_eq!(logs["value"]["sha1"], sha1_hex(&tarball));
    let mut names = tar_names(&tarball);
    names.sort();
    assert_eq!(
        names,
        [
            "web/extra.log",
            "web/pre-start.stderr.log",
            "web/pre-start.stdout.log",
            "web/web.log"
        ]
    );
    // Filters narrow it down; types combine with commas; unknown types fail.
    let logs = vm
        .run("fetch_logs", json!(["job,system", ["web/extra.*"]]))
        .await;
    let tarball = std::fs::read(
        vm.blobstore()
            .join(logs["value"]["blobstore_id"].as_str().unwrap()),
    )
    .unwrap();
    assert_eq!(tar_names(&tarball), ["web/extra.log"]);
    assert_eq!(
        vm.run_failing("fetch_logs", json!(["kernel", []])).await,
        "Invalid log type"
    );

    // drain: the agent's refusals, then real drains.
    assert_eq!(
        vm.run_failing("drain", json!(["update"])).await,
        "Drain update requires new spec"
    );
    assert_eq!(
        vm.run_failing("drain", json!(["status"])).await,
        "Unexpected call with drain type 'status'"
    );
    let mut new_spec = spec.clone();
    new_spec["persistent_disk"] = json!(2048);
    assert_eq!(
        vm.run("drain", json!(["update", new_spec])).await,
        json!({"value": 0})
    );
    let mut notices = vm.agent.notices();
    assert_eq!(
        vm.run("drain", json!(["shutdown"])).await,
        json!({"value": 0})
    );
    assert_eq!(notices.try_recv().unwrap(), Notice::Shutdown);
    assert_eq!(
        vm.read("drain-args"),
        "job_changed hash_unchanged\njob_shutdown hash_unchanged\n"
    );

    // cancel_task: drain is cancellable, run_script is not.
    std::fs::write(root.join("slow-drain"), "").unwrap();
    let started = vm.send("drain", json!(["shutdown"])).await;
    let id = Vm::task_id(&started);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        vm.send("get_task", json!([id])).await,
        json!({"value": {"agent_task_id": id, "state": "running"}})
    );
    assert_eq!(
        vm.send("cancel_task", json!([id])).await,
        json!({"value": "canceled"})
    );
    // note: bosh-agent's drain returns 0 at once when cancelled (`drain.go`: `return 0,
    // script.Cancel()`); kubosh waits for the scripts to be terminated (TERM, then KILL)
    // and fails the task.
    // The Director stops polling after cancel_task, so it sees neither.
    assert_eq!(
        vm.wait_task(&id).await,
        exception(&format!(
            "Action Failed get_task: Task {id} result: 1 of 1 drain scripts failed. Failed Jobs: \
             web. web drain: Script was cancelled by user request"
        ))
    );
    // Cancelling a finished task is fine, as in the agent.
    assert_eq!(
        vm.send("cancel_task", json!([id])).await,
        json!({"value": "canceled"})
    );
    std::fs::remove_file(root.join("slow-drain")).unwrap();

    let started = vm.send("run_script", json!(["post-deploy", {}])).await;
    let id = Vm::task_id(&started);
    assert_eq!(
        vm.send("cancel_task", json!([id])).await,
        exception("Action Failed cancel_task: not supported")
    );
    std::fs::write(root.join("go"), "").unwrap();
    assert_eq!(vm.wait_task(&id).await, json!({"value": {}}));
    assert_eq!(
        vm.send("cancel_task", json!(["no-such-task"])).await,
        exception("Action Failed cancel_task: Task with id no-such-task could not be found")
    );
    assert_eq!(
        vm.send("get_task", json!(["no-such-task"])).await,
        exception("Action Failed get_task: Task with id no-such-task could not be found")
    );

    // stop waits for the processes (protocol 3).
    assert_eq!(vm.run("stop", json!([])).await, json!({"value": "stopped"}));
    let state = vm.send("get_state", json!([])).await;
    assert_eq!(state["value"]["job_state"], "stopped", "{state}");
    assert!(
        agentd_common::live_processes(&["sleep", &secs.to_string()]).is_empty(),
        "the job's process is gone"
    );
}

fn tar_names(tgz: &[u8]) -> Vec<String> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tgz));
    archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test]
async fn persistent_disks_are_added_mounted_listed_migrated_and_removed() {
    let vm = Vm::new().await;
    let d1 = vm.dir.path().join("disks/disk-1");
    let d2 = vm.dir.path().join("disks/disk-2");
    assert_eq!(
        vm.run("add_persistent_disk", json!(["disk-1", d1])).await,
        json!({"value": {}})
    );
    assert_eq!(
        vm.run("add_persistent_disk", json!(["disk-2", {"path": d2}]))
            .await,
        json!({"value": {}})
    );
    let hints: Value = serde_json::from_str(&vm.read("bosh/persistent_disk_hints.json")).unwrap();
    assert_eq!(keys(&hints), ["disk-1", "disk-2"]);

    // list_disk: synchronous before protocol 3, a task from 3 on.
    let list_v2 = json!({"protocol": 2, "method": "list_disk", "arguments": [], "reply_to": "r"});
    assert_eq!(vm.raw(list_v2.clone()).await, json!({"value": []}));

    assert_eq!(
        vm.run("mount_disk", json!(["disk-1"])).await,
        json!({"value": {}})
    );
    assert_eq!(vm.raw(list_v2.clone()).await, json!({"value": ["disk-1"]}));
    assert_eq!(
        vm.run("list_disk", json!([])).await,
        json!({"value": ["disk-1"]})
    );
    std::fs::write(vm.layout.store_dir().join("data"), "precious").unwrap();
    let state = vm.send("get_state", json!(["full"])).await;
    assert_eq!(
        keys(&state["value"]["vitals"]["disk"]),
        ["ephemeral", "persistent", "system"]
    );

    // The second disk mounts as the migration target; migrate_disk ignores its arguments.
    assert_eq!(
        vm.run("mount_disk", json!(["disk-2"])).await,
        json!({"value": {}})
    );
    assert_eq!(
        vm.run("list_disk", json!([])).await,
        json!({"value": ["disk-1", "disk-2"]})
    );
    assert_eq!(
        vm.run("migrate_disk", json!(["disk-1", "disk-2"])).await,
        json!({"value": {}})
    );
    assert_eq!(
        vm.run("list_disk", json!([])).await,
        json!({"value": ["disk-2"]})
    );
    assert_eq!(vm.read("store/data"), "precious");
    assert_eq!(
        std::fs::read_to_string(d2.join("data")).unwrap(),
        "precious"
    );

    // note: bosh-agent prints the whole disk settings struct with %+v
    // (`{ID:disk-2 DeviceID: VolumeID: ... Path:/dev/sdc ...}`); kubosh prints `{ID:<cid>}`.
    // The Director ignores the message.
    assert_eq!(
        vm.run("unmount_disk", json!(["disk-2"])).await,
        json!({"value": {"message": "Unmounted partition of {ID:disk-2}"}})
    );
    assert_eq!(
        vm.run("unmount_disk", json!(["disk-2"])).await,
        json!({"value": {"message": "Partition of {ID:disk-2} is not mounted"}})
    );
    assert_eq!(vm.run("list_disk", json!([])).await, json!({"value": []}));

    for cid in ["disk-1", "disk-2"] {
        assert_eq!(
            vm.run("remove_persistent_disk", json!([cid])).await,
            json!({"value": {}})
        );
    }
    let hints: Value = serde_json::from_str(&vm.read("bosh/persistent_disk_hints.json")).unwrap();
    assert_eq!(hints, json!({}));
    // Removing an unknown disk is fine, mounting one is not.
    assert_eq!(
        vm.run("remove_persistent_disk", json!(["disk-9"])).await,
        json!({"value": {}})
    );
    assert_eq!(
        vm.run_failing("mount_disk", json!(["disk-9"])).await,
        "Mounting persistent disk: Persistent disk with volume id 'disk-9' could not be found"
    );
}

#[tokio::test]
async fn sync_dns_writes_records_once_per_version() {
    let vm = Vm::new().await;
    let records = json!({
        "version": 2,
        "records": [["10.0.0.5", "b5c1c1a0.web.default.dep1.bosh"]],
        "record_keys": ["id", "instance_group", "az", "network", "deployment", "ip", "domain"],
        "record_infos": [],
    })
    .to_string();
    let blob = vm.put_blob(records.as_bytes());
    let digest = format!("sha256:{}", sha256_hex(records.as_bytes()));
    assert_eq!(
        vm.send("sync_dns", json!([blob, digest, 2])).await,
        json!({"value": "synced"})
    );
    assert_eq!(vm.read("instance/dns/records.json"), records);

    // Older or equal versions are no-ops: the blob is not even fetched.
    for version in [1, 2] {
        assert_eq!(
            vm.send("sync_dns", json!(["missing-blob", "sha256:00", version]))
                .await,
            json!({"value": "synced"})
        );
    }
    assert_eq!(vm.read("instance/dns/records.json"), records);

    // A newer version whose blob says otherwise.
    assert_eq!(
        vm.send("sync_dns", json!([blob, digest, 3])).await,
        exception(
            "Action Failed sync_dns: version from unpacked dns blob does not match version supplied by director"
        )
    );
    assert_eq!(vm.read("instance/dns/records.json"), records);
}

#[tokio::test]
async fn update_settings_persists_and_restarts_only_for_mbus_or_blobstores() {
    let vm = Vm::new().await;
    let mut notices = vm.agent.notices();
    let update = json!({
        "trusted_certs": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        "disk_associations": [{"name": "data", "cid": "disk-1"}],
    });
    assert_eq!(
        vm.run("update_settings", json!([update])).await,
        json!({"value": "ok"})
    );
    let persisted: Value = serde_json::from_str(&vm.read("bosh/update_settings.json")).unwrap();
    assert_eq!(persisted, update);
    assert!(notices.try_recv().is_err(), "no restart without mbus");

    let cert = json!({"ca": "CA2", "certificate": "CERT2", "private_key": "KEY2"});
    assert_eq!(
        vm.run(
            "update_settings",
            json!([{"trusted_certs": "", "mbus": {"cert": cert}}])
        )
        .await,
        json!({"value": "ok"})
    );
    assert_eq!(notices.try_recv().unwrap(), Notice::Restart);
    let settings: Value = serde_json::from_str(&vm.read("bosh/settings.json")).unwrap();
    assert_eq!(settings["env"]["bosh"]["mbus"]["cert"], cert);
    assert_eq!(vm.agent.settings().env.bosh.mbus.cert.certificate, "CERT2");
}

#[tokio::test]
async fn upload_blob_checks_the_payload_digest() {
    use base64::Engine as _;
    let vm = Vm::new().await;
    let payload = b"rendered templates".as_slice();
    let encoded = base64::engine::general_purpose::STANDARD.encode(payload);
    let sha1 = sha1_hex(payload);
    assert_eq!(
        vm.run(
            "upload_blob",
            json!([{"blob_id": "blob-1", "checksum": sha1, "payload": encoded}])
        )
        .await,
        json!({"value": "blob-1"})
    );
    assert_eq!(
        std::fs::read(vm.layout.sensitive_blobs_dir().join("blob-1")).unwrap(),
        payload
    );

    let wrong = sha1_hex(b"something else");
    let checksum = format!("{wrong};sha256:{}", sha256_hex(b"something else"));
    assert_eq!(
        vm.run_failing(
            "upload_blob",
            json!([{"blob_id": "blob-2", "checksum": checksum, "payload": encoded}])
        )
        .await,
        format!(
            "Payload corrupted. Checksum mismatch. Expected '{checksum}': Expected stream to have digest 'sha256:{}' but was 'sha256:{}'",
            sha256_hex(b"something else"),
            sha256_hex(payload)
        )
    );
    assert!(!vm.layout.sensitive_blobs_dir().join("blob-2").exists());
}

#[tokio::test]
async fn get_task_reports_a_failed_task_and_keeps_finished_ones() {
    let vm = Vm::new().await;
    let started = vm
        .send(
            "upload_blob",
            json!([{"blob_id": "b", "checksum": "sha1:00", "payload": "!"}]),
        )
        .await;
    let id = Vm::task_id(&started);
    let reply = vm.wait_task(&id).await;
    let message = reply["exception"]["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with(&format!("Action Failed get_task: Task {id} result: ")),
        "{message}"
    );
    // Asking again answers the same.
    assert_eq!(vm.send("get_task", json!([id])).await, reply);

    let started = vm.send("list_disk", json!([])).await;
    let id = Vm::task_id(&started);
    assert_eq!(vm.wait_task(&id).await, json!({"value": []}));
    assert_eq!(vm.send("get_task", json!([id])).await, json!({"value": []}));
}
