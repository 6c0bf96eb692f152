//! Benchmark: `kubosh create-env` of the example (`examples/create-env/hello.yml`: the
//! hello release on one VM of the local cloud with a persistent disk, the CPI installed from
//! `examples/releases/kubosh-cpi`), through the binary as a user runs it.
//!
//! `cargo bench --bench create_env` measures, `BENCH_RUNS` times each (default 3):
//! - cold: a new environment and an empty kubosh home (the CPI's package compiled, both
//!   hello packages compiled on the VM);
//! - warm: a new environment with the home of an earlier one (the CPI's compile index gone
//!   with its installation, but the deployment's compiled-package cache reused);
//! - recreate: `--recreate` of a deployed environment (old VM stopped and deleted);
//! - skip: the same command again, "Skipping deploy" (no CPI or agent call);
//!
//! and prints each against cold. Needs root (agents bind their VM directory on /var/vcap).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kubosh_devenv::free_port;

const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");

/// One environment directory: manifest, variables, tarballs.
fn environment(dir: &Path, artifacts: &Path, n: u32) {
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/create-env/hello.yml"),
        dir.join("env.yml"),
    )
    .unwrap();
    let net = 150 + n % 50;
    let vars = serde_json::json!({
        "internal_ip": format!("127.0.{net}.10"),
        "internal_cidr": format!("127.0.{net}.0/24"),
        "internal_gw": format!("127.0.{net}.1"),
        "mbus_port": free_port().expect("a free port"),
        "hello_port": free_port().expect("a free port"),
        "greeting": "Hello",
        "disk_size": 64,
        "kubosh": KUBOSH,
        "hello_release": artifacts.join("hello.tgz"),
        "cpi_release": artifacts.join("cpi.tgz"),
        "stemcell": artifacts.join("stemcell.tgz"),
        "cloud_dir": dir.join("cloud"),
    });
    std::fs::write(dir.join("vars.yml"), vars.to_string()).unwrap();
}

fn create_env(dir: &Path, home: &Path, extra: &[&str]) -> Duration {
    let start = Instant::now();
    let out = Command::new(KUBOSH)
        .current_dir(dir)
        .env("KUBOSH_HOME", home)
        .args([
            "create-env",
            "env.yml",
            "-l",
            "vars.yml",
            "--vars-store",
            "creds.yml",
        ])
        .args(extra)
        .output()
        .expect("kubosh runs");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "create-env: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn delete_env(dir: &Path, home: &Path) {
    let out = Command::new(KUBOSH)
        .current_dir(dir)
        .env("KUBOSH_HOME", home)
        .args([
            "delete-env",
            "env.yml",
            "-l",
            "vars.yml",
            "--vars-store",
            "creds.yml",
        ])
        .output()
        .expect("kubosh runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let runs: u32 = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    let root = tempfile::tempdir().expect("temp dir");
    let artifacts = root.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    kubosh_devenv::write_create_env_artifacts(&artifacts).expect("the example tarballs");

    let (mut cold, mut warm, mut recreate, mut skip) = (vec![], vec![], vec![], vec![]);
    for run in 0..runs {
        let home = root.path().join(format!("home-{run}"));
        let first = root.path().join(format!("cold-{run}"));
        std::fs::create_dir_all(&first).unwrap();
        environment(&first, &artifacts, run * 2);
        cold.push(create_env(&first, &home, &[]));
        skip.push(create_env(&first, &home, &[]));
        recreate.push(create_env(&first, &home, &["--recreate"]));
        delete_env(&first, &home);
        let second = root.path().join(format!("warm-{run}"));
        std::fs::create_dir_all(&second).unwrap();
        environment(&second, &artifacts, run * 2 + 1);
        warm.push(create_env(&second, &home, &[]));
        delete_env(&second, &home);
    }
    let cold = median(cold);
    println!("create-env of the example, median of {runs}:");
    for (what, took) in [
        ("cold (new environment, empty home)", cold),
        ("warm (new environment, compiled cache)", median(warm)),
        ("--recreate (deployed environment)", median(recreate)),
        ("Skipping deploy (nothing changed)", median(skip)),
    ] {
        println!(
            "  {what:<42} {:>7.2} s  {:>5.2}x cold",
            took.as_secs_f64(),
            took.as_secs_f64() / cold.as_secs_f64()
        );
    }
}
