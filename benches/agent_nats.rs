//! Benchmark: `get_state` round trips over a real nats-server with mutual TLS.
//!
//! `cargo bench --bench agent_nats` starts nats-server (mTLS, CN `default.nats.bosh-internal`),
//! a minimal responder on `agent.<id>` (a raw async-nats subscriber answering a canned
//! `get_state` value), and measures, sequentially and with 1,000 calls in flight:
//! - kubosh: `AgentClient::get_state` (envelope, inbox routing by request uuid, typed decode);
//! - raw: async-nats `Client::request` with the same payload (the floor);
//! - agentd: `AgentClient::get_state` against kubosh's real agent ([`Agent`] served by
//!   `agentd::mbus::nats::serve` in-process, on a fresh VM tree with a networks-only apply
//!   spec), so the agent side's dispatch, state building and reply encoding count too.
//!
//! It prints calls/s, p50 and p99 of each and their ratios to raw. `AGENT_BENCH_N` sets the
//! number of sequential calls (default 2,000); `AGENT_BENCH_ROUNDS` the concurrent rounds
//! (default 5).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kubosh_agentd::layout::Layout;
use kubosh_agentd::mbus::nats::{NatsMbusOptions, serve};
use kubosh_agentd::service::{Agent, AgentOptions};
use kubosh_agentd::settings::Settings;
use kubosh_base::pki::{Ca, Leaf};
use kubosh_devenv::{NatsServer, NatsTls};
use kubosh_transport::agent::protocol::Request;
use kubosh_transport::agent::{MbusTls, NatsOptions, NatsTransport};
use serde_json::{Value, json};

const AGENT: &str = "bench-agent";
const REAL_AGENT: &str = "bench-real-agent";
const CONCURRENCY: usize = 1_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A get_state value of realistic size (~1 KiB).
fn state() -> Value {
    json!({
        "properties": {"logging": {"max_log_file_size": ""}},
        "job": {"name": "web", "release": "", "template": "nginx", "version": "fp1",
                "templates": [{"name": "nginx", "version": "fp1"}, {"name": "agent", "version": "fp2"}]},
        "packages": {"nginx": {"name": "nginx", "version": "1.21.2", "sha1": "sha256:aa",
                               "blobstore_id": "0b8b4c47-2f29-4a3c-8b0e-4c4a7a0e0e11", "signed_url": "", "blobstore_headers": null}},
        "configuration_hash": "9b0bd5bc4c5c4f2e0b5b2c4d8a4f0f6c2d1e3a4b",
        "networks": {"default": {"type": "manual", "ip": "10.0.0.5", "netmask": "255.255.255.0",
                                 "gateway": "10.0.0.1", "default": ["dns", "gateway"], "dns": ["10.0.0.2"]}},
        "resource_pool": {}, "deployment": "dep1", "name": "web", "index": 0,
        "id": "b5c1c1a0-9d3c-4f57-a0a5-0c0a4b3f6d21", "az": "z1", "persistent_disk": 10240,
        "rendered_templates_archive": {"sha1": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4", "blobstore_id": "rta"},
        "agent_id": AGENT, "job_state": "running",
        "processes": [{"name": "nginx", "state": "running", "uptime": {"secs": 123},
                       "mem": {"kb": 100, "percent": 0.1}, "cpu": {"total": 0.5}}],
        "vm": {"name": "vm-b5c1"}
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Stats {
    calls_per_s: f64,
    p50: Duration,
    p99: Duration,
}

fn stats(mut latencies: Vec<Duration>, wall: Duration) -> Stats {
    latencies.sort();
    Stats {
        calls_per_s: latencies.len() as f64 / wall.as_secs_f64(),
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
    }
}

async fn timed<F: std::future::Future<Output = ()>>(f: F) -> Duration {
    let t = Instant::now();
    f.await;
    t.elapsed()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run());
}

async fn run() {
    let n = env_usize("AGENT_BENCH_N", 2_000);
    let rounds = env_usize("AGENT_BENCH_ROUNDS", 5);

    let ca = Ca::new("nats-ca").expect("ca");
    let server_cert = ca
        .issue(&Leaf::loopback_server("default.nats.bosh-internal"))
        .expect("server cert");
    let server = NatsServer::start(
        Some(&NatsTls {
            ca_pem: ca.cert_pem(),
            cert_pem: server_cert.cert_pem,
            key_pem: server_cert.key_pem,
            verify_clients: true,
        }),
        "",
    )
    .expect("nats-server");
    let identity = |cn: &str| {
        let c = ca
            .issue(&Leaf {
                common_name: cn,
                client: true,
                ..Leaf::default()
            })
            .expect("client cert");
        MbusTls::new(ca.cert_pem(), c.cert_pem, c.key_pem)
    };

    // The responder: parses each request as an agent would, answers to the NATS reply
    // subject (raw request) or to the envelope's reply_to (kubosh).
    let agent_tls = identity("bench-agent.agent.bosh-internal");
    let responder = async_nats::ConnectOptions::new()
        .require_tls(true)
        .tls_client_config(agent_tls.client_config().expect("tls"))
        .connect(server.url())
        .await
        .expect("responder connects");
    let mut sub = responder
        .subscribe(format!("agent.{AGENT}"))
        .await
        .expect("subscribe");
    // Make sure the server routes requests to the responder before measuring: a message
    // to itself comes back only after its subscription is in place.
    responder
        .publish(format!("agent.{AGENT}"), "probe".into())
        .await
        .expect("probe");
    let probe = sub.next().await.expect("probe comes back");
    assert_eq!(&probe.payload[..], b"probe");
    let reply = json!({ "value": state() }).to_string().into_bytes();
    let answer = responder.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let Ok(req) = serde_json::from_slice::<Value>(&msg.payload) else {
                continue;
            };
            let to = match (&msg.reply, req["reply_to"].as_str()) {
                (Some(r), _) => r.to_string(),
                (None, Some(r)) => r.to_string(),
                (None, None) => continue,
            };
            let _ = answer.publish(to, reply.clone().into()).await;
        }
    });

    let director = NatsTransport::connect(&NatsOptions::new(
        server.url(),
        identity("default.director.bosh-internal"),
    ))
    .await
    .expect("director connects");
    let director = Arc::new(director);
    let agent = director.agent(AGENT);

    // kubosh's real agent, with its own identity from the same CA.
    let vm_dir = tempfile::tempdir().expect("vm dir");
    let real_cert = ca
        .issue(&Leaf {
            common_name: "bench-real-agent.agent.bosh-internal",
            client: true,
            ..Leaf::default()
        })
        .expect("agent cert");
    let settings = json!({
        "agent_id": REAL_AGENT,
        "vm": {"name": "vm-bench"},
        "mbus": server.url(),
        "networks": state()["networks"],
        "env": {"bosh": {"mbus": {"cert": {
            "ca": ca.cert_pem(), "certificate": real_cert.cert_pem, "private_key": real_cert.key_pem,
        }}}},
    });
    let settings = Settings::from_slice(
        settings.to_string().as_bytes(),
        std::path::Path::new("settings.json"),
    )
    .expect("settings");
    let real = Agent::new(AgentOptions::new(
        Layout::new(vm_dir.path().join("vcap")),
        settings,
    ))
    .await
    .expect("agent");
    apply_networks_only(&real).await;
    let mbus = NatsMbusOptions::from_agent(&real).expect("mbus options");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serve(real, mbus, async {
        let _ = stop_rx.await;
    }));
    let real_agent = director.agent(REAL_AGENT);
    let deadline = Instant::now() + Duration::from_secs(30);
    // Requests sent before the agent subscribed are lost: ping with a short timeout.
    loop {
        let ping = tokio::time::timeout(Duration::from_millis(500), real_agent.ping()).await;
        if matches!(ping, Ok(Ok(_))) {
            break;
        }
        if served.is_finished() {
            panic!("the real agent stopped serving: {:?}", served.await);
        }
        assert!(
            Instant::now() < deadline,
            "the real agent never answered: {ping:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let raw = async_nats::ConnectOptions::new()
        .require_tls(true)
        .tls_client_config(identity("raw.bosh-internal").client_config().expect("tls"))
        .connect(server.url())
        .await
        .expect("raw client connects");
    let raw_payload = serde_json::to_vec(&json!({
        "protocol": 3, "method": "get_state", "arguments": [], "reply_to": ""
    }))
    .expect("payload");

    // Warm up all paths.
    for _ in 0..200 {
        agent.get_state(false).await.expect("get_state");
        real_agent.get_state(false).await.expect("real get_state");
        raw.request(format!("agent.{AGENT}"), raw_payload.clone().into())
            .await
            .expect("raw request");
    }

    // Sequential.
    let mut ours = Vec::with_capacity(n);
    let wall_ours = timed(async {
        for _ in 0..n {
            let t = Instant::now();
            agent.get_state(false).await.expect("get_state");
            ours.push(t.elapsed());
        }
    })
    .await;
    let mut floor = Vec::with_capacity(n);
    let wall_floor = timed(async {
        for _ in 0..n {
            let t = Instant::now();
            raw.request(format!("agent.{AGENT}"), raw_payload.clone().into())
                .await
                .expect("raw request");
            floor.push(t.elapsed());
        }
    })
    .await;
    let mut real = Vec::with_capacity(n);
    let wall_real = timed(async {
        for _ in 0..n {
            let t = Instant::now();
            real_agent.get_state(false).await.expect("real get_state");
            real.push(t.elapsed());
        }
    })
    .await;
    report(
        &format!("sequential ({n} calls)"),
        stats(ours, wall_ours),
        stats(floor, wall_floor),
        stats(real, wall_real),
    );

    // 1,000 in flight.
    let mut ours = Vec::new();
    let mut wall_ours = Duration::ZERO;
    let mut floor = Vec::new();
    let mut wall_floor = Duration::ZERO;
    let mut real = Vec::new();
    let mut wall_real = Duration::ZERO;
    for _ in 0..rounds {
        let t = Instant::now();
        let lat = futures::future::join_all((0..CONCURRENCY).map(|_| {
            let agent = agent.clone();
            async move {
                let t = Instant::now();
                agent.get_state(false).await.expect("get_state");
                t.elapsed()
            }
        }))
        .await;
        wall_ours += t.elapsed();
        ours.extend(lat);
        let t = Instant::now();
        let lat = futures::future::join_all((0..CONCURRENCY).map(|_| {
            let raw = raw.clone();
            let payload = raw_payload.clone();
            async move {
                let t = Instant::now();
                raw.request(format!("agent.{AGENT}"), payload.into())
                    .await
                    .expect("raw request");
                t.elapsed()
            }
        }))
        .await;
        wall_floor += t.elapsed();
        floor.extend(lat);
        let t = Instant::now();
        let lat = futures::future::join_all((0..CONCURRENCY).map(|_| {
            let agent = real_agent.clone();
            async move {
                let t = Instant::now();
                agent.get_state(false).await.expect("real get_state");
                t.elapsed()
            }
        }))
        .await;
        wall_real += t.elapsed();
        real.extend(lat);
    }
    report(
        &format!("{CONCURRENCY} concurrent x {rounds} rounds"),
        stats(ours, wall_ours),
        stats(floor, wall_floor),
        stats(real, wall_real),
    );

    let _ = stop_tx.send(());
    let _ = served.await;
}

/// The director's first apply on a new VM (networks only), so `get_state` answers a
/// realistic spec; through `dispatch`, polling the task.
async fn apply_networks_only(agent: &Agent) {
    let mut spec = state();
    for key in [
        "agent_id",
        "job_state",
        "processes",
        "vm",
        "rendered_templates_archive",
    ] {
        spec.as_object_mut().expect("object").remove(key);
    }
    spec["configuration_hash"] = json!("");
    let request = |method: &str, arguments: Value| -> Request {
        serde_json::from_value(json!({
            "protocol": 3, "method": method, "arguments": arguments, "reply_to": "bench"
        }))
        .expect("request")
    };
    let started = agent
        .dispatch(request("apply", json!([spec])))
        .await
        .to_json();
    let id = started["value"]["agent_task_id"].clone();
    loop {
        let reply = agent
            .dispatch(request("get_task", json!([id])))
            .await
            .to_json();
        if reply["value"]["state"] != "running" {
            assert_eq!(reply, json!({"value": "applied"}));
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn report(title: &str, ours: Stats, floor: Stats, real: Stats) {
    println!("\n{title}");
    println!("  {:<10} {:>12} {:>12} {:>12}", "", "calls/s", "p50", "p99");
    for (name, s) in [("kubosh", &ours), ("raw nats", &floor), ("agentd", &real)] {
        println!(
            "  {:<10} {:>12.0} {:>12.3?} {:>12.3?}",
            name, s.calls_per_s, s.p50, s.p99
        );
    }
    for (name, s) in [("kubosh", &ours), ("agentd", &real)] {
        println!(
            "  ratio {name}/raw: throughput {:.2}x, p50 {:.2}x, p99 {:.2}x",
            s.calls_per_s / floor.calls_per_s,
            s.p50.as_secs_f64() / floor.p50.as_secs_f64().max(f64::MIN_POSITIVE),
            s.p99.as_secs_f64() / floor.p99.as_secs_f64().max(f64::MIN_POSITIVE),
        );
    }
}
