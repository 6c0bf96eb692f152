//! Shared fixtures for integration tests: one control plane per test binary, a namespace per
//! test.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use kubosh_devenv::ControlPlane;
use tokio::sync::OnceCell;

static CONTROL_PLANE: OnceCell<ControlPlane> = OnceCell::const_new();

/// The control plane shared by the tests of this binary, started on first use with the
/// generated CRDs installed.
pub async fn control_plane() -> &'static ControlPlane {
    CONTROL_PLANE
        .get_or_init(|| async {
            let cp = ControlPlane::start()
                .await
                .expect("start etcd + kube-apiserver");
            cp.install_crds(&kubosh_kube::api::crds())
                .await
                .expect("install CRDs");
            cp
        })
        .await
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
