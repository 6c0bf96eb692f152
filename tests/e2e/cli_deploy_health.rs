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

/// `kubosh deploy` on a dead agent (kill -9): without `--fix` it fails at once (the
/// heartbeats prove the agent silent), naming the instance and the fix; `kubosh cck` lists the
/// problem and changes nothing; `--fix` recreates the instance on its disk with the change;
/// `kubosh cck --auto` recreates a VM deleted behind kubosh's back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_agent_fails_a_deploy_once_and_fix_or_cck_recreate_it_on_its_disk() {
    let w = World::new(42);
    let mut manifest = hello_deployment(w.port, "Hello");
    manifest["instance_groups"][0]["persistent_disk"] = json!(64);
    w.write_manifest(&manifest);
    edit(&w.dir.path().join("cpi.json"), |cpi| {
        let command = cpi["agent"]["command"].as_array_mut().unwrap();
        command.extend([json!("--heartbeat-interval"), json!("1")]);
    });
    edit(&w.dir.path().join("director.yml"), |d| {
        d["health"] = json!({"listen_for": 3, "agent_timeout": 2});
    });
    let (ok, stdout, stderr) = w.output(w.command("deploy"));
    assert!(ok, "deploy failed:\n{stdout}\n{stderr}");
    let state = w.state().await;
    let web0 = crate::crash_safety::plant_marker(&w, &state);
    let web0_record = state.instances[&web0].clone();
    let web0_vm = web0_record.vm.clone().unwrap().cid;
    kubosh_cloud::local::kill_agent(&w.cloud(), &kubosh_cloud::VmCid(web0_vm.clone())).unwrap();

    // cck reports it and changes nothing.
    let calls = w.calls();
    let (ok, stdout, _) = w.output(w.command("cck"));
    assert!(!ok, "problems left: exit 1\n{stdout}");
    assert!(stdout.contains("unresponsive_agent"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "VM for '{}' with cloud ID '{web0_vm}' is not responding.",
            web0_record.display_name()
        )),
        "{stdout}"
    );
    let changed: Vec<String> = (local_calls(&w).into_iter().skip(calls))
        .filter(|m| !["has_vm", "has_disk", "info"].contains(&m.as_str()))
        .collect();
    assert_eq!(changed, Vec::<String>::new(), "a report changes nothing");

    // A change without --fix: one failure, at once, naming the instance and the fix.
    manifest["instance_groups"][0]["jobs"][0]["properties"]["hello"]["greeting"] = json!("Hey");
    w.write_manifest(&manifest);
    let started = std::time::Instant::now();
    let (ok, stdout, stderr) = w.output(w.command("deploy"));
    assert!(!ok, "{stdout}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(40),
        "no 3 x 45 s of timeouts: {:?}",
        started.elapsed()
    );
    // The task's lines say why (once as the failed task's `L Error:` or the task's `Error:`
    // line, as the Director's task log does); the end is the BOSH CLI's, with the fix.
    assert!(
        stdout.contains("| Error: ") && stdout.contains("No heartbeat from agent"),
        "{stdout}"
    );
    assert!(
        stdout.contains(" error\n"),
        "the task ends in error: {stdout}"
    );
    assert!(
        stderr.starts_with("Updating deployment:\n  Expected task '"),
        "{stderr}"
    );
    assert!(stderr.contains("kubosh deploy --fix"), "{stderr}");
    assert!(stderr.ends_with("\nExit code 1\n"), "{stderr}");
    assert_eq!(
        w.state().await.instances[&web0].vm,
        web0_record.vm,
        "nothing changed"
    );

    // --fix: a new VM on the same disk, the change deployed.
    let mut fix = w.command("deploy");
    fix.arg("--fix");
    let (ok, stdout, stderr) = w.output(fix);
    assert!(ok, "deploy --fix failed:\n{stdout}\n{stderr}");
    let after = w.state().await;
    let fixed = &after.instances[&web0];
    assert_ne!(fixed.vm.as_ref().unwrap().cid, web0_vm, "a new VM");
    assert_eq!(fixed.disks, web0_record.disks, "the same disk");
    let marker = w
        .vm_root(&fixed.vm.as_ref().unwrap().cid)
        .join("store/marker");
    assert_eq!(std::fs::read_to_string(marker).unwrap(), "keep me");
    for i in after.instances.values() {
        let ip = &i.ips["default"].ip;
        let body = http_get(ip, w.port).unwrap_or_default();
        assert!(body.contains("Hey"), "{}: {body}", i.name());
    }

    // A VM deleted behind kubosh's back: `cck --auto` recreates it (missing_vm's automatic
    // resolution), and nothing is left.
    let web1 = (after.instances.values())
        .find(|i| i.uuid != web0)
        .unwrap()
        .clone();
    let web1_vm = web1.vm.clone().unwrap().cid;
    w.delete_vm_in_cloud(&web1_vm);
    let mut auto = w.command("cck");
    auto.arg("--auto");
    let (ok, stdout, stderr) = w.output(auto);
    assert!(ok, "cck --auto failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("missing_vm"), "{stdout}");
    assert!(stdout.contains("recreate_vm"), "{stdout}");
    assert!(stdout.contains("0 problem(s) left"), "{stdout}");
    let last = w.state().await;
    assert_ne!(last.instances[&web1.uuid].vm.as_ref().unwrap().cid, web1_vm);
    assert_eq!(last.instances[&web1.uuid].disks, web1.disks);

    // `kubosh delete-deployment`: the VMs go, the disks stay as orphaned disks; `clean-up`
    // keeps them while they are young, `clean-up --all` deletes them; nothing is left.
    let kubosh = |args: &[&str]| w.output(w.director_command(args));
    let (ok, stdout, stderr) = kubosh(&["delete-deployment", "hello"]);
    assert!(ok, "delete-deployment failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("Using deployment 'hello'"), "{stdout}");
    assert!(stdout.contains("Deleting instances: web/"), "{stdout}");
    assert!(
        stdout.contains("2 persistent disk(s) kept as orphaned disks"),
        "{stdout}"
    );
    assert!(stdout.ends_with("\nSucceeded\n"), "{stdout}");
    let inventory = kubosh_cloud::local::inventory(&w.cloud()).unwrap();
    assert!(inventory.vms.is_empty(), "{inventory:?}");
    assert_eq!(inventory.disks.len(), 2, "{inventory:?}");
    assert!(w.state().await.instances.is_empty());
    let (ok, stdout, stderr) = kubosh(&["clean-up"]);
    assert!(ok, "clean-up failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("Deleted 0 orphaned disk(s)"), "{stdout}");
    assert_eq!(
        kubosh_cloud::local::inventory(&w.cloud())
            .unwrap()
            .disks
            .len(),
        2
    );
    let (ok, stdout, stderr) = kubosh(&["clean-up", "--all"]);
    assert!(ok, "clean-up --all failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("Deleting orphaned disks: disk-"),
        "{stdout}"
    );
    assert!(stdout.contains("Deleted 2 orphaned disk(s)"), "{stdout}");
    let inventory = kubosh_cloud::local::inventory(&w.cloud()).unwrap();
    assert!(
        inventory.vms.is_empty() && inventory.disks.is_empty(),
        "{inventory:?}"
    );
    // As bosh-cli: deleting a deployment the director does not have succeeds.
    let (ok, stdout, stderr) = kubosh(&["delete-deployment", "never-deployed"]);
    assert!(ok, "{stdout}\n{stderr}");
}

/// The local cloud's calls, by method, in order.
fn local_calls(w: &World) -> Vec<String> {
    (kubosh_cloud::local::read_calls(&w.cloud())
        .unwrap()
        .into_iter())
    .map(|c| c.method)
    .collect()
}
