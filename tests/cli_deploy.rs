//! `kubosh plan` and `kubosh deploy` as separate processes on the local cloud: the director
//! configuration file wires the `kubosh` binary as CPI, a nats-server with mutual TLS (any
//! client certificate the CA signed is accepted; the director signs each agent's), a local
//! blobstore and a state directory. The example release and a stemcell are built with
//! `kubosh release create` and `kubosh stemcell create`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use kubosh::cpi::local::{self, read_calls};
use kubosh::pki::{Ca, Leaf};
use kubosh::state::{DeploymentState, DirStore, StateStore};
use kubosh::testenv::{NatsServer, NatsTls};
use serde_json::{Value, json};

const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");

/// Stops every agent of the local cloud when dropped: a failing test leaves no process behind.
struct StopAgents(PathBuf);

impl Drop for StopAgents {
    fn drop(&mut self) {
        let _ = local::stop_all_agents(&self.0, Duration::from_secs(5));
    }
}

struct World {
    _stop_agents: StopAgents,
    dir: tempfile::TempDir,
    _nats: NatsServer,
    /// The CA private key: must never be printed.
    ca_key: String,
    port: u16,
}

/// A CA whose key we hold as PEM (`pki::Ca` keeps its own).
fn ca_pem() -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "nats-ca");
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run(args: &[&str]) -> Output {
    Command::new(KUBOSH)
        .args(args)
        .output()
        .expect("kubosh runs")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let (ca_cert, ca_key) = ca_pem();
        let ca = Ca::from_pem(&ca_cert, &ca_key).unwrap();
        let server = ca
            .issue(&Leaf::loopback_server("default.nats.bosh-internal"))
            .unwrap();
        let nats = NatsServer::start(
            Some(&NatsTls {
                ca_pem: ca_cert.clone(),
                cert_pem: server.cert_pem,
                key_pem: server.key_pem,
                verify_clients: true,
            }),
            "",
        )
        .expect("nats-server starts");
        let url = format!("nats://127.0.0.1:{}", nats.port());
        let director = ca
            .issue(&Leaf {
                common_name: "default.director.bosh-internal",
                client: true,
                ..Leaf::default()
            })
            .unwrap();
        let cloud = p.join("cloud");
        let blobs = p.join("blobs");
        write_json(
            &p.join("cpi.json"),
            &json!({
                "state_dir": cloud,
                "mbus": url,
                "blobstore": {"provider": "local", "options": {"blobstore_path": blobs}},
                "agent": {
                    "command": ["{kubosh}", "agent", "--bind-base", "{root}", "-b", "/var/vcap", "-C", "{agent_config}"],
                    "env": {"KUBOSH_LOG": "kubosh=info"},
                    "stop_timeout_seconds": 20,
                },
            }),
        );
        std::fs::write(p.join("ca.crt"), &ca_cert).unwrap();
        std::fs::write(p.join("ca.key"), &ca_key).unwrap();
        // Relative paths: against the file's directory (the CPI runs there too).
        write_json(
            &p.join("director.yml"),
            &json!({
                "state_dir": "state",
                "cpi": {
                    "command": [KUBOSH, "cpi", "--config", "cpi.json"],
                    "timeout_seconds": 60,
                    "properties": {},
                },
                "nats": {
                    "url": url,
                    "ca_certificate_path": "ca.crt",
                    "ca_private_key_path": "ca.key",
                    "director_certificate": director.cert_pem,
                    "director_private_key": director.key_pem,
                },
                "blobstore": {"local": {"path": "blobs"}},
                "engine": {"agent_wait_timeout_seconds": 60, "recovery_wait_seconds": 5},
            }),
        );
        write_json(&p.join("cloud-config.yml"), &cloud_config());
        let port = free_port();
        write_json(&p.join("manifest.yml"), &manifest(port));

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
            _stop_agents: StopAgents(cloud),
            dir,
            _nats: nats,
            ca_key,
            port,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// `kubosh <command> -d director.yml manifest.yml ...`; stdout, stderr and success.
    fn kubosh(&self, command: &str, web_greeting: &str) -> (bool, String, String) {
        let out = Command::new(KUBOSH)
            .args([
                command,
                "-d",
                &self.path("director.yml"),
                &self.path("manifest.yml"),
            ])
            .args(["-v", &format!("web_greeting={web_greeting}")])
            .args(["--cloud-config", &self.path("cloud-config.yml")])
            .args(["--release", &self.path("hello.tgz")])
            .args(["--stemcell", &self.path("stemcell.tgz")])
            .output()
            .expect("kubosh runs");
        let (stdout, stderr) = text(&out);
        // The CA key never appears in any output (one of its base64 lines is enough).
        for line in self.ca_key.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!stdout.contains(line), "the CA key leaked on stdout");
            assert!(!stderr.contains(line), "the CA key leaked on stderr");
        }
        (out.status.success(), stdout, stderr)
    }

    fn cloud(&self) -> PathBuf {
        self.dir.path().join("cloud")
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn calls(&self) -> usize {
        read_calls(&self.cloud()).unwrap().len()
    }

    async fn state(&self) -> DeploymentState {
        DirStore::new(self.state_dir().join("deployments/hello"))
            .load()
            .await
            .unwrap()
    }
}

fn write_json(path: &Path, value: &Value) {
    // JSON is YAML.
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}

/// Every file under `dir` with its contents (an absent directory: none).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    out
}

fn cloud_config() -> Value {
    json!({
        "azs": [{"name": "z1"}],
        "vm_types": [{"name": "small", "cloud_properties": {}}],
        "networks": [{
            "name": "default",
            "type": "manual",
            "subnets": [{
                "range": "127.0.1.0/24",
                "gateway": "127.0.1.1",
                "az": "z1",
                "reserved": ["127.0.1.200-127.0.1.254"],
                "static": ["127.0.1.50-127.0.1.60"],
            }],
        }],
        "compilation": {
            "workers": 2, "network": "default", "az": "z1", "vm_type": "small",
            "reuse_compilation_vms": true,
        },
    })
}

fn manifest(port: u16) -> Value {
    json!({
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
                      "properties": {"hello": {"port": port, "bind": "instance", "greeting": "((web_greeting))"}}}],
        }, {
            "name": "api",
            "instances": 1,
            "azs": ["z1"],
            "vm_type": "small",
            "stemcell": "default",
            "networks": [{"name": "default", "static_ips": ["127.0.1.50"]}],
            "jobs": [{"name": "hello", "release": "hello",
                      "consumes": {"peers": "nil"},
                      "properties": {"hello": {"port": port, "bind": "instance", "greeting": "Hi"}}}],
        }],
    })
}

/// `GET /` on `ip:port`, the body.
fn http_get(ip: &str, port: u16) -> Option<String> {
    let addr = SocketAddr::new(ip.parse::<IpAddr>().ok()?, port);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

/// The plan's line of every instance of `group`.
fn plan_lines<'a>(stdout: &'a str, group: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{group}/")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_and_deploy_run_the_engine_as_a_command() {
    let w = World::new();

    // A fresh plan: everything is created, both packages compiled; nothing is written.
    let (ok, stdout, stderr) = w.kubosh("plan", "Hello");
    assert!(ok, "plan failed:\n{stdout}\n{stderr}");
    for group in ["web", "api"] {
        let lines = plan_lines(&stdout, group);
        let expected = if group == "web" { 2 } else { 1 };
        assert_eq!(lines.len(), expected, "{stdout}");
        assert!(lines.iter().all(|l| l.contains(": create")), "{stdout}");
    }
    assert!(stdout.contains("compile libhello/"), "{stdout}");
    assert!(stdout.contains("compile hello-server/"), "{stdout}");
    assert!(snapshot(&w.state_dir()).is_empty(), "plan wrote state");
    assert_eq!(w.calls(), 0, "plan called the cloud");

    // The deploy: compile, create, update; the instances answer.
    let (ok, stdout, stderr) = w.kubosh("deploy", "Hello");
    assert!(ok, "deploy failed:\n{stdout}\n{stderr}");
    for expected in [
        "Using deployment 'hello'",
        "Compiling packages",
        "Creating missing vms",
        "Updating instance",
    ] {
        assert!(stdout.contains(expected), "no '{expected}' in:\n{stdout}");
    }
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some("Succeeded"),
        "{stdout}"
    );
    let state = w.state().await;
    assert_eq!(state.instances.len(), 3);
    for i in state.instances.values() {
        let ip = &i.ips["default"].ip;
        let body = http_get(ip, w.port).unwrap_or_else(|| panic!("{} answers on {ip}", i.group));
        let greeting = if i.group == "web" { "Hello" } else { "Hi" };
        assert!(body.starts_with(greeting), "{}: {body}", i.group);
    }
    let stemcell_image = w
        .state_dir()
        .join("stemcells/bosh-kubosh-local-ubuntu-jammy-1.0/image");
    assert!(stemcell_image.is_file());

    // The same deploy again: nothing changes, no cloud call.
    let calls = w.calls();
    let (ok, stdout, stderr) = w.kubosh("deploy", "Hello");
    assert!(ok, "second deploy failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("No changes"), "{stdout}");
    assert!(!stdout.contains("Updating instance"), "{stdout}");
    assert_eq!(w.calls(), calls, "a no-op deploy called the cloud");

    // A property of one group: the plan updates that group only, and changes nothing.
    let before = snapshot(&w.state_dir());
    let (ok, stdout, stderr) = w.kubosh("plan", "Howdy");
    assert!(ok, "plan failed:\n{stdout}\n{stderr}");
    let web = plan_lines(&stdout, "web");
    assert_eq!(web.len(), 2, "{stdout}");
    assert!(
        web.iter().all(|l| l.contains(": update (configuration)")),
        "{stdout}"
    );
    let api = plan_lines(&stdout, "api");
    assert!(api.len() == 1 && api[0].contains(": none"), "{stdout}");
    assert!(!stdout.contains("compile "), "{stdout}");
    assert_eq!(snapshot(&w.state_dir()), before, "plan changed the state");
    assert_eq!(w.calls(), calls, "plan called the cloud");

    // A broken manifest fails with the error as the last line, exit code 1.
    std::fs::write(w.path("manifest.yml"), "name: hello\ninstance_groups: 7\n").unwrap();
    let (ok, stdout, _) = w.kubosh("deploy", "Hello");
    assert!(!ok);
    let last = stdout.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: manifest: instance_groups: expected a list"),
        "{stdout}"
    );
    // (The deployment lock is taken before validation; the deployment's state is untouched.)
    let deployments = w.state_dir().join("deployments");
    let before: BTreeMap<_, _> = before
        .into_iter()
        .filter(|(p, _)| p.starts_with(&deployments))
        .collect();
    assert_eq!(
        snapshot(&deployments),
        before,
        "an invalid deploy changed the state"
    );
}
