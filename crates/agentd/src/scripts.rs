//! Lifecycle scripts: what the agent's `run_script` action does (`agent/action/run_script.go`,
//! `agent/script/generic_script.go`, `agent/script/parallel_script.go`).
//!
//! For every job of the instance that has `jobs/<job>/bin/<script>`, the script is executed
//! (directly, so it needs its shebang and execute bit), all jobs in parallel, with stdout and
//! stderr appended to `sys/log/<job>/<script>.stdout.log` and `.stderr.log`. Jobs without the
//! script are skipped. Any non-zero exit fails the whole call with BOSH's summary
//! (`1 of 2 pre-start scripts failed. Failed Jobs: a. Successful Jobs: b.`), to which the
//! reason per failed job is added.
//!
//! Differences from the agent: scripts get a clean environment (the runner's, by default
//! [`super::default_env`], plus the call's `env`) instead of the agent's own plus `PATH`, and
//! an optional timeout can be set (the agent has none).

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use super::exec;
use super::layout::{InvalidName, Layout, check_name};

/// `pre-start`: before the jobs' processes start, after every apply.
pub const PRE_START: &str = "pre-start";
/// `post-start`: after the processes run.
pub const POST_START: &str = "post-start";
/// `post-deploy`: after every instance of the deployment was updated.
pub const POST_DEPLOY: &str = "post-deploy";
/// `pre-stop`: before drain, with the `BOSH_*_NEXT_STATE` variables.
pub const PRE_STOP: &str = "pre-stop";
/// `post-stop`: after the processes stopped.
pub const POST_STOP: &str = "post-stop";

/// What happens to something after a stop: `keep` or `delete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextState {
    /// It stays.
    Keep,
    /// It goes away.
    Delete,
}

impl NextState {
    /// `keep` / `delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Delete => "delete",
        }
    }
}

/// The environment of `pre-stop` (`bosh-protocols.md` §4.8): what happens to the VM, the
/// instance and the deployment after the stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreStopEnv {
    /// `BOSH_VM_NEXT_STATE`.
    pub vm: NextState,
    /// `BOSH_INSTANCE_NEXT_STATE`.
    pub instance: NextState,
    /// `BOSH_DEPLOYMENT_NEXT_STATE`.
    pub deployment: NextState,
}

impl PreStopEnv {
    /// The three variables.
    pub fn env(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "BOSH_VM_NEXT_STATE".to_string(),
                self.vm.as_str().to_string(),
            ),
            (
                "BOSH_INSTANCE_NEXT_STATE".to_string(),
                self.instance.as_str().to_string(),
            ),
            (
                "BOSH_DEPLOYMENT_NEXT_STATE".to_string(),
                self.deployment.as_str().to_string(),
            ),
        ])
    }
}

/// One job whose script (lifecycle or drain) failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptFailure {
    /// The job.
    pub job: String,
    /// Why (exit status, or why it could not run; for drain, with the script's output).
    pub reason: String,
}

/// What ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptsReport {
    /// Jobs whose script ran and succeeded.
    pub succeeded: Vec<String>,
    /// Jobs without the script.
    pub skipped: Vec<String>,
}

/// Why lifecycle scripts failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptsError {
    /// A job or script name that cannot be a path component.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// Some scripts failed.
    #[error("{}", failed_message(.script, .failed, .succeeded, "."))]
    Failed {
        /// The script name.
        script: String,
        /// The jobs whose script failed.
        failed: Vec<ScriptFailure>,
        /// The jobs whose script succeeded.
        succeeded: Vec<String>,
    },
}

/// The agent's summary of a parallel script run: `1 of 2 pre-start scripts failed. Failed Jobs:
/// b. Successful Jobs: a.` then each failure's reason, ended by `reason_end`.
pub fn failed_message(
    script: &str,
    failed: &[ScriptFailure],
    succeeded: &[String],
    reason_end: &str,
) -> String {
    let names: Vec<&str> = failed.iter().map(|f| f.job.as_str()).collect();
    let mut msg = format!(
        "{} of {} {script} scripts failed. Failed Jobs: {}",
        failed.len(),
        failed.len() + succeeded.len(),
        names.join(", ")
    );
    if !succeeded.is_empty() {
        msg.push_str(&format!(". Successful Jobs: {}", succeeded.join(", ")));
    }
    msg.push('.');
    for f in failed {
        msg.push_str(&format!(" {} {script}: {}{reason_end}", f.job, f.reason));
    }
    msg
}

/// Runs a lifecycle script of every job.
#[derive(Debug, Clone)]
pub struct ScriptRunner {
    layout: Layout,
    env: BTreeMap<String, String>,
    timeout: Option<Duration>,
}

impl ScriptRunner {
    /// Scripts of the jobs in `layout`, with [`super::default_env`] and no timeout.
    pub fn new(layout: Layout) -> Self {
        Self {
            layout,
            env: super::default_env(),
            timeout: None,
        }
    }

    /// Replaces the base environment (the call's `env` is added on top).
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Self {
        self.env = env;
        self
    }

    /// Kills a script (its whole process group) that runs longer than `timeout`.
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs `jobs/<job>/bin/<script>` for each of `jobs` that has it, in parallel, with `env`
    /// added to the environment; waits for all of them.
    pub async fn run(
        &self,
        script: &str,
        jobs: &[String],
        env: &BTreeMap<String, String>,
    ) -> Result<ScriptsReport, ScriptsError> {
        check_name("script", script)?;
        for job in jobs {
            check_name("job", job)?;
        }
        let mut report = ScriptsReport::default();
        let mut runs = Vec::new();
        for job in jobs {
            let path = self.layout.job_script(job, script);
            if path.exists() {
                runs.push(
                    async move { (job.clone(), self.run_one(job, script, &path, env).await) },
                );
            } else {
                report.skipped.push(job.clone());
            }
        }
        tracing::info!(script, count = runs.len(), "running scripts in parallel");
        let mut failed = Vec::new();
        for (job, result) in futures::future::join_all(runs).await {
            match result {
                Ok(()) => report.succeeded.push(job),
                Err(reason) => {
                    tracing::warn!(script, job = %job, "script failed: {reason}");
                    failed.push(ScriptFailure { job, reason });
                }
            }
        }
        if failed.is_empty() {
            Ok(report)
        } else {
            Err(ScriptsError::Failed {
                script: script.to_string(),
                failed,
                succeeded: report.succeeded,
            })
        }
    }

    async fn run_one(
        &self,
        job: &str,
        script: &str,
        path: &Path,
        env: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let log_dir = self.layout.job_log_dir(job);
        let stdout_log = log_dir.join(format!("{script}.stdout.log"));
        let stderr_log = log_dir.join(format!("{script}.stderr.log"));
        let open = |p: &Path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o640)
                .open(p)
        };
        let logs = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&log_dir)
            .and_then(|()| Ok((open(&stdout_log)?, open(&stderr_log)?)));
        let (out, err) = logs.map_err(|e| format!("opening logs in {}: {e}", log_dir.display()))?;
        let mut env_all = self.env.clone();
        env_all.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut cmd = exec::command(path, &env_all);
        cmd.stdout(out).stderr(err);
        let done = exec::run(
            cmd,
            false,
            self.timeout,
            std::future::pending(),
            Duration::from_secs(10),
        )
        .await
        .map_err(|e| e.to_string())?;
        if done.status.success() {
            Ok(())
        } else {
            let shown = stderr_log
                .strip_prefix(self.layout.base())
                .unwrap_or(&stderr_log)
                .display()
                .to_string();
            Err(format!(
                "{} (see {shown})",
                exec::describe_status(&done.status)
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_stop_env() {
        let env = PreStopEnv {
            vm: NextState::Delete,
            instance: NextState::Keep,
            deployment: NextState::Keep,
        }
        .env();
        assert_eq!(env["BOSH_VM_NEXT_STATE"], "delete");
        assert_eq!(env["BOSH_INSTANCE_NEXT_STATE"], "keep");
        assert_eq!(env["BOSH_DEPLOYMENT_NEXT_STATE"], "keep");
    }

    #[test]
    fn failure_message_is_boshs_summary_plus_reasons() {
        let err = ScriptsError::Failed {
            script: "pre-start".into(),
            failed: vec![ScriptFailure {
                job: "a".into(),
                reason: "exited with status 1".into(),
            }],
            succeeded: vec!["b".into()],
        };
        assert_eq!(
            err.to_string(),
            "1 of 2 pre-start scripts failed. Failed Jobs: a. Successful Jobs: b. a pre-start: exited with status 1."
        );
    }
}
