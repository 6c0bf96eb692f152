//! Crash safety: `kubosh deploy` is killed (SIGKILL, no chance to clean up) at random points
//! of deploys that create, update, resize and delete, over and over. Every few kills a deploy
//! runs to the end; then the deployment has converged, the local cloud holds exactly the VMs
//! and disks the state records (nothing leaked, nothing forgotten), and a marker written on a
//! persistent disk at the start is still there.
//!
//! `KUBOSH_CRASH_RUNS` sets the number of kills (default 50); `KUBOSH_CRASH_SEED` replays a
//! run (the seed is printed).

use crate::director_world;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use director_world::{World, http_get};
use kubosh_cloud::local;
use kubosh_engine::state::DeploymentState;
use serde_json::{Value, json};

/// One variant of the deployment: greeting, disk size and number of web instances.
pub(crate) fn manifest(net: u8, port: u16, greeting: &str, disk: u64, instances: u64) -> Value {
    json!({
        "name": "hello",
        "releases": [{"name": "hello", "version": "1.0.0"}],
        "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
        "update": {
            "canaries": 1, "max_in_flight": 2,
            "canary_watch_time": "300-30000", "update_watch_time": "300-30000",
        },
        "instance_groups": [{
            "name": "web",
            "instances": instances,
            "azs": ["z1"],
            "vm_type": "small",
            "stemcell": "default",
            "persistent_disk": disk,
            "networks": [{"name": "default"}],
            "jobs": [{"name": "hello", "release": "hello",
                      "provides": {"greeter": {"as": "web_greeter"}},
                      "consumes": {"peers": {"from": "web_greeter"}},
                      "properties": {"hello": {"port": port, "bind": "instance", "greeting": greeting}}}],
        }, {
            "name": "api",
            "instances": 1,
            "azs": ["z1"],
            "vm_type": "small",
            "stemcell": "default",
            "networks": [{"name": "default", "static_ips": [format!("127.0.{net}.50")]}],
            "jobs": [{"name": "hello", "release": "hello",
                      "consumes": {"peers": "nil"},
                      "properties": {"hello": {"port": port, "bind": "instance", "greeting": "Hi"}}}],
        }],
    })
}

/// A small deterministic generator (xorshift64*), so a failing run can be replayed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// How many kills: `$var`, else `default`.
pub(crate) fn runs_from_env(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The generator of this run, seeded by `KUBOSH_CRASH_SEED` or the clock; the seed is
/// printed so a failing run can be replayed.
pub(crate) fn seeded_rng() -> (u64, Rng) {
    let seed: u64 = std::env::var("KUBOSH_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(clock_seed);
    println!("KUBOSH_CRASH_SEED={seed}");
    (seed, Rng(seed))
}

/// Starts `command` with its output appended to `log` and SIGKILLs it after `delay` (no
/// destructor, no signal handler: whatever it was doing).
pub(crate) fn run_and_kill(
    mut command: std::process::Command,
    log: &std::path::Path,
    delay: Duration,
) {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = command
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .expect("kubosh starts");
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
}

/// `count` seeds: `$var` (comma-separated, to replay a run), else from the clock; printed.
pub(crate) fn seeds_from_env(var: &str, count: usize) -> Vec<u64> {
    let given: Vec<u64> = (std::env::var(var).ok().unwrap_or_default().split(','))
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let seeds = if given.is_empty() {
        let mut next = Rng(clock_seed());
        (0..count).map(|_| next.next() | 1).collect()
    } else {
        given
    };
    println!(
        "{var}={}",
        seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    seeds
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1
}

/// Writes the marker [`check_state`] looks for on web/0's persistent disk; web/0's uuid.
pub(crate) fn plant_marker(w: &World, state: &DeploymentState) -> String {
    let web0 = state
        .instances
        .values()
        .find(|i| i.group == "web" && i.index == 0)
        .expect("web/0 exists");
    let root = w.vm_root(&web0.vm.as_ref().expect("web/0 has a VM").cid);
    std::fs::write(root.join("store").join("marker"), "keep me").unwrap();
    web0.uuid.clone()
}

/// [`check_state`] for variant `n` of the deployment.
pub(crate) fn check_variant(w: &World, state: &DeploymentState, web0: &str, n: u64, context: &str) {
    let (greeting, disk, instances) = variant(n);
    check_state(w, state, web0, greeting, disk, instances, context);
}

/// The variant of run `n`.
pub(crate) fn variant(n: u64) -> (&'static str, u64, u64) {
    let greeting = if n.is_multiple_of(2) {
        "Hello"
    } else {
        "Howdy"
    };
    let disk = if (n / 3).is_multiple_of(2) { 64 } else { 96 };
    let instances = if (n / 4).is_multiple_of(2) { 2 } else { 3 };
    (greeting, disk, instances)
}

/// Runs one deploy to the end; it must succeed.
fn converge(w: &World) {
    let (ok, stdout, stderr) = w.output(w.command("deploy"));
    if !ok {
        let killed =
            std::fs::read_to_string(w.dir.path().join("killed-deploys.log")).unwrap_or_default();
        let tail: Vec<&str> = killed.lines().rev().take(60).collect();
        let records = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("cat {0}/deployments/hello/instances/*.json {0}/deployments/hello/intents/*.json 2>/dev/null; ls {1}/disks", w.state_dir().display(), w.cloud().display()))
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        panic!(
            "the converging deploy failed:\n{stdout}\n{stderr}\nkilled deploys (last lines, newest first):\n{}\nrecords:\n{records}",
            tail.join("\n")
        );
    }
}

/// The cloud holds exactly what the state records; the marker is on web/0's disk (of
/// `disk` MiB, as every web instance's); every instance serves the expected greeting.
async fn check(w: &World, web0: &str, greeting: &str, disk: u64, instances: u64, context: &str) {
    check_state(
        w,
        &w.state().await,
        web0,
        greeting,
        disk,
        instances,
        context,
    );
}

/// [`check`] of `state`, wherever it is kept.
pub(crate) fn check_state(
    w: &World,
    state: &DeploymentState,
    web0: &str,
    greeting: &str,
    disk: u64,
    instances: u64,
    context: &str,
) {
    assert!(
        state.intents.is_empty(),
        "{context}: pending intents {:?}",
        state.intents
    );
    let inventory = local::inventory(&w.cloud()).unwrap();
    let cloud_vms: BTreeSet<String> = inventory.vms.iter().map(|v| v.cid.clone()).collect();
    let recorded_vms: BTreeSet<String> = state
        .instances
        .values()
        .filter_map(|i| i.vm.as_ref().map(|v| v.cid.clone()))
        .collect();
    assert_eq!(cloud_vms, recorded_vms, "{context}: VMs");
    let cloud_disks: BTreeSet<String> = inventory.disks.iter().map(|d| d.cid.clone()).collect();
    let recorded_disks: BTreeSet<String> = state
        .instances
        .values()
        .flat_map(|i| i.disks.iter().map(|d| d.cid.clone()))
        .chain(state.orphaned_disks.keys().cloned())
        .collect();
    assert_eq!(cloud_disks, recorded_disks, "{context}: disks");
    let web: Vec<_> = state
        .instances
        .values()
        .filter(|i| i.group == "web")
        .collect();
    assert_eq!(web.len() as u64, instances, "{context}: web instances");
    for i in &web {
        let sizes: Vec<u64> = i.disks.iter().map(|d| d.size_mib).collect();
        assert_eq!(sizes, vec![disk], "{context}: {}'s disk", i.name());
        let in_cloud = (inventory.disks.iter()).find(|d| d.cid == i.disks[0].cid);
        assert_eq!(
            in_cloud.map(|d| d.size_mib),
            Some(disk),
            "{context}: {}'s disk in the cloud",
            i.name()
        );
    }
    let web0 = state.instances.get(web0).expect("web/0 is never deleted");
    let root = w.vm_root(&web0.vm.as_ref().expect("web/0 has a VM").cid);
    assert_eq!(
        std::fs::read_to_string(root.join("store").join("marker"))
            .ok()
            .as_deref(),
        Some("keep me"),
        "{context}: the marker on web/0's disk"
    );
    for i in state.instances.values() {
        let expected = if i.group == "web" { greeting } else { "Hi" };
        let ip = &i.ips["default"].ip;
        let body = http_get(ip, w.port).unwrap_or_default();
        assert!(
            body.starts_with(expected),
            "{context}: {} on {ip}: {body:?}",
            i.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_killed_anywhere_converges_without_leaks_or_data_loss() {
    let runs = runs_from_env("KUBOSH_CRASH_RUNS", 50);
    let (seed, mut rng) = seeded_rng();
    let w = World::new(4);

    let (greeting, disk, instances) = variant(0);
    w.write_manifest(&manifest(w.net, w.port, greeting, disk, instances));
    converge(&w);
    let web0 = plant_marker(&w, &w.state().await);
    check(
        &w,
        &web0,
        greeting,
        disk,
        instances,
        "after the first deploy",
    )
    .await;

    let log = w.dir.path().join("killed-deploys.log");
    for n in 1..=runs {
        let (greeting, disk, instances) = variant(n);
        w.write_manifest(&manifest(w.net, w.port, greeting, disk, instances));
        run_and_kill(
            w.command("deploy"),
            &log,
            Duration::from_millis(rng.below(3500)),
        );
        if n.is_multiple_of(5) || n == runs {
            converge(&w);
            let context = format!("after kill {n} (seed {seed})");
            check(&w, &web0, greeting, disk, instances, &context).await;
        }
    }
}
