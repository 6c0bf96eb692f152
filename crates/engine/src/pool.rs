//! One work-conserving scheduler for everything the engine runs concurrently: package
//! compilation (a dependency graph on `compilation.workers` slots) and instance updates
//! (phases of `max_in_flight` with canaries first).
//!
//! "Work-conserving" means no waves: the moment a slot frees, the next ready task starts.
//! The Director's instance pool behaves like this too (`perf-reliability.md` §1.2); its
//! compilation queue is LIFO, ours takes the highest priority (the longest remaining chain),
//! which `benches/compile.rs` compares.
//!
//! Failure policy, the Director's: after the first failure no new task starts; tasks already
//! running finish, and the [`Outcome`] says which failed and which never started.
//!
//! Both entry points share one driver ([`drive`]); they differ only in when a task is ready
//! and how many may run at once ([`Readiness`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

/// What became of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome<T, E> {
    /// It ran and succeeded.
    Succeeded(T),
    /// It ran and failed.
    Failed(E),
    /// It never started: an earlier failure stopped the run (or a dependency failed).
    NotStarted,
}

/// The result of a run: one [`TaskOutcome`] per task, by task index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<T, E> {
    /// Outcomes by task index.
    pub tasks: Vec<TaskOutcome<T, E>>,
    /// The task whose failure stopped the run (the first to fail), if any.
    pub first_failure: Option<usize>,
}

impl<T, E> Outcome<T, E> {
    /// True when every task ran and succeeded.
    pub fn is_success(&self) -> bool {
        self.tasks
            .iter()
            .all(|t| matches!(t, TaskOutcome::Succeeded(_)))
    }

    /// Indexes of the tasks that failed, in index order.
    pub fn failed(&self) -> Vec<usize> {
        self.indexes(|t| matches!(t, TaskOutcome::Failed(_)))
    }

    /// Indexes of the tasks that never started, in index order.
    #[cfg(test)]
    pub(crate) fn not_started(&self) -> Vec<usize> {
        self.indexes(|t| matches!(t, TaskOutcome::NotStarted))
    }

    /// Every task's value in index order, or the index and error of the failure that stopped
    /// the run.
    pub(crate) fn into_result(self) -> Result<Vec<T>, (usize, E)> {
        let first = self.first_failure;
        let mut values = Vec::with_capacity(self.tasks.len());
        let mut failure = None;
        for (i, t) in self.tasks.into_iter().enumerate() {
            match t {
                TaskOutcome::Succeeded(v) => values.push(v),
                TaskOutcome::Failed(e) if first == Some(i) || failure.is_none() => {
                    failure = Some((i, e));
                }
                TaskOutcome::Failed(_) | TaskOutcome::NotStarted => {}
            }
        }
        match failure {
            Some(f) => Err(f),
            None => Ok(values),
        }
    }

    fn indexes(&self, pick: impl Fn(&TaskOutcome<T, E>) -> bool) -> Vec<usize> {
        (0..self.tasks.len())
            .filter(|&i| pick(&self.tasks[i]))
            .collect()
    }
}

/// A task of a dependency graph.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DagTask {
    /// Indexes of the tasks that must succeed before this one starts.
    pub depends_on: Vec<usize>,
    /// Higher starts first among ready tasks (ties: lower index first).
    pub priority: u64,
}

/// Which ready task takes a free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadyOrder {
    /// The highest [`DagTask::priority`] (ties: lowest index). kubosh's choice.
    #[default]
    Priority,
    /// The task that became ready first.
    Fifo,
    /// The task that became ready last (the Director's compilation queue).
    Lifo,
}

/// A dependency graph that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// A task depends on an index outside the task list.
    #[error("task {task} depends on task {dependency}, which does not exist")]
    UnknownDependency {
        /// The depending task.
        task: usize,
        /// The index that is out of range.
        dependency: usize,
    },
    /// Some tasks depend on each other in a circle (directly or not).
    #[error("tasks {tasks:?} depend on each other in a cycle")]
    Cycle {
        /// Every task on or behind a cycle, in index order.
        tasks: Vec<usize>,
    },
}

/// Runs a dependency graph on `workers` slots (0 acts as 1), highest priority first.
///
/// `work(task, slot)` runs one task; `slot` (`0..workers`) is the worker it occupies, the
/// lowest free one, so callers can keep per-worker resources (a reused compilation VM).
/// A task starts only after all its dependencies succeeded. See [`run_dag_ordered`].
pub async fn run_dag<T, E, F, Fut>(
    tasks: &[DagTask],
    workers: usize,
    work: F,
) -> Result<Outcome<T, E>, PoolError>
where
    F: FnMut(usize, usize) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    run_dag_ordered(tasks, workers, ReadyOrder::Priority, work).await
}

/// [`run_dag`] with another choice of the next ready task (to compare queue disciplines).
pub async fn run_dag_ordered<T, E, F, Fut>(
    tasks: &[DagTask],
    workers: usize,
    order: ReadyOrder,
    work: F,
) -> Result<Outcome<T, E>, PoolError>
where
    F: FnMut(usize, usize) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let readiness = DagReadiness::new(tasks, workers.max(1), order)?;
    Ok(drive(tasks.len(), readiness, work).await)
}

/// One phase of a rollout: `len` items (numbered on from the previous phase's), the first
/// `canaries` of them alone first, at most `max_in_flight` at a time (0 acts as 1, BOSH's
/// minimum; there is no other cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase {
    /// Items in this phase.
    pub len: usize,
    /// How many of its first items are canaries (more than `len` means all).
    pub canaries: usize,
    /// Items running at once, canaries included.
    pub max_in_flight: usize,
}

/// Runs phases one after another, each a barrier: a phase starts when the previous one has
/// finished. Inside a phase, canaries run first (at most `min(canaries, max_in_flight)` at
/// once) and all finish before the other items start; the others then run work-conserving.
///
/// Items are numbered across phases in order (phase 0's items first); `work(item, slot)`
/// runs one. After a failure nothing new starts, so a failed canary means no other item
/// ever starts.
pub(crate) async fn run_phases<T, E, F, Fut>(phases: &[Phase], work: F) -> Outcome<T, E>
where
    F: FnMut(usize, usize) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let readiness = StagedReadiness::new(phases);
    let len = phases.iter().map(|p| p.len).sum();
    drive(len, readiness, work).await
}

/// One phase: `len` items in order, the first `canaries` first (with a barrier), at most
/// `max_in_flight` at once. See [`run_phases`].
pub async fn run_batch<T, E, F, Fut>(
    len: usize,
    canaries: usize,
    max_in_flight: usize,
    work: F,
) -> Outcome<T, E>
where
    F: FnMut(usize, usize) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let phase = Phase {
        len,
        canaries,
        max_in_flight,
    };
    run_phases(&[phase], work).await
}

/// When tasks become ready and how many may run at once.
trait Readiness {
    /// A ready task that may start while `running` tasks run, taken off the ready set.
    fn take(&mut self, running: usize) -> Option<usize>;
    /// `task` succeeded: tasks waiting for it may become ready.
    fn succeeded(&mut self, task: usize);
}

/// The driver: starts ready tasks while there is room, then waits for any running task to
/// finish, until nothing runs and nothing may start.
async fn drive<T, E, F, Fut>(
    len: usize,
    mut readiness: impl Readiness,
    mut work: F,
) -> Outcome<T, E>
where
    F: FnMut(usize, usize) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut tasks: Vec<TaskOutcome<T, E>> = (0..len).map(|_| TaskOutcome::NotStarted).collect();
    let mut first_failure = None;
    let mut running = FuturesUnordered::new();
    // Lowest free slot first, so slot numbers stay within `0..limit`.
    let mut free_slots: BinaryHeap<Reverse<usize>> = BinaryHeap::new();
    let mut slots_made = 0;
    loop {
        if first_failure.is_none() {
            while let Some(task) = readiness.take(running.len()) {
                let slot = match free_slots.pop() {
                    Some(Reverse(s)) => s,
                    None => {
                        slots_made += 1;
                        slots_made - 1
                    }
                };
                let job = work(task, slot);
                running.push(async move { (task, slot, job.await) });
            }
        }
        let Some((task, slot, result)) = running.next().await else {
            break;
        };
        free_slots.push(Reverse(slot));
        if let Some(outcome) = tasks.get_mut(task) {
            match result {
                Ok(value) => {
                    *outcome = TaskOutcome::Succeeded(value);
                    readiness.succeeded(task);
                }
                Err(error) => {
                    *outcome = TaskOutcome::Failed(error);
                    first_failure.get_or_insert(task);
                }
            }
        }
    }
    Outcome {
        tasks,
        first_failure,
    }
}

/// The ready set of a dependency graph.
enum ReadySet {
    Priority(BinaryHeap<(u64, Reverse<usize>)>),
    Fifo(VecDeque<usize>),
    Lifo(Vec<usize>),
}

impl ReadySet {
    fn push(&mut self, task: usize, priority: u64) {
        match self {
            ReadySet::Priority(h) => h.push((priority, Reverse(task))),
            ReadySet::Fifo(q) => q.push_back(task),
            ReadySet::Lifo(s) => s.push(task),
        }
    }

    fn pop(&mut self) -> Option<usize> {
        match self {
            ReadySet::Priority(h) => h.pop().map(|(_, Reverse(t))| t),
            ReadySet::Fifo(q) => q.pop_front(),
            ReadySet::Lifo(s) => s.pop(),
        }
    }
}

struct DagReadiness {
    workers: usize,
    waiting_on: Vec<usize>,
    dependents: Vec<Vec<usize>>,
    priorities: Vec<u64>,
    ready: ReadySet,
}

impl DagReadiness {
    fn new(tasks: &[DagTask], workers: usize, order: ReadyOrder) -> Result<Self, PoolError> {
        let mut dependents = vec![Vec::new(); tasks.len()];
        let mut waiting_on = vec![0; tasks.len()];
        for (task, t) in tasks.iter().enumerate() {
            for &dependency in &t.depends_on {
                let Some(list) = dependents.get_mut(dependency) else {
                    return Err(PoolError::UnknownDependency { task, dependency });
                };
                list.push(task);
                waiting_on[task] += 1;
            }
        }
        check_acyclic(&waiting_on, &dependents)?;
        let ready = match order {
            ReadyOrder::Priority => ReadySet::Priority(BinaryHeap::new()),
            ReadyOrder::Fifo => ReadySet::Fifo(VecDeque::new()),
            ReadyOrder::Lifo => ReadySet::Lifo(Vec::new()),
        };
        let mut readiness = DagReadiness {
            workers,
            waiting_on,
            dependents,
            priorities: tasks.iter().map(|t| t.priority).collect(),
            ready,
        };
        for task in 0..tasks.len() {
            if readiness.waiting_on[task] == 0 {
                readiness.ready.push(task, readiness.priorities[task]);
            }
        }
        Ok(readiness)
    }
}

impl Readiness for DagReadiness {
    fn take(&mut self, running: usize) -> Option<usize> {
        if running >= self.workers {
            return None;
        }
        self.ready.pop()
    }

    fn succeeded(&mut self, task: usize) {
        let dependents = std::mem::take(&mut self.dependents[task]);
        for d in dependents {
            self.waiting_on[d] -= 1;
            if self.waiting_on[d] == 0 {
                self.ready.push(d, self.priorities[d]);
            }
        }
    }
}

/// Kahn's algorithm on a copy of the counts: every task must be reachable.
fn check_acyclic(waiting_on: &[usize], dependents: &[Vec<usize>]) -> Result<(), PoolError> {
    let mut waiting = waiting_on.to_vec();
    let mut stack: Vec<usize> = (0..waiting.len()).filter(|&t| waiting[t] == 0).collect();
    let mut seen = 0;
    while let Some(t) = stack.pop() {
        seen += 1;
        for &d in &dependents[t] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                stack.push(d);
            }
        }
    }
    if seen == waiting.len() {
        Ok(())
    } else {
        Err(PoolError::Cycle {
            tasks: (0..waiting.len()).filter(|&t| waiting[t] > 0).collect(),
        })
    }
}

/// Stages run strictly one after another: a phase's canaries, then the rest of the phase,
/// then the next phase. Items of a stage start in order.
struct StagedReadiness {
    /// `(first item, end, max_in_flight)` of each non-empty stage.
    stages: Vec<(usize, usize, usize)>,
    current: usize,
    next_item: usize,
    finished_in_stage: usize,
}

impl StagedReadiness {
    fn new(phases: &[Phase]) -> Self {
        let mut stages = Vec::new();
        let mut start = 0;
        for p in phases {
            let limit = p.max_in_flight.max(1);
            let canaries = p.canaries.min(p.len);
            for (from, to) in [(start, start + canaries), (start + canaries, start + p.len)] {
                if to > from {
                    stages.push((from, to, limit));
                }
            }
            start += p.len;
        }
        let next_item = stages.first().map_or(0, |s| s.0);
        StagedReadiness {
            stages,
            current: 0,
            next_item,
            finished_in_stage: 0,
        }
    }
}

impl Readiness for StagedReadiness {
    fn take(&mut self, running: usize) -> Option<usize> {
        let &(_, end, limit) = self.stages.get(self.current)?;
        if self.next_item < end && running < limit {
            self.next_item += 1;
            Some(self.next_item - 1)
        } else {
            None
        }
    }

    fn succeeded(&mut self, _task: usize) {
        self.finished_in_stage += 1;
        let Some(&(from, end, _)) = self.stages.get(self.current) else {
            return;
        };
        if self.finished_in_stage == end - from {
            self.current += 1;
            self.finished_in_stage = 0;
            if let Some(&(next_from, _, _)) = self.stages.get(self.current) {
                self.next_item = next_from;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::time::Duration;
    use tokio::time::{Instant, sleep};

    /// Records start/finish times (virtual seconds) and concurrency.
    #[derive(Default)]
    struct Log {
        running: usize,
        max_running: usize,
        started: Vec<(usize, u64)>,
        finished: Vec<(usize, u64)>,
        slots: Vec<(usize, usize)>,
    }

    type Shared = Rc<RefCell<Log>>;

    /// A task that sleeps `secs` seconds (fails if `fail`), logging into `log`.
    async fn timed(
        log: Shared,
        t0: Instant,
        task: usize,
        slot: usize,
        millis: u64,
        fail: bool,
    ) -> Result<usize, String> {
        {
            let mut l = log.borrow_mut();
            l.running += 1;
            l.max_running = l.max_running.max(l.running);
            l.started.push((task, t0.elapsed().as_millis() as u64));
            l.slots.push((task, slot));
        }
        sleep(Duration::from_millis(millis)).await;
        let mut l = log.borrow_mut();
        l.running -= 1;
        l.finished.push((task, t0.elapsed().as_millis() as u64));
        if fail {
            Err(format!("task {task} failed"))
        } else {
            Ok(task)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn batch_of_identical_items_takes_ceil_n_over_m() {
        let log = Shared::default();
        let t0 = Instant::now();
        let out = run_batch(10, 0, 3, |i, slot| {
            timed(log.clone(), t0, i, slot, 1000, false)
        })
        .await;
        assert!(out.is_success());
        assert_eq!(t0.elapsed(), Duration::from_secs(4));
        assert_eq!(log.borrow().max_running, 3);
        assert!(log.borrow().slots.iter().all(|&(_, s)| s < 3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_freed_slot_is_reused_at_once() {
        // Waves of 2 would take 3.5 + 1 + 1 = 5.5 s; work-conserving takes 4 s: while item 0
        // runs, items 2, 3 and 4 follow each other on the slot item 1 freed.
        let durations = [3500, 1000, 1000, 1000, 1000];
        let log = Shared::default();
        let t0 = Instant::now();
        let out = run_batch(durations.len(), 0, 2, |i, slot| {
            timed(log.clone(), t0, i, slot, durations[i], false)
        })
        .await;
        assert!(out.is_success());
        assert_eq!(t0.elapsed(), Duration::from_secs(4));
        let started = log.borrow().started.clone();
        assert_eq!(
            started,
            vec![(0, 0), (1, 0), (2, 1000), (3, 2000), (4, 3000)]
        );
        let slots = log.borrow().slots.clone();
        assert_eq!(slots, vec![(0, 0), (1, 1), (2, 1), (3, 1), (4, 1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn uneven_items_beat_waves() {
        // m = 3, durations 5,1,1,1,1,1: waves would be 5 + 1 = 6 s; the pool ends at 5 s.
        let durations = [5000, 1000, 1000, 1000, 1000, 1000];
        let log = Shared::default();
        let t0 = Instant::now();
        let out = run_batch(durations.len(), 0, 3, |i, slot| {
            timed(log.clone(), t0, i, slot, durations[i], false)
        })
        .await;
        assert!(out.is_success());
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
        assert_eq!(log.borrow().max_running, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn canaries_run_first_behind_a_barrier() {
        // 2 canaries (4 s and 1 s) with max_in_flight 3: nothing else starts before 4 s.
        let durations = [4000, 1000, 1000, 1000, 1000, 1000];
        let log = Shared::default();
        let t0 = Instant::now();
        let out = run_batch(durations.len(), 2, 3, |i, slot| {
            timed(log.clone(), t0, i, slot, durations[i], false)
        })
        .await;
        assert!(out.is_success());
        assert_eq!(t0.elapsed(), Duration::from_secs(6));
        let started = log.borrow().started.clone();
        assert_eq!(
            started,
            vec![(0, 0), (1, 0), (2, 4000), (3, 4000), (4, 4000), (5, 5000)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn canaries_are_limited_by_max_in_flight() {
        let log = Shared::default();
        let t0 = Instant::now();
        let out = run_batch(5, 4, 2, |i, slot| {
            timed(log.clone(), t0, i, slot, 1000, false)
        })
        .await;
        assert!(out.is_success());
        // Canaries 2 + 2 (2 s), then the last item (1 s).
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        assert_eq!(log.borrow().max_running, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_canary_starts_nothing_else() {
        let log = Shared::default();
        let t0 = Instant::now();
        let out = run_batch(6, 2, 3, |i, slot| {
            timed(log.clone(), t0, i, slot, 1000 + 500 * i as u64, i == 0)
        })
        .await;
        assert_eq!(out.failed(), vec![0]);
        assert_eq!(out.first_failure, Some(0));
        assert_eq!(out.not_started(), vec![2, 3, 4, 5]);
        // The other canary still finished.
        assert_eq!(out.tasks[1], TaskOutcome::Succeeded(1));
        assert_eq!(log.borrow().started.len(), 2);
        assert_eq!(out.into_result(), Err((0, "task 0 failed".to_string())));
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_failure_in_flight_items_finish_and_nothing_new_starts() {
        let log = Shared::default();
        let t0 = Instant::now();
        // m = 3: items 0,1,2 start; item 1 fails at 1 s; 0 and 2 (3 s) still finish.
        let out = run_batch(8, 0, 3, |i, slot| {
            let ms = if i == 1 { 1000 } else { 3000 };
            timed(log.clone(), t0, i, slot, ms, i == 1)
        })
        .await;
        assert_eq!(out.failed(), vec![1]);
        assert_eq!(out.not_started(), vec![3, 4, 5, 6, 7]);
        assert!(matches!(out.tasks[0], TaskOutcome::Succeeded(0)));
        assert!(matches!(out.tasks[2], TaskOutcome::Succeeded(2)));
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn phases_are_barriers_with_their_own_max_in_flight() {
        let phases = [
            Phase {
                len: 3,
                canaries: 1,
                max_in_flight: 2,
            },
            Phase {
                len: 4,
                canaries: 0,
                max_in_flight: 4,
            },
            Phase {
                len: 0,
                canaries: 1,
                max_in_flight: 1,
            },
            Phase {
                len: 2,
                canaries: 5,
                max_in_flight: 0,
            },
        ];
        let log = Shared::default();
        let t0 = Instant::now();
        let out = run_phases(&phases, |i, slot| {
            timed(log.clone(), t0, i, slot, 1000, false)
        })
        .await;
        assert!(out.is_success());
        // Phase 0: canary 1 s, then 2 items together 1 s; phase 1: 4 at once 1 s; the empty
        // phase costs nothing; phase 3: max_in_flight 0 acts as 1: 2 s.
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
        assert_eq!(log.borrow().max_running, 4);
        let starts: Vec<u64> = log.borrow().started.iter().map(|s| s.1).collect();
        assert_eq!(
            starts,
            vec![0, 1000, 1000, 2000, 2000, 2000, 2000, 3000, 4000]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_in_one_phase_stops_later_phases() {
        let phases = [
            Phase {
                len: 2,
                canaries: 0,
                max_in_flight: 2,
            },
            Phase {
                len: 2,
                canaries: 0,
                max_in_flight: 2,
            },
        ];
        let log = Shared::default();
        let t0 = Instant::now();
        let out = run_phases(&phases, |i, slot| {
            timed(log.clone(), t0, i, slot, 1000, i == 1)
        })
        .await;
        assert_eq!(out.failed(), vec![1]);
        assert_eq!(out.not_started(), vec![2, 3]);
    }

    fn dag(edges: &[&[usize]], priorities: &[u64]) -> Vec<DagTask> {
        edges
            .iter()
            .zip(priorities)
            .map(|(deps, &priority)| DagTask {
                depends_on: deps.to_vec(),
                priority,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn dag_respects_dependencies() {
        // 0 -> 2 -> 3, 1 -> 3 (3 depends on 1 and 2), 4 free.
        let tasks = dag(&[&[], &[], &[0], &[1, 2], &[]], &[0; 5]);
        let durations = [1000, 2500, 1000, 1000, 1000];
        let log = Shared::default();
        let t0 = Instant::now();
        let out = run_dag(&tasks, 4, |i, slot| {
            timed(log.clone(), t0, i, slot, durations[i], false)
        })
        .await
        .unwrap();
        assert!(out.is_success());
        let l = log.borrow();
        let finish = |t: usize| l.finished.iter().find(|f| f.0 == t).unwrap().1;
        let start = |t: usize| l.started.iter().find(|s| s.0 == t).unwrap().1;
        for (task, deps) in [(2, vec![0]), (3, vec![1, 2])] {
            for d in deps {
                assert!(
                    start(task) >= finish(d),
                    "{task} started before {d} finished"
                );
            }
        }
        assert_eq!(start(3), 2500);
        assert_eq!(t0.elapsed(), Duration::from_millis(3500));
    }

    #[tokio::test(start_paused = true)]
    async fn dag_starts_the_highest_priority_ready_task() {
        // One worker, three independent tasks: priority order 1, 2, 0.
        let tasks = dag(&[&[], &[], &[]], &[1, 9, 5]);
        let log = Shared::default();
        let t0 = Instant::now();
        run_dag(&tasks, 1, |i, slot| {
            timed(log.clone(), t0, i, slot, 1000, false)
        })
        .await
        .unwrap();
        let order: Vec<usize> = log.borrow().started.iter().map(|s| s.0).collect();
        assert_eq!(order, vec![1, 2, 0]);
    }

    #[tokio::test(start_paused = true)]
    async fn critical_path_first_beats_lifo() {
        // A 3 s chain 0 -> 1 -> 2 and three 1 s singletons, 2 workers. Priority by remaining
        // chain keeps the chain busy: 3 s. LIFO starts the singletons first: 4 s.
        let tasks = dag(&[&[], &[0], &[1], &[], &[], &[]], &[3, 2, 1, 1, 1, 1]);
        for (order, secs) in [(ReadyOrder::Priority, 3), (ReadyOrder::Lifo, 4)] {
            let log = Shared::default();
            let t0 = Instant::now();
            let out = run_dag_ordered(&tasks, 2, order, |i, slot| {
                timed(log.clone(), t0, i, slot, 1000, false)
            })
            .await
            .unwrap();
            assert!(out.is_success());
            assert_eq!(t0.elapsed(), Duration::from_secs(secs), "{order:?}");
            assert_eq!(log.borrow().max_running, 2);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn dag_failure_leaves_dependents_and_queued_tasks_unstarted() {
        // Task 0 fails at 1 s while 1 (2 s) runs; 2 depends on 0; 3 and 4 wait for a slot.
        let tasks = dag(&[&[], &[], &[0], &[], &[]], &[5, 4, 0, 1, 1]);
        let log = Shared::default();
        let t0 = Instant::now();
        let out = run_dag(&tasks, 2, |i, slot| {
            let ms = if i == 1 { 2000 } else { 1000 };
            timed(log.clone(), t0, i, slot, ms, i == 0)
        })
        .await
        .unwrap();
        assert_eq!(out.failed(), vec![0]);
        assert_eq!(out.tasks[1], TaskOutcome::Succeeded(1));
        assert_eq!(out.not_started(), vec![2, 3, 4]);
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn dag_slots_are_worker_numbers() {
        let tasks = dag(&[&[] as &[usize]; 7], &[0; 7]);
        let log = Shared::default();
        let t0 = Instant::now();
        run_dag(&tasks, 3, |i, slot| {
            timed(log.clone(), t0, i, slot, 1000 + 100 * i as u64, false)
        })
        .await
        .unwrap();
        let l = log.borrow();
        assert_eq!(l.max_running, 3);
        assert!(l.slots.iter().all(|&(_, s)| s < 3));
    }

    #[tokio::test]
    async fn bad_graphs_are_refused() {
        let work = |_: usize, _: usize| async { Ok::<(), ()>(()) };
        let unknown = dag(&[&[], &[7]], &[0, 0]);
        assert_eq!(
            run_dag(&unknown, 1, work).await.unwrap_err(),
            PoolError::UnknownDependency {
                task: 1,
                dependency: 7
            }
        );
        let cycle = dag(&[&[], &[2], &[1], &[2]], &[0; 4]);
        assert_eq!(
            run_dag(&cycle, 1, work).await.unwrap_err(),
            PoolError::Cycle {
                tasks: vec![1, 2, 3]
            }
        );
        let empty: Outcome<(), ()> = run_dag(&[], 0, work).await.unwrap();
        assert!(empty.is_success() && empty.tasks.is_empty());
    }
}
