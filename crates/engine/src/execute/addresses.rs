//! Step 4 of the seed, carried out: the planned addresses claimed among the director's
//! deployments before anything else changes, and released again once instances no longer
//! hold them.

use crate::prepare::{Addresses, reservations};
use crate::state::InstanceRecord;
use crate::{Engine, EngineError, PlanError};
use kubosh_core::plan::ip::Reservation;

/// How often a deploy plans again when a concurrent deploy of another deployment claimed
/// an address first.
pub(crate) const CLAIM_ATTEMPTS: usize = 3;

impl Engine {
    /// Claims what [`Engine::plan_addresses`] planned (this deployment's current
    /// reservations included, as their holders keep them until they are updated or
    /// deleted), before anything changes. `Ok(None)` when claimed; `Ok(Some(error))` when
    /// another deployment claimed one of them since it was planned (plan again).
    pub(crate) async fn claim_addresses(
        &self,
        deployment: &str,
        addresses: &Addresses,
    ) -> Result<Option<EngineError>, EngineError> {
        let Some(registry) = &self.config.ip_registry else {
            return Ok(None);
        };
        let conflicts = registry.claim(deployment, addresses.held.clone()).await?;
        Ok(conflicts
            .first()
            .map(|first| claim_conflict(&addresses.held, first)))
    }

    /// After a deploy (or a failed one): the deployment holds exactly the addresses of
    /// `instances`, its recorded instances (deleted instances, compilation workers and
    /// instances never made let theirs go).
    pub(crate) async fn release_unused_ips(
        &self,
        deployment: &str,
        instances: Vec<&InstanceRecord>,
    ) -> Result<(), EngineError> {
        let Some(registry) = &self.config.ip_registry else {
            return Ok(());
        };
        let held = reservations(deployment, instances)?;
        let conflicts = registry.claim(deployment, held).await?;
        if !conflicts.is_empty() {
            tracing::warn!(
                deployment,
                ?conflicts,
                "addresses the deployment kept are held elsewhere"
            );
        }
        Ok(())
    }
}

/// The error of a claim of `ours` that another deployment's reservation `other` overlaps
/// after every attempt: the Director's error when it is one of our static IPs (the
/// manifests disagree), else contention (the address was free when planned).
pub(crate) fn claim_conflict(ours: &[Reservation], other: &Reservation) -> EngineError {
    let taken = PlanError::TakenElsewhere {
        ip: other.ip,
        prefix: other.prefix,
        holder: other.holder_name(),
        deployment: other.deployment.clone(),
    };
    if ours.iter().any(|r| r.is_static && r.ip == other.ip) {
        EngineError::Plan(taken)
    } else {
        EngineError::AddressesContended(taken)
    }
}
