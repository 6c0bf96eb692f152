//! Persistent disk snapshots (`bosh-protocols.md` §4.4 step 3, the Director's
//! `SnapshotManager.take_snapshot`): with snapshots enabled, every persistent disk of an
//! instance an update stopped is snapshotted, each `snapshot_disk` bracketed by an intent and
//! its CID recorded on the disk. Snapshots stay with their disk: an orphaned disk keeps
//! them, and [`Engine::delete_orphaned_disk`] deletes them before the disk.

use serde_json::{Map as JsonMap, Value};

use super::{Engine, EngineError};
use crate::state::{DeploymentState, InstanceRecord, Intent, IntentKind, Write};
use kubosh_cloud::{DiskCid, ErrorKind, SnapshotCid};

/// The director name and uuid snapshot metadata carries (kubosh is its own director; the
/// CLI's director also sends `kubosh` as the CPI's `director_uuid`).
const DIRECTOR: &str = "kubosh";

/// The metadata the Director gives `snapshot_disk`: `deployment`, `job`, `index` (a
/// number), `director_name`, `director_uuid`, `agent_id`, `instance_id`, then the
/// deployment's tags over them.
pub(crate) fn snapshot_metadata(
    record: &InstanceRecord,
    agent_id: &str,
    deployment: &str,
    tags: &Value,
) -> JsonMap<String, Value> {
    let mut metadata = JsonMap::new();
    metadata.insert("deployment".into(), deployment.into());
    metadata.insert("job".into(), record.group.clone().into());
    metadata.insert("index".into(), record.index.into());
    metadata.insert("director_name".into(), DIRECTOR.into());
    metadata.insert("director_uuid".into(), DIRECTOR.into());
    metadata.insert("agent_id".into(), agent_id.into());
    metadata.insert("instance_id".into(), record.uuid.clone().into());
    if let Value::Object(tags) = tags {
        for (key, value) in tags {
            metadata.insert(key.clone(), value.clone());
        }
    }
    metadata
}

/// Whether the record of disk `disk` (an instance's or an orphan's) lists snapshot
/// `snapshot`: recovery keeps such a snapshot and deletes any other.
pub(crate) fn snapshot_recorded(state: &DeploymentState, disk: &str, snapshot: &str) -> bool {
    state
        .instances
        .values()
        .flat_map(|i| i.disks.iter())
        .chain(state.orphaned_disks.values().map(|o| &o.disk))
        .any(|d| d.cid == disk && d.snapshots.iter().any(|s| s == snapshot))
}

impl Engine {
    /// Snapshots every persistent disk of `record` when snapshots are enabled (call after
    /// its jobs were stopped). Each snapshot's intent is stored before `snapshot_disk`, its
    /// CID right after, and settled once the disk's record lists it. A CPI without snapshots
    /// (`NotImplemented`) is skipped, as the Director skips it.
    pub(crate) async fn take_snapshots(
        &self,
        record: &mut InstanceRecord,
        deployment: &str,
        tags: &Value,
    ) -> Result<(), EngineError> {
        if !self.config.snapshots_enabled || record.disks.is_empty() {
            return Ok(());
        }
        let Some(vm) = record.vm.clone() else {
            return Ok(());
        };
        let metadata = snapshot_metadata(record, &vm.agent_id, deployment, tags);
        for position in 0..record.disks.len() {
            let disk = record.disks[position].cid.clone();
            let cpi = record.disks[position].cpi.clone();
            let intent = Intent {
                id: kubosh_base::ids::uuid_v4(),
                kind: IntentKind::SnapshotDisk { disk: disk.clone() },
                cid: None,
                cpi: cpi.clone(),
            };
            let cloud = self.disk_cloud(&record.disks[position])?;
            self.write(Write::Intent(intent.clone())).await?;
            let snapshot = match cloud
                .snapshot_disk_with_request_id(&DiskCid(disk.clone()), &metadata, &intent.id)
                .await
            {
                Ok(snapshot) => snapshot,
                Err(e) => {
                    let not_implemented = e.is(&ErrorKind::NotImplemented);
                    let error = self.not_created(e, &intent).await;
                    if not_implemented {
                        tracing::info!("CPI does not support disk snapshots; skipping");
                        return Ok(());
                    }
                    return Err(error);
                }
            };
            self.write(Write::Intent(Intent {
                cid: Some(snapshot.0.clone()),
                ..intent.clone()
            }))
            .await?;
            record.disks[position].snapshots.push(snapshot.0);
            self.persist(record).await?;
            self.settle(intent.id).await?;
        }
        Ok(())
    }

    /// Deletes an orphaned disk (`bosh delete-disk`): its snapshots first (each dropped from
    /// the orphan record as soon as it is gone, so a killed run resumes where it stopped),
    /// then the disk (already gone counts as deleted), then the record. An unknown CID is
    /// nothing to do, as the Director treats it.
    pub async fn delete_orphaned_disk(&self, cid: &str) -> Result<(), EngineError> {
        let state = self.store.load().await?;
        let Some(mut orphan) = state.orphaned_disks.get(cid).cloned() else {
            tracing::info!(disk = cid, "orphaned disk not found; nothing to delete");
            return Ok(());
        };
        // Attached again (a reattach recorded the instance's record first): never deleted,
        // only its orphan record goes.
        if (state.instances.values()).any(|i| i.disks.iter().any(|d| d.cid == cid)) {
            return self.write(Write::DeleteOrphanedDisk(cid.to_string())).await;
        }
        let cloud = self.disk_cloud(&orphan.disk)?;
        while let Some(snapshot) = orphan.disk.snapshots.first().cloned() {
            cloud
                .delete_snapshot(&SnapshotCid(snapshot))
                .await
                .map_err(EngineError::from)?;
            orphan.disk.snapshots.remove(0);
            self.write(Write::OrphanedDisk(orphan.clone())).await?;
        }
        match cloud.delete_disk(&DiskCid(cid.to_string())).await {
            Ok(()) => {}
            Err(e) if e.is(&ErrorKind::DiskNotFound) => {}
            Err(e) => return Err(EngineError::from(e)),
        }
        self.write(Write::DeleteOrphanedDisk(cid.to_string())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{DiskRecord, OrphanedDisk};
    use serde_json::json;

    fn instance(disks: Vec<DiskRecord>) -> InstanceRecord {
        InstanceRecord {
            group: "db".into(),
            index: 2,
            uuid: "u-1".into(),
            az: None,
            bootstrap: false,
            state: Default::default(),
            update_completed: true,
            vm: None,
            disks,
            ips: Default::default(),
            applied: None,
            inactive_vm: None,
        }
    }

    fn disk(cid: &str, snapshots: &[&str]) -> DiskRecord {
        DiskRecord {
            cid: cid.into(),
            name: String::new(),
            size_mib: 1024,
            cloud_properties: json!({}),
            snapshots: snapshots.iter().map(|s| s.to_string()).collect(),
            cpi: None,
        }
    }

    #[test]
    fn metadata_has_the_directors_keys_with_tags_over_them() {
        let m = snapshot_metadata(
            &instance(vec![]),
            "agent-1",
            "dep",
            &json!({"team": "a", "job": "tagged"}),
        );
        assert_eq!(
            Value::Object(m),
            json!({
                "deployment": "dep", "job": "tagged", "index": 2,
                "director_name": "kubosh", "director_uuid": "kubosh",
                "agent_id": "agent-1", "instance_id": "u-1", "team": "a",
            })
        );
    }

    #[test]
    fn a_snapshot_is_recorded_when_its_disk_lists_it_on_an_instance_or_an_orphan() {
        let mut state = DeploymentState::default();
        state
            .instances
            .insert("u-1".into(), instance(vec![disk("d-1", &["s-1"])]));
        state.orphaned_disks.insert(
            "d-2".into(),
            OrphanedDisk {
                disk: disk("d-2", &["s-2"]),
                instance: "db/u-0".into(),
                index: None,
                az: None,
                orphaned_at: String::new(),
            },
        );
        assert!(snapshot_recorded(&state, "d-1", "s-1"));
        assert!(snapshot_recorded(&state, "d-2", "s-2"));
        assert!(!snapshot_recorded(&state, "d-1", "s-3"));
        assert!(!snapshot_recorded(&state, "d-1", "s-2"), "another disk's");
        assert!(!snapshot_recorded(&state, "d-9", "s-1"));
    }
}
