//! The IP, DNS and link registries the deployments of one namespace share ([`IpRegistry`],
//! [`DnsRegistry`], [`LinkRegistry`]), kept in the apiserver so every replica, on any node,
//! sees the same reservations, records and shared link providers. A namespace is one director: its deployments share a cloud
//! config, stemcells, compiled packages, addresses and one DNS dataset.
//!
//! Each deployment's share is one `ConfigMap` in the namespace (labelled
//! `kubosh.io/registry: ips`, `dns` or `links`, named after the deployment, the deployment's
//! name in the annotation of the same key), so a registry grows by deployment rather than
//! hitting one object's size limit. Every claim and publish that changes something holds a
//! Lease lock (`lock:ips`, `lock:dns`) while it reads the other shares and writes its own,
//! so two deploys never both take one address. DNS versions increase across all the
//! namespace's deployments: the newest is kept in the `kubosh-dns-version` ConfigMap.
//! A deployment's shared link providers are written only by its own deploys (under its
//! deployment lock), and only when they changed: the controller watches these ConfigMaps to
//! redeploy the deployments that consume from it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::lock::{Holder, Lock};
use crate::state::{FIELD_MANAGER, is_not_found};
use kubosh_core::plan::ip::Reservation;
use kubosh_engine::state::{
    DnsDataset, DnsInstance, DnsRegistry, IpRegistry, IpTable, LinkRegistry, LinkTable, SharedLink,
    StoreError, StoreFuture,
};

/// The label naming which registry a ConfigMap belongs to (its annotation of the same key
/// names the deployment whose share it holds).
pub const REGISTRY_LABEL: &str = "kubosh.io/registry";
/// The registry of shared link providers (the value of [`REGISTRY_LABEL`]).
pub const LINKS: &str = "links";
/// The key of a share's JSON document.
const DATA_KEY: &str = "share.json";
/// The ConfigMap holding the newest DNS version.
const DNS_VERSION: &str = "kubosh-dns-version";

/// The registries of one namespace.
#[derive(Clone)]
pub struct KubeRegistries {
    client: kube::Client,
    namespace: String,
    locks: Arc<dyn Lock>,
    wait: Duration,
}

impl KubeRegistries {
    /// The registries of `namespace`, serialized by `locks` (Leases there), each update
    /// waiting at most `wait` for its lock.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        locks: Arc<dyn Lock>,
        wait: Duration,
    ) -> KubeRegistries {
        KubeRegistries {
            client,
            namespace: namespace.to_string(),
            locks,
            wait,
        }
    }

    fn shares(&self, registry: &'static str) -> Shares {
        Shares {
            api: Api::namespaced(self.client.clone(), &self.namespace),
            registry,
            locks: self.locks.clone(),
            wait: self.wait,
        }
    }

    /// The namespace's IP registry.
    pub fn ip_registry(&self) -> Arc<dyn IpRegistry> {
        Arc::new(KubeIpRegistry(self.shares("ips")))
    }

    /// The namespace's DNS registry.
    pub fn dns_registry(&self) -> Arc<dyn DnsRegistry> {
        Arc::new(KubeDnsRegistry(self.shares("dns")))
    }

    /// The namespace's registry of shared link providers.
    pub fn link_registry(&self) -> Arc<dyn LinkRegistry> {
        Arc::new(KubeLinkRegistry(self.shares(LINKS)))
    }
}

/// One registry's shares.
struct Shares {
    api: Api<ConfigMap>,
    registry: &'static str,
    locks: Arc<dyn Lock>,
    wait: Duration,
}

fn io(what: impl std::fmt::Display, e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(format!("{what}: {e}"))
}

impl Shares {
    fn object_name(&self, deployment: &str) -> String {
        let readable = format!("kubosh-{}-{deployment}", self.registry);
        crate::names::object_name(&readable, &format!("{}\0{deployment}", self.registry))
    }

    /// Every share by deployment, as last written.
    async fn read_all<T: DeserializeOwned>(&self) -> Result<BTreeMap<String, T>, StoreError> {
        let selector = format!("{REGISTRY_LABEL}={}", self.registry);
        let list = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| io(format!("listing the {} registry", self.registry), e))?;
        let mut out = BTreeMap::new();
        for map in list {
            let Some(key) = map.annotations().get(REGISTRY_LABEL).cloned() else {
                continue;
            };
            let text = map
                .data
                .as_ref()
                .and_then(|d| d.get(DATA_KEY))
                .cloned()
                .unwrap_or_default();
            let share = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                record: format!("ConfigMap {}", map.name_any()),
                reason: e.to_string(),
            })?;
            out.insert(key, share);
        }
        Ok(out)
    }

    /// The share of `deployment` as last written, if there is one.
    async fn read_one<T: DeserializeOwned>(
        &self,
        deployment: &str,
    ) -> Result<Option<T>, StoreError> {
        let name = self.object_name(deployment);
        let map =
            (self.api.get_opt(&name).await).map_err(|e| io(format!("ConfigMap {name}"), e))?;
        let Some(text) = map.and_then(|m| m.data?.remove(DATA_KEY)) else {
            return Ok(None);
        };
        let share = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
            record: format!("ConfigMap {name}"),
            reason: e.to_string(),
        })?;
        Ok(Some(share))
    }

    /// Writes the share of `deployment`, or removes it (`None`).
    async fn write<T: Serialize>(
        &self,
        deployment: &str,
        share: Option<&T>,
    ) -> Result<(), StoreError> {
        let name = self.object_name(deployment);
        let what = format!("ConfigMap {name}");
        let Some(share) = share else {
            return match self.api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(e) if is_not_found(&e) => Ok(()),
                Err(e) => Err(io(what, e)),
            };
        };
        let text = serde_json::to_string(share).map_err(|e| io(&what, e))?;
        let object = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "labels": {REGISTRY_LABEL: self.registry},
                "annotations": {REGISTRY_LABEL: deployment},
            },
            "data": {DATA_KEY: text},
        });
        self.api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .map_err(|e| io(what, e))?;
        Ok(())
    }

    /// Runs `update` holding this registry's lock.
    async fn locked<R>(
        &self,
        what: String,
        update: impl AsyncFnOnce(&Shares) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let name = format!("lock:{}", self.registry);
        let holder = Holder::new(&name, what);
        let _guard = self
            .locks
            .acquire(&name, &holder, self.wait)
            .await
            .map_err(|e| StoreError::Io(e.to_string()))?;
        update(self).await
    }
}

/// [`IpRegistry`] in ConfigMaps (see the module documentation).
struct KubeIpRegistry(Shares);

/// A deployment's share after a claim changed it (`None`: it holds nothing any more).
type ChangedShare = Option<Vec<Reservation>>;

impl KubeIpRegistry {
    /// The table of every deployment's reservations.
    async fn table(&self) -> Result<IpTable, StoreError> {
        Ok(IpTable {
            deployments: self.0.read_all().await?,
        })
    }

    /// What claiming `held` for `deployment` does to the shares as they are now: the other
    /// deployments' overlapping reservations, and the deployment's share if the claim
    /// changes it (a claim with conflicts changes nothing).
    async fn claim_now(
        &self,
        deployment: &str,
        held: Vec<Reservation>,
    ) -> Result<(Vec<Reservation>, Option<ChangedShare>), StoreError> {
        let mut table = self.table().await?;
        let before = table.deployments.get(deployment).cloned();
        let conflicts = table.claim(deployment, held);
        let after = table.deployments.remove(deployment);
        Ok((conflicts, (after != before).then_some(after)))
    }
}

impl IpRegistry for KubeIpRegistry {
    fn held_elsewhere<'a>(&'a self, deployment: &'a str) -> StoreFuture<'a, Vec<Reservation>> {
        Box::pin(async move {
            let table = self.table().await?;
            Ok(table.elsewhere(deployment))
        })
    }

    fn claim<'a>(
        &'a self,
        deployment: &'a str,
        held: Vec<Reservation>,
    ) -> StoreFuture<'a, Vec<Reservation>> {
        Box::pin(async move {
            // A claim of what the deployment holds already (a deploy that keeps its
            // addresses) writes nothing and takes no lock: only this deployment's deploys
            // write its share, and the shares never overlap, so nothing can race it. Its
            // own share (one read, not a list of every share: a list waits for the
            // apiserver's cache to catch up) decides that: no other deployment can have
            // claimed any of it since, as every claim that writes checks every share under
            // the lock.
            if let Some(own) = self.0.read_one::<Vec<Reservation>>(deployment).await? {
                let before = BTreeMap::from([(deployment.to_string(), own)]);
                let mut table = IpTable {
                    deployments: before.clone(),
                };
                if table.claim(deployment, held.clone()).is_empty() && table.deployments == before {
                    return Ok(vec![]);
                }
            }
            let (conflicts, change) = self.claim_now(deployment, held.clone()).await?;
            if conflicts.is_empty() && change.is_none() {
                return Ok(conflicts);
            }
            let what = format!("reserve IPs of {deployment}");
            self.0
                .locked(what, async |shares| {
                    let (conflicts, change) = self.claim_now(deployment, held).await?;
                    if let Some(share) = change {
                        shares.write(deployment, share.as_ref()).await?;
                    }
                    Ok(conflicts)
                })
                .await
        })
    }
}

/// [`DnsRegistry`] in ConfigMaps (see the module documentation).
struct KubeDnsRegistry(Shares);

impl DnsRegistry for KubeDnsRegistry {
    fn publish<'a>(
        &'a self,
        deployment: &'a str,
        instances: Option<Vec<DnsInstance>>,
        at_least: u64,
    ) -> StoreFuture<'a, DnsDataset> {
        Box::pin(async move {
            let what = format!("publish DNS records of {deployment}");
            self.0
                .locked(what, async |shares| {
                    // Under the lock, each pair at once: one round trip each, not two.
                    let (version, deployments) = tokio::try_join!(
                        async {
                            match shares.api.get_opt(DNS_VERSION).await {
                                Ok(map) => Ok(map
                                    .and_then(|m| m.data?.get("version")?.parse::<u64>().ok())
                                    .unwrap_or(0)),
                                Err(e) => Err(io(format!("ConfigMap {DNS_VERSION}"), e)),
                            }
                        },
                        shares.read_all(),
                    )?;
                    let mut dataset = DnsDataset {
                        version,
                        deployments,
                    };
                    dataset.publish(deployment, instances, at_least);
                    let object = json!({
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": DNS_VERSION},
                        "data": {"version": dataset.version.to_string()},
                    });
                    let params = PatchParams::apply(FIELD_MANAGER).force();
                    tokio::try_join!(
                        shares.write(deployment, dataset.deployments.get(deployment)),
                        async {
                            (shares.api)
                                .patch(DNS_VERSION, &params, &Patch::Apply(&object))
                                .await
                                .map_err(|e| io(format!("ConfigMap {DNS_VERSION}"), e))
                        },
                    )?;
                    Ok(dataset)
                })
                .await
        })
    }
}

/// [`LinkRegistry`] in ConfigMaps (see the module documentation): one read per deployment
/// consumed from, and a publish that writes only a changed share.
struct KubeLinkRegistry(Shares);

impl LinkRegistry for KubeLinkRegistry {
    fn shared<'a>(&'a self, names: &'a BTreeSet<String>) -> StoreFuture<'a, LinkTable> {
        Box::pin(async move {
            let mut table = LinkTable::default();
            for name in names {
                if let Some(links) = self.0.read_one::<Vec<SharedLink>>(name).await? {
                    table.publish(name, Some(links));
                }
            }
            Ok(table)
        })
    }

    fn publish<'a>(
        &'a self,
        deployment: &'a str,
        links: Option<Vec<SharedLink>>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            if links.is_some() && self.0.read_one(deployment).await? == links {
                return Ok(());
            }
            self.0.write(deployment, links.as_ref()).await
        })
    }
}
