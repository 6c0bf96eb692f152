//! `bosh delete-deployment`: its DNS entries withdrawn from every other deployment's agents
//! and its shared link providers from the link registry first, then every instance stopped (pre-stop, drain, stop) and its VM deleted, its disks
//! orphaned and then deleted or kept, its addresses released. Resumable: a run killed half
//! way leaves recorded intents and records the next run settles.

use super::progress::{self, StageRun};
use super::{Engine, EngineError};
use crate::state::{InstanceRecord, Write};

/// How long orphaned disks are kept by default: the Director's `max_orphaned_age_in_days`,
/// 5 days.
pub const ORPHANED_DISK_MAX_AGE: std::time::Duration =
    std::time::Duration::from_secs(5 * 24 * 3600);

/// What happens to persistent disks when their deployment is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskDisposal {
    /// Deleted in the cloud (with their snapshots).
    Delete,
    /// Kept as orphaned disks, to expire or be attached again.
    Orphan,
}

/// What a delete did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// Instances deleted (`group/uuid (index)`).
    pub instances: Vec<String>,
    /// CIDs of the disks deleted.
    pub disks_deleted: Vec<String>,
    /// CIDs of the disks kept as orphans.
    pub disks_orphaned: Vec<String>,
}

impl Engine {
    /// Deletes orphaned disks `cids` of deployment `name` (`bosh delete-disk`, under the
    /// deployment's lock, so no deploy attaches one meanwhile).
    pub async fn delete_orphaned_disks(
        &self,
        name: &str,
        cids: &[String],
    ) -> Result<(), EngineError> {
        self.under_deployment_lock(name, "delete orphaned disks", |engine| async move {
            for cid in cids {
                engine.checkpoint()?;
                engine.delete_orphaned_disk(cid).await?;
            }
            Ok(())
        })
        .await
    }

    /// `bosh clean-up`'s part for deployment `name` (under its deployment lock): deletes its
    /// orphaned disks orphaned longer than `max_age` ago, or all of them (`None`, `--all`),
    /// as the Director's scheduled orphaned-disk clean-up and `bosh clean-up --all` do. A
    /// disk whose orphaning time cannot be read is kept unless all go. The CIDs deleted.
    pub async fn clean_up_orphaned_disks(
        &self,
        name: &str,
        max_age: Option<std::time::Duration>,
    ) -> Result<Vec<String>, EngineError> {
        self.under_deployment_lock(name, "clean up orphaned disks", |engine| async move {
            let now = time::OffsetDateTime::now_utc();
            let expired = |orphaned_at: &str| match max_age {
                None => true,
                Some(max_age) => {
                    let rfc3339 = &time::format_description::well_known::Rfc3339;
                    time::OffsetDateTime::parse(orphaned_at, rfc3339)
                        .is_ok_and(|at| now - at >= max_age)
                }
            };
            let cids: Vec<String> = (engine.store.orphaned_disks().await?.into_iter())
                .filter(|(_, orphan)| expired(&orphan.orphaned_at))
                .map(|(cid, _)| cid)
                .collect();
            let stage = StageRun::new(
                engine.events.clone(),
                "Deleting orphaned disks",
                vec![],
                cids.len(),
            );
            for cid in &cids {
                engine.checkpoint()?;
                stage
                    .task(cid.clone(), engine.delete_orphaned_disk(cid))
                    .await?;
            }
            Ok(cids)
        })
        .await
    }

    /// Deletes deployment `name` (under its deployment lock).
    pub async fn delete_deployment(
        &self,
        name: &str,
        disks: DiskDisposal,
    ) -> Result<DeleteReport, EngineError> {
        let result = self
            .under_deployment_lock(name, "delete deployment", |engine| async move {
                engine.delete_locked(name, disks).await
            })
            .await;
        if let Err(e) = &result {
            progress::error(self.events.as_ref(), e.code(), e.to_string());
        }
        result
    }

    async fn delete_locked(
        &self,
        name: &str,
        disks: DiskDisposal,
    ) -> Result<DeleteReport, EngineError> {
        let mut state = self.store.load().await?;
        self.recover(&mut state, self.config.recovery_wait).await?;
        let mut report = DeleteReport::default();
        self.publish_links(name, None).await?;
        // Out of every agent's records before any of its VMs goes.
        if state.meta.dns_records.is_some() {
            let (version, _) = self
                .publish_dns_entries(name, None, state.meta.dns_version)
                .await?;
            let mut meta = state.meta.clone();
            meta.dns_version = version;
            meta.dns_blob = None;
            meta.dns_records = None;
            meta.deployed_inputs = None;
            self.write(Write::Meta(meta)).await?;
        }

        let records: Vec<InstanceRecord> = state.instances.values().cloned().collect();
        report.instances = self.delete_instances("Deleting instances", records).await?;

        let orphans: Vec<String> = self
            .store
            .load()
            .await?
            .orphaned_disks
            .into_keys()
            .collect();
        match disks {
            DiskDisposal::Delete => {
                let stage =
                    StageRun::new(self.events.clone(), "Deleting disks", vec![], orphans.len());
                for cid in orphans {
                    stage
                        .task(cid.clone(), self.delete_orphaned_disk(&cid))
                        .await?;
                    report.disks_deleted.push(cid);
                }
            }
            DiskDisposal::Orphan => report.disks_orphaned = orphans,
        }

        self.release_unused_ips(name, Vec::new()).await?;
        Ok(report)
    }
}
