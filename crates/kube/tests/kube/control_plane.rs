//! The test control plane is real: etcd + kube-apiserver with RBAC.

use crate::support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_stores_and_returns_objects() {
    let cp = support::control_plane().await;
    let ns = support::namespace("store").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().await.unwrap(), &ns);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "probe"}, "data": {"k": "v"}
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let back = api.get("probe").await.unwrap();
    assert_eq!(back.data.unwrap()["k"], "v");
}

/// A ServiceAccount bound to a narrow Role can do what it is granted and gets 403 beyond it,
/// with a real token from the TokenRequest API.
#[tokio::test(flavor = "multi_thread")]
async fn least_privilege_service_account_gets_403_beyond_its_role() {
    use k8s_openapi::api::core::v1::Secret;

    let ns = support::namespace("rbac").await;
    let rules = serde_json::json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}
    ]);
    let sa_client =
        support::service_account_client(&ns, "reader", rules, ["list", "configmaps"]).await;
    let pp = PostParams::default();

    // Granted: list config maps in its namespace.
    Api::<ConfigMap>::namespaced(sa_client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap();
    // Not granted: write config maps, read secrets, or look into another namespace.
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
    let denied = [
        Api::<ConfigMap>::namespaced(sa_client.clone(), &ns)
            .create(&pp, &cm)
            .await
            .err(),
        Api::<Secret>::namespaced(sa_client.clone(), &ns)
            .list(&Default::default())
            .await
            .err(),
        Api::<ConfigMap>::namespaced(sa_client.clone(), "default")
            .list(&Default::default())
            .await
            .err(),
    ];
    for (i, err) in denied.into_iter().enumerate() {
        match err {
            Some(kube::Error::Api(status)) => assert_eq!(status.code, 403, "case {i}: {status:?}"),
            other => panic!("case {i}: expected 403 Forbidden, got {other:?}"),
        }
    }
}
