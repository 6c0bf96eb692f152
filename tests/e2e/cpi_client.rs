//! Contract tests of the CPI client against a real CPI executable: a small shell script that
//! saves every request it reads on stdin and answers with canned responses.
//!
//! The requests are compared byte for byte with what the director writes
//! (`bosh-protocols.md` §1.2, §1.6, §1.7), with only the random request ID masked.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kubosh_cloud::*;
use serde_json::{Value, json};

/// The fake CPI: `requests/<seq>-<method>.json` gets each request;
/// `responses/<method>.<k>.json` (the k-th call of that method, from 0) or
/// `responses/<method>.json` is the answer; the default answer is a null result. Stderr gets
/// the whole request, secrets and all, so tests can check that logs are scrubbed.
const SCRIPT: &str = r#"d="$(dirname "$0")"
req="$(cat)"
m=$(printf '%s' "$req" | sed -n 's/^{"method":"\([a-z_]*\)".*/\1/p')
mkdir -p "$d/requests"
k=$(ls "$d/requests" | grep -c -- "-$m\.json$")
n=$(ls "$d/requests" | wc -l)
printf '%s' "$req" > "$d/requests/$(printf %03d "$n")-$m.json"
echo "fake cpi: call $k of $m: $req" >&2
if [ -f "$d/responses/$m.$k.sh" ]; then . "$d/responses/$m.$k.sh"; fi
if [ -f "$d/responses/$m.$k.json" ]; then cat "$d/responses/$m.$k.json"
elif [ -f "$d/responses/$m.json" ]; then cat "$d/responses/$m.json"
else echo '{"result":null,"error":null,"log":""}'; fi
"#;

struct FakeCpi {
    dir: tempfile::TempDir,
}

impl FakeCpi {
    fn new() -> Self {
        kubosh_devenv::captured_logs();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cpi.sh"), SCRIPT).unwrap();
        std::fs::create_dir(dir.path().join("responses")).unwrap();
        let fake = FakeCpi { dir };
        fake.respond(
            "info",
            None,
            r#"{"result":{"api_version":2,"stemcell_formats":["warden-tar"]},"error":null,"log":""}"#,
        );
        fake
    }

    fn respond(&self, method: &str, nth: Option<usize>, body: &str) {
        let name = match nth {
            Some(k) => format!("{method}.{k}.json"),
            None => format!("{method}.json"),
        };
        std::fs::write(self.dir.path().join("responses").join(name), body).unwrap();
    }

    fn result(&self, method: &str, result: Value) {
        self.respond(
            method,
            None,
            &json!({"result": result, "error": null, "log": ""}).to_string(),
        );
    }

    /// Shell code run before answering the k-th call of `method`.
    fn before(&self, method: &str, k: usize, code: &str) {
        std::fs::write(
            self.dir
                .path()
                .join("responses")
                .join(format!("{method}.{k}.sh")),
            code,
        )
        .unwrap();
    }

    fn command(&self) -> CpiCommand {
        // Run through /bin/sh rather than exec'ing the script: a freshly written executable
        // can fail with ETXTBSY while other test threads fork.
        CpiCommand::new("/bin/sh")
            .args([self.dir.path().join("cpi.sh").display().to_string()])
            .timeout(Duration::from_secs(20))
    }

    fn cpi(&self) -> ExternalCpi {
        ExternalCpi::new(self.command(), "dir-uuid").with_retry(fast_retry())
    }

    /// `(method, request with the request ID masked)` in call order; checks each request ID.
    fn requests(&self) -> Vec<(String, String)> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.path().join("requests"))
            .map(|rd| rd.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        files.sort();
        files
            .iter()
            .map(|f| {
                let raw = std::fs::read_to_string(f).unwrap();
                let v: Value = serde_json::from_str(&raw).unwrap();
                let rid = v["context"]["request_id"].as_str().unwrap().to_string();
                let digits = rid.strip_prefix("cpi-").unwrap();
                assert!(
                    digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit()),
                    "{rid}"
                );
                let method = v["method"].as_str().unwrap().to_string();
                (method, raw.replacen(&rid, "<RID>", 1))
            })
            .collect()
    }

    fn requests_of(&self, method: &str) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|(m, _)| m == method)
            .map(|(_, r)| r)
            .collect()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 5,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
    }
}

fn obj(v: Value) -> Object {
    v.as_object().unwrap().clone()
}

fn error_response(error_type: &str, message: &str, ok_to_retry: bool) -> String {
    json!({"result": null, "error": {"type": error_type, "message": message, "ok_to_retry": ok_to_retry}, "log": ""})
        .to_string()
}

const CTX: &str = r#""context":{"director_uuid":"dir-uuid","request_id":"<RID>","vm":{"stemcell":{"api_version":3}},"region":"r1"}"#;

fn expected(method: &str, arguments: &str) -> String {
    format!(r#"{{"method":"{method}","arguments":{arguments},{CTX},"api_version":2}}"#)
}

#[tokio::test]
async fn every_method_writes_the_exact_request_and_reads_its_result() {
    let fake = FakeCpi::new();
    let cpi = ExternalCpi::new(
        fake.command().properties(obj(json!({"region": "r1"}))),
        "dir-uuid",
    )
    .with_retry(fast_retry())
    .with_stemcell_api_version(Some(3));

    fake.result("create_stemcell", json!("sc-1"));
    fake.result("create_vm", json!(["vm-1", {"net": {"ip": "10.0.0.6"}}]));
    fake.result("has_vm", json!(true));
    fake.result(
        "calculate_vm_cloud_properties",
        json!({"instance_type": "m5.large"}),
    );
    fake.result("create_disk", json!("disk-1"));
    fake.result("has_disk", json!(false));
    fake.result("attach_disk", json!({"path": "/dev/sdf"}));
    fake.result("detach_disk", json!(true));
    fake.result("get_disks", json!(["disk-1", "disk-2"]));
    fake.result("update_disk", json!("disk-2"));
    fake.result("snapshot_disk", json!("snap-1"));
    fake.result(
        "create_network",
        json!(["net-1", {"range": "10.0.0.0/24"}, {}]),
    );

    let vm = VmCid::from("vm-1");
    let disk = DiskCid::from("disk-1");
    let info = cpi.info().await.unwrap();
    assert_eq!(info.api_version, 2);
    assert_eq!(info.stemcell_formats, ["warden-tar"]);
    assert_eq!(
        cpi.create_stemcell(&CreateStemcell {
            image_path: "/tmp/image".into(),
            cloud_properties: obj(json!({"name": "bosh-warden", "version": "1.1"})),
        })
        .await
        .unwrap(),
        StemcellCid::from("sc-1")
    );
    cpi.delete_stemcell(&"sc-1".into()).await.unwrap();
    let mut networks = Networks::new();
    networks.insert(
        "private".into(),
        serde_json::from_value(
            json!({"type": "manual", "ip": "10.0.0.6", "netmask": "255.255.255.0",
            "gateway": "10.0.0.1", "dns": ["10.0.0.2"], "default": ["dns", "gateway"],
            "cloud_properties": {"subnet": "subnet-1"}}),
        )
        .unwrap(),
    );
    let created = cpi
        .create_vm(&CreateVm {
            agent_id: "agent-1".into(),
            stemcell_cid: "sc-1".into(),
            cloud_properties: obj(json!({"instance_type": "m5.large"})),
            networks,
            disk_cids: vec!["disk-1".into()],
            env: obj(json!({"bosh": {"group": "g"}})),
        })
        .await
        .unwrap();
    assert_eq!(created.cid, vm);
    assert_eq!(
        created.networks,
        Some(obj(json!({"net": {"ip": "10.0.0.6"}})))
    );
    cpi.delete_vm(&vm).await.unwrap();
    assert!(cpi.has_vm(&vm).await.unwrap());
    cpi.reboot_vm(&vm).await.unwrap();
    cpi.set_vm_metadata(&vm, &obj(json!({"director": "d", "index": "0"})))
        .await
        .unwrap();
    assert_eq!(
        cpi.calculate_vm_cloud_properties(&VmResources {
            cpu: 2,
            ram: 4096,
            ephemeral_disk_size: 10240
        })
        .await
        .unwrap(),
        obj(json!({"instance_type": "m5.large"}))
    );
    assert_eq!(
        cpi.create_disk(&CreateDisk {
            size_mib: 10240,
            cloud_properties: obj(json!({"type": "gp3"})),
            vm_cid: Some(vm.clone()),
        })
        .await
        .unwrap(),
        disk
    );
    cpi.create_disk(&CreateDisk {
        size_mib: 1,
        cloud_properties: Object::new(),
        vm_cid: None,
    })
    .await
    .unwrap();
    cpi.delete_disk(&disk).await.unwrap();
    assert!(!cpi.has_disk(&disk).await.unwrap());
    assert_eq!(
        cpi.attach_disk(&vm, &disk).await.unwrap(),
        Some(DiskHint(json!({"path": "/dev/sdf"})))
    );
    cpi.detach_disk(&vm, &disk).await.unwrap();
    assert_eq!(
        cpi.get_disks(&vm).await.unwrap(),
        vec![DiskCid::from("disk-1"), DiskCid::from("disk-2")]
    );
    cpi.resize_disk(&disk, 20480).await.unwrap();
    assert_eq!(
        cpi.update_disk(&UpdateDisk {
            disk_cid: disk.clone(),
            new_size_mib: 20480,
            cloud_properties: obj(json!({"type": "io2"})),
        })
        .await
        .unwrap(),
        Some(DiskCid::from("disk-2"))
    );
    cpi.set_disk_metadata(&disk, &obj(json!({"attached_at": "now"})))
        .await
        .unwrap();
    assert_eq!(
        cpi.snapshot_disk(&disk, &obj(json!({"deployment": "d"})))
            .await
            .unwrap(),
        SnapshotCid::from("snap-1")
    );
    cpi.delete_snapshot(&"snap-1".into()).await.unwrap();
    assert_eq!(
        cpi.create_network(&CreateNetwork(obj(json!({"type": "manual"}))))
            .await
            .unwrap(),
        json!(["net-1", {"range": "10.0.0.0/24"}, {}])
    );
    cpi.delete_network("net-1").await.unwrap();

    let requests = fake.requests();
    let methods: Vec<&str> = requests.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        [
            "info", // the explicit info() call
            "info", // negotiation
            "create_stemcell",
            "delete_stemcell",
            "create_vm",
            "delete_vm",
            "has_vm",
            "reboot_vm",
            "set_vm_metadata",
            "calculate_vm_cloud_properties",
            "create_disk",
            "create_disk",
            "delete_disk",
            "has_disk",
            "attach_disk",
            "detach_disk",
            "get_disks",
            "resize_disk",
            "update_disk",
            "set_disk_metadata",
            "snapshot_disk",
            "delete_snapshot",
            "create_network",
            "delete_network",
        ]
    );
    let want = [
        // Before negotiation the director sends no api_version.
        format!(r#"{{"method":"info","arguments":[],{CTX}}}"#),
        format!(r#"{{"method":"info","arguments":[],{CTX}}}"#),
        expected(
            "create_stemcell",
            r#"["/tmp/image",{"name":"bosh-warden","version":"1.1"}]"#,
        ),
        expected("delete_stemcell", r#"["sc-1"]"#),
        expected(
            "create_vm",
            r#"["agent-1","sc-1",{"instance_type":"m5.large"},{"private":{"type":"manual","ip":"10.0.0.6","netmask":"255.255.255.0","gateway":"10.0.0.1","dns":["10.0.0.2"],"default":["dns","gateway"],"cloud_properties":{"subnet":"subnet-1"}}},["disk-1"],{"bosh":{"group":"g"}}]"#,
        ),
        expected("delete_vm", r#"["vm-1"]"#),
        expected("has_vm", r#"["vm-1"]"#),
        expected("reboot_vm", r#"["vm-1"]"#),
        expected(
            "set_vm_metadata",
            r#"["vm-1",{"director":"d","index":"0"}]"#,
        ),
        expected(
            "calculate_vm_cloud_properties",
            r#"[{"cpu":2,"ram":4096,"ephemeral_disk_size":10240}]"#,
        ),
        expected("create_disk", r#"[10240,{"type":"gp3"},"vm-1"]"#),
        expected("create_disk", r#"[1,{},null]"#),
        expected("delete_disk", r#"["disk-1"]"#),
        expected("has_disk", r#"["disk-1"]"#),
        expected("attach_disk", r#"["vm-1","disk-1"]"#),
        expected("detach_disk", r#"["vm-1","disk-1"]"#),
        expected("get_disks", r#"["vm-1"]"#),
        expected("resize_disk", r#"["disk-1",20480]"#),
        expected("update_disk", r#"["disk-1",20480,{"type":"io2"}]"#),
        expected("set_disk_metadata", r#"["disk-1",{"attached_at":"now"}]"#),
        expected("snapshot_disk", r#"["disk-1",{"deployment":"d"}]"#),
        expected("delete_snapshot", r#"["snap-1"]"#),
        expected("create_network", r#"[{"type":"manual"}]"#),
        expected("delete_network", r#"["net-1"]"#),
    ];
    for ((method, got), want) in requests.iter().zip(want.iter()) {
        assert_eq!(got, want, "request of {method}");
    }
    assert_eq!(requests.len(), want.len());
}

#[tokio::test]
async fn create_vm_request_is_the_reference_example_byte_for_byte() {
    let fake = FakeCpi::new();
    fake.result("create_vm", json!(["i-0abc", {}]));
    let cpi = ExternalCpi::new(fake.command(), "d6b4...").with_stemcell_api_version(Some(3));
    let mut networks = Networks::new();
    networks.insert(
        "private".into(),
        serde_json::from_value(
            json!({"type":"manual","ip":"10.0.0.6","netmask":"255.255.255.0","prefix":"32",
            "gateway":"10.0.0.1","dns":["10.0.0.2"],"default":["dns","gateway"],
            "cloud_properties":{"subnet":"subnet-1"}}),
        )
        .unwrap(),
    );
    let created = cpi
        .create_vm(&CreateVm {
            agent_id: "4149ba0f-38d9-4485-476f-1581be36f290".into(),
            stemcell_cid: "ami-478585".into(),
            cloud_properties: obj(json!({"instance_type": "m5.large"})),
            networks,
            disk_cids: vec!["vol-3475945".into()],
            env: obj(json!({"bosh":{"group":"dir-dep-web","groups":["dir","dep","web","dir-dep","dep-web","dir-dep-web"],"tags":{"team":"x"}}})),
        })
        .await
        .unwrap();
    assert_eq!(created.cid.as_str(), "i-0abc");
    assert_eq!(created.networks, Some(Object::new()));
    // §1.7 with the whitespace removed.
    let reference = r#"{"method":"create_vm","arguments":["4149ba0f-38d9-4485-476f-1581be36f290","ami-478585",{"instance_type":"m5.large"},{"private":{"type":"manual","ip":"10.0.0.6","netmask":"255.255.255.0","prefix":"32","gateway":"10.0.0.1","dns":["10.0.0.2"],"default":["dns","gateway"],"cloud_properties":{"subnet":"subnet-1"}}},["vol-3475945"],{"bosh":{"group":"dir-dep-web","groups":["dir","dep","web","dir-dep","dep-web","dir-dep-web"],"tags":{"team":"x"}}}],"context":{"director_uuid":"d6b4...","request_id":"<RID>","vm":{"stemcell":{"api_version":3}}},"api_version":2}"#;
    assert_eq!(fake.requests_of("create_vm"), [reference]);
}

#[tokio::test]
async fn a_v1_cpi_gets_api_version_1_and_v1_result_shapes() {
    let fake = FakeCpi::new();
    fake.result("info", json!({"api_version": 1}));
    fake.result("create_vm", json!("vm-1"));
    fake.result("attach_disk", Value::Null);
    // The director's minimum is 2.
    let strict = fake.cpi();
    let err = strict.has_vm(&"vm-1".into()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "CPI API version 1 is not supported. Minimum required version is 2."
    );

    let cpi = fake.cpi().with_min_api_version(1);
    let created = cpi
        .create_vm(&CreateVm {
            agent_id: "a".into(),
            stemcell_cid: "s".into(),
            cloud_properties: Object::new(),
            networks: Networks::new(),
            disk_cids: vec![],
            env: Object::new(),
        })
        .await
        .unwrap();
    assert_eq!(created.cid.as_str(), "vm-1");
    assert_eq!(created.networks, None);
    assert_eq!(
        cpi.attach_disk(&"vm-1".into(), &"d".into()).await.unwrap(),
        None
    );
    let create_vm = &fake.requests_of("create_vm")[0];
    assert!(create_vm.ends_with(r#","api_version":1}"#), "{create_vm}");
    assert!(create_vm.contains(r#""context":{"director_uuid":"dir-uuid","request_id":"<RID>"}"#));

    // A v2 CPI that answers create_vm with a bare string breaks the v2 contract.
    let fake = FakeCpi::new();
    fake.result("create_vm", json!("vm-1"));
    let err = fake
        .cpi()
        .create_vm(&CreateVm {
            agent_id: "a".into(),
            stemcell_cid: "s".into(),
            cloud_properties: Object::new(),
            networks: Networks::new(),
            disk_cids: vec![],
            env: Object::new(),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, CpiError::UnexpectedResult { .. }), "{err}");
}

#[tokio::test]
async fn api_version_is_capped_at_2_and_negotiated_once() {
    let fake = FakeCpi::new();
    fake.result("info", json!({"api_version": 3, "stemcell_formats": []}));
    fake.result("has_vm", json!(false));
    let cpi = fake.cpi();
    let other = cpi.with_stemcell_api_version(Some(2));
    assert_eq!(cpi.api_version().await.unwrap(), 2);
    assert!(!cpi.has_vm(&"x".into()).await.unwrap());
    assert!(!other.has_vm(&"x".into()).await.unwrap());
    assert_eq!(fake.requests_of("info").len(), 1);
    let has_vm = fake.requests_of("has_vm");
    assert!(has_vm[0].ends_with(r#""api_version":2}"#));
    assert!(!has_vm[0].contains(r#""vm":"#));
    assert!(has_vm[1].contains(r#""vm":{"stemcell":{"api_version":2}}"#));
}

#[tokio::test]
async fn a_cpi_without_info_or_api_version_is_not_supported() {
    for info in [
        error_response("Bosh::Clouds::NotImplemented", "no info", false),
        error_response("InvalidCall", "Method is not known, got 'info'", false),
        r#"{"result":{"stemcell_formats":[]},"error":null,"log":""}"#.to_string(),
        r#"{"result":null,"error":null,"log":""}"#.to_string(),
    ] {
        let fake = FakeCpi::new();
        fake.respond("info", None, &info);
        let err = fake.cpi().has_vm(&"vm".into()).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "CPI must report api_version via info",
            "{info}"
        );
        assert!(fake.requests_of("has_vm").is_empty());
    }
}

#[tokio::test]
async fn error_types_are_classified_like_the_director_does() {
    let fake = FakeCpi::new();
    let cpi = fake.cpi().with_retry(RetryPolicy::never());
    let cases = [
        ("Bosh::Clouds::CpiError", "m", ErrorKind::CpiError),
        ("Bosh::Clouds::NotSupported", "m", ErrorKind::NotSupported),
        (
            "Bosh::Clouds::NotImplemented",
            "m",
            ErrorKind::NotImplemented,
        ),
        ("Bosh::Clouds::CloudError", "m", ErrorKind::CloudError),
        ("Bosh::Clouds::VMNotFound", "m", ErrorKind::VmNotFound),
        (
            "Bosh::Clouds::NetworkNotFound",
            "m",
            ErrorKind::NetworkNotFound,
        ),
        ("Bosh::Clouds::NoDiskSpace", "m", ErrorKind::NoDiskSpace),
        (
            "Bosh::Clouds::DiskNotAttached",
            "m",
            ErrorKind::DiskNotAttached,
        ),
        ("Bosh::Clouds::DiskNotFound", "m", ErrorKind::DiskNotFound),
        (
            "Bosh::Clouds::VMCreationFailed",
            "m",
            ErrorKind::VmCreationFailed,
        ),
        (
            "InvalidCall",
            "Method is not known, got 'x'",
            ErrorKind::NotImplemented,
        ),
        (
            "Bosh::Clouds::CloudError",
            "Invalid Method: x",
            ErrorKind::NotImplemented,
        ),
        (
            "Acme::QuotaExceeded",
            "m",
            ErrorKind::Unknown("Acme::QuotaExceeded".into()),
        ),
    ];
    for (error_type, message, kind) in cases {
        fake.respond(
            "delete_vm",
            None,
            &error_response(error_type, message, false),
        );
        let err = cpi.delete_vm(&"vm-1".into()).await.unwrap_err();
        assert_eq!(err.kind(), Some(&kind), "{error_type}");
        assert!(!err.ok_to_retry());
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "CPI error '{error_type}' with message '{message}' in 'delete_vm' CPI method (CPI request ID: 'cpi-"
            )),
            "{text}"
        );
    }
    fake.respond(
        "resize_disk",
        None,
        &error_response("Bosh::Clouds::NotSupported", "no", false),
    );
    assert!(
        cpi.resize_disk(&"d".into(), 1)
            .await
            .unwrap_err()
            .is_not_implemented()
    );
}

#[tokio::test]
async fn ok_to_retry_errors_are_retried_then_succeed() {
    let fake = FakeCpi::new();
    fake.respond(
        "create_vm",
        Some(0),
        &error_response("Bosh::Clouds::VMCreationFailed", "capacity", true),
    );
    fake.respond(
        "create_vm",
        Some(1),
        &error_response("Bosh::Clouds::VMCreationFailed", "capacity", true),
    );
    fake.result("create_vm", json!(["vm-9", {}]));
    let created = fake
        .cpi()
        .create_vm(&CreateVm {
            agent_id: "a".into(),
            stemcell_cid: "s".into(),
            cloud_properties: Object::new(),
            networks: Networks::new(),
            disk_cids: vec![],
            env: Object::new(),
        })
        .await
        .unwrap();
    assert_eq!(created.cid.as_str(), "vm-9");
    let raw: Vec<String> = std::fs::read_dir(fake.path("requests"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .filter(|r| r.starts_with(r#"{"method":"create_vm""#))
        .collect();
    assert_eq!(raw.len(), 3);
    let ids: std::collections::HashSet<String> = raw
        .iter()
        .map(|r| serde_json::from_str::<Value>(r).unwrap()["context"]["request_id"].to_string())
        .collect();
    assert_eq!(ids.len(), 3, "every call has its own request_id");

    // Bounded: a CPI that always says ok_to_retry is given up on after max_attempts.
    fake.respond(
        "create_disk",
        None,
        &error_response("Bosh::Clouds::NoDiskSpace", "full", true),
    );
    let err = fake
        .cpi()
        .create_disk(&CreateDisk {
            size_mib: 1,
            cloud_properties: Object::new(),
            vm_cid: None,
        })
        .await
        .unwrap_err();
    assert!(err.is(&ErrorKind::NoDiskSpace) && err.ok_to_retry());
    assert_eq!(fake.requests_of("create_disk").len(), 5);
}

#[tokio::test]
async fn creates_are_not_repeated_unless_the_cpi_says_so() {
    let fake = FakeCpi::new();
    fake.respond(
        "create_vm",
        None,
        &error_response("Bosh::Clouds::VMCreationFailed", "quota", false),
    );
    fake.respond("create_disk", None, "not json at all");
    let cpi = fake.cpi();
    let err = cpi
        .create_vm(&CreateVm {
            agent_id: "a".into(),
            stemcell_cid: "s".into(),
            cloud_properties: Object::new(),
            networks: Networks::new(),
            disk_cids: vec![],
            env: Object::new(),
        })
        .await
        .unwrap_err();
    assert!(err.is(&ErrorKind::VmCreationFailed));
    assert_eq!(fake.requests_of("create_vm").len(), 1);
    let err = cpi
        .create_disk(&CreateDisk {
            size_mib: 1,
            cloud_properties: Object::new(),
            vm_cid: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, CpiError::InvalidResponse { .. }), "{err}");
    assert_eq!(fake.requests_of("create_disk").len(), 1);

    // A read is repeated after garbage.
    fake.respond("has_vm", Some(0), "garbage");
    fake.result("has_vm", json!(true));
    assert!(cpi.has_vm(&"vm".into()).await.unwrap());
    assert_eq!(fake.requests_of("has_vm").len(), 2);
}

#[tokio::test]
async fn a_hanging_cpi_is_killed_with_its_children_and_a_clear_error() {
    let fake = FakeCpi::new();
    fake.before(
        "has_vm",
        0,
        r#"sleep 300 & echo $! > "$d/child.pid"; sleep 300"#,
    );
    let cpi = ExternalCpi::new(fake.command().timeout(Duration::from_secs(1)), "dir-uuid");
    let started = Instant::now();
    let err = cpi.has_vm(&"vm-1".into()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(matches!(err, CpiError::Timeout { .. }));
    assert!(
        err.to_string()
            .starts_with("CPI 'has_vm' timed out after 1 s"),
        "{err}"
    );
    assert_eq!(
        fake.requests_of("has_vm").len(),
        1,
        "timeouts are not retried"
    );
    let child: i32 = std::fs::read_to_string(fake.path("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while running(child) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !running(child),
        "the CPI's child {child} survived the timeout"
    );

    // Per-method limits.
    let cpi = ExternalCpi::new(
        fake.command()
            .timeout(Duration::from_secs(60))
            .method_timeout("has_vm", Duration::from_secs(1)),
        "dir-uuid",
    );
    fake.before("has_vm", 1, "sleep 300");
    let err = cpi.has_vm(&"vm-1".into()).await.unwrap_err();
    assert!(matches!(err, CpiError::Timeout { .. }), "{err}");
}

/// True if the process exists and is not a zombie.
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn garbage_on_stdout_is_an_invalid_response_quoting_it() {
    let fake = FakeCpi::new();
    let cpi = fake.cpi().with_retry(RetryPolicy::never());
    let cases = [
        ("Segmentation fault: core dumped", "not JSON"),
        ("", "empty stdout"),
        ("[1,2]", "not a JSON object"),
        (
            r#"{"result":null,"error":"boom","log":""}"#,
            "'error' is neither null nor an object",
        ),
        (
            r#"{"result":null,"error":{"type":1,"message":"m"},"log":""}"#,
            "needs string 'type' and 'message'",
        ),
        (
            r#"{"result":null,"error":null,"log":5}"#,
            "'log' is not a string",
        ),
    ];
    for (stdout, reason) in cases {
        fake.respond("delete_vm", None, stdout);
        let err = cpi.delete_vm(&"vm-1".into()).await.unwrap_err();
        let CpiError::InvalidResponse {
            reason: got,
            excerpt,
            ..
        } = &err
        else {
            panic!("{stdout:?}: {err}");
        };
        assert!(got.contains(reason), "{stdout:?}: {got}");
        assert_eq!(excerpt.trim(), stdout, "{err}");
    }
    let long = "x".repeat(5000);
    fake.respond("delete_vm", None, &long);
    let err = cpi.delete_vm(&"vm-1".into()).await.unwrap_err().to_string();
    assert!(err.len() < 600, "{err}");
    assert!(err.contains("xxxx... (5000 bytes in all)"), "{err}");
}

#[tokio::test]
async fn an_endless_stdout_is_cut_off_not_waited_for() {
    let fake = FakeCpi::new();
    fake.before("has_vm", 0, "head -c 70000000 /dev/zero; sleep 300");
    let started = Instant::now();
    let cpi = fake.cpi().with_retry(RetryPolicy::never());
    let err = cpi.has_vm(&"vm".into()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(15));
    let CpiError::InvalidResponse { reason, .. } = &err else {
        panic!("{err}");
    };
    assert!(reason.contains("stdout exceeds"), "{reason}");
}

#[tokio::test]
async fn attach_disk_without_a_hint_is_an_error() {
    for hint in [json!(null), json!(""), json!({})] {
        let fake = FakeCpi::new();
        fake.result("attach_disk", hint.clone());
        let err = fake
            .cpi()
            .attach_disk(&"vm-1".into(), &"disk-1".into())
            .await
            .unwrap_err();
        assert!(matches!(err, CpiError::NoDiskHint { .. }), "{hint}: {err}");
        assert!(err.to_string().starts_with("No disk_hint"), "{err}");
    }
    let fake = FakeCpi::new();
    fake.result("attach_disk", json!("/dev/sdf"));
    assert_eq!(
        fake.cpi()
            .attach_disk(&"vm-1".into(), &"disk-1".into())
            .await
            .unwrap(),
        Some(DiskHint(json!("/dev/sdf")))
    );
}

#[tokio::test]
async fn unexpected_result_shapes_are_errors() {
    let fake = FakeCpi::new();
    fake.result("has_vm", json!("yes"));
    fake.result("create_disk", json!(7));
    fake.result("get_disks", json!([1]));
    let cpi = fake.cpi();
    for err in [
        cpi.has_vm(&"v".into()).await.unwrap_err(),
        cpi.create_disk(&CreateDisk {
            size_mib: 1,
            cloud_properties: Object::new(),
            vm_cid: None,
        })
        .await
        .unwrap_err(),
        cpi.get_disks(&"v".into()).await.unwrap_err(),
    ] {
        assert!(matches!(err, CpiError::UnexpectedResult { .. }), "{err}");
    }
}

#[tokio::test]
async fn a_missing_executable_is_a_spawn_error() {
    let cpi = ExternalCpi::new(CpiCommand::new("/nonexistent/bin/cpi"), "d");
    let err = cpi.info().await.unwrap_err();
    assert!(matches!(err, CpiError::Spawn { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("Failed to run cpi: '/nonexistent/bin/cpi'")
    );
}

#[tokio::test]
async fn the_environment_is_the_directors_or_the_clis() {
    let fake = FakeCpi::new();
    fake.before("has_vm", 0, r#"env > "$d/env.0""#);
    fake.before("has_vm", 1, r#"env > "$d/env.1""#);
    fake.result("has_vm", json!(true));
    let director = ExternalCpi::new(fake.command().env("EXTRA", "1"), "d");
    director.has_vm(&"v".into()).await.unwrap();
    let env = std::fs::read_to_string(fake.path("env.0")).unwrap();
    assert!(
        env.lines()
            .any(|l| l == "PATH=/usr/sbin:/usr/bin:/sbin:/bin"),
        "{env}"
    );
    assert!(env.lines().any(|l| l == "EXTRA=1"), "{env}");
    if std::env::var_os("CARGO_MANIFEST_DIR").is_some() {
        assert!(!env.contains("CARGO_MANIFEST_DIR="), "{env}");
    }
    let cli = ExternalCpi::new(
        fake.command().env_mode(EnvMode::Cli {
            packages_dir: Some("/inst/packages".into()),
            jobs_dir: Some("/inst/jobs".into()),
        }),
        "d",
    );
    cli.has_vm(&"v".into()).await.unwrap();
    let env = std::fs::read_to_string(fake.path("env.1")).unwrap();
    assert!(
        env.lines().any(|l| l == "BOSH_PACKAGES_DIR=/inst/packages"),
        "{env}"
    );
    assert!(
        env.lines().any(|l| l == "BOSH_JOBS_DIR=/inst/jobs"),
        "{env}"
    );
    let path = std::env::var("PATH").unwrap_or_default();
    assert!(env.lines().any(|l| l == format!("PATH={path}")), "{env}");
}

#[tokio::test]
async fn secrets_never_reach_the_logs() {
    let captured = kubosh_devenv::captured_logs();

    let secrets = [
        "AKIA-very-secret-key",
        "hunter2-password",
        "-----BEGIN RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEAsecretkeymaterial",
        "nats-client-cert-secret",
        "env-token-value",
    ];
    let fake = FakeCpi::new();
    // The CPI echoes its request to stderr, and quotes a secret in its log and its error.
    fake.respond(
        "delete_vm",
        None,
        &json!({"result": null, "log": "using key AKIA-very-secret-key",
            "error": {"type": "Bosh::Clouds::CloudError", "message": "auth failed for hunter2-password", "ok_to_retry": false}})
        .to_string(),
    );
    fake.result("create_vm", json!(["vm-1", {}]));
    let command = fake
        .command()
        .properties(obj(json!({
            "access_key_id": "AKIA-very-secret-key",
            "nested": {"password": "hunter2-password"},
        })))
        .env("TOKEN", "env-token-value");
    assert!(!format!("{command:?}").contains("AKIA"));
    assert!(!format!("{command:?}").contains("env-token-value"));
    let cpi = ExternalCpi::new(command, "dir-uuid");
    assert!(!format!("{cpi:?}").contains("AKIA"));
    cpi.create_vm(&CreateVm {
        agent_id: "a".into(),
        stemcell_cid: "s".into(),
        cloud_properties: Object::new(),
        networks: Networks::new(),
        disk_cids: vec![],
        env: obj(json!({"bosh": {"group": "visible-group", "mbus": {"cert": {
            "certificate": "nats-client-cert-secret",
            "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretkeymaterial\n-----END RSA PRIVATE KEY-----"}}}})),
    })
    .await
    .unwrap();
    let err = cpi.delete_vm(&"vm-1".into()).await.unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");

    // The secrets did reach the CPI.
    let sent = fake.requests_of("create_vm").join("");
    assert!(sent.contains("AKIA-very-secret-key") && sent.contains("secretkeymaterial"));

    let logs = captured.text();
    assert!(logs.contains("CPI request"), "{logs}");
    assert!(
        logs.contains("CPI stderr: fake cpi: call 0 of create_vm"),
        "{logs}"
    );
    assert!(logs.contains("CPI log: using key <redacted>"), "{logs}");
    assert!(logs.contains("visible-group"), "{logs}");
    for secret in secrets {
        assert!(!logs.contains(secret), "{secret} leaked:\n{logs}");
    }
}
