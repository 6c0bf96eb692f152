//! The IP and DNS registries in the apiserver, as two controller replicas see them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kubosh_core::plan::ip::Reservation;
use kubosh_engine::state::DnsInstance;
use kubosh_kube::lock::LeaseLocks;
use kubosh_kube::registry::KubeRegistries;

use crate::support;

fn held(deployment: &str, ip: &str) -> Reservation {
    Reservation {
        ip: ip.parse().unwrap(),
        prefix: 32,
        network: "default".into(),
        group: "web".into(),
        instance_id: format!("{deployment}-{ip}"),
        deployment: deployment.into(),
        is_static: false,
    }
}

fn instance(uuid: &str, ip: &str) -> DnsInstance {
    DnsInstance {
        uuid: uuid.into(),
        index: 0,
        group: "web".into(),
        az: None,
        addresses: vec![("default".into(), ip.into())],
        agent_id: Some(format!("agent-{uuid}")),
    }
}

/// A replica's view of `namespace`'s registries (its own client and locks).
async fn replica(namespace: &str) -> KubeRegistries {
    let client = support::control_plane().await.client().await.unwrap();
    let locks = Arc::new(LeaseLocks::new(client.clone(), namespace));
    KubeRegistries::new(client, namespace, locks, Duration::from_secs(30))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_are_shared_by_replicas_and_never_given_twice() {
    let ns = support::namespace("ips").await;
    let (one, two) = (
        replica(&ns).await.ip_registry(),
        replica(&ns).await.ip_registry(),
    );

    assert!(
        one.claim("a", vec![held("a", "10.0.0.5")])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        two.held_elsewhere("b").await.unwrap(),
        vec![held("a", "10.0.0.5")]
    );
    // Taken elsewhere: refused, naming the holder, and nothing changes.
    let conflicts = two.claim("b", vec![held("b", "10.0.0.5"), held("b", "10.0.0.6")]);
    assert_eq!(conflicts.await.unwrap(), vec![held("a", "10.0.0.5")]);
    assert!(one.held_elsewhere("a").await.unwrap().is_empty());

    // Two deploys claiming one address at once: exactly one gets it.
    let (x, y) = tokio::join!(
        one.claim("c", vec![held("c", "10.0.0.9")]),
        two.claim("d", vec![held("d", "10.0.0.9")]),
    );
    let winners = [x.unwrap(), y.unwrap()]
        .iter()
        .filter(|c| c.is_empty())
        .count();
    assert_eq!(winners, 1);

    // Another namespace is another director: its addresses are its own.
    let other = support::namespace("ips-other").await;
    let elsewhere = replica(&other).await.ip_registry();
    assert!(
        elsewhere
            .claim("b", vec![held("b", "10.0.0.5")])
            .await
            .unwrap()
            .is_empty()
    );

    // Claiming what it holds, in any order, writes nothing and waits for no lock (another
    // replica holds `lock:ips` meanwhile).
    let both = vec![held("a", "10.0.0.5"), held("a", "10.0.0.7")];
    assert!(one.claim("a", both.clone()).await.unwrap().is_empty());
    let shares = Api::<ConfigMap>::namespaced(one_client().await, &ns);
    let version = |maps: &[ConfigMap]| -> Vec<Option<String>> {
        maps.iter()
            .map(|m| m.metadata.resource_version.clone())
            .collect()
    };
    let ips = ListParams::default().labels("kubosh.io/registry=ips");
    let written = version(&shares.list(&ips).await.unwrap().items);
    let locks = LeaseLocks::new(one_client().await, &ns);
    let holder = kubosh_kube::lock::Holder::new("lock:ips", "another deploy");
    let _held =
        kubosh_kube::lock::Lock::acquire(&locks, "lock:ips", &holder, Duration::from_secs(5))
            .await
            .unwrap();
    let reversed: Vec<Reservation> = both.into_iter().rev().collect();
    let quick = tokio::time::timeout(Duration::from_secs(5), two.claim("a", reversed));
    assert!(quick.await.expect("no lock waited for").unwrap().is_empty());
    assert_eq!(version(&shares.list(&ips).await.unwrap().items), written);
    drop(_held);

    // Releasing everything removes the deployment's share.
    assert!(one.claim("a", vec![]).await.unwrap().is_empty());
    let maps = Api::<ConfigMap>::namespaced(one_client().await, &ns)
        .list(&ListParams::default().labels("kubosh.io/registry=ips"))
        .await
        .unwrap();
    assert_eq!(maps.items.len(), 1, "only the winner of c/d holds a share");
}

async fn one_client() -> kube::Client {
    support::control_plane().await.client().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_versions_only_grow_and_every_deployment_is_in_the_dataset() {
    let ns = support::namespace("dns").await;
    let (one, two) = (
        replica(&ns).await.dns_registry(),
        replica(&ns).await.dns_registry(),
    );

    let first = one
        .publish("a", Some(vec![instance("a0", "10.0.0.5")]), 0)
        .await
        .unwrap();
    assert_eq!(first.version, 1);
    let second = two
        .publish("b", Some(vec![instance("b0", "10.0.0.6")]), 0)
        .await
        .unwrap();
    assert_eq!(second.version, 2);
    assert_eq!(second.deployments.keys().collect::<Vec<_>>(), ["a", "b"]);
    // A deployment's own last version is a floor.
    let third = one
        .publish("a", Some(vec![instance("a0", "10.0.0.7")]), 10)
        .await
        .unwrap();
    assert_eq!(third.version, 11);
    assert_eq!(third.deployments["a"][0].addresses[0].1, "10.0.0.7");
    // A deployment gone: its records leave, the version still grows.
    let fourth = two.publish("a", None, 0).await.unwrap();
    assert_eq!(fourth.version, 12);
    assert_eq!(fourth.deployments.keys().collect::<Vec<_>>(), ["b"]);
    assert_eq!(fourth.agent_ids(), ["agent-b0"]);

    // Concurrent publishes each get their own version.
    let (x, y) = tokio::join!(
        one.publish("c", Some(vec![instance("c0", "10.0.0.8")]), 0),
        two.publish("d", Some(vec![instance("d0", "10.0.0.9")]), 0),
    );
    let mut versions = [x.unwrap().version, y.unwrap().version];
    versions.sort();
    assert_eq!(versions, [13, 14]);
}
