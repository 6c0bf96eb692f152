//! `kubosh plan` and `kubosh deploy` as separate processes on the local cloud: the director
//! configuration file wires the `kubosh` binary as CPI, a nats-server with mutual TLS (any
//! client certificate the CA signed is accepted; the director signs each agent's), a local
//! blobstore and a state directory. The example release and a stemcell are built with
//! `kubosh release create` and `kubosh stemcell create`.

use crate::director_world;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use director_world::{World, hello_deployment, http_get};
use serde_json::{Value, json};

fn kubosh(w: &World, command: &str, web_greeting: &str) -> (bool, String, String) {
    let mut c = w.command(command);
    c.args(["-v", &format!("web_greeting={web_greeting}")]);
    w.output(c)
}

/// Every file under `dir` with its contents (an absent directory: none).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    director_world::walkdir(dir)
        .into_iter()
        .filter(|p| !p.is_dir())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_default();
            (p, bytes)
        })
        .collect()
}

/// `hello` with web's greeting from the variable `web_greeting` and a static `api` instance.
fn manifest(port: u16) -> Value {
    let mut manifest = hello_deployment(port, "((web_greeting))");
    manifest["instance_groups"]
        .as_array_mut()
        .expect("instance groups")
        .push(json!({
            "name": "api",
            "instances": 1,
            "azs": ["z1"],
            "vm_type": "small",
            "stemcell": "default",
            "networks": [{"name": "default", "static_ips": ["127.0.1.50"]}],
            "jobs": [{"name": "hello", "release": "hello",
                      "consumes": {"peers": "nil"},
                      "properties": {"hello": {"port": port, "bind": "instance", "greeting": "Hi"}}},
                     // The example's errand, colocated: it asks every web instance.
                     {"name": "smoke-test", "release": "hello",
                      "consumes": {"greeters": {"from": "web_greeter"}}}],
        }));
    // The same errand as an instance group of its own: VMs only while it runs.
    manifest["instance_groups"]
        .as_array_mut()
        .expect("instance groups")
        .push(json!({
            "name": "smoke",
            "lifecycle": "errand",
            "instances": 1,
            "azs": ["z1"],
            "vm_type": "small",
            "stemcell": "default",
            "networks": [{"name": "default"}],
            "jobs": [{"name": "smoke-test", "release": "hello",
                      "consumes": {"greeters": {"from": "web_greeter"}}}],
        }));
    manifest
}

/// The plan's line of every instance of `group`.
fn plan_lines<'a>(stdout: &'a str, group: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{group}/")))
        .collect()
}

/// The id of the task a command's output shows (`Task N` on a line of its own).
fn task_id(stdout: &str) -> u64 {
    (stdout.lines())
        .find_map(|l| l.strip_prefix("Task ")?.parse().ok())
        .unwrap_or_else(|| panic!("no task in:\n{stdout}"))
}

/// `kubosh deploy` of `manifest` fails with `said` as its last line, before any cloud call.
fn assert_refused(w: &World, manifest: &Value, said: &str) {
    w.write_manifest(manifest);
    let (ok, stdout, stderr) = kubosh(w, "deploy", "Hello");
    assert!(!ok, "{stdout}\n{stderr}");
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some(said),
        "{stdout}\n{stderr}"
    );
    assert_eq!(w.calls(), 0, "a refused manifest called the cloud");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_and_deploy_run_the_engine_as_a_command() {
    let w = World::new(1);
    // A job its release lacks: the manifest's fault, named by its path before anything is
    // asked of an agent or the cloud.
    let mut unknown = manifest(w.port);
    unknown["instance_groups"][1]["jobs"]
        .as_array_mut()
        .expect("jobs")
        .push(json!({"name": "helo", "release": "hello"}));
    assert_refused(
        &w,
        &unknown,
        "error: manifest: instance_groups[1].jobs[2].name: Can't find job 'helo' in release 'hello/1.0.0'",
    );
    // A release version not given: the Director's words, with the versions given.
    let mut wrong = manifest(w.port);
    wrong["releases"][0]["version"] = json!("9.9.9");
    assert_refused(
        &w,
        &wrong,
        "error: manifest: releases[0].version: Release version 'hello/9.9.9' doesn't exist (available: hello/1.0.0)",
    );
    w.write_manifest(&manifest(w.port));

    // A fresh plan: everything is created, both packages compiled; nothing is written.
    let (ok, stdout, stderr) = kubosh(&w, "plan", "Hello");
    assert!(ok, "plan failed:\n{stdout}\n{stderr}");
    for group in ["web", "api"] {
        let lines = plan_lines(&stdout, group);
        let expected = if group == "web" { 2 } else { 1 };
        assert_eq!(lines.len(), expected, "{stdout}");
        assert!(lines.iter().all(|l| l.contains(": create")), "{stdout}");
    }
    assert!(stdout.contains("compile libhello/"), "{stdout}");
    assert!(stdout.contains("compile hello-server/"), "{stdout}");
    assert!(snapshot(&w.state_dir()).is_empty(), "plan wrote state");
    assert_eq!(w.calls(), 0, "plan called the cloud");

    // The deploy: compile, create, update; the instances answer.
    let (ok, stdout, stderr) = kubosh(&w, "deploy", "Hello");
    assert!(ok, "deploy failed:\n{stdout}\n{stderr}");
    for expected in [
        "Using deployment 'hello'",
        "Compiling packages",
        "Creating missing vms",
        "Updating instance",
    ] {
        assert!(stdout.contains(expected), "no '{expected}' in:\n{stdout}");
    }
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some("Succeeded"),
        "{stdout}"
    );
    // The task as the BOSH CLI prints it: `Task N`, its lines (stage, tags, task, the
    // duration on the start line), its start, finish, duration and state.
    let task = task_id(&stdout);
    let deploy_output = stdout.clone();
    for expected in [
        format!("\n\nTask {task}\n\nTask {task} | "),
        "| Updating instance web: web/".to_string(),
        format!("\nTask {task} Started  "),
        format!("\nTask {task} Duration 00:00:"),
        format!("\nTask {task} done\n"),
    ] {
        assert!(stdout.contains(&expected), "no {expected:?} in:\n{stdout}");
    }
    let state = w.state().await;
    assert_eq!(state.instances.len(), 3);
    for i in state.instances.values() {
        let ip = &i.ips["default"].ip;
        let body = http_get(ip, w.port).unwrap_or_else(|| panic!("{} answers on {ip}", i.group));
        let greeting = if i.group == "web" { "Hello" } else { "Hi" };
        assert!(body.starts_with(greeting), "{}: {body}", i.group);
    }
    let stemcell_image = w
        .state_dir()
        .join("stemcells/bosh-kubosh-local-ubuntu-jammy-1.0/image");
    assert!(stemcell_image.is_file());

    // The same deploy again: nothing changes, no cloud call.
    let calls = w.calls();
    let (ok, stdout, stderr) = kubosh(&w, "deploy", "Hello");
    assert!(ok, "second deploy failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("No changes"), "{stdout}");
    assert!(!stdout.contains("Updating instance"), "{stdout}");
    assert_eq!(task_id(&stdout), task + 1, "task ids increase: {stdout}");
    assert_eq!(w.calls(), calls, "a no-op deploy called the cloud");

    // `kubosh instances --ps --vitals`: each instance running, its process, its machine's
    // vitals, from its agent; as bosh-cli prints it to a pipe (tab-separated data).
    let out = std::process::Command::new(crate::director_world::KUBOSH)
        .args([
            "instances",
            "-d",
            &w.path("director.yml"),
            "hello",
            "--ps",
            "--vitals",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = crate::director_world::text(&out);
    assert!(
        out.status.success(),
        "instances failed:\n{stdout}\n{stderr}"
    );
    let rows: Vec<Vec<&str>> = (stdout.lines())
        .map(|l| l.split('\t').map(str::trim).collect())
        .collect();
    let instance_rows: Vec<&Vec<&str>> = rows.iter().filter(|r| r[1] == "-").collect();
    assert_eq!(instance_rows.len(), 3, "{stdout}");
    for (row, record) in instance_rows.iter().zip({
        let mut records: Vec<_> = state.instances.values().collect();
        records.sort_by_key(|r| (r.group.clone(), r.uuid.clone()));
        records
    }) {
        assert_eq!(
            row[0],
            format!("{}/{}", record.group, record.uuid),
            "{stdout}"
        );
        assert_eq!(row[2], "running", "{stdout}");
        assert_eq!(row[4], record.ips["default"].ip, "{stdout}");
        assert_eq!(row[5], "hello", "{stdout}");
        // Uptime, load and memory from the agent's vitals.
        assert!(row[7].ends_with('s') && row[8].contains(", "), "{stdout}");
        assert!(row[13].contains("% ("), "{stdout}");
    }
    let process_rows = rows.iter().filter(|r| r[1] != "-").count();
    assert!(
        process_rows >= 3,
        "a process per instance at least:\n{stdout}"
    );
    assert_eq!(w.calls(), calls, "instances called the cloud");

    // `kubosh logs`: one instance's job logs as a tarball; the whole deployment's as a
    // bundle of one tarball per instance.
    let logs_dir = tempfile::tempdir().unwrap();
    let logs = |extra: &[&str]| {
        let out = std::process::Command::new(crate::director_world::KUBOSH)
            .args(["logs", "-d", &w.path("director.yml"), "hello"])
            .args(extra)
            .args(["--dir", logs_dir.path().to_str().unwrap()])
            .output()
            .unwrap();
        let (stdout, stderr) = crate::director_world::text(&out);
        assert!(out.status.success(), "logs failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains("Fetching logs for web/"), "{stdout}");
        let path = stdout
            .split("Logs written to '")
            .nth(1)
            .and_then(|r| r.split('\'').next());
        std::fs::read(path.unwrap_or_else(|| panic!("{stdout}"))).unwrap()
    };
    let entries = |tgz: &[u8]| -> Vec<(String, Vec<u8>)> {
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tgz));
        (archive.entries().unwrap().map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut bytes).unwrap();
            (name, bytes)
        }))
        .collect()
    };
    let one = entries(&logs(&["web/0", "--job", "hello"]));
    assert!(
        one.iter().any(|(n, _)| n == "hello/hello.stdout.log"),
        "{:?}",
        one.iter().map(|e| &e.0).collect::<Vec<_>>()
    );
    let bundle: Vec<(String, Vec<u8>)> = (entries(&logs(&[])).into_iter())
        .filter(|(name, _)| name.ends_with(".tgz"))
        .collect();
    assert_eq!(
        bundle.len(),
        3,
        "{:?}",
        bundle.iter().map(|e| &e.0).collect::<Vec<_>>()
    );
    for (name, tgz) in &bundle {
        let name = name.trim_start_matches("./");
        assert!(
            name.starts_with("api.") || name.starts_with("web."),
            "{name}"
        );
        assert!(
            entries(tgz).iter().any(|(n, _)| n.starts_with("hello/")),
            "{name}"
        );
    }
    assert_eq!(w.calls(), calls, "logs called the cloud");

    // `kubosh ssh` on the local cloud: `-c` runs in the VM's directory with the one-time
    // user set up there, removed after; no cloud call.
    let (ok, stdout, stderr) =
        w.output(w.director_command(&["ssh", "hello", "web/0", "-c", "pwd; ls bosh_ssh"]));
    assert!(ok, "ssh failed:\n{stdout}\n{stderr}");
    let state = w.state().await;
    let web0 = (state.instances.values())
        .find(|i| i.group == "web" && i.index == 0)
        .unwrap();
    let root = std::fs::canonicalize(w.vm_root(&web0.vm.as_ref().unwrap().cid)).unwrap();
    assert!(stdout.contains(&root.display().to_string()), "{stdout}");
    assert!(stdout.contains("bosh_"), "{stdout}");
    assert_eq!(std::fs::read_dir(root.join("bosh_ssh")).unwrap().count(), 0);
    assert_eq!(w.calls(), calls, "ssh called the cloud");

    // `kubosh run-errand`: the colocated errand on api asks both web instances; each says
    // hello; bosh-cli's summary, exit 0.
    let errand = |w: &World| {
        let out = std::process::Command::new(crate::director_world::KUBOSH)
            .args([
                "run-errand",
                "-d",
                &w.path("director.yml"),
                "hello",
                "smoke-test",
            ])
            .output()
            .unwrap();
        let (stdout, stderr) = crate::director_world::text(&out);
        (out.status.success(), stdout, stderr)
    };
    let (ok, stdout, stderr) = errand(&w);
    assert!(ok, "run-errand failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("| Running errand: api/"), "{stdout}");
    for i in state.instances.values().filter(|i| i.group == "web") {
        let said = format!(
            "{}:{} says 'Hello, {}!'",
            i.ips["default"].ip, w.port, i.ips["default"].ip
        );
        assert!(stdout.contains(&said), "no {said:?} in:\n{stdout}");
    }
    assert!(stdout.trim_end().ends_with("Succeeded"), "{stdout}");

    // The errand group: its VM made for the run (the deploy's inputs given), the errand run
    // on it, the VM deleted after; nothing else changes.
    let vms_before = kubosh_cloud::local::inventory(&w.cloud())
        .unwrap()
        .vms
        .len();
    let mut lifecycle = std::process::Command::new(crate::director_world::KUBOSH);
    lifecycle
        .args([
            "run-errand",
            "-d",
            &w.path("director.yml"),
            "hello",
            "smoke",
        ])
        .args(["--manifest", &w.path("manifest.yml")])
        .args(["--cloud-config", &w.path("cloud-config.yml")])
        .args(["--release", &w.path("hello.tgz")])
        .args(["--stemcell", &w.path("stemcell.tgz")])
        .args(["-v", "web_greeting=Hello"]);
    let (ok, stdout, stderr) = w.output(lifecycle);
    assert!(ok, "run-errand smoke failed:\n{stdout}\n{stderr}");
    for expected in [
        "Creating missing vms: smoke/",
        "Running errand: smoke/",
        "Deleting errand instances: smoke/",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
    }
    let says = stdout.matches(" says 'Hello, ").count();
    assert_eq!(says, 2, "both web instances asked:\n{stdout}");
    assert!(!stdout.contains("Updating instance web"), "{stdout}");
    let after = w.state().await;
    assert!(
        after.instances.values().all(|i| i.group != "smoke"),
        "the errand VM stays"
    );
    assert_eq!(
        kubosh_cloud::local::inventory(&w.cloud())
            .unwrap()
            .vms
            .len(),
        vms_before,
        "the errand's VM is deleted"
    );
    let calls = w.calls();

    // The task history: `tasks` lists the deploys (newest first), `task N` prints the first
    // deploy's task again exactly as the deploy printed it.
    let kubosh_out = |args: &[&str]| {
        let (ok, stdout, stderr) = w.output(w.director_command(args));
        assert!(ok, "{args:?} failed:\n{stdout}\n{stderr}");
        stdout
    };
    let listed = kubosh_out(&["tasks"]);
    let deploys: Vec<&str> = (listed.lines())
        .filter(|l| l.contains("\tcreate deployment"))
        .collect();
    assert_eq!(deploys.len(), 2, "{listed}");
    assert!(
        deploys[0].starts_with(&format!("{}\tdone\t", task + 1)),
        "{listed}"
    );
    assert!(
        deploys[1].starts_with(&format!("{task}\tdone\t")),
        "{listed}"
    );
    assert!(deploys[1].contains("\thello\t"), "{listed}");
    let replayed = kubosh_out(&["task", &task.to_string()]);
    let replayed = replayed.strip_suffix("\nSucceeded\n").unwrap_or(&replayed);
    assert!(
        deploy_output.contains(replayed),
        "task {task} replayed:\n{replayed}\nthe deploy printed:\n{deploy_output}"
    );

    // A property of one group: the plan updates that group only, and changes nothing.
    let before = snapshot(&w.state_dir());
    let (ok, stdout, stderr) = kubosh(&w, "plan", "Howdy");
    assert!(ok, "plan failed:\n{stdout}\n{stderr}");
    let web = plan_lines(&stdout, "web");
    assert_eq!(web.len(), 2, "{stdout}");
    assert!(
        web.iter().all(|l| l.contains(": update (configuration)")),
        "{stdout}"
    );
    let api = plan_lines(&stdout, "api");
    assert!(api.len() == 1 && api[0].contains(": none"), "{stdout}");
    assert!(!stdout.contains("compile "), "{stdout}");
    assert_eq!(snapshot(&w.state_dir()), before, "plan changed the state");
    assert_eq!(w.calls(), calls, "plan called the cloud");

    // A broken manifest fails with the error as the last line, exit code 1.
    std::fs::write(w.path("manifest.yml"), "name: hello\ninstance_groups: 7\n").unwrap();
    let (ok, stdout, _) = kubosh(&w, "deploy", "Hello");
    assert!(!ok);
    let last = stdout.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: manifest: instance_groups: expected a list"),
        "{stdout}"
    );
    // (The deployment lock is taken before validation; the deployment's state is untouched.)
    let deployments = w.state_dir().join("deployments");
    let before: BTreeMap<_, _> = before
        .into_iter()
        .filter(|(p, _)| p.starts_with(&deployments))
        .collect();
    assert_eq!(
        snapshot(&deployments),
        before,
        "an invalid deploy changed the state"
    );

    // An errand that fails: its exit code and stderr are the result, the command exits 1
    // as bosh-cli's does.
    let mut expecting = manifest(w.port);
    expecting["instance_groups"][1]["jobs"][1]["properties"] =
        json!({"smoke_test": {"expect": "Bonjour"}});
    w.write_manifest(&expecting);
    let (ok, stdout, stderr) = kubosh(&w, "deploy", "Hello");
    assert!(ok, "deploy failed:\n{stdout}\n{stderr}");
    let (ok, stdout, stderr) = errand(&w);
    assert!(!ok, "{stdout}");
    assert!(stdout.contains("says 'Hello, "), "{stdout}");
    assert!(stdout.contains("not 'Bonjour'"), "{stdout}");
    assert!(
        stderr.starts_with("Errand 'smoke-test' completed with error (exit code 1)"),
        "{stderr}"
    );
    assert!(stderr.ends_with("\nExit code 1\n"), "{stderr}");
}
