//! Benchmark: CPI call latency and throughput, one `kubosh cpi` process per call, through
//! the real client (`ExternalCpi`).
//!
//! `cargo bench --bench cpi` runs `has_vm` (a read: parse, shared lock, one record, the call
//! log) `BENCH_CALLS` times (default 200) sequentially and 8 at a time, plus a few
//! create_vm/delete_vm pairs, and compares with the floor: spawning a bare `true` and waiting
//! for it, the same way.

use std::time::{Duration, Instant};

use futures::StreamExt;
use kubosh_cloud::*;
use serde_json::json;

const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");
const PARALLEL: usize = 8;

fn obj(v: serde_json::Value) -> Object {
    v.as_object().cloned().unwrap_or_default()
}

fn create_vm(stemcell: &StemcellCid, i: usize) -> CreateVm {
    let mut networks = Networks::new();
    networks.insert(
        "default".into(),
        NetworkSettings::new("manual").with("ip", format!("10.1.{}.{}", i / 250, i % 250)),
    );
    CreateVm {
        agent_id: format!("agent-{i}"),
        stemcell_cid: stemcell.clone(),
        cloud_properties: Object::new(),
        networks,
        disk_cids: vec![],
        env: obj(json!({"bosh": {"group": "bench"}})),
    }
}

/// Runs `n` calls of `call`, `parallel` at a time; returns the wall time.
async fn run<F, Fut>(n: usize, parallel: usize, call: F) -> Duration
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    futures::stream::iter((0..n).map(call))
        .buffer_unordered(parallel)
        .collect::<Vec<()>>()
        .await;
    start.elapsed()
}

fn report(what: &str, n: usize, took: Duration, floor: Option<Duration>) {
    let per_s = n as f64 / took.as_secs_f64();
    let latency = took.as_secs_f64() * 1000.0 / n as f64;
    match floor {
        Some(floor) => println!(
            "  {what:<34} {per_s:>8.0} calls/s  {latency:>6.2} ms/call  {:>5.2}x the floor",
            took.as_secs_f64() / floor.as_secs_f64()
        ),
        None => println!("  {what:<34} {per_s:>8.0} calls/s  {latency:>6.2} ms/call"),
    }
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("cpi.yml");
    std::fs::write(
        &config,
        "state_dir: state\nagent:\n  command: [/bin/sh, -c, exec sleep 1000]\n  stop_timeout_seconds: 5\n",
    )
    .expect("write config");
    let cpi = ExternalCpi::new(
        CpiCommand::new(KUBOSH).args(["cpi", "--config", &config.display().to_string()]),
        "bench",
    )
    .with_retry(RetryPolicy::never());
    let image = dir.path().join("image");
    std::fs::write(&image, "image").expect("write image");
    let stemcell = cpi
        .create_stemcell(&CreateStemcell {
            image_path: image,
            cloud_properties: Object::new(),
        })
        .await
        .expect("create_stemcell");
    let vm = cpi
        .create_vm(&create_vm(&stemcell, 0))
        .await
        .expect("create_vm")
        .cid;

    let spawn_true = |_| async {
        tokio::process::Command::new("true")
            .status()
            .await
            .expect("run true");
    };
    let has_vm = |_| async {
        assert!(cpi.has_vm(&vm).await.expect("has_vm"));
    };
    // Warm-up: page cache, lazy statics.
    run(10, 1, spawn_true).await;
    run(10, 1, has_vm).await;

    println!("CPI calls through ExternalCpi, one `kubosh cpi` process each, {n} calls");
    let floor_seq = run(n, 1, spawn_true).await;
    let floor_par = run(n, PARALLEL, spawn_true).await;
    report("floor: spawn `true`, sequential", n, floor_seq, None);
    report(
        &format!("floor: spawn `true`, {PARALLEL} parallel"),
        n,
        floor_par,
        None,
    );
    let seq = run(n, 1, has_vm).await;
    report("has_vm, sequential", n, seq, Some(floor_seq));
    let par = run(n, PARALLEL, has_vm).await;
    report(
        &format!("has_vm, {PARALLEL} parallel"),
        n,
        par,
        Some(floor_par),
    );

    let pairs = (n / 10).max(1);
    let created = std::sync::Mutex::new(Vec::new());
    let took = run(pairs, PARALLEL, |i| {
        let created = &created;
        let cpi = &cpi;
        let stemcell = &stemcell;
        async move {
            let vm = cpi
                .create_vm(&create_vm(stemcell, i + 1))
                .await
                .expect("create_vm")
                .cid;
            created.lock().expect("lock").push(vm);
        }
    })
    .await;
    report(
        &format!("create_vm, {PARALLEL} parallel"),
        pairs,
        took,
        None,
    );
    let vms = created.into_inner().expect("lock");
    let took = run(pairs, PARALLEL, |i| {
        let cpi = &cpi;
        let vm = vms[i].clone();
        async move { cpi.delete_vm(&vm).await.expect("delete_vm") }
    })
    .await;
    report(
        &format!("delete_vm, {PARALLEL} parallel"),
        pairs,
        took,
        None,
    );

    cpi.delete_vm(&vm).await.expect("delete_vm");
    cpi.delete_stemcell(&stemcell)
        .await
        .expect("delete_stemcell");
    let left = kubosh_cloud::local::inventory(&dir.path().join("state")).expect("inventory");
    assert!(left.is_empty(), "the bench leaked: {left:?}");
}
