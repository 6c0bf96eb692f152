//! kubosh installed on the dev cluster's node as README's "Install on a cluster" says, step
//! by step with the real `kubosh`, `kubectl` and `helm`: the director's NATS in the cluster
//! (examples/cluster/nats.yaml: mutual TLS, per-agent authorization on a shared volume, its
//! config reloader), `helm install` of charts/kubosh with the image the Dockerfile built and
//! the local cloud in a Pod of its own, and the example's tarballs served over HTTP to the
//! node's Pods. `kubosh up --in-cluster` and the `cluster` tests take these steps.
//!
//! Shared volumes are hostPath PersistentVolumes on the node (a cluster's storage class
//! elsewhere): the node's Pods run on this machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::demo::{
    ArtifactError, TarballSource, example_release_artifact, local_stemcell_artifact,
};
use crate::{BinError, ControlPlane, ManagedChild, binary, free_port, spawn_tied};

/// The namespace the chart and NATS are installed in.
pub const RELEASE_NAMESPACE: &str = "kubosh-system";
/// The Helm release's name.
pub const RELEASE: &str = "kubosh";
/// The user the chart's Pods run as (a hostPath volume takes no `fsGroup`).
const POD_USER: u32 = 65532;

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum InClusterError {
    /// The control plane has no node to run Pods on.
    #[error("the cluster has no node: start it with ControlPlane::start_with_node")]
    NoNode,
    /// A binary (kubectl, helm) is missing.
    #[error(transparent)]
    Binary(#[from] BinError),
    /// A command failed.
    #[error("{command}: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Its error output, or why it did not run.
        detail: String,
    },
    /// A file could not be written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The example's tarballs could not be built.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> InClusterError {
    let what = what.into();
    move |source| InClusterError::Io { what, source }
}

/// Runs the steps on a control plane with a node, from the source tree `root` (the chart
/// and the examples are named relative to it), with `kubosh` the binary whose image the
/// node runs.
pub struct Installer<'a> {
    cp: &'a ControlPlane,
    root: PathBuf,
    kubosh: PathBuf,
}

impl<'a> Installer<'a> {
    /// An installer for `cp`'s node.
    pub fn new(cp: &'a ControlPlane, root: &Path, kubosh: &Path) -> Installer<'a> {
        Installer {
            cp,
            root: root.to_path_buf(),
            kubosh: kubosh.to_path_buf(),
        }
    }

    /// Runs a command line of `kubectl` or `helm` (words split on whitespace, no quoting)
    /// with the cluster's kubeconfig, in the source tree: its stdout.
    pub fn sh(&self, line: &str) -> Result<String, InClusterError> {
        let mut words = line.split_whitespace();
        let program = words.next().unwrap_or_default();
        let args: Vec<&str> = words.collect();
        self.run(&binary(program)?, &args)
    }

    /// Runs `program ARGS` with the cluster's kubeconfig, in the source tree: its stdout.
    pub fn run(&self, program: &Path, args: &[&str]) -> Result<String, InClusterError> {
        let command = || {
            let name = program.file_name().unwrap_or_default().to_string_lossy();
            format!("{name} {}", args.join(" "))
        };
        let out = Command::new(program)
            .args(args)
            .env("KUBECONFIG", self.cp.kubeconfig_path())
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| InClusterError::Command {
                command: command(),
                detail: e.to_string(),
            })?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            return Err(InClusterError::Command {
                command: command(),
                detail: format!("{}\n{}", out.status, said.trim()),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply -f` of `manifest` (YAML or JSON).
    pub fn apply(&self, manifest: &str) -> Result<(), InClusterError> {
        let file = tempfile::NamedTempFile::new().map_err(io("a temporary file"))?;
        std::fs::write(file.path(), manifest).map_err(io("write the manifest"))?;
        self.run(
            &binary("kubectl")?,
            &["apply", "-f", &file.path().display().to_string()],
        )?;
        Ok(())
    }

    /// The release namespace.
    pub fn create_namespace(&self) -> Result<(), InClusterError> {
        self.sh(&format!("kubectl create namespace {RELEASE_NAMESPACE}"))?;
        Ok(())
    }

    /// The NATS a director needs, in the cluster: its certificates (`kubosh nats-pki` into
    /// `pki`), the Secrets and the seed the manifest names, a ReadWriteMany claim for the
    /// authorization file, then examples/cluster/nats.yaml, rolled out.
    pub fn install_nats(&self, pki: &Path) -> Result<(), InClusterError> {
        let pki = pki.display();
        let ns = RELEASE_NAMESPACE;
        self.run(
            &self.kubosh,
            &[
                "nats-pki",
                "--dir",
                &pki.to_string(),
                "--host",
                "nats.kubosh-system.svc",
                "--host",
                "nats",
            ],
        )?;
        self.sh(&format!(
            "kubectl -n {ns} create secret generic nats-tls \
             --from-file={pki}/ca.crt --from-file={pki}/nats.crt --from-file={pki}/nats.key"
        ))?;
        self.sh(&format!(
            "kubectl -n {ns} create configmap nats-authorization-seed \
             --from-file={pki}/authorization.json"
        ))?;
        self.sh(&format!(
            "kubectl -n {ns} create secret generic kubosh-nats \
             --from-file={pki}/ca.crt --from-file={pki}/ca.key \
             --from-file={pki}/director.crt --from-file={pki}/director.key"
        ))?;
        self.shared_volume("nats-authorization", "10Mi")?;
        self.sh("kubectl apply -f examples/cluster/nats.yaml")?;
        self.sh(&format!(
            "kubectl -n {ns} rollout status deploy/nats --timeout=180s"
        ))?;
        Ok(())
    }

    /// A ReadWriteMany claim `name` in the release namespace: a hostPath volume on the node,
    /// its directory the Pods' user's (as a cluster's storage class would make it).
    pub fn shared_volume(&self, name: &str, size: &str) -> Result<(), InClusterError> {
        let node = self.cp.node().ok_or(InClusterError::NoNode)?;
        let dir = node.dir().join("volumes").join(name);
        std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
        std::os::unix::fs::chown(&dir, Some(POD_USER), Some(POD_USER))
            .map_err(io(format!("chown {}", dir.display())))?;
        let volume = serde_json::json!({
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
                        "claimRef": {"namespace": RELEASE_NAMESPACE, "name": name},
                        "hostPath": {"path": dir.display().to_string(), "type": "Directory"},
                    },
                },
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": name, "namespace": RELEASE_NAMESPACE},
                    "spec": {
                        "accessModes": ["ReadWriteMany"],
                        "storageClassName": "",
                        "volumeName": name,
                        "resources": {"requests": {"storage": size}},
                    },
                },
            ],
        });
        self.apply(&volume.to_string())
    }

    /// `helm install` of charts/kubosh with the image the Dockerfile built, NATS as
    /// [`Installer::install_nats`] installed it, and the local cloud in a Pod of its own
    /// sharing the blobstore's claim `kubosh-blobs` with the controller's replicas, its
    /// state on the claim `kubosh-cloud-state`; `set` adds values. Waits for the Pods'
    /// readiness.
    pub fn install_chart(&self, set: &[&str]) -> Result<(), InClusterError> {
        self.shared_volume("kubosh-blobs", "1Gi")?;
        self.shared_volume("kubosh-cloud-state", "1Gi")?;
        let mut line = format!(
            "helm install {RELEASE} charts/kubosh -n {RELEASE_NAMESPACE} \
             -f examples/cluster/values.yaml --wait --timeout 3m"
        );
        for value in set {
            line += &format!(" --set {value}");
        }
        self.sh(&line)?;
        Ok(())
    }

    /// The example release and stemcell (built into `dir` when missing or changed) served
    /// over HTTP on the host's end of the node's link, where its Pods reach them.
    pub fn serve_artifacts(&self, dir: &Path) -> Result<ArtifactServer, InClusterError> {
        let release = example_release_artifact(dir)?;
        let stemcell = local_stemcell_artifact(dir)?;
        let port = free_port().map_err(io("a free port"))?;
        let address = crate::NODE_HOST_SIDE_ADDRESS;
        let mut server = Command::new("python3");
        server
            .args(["-m", "http.server", "--bind", address])
            .arg(port.to_string())
            .arg("--directory")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let server = spawn_tied(server).map_err(io("start python3 -m http.server"))?;
        let served = |artifact: crate::demo::Artifact| {
            let file = artifact.path.file_name().unwrap_or_default();
            TarballSource {
                url: format!("http://{address}:{port}/{}", file.to_string_lossy()),
                digest: artifact.digest,
            }
        };
        Ok(ArtifactServer {
            _server: server,
            release: served(release),
            stemcell: served(stemcell),
        })
    }
}

/// The example's tarballs, served over HTTP while this lives (`demo::example_objects` names
/// them).
pub struct ArtifactServer {
    _server: ManagedChild,
    /// The example release `hello/1.0.0`.
    pub release: TarballSource,
    /// The local cloud's stemcell.
    pub stemcell: TarballSource,
}
