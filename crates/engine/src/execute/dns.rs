//! The seed's "Update and propagate DNS records": the DNS records of all the director's
//! deployments published and sent to every agent (`bosh-protocols.md` §4.10), as instances
//! get, change and lose VMs. A deployment's records are its instances as they are (each with
//! a VM, at its VM's addresses, naming its agent), never as planned: [`live_entries`].

use futures::StreamExt;

use crate::progress::{self, Milestone};
use crate::state::{DeploymentMeta, DeploymentState, InstanceRecord, InstanceState, Write};
use crate::{Engine, EngineError};
use kubosh_core::plan::dns::{self, DnsInstance};

/// How long `sync_dns` waits for an agent (the Director's broadcast waits 10 s in all).
pub const DNS_SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The DNS entries of `records` as they are: one per instance that has a VM and is not to
/// be detached, at the addresses its VM has (dynamic ones as its agent reported them),
/// naming its agent. An instance without a VM (deleted, detached, vanished, its new VM not
/// made yet) has none.
pub(crate) fn live_entries<'a>(
    records: impl IntoIterator<Item = &'a InstanceRecord>,
) -> Vec<DnsInstance> {
    records
        .into_iter()
        .filter(|r| r.state != InstanceState::Detached)
        .filter_map(|r| {
            let vm = r.vm.as_ref()?;
            let addresses = match &vm.networks {
                serde_json::Value::Object(networks) => networks
                    .iter()
                    .filter_map(|(net, s)| Some((net.clone(), s.get("ip")?.as_str()?.to_string())))
                    .collect(),
                _ => Vec::new(),
            };
            Some(DnsInstance {
                uuid: r.uuid.clone(),
                index: r.index,
                group: r.group.clone(),
                az: r.az.clone(),
                addresses,
                agent_id: Some(vm.agent_id.clone()),
            })
        })
        .collect()
}

impl Engine {
    /// Publishes `instances` ([`live_entries`]) as `deployment`'s records when they differ
    /// from what it published last (`meta`, updated and written): the records dataset of all
    /// deployments, and `sync_dns` to every VM of every deployment, each agent given at most
    /// [`DNS_SYNC_WAIT`] (the Director's broadcast wait). A deployment that never published
    /// publishes nothing while it has no instance.
    pub(crate) async fn publish_dns(
        &self,
        deployment: &str,
        instances: Vec<DnsInstance>,
        meta: &mut DeploymentMeta,
    ) -> Result<(), EngineError> {
        let records = dns::records(deployment, &self.config.dns_root_domain, false, &instances);
        let digest = records.digest();
        let unchanged = match meta.dns_records.as_deref() {
            Some(published) => published == digest,
            None => instances.is_empty(),
        };
        if unchanged {
            return Ok(());
        }
        let (version, blob) = self
            .publish_dns_entries(deployment, Some(instances), meta.dns_version)
            .await?;
        meta.dns_version = version;
        meta.dns_blob = Some(blob);
        meta.dns_records = Some(digest);
        self.write(Write::Meta(meta.clone())).await
    }

    /// After a failed deploy: the records of `state` (as stored) published when they differ
    /// from the last ones, so that no instance the deploy deleted stays named and none it
    /// made stays out. Not once cancelled (the lock may be another run's by now). Best
    /// effort: a failure is logged, and the next deploy publishes again.
    pub(crate) async fn publish_dns_after_failure(
        &self,
        deployment: &str,
        state: &DeploymentState,
    ) {
        if self.cancel.is_cancelled() {
            return;
        }
        let instances = live_entries(state.instances.values());
        let mut meta = state.meta.clone();
        if let Err(e) = self.publish_dns(deployment, instances, &mut meta).await {
            tracing::warn!(deployment, error = %e, "cannot publish the DNS records of a failed deploy");
        }
    }

    /// Replaces `deployment`'s DNS entries in the dataset of all deployments (`None`: it is
    /// gone), stores the records blob of the new version and sends it to every agent of
    /// every deployment (§4.10); agents that do not acknowledge are a warning. The version
    /// and the blob id.
    pub(crate) async fn publish_dns_entries(
        &self,
        deployment: &str,
        instances: Option<Vec<DnsInstance>>,
        at_least: u64,
    ) -> Result<(u64, String), EngineError> {
        let dataset = match &self.config.dns_registry {
            Some(registry) => registry.publish(deployment, instances, at_least).await?,
            None => {
                let mut alone = crate::state::DnsDataset::default();
                alone.publish(deployment, instances, at_least);
                alone
            }
        };
        let version = dataset.version;
        let blob = dns::records_of_all(&self.config.dns_root_domain, false, &dataset.deployments)
            .blob(version);
        let stored = self
            .blobstore
            .put_bytes(bytes::Bytes::from(blob))
            .await
            .map_err(EngineError::Blobstore)?;
        let sha = format!("sha256:{}", stored.sha256);
        let syncs = dataset.agent_ids().into_iter().map(|agent_id| {
            let agent = self.agent(&agent_id, "dns");
            let (id, sha) = (stored.id.clone(), sha.clone());
            async move {
                tokio::time::timeout(DNS_SYNC_WAIT, agent.sync_dns(&id, &sha, version))
                    .await
                    .is_ok_and(|r| r.is_ok())
            }
        });
        let synced: Vec<bool> = futures::stream::iter(syncs)
            .buffer_unordered(self.config.get_state_concurrency.max(1))
            .collect()
            .await;
        let failed = synced.iter().filter(|ok| !**ok).count();
        self.events.milestone(Milestone::DnsSynced {
            version,
            agents: synced.len(),
            failed,
        });
        if failed > 0 {
            progress::warn(
                self.events.as_ref(),
                format!(
                    "{failed} of {} agents did not acknowledge DNS records version {version}",
                    synced.len()
                ),
            );
        }
        Ok((version, stored.id))
    }
}
