//! Benchmark: a vars store's first fill, kubosh against the real bosh-cli. `kubosh
//! interpolate --vars-store` and `bosh interpolate --vars-store` each generate every variable
//! of a real manifest into an empty store (cf-deployment: 132 definitions, most of them
//! certificates with 3072-bit keys; bosh-deployment), `BENCH_RUNS` times each (default 3),
//! alternating; the medians and kubosh ÷ bosh-cli are printed (goal ≤ 1.0).
//!
//! `cargo bench --bench variables`. Needs bosh-cli (`tools/testbins.sh` builds it into
//! `KUBOSH_BIN_DIR`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/real-world");

/// One fill of an empty store by `tool` (`interpolate` and its arguments, `--vars-store`
/// added).
fn fill(tool: &Path, args: &[&str], store: &Path) -> Duration {
    let _ = std::fs::remove_file(store);
    let start = Instant::now();
    let out = Command::new(tool)
        .arg("interpolate")
        .args(args)
        .arg("--vars-store")
        .arg(store)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", tool.display()));
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{} failed: {}",
        tool.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let bosh = kubosh_devenv::binary("bosh").unwrap_or_else(|e| panic!("{e}"));
    let cf = format!("{FIXTURES}/cf-deployment/cf-deployment.yml");
    let director = format!("{FIXTURES}/bosh-deployment/bosh.yml");
    let manifests: [(&str, Vec<&str>); 2] = [
        (
            "cf-deployment",
            vec![&cf, "-v", "system_domain=example.com"],
        ),
        (
            "bosh-deployment",
            vec![
                &director,
                "-v",
                "internal_ip=10.0.0.6",
                "-v",
                "director_name=d",
            ],
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("creds.yml");
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!("a vars store's first fill, median of {runs} runs each, {cores} cores");
    println!(
        "{:>16} | {:>9} | {:>9} | {:>16}",
        "manifest", "kubosh", "bosh-cli", "kubosh ÷ bosh-cli"
    );
    for (name, args) in manifests {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            ours.push(fill(Path::new(KUBOSH), &args, &store));
            theirs.push(fill(&bosh, &args, &store));
        }
        let (ours, theirs) = (median(ours), median(theirs));
        println!(
            "{name:>16} | {:>8.2}s | {:>8.2}s | {:>16.2}",
            ours.as_secs_f64(),
            theirs.as_secs_f64(),
            ours.as_secs_f64() / theirs.as_secs_f64()
        );
    }
}
