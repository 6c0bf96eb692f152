//! Every deployment's DNS entries, shared: the Director publishes one records dataset for all
//! deployments and sends it to all agents of all deployments (`bosh-protocols.md` §4.10), so
//! a deploy needs what the other deployments last published and a version greater than any
//! blob before it, whichever deployment made that one.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::StoreFuture;
use super::shared_file::SharedFile;
use crate::lock::Lock;
use kubosh_core::state::{DnsDataset, DnsInstance};

/// Where deployments share their DNS entries. One publish at a time: each sees every
/// earlier one, so a newer version never holds less than an older one.
pub trait DnsRegistry: Send + Sync {
    /// Replaces `deployment`'s entries (`None`: the deployment is gone), takes a version
    /// above every earlier one and above `at_least` (the deployment's own last version), and
    /// returns the whole dataset under it.
    fn publish<'a>(
        &'a self,
        deployment: &'a str,
        instances: Option<Vec<DnsInstance>>,
        at_least: u64,
    ) -> StoreFuture<'a, DnsDataset>;
}

/// A registry in memory (tests, the simulated cloud, one process for every deployment).
#[derive(Debug, Default)]
pub struct MemoryDnsRegistry {
    dataset: Mutex<DnsDataset>,
}

impl DnsRegistry for MemoryDnsRegistry {
    fn publish<'a>(
        &'a self,
        deployment: &'a str,
        instances: Option<Vec<DnsInstance>>,
        at_least: u64,
    ) -> StoreFuture<'a, DnsDataset> {
        Box::pin(async move {
            let mut dataset = self
                .dataset
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            dataset.publish(deployment, instances, at_least);
            Ok(dataset.clone())
        })
    }
}

/// The lock every publish of a [`DirDnsRegistry`] takes.
pub const DNS_LOCK: &str = "lock:dns";

/// A registry in one JSON file (replaced atomically), for `kubosh deploy` and create-env:
/// each publish holds [`DNS_LOCK`] while it reads and rewrites the file, so deploys of
/// different deployments in different processes take turns.
#[derive(Clone)]
pub struct DirDnsRegistry {
    file: SharedFile,
}

impl DirDnsRegistry {
    /// A registry in `file`, serialized by `locks` (waiting at most `wait` for a publish of
    /// another process).
    pub fn new(file: impl Into<PathBuf>, locks: Arc<dyn Lock>, wait: Duration) -> DirDnsRegistry {
        DirDnsRegistry {
            file: SharedFile::new(file.into(), locks, DNS_LOCK, wait),
        }
    }
}

impl DnsRegistry for DirDnsRegistry {
    fn publish<'a>(
        &'a self,
        deployment: &'a str,
        instances: Option<Vec<DnsInstance>>,
        at_least: u64,
    ) -> StoreFuture<'a, DnsDataset> {
        let name = deployment.to_string();
        Box::pin(self.file.update(
            format!("publish DNS records of {deployment}"),
            move |dataset: &mut DnsDataset| {
                dataset.publish(&name, instances, at_least);
                dataset.clone()
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::FileLocks;

    fn inst(uuid: &str, agent: &str) -> DnsInstance {
        DnsInstance {
            uuid: uuid.into(),
            index: 0,
            group: "web".into(),
            az: None,
            addresses: vec![("default".into(), "10.0.0.5".into())],
            agent_id: Some(agent.into()),
        }
    }

    #[tokio::test]
    async fn versions_rise_across_deployments_and_entries_survive_in_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let locks: Arc<dyn Lock> = Arc::new(FileLocks::new(tmp.path().join("locks")));
        let registry = DirDnsRegistry::new(
            tmp.path().join("dns/registry.json"),
            locks.clone(),
            Duration::from_secs(5),
        );
        let a = registry
            .publish("a", Some(vec![inst("u1", "agent-a")]), 0)
            .await
            .unwrap();
        assert_eq!(a.version, 1);
        // b's own last version was 7 (published before it shared the registry).
        let b = registry
            .publish("b", Some(vec![inst("u2", "agent-b")]), 7)
            .await
            .unwrap();
        assert_eq!(b.version, 8);
        assert_eq!(b.agent_ids(), ["agent-a", "agent-b"]);
        // Another process's view of the same file.
        let again = DirDnsRegistry::new(
            tmp.path().join("dns/registry.json"),
            locks,
            Duration::from_secs(5),
        );
        let gone = again.publish("a", None, 1).await.unwrap();
        assert_eq!(gone.version, 9);
        assert_eq!(gone.deployments.keys().collect::<Vec<_>>(), ["b"]);
    }

    #[tokio::test]
    async fn the_memory_registry_keeps_every_deployment() {
        let registry = MemoryDnsRegistry::default();
        registry
            .publish("a", Some(vec![inst("u1", "x")]), 3)
            .await
            .unwrap();
        let both = registry.publish("b", Some(vec![]), 0).await.unwrap();
        assert_eq!(both.version, 5);
        assert_eq!(both.deployments.len(), 2);
    }
}
