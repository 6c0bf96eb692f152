//! `vm_strategy: create-swap-delete`: an instance's new VM is made ahead, with new
//! addresses, while the old one still runs ("Creating missing vms", [`Engine::create_next_vm`]);
//! its update stops the jobs on the old VM and moves the disks to the new one, which becomes
//! the active VM ([`Engine::swap_vms`]) and gets the apply spec and the start, and the old VM
//! is deleted afterwards ([`Engine::delete_previous_vm`]), its addresses released only once
//! it is gone. Canaries and `max_in_flight` are the rollout's as for any update.
//!
//! Every step is recorded so that a run killed anywhere leaks nothing and loses no data:
//! the VM made ahead is the instance's [`InactiveVm`] (role `Next`) from the write that
//! records its CID; a `DeleteVm` intent names the old VM before its disks come off; the swap
//! is one record write (the new VM active, the old one inactive with its addresses, role
//! `Previous`); the intent is settled once the old VM is gone. Recovery deletes whatever
//! inactive VM a killed run left (it never holds a disk), and settles the `DeleteVm` intent
//! as for `delete-create`: killed before the swap, the old VM is deleted and its disks go to
//! a VM the next deploy makes; after it, only the old VM is deleted.
//!
//! Where ours differs from the Director (`recreate_handler.rb`, `orphan_vm_step.rb`,
//! `orphaned_vm_deleter.rb`): the old VM is deleted by the update itself once the instance
//! runs on its new VM (or its update failed), not orphaned for the scheduled orphaned-VM
//! cleanup, so there is no `bosh orphaned-vms`; the new VM is not sent the packages ahead
//! ("Downloading packages"): `apply` installs them during the update, as for any new VM.

use std::collections::BTreeMap;

use super::progress::{InstanceName, Milestone};
use super::vm::{NewVm, VmRequest, recorded_vm};
use super::{Engine, EngineError};
use crate::state::{InactiveVm, InstanceRecord, IpRecord, VmRole, Write};

impl Engine {
    /// Makes the instance's next VM ahead ("Creating missing vms"), with the addresses the
    /// plan gave the instance (`record.ips` on entry); the old VM keeps `previous_ips` until
    /// it is gone. The new VM is recorded as the instance's inactive VM in the write that
    /// records its CID; it gets no disk and runs no job until the swap.
    pub(crate) async fn create_next_vm(
        &self,
        record: &mut InstanceRecord,
        request: &VmRequest,
        previous_ips: BTreeMap<String, IpRecord>,
    ) -> Result<(), EngineError> {
        let next_ips = std::mem::replace(&mut record.ips, previous_ips);
        self.persist(record).await?;
        let before = &*record;
        let mut owner = record.clone();
        self.create_vm(
            request,
            async |vm: &NewVm| {
                owner.inactive_vm = Some(InactiveVm {
                    vm: recorded_vm(request, vm),
                    role: VmRole::Next,
                    ips: next_ips,
                });
                self.persist(&owner).await
            },
            // Deleted again (its agent never answered): the record as it was.
            async || self.persist(before).await,
        )
        .await?;
        *record = owner;
        Ok(())
    }

    /// Whether the instance's update swaps to a VM made ahead.
    pub(crate) fn swaps(record: &InstanceRecord) -> bool {
        record.vm.is_some() && (record.inactive_vm.as_ref()).is_some_and(|i| i.role == VmRole::Next)
    }

    /// The swap, once the jobs on the old VM are stopped: a `DeleteVm` intent for the old
    /// VM, its disks detached (without asking its agent when it does not answer,
    /// `agent_answers` false), then one write makes the next VM active (with its addresses)
    /// and the old one inactive (with its own). The new VM and the intent to settle once the
    /// old VM is gone ([`Engine::delete_previous_vm`]).
    pub(crate) async fn swap_vms(
        &self,
        record: &mut InstanceRecord,
        agent_answers: bool,
    ) -> Result<(NewVm, String), EngineError> {
        let (Some(old), Some(next)) = (record.vm.clone(), record.inactive_vm.clone()) else {
            return Err(EngineError::NoVmAfterUpdate {
                instance: record.display_name(),
            });
        };
        let intent = self.intend_vm_deletion(record, &old).await?;
        self.detach_disks_from(record, &old, agent_answers).await;
        let previous_ips = std::mem::replace(&mut record.ips, next.ips);
        record.vm = Some(next.vm.clone());
        record.inactive_vm = Some(InactiveVm {
            vm: old.clone(),
            role: VmRole::Previous,
            ips: previous_ips,
        });
        self.persist(record).await?;
        self.events.milestone(Milestone::VmRecreated {
            instance: InstanceName::of(record),
            old_cid: old.cid,
            new_cid: next.vm.cid.clone(),
        });
        let vm = NewVm {
            cid: next.vm.cid,
            agent_id: next.vm.agent_id,
            networks: next.vm.networks,
            cpi: next.vm.cpi,
        };
        Ok((vm, intent.id))
    }

    /// Deletes the VM the swap replaced, then records that the instance no longer has it
    /// (its addresses are released with the deploy's next claim) and settles `intent`.
    pub(crate) async fn delete_previous_vm(
        &self,
        record: &mut InstanceRecord,
        intent: String,
    ) -> Result<(), EngineError> {
        if let Some(previous) = &record.inactive_vm {
            let vm = &previous.vm;
            (self.delete_agent_vm(&vm.cid, &vm.agent_id, vm.cpi.as_deref())).await?;
            record.inactive_vm = None;
            self.persist(record).await?;
        }
        self.settle(intent).await
    }

    /// Recovery: deletes every inactive VM a killed run left (a VM made ahead that never
    /// became active, or one the swap replaced) and records each instance without it.
    pub(crate) async fn delete_inactive_vms(
        &self,
        state: &mut crate::state::DeploymentState,
    ) -> Result<(), EngineError> {
        let left: Vec<InstanceRecord> = (state.instances.values())
            .filter(|i| i.inactive_vm.is_some())
            .cloned()
            .collect();
        for mut record in left {
            let Some(inactive) = record.inactive_vm.take() else {
                continue;
            };
            let vm = &inactive.vm;
            (self.delete_agent_vm(&vm.cid, &vm.agent_id, vm.cpi.as_deref())).await?;
            tracing::info!(vm = %inactive.vm.cid, instance = %record.display_name(), "deleted the inactive VM a previous run left");
            let write = Write::Instance(Box::new(record));
            self.write(write.clone()).await?;
            state.apply(&write);
        }
        Ok(())
    }
}
