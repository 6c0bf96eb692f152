//! `bosh run-errand` for errands colocated on a deployment's instances: a job with a
//! `bin/run` placed on a service instance group runs on each of its instances that the
//! caller chose (the agent's `run_errand <job>`), one `Running errand` stage task per
//! instance, in parallel, and each instance's exit code, stdout and stderr come back; a
//! non-zero exit code is a result, not a failure of the task. Instance groups with
//! `lifecycle: errand` (VMs made for the run) are not run by this engine yet.

use futures::StreamExt;

use crate::progress::StageRun;
use crate::state::InstanceRecord;
use crate::{Engine, EngineError};

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
}
