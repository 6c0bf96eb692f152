//! IP reservations every deployment of a director shares: an address is held by one instance
//! of one deployment at a time, however many deployments use the network
//! (`bosh-protocols.md` §4.9: `ip_addresses` is unique across the whole director).
//!
//! A deploy reads what the other deployments hold, allocates around it, then claims its
//! own: a claim that overlaps another deployment's reservation (a deploy of that deployment
//! got there first) changes nothing and names the overlaps, and the deploy allocates again.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::StoreFuture;
use super::shared_file::SharedFile;
use crate::lock::Lock;
use kubosh_core::state::{IpTable, Reservation};

/// Where deployments share their IP reservations.
pub trait IpRegistry: Send + Sync {
    /// The reservations of every deployment but `deployment`.
    fn held_elsewhere<'a>(&'a self, deployment: &'a str) -> StoreFuture<'a, Vec<Reservation>>;

    /// Makes `held` the reservations of `deployment` (an empty list releases them all),
    /// unless some overlap another deployment's: then nothing changes and those other
    /// reservations come back.
    fn claim<'a>(
        &'a self,
        deployment: &'a str,
        held: Vec<Reservation>,
    ) -> StoreFuture<'a, Vec<Reservation>>;
}

/// A registry in memory (tests, the simulated cloud).
#[derive(Debug, Default)]
pub struct MemoryIpRegistry {
    table: Mutex<IpTable>,
}

impl MemoryIpRegistry {
    fn table(&self) -> std::sync::MutexGuard<'_, IpTable> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl IpRegistry for MemoryIpRegistry {
    fn held_elsewhere<'a>(&'a self, deployment: &'a str) -> StoreFuture<'a, Vec<Reservation>> {
        Box::pin(async move { Ok(self.table().elsewhere(deployment)) })
    }

    fn claim<'a>(
        &'a self,
        deployment: &'a str,
        held: Vec<Reservation>,
    ) -> StoreFuture<'a, Vec<Reservation>> {
        Box::pin(async move { Ok(self.table().claim(deployment, held)) })
    }
}

/// The lock every claim of a [`DirIpRegistry`] takes.
pub const IP_LOCK: &str = "lock:ips";

/// A registry in one JSON file, for `kubosh deploy` and create-env: claims of deploys in
/// different processes take turns under [`IP_LOCK`].
#[derive(Clone)]
pub struct DirIpRegistry {
    file: SharedFile,
}

impl DirIpRegistry {
    /// A registry in `file`, serialized by `locks` (waiting at most `wait`).
    pub fn new(file: impl Into<PathBuf>, locks: Arc<dyn Lock>, wait: Duration) -> DirIpRegistry {
        DirIpRegistry {
            file: SharedFile::new(file.into(), locks, IP_LOCK, wait),
        }
    }
}

impl IpRegistry for DirIpRegistry {
    fn held_elsewhere<'a>(&'a self, deployment: &'a str) -> StoreFuture<'a, Vec<Reservation>> {
        Box::pin(async move {
            let table: IpTable = self.file.read().await?;
            Ok(table.elsewhere(deployment))
        })
    }

    fn claim<'a>(
        &'a self,
        deployment: &'a str,
        held: Vec<Reservation>,
    ) -> StoreFuture<'a, Vec<Reservation>> {
        let name = deployment.to_string();
        Box::pin(self.file.update(
            format!("reserve IPs of {deployment}"),
            move |table: &mut IpTable| table.claim(&name, held),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::FileLocks;

    fn held(deployment: &str, ip: &str, prefix: u8) -> Reservation {
        Reservation {
            ip: ip.parse().unwrap(),
            prefix,
            network: "default".into(),
            group: "web".into(),
            instance_id: format!("{deployment}-{ip}"),
            deployment: deployment.into(),
            is_static: false,
        }
    }

    #[test]
    fn a_claim_overlapping_another_deployment_changes_nothing_and_names_the_holder() {
        let mut table = IpTable::default();
        assert!(table.claim("a", vec![held("a", "10.0.0.5", 32)]).is_empty());
        // A /28 block that contains a's address.
        let conflicts = table.claim("b", vec![held("b", "10.0.0.0", 28)]);
        assert_eq!(conflicts, vec![held("a", "10.0.0.5", 32)]);
        assert!(!table.deployments.contains_key("b"));
        // A deployment may always re-claim its own addresses.
        assert!(table.claim("a", vec![held("a", "10.0.0.5", 32)]).is_empty());
        assert!(
            table
                .claim("b", vec![held("b", "10.0.0.16", 28)])
                .is_empty()
        );
        assert_eq!(table.elsewhere("a"), vec![held("b", "10.0.0.16", 28)]);
        // Releasing everything forgets the deployment.
        assert!(table.claim("a", vec![]).is_empty());
        assert_eq!(table.deployments.keys().collect::<Vec<_>>(), ["b"]);
    }

    #[tokio::test]
    async fn the_file_registry_is_shared_by_every_process_with_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let locks: Arc<dyn Lock> = Arc::new(FileLocks::new(tmp.path().join("locks")));
        let file = tmp.path().join("ips.json");
        let one = DirIpRegistry::new(&file, locks.clone(), Duration::from_secs(5));
        let two = DirIpRegistry::new(&file, locks, Duration::from_secs(5));
        assert!(one.held_elsewhere("a").await.unwrap().is_empty());
        assert!(
            one.claim("a", vec![held("a", "10.0.0.5", 32)])
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            two.held_elsewhere("b").await.unwrap(),
            vec![held("a", "10.0.0.5", 32)]
        );
        assert_eq!(
            two.claim("b", vec![held("b", "10.0.0.5", 32)])
                .await
                .unwrap(),
            vec![held("a", "10.0.0.5", 32)]
        );
    }
}
