//! `kubosh deploy` with `health: {listen_for}`: the director listens to the agents'
//! heartbeats with the health monitor's identity (issued by its CA) before it decides, so a
//! second identical deploy asks no agent anything and calls no CPI method. Every part is
//! real: the local cloud's `kubosh agent` processes (heartbeating every second here), a
//! nats-server with mutual TLS, the `kubosh` binary as director and CPI. Agent requests are
//! counted in the agents' own logs (each request the agent handles is logged).

use crate::director_world;

use std::collections::BTreeMap;
use std::path::Path;

use director_world::{World, hello_deployment, http_get, write_json};
use serde_json::{Value, json};

/// The request lines of each VM's agent log, by VM.
fn agent_requests(cloud: &Path) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let Ok(vms) = std::fs::read_dir(cloud.join("vms")) else {
        return out;
    };
    for vm in vms.flatten() {
        let log = std::fs::read_to_string(vm.path().join("agent.log")).unwrap_or_default();
        let requests = log
            .lines()
            .filter(|l| {
                l.contains("received request")
                    || l.contains("unknown action")
                    || l.contains("action not implemented")
                    || l.contains("Unmarshalling JSON payload")
            })
            .map(str::to_string)
            .collect();
        out.insert(vm.file_name().to_string_lossy().into_owned(), requests);
    }
    out
}

/// The lines added to each VM's log between two counts.
fn new_requests(
    before: &BTreeMap<String, Vec<String>>,
    after: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    after
        .iter()
        .flat_map(|(vm, lines)| {
            let seen = before.get(vm).map_or(0, Vec::len);
            lines.iter().skip(seen).cloned()
        })
        .collect()
}

fn edit(path: &Path, change: impl FnOnce(&mut Value)) {
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    change(&mut value);
    write_json(path, &value);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_op_deploy_that_heard_every_agent_calls_nothing() {
    let w = World::new(9);
    w.write_manifest(&hello_deployment(w.port, "Hello"));
    // Agents heartbeat every second; the director listens three.
    edit(&w.dir.path().join("cpi.json"), |cpi| {
        let command = cpi["agent"]["command"].as_array_mut().unwrap();
        command.extend([json!("--heartbeat-interval"), json!("1")]);
    });
    let director = w.dir.path().join("director.yml");
    edit(&director, |d| d["health"] = json!({"listen_for": 3}));

    let (ok, stdout, stderr) = w.output(w.command("deploy"));
    assert!(ok, "deploy failed:\n{stdout}\n{stderr}");
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some("Succeeded"),
        "{stdout}"
    );
    let state = w.state().await;
    assert_eq!(state.instances.len(), 2);
    for i in state.instances.values() {
        let ip = &i.ips["default"].ip;
        assert!(
            http_get(ip, w.port).is_some(),
            "{} answers on {ip}",
            i.name()
        );
    }
    let first = agent_requests(&w.cloud());
    assert!(
        first.values().any(|lines| !lines.is_empty()),
        "the agents' logs show no request at all: {first:?}"
    );

    // The same deploy again: every agent was heard running; no agent call, no CPI call.
    let calls = w.calls();
    let (ok, stdout, stderr) = w.output(w.command("deploy"));
    assert!(ok, "second deploy failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("No changes"), "{stdout}");
    let second = agent_requests(&w.cloud());
    assert_eq!(
        new_requests(&first, &second),
        Vec::<String>::new(),
        "a no-op deploy that heard every agent asked them"
    );
    assert_eq!(w.calls(), calls, "a no-op deploy called the cloud");

    // Without listening, the same no-op deploy asks each agent for its state, once.
    edit(&director, |d| {
        d.as_object_mut().unwrap().remove("health");
    });
    let (ok, stdout, stderr) = w.output(w.command("deploy"));
    assert!(ok, "third deploy failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("No changes"), "{stdout}");
    let asked = new_requests(&second, &agent_requests(&w.cloud()));
    assert_eq!(asked.len(), 2, "{asked:#?}");
    assert!(asked.iter().all(|l| l.contains("get_state")), "{asked:#?}");
    assert_eq!(w.calls(), calls, "a no-op deploy called the cloud");
}
