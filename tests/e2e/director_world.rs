//! A director without a cluster, for tests that run `kubosh deploy` and `kubosh plan` as
//! processes: a local cloud (the `kubosh` binary as CPI, agents in their own mount
//! namespaces), a nats-server with mutual TLS whose CA the director config holds (any
//! certificate the CA signed is accepted; the director signs each agent's), a local
//! blobstore, a state directory, and the example release and a stemcell built with
//! `kubosh release create` and `kubosh stemcell create`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use kubosh_cloud::local::{self, read_calls};
use kubosh_core::pki::{Ca, Leaf};
use kubosh_devenv::{NatsServer, NatsTls};
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
    _nats: NatsServer,
    /// The CA private key: must never be printed.
    pub ca_key: String,
    /// The port the example job listens on.
    pub port: u16,
    /// The third octet of this world's loopback subnet.
    pub net: u8,
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

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn run(args: &[&str]) -> Output {
    Command::new(KUBOSH)
        .args(args)
        .output()
        .expect("kubosh runs")
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
pub fn agent_command(kind: AgentKind) -> Value {
    match kind {
        AgentKind::Kubosh => json!([
            "{kubosh}",
            "agent",
            "--bind-base",
            "{root}",
            "-b",
            "/var/vcap",
            "-C",
            "{agent_config}"
        ]),
        AgentKind::Bosh => {
            let agent = kubosh_devenv::binary("bosh-agent")
                .expect("bosh-agent is built (tools/testbins.sh)");
            json!([
                "{kubosh}",
                "vm",
                "run",
                "--root",
                "{root}",
                "--dummy-disks",
                "{vm_dir}/dummy-disks.json",
                "--",
                agent,
                "-b",
                "/var/vcap",
                "-P",
                "dummy",
                "-M",
                "dummy",
                "-C",
                "{agent_config}"
            ])
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
        let (ca_cert, ca_key) = ca_pem();
        let ca = Ca::from_pem(&ca_cert, &ca_key).unwrap();
        let server = ca
            .issue(&Leaf::loopback_server("default.nats.bosh-internal"))
            .unwrap();
        let director = ca
            .issue(&Leaf {
                common_name: "default.director.bosh-internal",
                client: true,
                ..Leaf::default()
            })
            .unwrap();
        let nats = if confined {
            std::fs::create_dir_all(p.join("nats")).unwrap();
            for (name, text) in [
                ("server.crt", &server.cert_pem),
                ("server.key", &server.key_pem),
                ("ca.crt", &ca_cert),
            ] {
                std::fs::write(p.join("nats").join(name), text).unwrap();
            }
            // What the director's subjects may do, before any agent exists.
            let subject = kubosh_core::pki::subject_dn(&director.cert_pem).unwrap();
            let seed = kubosh_bosh::agent::nats_auth::authorization(
                &subject,
                "CN=default.hm.bosh-internal",
                &[],
            )
            .unwrap();
            write_json(&p.join("nats/authorization.json"), &seed);
            // nats-server resolves `include` against its configuration's directory (its
            // own temporary directory, `$TMPDIR/kubosh-nats-*`), even for absolute paths.
            let up = "../".repeat(std::env::temp_dir().components().count());
            let include = format!(
                "{up}{}",
                p.join("nats/authorization.json")
                    .display()
                    .to_string()
                    .trim_start_matches('/')
            );
            let config = format!(
                "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify_and_map: true\n  timeout: 5\n}}\npid_file: {:?}\ninclude {include:?}\n",
                p.join("nats/server.crt"),
                p.join("nats/server.key"),
                p.join("nats/ca.crt"),
                p.join("nats/nats.pid"),
            );
            NatsServer::start(None, &config)
        } else {
            NatsServer::start(
                Some(&NatsTls {
                    ca_pem: ca_cert.clone(),
                    cert_pem: server.cert_pem,
                    key_pem: server.key_pem,
                    verify_clients: true,
                }),
                "",
            )
        }
        .expect("nats-server starts");
        let url = format!("nats://127.0.0.1:{}", nats.port());
        let cloud = p.join("cloud");
        let blobs = p.join("blobs");
        write_json(
            &p.join("cpi.json"),
            &json!({
                "state_dir": cloud,
                "mbus": url,
                "blobstore": {"provider": "local", "options": {"blobstore_path": blobs}},
                "agent": {
                    "command": agent_command(agent),
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
        if confined {
            edit_json(&p.join("director.yml"), |d| {
                d["nats"]["authorization"] = json!({
                    "file": "nats/authorization.json", "pid_file": "nats/nats.pid",
                });
            });
        }
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
            _stop_agents: StopAgents(cloud),
            dir,
            _nats: nats,
            ca_key,
            port,
            net,
        }
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

/// `GET /` on `ip:port`, the body.
pub fn http_get(ip: &str, port: u16) -> Option<String> {
    http_request(ip, port, "/").map(|(_, body)| body)
}

/// `GET path` on `ip:port`: the status code and the body.
pub fn http_request(ip: &str, port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::new(ip.parse::<IpAddr>().ok()?, port);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}
