//! Shared fixtures for integration tests: one control plane per test binary, a namespace per
//! test.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use kubosh_devenv::ControlPlane;

/// The control plane shared by the tests of this binary, started on first use with the
/// generated CRDs installed.
pub async fn control_plane() -> &'static ControlPlane {
    ControlPlane::shared(kubosh_kube::api::crds)
        .await
        .expect("start etcd + kube-apiserver with the CRDs")
}

/// A fresh namespace for one test.
pub async fn namespace(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    control_plane()
        .await
        .create_namespace(&name)
        .await
        .expect("create namespace");
    name
}
