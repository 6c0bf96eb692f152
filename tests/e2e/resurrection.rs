//! Self-healing end to end (issue 24): the controller recreates instances that lost their
//! agent (kill -9) or their VM (deleted behind its back) without a spec change, on their
//! persistent disks; a meltdown stops it until every instance runs again or it is asked to
//! resume; with resurrection off a deploy that meets a silent agent stalls once, saying which
//! instance and how to fix it, and a `recreate` of that instance fixes it and deploys the
//! pending change too; a NATS outage is told as such and recreates nothing; while the newest
//! generation does not validate, a lost agent is recreated from the spec deployed last (and
//! without one kept, a `RepairBlocked` Warning says why nothing happens). Real kube-apiserver, real nats-server, the local cloud, kubosh agents.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::controller::{
    annotate, apply_deployment, apply_inputs, condition, control_plane, deployment_object,
    events_of, is_ready, ready_at, reasons_about, start_replica_with, stored_state, wait_for,
    with_fast_heartbeats,
};
use crate::crash_safety::plant_marker;
use crate::director_world::{World, hello_deployment, http_get};
use kubosh_kube::api::{Deployment, Instance, ProcessState};

/// The deployment's instances by index.
async fn instances(client: &kube::Client, ns: &str) -> Vec<Instance> {
    let mut all = Api::<Instance>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    all.sort_by_key(|i| i.spec.index);
    all
}

fn vm_of(instance: &Instance) -> String {
    instance.spec.vm_cid.clone().expect("a VM")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_agents_and_vms_are_resurrected_a_meltdown_stops_it_and_without_it_a_deploy_stalls_once()
 {
    let cp = control_plane().await;
    let mut w = World::new(41);
    let ns = "resurrect-e2e";
    cp.create_namespace(ns).await.unwrap();
    let client = cp.client().await.unwrap();
    with_fast_heartbeats(&w);
    // Meltdown lowered: more than 1 instance and more than 60 % down.
    let controller = start_replica_with(
        &w,
        cp,
        ns,
        "resurrector",
        &[
            "--agent-timeout",
            "4s",
            "--meltdown-minimum-down",
            "1",
            "--meltdown-percent",
            "60",
        ],
    );
    apply_inputs(&client, ns, &w).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let mut hello = deployment_object(
        "hello",
        crate::controller::with_disk(hello_deployment(w.port, "first")),
    );
    let generation = apply_deployment(&client, ns, &hello).await;
    ready_at(&deployments, "hello", &w, generation).await;
    let web0 = plant_marker(&w, &stored_state(&client, ns, "hello").await);
    let before = instances(&client, ns).await;
    let running_again = |vms: Vec<String>, index: usize| {
        let client = client.clone();
        move |d: &Deployment| {
            let status = d.status.as_ref();
            let replaced = futures::executor::block_on(instances(&client, ns))
                .get(index)
                .is_some_and(|i| {
                    i.spec.vm_cid.as_ref().is_some_and(|v| !vms.contains(v))
                        && i.status.as_ref().and_then(|s| s.process_state)
                            == Some(ProcessState::Running)
                });
            replaced && is_ready(d) && status.and_then(|s| s.instances.as_deref()) == Some("2/2")
        }
    };

    // kill -9 of web/0's agent: a new VM, on its disk (the data kept), same address, same
    // identity, no spec change.
    kubosh_cloud::local::kill_agent(&w.cloud(), &kubosh_cloud::VmCid(vm_of(&before[0]))).unwrap();
    let d = wait_for(
        &deployments,
        "hello",
        Duration::from_secs(120),
        &w,
        running_again(vec![vm_of(&before[0])], 0),
    )
    .await;
    assert_eq!(d.metadata.generation, Some(generation), "no spec change");
    let after = instances(&client, ns).await;
    assert_eq!(after[0].spec.id, before[0].spec.id, "same identity");
    assert_eq!(
        after[0].spec.networks, before[0].spec.networks,
        "same addresses"
    );
    assert_eq!(vm_of(&after[1]), vm_of(&before[1]), "web/1 untouched");
    let state = stored_state(&client, ns, "hello").await;
    let record = &state.instances[&web0];
    let marker = w
        .vm_root(&record.vm.as_ref().unwrap().cid)
        .join("store/marker");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "keep me");
    let events = events_of(&client, ns).await;
    let about = reasons_about(&events, "Instance", &after[0].name_any());
    assert!(about.contains(&"VMResurrected".to_string()), "{about:?}");

    // web/1's VM deleted in the cloud behind the controller's back: recreated too.
    w.delete_vm_in_cloud(&vm_of(&after[1]));
    wait_for(
        &deployments,
        "hello",
        Duration::from_secs(120),
        &w,
        running_again(vec![vm_of(&after[1])], 1),
    )
    .await;
    let events = events_of(&client, ns).await;
    let resurrected: Vec<String> = (events.iter())
        .filter(|e| e.reason.as_deref() == Some("VMResurrected"))
        .filter_map(|e| e.note.clone())
        .collect();
    assert!(
        resurrected
            .iter()
            .any(|n| n.contains("the cloud no longer had its VM")),
        "{resurrected:?}"
    );

    // Both agents dead at once: a meltdown (2 of 2 > 60 %): nothing is recreated, a
    // condition and an Event say why.
    let now = instances(&client, ns).await;
    let vms: Vec<String> = now.iter().map(vm_of).collect();
    let creates_before = create_vm_calls(&w);
    for vm in &vms {
        kubosh_cloud::local::kill_agent(&w.cloud(), &kubosh_cloud::VmCid(vm.clone())).unwrap();
    }
    let d = wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        condition(d, "Stalled").is_some_and(|c| c.status == "True" && c.reason == "Meltdown")
    })
    .await;
    assert!(!is_ready(&d));
    let resurrection = condition(&d, "Resurrection").expect("a Resurrection condition");
    assert_eq!(
        (resurrection.status.as_str(), resurrection.reason.as_str()),
        ("False", "Meltdown")
    );
    assert!(
        resurrection.message.contains("2 of 2 instances went down"),
        "{}",
        resurrection.message
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        create_vm_calls(&w),
        creates_before,
        "no VM made in a meltdown"
    );
    let reasons = reasons_about(&events_of(&client, ns).await, "Deployment", "hello");
    assert!(
        reasons.contains(&"ResurrectionStopped".to_string()),
        "{reasons:?}"
    );

    // Asked to resume: both recreated, Ready again.
    annotate(&deployments, "kubosh.io/reconcile-request", "resume-1").await;
    wait_for(&deployments, "hello", Duration::from_secs(180), &w, |d| {
        let replaced = futures::executor::block_on(instances(&client, ns))
            .iter()
            .all(|i| i.spec.vm_cid.as_ref().is_some_and(|v| !vms.contains(v)));
        replaced && is_ready(d) && condition(d, "Resurrection").is_some_and(|c| c.status == "True")
    })
    .await;
    let reasons = reasons_about(&events_of(&client, ns).await, "Deployment", "hello");
    assert!(
        reasons.contains(&"ResurrectionResumed".to_string()),
        "{reasons:?}"
    );

    // Resurrection off: a dead agent is shown and left alone (Stalled says why) ...
    hello["spec"]["resurrection"] = json!(false);
    let generation = apply_deployment(&client, ns, &hello).await;
    ready_at(&deployments, "hello", &w, generation).await;
    let now = instances(&client, ns).await;
    kubosh_cloud::local::kill_agent(&w.cloud(), &kubosh_cloud::VmCid(vm_of(&now[0]))).unwrap();
    let d = wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        condition(d, "Stalled").is_some_and(|c| c.status == "True" && c.reason == "ResurrectionOff")
    })
    .await;
    assert!(!is_ready(&d));
    // ... and a spec change meets it: one failed deploy, at once, naming it and the fix.
    hello["spec"]["manifest"]["instance_groups"][0]["jobs"][0]["properties"]["hello"]["greeting"] =
        json!("second");
    let generation = apply_deployment(&client, ns, &hello).await;
    let d = wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        condition(d, "Stalled").is_some_and(|c| c.status == "True" && c.reason == "DeployFailed")
    })
    .await;
    let stalled = condition(&d, "Stalled").unwrap().message.clone();
    assert!(
        stalled.contains("No answer from the agent of web/"),
        "{stalled}"
    );
    assert!(stalled.contains("spec.resurrection is false"), "{stalled}");
    assert!(stalled.contains("recreate web/0"), "{stalled}");
    let task = d.status.as_ref().unwrap().last_task.clone().unwrap();
    assert!(
        task.duration_seconds.unwrap_or(99) < 30,
        "no 3 x 45 s of timeouts: {task:?}"
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    let again = deployments.get("hello").await.unwrap();
    assert_eq!(
        again
            .status
            .as_ref()
            .unwrap()
            .last_task
            .as_ref()
            .map(|t| &t.id),
        Some(&task.id),
        "a stalled deploy is not retried"
    );
    assert_eq!(vm_of(&instances(&client, ns).await[1]), vm_of(&now[1]));

    // `recreate web/0` recreates the silent instance and deploys the pending change with it.
    annotate(&deployments, "kubosh.io/action", "recreate web/0").await;
    let d = ready_at(&deployments, "hello", &w, generation).await;
    assert_eq!(
        d.status.as_ref().unwrap().last_handled_action.as_deref(),
        Some("recreate web/0")
    );
    let last = instances(&client, ns).await;
    assert_ne!(vm_of(&last[0]), vm_of(&now[0]), "web/0 recreated");
    for i in &last {
        let ip = i.spec.networks[0].ip.clone().unwrap();
        let body = http_get(&ip, w.port).unwrap_or_default();
        assert!(
            body.contains("second"),
            "{ip} runs the pending change: {body}"
        );
    }

    // cck through the action annotation: a scan lists the dead agent's instance in
    // status.problems with BOSH's resolutions, and `resolve <ID> reboot_vm` brings it back on
    // the same VM; the scan after it finds nothing.
    kubosh_cloud::local::kill_agent(&w.cloud(), &kubosh_cloud::VmCid(vm_of(&last[1]))).unwrap();
    wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        condition(d, "Stalled").is_some_and(|c| c.reason == "ResurrectionOff")
    })
    .await;
    let problems = scan(&deployments, &w).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].type_, "unresponsive_agent");
    assert!(
        problems[0].instance.starts_with("web/") && problems[0].instance.ends_with("(1)"),
        "{problems:?}"
    );
    assert!(problems[0].resolutions.contains(&"reboot_vm".to_string()));
    let resolve = format!("resolve {} reboot_vm", problems[0].id);
    annotate(&deployments, "kubosh.io/action", &resolve).await;
    let d = wait_for(&deployments, "hello", Duration::from_secs(120), &w, |d| {
        d.status
            .as_ref()
            .and_then(|s| s.last_handled_action.as_deref())
            == Some(resolve.as_str())
            && is_ready(d)
    })
    .await;
    assert_eq!(d.status.as_ref().unwrap().problems, vec![], "nothing left");
    assert_eq!(
        vm_of(&instances(&client, ns).await[1]),
        vm_of(&last[1]),
        "rebooted, not recreated"
    );
    let reasons = reasons_about(&events_of(&client, ns).await, "Deployment", "hello");
    for reason in ["ProblemsScanned", "ProblemResolved"] {
        assert!(
            reasons.contains(&reason.to_string()),
            "{reason} in {reasons:?}"
        );
    }

    // A controller restart (kill -9, then a new process) redeploys nothing: Ready stays
    // true and no task starts.
    let settled = wait_for(&deployments, "hello", Duration::from_secs(120), &w, |d| {
        is_ready(d)
            && d.status
                .as_ref()
                .and_then(|s| s.last_task.as_ref())
                .is_some_and(|t| t.state == kubosh_kube::api::TaskState::Succeeded)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let task = settled.status.as_ref().unwrap().last_task.clone().unwrap();
    let started_before = count_reason(&client, ns, "DeployStarted").await;
    drop(controller);
    let _controller = start_replica_with(&w, cp, ns, "resurrector", &["--agent-timeout", "4s"]);
    let watched = std::time::Instant::now();
    while watched.elapsed() < Duration::from_secs(20) {
        let d = deployments.get("hello").await.unwrap();
        assert!(
            is_ready(&d),
            "Ready stays true across a restart: {:?}",
            d.status
        );
        let now = d.status.as_ref().unwrap().last_task.clone().unwrap();
        if now.id != task.id {
            let log =
                std::fs::read_to_string(w.dir.path().join("controller.log")).unwrap_or_default();
            let tail: Vec<&str> = (log.lines().rev())
                .filter(|l| l.contains("INFO") || l.contains("WARN"))
                .take(40)
                .collect();
            panic!("a task after a restart: {now:?}\n{}", tail.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        count_reason(&client, ns, "DeployStarted").await,
        started_before,
        "no deploy announced"
    );

    // A NATS outage longer than the agent timeout is the bus's, and said so on the
    // deployment: no instance is taken for unresponsive, nothing is recreated (resurrection
    // on again), and once the bus is back the instances run on their VMs as before.
    hello["spec"]["resurrection"] = json!(true);
    let generation = apply_deployment(&client, ns, &hello).await;
    ready_at(&deployments, "hello", &w, generation).await;
    let vms: Vec<String> = instances(&client, ns).await.iter().map(vm_of).collect();
    let creates = create_vm_calls(&w);
    w.stop_nats();
    let outage = std::time::Instant::now();
    while outage.elapsed() < Duration::from_secs(15) {
        for i in instances(&client, ns).await {
            let state = i.status.as_ref().and_then(|s| s.process_state);
            assert_ne!(state, Some(ProcessState::Unresponsive), "{}", i.name_any());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let events = events_of(&client, ns).await;
    let unreachable: Vec<&str> = (events.iter())
        .filter(|e| e.reason.as_deref() == Some("MessageBusUnreachable"))
        .filter_map(|e| e.note.as_deref())
        .collect();
    assert_eq!(unreachable.len(), 1, "{unreachable:?}");
    assert!(
        unreachable[0].starts_with("NATS at nats://127.0.0.1:"),
        "{unreachable:?}"
    );
    w.start_nats_again();
    let back = std::time::Instant::now();
    while count_reason(&client, ns, "MessageBusReachable").await == 0 {
        assert!(
            back.elapsed() < Duration::from_secs(60),
            "the bus is not back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Past the agent timeout and the agents' time to reconnect: they were heard again.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let d = deployments.get("hello").await.unwrap();
    assert!(is_ready(&d), "{:?}", d.status);
    for i in instances(&client, ns).await {
        let state = i.status.as_ref().and_then(|s| s.process_state);
        assert_eq!(state, Some(ProcessState::Running), "{}", i.name_any());
    }
    let after: Vec<String> = instances(&client, ns).await.iter().map(vm_of).collect();
    assert_eq!(after, vms, "no VM recreated");
    assert_eq!(create_vm_calls(&w), creates);

    // A generation that does not validate is pending: an instance that loses its agent is
    // recreated from the generation deployed last (as BOSH's resurrector recreates from what
    // is deployed), and the status keeps saying the newest cannot deploy.
    hello["spec"]["manifest"]["instance_groups"][0]["vm_type"] = json!("no-such-type");
    let invalid = apply_deployment(&client, ns, &hello).await;
    wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        condition(d, "Stalled").is_some_and(|c| c.status == "True" && c.reason == "InvalidManifest")
    })
    .await;
    // Without a kept spec (a deployment last deployed by an earlier kubosh), nothing can be
    // recreated: a Warning says so, once, instead of a silence.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let mut kept = secrets.get("hello.kubosh-deployed").await.unwrap();
    secrets
        .delete("hello.kubosh-deployed", &Default::default())
        .await
        .unwrap();
    kubosh_cloud::local::kill_agent(&w.cloud(), &kubosh_cloud::VmCid(after[0].clone())).unwrap();
    let told = std::time::Instant::now();
    while count_reason(&client, ns, "RepairBlocked").await == 0 {
        assert!(told.elapsed() < Duration::from_secs(90), "no RepairBlocked");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let blocked = events_of(&client, ns).await;
    let blocked = blocked
        .iter()
        .find(|e| e.reason.as_deref() == Some("RepairBlocked"))
        .and_then(|e| e.note.clone())
        .unwrap_or_default();
    assert!(
        blocked.contains("no spec of a deployed generation is kept"),
        "{blocked}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        count_reason(&client, ns, "RepairBlocked").await,
        1,
        "told once"
    );
    // The spec kept again (as the next deploy of a valid generation would keep it), and
    // the repair asked again: it runs.
    kept.metadata.resource_version = None;
    kept.metadata.uid = None;
    kept.metadata.managed_fields = None;
    kept.metadata.creation_timestamp = None;
    secrets.create(&Default::default(), &kept).await.unwrap();
    annotate(&deployments, "kubosh.io/reconcile-request", "repair-1").await;
    let repaired = |d: &Deployment| {
        let replaced = futures::executor::block_on(instances(&client, ns))
            .first()
            .is_some_and(|i| {
                i.spec.vm_cid.as_ref().is_some_and(|v| v != &after[0])
                    && i.status.as_ref().and_then(|s| s.process_state)
                        == Some(ProcessState::Running)
            });
        replaced
            && d.status
                .as_ref()
                .and_then(|s| s.last_task.as_ref())
                .is_some_and(|t| t.state == kubosh_kube::api::TaskState::Succeeded)
    };
    let d = wait_for(
        &deployments,
        "hello",
        Duration::from_secs(120),
        &w,
        repaired,
    )
    .await;
    let stalled = condition(&d, "Stalled").expect("still stalled");
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "InvalidManifest")
    );
    assert!(!is_ready(&d), "the newest generation is not deployed");
    let status = d.status.as_ref().unwrap();
    assert_eq!(status.observed_generation, Some(invalid));
    let task = status.last_task.as_ref().unwrap();
    assert_eq!(
        task.description,
        format!("repair from generation {generation}")
    );
    let notes: Vec<String> = (events_of(&client, ns).await.iter())
        .filter(|e| e.reason.as_deref() == Some("DeploySucceeded"))
        .filter_map(|e| e.note.clone())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with(&format!("Repaired from generation {generation}"))),
        "{notes:?}"
    );
    let now = instances(&client, ns).await;
    let ip = now[0].spec.networks[0].ip.clone().unwrap();
    let body = http_get(&ip, w.port).unwrap_or_default();
    assert!(body.contains("second"), "the deployed spec runs: {body}");
    assert_eq!(vm_of(&now[1]), after[1], "web/1 untouched");

    // With resurrection off in the (still invalid) spec, a dead agent waits for cck: the
    // scan lists it, and `resolve <ID> recreate_vm` recreates it from the generation
    // deployed last.
    hello["spec"]["resurrection"] = json!(false);
    let invalid = apply_deployment(&client, ns, &hello).await;
    wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        d.status.as_ref().and_then(|s| s.observed_generation) == Some(invalid)
    })
    .await;
    kubosh_cloud::local::kill_agent(&w.cloud(), &kubosh_cloud::VmCid(vm_of(&now[1]))).unwrap();
    let silent = |_: &Deployment| {
        futures::executor::block_on(instances(&client, ns))
            .get(1)
            .and_then(|i| i.status.as_ref()?.process_state)
            == Some(ProcessState::Unresponsive)
    };
    wait_for(&deployments, "hello", Duration::from_secs(60), &w, silent).await;
    let problems = scan(&deployments, &w).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].instance.ends_with("(1)"), "{problems:?}");
    let resolve = format!("resolve {} recreate_vm", problems[0].id);
    annotate(&deployments, "kubosh.io/action", &resolve).await;
    let d = wait_for(&deployments, "hello", Duration::from_secs(120), &w, |d| {
        let recreated = futures::executor::block_on(instances(&client, ns))
            .get(1)
            .is_some_and(|i| {
                i.spec.vm_cid.as_ref().is_some_and(|v| v != &vm_of(&now[1]))
                    && i.status.as_ref().and_then(|s| s.process_state)
                        == Some(ProcessState::Running)
            });
        recreated
            && d.status
                .as_ref()
                .and_then(|s| s.last_handled_action.as_deref())
                == Some(resolve.as_str())
    })
    .await;
    let status = d.status.as_ref().unwrap();
    assert_eq!(status.observed_generation, Some(invalid));
    assert!(!is_ready(&d), "the newest generation is not deployed");
    let ip = instances(&client, ns).await[1].spec.networks[0]
        .ip
        .clone()
        .unwrap();
    let body = http_get(&ip, w.port).unwrap_or_default();
    assert!(body.contains("second"), "the deployed spec runs: {body}");
}

/// Asks for a scan (`kubosh.io/action: cck`) and waits for it: the problems it found.
async fn scan(deployments: &Api<Deployment>, w: &World) -> Vec<kubosh_kube::api::ProblemStatus> {
    annotate(deployments, "kubosh.io/action", "cck").await;
    let d = wait_for(deployments, "hello", Duration::from_secs(60), w, |d| {
        d.status
            .as_ref()
            .and_then(|s| s.last_handled_action.as_deref())
            == Some("cck")
    })
    .await;
    d.status.unwrap_or_default().problems
}

/// How many Events with `reason` the namespace has.
async fn count_reason(client: &kube::Client, ns: &str, reason: &str) -> usize {
    (events_of(client, ns).await.iter())
        .filter(|e| e.reason.as_deref() == Some(reason))
        .count()
}

/// How many `create_vm` calls the local cloud has answered.
fn create_vm_calls(w: &World) -> usize {
    (kubosh_cloud::local::read_calls(&w.cloud()).unwrap().iter())
        .filter(|c| c.method == "create_vm")
        .count()
}
