//! The VM of create-env (the research notes §3.2): the old VM shut down and deleted, the new
//! one created with its CID saved at once, its agent waited for over the HTTPS mbus.

use std::time::Duration;

use serde_json::json;

use crate::model::{EnvDeployment, StemcellRecord};
use crate::store::{EnvIntent, StateFile};
use crate::{EnvError, Ui, redact_url, run, step};
use kubosh_cloud::{
    Cloud, CreateVm, DiskCid, ErrorKind, ExternalCpi, NetworkSettings, StemcellCid, VmCid,
};
use kubosh_transport::agent::protocol::RunScriptOptions;
use kubosh_transport::agent::{AgentClient, AgentError, ClientOptions, HttpsTransport, Method};

/// How long an existing VM's agent gets to answer before it is deleted regardless.
const OLD_AGENT_WAIT: Duration = Duration::from_secs(10);

/// How long a new VM's agent gets to come up.
pub(super) const NEW_AGENT_WAIT: Duration = Duration::from_secs(600);

/// bosh-cli's pause between two pings of an agent that did not answer.
const PING_DELAY: Duration = Duration::from_millis(500);

/// How long one ping may take.
const PING_ATTEMPT: Duration = Duration::from_secs(5);

/// How often a task's agent is asked whether it ended (bosh-cli: every second).
const TASK_POLL: Duration = Duration::from_millis(100);

/// The instance name bosh-cli uses for an existing VM (the state does not record the group).
const UNKNOWN_INSTANCE: &str = "unknown/0";

/// Everything one run works with.
pub(super) struct Session {
    pub ui: Ui,
    pub cloud: ExternalCpi,
    pub file: StateFile,
    pub transport: HttpsTransport,
    /// `cloud_provider.mbus` without its password.
    pub mbus: String,
    pub skip_drain: bool,
}

impl Session {
    /// The agent at the mbus URL (the URL names it; the id only names it in messages), with
    /// bosh-cli's options except the task polling: every 100 ms instead of every second, as a
    /// loopback or LAN round trip costs little and every task would otherwise take a second.
    pub fn agent(&self, agent_id: &str) -> AgentClient {
        self.transport
            .clone()
            .agent(agent_id)
            .with_options(ClientOptions {
                poll_interval: TASK_POLL,
                ..ClientOptions::create_env()
            })
    }

    /// Pings until the agent answers, for at most `wait`: bosh-cli's loop, a `ping` every
    /// 0.5 s (each given 5 s), giving up at once when the agent's certificate is refused
    /// (waiting would not change it).
    pub async fn wait_for_agent(&self, vm: &str, wait: Duration) -> Result<(), EnvError> {
        let agent = self.agent("unknown");
        let deadline = tokio::time::Instant::now() + wait;
        let unreachable = |reason: String| EnvError::AgentUnreachable {
            vm: vm.to_string(),
            mbus: self.mbus.clone(),
            reason,
        };
        loop {
            let attempt = tokio::time::timeout(PING_ATTEMPT, agent.ping()).await;
            let reason = match attempt {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer to ping within {} s", PING_ATTEMPT.as_secs()),
            };
            if reason.contains("certificate") {
                return Err(unreachable(reason));
            }
            if tokio::time::Instant::now() + PING_DELAY >= deadline {
                return Err(unreachable(format!(
                    "no answer after {} s; last: {reason}",
                    wait.as_secs()
                )));
            }
            tokio::time::sleep(PING_DELAY).await;
        }
    }

    /// Shuts the current VM down and deletes it (steps 1–8 of the research notes §3.2): an
    /// agent that does not answer within 10 s is not waited for.
    pub async fn delete_current_vm(&mut self) -> Result<(), EnvError> {
        let cid = self.file.state().current_vm_cid.clone();
        if cid.is_empty() {
            return Ok(());
        }
        let vm = VmCid(cid.clone());
        // A cloud that cannot tell is asked to delete it anyway.
        let exists = self.cloud.has_vm(&vm).await.unwrap_or(true);
        if exists {
            let ui = self.ui.clone();
            let ready = ui
                .run(
                    &format!("Waiting for the agent on VM '{cid}'"),
                    self.wait_for_agent(&cid, OLD_AGENT_WAIT),
                )
                .await;
            if let Err(e) = ready {
                tracing::info!(vm = %cid, error = %e, "the old VM's agent does not answer; deleting the VM without stopping its jobs");
            } else {
                self.stop_jobs().await?;
            }
        }
        let cloud = self.cloud.clone();
        step(&self.ui.clone(), &format!("Deleting VM '{cid}'"), async {
            match cloud.delete_vm(&vm).await {
                Ok(()) => Ok(((), None)),
                Err(e) if e.is(&ErrorKind::VmNotFound) => Ok(((), Some("VM not found".into()))),
                Err(e) => Err(EnvError::from(e)),
            }
        })
        .await?;
        self.file.update(|s| s.forget_vm())
    }

    /// pre-stop, drain, stop, post-stop, and every disk unmounted, on the current VM.
    async fn stop_jobs(&self) -> Result<(), EnvError> {
        let agent = self.agent("unknown");
        let ui = &self.ui;
        let none = RunScriptOptions::default();
        run(
            ui,
            &format!("Running the pre-stop scripts '{UNKNOWN_INSTANCE}'"),
            async { Ok(agent.run_script("pre-stop", &none).await?) },
        )
        .await?;
        if !self.skip_drain {
            run(
                ui,
                &format!("Draining jobs on instance '{UNKNOWN_INSTANCE}'"),
                drain(&agent),
            )
            .await?;
        }
        run(
            ui,
            &format!("Stopping jobs on instance '{UNKNOWN_INSTANCE}'"),
            async { Ok(agent.stop().await?) },
        )
        .await?;
        run(
            ui,
            &format!("Running the post-stop scripts '{UNKNOWN_INSTANCE}'"),
            async { Ok(agent.run_script("post-stop", &none).await?) },
        )
        .await?;
        for disk in agent.list_disk().await? {
            run(ui, &format!("Unmounting disk '{disk}'"), async {
                agent.unmount_disk(&disk).await?;
                Ok(())
            })
            .await?;
        }
        Ok(())
    }

    /// `delete_stemcell`, then the record removed (its current id with it).
    pub async fn delete_stemcell(
        &mut self,
        stemcell: &StemcellRecord,
        what: &str,
    ) -> Result<(), EnvError> {
        let cloud = self.cloud.clone();
        run(
            &self.ui.clone(),
            &format!("{what} '{}'", stemcell.cid),
            async {
                cloud
                    .delete_stemcell(&StemcellCid(stemcell.cid.clone()))
                    .await?;
                Ok(())
            },
        )
        .await?;
        let id = stemcell.id.clone();
        self.file.update(|s| s.remove_stemcell(&id))
    }

    /// `create_vm` for a new agent id, the CID saved at once (an intent kept until then), VM
    /// metadata, the stemcell record made current. Answers the agent id and the VM.
    pub async fn create_vm(
        &mut self,
        deployment: &EnvDeployment,
        stemcell_id: &str,
        stemcell_cid: &str,
    ) -> Result<(String, String), EnvError> {
        let name = format!(
            "Creating VM for instance '{}/0' from stemcell '{stemcell_cid}'",
            deployment.group
        );
        let ui = self.ui.clone();
        let agent_id = kubosh_base::ids::uuid_v4();
        let result = ui
            .run(
                &name,
                self.create_vm_inner(deployment, stemcell_id, stemcell_cid, &agent_id),
            )
            .await;
        result.map(|vm| (agent_id, vm)).map_err(|e| EnvError::Step {
            step: name,
            source: Box::new(e),
        })
    }

    async fn create_vm_inner(
        &mut self,
        deployment: &EnvDeployment,
        stemcell_id: &str,
        stemcell_cid: &str,
        agent_id: &str,
    ) -> Result<String, EnvError> {
        let request = CreateVm {
            agent_id: agent_id.to_string(),
            stemcell_cid: StemcellCid(stemcell_cid.to_string()),
            cloud_properties: deployment.vm_cloud_properties.clone(),
            networks: deployment
                .networks
                .iter()
                .map(|(name, v)| {
                    let settings = v.as_object().cloned().unwrap_or_default();
                    (name.clone(), NetworkSettings(settings))
                })
                .collect(),
            disk_cids: self
                .file
                .state()
                .disk_cids()
                .into_iter()
                .map(DiskCid)
                .collect(),
            env: deployment.vm_env.expose().clone(),
        };
        let intent = EnvIntent::CreateVm {
            agent_id: agent_id.to_string(),
        };
        self.file.add_intent(intent.clone())?;
        let created = self.cloud.create_vm(&request).await?;
        let cid = created.cid.0.clone();
        // Saved before anything else, so the VM is never forgotten.
        self.file.update(|s| s.current_vm_cid = cid.clone())?;
        self.file.remove_intent(&intent)?;
        let metadata = vm_metadata(deployment);
        match self.cloud.set_vm_metadata(&created.cid, &metadata).await {
            Ok(()) => {}
            Err(e) if e.is(&ErrorKind::NotImplemented) => {}
            Err(e) => return Err(e.into()),
        }
        let id = stemcell_id.to_string();
        self.file.update(|s| s.current_stemcell_id = id)?;
        Ok(cid)
    }
}

/// `drain ["shutdown", {}]`, then `drain ["status", {}]` while the answer is negative
/// (waiting its absolute value in seconds), then the last answer's seconds.
async fn drain(agent: &AgentClient) -> Result<(), EnvError> {
    let mut wait = drain_call(agent, "shutdown").await?;
    while wait < 0 {
        tokio::time::sleep(Duration::from_secs(wait.unsigned_abs())).await;
        wait = drain_call(agent, "status").await?;
    }
    tokio::time::sleep(Duration::from_secs(wait.unsigned_abs())).await;
    Ok(())
}

async fn drain_call(agent: &AgentClient, kind: &str) -> Result<i64, EnvError> {
    let value = agent.call(Method::Drain, &[json!(kind), json!({})]).await?;
    value.as_i64().ok_or_else(|| {
        EnvError::from(AgentError::MalformedReply {
            method: "drain".into(),
            agent_id: "unknown".into(),
            reason: format!("expected a number of seconds, got {value}"),
        })
    })
}

/// bosh-cli's VM metadata: deployment, group, index, `director: bosh-init`, name, creation
/// time, and the manifest's tags.
pub(super) fn vm_metadata(deployment: &EnvDeployment) -> kubosh_cloud::Object {
    let mut m = kubosh_cloud::Object::new();
    m.insert("deployment".into(), json!(deployment.name));
    m.insert("job".into(), json!(deployment.group));
    m.insert("instance_group".into(), json!(deployment.group));
    m.insert("index".into(), json!("0"));
    m.insert("director".into(), json!("bosh-init"));
    m.insert("name".into(), json!(format!("{}/0", deployment.group)));
    m.insert("created_at".into(), json!(now_rfc3339()));
    for (k, v) in &deployment.tags {
        m.insert(k.clone(), v.clone());
    }
    m
}

/// The disk metadata: the VM's without job, name, index and creation time, plus
/// `instance_index` and `attached_at`.
pub(super) fn disk_metadata(deployment: &EnvDeployment) -> kubosh_cloud::Object {
    let mut m = vm_metadata(deployment);
    for key in ["job", "name", "index", "created_at"] {
        m.remove(key);
    }
    m.insert("instance_index".into(), json!("0"));
    m.insert("attached_at".into(), json!(now_rfc3339()));
    m
}

fn now_rfc3339() -> String {
    kubosh_engine::vm::created_at_now()
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("mbus", &redact_url(&self.mbus))
            .finish_non_exhaustive()
    }
}
