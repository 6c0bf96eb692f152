//! Pacing: how fast a cloud is called is learned from its answers, not fixed. A
//! [`PacedCloud`] wraps any [`Cloud`]; each method that changes something in the cloud
//! (`create_vm`, `delete_vm`, `create_disk`, ...) has a [`Pace`] of its own, as IaaS APIs
//! keep a rate limit per action:
//!
//! - Calls start at most `rate` per second, in the order they asked (FIFO). The rate starts
//!   at [`INITIAL_RATE`] and doubles every second the calls wait for it (slow start), until
//!   the cloud first pushes back; after that it grows by 1 % per such second, and by 0.1 %
//!   within 5 % of the rate the cloud last refused at (it is probed there, slowly).
//! - A [`Pushback`] (rate limit or no capacity) sets the rate to 95 % of the calls the cloud
//!   accepted in the last second (half the rate when it accepted none), at most once a
//!   second, and the call is made again after a backoff: the cloud made nothing. An answer
//!   with `ok_to_retry` is not made again here: the cloud's client already repeated it by
//!   its own policy (`ExternalCpi`'s `RetryPolicy`, the Director's `max_vm_create_tries`).
//! - A method's latency that climbs to twice its best (smoothed) level counts as pushback
//!   too: the rate is cut to 70 %.
//! - A limit configured for the CPI ([`CloudLimits`]) is respected exactly: the rate never
//!   exceeds `create_vm_per_second`, and at most `max_in_flight` calls run at once.
//! - After a minute without calls, the rate starts over from what it learned (95 % of the
//!   rate last refused at, else slow start from [`INITIAL_RATE`]): the cloud may have
//!   changed, and others use it too.
//!
//! With no limit and no pushback the rate outgrows any deployment within seconds (10,000
//! VMs start within 12 s): nothing of kubosh's own caps the cloud. Reads (`info`, `has_vm`,
//! `get_disks`, the `find_*` lookups, ...) are not paced.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use kubosh_bosh::cpi::*;

/// The calls per second a method may start before the cloud's answers say more.
pub const INITIAL_RATE: f64 = 10.0;
/// The rate pushback never goes below.
const MIN_RATE: f64 = 0.2;
/// How many times a call the cloud pushed back on is made again before its error stands:
/// about 8 minutes of backoff for a rate limit, 1.5 for capacity (which may not come back).
const RATE_LIMITED_ATTEMPTS: u32 = 20;
const NO_CAPACITY_ATTEMPTS: u32 = 6;
/// How long without a call makes a pace start over ([`Pace`]'s rate is what it learned).
const IDLE_RESET: Duration = Duration::from_secs(60);
/// The first backoff after a pushback (doubled for each one after it) and the longest.
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Limits an operator configures for a CPI (none by default): respected exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CloudLimits {
    /// At most this many `create_vm` calls start per second.
    pub create_vm_per_second: Option<f64>,
    /// At most this many calls (of any method) run at once.
    pub max_in_flight: Option<usize>,
}

/// What the pacing of one method saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PaceStats {
    /// Calls made (each attempt counts).
    pub calls: u64,
    /// Calls the cloud answered with a rate limit.
    pub rate_limited: u64,
    /// Calls the cloud answered with no capacity.
    pub no_capacity: u64,
    /// The rate now (calls per second).
    pub rate: f64,
}

/// The pacing of one method of one cloud.
#[derive(Debug)]
pub struct Pace {
    /// The configured ceiling, if any.
    ceiling: Option<f64>,
    /// The calls waiting for their turn, in order.
    queue: tokio::sync::Mutex<()>,
    state: Mutex<PaceState>,
}

#[derive(Debug)]
struct PaceState {
    rate: f64,
    slow_start: bool,
    /// The earliest instant the next call may start.
    next_start: Instant,
    /// When the rate was last raised (or the current second of waiting began).
    last_raise: Instant,
    /// When it was last cut.
    last_cut: Option<Instant>,
    /// A call waited for its turn since `last_raise`: the rate is what limits.
    waited: bool,
    /// Starts and pushbacks of the last second.
    starts: VecDeque<Instant>,
    /// The last call's start.
    last_start: Option<Instant>,
    pushbacks: VecDeque<Instant>,
    /// The rate the cloud accepted when it last refused a call.
    limit_seen: Option<f64>,
    /// Smoothed latency of successful calls and its best level, in seconds, and how many.
    latency: Option<(f64, f64, u32)>,
    stats: PaceStats,
}

impl PaceState {
    /// Forgets the starts and pushbacks older than a second.
    fn prune(&mut self, now: Instant) {
        let second_ago = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
        while (self.starts.front()).is_some_and(|t| *t < second_ago) {
            self.starts.pop_front();
        }
        while (self.pushbacks.front()).is_some_and(|t| *t < second_ago) {
            self.pushbacks.pop_front();
        }
    }
}

impl Pace {
    /// A pace starting at [`INITIAL_RATE`] (or at `ceiling`, the configured limit, when
    /// there is one: the operator says the cloud takes that much).
    pub fn new(ceiling: Option<f64>) -> Pace {
        let ceiling = ceiling.filter(|c| c.is_finite() && *c > 0.0);
        let now = Instant::now();
        Pace {
            ceiling,
            queue: tokio::sync::Mutex::new(()),
            state: Mutex::new(PaceState {
                rate: ceiling.unwrap_or(INITIAL_RATE),
                slow_start: ceiling.is_none(),
                next_start: now,
                last_raise: now,
                last_cut: None,
                waited: false,
                starts: VecDeque::new(),
                last_start: None,
                pushbacks: VecDeque::new(),
                limit_seen: None,
                latency: None,
                stats: PaceStats::default(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PaceState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What it saw so far.
    pub fn stats(&self) -> PaceStats {
        let state = self.state();
        PaceStats {
            rate: state.rate,
            ..state.stats.clone()
        }
    }

    /// Waits for the next call's turn: calls queue (first come, first served) and the one
    /// at the head waits for its slot at the rate of that moment, so a rate raised or cut
    /// meanwhile applies to every call still waiting.
    async fn turn(&self) {
        let _head = self.queue.lock().await;
        let slot = {
            let mut s = self.state();
            let now = Instant::now();
            self.raise(&mut s, now);
            let slot = s.next_start.max(now);
            if slot > now {
                s.waited = true;
            }
            slot
        };
        // Timers wake a little late (to the millisecond): the next slot follows this one's,
        // not the wake-up, so fast rates are kept on average.
        if slot > Instant::now() {
            tokio::time::sleep_until(slot).await;
        }
        let mut s = self.state();
        let now = Instant::now();
        // After a quiet minute the cloud may have changed (and other clients used it): the
        // pace starts over from what it knew, not from the rate it had grown to.
        let quiet = (s.last_start).is_some_and(|t| now.duration_since(t) > IDLE_RESET);
        if quiet && self.ceiling.is_none() {
            let known = s
                .limit_seen
                .map_or(INITIAL_RATE, |l| (0.95 * l).max(MIN_RATE));
            s.rate = s.rate.min(known);
            s.slow_start = s.limit_seen.is_none();
        }
        s.next_start = s.next_start.max(slot) + Duration::from_secs_f64(1.0 / s.rate);
        s.last_start = Some(now);
        s.starts.push_back(now);
        s.prune(now);
        s.stats.calls += 1;
    }

    /// Once a second while calls wait for their turn: doubled in slow start, else 1 % more
    /// (0.1 % near the rate last refused at); never above the ceiling.
    fn raise(&self, s: &mut PaceState, now: Instant) {
        if now.duration_since(s.last_raise) < Duration::from_secs(1) {
            return;
        }
        if s.waited {
            let near_the_limit =
                (s.limit_seen).is_some_and(|l| s.rate >= 0.95 * l && s.rate <= 1.05 * l);
            let raised = if s.slow_start {
                s.rate * 2.0
            } else if near_the_limit {
                // Where the cloud last refused: it is probed for more, slowly.
                s.rate * 1.001
            } else {
                s.rate * 1.01
            };
            s.rate = self.ceiling.map_or(raised, |c| raised.min(c));
        }
        s.waited = false;
        s.last_raise = now;
    }

    /// The cloud pushed back on a call.
    fn pushed_back(&self, pushback: Pushback) {
        let mut s = self.state();
        let now = Instant::now();
        match pushback {
            Pushback::RateLimited => s.stats.rate_limited += 1,
            Pushback::NoCapacity => s.stats.no_capacity += 1,
        }
        s.pushbacks.push_back(now);
        s.prune(now);
        if s.last_cut
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        let started = s.starts.len();
        let accepted = started.saturating_sub(s.pushbacks.len()) as f64;
        let cut = if accepted > 0.0 {
            s.limit_seen = Some(accepted.min(s.rate));
            accepted.min(s.rate) * 0.95
        } else {
            s.rate * 0.5
        };
        self.cut_to(&mut s, now, cut);
    }

    /// A call that started at `started` succeeded: its latency is watched.
    fn succeeded(&self, started: Instant) {
        let mut s = self.state();
        let now = Instant::now();
        let seconds = now.duration_since(started).as_secs_f64();
        let (smoothed, best, samples) = match s.latency {
            None => (seconds, f64::INFINITY, 1),
            Some((smoothed, best, n)) => (0.8 * smoothed + 0.2 * seconds, best, n + 1),
        };
        // Its best level once a few calls have shown it.
        let best = if samples >= 8 {
            best.min(smoothed)
        } else {
            best
        };
        s.latency = Some((smoothed, best, samples));
        let climbed = best.is_finite() && best > 0.0 && smoothed > 2.0 * best;
        let settled = s
            .last_cut
            .is_none_or(|t| now.duration_since(t).as_secs_f64() >= best);
        if climbed && settled {
            let cut = s.rate * 0.7;
            self.cut_to(&mut s, now, cut);
        }
    }

    fn cut_to(&self, s: &mut PaceState, now: Instant, rate: f64) {
        s.rate = rate.max(MIN_RATE);
        s.slow_start = false;
        s.last_cut = Some(now);
        s.last_raise = now;
        s.waited = false;
        // The cloud's bucket is empty: the next call waits a turn.
        s.next_start = s
            .next_start
            .max(now + Duration::from_secs_f64(1.0 / s.rate));
    }
}

/// Makes `call` with `pace` (when given), again after a backoff while the cloud pushes back
/// (a bounded number of times; not an answer with `ok_to_retry`, which the cloud's client
/// repeated already), holding a permit of `in_flight` while it runs.
async fn paced<'a, T>(
    pace: Option<&Pace>,
    in_flight: Option<&Arc<Semaphore>>,
    call: impl Fn() -> CloudFuture<'a, T>,
) -> Result<T, CpiError> {
    let mut backoffs = ExponentialBuilder::default()
        .with_min_delay(BACKOFF_MIN)
        .with_max_delay(BACKOFF_MAX)
        .with_max_times(RATE_LIMITED_ATTEMPTS.max(NO_CAPACITY_ATTEMPTS) as usize)
        .build();
    let mut attempt = 0;
    loop {
        attempt += 1;
        if let Some(pace) = pace {
            pace.turn().await;
        }
        let _permit: Option<OwnedSemaphorePermit> = match in_flight {
            Some(semaphore) => semaphore.clone().acquire_owned().await.ok(),
            None => None,
        };
        let started = Instant::now();
        let result = call().await;
        drop(_permit);
        let pushback = match &result {
            Ok(_) => {
                if let Some(pace) = pace {
                    pace.succeeded(started);
                }
                return result;
            }
            Err(e) => e.pushback(),
        };
        let Some(pushback) = pushback else {
            return result;
        };
        if let Some(pace) = pace {
            pace.pushed_back(pushback);
        }
        let attempts = match pushback {
            Pushback::RateLimited => RATE_LIMITED_ATTEMPTS,
            Pushback::NoCapacity => NO_CAPACITY_ATTEMPTS,
        };
        let repeated_already = (result.as_ref().err()).is_some_and(CpiError::ok_to_retry);
        let backoff = match backoffs.next() {
            Some(backoff) if attempt < attempts && !repeated_already => backoff,
            _ => return result,
        };
        tracing::debug!(
            attempt,
            ?pushback,
            ?backoff,
            "the cloud pushed back; calling again"
        );
        tokio::time::sleep(backoff).await;
    }
}

/// A [`Cloud`] whose calls are paced ([module docs](self)).
pub struct PacedCloud {
    inner: Arc<dyn Cloud>,
    pacer: Arc<Pacer>,
}

/// The paces of one cloud's methods, shared by every [`PacedCloud`] of that cloud
/// ([`Pacer::shared`]): deployments deploying at once share what the cloud takes.
#[derive(Debug)]
pub struct Pacer {
    limits: CloudLimits,
    in_flight: Option<Arc<Semaphore>>,
    paces: Mutex<BTreeMap<&'static str, Arc<Pace>>>,
}

impl Pacer {
    /// A pacer of its own.
    pub fn new(limits: CloudLimits) -> Pacer {
        Pacer {
            limits,
            in_flight: (limits.max_in_flight)
                .map(|n| Arc::new(Semaphore::new(n.clamp(1, Semaphore::MAX_PERMITS)))),
            paces: Mutex::new(BTreeMap::new()),
        }
    }

    /// The pacer of the cloud named `key` in this process (made with `limits` on first use,
    /// and again when they changed).
    pub fn shared(key: &str, limits: CloudLimits) -> Arc<Pacer> {
        static PACERS: LazyLock<Mutex<HashMap<String, Arc<Pacer>>>> =
            LazyLock::new(Default::default);
        let mut pacers = PACERS.lock().unwrap_or_else(PoisonError::into_inner);
        let pacer = pacers
            .entry(key.to_string())
            .or_insert_with(|| Arc::new(Pacer::new(limits)));
        if pacer.limits != limits {
            *pacer = Arc::new(Pacer::new(limits));
        }
        pacer.clone()
    }

    /// The pace of `method`.
    fn pace(&self, method: &'static str) -> Arc<Pace> {
        let mut paces = self.paces.lock().unwrap_or_else(PoisonError::into_inner);
        (paces.entry(method))
            .or_insert_with(|| {
                let ceiling = (method == "create_vm")
                    .then_some(self.limits.create_vm_per_second)
                    .flatten();
                Arc::new(Pace::new(ceiling))
            })
            .clone()
    }

    /// What each paced method saw, by method.
    pub fn stats(&self) -> BTreeMap<&'static str, PaceStats> {
        let paces = self.paces.lock().unwrap_or_else(PoisonError::into_inner);
        paces.iter().map(|(m, p)| (*m, p.stats())).collect()
    }
}

impl PacedCloud {
    /// `inner`, paced by `pacer`.
    pub fn new(inner: Arc<dyn Cloud>, pacer: Arc<Pacer>) -> PacedCloud {
        PacedCloud { inner, pacer }
    }

    /// A call that changes the cloud: paced.
    fn change<'a, T: Send + 'a>(
        &'a self,
        method: &'static str,
        call: impl Fn() -> CloudFuture<'a, T> + Send + 'a,
    ) -> CloudFuture<'a, T> {
        Box::pin(async move {
            let pace = self.pacer.pace(method);
            paced(Some(&pace), self.pacer.in_flight.as_ref(), call).await
        })
    }

    /// A read: not paced, but made again when the cloud pushes back.
    fn read<'a, T: Send + 'a>(
        &'a self,
        call: impl Fn() -> CloudFuture<'a, T> + Send + 'a,
    ) -> CloudFuture<'a, T> {
        Box::pin(async move { paced(None, self.pacer.in_flight.as_ref(), call).await })
    }
}

impl Cloud for PacedCloud {
    fn info(&self) -> CloudFuture<'_, CpiInfo> {
        self.read(|| self.inner.info())
    }

    fn create_stemcell<'a>(&'a self, req: &'a CreateStemcell) -> CloudFuture<'a, StemcellCid> {
        self.change("create_stemcell", || self.inner.create_stemcell(req))
    }

    fn delete_stemcell<'a>(&'a self, cid: &'a StemcellCid) -> CloudFuture<'a, ()> {
        self.change("delete_stemcell", || self.inner.delete_stemcell(cid))
    }

    fn create_vm<'a>(&'a self, req: &'a CreateVm) -> CloudFuture<'a, VmCreated> {
        self.change("create_vm", || self.inner.create_vm(req))
    }

    fn delete_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, ()> {
        self.change("delete_vm", || self.inner.delete_vm(cid))
    }

    fn has_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, bool> {
        self.read(|| self.inner.has_vm(cid))
    }

    fn find_vm_by_agent<'a>(&'a self, agent_id: &'a str) -> CloudFuture<'a, Option<VmCid>> {
        self.read(|| self.inner.find_vm_by_agent(agent_id))
    }

    fn reboot_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, ()> {
        self.change("reboot_vm", || self.inner.reboot_vm(cid))
    }

    fn set_vm_metadata<'a>(&'a self, cid: &'a VmCid, metadata: &'a Object) -> CloudFuture<'a, ()> {
        self.change("set_vm_metadata", || {
            self.inner.set_vm_metadata(cid, metadata)
        })
    }

    fn calculate_vm_cloud_properties<'a>(
        &'a self,
        resources: &'a VmResources,
    ) -> CloudFuture<'a, Object> {
        self.read(|| self.inner.calculate_vm_cloud_properties(resources))
    }

    fn create_stemcell_with_request_id<'a>(
        &'a self,
        req: &'a CreateStemcell,
        request_id: &'a str,
    ) -> CloudFuture<'a, StemcellCid> {
        self.change("create_stemcell", || {
            self.inner.create_stemcell_with_request_id(req, request_id)
        })
    }

    fn find_stemcell_by_request<'a>(
        &'a self,
        request_id: &'a str,
    ) -> CloudFuture<'a, Option<StemcellCid>> {
        self.read(|| self.inner.find_stemcell_by_request(request_id))
    }

    fn create_disk<'a>(&'a self, req: &'a CreateDisk) -> CloudFuture<'a, DiskCid> {
        self.change("create_disk", || self.inner.create_disk(req))
    }

    fn create_disk_with_request_id<'a>(
        &'a self,
        req: &'a CreateDisk,
        request_id: &'a str,
    ) -> CloudFuture<'a, DiskCid> {
        self.change("create_disk", || {
            self.inner.create_disk_with_request_id(req, request_id)
        })
    }

    fn find_disk_by_request<'a>(&'a self, request_id: &'a str) -> CloudFuture<'a, Option<DiskCid>> {
        self.read(|| self.inner.find_disk_by_request(request_id))
    }

    fn delete_disk<'a>(&'a self, cid: &'a DiskCid) -> CloudFuture<'a, ()> {
        self.change("delete_disk", || self.inner.delete_disk(cid))
    }

    fn has_disk<'a>(&'a self, cid: &'a DiskCid) -> CloudFuture<'a, bool> {
        self.read(|| self.inner.has_disk(cid))
    }

    fn attach_disk<'a>(
        &'a self,
        vm: &'a VmCid,
        disk: &'a DiskCid,
    ) -> CloudFuture<'a, Option<DiskHint>> {
        self.change("attach_disk", || self.inner.attach_disk(vm, disk))
    }

    fn detach_disk<'a>(&'a self, vm: &'a VmCid, disk: &'a DiskCid) -> CloudFuture<'a, ()> {
        self.change("detach_disk", || self.inner.detach_disk(vm, disk))
    }

    fn get_disks<'a>(&'a self, vm: &'a VmCid) -> CloudFuture<'a, Vec<DiskCid>> {
        self.read(|| self.inner.get_disks(vm))
    }

    fn resize_disk<'a>(&'a self, cid: &'a DiskCid, new_size_mib: u64) -> CloudFuture<'a, ()> {
        self.change("resize_disk", move || {
            self.inner.resize_disk(cid, new_size_mib)
        })
    }

    fn update_disk<'a>(&'a self, req: &'a UpdateDisk) -> CloudFuture<'a, Option<DiskCid>> {
        self.change("update_disk", || self.inner.update_disk(req))
    }

    fn set_disk_metadata<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
    ) -> CloudFuture<'a, ()> {
        self.change("set_disk_metadata", || {
            self.inner.set_disk_metadata(cid, metadata)
        })
    }

    fn snapshot_disk<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
    ) -> CloudFuture<'a, SnapshotCid> {
        self.change("snapshot_disk", || self.inner.snapshot_disk(cid, metadata))
    }

    fn snapshot_disk_with_request_id<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
        request_id: &'a str,
    ) -> CloudFuture<'a, SnapshotCid> {
        self.change("snapshot_disk", || {
            self.inner
                .snapshot_disk_with_request_id(cid, metadata, request_id)
        })
    }

    fn find_snapshot_by_request<'a>(
        &'a self,
        request_id: &'a str,
    ) -> CloudFuture<'a, Option<SnapshotCid>> {
        self.read(|| self.inner.find_snapshot_by_request(request_id))
    }

    fn delete_snapshot<'a>(&'a self, cid: &'a SnapshotCid) -> CloudFuture<'a, ()> {
        self.change("delete_snapshot", || self.inner.delete_snapshot(cid))
    }

    fn create_network<'a>(&'a self, spec: &'a CreateNetwork) -> CloudFuture<'a, Value> {
        self.change("create_network", || self.inner.create_network(spec))
    }

    fn delete_network<'a>(&'a self, network_id: &'a str) -> CloudFuture<'a, ()> {
        self.change("delete_network", || self.inner.delete_network(network_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cloud API as the tests see it: a token bucket of `burst` refilled at `per_second`
    /// (`None`: no limit); each accepted call takes `latency`.
    struct Api {
        bucket: Mutex<(f64, Instant)>,
        limit: Option<(f64, f64)>,
        latency: Duration,
        accepted: Mutex<Vec<Instant>>,
    }

    impl Api {
        fn new(limit: Option<(f64, f64)>, latency: Duration) -> Arc<Api> {
            Arc::new(Api {
                bucket: Mutex::new((limit.map_or(0.0, |l| l.1), Instant::now())),
                limit,
                latency,
                accepted: Mutex::new(Vec::new()),
            })
        }

        fn call(self: &Arc<Api>) -> CloudFuture<'static, ()> {
            let api = self.clone();
            Box::pin(async move {
                if let Some((per_second, burst)) = api.limit {
                    let mut bucket = api.bucket.lock().unwrap();
                    let now = Instant::now();
                    bucket.0 = (bucket.0 + now.duration_since(bucket.1).as_secs_f64() * per_second)
                        .min(burst);
                    bucket.1 = now;
                    if bucket.0 < 1.0 {
                        return Err(CpiError::Cloud {
                            kind: ErrorKind::CloudError,
                            error_type: "Bosh::Clouds::CloudError".into(),
                            message: "Request limit exceeded. (RequestLimitExceeded)".into(),
                            ok_to_retry: false,
                            method: "create_vm".into(),
                            request_id: String::new(),
                        });
                    }
                    bucket.0 -= 1.0;
                }
                api.accepted.lock().unwrap().push(Instant::now());
                tokio::time::sleep(api.latency).await;
                Ok(())
            })
        }
    }

    /// `n` calls at once through `pace`; when the last one ended.
    async fn calls(n: usize, pace: &Arc<Pace>, api: &Arc<Api>) -> Duration {
        let start = Instant::now();
        let runs = (0..n).map(|_| {
            let (pace, api) = (pace.clone(), api.clone());
            tokio::spawn(async move { paced(Some(&pace), None, || api.call()).await })
        });
        for run in futures_join(runs).await {
            run.expect("no call fails");
        }
        start.elapsed()
    }

    async fn futures_join<T: Send + 'static>(
        handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
    ) -> Vec<T> {
        let mut out = Vec::new();
        for handle in handles.collect::<Vec<_>>() {
            out.push(handle.await.unwrap());
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_limit_the_rate_outgrows_ten_thousand_calls_in_seconds() {
        let pace = Arc::new(Pace::new(None));
        let api = Api::new(None, Duration::from_secs(30));
        let took = calls(10_000, &pace, &api).await;
        let last_start = *api.accepted.lock().unwrap().iter().max().unwrap();
        let started_within = last_start.duration_since(Instant::now() - took);
        assert!(
            started_within <= Duration::from_secs(12),
            "{started_within:?}"
        );
        assert_eq!(pace.stats().rate_limited, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_limit_is_found_and_kept_to_with_few_refusals() {
        let pace = Arc::new(Pace::new(None));
        let api = Api::new(Some((10.0, 10.0)), Duration::from_secs(30));
        calls(1_000, &pace, &api).await;
        let stats = pace.stats();
        let refused = stats.rate_limited as f64 / stats.calls as f64;
        assert!(refused <= 0.05, "{stats:?}");
        // Throughput while the limit is what bounds it: from the first acceptance to the
        // last, 1 000 calls at 10 a second take 100 s at best.
        let accepted = api.accepted.lock().unwrap().clone();
        let span = accepted.last().unwrap().duration_since(accepted[0]);
        let throughput = (accepted.len() - 1) as f64 / span.as_secs_f64();
        assert!(throughput >= 9.0, "{throughput} calls/s, {stats:?}");
        eprintln!(
            "{throughput:.2} calls/s, {:.1} % refused: {stats:?}",
            refused * 100.0
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_configured_limit_is_kept_exactly_and_never_exceeded() {
        let pace = Arc::new(Pace::new(Some(5.0)));
        let api = Api::new(None, Duration::from_secs(1));
        calls(200, &pace, &api).await;
        let accepted = api.accepted.lock().unwrap().clone();
        // No second holds more than 5 starts.
        for (i, t) in accepted.iter().enumerate() {
            let within = accepted[i..]
                .iter()
                .take_while(|u| u.duration_since(*t) < Duration::from_secs(1))
                .count();
            assert!(within <= 5, "{within} starts within a second of {i}");
        }
        let span = accepted.last().unwrap().duration_since(accepted[0]);
        assert!(
            span <= Duration::from_secs_f64(199.0 / 5.0 + 0.01),
            "{span:?}"
        );
        assert_eq!(pace.stats().rate, 5.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_climbing_latency_slows_the_calls_down() {
        // Calls that took 30 s, then calls that take 90 s.
        let pace = Pace::new(None);
        for n in 0..30u64 {
            let started = Instant::now();
            tokio::time::advance(Duration::from_secs(if n < 10 { 30 } else { 90 })).await;
            pace.succeeded(started);
        }
        assert!(pace.stats().rate < INITIAL_RATE, "{:?}", pace.stats());
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_quiet_minute_the_pace_starts_over_and_it_keeps_a_second_of_history() {
        let pace = Arc::new(Pace::new(None));
        let api = Api::new(None, Duration::from_secs(1));
        calls(2_000, &pace, &api).await;
        assert!(pace.stats().rate > 100.0, "{:?}", pace.stats());
        assert!(
            pace.state().starts.len() < 2_000,
            "older starts are forgotten"
        );
        tokio::time::advance(Duration::from_secs(120)).await;
        calls(1, &pace, &api).await;
        assert_eq!(pace.stats().rate, INITIAL_RATE);
        assert_eq!(pace.state().starts.len(), 1);
    }

    /// How many times `paced` made a `create_vm` the cloud refuses with `kind`, `message`
    /// and `ok_to_retry` (the call fails in the end).
    async fn tries_of_refused(
        pace: &Pace,
        (kind, error_type): (ErrorKind, &str),
        message: &str,
        ok_to_retry: bool,
    ) -> u32 {
        let tries = std::sync::atomic::AtomicU32::new(0);
        let result: Result<(), CpiError> = paced(Some(pace), None, || {
            tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let refused = CpiError::Cloud {
                kind: kind.clone(),
                error_type: error_type.into(),
                message: message.into(),
                ok_to_retry,
                method: "create_vm".into(),
                request_id: String::new(),
            };
            Box::pin(async { Err(refused) })
        })
        .await;
        assert!(result.is_err());
        tries.into_inner()
    }

    #[tokio::test(start_paused = true)]
    async fn a_pushback_the_client_repeated_already_slows_the_pace_but_is_not_made_again() {
        let pace = Pace::new(None);
        let capacity = (
            ErrorKind::VmCreationFailed,
            "Bosh::Clouds::VMCreationFailed",
        );
        let tries = tries_of_refused(&pace, capacity, "InsufficientInstanceCapacity", true).await;
        assert_eq!(tries, 1);
        let stats = pace.stats();
        assert_eq!(stats.no_capacity, 1);
        assert!(stats.rate < INITIAL_RATE, "{stats:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_that_is_no_pushback_is_not_retried() {
        let pace = Pace::new(None);
        let invalid = (ErrorKind::CpiError, "Bosh::Clouds::CpiError");
        let tries = tries_of_refused(&pace, invalid, "Invalid 'instance_type'", false).await;
        assert_eq!(tries, 1);
    }
}
