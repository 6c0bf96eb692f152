//! What a killed run left in the cloud: every intent in the state file's sidecar is
//! settled before anything else changes. A VM made for an intent's agent id that the state
//! does not hold is deleted (found with `kubosh_find_vm`, else by asking the agent on the
//! mbus URL, whose `get_state` names its VM); a disk made for an intent's request id is
//! deleted (`kubosh_find_disk`), and so is a stemcell (`kubosh_find_stemcell`). What cannot
//! be found is named in a warning.

use std::time::Duration;

use kubosh_cloud::{Cloud, DiskCid, ErrorKind, StemcellCid, VmCid};

use crate::EnvError;
use crate::instance::Session;
use crate::store::EnvIntent;

/// How long an orphaned VM's agent gets to answer (a CPI process the killed run started
/// may still be creating it).
const ORPHAN_AGENT_WAIT: Duration = Duration::from_secs(10);

impl Session {
    /// Settles every pending intent.
    pub async fn recover(&mut self) -> Result<(), EnvError> {
        for intent in self.file.intents().to_vec() {
            match &intent {
                EnvIntent::CreateVm { agent_id } => self.settle_vm(agent_id).await?,
                EnvIntent::CreateDisk { request_id } => self.settle_disk(request_id).await?,
                EnvIntent::CreateStemcell {
                    stemcell,
                    request_id,
                } => self.settle_stemcell(stemcell, request_id).await?,
            }
            self.file.remove_intent(&intent)?;
        }
        Ok(())
    }

    async fn settle_vm(&mut self, agent_id: &str) -> Result<(), EnvError> {
        let current = self.file.state().current_vm_cid.clone();
        let found = match self.cloud.find_vm_by_agent(agent_id).await {
            Ok(found) => found.map(|c| c.0),
            Err(e) if e.is(&ErrorKind::NotImplemented) => self.ask_agent_for_vm(agent_id).await,
            Err(e) => return Err(e.into()),
        };
        match found {
            Some(cid) if cid != current => {
                match self.cloud.delete_vm(&VmCid(cid.clone())).await {
                    Ok(()) => {}
                    Err(e) if e.is(&ErrorKind::VmNotFound) => {}
                    Err(e) => return Err(e.into()),
                }
                self.ui.line(format!(
                    "Deleted VM '{cid}', which a previous run created but did not record"
                ));
            }
            Some(_) => {}
            None => tracing::info!(agent_id, "a previous run's create_vm made no VM"),
        }
        Ok(())
    }

    /// The VM of the agent answering on the mbus URL, if it is `agent_id`.
    async fn ask_agent_for_vm(&self, agent_id: &str) -> Option<String> {
        let agent = self.agent(agent_id);
        if agent
            .wait_until_ready("unknown", ORPHAN_AGENT_WAIT)
            .await
            .is_err()
        {
            self.ui.warn(format!(
                "A previous run asked the cloud for a VM (agent id {agent_id}) and stopped before the cloud answered; no agent answered on {} and the CPI cannot look VMs up by agent id: check the cloud for a VM with that agent id",
                self.mbus
            ));
            return None;
        }
        let state = agent.get_state(false).await.ok()?;
        if state.agent_id.as_deref() != Some(agent_id) {
            return None;
        }
        state.vm.map(|vm| vm.name).filter(|n| !n.is_empty())
    }

    async fn settle_stemcell(&mut self, stemcell: &str, request_id: &str) -> Result<(), EnvError> {
        let cid = match self.cloud.find_stemcell_by_request(request_id).await {
            Ok(Some(cid)) => cid.0,
            Ok(None) => return Ok(()),
            Err(e) if e.is(&ErrorKind::NotImplemented) => {
                self.ui.warn(format!(
                    "A previous run stopped while the cloud was uploading stemcell '{stemcell}'; the CPI cannot look stemcells up by request id: check the cloud for a stemcell of that name that no state file records"
                ));
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let recorded = self
            .file
            .state()
            .stemcells
            .iter()
            .flatten()
            .any(|s| s.cid == cid);
        if recorded {
            return Ok(());
        }
        self.cloud
            .delete_stemcell(&StemcellCid(cid.clone()))
            .await?;
        self.ui.line(format!(
            "Deleted stemcell '{cid}', which a previous run created but did not record"
        ));
        Ok(())
    }

    async fn settle_disk(&mut self, request_id: &str) -> Result<(), EnvError> {
        let cid = match self.cloud.find_disk_by_request(request_id).await {
            Ok(Some(cid)) => cid.0,
            Ok(None) => return Ok(()),
            Err(e) if e.is(&ErrorKind::NotImplemented) => {
                self.ui.warn(format!(
                    "A previous run stopped while the cloud was creating a disk (request id {request_id}); the CPI cannot look disks up by request id: check the cloud for a disk no state file records"
                ));
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let recorded = self
            .file
            .state()
            .disks
            .iter()
            .flatten()
            .any(|d| d.cid == cid);
        if recorded {
            return Ok(());
        }
        match self.cloud.delete_disk(&DiskCid(cid.clone())).await {
            Ok(()) => {}
            Err(e) if e.is(&ErrorKind::DiskNotFound) => {}
            Err(e) => return Err(e.into()),
        }
        self.ui.line(format!(
            "Deleted disk '{cid}', which a previous run created but did not record"
        ));
        Ok(())
    }
}
