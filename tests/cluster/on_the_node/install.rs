//! README's "Install on a cluster", step by step with the real `kubosh`, `kubectl` and
//! `helm` (`kubosh_devenv::in_cluster`, the steps `kubosh up --in-cluster` takes too): the
//! director's NATS in the cluster (examples/cluster/nats.yaml: mutual TLS, per-agent
//! authorization on a shared volume, its config reloader), `helm install` of charts/kubosh
//! with the image the Dockerfile built and examples/cluster/values.yaml, a changed value
//! rolling the Pods, the example CloudConfig, Release, Stemcell and Deployment applied and
//! seen `Ready` through a leader change with the controller running in its Pod, an
//! instance's logs fetched through the ops API (`kubectl bosh logs`), the cloud's Pod
//! restarted with its VMs; then the Deployment deleted and its owned objects
//! garbage-collected, and `helm uninstall` leaving no controller object behind. Then the
//! same without Helm, `kubectl apply -k examples/cluster/` (and an overlay of it), and
//! `kubectl apply -k deploy/`'s leader hand-over.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kubosh_devenv::demo::example_objects;
use kubosh_devenv::in_cluster::{ArtifactServer, RELEASE_NAMESPACE as RELEASE_NS};
use kubosh_devenv::{ControlPlane, NODE_NAME};

use crate::{cluster, diagnosis, done, eventually, installer, kubectl, root, sh};

const BOSH_NS: &str = "bosh";

/// `helm template kubosh charts/kubosh -n kubosh-system --set ...`.
pub fn render_chart(set: &[&str]) -> String {
    let mut args = vec![
        "template",
        "kubosh",
        "charts/kubosh",
        "--namespace",
        RELEASE_NS,
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    let path = kubosh_devenv::binary("helm").unwrap();
    let out = Command::new(path)
        .args(&args)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Names of the objects of `kind` in `namespace` with an owner reference to `owner_uid`.
fn owned_by(cp: &ControlPlane, kind: &str, namespace: &str, owner_uid: &str) -> Vec<String> {
    let list = kubectl(cp, &["get", kind, "-n", namespace, "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    (list["items"].as_array().into_iter().flatten())
        .filter(|item| {
            (item["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten())
            .any(|r| r["uid"] == owner_uid)
        })
        .filter_map(|item| Some(item["metadata"]["name"].as_str()?.to_string()))
        .collect()
}

/// The controller's running Pods (on the node, the only one), but for those being deleted.
fn controller_pods(cp: &ControlPlane) -> Vec<String> {
    let pods = kubectl(
        cp,
        &[
            "get",
            "pods",
            "-n",
            RELEASE_NS,
            "-l",
            "app.kubernetes.io/name=kubosh",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase} \
             {.metadata.deletionTimestamp}{\"\\n\"}{end}",
        ],
    );
    pods.lines()
        .filter_map(|pod| {
            let fields: Vec<&str> = pod.split_whitespace().collect();
            match fields[..] {
                [name, node, "Running"] => {
                    assert_eq!(node, NODE_NAME, "{pod}");
                    Some(name.to_string())
                }
                _ => None,
            }
        })
        .collect()
}

/// The Pod holding the controller's leader election Lease ("" when none does).
fn leader(cp: &ControlPlane) -> String {
    sh(
        cp,
        &format!(
            "kubectl get lease kubosh-controller -n {RELEASE_NS} -o jsonpath={{.spec.holderIdentity}}"
        ),
    )
}

/// The local cloud's VMs (`kubosh cpi inventory` in its Pod): CID and whether the agent runs.
fn cloud_vms(cp: &ControlPlane) -> Vec<(String, bool)> {
    let inventory = sh(
        cp,
        &format!(
            "kubectl exec -n {RELEASE_NS} deploy/kubosh-cloud -- \
             kubosh cpi --config /etc/kubosh/cpi/cpi.yml inventory"
        ),
    );
    let inventory: serde_json::Value = serde_json::from_str(&inventory).unwrap();
    inventory["vms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|vm| {
            (
                vm["cid"].as_str().unwrap().to_string(),
                vm["agent_alive"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// `kubectl bosh ARGS` with the plugin (this `kubosh`) on `PATH`, which must succeed.
fn kubectl_bosh(cp: &ControlPlane, plugins: &Path, args: &[&str]) -> String {
    std::fs::create_dir_all(plugins).unwrap();
    let link = plugins.join("kubectl-bosh");
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kubosh"), &link).unwrap();
    }
    let out = Command::new(kubosh_devenv::binary("kubectl").unwrap())
        .arg("bosh")
        .args(args)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                plugins.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kubectl bosh {args:?}:\n{said}\n{}",
        diagnosis(cp)
    );
    said
}

/// What is left in the release namespace and cluster-wide of the release, but for what this
/// test made itself (NATS, its Secrets and claim).
fn release_leftovers(cp: &ControlPlane) -> Vec<String> {
    const OURS: [&str; 11] = [
        "configmap/kube-root-ca.crt",
        "persistentvolumeclaim/kubosh-blobs",
        "persistentvolumeclaim/kubosh-cloud-state",
        "configmap/nats-authorization-seed",
        "configmap/nats-config",
        "secret/kubosh-nats",
        "secret/nats-tls",
        "serviceaccount/default",
        "persistentvolumeclaim/nats-authorization",
        "service/nats",
        "deployment.apps/nats",
    ];
    let namespaced = sh(
        cp,
        &format!(
            "kubectl get deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings,\
         secrets,configmaps,leases,persistentvolumeclaims -n {RELEASE_NS} -o name"
        ),
    );
    let cluster_wide = sh(
        cp,
        "kubectl get clusterroles,clusterrolebindings,apiservices \
         -l app.kubernetes.io/instance=kubosh -o name",
    );
    (namespaced.lines().chain(cluster_wide.lines()))
        .filter(|name| !OURS.contains(name) && !name.contains("/nats-"))
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_install_and_apply_k_run_the_controller_in_pods_that_deploy_the_example() {
    let cluster = cluster().await;
    let cp = &*cluster;
    let work = tempfile::tempdir().unwrap();
    let install = installer(cp);
    done(cp, install.create_namespace());
    done(cp, install.install_nats(&work.path().join("pki")));
    let artifacts = done(cp, install.serve_artifacts(&work.path().join("artifacts")));

    // The chart, with the image the Dockerfile built (imported into the node): two
    // replicas, and the local cloud in a Pod of its own, which shares the blobstore's claim.
    done(cp, install.install_chart(&[]));
    // `helm upgrade` with a changed value rolls the Pods.
    rolls_on_a_change(cp, || {
        sh(
            cp,
            &format!(
                "helm upgrade kubosh charts/kubosh -n {RELEASE_NS} --reuse-values \
                 --set controller.logLevel=debug --wait --timeout 3m"
            ),
        );
    })
    .await;
    example_ready_through_a_leader_change(cp, &artifacts).await;

    // Logs through the ops API: kube-apiserver's aggregation layer, the chart's APIService
    // and Service, the leader's Pod serving it.
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let logs_arg = logs.display().to_string();
    let said = kubectl_bosh(
        cp,
        &work.path().join("plugins"),
        &["logs", "hello", "web/0", "-n", BOSH_NS, "--dir", &logs_arg],
    );
    let tarballs: Vec<_> = std::fs::read_dir(&logs).unwrap().flatten().collect();
    assert_eq!(tarballs.len(), 1, "{said}");
    assert!(
        (tarballs[0].file_name().to_string_lossy()).starts_with("hello.web.0-"),
        "{said}"
    );

    the_cloud_pod_restarts_with_its_vms(cp).await;

    // Garbage collection: what the Deployment owns goes with it (kube-controller-manager).
    let uid = sh(
        cp,
        &format!("kubectl get boshdeployment hello -n {BOSH_NS} -o jsonpath={{.metadata.uid}}"),
    );
    let owned = owned_by(cp, "configmaps", BOSH_NS, &uid);
    assert!(
        !owned.is_empty(),
        "the deploy's task history is owned by the Deployment"
    );
    sh(
        cp,
        &format!("kubectl delete boshdeployment hello -n {BOSH_NS} --timeout=300s"),
    );
    eventually(
        cp,
        "the Deployment's owned objects collected",
        Duration::from_secs(60),
        || {
            let left: Vec<String> = ["configmaps", "secrets", "instances"]
                .iter()
                .flat_map(|kind| owned_by(cp, kind, BOSH_NS, &uid))
                .collect();
            left.is_empty().then_some(())
        },
    )
    .await;
    remove_the_example(cp);

    // `helm uninstall` leaves none of the controller's objects.
    sh(
        cp,
        &format!("helm uninstall kubosh -n {RELEASE_NS} --wait --timeout 2m"),
    );
    nothing_of_the_release_left(cp).await;

    // The same without Helm: examples/cluster/ is the chart rendered with the same values,
    // NATS and the CRDs, for `kubectl apply -k`; a change in an overlay of it rolls the Pods.
    sh(cp, "kubectl apply -k examples/cluster/");
    for deployment in ["kubosh", "kubosh-cloud"] {
        sh(
            cp,
            &format!("kubectl -n {RELEASE_NS} rollout status deploy/{deployment} --timeout=180s"),
        );
    }
    let overlay = work.path().join("overlay");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        debug_overlay(&overlay, &root().join("examples/cluster")),
    )
    .unwrap();
    rolls_on_a_change(cp, || {
        let dir = overlay.display().to_string();
        kubectl(cp, &["apply", "-k", &dir]);
    })
    .await;
    example_ready_through_a_leader_change(cp, &artifacts).await;
    remove_the_example(cp);
    sh(
        cp,
        "kubectl delete -k examples/cluster/ --wait --timeout=180s",
    );
    nothing_of_the_release_left(cp).await;

    // deploy/, the chart rendered with its defaults (two replicas, the NATS URL
    // nats://nats:4222, the local cloud in the controller's Pod), with NATS as before: both
    // Pods ready, one leads; its Pod deleted, the other takes over.
    sh(cp, "kubectl apply -f examples/cluster/nats.yaml");
    sh(
        cp,
        &format!("kubectl -n {RELEASE_NS} rollout status deploy/nats --timeout=120s"),
    );
    sh(cp, "kubectl apply -k deploy/");
    sh(
        cp,
        &format!("kubectl -n {RELEASE_NS} rollout status deploy/kubosh --timeout=180s"),
    );
    let first = eventually(cp, "a leader", Duration::from_secs(60), || {
        Some(leader(cp)).filter(|l| !l.is_empty())
    })
    .await;
    let deleted = std::time::Instant::now();
    sh(
        cp,
        &format!("kubectl delete pod {first} -n {RELEASE_NS} --wait=false"),
    );
    let successor = eventually(cp, "a new leader", Duration::from_secs(60), || {
        Some(leader(cp)).filter(|l| !l.is_empty() && *l != first)
    })
    .await;
    let handover = deleted.elapsed();
    eprintln!("leader {first} deleted: {successor} led {handover:.1?} later");
    assert!(
        handover < Duration::from_secs(15),
        "the standby took {handover:?} to take over"
    );
    sh(cp, "kubectl delete -k deploy/ --wait --timeout=180s");
    nothing_of_the_release_left(cp).await;
}

/// `change` (an upgrade of the controller's log level) rolls both controller Pods: two new
/// ones, with the new value, and one leads.
async fn rolls_on_a_change(cp: &ControlPlane, change: impl FnOnce()) {
    let first_pods = controller_pods(cp);
    assert_eq!(first_pods.len(), 2, "{first_pods:?}");
    change();
    let pods = eventually(
        cp,
        "two controller Pods, both new",
        Duration::from_secs(90),
        || {
            let pods = controller_pods(cp);
            (pods.len() == 2 && !pods.iter().any(|p| first_pods.contains(p))).then_some(pods)
        },
    )
    .await;
    let env = sh(
        cp,
        &format!(
            "kubectl get pod {} -n {RELEASE_NS} -o jsonpath={{.spec.containers[0].env}}",
            pods[0]
        ),
    );
    assert!(env.contains("\"debug\""), "{env}");
    let leader = eventually(cp, "a new leader", Duration::from_secs(60), || {
        Some(leader(cp)).filter(|l| pods.contains(l))
    })
    .await;
    assert!(pods.contains(&leader), "{leader}");
}

/// A kustomization in `dir` of `base` (a directory) that sets the controller's log level,
/// as a user's overlay would.
fn debug_overlay(dir: &Path, base: &Path) -> String {
    // kustomize takes bases by relative path only.
    let up = "../".repeat(dir.components().count() - 1);
    let base = base.strip_prefix("/").unwrap_or(base).display();
    // JSON, which is YAML too; the patch as kustomize reads it, a document of its own.
    let patch = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "kubosh", "namespace": RELEASE_NS},
        "spec": {"template": {"spec": {"containers": [
            {"name": "controller", "env": [{"name": "KUBOSH_LOG", "value": "debug"}]}
        ]}}},
    });
    serde_json::json!({
        "resources": [format!("{up}{base}")],
        "patches": [{"patch": patch.to_string()}],
    })
    .to_string()
}

/// The example, as `kubosh up` applies it, with the tarballs `artifacts` serves. Once the
/// deploy has VMs in the cloud, the leader's Pod is deleted: the other replica leads and
/// carries the deploy on to Ready, the VMs being the cloud Pod's; then the cloud holds the
/// two instances' VMs, running, and nothing else.
async fn example_ready_through_a_leader_change(cp: &ControlPlane, artifacts: &ArtifactServer) {
    sh(cp, &format!("kubectl create namespace {BOSH_NS}"));
    sh(
        cp,
        "kubectl apply --server-side -f examples/local/cloud-config.yaml",
    );
    let objects = example_objects(&artifacts.release, &artifacts.stemcell, BOSH_NS);
    done(cp, installer(cp).apply(&objects.join("---\n")));
    sh(
        cp,
        "kubectl apply --server-side -f examples/local/hello.yaml",
    );
    let first_leader = eventually(cp, "a leader", Duration::from_secs(60), || {
        Some(leader(cp)).filter(|l| !l.is_empty())
    })
    .await;
    let vms_then = eventually(cp, "a VM in the cloud", Duration::from_secs(300), || {
        Some(cloud_vms(cp)).filter(|vms| !vms.is_empty())
    })
    .await;
    let ready = sh(
        cp,
        &format!(
            "kubectl get boshdeployment hello -n {BOSH_NS} \
             -o jsonpath={{.status.conditions[?(@.type==\"Ready\")].status}}"
        ),
    );
    assert_ne!(ready, "True", "the deploy is in flight");
    let deleted = std::time::Instant::now();
    sh(
        cp,
        &format!("kubectl delete pod {first_leader} -n {RELEASE_NS} --wait=false"),
    );
    sh(
        cp,
        &format!(
            "kubectl wait --for=condition=Ready boshdeployment/hello -n {BOSH_NS} --timeout=600s"
        ),
    );
    eprintln!(
        "leader {first_leader} deleted with {} VM(s) in the cloud: the deploy was Ready {:.1?} later",
        vms_then.len(),
        deleted.elapsed()
    );
    let pod_name = leader(cp);
    assert_ne!(pod_name, first_leader, "the deleted Pod still leads");
    assert!(controller_pods(cp).contains(&pod_name), "{pod_name}");
    // Nothing leaked: the two instances' VMs alone (the compilation VM deleted), running.
    let vms = cloud_vms(cp);
    assert_eq!(vms.len(), 2, "{vms:?}");
    assert!(vms.iter().all(|(_, alive)| *alive), "{vms:?}");
    let instances = sh(cp, &format!("kubectl get instances -n {BOSH_NS} -o name"));
    assert_eq!(instances.lines().count(), 2, "{instances}");
}

/// The cloud's Pod deleted, as a host that restarts: the new Pod finds its state on the
/// claim and boots the same VMs, whose jobs answer the errand's smoke tests again.
async fn the_cloud_pod_restarts_with_its_vms(cp: &ControlPlane) {
    let mut vms_before = cloud_vms(cp);
    vms_before.sort();
    sh(
        cp,
        &format!("kubectl delete pod -n {RELEASE_NS} -l app.kubernetes.io/component=cloud"),
    );
    sh(
        cp,
        &format!("kubectl rollout status deploy/kubosh-cloud -n {RELEASE_NS} --timeout=120s"),
    );
    let mut seen = vms_before.clone();
    eventually(
        cp,
        "the cloud's VMs booted again",
        Duration::from_secs(60),
        || {
            let mut now = cloud_vms(cp);
            now.sort();
            if now != seen {
                eprintln!("the cloud's VMs (CID, agent running): {now:?}");
                seen = now;
            }
            (seen == vms_before).then_some(())
        },
    )
    .await;
    let run = sh(
        cp,
        "kubectl create -f examples/local/smoke-tests.yaml -o jsonpath={.metadata.name}",
    );
    let phase = || {
        sh(
            cp,
            &format!("kubectl get errandrun {run} -n {BOSH_NS} -o jsonpath={{.status.phase}}"),
        )
    };
    let ended = eventually(cp, "the errand's end", Duration::from_secs(300), || {
        Some(phase()).filter(|p| p == "Succeeded" || p == "Failed")
    })
    .await;
    assert_eq!(ended, "Succeeded", "{}", diagnosis(cp));
}

/// What the controller manages goes first, while it runs to release its finalizers: the
/// Deployment (its VMs), then the namespace (the Release's and Stemcell's blobs, the
/// cloud's stemcell).
fn remove_the_example(cp: &ControlPlane) {
    sh(
        cp,
        &format!("kubectl delete boshdeployments --all -n {BOSH_NS} --timeout=300s"),
    );
    sh(
        cp,
        &format!("kubectl delete namespace {BOSH_NS} --timeout=180s"),
    );
}

async fn nothing_of_the_release_left(cp: &ControlPlane) {
    eventually(
        cp,
        "no object of the release left",
        Duration::from_secs(60),
        || release_leftovers(cp).is_empty().then_some(()),
    )
    .await;
}
