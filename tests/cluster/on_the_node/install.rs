//! README's "Install on a cluster", step by step with the real `kubosh`, `kubectl` and
//! `helm`: the director's NATS in the cluster (examples/cluster/nats.yaml: mutual TLS,
//! per-agent authorization on a shared volume, its config reloader), `helm install` of
//! charts/kubosh with the image the Dockerfile built, the example CloudConfig, Release,
//! Stemcell and Deployment applied and seen `Ready` with the controller running in its Pod,
//! an instance's logs fetched through the ops API (`kubectl bosh logs`); then the Deployment
//! deleted and its owned objects garbage-collected, and `helm uninstall` leaving no
//! controller object behind.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kubosh_devenv::{ControlPlane, ManagedChild, NODE_NAME};

use crate::{cluster, diagnosis, eventually, kubectl, root, sh};

const RELEASE_NS: &str = "kubosh-system";
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

/// `kubosh ARGS` (the binary under test), which must succeed.
fn kubosh(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kubosh"))
        .args(args)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "kubosh {args:?}:\n{stdout}\n{stderr}");
    stdout
}

/// The NATS a director needs, in the cluster: its certificates (`kubosh nats-pki`), the
/// Secrets and the seed the manifest names, a ReadWriteMany claim for the authorization
/// file (here a hostPath volume on the node; a cluster's storage class elsewhere), then
/// examples/cluster/nats.yaml, rolled out.
fn install_nats(cp: &ControlPlane, pki: &Path) {
    let pki = pki.display();
    kubosh(&[
        "nats-pki",
        "--dir",
        &pki.to_string(),
        "--host",
        "nats.kubosh-system.svc",
        "--host",
        "nats",
    ]);
    sh(
        cp,
        &format!(
            "kubectl -n {RELEASE_NS} create secret generic nats-tls \
         --from-file={pki}/ca.crt --from-file={pki}/nats.crt --from-file={pki}/nats.key"
        ),
    );
    sh(
        cp,
        &format!(
            "kubectl -n {RELEASE_NS} create configmap nats-authorization-seed \
         --from-file={pki}/authorization.json"
        ),
    );
    sh(
        cp,
        &format!(
            "kubectl -n {RELEASE_NS} create secret generic kubosh-nats \
         --from-file={pki}/ca.crt --from-file={pki}/ca.key \
         --from-file={pki}/director.crt --from-file={pki}/director.key"
        ),
    );
    apply_json(cp, &shared_volume(cp, "nats-authorization", "10Mi"));
    sh(cp, "kubectl apply -f examples/cluster/nats.yaml");
    sh(
        cp,
        &format!("kubectl -n {RELEASE_NS} rollout status deploy/nats --timeout=180s"),
    );
}

/// A ReadWriteMany claim `name` in the release namespace: here a hostPath volume on the
/// node (a cluster's storage class elsewhere).
fn shared_volume(cp: &ControlPlane, name: &str, size: &str) -> serde_json::Value {
    let node_dir = cp.node().expect("a node").dir();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "claimRef": {"namespace": RELEASE_NS, "name": name},
                    "hostPath": {
                        "path": node_dir.join("volumes").join(name).display().to_string(),
                        "type": "DirectoryOrCreate",
                    },
                },
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": RELEASE_NS},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "volumeName": name,
                    "resources": {"requests": {"storage": size}},
                },
            },
        ],
    })
}

fn apply_json(cp: &ControlPlane, object: &serde_json::Value) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), object.to_string()).unwrap();
    kubectl(cp, &["apply", "-f", &file.path().display().to_string()]);
}

/// The example release and stemcell served over HTTP from this machine, at the address the
/// node's Pods reach it on; the Release and Stemcell objects naming them.
fn serve_artifacts(dir: &Path) -> (ManagedChild, serde_json::Value) {
    let release = kubosh_devenv::demo::example_release_artifact(dir).unwrap();
    let stemcell = kubosh_devenv::demo::local_stemcell_artifact(dir).unwrap();
    let port = kubosh_devenv::free_port().unwrap();
    let address = kubosh_devenv::NODE_HOST_SIDE_ADDRESS;
    let mut server = Command::new("python3");
    server
        .args([
            "-m",
            "http.server",
            "--bind",
            address,
            &port.to_string(),
            "--directory",
        ])
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let server = kubosh_devenv::spawn_tied(server).unwrap();
    let url = |path: &Path| {
        format!(
            "http://{address}:{port}/{}",
            path.file_name().unwrap().to_string_lossy()
        )
    };
    let objects = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "kubosh.io/v1alpha1",
                "kind": "Release",
                "metadata": {"name": "hello-1.0.0", "namespace": BOSH_NS},
                "spec": {"name": "hello", "version": "1.0.0", "url": url(&release.path), "sha1": release.digest},
            },
            {
                "apiVersion": "kubosh.io/v1alpha1",
                "kind": "Stemcell",
                "metadata": {"name": "bosh-kubosh-local-ubuntu-jammy-1.0", "namespace": BOSH_NS},
                "spec": {
                    "name": "bosh-kubosh-local-ubuntu-jammy", "version": "1.0",
                    "url": url(&stemcell.path), "sha1": stemcell.digest,
                },
            },
        ],
    });
    (server, objects)
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
    const OURS: [&str; 10] = [
        "configmap/kube-root-ca.crt",
        "persistentvolumeclaim/kubosh-blobs",
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
    let cp = cluster().await;
    let work = tempfile::tempdir().unwrap();
    sh(cp, &format!("kubectl create namespace {RELEASE_NS}"));
    install_nats(cp, &work.path().join("pki"));

    // The chart, with the image the Dockerfile built (imported into the node): two
    // replicas, and the local cloud in a Pod of its own, which shares the blobstore's claim.
    // A hostPath volume takes no fsGroup: its directory is made the Pods' user's here, as a
    // cluster's storage class would.
    let blobs = cp
        .node()
        .expect("a node")
        .dir()
        .join("volumes/kubosh-blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    std::os::unix::fs::chown(&blobs, Some(65532), Some(65532)).unwrap();
    apply_json(cp, &shared_volume(cp, "kubosh-blobs", "1Gi"));
    sh(
        cp,
        &format!(
            "helm install kubosh charts/kubosh -n {RELEASE_NS} \
         --set nats.url=nats://nats.kubosh-system.svc:4222 \
         --set nats.authorization.enabled=true \
         --set nats.authorization.claimName=nats-authorization \
         --set cpi.localCloud.ownPod=true \
         --set blobstore.persistence.enabled=true \
         --set blobstore.persistence.existingClaim=kubosh-blobs \
         --wait --timeout 3m"
        ),
    );
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
    let (_server, artifacts) = serve_artifacts(&work.path().join("artifacts"));
    sh(
        cp,
        "kubectl apply --server-side -f examples/local/cloud-config.yaml",
    );
    apply_json(cp, &artifacts);
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
}
