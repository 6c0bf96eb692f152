//! `kubosh controller` end to end: a real etcd + kube-apiserver, a real nats-server, the
//! local cloud (`kubosh cpi`) with `kubosh agent` VMs, and the controller as its own process.
//! Resources go in with the API as `kubectl apply` sends them; what comes out is read back
//! as `kubectl get`/`describe` shows it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::director_world::{KUBOSH, World, cloud_config, hello_deployment, http_get, write_json};
use k8s_openapi::api::core::v1::Secret;
use kubosh_devenv::ControlPlane;
use kubosh_kube::api::{Deployment, Instance};

/// Secrets planted in the main scenario.
const PLANTED_VAR: &str = "planted-var-7f3a9c";
const PLANTED_CPI: &str = "planted-cpi-4b81d2";

/// The control plane of this test binary, with the CRDs installed.
pub(crate) async fn control_plane() -> &'static ControlPlane {
    ControlPlane::shared(kubosh_kube::api::crds)
        .await
        .expect("start etcd + kube-apiserver with the CRDs")
}

/// The controller process; killed when dropped.
pub(crate) struct ControllerProcess(pub(crate) Child);

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_controller(w: &World, cp: &ControlPlane, namespace: &str) -> ControllerProcess {
    start_replica(w, cp, namespace, "kubosh-e2e")
}

/// A controller process named `identity` (its log appended to `controller.log`).
pub(crate) fn start_replica(
    w: &World,
    cp: &ControlPlane,
    namespace: &str,
    identity: &str,
) -> ControllerProcess {
    start_replica_with(w, cp, namespace, identity, &[])
}

/// [`start_replica`] with more arguments.
pub(crate) fn start_replica_with(
    w: &World,
    cp: &ControlPlane,
    namespace: &str,
    identity: &str,
    more: &[&str],
) -> ControllerProcess {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(w.dir.path().join("controller.log"))
        .unwrap();
    let child = Command::new(KUBOSH)
        .args(["controller", "-d", &w.path("director.yml"), "-n", namespace])
        .args(["--identity", identity])
        .args(more)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env(
            "KUBOSH_LOG",
            "kubosh=debug,kubosh_kube=debug,kubosh_engine=debug,kubosh_cloud=debug,kubosh_transport=debug",
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("kubosh controller starts");
    ControllerProcess(child)
}

/// Applies `object` (server-side, as `kubectl apply --server-side`).
pub(crate) async fn apply(client: &kube::Client, namespace: &str, object: Value) {
    let kind = object["kind"].as_str().unwrap().to_string();
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let plural = match kind.as_str() {
        "Deployment" => "boshdeployments",
        "CloudConfig" => "cloudconfigs",
        "Release" => "releases",
        "Stemcell" => "stemcells",
        other => panic!("no plural for {other}"),
    };
    let resource = kube::api::ApiResource {
        group: "kubosh.io".into(),
        version: "v1alpha1".into(),
        api_version: "kubosh.io/v1alpha1".into(),
        kind: kind.clone(),
        plural: plural.into(),
    };
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource);
    api.patch(
        &name,
        &PatchParams::apply("e2e-user"),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
}

/// The world's cloud config, the hello release and the local stemcell, applied.
pub(crate) async fn apply_inputs(client: &kube::Client, namespace: &str, w: &World) {
    for object in [
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "CloudConfig",
               "metadata": {"name": "default"}, "spec": cloud_config(w.net)}),
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "Release",
               "metadata": {"name": "hello-1.0.0"},
               "spec": {"name": "hello", "version": "1.0.0",
                        "url": format!("file://{}", w.path("hello.tgz"))}}),
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "Stemcell",
               "metadata": {"name": "jammy-1.0"},
               "spec": {"name": "bosh-kubosh-local-ubuntu-jammy", "version": "1.0",
                        "url": format!("file://{}", w.path("stemcell.tgz"))}}),
    ] {
        apply(client, namespace, object).await;
    }
}

pub(crate) fn deployment_object(name: &str, manifest: Value) -> Value {
    let mut manifest = manifest;
    manifest.as_object_mut().unwrap().remove("name");
    json!({
        "apiVersion": "kubosh.io/v1alpha1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"manifest": manifest},
    })
}

/// `manifest` with a 64 MiB persistent disk on every instance.
fn with_disk(mut manifest: Value) -> Value {
    manifest["instance_groups"][0]["persistent_disk"] = json!(64);
    manifest
}

/// The condition `kind` of a deployment, if set for its current generation.
pub(crate) fn condition<'a>(
    d: &'a Deployment,
    kind: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    let status = d.status.as_ref()?;
    status
        .conditions
        .iter()
        .find(|c| c.type_ == kind && c.observed_generation == d.metadata.generation)
}

/// Polls the deployment until `done` says so, for at most `limit`; the last state seen.
pub(crate) async fn wait_for(
    api: &Api<Deployment>,
    name: &str,
    limit: Duration,
    w: &World,
    done: impl Fn(&Deployment) -> bool,
) -> Deployment {
    let start = Instant::now();
    loop {
        let d = api.get(name).await.unwrap();
        if done(&d) {
            return d;
        }
        if start.elapsed() > limit {
            let log =
                std::fs::read_to_string(w.dir.path().join("controller.log")).unwrap_or_default();
            let tail: String = log
                .lines()
                .rev()
                .take(60)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            panic!(
                "deployment {name} not there after {limit:?}: {}\ncontroller log:\n{tail}",
                serde_json::to_string_pretty(&d.status).unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Applies `Deployment` `object` in `namespace` as the test's own (server-side, forced); the
/// generation it got.
pub(crate) async fn apply_deployment(
    client: &kube::Client,
    namespace: &str,
    object: &Value,
) -> i64 {
    let name = object["metadata"]["name"].as_str().unwrap();
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply("e2e-user").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("apply deployment {name}: {e}"))
        .metadata
        .generation
        .unwrap()
}

/// Waits (at most 300 s) until deployment `name` is Ready at `generation`, its status having
/// observed it.
pub(crate) async fn ready_at(
    api: &Api<Deployment>,
    name: &str,
    w: &World,
    generation: i64,
) -> Deployment {
    wait_for(api, name, Duration::from_secs(300), w, |d| {
        d.metadata.generation == Some(generation)
            && d.status
                .as_ref()
                .is_some_and(|s| s.observed_generation == Some(generation))
            && is_ready(d)
    })
    .await
}

/// Deployment `name`'s engine state as the apiserver holds it.
pub(crate) async fn stored_state(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> kubosh_engine::state::DeploymentState {
    use kubosh_engine::state::StateStore;
    kubosh_kube::state::KubeStore::new(client.clone(), namespace, name, None)
        .load()
        .await
        .expect("the state loads from the apiserver")
}

pub(crate) fn is_ready(d: &Deployment) -> bool {
    condition(d, "Ready").is_some_and(|c| c.status == "True")
}

pub(crate) async fn events_of(client: &kube::Client, namespace: &str) -> Vec<Event> {
    let mut events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    events
}

fn reasons_about(events: &[Event], kind: &str, name: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .filter_map(|e| e.reason.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_deploys_updates_canary_first_and_an_invalid_manifest_stalls_with_no_cloud_call()
 {
    let cp = control_plane().await;
    let w = World::new(21);
    let ns = "ctrl-e2e";
    cp.create_namespace(ns).await.unwrap();
    let client = cp.client().await.unwrap();
    // Planted secrets: CPI credentials in the director configuration and a variable from a
    // Secret; neither may show in a log line, an Event or a status.
    let mut director: Value =
        serde_json::from_str(&std::fs::read_to_string(w.path("director.yml")).unwrap()).unwrap();
    director["cpi"]["properties"] = json!({"api_key": PLANTED_CPI});
    write_json(&w.dir.path().join("director.yml"), &director);
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "hello-vars"},
                "stringData": {"greeting": format!("hi {PLANTED_VAR}")},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let _controller = start_controller(&w, cp, ns);

    apply_inputs(&client, ns, &w).await;
    let mut hello = deployment_object("hello", with_disk(hello_deployment(w.port, "((greeting))")));
    hello["spec"]["varsFrom"] = json!([{"secretRef": {"name": "hello-vars"}}]);
    apply(&client, ns, hello).await;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = wait_for(
        &deployments,
        "hello",
        Duration::from_secs(300),
        &w,
        is_ready,
    )
    .await;
    let status = d.status.clone().unwrap();
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(status.instances.as_deref(), Some("2/2"));
    assert_eq!(status.up_to_date_instances, Some(2));
    assert_eq!(status.instance_groups[0].name, "web");
    assert_eq!(
        (
            status.instance_groups[0].desired,
            status.instance_groups[0].ready
        ),
        (2, 2)
    );
    assert!(condition(&d, "Stalled").is_some_and(|c| c.status == "False"));
    assert!(condition(&d, "Reconciling").is_some_and(|c| c.status == "False"));
    assert_eq!(
        status.last_task.as_ref().map(|t| t.state),
        Some(kubosh_kube::api::TaskState::Succeeded)
    );

    // `kubectl get instances`: every instance with its IP, VM and process state; the job
    // answers on its port.
    let instances = Api::<Instance>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(instances.len(), 2);
    for i in &instances {
        assert_eq!(i.spec.deployment, "hello");
        assert!(i.spec.vm_cid.is_some(), "{:?}", i.spec);
        let ip = i.spec.networks[0].ip.clone().expect("an IP");
        assert!(ip.starts_with("127.0.21."), "{ip}");
        let body = http_get(&ip, w.port).unwrap_or_default();
        // The variable from the Secret reached the job.
        assert!(body.contains(&format!("hi {PLANTED_VAR}")), "{ip}: {body}");
        let st = i.status.clone().unwrap_or_default();
        assert_eq!(
            st.process_state,
            Some(kubosh_kube::api::ProcessState::Running)
        );
    }
    let out = cp
        .kubectl()
        .unwrap()
        .args(["get", "instances", "-n", ns])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("127.0.21.") && table.contains("Running"),
        "{table}"
    );

    // `kubectl describe boshdeployment hello` lists the milestones.
    let events = events_of(&client, ns).await;
    let about = reasons_about(&events, "Deployment", "hello");
    for reason in [
        "DeployStarted",
        "PackagesCompiled",
        "CanaryUpdated",
        "DeploySucceeded",
    ] {
        assert!(about.contains(&reason.to_string()), "{reason} in {about:?}");
    }

    // A property changes: Reconciling at generation 2, the canary first, then Ready.
    let mut manifest = with_disk(hello_deployment(w.port, "hello again"));
    manifest.as_object_mut().unwrap().remove("name");
    deployments
        .patch(
            "hello",
            &PatchParams::apply("e2e-user"),
            &Patch::Apply(&deployment_object("hello", manifest)),
        )
        .await
        .unwrap();
    let reconciling = wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        condition(d, "Reconciling").is_some_and(|c| c.status == "True") || is_ready(d)
    })
    .await;
    assert_eq!(reconciling.metadata.generation, Some(2));
    let d = wait_for(
        &deployments,
        "hello",
        Duration::from_secs(300),
        &w,
        is_ready,
    )
    .await;
    assert_eq!(d.status.as_ref().unwrap().observed_generation, Some(2));
    let ip = instances[0].spec.networks[0].ip.clone().unwrap();
    assert!(
        http_get(&ip, w.port)
            .unwrap_or_default()
            .contains("hello again")
    );
    let events = events_of(&client, ns).await;
    let at = |e: &Event| e.event_time.as_ref().map(|t| t.0).unwrap();
    let second = events
        .iter()
        .find(|e| {
            e.reason.as_deref() == Some("DeployStarted")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("generation 2"))
        })
        .map(at)
        .expect("the second deploy started");
    let since = |reason: &str| -> Vec<_> {
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(at)
            .filter(|t| *t >= second)
            .collect()
    };
    let (canaries, updated) = (since("CanaryUpdated"), since("InstanceUpdated"));
    assert_eq!((canaries.len(), updated.len()), (1, 1), "{events:?}");
    assert!(canaries[0] <= updated[0], "the canary first");

    // Instance actions and a reconcile request, as annotations: each acknowledged in the
    // status once handled.
    let ask = |key: &'static str, value: &'static str| {
        let deployments = deployments.clone();
        let w = &w;
        async move {
            deployments
                .patch(
                    "hello",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
                )
                .await
                .unwrap();
            let field = if key == "kubosh.io/action" {
                "lastHandledAction"
            } else {
                "lastHandledReconcileRequest"
            };
            wait_for(&deployments, "hello", Duration::from_secs(120), w, |d| {
                serde_json::to_value(&d.status).unwrap()[field] == json!(value)
            })
            .await
        }
    };
    let instance = |index: i32| {
        let client = client.clone();
        async move {
            Api::<Instance>::namespaced(client, ns)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|i| i.spec.index == index)
                .unwrap()
        }
    };
    let web0 = instance(0).await;
    let ip0 = web0.spec.networks[0].ip.clone().unwrap();
    let d = ask("kubosh.io/action", "stop web/0").await;
    assert_eq!(
        d.status
            .as_ref()
            .unwrap()
            .last_task
            .as_ref()
            .unwrap()
            .description,
        "stop web/0"
    );
    assert_eq!(http_get(&ip0, w.port), None, "web/0 is stopped");
    assert_eq!(
        instance(0).await.spec.state,
        kubosh_kube::api::InstanceState::Stopped
    );
    let ip1 = instance(1).await.spec.networks[0].ip.clone().unwrap();
    assert!(http_get(&ip1, w.port).is_some(), "web/1 still runs");
    ask("kubosh.io/action", "start web/0").await;
    assert!(http_get(&ip0, w.port).is_some(), "web/0 runs again");
    let vm1 = instance(1).await.spec.vm_cid;
    ask("kubosh.io/action", "recreate web/1").await;
    let web1 = instance(1).await;
    assert_ne!(web1.spec.vm_cid, vm1, "web/1 has a new VM");
    assert_eq!(instance(0).await.spec.vm_cid, web0.spec.vm_cid);
    ask("kubosh.io/action", "reboot web/1").await;
    let events = events_of(&client, ns).await;
    assert!(reasons_about(&events, "Deployment", "hello").contains(&"InvalidAction".to_string()));
    ask("kubosh.io/reconcile-request", "2026-11-25T10:00:00Z").await;

    // An invalid manifest: Stalled with the validator's words, and no call to the cloud.
    let calls = w.calls();
    let mut bad = hello_deployment(w.port, "x");
    bad["instance_groups"][0]["vm_type"] = json!("huge");
    bad["instance_groups"][0]["networks"] = json!([{"name": "nope"}]);
    apply(&client, ns, deployment_object("broken", bad)).await;
    let d = wait_for(&deployments, "broken", Duration::from_secs(60), &w, |d| {
        condition(d, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    let message = condition(&d, "Stalled").unwrap().message.clone();
    assert!(
        message.contains("huge") && message.contains("nope"),
        "{message}"
    );
    assert_eq!(condition(&d, "Stalled").unwrap().reason, "InvalidManifest");
    assert!(condition(&d, "Ready").is_some_and(|c| c.status == "False"));
    assert_eq!(w.calls(), calls, "an invalid manifest calls no CPI method");
    let events = events_of(&client, ns).await;
    assert!(
        reasons_about(&events, "Deployment", "broken").contains(&"InvalidManifest".to_string())
    );

    // Every status, while everything exists (checked for planted secrets at the end).
    let statuses = serde_json::to_string(&(
        deployments
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|d| d.status)
            .collect::<Vec<_>>(),
        Api::<Instance>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|i| i.status)
            .collect::<Vec<_>>(),
    ))
    .unwrap();
    assert!(statuses.contains("observedGeneration"), "{statuses}");

    // Deleting with `deletionPolicy: Orphan`: the VMs go, the disks stay as orphans (their
    // Disk resources outlive the deployment), the finalizer lets the resource go.
    deployments
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deletionPolicy": "Orphan"}})),
        )
        .await
        .unwrap();
    let d = deployments.get("hello").await.unwrap();
    assert!(d.finalizers().contains(&"kubosh.io/deployment".to_string()));
    deployments
        .delete("hello", &Default::default())
        .await
        .unwrap();
    let start = Instant::now();
    while deployments.get_opt("hello").await.unwrap().is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "hello is still there"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let inventory = kubosh_cloud::local::inventory(&w.cloud()).unwrap();
    assert!(inventory.vms.is_empty(), "{inventory:?}");
    assert_eq!(inventory.disks.len(), 2);
    let disks = Api::<kubosh_kube::api::Disk>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(disks.len(), 2);
    assert!(
        disks
            .iter()
            .all(|d| d.spec.orphaned && d.owner_references().is_empty())
    );
    let left = Api::<Instance>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(left.is_empty(), "{left:?}");

    // Nothing planted leaked: not in the controller's log (debug level), an Event, or the
    // status of any resource.
    let log = std::fs::read_to_string(w.dir.path().join("controller.log")).unwrap();
    assert!(log.lines().count() > 50, "the controller logged");
    let events = serde_json::to_string(&events_of(&client, ns).await).unwrap();
    for planted in [PLANTED_VAR, PLANTED_CPI] {
        assert!(!log.contains(planted), "{planted} in the controller log");
        assert!(!events.contains(planted), "{planted} in an Event");
        assert!(!statuses.contains(planted), "{planted} in a status");
    }
}
