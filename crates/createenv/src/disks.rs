//! The persistent disk of create-env (the research notes §4; bosh-cli's `disk_deployer.go`):
//! created, attached and mounted; migrated to a new disk when its size or cloud properties
//! change; unused disks deleted. Every CID is saved the moment the cloud answers, and a
//! `create_disk` carries an intent whose id is the call's request id, so a kill in between
//! is found again (`kubosh_find_disk`).
//!
//! The data is never at risk: the new disk becomes current only after `migrate_disk`
//! finished, and the old one is deleted only after that.

use crate::model::{DiskAction, DiskRecord, DiskSpec, EnvDeployment};
use kubosh_cloud::{Cloud, CreateDisk, DiskCid, ErrorKind, VmCid};
use kubosh_transport::agent::Method;
use kubosh_transport::agent::protocol::DiskHint as AgentDiskHint;

use crate::instance::{NEW_AGENT_WAIT, Session, disk_metadata};
use crate::store::EnvIntent;
use crate::{EnvError, run, step};

impl Session {
    /// Brings the disk to what the manifest asks, then deletes every other disk.
    pub async fn deploy_disk(
        &mut self,
        deployment: &EnvDeployment,
        vm: &str,
        action: DiskAction,
    ) -> Result<(), EnvError> {
        let Some(spec) = deployment.disk.as_ref() else {
            // No disk asked for: bosh-cli leaves disks and records alone.
            return Ok(());
        };
        match action {
            DiskAction::Nothing => return Ok(()),
            DiskAction::Create => {
                let disk = self.create_disk(spec, vm).await?;
                self.attach_disk(deployment, &disk, vm).await?;
                let id = disk.id.clone();
                self.file.update(|s| s.current_disk_id = id)?;
            }
            DiskAction::Keep(current) => self.attach_disk(deployment, &current, vm).await?,
            DiskAction::Migrate(old) => self.migrate(deployment, spec, &old, vm).await?,
        }
        self.delete_unused_disks().await
    }

    /// Attach the old disk, create and attach the new one, copy, make it current, then let
    /// go of the old one.
    async fn migrate(
        &mut self,
        deployment: &EnvDeployment,
        spec: &DiskSpec,
        old: &DiskRecord,
        vm: &str,
    ) -> Result<(), EnvError> {
        self.attach_disk(deployment, old, vm).await?;
        let new = self.create_disk(spec, vm).await?;
        self.attach_disk(deployment, &new, vm).await?;
        let agent = self.agent("unknown");
        let ui = self.ui.clone();
        run(
            &ui,
            &format!("Migrating disk content from '{}' to '{}'", old.cid, new.cid),
            async {
                agent.call(Method::MigrateDisk, &[]).await?;
                Ok(())
            },
        )
        .await?;
        let id = new.id.clone();
        self.file.update(|s| s.current_disk_id = id)?;
        let cloud = self.cloud.clone();
        run(&ui, &format!("Detaching disk '{}'", old.cid), async {
            agent.remove_persistent_disk(&old.cid).await?;
            match cloud
                .detach_disk(&VmCid(vm.to_string()), &DiskCid(old.cid.clone()))
                .await
            {
                Ok(()) => {}
                Err(e) if e.is(&ErrorKind::DiskNotAttached) => {}
                Err(e) => return Err(e.into()),
            }
            self.wait_for_agent(vm, NEW_AGENT_WAIT).await
        })
        .await?;
        self.delete_disk(old, "Deleting disk", "Disk not found")
            .await
    }

    /// `create_disk`, its record saved at once.
    async fn create_disk(&mut self, spec: &DiskSpec, vm: &str) -> Result<DiskRecord, EnvError> {
        let ui = self.ui.clone();
        let name = "Creating disk";
        let result = ui.run(name, self.create_disk_inner(spec, vm)).await;
        result.map_err(|e| EnvError::Step {
            step: name.into(),
            source: Box::new(e),
        })
    }

    async fn create_disk_inner(
        &mut self,
        spec: &DiskSpec,
        vm: &str,
    ) -> Result<DiskRecord, EnvError> {
        let request_id = kubosh_base::ids::uuid_v4();
        let intent = EnvIntent::CreateDisk {
            request_id: request_id.clone(),
        };
        self.file.add_intent(intent.clone())?;
        let request = CreateDisk {
            size_mib: spec.size,
            cloud_properties: spec.cloud_properties.clone(),
            vm_cid: Some(VmCid(vm.to_string())),
        };
        let cid = self
            .cloud
            .create_disk_with_request_id(&request, &request_id)
            .await?;
        let record = DiskRecord {
            id: kubosh_base::ids::uuid_v4(),
            cid: cid.0,
            size: spec.size,
            cloud_properties: spec.cloud_properties.clone(),
        };
        let saved = record.clone();
        self.file.update(|s| s.add_disk(saved))?;
        self.file.remove_intent(&intent)?;
        Ok(record)
    }

    /// `attach_disk`, disk metadata, the agent back, `add_persistent_disk` with the hint,
    /// `mount_disk`.
    async fn attach_disk(
        &self,
        deployment: &EnvDeployment,
        disk: &DiskRecord,
        vm: &str,
    ) -> Result<(), EnvError> {
        run(
            &self.ui,
            &format!("Attaching disk '{}' to VM '{vm}'", disk.cid),
            async {
                let cid = DiskCid(disk.cid.clone());
                let hint = self.cloud.attach_disk(&VmCid(vm.to_string()), &cid).await?;
                match self
                    .cloud
                    .set_disk_metadata(&cid, &disk_metadata(deployment))
                    .await
                {
                    Ok(()) => {}
                    Err(e) if e.is(&ErrorKind::NotImplemented) => {}
                    Err(e) => return Err(e.into()),
                }
                self.wait_for_agent(vm, NEW_AGENT_WAIT).await?;
                let agent = self.agent("unknown");
                if let Some(hint) = hint {
                    // The CPI's hint, passed through as the agent reads it.
                    let hint: AgentDiskHint = serde_json::from_value(hint.0)
                        .unwrap_or_else(|_| AgentDiskHint::Path(String::new()));
                    agent.add_persistent_disk(&disk.cid, &hint).await?;
                }
                agent.mount_disk(&disk.cid).await?;
                Ok(())
            },
        )
        .await
    }

    /// Every disk record other than the current one: deleted from the cloud and forgotten.
    pub async fn delete_unused_disks(&mut self) -> Result<(), EnvError> {
        for disk in self.file.state().unused_disks() {
            self.delete_disk(
                &disk,
                "Deleting unused disk",
                // bosh-cli capitalizes this one.
                "Disk Not Found",
            )
            .await?;
        }
        Ok(())
    }

    /// `delete_disk` (not found is fine), then the record removed.
    pub async fn delete_disk(
        &mut self,
        disk: &DiskRecord,
        what: &str,
        not_found: &str,
    ) -> Result<(), EnvError> {
        let cloud = self.cloud.clone();
        let ui = self.ui.clone();
        step(&ui, &format!("{what} '{}'", disk.cid), async {
            match cloud.delete_disk(&DiskCid(disk.cid.clone())).await {
                Ok(()) => Ok(((), None)),
                Err(e) if e.is(&ErrorKind::DiskNotFound) => Ok(((), Some(not_found.to_string()))),
                Err(e) => Err(EnvError::from(e)),
            }
        })
        .await?;
        let id = disk.id.clone();
        self.file.update(|s| s.remove_disk(&id))
    }
}
