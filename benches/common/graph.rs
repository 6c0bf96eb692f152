//! Package graphs as releases have them, drawn at random (seeded, so runs compare): shared
//! by the compilation and deploy benchmarks, and a graph's compilation run in virtual time.

use std::time::Duration;

use kubosh_engine::pool::{DagTask, ReadyOrder, run_dag_ordered};

/// xorshift64*: small, seeded, good enough to draw graphs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A package graph: durations in seconds and dependencies (always on earlier packages, as
/// a release's compile order lists them).
#[derive(Debug, Clone)]
pub struct Graph {
    pub seconds: Vec<u64>,
    pub depends_on: Vec<Vec<usize>>,
}

/// `n` packages as a release has them: a few toolchains (1–4 minutes) most packages build
/// on, most others seconds to minutes, 3 % 10–27 minutes (mariadb, postgres), those often
/// stacked on one another (mariadb on cmake on boost).
pub fn random_graph(n: usize, seed: u64) -> Graph {
    let mut rng = Rng::new(seed);
    let mut seconds = Vec::with_capacity(n);
    let mut depends_on: Vec<Vec<usize>> = Vec::with_capacity(n);
    // A few "toolchains" (golang, ruby, openjdk) many packages build on.
    let toolchains = (n / 25).max(2);
    let mut long: Vec<usize> = Vec::new();
    for i in 0..n {
        let secs = if i < toolchains {
            rng.range(60, 240)
        } else if rng.chance(3) {
            // mariadb, xtrabackup, postgres: 10-27 minutes.
            rng.range(600, 1620)
        } else if rng.chance(25) {
            rng.range(60, 300)
        } else {
            rng.range(5, 60)
        };
        let mut deps = Vec::new();
        if i >= toolchains {
            if rng.chance(70) {
                deps.push(rng.range(0, toolchains as u64 - 1) as usize);
            }
            for _ in 0..rng.range(0, 2) {
                deps.push(rng.range(0, i as u64 - 1) as usize);
            }
            // Long packages often stack on long ones (mariadb on cmake on boost).
            if secs >= 600 {
                if let Some(&prev) = long.last()
                    && rng.chance(50)
                {
                    deps.push(prev);
                }
                long.push(i);
            }
        }
        deps.sort_unstable();
        deps.dedup();
        seconds.push(secs);
        depends_on.push(deps);
    }
    Graph {
        seconds,
        depends_on,
    }
}

/// How long compiling `graph` takes on `workers` with `priorities` (one per package) and
/// `order`, in milliseconds of the (paused) tokio clock: each compile sleeps its duration
/// through `engine::pool::run_dag_ordered`.
pub async fn virtual_makespan(
    graph: &Graph,
    workers: usize,
    priorities: &[u64],
    order: ReadyOrder,
) -> u64 {
    let tasks: Vec<DagTask> = (graph.depends_on.iter().zip(priorities))
        .map(|(deps, &priority)| DagTask {
            depends_on: deps.clone(),
            priority,
        })
        .collect();
    let began = tokio::time::Instant::now();
    let outcome = run_dag_ordered(&tasks, workers, order, |task, _slot| {
        let secs = graph.seconds[task];
        async move {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            Ok::<(), ()>(())
        }
    })
    .await
    .expect("a sound package graph");
    assert!(outcome.is_success());
    u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX)
}
