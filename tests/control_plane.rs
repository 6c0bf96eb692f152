//! The test control plane is real: etcd + kube-apiserver with RBAC.

mod support;

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
