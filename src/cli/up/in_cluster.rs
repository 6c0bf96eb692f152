//! `kubosh up --in-cluster`: the same demo with the controller as Pods, installed the way
//! README's "Install on a cluster" says. A dev cluster with a node (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, containerd, a kubelet, kube-proxy, CoreDNS;
//! `kubosh dev cluster --node`) with the images of tools/images.sh imported, the director's
//! NATS in it (examples/cluster/nats.yaml), `helm install` of charts/kubosh with the local
//! cloud in a Pod of its own, then the example applied and followed to Ready and its errand
//! run, as `kubosh up` does. The cluster is temporary: stopping removes the node, its Pods
//! and the control plane (the built tarballs and images are kept). The steps themselves are
//! `kubosh_devenv::in_cluster`.

use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;

use kubosh_devenv::demo::{DemoLayout, TarballSource};
use kubosh_devenv::in_cluster::{ArtifactServer, Installer, RELEASE_NAMESPACE};
use kubosh_devenv::{ControlPlane, Node};

use super::apply::{self, kubectl};
use super::{
    DEPLOYMENT, NAMESPACE, Outcome, Say, UpArgs, client_of, errand, failed, follow_deployment,
    install_binaries, interrupted, kubosh_executable, on_path, progress, report,
    runtime_and_stop_signals, source_tree,
};
use crate::cli::signals::StopSignals;

/// What runs while the demo does; dropped, the cluster and the tarballs' server stop.
#[derive(Default)]
struct Running {
    // Field order is drop order: the server before the cluster it serves.
    server: Option<ArtifactServer>,
    cluster: Option<ControlPlane>,
}

/// Runs `kubosh up --in-cluster` with its state (the tarballs, the NATS certificates, the
/// applied manifests) in `layout`.
pub(super) fn up(args: &UpArgs, layout: &DemoLayout, say: Say) -> Result<ExitCode, String> {
    // Before anything long is built: a node needs root and the system's container tools.
    Node::preflight().map_err(|e| e.to_string())?;
    if !on_path("python3") {
        return Err("the tarballs are served to the node's Pods by python3 -m http.server: apt-get install python3".into());
    }
    let source_tree = source_tree();
    let kubosh = kubosh_executable()?;
    install_binaries(say)?;
    if std::env::var_os("KUBOSH_IMAGE_DIR").is_none() {
        say.line("building or reusing the node's images (tools/images.sh: the Dockerfile, NATS, CoreDNS; a first build takes many minutes)");
    }
    let images = kubosh_devenv::install_images(&source_tree, |line| eprintln!("    {line}"))
        .map_err(|e| e.to_string())?;
    say.line(&format!("images: {}", images.display()));
    let (runtime, mut stop) = runtime_and_stop_signals()?;
    let mut running = Running::default();
    let outcome = runtime.block_on(async {
        tokio::select! {
            result = converge(args, layout, &source_tree, &kubosh, &mut running, say) => result.map(|report| Outcome::Ready(Box::new(report))),
            () = stop.requested() => Ok(Outcome::Interrupted),
        }
    });
    let code = match outcome {
        Ok(Outcome::Ready(report)) => {
            let kubeconfig = running
                .cluster
                .as_ref()
                .map(|cp| cp.kubeconfig_path().to_path_buf());
            report.print(
                &kubeconfig.unwrap_or_default(),
                &where_things_are(running.cluster.as_ref()),
            );
            if args.exit_when_ready {
                say.line("--exit-when-ready: stopping everything");
            } else {
                say.line("running; Ctrl-C stops everything and removes the cluster");
                runtime.block_on(follow_until_stopped(
                    running.cluster.as_ref(),
                    &mut stop,
                    say,
                ));
                say.line("stopping everything");
            }
            ExitCode::SUCCESS
        }
        Ok(Outcome::Interrupted) => interrupted(say),
        Err(e) => failed(&e, say),
    };
    if running.cluster.is_some() {
        drop(running);
        say.line("stopped: the node, its Pods and the control plane are removed");
    }
    Ok(code)
}

/// Starts the cluster into `running`, installs NATS and the chart, applies the example and
/// follows the deploy until it converged and its errand ran.
async fn converge(
    args: &UpArgs,
    layout: &DemoLayout,
    source_tree: &Path,
    kubosh: &Path,
    running: &mut Running,
    say: Say,
) -> Result<report::Report, String> {
    say.line("starting etcd, kube-apiserver and a node (kube-controller-manager, kube-scheduler, containerd, a kubelet, kube-proxy, CoreDNS) with the images imported");
    let mut cp = ControlPlane::start_with_node()
        .await
        .map_err(|e| e.to_string())?;
    cp.start_garbage_collector().map_err(|e| e.to_string())?;
    let cp = &*running.cluster.insert(cp);
    say.line(&format!("the cluster is ready: {}", cp.server()));
    let install = Installer::new(cp, source_tree, kubosh);
    let failed = |e: kubosh_devenv::in_cluster::InClusterError| e.to_string();

    say.line(&format!("kubectl create namespace {RELEASE_NAMESPACE}"));
    install.create_namespace().map_err(failed)?;
    say.line("NATS: kubosh nats-pki, its Secrets, a claim for the authorization file, kubectl apply -f examples/cluster/nats.yaml");
    let pki = layout.root().join("pki");
    // A new cluster, new certificates.
    let _ = std::fs::remove_dir_all(&pki);
    install.install_nats(&pki).map_err(failed)?;
    say.line("helm install kubosh charts/kubosh (2 replicas; the local cloud in a Pod of its own, sharing the blobstore's claim) --wait");
    install.install_chart(&[]).map_err(failed)?;
    say.line(&format!(
        "the controller runs: kubectl -n {RELEASE_NAMESPACE} get pods"
    ));

    apply::apply_namespace(cp, layout, NAMESPACE, say)?;
    let server = install
        .serve_artifacts(&layout.artifacts())
        .map_err(failed)?;
    let server = running.server.insert(server);
    say.line(&format!(
        "the example release and the stemcell ({}) served to the node's Pods: {}",
        layout.artifacts().display(),
        served_directory(&server.release)
    ));
    let applied = SystemTime::now();
    apply::apply_examples(
        cp,
        layout,
        &server.release,
        &server.stemcell,
        NAMESPACE,
        say,
    )?;
    let client = cp.client().await.map_err(|e| e.to_string())?;
    let converged = progress::converge(
        &client,
        NAMESPACE,
        DEPLOYMENT,
        applied,
        args.timeout,
        &mut ControllerPods(cp),
        say,
    )
    .await?;
    let errand = errand::run_smoke_tests(cp, &client, NAMESPACE, args.timeout, say).await?;
    Ok(report::Report::new(cp, NAMESPACE, converged, errand))
}

/// The directory part of a served tarball's URL.
fn served_directory(tarball: &TarballSource) -> &str {
    tarball
        .url
        .rsplit_once('/')
        .map_or(&tarball.url, |(dir, _)| dir)
}

/// The controller's Pods: the kubelet restarts a container that exits, so only its log
/// says what went wrong.
struct ControllerPods<'a>(&'a ControlPlane);

impl progress::Watched for ControllerPods<'_> {
    fn gone(&mut self) -> Option<String> {
        None
    }

    fn log_tail(&self) -> String {
        let args = [
            "logs",
            "-n",
            RELEASE_NAMESPACE,
            "deploy/kubosh",
            "--tail=20",
        ];
        let log = kubectl(self.0, &args).unwrap_or_else(|e| e);
        format!(
            "the end of the controller's log (kubectl {}):\n{log}",
            args.join(" ")
        )
    }

    fn reaches_instances(&self) -> bool {
        // The VMs are processes in the cloud's Pod, on its loopback addresses: the errand
        // asks each instance from another VM.
        false
    }
}

/// The report's last lines: where the controller, the cloud and the node are.
fn where_things_are(cluster: Option<&ControlPlane>) -> String {
    let node = cluster
        .and_then(ControlPlane::node)
        .map(|n| n.dir().display().to_string())
        .unwrap_or_default();
    format!(
        "The controller's Pods and the local cloud's: kubectl -n {ns} get pods\n\
         The controller's log: kubectl -n {ns} logs deploy/kubosh; the cloud's: kubectl -n {ns} logs deploy/kubosh-cloud\n\
         The cloud's VMs: kubectl -n {ns} exec deploy/kubosh-cloud -- kubosh cpi --config /etc/kubosh/cpi/cpi.yml inventory\n\
         The node's logs and state (removed when this stops): {node}",
        ns = RELEASE_NAMESPACE,
    )
}

/// Prints the deployment's changes until SIGINT or SIGTERM.
async fn follow_until_stopped(cluster: Option<&ControlPlane>, stop: &mut StopSignals, say: Say) {
    let follow = follow_deployment(client_of(cluster).await, say);
    tokio::select! {
        () = follow => {}
        () = stop.requested() => {}
    }
}
