//! The link providers the deployments of a director share (`shared: true`): each deployment
//! publishes its own after a successful deploy (withdraws them when deleted), and a deploy
//! reads those of the deployments it consumes from (`consumes: {x: {deployment: other}}`).
//! One writer per share (a deployment's deploys hold its lock), so publishing needs no
//! registry-wide lock but the file's.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::StoreFuture;
use super::shared_file::SharedFile;
use crate::lock::Lock;
use kubosh_core::state::{LinkTable, SharedLink};

/// Where deployments share their link providers.
pub trait LinkRegistry: Send + Sync {
    /// What the deployments `names` published (those that did).
    fn shared<'a>(&'a self, names: &'a BTreeSet<String>) -> StoreFuture<'a, LinkTable>;

    /// Replaces `deployment`'s share (`None`: the deployment is gone); an unchanged share is
    /// not written again.
    fn publish<'a>(
        &'a self,
        deployment: &'a str,
        links: Option<Vec<SharedLink>>,
    ) -> StoreFuture<'a, ()>;
}

/// A registry in memory (tests, the simulated cloud).
#[derive(Debug, Default)]
pub struct MemoryLinkRegistry {
    table: Mutex<LinkTable>,
}

impl LinkRegistry for MemoryLinkRegistry {
    fn shared<'a>(&'a self, names: &'a BTreeSet<String>) -> StoreFuture<'a, LinkTable> {
        let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let shared = table.only(names);
        Box::pin(async move { Ok(shared) })
    }

    fn publish<'a>(
        &'a self,
        deployment: &'a str,
        links: Option<Vec<SharedLink>>,
    ) -> StoreFuture<'a, ()> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        table.publish(deployment, links);
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The lock every publish of a [`DirLinkRegistry`] takes.
pub const LINK_LOCK: &str = "lock:links";

/// A registry in one JSON file (replaced atomically), for `kubosh deploy`: publishes of
/// deploys in different processes take turns under [`LINK_LOCK`]; reads need no lock.
#[derive(Clone)]
pub struct DirLinkRegistry {
    file: SharedFile,
}

impl DirLinkRegistry {
    /// A registry in `file`, serialized by `locks` (waiting at most `wait`).
    pub fn new(file: impl Into<PathBuf>, locks: Arc<dyn Lock>, wait: Duration) -> DirLinkRegistry {
        DirLinkRegistry {
            file: SharedFile::new(file.into(), locks, LINK_LOCK, wait),
        }
    }
}

impl LinkRegistry for DirLinkRegistry {
    fn shared<'a>(&'a self, names: &'a BTreeSet<String>) -> StoreFuture<'a, LinkTable> {
        Box::pin(async move { Ok(self.file.read::<LinkTable>().await?.only(names)) })
    }

    fn publish<'a>(
        &'a self,
        deployment: &'a str,
        links: Option<Vec<SharedLink>>,
    ) -> StoreFuture<'a, ()> {
        let what = format!("publish the shared links of {deployment}");
        let name = deployment.to_string();
        let change = move |table: &mut LinkTable| table.publish(&name, links);
        Box::pin(self.file.update(what, change))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::FileLocks;

    fn link(deployment: &str, address: &str) -> SharedLink {
        serde_json::from_value(serde_json::json!({
            "provider": {
                "deployment": deployment, "instance_group": "zk", "job": "zookeeper",
                "original_name": "conn", "name": "conn", "type": "zookeeper", "shared": true,
                "consumable": true, "custom": false, "property_names": [],
                "networks": ["default"], "default_network": "default",
            },
            "content": {
                "deployment_name": deployment, "domain": "bosh", "default_network": "default",
                "networks": ["default"], "instance_group": "zk", "properties": {},
                "use_short_dns_addresses": false, "use_dns_addresses": false,
                "use_link_dns_names": false,
                "instances": [{
                    "name": "zk", "id": "u1", "index": 0, "bootstrap": true, "az": null,
                    "address": address, "addresses": {"default": address},
                    "dns_addresses": {"default": address},
                }],
            },
        }))
        .unwrap()
    }

    /// A process's view of the registry of the director in `dir`.
    fn process(dir: &std::path::Path) -> DirLinkRegistry {
        let locks = Arc::new(FileLocks::new(dir.join("locks")));
        DirLinkRegistry::new(dir.join("links.json"), locks, Duration::from_secs(5))
    }

    #[tokio::test]
    async fn shares_survive_in_the_file_and_a_deleted_deployment_takes_its_own() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = process(tmp.path());
        let names: BTreeSet<String> = ["zk".to_string(), "other".to_string()].into();
        assert_eq!(registry.shared(&names).await.unwrap(), LinkTable::default());
        registry
            .publish("zk", Some(vec![link("zk", "10.0.0.5")]))
            .await
            .unwrap();
        registry.publish("other", Some(vec![])).await.unwrap();
        // Another process's view of the same file.
        let again = process(tmp.path());
        let table = again.shared(&names).await.unwrap();
        let conn = &table.others()[1].providers[0];
        assert_eq!(
            table.content(conn).unwrap().instances[0].address,
            "10.0.0.5"
        );
        let only_zk = again.shared(&["zk".to_string()].into()).await.unwrap();
        assert_eq!(only_zk.deployments.keys().collect::<Vec<_>>(), ["zk"]);
        again.publish("zk", None).await.unwrap();
        let left = registry.shared(&names).await.unwrap();
        assert_eq!(left.deployments.keys().collect::<Vec<_>>(), ["other"]);
    }

    #[tokio::test]
    async fn the_memory_registry_answers_what_was_published() {
        let registry = MemoryLinkRegistry::default();
        let before = registry.shared(&["zk".to_string()].into()).await.unwrap();
        registry
            .publish("zk", Some(vec![link("zk", "10.0.0.5")]))
            .await
            .unwrap();
        let after = registry.shared(&["zk".to_string()].into()).await.unwrap();
        assert_ne!(before.digest(), after.digest());
    }
}
