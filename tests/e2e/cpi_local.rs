//! The local cloud end to end: the real `kubosh` binary as the CPI (`kubosh cpi`), driven
//! through the CPI client (`ExternalCpi`), one process per call.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kubosh_cloud::local::{self, Fault, Faults, Inventory};
use kubosh_cloud::*;
use serde_json::{Value, json};

const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");

/// A state directory and a client for it. Dropping it kills whatever agents are left, so a
/// failing test leaves no process behind.
struct TestCloud {
    dir: tempfile::TempDir,
    cpi: ExternalCpi,
}

/// The default test agent: writes a marker (its settings path) and sleeps.
const MARKER_AGENT: &[&str] = &[
    "/bin/sh",
    "-c",
    "echo {settings} > {vm_dir}/marker; exec sleep 1000",
];

impl TestCloud {
    fn new() -> Self {
        Self::with_config(MARKER_AGENT, "")
    }

    fn with_config(agent: &[&str], extra_yaml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("cpi.yml");
        std::fs::write(
            &config,
            format!(
                "state_dir: state\nmbus: nats://nats.example:4222\nagent:\n  command: {}\n  stop_timeout_seconds: 5\n{extra_yaml}",
                serde_json::to_string(agent).unwrap()
            ),
        )
        .unwrap();
        let command = CpiCommand::new(KUBOSH)
            .args(["cpi", "--config", config.to_str().unwrap()])
            .timeout(Duration::from_secs(30));
        let cpi = ExternalCpi::new(command, "director-uuid").with_retry(RetryPolicy {
            max_attempts: 5,
            min_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
        });
        TestCloud { dir, cpi }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("cpi.yml")
    }

    fn inventory(&self) -> Inventory {
        local::inventory(&self.state()).unwrap()
    }

    fn methods_called(&self) -> Vec<String> {
        local::read_calls(&self.state())
            .unwrap()
            .into_iter()
            .map(|c| c.method)
            .collect()
    }

    async fn stemcell(&self) -> StemcellCid {
        let image = self.dir.path().join("image");
        std::fs::write(&image, b"stemcell image").unwrap();
        self.cpi
            .create_stemcell(&CreateStemcell {
                image_path: image,
                cloud_properties: obj(
                    json!({"name": "bosh-warden-boshlite-ubuntu-noble", "version": "1.0"}),
                ),
            })
            .await
            .unwrap()
    }
}

impl Drop for TestCloud {
    fn drop(&mut self) {
        let _ = local::stop_all_agents(&self.state(), Duration::from_secs(1));
    }
}

fn obj(v: Value) -> Object {
    v.as_object().unwrap().clone()
}

fn create_vm_req(stemcell: &StemcellCid, ip: &str) -> CreateVm {
    let mut networks = Networks::new();
    networks.insert(
        "private".into(),
        NetworkSettings::new("manual")
            .with("ip", ip)
            .with("netmask", "255.255.255.0")
            .with("prefix", "32")
            .with("gateway", "10.0.0.1")
            .with("dns", json!(["10.0.0.2"]))
            .with("default", json!(["dns", "gateway"]))
            .with("cloud_properties", json!({"subnet": "subnet-1"})),
    );
    CreateVm {
        agent_id: format!("agent-{ip}"),
        stemcell_cid: stemcell.clone(),
        cloud_properties: obj(json!({"cpu": 1})),
        networks,
        disk_cids: vec![],
        env: obj(json!({"bosh": {"group": "d-dep-web", "mbus": {"cert": {
            "ca": "CA PEM", "certificate": "CERT PEM", "private_key": "agent-private-key-secret"}}}})),
    }
}

/// The state of a process (`R`, `S`, `T`, `Z`, ...), `None` when it is gone.
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn running(pid: i32) -> bool {
    proc_state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

/// Live processes in process group `pgid`.
fn group(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s.rsplit_once(')')?.1.to_string();
                    let f: Vec<&str> = rest.split_whitespace().collect();
                    Some(f.get(2)?.parse::<i32>().ok()? == pgid && !matches!(f[0], "Z" | "X"))
                })
                .unwrap_or(false)
        })
        .collect()
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn every_method_end_to_end() {
    let cloud = TestCloud::new();
    let cpi = &cloud.cpi;

    let info = cpi.info().await.unwrap();
    assert_eq!(info.api_version, 2);
    assert_eq!(info.stemcell_formats, ["warden-tar", "general-tar"]);

    let stemcell = cloud.stemcell().await;
    assert!(stemcell.as_str().starts_with("sc-"));

    // create_vm: a VM directory, agent settings, agent.json, a running agent.
    let req = create_vm_req(&stemcell, "10.0.0.6");
    let created = cpi.create_vm(&req).await.unwrap();
    let vm = created.cid.clone();
    assert!(vm.as_str().starts_with("vm-"));
    assert_eq!(
        created.networks.as_ref().map(|n| Value::Object(n.clone())),
        Some(serde_json::to_value(&req.networks).unwrap())
    );
    let inventory = cloud.inventory();
    assert_eq!(inventory.vms.len(), 1);
    let entry = &inventory.vms[0];
    assert_eq!(entry.ips, ["10.0.0.6"]);
    assert!(entry.agent_alive);
    let vm_dir = entry.dir.clone();
    let settings_path = vm_dir.join("settings.json");
    let settings = read_json(&settings_path);
    assert_eq!(
        settings,
        json!({
            "agent_id": "agent-10.0.0.6",
            "vm": {"name": vm.as_str()},
            "mbus": "nats://nats.example:4222",
            "ntp": [],
            "blobstore": {"provider": "local", "options": {"blobstore_path": cloud.state().join("blobstore")}},
            "networks": serde_json::to_value(&req.networks).unwrap(),
            "disks": {
                "system": vm_dir.join("root"),
                "ephemeral": {"path": vm_dir.join("ephemeral")},
                "persistent": {},
                "raw_ephemeral": null,
            },
            "env": Value::Object(req.env.clone()),
        })
    );
    let keys: Vec<&String> = settings.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "agent_id",
            "vm",
            "mbus",
            "ntp",
            "blobstore",
            "networks",
            "disks",
            "env"
        ]
    );
    assert_eq!(
        read_json(&vm_dir.join("root/bosh/agent.json")),
        json!({"Infrastructure": {"Settings": {"Sources": [
            {"Type": "File", "SettingsPath": settings_path}]}}})
    );
    let marker = vm_dir.join("marker");
    wait_for("the agent's marker", || marker.is_file());
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().trim(),
        settings_path.to_str().unwrap()
    );
    let first_pid = entry.pid.unwrap();
    assert!(running(first_pid));

    assert!(cpi.has_vm(&vm).await.unwrap());
    assert!(!cpi.has_vm(&"vm-nope".into()).await.unwrap());
    cpi.set_vm_metadata(&vm, &obj(json!({"director": "d", "name": "web/0"})))
        .await
        .unwrap();
    cpi.set_vm_metadata(&vm, &obj(json!({"index": "0"})))
        .await
        .unwrap();
    assert_eq!(
        Value::Object(cloud.inventory().vms[0].metadata.clone()),
        json!({"director": "d", "name": "web/0", "index": "0"})
    );
    assert_eq!(
        cpi.calculate_vm_cloud_properties(&VmResources {
            cpu: 2,
            ram: 1024,
            ephemeral_disk_size: 4096
        })
        .await
        .unwrap(),
        obj(json!({"cpu": 2, "ram": 1024, "ephemeral_disk_size": 4096}))
    );

    // Disks.
    let disk = cpi
        .create_disk(&CreateDisk {
            size_mib: 1024,
            cloud_properties: obj(json!({"type": "fast"})),
            vm_cid: Some(vm.clone()),
        })
        .await
        .unwrap();
    assert!(disk.as_str().starts_with("disk-"));
    assert!(cpi.has_disk(&disk).await.unwrap());
    assert!(cpi.get_disks(&vm).await.unwrap().is_empty());
    let hint = cpi.attach_disk(&vm, &disk).await.unwrap().unwrap();
    let data_dir = cloud.inventory().disks[0].data_dir.clone();
    assert!(data_dir.is_absolute() && data_dir.is_dir());
    assert_eq!(hint, DiskHint(json!({"path": data_dir})));
    assert_eq!(
        read_json(&settings_path)["disks"]["persistent"],
        json!({disk.as_str(): {"path": data_dir}})
    );
    assert_eq!(
        cpi.get_disks(&vm).await.unwrap(),
        std::slice::from_ref(&disk)
    );
    // Attaching again to the same VM is harmless.
    cpi.attach_disk(&vm, &disk).await.unwrap();
    cpi.set_disk_metadata(&disk, &obj(json!({"attached_at": "now"})))
        .await
        .unwrap();
    assert_eq!(
        Value::Object(cloud.inventory().disks[0].metadata.clone()),
        json!({"attached_at": "now"})
    );
    std::fs::write(data_dir.join("file"), "persistent data").unwrap();
    let snapshot = cpi
        .snapshot_disk(&disk, &obj(json!({"deployment": "d"})))
        .await
        .unwrap();
    let snapshot_dir = cloud.state().join("snapshots").join(snapshot.as_str());
    assert_eq!(
        std::fs::read_to_string(snapshot_dir.join("data/file")).unwrap(),
        "persistent data"
    );
    // A disk attached to a VM can be neither resized nor deleted.
    for err in [
        cpi.resize_disk(&disk, 2048).await.unwrap_err(),
        cpi.delete_disk(&disk).await.unwrap_err(),
    ] {
        assert!(err.is(&ErrorKind::CloudError), "{err}");
    }
    cpi.detach_disk(&vm, &disk).await.unwrap();
    assert_eq!(read_json(&settings_path)["disks"]["persistent"], json!({}));
    let err = cpi.detach_disk(&vm, &disk).await.unwrap_err();
    assert!(err.is(&ErrorKind::DiskNotAttached), "{err}");
    assert!(cpi.get_disks(&vm).await.unwrap().is_empty());
    cpi.resize_disk(&disk, 2048).await.unwrap();
    assert_eq!(cloud.inventory().disks[0].size_mib, 2048);
    let err = cpi.resize_disk(&disk, 1024).await.unwrap_err();
    assert!(err.is_not_implemented(), "{err}");
    assert_eq!(
        cpi.update_disk(&UpdateDisk {
            disk_cid: disk.clone(),
            new_size_mib: 4096,
            cloud_properties: obj(json!({"type": "faster"})),
        })
        .await
        .unwrap(),
        None
    );
    assert_eq!(cloud.inventory().disks[0].size_mib, 4096);

    // reboot_vm: a new agent process, the old one gone.
    std::fs::remove_file(&marker).unwrap();
    cpi.reboot_vm(&vm).await.unwrap();
    wait_for("the rebooted agent's marker", || marker.is_file());
    let second_pid = cloud.inventory().vms[0].pid.unwrap();
    assert_ne!(first_pid, second_pid);
    assert!(!running(first_pid));
    assert!(running(second_pid));

    // The network methods are not implemented.
    let err = cpi
        .create_network(&CreateNetwork(obj(json!({"type": "manual"}))))
        .await
        .unwrap_err();
    assert!(err.is(&ErrorKind::NotImplemented), "{err}");
    let err = cpi.delete_network("net").await.unwrap_err();
    assert!(err.is(&ErrorKind::NotImplemented), "{err}");

    // Clean up: everything goes, nothing runs.
    cpi.delete_snapshot(&snapshot).await.unwrap();
    cpi.delete_disk(&disk).await.unwrap();
    assert!(!cpi.has_disk(&disk).await.unwrap());
    let err = cpi.delete_disk(&disk).await.unwrap_err();
    assert!(err.is(&ErrorKind::DiskNotFound), "{err}");
    cpi.delete_vm(&vm).await.unwrap();
    assert!(!running(second_pid));
    assert!(!vm_dir.exists());
    let err = cpi.delete_vm(&vm).await.unwrap_err();
    assert!(err.is(&ErrorKind::VmNotFound), "{err}");
    assert!(!cpi.has_vm(&vm).await.unwrap());
    cpi.delete_stemcell(&stemcell).await.unwrap();
    assert!(cloud.inventory().is_empty(), "{:?}", cloud.inventory());

    let calls = cloud.methods_called();
    assert_eq!(calls[..4], ["info", "info", "create_stemcell", "create_vm"]);
    assert_eq!(calls.last().map(String::as_str), Some("delete_stemcell"));
    assert_eq!(calls.iter().filter(|m| *m == "delete_vm").count(), 2);
}

/// Without an `mbus` for the agent settings, `create_vm` refuses at once, naming the
/// setting: a VM whose agent cannot call home would only be noticed after the deploy's
/// agent wait.
#[tokio::test]
async fn create_vm_without_an_mbus_is_refused_and_says_which_setting() {
    let cloud = TestCloud::new();
    let stemcell = cloud.stemcell().await;
    let config = std::fs::read_to_string(cloud.config()).unwrap();
    let without: String = (config.lines())
        .filter(|l| !l.starts_with("mbus:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(cloud.config(), without).unwrap();
    let err = (cloud.cpi)
        .create_vm(&create_vm_req(&stemcell, "10.0.0.6"))
        .await
        .unwrap_err();
    assert!(err.is(&ErrorKind::CloudError), "{err}");
    assert!(err.to_string().contains("no 'mbus'"), "{err}");
    assert!(cloud.inventory().vms.is_empty(), "no VM is left behind");
}

#[tokio::test]
async fn the_cloud_refuses_what_an_iaas_refuses() {
    let cloud = TestCloud::new();
    let cpi = &cloud.cpi;
    let stemcell = cloud.stemcell().await;

    let err = cpi
        .create_vm(&create_vm_req(&"sc-missing".into(), "10.0.0.9"))
        .await
        .unwrap_err();
    assert!(err.is(&ErrorKind::CloudError), "{err}");
    assert!(err.to_string().contains("Stemcell 'sc-missing' not found"));

    let a = cpi
        .create_vm(&create_vm_req(&stemcell, "10.0.0.6"))
        .await
        .unwrap()
        .cid;
    let b = cpi
        .create_vm(&create_vm_req(&stemcell, "10.0.0.7"))
        .await
        .unwrap()
        .cid;
    // The same IP twice: not retried (ok_to_retry false).
    let err = cpi
        .create_vm(&create_vm_req(&stemcell, "10.0.0.6"))
        .await
        .unwrap_err();
    assert!(
        err.is(&ErrorKind::VmCreationFailed) && !err.ok_to_retry(),
        "{err}"
    );
    assert!(
        err.to_string().contains("'10.0.0.6' is already in use"),
        "{err}"
    );

    let disk = cpi
        .create_disk(&CreateDisk {
            size_mib: 10,
            cloud_properties: Object::new(),
            vm_cid: None,
        })
        .await
        .unwrap();
    let err = cpi.attach_disk(&"vm-gone".into(), &disk).await.unwrap_err();
    assert!(err.is(&ErrorKind::VmNotFound), "{err}");
    let err = cpi.attach_disk(&a, &"disk-gone".into()).await.unwrap_err();
    assert!(err.is(&ErrorKind::DiskNotFound), "{err}");
    for bad in ["../../etc", "", ".lock"] {
        let err = cpi.has_disk(&bad.into()).await;
        assert!(!err.unwrap(), "{bad}");
        let err = cpi.delete_vm(&bad.into()).await.unwrap_err();
        assert!(err.is(&ErrorKind::VmNotFound), "{bad}: {err}");
    }
    cpi.attach_disk(&a, &disk).await.unwrap();
    let err = cpi.attach_disk(&b, &disk).await.unwrap_err();
    assert!(err.to_string().contains("already attached to VM"), "{err}");
    let err = cpi.detach_disk(&b, &disk).await.unwrap_err();
    assert!(err.is(&ErrorKind::DiskNotAttached), "{err}");

    // delete_vm with a disk attached succeeds and leaves the disk detached.
    cpi.delete_vm(&a).await.unwrap();
    let inventory = cloud.inventory();
    assert_eq!(inventory.disks[0].attached_to, None);
    cpi.attach_disk(&b, &disk).await.unwrap();
    cpi.delete_vm(&b).await.unwrap();
    cpi.delete_disk(&disk).await.unwrap();
    // An unknown snapshot; an unknown stemcell is fine to delete (already gone).
    let err = cpi.delete_snapshot(&"snap-x".into()).await.unwrap_err();
    assert!(err.is(&ErrorKind::CloudError), "{err}");
    cpi.delete_stemcell(&"sc-x".into()).await.unwrap();
    cpi.delete_stemcell(&stemcell).await.unwrap();
    assert!(cloud.inventory().is_empty(), "{:?}", cloud.inventory());
}

#[tokio::test]
async fn delete_vm_leaves_no_agent_process_behind() {
    // An agent with children, one of which ignores SIGTERM.
    let cloud = TestCloud::with_config(
        &[
            "/bin/sh",
            "-c",
            "sleep 1000 & (trap '' TERM; sleep 1000) & touch {vm_dir}/marker; wait",
        ],
        "",
    );
    let stemcell = cloud.stemcell().await;
    let vm = cloud
        .cpi
        .create_vm(&create_vm_req(&stemcell, "10.0.0.6"))
        .await
        .unwrap()
        .cid;
    let entry = cloud.inventory().vms[0].clone();
    let pgid = entry.pid.unwrap();
    wait_for("three agent processes", || group(pgid).len() >= 3);
    wait_for("the agent's marker", || entry.dir.join("marker").is_file());

    // A frozen agent is still a running agent, and still stopped by delete_vm.
    local::set_agent_frozen(&cloud.state(), &vm, true).unwrap();
    wait_for("the agent to stop", || proc_state(pgid) == Some('T'));
    assert!(cloud.inventory().vms[0].agent_alive);
    local::set_agent_frozen(&cloud.state(), &vm, false).unwrap();
    wait_for("the agent to continue", || proc_state(pgid) != Some('T'));
    local::set_agent_frozen(&cloud.state(), &vm, true).unwrap();

    let started = Instant::now();
    cloud.cpi.delete_vm(&vm).await.unwrap();
    assert!(group(pgid).is_empty(), "left behind: {:?}", group(pgid));
    // The TERM-ignoring child costs the stop timeout (5 s), not more.
    assert!(started.elapsed() < Duration::from_secs(15));
    cloud.cpi.delete_stemcell(&stemcell).await.unwrap();
    assert!(cloud.inventory().is_empty());
}

#[tokio::test]
async fn concurrent_calls_from_many_processes_lose_nothing() {
    let cloud = TestCloud::new();
    let cpi = &cloud.cpi;
    let stemcell = cloud.stemcell().await;
    const N: usize = 12;

    let vms = futures::future::join_all((0..N).map(|i| {
        let req = create_vm_req(&stemcell, &format!("10.0.1.{i}"));
        async move { cpi.create_vm(&req).await }
    }));
    let disks = futures::future::join_all((0..N).map(|i| async move {
        cpi.create_disk(&CreateDisk {
            size_mib: 100 + i as u64,
            cloud_properties: Object::new(),
            vm_cid: None,
        })
        .await
    }));
    let (vms, disks) = tokio::join!(vms, disks);
    let vms: Vec<VmCid> = vms.into_iter().map(|r| r.unwrap().cid).collect();
    let disks: Vec<DiskCid> = disks.into_iter().map(|r| r.unwrap()).collect();
    let inventory = cloud.inventory();
    assert_eq!(inventory.vms.len(), N);
    assert_eq!(inventory.disks.len(), N);
    assert!(inventory.vms.iter().all(|v| v.agent_alive));
    let mut sizes: Vec<u64> = inventory.disks.iter().map(|d| d.size_mib).collect();
    sizes.sort();
    assert_eq!(sizes, (0..N as u64).map(|i| 100 + i).collect::<Vec<_>>());

    // Racing for one IP: exactly one VM gets it.
    let racers = futures::future::join_all((0..4).map(|_| {
        let req = create_vm_req(&stemcell, "10.0.2.1");
        async move { cpi.create_vm(&req).await }
    }))
    .await;
    let winners: Vec<VmCid> = racers
        .into_iter()
        .filter_map(|r| r.ok())
        .map(|c| c.cid)
        .collect();
    assert_eq!(winners.len(), 1);

    // Racing to attach one disk to every VM: exactly one attachment.
    let attached =
        futures::future::join_all(vms.iter().map(|vm| cpi.attach_disk(vm, &disks[0]))).await;
    assert_eq!(attached.iter().filter(|r| r.is_ok()).count(), 1);
    // Metadata updates of one VM from many processes all land.
    let first = &vms[0];
    futures::future::join_all((0..N).map(|i| {
        let md = obj(json!({format!("key{i}"): i.to_string()}));
        async move { cpi.set_vm_metadata(first, &md).await }
    }))
    .await
    .into_iter()
    .for_each(|r| r.unwrap());
    assert_eq!(
        cloud
            .inventory()
            .vms
            .iter()
            .find(|v| v.cid == vms[0].0)
            .unwrap()
            .metadata
            .len(),
        N
    );

    // Tear down concurrently too.
    let deleted =
        futures::future::join_all(vms.iter().chain(&winners).map(|vm| cpi.delete_vm(vm))).await;
    assert!(deleted.iter().all(Result::is_ok));
    let deleted = futures::future::join_all(disks.iter().map(|d| cpi.delete_disk(d))).await;
    assert!(deleted.iter().all(Result::is_ok));
    cpi.delete_stemcell(&stemcell).await.unwrap();
    assert!(cloud.inventory().is_empty(), "{:?}", cloud.inventory());
    let calls = local::read_calls(&cloud.state()).unwrap();
    assert_eq!(
        calls.iter().filter(|c| c.method == "create_vm").count(),
        N + 4
    );
}

#[tokio::test]
async fn fault_switches_fail_hang_and_freeze() {
    let cloud = TestCloud::new();
    let stemcell = cloud.stemcell().await;
    let mut faults = Faults::default();
    faults.methods.insert(
        "create_vm".into(),
        Fault::fail(ErrorKind::VmCreationFailed, "no capacity", true).times(2),
    );
    faults
        .methods
        .insert("has_vm".into(), Fault::hang().times(1));
    faults.start_agents_frozen = true;
    faults.save(&cloud.state()).unwrap();

    // Retried (ok_to_retry) until the fault runs out.
    let vm = cloud
        .cpi
        .create_vm(&create_vm_req(&stemcell, "10.0.0.6"))
        .await
        .unwrap()
        .cid;
    let calls = local::read_calls(&cloud.state()).unwrap();
    let create_vm: Vec<_> = calls.iter().filter(|c| c.method == "create_vm").collect();
    assert_eq!(create_vm.len(), 3);
    assert_eq!(create_vm[0].fault.as_deref(), Some("fail"));
    assert_eq!(
        create_vm[1].error.as_ref().map(|e| e.error_type.as_str()),
        Some("Bosh::Clouds::VMCreationFailed")
    );
    assert!(create_vm[2].result.is_some());
    // The agent started frozen: the VM exists, its agent never answers.
    let pid = cloud.inventory().vms[0].pid.unwrap();
    wait_for("the frozen agent", || proc_state(pid) == Some('T'));

    // A hanging CPI: the client times out and kills it.
    let impatient = ExternalCpi::new(
        cloud.cpi.command().clone().timeout(Duration::from_secs(2)),
        "director-uuid",
    );
    let started = Instant::now();
    let err = impatient.has_vm(&vm).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("CPI 'has_vm' timed out after 2 s"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // The fault was used up; the next call answers.
    assert!(impatient.has_vm(&vm).await.unwrap());
    let calls = local::read_calls(&cloud.state()).unwrap();
    assert!(
        calls
            .iter()
            .any(|c| c.method == "has_vm" && c.fault.as_deref() == Some("hang"))
    );

    Faults::clear(&cloud.state()).unwrap();
    cloud.cpi.delete_vm(&vm).await.unwrap();
    assert!(!running(pid));
    cloud.cpi.delete_stemcell(&stemcell).await.unwrap();
    assert!(cloud.inventory().is_empty());
}

/// Runs `kubosh <args>` with `stdin` as the request: the JSON response and stderr.
pub(crate) fn run_cpi(args: &[&str], stdin: &str) -> (Value, String) {
    let mut child = Command::new(KUBOSH)
        .args(args)
        .env_remove("KUBOSH_CPI_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "a CPI always exits 0");
    let stdout = String::from_utf8(out.stdout).unwrap();
    (
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}")),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn malformed_requests_get_json_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cpi.json");
    std::fs::write(&config, r#"{"state_dir": "state"}"#).unwrap();
    let with_config = ["cpi", "--config", config.to_str().unwrap()];
    let cases: &[(&[&str], &str, &str, &str)] = &[
        (
            &with_config,
            "",
            "Bosh::Clouds::CpiError",
            "Must provide valid JSON payload",
        ),
        (
            &with_config,
            "\u{0}\u{ff}garbage",
            "Bosh::Clouds::CpiError",
            "Must provide valid JSON payload",
        ),
        (
            &with_config,
            "[1]",
            "Bosh::Clouds::CpiError",
            "Must provide valid JSON payload",
        ),
        (
            &with_config,
            "{}",
            "Bosh::Clouds::CpiError",
            "Must provide 'method' key",
        ),
        (
            &with_config,
            r#"{"method":"info"}"#,
            "Bosh::Clouds::CpiError",
            "Must provide 'arguments' key",
        ),
        (
            &with_config,
            r#"{"method":"nope","arguments":[]}"#,
            "Bosh::Clouds::NotImplemented",
            "Must call implemented method",
        ),
        (
            &with_config,
            r#"{"method":"create_vm","arguments":[1]}"#,
            "Bosh::Clouds::CpiError",
            "create_vm: argument 1 (agent_id) must be a string",
        ),
        (
            &with_config,
            r#"{"method":"create_disk","arguments":[-5,{},null]}"#,
            "Bosh::Clouds::CpiError",
            "create_disk: argument 1 (size) must be a non-negative integer",
        ),
        (
            &with_config,
            r#"{"method":"set_vm_metadata","arguments":["vm-x",[]]}"#,
            "Bosh::Clouds::CpiError",
            "argument 2 (metadata) must be an object",
        ),
        (
            &with_config,
            r#"{"method":"create_stemcell","arguments":["/nonexistent",{}]}"#,
            "Bosh::Clouds::CloudError",
            "is not a readable file",
        ),
        (
            &["cpi"],
            r#"{"method":"info","arguments":[]}"#,
            "Bosh::Clouds::CpiError",
            "state_dir is not set",
        ),
        (
            &with_config,
            r#"{"method":"info","arguments":[],"context":{"agent":{"command":"not a list"}}}"#,
            "Bosh::Clouds::CpiError",
            "invalid local CPI configuration",
        ),
    ];
    for (args, stdin, error_type, message) in cases {
        let (response, _) = run_cpi(args, stdin);
        assert_eq!(response["result"], Value::Null, "{stdin}");
        assert_eq!(
            response["error"]["type"], *error_type,
            "{stdin}: {response}"
        );
        assert!(
            response["error"]["message"]
                .as_str()
                .unwrap()
                .contains(message),
            "{stdin}: {response}"
        );
        assert_eq!(response["error"]["ok_to_retry"], false);
        assert_eq!(response["log"], "");
    }
}

#[tokio::test]
async fn context_properties_configure_the_cloud_and_stay_out_of_logs() {
    // No config file: everything comes from the CPI's properties, as a director passes them.
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let properties = obj(json!({
        "state_dir": state,
        "mbus": "nats://director:nats-password-secret@10.0.0.1:4222",
        "agent": {"command": ["/bin/sh", "-c", "exec sleep 1000"], "stop_timeout_seconds": 2},
        "api_version": 1,
    }));
    let cpi = ExternalCpi::new(
        CpiCommand::new(KUBOSH)
            .args(["cpi"])
            .properties(properties)
            .timeout(Duration::from_secs(30)),
        "director-uuid",
    )
    .with_min_api_version(1);
    assert_eq!(cpi.api_version().await.unwrap(), 1);
    let image = dir.path().join("image");
    std::fs::write(&image, "img").unwrap();
    let stemcell = cpi
        .create_stemcell(&CreateStemcell {
            image_path: image,
            cloud_properties: Object::new(),
        })
        .await
        .unwrap();
    // API v1 shapes: a bare CID, no disk hint.
    let created = cpi
        .create_vm(&create_vm_req(&stemcell, "10.0.0.6"))
        .await
        .unwrap();
    assert_eq!(created.networks, None);
    let disk = cpi
        .create_disk(&CreateDisk {
            size_mib: 1,
            cloud_properties: obj(json!({"encryption_key": "disk-encryption-secret"})),
            vm_cid: None,
        })
        .await
        .unwrap();
    assert_eq!(cpi.attach_disk(&created.cid, &disk).await.unwrap(), None);
    let inventory = local::inventory(&state).unwrap();
    let settings = read_json(&inventory.vms[0].dir.join("settings.json"));
    assert_eq!(
        settings["mbus"],
        "nats://director:nats-password-secret@10.0.0.1:4222"
    );
    assert_eq!(
        settings["env"]["bosh"]["mbus"]["cert"]["private_key"],
        "agent-private-key-secret"
    );
    let calls = std::fs::read_to_string(state.join("calls.jsonl")).unwrap();
    assert!(calls.contains(r#""method":"create_vm""#));
    for secret in [
        "nats-password-secret",
        "agent-private-key-secret",
        "disk-encryption-secret",
    ] {
        assert!(
            !calls.contains(secret),
            "{secret} in the call log:\n{calls}"
        );
    }
    cpi.delete_vm(&created.cid).await.unwrap();
    cpi.delete_disk(&disk).await.unwrap();
    cpi.delete_stemcell(&stemcell).await.unwrap();
    assert!(local::inventory(&state).unwrap().is_empty());
}

#[tokio::test]
async fn inventory_command_lists_what_the_cloud_holds() {
    let cloud = TestCloud::new();
    let stemcell = cloud.stemcell().await;
    let vm = cloud
        .cpi
        .create_vm(&create_vm_req(&stemcell, "10.0.0.6"))
        .await
        .unwrap()
        .cid;
    let out = Command::new(KUBOSH)
        .args([
            "cpi",
            "inventory",
            "--config",
            cloud.config().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Inventory = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed, cloud.inventory());
    assert_eq!(listed.vms[0].cid, vm.0);
    assert!(listed.vms[0].agent_alive);
    assert_eq!(listed.stemcells[0].cid, stemcell.0);
    // The config also comes from KUBOSH_CPI_CONFIG.
    let out = Command::new(KUBOSH)
        .args(["cpi", "inventory"])
        .env("KUBOSH_CPI_CONFIG", cloud.config())
        .output()
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Inventory>(&out.stdout).unwrap(),
        listed
    );
    cloud.cpi.delete_vm(&vm).await.unwrap();
    cloud.cpi.delete_stemcell(&stemcell).await.unwrap();
    let out = Command::new(KUBOSH)
        .args([
            "cpi",
            "inventory",
            "--config",
            cloud.config().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        serde_json::from_slice::<Inventory>(&out.stdout)
            .unwrap()
            .is_empty()
    );
}

/// kubosh's `kubosh_find_disk` extension: a disk is found by the request id of the
/// `create_disk` call that made it (what a director killed before the answer has); plain
/// `create_disk` calls get the client's own `cpi-NNNNNN` ids, which name their disk too.
#[tokio::test]
async fn a_disk_is_found_by_the_request_id_that_created_it() {
    let cloud = TestCloud::new();
    let cpi = &cloud.cpi;
    let request = CreateDisk {
        size_mib: 10,
        cloud_properties: Object::new(),
        vm_cid: None,
    };
    let disk = cpi
        .create_disk_with_request_id(&request, "intent-7f3a")
        .await
        .unwrap();
    assert_eq!(
        cpi.find_disk_by_request("intent-7f3a").await.unwrap(),
        Some(disk.clone())
    );
    assert_eq!(
        cpi.find_disk_by_request("intent-other").await.unwrap(),
        None
    );
    let calls = local::read_calls(&cloud.state()).unwrap();
    let create = calls.iter().find(|c| c.method == "create_disk").unwrap();
    assert_eq!(create.request_id, "intent-7f3a");

    let plain = cpi.create_disk(&request).await.unwrap();
    let calls = local::read_calls(&cloud.state()).unwrap();
    let id = &calls
        .iter()
        .rfind(|c| c.method == "create_disk")
        .unwrap()
        .request_id;
    assert!(id.starts_with("cpi-"), "{id}");
    assert_eq!(cpi.find_disk_by_request(id).await.unwrap(), Some(plain));

    cpi.delete_disk(&disk).await.unwrap();
    assert_eq!(cpi.find_disk_by_request("intent-7f3a").await.unwrap(), None);
}

/// kubosh's `kubosh_find_vm` extension: the VM made for an agent id, whether or not its agent
/// ever answers (what a director killed before `create_vm` answered has).
#[tokio::test]
async fn a_vm_is_found_by_the_agent_id_it_was_made_for() {
    let cloud = TestCloud::new();
    let cpi = &cloud.cpi;
    let stemcell = cloud.stemcell().await;
    let req = create_vm_req(&stemcell, "10.0.0.7");
    let created = cpi.create_vm(&req).await.unwrap();
    assert_eq!(
        cpi.find_vm_by_agent(&req.agent_id).await.unwrap(),
        Some(created.cid.clone())
    );
    assert_eq!(cpi.find_vm_by_agent("agent-unknown").await.unwrap(), None);
    cpi.delete_vm(&created.cid).await.unwrap();
    assert_eq!(cpi.find_vm_by_agent(&req.agent_id).await.unwrap(), None);
}

/// kubosh's `kubosh_find_snapshot` extension: a snapshot is found by the request id of the
/// `snapshot_disk` call that made it.
#[tokio::test]
async fn a_snapshot_is_found_by_the_request_id_that_made_it() {
    let cloud = TestCloud::new();
    let cpi = &cloud.cpi;
    let disk = cpi
        .create_disk(&CreateDisk {
            size_mib: 10,
            cloud_properties: Object::new(),
            vm_cid: None,
        })
        .await
        .unwrap();
    let snapshot = cpi
        .snapshot_disk_with_request_id(&disk, &Object::new(), "intent-snap")
        .await
        .unwrap();
    assert_eq!(
        cpi.find_snapshot_by_request("intent-snap").await.unwrap(),
        Some(snapshot.clone())
    );
    assert_eq!(cpi.find_snapshot_by_request("other").await.unwrap(), None);
    cpi.delete_snapshot(&snapshot).await.unwrap();
    assert_eq!(
        cpi.find_snapshot_by_request("intent-snap").await.unwrap(),
        None
    );
}

/// The local cloud served over HTTP (`kubosh cpi serve`), as the chart runs it in a Pod of
/// its own: a caller whose ServiceAccount token kube-apiserver accepts for the server's
/// audience makes a stemcell and a VM through `kubosh cpi --remote`, like any CPI
/// executable; the VM is the server's (in its state directory, its agent running). A token
/// for another audience, another account's token and no token are refused with the CPI
/// error a director reports.
#[tokio::test(flavor = "multi_thread")]
async fn the_local_cloud_served_over_http_answers_only_callers_kube_apiserver_vouches_for() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Api, PostParams};

    let cp = crate::controller::control_plane().await;
    let ns = "cpi-remote";
    cp.create_namespace(ns).await.unwrap();
    let accounts = Api::<ServiceAccount>::namespaced(cp.client().await.unwrap(), ns);
    for name in ["controller", "other"] {
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        accounts
            .create(&PostParams::default(), &account)
            .await
            .unwrap();
    }
    let cloud = TestCloud::new();
    let token_file = |name: &str, token: String| {
        let path = cloud.dir.path().join(name);
        std::fs::write(&path, token).unwrap();
        path
    };
    let token = |account: &'static str, audiences: &'static [&'static str]| async move {
        cp.service_account_token_for(ns, account, audiences)
            .await
            .unwrap()
    };
    let good = token_file("good", token("controller", &["kubosh-cloud"]).await);
    let other_audience = token_file("default-audience", token("controller", &[]).await);
    let other_user = token_file("other", token("other", &["kubosh-cloud"]).await);
    let empty = token_file("empty", String::new());

    let port = crate::director_world::free_port();
    let server_tmp = tempfile::tempdir().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let serve = || async {
        let server = Command::new(KUBOSH)
            .args(["cpi", "--config"])
            .arg(cloud.config())
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--audience", "kubosh-cloud"])
            .args(["--allow", &format!("system:serviceaccount:{ns}:controller")])
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("TMPDIR", server_tmp.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let server = KillOnDrop(server);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !reqwest::get(format!("{base}/healthz"))
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            assert!(
                Instant::now() < deadline,
                "kubosh cpi serve never answered /healthz"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        server
    };
    let server = serve().await;
    let remote = |token: &Path| {
        let command = CpiCommand::new(KUBOSH)
            .args([
                "cpi",
                "--remote",
                &base,
                "--token-file",
                token.to_str().unwrap(),
            ])
            .timeout(Duration::from_secs(30));
        ExternalCpi::new(command, "director-uuid")
    };

    let cpi = remote(&good);
    let image = cloud.dir.path().join("image");
    std::fs::write(&image, b"stemcell image").unwrap();
    let stemcell = cpi
        .create_stemcell(&CreateStemcell {
            image_path: image,
            cloud_properties: obj(
                json!({"name": "bosh-warden-boshlite-ubuntu-noble", "version": "1.0"}),
            ),
        })
        .await
        .unwrap();
    let vm = cpi
        .create_vm(&create_vm_req(&stemcell, "10.0.0.9"))
        .await
        .unwrap()
        .cid;
    assert!(cpi.has_vm(&vm).await.unwrap());
    let inventory = cloud.inventory();
    // The image was sent to the server, which made the stemcell from its copy and then
    // removed that.
    let uploads = server_tmp.path().join("kubosh-cpi-images");
    assert_eq!(inventory.stemcells.len(), 1);
    assert!(
        Path::new(&inventory.stemcells[0].source).starts_with(&uploads),
        "{}",
        inventory.stemcells[0].source
    );
    assert_eq!(std::fs::read_dir(&uploads).unwrap().count(), 0);
    assert_eq!(inventory.vms.len(), 1);
    assert_eq!(inventory.vms[0].cid, vm.as_str());
    assert!(inventory.vms[0].agent_alive);

    for (token, answer) in [
        (&other_audience, "403 Forbidden"),
        (&other_user, "403 Forbidden"),
        (&empty, "401 Unauthorized"),
    ] {
        let refused = remote(token).has_vm(&vm).await.unwrap_err().to_string();
        assert!(refused.contains(answer), "{}: {refused}", token.display());
        assert!(refused.contains("Bosh::Clouds::CpiError"), "{refused}");
    }
    // The refused calls never reached the cloud.
    assert_eq!(
        cloud.methods_called(),
        ["info", "create_stemcell", "create_vm", "has_vm"]
    );

    // The server stopped and its VM's agent with it, as when its Pod goes: a new server on
    // the same state boots the VM before it serves. A call made meanwhile waits for it
    // (connections refused are tried again: nothing was sent) and is answered.
    drop(server);
    local::stop_all_agents(&cloud.state(), Duration::from_secs(5)).unwrap();
    assert!(!cloud.inventory().vms[0].agent_alive);
    let (answer, _server) = tokio::join!(cpi.has_vm(&vm), async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        serve().await
    });
    assert!(answer.unwrap(), "the call made while no server listened");
    let inventory = cloud.inventory();
    assert_eq!(inventory.vms.len(), 1);
    assert_eq!(inventory.vms[0].cid, vm.as_str());
    assert!(inventory.vms[0].agent_alive);
    let called = cloud.methods_called();
    assert_eq!(called[called.len() - 2..], ["reboot_vm", "has_vm"]);

    cpi.delete_vm(&vm).await.unwrap();
    assert!(!cpi.has_vm(&vm).await.unwrap());
    assert!(cloud.inventory().vms.is_empty());
}

/// Kills (and reaps) a child process when dropped, so a failing test leaves no server.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
