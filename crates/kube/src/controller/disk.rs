//! Orphaned `Disk`s: kept for [`DeploymentContext::orphaned_disk_max_age`] (the Director's
//! `max_orphaned_age_in_days`, 5 days) so a returning instance group gets them back, then
//! deleted from the cloud; `kubectl delete bdisk` deletes one from the cloud at once. Each
//! deletion runs under the deployment's lock (no deploy attaches the disk meanwhile), and the
//! object's finalizer (`kubosh.io/disk`) goes only once the disk is gone, so its CID is never
//! lost.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, runtime::events::Event as KubeEvent};

use super::deployment::DeploymentContext;
use super::progress::DeployProgress;
use crate::api::Disk;
use crate::state::KubeStore;
use kubosh_engine::EngineError;

/// Why a disk reconcile failed (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// Deleting the disk failed (the cloud, the store, or its deployment's lock).
    #[error("deleting orphaned disk {cid}: {source}")]
    Delete {
        /// The disk.
        cid: String,
        /// Why.
        source: EngineError,
    },
    /// The clouds of the namespace's CPI configs cannot be had.
    #[error("deleting orphaned disk {cid}: {source}")]
    Clouds {
        /// The disk.
        cid: String,
        /// Why.
        source: super::deployment::DeploymentError,
    },
}

/// How long an orphaned disk has left before it expires, from its `orphanedAt` (`None`:
/// expired, or no time recorded).
fn time_left(disk: &Disk, max_age: Duration) -> Option<Duration> {
    let orphaned_at = disk.spec.orphaned_at.as_ref()?.0;
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(orphaned_at);
    let age = Duration::try_from(age).unwrap_or_default();
    max_age.checked_sub(age).filter(|left| !left.is_zero())
}

/// Reconciles one `Disk`: nothing for attached disks; an orphan is deleted once expired or
/// once its object is being deleted, and looked at again when it expires otherwise.
pub async fn reconcile(disk: Arc<Disk>, ctx: Arc<DeploymentContext>) -> Result<Action, DiskError> {
    if !disk.spec.orphaned {
        return Ok(Action::await_change());
    }
    let requested = disk.metadata.deletion_timestamp.is_some();
    if !requested && let Some(left) = time_left(&disk, ctx.orphaned_disk_max_age) {
        return Ok(Action::requeue(left));
    }
    let namespace = disk.namespace().unwrap_or_default();
    let deployment = &disk.spec.deployment;
    let cid = disk.spec.cid.clone();
    let store = Arc::new(KubeStore::new(
        ctx.client.clone(),
        &namespace,
        deployment,
        None,
    ));
    let cancel = ctx.cancel.child_token();
    let mut engine = ctx.engine(store, &namespace, Arc::new(DeployProgress::new()), cancel);
    engine.named_clouds =
        (ctx.named_clouds(&namespace).await).map_err(|source| DiskError::Clouds {
            cid: cid.clone(),
            source,
        })?;
    engine
        .delete_orphaned_disks(deployment, std::slice::from_ref(&cid))
        .await
        .map_err(|source| DiskError::Delete {
            cid: cid.clone(),
            source,
        })?;
    let why = if requested {
        "its Disk resource was deleted"
    } else {
        "it expired"
    };
    let event = KubeEvent {
        type_: EventType::Normal,
        reason: "DiskDeleted".into(),
        note: Some(format!("Deleted orphaned disk {cid} from the cloud: {why}")),
        action: "DeleteDisk".into(),
        secondary: None,
    };
    ctx.publish(&event, &disk.object_ref(&())).await;
    Ok(Action::await_change())
}

/// Retries a failed disk reconcile after a while (a deploy may hold the lock for long).
pub fn error_policy(disk: Arc<Disk>, error: &DiskError, _ctx: Arc<DeploymentContext>) -> Action {
    tracing::warn!(disk = %disk.name_any(), error = %error, "orphaned disk");
    Action::requeue(Duration::from_secs(30))
}
