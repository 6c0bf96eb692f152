//! Benchmark: package compilation schedules against the lower bound (`perf-reliability.md`
//! §3.2).
//!
//! `cargo bench --bench compile` builds random package DAGs (seeded xorshift: 50, 200 and
//! 1,000 packages; most compile in seconds to minutes, a few in 10–27 minutes, some of those
//! chained like mariadb behind cmake and boost), runs them through `engine::pool::run_dag`
//! on a paused tokio clock (each task sleeps its duration, so makespans are exact virtual
//! times) with W = 1, 2, 4, 8, 16 workers, and prints makespan ÷ `compile_lower_bound` for:
//!
//! - `cp`: critical-path priority from the true durations (target ≤ 1.1);
//! - `cp-unit`: critical-path priority with every estimate 1 (no duration history);
//! - `fifo`: ready tasks in the order they became ready;
//! - `lifo`: the last ready first, as the Director's compilation queue.
//!
//! `BENCH_SEEDS` (default 5) graphs per size; the table shows the mean and the worst ratio.

#[path = "common/graph.rs"]
mod graph;

use graph::{Graph, random_graph, virtual_makespan};

use kubosh_core::plan::bound::{compile_lower_bound, remaining_chains};
use kubosh_engine::pool::ReadyOrder;

const SIZES: [usize; 3] = [50, 200, 1000];
const WORKERS: [usize; 5] = [1, 2, 4, 8, 16];

/// Makespan in seconds of `graph` on `workers` with `priorities` and `order`, on a paused
/// clock.
fn makespan(graph: &Graph, workers: usize, priorities: &[u64], order: ReadyOrder) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(virtual_makespan(graph, workers, priorities, order)) / 1000
}

#[derive(Default, Clone, Copy)]
struct Ratio {
    sum: f64,
    worst: f64,
    count: u32,
}

impl Ratio {
    fn add(&mut self, r: f64) {
        self.sum += r;
        self.worst = self.worst.max(r);
        self.count += 1;
    }

    fn show(&self) -> String {
        format!(
            "{:.3} / {:.3}",
            self.sum / f64::from(self.count),
            self.worst
        )
    }
}

fn main() {
    let seeds: u64 = std::env::var("BENCH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let names = ["cp", "cp-unit", "fifo", "lifo"];
    println!("makespan ÷ max(critical path, total/W); mean / worst over {seeds} graphs\n");
    for n in SIZES {
        let graphs: Vec<Graph> = (0..seeds).map(|s| random_graph(n, 1000 + s)).collect();
        let avg_cp: f64 = graphs
            .iter()
            .map(|g| {
                remaining_chains(&g.seconds, &g.depends_on)
                    .map_or(0, |c| c.into_iter().max().unwrap_or(0))
            })
            .sum::<u64>() as f64
            / seeds as f64;
        let avg_total: f64 = graphs
            .iter()
            .map(|g| g.seconds.iter().sum::<u64>())
            .sum::<u64>() as f64
            / seeds as f64;
        println!(
            "{n} packages (mean critical path {:.0} min, mean total {:.0} min)",
            avg_cp / 60.0,
            avg_total / 60.0
        );
        println!(
            "  {:>3}  {:>15}  {:>15}  {:>15}  {:>15}",
            "W", names[0], names[1], names[2], names[3]
        );
        for w in WORKERS {
            let mut ratios = [Ratio::default(); 4];
            for g in &graphs {
                let bound = compile_lower_bound(&g.seconds, &g.depends_on, w).expect("sound");
                let cp = remaining_chains(&g.seconds, &g.depends_on).expect("sound");
                let ones = vec![1; g.seconds.len()];
                let cp_unit = remaining_chains(&ones, &g.depends_on).expect("sound");
                let runs = [
                    makespan(g, w, &cp, ReadyOrder::Priority),
                    makespan(g, w, &cp_unit, ReadyOrder::Priority),
                    makespan(g, w, &cp, ReadyOrder::Fifo),
                    makespan(g, w, &cp, ReadyOrder::Lifo),
                ];
                for (ratio, took) in ratios.iter_mut().zip(runs) {
                    ratio.add(took as f64 / bound.max(1) as f64);
                }
            }
            println!(
                "  {w:>3}  {:>15}  {:>15}  {:>15}  {:>15}",
                ratios[0].show(),
                ratios[1].show(),
                ratios[2].show(),
                ratios[3].show()
            );
        }
        println!();
    }
}
