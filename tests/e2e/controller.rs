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

/// Runs `kubectl` with `args`; its stdout. It must succeed.
pub(crate) fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    let out = cp.kubectl().unwrap().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What Argo CD (our `health.lua` run by Argo CD's own Lua evaluation) and kstatus (what Flux
/// waits on) say of `deployment` as the API server holds it: `(argo status, kstatus status)`,
/// both computed by their upstream code (`gitops-health`, built by tools/testbins.sh).
pub(crate) fn gitops_verdicts(deployment: &Deployment) -> (String, String) {
    gitops_verdicts_of(deployment, "Deployment")
}

/// [`gitops_verdicts`] of `object`, a kubosh resource of kind `kind`.
pub(crate) fn gitops_verdicts_of<K: serde::Serialize>(object: &K, kind: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("object.json");
    std::fs::write(&file, serde_json::to_vec(object).unwrap()).unwrap();
    let check = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("deploy/argocd/kubosh.io/{kind}/health.lua"));
    let tool = kubosh_devenv::binary("gitops-health").expect("gitops-health is built");
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(&tool).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let verdict: Value = serde_json::from_slice(&out.stdout).unwrap();
        verdict["status"].as_str().unwrap().to_string()
    };
    let argo = run(&[
        "argo".as_ref(),
        "-o".as_ref(),
        "json".as_ref(),
        check.as_os_str(),
        file.as_os_str(),
    ]);
    let kstatus = run(&[
        "kstatus".as_ref(),
        "-o".as_ref(),
        "json".as_ref(),
        file.as_os_str(),
    ]);
    (argo, kstatus)
}

/// The value of metric `name` with (at least) `labels` in OpenMetrics text; 0 when absent.
pub(crate) fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .sum()
}

/// `/metrics` of the controller about to serve on `port` (waits for it to listen).
pub(crate) fn scrape_when_up(port: u16) -> String {
    let start = Instant::now();
    loop {
        if let Some((200, body)) =
            crate::director_world::http_request("127.0.0.1", port, "/metrics")
        {
            return body;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "/metrics never served"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `/metrics` of the controller serving on `port`.
pub(crate) fn scrape(port: u16) -> String {
    match crate::director_world::http_request("127.0.0.1", port, "/metrics") {
        Some((200, body)) => body,
        other => panic!("GET /metrics: {other:?}"),
    }
}

/// The world's agents heartbeat every second (BOSH: 30 s), so a controller with a short
/// `--agent-timeout` notices a silent one quickly.
pub(crate) fn with_fast_heartbeats(w: &World) {
    let path = w.dir.path().join("cpi.json");
    let mut cpi: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let command = cpi["agent"]["command"].as_array_mut().unwrap();
    command.extend([json!("--heartbeat-interval"), json!("1")]);
    write_json(&path, &cpi);
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
    let mut args = vec!["-n", namespace, "--identity", identity];
    args.extend(more);
    start_replica_with_kubeconfig(w, cp.kubeconfig_path(), &args, &[])
}

/// `kubosh controller -d <the world's director.yml> <args>` as the user of `kubeconfig`,
/// with `env` (its log appended to `controller.log`).
pub(crate) fn start_replica_with_kubeconfig(
    w: &World,
    kubeconfig: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> ControllerProcess {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(w.dir.path().join("controller.log"))
        .unwrap();
    // Each process its own metrics port, unless the test chose one.
    let metrics: &[&str] = if args.contains(&"--metrics-bind-address") {
        &[]
    } else {
        &["--metrics-bind-address", "127.0.0.1:0"]
    };
    let child = Command::new(KUBOSH)
        .args(["controller", "-d", &w.path("director.yml")])
        .args(metrics)
        .args(args)
        .envs(env.iter().copied())
        .env("KUBECONFIG", kubeconfig)
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
        "RuntimeConfig" => "runtimeconfigs",
        "CpiConfig" => "cpiconfigs",
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
pub(crate) fn with_disk(mut manifest: Value) -> Value {
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

/// Sets annotation `key` of deployment `hello` to `value` (an action, a reconcile request).
pub(crate) async fn annotate(deployments: &Api<Deployment>, key: &str, value: &str) {
    deployments
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .unwrap();
}

/// Waits (a minute at most) for deployment `name` to be Stalled for `reason` with a message
/// containing `says`.
pub(crate) async fn assert_stalls(
    api: &Api<Deployment>,
    name: &str,
    w: &World,
    reason: &str,
    says: &str,
) {
    let d = wait_for(api, name, Duration::from_secs(60), w, |d| {
        condition(d, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    let stalled = condition(&d, "Stalled").unwrap();
    assert_eq!(stalled.reason, reason, "{}", stalled.message);
    assert!(stalled.message.contains(says), "{}", stalled.message);
}

/// Waits (three minutes at most) until deployment `name` is gone (its deletion finished).
pub(crate) async fn wait_gone(deployments: &Api<Deployment>, name: &str) {
    let start = Instant::now();
    while deployments.get_opt(name).await.unwrap().is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "{name} is still there"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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
            let tail = w.controller_log_tail();
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

fn vm_of_instance(i: &Instance) -> Option<String> {
    i.spec.vm_cid.clone()
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

pub(crate) fn reasons_about(events: &[Event], kind: &str, name: &str) -> Vec<String> {
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
    with_fast_heartbeats(&w);
    let metrics_port = crate::director_world::free_port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let _controller = start_replica_with(
        &w,
        cp,
        ns,
        "kubosh-e2e",
        &[
            "--agent-timeout",
            "6s",
            "--metrics-bind-address",
            &metrics_addr,
            "--log-format",
            "json",
        ],
    );

    apply_inputs(&client, ns, &w).await;
    let mut hello = deployment_object("hello", with_disk(hello_deployment(w.port, "((greeting))")));
    hello["spec"]["varsFrom"] = json!([{"secretRef": {"name": "hello-vars"}}]);
    let file = w.dir.path().join("hello-deployment.json");
    write_json(&file, &hello);
    let before = scrape_when_up(metrics_port);
    // While the deploy runs, /metrics shows it running.
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let running_seen = std::thread::spawn({
        let watching = watching.clone();
        move || {
            let mut seen = false;
            while watching.load(std::sync::atomic::Ordering::SeqCst) && !seen {
                seen = metric(&scrape(metrics_port), "kubosh_deploys_running", &[]) >= 1.0;
                std::thread::sleep(Duration::from_millis(200));
            }
            seen
        }
    });
    kubectl(
        cp,
        &[
            "apply",
            "--server-side",
            "-n",
            ns,
            "-f",
            file.to_str().unwrap(),
        ],
    );
    kubectl(
        cp,
        &[
            "wait",
            "-n",
            ns,
            "--for=condition=Ready",
            "boshdeployment/hello",
            "--timeout=300s",
        ],
    );
    watching.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(
        running_seen.join().unwrap(),
        "/metrics showed the deploy running"
    );
    // The counters moved: CPI and agent calls by method, the deploy, the reconciles; the
    // instances by state; this process leads.
    let after = scrape(metrics_port);
    let moved = |name: &str, labels: &[(&str, &str)]| {
        metric(&after, name, labels) - metric(&before, name, labels)
    };
    let calls = "kubosh_cpi_call_duration_seconds_count";
    assert!(
        moved(calls, &[("method", "create_vm"), ("result", "ok")]) >= 2.0,
        "{after}"
    );
    assert!(moved(calls, &[("method", "create_disk"), ("result", "ok")]) >= 2.0);
    let agent_calls = "kubosh_agent_call_duration_seconds_count";
    assert!(
        moved(agent_calls, &[("method", "apply"), ("result", "ok")]) >= 2.0,
        "{after}"
    );
    assert_eq!(
        moved(
            "kubosh_deploy_duration_seconds_count",
            &[("result", "succeeded")]
        ),
        1.0
    );
    assert!(
        moved(
            "kubosh_reconcile_duration_seconds_count",
            &[("controller", "deployment")]
        ) >= 1.0
    );
    assert_eq!(metric(&after, "kubosh_deploys_running", &[]), 0.0);
    assert_eq!(metric(&after, "kubosh_leader", &[]), 1.0);
    // JSON log lines, those of the deploy in its span, an instance's in the instance's.
    let log = std::fs::read_to_string(w.dir.path().join("controller.log")).unwrap();
    let lines: Vec<Value> = (log.lines())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let in_span = |name: &str, field: &str, value: &str| {
        lines.iter().any(|l| {
            l["spans"].as_array().is_some_and(|spans| {
                spans.iter().any(|s| {
                    s["name"] == name && s[field].as_str().is_some_and(|v| v.contains(value))
                })
            })
        })
    };
    assert!(
        in_span("deploy", "deployment", "hello"),
        "a line of the deploy's span"
    );
    assert!(
        in_span("instance", "instance", "web/"),
        "a line of an instance's span"
    );

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = deployments.get("hello").await.unwrap();
    // GitOps health, by Argo CD's and kstatus' own code, at each phase of this scenario.
    let healthy = || ("Healthy".to_string(), "Current".to_string());
    assert_eq!(gitops_verdicts(&d), healthy(), "deployed");
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
    let table = kubectl(cp, &["get", "instances", "-n", ns]);
    for i in &instances {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("{} ", i.name_any())))
            .unwrap_or_else(|| panic!("{} in\n{table}", i.name_any()));
        let cells: Vec<&str> = row.split_whitespace().collect();
        let expected = [
            i.name_any(),
            "hello".into(),
            "web".into(),
            i.spec.index.to_string(),
            "z1".into(),
            i.spec.networks[0].ip.clone().unwrap(),
            i.spec.vm_cid.clone().unwrap(),
            "Running".into(),
        ];
        assert_eq!(&cells[..8], &expected, "{table}");
    }

    // `kubectl describe` lists the milestones: the deployment's, and each instance's own.
    let described = kubectl(cp, &["describe", "boshdeployment", "hello", "-n", ns]);
    for reason in [
        "DeployStarted",
        "PackagesCompiled",
        "CanaryUpdated",
        "DNSSynced",
        "DeploySucceeded",
    ] {
        assert!(described.contains(reason), "{reason} in\n{described}");
    }
    for i in &instances {
        let described = kubectl(cp, &["describe", "instance", &i.name_any(), "-n", ns]);
        let vm = i.spec.vm_cid.clone().unwrap();
        assert!(
            described.contains("VMCreated") && described.contains(&vm),
            "VMCreated of {vm} in\n{described}"
        );
        assert!(described.contains("DiskCreated"), "{described}");
    }

    // A property changes: Reconciling at generation 2, the canary first, then Ready.
    hello["spec"]["manifest"]["instance_groups"][0]["jobs"][0]["properties"]["hello"]["greeting"] =
        json!("hello again");
    write_json(&file, &hello);
    kubectl(
        cp,
        &[
            "apply",
            "--server-side",
            "-n",
            ns,
            "-f",
            file.to_str().unwrap(),
        ],
    );
    // Every state the status goes through, until Ready at generation 2.
    let mut seen = Vec::new();
    let mut deploying_verdicts = None;
    let start = Instant::now();
    let d = loop {
        let d = deployments.get("hello").await.unwrap();
        let reconciling = condition(&d, "Reconciling").filter(|c| c.status == "True");
        if let Some(c) = reconciling {
            seen.push(c.message.clone());
            if deploying_verdicts.is_none() {
                deploying_verdicts = Some(gitops_verdicts(&d));
            }
        }
        if d.metadata.generation == Some(2) && is_ready(&d) {
            break d;
        }
        assert!(start.elapsed() < Duration::from_secs(300), "{seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        seen.iter().any(|m| m.starts_with("Deploying generation 2")),
        "Reconciling at generation 2 before Ready: {seen:?}"
    );
    assert_eq!(
        deploying_verdicts,
        Some(("Progressing".to_string(), "InProgress".to_string())),
        "deploying"
    );
    assert_eq!(gitops_verdicts(&d), healthy(), "deployed again");
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
    assert!(canaries[0] < updated[0], "the canary first");
    // What it would change was said before anything changed.
    let planned: Vec<&str> = (events.iter())
        .filter(|e| e.reason.as_deref() == Some("DeployPlanned"))
        .filter_map(|e| e.note.as_deref())
        .collect();
    assert!(
        planned.contains(&"Generation 2: web: 2 to update (configuration)"),
        "{planned:?}"
    );
    assert!(since("DeployPlanned")[0] <= canaries[0], "{events:?}");

    // Instance actions and a reconcile request, as annotations: each acknowledged in the
    // status once handled.
    let ask = |key: &'static str, value: &'static str| {
        let deployments = deployments.clone();
        let w = &w;
        async move {
            annotate(&deployments, key, value).await;
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
    let events = events_of(&client, ns).await;
    assert!(
        reasons_about(&events, "Instance", &web1.name_any()).contains(&"VMRecreated".to_string()),
        "{events:?}"
    );

    // The status wiped (as a restore without status does): the action is not run again,
    // and the status gets its acknowledgement back.
    kubectl(
        cp,
        &[
            "patch",
            "boshdeployment",
            "hello",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":null}"#,
        ],
    );
    // (The controller may write parts of it back at once, e.g. the health watch's
    // counters: what matters is that the request below finds no acknowledgement there.)
    let d = ask("kubosh.io/reconcile-request", "after-the-wipe").await;
    assert_eq!(
        d.status.as_ref().unwrap().last_handled_action.as_deref(),
        Some("recreate web/1")
    );
    assert_eq!(
        instance(1).await.spec.vm_cid,
        web1.spec.vm_cid,
        "not recreated again"
    );

    // stop --hard deletes the VM and keeps the disk; start gives it a new VM with the disk.
    let disk0 = web0.spec.disk_cids.clone();
    ask("kubosh.io/action", "stop --hard web/0").await;
    let detached = instance(0).await;
    assert_eq!(
        detached.spec.state,
        kubosh_kube::api::InstanceState::Detached
    );
    assert_eq!(detached.spec.vm_cid, None);
    assert_eq!(detached.spec.disk_cids, disk0);
    ask("kubosh.io/action", "start web/0").await;
    let back = instance(0).await;
    assert!(back.spec.vm_cid.is_some() && back.spec.vm_cid != web0.spec.vm_cid);
    assert_eq!(back.spec.disk_cids, disk0, "the same disk");
    let ip = back.spec.networks[0].ip.clone().unwrap();
    assert!(http_get(&ip, w.port).is_some(), "web/0 runs on its new VM");
    let about0 = reasons_about(&events_of(&client, ns).await, "Instance", &back.name_any());
    for reason in ["VMDeleted", "VMCreated"] {
        assert!(
            about0.contains(&reason.to_string()),
            "{reason} in {about0:?}"
        );
    }

    // A group-wide restart: every instance of the group, VMs kept.
    let updates = || async {
        let events = events_of(&client, ns).await;
        (events.iter())
            .filter(|e| {
                matches!(
                    e.reason.as_deref(),
                    Some("InstanceUpdated" | "CanaryUpdated")
                )
            })
            .count()
    };
    let updated_before = updates().await;
    let d = ask("kubosh.io/action", "restart web").await;
    assert_eq!(
        d.status
            .as_ref()
            .unwrap()
            .last_task
            .as_ref()
            .unwrap()
            .description,
        "restart web"
    );
    let updated_after = updates().await;
    assert_eq!(
        updated_after - updated_before,
        2,
        "both web instances restarted"
    );
    assert_eq!(instance(0).await.spec.vm_cid, back.spec.vm_cid);

    // spec.paused during a deployment-wide recreate: the canary (in flight) finishes, no
    // other instance is touched, the status says why; unpaused, the recreate goes on.
    let faults = kubosh_cloud::local::Faults {
        methods: [(
            "create_vm".to_string(),
            kubosh_cloud::local::Fault {
                hang: Some(kubosh_cloud::local::Hang { seconds: Some(3.0) }),
                ..Default::default()
            },
        )]
        .into(),
        ..Default::default()
    };
    faults.save(&w.cloud()).unwrap();
    let vms_before = [instance(0).await.spec.vm_cid, instance(1).await.spec.vm_cid];
    // Calls of create_vm begun (a hang is logged as it begins) and answered.
    let create_vms = |answered: bool| {
        kubosh_cloud::local::read_calls(&w.cloud())
            .unwrap()
            .iter()
            .filter(|c| c.method == "create_vm" && (!answered || c.fault.is_none()))
            .count()
    };
    let (begun, created) = (create_vms(false), create_vms(true));
    deployments
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"kubosh.io/action": "recreate"}}})),
        )
        .await
        .unwrap();
    let start = Instant::now();
    while create_vms(false) == begun {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no VM is being created"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    deployments
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    let d = wait_for(&deployments, "hello", Duration::from_secs(120), &w, |d| {
        condition(d, "Reconciling").is_some_and(|c| c.reason == "Paused")
    })
    .await;
    assert!(condition(&d, "Stalled").is_some_and(|c| c.status == "False"));
    assert_eq!(
        gitops_verdicts(&d),
        ("Suspended".to_string(), "InProgress".to_string()),
        "paused after an interrupted deploy"
    );
    let now = [instance(0).await.spec.vm_cid, instance(1).await.spec.vm_cid];
    let recreated = (0..2).filter(|i| now[*i] != vms_before[*i]).count();
    assert_eq!(
        recreated, 1,
        "only the canary was recreated: {vms_before:?} -> {now:?}"
    );
    assert_eq!(create_vms(true), created + 1, "no other VM was asked for");
    assert!(
        reasons_about(&events_of(&client, ns).await, "Deployment", "hello")
            .contains(&"DeployCancelled".to_string())
    );
    kubosh_cloud::local::Faults::clear(&w.cloud()).unwrap();
    deployments
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    let generation = deployments
        .get("hello")
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    let d = ready_at(&deployments, "hello", &w, generation).await;
    assert_eq!(
        d.status.as_ref().unwrap().last_handled_action.as_deref(),
        Some("recreate")
    );
    let after = [instance(0).await.spec.vm_cid, instance(1).await.spec.vm_cid];
    assert!(
        after[0] != now[0] && after[1] != now[1],
        "the recreate went on"
    );

    // Between deploys, the instances' state follows their agents: a silent agent makes its
    // instance Unresponsive (an Event, the group's failing counter, Ready false and Stalled
    // saying it is not resurrected: resurrection is off here), and it recovers.
    deployments
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resurrection": false}})),
        )
        .await
        .unwrap();
    let generation = generation + 1;
    ready_at(&deployments, "hello", &w, generation).await;
    let web1 = instance(1).await;
    let vm = kubosh_cloud::VmCid(web1.spec.vm_cid.clone().unwrap());
    kubosh_cloud::local::set_agent_frozen(&w.cloud(), &vm, true).unwrap();
    let d = wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        d.status
            .as_ref()
            .is_some_and(|s| s.instance_groups.first().is_some_and(|g| g.failing == 1))
    })
    .await;
    assert_eq!(d.status.as_ref().unwrap().instances.as_deref(), Some("1/2"));
    let d = wait_for(&deployments, "hello", Duration::from_secs(30), &w, |d| {
        condition(d, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    assert!(!is_ready(&d), "not Ready while an instance is down");
    assert_eq!(condition(&d, "Stalled").unwrap().reason, "ResurrectionOff");
    assert_eq!(
        gitops_verdicts(&d),
        ("Degraded".to_string(), "Failed".to_string())
    );
    let state = |i: &Instance| i.status.as_ref().and_then(|s| s.process_state);
    assert_eq!(
        state(&instance(1).await),
        Some(kubosh_kube::api::ProcessState::Unresponsive)
    );
    let table = kubectl(cp, &["get", "instances", "-n", ns]);
    assert!(table.contains("Unresponsive"), "{table}");
    kubosh_cloud::local::set_agent_frozen(&w.cloud(), &vm, false).unwrap();
    let d = wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        d.status.as_ref().and_then(|s| s.instances.as_deref()) == Some("2/2")
    })
    .await;
    assert_eq!(d.status.as_ref().unwrap().instance_groups[0].failing, 0);
    // The Instance's own status is a write of its own, after the deployment's count.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while state(&instance(1).await) != Some(kubosh_kube::api::ProcessState::Running) {
        assert!(
            std::time::Instant::now() < deadline,
            "web/1 is {:?}, not Running, 30 s after the deployment counted it",
            state(&instance(1).await)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let d = wait_for(&deployments, "hello", Duration::from_secs(30), &w, is_ready).await;
    assert_eq!(
        vm_of_instance(&instance(1).await),
        vm_of_instance(&web1),
        "not recreated"
    );
    assert!(condition(&d, "Stalled").is_some_and(|c| c.status == "False"));
    let about1 = reasons_about(&events_of(&client, ns).await, "Instance", &web1.name_any());
    for reason in ["AgentUnresponsive", "InstanceRecovered"] {
        assert!(
            about1.contains(&reason.to_string()),
            "{reason} in {about1:?}"
        );
    }

    // A cloud config that breaks the running deployment: Stalled with the validator's
    // words, nothing called; fixed, Ready again.
    let calls = w.calls();
    let mut broken_cc = cloud_config(w.net);
    broken_cc["vm_types"] = json!([{"name": "large", "cloud_properties": {}}]);
    apply(
        &client,
        ns,
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "CloudConfig",
               "metadata": {"name": "default"}, "spec": broken_cc}),
    )
    .await;
    let d = wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        condition(d, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    let stalled = condition(&d, "Stalled").unwrap();
    assert_eq!(stalled.reason, "InvalidManifest");
    assert!(stalled.message.contains("small"), "{}", stalled.message);
    assert_eq!(
        w.calls(),
        calls,
        "a broken cloud config calls no CPI method"
    );
    // Fixed by a second, named cloud config with the VM types: the namespace's CloudConfigs
    // merge as the Director merges named cloud configs.
    let mut without_vm_types = cloud_config(w.net);
    let vm_types = without_vm_types["vm_types"].take();
    without_vm_types.as_object_mut().unwrap().remove("vm_types");
    let apply_cloud_config = |name: &'static str, spec: Value| {
        let client = client.clone();
        async move {
            let object = json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "CloudConfig",
                                "metadata": {"name": name}, "spec": spec});
            apply(&client, ns, object).await
        }
    };
    let hello_ready = || {
        wait_for(
            &deployments,
            "hello",
            Duration::from_secs(120),
            &w,
            is_ready,
        )
    };
    apply_cloud_config("default", without_vm_types).await;
    apply_cloud_config("vm-types", json!({ "vm_types": vm_types })).await;
    hello_ready().await;
    // A VM type defined again by a third: an error naming both, until it goes.
    apply_cloud_config("again", json!({ "vm_types": vm_types })).await;
    assert_stalls(
        &deployments,
        "hello",
        &w,
        "InvalidCloudConfig",
        "vm_types 'small' is defined in cloud config 'again' (vm_types[0]) and in cloud config 'vm-types' (vm_types[0])",
    )
    .await;
    Api::<kubosh_kube::api::CloudConfig>::namespaced(client.clone(), ns)
        .delete("again", &Default::default())
        .await
        .unwrap();
    hello_ready().await;
    assert_eq!(w.calls(), calls, "merging cloud configs changed nothing");

    // The Secret of a variable deleted: the deployment waits, naming it; back, Ready.
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    let kept = secrets.get("hello-vars").await.unwrap();
    secrets
        .delete("hello-vars", &Default::default())
        .await
        .unwrap();
    let calls = w.calls();
    deployments
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"kubosh.io/reconcile-request": "secret-gone"}}})),
        )
        .await
        .unwrap();
    let d = wait_for(&deployments, "hello", Duration::from_secs(60), &w, |d| {
        condition(d, "Reconciling").is_some_and(|c| c.reason == "Waiting")
    })
    .await;
    let waiting = condition(&d, "Reconciling").unwrap().message.clone();
    assert_eq!(
        gitops_verdicts(&d),
        ("Progressing".to_string(), "InProgress".to_string()),
        "waiting for a Secret"
    );
    assert!(
        waiting.contains("Secret ctrl-e2e/hello-vars (spec.varsFrom[0]) does not exist"),
        "{waiting}"
    );
    assert_eq!(w.calls(), calls);
    let mut again = kept.clone();
    again.metadata = kube::api::ObjectMeta {
        name: Some("hello-vars".into()),
        ..Default::default()
    };
    secrets.create(&Default::default(), &again).await.unwrap();
    wait_for(
        &deployments,
        "hello",
        Duration::from_secs(180),
        &w,
        is_ready,
    )
    .await;
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
    assert_eq!(
        gitops_verdicts(&d),
        ("Degraded".to_string(), "Failed".to_string()),
        "an invalid manifest"
    );
    assert!(
        message.contains("huge") && message.contains("nope"),
        "{message}"
    );
    assert_eq!(condition(&d, "Stalled").unwrap().reason, "InvalidManifest");
    // In the words of `kubosh validate`, every problem.
    let mut named = hello_deployment(w.port, "x");
    named["name"] = json!("broken");
    named["instance_groups"][0]["vm_type"] = json!("huge");
    named["instance_groups"][0]["networks"] = json!([{"name": "nope"}]);
    let manifest_file = w.dir.path().join("broken.yml");
    write_json(&manifest_file, &named);
    let out = Command::new(KUBOSH)
        .args(["validate", manifest_file.to_str().unwrap()])
        .args(["--cloud-config", &w.path("cloud-config.yml")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.ends_with("nothing was deployed"))
        .map(String::from)
        .collect();
    assert!(said.len() >= 2, "{said:?}");
    assert_eq!(message.lines().collect::<Vec<_>>(), said, "the same words");
    assert!(condition(&d, "Ready").is_some_and(|c| c.status == "False"));
    assert_eq!(w.calls(), calls, "an invalid manifest calls no CPI method");
    let events = events_of(&client, ns).await;
    assert!(
        reasons_about(&events, "Deployment", "broken").contains(&"InvalidManifest".to_string())
    );

    // A manifest that is invalid because of a variable's value: the validator quotes the
    // value, and the condition and Event say `<redacted>` instead (checked with the other
    // planted secrets at the end).
    let mut leaky = hello_deployment(w.port, "x");
    leaky["instance_groups"][0]["vm_type"] = json!("((greeting))");
    let mut leaky = deployment_object("leaky", leaky);
    leaky["spec"]["varsFrom"] = json!([{"secretRef": {"name": "hello-vars"}}]);
    apply(&client, ns, leaky).await;
    let d = wait_for(&deployments, "leaky", Duration::from_secs(60), &w, |d| {
        condition(d, "Stalled").is_some_and(|c| c.status == "True")
    })
    .await;
    let message = condition(&d, "Stalled").unwrap().message.clone();
    assert_eq!(condition(&d, "Stalled").unwrap().reason, "InvalidManifest");
    assert!(message.contains("<redacted>"), "{message}");

    // A release version no `Release` of the namespace has: the Director's words, with the
    // versions there are, not a wait.
    let mut wrong = hello_deployment(w.port, "x");
    wrong["releases"][0]["version"] = json!("9.9.9");
    apply(&client, ns, deployment_object("wrong-version", wrong)).await;
    assert_stalls(
        &deployments,
        "wrong-version",
        &w,
        "InvalidManifest",
        "releases[0].version: Release version 'hello/9.9.9' doesn't exist (available: hello/",
    )
    .await;

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
    let deleting = deployments
        .delete("hello", &Default::default())
        .await
        .unwrap();
    let deleting = deleting.left().expect("held by its finalizer");
    assert_eq!(
        gitops_verdicts(&deleting),
        ("Progressing".to_string(), "Terminating".to_string()),
        "being deleted"
    );
    wait_gone(&deployments, "hello").await;
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
    // Its state and deployed spec, which have no owner, went with it.
    let state = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&kubosh_kube::state::KubeStore::state_name("hello"))
        .await
        .unwrap();
    assert!(state.is_none(), "{state:?}");
    let kept = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
        .get_opt(&kubosh_kube::deployed_spec::DeployedSpec::name("hello"))
        .await
        .unwrap();
    assert!(kept.is_none(), "{kept:?}");
    // The orphans outlive their deployment, and `kubectl delete` deletes them from the cloud.
    kubectl(
        cp,
        &["delete", "disks", "--all", "-n", ns, "--timeout=120s"],
    );
    let inventory = kubosh_cloud::local::inventory(&w.cloud()).unwrap();
    assert!(inventory.disks.is_empty(), "{inventory:?}");

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

/// Whatever a deployment lacks is said at once, in one status, and nothing is called: the
/// cloud config, a Secret of `varsFrom`, the release and the stemcell; then a Release whose
/// tarball is not one is named with the reason it is not Ready. Then links across
/// deployments: a consumer of a deployment that does not exist stalls saying so, deploys by
/// itself once its provider does, with the provider's addresses, and follows it when it
/// scales out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_inputs_are_one_status_with_no_cloud_call_and_links_follow_their_provider() {
    let cp = control_plane().await;
    let w = World::new(24);
    let ns = "ctrl-inputs";
    cp.create_namespace(ns).await.unwrap();
    let client = cp.client().await.unwrap();
    let _controller = start_replica(&w, cp, ns, "kubosh-inputs");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);

    let mut lonely = deployment_object("lonely", hello_deployment(w.port, "((greeting))"));
    lonely["spec"]["cloudConfigRef"] = json!({"name": "missing-cc"});
    lonely["spec"]["varsFrom"] = json!([{"secretRef": {"name": "gone"}}]);
    apply(&client, ns, lonely).await;
    let waiting = |d: &Deployment| {
        condition(d, "Reconciling")
            .filter(|c| c.status == "True" && c.reason == "Waiting")
            .map(|c| c.message.clone())
    };
    let d = wait_for(&deployments, "lonely", Duration::from_secs(60), &w, |d| {
        waiting(d).is_some()
    })
    .await;
    assert_eq!(
        waiting(&d).unwrap(),
        "waiting for: cloud config missing-cc (CloudConfig ctrl-inputs/missing-cc does not exist); \
         Secret ctrl-inputs/gone (spec.varsFrom[0]) does not exist; \
         release hello/1.0.0; stemcell ubuntu-jammy/latest"
    );
    assert!(condition(&d, "Ready").is_some_and(|c| c.status == "False"));
    assert!(condition(&d, "Stalled").is_some_and(|c| c.status == "False"));

    // The release exists, but its tarball is garbage: the deployment says so.
    let garbage = w.dir.path().join("garbage.tgz");
    std::fs::write(&garbage, b"not a tarball").unwrap();
    apply(
        &client,
        ns,
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "Release",
               "metadata": {"name": "hello-1.0.0"},
               "spec": {"name": "hello", "version": "1.0.0",
                        "url": format!("file://{}", garbage.display())}}),
    )
    .await;
    let d = wait_for(&deployments, "lonely", Duration::from_secs(60), &w, |d| {
        waiting(d).is_some_and(|m| m.contains("Release hello-1.0.0: Stalled: "))
    })
    .await;
    let message = waiting(&d).unwrap();
    assert!(
        message.contains("release hello/1.0.0 (Release hello-1.0.0: Stalled: "),
        "{message}"
    );
    assert_eq!(w.calls(), 0, "nothing was asked of the cloud");

    links_follow_their_provider(&client, ns, &w).await;
}

/// A one-instance `hello` deployment `name` consuming its peers from deployment `provider`'s
/// shared `web_greeter`.
fn consumer_of(w: &World, name: &str, provider: &str) -> Value {
    let mut manifest = hello_deployment(w.port, "Hi");
    manifest["instance_groups"][0]["name"] = json!("front");
    manifest["instance_groups"][0]["instances"] = json!(1);
    let job = &mut manifest["instance_groups"][0]["jobs"][0];
    job["consumes"] = json!({"peers": {"from": "web_greeter", "deployment": provider}});
    job.as_object_mut().unwrap().remove("provides");
    deployment_object(name, manifest)
}

/// The addresses in the `peers.txt` of deployment `name`'s only instance.
async fn peers_of(client: &kube::Client, ns: &str, w: &World, name: &str) -> Vec<String> {
    let state = stored_state(client, ns, name).await;
    let instance = state.instances.values().next().expect("one instance");
    let vm = &instance.vm.as_ref().expect("a VM").cid;
    let file = w.vm_root(vm).join("jobs/hello/config/peers.txt");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let mut peers: Vec<String> = (text.lines())
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(':').next().map(String::from))
        .collect();
    peers.sort();
    peers
}

/// The IPs of deployment `name`'s instances, sorted.
async fn ips_of(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let state = stored_state(client, ns, name).await;
    let mut ips: Vec<String> = (state.instances.values())
        .map(|i| i.ips["default"].ip.clone())
        .collect();
    ips.sort();
    ips
}

/// The links scenario of [`missing_inputs_are_one_status_with_no_cloud_call_and_links_follow_their_provider`]
/// (its inputs fixed first).
async fn links_follow_their_provider(client: &kube::Client, ns: &str, w: &World) {
    apply_inputs(client, ns, w).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    apply(client, ns, consumer_of(w, "app", "greeters")).await;
    assert_stalls(
        &deployments,
        "app",
        w,
        "DeployFailed",
        "instance_groups[0].jobs[0].consumes.peers.deployment: Link 'web_greeter' in job 'hello' \
         from instance group 'front' consumes from deployment 'greeters', but the deployment \
         does not exist.",
    )
    .await;

    // The provider appears: the consumer deploys by itself, with the provider's addresses.
    let mut provider = hello_deployment(w.port, "Hello");
    provider["instance_groups"][0]["instances"] = json!(1);
    provider["instance_groups"][0]["jobs"][0]["provides"]["greeter"]["shared"] = json!(true);
    let mut greeters = deployment_object("greeters", provider);
    let generation = apply_deployment(client, ns, &greeters).await;
    ready_at(&deployments, "greeters", w, generation).await;
    ready_at(&deployments, "app", w, 1).await;
    let provided = ips_of(client, ns, "greeters").await;
    assert_eq!(provided.len(), 1);
    assert_eq!(peers_of(client, ns, w, "app").await, provided);

    // It scales out: the consumer, untouched, is redeployed with the new address.
    greeters["spec"]["manifest"]["instance_groups"][0]["instances"] = json!(2);
    let generation = apply_deployment(client, ns, &greeters).await;
    ready_at(&deployments, "greeters", w, generation).await;
    let provided = ips_of(client, ns, "greeters").await;
    assert_eq!(provided.len(), 2);
    let start = Instant::now();
    while peers_of(client, ns, w, "app").await != provided {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "app's peers are {:?}, greeters are at {provided:?}",
            peers_of(client, ns, w, "app").await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let app = ready_at(&deployments, "app", w, 1).await;
    assert_eq!(
        app.metadata.generation,
        Some(1),
        "the consumer was not touched"
    );
}

/// `/healthz` answers as soon as the process serves; `/readyz` says no until leadership is
/// settled (a standby once a Lease duration passed without leading, the leader once its
/// caches are synced); `kubosh_leader` follows leadership, also when the standby takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_leadership_and_the_caches_and_metrics_follow_the_leader() {
    use crate::director_world::{free_port, http_request};
    let cp = control_plane().await;
    let w = World::new(25);
    let ns = "ctrl-ready";
    cp.create_namespace(ns).await.unwrap();
    let get = |port: u16, path: &str| http_request("127.0.0.1", port, path);
    let until = |what: &str, check: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !check() {
            assert!(start.elapsed() < Duration::from_secs(40), "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let (port_a, port_b) = (free_port(), free_port());
    let addr_a = format!("127.0.0.1:{port_a}");
    let mut a = start_replica_with(&w, cp, ns, "ready-a", &["--metrics-bind-address", &addr_a]);
    until("a is ready", &|| {
        get(port_a, "/readyz").is_some_and(|(s, _)| s == 200)
    });
    until("a leads", &|| {
        metric(&scrape(port_a), "kubosh_leader", &[]) == 1.0
    });

    // The standby: alive at once, not ready while its leadership is unsettled, then ready.
    let addr_b = format!("127.0.0.1:{port_b}");
    let b = start_replica_with(&w, cp, ns, "ready-b", &["--metrics-bind-address", &addr_b]);
    until("b serves", &|| get(port_b, "/healthz").is_some());
    assert_eq!(get(port_b, "/healthz").map(|(s, _)| s), Some(200));
    let (status, body) = get(port_b, "/readyz").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("leadership not settled"), "{body}");
    until("b is ready as a standby", &|| {
        get(port_b, "/readyz").is_some_and(|(s, _)| s == 200)
    });
    assert_eq!(metric(&scrape(port_b), "kubosh_leader", &[]), 0.0);

    // The leader dies: the standby leads.
    let _ = a.0.kill();
    let _ = a.0.wait();
    until("b leads", &|| {
        metric(&scrape(port_b), "kubosh_leader", &[]) == 1.0
    });
    until("b is ready as the leader, its caches synced", &|| {
        get(port_b, "/readyz").is_some_and(|(s, _)| s == 200)
    });
    drop(b);
}
