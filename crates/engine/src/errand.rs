//! `bosh run-errand` for errands colocated on a deployment's instances: a job with a
//! `bin/run` placed on a service instance group runs on each of its instances that the
//! caller chose (the agent's `run_errand <job>`), one `Running errand` stage task per
//! instance, in parallel, and each instance's exit code, stdout and stderr come back; a
//! non-zero exit code is a result, not a failure of the task. An instance group with
//! `lifecycle: errand` has no VMs between runs: [`Engine::run_lifecycle_errand`] brings
//! its instances up with a deploy (VMs made and jobs applied through the deploy's
//! crash-safe path), runs the errand on them, and deletes them again unless kept alive.

use futures::StreamExt;

use crate::progress::StageRun;
use crate::state::{DeploymentMeta, InstanceRecord, Write};
use crate::{DeployRequest, Engine, EngineError};

/// One instance's run of an errand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrandOutcome {
    /// The instance group.
    pub group: String,
    /// The instance's id.
    pub id: String,
    /// `bin/run`'s exit code (above 128: killed by a signal, as when cancelled).
    pub exit_code: i64,
    /// The tail of its stdout.
    pub stdout: String,
    /// The tail of its stderr.
    pub stderr: String,
}

impl Engine {
    /// Runs errand `errand` of deployment `name` on `instances` (as
    /// [`Engine::instances_named`] chose them), those that have the job; none of them
    /// having it is an error naming the errand.
    pub async fn run_errand(
        &self,
        name: &str,
        errand: &str,
        instances: Vec<InstanceRecord>,
    ) -> Result<Vec<ErrandOutcome>, EngineError> {
        let with_job: Vec<InstanceRecord> = (instances.into_iter())
            .filter(|i| (i.applied.iter().flat_map(|a| &a.jobs)).any(|job| job.name == errand))
            .collect();
        if with_job.is_empty() {
            return Err(EngineError::NoSuchErrand {
                deployment: name.to_string(),
                errand: errand.to_string(),
            });
        }
        let stage = StageRun::new(
            self.events.clone(),
            "Running errand",
            vec![],
            with_job.len(),
        );
        let runs = with_job.into_iter().map(|instance| {
            let stage = &stage;
            async move {
                let display = instance.display_name();
                let Some(vm) = &instance.vm else {
                    return Err(EngineError::InstanceVmMissing { instance: display });
                };
                let agent = self.agent(&vm.agent_id, &display);
                let cancel = self.cancel.cancelled();
                let result = stage
                    .task(display.clone(), async {
                        agent
                            .run_errand(Some(errand), cancel)
                            .await
                            .map_err(EngineError::from)
                    })
                    .await?;
                Ok(ErrandOutcome {
                    group: instance.group.clone(),
                    id: instance.uuid.clone(),
                    exit_code: result.exit_code,
                    stdout: result.stdout,
                    stderr: result.stderr,
                })
            }
        });
        let mut outcomes = Vec::new();
        let mut results =
            futures::stream::iter(runs).buffered(self.config.get_state_concurrency.max(1));
        while let Some(outcome) = results.next().await {
            outcomes.push(outcome?);
        }
        Ok(outcomes)
    }

    /// `bosh run-errand` of `request`'s instance group `group`, which has `lifecycle:
    /// errand`: its instances deployed (the request with `group` among its `errands`), the
    /// errand (the group's first job's `bin/run`) run on each, then, unless `keep_alive`,
    /// the instances deleted (`Deleting errand instances`) and their addresses released,
    /// also when their deploy failed or the errand could not run.
    pub async fn run_lifecycle_errand(
        &self,
        request: &DeployRequest,
        group: &str,
        keep_alive: bool,
    ) -> Result<Vec<ErrandOutcome>, EngineError> {
        let name = request.name().to_string();
        let job = (request.manifest().instance_groups.iter())
            .find(|g| g.name == group && g.is_errand())
            .and_then(|g| g.jobs.first())
            .map(|j| j.name.clone())
            .ok_or_else(|| EngineError::NoSuchErrand {
                deployment: name.clone(),
                errand: group.to_string(),
            })?;
        let mut with_errand = request.clone();
        with_errand.errands.insert(group.to_string());
        // Whatever of the deploy happened, the errand's VMs go again (unless kept alive).
        let ran = match self.deploy(&with_errand).await {
            Ok(_) => match self.instances_named(&name, Some(group)).await {
                Ok(instances) => self.run_errand(&name, &job, instances).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        if !keep_alive {
            self.delete_errand_instances(request, &with_errand, group)
                .await?;
        }
        ran
    }

    /// Deletes the instances of errand group `group` (under the deployment's lock) and
    /// releases their addresses. The deployment is then as `request` deploys it again: when
    /// the errand's deploy (`with_errand`) was the last one recorded, `request`'s inputs are
    /// recorded instead, so the next deploy of the same inputs is a no-op that asks nothing.
    async fn delete_errand_instances(
        &self,
        request: &DeployRequest,
        with_errand: &DeployRequest,
        group: &str,
    ) -> Result<(), EngineError> {
        let name = request.name();
        self.under_deployment_lock(name, "delete errand instances", |engine| async move {
            let state = engine.store.load().await?;
            let records: Vec<InstanceRecord> = (state.instances.values())
                .filter(|r| r.group == group)
                .cloned()
                .collect();
            engine
                .delete_instances("Deleting errand instances", records)
                .await?;
            let left = engine.store.load().await?;
            engine
                .release_unused_ips(name, left.instances.values().collect())
                .await?;
            // Without the links the digests cannot be told: the next deploy plans in full.
            let links = match engine.consumed_links(request).await {
                Ok(links) => links,
                Err(e) => {
                    tracing::warn!(deployment = %name, error = %e, "cannot read the links the deployment consumes");
                    return Ok(());
                }
            };
            let errand_inputs = engine.inputs_digest(with_errand, &links);
            if left.meta.deployed_inputs.as_deref() == Some(errand_inputs.as_str()) {
                let meta = DeploymentMeta {
                    deployed_inputs: Some(engine.inputs_digest(request, &links)),
                    ..left.meta
                };
                engine.write(Write::Meta(meta)).await?;
            }
            Ok(())
        })
        .await
    }
}
