//! A director without a cluster, for tests that run `kubosh deploy` and `kubosh plan` as
//! processes: a local cloud (the `kubosh` binary as CPI, agents in their own mount
//! namespaces), a nats-server with mutual TLS whose CA the director config holds (any
//! certificate the CA signed is accepted; the director signs each agent's), a local
//! blobstore, a state directory, and the example release and a stemcell built with
//! `kubosh release create` and `kubosh stemcell create`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use kubosh_cloud::local::{self, read_calls};
use kubosh_devenv::{DirectorSettings, LocalDirector, NatsPki, NatsServer, NatsTls};
pub use kubosh_devenv::{http_get, http_request};
use kubosh_engine::state::{DeploymentState, DirStore, StateStore};
use serde_json::{Value, json};

pub const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");

/// Stops every agent of the local cloud when dropped: a failing test leaves no process behind.
pub struct StopAgents(pub PathBuf);

impl Drop for StopAgents {
    fn drop(&mut self) {
        let _ = local::stop_all_agents(&self.0, Duration::from_secs(5));
    }
}

/// The files and servers of one director.
pub struct World {
    _stop_agents: StopAgents,
    pub dir: tempfile::TempDir,
    nats: NatsServer,
    /// The server's TLS (not for a confined world's server), to start it again.
    nats_tls: Option<NatsTls>,
    /// The CA private key: must never be printed.
    pub ca_key: String,
    /// The port the example job listens on.
    pub port: u16,
    /// The third octet of this world's loopback subnet.
    pub net: u8,
}

pub fn free_port() -> u16 {
    kubosh_devenv::free_port().unwrap()
}

/// Every file and directory under `dir` (not following symlinks), sorted; an absent
/// directory: none.
pub fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The last lines of every job log under `dir` (files under a `sys/log` directory), for a
/// failure message: why a job did not run is in its own log.
pub fn job_log_tails(dir: &Path) -> String {
    let mut out = String::new();
    for path in walkdir(dir) {
        if !path.is_file() || !path.to_string_lossy().contains("/sys/log/") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(20)..];
        out.push_str(&format!("--- {}\n{}\n", path.display(), tail.join("\n")));
    }
    out
}

pub fn run(args: &[&str]) -> Output {
    Command::new(KUBOSH)
        .args(args)
        .output()
        .expect("kubosh runs")
}

/// SIGKILL to every process of this machine whose command line (its arguments) `matches`;
/// their pids. Tests use it to kill what a command started behind their back.
pub fn kill_processes(matches: impl Fn(&[String]) -> bool) -> Vec<i32> {
    let mut killed = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = (cmdline.split(|b| *b == 0))
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if matches(&args) {
            // SAFETY: kill(2) on a pid just read from /proc; no memory involved.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed.push(pid);
        }
    }
    killed
}

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Which agent the local cloud's VMs run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    /// `kubosh agent --bind-base`: runs the jobs' processes.
    Kubosh,
    /// The real bosh-agent (dummy platform, `-M dummy`: lifecycle scripts only, no job
    /// process) under `kubosh vm run`, built by tools/testbins.sh.
    Bosh,
}

/// The local cloud's agent command for `kind`.
pub fn agent_command(kind: AgentKind) -> Vec<String> {
    match kind {
        AgentKind::Kubosh => kubosh_devenv::kubosh_agent_command(),
        AgentKind::Bosh => {
            let agent = kubosh_devenv::binary("bosh-agent")
                .expect("bosh-agent is built (tools/testbins.sh)");
            let agent = agent.display().to_string();
            [
                "{kubosh}",
                "vm",
                "run",
                "--root",
                "{root}",
                "--dummy-disks",
                "{vm_dir}/dummy-disks.json",
                "--",
                &agent,
                "-b",
                "/var/vcap",
                "-P",
                "dummy",
                "-M",
                "dummy",
                "-C",
                "{agent_config}",
            ]
            .map(String::from)
            .to_vec()
        }
    }
}

impl World {
    /// A director on loopback subnet `127.0.<net>.0/24`, its VMs running kubosh's agent.
    pub fn new(net: u8) -> World {
        World::with_agent(net, AgentKind::Kubosh)
    }

    /// A director on loopback subnet `127.0.<net>.0/24`, its VMs running `agent`.
    pub fn with_agent(net: u8, agent: AgentKind) -> World {
        World::build(net, agent, false)
    }

    /// [`World::with_agent`] with each agent confined to its own subjects on NATS: the
    /// server maps certificates to users (`verify_and_map`) and includes the authorization
    /// file the director keeps (`nats.authorization`), reloaded through its pid file.
    pub fn confined(net: u8, agent: AgentKind) -> World {
        World::build(net, agent, true)
    }

    fn build(net: u8, agent: AgentKind, confined: bool) -> World {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let director = LocalDirector::new(p);
        let pki = NatsPki::generate().unwrap();
        pki.write(p).unwrap();
        let nats_tls = (!confined).then(|| NatsTls {
            ca_pem: pki.ca_cert_pem().to_string(),
            cert_pem: pki.server().cert_pem.clone(),
            key_pem: pki.server().key_pem.clone(),
            verify_clients: true,
        });
        let nats = match &nats_tls {
            None => director.start_confined_nats(free_port(), &pki),
            Some(tls) => NatsServer::start(Some(tls), "").map_err(Into::into),
        }
        .expect("nats-server starts");
        director
            .write_configs(&DirectorSettings {
                kubosh: KUBOSH.into(),
                nats_url: format!("nats://127.0.0.1:{}", nats.port()),
                agent_command: agent_command(agent),
                agent_log: "kubosh=info".into(),
                confined,
                cpi_timeout_seconds: 60,
                agent_wait_timeout_seconds: 60,
                recovery_wait_seconds: 5,
            })
            .unwrap();
        write_json(&p.join("cloud-config.yml"), &cloud_config(net));
        let port = free_port();

        let release = p.join("hello.tgz");
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/releases/hello");
        let out = run(&[
            "release",
            "create",
            examples.to_str().unwrap(),
            "--version",
            "1.0.0",
            "--tarball",
            release.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{:?}", text(&out));
        let out = run(&[
            "stemcell",
            "create",
            "--name",
            "bosh-kubosh-local-ubuntu-jammy",
            "--version",
            "1.0",
            "--os",
            "ubuntu-jammy",
            "--tarball",
            p.join("stemcell.tgz").to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{:?}", text(&out));
        World {
            _stop_agents: StopAgents(director.cloud()),
            ca_key: pki.ca_key_pem().to_string(),
            dir,
            nats,
            nats_tls,
            port,
            net,
        }
    }

    /// A NATS outage: the world's nats-server stops.
    pub fn stop_nats(&mut self) {
        self.nats.stop();
    }

    /// The world's nats-server (not a confined one) started again on its port.
    pub fn start_nats_again(&mut self) {
        let tls = self.nats_tls.as_ref().expect("not a confined world");
        let dir = self.dir.path().join("nats-again");
        self.nats = NatsServer::start_in(&dir, self.nats.port(), Some(tls), "")
            .expect("nats-server starts again");
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// `kubosh <command> -d director.yml manifest.yml --cloud-config ... --release ...
    /// --stemcell ...`, to be completed by the caller.
    pub fn command(&self, command: &str) -> Command {
        let mut c = Command::new(KUBOSH);
        c.args([
            command,
            "-d",
            &self.path("director.yml"),
            &self.path("manifest.yml"),
        ])
        .args(["--cloud-config", &self.path("cloud-config.yml")])
        .args(["--release", &self.path("hello.tgz")])
        .args(["--stemcell", &self.path("stemcell.tgz")]);
        c
    }

    /// `kubosh <args...> -d director.yml`: the director's commands that take no manifest
    /// (`instances`, `logs`, `run-errand`, `tasks`, `delete-deployment`, ...).
    pub fn director_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(KUBOSH);
        c.args(args).args(["-d", &self.path("director.yml")]);
        c
    }

    /// Runs a command built by [`World::command`]: success, stdout, stderr. The CA key never
    /// appears in any output.
    pub fn output(&self, mut command: Command) -> (bool, String, String) {
        let out = command.output().expect("kubosh runs");
        let (stdout, stderr) = text(&out);
        // One of its base64 lines is enough.
        for line in self.ca_key.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!stdout.contains(line), "the CA key leaked on stdout");
            assert!(!stderr.contains(line), "the CA key leaked on stderr");
        }
        (out.status.success(), stdout, stderr)
    }

    pub fn write_manifest(&self, manifest: &Value) {
        write_json(&self.dir.path().join("manifest.yml"), manifest);
    }

    pub fn cloud(&self) -> PathBuf {
        self.dir.path().join("cloud")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn calls(&self) -> usize {
        read_calls(&self.cloud()).unwrap().len()
    }

    pub async fn state(&self) -> DeploymentState {
        DirStore::new(self.state_dir().join("deployments/hello"))
            .load()
            .await
            .unwrap()
    }

    /// Deletes VM `cid` with the local cloud's CPI, as someone with cloud access would,
    /// behind the director's back.
    pub fn delete_vm_in_cloud(&self, cid: &str) {
        use std::io::Write;
        let request = serde_json::json!({"method": "delete_vm", "arguments": [cid],
                             "context": {"director_uuid": "someone-else"}, "api_version": 2});
        let mut child = Command::new(KUBOSH)
            .args(["cpi", "--config", "cpi.json"])
            .current_dir(self.dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        (child.stdin.take().unwrap())
            .write_all(request.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(answer["error"].is_null(), "{answer}");
    }

    /// The last 60 lines of the controllers' log (`controller.log`), for a failure message.
    pub fn controller_log_tail(&self) -> String {
        let log =
            std::fs::read_to_string(self.dir.path().join("controller.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// The host path of a VM's `/var/vcap`.
    pub fn vm_root(&self, vm_cid: &str) -> PathBuf {
        self.cloud().join("vms").join(vm_cid).join("root")
    }
}

/// Changes a JSON (or JSON-as-YAML) file in place.
pub fn edit_json(path: &Path, change: impl FnOnce(&mut Value)) {
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    change(&mut value);
    write_json(path, &value);
}

pub fn write_json(path: &Path, value: &Value) {
    // JSON is YAML.
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}

/// The cloud config: one AZ, a manual loopback network `127.0.<net>.0/24`.
/// A deployment `hello` of two `web` instances of the example release's job on port
/// `port`, each greeting with `greeting`, consuming their own peers.
pub fn hello_deployment(port: u16, greeting: &str) -> Value {
    serde_json::json!({
        "name": "hello",
        "releases": [{"name": "hello", "version": "1.0.0"}],
        "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
        "update": {
            "canaries": 1, "max_in_flight": 2,
            "canary_watch_time": "500-30000", "update_watch_time": "500-30000",
        },
        "instance_groups": [{
            "name": "web",
            "instances": 2,
            "azs": ["z1"],
            "vm_type": "small",
            "stemcell": "default",
            "networks": [{"name": "default"}],
            "jobs": [{"name": "hello", "release": "hello",
                      "provides": {"greeter": {"as": "web_greeter"}},
                      "consumes": {"peers": {"from": "web_greeter"}},
                      "properties": {"hello": {"port": port, "bind": "instance", "greeting": greeting}}}],
        }],
    })
}

pub fn cloud_config(net: u8) -> Value {
    json!({
        "azs": [{"name": "z1"}],
        "vm_types": [{"name": "small", "cloud_properties": {}}],
        "networks": [{
            "name": "default",
            "type": "manual",
            "subnets": [{
                "range": format!("127.0.{net}.0/24"),
                "gateway": format!("127.0.{net}.1"),
                "az": "z1",
                "reserved": [format!("127.0.{net}.200-127.0.{net}.254")],
                "static": [format!("127.0.{net}.50-127.0.{net}.60")],
            }],
        }],
        "compilation": {
            "workers": 2, "network": "default", "az": "z1", "vm_type": "small",
            "reuse_compilation_vms": true,
        },
    })
}
