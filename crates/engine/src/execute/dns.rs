//! Step 12 of the seed: the DNS records of all the director's deployments published and
//! sent to every agent (`bosh-protocols.md` §4.10).

use futures::StreamExt;

use crate::prepare::{Planned, dns_instance};
use crate::progress::{self, Milestone};
use crate::state::{DeploymentState, Write};
use crate::{Engine, EngineError};
use kubosh_core::manifest::DeploymentManifest;
use kubosh_core::plan::dns::{self, DnsInstance};

/// How long `sync_dns` waits for an agent (the Director's broadcast waits 10 s in all).
pub const DNS_SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Engine {
    /// Step 12: when the deployment's records changed, publishes the records dataset of all
    /// deployments and sends `sync_dns` to every VM of every deployment, each agent given at
    /// most [`DNS_SYNC_WAIT`] (the Director's broadcast wait).
    pub(crate) async fn publish_dns(
        &self,
        manifest: &DeploymentManifest,
        planned: &[Planned],
        state: &mut DeploymentState,
    ) -> Result<(), EngineError> {
        let deployment = manifest.name.clone().unwrap_or_default();
        let instances: Vec<DnsInstance> = planned.iter().map(|p| dns_instance(p, true)).collect();
        let records = dns::records(&deployment, &self.config.dns_root_domain, false, &instances);
        let digest = records.digest();
        if state.meta.dns_records.as_deref() == Some(digest.as_str()) {
            return Ok(());
        }
        let (version, blob) = self
            .publish_dns_entries(&deployment, Some(instances), state.meta.dns_version)
            .await?;
        state.meta.dns_version = version;
        state.meta.dns_blob = Some(blob);
        state.meta.dns_records = Some(digest);
        self.write(Write::Meta(state.meta.clone())).await
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
