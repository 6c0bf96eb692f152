//! Benchmark: parse + ops + validate cf-deployment (issue target: under 20 ms per run).
//!
//! `cargo bench --bench validate` prints the median and best time per run, each stage's
//! share, the peak heap allocation of one run, and the ratio to the 20 ms target.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kubosh_core::ops::{MissingVars, OpsFile, Vars};

/// Counts live and peak heap bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator and only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const TARGET: Duration = Duration::from_millis(20);

fn fixture(rel: &str) -> String {
    let path = format!(
        "{}/../shared/fixtures/real-world/cf-deployment/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

struct Texts {
    manifest: String,
    ops: Vec<(String, &'static str)>,
    cloud_config: String,
}

/// One full run; returns the time spent in each stage.
fn run(t: &Texts) -> [Duration; 3] {
    let start = Instant::now();
    let mut manifest = kubosh_base::yaml::parse_value(&t.manifest, "cf-deployment.yml").unwrap();
    let cloud_config = kubosh_base::yaml::parse_value(&t.cloud_config, "cloud-config").unwrap();
    let ops: Vec<OpsFile> = t
        .ops
        .iter()
        .map(|(text, name)| OpsFile::parse(text, name).unwrap())
        .collect();
    let parsed = start.elapsed();
    kubosh_core::ops::apply_all(&ops, &mut manifest).unwrap();
    let manifest =
        kubosh_core::ops::interpolate(&manifest, &Vars::new(), MissingVars::Leave).unwrap();
    let patched = start.elapsed();
    let validated = kubosh_core::validate::deployment(&manifest, &cloud_config)
        .expect("cf-deployment validates");
    std::hint::black_box(validated);
    let total = start.elapsed();
    [parsed, patched - parsed, total - patched]
}

fn main() {
    let texts = Texts {
        manifest: fixture("cf-deployment.yml"),
        ops: vec![
            (fixture("bosh-lite.yml"), "bosh-lite.yml"),
            (fixture("scale-to-one-az.yml"), "scale-to-one-az.yml"),
        ],
        cloud_config: fixture("bosh-lite-cloud-config.yml"),
    };
    run(&texts); // warm-up: lazy schemas, page faults
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    run(&texts);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);

    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let mut totals = Vec::with_capacity(runs);
    let mut stages = [Duration::ZERO; 3];
    for _ in 0..runs {
        let s = run(&texts);
        for (acc, d) in stages.iter_mut().zip(s) {
            *acc += d;
        }
        totals.push(s.iter().sum::<Duration>());
    }
    totals.sort();
    let median = totals[totals.len() / 2];
    let all: Duration = stages.iter().sum();
    let share = |d: Duration| 100.0 * d.as_secs_f64() / all.as_secs_f64();
    println!(
        "parse + ops + validate of cf-deployment (bosh-lite.yml, scale-to-one-az.yml), {runs} runs"
    );
    println!(
        "  median {:.2} ms, best {:.2} ms",
        ms(median),
        ms(totals[0])
    );
    println!(
        "  stages: parse YAML {:.0}%, ops + interpolation {:.0}%, validation {:.0}%",
        share(stages[0]),
        share(stages[1]),
        share(stages[2])
    );
    println!(
        "  peak heap of one run: {:.1} MiB",
        peak as f64 / (1024.0 * 1024.0)
    );
    println!(
        "  median / 20 ms target: {:.3}",
        median.as_secs_f64() / TARGET.as_secs_f64()
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
