//! The knobs the simulated-cloud benchmarks (`deploy`, `controller`) share: numbers from the
//! environment and the simulated calls' latencies (`BENCH_LATENCIES`).

use std::collections::BTreeMap;
use std::time::Duration;

use kubosh_sim::{SimAgents, SimCloud};

/// An environment variable as a number, or `default`.
pub fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}: '{v}' is not a number")),
        Err(_) => default,
    }
}

/// Milliseconds per simulated call: `defaults`, overridden by `BENCH_LATENCIES`
/// (`create_vm=0.2,apply=0.05`, seconds).
pub fn latencies_from_env(
    defaults: impl IntoIterator<Item = (String, u64)>,
) -> BTreeMap<String, u64> {
    let mut latencies: BTreeMap<String, u64> = defaults.into_iter().collect();
    if let Ok(spec) = std::env::var("BENCH_LATENCIES") {
        for pair in spec.split(',').filter(|p| !p.trim().is_empty()) {
            let (method, secs) = pair
                .split_once('=')
                .unwrap_or_else(|| panic!("BENCH_LATENCIES: '{pair}' is not method=seconds"));
            let secs: f64 = secs
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("BENCH_LATENCIES: '{secs}' is not a number"));
            latencies.insert(method.trim().to_string(), (secs * 1000.0) as u64);
        }
    }
    latencies
}

/// Gives the simulated cloud and agents these latencies (milliseconds by method).
pub fn apply_latencies(latencies: &BTreeMap<String, u64>, cloud: &SimCloud, agents: &SimAgents) {
    for (method, ms) in latencies {
        kubosh_sim::set_latency(cloud, agents, method, Duration::from_millis(*ms));
    }
}
