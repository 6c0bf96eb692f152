//! The engine's state in the apiserver (`KubeStore`): every write reads back as the memory
//! store applies it, identifiers sit in specs and annotations (a status wipe or a new
//! process loses nothing), one API write per record, and a write over someone else's change
//! fails.

use crate::support;

use std::collections::BTreeMap;

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use k8s_openapi::api::core::v1::ConfigMap;
use kubosh_engine::state::{
    AppliedSpec, CompiledPackage, DeploymentMeta, DiskRecord, InstanceRecord, InstanceState,
    Intent, IntentKind, IpRecord, MemoryStore, OrphanedDisk, StateStore, StemcellRecord, VmRecord,
    Write,
};
use kubosh_kube::api::{
    CID_ANNOTATION, CompiledPackage as CompiledPackageResource, Deployment, Disk, Instance,
    ProcessState, Stemcell,
};
use kubosh_kube::state::{INTENT_KEY_PREFIX, KubeStore, STATE_KEY};

fn instance(uuid: &str, group: &str, index: u64) -> InstanceRecord {
    InstanceRecord {
        group: group.into(),
        index,
        uuid: uuid.into(),
        az: Some("z1".into()),
        bootstrap: index == 0,
        state: InstanceState::Started,
        update_completed: false,
        vm: None,
        disks: vec![],
        ips: BTreeMap::new(),
        applied: None,
        inactive_vm: None,
    }
}

async fn deployment(client: &kube::Client, ns: &str, name: &str) -> Deployment {
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "kubosh.io/v1alpha1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"manifest": {"instance_groups": []}},
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap()
}

async fn stemcell(client: &kube::Client, ns: &str, object: &str, name: &str, version: &str) {
    let s: Stemcell = serde_json::from_value(json!({
        "apiVersion": "kubosh.io/v1alpha1",
        "kind": "Stemcell",
        "metadata": {"name": object},
        "spec": {"name": name, "version": version, "url": "file:///nowhere.tgz"},
    }))
    .unwrap();
    Api::<Stemcell>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_read_back_as_the_memory_store_applies_them_from_specs_and_annotations() {
    let cp = support::control_plane().await;
    let ns = support::namespace("state").await;
    let client = cp.client().await.unwrap();
    let owner = deployment(&client, &ns, "zk").await;
    stemcell(&client, &ns, "jammy-1-0", "bosh-jammy", "1.0").await;
    let store = KubeStore::new(client.clone(), &ns, "zk", owner.controller_owner_ref(&()));
    let memory = MemoryStore::new();
    assert_eq!(store.load().await.unwrap(), memory.snapshot());

    let mut running = instance("u-1", "diego_cell", 0);
    running.update_completed = true;
    running.vm = Some(VmRecord {
        cid: "vm-1".into(),
        agent_id: "agent-1".into(),
        stemcell: "bosh-jammy/1.0".into(),
        cloud_properties: json!({"cpu": 1}),
        env: json!({}),
        networks: json!({"private": {"ip": "10.0.0.5", "default": ["dns", "gateway"]},
                         "dyn": {"ip": "10.1.0.9", "type": "dynamic"}}),
        cpi: None,
    });
    running.ips = BTreeMap::from([(
        "private".to_string(),
        IpRecord {
            ip: "10.0.0.5".into(),
            is_static: true,
        },
    )]);
    running.disks = vec![DiskRecord {
        cid: "disk-1".into(),
        name: String::new(),
        size_mib: 1024,
        cloud_properties: json!({"type": "gp3"}),
        snapshots: vec![],
        cpi: None,
    }];
    running.applied = Some(AppliedSpec {
        stemcell: "bosh-jammy/1.0".into(),
        configuration_hash: Some("abc".into()),
        ..AppliedSpec::default()
    });
    let mut renamed = instance("u-2", "old", 1);
    let writes = vec![
        Write::Intent(Intent {
            id: "0b6c5e7e-2a4f-4f57-9d1e-5d2f0c1a2b3c".into(),
            kind: IntentKind::CreateVm {
                instance: Some("u-1".into()),
                agent_id: "agent-1".into(),
            },
            cid: None,
            cpi: None,
        }),
        Write::Intent(Intent {
            id: "an id/that is no key".into(),
            kind: IntentKind::CreateStemcell {
                stemcell: "bosh-jammy/1.0".into(),
            },
            cid: Some("sc-1".into()),
            cpi: None,
        }),
        Write::Instance(Box::new(running.clone())),
        Write::DeleteIntent("0b6c5e7e-2a4f-4f57-9d1e-5d2f0c1a2b3c".into()),
        Write::Instance(Box::new(renamed.clone())),
        Write::Stemcell(StemcellRecord {
            name: "bosh-jammy".into(),
            version: "1.0".into(),
            os: "ubuntu-jammy".into(),
            cid: "sc-1".into(),
            cpi: None,
        }),
        Write::CompiledPackage(CompiledPackage {
            name: "openjdk".into(),
            version: "v1".into(),
            fingerprint: "f1".into(),
            stemcell_os: "ubuntu-jammy".into(),
            stemcell_version: "1.0".into(),
            dependency_key: String::new(),
            build: 2,
            blob_id: "blob-1".into(),
            sha1: "sha256:00".into(),
        }),
        Write::Meta(DeploymentMeta {
            dns_version: 7,
            deployed_inputs: Some("d1".into()),
            link_group_ids: BTreeMap::from([("db-conn".to_string(), 1)]),
            ..DeploymentMeta::default()
        }),
    ];
    for w in &writes {
        store.write(w).await.unwrap();
        memory.write(w).await.unwrap();
    }
    assert_eq!(store.load().await.unwrap(), memory.snapshot());

    // The disk leaves the instance and becomes an orphan; the renamed instance moves.
    let orphan = OrphanedDisk {
        disk: running.disks[0].clone(),
        instance: "diego_cell/u-1".into(),
        index: Some(running.index),
        az: running.az.clone(),
        orphaned_at: "2026-11-25T01:02:03Z".into(),
    };
    running.disks.clear();
    renamed.group = "new".into();
    let more = vec![
        Write::OrphanedDisk(orphan),
        Write::Instance(Box::new(running.clone())),
        Write::Instance(Box::new(renamed)),
        Write::DeleteIntent("an id/that is no key".into()),
    ];
    for w in &more {
        store.write(w).await.unwrap();
        memory.write(w).await.unwrap();
    }
    assert_eq!(
        store.orphaned_disks().await.unwrap(),
        memory.snapshot().orphaned_disks,
        "orphans as written, without a read"
    );
    // Settling an intent is no write of its own: it rides on the deployment's next one.
    let writes = store.writes();
    store
        .write(&Write::DeleteIntent("an id/that is no key".into()))
        .await
        .unwrap();
    assert_eq!(store.writes(), writes);
    let meta = Write::Meta(DeploymentMeta {
        dns_version: 8,
        ..DeploymentMeta::default()
    });
    store.write(&meta).await.unwrap();
    memory.write(&meta).await.unwrap();
    let before = store.writes();
    assert_eq!(store.load().await.unwrap(), memory.snapshot());
    assert_eq!(store.writes(), before, "a load writes nothing");

    // What a user sees: the readable fields, the labels, the owner.
    let instances: Api<Instance> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> = instances
        .list(&Default::default())
        .await
        .unwrap()
        .iter()
        .map(|i| i.name_any())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"zk-new-1".to_string()), "{names:?}");
    let cell_name = names
        .iter()
        .find(|n| n.starts_with("zk-diego-cell-0-"))
        .unwrap();
    let cell = instances.get(cell_name).await.unwrap();
    assert_eq!(cell.spec.vm_cid.as_deref(), Some("vm-1"));
    assert_eq!(cell.spec.agent_id.as_deref(), Some("agent-1"));
    assert_eq!(cell.spec.id, "u-1");
    assert_eq!(cell.spec.networks[0].name, "private");
    assert_eq!(cell.spec.networks[0].ip.as_deref(), Some("10.0.0.5"));
    assert_eq!(cell.spec.networks[1].ip.as_deref(), Some("10.1.0.9"));
    assert_eq!(cell.labels()["kubosh.io/deployment"], "zk");
    assert_eq!(cell.labels()["kubosh.io/index"], "0");
    assert_eq!(cell.owner_references()[0].name, "zk");
    let disks: Vec<Disk> = Api::<Disk>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(disks.len(), 1);
    assert!(disks[0].spec.orphaned);
    assert_eq!(
        disks[0].spec.orphaned_from.as_deref(),
        Some("diego_cell/u-1")
    );
    assert_eq!(
        disks[0].spec.az.as_deref(),
        Some("z1"),
        "kept from when it was attached"
    );
    let sc: Stemcell = Api::namespaced(client.clone(), &ns)
        .get("jammy-1-0")
        .await
        .unwrap();
    assert_eq!(sc.annotations()[CID_ANNOTATION], "sc-1");
    assert_eq!(
        sc.metadata.generation,
        Some(1),
        "the user's spec is not touched"
    );
    let d: Deployment = Api::namespaced(client.clone(), &ns)
        .get("zk")
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    assert!(
        !d.annotations().keys().any(|k| k.contains("kubosh.io/")),
        "the engine's state is not the Deployment's: {:?}",
        d.annotations()
    );
    let kept: ConfigMap = Api::namespaced(client.clone(), &ns)
        .get(&KubeStore::state_name("zk"))
        .await
        .unwrap();
    let data = kept.data.unwrap_or_default();
    assert!(data.contains_key(STATE_KEY), "{data:?}");
    assert!(
        !data.keys().any(|k| k.starts_with(INTENT_KEY_PREFIX)),
        "settled: {data:?}"
    );
    let packages = Api::<CompiledPackageResource>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(packages.items.len(), 1);

    // A wiped status and a new process (a restarted controller) lose nothing.
    instances
        .patch_status(
            cell_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": null})),
        )
        .await
        .unwrap();
    let fresh = KubeStore::new(client.clone(), &ns, "zk", None);
    assert_eq!(fresh.load().await.unwrap(), memory.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_write_per_record_and_a_write_over_another_change_fails() {
    let cp = support::control_plane().await;
    let ns = support::namespace("state-cas").await;
    let client = cp.client().await.unwrap();
    deployment(&client, &ns, "web").await;
    let store = KubeStore::new(client.clone(), &ns, "web", None);
    store.load().await.unwrap();
    let mut record = instance("u-1", "web", 0);
    for completed in [false, true, false, true] {
        record.update_completed = completed;
        store
            .write(&Write::Instance(Box::new(record.clone())))
            .await
            .unwrap();
    }
    assert_eq!(store.writes(), 4, "one API write per instance write");
    // The record is an annotation: what only it says (an update begun, completed, what was
    // applied) leaves the generation, and the status that observed it, as they were.
    let instances: Api<Instance> = Api::namespaced(client.clone(), &ns);
    let object = instances.get("web-web-0").await.unwrap();
    assert_eq!(object.metadata.generation, Some(1));

    // Its status written since (the health watch, a deploy's report): what kubosh wrote is
    // as it was, so its next write goes through over the new version.
    instances
        .patch_status(
            "web-web-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"processState": "Unresponsive"}})),
        )
        .await
        .unwrap();
    store
        .write(&Write::Instance(Box::new(record.clone())))
        .await
        .unwrap();
    let object = instances.get("web-web-0").await.unwrap();
    let status = object.status.unwrap();
    assert_eq!(status.process_state, Some(ProcessState::Unresponsive));

    // Someone else changes the instance: kubosh's next write refuses to overwrite it.
    instances
        .patch(
            "web-web-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"az": "z9"}})),
        )
        .await
        .unwrap();
    let err = store
        .write(&Write::Instance(Box::new(record.clone())))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("changed by someone else"), "{err}");
    // Read again, the write goes through.
    store.load().await.unwrap();
    store
        .write(&Write::Instance(Box::new(record)))
        .await
        .unwrap();

    // No Deployment: its state is empty but for the orphaned disks that outlive it, and
    // nothing writes its annotations (an apply would create the resource again).
    let gone = KubeStore::new(client.clone(), &ns, "missing", None);
    let state = gone.load().await.unwrap();
    assert!(state.instances.is_empty() && state.orphaned_disks.is_empty());
    assert!(state.intents.is_empty());
    assert_eq!(state.meta, DeploymentMeta::default());
    let err = gone
        .write(&Write::Meta(DeploymentMeta::default()))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("deployment missing"), "{err}");
    assert!(
        Api::<Deployment>::namespaced(client, &ns)
            .get_opt("missing")
            .await
            .unwrap()
            .is_none()
    );
}

/// A VM's `env` (the agent's password hash, mbus credentials, interpolated variables) is
/// sealed in the `Instance` others can read, and still compares equal to itself: a redeploy
/// sees no `env` change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vms_env_is_sealed_in_the_instance_and_still_compares() {
    let cp = support::control_plane().await;
    let ns = support::namespace("sealed").await;
    let client = cp.client().await.unwrap();
    deployment(&client, &ns, "zk").await;
    let store = KubeStore::new(client.clone(), &ns, "zk", None);
    let env = json!({"bosh": {"password": "planted-hash-93a1"}, "persistent_disk_fs": "ext4"});
    let mut record = instance("u-1", "zk", 0);
    record.vm = Some(VmRecord {
        cid: "vm-1".into(),
        agent_id: "agent-1".into(),
        stemcell: "bosh-jammy/1.0".into(),
        cloud_properties: json!({}),
        env: env.clone(),
        networks: json!({}),
        cpi: None,
    });
    record.applied = Some(AppliedSpec {
        env: env.clone(),
        ..AppliedSpec::default()
    });
    store
        .write(&Write::Instance(Box::new(record)))
        .await
        .unwrap();
    let objects = Api::<Instance>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap();
    let text = serde_json::to_string(&objects.items).unwrap();
    assert!(!text.contains("planted-hash-93a1"), "{text}");
    let loaded = store.load().await.unwrap();
    let back = &loaded.instances["u-1"];
    let vm_env = &back.vm.as_ref().unwrap().env;
    assert_ne!(vm_env, &env);
    assert!(kubosh_base::secret::same_value(vm_env, &env));
    let applied_env = &back.applied.as_ref().unwrap().env;
    assert!(kubosh_base::secret::same_value(applied_env, &env));
}

/// Whether deployment `zk` has a state `ConfigMap`.
async fn has_state(config_maps: &Api<ConfigMap>) -> bool {
    let name = KubeStore::state_name("zk");
    config_maps.get_opt(&name).await.unwrap().is_some()
}

/// State kubosh wrote as annotations of the `Deployment` (before the state `ConfigMap`) is
/// read, moved with the first write and removed from there; a state `ConfigMap` left by an
/// earlier `Deployment` of the same name is not the new one's; the deletion's end removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_moves_from_the_deployment_and_is_the_deployments_own() {
    let cp = support::control_plane().await;
    let ns = support::namespace("state-moves").await;
    let client = cp.client().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    deployment(&client, &ns, "zk").await;
    let meta = DeploymentMeta {
        dns_version: 7,
        ..DeploymentMeta::default()
    };
    let intent = Intent {
        id: "create-vm/u-1".into(),
        kind: IntentKind::CreateVm {
            instance: Some("u-1".into()),
            agent_id: "agent-1".into(),
        },
        cid: None,
        cpi: None,
    };
    // As an earlier kubosh left it: state and an intent on the Deployment, applied by kubosh.
    let legacy = json!({
        "apiVersion": Deployment::api_version(&()),
        "kind": Deployment::kind(&()),
        "metadata": {"name": "zk", "annotations": {
            "kubosh.io/state": serde_json::to_string(&meta).unwrap(),
            "intent.kubosh.io/create-vm-u-1": serde_json::to_string(&intent).unwrap(),
            "kubosh.io/handled-requests": "{\"action\":\"recreate web/0\"}",
        }},
    });
    deployments
        .patch(
            "zk",
            &PatchParams::apply("kubosh").force(),
            &Patch::Apply(&legacy),
        )
        .await
        .unwrap();
    let store = KubeStore::new(client.clone(), &ns, "zk", None);
    let state = store.load().await.unwrap();
    assert_eq!(state.meta.dns_version, 7);
    assert_eq!(state.intents.len(), 1, "{:?}", state.intents);
    assert!(!has_state(&config_maps).await);

    // The first write moves it: the intents and facts in the ConfigMap, gone from the
    // Deployment but for the handled requests.
    let next = DeploymentMeta {
        dns_version: 8,
        ..DeploymentMeta::default()
    };
    store.write(&Write::Meta(next.clone())).await.unwrap();
    let annotations = deployments.get("zk").await.unwrap().annotations().clone();
    assert_eq!(
        annotations
            .keys()
            .filter(|k| k.contains("kubosh.io"))
            .collect::<Vec<_>>(),
        ["kubosh.io/handled-requests"],
        "{annotations:?}"
    );
    let fresh = KubeStore::new(client.clone(), &ns, "zk", None)
        .load()
        .await
        .unwrap();
    assert_eq!(fresh.meta, next);
    assert_eq!(
        fresh.intents, state.intents,
        "the pending intent moved with it"
    );

    // Deleted and made again under the same name: the old ConfigMap is not its state.
    deployments.delete("zk", &Default::default()).await.unwrap();
    deployment(&client, &ns, "zk").await;
    let renewed = KubeStore::new(client.clone(), &ns, "zk", None);
    let state = renewed.load().await.unwrap();
    assert_eq!(state.meta, DeploymentMeta::default());
    assert!(state.intents.is_empty(), "{:?}", state.intents);
    renewed.write(&Write::Meta(meta.clone())).await.unwrap();
    assert_eq!(
        KubeStore::new(client.clone(), &ns, "zk", None)
            .load()
            .await
            .unwrap()
            .meta,
        meta
    );

    // The deletion's end removes it.
    renewed.forget_deployment_state().await.unwrap();
    assert!(!has_state(&config_maps).await);
}

/// A deploy's store starts from the instance records the last one left (no list, the
/// objects as the watch has them) while the watch shows them as written; once a record is
/// changed behind its back, the next store lists them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_starts_from_what_the_last_deploy_left_while_the_watch_agrees() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    use kubosh_kube::left_behind::{LeftBehind, RECORD_DIGEST, digest_record, record_digest};
    use std::sync::Arc;

    let cp = support::control_plane().await;
    let ns = support::namespace("state-left").await;
    let client = cp.client().await.unwrap();
    let owner = deployment(&client, &ns, "web").await;
    let uid = owner.uid().unwrap();
    let left = Arc::new(LeftBehind::default());
    // The `Instance`s as the health watch caches them.
    let (cache, writer) = left.cache_writer();
    let instances: Api<Instance> = Api::namespaced(client.clone(), &ns);
    let slim = watcher(instances.clone(), watcher::Config::default()).modify(|i| {
        digest_record(i);
    });
    let watch = tokio::spawn(
        reflector::reflector(writer, slim)
            .applied_objects()
            .for_each(|_| futures::future::ready(())),
    );
    let store = || {
        KubeStore::new(client.clone(), &ns, "web", owner.controller_owner_ref(&()))
            .reusing(left.clone(), &uid)
    };
    // The watch has every object as it is in the apiserver.
    let caught_up = async || {
        for _ in 0..100 {
            let all = instances.list(&Default::default()).await.unwrap().items;
            let seen = all.iter().all(|o| {
                let digest = record_digest(&o.annotations()[kubosh_kube::api::RECORD_ANNOTATION]);
                cache.state().iter().any(|c| {
                    c.name_any() == o.name_any()
                        && c.resource_version() == o.resource_version()
                        && c.annotations().get(RECORD_DIGEST) == Some(&digest)
                })
            });
            if seen && cache.state().len() == all.len() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the watch did not catch up");
    };

    let first = store();
    first.load().await.unwrap();
    assert!(!first.reused(), "nothing was left yet");
    let (a, mut b) = (instance("u-1", "web", 0), instance("u-2", "web", 1));
    for record in [&a, &b] {
        (first.write(&Write::Instance(Box::new(record.clone()))))
            .await
            .unwrap();
    }
    first.leave().await;
    caught_up().await;

    let second = store();
    let state = second.load().await.unwrap();
    assert!(second.reused(), "the watch agrees with what was left");
    assert_eq!(state.instances.values().collect::<Vec<_>>(), [&a, &b]);
    // Its status written since (the watch saw it or not): the next write goes through.
    instances
        .patch_status(
            "web-web-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"processState": "Running"}})),
        )
        .await
        .unwrap();
    b.update_completed = true;
    (second.write(&Write::Instance(Box::new(b.clone()))))
        .await
        .unwrap();
    second.leave().await;
    caught_up().await;

    // A record written behind the stores' backs: the next store lists them.
    let mut behind = b.clone();
    behind.state = InstanceState::Stopped;
    let text = serde_json::to_string(&behind).unwrap();
    let annotations = json!({"metadata": {"annotations": {"kubosh.io/record": text}}});
    (instances.patch(
        "web-web-1",
        &PatchParams::default(),
        &Patch::Merge(annotations),
    ))
    .await
    .unwrap();
    caught_up().await;
    let third = store();
    let state = third.load().await.unwrap();
    assert!(!third.reused(), "a record changed since it was left");
    assert_eq!(state.instances["u-2"].state, InstanceState::Stopped);
    watch.abort();
}
