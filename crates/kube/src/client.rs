//! The controller's Kubernetes client, with an explicit request budget (client-go's QPS and
//! burst): kube's client has no limiter of its own, and a controller reconciling hundreds of
//! deployments must not flood the apiserver when they all wake at once.

use std::time::Duration;

use kube::client::ClientBuilder;
use tower::limit::RateLimitLayer;

/// How many requests the client starts: on average `qps` per second, up to `burst` at once
/// after a quiet period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestBudget {
    /// Average requests per second.
    pub qps: f64,
    /// Requests that may start at once.
    pub burst: u64,
}

impl Default for RequestBudget {
    /// controller-runtime's defaults: 20 per second, bursts of 30.
    fn default() -> RequestBudget {
        RequestBudget {
            qps: 20.0,
            burst: 30,
        }
    }
}

impl RequestBudget {
    /// The rate limit: `burst` requests per `burst / qps` seconds (a watch counts once, when
    /// it starts).
    fn layer(&self) -> RateLimitLayer {
        let burst = self.burst.max(1);
        let qps = if self.qps.is_finite() && self.qps > 0.0 {
            self.qps
        } else {
            RequestBudget::default().qps
        };
        RateLimitLayer::new(burst, Duration::from_secs_f64(burst as f64 / qps))
    }
}

/// A client for `config` that starts requests within `budget`.
pub fn client(config: kube::Config, budget: RequestBudget) -> Result<kube::Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&budget.layer())
        .build())
}
