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
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

    let cp = support::control_plane().await;
    let ns = support::namespace("rbac").await;
    let admin = cp.client().await.unwrap();
    let pp = PostParams::default();
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "reader"}})).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create(&pp, &sa)
        .await
        .unwrap();
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "configmap-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&pp, &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&pp, &binding)
        .await
        .unwrap();

    let request: TokenRequest =
        serde_json::from_value(serde_json::json!({"spec": {"audiences": []}})).unwrap();
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create_token_request("reader", &pp, &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .expect("a token");
    let sa_client = cp.client_for_token(&token).await.unwrap();

    // Granted: list config maps in its namespace. The apiserver's RBAC authorizer reads
    // roles from an informer cache, so a role created a moment ago may not be seen yet: wait
    // (bounded) until the grant takes effect.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Api::<ConfigMap>::namespaced(sa_client.clone(), &ns)
            .list(&Default::default())
            .await
        {
            Ok(_) => break,
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::debug!("grant not in effect yet: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the role's grant never took effect: {e}"),
        }
    }
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
