//! The controller's client keeps to its request budget.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubosh_kube::client::{RequestBudget, client};

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_burst_wait_for_the_budget() {
    let cp = support::control_plane().await;
    let kubeconfig = Kubeconfig::read_from(cp.kubeconfig_path()).unwrap();
    let options = KubeConfigOptions {
        context: Some("admin".into()),
        ..KubeConfigOptions::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    // 10 per second, 5 at once: 15 requests need at least two more windows of 0.5 s.
    let budget = RequestBudget {
        qps: 10.0,
        burst: 5,
    };
    let limited = client(config, budget).unwrap();
    let namespaces: Api<Namespace> = Api::all(limited);
    let start = Instant::now();
    for _ in 0..15 {
        namespaces.get("default").await.unwrap();
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(950),
        "15 requests in {took:?}"
    );
}
