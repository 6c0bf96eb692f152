//! The chart's RBAC, proven by the controller itself: `kubosh controller` runs as the
//! chart's ServiceAccount (the objects of `helm template` applied for real, a token from the
//! TokenRequest API in a kubeconfig of its own), deploys a real deployment with a generated
//! variable and persistent disks to Ready, then deletes it and its stemcell, with no
//! "forbidden" in its log, the deployment's status or its Events: watching one namespace,
//! and watching all of them on a control plane of its own (where it may read, create and
//! update Secrets but never list them). Without one verb the chart grants, it fails and
//! says why: the RBAC is both enough and tight.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::api::{Api, DeleteParams, PostParams};
use kubosh_devenv::ControlPlane;
use kubosh_kube::api::{Deployment, Instance, Stemcell};
use serde_json::json;

use crate::controller::{
    ControllerProcess, apply_deployment, apply_inputs, control_plane, deployment_object, events_of,
    is_ready, ready_at, start_replica_with_kubeconfig, with_disk,
};
use crate::controller_lifecycle::gone;
use crate::director_world::{World, hello_deployment, http_get};
use crate::helm;

/// The controller's ServiceAccount, Roles and bindings as the chart makes them, applied in
/// `release_ns`; what the controller needs to run as that account.
struct Install {
    release: String,
    release_ns: String,
    /// The watched namespace, or none for all of them.
    watched: Option<String>,
    /// A kubeconfig whose user is the chart's ServiceAccount.
    kubeconfig: PathBuf,
    /// The arguments of the chart's controller container but `controller`, `--director`
    /// and `--metrics-bind-address` (the world's file, a free port).
    args: Vec<String>,
}

/// Installs the chart (`helm template | kubectl apply`) as `release` in a new namespace
/// `release_ns`, watching `watched` (or every namespace), and waits until the apiserver's
/// RBAC honours its grants.
async fn install(
    cp: &ControlPlane,
    w: &World,
    release: &str,
    release_ns: &str,
    watched: Option<&str>,
) -> Install {
    cp.create_namespace(release_ns).await.unwrap();
    // The ops API's APIService is cluster-wide and this control plane is shared: its RBAC
    // is left to the ops API's own test.
    let mut set = vec!["opsApi.enabled=false".to_string()];
    set.extend(watched.map(|ns| format!("watchNamespace={ns}")));
    let set: Vec<&str> = set.iter().map(String::as_str).collect();
    let rendered = helm::render(release, release_ns, &set);
    let kubeconfig = cp.kubeconfig_path().display().to_string();
    helm::succeeds(
        "kubectl",
        &["--kubeconfig", &kubeconfig, "apply", "-f", "-"],
        &rendered,
    );
    // The chart names the ServiceAccount after the release.
    let token = cp.service_account_token(release_ns, release).await.unwrap();
    let path = w.dir.path().join(format!("kubeconfig-{release}"));
    std::fs::write(&path, cp.kubeconfig_for_token(&token).unwrap()).unwrap();
    let deployment = (rendered.split("\n---\n"))
        .filter_map(|doc| kubosh_base::yaml::parse_value(doc, "chart").ok())
        .find(|doc| doc["kind"] == "Deployment")
        .expect("the chart's Deployment");
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("the controller's arguments")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .filter(|a| {
            a != "controller"
                && !a.starts_with("--director=")
                && !a.starts_with("--metrics-bind-address=")
        })
        .collect();
    let install = Install {
        release: release.into(),
        release_ns: release_ns.into(),
        watched: watched.map(String::from),
        kubeconfig: path,
        args,
    };
    // One grant of each binding.
    let namespace = install.watched.as_deref().unwrap_or("default");
    install
        .wait_until(cp, true, namespace, "patch", "boshdeployments", "status")
        .await;
    install
        .wait_until(cp, true, release_ns, "create", "leases", "")
        .await;
    install
}

impl Install {
    /// Whether the ServiceAccount may `verb` `resource`/`subresource` (kubosh.io, core or
    /// coordination.k8s.io, by resource) in `namespace`.
    async fn allowed(
        &self,
        cp: &ControlPlane,
        namespace: &str,
        verb: &str,
        resource: &str,
        subresource: &str,
    ) -> bool {
        let group = match resource {
            "leases" => "coordination.k8s.io",
            "secrets" | "configmaps" => "",
            _ => "kubosh.io",
        };
        let token = cp
            .service_account_token(&self.release_ns, &self.release)
            .await
            .unwrap();
        let client = cp.client_for_token(&token).await.unwrap();
        let review: SelfSubjectAccessReview = serde_json::from_value(json!({"spec": {
            "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group,
                                   "resource": resource, "subresource": subresource},
        }}))
        .unwrap();
        Api::<SelfSubjectAccessReview>::all(client)
            .create(&PostParams::default(), &review)
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.allowed)
    }

    /// Waits (at most 10 s: the authorizer reads roles from an informer cache) until
    /// [`Install::allowed`] answers `allowed`.
    async fn wait_until(
        &self,
        cp: &ControlPlane,
        allowed: bool,
        namespace: &str,
        verb: &str,
        resource: &str,
        subresource: &str,
    ) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self
            .allowed(cp, namespace, verb, resource, subresource)
            .await
            != allowed
        {
            assert!(
                Instant::now() < deadline,
                "{verb} {resource}/{subresource} in {namespace}: never {}",
                if allowed { "allowed" } else { "denied" }
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The controller as this ServiceAccount, with the arguments and the environment of the
    /// chart's pod.
    fn start(&self, w: &World) -> ControllerProcess {
        let identity = format!("{}-0", self.release);
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        start_replica_with_kubeconfig(
            w,
            &self.kubeconfig,
            &args,
            &[
                ("POD_NAMESPACE", &self.release_ns),
                ("CONTROLLER_POD_NAME", &identity),
            ],
        )
    }
}

/// The world's `hello` deployment, its greeting a variable the controller generates, with a
/// persistent disk on each instance.
fn hello_with_a_generated_variable(w: &World) -> serde_json::Value {
    let mut manifest = with_disk(hello_deployment(w.port, "((greeting))"));
    manifest["variables"] = json!([{"name": "greeting", "type": "password"}]);
    deployment_object("hello", manifest)
}

fn controller_log(w: &World) -> String {
    std::fs::read_to_string(w.dir.path().join("controller.log")).unwrap_or_default()
}

/// Everything the controller said about being forbidden something: lines of its log, and
/// the status and Events of the deployments in `namespace` (a failed deploy's error is
/// reported there, not logged).
async fn forbidden_said(w: &World, admin: &kube::Client, namespace: &str) -> Vec<String> {
    let mut said: Vec<String> = controller_log(w).lines().map(String::from).collect();
    let deployments = Api::<Deployment>::namespaced(admin.clone(), namespace)
        .list(&Default::default())
        .await
        .unwrap();
    for d in deployments {
        let status = d.status.unwrap_or_default();
        said.extend(status.conditions.into_iter().map(|c| c.message));
        said.extend(status.last_task.and_then(|t| t.error));
    }
    said.extend((events_of(admin, namespace).await.into_iter()).filter_map(|e| e.note));
    said.retain(|l| l.to_lowercase().contains("forbidden"));
    said
}

/// What the controller logs (at debug level) when it may not list Secrets: the variables
/// are then read one by one.
const NO_SECRET_LIST: &str = "listing Secrets is forbidden: one read per variable";

/// Deploys `hello` in `namespace` through the controller of `install` and checks it is
/// Ready, its job answering with the generated greeting; then deletes it and its stemcell
/// (VMs, disks, their records, the registries, compiled packages and the stemcell leave
/// the cloud and the namespace, every lock Lease is released), and checks that nothing was
/// forbidden but listing Secrets; the lines saying that.
async fn lives_with_no_403(
    cp: &ControlPlane,
    w: &World,
    install: &Install,
    namespace: &str,
) -> Vec<String> {
    let admin = cp.client().await.unwrap();
    let _controller = install.start(w);
    apply_inputs(&admin, namespace, w).await;
    let generation = apply_deployment(&admin, namespace, &hello_with_a_generated_variable(w)).await;
    let api: Api<Deployment> = Api::namespaced(admin.clone(), namespace);
    ready_at(&api, "hello", w, generation).await;

    let secret = Api::<Secret>::namespaced(admin.clone(), namespace)
        .get("hello-var-greeting")
        .await
        .expect("the controller stored the generated variable");
    let stored = &secret.data.unwrap()["value"].0;
    let greeting: String = serde_json::from_slice(stored).unwrap();
    let ips: Vec<String> = Api::<Instance>::namespaced(admin.clone(), namespace)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|i| i.spec.networks.first().and_then(|n| n.ip.clone()))
        .collect();
    assert_eq!(ips.len(), 2, "{ips:?}");
    for ip in ips {
        let body = http_get(&ip, w.port).unwrap_or_default();
        assert!(body.contains(&greeting), "{ip}: {body}");
    }

    api.delete("hello", &DeleteParams::default()).await.unwrap();
    gone::<Deployment>(&admin, namespace, "hello", Duration::from_secs(180)).await;
    Api::<Stemcell>::namespaced(admin.clone(), namespace)
        .delete("jammy-1.0", &DeleteParams::default())
        .await
        .unwrap();
    gone::<Stemcell>(&admin, namespace, "jammy-1.0", Duration::from_secs(60)).await;
    let inventory = kubosh_cloud::local::inventory(&w.cloud()).unwrap();
    assert!(
        inventory.vms.is_empty() && inventory.disks.is_empty() && inventory.stemcells.is_empty(),
        "{inventory:?}"
    );
    let leases: Api<Lease> = Api::namespaced(admin.clone(), namespace);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = leases.list(&Default::default()).await.unwrap().items;
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "locks never released: {left:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (no_list, forbidden): (Vec<String>, Vec<String>) = (forbidden_said(w, &admin, namespace)
        .await)
        .into_iter()
        .partition(|l| l.contains(NO_SECRET_LIST));
    assert!(
        forbidden.is_empty(),
        "the chart's RBAC forbade the controller something:\n{}",
        forbidden.join("\n")
    );
    no_list
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_rbac_for_one_namespace_deploys_and_deletes_with_no_403() {
    let cp = control_plane().await;
    let w = World::new(61);
    let watched = "chart-rbac-ns";
    cp.create_namespace(watched).await.unwrap();
    let install = install(cp, &w, "kubosh-one", "chart-rbac-ns-system", Some(watched)).await;
    let no_list = lives_with_no_403(cp, &w, &install, watched).await;
    assert!(
        no_list.is_empty(),
        "in its namespace it lists Secrets: {no_list:?}"
    );
}

/// Cluster-wide, on a control plane of its own (a controller watching every namespace of
/// the shared one would take other tests' deployments), its CRDs installed from the chart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_cluster_wide_rbac_deploys_and_deletes_with_no_403_nor_secret_list() {
    let cp = ControlPlane::start().await.expect("a control plane");
    let kubeconfig = cp.kubeconfig_path().display().to_string();
    helm::succeeds(
        "kubectl",
        &[
            "--kubeconfig",
            &kubeconfig,
            "apply",
            "--server-side",
            "-f",
            "charts/kubosh/crds",
        ],
        "",
    );
    helm::succeeds(
        "kubectl",
        &[
            "--kubeconfig",
            &kubeconfig,
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
        ],
        "",
    );
    let w = World::new(62);
    let install = install(&cp, &w, "kubosh", "kubosh-system", None).await;
    assert!(
        !install.allowed(&cp, "bosh", "list", "secrets", "").await,
        "cluster-wide, Secrets are never listed"
    );
    cp.create_namespace("bosh").await.unwrap();
    let no_list = lives_with_no_403(&cp, &w, &install, "bosh").await;
    assert!(!no_list.is_empty(), "the variables were read one by one");
}

/// The rules of Role `role` in `namespace` without `verb` on `resource` (split out of the
/// rule that grants it with others).
async fn revoke(cp: &ControlPlane, namespace: &str, role: &str, resource: &str, verb: &str) {
    let api: Api<Role> = Api::namespaced(cp.client().await.unwrap(), namespace);
    let mut object = api.get(role).await.unwrap();
    let mut rules = Vec::new();
    let mut found = false;
    for mut rule in object.rules.take().unwrap_or_default() {
        let resources = rule.resources.clone().unwrap_or_default();
        if resources.iter().any(|r| r == resource) && rule.verbs.iter().any(|v| v == verb) {
            found = true;
            let rest: Vec<String> = resources.into_iter().filter(|r| r != resource).collect();
            let verbs: Vec<String> = rule.verbs.iter().filter(|v| *v != verb).cloned().collect();
            if !verbs.is_empty() {
                rules.push(PolicyRule {
                    resources: Some(vec![resource.to_string()]),
                    verbs,
                    ..rule.clone()
                });
            }
            if rest.is_empty() {
                continue;
            }
            rule.resources = Some(rest);
        }
        rules.push(rule);
    }
    assert!(found, "Role {role} grants no {verb} on {resource}");
    object.rules = Some(rules);
    api.replace(role, &PostParams::default(), &object)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_one_verb_of_the_charts_role_the_controller_fails_and_says_why() {
    let cp = control_plane().await;
    let w = World::new(63);
    let admin = cp.client().await.unwrap();
    // What is taken away: the status of every deployment, and the deploy and registry locks.
    let cases = [("boshdeployments/status", "patch"), ("leases", "create")];
    for (i, (resource, verb)) in cases.into_iter().enumerate() {
        let watched = format!("chart-tight-{i}");
        cp.create_namespace(&watched).await.unwrap();
        let release = format!("kubosh-tight{i}");
        let install = install(
            cp,
            &w,
            &release,
            &format!("{watched}-system"),
            Some(&watched),
        )
        .await;
        revoke(cp, &watched, &release, resource, verb).await;
        let (plain, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        install
            .wait_until(cp, false, &watched, verb, plain, subresource)
            .await;

        std::fs::write(w.dir.path().join("controller.log"), "").unwrap();
        let controller = install.start(&w);
        apply_inputs(&admin, &watched, &w).await;
        apply_deployment(&admin, &watched, &hello_with_a_generated_variable(&w)).await;
        let api: Api<Deployment> = Api::namespaced(admin.clone(), &watched);
        // The apiserver's words, e.g. `cannot patch resource "boshdeployments/status"`.
        let named = format!("cannot {verb} resource \"{resource}\"");
        let deadline = Instant::now() + Duration::from_secs(120);
        let said = loop {
            let said: Vec<String> = (forbidden_said(&w, &admin, &watched).await.into_iter())
                // JSON log lines escape the quotes.
                .filter(|l| l.replace('\\', "").contains(&named))
                .collect();
            if !said.is_empty() {
                break said;
            }
            assert!(
                Instant::now() < deadline,
                "without {verb} on {resource}, the controller never says it was forbidden:\n{}",
                controller_log(&w)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        // And it does not recover.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let d = api.get("hello").await.unwrap();
        assert!(
            !is_ready(&d),
            "Ready without {verb} on {resource}: {:?}\n{said:?}",
            d.status
        );
        eprintln!("without {verb} on {resource}: {}", said[0]);
        drop(controller);
    }
}
