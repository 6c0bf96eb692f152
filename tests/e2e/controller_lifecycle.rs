//! A deployment's life under `kubosh controller`, as an operator drives it with kubectl: a
//! static IP moved to another instance (the Director's error, nothing changed), a stemcell
//! bump (every VM recreated, the data on the disks kept), an old stemcell deleted (gone from
//! the cloud) and a stemcell in use deleted (kept until nothing uses it), an instance group
//! removed (its disk orphaned) and back (its disk attached again, data kept), an orphan
//! deleted with kubectl and one expired (both gone from the cloud), and the deployment
//! deleted with `deletionPolicy: Delete` while a deploy runs (the deploy stops, everything
//! goes, orphans included).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

use crate::controller::{
    apply, apply_deployment, apply_inputs, condition, control_plane, deployment_object, events_of,
    ready_at, start_replica_with, stored_state, wait_for,
};
use crate::crash_safety::plant_marker;
use crate::director_world::{World, http_get, run, text};
use k8s_openapi::api::core::v1::ConfigMap;
use kubosh_cloud::local;
use kubosh_engine::state::DeploymentState;
use kubosh_kube::api::{CompiledPackage, Deployment, Disk, Instance, Stemcell};
use kubosh_kube::registry::REGISTRY_LABEL;
use kubosh_kube::state::{DISK_FINALIZER, KubeStore};

const NS: &str = "ctrl-life";

/// Two `web` instances with disks and static IPs `web_ips`, and, with `db_ip`, one `db`
/// instance with a disk at that static IP; on stemcell `stemcell`.
fn manifest(
    w: &World,
    stemcell: &str,
    web_ips: [u8; 2],
    db_ip: Option<u8>,
    greeting: &str,
) -> Value {
    let ip = |last: u8| format!("127.0.{}.{last}", w.net);
    let hello = |greeting: &str| json!({"hello": {"port": w.port, "bind": "instance", "greeting": greeting}});
    let mut groups = vec![json!({
        "name": "web",
        "instances": 2,
        "azs": ["z1"],
        "vm_type": "small",
        "stemcell": "default",
        "persistent_disk": 64,
        "networks": [{"name": "default", "static_ips": web_ips.map(ip)}],
        "jobs": [{"name": "hello", "release": "hello",
                  "provides": {"greeter": {"as": "web_greeter"}},
                  "consumes": {"peers": {"from": "web_greeter"}},
                  "properties": hello(greeting)}],
    })];
    if let Some(last) = db_ip {
        groups.push(json!({
            "name": "db",
            "instances": 1,
            "azs": ["z1"],
            "vm_type": "small",
            "stemcell": "default",
            "persistent_disk": 64,
            "networks": [{"name": "default", "static_ips": [ip(last)]}],
            "jobs": [{"name": "hello", "release": "hello",
                      "consumes": {"peers": "nil"},
                      "properties": hello("db")}],
        }));
    }
    json!({
        "releases": [{"name": "hello", "version": "1.0.0"}],
        "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": stemcell}],
        "update": {
            "canaries": 1, "max_in_flight": 2,
            "canary_watch_time": "300-30000", "update_watch_time": "300-30000",
        },
        "instance_groups": groups,
    })
}

async fn apply_manifest(client: &kube::Client, manifest: Value) -> i64 {
    apply_deployment(client, NS, &deployment_object("life", manifest)).await
}

async fn state(client: &kube::Client) -> DeploymentState {
    stored_state(client, NS, "life").await
}

/// VM CIDs and disk CIDs by `group/index`.
fn machines(state: &DeploymentState) -> Vec<(String, Option<String>, Vec<String>)> {
    let mut out: Vec<_> = state
        .instances
        .values()
        .map(|i| {
            (
                format!("{}/{}", i.group, i.index),
                i.vm.as_ref().map(|v| v.cid.clone()),
                i.disks.iter().map(|d| d.cid.clone()).collect(),
            )
        })
        .collect();
    out.sort();
    out
}

async fn list<K>(client: &kube::Client) -> Vec<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// Waits until `name` is gone (for at most `limit`).
pub(crate) async fn gone<K>(client: &kube::Client, namespace: &str, name: &str, limit: Duration)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api = Api::<K>::namespaced(client.clone(), namespace);
    let start = Instant::now();
    while let Some(object) = api.get_opt(name).await.unwrap() {
        assert!(start.elapsed() < limit, "{name} is still there: {object:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn cloud_stemcells(w: &World) -> BTreeSet<String> {
    let inventory = local::inventory(&w.cloud()).unwrap();
    inventory.stemcells.iter().map(|s| s.cid.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_lives_through_ip_moves_stemcell_bumps_group_removal_and_deletion() {
    let cp = control_plane().await;
    let w = World::new(23);
    cp.create_namespace(NS).await.unwrap();
    let client = cp.client().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let stemcells: Api<Stemcell> = Api::namespaced(client.clone(), NS);
    let _controller =
        start_replica_with(&w, cp, NS, "lifecycle", &["--orphaned-disk-max-age", "30s"]);
    apply_inputs(&client, NS, &w).await;
    let newer = w.dir.path().join("stemcell-1.1.tgz");
    let out = run(&[
        "stemcell",
        "create",
        "--name",
        "bosh-kubosh-local-ubuntu-jammy",
        "--version",
        "1.1",
        "--os",
        "ubuntu-jammy",
        "--tarball",
        newer.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{:?}", text(&out));
    apply(
        &client,
        NS,
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "Stemcell",
               "metadata": {"name": "jammy-1.1"},
               "spec": {"name": "bosh-kubosh-local-ubuntu-jammy", "version": "1.1",
                        "url": format!("file://{}", newer.display())}}),
    )
    .await;

    // web at .50 and .51, db at .52, on stemcell 1.0.
    let generation = apply_manifest(&client, manifest(&w, "1.0", [50, 51], Some(52), "one")).await;
    ready_at(&deployments, "life", &w, generation).await;
    let first = state(&client).await;
    let web0 = plant_marker(&w, &first);
    let before = machines(&first);
    assert_eq!(before.len(), 3, "{before:?}");
    let old_stemcell = stemcells.get("jammy-1.0").await.unwrap();
    let old_cid = old_stemcell.annotations()[kubosh_kube::api::CID_ANNOTATION].clone();
    assert!(cloud_stemcells(&w).contains(&old_cid));

    // A static IP moved to another instance: the Director's error, Stalled, nothing changed.
    let calls = w.calls();
    let generation = apply_manifest(&client, manifest(&w, "1.0", [52, 51], Some(50), "one")).await;
    let d = wait_for(&deployments, "life", Duration::from_secs(120), &w, |d| {
        d.metadata.generation == Some(generation)
            && condition(d, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    let message = &condition(&d, "Stalled").unwrap().message;
    assert!(
        message.contains("Failed to reserve IP '127.0.23.52/32'")
            && message.contains("already reserved by instance 'db/"),
        "{message}"
    );
    assert_eq!(w.calls(), calls, "a refused IP move calls no CPI method");
    assert_eq!(machines(&state(&client).await), before);
    let failed: Vec<_> = (events_of(&client, NS).await.into_iter())
        .filter(|e| e.reason.as_deref() == Some("DeployFailed"))
        .filter_map(|e| e.note)
        .collect();
    assert!(
        failed
            .iter()
            .any(|n| n.contains("Failed to reserve IP '127.0.23.52/32'")),
        "a DeployFailed Event says why: {failed:?}"
    );

    // A stemcell bump: every VM recreated on 1.1, the disks (and the data on them) kept.
    let generation = apply_manifest(&client, manifest(&w, "1.1", [50, 51], Some(52), "one")).await;
    ready_at(&deployments, "life", &w, generation).await;
    let bumped = state(&client).await;
    let after = machines(&bumped);
    for ((name, vm_before, disks_before), (name_after, vm_after, disks_after)) in
        before.iter().zip(&after)
    {
        assert_eq!(name, name_after);
        assert_ne!(vm_before, vm_after, "{name} has a new VM");
        assert_eq!(disks_before, disks_after, "{name} keeps its disk");
    }
    for i in bumped.instances.values() {
        assert_eq!(
            i.vm.as_ref().unwrap().stemcell,
            "bosh-kubosh-local-ubuntu-jammy/1.1"
        );
    }
    let web0_vm = &bumped.instances[&web0].vm.as_ref().unwrap().cid;
    let marker = w.vm_root(web0_vm).join("store/marker");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "keep me");
    let new_cid = stemcells.get("jammy-1.1").await.unwrap().annotations()
        [kubosh_kube::api::CID_ANNOTATION]
        .clone();

    // The old stemcell, deleted, goes from the cloud with the packages compiled for it.
    let compiled_for = |packages: &[CompiledPackage], version: &str| {
        packages
            .iter()
            .filter(|p| p.spec.stemcell.version == version)
            .count()
    };
    assert_eq!(compiled_for(&list(&client).await, "1.0"), 2);
    stemcells
        .delete("jammy-1.0", &DeleteParams::default())
        .await
        .unwrap();
    gone::<Stemcell>(&client, NS, "jammy-1.0", Duration::from_secs(60)).await;
    assert_eq!(cloud_stemcells(&w), BTreeSet::from([new_cid.clone()]));
    assert_eq!(compiled_for(&list(&client).await, "1.0"), 0);
    assert_eq!(compiled_for(&list(&client).await, "1.1"), 2);

    // The stemcell in use, deleted: kept (and said so) while instances run on it.
    stemcells
        .delete("jammy-1.1", &DeleteParams::default())
        .await
        .unwrap();
    let start = Instant::now();
    loop {
        let s = stemcells.get("jammy-1.1").await.unwrap();
        let in_use = s.status.as_ref().and_then(|st| {
            st.conditions
                .iter()
                .find(|c| c.type_ == "Reconciling" && c.reason == "InUse")
                .map(|c| c.message.clone())
        });
        if let Some(message) = in_use {
            assert!(
                message.contains("is still in use by: instance life-"),
                "{message}"
            );
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{s:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(cloud_stemcells(&w).contains(&new_cid));

    // db removed: its VM deleted, its disk orphaned (a Disk with `orphaned`, no owner, and
    // a finalizer: the object is the disk's only record).
    let db_disk = after.iter().find(|(n, ..)| n == "db/0").unwrap().2[0].clone();
    let db_vm = after
        .iter()
        .find(|(n, ..)| n == "db/0")
        .unwrap()
        .1
        .clone()
        .unwrap();
    std::fs::write(w.vm_root(&db_vm).join("store/marker"), "db data").unwrap();
    let generation = apply_manifest(&client, manifest(&w, "1.1", [50, 51], None, "one")).await;
    ready_at(&deployments, "life", &w, generation).await;
    let instances: Vec<Instance> = list(&client).await;
    assert_eq!(instances.len(), 2);
    assert!(instances.iter().all(|i| i.spec.instance_group == "web"));
    let disks: Vec<Disk> = list(&client).await;
    let orphans: Vec<&Disk> = disks.iter().filter(|d| d.spec.orphaned).collect();
    assert_eq!(orphans.len(), 1, "{disks:?}");
    assert_eq!(orphans[0].spec.cid, db_disk);
    assert!(orphans[0].owner_references().is_empty());
    assert_eq!(orphans[0].finalizers(), [DISK_FINALIZER]);
    let inventory = local::inventory(&w.cloud()).unwrap();
    assert_eq!(inventory.vms.len(), 2);
    assert_eq!(inventory.disks.len(), 3);
    assert_eq!(http_get(&format!("127.0.{}.52", w.net), w.port), None);
    // Its instance is gone: the Events of its removal are the deployment's.
    let notes: Vec<String> = (events_of(&client, NS).await.into_iter())
        .filter(|e| matches!(e.reason.as_deref(), Some("DiskOrphaned" | "VMDeleted")))
        .filter_map(|e| e.note)
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&db_disk) && n.contains("orphaned")),
        "{notes:?}"
    );
    assert!(notes.iter().any(|n| n.contains(&db_vm)), "{notes:?}");

    // db back (before its orphan expires): db/0 gets its disk, and the data on it, again.
    let generation = apply_manifest(&client, manifest(&w, "1.1", [50, 51], Some(52), "one")).await;
    ready_at(&deployments, "life", &w, generation).await;
    let back = state(&client).await;
    let db0 = back.instances.values().find(|i| i.group == "db").unwrap();
    assert_eq!(db0.disks[0].cid, db_disk, "db/0 has its old disk");
    let db_root = w.vm_root(&db0.vm.as_ref().unwrap().cid);
    assert_eq!(
        std::fs::read_to_string(db_root.join("store/marker")).unwrap(),
        "db data"
    );
    assert!(back.orphaned_disks.is_empty());
    let disks: Vec<Disk> = list(&client).await;
    assert!(
        disks
            .iter()
            .all(|d| !d.spec.orphaned && d.finalizers().is_empty()),
        "{disks:?}"
    );

    // db removed again; `kubectl delete bdisk` of its orphan deletes the disk in the cloud.
    let generation = apply_manifest(&client, manifest(&w, "1.1", [50, 51], None, "one")).await;
    ready_at(&deployments, "life", &w, generation).await;
    let disk_object = KubeStore::disk_name("life", &db_disk);
    Api::<Disk>::namespaced(client.clone(), NS)
        .delete(&disk_object, &DeleteParams::default())
        .await
        .unwrap();
    gone::<Disk>(&client, NS, &disk_object, Duration::from_secs(60)).await;
    let inventory = local::inventory(&w.cloud()).unwrap();
    assert!(
        inventory.disks.iter().all(|d| d.cid != db_disk),
        "{inventory:?}"
    );
    assert_eq!(inventory.disks.len(), 2);

    // web scaled down: web/1's disk is orphaned, then deleted once it expires (30 s here).
    let mut smaller = manifest(&w, "1.1", [50, 51], None, "one");
    smaller["instance_groups"][0]["instances"] = json!(1);
    smaller["instance_groups"][0]["networks"][0]["static_ips"] =
        json!([format!("127.0.{}.50", w.net)]);
    let generation = apply_manifest(&client, smaller).await;
    ready_at(&deployments, "life", &w, generation).await;
    let web1_disk = after.iter().find(|(n, ..)| n == "web/1").unwrap().2[0].clone();
    let web1_object = KubeStore::disk_name("life", &web1_disk);
    let orphan = Api::<Disk>::namespaced(client.clone(), NS)
        .get(&web1_object)
        .await
        .unwrap();
    assert!(orphan.spec.orphaned);
    gone::<Disk>(&client, NS, &web1_object, Duration::from_secs(120)).await;
    let inventory = local::inventory(&w.cloud()).unwrap();
    assert!(
        inventory.disks.iter().all(|d| d.cid != web1_disk),
        "{inventory:?}"
    );
    let events = events_of(&client, NS).await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("DiskDeleted")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains(&web1_disk) && n.contains("expired"))),
        "an Event says the orphan expired"
    );

    // Deleted with `deletionPolicy: Delete` while a deploy runs: the deploy stops after its
    // steps in flight, then every VM and disk goes (the orphan too), and the finalizer.
    let mut next = manifest(&w, "1.1", [50, 51], None, "two");
    next["instance_groups"][0]["instances"] = json!(3);
    let third = json!(format!("127.0.{}.53", w.net));
    next["instance_groups"][0]["networks"][0]["static_ips"]
        .as_array_mut()
        .unwrap()
        .push(third);
    let mut object = deployment_object("life", next);
    object["spec"]["deletionPolicy"] = json!("Delete");
    let generation = apply_deployment(&client, NS, &object).await;
    wait_for(&deployments, "life", Duration::from_secs(60), &w, |d| {
        d.metadata.generation == Some(generation)
            && condition(d, "Reconciling").is_some_and(|c| c.status == "True")
    })
    .await;
    deployments
        .delete("life", &DeleteParams::default())
        .await
        .unwrap();
    gone::<Deployment>(&client, NS, "life", Duration::from_secs(180)).await;
    let events = events_of(&client, NS).await;
    let cancelled = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("DeployCancelled"));
    let note = cancelled.and_then(|e| e.note.clone()).unwrap_or_default();
    assert!(
        note.contains("being deleted"),
        "the deploy was cancelled: {note:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("Deleted"))
    );
    let inventory = local::inventory(&w.cloud()).unwrap();
    assert!(inventory.vms.is_empty(), "{inventory:?}");
    assert!(inventory.disks.is_empty(), "{inventory:?}");
    assert!(list::<Disk>(&client).await.is_empty());
    assert!(list::<Instance>(&client).await.is_empty());
    // Its addresses and DNS records left the namespace's registries.
    let shares: Vec<String> = list::<ConfigMap>(&client)
        .await
        .iter()
        .filter(|m| m.labels().contains_key(REGISTRY_LABEL))
        .map(|m| m.name_any())
        .collect();
    assert!(shares.is_empty(), "{shares:?}");

    // Nothing uses stemcell 1.1 any more: it goes from the cloud and the namespace.
    gone::<Stemcell>(&client, NS, "jammy-1.1", Duration::from_secs(60)).await;
    assert!(cloud_stemcells(&w).is_empty());
    assert!(list::<CompiledPackage>(&client).await.is_empty());
}
