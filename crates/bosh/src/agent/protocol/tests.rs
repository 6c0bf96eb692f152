use super::*;
use proptest::prelude::*;
use serde_json::json;

#[test]
fn nats_envelope_has_the_directors_key_order() {
    let r = Request {
        protocol: Some(PROTOCOL_VERSION),
        method: "get_state".into(),
        arguments: vec!["full".into()],
        reply_to: "director.p.a.r".into(),
    };
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        r#"{"protocol":3,"method":"get_state","arguments":["full"],"reply_to":"director.p.a.r"}"#
    );
    let https = Request {
        protocol: None,
        ..r
    };
    assert_eq!(
        serde_json::to_string(&https).unwrap(),
        r#"{"method":"get_state","arguments":["full"],"reply_to":"director.p.a.r"}"#
    );
}

#[test]
fn replies() {
    assert_eq!(
        Reply::from_slice(br#"{"value":"pong"}"#).unwrap(),
        Reply::value("pong")
    );
    assert_eq!(
        Reply::from_slice(br#"{"exception":{"message":"unknown message nope"}}"#).unwrap(),
        Reply::exception("unknown message nope")
    );
    // Legacy replies without "value" read as null, as the Director's result['value'].
    assert_eq!(
        Reply::from_slice(br#"{"state":"done"}"#).unwrap(),
        Reply::Value(Value::Null)
    );
    assert_eq!(Reply::from_slice(b"").unwrap_err(), ReplyError::Empty);
    assert_eq!(
        Reply::from_slice(b"[1]").unwrap_err(),
        ReplyError::NotAnObject
    );
    assert!(matches!(
        Reply::from_slice(b"{").unwrap_err(),
        ReplyError::Json(_)
    ));
    assert_eq!(
        Reply::value(json!({"agent_task_id": "t"})).to_vec(),
        br#"{"value":{"agent_task_id":"t"}}"#.to_vec()
    );
    assert_eq!(
        Reply::exception("x").to_vec(),
        br#"{"exception":{"message":"x"}}"#.to_vec()
    );
}

#[test]
fn exceptions_are_formatted_like_the_director() {
    let e = RemoteException::from_json(&json!({
        "message": "Action Failed apply: boom",
        "backtrace": ["a.rb:1", "b.rb:2"],
        "blobstore_id": "blob"
    }));
    assert_eq!(e.formatted(), "Action Failed apply: boom\na.rb:1\nb.rb:2");
    assert_eq!(e.blobstore_id.as_deref(), Some("blob"));
    assert_eq!(RemoteException::from_json(&json!("bare")).message, "bare");
    assert_eq!(RemoteException::from_json(&json!({})).message, "");
    assert_eq!(
        RemoteException::from_json(&json!({"message": 7})).message,
        "7"
    );
    assert_eq!(
        RemoteException::from_json(&json!({"message": "m", "backtrace": "one"})).formatted(),
        "m\none"
    );
}

#[test]
fn task_status_follows_the_message_converter() {
    assert_eq!(
        TaskStatus::from_value(json!({"agent_task_id": "t1", "state": "running"})),
        TaskStatus::Running(TaskHandle::running("t1"))
    );
    assert_eq!(
        TaskStatus::from_value(json!("applied")),
        TaskStatus::Done(json!("applied"))
    );
    assert_eq!(
        TaskStatus::from_value(json!({"result": {"sha1": "s"}})),
        TaskStatus::Done(json!({"result": {"sha1": "s"}}))
    );
    assert_eq!(
        TaskStatus::from_value(json!({"value": 0})),
        TaskStatus::Done(json!(0))
    );
    assert_eq!(
        TaskStatus::from_value(json!({"value": null, "state": "running", "agent_task_id": "t"})),
        TaskStatus::Running(TaskHandle::running("t"))
    );
    assert_eq!(
        TaskStatus::from_value(json!({"agent_task_id": "t", "state": "done"})),
        TaskStatus::Done(Value::Null)
    );
    assert_eq!(
        TaskStatus::from_value(Value::Null),
        TaskStatus::Done(Value::Null)
    );
}

/// What the Director sends to `apply` (instance_spec.rb, key order preserved).
fn director_apply_spec() -> ApplySpec {
    let mut packages = IndexMap::new();
    packages.insert(
        "nginx".to_string(),
        PackageSpec {
            name: "nginx".into(),
            version: "1.21.2".into(),
            sha1: "sha256:aa".into(),
            blobstore_id: "pkg-blob".into(),
            ..PackageSpec::default()
        },
    );
    let mut networks = Map::new();
    networks.insert(
        "default".into(),
        json!({"type": "manual", "ip": "10.0.0.5", "netmask": "255.255.255.0",
               "cloud_properties": {}, "default": ["dns", "gateway"], "dns": ["10.0.0.2"],
               "gateway": "10.0.0.1"}),
    );
    ApplySpec {
        deployment: Some("dep1".into()),
        job: Some(Some(JobSpec {
            name: Some(Some("web".into())),
            templates: Some(Some(vec![JobTemplateSpec {
                name: "nginx".into(),
                version: "fp1".into(),
                sha1: Some("job-sha1".into()),
                blobstore_id: Some("job-blob".into()),
                ..JobTemplateSpec::default()
            }])),
            template: Some("nginx".into()),
            version: Some("fp1".into()),
            ..JobSpec::default()
        })),
        index: Some(Some(0)),
        name: Some("web".into()),
        id: Some("b5c1c1a0".into()),
        az: Some(None),
        networks: Some(networks),
        packages: Some(packages),
        dns_domain_name: Some("bosh".into()),
        persistent_disk: Some(0),
        template_hashes: Some(IndexMap::from([("nginx".to_string(), "th".to_string())])),
        rendered_templates_archive: Some(Some(RenderedTemplatesArchive {
            blobstore_id: "rta".into(),
            sha1: "rta-sha1".into(),
        })),
        configuration_hash: Some("ch".into()),
        extra: Map::new(),
    }
}

#[test]
fn apply_spec_wire_form() {
    let text = serde_json::to_string(&director_apply_spec()).unwrap();
    assert_eq!(
        text,
        concat!(
            r#"{"deployment":"dep1","#,
            r#""job":{"name":"web","templates":[{"name":"nginx","version":"fp1","sha1":"job-sha1","blobstore_id":"job-blob"}],"template":"nginx","version":"fp1"},"#,
            r#""index":0,"name":"web","id":"b5c1c1a0","az":null,"#,
            r#""networks":{"default":{"type":"manual","ip":"10.0.0.5","netmask":"255.255.255.0","cloud_properties":{},"default":["dns","gateway"],"dns":["10.0.0.2"],"gateway":"10.0.0.1"}},"#,
            r#""packages":{"nginx":{"name":"nginx","version":"1.21.2","sha1":"sha256:aa","blobstore_id":"pkg-blob"}},"#,
            r#""dns_domain_name":"bosh","persistent_disk":0,"template_hashes":{"nginx":"th"},"#,
            r#""rendered_templates_archive":{"blobstore_id":"rta","sha1":"rta-sha1"},"configuration_hash":"ch"}"#
        )
    );
    let back: ApplySpec = serde_json::from_str(&text).unwrap();
    assert_eq!(back, director_apply_spec());
}

#[test]
fn partial_and_jobless_apply_specs() {
    let full = director_apply_spec();
    // apply_vm_spec_step.rb: only networks, deployment, job, index, id.
    let partial = ApplySpec {
        deployment: full.deployment.clone(),
        job: full.job.clone(),
        index: full.index,
        id: full.id.clone(),
        networks: full.networks.clone(),
        ..ApplySpec::default()
    };
    let v = serde_json::to_value(&partial).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["deployment", "job", "index", "id", "networks"]);
    let jobless = ApplySpec {
        job: Some(Some(JobSpec::default())),
        ..ApplySpec::default()
    };
    assert_eq!(serde_json::to_string(&jobless).unwrap(), r#"{"job":{}}"#);
    let no_jobs = ApplySpec {
        job: Some(None),
        ..ApplySpec::default()
    };
    assert_eq!(serde_json::to_string(&no_jobs).unwrap(), r#"{"job":null}"#);
}

/// `get_state ["full"]` as bosh-agent marshals it (GetStateV1ApplySpec field order), after
/// an apply, with a field a newer agent might add.
fn real_agent_state() -> Value {
    json!({
        "properties": {"logging": {"max_log_file_size": ""}},
        "job": {"name": "web", "release": "", "template": "nginx", "version": "fp1",
                "templates": [{"name": "nginx", "version": "fp1"}]},
        "packages": {"nginx": {"name": "nginx", "version": "1.21.2", "sha1": "sha256:aa",
                               "blobstore_id": "pkg-blob", "signed_url": "", "blobstore_headers": null}},
        "configuration_hash": "ch",
        "networks": {"default": {"type": "manual", "ip": "10.0.0.5", "netmask": "255.255.255.0",
                                 "gateway": "10.0.0.1", "default": ["dns", "gateway"]}},
        "resource_pool": {},
        "deployment": "dep1",
        "name": "web",
        "index": 0,
        "id": "b5c1c1a0",
        "az": "z1",
        "persistent_disk": 10240,
        "rendered_templates_archive": {"sha1": "rta-sha1", "blobstore_id": "rta"},
        "agent_id": "4149ba0f",
        "job_state": "running",
        "vitals": {
            "cpu": {"sys": "1.0", "user": "2.4", "wait": "0.1"},
            "disk": {"system": {"inode_percent": "3", "percent": "6"},
                     "ephemeral": {"inode_percent": "1", "percent": "2"}},
            "load": ["0.88", "0.47", "0.17"],
            "mem": {"kb": "399732", "percent": "2"},
            "swap": {"kb": "0", "percent": "0"},
            "uptime": {"secs": 718}
        },
        "processes": [
            {"name": "nginx", "state": "running", "uptime": {"secs": 123},
             "mem": {"kb": 100, "percent": 0.1}, "cpu": {"total": 0}},
            {"name": "worker", "state": "failing", "uptime": {}, "mem": {"percent": 0}, "cpu": {"total": 0.5}}
        ],
        "vm": {"name": "vm-1"},
        "some_future_key": {"x": 1}
    })
}

#[test]
fn get_state_from_a_real_agent_round_trips() {
    let wire = real_agent_state();
    let state: AgentState = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(state.job_state, JobState::Running);
    assert_eq!(state.agent_id.as_deref(), Some("4149ba0f"));
    assert_eq!(state.spec.az, Some(Some("z1".into())));
    assert_eq!(state.spec.persistent_disk, Some(10240));
    assert_eq!(state.vm.as_ref().unwrap().name, "vm-1");
    assert_eq!(state.failing_processes(), ["worker"]);
    assert_eq!(
        state.vitals.as_ref().unwrap().uptime.as_ref().unwrap().secs,
        Some(718)
    );
    assert_eq!(
        state.spec.extra.get("some_future_key"),
        Some(&json!({"x": 1}))
    );
    assert_eq!(serde_json::to_value(&state).unwrap(), wire);
}

#[test]
fn get_state_of_a_fresh_agent_round_trips() {
    // Before any apply: nil pointers and nil slices marshal as null.
    let wire = json!({
        "properties": {"logging": {"max_log_file_size": ""}},
        "job": {"name": null, "release": "", "template": "", "version": "", "templates": null},
        "packages": {}, "configuration_hash": "", "networks": {}, "resource_pool": {},
        "deployment": "", "name": "", "index": null, "id": "", "az": "", "persistent_disk": 0,
        "rendered_templates_archive": null, "agent_id": "a1", "job_state": "unknown",
        "vm": {"name": ""}
    });
    let state: AgentState = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(state.job_state, JobState::Unknown);
    assert_eq!(state.spec.index, Some(None));
    assert_eq!(serde_json::to_value(&state).unwrap(), wire);
}

#[test]
fn heartbeat_round_trips() {
    let wire = json!({
        "deployment": "dep1", "job": "web", "index": 0, "job_state": "running",
        "vitals": {"cpu": {"sys": "0.5", "user": "1.0", "wait": "0.0"},
                   "disk": {"system": {"inode_percent": "3", "percent": "6"}},
                   "load": ["0.1", "0.2", "0.3"], "mem": {"kb": "1", "percent": "2"},
                   "swap": {"kb": "0", "percent": "0"}, "uptime": {"secs": 5}},
        "node_id": "b5c1c1a0", "number_of_processes": 2
    });
    let hb: Heartbeat = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(hb.number_of_processes, Some(2));
    assert_eq!(serde_json::to_value(&hb).unwrap(), wire);
    let fresh = json!({"deployment": "", "job": null, "index": null, "job_state": "unknown",
                       "vitals": {"cpu": {}, "mem": {}, "swap": {}, "uptime": {}},
                       "node_id": "", "number_of_processes": null});
    let hb: Heartbeat = serde_json::from_value(fresh.clone()).unwrap();
    assert_eq!(serde_json::to_value(&hb).unwrap(), fresh);
}

#[test]
fn arguments_wire_forms() {
    assert_eq!(
        serde_json::to_string(&RunScriptOptions::default()).unwrap(),
        "{}"
    );
    let env = IndexMap::from([("BOSH_VM_NEXT_STATE".to_string(), "keep".to_string())]);
    assert_eq!(
        serde_json::to_string(&RunScriptOptions { env: Some(env) }).unwrap(),
        r#"{"env":{"BOSH_VM_NEXT_STATE":"keep"}}"#
    );
    assert_eq!(
        serde_json::to_string(&DiskHint::Path("/dev/sdf".into())).unwrap(),
        r#""/dev/sdf""#
    );
    let hint: DiskHint = serde_json::from_str(r#"{"lun":"0","host_device_id":"x"}"#).unwrap();
    assert!(matches!(hint, DiskHint::Object(_)));
    let settings = UpdateSettings {
        trusted_certs: "CERTS".into(),
        disk_associations: vec![DiskAssociation {
            name: "d".into(),
            cid: "c".into(),
        }],
        ..UpdateSettings::default()
    };
    assert_eq!(
        serde_json::to_string(&settings).unwrap(),
        r#"{"trusted_certs":"CERTS","disk_associations":[{"name":"d","cid":"c"}]}"#
    );
    assert_eq!(
        SshCommand::Cleanup {
            user_regex: "^bosh_".into()
        }
        .arguments(),
        vec![json!("cleanup"), json!({"user_regex": "^bosh_"})]
    );
    let blob = UploadBlob::new("id", "sha1:x", b"hello");
    assert_eq!(blob.payload, "aGVsbG8=");
}

#[test]
fn secrets_stay_out_of_debug() {
    let settings = UpdateSettings {
        mbus: Some(MbusSettings {
            cert: CertKeyPair {
                ca: "CA".into(),
                certificate: "CERT".into(),
                private_key: "SECRET-KEY".into(),
            },
            urls: Some(vec!["nats://u:SECRET-PW@h:4222".into()]),
        }),
        blobstores: Some(vec![BlobstoreSettings {
            provider: "s3".into(),
            options: json!({"secret_access_key": "SECRET-S3"})
                .as_object()
                .unwrap()
                .clone(),
        }]),
        ..UpdateSettings::default()
    };
    let text = format!("{settings:?}");
    assert!(!text.contains("SECRET"), "{text}");
    let text = format!("{:?}", UploadBlob::new("id", "SECRET-SUM", b"SECRET"));
    assert!(!text.contains("SECRET"), "{text}");
}

proptest! {
    #[test]
    fn replies_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Reply::from_slice(&bytes);
    }

    #[test]
    fn states_never_panic(text in "\\PC{0,200}") {
        let _ = serde_json::from_str::<AgentState>(&text);
        let _ = serde_json::from_str::<Heartbeat>(&text);
    }
}
