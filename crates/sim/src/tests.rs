//! The simulated pair driven as the engine drives it: [`Cloud`] and [`AgentClient`], on a
//! paused clock.

use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;
use kubosh_cloud::{
    Cloud, CpiError, CreateDisk, CreateStemcell, CreateVm, DiskCid, ErrorKind, NetworkSettings,
    Networks, Object, StemcellCid, UpdateDisk, VmCid,
};
use kubosh_transport::agent::protocol::{CompilePackageArgs, DiskHint as AgentDiskHint, JobState};
use kubosh_transport::agent::{AgentClient, AgentError, ClientOptions, Method};

async fn stemcell(cloud: &SimCloud) -> StemcellCid {
    cloud
        .create_stemcell(&CreateStemcell {
            image_path: "/tmp/image".into(),
            cloud_properties: Object::new(),
        })
        .await
        .unwrap()
}

fn vm_request(agent_id: &str, stemcell: &StemcellCid, ip: Option<&str>) -> CreateVm {
    let mut networks = Networks::new();
    match ip {
        Some(ip) => networks.insert(
            "default".into(),
            NetworkSettings::new("manual").with("ip", ip),
        ),
        None => networks.insert("default".into(), NetworkSettings::new("dynamic")),
    };
    CreateVm {
        agent_id: agent_id.into(),
        stemcell_cid: stemcell.clone(),
        cloud_properties: Object::new(),
        networks,
        disk_cids: vec![],
        env: Object::new(),
    }
}

async fn disk(cloud: &SimCloud, size_mib: u64) -> DiskCid {
    cloud
        .create_disk(&CreateDisk {
            size_mib,
            cloud_properties: Object::new(),
            vm_cid: None,
        })
        .await
        .unwrap()
}

/// Attaches `disk` to `vm` and tells the agent, as the director does.
async fn attach(cloud: &SimCloud, client: &AgentClient, vm: &VmCid, disk: &DiskCid) {
    let hint = cloud.attach_disk(vm, disk).await.unwrap().unwrap();
    let hint: AgentDiskHint = serde_json::from_value(hint.0).unwrap();
    client
        .add_persistent_disk(disk.as_str(), &hint)
        .await
        .unwrap();
    client.mount_disk(disk.as_str()).await.unwrap();
}

fn apply_spec() -> kubosh_transport::agent::protocol::ApplySpec {
    serde_json::from_value(json!({
        "deployment": "d",
        "job": {"name": "web", "templates": [
            {"name": "nginx", "version": "v1"}, {"name": "syslog", "version": "v2"}]},
        "index": 0,
        "name": "web",
        "id": "uuid-1",
        "az": "z1",
        "networks": {"default": {"type": "manual", "ip": "10.0.0.5"}},
        "configuration_hash": "hash-1",
        "persistent_disk": 1024,
    }))
    .unwrap()
}

fn cpi_kind(e: &CpiError) -> ErrorKind {
    e.kind().cloned().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_vm_lives_and_dies_through_the_cloud_and_its_agent() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    let created = cloud
        .create_vm(&vm_request("agent-1", &stemcell, Some("10.0.0.5")))
        .await
        .unwrap();
    let vm = created.cid.clone();
    assert_eq!(created.networks.unwrap()["default"]["ip"], "10.0.0.5");
    assert!(cloud.has_vm(&vm).await.unwrap());

    let client = agents.client("agent-1");
    client
        .wait_until_ready(vm.as_str(), Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(client.ping().await.unwrap(), "pong");
    assert_eq!(client.info().await.unwrap().api_version, 1);
    assert_eq!(client.apply(&apply_spec()).await.unwrap(), "applied");
    client
        .run_script("pre-start", &Default::default())
        .await
        .unwrap();
    assert_eq!(client.start().await.unwrap(), "started");
    let state = client.get_state(false).await.unwrap();
    assert_eq!(state.job_state, JobState::Running);
    assert_eq!(state.agent_id.as_deref(), Some("agent-1"));
    assert_eq!(state.spec.configuration_hash.as_deref(), Some("hash-1"));
    assert_eq!(state.processes.as_ref().map(Vec::len), Some(2));
    assert_eq!(state.vm.unwrap().name, vm.as_str());

    // A persistent disk with a marker, then a bigger one and a migration.
    let small = disk(&cloud, 1024).await;
    attach(&cloud, &client, &vm, &small).await;
    agents
        .write_store_file("agent-1", "data/marker", "42")
        .unwrap();
    assert_eq!(cloud.disk_files(&small).unwrap()["data/marker"], "42");
    assert_eq!(client.list_disk().await.unwrap(), vec![small.to_string()]);

    let big = disk(&cloud, 4096).await;
    attach(&cloud, &client, &vm, &big).await;
    let view = agents.agent("agent-1").unwrap();
    assert_eq!(view.store.as_deref(), Some(small.as_str()));
    assert_eq!(view.migration_target.as_deref(), Some(big.as_str()));
    client
        .migrate_disk(small.as_str(), big.as_str())
        .await
        .unwrap();
    assert_eq!(cloud.disk_files(&big).unwrap()["data/marker"], "42");
    assert_eq!(
        agents.read_store_file("agent-1", "data/marker").unwrap(),
        Some("42".into())
    );
    assert_eq!(client.list_disk().await.unwrap(), vec![big.to_string()]);
    let unmounted = client.unmount_disk(small.as_str()).await.unwrap();
    assert_eq!(
        unmounted.message,
        format!("Partition of {{ID:{small}}} is not mounted")
    );
    client.remove_persistent_disk(small.as_str()).await.unwrap();
    cloud.detach_disk(&vm, &small).await.unwrap();
    cloud.delete_disk(&small).await.unwrap();
    let mut vms = cloud.get_disks(&vm).await.unwrap();
    assert_eq!(vms.pop(), Some(big.clone()));

    client.stop().await.unwrap();
    assert_eq!(
        client.get_state(false).await.unwrap().job_state,
        JobState::Stopped
    );
    cloud.delete_vm(&vm).await.unwrap();
    let inventory = cloud.inventory();
    assert!(inventory.vms.is_empty() && inventory.agents.is_empty());
    assert_eq!(inventory.disks.len(), 1);
    assert_eq!(inventory.disks[0].attached_to, None);
    assert_eq!(inventory.disks[0].files["data/marker"], "42");
    let gone = cloud.delete_vm(&vm).await.unwrap_err();
    assert_eq!(cpi_kind(&gone), ErrorKind::VmNotFound);
    assert!(!cloud.has_vm(&vm).await.unwrap());

    // The agent died with its VM: no reply, the Director's words.
    let before = Instant::now();
    let err = client.ping().await.unwrap_err();
    assert_eq!(before.elapsed(), Duration::from_secs(45));
    assert!(err.is_timeout());
    assert_eq!(
        err.to_string(),
        "Timed out sending 'ping' to instance: 'unknown', agent-id: 'agent-1' after 45 seconds"
    );
    cloud.delete_disk(&big).await.unwrap();
    cloud.delete_stemcell(&stemcell).await.unwrap();
    assert!(cloud.inventory().is_empty());
}

#[tokio::test(start_paused = true)]
async fn compile_package_is_a_task_polled_until_its_latency_has_passed() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    cloud
        .create_vm(&vm_request("compiler", &stemcell, None))
        .await
        .unwrap();
    agents.set_latency("compile_package", Duration::from_secs(300));
    let client = agents.client("compiler");
    let args = CompilePackageArgs {
        blobstore_id: "src-blob".into(),
        sha1: "abc".into(),
        name: "ruby".into(),
        version: "3.3".into(),
        dependencies: IndexMap::new(),
    };
    let before = Instant::now();
    let first = client.compile_package(&args).await.unwrap();
    let took = before.elapsed();
    // Polled every second: done at the first poll after 300 s.
    assert!(
        took >= Duration::from_secs(300) && took <= Duration::from_secs(301),
        "{took:?}"
    );
    assert!(agents.count("get_task") >= 300, "{:?}", agents.counts());
    assert_eq!(agents.count("compile_package"), 1);
    assert_eq!(first.result.blobstore_id.len(), 64);
    assert_eq!(first.result.sha1.len(), 40);
    // Deterministic: the same package compiles to the same blob; another one does not.
    assert_eq!(client.compile_package(&args).await.unwrap(), first);
    let other = CompilePackageArgs {
        version: "3.4".into(),
        ..args.clone()
    };
    assert_ne!(client.compile_package(&other).await.unwrap(), first);
    assert_eq!(agents.agent("compiler").unwrap().running_tasks, 0);

    // A package of its own latency: golang takes 20 minutes, ruby still 300 s.
    agents.set_compile_latency("golang", Duration::from_secs(1200));
    let golang = CompilePackageArgs {
        name: "golang".into(),
        ..other.clone()
    };
    for (args, secs) in [(&golang, 1200), (&other, 300)] {
        let before = Instant::now();
        client.compile_package(args).await.unwrap();
        let took = before.elapsed().as_secs();
        assert!((secs..=secs + 1).contains(&took), "{}: {took} s", args.name);
    }
}

#[tokio::test]
async fn compile_package_stores_the_compiled_bytes_when_given_a_blobstore() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(kubosh_artifacts::blobstore::LocalBlobstore::new(dir.path()).unwrap());
    let (cloud, agents) = pair(SimConfig {
        blobstore: Some(store.clone()),
        ..SimConfig::default()
    });
    let stemcell = stemcell(&cloud).await;
    cloud
        .create_vm(&vm_request("compiler", &stemcell, None))
        .await
        .unwrap();
    let compiled = agents
        .client("compiler")
        .compile_package(&CompilePackageArgs {
            blobstore_id: "src".into(),
            sha1: "abc".into(),
            name: "golang".into(),
            version: "1.0".into(),
            dependencies: IndexMap::new(),
        })
        .await
        .unwrap()
        .result;
    use kubosh_artifacts::blobstore::Blobstore as _;
    let digest = compiled.sha1.parse().unwrap();
    let bytes = store
        .get_bytes(&compiled.blobstore_id, &digest)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&bytes).contains("golang/1.0"));
}

#[tokio::test(start_paused = true)]
async fn cloud_faults_fail_counted_calls_and_hang_until_the_caller_gives_up() {
    let (cloud, _agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    cloud.inject(
        "create_vm",
        CloudFault::fail(ErrorKind::VmCreationFailed, "no capacity", true).times(2),
    );
    for _ in 0..2 {
        let err = cloud
            .create_vm(&vm_request("a", &stemcell, None))
            .await
            .unwrap_err();
        assert_eq!(cpi_kind(&err), ErrorKind::VmCreationFailed);
        assert!(err.ok_to_retry());
        assert!(
            err.to_string().contains("'no capacity' in 'create_vm'"),
            "{err}"
        );
    }
    let vm = cloud
        .create_vm(&vm_request("a", &stemcell, None))
        .await
        .unwrap()
        .cid;

    cloud.inject("has_vm", CloudFault::hang());
    let before = Instant::now();
    let hung = tokio::time::timeout(Duration::from_secs(60), cloud.has_vm(&vm)).await;
    assert!(hung.is_err());
    assert_eq!(before.elapsed(), Duration::from_secs(60));
    cloud.clear_faults();
    assert!(cloud.has_vm(&vm).await.unwrap());

    cloud.inject(
        "delete_vm",
        CloudFault::hang_for(Duration::from_secs(5)).only_for("vm-nope"),
    );
    let before = Instant::now();
    cloud.delete_vm(&vm).await.unwrap();
    assert_eq!(before.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn agent_faults_fail_tasks_and_swallow_replies() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    let vm = cloud
        .create_vm(&vm_request("agent-1", &stemcell, None))
        .await
        .unwrap()
        .cid;
    let client = agents.client("agent-1");

    // An asynchronous action fails as its task; a synchronous one answers the exception.
    agents.inject("apply", AgentFault::fail("boom").times(1));
    let err = client.apply(&apply_spec()).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("Action Failed get_task: Task task-") && text.ends_with(" result: boom"),
        "{text}"
    );
    assert_eq!(client.apply(&apply_spec()).await.unwrap(), "applied");
    agents.inject("start", AgentFault::fail("no monit").only_for("agent-1"));
    assert_eq!(
        client.start().await.unwrap_err().to_string(),
        "Action Failed start: no monit"
    );
    agents.clear_faults();

    // One swallowed reply: the Director's timeout text, after the 45 s.
    agents.inject("ping", AgentFault::no_reply().times(1));
    let before = Instant::now();
    assert!(client.ping().await.unwrap_err().is_timeout());
    assert_eq!(before.elapsed(), Duration::from_secs(45));
    assert_eq!(client.ping().await.unwrap(), "pong");

    // An unresponsive VM: get_state is retried twice by the client, then times out.
    cloud.set_agent_unresponsive(&vm, true).unwrap();
    let before = Instant::now();
    let err = client.get_state(false).await.unwrap_err();
    assert_eq!(before.elapsed(), Duration::from_secs(3 * 45));
    assert_eq!(
        err,
        AgentError::Timeout {
            method: "get_state".into(),
            instance: "unknown".into(),
            agent_id: "agent-1".into(),
            after: Duration::from_secs(45),
        }
    );
    let before = Instant::now();
    let err = client
        .wait_until_ready(vm.as_str(), Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::PingTimeout { .. }), "{err}");
    assert!(before.elapsed() >= Duration::from_secs(30));
    cloud.set_agent_unresponsive(&vm, false).unwrap();
    assert_eq!(client.ping().await.unwrap(), "pong");

    // Unknown methods are the agent's exception.
    let err = client.send(Method::Ssh, &[]).await.unwrap_err();
    assert!(err.is_unknown_message());
    assert_eq!(err.to_string(), "unknown message ssh");
    assert!(matches!(
        agents.set_unresponsive("nobody", true),
        Err(SimError::AgentNotFound(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn jobs_that_never_run_fail_with_their_process_names() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    cloud.set_new_agents(NewAgents {
        unresponsive: false,
        jobs_never_running: true,
    });
    cloud
        .create_vm(&vm_request("agent-1", &stemcell, None))
        .await
        .unwrap();
    let client = agents.client("agent-1");
    client.apply(&apply_spec()).await.unwrap();
    client.start().await.unwrap();
    let state = client.get_state(false).await.unwrap();
    assert_eq!(state.job_state, JobState::Failing);
    assert_eq!(state.failing_processes(), vec!["nginx", "syslog"]);
    agents.set_jobs_never_running("agent-1", false).unwrap();
    assert_eq!(
        client.get_state(false).await.unwrap().job_state,
        JobState::Running
    );
}

#[tokio::test(start_paused = true)]
async fn a_poll_at_the_instant_a_task_ends_sees_it_ended() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    cloud
        .create_vm(&vm_request("agent-1", &stemcell, None))
        .await
        .unwrap();
    let client = agents.client("agent-1");
    // Polled every second: a 5 s task is seen done at 5 s, a 4.5 s one at the next poll.
    for (latency, seen) in [(5000, 5000), (4500, 5000), (1000, 1000)] {
        agents.set_latency("apply", Duration::from_millis(latency));
        let before = Instant::now();
        client.apply(&apply_spec()).await.unwrap();
        assert_eq!(
            before.elapsed(),
            Duration::from_millis(seen),
            "{latency} ms"
        );
        assert_eq!(agents.agent("agent-1").unwrap().spec["id"], "uuid-1");
    }
    // A failing task fails at the same instant.
    agents.set_latency("drain", Duration::from_secs(3));
    agents.inject("drain", AgentFault::fail("drain script failed").times(1));
    let before = Instant::now();
    let err = client
        .drain(kubosh_transport::agent::protocol::DrainType::Update, None)
        .await
        .unwrap_err();
    assert_eq!(before.elapsed(), Duration::from_secs(3));
    assert!(err.to_string().contains("drain script failed"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn heartbeats_report_what_get_state_would_without_a_call() {
    use kubosh_bosh::agent::AgentHealth;
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    let vm = cloud
        .create_vm(&vm_request("agent-1", &stemcell, None))
        .await
        .unwrap();
    let window = Duration::from_secs(60);
    let client = agents.client("agent-1");
    client.apply(&apply_spec()).await.unwrap();
    // Applied, never started: the jobs are unmonitored.
    assert_eq!(
        agents.recent_job_state("agent-1", window).as_deref(),
        Some("failing")
    );
    client.start().await.unwrap();
    assert_eq!(
        agents.recent_job_state("agent-1", window).as_deref(),
        Some("running")
    );
    agents.set_jobs_never_running("agent-1", true).unwrap();
    assert_eq!(
        agents.recent_job_state("agent-1", window).as_deref(),
        Some("failing")
    );
    client.stop().await.unwrap();
    assert_eq!(
        agents.recent_job_state("agent-1", window).as_deref(),
        Some("stopped")
    );
    agents.reset_calls();
    agents.set_unresponsive("agent-1", true).unwrap();
    assert_eq!(agents.recent_job_state("agent-1", window), None);
    cloud.delete_vm(&vm.cid).await.unwrap();
    assert_eq!(agents.recent_job_state("agent-1", window), None);
    assert_eq!(agents.recent_job_state("agent-2", window), None);
    assert!(agents.counts().is_empty(), "heartbeats are not agent calls");
}

#[tokio::test(start_paused = true)]
async fn latencies_pass_on_the_virtual_clock() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    cloud.set_latency("create_vm", Duration::from_secs(30));
    agents.set_latency("start", Duration::from_secs(2));
    agents.set_latency("stop", Duration::from_secs(1000));

    // 1,000 VMs at once take one latency, not a thousand.
    let before = Instant::now();
    let requests: Vec<CreateVm> = (0..1000)
        .map(|i| vm_request(&format!("agent-{i}"), &stemcell, None))
        .collect();
    let created = futures::future::join_all(requests.iter().map(|r| cloud.create_vm(r))).await;
    assert_eq!(before.elapsed(), Duration::from_secs(30));
    assert!(created.iter().all(Result::is_ok));
    assert_eq!(cloud.inventory().agents.len(), 1000);

    let client = agents.client("agent-7");
    let before = Instant::now();
    client.start().await.unwrap();
    assert_eq!(before.elapsed(), Duration::from_secs(2));

    // A stop task that outlasts the Director's 300 s is left running.
    let before = Instant::now();
    client.stop().await.unwrap();
    let took = before.elapsed();
    assert!(
        took >= Duration::from_secs(300) && took < Duration::from_secs(302),
        "{took:?}"
    );
    assert_eq!(agents.agent("agent-7").unwrap().running_tasks, 1);

    // A synchronous reply slower than the timeout is a timeout.
    let impatient = client.clone().with_options(ClientOptions {
        timeout: Duration::from_secs(1),
        ..ClientOptions::default()
    });
    assert!(impatient.start().await.unwrap_err().is_timeout());
}

#[tokio::test(start_paused = true)]
async fn calls_are_logged_in_order_and_counted() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    let vm = cloud
        .create_vm(&vm_request("agent-1", &stemcell, Some("10.0.0.9")))
        .await
        .unwrap()
        .cid;
    let d = disk(&cloud, 10).await;
    let client = agents.client("agent-1");
    attach(&cloud, &client, &vm, &d).await;
    assert_eq!(
        cloud.calls(),
        vec![
            Call::new("create_stemcell", "/tmp/image"),
            Call::new("create_vm", "agent-1"),
            Call::new("create_disk", ""),
            Call::new("attach_disk", d.as_str()),
        ]
    );
    let methods: Vec<String> = agents.calls().into_iter().map(|c| c.method).collect();
    assert_eq!(
        methods,
        ["add_persistent_disk", "get_task", "mount_disk", "get_task"]
    );
    assert!(agents.calls().iter().all(|c| c.target == "agent-1"));
    assert_eq!(agents.count("get_task"), 2);
    assert_eq!(cloud.count("create_vm"), 1);
    cloud.reset_calls();
    agents.reset_calls();
    assert!(cloud.calls().is_empty() && agents.counts().is_empty());

    // The same IP twice is the cloud's error, and counted.
    let err = cloud
        .create_vm(&vm_request("agent-2", &stemcell, Some("10.0.0.9")))
        .await
        .unwrap_err();
    assert_eq!(cpi_kind(&err), ErrorKind::VmCreationFailed);
    assert_eq!(cloud.counts().get("create_vm"), Some(&1));
}

#[tokio::test(start_paused = true)]
async fn disks_behave_as_a_cpi_says() {
    let (cloud, agents) = pair(SimConfig {
        update_disk: false,
        ..SimConfig::default()
    });
    let stemcell = stemcell(&cloud).await;
    let vm = cloud
        .create_vm(&vm_request("agent-1", &stemcell, None))
        .await
        .unwrap()
        .cid;
    let d = disk(&cloud, 100).await;
    let missing = DiskCid::from("disk-missing");
    assert_eq!(
        cpi_kind(&cloud.attach_disk(&vm, &missing).await.unwrap_err()),
        ErrorKind::DiskNotFound
    );
    assert_eq!(
        cpi_kind(&cloud.detach_disk(&vm, &d).await.unwrap_err()),
        ErrorKind::DiskNotAttached
    );
    assert_eq!(
        cpi_kind(
            &cloud
                .get_disks(&VmCid::from("vm-missing"))
                .await
                .unwrap_err()
        ),
        ErrorKind::VmNotFound
    );
    cloud.resize_disk(&d, 200).await.unwrap();
    assert_eq!(cloud.disk(&d).unwrap().size_mib, 200);
    assert_eq!(
        cpi_kind(&cloud.resize_disk(&d, 50).await.unwrap_err()),
        ErrorKind::NotSupported
    );
    let update = UpdateDisk {
        disk_cid: d.clone(),
        new_size_mib: 300,
        cloud_properties: Object::new(),
    };
    assert!(
        cloud
            .update_disk(&update)
            .await
            .unwrap_err()
            .is_not_implemented()
    );

    // Snapshots keep the files of their moment.
    cloud.write_disk_file(&d, "f", "1").unwrap();
    let snap = cloud.snapshot_disk(&d, &Object::new()).await.unwrap();
    cloud.write_disk_file(&d, "f", "2").unwrap();
    assert_eq!(cloud.inventory().snapshots[0].files["f"], "1");
    cloud.delete_snapshot(&snap).await.unwrap();
    assert!(cloud.delete_snapshot(&snap).await.is_err());

    // Mounting needs the disk attached (or announced); a detached disk is unknown.
    let client = agents.client("agent-1");
    let err = client.mount_disk(d.as_str()).await.unwrap_err().to_string();
    assert!(
        err.ends_with(&format!(
            "result: Mounting persistent disk: Persistent disk with volume id '{d}' could not be found"
        )),
        "{err}"
    );
    cloud.attach_disk(&vm, &d).await.unwrap();
    client.mount_disk(d.as_str()).await.unwrap();
    assert_eq!(client.list_disk().await.unwrap(), vec![d.to_string()]);
    let err = cloud.delete_disk(&d).await.unwrap_err();
    assert_eq!(cpi_kind(&err), ErrorKind::CloudError);
}

#[tokio::test(start_paused = true)]
async fn api_v1_answers_no_networks_and_no_disk_hint() {
    let (cloud, _agents) = pair(SimConfig {
        api_version: 1,
        ..SimConfig::default()
    });
    assert_eq!(cloud.info().await.unwrap().api_version, 1);
    let stemcell = stemcell(&cloud).await;
    let created = cloud
        .create_vm(&vm_request("a", &stemcell, None))
        .await
        .unwrap();
    assert_eq!(created.networks, None);
    let d = disk(&cloud, 1).await;
    assert_eq!(cloud.attach_disk(&created.cid, &d).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn dynamic_networks_get_the_vms_address_in_the_applied_spec() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    let created = cloud
        .create_vm(&vm_request("agent-1", &stemcell, None))
        .await
        .unwrap();
    let ip = created.networks.unwrap()["default"]["ip"].clone();
    assert!(ip.as_str().is_some_and(|ip| ip.starts_with("100.")), "{ip}");
    let spec = serde_json::from_value(json!({
        "networks": {"default": {"type": "dynamic"}},
    }))
    .unwrap();
    let client = agents.client("agent-1");
    client.apply(&spec).await.unwrap();
    let state = client.get_state(false).await.unwrap();
    assert_eq!(state.spec.networks.unwrap()["default"]["ip"], ip);
}

#[tokio::test(start_paused = true)]
async fn fire_and_forget_messages_and_small_actions_are_recorded() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    cloud
        .create_vm(&vm_request("agent-1", &stemcell, None))
        .await
        .unwrap();
    let client = agents.client("agent-1");
    assert_eq!(client.sync_dns("blob", "sha", 7).await.unwrap(), "synced");
    assert_eq!(client.sync_dns("blob", "sha", 3).await.unwrap(), "synced");
    client
        .drain(kubosh_transport::agent::protocol::DrainType::Shutdown, None)
        .await
        .unwrap();
    let blob = kubosh_transport::agent::protocol::UploadBlob::new(
        "b1",
        kubosh_base::digest::sha1_hex(b"payload"),
        b"payload",
    );
    assert_eq!(client.upload_blob(&blob).await.unwrap(), "b1");
    client.delete_arp_entries(&["10.0.0.1".into()]).await;
    let view = agents.agent("agent-1").unwrap();
    assert_eq!(view.dns_version, Some(7));
    assert_eq!(view.drains, vec!["shutdown"]);
    assert_eq!(view.uploaded_blobs, vec!["b1"]);
    assert_eq!(view.arp_deleted, vec!["10.0.0.1"]);
    let value: Value = client.send(Method::GetState, &[]).await.unwrap();
    assert_eq!(value["job_state"], "running");

    // `shutdown` powers the VM off: nothing answers any more.
    client.shutdown().await;
    assert!(client.ping().await.unwrap_err().is_timeout());
}

/// One instance's life as the engine drives it: create, wait, apply, pre-start, start,
/// state, a persistent disk, drain, stop, delete.
async fn life(cloud: Arc<SimCloud>, agents: Arc<SimAgents>, stemcell: StemcellCid, i: usize) {
    let id = format!("agent-{i}");
    let vm = cloud
        .create_vm(&vm_request(&id, &stemcell, None))
        .await
        .unwrap()
        .cid;
    let client = agents.client(id);
    client
        .wait_until_ready(vm.as_str(), Duration::from_secs(600))
        .await
        .unwrap();
    client.apply(&apply_spec()).await.unwrap();
    client
        .run_script("pre-start", &Default::default())
        .await
        .unwrap();
    client.start().await.unwrap();
    assert_eq!(
        client.get_state(false).await.unwrap().job_state,
        JobState::Running
    );
    let d = disk(&cloud, 10).await;
    attach(&cloud, &client, &vm, &d).await;
    client
        .drain(kubosh_transport::agent::protocol::DrainType::Shutdown, None)
        .await
        .unwrap();
    client.stop().await.unwrap();
    cloud.delete_vm(&vm).await.unwrap();
    cloud.delete_disk(&d).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_thousand_concurrent_lives_take_the_virtual_time_of_one() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    cloud.set_latency("create_vm", Duration::from_secs(40));
    agents.set_latency("apply", Duration::from_secs(3));
    let before = Instant::now();
    futures::future::join_all(
        (0..1000).map(|i| life(cloud.clone(), agents.clone(), stemcell.clone(), i)),
    )
    .await;
    // 40 s to create, then the apply task, seen done at the poll 3 s (or, when the poll's
    // timer fires first, 4 s) later.
    let took = before.elapsed();
    assert!(
        took >= Duration::from_secs(43) && took <= Duration::from_secs(44),
        "{took:?}"
    );
    for (method, n) in [
        ("create_vm", 1000),
        ("delete_vm", 1000),
        ("delete_disk", 1000),
    ] {
        assert_eq!(cloud.count(method), n, "{method}");
    }
    for (method, n) in [
        ("apply", 1000),
        ("start", 1000),
        ("stop", 1000),
        ("ping", 1000),
    ] {
        assert_eq!(agents.count(method), n, "{method}");
    }
    let inventory = cloud.inventory();
    assert_eq!(inventory.stemcells.len(), 1);
    assert!(inventory.vms.is_empty() && inventory.disks.is_empty());
    assert!(inventory.agents.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_drain_never_takes_effect() {
    let (cloud, agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    cloud
        .create_vm(&vm_request("agent-1", &stemcell, None))
        .await
        .unwrap();
    agents.set_latency("drain", Duration::from_secs(100));
    let client = agents.client("agent-1");
    let err = client
        .drain_cancellable(
            kubosh_transport::agent::protocol::DrainType::Update,
            Some(&apply_spec()),
            tokio::time::sleep(Duration::from_secs(5)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Cancelled { .. }), "{err}");
    assert_eq!(agents.count("cancel_task"), 1);
    tokio::time::sleep(Duration::from_secs(200)).await;
    let view = agents.agent("agent-1").unwrap();
    assert!(view.drains.is_empty());
    assert_eq!(view.running_tasks, 0);
    // `stop` cannot be cancelled.
    agents.set_latency("stop", Duration::from_secs(100));
    let handle = client.start_task(Method::Stop, &[]).await.unwrap();
    let kubosh_transport::agent::Started::Task(task) = handle else {
        panic!("stop is a task: {handle:?}");
    };
    let err = client.cancel_task(&task.agent_task_id).await.unwrap_err();
    assert_eq!(err.to_string(), "Action Failed cancel_task: not supported");
}

/// A latency range: each call its own latency within it, repeatably (`spread_latency` of its
/// number), not all the same.
#[tokio::test(start_paused = true)]
async fn calls_with_a_latency_range_each_take_their_own_within_it() {
    let (cloud, _agents) = pair(SimConfig::default());
    let stemcell = stemcell(&cloud).await;
    let (least, most) = (Duration::from_secs(30), Duration::from_secs(60));
    cloud.set_latency_range("create_vm", least, most);
    let mut took = Vec::new();
    for n in 1..=20u64 {
        let before = Instant::now();
        (cloud.create_vm(&vm_request(&format!("agent-{n}"), &stemcell, None)))
            .await
            .unwrap();
        let elapsed = before.elapsed();
        assert_eq!(elapsed, spread_latency(least, most, n), "call {n}");
        assert!((least..=most).contains(&elapsed), "call {n}: {elapsed:?}");
        took.push(elapsed);
    }
    took.sort();
    took.dedup();
    assert!(took.len() > 10, "spread: {took:?}");
}
