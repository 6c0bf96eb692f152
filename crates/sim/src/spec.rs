//! The simulated agent's `get_state` value, built from the spec as agents persist it
//! (`kubosh_bosh::agent::apply_spec`, the same shape kubosh's real agent answers).

use serde_json::{Map, Value, json};

use kubosh_bosh::agent::apply_spec;
pub use kubosh_bosh::agent::apply_spec::{fill_dynamic_networks, persisted};

fn object<const N: usize>(entries: [(&str, Value); N]) -> Value {
    let mut map = Map::with_capacity(N);
    for (key, value) in entries {
        map.insert(key.to_string(), value);
    }
    Value::Object(map)
}

/// The names of the jobs in a persisted spec (one simulated process each).
pub fn job_names(spec: &Value) -> Vec<&str> {
    spec["job"]["templates"]
        .as_array()
        .map(|ts| ts.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default()
}

/// What `get_state` derives from the agent's switches.
pub struct JobsStatus {
    /// `start` was called since the last `stop`.
    pub started: bool,
    /// `stop` was called since the last `start`.
    pub stopped: bool,
    /// The processes never reach `running`.
    pub never_running: bool,
}

impl JobsStatus {
    /// `job_state` alone, for `jobs` jobs (what a heartbeat carries).
    pub fn job_state(&self, jobs: usize) -> &'static str {
        self.states(jobs).0
    }

    /// `job_state` and each process' state: `stopped` after `stop` (processes unmonitored);
    /// with no jobs `running`; jobs not started yet are unmonitored (`failing`); started
    /// jobs are `running`, or `failing` under the never-running switch.
    fn states(&self, jobs: usize) -> (&'static str, &'static str) {
        if self.stopped {
            ("stopped", "unknown")
        } else if jobs == 0 {
            ("running", "running")
        } else if !self.started {
            ("failing", "unknown")
        } else if self.never_running {
            ("failing", "failing")
        } else {
            ("running", "running")
        }
    }
}

/// The value of `get_state` (`full`: with vitals).
pub fn state(spec: &Value, agent_id: &str, vm_cid: &str, jobs: &JobsStatus, full: bool) -> Value {
    // Sized once: the agent's keys are added below.
    let mut out = apply_spec::state_base(spec, 5);
    let names = job_names(spec);
    let (job_state, process_state) = jobs.states(names.len());
    out.insert("agent_id".into(), json!(agent_id));
    out.insert("job_state".into(), json!(job_state));
    if full {
        out.insert("vitals".into(), vitals());
    }
    if !names.is_empty() {
        let processes: Vec<Value> = names
            .iter()
            .map(|name| {
                object([
                    ("name", json!(name)),
                    ("state", json!(process_state)),
                    ("uptime", object([("secs", json!(0))])),
                    ("mem", object([("kb", json!(0)), ("percent", json!(0.0))])),
                    ("cpu", object([("total", json!(0.0))])),
                ])
            })
            .collect();
        out.insert("processes".into(), Value::Array(processes));
    }
    out.insert("vm".into(), json!({ "name": vm_cid }));
    Value::Object(out)
}

/// Idle machine vitals, in the agent's shape (numbers as strings).
fn vitals() -> Value {
    let disk = json!({"inode_percent": "0", "percent": "0"});
    json!({
        "cpu": {"sys": "0.0", "user": "0.0", "wait": "0.0"},
        "disk": {"system": disk, "ephemeral": disk},
        "load": ["0.00", "0.00", "0.00"],
        "mem": {"kb": "0", "percent": "0"},
        "swap": {"kb": "0", "percent": "0"},
        "uptime": {"secs": 0},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubosh_transport::agent::protocol::{AgentState, JobState};

    #[test]
    fn get_state_reads_as_the_protocol_type_with_derived_job_states() {
        let spec = Value::Object(persisted(&json!({"job": {"name": "web", "templates": [
            {"name": "a", "version": "1"}, {"name": "b", "version": "1"}]}})));
        let status = |started, stopped, never_running| JobsStatus {
            started,
            stopped,
            never_running,
        };
        let read = |s: &JobsStatus| -> AgentState {
            serde_json::from_value(state(&spec, "agent-1", "vm-1", s, true)).unwrap()
        };
        let running = read(&status(true, false, false));
        assert_eq!(running.job_state, JobState::Running);
        assert_eq!(running.agent_id.as_deref(), Some("agent-1"));
        assert_eq!(running.vm.as_ref().unwrap().name, "vm-1");
        assert!(running.vitals.is_some());
        assert!(running.failing_processes().is_empty());
        let failing = read(&status(true, false, true));
        assert_eq!(failing.job_state, JobState::Failing);
        assert_eq!(failing.failing_processes(), vec!["a", "b"]);
        assert_eq!(
            read(&status(false, true, false)).job_state,
            JobState::Stopped
        );
        assert_eq!(
            read(&status(false, false, false)).job_state,
            JobState::Failing
        );
        let fresh = state(
            &json!({}),
            "agent-1",
            "vm-1",
            &status(false, false, false),
            false,
        );
        assert_eq!(fresh["job_state"], "running");
        assert_eq!(fresh["networks"], json!({}));
        assert!(fresh.get("processes").is_none());
    }
}
