//! Deployment locks as Leases on a real kube-apiserver: one holder at a time, BOSH's timeout
//! text naming the holder, release on drop, takeover of an expired lease, and the old holder
//! learning that it lost the lock.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kubosh_kube::lock::{Holder, LeaseLocks, Lock, deployment_lock};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_at_a_time_with_boshs_timeout_text() {
    let cp = support::control_plane().await;
    let ns = support::namespace("lock").await;
    let client = cp.client().await.unwrap();
    let locks = LeaseLocks::new(client.clone(), &ns);
    let name = deployment_lock("web");
    let first = Holder::new("41", "create deployment");
    let guard = locks.acquire(&name, &first, Duration::ZERO).await.unwrap();

    let lease: Lease = Api::namespaced(client.clone(), &ns)
        .get(&LeaseLocks::lease_name(&name))
        .await
        .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(first.uid.as_str()));
    assert_eq!(spec.lease_duration_seconds, Some(240));

    let second = Holder::new("42", "create deployment");
    let err = locks
        .acquire(&name, &second, Duration::from_millis(700))
        .await
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!(
            "Failed to acquire lock for lock:deployment:web uid: {}. Locking task id is 41, description: 'create deployment'",
            second.uid
        )
    );
    // Another deployment's lock is independent.
    let _db = locks
        .acquire(&deployment_lock("db"), &second, Duration::ZERO)
        .await
        .unwrap();

    drop(guard);
    let again = locks
        .acquire(&name, &second, Duration::from_secs(5))
        .await
        .expect("free once the holder lets go");
    assert!(!again.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_taken_over_and_its_old_holder_loses_it() {
    let cp = support::control_plane().await;
    let ns = support::namespace("expire").await;
    let client = cp.client().await.unwrap();
    let name = deployment_lock("web");
    // The first holder stops renewing in time (renewal every 3 s, expiry 1 s).
    let slow = LeaseLocks::new(client.clone(), &ns)
        .with_periods(Duration::from_secs(1), Duration::from_secs(3));
    let old = slow
        .acquire(
            &name,
            &Holder::new("1", "create deployment"),
            Duration::ZERO,
        )
        .await
        .unwrap();
    let locks = LeaseLocks::new(client.clone(), &ns);
    let new_holder = Holder::new("2", "create deployment");
    let new = locks
        .acquire(&name, &new_holder, Duration::from_secs(10))
        .await
        .expect("an expired lease is taken over");
    tokio::time::timeout(Duration::from_secs(10), old.lost())
        .await
        .expect("the old holder learns it lost the lock");
    assert!(old.is_lost() && !new.is_lost());
    let leases: Api<Lease> = Api::namespaced(client, &ns);
    let lease = leases.get(&LeaseLocks::lease_name(&name)).await.unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some(new_holder.uid.as_str())
    );
    assert_eq!(spec.lease_transitions, Some(1));
    drop(old); // must not delete the new holder's lease
    tokio::time::sleep(Duration::from_millis(500)).await;
    let still = leases.get(&LeaseLocks::lease_name(&name)).await.unwrap();
    assert_eq!(
        still.spec.unwrap().holder_identity.as_deref(),
        Some(new_holder.uid.as_str())
    );
}
