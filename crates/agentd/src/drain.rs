//! Drain scripts: what the agent's `drain` action does after `unmonitor`
//! (`agent/action/drain.go`, `agent/script/drain/concrete_script.go`, `script_params.go`).
//!
//! Every job with `jobs/<job>/bin/drain` runs it, all jobs in parallel, with the arguments
//! `<job_change> <hash_change> [updated packages...]` and the environment
//! `BOSH_JOB_STATE` / `BOSH_JOB_NEXT_STATE` (`{"persistent_disk": N}`, the next one absent
//! when there is no next spec). The script prints an integer: `n >= 0` means "wait n seconds
//! and be done", `n < 0` means "wait |n| seconds and ask again" (dynamic drain): the script
//! runs again with `job_check_status hash_unchanged` and no next state, for as long as it
//! keeps printing negative numbers. There is no overall timeout; the call can be cancelled,
//! which terminates the running scripts (SIGTERM, 10 s, SIGKILL).
//!
//! One deliberate difference: the agent accepts a non-zero exit when stdout still holds an
//! integer (cloudfoundry/bosh#1896, kept for compatibility); here a non-zero exit fails the
//! drain, as BOSH documents it, and the error carries the script's output.
//!
//! The length of one drain "second" is configurable ([`Drainer::with_second`]) so tests need
//! not sleep for real.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use serde_json::Value;

use super::exec;
use super::layout::{InvalidName, Layout, check_name};
use kubosh_base::digest::MultiDigest;

/// The `type` argument of the `drain` action (`update`, `shutdown`, or `status`, the
/// director's old dynamic-drain polling, which current agents refuse).
pub use kubosh_transport::agent::protocol::DrainType;
use kubosh_transport::agent::protocol::UnknownDrainType;

impl From<UnknownDrainType> for DrainError {
    fn from(e: UnknownDrainType) -> DrainError {
        DrainError::UnknownType(e.0)
    }
}

/// The parts of an apply spec that decide drain arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainSpec {
    /// Job names (`job.templates[].name`; empty without a rendered templates archive).
    pub jobs: Vec<String>,
    /// `configuration_hash`.
    pub configuration_hash: String,
    /// Package name to digest (`packages.*.sha1`).
    pub packages: BTreeMap<String, String>,
    /// `persistent_disk` in MiB.
    pub persistent_disk: i64,
}

impl DrainSpec {
    /// Reads the fields from an apply spec as the director sends it (missing fields are
    /// empty). Jobs count only with a `rendered_templates_archive`, as in the agent.
    pub fn from_apply_spec(spec: &Value) -> Self {
        let archive = &spec["rendered_templates_archive"];
        let has_archive = ["blobstore_id", "sha1"]
            .iter()
            .any(|k| archive[k].as_str().is_some_and(|s| !s.is_empty()));
        let jobs = if has_archive {
            spec["job"]["templates"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        } else {
            Vec::new()
        };
        let packages = spec["packages"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, p)| {
                let name = p["name"].as_str().unwrap_or(key).to_string();
                (name, p["sha1"].as_str().unwrap_or_default().to_string())
            })
            .collect();
        Self {
            jobs,
            configuration_hash: spec["configuration_hash"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            packages,
            persistent_disk: spec["persistent_disk"].as_i64().unwrap_or(0),
        }
    }

    /// `{"persistent_disk":N}`, the value of `BOSH_JOB_STATE` / `BOSH_JOB_NEXT_STATE`.
    pub fn job_state_json(&self) -> String {
        serde_json::json!({ "persistent_disk": self.persistent_disk }).to_string()
    }
}

/// Arguments and environment of one drain script run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainParams {
    /// `job_new`, `job_changed`, `job_shutdown` or `job_check_status`.
    pub job_change: String,
    /// `hash_new`, `hash_changed` or `hash_unchanged`.
    pub hash_change: String,
    /// Packages that are new or whose digest changed, sorted.
    pub updated_packages: Vec<String>,
    /// `BOSH_JOB_STATE`.
    pub job_state: Option<String>,
    /// `BOSH_JOB_NEXT_STATE` (absent when there is no next spec).
    pub job_next_state: Option<String>,
}

fn same_digest(a: &str, b: &str) -> bool {
    match (a.parse::<MultiDigest>(), b.parse::<MultiDigest>()) {
        (Ok(x), Ok(y)) => x.to_string() == y.to_string(),
        _ => a == b,
    }
}

impl DrainParams {
    /// For `drain update`: how `new` differs from `current`.
    pub fn update(current: &DrainSpec, new: &DrainSpec) -> Self {
        let job_change = if current.jobs.is_empty() {
            "job_new"
        } else {
            "job_changed"
        };
        let hash_change = if current.configuration_hash.is_empty() {
            "hash_new"
        } else if current.configuration_hash == new.configuration_hash {
            "hash_unchanged"
        } else {
            "hash_changed"
        };
        let updated_packages = new
            .packages
            .iter()
            .filter(|(name, digest)| {
                current
                    .packages
                    .get(*name)
                    .is_none_or(|old| !same_digest(old, digest))
            })
            .map(|(name, _)| name.clone())
            .collect();
        Self {
            job_change: job_change.to_string(),
            hash_change: hash_change.to_string(),
            updated_packages,
            job_state: Some(current.job_state_json()),
            job_next_state: Some(new.job_state_json()),
        }
    }

    /// For `drain shutdown`: `job_shutdown hash_unchanged`.
    pub fn shutdown(current: &DrainSpec, new: Option<&DrainSpec>) -> Self {
        Self {
            job_change: "job_shutdown".to_string(),
            hash_change: "hash_unchanged".to_string(),
            updated_packages: Vec::new(),
            job_state: Some(current.job_state_json()),
            job_next_state: new.map(DrainSpec::job_state_json),
        }
    }

    /// The parameters of a `drain <type> [new spec]` request, with the agent's errors for
    /// `status` and for `update` without a new spec.
    pub fn for_request(
        kind: DrainType,
        current: &DrainSpec,
        new: Option<&DrainSpec>,
    ) -> Result<Self, DrainError> {
        match kind {
            DrainType::Status => Err(DrainError::StatusType),
            DrainType::Update => Ok(Self::update(
                current,
                new.ok_or(DrainError::MissingNewSpec)?,
            )),
            DrainType::Shutdown => Ok(Self::shutdown(current, new)),
        }
    }

    /// The parameters of a re-run during dynamic drain: `job_check_status hash_unchanged`.
    pub fn to_status(&self) -> Self {
        Self {
            job_change: "job_check_status".to_string(),
            hash_change: "hash_unchanged".to_string(),
            updated_packages: Vec::new(),
            job_state: self.job_state.clone(),
            job_next_state: None,
        }
    }

    fn args(&self) -> Vec<String> {
        let mut a = vec![self.job_change.clone(), self.hash_change.clone()];
        a.extend(self.updated_packages.iter().cloned());
        a
    }
}

/// One job's drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDrain {
    /// The job.
    pub job: String,
    /// The integer each run printed, in order.
    pub results: Vec<i64>,
    /// Total drain seconds waited.
    pub waited_secs: u64,
}

/// One job whose drain failed (its reason carries the script's output).
pub type DrainFailure = super::scripts::ScriptFailure;

/// Why a drain failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrainError {
    /// A job name that cannot be a path component.
    #[error(transparent)]
    InvalidName(#[from] InvalidName),
    /// A `type` other than update, shutdown, status.
    #[error("unknown drain type {0:?}")]
    UnknownType(String),
    /// `drain status`, which current agents refuse.
    #[error("Unexpected call with drain type 'status'")]
    StatusType,
    /// `drain update` without the new apply spec.
    #[error("Drain update requires new spec")]
    MissingNewSpec,
    /// Some drain scripts failed.
    // The reasons end with the script's output, so no period is added after them.
    #[error("{}", super::scripts::failed_message("drain", .failed, .succeeded, ""))]
    Failed {
        /// The failed jobs.
        failed: Vec<DrainFailure>,
        /// The jobs that drained.
        succeeded: Vec<String>,
    },
}

/// How much of a failed script's stdout and stderr an error carries.
const OUTPUT_TAIL: usize = 4096;

/// Runs the drain scripts of the jobs of one VM.
#[derive(Debug, Clone)]
pub struct Drainer {
    layout: Layout,
    env: BTreeMap<String, String>,
    second: Duration,
    kill_grace: Duration,
}

impl Drainer {
    /// Drain scripts in `layout`, with [`super::default_env`], real seconds and the agent's
    /// 10 s between SIGTERM and SIGKILL on cancel.
    pub fn new(layout: Layout) -> Self {
        Self {
            layout,
            env: super::default_env(),
            second: Duration::from_secs(1),
            kill_grace: Duration::from_secs(10),
        }
    }

    /// Replaces the base environment (the `BOSH_JOB_*` variables are added on top).
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Self {
        self.env = env;
        self
    }

    /// How long one second a drain script asks for lasts (tests shrink it).
    pub fn with_second(mut self, second: Duration) -> Self {
        self.second = second;
        self
    }

    /// Drains every job of `jobs` that has a drain script, in parallel; returns when all are
    /// done (including their waits).
    pub async fn run(
        &self,
        jobs: &[String],
        params: &DrainParams,
    ) -> Result<Vec<JobDrain>, DrainError> {
        self.run_cancellable(jobs, params, std::future::pending())
            .await
    }

    /// [`Drainer::run`], ending early when `cancel` completes: running scripts are
    /// terminated and the jobs not done fail with "cancelled".
    pub async fn run_cancellable(
        &self,
        jobs: &[String],
        params: &DrainParams,
        cancel: impl Future<Output = ()>,
    ) -> Result<Vec<JobDrain>, DrainError> {
        for job in jobs {
            check_name("job", job)?;
        }
        let (tx, rx) = tokio::sync::watch::channel(false);
        let runs: Vec<_> = jobs
            .iter()
            .filter(|job| self.layout.job_script(job, "drain").exists())
            .map(|job| {
                let rx = rx.clone();
                async move { (job.clone(), self.drain_job(job, params, rx).await) }
            })
            .collect();
        tracing::info!(count = runs.len(), "running drain scripts in parallel");
        let all = futures::future::join_all(runs);
        tokio::pin!(all);
        tokio::pin!(cancel);
        let results = tokio::select! {
            r = &mut all => r,
            () = &mut cancel => {
                let _ = tx.send(true);
                all.await
            }
        };
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for (job, r) in results {
            match r {
                Ok(d) => done.push(d),
                Err(reason) => failed.push(DrainFailure { job, reason }),
            }
        }
        if failed.is_empty() {
            Ok(done)
        } else {
            Err(DrainError::Failed {
                failed,
                succeeded: done.into_iter().map(|d| d.job).collect(),
            })
        }
    }

    async fn drain_job(
        &self,
        job: &str,
        first: &DrainParams,
        cancel: tokio::sync::watch::Receiver<bool>,
    ) -> Result<JobDrain, String> {
        let path = self.layout.job_script(job, "drain");
        let mut params = first.clone();
        let mut report = JobDrain {
            job: job.to_string(),
            results: Vec::new(),
            waited_secs: 0,
        };
        loop {
            let mut env = self.env.clone();
            if let Some(s) = &params.job_state {
                env.insert("BOSH_JOB_STATE".to_string(), s.clone());
            }
            if let Some(s) = &params.job_next_state {
                env.insert("BOSH_JOB_NEXT_STATE".to_string(), s.clone());
            }
            let mut cmd = exec::command(&path, &env);
            cmd.args(params.args());
            let mut rx = cancel.clone();
            let cancelled = async move {
                let _ = rx.wait_for(|c| *c).await;
            };
            let out = exec::run(cmd, true, None, cancelled, self.kill_grace)
                .await
                .map_err(|e| match e {
                    exec::RunError::Cancelled => "Script was cancelled by user request".to_string(),
                    other => format!("Running drain script: {other}"),
                })?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                return Err(format!(
                    "{}, stdout: '{}', stderr: '{}'",
                    exec::describe_status(&out.status),
                    exec::tail_text(&out.stdout, OUTPUT_TAIL).trim_end(),
                    exec::tail_text(&out.stderr, OUTPUT_TAIL).trim_end()
                ));
            }
            let value: i64 = stdout.trim().parse().map_err(|_| {
                format!(
                    "Script did not return a signed integer, stdout: '{}'",
                    exec::tail_text(&out.stdout, OUTPUT_TAIL).trim_end()
                )
            })?;
            report.results.push(value);
            let secs = value.unsigned_abs();
            report.waited_secs = report.waited_secs.saturating_add(secs);
            let nanos = self.second.as_nanos().saturating_mul(u128::from(secs));
            let wait = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
            let mut rx = cancel.clone();
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = rx.wait_for(|c| *c) => {
                    return Err("Script was cancelled by user request".to_string());
                }
            }
            if value >= 0 {
                return Ok(report);
            }
            params = params.to_status();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(jobs: &[&str], hash: &str, pkgs: &[(&str, &str)], disk: i64) -> DrainSpec {
        DrainSpec {
            jobs: jobs.iter().map(|s| s.to_string()).collect(),
            configuration_hash: hash.to_string(),
            packages: pkgs
                .iter()
                .map(|(n, d)| (n.to_string(), d.to_string()))
                .collect(),
            persistent_disk: disk,
        }
    }

    #[test]
    fn update_params_like_the_agent() {
        let old = spec(&["web"], "h1", &[("a", "1"), ("b", "2")], 1024);
        let new = spec(&["web"], "h2", &[("a", "1"), ("b", "3"), ("c", "4")], 0);
        let p = DrainParams::update(&old, &new);
        assert_eq!(p.args(), ["job_changed", "hash_changed", "b", "c"]);
        assert_eq!(p.job_state.as_deref(), Some(r#"{"persistent_disk":1024}"#));
        assert_eq!(
            p.job_next_state.as_deref(),
            Some(r#"{"persistent_disk":0}"#)
        );
        let s = p.to_status();
        assert_eq!(s.args(), ["job_check_status", "hash_unchanged"]);
        assert_eq!(s.job_next_state, None);
        assert_eq!(s.job_state, p.job_state);

        let fresh = spec(&[], "", &[], 0);
        let p = DrainParams::update(&fresh, &new);
        assert_eq!(&p.args()[..2], ["job_new", "hash_new"]);
        let p = DrainParams::update(&old, &old);
        assert_eq!(p.args(), ["job_changed", "hash_unchanged"]);
        // The same digest written differently is no change.
        let a = spec(&["w"], "h", &[("a", "sha1:abc")], 0);
        let b = spec(&["w"], "h", &[("a", "abc")], 0);
        assert!(DrainParams::update(&a, &b).updated_packages.is_empty());
    }

    #[test]
    fn shutdown_and_request_params() {
        let old = spec(&["web"], "h1", &[("a", "1")], 10);
        let p = DrainParams::shutdown(&old, None);
        assert_eq!(p.args(), ["job_shutdown", "hash_unchanged"]);
        assert_eq!(p.job_next_state, None);
        let new = spec(&["web"], "h1", &[], 0);
        let p = DrainParams::for_request(DrainType::Shutdown, &old, Some(&new)).unwrap();
        assert_eq!(
            p.job_next_state.as_deref(),
            Some(r#"{"persistent_disk":0}"#)
        );
        assert_eq!(
            DrainParams::for_request(DrainType::Update, &old, None),
            Err(DrainError::MissingNewSpec)
        );
        assert_eq!(
            DrainParams::for_request(DrainType::Status, &old, None),
            Err(DrainError::StatusType)
        );
        assert_eq!("shutdown".parse::<DrainType>(), Ok(DrainType::Shutdown));
        assert!(matches!(
            "nope".parse::<DrainType>().map_err(DrainError::from),
            Err(DrainError::UnknownType(t)) if t == "nope"
        ));
    }

    #[test]
    fn spec_from_apply_spec_json() {
        let v = serde_json::json!({
            "job": {"name": "web", "templates": [{"name": "nginx"}, {"name": "route"}]},
            "packages": {"nginx": {"name": "nginx", "sha1": "abc", "version": "1.1"}},
            "configuration_hash": "cfg",
            "persistent_disk": 2048,
            "rendered_templates_archive": {"blobstore_id": "b", "sha1": "s"},
        });
        let s = DrainSpec::from_apply_spec(&v);
        assert_eq!(s.jobs, ["nginx", "route"]);
        assert_eq!(s.packages["nginx"], "abc");
        assert_eq!(s.configuration_hash, "cfg");
        assert_eq!(s.persistent_disk, 2048);
        let mut v = v;
        v["rendered_templates_archive"] = serde_json::json!({});
        assert!(DrainSpec::from_apply_spec(&v).jobs.is_empty());
        assert_eq!(
            DrainSpec::from_apply_spec(&serde_json::json!(null)),
            DrainSpec::default()
        );
    }
}
