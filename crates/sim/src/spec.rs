//! The apply spec as an agent keeps it, and the `get_state` value built from it.
//!
//! bosh-agent persists the spec as its typed `V1ApplySpec`: exactly its keys (each job reduced
//! to `name` and `version`, each package to its blob fields, `properties` to
//! `logging.max_log_file_size`), Go's zero values where the director sent nothing, `networks`
//! and `resource_pool` verbatim. `get_state` reports nil maps as `{}`, then adds the agent's
//! own keys. The director compares what comes back, so the simulated agent answers the same
//! shape as kubosh's real agent.

use serde_json::{Map, Value, json};

fn text(v: &Value) -> Value {
    Value::String(v.as_str().unwrap_or_default().to_string())
}

fn object_or_null(v: &Value) -> Value {
    if v.is_object() {
        v.clone()
    } else {
        Value::Null
    }
}

/// A JSON object of exactly these entries, allocated once (these objects are built for
/// every `apply` and `get_state` of thousands of simulated agents).
fn map<const N: usize>(entries: [(&str, Value); N]) -> Map<String, Value> {
    let mut map = Map::with_capacity(N);
    for (key, value) in entries {
        map.insert(key.to_string(), value);
    }
    map
}

fn object<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Object(map(entries))
}

/// The spec as the agent persists it after `apply`.
pub fn persisted(spec: &Value) -> Map<String, Value> {
    let job = &spec["job"];
    let templates = job["templates"].as_array().map(|ts| {
        ts.iter()
            .map(|t| object([("name", text(&t["name"])), ("version", text(&t["version"]))]))
            .collect::<Vec<_>>()
    });
    let packages = spec["packages"].as_object().map(|ps| {
        let mut out = Map::with_capacity(ps.len());
        for (key, p) in ps {
            let headers = p["blobstore_headers"]
                .as_object()
                .map(|h| {
                    h.iter()
                        .map(|(k, v)| (k.clone(), text(v)))
                        .collect::<Map<_, _>>()
                })
                .map_or(Value::Null, Value::Object);
            let package = object([
                ("name", text(&p["name"])),
                ("version", text(&p["version"])),
                ("sha1", text(&p["sha1"])),
                ("blobstore_id", text(&p["blobstore_id"])),
                ("signed_url", text(&p["signed_url"])),
                ("blobstore_headers", headers),
            ]);
            out.insert(key.clone(), package);
        }
        out
    });
    let archive = &spec["rendered_templates_archive"];
    let named = ["blobstore_id", "sha1"]
        .iter()
        .any(|k| archive[k].as_str().is_some_and(|s| !s.is_empty()));
    let archive = if named {
        object([
            ("sha1", text(&archive["sha1"])),
            ("blobstore_id", text(&archive["blobstore_id"])),
        ])
    } else {
        Value::Null
    };
    let max_log_file_size = text(&spec["properties"]["logging"]["max_log_file_size"]);
    map([
        (
            "properties",
            object([(
                "logging",
                object([("max_log_file_size", max_log_file_size)]),
            )]),
        ),
        (
            "job",
            object([
                ("name", json!(job["name"].as_str())),
                ("release", text(&job["release"])),
                ("template", text(&job["template"])),
                ("version", text(&job["version"])),
                ("templates", templates.map_or(Value::Null, Value::Array)),
            ]),
        ),
        ("packages", packages.map_or(Value::Null, Value::Object)),
        ("configuration_hash", text(&spec["configuration_hash"])),
        ("networks", object_or_null(&spec["networks"])),
        ("resource_pool", spec["resource_pool"].clone()),
        ("deployment", text(&spec["deployment"])),
        ("name", text(&spec["name"])),
        ("index", json!(spec["index"].as_i64())),
        ("id", text(&spec["id"])),
        ("az", text(&spec["az"])),
        (
            "persistent_disk",
            json!(spec["persistent_disk"].as_i64().unwrap_or(0)),
        ),
        ("rendered_templates_archive", archive),
    ])
}

/// Dynamic networks get the address the VM actually has (from its settings), as the agent
/// fills them in on `apply`.
pub fn fill_dynamic_networks(spec: &mut Value, vm_networks: &Map<String, Value>) {
    let Some(networks) = spec.get_mut("networks").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, net) in networks.iter_mut() {
        if net["type"] != "dynamic" {
            continue;
        }
        let Some(actual) = vm_networks.get(name) else {
            continue;
        };
        for key in ["ip", "netmask", "gateway"] {
            if let Some(v) = actual
                .get(key)
                .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            {
                net[key] = v.clone();
            }
        }
    }
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
    let fresh;
    let base = match spec.as_object().filter(|m| !m.is_empty()) {
        Some(m) => m,
        None => {
            fresh = persisted(&Value::Null);
            &fresh
        }
    };
    // Sized once: the agent's keys are added below.
    let mut out = Map::with_capacity(base.len() + 5);
    for (key, value) in base {
        let value = match key.as_str() {
            // `get_state` reports nil maps as empty ones.
            "networks" | "resource_pool" | "packages" if value.is_null() => json!({}),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
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
    fn the_persisted_spec_keeps_only_what_the_agent_keeps() {
        let spec = json!({
            "deployment": "d", "name": "web", "index": 0, "id": "uuid-1", "az": null,
            "job": {"name": "web", "templates": [{"name": "nginx", "version": "v1",
                    "sha1": "x", "blobstore_id": "b"}]},
            "packages": {"ruby": {"name": "ruby", "version": "1.1", "sha1": "s",
                    "blobstore_id": "p", "extra": true}},
            "networks": {"n": {"type": "manual", "ip": "10.0.0.5"}},
            "template_hashes": {"nginx": "h"},
            "dns_domain_name": "bosh",
            "configuration_hash": "c",
            "persistent_disk": 1024,
        });
        let p = persisted(&spec);
        assert_eq!(
            p["job"]["templates"],
            json!([{"name": "nginx", "version": "v1"}])
        );
        assert_eq!(p["packages"]["ruby"]["blobstore_headers"], Value::Null);
        assert!(p["packages"]["ruby"].get("extra").is_none());
        assert!(p.get("template_hashes").is_none() && p.get("dns_domain_name").is_none());
        assert_eq!(p["az"], json!(""));
        assert_eq!(p["rendered_templates_archive"], Value::Null);
        assert_eq!(p["persistent_disk"], json!(1024));
    }

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
