//! `bosh instances`: each instance of a deployment as the Director describes it
//! (`GET /deployments/:name/instances?format=full`): what the records say (group, id,
//! index, AZ, addresses, VM, disks) and, for an instance with a VM, what its agent says
//! (`get_state ["full"]`: the process state, each process, the machine's vitals). Read only:
//! no lock, no write, no cloud call; agents are asked at once, each for at most
//! [`crate::cck::SCAN_TIMEOUT`] and without retries, and one that does not answer is
//! `unresponsive agent`, as the Director says.

use futures::StreamExt;
use serde::Serialize;

use kubosh_bosh::agent::protocol::{Process, Vitals};
use kubosh_transport::agent::ClientOptions;

use crate::state::InstanceRecord;
use crate::{Engine, EngineError};

/// One instance as `bosh instances --ps --vitals` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceInfo {
    /// The instance group.
    pub group: String,
    /// The instance's id (uuid).
    pub id: String,
    /// Its index in the group.
    pub index: u64,
    /// Its availability zone.
    pub az: Option<String>,
    /// Its addresses, by network name order.
    pub ips: Vec<String>,
    /// Whether it is its group's bootstrap instance.
    pub bootstrap: bool,
    /// The desired state (`started`, `stopped`, `detached`).
    pub state: String,
    /// Its VM's CID, if it has one.
    pub vm_cid: Option<String>,
    /// Its agent's id, if it has a VM.
    pub agent_id: Option<String>,
    /// Its persistent disks' CIDs.
    pub disk_cids: Vec<String>,
    /// What its agent says of its processes (`running`, `failing`, `stopped`...),
    /// `unresponsive agent` when it does not answer, empty without a VM.
    pub process_state: String,
    /// Its agent's processes.
    pub processes: Vec<Process>,
    /// Its machine's vitals.
    pub vitals: Option<Vitals>,
}

/// What an agent says of its jobs and machine (`get_state ["full"]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentDetails {
    /// Its jobs' state taken together (`running`, `failing`, ...).
    pub process_state: String,
    /// Its processes.
    pub processes: Vec<Process>,
    /// Its machine's vitals.
    pub vitals: Option<Vitals>,
}

/// The Director's process state for an agent that did not answer.
pub const UNRESPONSIVE_AGENT: &str = "unresponsive agent";

impl Engine {
    /// Every instance of the engine's deployment, sorted by group and index, with what its
    /// agent says (see the module's documentation).
    pub async fn instance_infos(&self) -> Result<Vec<InstanceInfo>, EngineError> {
        let state = self.store.load().await?;
        let mut records: Vec<InstanceRecord> = state.instances.into_values().collect();
        records.sort_by(|a, b| (a.group.as_str(), a.index).cmp(&(b.group.as_str(), b.index)));
        let asks = records
            .into_iter()
            .map(|record| async move { self.info(record).await });
        Ok(futures::stream::iter(asks)
            .buffered(self.config.get_state_concurrency.max(1))
            .collect()
            .await)
    }

    /// What agent `agent_id` (of instance `instance`) says of its processes and machine,
    /// asked once for at most [`crate::cck::SCAN_TIMEOUT`]; `None` when it does not answer
    /// or its heartbeats prove it silent (then it is not asked).
    pub async fn agent_details(&self, agent_id: &str, instance: &str) -> Option<AgentDetails> {
        if self.proven_silent(agent_id) {
            return None;
        }
        let options = ClientOptions {
            timeout: crate::cck::SCAN_TIMEOUT,
            get_state_retries: 0,
            ..self.config.agent_options.clone()
        };
        let agent = self.agent(agent_id, instance).with_options(options);
        let state = agent.get_state(true).await.ok()?;
        Some(AgentDetails {
            process_state: state.job_state.as_str().to_string(),
            processes: state.processes.unwrap_or_default(),
            vitals: state.vitals,
        })
    }

    async fn info(&self, record: InstanceRecord) -> InstanceInfo {
        let mut info = InstanceInfo {
            ips: record.ips.values().map(|ip| ip.ip.clone()).collect(),
            state: record.state.as_str().to_string(),
            vm_cid: record.vm.as_ref().map(|vm| vm.cid.clone()),
            agent_id: record.vm.as_ref().map(|vm| vm.agent_id.clone()),
            disk_cids: record.disks.iter().map(|d| d.cid.clone()).collect(),
            process_state: String::new(),
            processes: Vec::new(),
            vitals: None,
            group: record.group.clone(),
            id: record.uuid.clone(),
            index: record.index,
            az: record.az.clone(),
            bootstrap: record.bootstrap,
        };
        let Some(vm) = &record.vm else {
            return info;
        };
        match self
            .agent_details(&vm.agent_id, &record.display_name())
            .await
        {
            Some(details) => {
                info.process_state = details.process_state;
                info.processes = details.processes;
                info.vitals = details.vitals;
            }
            None => info.process_state = UNRESPONSIVE_AGENT.to_string(),
        }
        info
    }
}
