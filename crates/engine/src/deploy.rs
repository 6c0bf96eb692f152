//! `bosh deploy`: the seed's steps in order. Under the deployment lock: the leftovers of a
//! killed run settled, then a deploy with nothing to do stops early (same inputs, every agent
//! running), else it is planned ([`crate::prepare`]: nothing changes), its addresses claimed
//! among the director's deployments (claimed elsewhere meanwhile: planned again), and
//! carried out ([`crate::execute`]).

use crate::execute::addresses::CLAIM_ATTEMPTS;
use crate::progress;
use crate::state::{DeploymentState, InstanceRecord, InstanceState};
use crate::{DeployRequest, Engine, EngineError};

pub use crate::prepare::{DeployReport, InstancePlan};

impl Engine {
    /// Deploys: brings the cloud in line with the request. Every failure is also reported
    /// on the event log as BOSH's error line.
    pub async fn deploy(&self, request: &DeployRequest) -> Result<DeployReport, EngineError> {
        let result = self.deploy_locked(request).await;
        if let Err(e) = &result {
            progress::error(self.events.as_ref(), e.code(), e.to_string());
        }
        result
    }

    async fn deploy_locked(&self, request: &DeployRequest) -> Result<DeployReport, EngineError> {
        let name = request.name();
        self.under_deployment_lock(name, "create deployment", |engine| async move {
            let result = engine.deploy_under_lock(request).await;
            if result.is_err() {
                // The DNS records follow what the deploy did before it failed, and addresses
                // claimed for instances it did not get to record go back.
                match engine.store.load().await {
                    Ok(state) => {
                        engine.publish_dns_after_failure(name, &state).await;
                        let held: Vec<&InstanceRecord> = state.instances.values().collect();
                        if let Err(e) = engine.release_unused_ips(name, held).await {
                            tracing::warn!(deployment = %name, error = %e, "cannot release addresses");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(deployment = %name, error = %e, "cannot release addresses")
                    }
                }
            }
            result
        })
        .await
    }

    async fn deploy_under_lock(
        &self,
        request: &DeployRequest,
    ) -> Result<DeployReport, EngineError> {
        self.warn_of(request);
        let mut state = self.store.load().await?;
        // Agents recorded before the bus was confined (or whose admission a killed run lost)
        // are let in again: one write, and nothing if they all are.
        let recorded: Vec<String> = (state.instances.values())
            .filter_map(|i| i.vm.as_ref().map(|vm| vm.agent_id.clone()))
            .collect();
        self.admit_agents(&recorded).await?;
        self.recover(&mut state, self.config.recovery_wait).await?;

        let links = self.consumed_links(request).await?;
        let inputs = self.inputs_digest(request, &links);
        let settled = state.meta.deployed_inputs.as_deref() == Some(inputs.as_str())
            && !request.requests.asks_for_changes()
            && request.action.is_none()
            && state.instances.values().all(|i| i.update_completed);
        // Nothing changed and every agent said `running` in a recent heartbeat: no call at all.
        if settled && self.heartbeats_say_settled(&state) {
            return Ok(DeployReport::nothing_to_do());
        }
        let observation = self.observe_deployment(state, request).await?;
        if settled && observation.all_running() {
            return Ok(DeployReport::nothing_to_do());
        }

        let mut resolved = self.resolve(request, links).await?;
        let deployment = request.name();
        // Everything is planned before anything changes; only then are the addresses claimed
        // among the director's deployments. One claimed elsewhere meanwhile means planning
        // again around it.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let plan = (self.plan_deploy(request, resolved, &observation, inputs.clone())).await?;
            self.checkpoint()?;
            match self.claim_addresses(deployment, &plan.addresses).await? {
                None => {
                    self.events
                        .milestone(progress::Milestone::Planned(plan.summary()));
                    return self.execute(plan).await;
                }
                Some(e) if attempt >= CLAIM_ATTEMPTS => return Err(e),
                // Planned again around the new claims, from the same resolved documents.
                Some(_) => resolved = plan.resolved,
            }
        }
    }

    /// Whether every instance's recent heartbeat shows it as it should be (running when
    /// started, any state when stopped, no VM when detached), with no intent pending.
    fn heartbeats_say_settled(&self, state: &DeploymentState) -> bool {
        let Some(health) = &self.config.health else {
            return false;
        };
        state.intents.is_empty()
            && state.instances.values().all(|i| match (&i.vm, i.state) {
                (_, InstanceState::Detached) => i.vm.is_none(),
                (Some(vm), InstanceState::Started) => {
                    health.recent_job_state(&vm.agent_id, self.config.health_window)
                        == Some("running".into())
                }
                (Some(vm), InstanceState::Stopped) => health
                    .recent_job_state(&vm.agent_id, self.config.health_window)
                    .is_some(),
                (None, _) => false,
            })
    }
}
