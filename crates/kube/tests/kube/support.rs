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

/// A client acting as ServiceAccount `name` of `namespace`, bound to a Role of `rules`
/// there, with a real token from the TokenRequest API. Returned once the apiserver's RBAC
/// authorizer, which reads roles from an informer cache, allows `probe` (`[verb, resource]`
/// granted by `rules`) in `namespace`.
pub async fn service_account_client(
    namespace: &str,
    name: &str,
    rules: serde_json::Value,
    probe: [&str; 2],
) -> kube::Client {
    use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kube::api::{Api, PostParams};
    use serde_json::json;

    let cp = control_plane().await;
    let admin = cp.client().await.unwrap();
    let pp = PostParams::default();
    Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).unwrap(),
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin, namespace)
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let token = cp.service_account_token(namespace, name).await.unwrap();
    let client = cp.client_for_token(&token).await.unwrap();
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({"spec": {
        "resourceAttributes": {"namespace": namespace, "verb": probe[0], "resource": probe[1]},
    }}))
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
            .create(&pp, &review)
            .await
            .unwrap();
        if answer.status.is_some_and(|s| s.allowed) {
            return client;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the role's grant never took effect"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
