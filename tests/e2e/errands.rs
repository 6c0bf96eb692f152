//! Errands under the controller (issue 26): an `ErrandRun` created by `kubectl bosh
//! run-errand` or applied with kubectl runs the example release's smoke test, colocated on
//! an instance or as an instance group of its own (its VM made for the run and gone after
//! it), passing and failing, with the exit code and output in its status and the verdicts
//! Argo CD and kstatus give a PostSync hook. Real kube-apiserver, nats-server, local cloud,
//! kubosh agents, the real kubectl finding the plugin on PATH.

use std::time::{Duration, Instant};

use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::controller::{
    apply_deployment, apply_inputs, control_plane, deployment_object, gitops_verdicts_of, kubectl,
    ready_at, start_replica_with, stored_state,
};
use crate::director_world::{World, hello_deployment};
use kubosh_kube::api::{Deployment, ErrandPhase, ErrandRun, Instance, labels};

/// `hello` (two `web` instances greeting "Hello"), an `api` instance with the smoke test
/// colocated, and the smoke test as a `lifecycle: errand` group `smoke`.
fn manifest(port: u16, expect: &str) -> Value {
    let mut manifest = hello_deployment(port, "Hello");
    let groups = manifest["instance_groups"].as_array_mut().unwrap();
    groups.push(json!({
        "name": "api", "instances": 1, "azs": ["z1"], "vm_type": "small",
        "stemcell": "default", "networks": [{"name": "default"}],
        "jobs": [{"name": "hello", "release": "hello", "consumes": {"peers": "nil"},
                  "properties": {"hello": {"port": port, "bind": "instance", "greeting": "Hi"}}},
                 {"name": "smoke-test", "release": "hello",
                  "consumes": {"greeters": {"from": "web_greeter"}},
                  "properties": {"smoke_test": {"expect": expect}}}],
    }));
    groups.push(json!({
        "name": "smoke", "lifecycle": "errand", "instances": 1, "azs": ["z1"],
        "vm_type": "small", "stemcell": "default", "networks": [{"name": "default"}],
        "jobs": [{"name": "smoke-test", "release": "hello",
                  "consumes": {"greeters": {"from": "web_greeter"}}}],
    }));
    manifest
}

/// `kubectl bosh <args>` in `ns` as the admin.
fn kubectl_bosh(kubeconfig: &std::path::Path, ns: &str, args: &[&str]) -> (bool, String, String) {
    crate::kubectl_plugin::kubectl_bosh(kubeconfig, None, ns, args)
}

/// Waits (at most 300 s) until `ErrandRun` `name` ended; it.
async fn ended(api: &Api<ErrandRun>, name: &str, w: &World) -> ErrandRun {
    let start = Instant::now();
    loop {
        let run = api.get(name).await.unwrap();
        let phase = run.status.as_ref().and_then(|s| s.phase);
        if phase.is_some_and(ErrandPhase::is_final) {
            return run;
        }
        if start.elapsed() > Duration::from_secs(300) {
            panic!(
                "ErrandRun {name} did not end: {:?}\ncontroller log:\n{}",
                run.status,
                w.controller_log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The `Ready` condition's reason of `run`.
fn ready_reason(run: &ErrandRun) -> String {
    let status = run.status.as_ref().unwrap();
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    ready.map(|c| c.reason.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errands_run_through_kubectl_bosh_and_as_errand_runs_applied_with_kubectl() {
    let cp = control_plane().await;
    let w = World::new(47);
    let ns = "errands-e2e";
    cp.create_namespace(ns).await.unwrap();
    let client = cp.client().await.unwrap();
    // Each instance's processes and vitals every 2 s (default 2 min).
    let _controller = start_replica_with(
        &w,
        cp,
        ns,
        "errands",
        &["--instance-details-interval", "2s"],
    );
    apply_inputs(&client, ns, &w).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let runs: Api<ErrandRun> = Api::namespaced(client.clone(), ns);
    let generation = apply_deployment(
        &client,
        ns,
        &deployment_object("hello", manifest(w.port, "Hello")),
    )
    .await;
    ready_at(&deployments, "hello", &w, generation).await;
    let kubeconfig = cp.kubeconfig_path();

    // Processes and vitals: in each Instance's status within the interval (and the time
    // its agents take to answer), printed as bosh-cli prints them and by `-o wide`.
    let instances: Api<Instance> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        let listed = instances.list(&ListParams::default()).await.unwrap().items;
        let detailed = listed.iter().filter(|i| {
            i.status.as_ref().is_some_and(|s| {
                s.processes
                    .iter()
                    .any(|p| p.name == "hello" && p.state == "running")
                    && s.vitals.as_ref().is_some_and(|v| v.load.len() == 3)
            })
        });
        if listed.len() == 3 && detailed.count() == 3 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no processes and vitals: {:#?}",
            listed.iter().map(|i| &i.status).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (ok, stdout, stderr) = kubectl_bosh(
        kubeconfig,
        ns,
        &["instances", "hello", "--ps", "--vitals", "--tty"],
    );
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("Process State"), "{stdout}");
    assert!(stdout.contains("(1m, 5m, 15m)"), "{stdout}");
    let process_rows =
        (stdout.lines()).filter(|l| l.split_whitespace().take(3).eq(["~", "hello", "running"]));
    assert_eq!(
        process_rows.count(),
        3,
        "one hello process per instance:\n{stdout}"
    );
    assert!(stdout.contains("0d "), "uptimes:\n{stdout}");
    let wide = kubectl(cp, &["get", "instances", "-n", ns, "-o", "wide"]);
    let header = wide.lines().next().unwrap_or_default();
    assert!(header.contains("LOAD") && header.contains("MEM%"), "{wide}");

    // Colocated on api: it asks both web instances; bosh-cli's summary, success.
    let (ok, stdout, stderr) = kubectl_bosh(kubeconfig, ns, &["run-errand", "hello", "smoke-test"]);
    assert!(ok, "run-errand failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("api/"), "{stdout}");
    assert_eq!(stdout.matches(" says 'Hello, ").count(), 2, "{stdout}");
    assert!(stdout.trim_end().ends_with("Succeeded"), "{stdout}");
    assert!(stdout.contains("ErrandRun 'hello-smoke-test-"), "{stdout}");
    let listed = runs.list(&ListParams::default()).await.unwrap().items;
    let first = &listed[0];
    let status = first.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(ErrandPhase::Succeeded));
    assert_eq!(status.exit_code, Some(0));
    assert_eq!(status.instances.len(), 1);
    assert!(status.instances[0].instance.starts_with("api/"));
    assert!(status.instances[0].stdout.contains(" says 'Hello, "));
    assert_eq!(status.instances[0].logs, "/var/vcap/sys/log/smoke-test");
    assert_eq!(
        gitops_verdicts_of(first, "ErrandRun"),
        ("Healthy".into(), "Current".into())
    );

    // Its own instance group: a VM for the run, gone after it; the rest untouched.
    let vms_before = kubosh_cloud::local::inventory(&w.cloud())
        .unwrap()
        .vms
        .len();
    let (ok, stdout, stderr) = kubectl_bosh(kubeconfig, ns, &["run-errand", "hello", "smoke"]);
    assert!(ok, "run-errand smoke failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("smoke/"), "{stdout}");
    assert_eq!(stdout.matches(" says 'Hello, ").count(), 2, "{stdout}");
    assert_eq!(
        kubosh_cloud::local::inventory(&w.cloud())
            .unwrap()
            .vms
            .len(),
        vms_before,
        "the errand's VM is deleted"
    );
    let state = stored_state(&client, ns, "hello").await;
    assert!(state.instances.values().all(|i| i.group != "smoke"));
    let smoke = format!("{}=smoke", labels::INSTANCE_GROUP);
    let left = instances
        .list(&ListParams::default().labels(&smoke))
        .await
        .unwrap();
    assert!(
        left.items.is_empty(),
        "no Instance of the errand group stays"
    );

    // Applied with kubectl, `whenChanged`: nothing changed since the first run succeeded.
    let manifest_file = w.dir.path().join("errand-run.json");
    std::fs::write(
        &manifest_file,
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "ErrandRun",
               "metadata": {"name": "smoke-when-changed", "namespace": ns},
               "spec": {"deployment": "hello", "errand": "smoke-test", "whenChanged": true}})
        .to_string(),
    )
    .unwrap();
    kubectl(cp, &["apply", "-f", manifest_file.to_str().unwrap()]);
    let skipped = ended(&runs, "smoke-when-changed", &w).await;
    assert_eq!(
        skipped.status.as_ref().unwrap().phase,
        Some(ErrandPhase::Succeeded)
    );
    assert_eq!(ready_reason(&skipped), "Skipped");
    assert!(skipped.status.as_ref().unwrap().instances.is_empty());
    // A run never runs again: its spec cannot change.
    let refused = runs
        .patch(
            "smoke-when-changed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"keepAlive": true}})),
        )
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("an ErrandRun runs once"),
        "{refused}"
    );

    // A new generation expects another greeting: a run applied meanwhile waits for the
    // deploy, then fails with the exit code and the errand's stderr; Degraded for Argo CD,
    // Failed for kstatus, a failing `kubectl bosh run-errand`.
    let generation = apply_deployment(
        &client,
        ns,
        &deployment_object("hello", manifest(w.port, "Bonjour")),
    )
    .await;
    std::fs::write(
        &manifest_file,
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "ErrandRun",
               "metadata": {"name": "smoke-bonjour", "namespace": ns},
               "spec": {"deployment": "hello", "errand": "smoke-test", "whenChanged": true}})
        .to_string(),
    )
    .unwrap();
    kubectl(cp, &["apply", "-f", manifest_file.to_str().unwrap()]);
    let failed = ended(&runs, "smoke-bonjour", &w).await;
    let deployed = deployments.get("hello").await.unwrap();
    assert_eq!(
        deployed.status.unwrap().observed_generation,
        Some(generation)
    );
    let status = failed.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(ErrandPhase::Failed), "{status:?}");
    assert_eq!(status.deployment_generation, Some(generation));
    assert_eq!(status.exit_code, Some(1));
    assert!(
        status.instances[0].stderr.contains("not 'Bonjour'"),
        "{status:?}"
    );
    assert_eq!(ready_reason(&failed), "ErrandFailed");
    assert_eq!(
        gitops_verdicts_of(&failed, "ErrandRun"),
        ("Degraded".into(), "Failed".into())
    );
    let (ok, stdout, stderr) = kubectl_bosh(kubeconfig, ns, &["run-errand", "hello", "smoke-test"]);
    assert!(!ok, "{stdout}");
    assert!(stdout.contains("not 'Bonjour'"), "{stdout}");
    assert!(
        stderr.contains("Errand 'smoke-test' completed with error (exit code 1)"),
        "{stderr}"
    );

    // No such errand: it cannot run, and says why.
    let (ok, stdout, stderr) = kubectl_bosh(kubeconfig, ns, &["run-errand", "hello", "nope"]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("Errand 'nope' doesn't exist in deployment 'hello'"),
        "{stderr}"
    );
    let deployed = ready_at(&deployments, "hello", &w, generation).await;

    // The task history outlives the Events (deleted here, as their one-hour TTL would):
    // each task is listed, and the update's output replays as it ran.
    kubectl(cp, &["delete", "events", "--all", "-n", ns]);
    let (ok, tasks, stderr) = kubectl_bosh(kubeconfig, ns, &["tasks", "hello", "--tty"]);
    assert!(ok, "{tasks}\n{stderr}");
    for description in [
        "create deployment",
        "update deployment",
        "run errand smoke-test (ErrandRun hello-smoke-test-",
        "run errand smoke (ErrandRun ",
    ] {
        assert!(
            tasks.contains(description),
            "no {description:?} in:\n{tasks}"
        );
    }
    let update = deployed.status.unwrap().last_task.unwrap().id;
    let (ok, replayed, stderr) = kubectl_bosh(kubeconfig, ns, &["task", &update]);
    assert!(ok, "{replayed}\n{stderr}");
    assert!(
        replayed.starts_with(&format!("Task {update}")),
        "{replayed}"
    );
    assert!(replayed.contains("Updating instance api"), "{replayed}");
    assert!(replayed.ends_with("\nSucceeded\n"), "{replayed}");
    let (ok, events, _) = kubectl_bosh(kubeconfig, ns, &["task", &update, "--event"]);
    assert!(ok);
    assert!(
        events.lines().next().is_some_and(|l| l.starts_with('{')),
        "{events}"
    );
    // Its debug log: the controller's own lines of the task, debug level included (the
    // controller logs at info), such as each agent request.
    let (ok, debug, _) = kubectl_bosh(kubeconfig, ns, &["task", &update, "--debug"]);
    assert!(ok);
    assert!(
        debug.contains("DEBUG kubosh_transport::agent::client: SENT"),
        "{debug}"
    );
    assert!(debug.contains("method=\"apply\""), "{debug}");
}
