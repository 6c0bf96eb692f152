//! The director-side agent client over a real nats-server with mutual TLS: the exact JSON
//! of every method on the wire (captured by a fake agent, a raw async-nats subscriber on
//! `agent.<id>`), task polling, the Director's timeout text, exceptions, the server CN rule,
//! and BOSH's per-agent NATS permissions.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use indexmap::IndexMap;
use kubosh_base::pki::{Ca, CertifiedKey, Leaf};
use kubosh_devenv::{BoshNats, ClientPem, NatsServer, NatsTls};
use kubosh_transport::agent::protocol::{
    ApplySpec, BundleLogsArgs, CompilePackageArgs, CompilePackageWithSignedUrlArgs, DiskHint,
    DrainType, FetchLogsWithSignedUrlArgs, Heartbeat, JobState, PackageSpec, Reply,
    RunScriptOptions, SignedPackageRef, SshCommand, SyncDnsWithSignedUrlArgs, TaskStatus,
    UpdateSettings, UploadBlob,
};
use kubosh_transport::agent::{
    AgentError, ClientOptions, MbusTls, Method, NatsOptions, NatsTransport, heartbeats,
};
use serde_json::{Value, json};

const AGENT: &str = "4149ba0f-38d9-4485-476f-1581be36f290";
const PROBE: &str = "probe";

struct Pki {
    ca: Ca,
    server: CertifiedKey,
}

impl Pki {
    fn new(server_cn: &str) -> Pki {
        let ca = Ca::new("nats-ca").unwrap();
        let server = ca.issue(&Leaf::loopback_server(server_cn)).unwrap();
        Pki { ca, server }
    }

    fn client(&self, cn: &str) -> MbusTls {
        let c = self
            .ca
            .issue(&Leaf {
                common_name: cn,
                client: true,
                ..Leaf::default()
            })
            .unwrap();
        MbusTls::new(self.ca.cert_pem(), c.cert_pem, c.key_pem)
    }

    fn server_tls(&self) -> NatsTls {
        NatsTls {
            ca_pem: self.ca.cert_pem(),
            cert_pem: self.server.cert_pem.clone(),
            key_pem: self.server.key_pem.clone(),
            verify_clients: true,
        }
    }
}

fn fast() -> ClientOptions {
    ClientOptions {
        timeout: Duration::from_secs(5),
        poll_interval: Duration::from_millis(10),
        ..ClientOptions::default()
    }
}

/// A raw async-nats responder on `agent.<id>`: records every payload verbatim and answers
/// with whatever `respond` returns (no reply for `None`).
struct FakeAgent {
    received: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeAgent {
    async fn start(
        nc: async_nats::Client,
        agent_id: &str,
        respond: impl Fn(&Value) -> Option<Reply> + Send + 'static,
    ) -> FakeAgent {
        FakeAgent::start_with(nc, agent_id, true, respond).await
    }

    /// `probe`: make sure the server routes `agent.<id>` to this subscriber before
    /// returning (a flush does not wait for the server). A connection that may not publish
    /// on its own subject cannot probe; then the caller waits with `wait_until_ready`.
    async fn start_with(
        nc: async_nats::Client,
        agent_id: &str,
        probe: bool,
        respond: impl Fn(&Value) -> Option<Reply> + Send + 'static,
    ) -> FakeAgent {
        let subject = format!("agent.{agent_id}");
        let mut sub = nc.subscribe(subject.clone()).await.unwrap();
        nc.flush().await.unwrap();
        if probe {
            nc.publish(subject, PROBE.into()).await.unwrap();
            let first = tokio::time::timeout(Duration::from_secs(10), sub.next())
                .await
                .expect("probe comes back")
                .unwrap();
            assert_eq!(&first.payload[..], PROBE.as_bytes());
        }
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let task = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let text = String::from_utf8_lossy(&msg.payload).into_owned();
                log.lock().unwrap().push(text.clone());
                let Ok(req) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                let reply_to = req["reply_to"].as_str().unwrap_or_default().to_string();
                if let Some(reply) = respond(&req) {
                    nc.publish(reply_to, reply.to_vec().into()).await.unwrap();
                }
            }
        });
        FakeAgent { received, task }
    }

    fn received(&self) -> Vec<String> {
        self.received.lock().unwrap().clone()
    }

    fn methods(&self) -> Vec<String> {
        self.received()
            .iter()
            .map(|t| {
                serde_json::from_str::<Value>(t).unwrap()["method"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }
}

async fn director(server: &NatsServer, pki: &Pki) -> Arc<NatsTransport> {
    let options = NatsOptions::new(server.url(), pki.client("default.director.bosh-internal"));
    Arc::new(
        NatsTransport::connect(&options)
            .await
            .expect("director connects"),
    )
}

async fn raw_client(server: &NatsServer, tls: &MbusTls) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .require_tls(true)
        .tls_client_config(tls.client_config().unwrap())
        .connect(server.url())
        .await
        .unwrap()
}

/// Returns once the server has processed everything `nc` sent before (its subscriptions
/// are routed): a message to itself on a fresh subject comes back.
async fn roundtrip(nc: &async_nats::Client) {
    let subject = format!("probe.{}", kubosh_base::ids::uuid_v4());
    let mut sub = nc.subscribe(subject.clone()).await.unwrap();
    nc.publish(subject, PROBE.into()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("probe comes back");
}

/// The canned agent: sync methods answer at once, async ones with a task that `get_task`
/// reports done with the method's result.
fn canned(req: &Value) -> Option<Reply> {
    let method = req["method"].as_str()?;
    let result = match method {
        "ping" => json!("pong"),
        "info" => json!({"api_version": 1}),
        "get_state" => json!({"job_state": "running", "agent_id": AGENT, "vm": {"name": "vm-1"}}),
        "start" => json!("started"),
        "cancel_task" => json!("canceled"),
        "sync_dns" | "sync_dns_with_signed_url" => json!("synced"),
        "bundle_logs" => json!({"logs_tar_path": "/tmp/l.tgz", "sha512": "s"}),
        "ssh" => json!({"command": "setup", "status": "success", "ip": "10.0.0.5"}),
        "remove_file" => req["arguments"][0].clone(),
        "remove_dynamic_disk" => json!({}),
        "get_task" => {
            let id = req["arguments"][0].as_str()?;
            let method = id.strip_suffix("-task")?;
            return Some(Reply::value(async_result(method)));
        }
        other => {
            return Some(Reply::value(
                json!({"agent_task_id": format!("{other}-task"), "state": "running"}),
            ));
        }
    };
    Some(Reply::value(result))
}

fn async_result(method: &str) -> Value {
    match method {
        "prepare" => json!("prepared"),
        "apply" => json!("applied"),
        "stop" => json!("stopped"),
        "drain" => json!(0),
        "compile_package" => json!({"result": {"blobstore_id": "compiled", "sha1": "csha"}}),
        "compile_package_with_signed_url" => json!({"result": {"sha1": "csha"}}),
        "unmount_disk" => json!({"message": "Unmounted partition of disk-1"}),
        "list_disk" => json!(["disk-1"]),
        "update_settings" => json!("ok"),
        "upload_blob" => json!("blob-1"),
        "fetch_logs" => json!({"blobstore_id": "logs", "sha1": "lsha"}),
        "fetch_logs_with_signed_url" => json!({"sha1": "lsha"}),
        "run_errand" => json!({"stdout": "out", "stderr": "", "exit_code": 0}),
        _ => json!({}),
    }
}

fn spec() -> ApplySpec {
    ApplySpec {
        deployment: Some("dep1".into()),
        index: Some(Some(0)),
        id: Some("b5c1".into()),
        ..ApplySpec::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_on_the_wire() {
    let pki = Pki::new("default.nats.bosh-internal");
    let server = NatsServer::start(Some(&pki.server_tls()), "").unwrap();
    let transport = director(&server, &pki).await;
    let agent_nc = raw_client(
        &server,
        &pki.client(&format!("{AGENT}.agent.bosh-internal")),
    )
    .await;
    let fake = FakeAgent::start(agent_nc, AGENT, canned).await;
    let c = transport.agent(AGENT).with_options(fast());

    // Each call and the exact JSON it must put on the wire (before reply_to).
    let dep = PackageSpec {
        name: "dep".into(),
        version: "1.1".into(),
        sha1: "dsha".into(),
        blobstore_id: "dblob".into(),
        ..PackageSpec::default()
    };
    let env = IndexMap::from([("BOSH_VM_NEXT_STATE".to_string(), "delete".to_string())]);
    let mut expected: Vec<(&str, Value)> = Vec::new();

    assert_eq!(c.ping().await.unwrap(), "pong");
    expected.push(("ping", json!([])));
    assert_eq!(c.info().await.unwrap().api_version, 1);
    expected.push(("info", json!([])));
    assert_eq!(
        c.get_state(false).await.unwrap().job_state,
        JobState::Running
    );
    expected.push(("get_state", json!([])));
    assert_eq!(c.get_state(true).await.unwrap().vm.unwrap().name, "vm-1");
    expected.push(("get_state", json!(["full"])));
    assert_eq!(c.prepare(&spec()).await.unwrap(), "prepared");
    expected.push((
        "prepare",
        json!([{"deployment": "dep1", "index": 0, "id": "b5c1"}]),
    ));
    assert_eq!(c.apply(&spec()).await.unwrap(), "applied");
    expected.push((
        "apply",
        json!([{"deployment": "dep1", "index": 0, "id": "b5c1"}]),
    ));
    assert_eq!(
        c.drain(DrainType::Shutdown, Some(&spec())).await.unwrap(),
        0
    );
    expected.push((
        "drain",
        json!(["shutdown", {"deployment": "dep1", "index": 0, "id": "b5c1"}]),
    ));
    assert_eq!(c.drain(DrainType::Status, None).await.unwrap(), 0);
    expected.push(("drain", json!(["status"])));
    c.stop().await.unwrap();
    expected.push(("stop", json!([])));
    assert_eq!(c.start().await.unwrap(), "started");
    expected.push(("start", json!([])));
    c.run_script("pre-start", &RunScriptOptions::default())
        .await
        .unwrap();
    expected.push(("run_script", json!(["pre-start", {}])));
    c.run_script("pre-stop", &RunScriptOptions { env: Some(env) })
        .await
        .unwrap();
    expected.push((
        "run_script",
        json!(["pre-stop", {"env": {"BOSH_VM_NEXT_STATE": "delete"}}]),
    ));
    let errand = c
        .run_errand(Some("smoke"), std::future::pending())
        .await
        .unwrap();
    assert_eq!(errand.stdout, "out");
    expected.push(("run_errand", json!(["smoke"])));
    let compiled = c
        .compile_package(&CompilePackageArgs {
            blobstore_id: "src".into(),
            sha1: "ssha".into(),
            name: "pkg".into(),
            version: "1.0".into(),
            dependencies: IndexMap::from([("dep".to_string(), dep.clone())]),
        })
        .await
        .unwrap();
    assert_eq!(compiled.result.blobstore_id, "compiled");
    assert_eq!(compiled.result.sha1, "csha");
    expected.push((
        "compile_package",
        json!(["src", "ssha", "pkg", "1.0", {"dep": {"name": "dep", "version": "1.1", "sha1": "dsha", "blobstore_id": "dblob"}}]),
    ));
    let signed = c
        .compile_package_with_signed_url(&CompilePackageWithSignedUrlArgs {
            package_get_signed_url: "https://get".into(),
            upload_signed_url: "https://put".into(),
            digest: "ssha".into(),
            name: "pkg".into(),
            version: "1.0".into(),
            deps: IndexMap::from([(
                "dep".to_string(),
                SignedPackageRef {
                    name: "dep".into(),
                    version: "1.1".into(),
                    sha1: "dsha".into(),
                    blobstore_id: Some("dblob".into()),
                    package_get_signed_url: "https://dep".into(),
                    blobstore_headers: None,
                },
            )]),
            blobstore_headers: None,
        })
        .await
        .unwrap();
    assert_eq!(signed.result.sha1, "csha");
    expected.push((
        "compile_package_with_signed_url",
        json!([{"package_get_signed_url": "https://get", "upload_signed_url": "https://put",
                "digest": "ssha", "name": "pkg", "version": "1.0",
                "deps": {"dep": {"name": "dep", "version": "1.1", "sha1": "dsha", "blobstore_id": "dblob",
                                 "package_get_signed_url": "https://dep"}}}]),
    ));
    c.mount_disk("disk-1").await.unwrap();
    expected.push(("mount_disk", json!(["disk-1"])));
    let unmounted = c.unmount_disk("disk-1").await.unwrap();
    assert_eq!(unmounted.message, "Unmounted partition of disk-1");
    expected.push(("unmount_disk", json!(["disk-1"])));
    c.add_persistent_disk("disk-1", &DiskHint::Path("/dev/sdf".into()))
        .await
        .unwrap();
    expected.push(("add_persistent_disk", json!(["disk-1", "/dev/sdf"])));
    let hint: DiskHint =
        serde_json::from_value(json!({"lun": "0", "host_device_id": "h"})).unwrap();
    c.add_persistent_disk("disk-2", &hint).await.unwrap();
    expected.push((
        "add_persistent_disk",
        json!(["disk-2", {"lun": "0", "host_device_id": "h"}]),
    ));
    c.remove_persistent_disk("disk-1").await.unwrap();
    expected.push(("remove_persistent_disk", json!(["disk-1"])));
    c.add_dynamic_disk("disk-3", &DiskHint::Path("3".into()))
        .await
        .unwrap();
    expected.push(("add_dynamic_disk", json!(["disk-3", "3"])));
    c.remove_dynamic_disk("disk-3").await.unwrap();
    expected.push(("remove_dynamic_disk", json!(["disk-3"])));
    c.migrate_disk("disk-1", "disk-2").await.unwrap();
    expected.push(("migrate_disk", json!(["disk-1", "disk-2"])));
    assert_eq!(c.list_disk().await.unwrap(), ["disk-1"]);
    expected.push(("list_disk", json!([])));
    assert_eq!(
        c.sync_dns("dns-blob", "sha256:abc", 42).await.unwrap(),
        "synced"
    );
    expected.push(("sync_dns", json!(["dns-blob", "sha256:abc", 42])));
    let synced = c
        .sync_dns_with_signed_url(&SyncDnsWithSignedUrlArgs {
            signed_url: "https://dns".into(),
            multi_digest: "sha256:abc".into(),
            version: 43,
            blobstore_headers: None,
        })
        .await
        .unwrap();
    assert_eq!(synced, "synced");
    expected.push((
        "sync_dns_with_signed_url",
        json!([{"signed_url": "https://dns", "multi_digest": "sha256:abc", "version": 43}]),
    ));
    c.update_settings(&UpdateSettings {
        trusted_certs: "CERTS".into(),
        ..UpdateSettings::default()
    })
    .await
    .unwrap();
    expected.push((
        "update_settings",
        json!([{"trusted_certs": "CERTS", "disk_associations": []}]),
    ));
    assert_eq!(
        c.upload_blob(&UploadBlob::new("blob-1", "sha1:x", b"hi"))
            .await
            .unwrap(),
        "blob-1"
    );
    expected.push((
        "upload_blob",
        json!([{"blob_id": "blob-1", "checksum": "sha1:x", "payload": "aGk="}]),
    ));
    let logs = c
        .fetch_logs("job", &["**/*.log".to_string()])
        .await
        .unwrap();
    assert_eq!(logs.blobstore_id, "logs");
    expected.push(("fetch_logs", json!(["job", ["**/*.log"]])));
    let logs = c
        .fetch_logs_with_signed_url(&FetchLogsWithSignedUrlArgs {
            signed_url: "https://logs".into(),
            log_type: "agent".into(),
            filters: vec![],
            blobstore_headers: None,
        })
        .await
        .unwrap();
    assert_eq!(logs.sha1, "lsha");
    expected.push((
        "fetch_logs_with_signed_url",
        json!([{"signed_url": "https://logs", "log_type": "agent", "filters": []}]),
    ));
    let bundle = c
        .bundle_logs(&BundleLogsArgs {
            owning_user: "vcap".into(),
            log_type: "job".into(),
            filters: vec![],
        })
        .await
        .unwrap();
    assert_eq!(bundle.logs_tar_path, "/tmp/l.tgz");
    expected.push((
        "bundle_logs",
        json!([{"owning_user": "vcap", "log_type": "job", "filters": []}]),
    ));
    let ssh = c
        .ssh(&SshCommand::Setup {
            user: "bosh_x".into(),
            public_key: "ssh-ed25519 AAA".into(),
        })
        .await
        .unwrap();
    assert_eq!(ssh.status, "success");
    expected.push((
        "ssh",
        json!(["setup", {"user": "bosh_x", "public_key": "ssh-ed25519 AAA"}]),
    ));
    assert_eq!(c.remove_file("/tmp/l.tgz").await.unwrap(), "/tmp/l.tgz");
    expected.push(("remove_file", json!(["/tmp/l.tgz"])));
    assert_eq!(c.cancel_task("drain-task").await.unwrap(), "canceled");
    expected.push(("cancel_task", json!(["drain-task"])));
    assert_eq!(
        c.get_task("apply-task").await.unwrap(),
        TaskStatus::Done(json!("applied"))
    );
    expected.push(("get_task", json!(["apply-task"])));
    c.delete_arp_entries(&["10.0.0.9".to_string()]).await;
    expected.push(("delete_arp_entries", json!([{"ips": ["10.0.0.9"]}])));
    c.shutdown().await;
    expected.push(("shutdown", json!([])));

    // The fire-and-forget messages arrive without a reply to wait for.
    tokio::time::timeout(Duration::from_secs(5), async {
        while !fake.methods().contains(&"shutdown".to_string()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("shutdown reaches the agent");

    // Every method of the reference is covered.
    let covered: std::collections::HashSet<&str> = expected.iter().map(|(m, _)| *m).collect();
    for m in Method::ALL {
        assert!(covered.contains(m.name()), "{} not exercised", m.name());
    }

    // The exact bytes: protocol 3, the method, the arguments, and a reply_to of the form
    // director.<process uuid>.<agent id>.<request uuid>, in the Director's key order.
    let inbox = transport.inbox().to_string();
    let received = fake.received();
    let mut polls = 0;
    let mut i = 0;
    for raw in &received {
        let v: Value = serde_json::from_str(raw).unwrap();
        let reply_to = v["reply_to"].as_str().unwrap();
        let rest = reply_to
            .strip_prefix(&format!("{inbox}.{AGENT}."))
            .unwrap_or_else(|| panic!("reply_to {reply_to}"));
        assert_eq!(rest.len(), 36, "request uuid in {reply_to}");
        let method = v["method"].as_str().unwrap();
        // get_task polls that the client issued itself are not in `expected`.
        if method == "get_task" && expected[i].0 != "get_task" {
            polls += 1;
            continue;
        }
        let (want_method, want_args) = &expected[i];
        let want = format!(
            r#"{{"protocol":3,"method":"{want_method}","arguments":{},"reply_to":"{reply_to}"}}"#,
            serde_json::to_string(want_args).unwrap()
        );
        assert_eq!(raw, &want);
        i += 1;
    }
    assert_eq!(i, expected.len(), "all calls seen");
    assert!(polls >= 20, "async methods polled get_task ({polls})");
    assert_eq!(transport.pending_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_running_task_is_polled_until_done_or_failed() {
    let pki = Pki::new("default.nats.bosh-internal");
    let server = NatsServer::start(Some(&pki.server_tls()), "").unwrap();
    let transport = director(&server, &pki).await;
    let agent_nc = raw_client(&server, &pki.client("agent")).await;
    let polls = Arc::new(Mutex::new(0u32));
    let seen = polls.clone();
    let _fake = FakeAgent::start(agent_nc, AGENT, move |req| {
        match req["method"].as_str()? {
            "apply" => Some(Reply::value(
                json!({"agent_task_id": "t-apply", "state": "running"}),
            )),
            "compile_package" => Some(Reply::value(
                json!({"agent_task_id": "t-fail", "state": "running"}),
            )),
            "get_task" if req["arguments"][0] == "t-fail" => Some(Reply::exception(
                "Action Failed get_task: Task t-fail result: Compiling package pkg: exit status 2",
            )),
            "get_task" => {
                let mut n = seen.lock().unwrap();
                *n += 1;
                if *n < 5 {
                    Some(Reply::value(
                        json!({"agent_task_id": "t-apply", "state": "running"}),
                    ))
                } else {
                    Some(Reply::value("applied"))
                }
            }
            _ => None,
        }
    })
    .await;
    let options = ClientOptions {
        poll_interval: Duration::from_millis(50),
        ..fast()
    };
    let c = transport.agent(AGENT).with_options(options);
    let started = std::time::Instant::now();
    assert_eq!(c.apply(&spec()).await.unwrap(), "applied");
    assert_eq!(*polls.lock().unwrap(), 5);
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "polled at the interval"
    );

    let err = c
        .compile_package(&CompilePackageArgs::default())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Action Failed get_task: Task t-fail result: Compiling package pkg: exit status 2"
    );
    assert!(matches!(err, AgentError::Remote { ref method, .. } if method == "get_task"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_cancellation_sends_cancel_task() {
    let pki = Pki::new("default.nats.bosh-internal");
    let server = NatsServer::start(Some(&pki.server_tls()), "").unwrap();
    let transport = director(&server, &pki).await;
    let agent_nc = raw_client(&server, &pki.client("agent")).await;
    let fake = FakeAgent::start(agent_nc, AGENT, |req| match req["method"].as_str()? {
        "drain" | "get_task" => Some(Reply::value(
            json!({"agent_task_id": "t-drain", "state": "running"}),
        )),
        "cancel_task" => Some(Reply::value("canceled")),
        _ => None,
    })
    .await;
    let c = transport.agent(AGENT).with_options(fast());
    let err = c
        .drain_cancellable(
            DrainType::Update,
            Some(&spec()),
            tokio::time::sleep(Duration::from_millis(200)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Cancelled { .. }), "{err}");
    let last: Value = serde_json::from_str(fake.received().last().unwrap()).unwrap();
    assert_eq!(last["method"], "cancel_task");
    assert_eq!(last["arguments"], json!(["t-drain"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_use_the_directors_message_and_retry_counts() {
    let pki = Pki::new("default.nats.bosh-internal");
    let server = NatsServer::start(Some(&pki.server_tls()), "").unwrap();
    let transport = director(&server, &pki).await;
    // An agent that listens and never answers.
    let agent_nc = raw_client(&server, &pki.client("agent")).await;
    let silent = FakeAgent::start(agent_nc, AGENT, |_| None).await;
    let options = ClientOptions {
        timeout: Duration::from_millis(300),
        ..fast()
    };
    let c = transport
        .agent(AGENT)
        .with_instance_name("web/b5c1c1a0-0000")
        .with_options(options);
    let err = c.get_state(false).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Timed out sending 'get_state' to instance: 'web/b5c1c1a0-0000', agent-id: '{AGENT}' after 0.3 seconds"
        )
    );
    assert!(err.is_timeout());
    // get_state is tried 1 + 2 times, apply once.
    assert_eq!(silent.methods(), ["get_state"; 3]);
    let err = c.apply(&spec()).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("Timed out sending 'apply' to instance")
    );
    assert_eq!(silent.methods().len(), 4);
    assert_eq!(
        transport.pending_requests(),
        0,
        "timed-out requests are forgotten"
    );

    // The Director's default: whole seconds.
    let c = transport.agent(AGENT);
    assert_eq!(c.options().timeout, Duration::from_secs(45));
    let e = AgentError::Timeout {
        method: "ping".into(),
        instance: "unknown".into(),
        agent_id: AGENT.into(),
        after: c.options().timeout,
    };
    assert_eq!(
        e.to_string(),
        format!(
            "Timed out sending 'ping' to instance: 'unknown', agent-id: '{AGENT}' after 45 seconds"
        )
    );

    // wait_until_ready gives up with the Director's ping text.
    let err = c
        .wait_until_ready("i-0abc", Duration::from_millis(1500))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Timed out pinging VM 'i-0abc' with agent '{AGENT}' after 1.5 seconds")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceptions_and_malformed_replies_are_typed_errors() {
    let pki = Pki::new("default.nats.bosh-internal");
    let server = NatsServer::start(Some(&pki.server_tls()), "").unwrap();
    let transport = director(&server, &pki).await;
    let agent_nc = raw_client(&server, &pki.client("agent")).await;
    let raw = agent_nc.clone();
    let _fake = FakeAgent::start(agent_nc, AGENT, move |req| {
        let method = req["method"].as_str()?;
        match method {
            "start" => Some(Reply::exception(
                "Action Failed start: Starting monitored services: monit exited 1",
            )),
            "run_script" | "info" | "upload_blob" | "update_settings" => {
                Some(Reply::exception(format!("unknown message {method}")))
            }
            "ping" => Some(Reply::value(5)),
            "get_state" => {
                // Not JSON at all.
                let to = req["reply_to"].as_str()?.to_string();
                let raw = raw.clone();
                tokio::spawn(async move { raw.publish(to, "garbage".into()).await });
                None
            }
            _ => None,
        }
    })
    .await;
    let c = transport.agent(AGENT).with_options(fast());

    let err = c.start().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Action Failed start: Starting monitored services: monit exited 1"
    );
    assert!(matches!(&err, AgentError::Remote { method, .. } if method == "start"));

    // Old agents: these treat "unknown message" as success, or as API version 0.
    c.run_script("post-deploy", &RunScriptOptions::default())
        .await
        .unwrap();
    c.update_settings(&UpdateSettings::default()).await.unwrap();
    assert_eq!(c.info().await.unwrap().api_version, 0);
    let err = c
        .upload_blob(&UploadBlob::new("b", "s", b""))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Unsupported action: upload_blob");

    let err = c.ping().await.unwrap_err();
    assert!(matches!(err, AgentError::MalformedReply { .. }), "{err}");
    let err = c.get_state(false).await.unwrap_err();
    assert!(
        matches!(&err, AgentError::MalformedReply { reason, .. } if reason.contains("not JSON")),
        "{err}"
    );

    // Agent ids that are not one subject token never reach NATS.
    let err = transport.agent("a.b").ping().await.unwrap_err();
    assert!(matches!(err, AgentError::Transport { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_are_correlated() {
    let pki = Pki::new("default.nats.bosh-internal");
    let server = NatsServer::start(Some(&pki.server_tls()), "").unwrap();
    let transport = director(&server, &pki).await;
    let mut agents = Vec::new();
    for id in ["agent-1", "agent-2"] {
        let nc = raw_client(&server, &pki.client(id)).await;
        agents.push(
            FakeAgent::start(nc, id, move |req| {
                Some(Reply::value(json!({"job_state": "running", "agent_id": id,
                                         "id": req["arguments"][0].clone()})))
            })
            .await,
        );
    }
    let calls = (0..200).map(|i| {
        let id = if i % 2 == 0 { "agent-1" } else { "agent-2" };
        let c = transport.agent(id).with_options(fast());
        async move {
            // Tag each call through the argument the fake agent echoes back.
            let v = c
                .send(Method::GetState, &[json!(format!("call-{i}"))])
                .await
                .unwrap();
            assert_eq!(v["agent_id"], id);
            assert_eq!(v["id"], format!("call-{i}"));
        }
    });
    futures::future::join_all(calls).await;
    assert_eq!(transport.pending_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_and_the_server_cn_rule() {
    let pki = Pki::new("default.nats.bosh-internal");
    let server = NatsServer::start(Some(&pki.server_tls()), "").unwrap();

    // Without a client certificate the server refuses the connection.
    let no_cert = MbusTls {
        cert_pem: None,
        key_pem: None,
        ..pki.client("x")
    };
    let mut options = NatsOptions::new(server.url(), no_cert);
    options.connect_timeout = Duration::from_secs(2);
    let outcome =
        tokio::time::timeout(Duration::from_secs(15), NatsTransport::connect(&options)).await;
    assert!(
        matches!(outcome, Ok(Err(_))),
        "a client without a certificate must not connect"
    );

    // A certificate from another CA is refused too.
    let other = Pki::new("default.nats.bosh-internal");
    let mut options = NatsOptions::new(server.url(), other.client("intruder"));
    options.tls.ca_pem = pki.ca.cert_pem();
    options.connect_timeout = Duration::from_secs(2);
    let outcome =
        tokio::time::timeout(Duration::from_secs(15), NatsTransport::connect(&options)).await;
    assert!(
        matches!(outcome, Ok(Err(_))),
        "a foreign client certificate must not connect"
    );

    // A server whose certificate CN is not *.nats.bosh-internal is refused, as bosh-agent does.
    let wrong = Pki::new("nats.example.com");
    let wrong_server = NatsServer::start(Some(&wrong.server_tls()), "").unwrap();
    let mut options = NatsOptions::new(wrong_server.url(), wrong.client("director"));
    options.connect_timeout = Duration::from_secs(2);
    let err = tokio::time::timeout(Duration::from_secs(15), NatsTransport::connect(&options))
        .await
        .expect("fails in time")
        .expect_err("CN check");
    assert!(
        err.to_string()
            .contains("CommonName does not match *.nats.bosh-internal"),
        "{err}"
    );
    // ... and it is the CN check alone that refuses it.
    options.tls.verify_server_cn = false;
    NatsTransport::connect(&options)
        .await
        .expect("connects without the CN rule");
}

/// A director started beside its nats-server (the README's walk-through, a restart) waits
/// for it a little: a refused connection is tried again, and connects once it listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_starts_late_is_waited_for() {
    let pki = Pki::new("default.nats.bosh-internal");
    let dir = tempfile::tempdir().unwrap();
    let port = kubosh_devenv::free_port().unwrap();
    let tls = pki.server_tls();
    let starter = std::thread::spawn({
        let dir = dir.path().to_path_buf();
        move || {
            std::thread::sleep(Duration::from_millis(1500));
            NatsServer::start_in(&dir, port, Some(&tls), "").unwrap()
        }
    });
    let url = format!("tls://127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let connected = NatsTransport::connect(&NatsOptions::new(url, pki.client("director"))).await;
    let _server = starter.join().unwrap();
    assert!(connected.is_ok(), "{:?}", connected.err());
    assert!(started.elapsed() >= Duration::from_millis(1500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_arrive_typed() {
    let pki = Pki::new("default.nats.bosh-internal");
    let server = NatsServer::start(Some(&pki.server_tls()), "").unwrap();
    let hm = raw_client(&server, &pki.client("default.hm.bosh-internal")).await;
    let mut all = heartbeats(&hm, None).await.unwrap();
    let mut one = heartbeats(&hm, Some("agent-1")).await.unwrap();
    roundtrip(&hm).await;
    let agent = raw_client(&server, &pki.client("agent-1")).await;
    let hb = Heartbeat {
        deployment: "dep1".into(),
        job: Some("web".into()),
        index: Some(0),
        job_state: JobState::Running,
        node_id: "b5c1".into(),
        number_of_processes: Some(3),
        ..Heartbeat::default()
    };
    agent
        .publish(
            "hm.agent.heartbeat.agent-1",
            serde_json::to_vec(&hb).unwrap().into(),
        )
        .await
        .unwrap();
    agent
        .publish("hm.agent.heartbeat.agent-2", "not json".into())
        .await
        .unwrap();
    agent.flush().await.unwrap();
    let within = Duration::from_secs(5);
    let (id, got) = tokio::time::timeout(within, all.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(id, "agent-1");
    assert_eq!(got, hb);
    let bad = tokio::time::timeout(within, all.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("hm.agent.heartbeat.agent-2")
    );
    let (id, _) = tokio::time::timeout(within, one.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(id, "agent-1");
    assert!(heartbeats(&hm, Some("a.b")).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_permissions_confine_an_agent_to_its_own_subjects() {
    let nats = BoshNats::start(&["agent-a", "agent-b"]).unwrap();
    let tls = |pem: ClientPem| MbusTls::new(pem.ca_pem, pem.cert_pem, pem.key_pem);
    let transport = Arc::new(
        NatsTransport::connect(&NatsOptions::new(nats.url(), tls(nats.director().unwrap())))
            .await
            .expect("director connects"),
    );

    // Agent A, with A's certificate, reports permission errors through the event callback.
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let a = async_nats::ConnectOptions::new()
        .require_tls(true)
        .tls_client_config(tls(nats.agent("agent-a").unwrap()).client_config().unwrap())
        .event_callback(move |event| {
            let tx = events_tx.clone();
            async move {
                let _ = tx.send(event.to_string());
            }
        })
        .connect(nats.url())
        .await
        .expect("agent A connects");

    // A serves its own subject and replies on director.*.agent-a.*: the full round trip works.
    let fake = FakeAgent::start_with(a.clone(), "agent-a", false, canned).await;
    let c = transport.agent("agent-a").with_options(fast());
    // As the Director does after creating a VM: ping until the agent answers.
    c.wait_until_ready("vm-a", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(c.ping().await.unwrap(), "pong");
    assert_eq!(c.apply(&spec()).await.unwrap(), "applied");
    assert!(!fake.received().is_empty());

    // A cannot subscribe to B's subject: the server answers with a permissions violation and
    // delivers nothing.
    let mut spy = a.subscribe("agent.agent-b").await.unwrap();
    a.flush().await.unwrap();
    let violation = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let e = events.recv().await.expect("event");
            if e.contains("Permissions Violation") {
                return e;
            }
        }
    })
    .await
    .expect("a permissions violation is reported");
    assert!(
        violation.contains("Permissions Violation for Subscription to \"agent.agent-b\""),
        "{violation}"
    );
    let b = transport.agent("agent-b").with_options(ClientOptions {
        timeout: Duration::from_millis(300),
        get_state_retries: 0,
        ..fast()
    });
    assert!(b.get_state(false).await.unwrap_err().is_timeout());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), spy.next())
            .await
            .is_err(),
        "A received a message meant for B"
    );

    // Nor can A publish as B (a forged reply or heartbeat).
    a.publish(format!("{}.agent-b.x", transport.inbox()), "{}".into())
        .await
        .unwrap();
    a.publish("hm.agent.heartbeat.agent-b", "{}".into())
        .await
        .unwrap();
    a.flush().await.unwrap();
    let mut publish_violations = 0;
    while publish_violations < 2 {
        let e = tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .expect("violation reported")
            .expect("event");
        if e.contains("Permissions Violation for Publish") {
            publish_violations += 1;
        }
    }

    // And a client certificate that maps to no user is not let in at all.
    let stranger = tls(nats.client("stranger.agent.bosh-internal").unwrap());
    let mut options = NatsOptions::new(nats.url(), stranger);
    options.connect_timeout = Duration::from_secs(2);
    let outcome =
        tokio::time::timeout(Duration::from_secs(15), NatsTransport::connect(&options)).await;
    assert!(
        matches!(outcome, Ok(Err(_))),
        "an unmapped certificate must not connect"
    );
}

/// A NATS outage is the bus's fault and said so, at once: not three `get_state` timeouts
/// blamed on the agent. The error names the server (never credentials) and is no timeout
/// (the engine would ask the cloud whether the VM is gone); once the server is back, the
/// same transport works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_outage_is_reported_as_nats_unreachable_not_as_an_agent_timeout() {
    let pki = Pki::new("default.nats.bosh-internal");
    let dir = tempfile::tempdir().unwrap();
    let port = crate::agentd_common::free_port();
    let mut server = NatsServer::start_in(dir.path(), port, Some(&pki.server_tls()), "").unwrap();
    let url = server.url();
    let transport = director(&server, &pki).await;
    let agent_nc = raw_client(&server, &pki.client("agent")).await;
    let _fake = FakeAgent::start(agent_nc, AGENT, |req| match req["method"].as_str() {
        Some("get_state") => Some(Reply::value(json!({"job_state": "running"}))),
        _ => Some(Reply::value("pong")),
    })
    .await;
    // The Director's timeouts: an outage blamed on the agent would take 3 x 45 s here.
    let c = transport.agent(AGENT).with_instance_name("web/0");
    c.get_state(false).await.unwrap();

    server.stop();
    let started = std::time::Instant::now();
    let err = c.get_state(false).await.unwrap_err();
    let took = started.elapsed();
    assert!(err.is_unreachable() && !err.is_timeout(), "{err:?}");
    assert!(
        took >= kubosh_transport::agent::nats::OUTAGE_GRACE && took < Duration::from_secs(15),
        "{took:?}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("NATS at {url} is unreachable: no connection for ")),
        "{text}"
    );
    assert!(
        text.ends_with(&format!(
            "cannot send 'get_state' to instance: 'web/0', agent-id: '{AGENT}'"
        )),
        "{text}"
    );
    // Down for a while: every request fails at once, waiting for a new VM's agent too.
    let started = std::time::Instant::now();
    assert!(c.ping().await.unwrap_err().is_unreachable());
    let err = c
        .wait_until_ready("vm-1", Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(err.is_unreachable(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(1));

    // Back on the same port: the client reconnects, the requests go through again.
    let _server = NatsServer::start_in(dir.path(), port, Some(&pki.server_tls()), "").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let c = c.with_options(ClientOptions {
        timeout: Duration::from_secs(1),
        ..fast()
    });
    loop {
        match c.get_state(false).await {
            Ok(state) => {
                assert_eq!(String::from(state.job_state), "running");
                break;
            }
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "not back yet");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("NATS is back, the agent is not: {e}"),
        }
    }
}

/// The health monitor in a NATS outage: silence proves nothing while the connection is down
/// (no agent is taken for silent, the monitor says the bus is unreachable and names it), and
/// after the server is back an agent's silence counts from the reconnection, not from its
/// last heartbeat before the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_monitor_tells_a_nats_outage_from_silent_agents() {
    use kubosh_bosh::agent::AgentHealth;
    use kubosh_transport::agent::health::{AGENTS_RECONNECT_WITHIN, HeartbeatMonitor};

    let pki = Pki::new("default.nats.bosh-internal");
    let dir = tempfile::tempdir().unwrap();
    let port = crate::agentd_common::free_port();
    let mut server = NatsServer::start_in(dir.path(), port, Some(&pki.server_tls()), "").unwrap();
    let url = server.url();
    let monitor = HeartbeatMonitor::connect(&NatsOptions::new(
        server.url(),
        pki.client("default.hm.bosh-internal"),
    ))
    .await
    .unwrap();
    let agent = raw_client(&server, &pki.client("agent")).await;
    let beat = json!({"deployment": "d", "job": "web", "index": 0, "job_state": "running",
                      "vitals": {"load": ["0.1", "0.1", "0.1"]}, "node_id": "n",
                      "number_of_processes": 1});
    agent
        .publish(
            format!("hm.agent.heartbeat.{AGENT}"),
            beat.to_string().into(),
        )
        .await
        .unwrap();
    agent.flush().await.unwrap();
    let window = Duration::from_millis(700);
    let heard = eventually(Duration::from_secs(5), || {
        monitor.recent_job_state(AGENT, window).is_some()
    });
    assert!(heard.await, "the heartbeat was not heard");
    assert_eq!(monitor.unreachable(), None);
    // Up, listening, and nothing more from the agent: silent.
    tokio::time::sleep(window + Duration::from_millis(100)).await;
    assert!(monitor.silent_for(AGENT, window));

    server.stop();
    tokio::time::sleep(kubosh_transport::agent::nats::OUTAGE_GRACE + Duration::from_secs(1)).await;
    let outage = monitor.unreachable().expect("the outage is told");
    assert!(
        outage.starts_with(&format!("NATS at {url} is unreachable: no connection for ")),
        "{outage}"
    );
    assert!(
        !monitor.silent_for(AGENT, window),
        "silence during an outage is no agent's"
    );

    // Back on the same port: silence counts from the reconnection.
    let _server = NatsServer::start_in(dir.path(), port, Some(&pki.server_tls()), "").unwrap();
    let back = eventually(Duration::from_secs(15), || monitor.unreachable().is_none());
    assert!(back.await, "the monitor did not reconnect");
    let reconnected = std::time::Instant::now();
    let long = Duration::from_secs(2);
    assert!(
        !monitor.silent_for(AGENT, long),
        "an agent cannot be proven silent for longer than the bus has been back"
    );
    // The agents get their own time to reconnect first.
    let proven = AGENTS_RECONNECT_WITHIN + long + Duration::from_millis(300);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !monitor.silent_for(AGENT, long),
        "the agents' time to reconnect counts for them"
    );
    tokio::time::sleep(proven.saturating_sub(reconnected.elapsed())).await;
    assert!(monitor.silent_for(AGENT, long));
}

/// Polls `check` every 50 ms until it holds or `within` passes; whether it held.
async fn eventually(within: Duration, check: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check()
}
