//! What the controller tells Prometheus and the kubelet: `/metrics` (OpenMetrics text,
//! `prometheus-client`), `/healthz` (the process serves) and `/readyz` (leadership settled
//! and, when leading, the caches synced), on one port.
//!
//! Metrics:
//! - `kubosh_reconcile_duration_seconds{controller, result}`: each reconcile of each kind;
//! - `kubosh_deploy_duration_seconds{result}`: each deploy task (`succeeded`, `failed`,
//!   `retrying`, `cancelled`);
//! - `kubosh_cpi_call_duration_seconds{method, result}` and
//!   `kubosh_agent_call_duration_seconds{method, result}`: every CPI process and agent
//!   request, `result` `ok` or the error's kind, so errors by method are the non-`ok` counts;
//! - `kubosh_instances{state}`: instances by process state;
//! - `kubosh_deploys_running`, `kubosh_deploys_waiting`: deploy tasks under way and queued
//!   for a slot of `--max-deploys` (the work queue);
//! - `kubosh_leader`: 1 while this process leads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde_json::Value;

use kubosh_cloud::{CallObserver, CpiError};
use kubosh_transport::agent::protocol::Reply;
use kubosh_transport::agent::{Transport, TransportError};
use kubosh_transport::https_server::{self, Body, HttpsServer, Routes};

/// A reconcile's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    controller: String,
    result: String,
}

/// A call's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    method: String,
    result: String,
}

/// An outcome's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

/// An instance state's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Buckets for calls: 5 ms to about 160 s.
fn call_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 16))
}

/// Buckets for deploys: 1 s to about 4.5 h.
fn deploy_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

/// The controller's metrics. Cheap to share (`Arc`).
pub struct Metrics {
    registry: Registry,
    reconciles: Histograms<ReconcileLabels>,
    deploys: Histograms<ResultLabel>,
    cpi_calls: Histograms<CallLabels>,
    agent_calls: Histograms<CallLabels>,
    instances: Family<StateLabel, Gauge>,
    deploys_running: Gauge,
    deploys_waiting: Gauge,
    leader: Gauge,
    resurrections: Counter,
    meltdowns: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric registered, at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("kubosh");
        let reconciles: Histograms<ReconcileLabels> = Family::new_with_constructor(call_buckets);
        let deploys: Histograms<ResultLabel> = Family::new_with_constructor(deploy_buckets);
        let cpi_calls: Histograms<CallLabels> = Family::new_with_constructor(call_buckets);
        let agent_calls: Histograms<CallLabels> = Family::new_with_constructor(call_buckets);
        let instances = Family::<StateLabel, Gauge>::default();
        let (deploys_running, deploys_waiting, leader) =
            (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register(
            "reconcile_duration_seconds",
            "How long each reconcile took, by controller and result",
            reconciles.clone(),
        );
        registry.register(
            "deploy_duration_seconds",
            "How long each deploy task took, by result",
            deploys.clone(),
        );
        registry.register(
            "cpi_call_duration_seconds",
            "How long each CPI call took, by method and result (ok or the error's kind)",
            cpi_calls.clone(),
        );
        registry.register(
            "agent_call_duration_seconds",
            "How long each agent request took, by method and result (ok or the error's kind)",
            agent_calls.clone(),
        );
        registry.register("instances", "Instances by process state", instances.clone());
        registry.register(
            "deploys_running",
            "Deploy tasks under way",
            deploys_running.clone(),
        );
        registry.register(
            "deploys_waiting",
            "Deploy tasks waiting for a slot of --max-deploys",
            deploys_waiting.clone(),
        );
        registry.register(
            "leader",
            "1 while this process leads, else 0",
            leader.clone(),
        );
        let (resurrections, meltdowns) = (Counter::default(), Counter::default());
        registry.register(
            "resurrections",
            "Instances given a new VM because they lost their agent or VM",
            resurrections.clone(),
        );
        registry.register(
            "meltdowns",
            "Times resurrection stopped for a deployment because too many of its instances went down",
            meltdowns.clone(),
        );
        Metrics {
            registry,
            reconciles,
            deploys,
            cpi_calls,
            agent_calls,
            instances,
            deploys_running,
            deploys_waiting,
            leader,
            resurrections,
            meltdowns,
        }
    }

    /// An instance was resurrected.
    pub fn resurrected(&self) {
        self.resurrections.inc();
    }

    /// Resurrection stopped for a deployment (meltdown).
    pub fn melted_down(&self) {
        self.meltdowns.inc();
    }

    /// The metrics in OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// A reconcile of `controller` took `elapsed`, ending `ok` or not.
    pub fn reconciled(&self, controller: &str, elapsed: Duration, ok: bool) {
        let labels = ReconcileLabels {
            controller: controller.into(),
            result: if ok { "ok" } else { "error" }.into(),
        };
        self.reconciles
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// A deploy task took `elapsed` and ended with `result`.
    pub fn deployed(&self, result: &str, elapsed: Duration) {
        self.deploys
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Deploy tasks: one more (`1`) or one fewer (`-1`) waiting for a slot.
    pub fn deploys_waiting(&self, by: i64) {
        self.deploys_waiting.inc_by(by);
    }

    /// Deploy tasks: one more (`1`) or one fewer (`-1`) under way.
    pub fn deploys_running(&self, by: i64) {
        self.deploys_running.inc_by(by);
    }

    /// Whether this process leads.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// The instances by state, replacing the previous counts.
    pub fn set_instances(&self, counts: &[(String, i64)]) {
        self.instances.clear();
        for (state, n) in counts {
            self.instances
                .get_or_create(&StateLabel {
                    state: state.clone(),
                })
                .set(*n);
        }
    }

    fn call(family: &Histograms<CallLabels>, method: &str, result: &str, elapsed: Duration) {
        family
            .get_or_create(&CallLabels {
                method: method.into(),
                result: result.into(),
            })
            .observe(elapsed.as_secs_f64());
    }
}

impl CallObserver for Metrics {
    fn cpi_call(&self, method: &str, elapsed: Duration, error: Option<&CpiError>) {
        let result = match error {
            None => "ok".to_string(),
            Some(e) => match e.kind() {
                Some(kind) => kind.type_name().to_string(),
                None => "error".to_string(),
            },
        };
        Metrics::call(&self.cpi_calls, method, &result, elapsed);
    }
}

/// An agent transport whose every request is timed into [`Metrics`].
pub struct MeteredTransport {
    inner: Arc<dyn Transport>,
    metrics: Arc<Metrics>,
}

impl MeteredTransport {
    /// `inner`, measured into `metrics`.
    pub fn new(inner: Arc<dyn Transport>, metrics: Arc<Metrics>) -> MeteredTransport {
        MeteredTransport { inner, metrics }
    }
}

impl Transport for MeteredTransport {
    fn request<'a>(
        &'a self,
        agent_id: &'a str,
        method: &'a str,
        arguments: &'a [Value],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Reply, TransportError>> {
        Box::pin(async move {
            let started = Instant::now();
            let result = self
                .inner
                .request(agent_id, method, arguments, timeout)
                .await;
            let label = match &result {
                Ok(_) => "ok",
                Err(TransportError::Timeout) => "timeout",
                Err(_) => "error",
            };
            Metrics::call(&self.metrics.agent_calls, method, label, started.elapsed());
            result
        })
    }

    fn notify<'a>(
        &'a self,
        agent_id: &'a str,
        method: &'a str,
        arguments: &'a [Value],
    ) -> BoxFuture<'a, Result<(), TransportError>> {
        self.inner.notify(agent_id, method, arguments)
    }

    fn protocol(&self) -> Option<u32> {
        self.inner.protocol()
    }
}

/// Whether the process is ready for traffic (`/readyz`): leadership settled (leading or
/// standing by), and, when leading, the controllers' caches synced.
#[derive(Debug, Default)]
pub struct Readiness {
    settled: AtomicBool,
    leading: AtomicBool,
    synced: AtomicBool,
}

impl Readiness {
    /// Leadership is known: `leading` or standing by.
    pub fn settle(&self, leading: bool) {
        self.leading.store(leading, Ordering::SeqCst);
        self.settled.store(true, Ordering::SeqCst);
    }

    /// The controllers' caches hold every object (their first lists are in).
    pub fn synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Why the process is not ready, or `None` when it is.
    pub fn not_ready(&self) -> Option<&'static str> {
        if !self.settled.load(Ordering::SeqCst) {
            return Some("leadership not settled yet");
        }
        if self.leading.load(Ordering::SeqCst) && !self.synced.load(Ordering::SeqCst) {
            return Some("leading, caches not synced yet");
        }
        None
    }
}

/// `/metrics`, `/healthz` and `/readyz` of one process.
pub struct Endpoints {
    /// What `/metrics` shows.
    pub metrics: Arc<Metrics>,
    /// What `/readyz` says.
    pub readiness: Arc<Readiness>,
}

impl Routes for Endpoints {
    async fn route(&self, req: hyper::Request<hyper::body::Incoming>) -> http::Response<Body> {
        if req.method() != http::Method::GET {
            return https_server::empty(http::StatusCode::METHOD_NOT_ALLOWED);
        }
        match req.uri().path() {
            "/metrics" => https_server::full(
                http::StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.metrics.encode(),
            ),
            "/healthz" => https_server::full(http::StatusCode::OK, "text/plain", "ok\n"),
            "/readyz" => match self.readiness.not_ready() {
                None => https_server::full(http::StatusCode::OK, "text/plain", "ok\n"),
                Some(why) => https_server::full(
                    http::StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("not ready: {why}\n"),
                ),
            },
            _ => https_server::empty(http::StatusCode::NOT_FOUND),
        }
    }
}

/// Serves `endpoints` on `addr` (plain HTTP) until the returned server is dropped.
pub async fn serve(addr: &str, endpoints: Endpoints) -> std::io::Result<HttpsServer> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    HttpsServer::spawn_plain(listener, Arc::new(endpoints), "metrics")
}
