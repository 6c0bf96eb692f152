//! The controller's Kubernetes client, with an optional request budget (client-go's QPS and
//! burst). By default there is none: the apiserver's API Priority and Fairness queues and
//! sheds what it cannot serve (answering 429, which the client retries), as SIG API
//! Machinery recommends and controller-runtime does since v0.21; a budget caps the rate on
//! the client as well, for apiservers shared with clients that need it kept low.

use std::time::Duration;

use kube::client::ClientBuilder;
use tower::limit::RateLimitLayer;

/// How many requests the client starts: on average `qps` per second, up to `burst` at once
/// after a quiet period; no limit when `qps` is not positive (the default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestBudget {
    /// Average requests per second (`0`: no client-side limit).
    pub qps: f64,
    /// Requests that may start at once (with a positive `qps`).
    pub burst: u64,
}

impl Default for RequestBudget {
    /// No client-side limit (the burst is client-go's usual 30, for when a rate is set).
    fn default() -> RequestBudget {
        RequestBudget {
            qps: 0.0,
            burst: 30,
        }
    }
}

impl RequestBudget {
    /// Whether the client limits its rate at all.
    pub fn is_limited(&self) -> bool {
        self.qps.is_finite() && self.qps > 0.0
    }

    /// The least time `requests` take within this budget (zero without a limit).
    pub fn floor(&self, requests: f64) -> Duration {
        if self.is_limited() {
            Duration::from_secs_f64((requests / self.qps).max(0.0))
        } else {
            Duration::ZERO
        }
    }

    /// The rate limit: `burst` requests per `burst / qps` seconds (a watch counts once, when
    /// it starts); `None` without a limit.
    fn layer(&self) -> Option<RateLimitLayer> {
        let burst = self.burst.max(1);
        self.is_limited()
            .then(|| RateLimitLayer::new(burst, Duration::from_secs_f64(burst as f64 / self.qps)))
    }
}

/// A client for `config` that starts requests within `budget`.
pub fn client(config: kube::Config, budget: RequestBudget) -> Result<kube::Client, kube::Error> {
    let builder = ClientBuilder::try_from(config)?;
    Ok(match budget.layer() {
        Some(layer) => builder.with_layer(&layer).build(),
        None => builder.build(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_budget_by_default_and_a_set_one_limits() {
        let none = RequestBudget::default();
        assert!(!none.is_limited());
        assert!(none.layer().is_none());
        assert_eq!(none.floor(1000.0), Duration::ZERO);
        let set = RequestBudget {
            qps: 20.0,
            burst: 30,
        };
        assert!(set.is_limited());
        assert!(set.layer().is_some());
        assert_eq!(set.floor(100.0), Duration::from_secs(5));
        for odd in [f64::NAN, f64::INFINITY, -1.0] {
            let budget = RequestBudget {
                qps: odd,
                burst: 30,
            };
            assert!(!budget.is_limited(), "{odd}");
        }
    }
}
