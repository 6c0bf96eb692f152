//! VMs and disks in the cloud, each creation bracketed by an intent (recorded before the
//! call, settled right after) so a crash at any instant leaks nothing.

use std::time::Duration;

use serde_json::{Map as JsonMap, Value, json};

use super::{Engine, EngineError};
use crate::state::{DiskRecord, Intent, IntentKind, Write};
use kubosh_cloud::{CreateDisk, CreateVm, DiskCid, NetworkSettings, Networks, StemcellCid, VmCid};
use kubosh_transport::agent::AgentClient;
use kubosh_transport::agent::protocol::{DiskAssociation, UpdateSettings};

/// The owner callbacks of a VM no record owns (never called).
type NoOwner = (
    fn(&NewVm) -> std::future::Ready<Result<(), EngineError>>,
    fn() -> std::future::Ready<Result<(), EngineError>>,
);

/// What a new VM is made from.
#[derive(Debug, Clone)]
pub struct VmRequest {
    /// The owning instance's uuid (`None` for compilation workers).
    pub instance: Option<String>,
    /// `group/uuid (index)` for messages, or the worker's name.
    pub display_name: String,
    /// Stemcell CID in the cloud.
    pub stemcell_cid: String,
    /// Stemcell `name/version`.
    pub stemcell: String,
    /// Merged cloud properties.
    pub cloud_properties: Value,
    /// Network settings by network name.
    pub networks: Value,
    /// The group's `env` (the engine adds the agent's NATS certificate).
    pub env: Value,
    /// Disks the VM should be placed near.
    pub disk_cids: Vec<String>,
    /// VM metadata (`set_vm_metadata`).
    pub metadata: JsonMap<String, Value>,
    /// The CPI to make it with (`None`: the director's own): its AZ's.
    pub cpi: Option<String>,
}

/// A VM that exists and whose agent answered.
#[derive(Debug, Clone)]
pub struct NewVm {
    /// Its CID.
    pub cid: String,
    /// Its agent id.
    pub agent_id: String,
    /// Network settings as the CPI returned them (v2), else as asked.
    pub networks: Value,
    /// The CPI that made it.
    pub cpi: Option<String>,
}

impl Engine {
    /// An agent client for `agent_id`, naming `instance` in its errors.
    pub fn agent(&self, agent_id: &str, instance: &str) -> AgentClient {
        AgentClient::new(self.agents.clone(), agent_id)
            .with_instance_name(instance)
            .with_options(self.config.agent_options.clone())
    }

    /// Whether the heartbeats prove agent `agent_id` silent for the health window (then it is
    /// not asked: its timeouts would say the same, later).
    pub(crate) fn proven_silent(&self, agent_id: &str) -> bool {
        (self.config.health.as_ref())
            .is_some_and(|h| h.silent_for(agent_id, self.config.health_window))
    }

    /// Whether the cloud says the VM no longer exists (`has_vm` false). A failing `has_vm`
    /// proves nothing: the VM counts as there.
    pub(crate) async fn vm_is_gone(&self, cid: &str, cpi: Option<&str>) -> bool {
        let Ok(cloud) = self.cloud_of(cpi, &format!("VM {cid}")) else {
            return false;
        };
        matches!(cloud.has_vm(&VmCid(cid.to_string())).await, Ok(false))
    }

    /// `create_vm` → `set_vm_metadata` → wait for the agent (§4.5). The intent is stored
    /// before the call; `on_created` persists the CID in its owner record right after it
    /// (the write that records the CID: recovery finds it there), and the intent is settled
    /// once the VM is ready. A VM whose later steps fail is deleted, and `on_deleted` then
    /// takes it out of its owner record again (so the next deploy does not ask a VM that no
    /// longer exists for its state).
    pub async fn create_vm(
        &self,
        request: &VmRequest,
        on_created: impl AsyncFnOnce(&NewVm) -> Result<(), EngineError>,
        on_deleted: impl AsyncFnOnce() -> Result<(), EngineError>,
    ) -> Result<NewVm, EngineError> {
        let (vm, intent) = self
            .create_vm_pending(request, Some((on_created, on_deleted)))
            .await?;
        self.settle(intent).await?;
        Ok(vm)
    }

    /// A VM no record owns (a compilation worker): made as [`Engine::create_vm`] makes one,
    /// but its intent (with the CID) stays pending until [`Engine::delete_unowned_vm`], so a
    /// run killed while the VM exists leaves the next run a way to delete it.
    pub(crate) async fn create_unowned_vm(
        &self,
        request: &VmRequest,
    ) -> Result<(NewVm, String), EngineError> {
        self.create_vm_pending(request, None::<NoOwner>).await
    }

    /// Deletes a VM made by [`Engine::create_unowned_vm`] and settles its intent.
    pub(crate) async fn delete_unowned_vm(
        &self,
        vm: &NewVm,
        intent: String,
    ) -> Result<(), EngineError> {
        self.delete_agent_vm(&vm.cid, &vm.agent_id, vm.cpi.as_deref())
            .await?;
        self.settle(intent).await
    }

    /// Lets agents onto the message bus ([`crate::EngineConfig::agent_access`]).
    pub(crate) async fn admit_agents(&self, agent_ids: &[String]) -> Result<(), EngineError> {
        match &self.config.agent_access {
            Some(access) if !agent_ids.is_empty() => Ok(access.admit(agent_ids).await?),
            _ => Ok(()),
        }
    }

    /// `delete_vm` ([`Engine::delete_vm_cid`]), then the VM's agent is locked out of the
    /// message bus (a failure there is logged: the VM is gone either way).
    pub(crate) async fn delete_agent_vm(
        &self,
        cid: &str,
        agent_id: &str,
        cpi: Option<&str>,
    ) -> Result<(), EngineError> {
        self.delete_vm_cid(cid, cpi).await?;
        if let Some(access) = &self.config.agent_access
            && let Err(e) = access.revoke(&[agent_id.to_string()]).await
        {
            tracing::warn!(agent_id, error = %e, "cannot lock the agent of a deleted VM out of NATS");
        }
        Ok(())
    }

    /// [`Engine::create_vm`] up to the ready agent, the intent (id returned) still pending.
    /// Without an owner to record the CID (`owner`: on created, on deleted), the intent
    /// records it.
    async fn create_vm_pending(
        &self,
        request: &VmRequest,
        owner: Option<(
            impl AsyncFnOnce(&NewVm) -> Result<(), EngineError>,
            impl AsyncFnOnce() -> Result<(), EngineError>,
        )>,
    ) -> Result<(NewVm, String), EngineError> {
        let agent_id = kubosh_base::ids::uuid_v4();
        let intent = Intent {
            id: kubosh_base::ids::uuid_v4(),
            kind: IntentKind::CreateVm {
                instance: request.instance.clone(),
                agent_id: agent_id.clone(),
            },
            cid: None,
            cpi: request.cpi.clone(),
        };
        let cloud = self.cloud_of(request.cpi.as_deref(), &request.display_name)?;
        self.write(Write::Intent(intent.clone())).await?;
        // Let onto the bus before it exists, so the agent's first connection is accepted.
        self.admit_agents(std::slice::from_ref(&agent_id)).await?;
        let mut env = match &request.env {
            Value::Object(m) => m.clone(),
            _ => JsonMap::new(),
        };
        if let Some(agent_env) = &self.config.agent_env {
            super::desired_merge(&mut env, &agent_env(&agent_id));
        }
        let created = match cloud
            .create_vm(&CreateVm {
                agent_id: agent_id.clone(),
                stemcell_cid: StemcellCid(request.stemcell_cid.clone()),
                cloud_properties: object(&request.cloud_properties),
                networks: networks(&request.networks),
                disk_cids: request.disk_cids.iter().cloned().map(DiskCid).collect(),
                env,
            })
            .await
        {
            Ok(created) => created,
            Err(e) => return Err(self.vm_not_created(e, &intent, &agent_id).await),
        };
        let vm = NewVm {
            cid: created.cid.0.clone(),
            agent_id: agent_id.clone(),
            networks: created
                .networks
                .map(Value::Object)
                .unwrap_or_else(|| request.networks.clone()),
            cpi: request.cpi.clone(),
        };
        let (on_created, on_deleted) = match owner {
            Some((created, deleted)) => (Some(created), Some(deleted)),
            None => (None, None),
        };
        let ready = async {
            match on_created {
                // The owner's record is the CID's first home: an owned VM is kept by
                // recovery, and one whose owner write failed is deleted below.
                Some(on_created) => on_created(&vm).await?,
                // Recovery deletes an unowned VM by the CID in its intent.
                None => {
                    self.write(Write::Intent(Intent {
                        cid: Some(vm.cid.clone()),
                        ..intent.clone()
                    }))
                    .await?
                }
            }
            self.set_vm_metadata(&vm.cid, request).await?;
            let agent = self.agent(&agent_id, &request.display_name);
            self.wait_for_agent(&agent, &vm.cid)
                .await
                .map_err(EngineError::Agent)
        }
        .await;
        match ready {
            Ok(()) => Ok((vm, intent.id)),
            Err(e) => {
                self.abandon_vm(&vm, intent.id, on_deleted).await;
                Err(e)
            }
        }
    }

    /// `set_vm_metadata` with the request's metadata and `created_at`, if it has any.
    async fn set_vm_metadata(&self, cid: &str, request: &VmRequest) -> Result<(), EngineError> {
        if request.metadata.is_empty() {
            return Ok(());
        }
        let mut metadata = request.metadata.clone();
        metadata.insert("created_at".into(), Value::String(created_at_now()));
        match self
            .cloud_of(request.cpi.as_deref(), &request.display_name)?
            .set_vm_metadata(&VmCid(cid.to_string()), &metadata)
            .await
        {
            // A CPI without VM metadata is no reason to lose the VM.
            Err(e) if e.kind() == Some(&kubosh_cloud::ErrorKind::NotImplemented) => Ok(()),
            other => other.map_err(EngineError::from),
        }
    }

    /// Deletes a new VM that is useless (its owner write, metadata or agent failed). Its
    /// intent (`intent_id`) stays until the VM is gone and its owner (`on_deleted`) no longer
    /// names it.
    async fn abandon_vm(
        &self,
        vm: &NewVm,
        intent_id: String,
        on_deleted: Option<impl AsyncFnOnce() -> Result<(), EngineError>>,
    ) {
        if (self
            .delete_agent_vm(&vm.cid, &vm.agent_id, vm.cpi.as_deref())
            .await)
            .is_err()
        {
            return;
        }
        let forgotten = match on_deleted {
            Some(on_deleted) => on_deleted().await,
            None => Ok(()),
        };
        match forgotten {
            Ok(()) => {
                let _ = self.write(Write::DeleteIntent(intent_id)).await;
            }
            Err(e) => {
                tracing::warn!(vm = %vm.cid, error = %e, "a deleted VM is still in its owner's record")
            }
        }
    }

    /// A `create_vm` that failed ([`Engine::not_created`]); when the cloud answered, the
    /// agent is let off the bus too, so the next run does not wait for it.
    async fn vm_not_created(
        &self,
        error: kubosh_cloud::CpiError,
        intent: &Intent,
        agent_id: &str,
    ) -> EngineError {
        if matches!(error, kubosh_cloud::CpiError::Cloud { .. })
            && let Some(access) = &self.config.agent_access
            && let Err(e) = access.revoke(&[agent_id.to_string()]).await
        {
            tracing::warn!(agent_id, error = %e, "cannot lock the agent of a VM the cloud did not make out of NATS");
        }
        self.not_created(error, intent).await
    }

    /// A creation in the cloud (`create_vm`, `create_disk`, `create_stemcell`,
    /// `snapshot_disk`) that failed. When the CPI answered with an error it made nothing (a
    /// CPI cleans up what a failed creation left): the intent is settled, so the next run
    /// neither looks for the thing nor warns that a run "stopped before the cloud answered".
    /// A call that got no answer (a timeout, a killed CPI, unreadable output) may have made
    /// it: its intent stays for recovery.
    pub(crate) async fn not_created(
        &self,
        error: kubosh_cloud::CpiError,
        intent: &Intent,
    ) -> EngineError {
        if matches!(error, kubosh_cloud::CpiError::Cloud { .. })
            && let Err(e) = self.write(Write::DeleteIntent(intent.id.clone())).await
        {
            tracing::warn!(intent = %intent.id, error = %e, "cannot settle the intent of a creation the cloud refused");
        }
        EngineError::from(error)
    }

    /// `delete_vm`, a VM already gone counting as deleted.
    pub(crate) async fn delete_vm_cid(
        &self,
        cid: &str,
        cpi: Option<&str>,
    ) -> Result<(), EngineError> {
        let cloud = self.cloud_of(cpi, &format!("VM {cid}"))?;
        match cloud.delete_vm(&VmCid(cid.to_string())).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == Some(&kubosh_cloud::ErrorKind::VmNotFound) => Ok(()),
            Err(e) => Err(EngineError::from(e)),
        }
    }

    /// `create_disk` for an instance, bracketed by an intent whose id is the call's request
    /// id. The returned intent id stays pending until the caller made the disk active
    /// ([`Engine::settle`]).
    pub async fn create_disk(
        &self,
        instance: &str,
        name: &str,
        size_mib: u64,
        cloud_properties: &Value,
        vm_cid: Option<&str>,
        cpi: Option<&str>,
    ) -> Result<(DiskRecord, String), EngineError> {
        let intent = Intent {
            id: kubosh_base::ids::uuid_v4(),
            kind: IntentKind::CreateDisk {
                instance: instance.to_string(),
                name: name.to_string(),
            },
            cid: None,
            cpi: cpi.map(str::to_string),
        };
        let cloud = self.cloud_of(cpi, &format!("disk '{name}' of {instance}"))?;
        self.write(Write::Intent(intent.clone())).await?;
        // The intent id travels as the call's request id: if we die before the answer,
        // recovery asks the cloud for the disk made for it.
        let request = CreateDisk {
            size_mib,
            cloud_properties: object(cloud_properties),
            vm_cid: vm_cid.map(|c| VmCid(c.to_string())),
        };
        let cid = match cloud
            .create_disk_with_request_id(&request, &intent.id)
            .await
        {
            Ok(cid) => cid,
            Err(e) => return Err(self.not_created(e, &intent).await),
        };
        self.write(Write::Intent(Intent {
            cid: Some(cid.0.clone()),
            ..intent.clone()
        }))
        .await?;
        Ok((
            DiskRecord {
                cid: cid.0,
                name: name.to_string(),
                size_mib,
                cloud_properties: cloud_properties.clone(),
                snapshots: Vec::new(),
                cpi: cpi.map(str::to_string),
            },
            intent.id,
        ))
    }

    /// Settles an intent whose result its owner record now carries.
    pub async fn settle(&self, intent_id: String) -> Result<(), EngineError> {
        self.write(Write::DeleteIntent(intent_id)).await
    }

    /// `update_settings` on a new VM once its disks are attached (§4.4 step 4, §4.5), as
    /// `instance.rb#update_instance_settings` sends it: the director's trusted certificates
    /// and the instance's unmanaged (named) persistent disks; the unnamed disk is the
    /// agent's to manage.
    pub(crate) async fn send_vm_settings(
        &self,
        agent_id: &str,
        instance: &str,
        disks: &[DiskRecord],
    ) -> Result<(), EngineError> {
        let settings = UpdateSettings {
            trusted_certs: self.config.trusted_certs.clone(),
            disk_associations: disks
                .iter()
                .filter(|d| !d.name.is_empty())
                .map(|d| DiskAssociation {
                    name: d.name.clone(),
                    cid: d.cid.clone(),
                })
                .collect(),
            ..UpdateSettings::default()
        };
        self.agent(agent_id, instance)
            .update_settings(&settings)
            .await
            .map_err(EngineError::Agent)
    }

    /// How long to wait for a new VM's agent.
    pub(crate) fn agent_wait(&self) -> Duration {
        self.config.agent_wait_timeout
    }

    /// Waits (the agent wait timeout at most) until `agent`, on VM `vm_cid` that was just
    /// created, rebooted or given a disk, answers. Alive then, though perhaps not heard for a
    /// while (bosh-agent's first heartbeat after a start is lost): the heartbeats are told,
    /// so the next deploy does not find it "silent".
    pub(crate) async fn wait_for_agent(
        &self,
        agent: &AgentClient,
        vm_cid: &str,
    ) -> Result<(), kubosh_transport::agent::AgentError> {
        agent.wait_until_ready(vm_cid, self.agent_wait()).await?;
        if let Some(health) = &self.config.health {
            health.answered(agent.agent_id());
        }
        Ok(())
    }
}

/// The record of `vm`, made as `request` asked.
pub(crate) fn recorded_vm(request: &VmRequest, vm: &NewVm) -> crate::state::VmRecord {
    crate::state::VmRecord {
        cid: vm.cid.clone(),
        agent_id: vm.agent_id.clone(),
        stemcell: request.stemcell.clone(),
        cloud_properties: request.cloud_properties.clone(),
        env: request.env.clone(),
        networks: vm.networks.clone(),
        cpi: vm.cpi.clone(),
    }
}

/// The time as `set_vm_metadata`'s `created_at` has it: `2006-01-02T15:04:05Z` in UTC.
pub fn created_at_now() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

/// A JSON object, or an empty one.
pub fn object(v: &Value) -> JsonMap<String, Value> {
    match v {
        Value::Object(m) => m.clone(),
        _ => JsonMap::new(),
    }
}

/// Network settings as the CPI types hold them.
pub fn networks(v: &Value) -> Networks {
    let mut out = Networks::new();
    if let Value::Object(m) = v {
        for (name, settings) in m {
            out.insert(name.clone(), NetworkSettings(object(settings)));
        }
    }
    out
}

/// The `{"bosh": {"mbus": {"cert": ...}}}` env entry carrying an agent's NATS client
/// certificate.
pub fn mbus_cert_env(ca: &str, certificate: &str, private_key: &str) -> JsonMap<String, Value> {
    object(&json!({"bosh": {"mbus": {"cert": {
        "ca": ca, "certificate": certificate, "private_key": private_key
    }}}}))
}
