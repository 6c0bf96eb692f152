//! README's "Install on a cluster", step by step with the real `kubosh`, `kubectl` and
//! `helm` (`kubosh_devenv::in_cluster`, the steps `kubosh up --in-cluster` takes too): the
//! director's NATS in the cluster (examples/cluster/nats.yaml: mutual TLS, per-agent
//! authorization on a shared volume, its config reloader), `helm install` of charts/kubosh
//! with the image the Dockerfile built, the example CloudConfig, Release,
//! Stemcell and Deployment applied and seen `Ready` with the controller running in its Pod,
//! an instance's logs fetched through the ops API (`kubectl bosh logs`); then the Deployment
//! deleted and its owned objects garbage-collected, and `helm uninstall` leaving no
//! controller object behind.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kubosh_devenv::demo::example_objects;
use kubosh_devenv::in_cluster::RELEASE_NAMESPACE as RELEASE_NS;
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
async fn helm_install_runs_the_controller_in_a_pod_that_deploys_the_example_to_ready() {
    let cluster = cluster().await;
    let cp = &*cluster;
    let work = tempfile::tempdir().unwrap();
    let install = installer(cp);
    done(cp, install.create_namespace());
    done(cp, install.install_nats(&work.path().join("pki")));

    // The chart, with the image the Dockerfile built (imported into the node): two
    // replicas, and the local cloud in a Pod of its own, which shares the blobstore's claim.
    done(cp, install.install_chart(&[]));
    let first_pods = controller_pods(cp);
    assert_eq!(first_pods.len(), 2, "{first_pods:?}");

    // `helm upgrade` with a changed value rolls the Pods (their environment changes); the
    // new ones are ready, and one leads.
    sh(
        cp,
        &format!(
            "helm upgrade kubosh charts/kubosh -n {RELEASE_NS} --reuse-values \
             --set controller.logLevel=debug --wait --timeout 3m"
        ),
    );
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

    // The example, as `kubosh up` applies it, with the tarballs served over HTTP.
    sh(cp, &format!("kubectl create namespace {BOSH_NS}"));
    let artifacts = done(cp, install.serve_artifacts(&work.path().join("artifacts")));
    sh(
        cp,
        "kubectl apply --server-side -f examples/local/cloud-config.yaml",
    );
    let objects = example_objects(&artifacts.release, &artifacts.stemcell, BOSH_NS);
    done(cp, install.apply(&objects.join("---\n")));
    sh(
        cp,
        "kubectl apply --server-side -f examples/local/hello.yaml",
    );

    // Once the deploy has VMs in the cloud, the leader's Pod is deleted: the other replica
    // leads and carries the deploy on to Ready, the VMs being the cloud Pod's.
    let first_leader = eventually(cp, "a leader", Duration::from_secs(60), || {
        Some(leader(cp)).filter(|l| !l.is_empty())
    })
    .await;
    let vms_then = eventually(cp, "a VM in the cloud", Duration::from_secs(300), || {
        Some(cloud_vms(cp)).filter(|vms| !vms.is_empty())
    })
    .await;
    let ready = || {
        sh(
            cp,
            &format!(
                "kubectl get boshdeployment hello -n {BOSH_NS} \
                 -o jsonpath={{.status.conditions[?(@.type==\"Ready\")].status}}"
            ),
        )
    };
    assert_ne!(ready(), "True", "the deploy is in flight");
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

    // The cloud's Pod deleted, as a host that restarts: the new Pod finds its state on the
    // claim and boots the same VMs, whose jobs answer the errand's smoke tests again.
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
    sh(
        cp,
        &format!(
            "kubectl wait --for=jsonpath={{.status.phase}}=Succeeded errandrun/{run} -n {BOSH_NS} --timeout=300s"
        ),
    );

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

    // What the controller manages goes first, while it runs to release its finalizers
    // (the Release's and Stemcell's blobs, the cloud's stemcell).
    sh(
        cp,
        &format!("kubectl delete namespace {BOSH_NS} --timeout=180s"),
    );

    // `helm uninstall` leaves none of the controller's objects.
    sh(
        cp,
        &format!("helm uninstall kubosh -n {RELEASE_NS} --wait --timeout 2m"),
    );
    eventually(
        cp,
        "no object of the release left",
        Duration::from_secs(60),
        || release_leftovers(cp).is_empty().then_some(()),
    )
    .await;

    // The same objects without Helm (deploy/, the chart rendered with its defaults: two
    // replicas, the NATS URL nats://nats:4222): both Pods ready, one leads; its Pod deleted,
    // the other takes over.
    sh(cp, "kubectl apply -k deploy/");
    sh(
        cp,
        &format!("kubectl -n {RELEASE_NS} rollout status deploy/kubosh --timeout=180s"),
    );
    let leader = eventually(cp, "a leader", Duration::from_secs(60), || {
        let holder = sh(cp, &format!("kubectl get lease kubosh-controller -n {RELEASE_NS} -o jsonpath={{.spec.holderIdentity}}"));
        (!holder.is_empty()).then_some(holder)
    })
    .await;
    let deleted = std::time::Instant::now();
    sh(
        cp,
        &format!("kubectl delete pod {leader} -n {RELEASE_NS} --wait=false"),
    );
    let successor = eventually(cp, "a new leader", Duration::from_secs(60), || {
        let holder = sh(cp, &format!("kubectl get lease kubosh-controller -n {RELEASE_NS} -o jsonpath={{.spec.holderIdentity}}"));
        (!holder.is_empty() && holder != leader).then_some(holder)
    })
    .await;
    let handover = deleted.elapsed();
    eprintln!("leader {leader} deleted: {successor} led {handover:.1?} later");
    assert!(
        handover < Duration::from_secs(15),
        "the standby took {handover:?} to take over"
    );
    sh(cp, "kubectl delete -k deploy/ --wait --timeout=180s");
    eventually(
        cp,
        "no object of deploy/ left",
        Duration::from_secs(60),
        || release_leftovers(cp).is_empty().then_some(()),
    )
    .await;
}
