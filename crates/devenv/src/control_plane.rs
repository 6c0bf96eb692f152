//! etcd + kube-apiserver with a CA, RBAC, a service-account signer and two identities:
//! `admin` (group `system:masters`) and `operator` (no rights until RBAC grants them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::bins::{BinError, binary};
use super::files;
use super::node::{self, ControlPlaneAccess, Node, NodeError};
use super::process::{self, ManagedChild, free_port};
use kubosh_base::pki::{Ca, Leaf, PkiError, key_pair_pem};

/// Why a control plane could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    /// A binary is missing.
    #[error(transparent)]
    Binary(#[from] BinError),
    /// Certificates could not be generated.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A process did not become ready in time.
    #[error("{0} did not become ready within {1:?}; its log is in {2}")]
    NotReady(&'static str, Duration, PathBuf),
    /// The Kubernetes client failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The kubeconfig could not be loaded.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The node could not be started.
    #[error("node: {0}")]
    Node(#[from] NodeError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ControlPlaneError {
    let what = what.into();
    move |source| ControlPlaneError::Io { what, source }
}

/// A running etcd + kube-apiserver. Stopped when dropped.
pub struct ControlPlane {
    // Field order is drop order: the node and the garbage collector go first, the apiserver
    // stops before etcd.
    node: Option<Node>,
    garbage_collector: Option<ManagedChild>,
    apiserver: ManagedChild,
    etcd: ManagedChild,
    server: String,
    kubeconfig: PathBuf,
    dir: PathBuf,
    /// Removed when dropped, for a control plane started in a directory of its own.
    _temporary: Option<tempfile::TempDir>,
}

/// The prefix of a control plane's own temporary directory.
const TEMPORARY_PREFIX: &str = "kubosh-cp-";

/// The file in a control plane's temporary directory naming the process it belongs to
/// (`pid start-time`). A test binary's shared control plane is never dropped (it lives in a
/// static) and a killed run drops nothing: their directories (etcd's data, ~130 MB each) are
/// removed by the next start once their process is gone.
const OWNER_FILE: &str = "owner";

/// `pid start-time` of a running process (the start time tells a reused pid apart), from
/// `/proc/<pid>/stat`.
fn process_identity(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name's closing parenthesis start at the third (state);
    // the start time is the 22nd.
    let start = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?;
    Some(format!("{pid} {start}"))
}

/// Removes the control plane directories in `parent` whose owner process is gone (those
/// without an owner file are left alone: they may be being created).
fn remove_abandoned(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if !(entry.file_name().to_string_lossy()).starts_with(TEMPORARY_PREFIX) {
            continue;
        }
        let Ok(owner) = std::fs::read_to_string(entry.path().join(OWNER_FILE)) else {
            continue;
        };
        let alive = (owner.split_whitespace().next())
            .and_then(|pid| pid.parse().ok())
            .and_then(process_identity)
            .is_some_and(|now| now == owner.trim());
        if !alive && let Err(e) = std::fs::remove_dir_all(entry.path()) {
            tracing::debug!(dir = %entry.path().display(), error = %e, "cannot remove an abandoned control plane directory");
        }
    }
}

/// The loopback ports a control plane listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlPlanePorts {
    /// etcd's client port.
    pub etcd_client: u16,
    /// etcd's peer port (a single member, but etcd always listens for peers).
    pub etcd_peer: u16,
    /// kube-apiserver's secure port.
    pub apiserver: u16,
}

impl ControlPlanePorts {
    /// Three ports that were free a moment ago.
    pub fn free() -> std::io::Result<ControlPlanePorts> {
        Ok(ControlPlanePorts {
            etcd_client: free_port()?,
            etcd_peer: free_port()?,
            apiserver: free_port()?,
        })
    }
}

/// What clients need to know of a control plane's credentials: its CA and the tokens of
/// the two identities. The keys stay in their files.
struct Credentials {
    ca_pem: String,
    admin_token: String,
    operator_token: String,
}

const READY_WITHIN: Duration = Duration::from_secs(90);

/// The files a control plane's credentials live in, relative to its directory.
const CREDENTIAL_FILES: [&str; 6] = [
    "pki/ca.crt",
    "pki/apiserver.crt",
    "pki/apiserver.key",
    "pki/sa.key",
    "pki/sa.pub",
    "tokens.csv",
];

impl ControlPlane {
    /// The control plane of this process (one per test binary), started on first use with
    /// `crds` installed; later calls share it (their `crds` are not installed again).
    pub async fn shared(
        crds: impl FnOnce() -> Vec<CustomResourceDefinition>,
    ) -> Result<&'static ControlPlane, ControlPlaneError> {
        static SHARED: tokio::sync::OnceCell<ControlPlane> = tokio::sync::OnceCell::const_new();
        SHARED
            .get_or_try_init(|| async {
                let cp = ControlPlane::start().await?;
                cp.install_crds(&crds()).await?;
                Ok(cp)
            })
            .await
    }

    /// Removes the temporary directories of control planes whose process is gone (a test
    /// binary's shared one, a killed run's), and tears down a node whose process is gone;
    /// [`ControlPlane::start`] does it first.
    pub fn remove_abandoned() {
        node::remove_abandoned();
        remove_abandoned(&std::env::temp_dir());
    }

    /// Starts etcd and kube-apiserver on free loopback ports, everything in a temporary
    /// directory removed with it, and waits until `/readyz` is ok.
    pub async fn start() -> Result<ControlPlane, ControlPlaneError> {
        let temporary = Self::temporary_dir()?;
        let ports = ControlPlanePorts::free().map_err(io("find free ports"))?;
        let mut cp =
            ControlPlane::start_serving(temporary.path(), ports, Serving::Loopback).await?;
        cp._temporary = Some(temporary);
        Ok(cp)
    }

    /// A new temporary directory for a control plane, naming this process as its owner,
    /// once the abandoned ones are removed.
    fn temporary_dir() -> Result<tempfile::TempDir, ControlPlaneError> {
        Self::remove_abandoned();
        let temporary = tempfile::Builder::new()
            .prefix(TEMPORARY_PREFIX)
            .tempdir_in(std::env::temp_dir())
            .map_err(io("create temp dir"))?;
        if let Some(owner) = process_identity(std::process::id()) {
            std::fs::write(temporary.path().join(OWNER_FILE), owner)
                .map_err(io("write the owner file"))?;
        }
        Ok(temporary)
    }

    /// Starts a control plane as [`ControlPlane::start`] does, serving Pods too, and a node
    /// for it (kube-controller-manager, kube-scheduler, containerd, a kubelet, kube-proxy;
    /// see [`Node`]), with the images of `KUBOSH_IMAGE_DIR` imported (the `*.tar` links
    /// tools/images.sh makes there). Waits until the node is Ready. Needs root.
    pub async fn start_with_node() -> Result<ControlPlane, ControlPlaneError> {
        let temporary = Self::temporary_dir()?;
        let ports = ControlPlanePorts::free().map_err(io("find free ports"))?;
        let mut cp = ControlPlane::start_serving(temporary.path(), ports, Serving::Pods).await?;
        cp._temporary = Some(temporary);
        let credentials = read_credentials(&cp.dir).ok_or_else(|| {
            ControlPlaneError::Kubeconfig("the control plane's credentials are missing".into())
        })?;
        let pki = cp.dir.join("pki");
        let access = ControlPlaneAccess {
            apiserver_port: ports.apiserver,
            ca_pem: &credentials.ca_pem,
            admin_token: &credentials.admin_token,
            service_account_key: &pki.join("sa.key"),
            kubelet_client_ca: &pki.join("kubelet-client-ca.crt"),
        };
        let images = image_archives();
        let node = Node::start(&cp.dir.join("node"), &access, cp.client().await?, &images).await?;
        cp.node = Some(node);
        Ok(cp)
    }

    /// The node, for a control plane started with one.
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// Starts etcd and kube-apiserver on `ports` with everything in `dir`, which outlives
    /// them: the credentials (CA, serving certificate, service-account key, tokens) and
    /// etcd's data found there are used again, so a second start serves the same objects to
    /// the same kubeconfig (`<dir>/kubeconfig`, rewritten for the ports). Waits until
    /// `/readyz` is ok.
    pub async fn start_in(
        dir: &Path,
        ports: ControlPlanePorts,
    ) -> Result<ControlPlane, ControlPlaneError> {
        Self::start_serving(dir, ports, Serving::Loopback).await
    }

    async fn start_serving(
        dir: &Path,
        ports: ControlPlanePorts,
        serving: Serving,
    ) -> Result<ControlPlane, ControlPlaneError> {
        let etcd_bin = binary("etcd")?;
        let apiserver_bin = binary("kube-apiserver")?;
        let d = dir;
        let pki = d.join("pki");
        std::fs::create_dir_all(&pki).map_err(io("create pki dir"))?;
        let credentials = match read_credentials(d) {
            Some(existing) => existing,
            None => write_credentials(d)?,
        };
        ensure_front_proxy(d)?;
        ensure_kubelet_client(d)?;

        let ControlPlanePorts {
            etcd_client: client_port,
            etcd_peer: peer_port,
            apiserver: api_port,
        } = ports;
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut etcd_cmd = Command::new(&etcd_bin);
        etcd_cmd
            .args(["--name", "kubosh", "--data-dir"])
            .arg(d.join("etcd"))
            .args([
                "--listen-client-urls",
                &etcd_url,
                "--advertise-client-urls",
                &etcd_url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("kubosh={peer_url}")])
            .args(["--unsafe-no-fsync", "--log-level=warn"]);
        let etcd = spawn_logged(etcd_cmd, &d.join("etcd.log"))?;

        let p = |n: &str| pki.join(n).display().to_string();
        let mut api_cmd = Command::new(&apiserver_bin);
        api_cmd.args([
            format!("--etcd-servers={etcd_url}"),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", pki.display()),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            format!("--token-auth-file={}", d.join("tokens.csv").display()),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            "--authorization-mode=RBAC".into(),
            "--allow-privileged=true".into(),
            format!("--service-cluster-ip-range={}", node::SERVICE_CIDR),
            format!("--kubelet-client-certificate={}", p("kubelet-client.crt")),
            format!("--kubelet-client-key={}", p("kubelet-client.key")),
        ]);
        api_cmd.args(serving.flags());
        api_cmd.args(aggregation_flags(&pki));
        let apiserver = spawn_logged(api_cmd, &d.join("kube-apiserver.log"))?;

        let server = format!("https://127.0.0.1:{api_port}");
        let kubeconfig = d.join("kubeconfig");
        write_private(
            &kubeconfig,
            &kubeconfig_yaml(
                &server,
                &credentials.ca_pem,
                &[
                    ("admin", &credentials.admin_token),
                    ("operator", &credentials.operator_token),
                ],
            ),
        )?;
        let cp = ControlPlane {
            node: None,
            garbage_collector: None,
            apiserver,
            etcd,
            server,
            kubeconfig,
            dir: d.to_path_buf(),
            _temporary: None,
        };
        cp.wait_ready().await?;
        Ok(cp)
    }

    /// Starts kube-controller-manager with two of its controllers, the garbage collector
    /// and the namespace controller, as a cluster has them: a deleted object's dependents
    /// (their `ownerReferences`) are deleted, and so is a deleted namespace's content. A
    /// control plane with a node runs the whole controller manager instead. Its log is
    /// `kube-controller-manager.log` in [`ControlPlane::dir`].
    pub fn start_garbage_collector(&mut self) -> Result<(), ControlPlaneError> {
        if self.garbage_collector.is_some() || self.node.is_some() {
            return Ok(());
        }
        let mut cmd = Command::new(binary("kube-controller-manager")?);
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(["--leader-elect=false", "--secure-port=0"])
            .arg("--controllers=garbagecollector,namespace");
        let log = self.dir.join("kube-controller-manager.log");
        self.garbage_collector = Some(spawn_logged(cmd, &log)?);
        Ok(())
    }

    /// Stops kube-apiserver, then etcd (SIGTERM, then SIGKILL after a few seconds each);
    /// dropping it does the same.
    pub fn stop(&mut self) {
        if let Some(mut collector) = self.garbage_collector.take() {
            collector.stop(Duration::from_secs(10));
        }
        self.apiserver.stop(Duration::from_secs(10));
        self.etcd.stop(Duration::from_secs(10));
    }

    async fn wait_ready(&self) -> Result<(), ControlPlaneError> {
        let deadline = Instant::now() + READY_WITHIN;
        let client = self.client().await?;
        loop {
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| ControlPlaneError::Kubeconfig(e.to_string()))?;
            if let Ok(text) = client.request_text(request).await
                && text.trim() == "ok"
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ControlPlaneError::NotReady(
                    "kube-apiserver",
                    READY_WITHIN,
                    self.dir.join("kube-apiserver.log"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The apiserver URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// A kubeconfig with contexts `admin` (current) and `operator`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The directory holding certificates, logs and etcd data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A client with the admin identity.
    pub async fn client(&self) -> Result<Client, ControlPlaneError> {
        self.client_for_context("admin").await
    }

    /// A client for a kubeconfig context (`admin` or `operator`).
    pub async fn client_for_context(&self, context: &str) -> Result<Client, ControlPlaneError> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)
            .map_err(|e| ControlPlaneError::Kubeconfig(e.to_string()))?;
        let options = KubeConfigOptions {
            context: Some(context.to_string()),
            ..KubeConfigOptions::default()
        };
        let config = Config::from_custom_kubeconfig(kc, &options)
            .await
            .map_err(|e| ControlPlaneError::Kubeconfig(e.to_string()))?;
        Ok(Client::try_from(config)?)
    }

    /// A client authenticating with a bearer token (e.g. a ServiceAccount token).
    pub async fn client_for_token(&self, token: &str) -> Result<Client, ControlPlaneError> {
        let mut config = self.admin_config().await?;
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..Default::default()
        };
        Ok(Client::try_from(config)?)
    }

    async fn admin_config(&self) -> Result<Config, ControlPlaneError> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)
            .map_err(|e| ControlPlaneError::Kubeconfig(e.to_string()))?;
        let options = KubeConfigOptions {
            context: Some("admin".into()),
            ..KubeConfigOptions::default()
        };
        Config::from_custom_kubeconfig(kc, &options)
            .await
            .map_err(|e| ControlPlaneError::Kubeconfig(e.to_string()))
    }

    /// A token of ServiceAccount `name` in `namespace`, from the TokenRequest API (valid for
    /// an hour): what a pod running as that account would get.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, ControlPlaneError> {
        self.service_account_token_for(namespace, name, &[]).await
    }

    /// A token of ServiceAccount `name` in `namespace` bound to `audiences` (none: the
    /// apiserver's own), as a projected volume with those audiences gets it.
    pub async fn service_account_token_for(
        &self,
        namespace: &str,
        name: &str,
        audiences: &[&str],
    ) -> Result<String, ControlPlaneError> {
        let request: TokenRequest =
            serde_json::from_value(serde_json::json!({"spec": {"audiences": audiences}}))
                .map_err(|e| ControlPlaneError::Kubeconfig(e.to_string()))?;
        Api::<ServiceAccount>::namespaced(self.client().await?, namespace)
            .create_token_request(name, &PostParams::default(), &request)
            .await?
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| {
                ControlPlaneError::Kubeconfig(format!("no token for {namespace}/{name}"))
            })
    }

    /// A kubeconfig (YAML) for this control plane whose only user authenticates with
    /// `token`: for a process that must act as a ServiceAccount.
    pub fn kubeconfig_for_token(&self, token: &str) -> Result<String, ControlPlaneError> {
        let ca = std::fs::read_to_string(self.dir.join("pki/ca.crt"))
            .map_err(io("read the cluster CA"))?;
        Ok(kubeconfig_yaml(&self.server, &ca, &[("token", token)]))
    }

    /// `kubectl` with this control plane's kubeconfig.
    pub fn kubectl(&self) -> Result<Command, ControlPlaneError> {
        let mut cmd = Command::new(binary("kubectl")?);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        Ok(cmd)
    }

    /// Creates a namespace (tests use one each, so they can share a control plane).
    pub async fn create_namespace(&self, name: &str) -> Result<(), ControlPlaneError> {
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .map_err(|e| ControlPlaneError::Kubeconfig(e.to_string()))?;
        Api::<Namespace>::all(self.client().await?)
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(())
    }

    /// Applies CRDs (server-side) and waits until each is Established.
    pub async fn install_crds(
        &self,
        crds: &[CustomResourceDefinition],
    ) -> Result<(), ControlPlaneError> {
        let api = Api::<CustomResourceDefinition>::all(self.client().await?);
        let params = PatchParams::apply("kubosh-testenv").force();
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &params, &Patch::Apply(crd)).await?;
        }
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let cond = kube::runtime::conditions::is_crd_established();
            let wait = kube::runtime::wait::await_condition(api.clone(), &name, cond);
            tokio::time::timeout(Duration::from_secs(30), wait)
                .await
                .map_err(|_| {
                    ControlPlaneError::NotReady(
                        "CRD",
                        Duration::from_secs(30),
                        self.dir.join("kube-apiserver.log"),
                    )
                })?
                .map_err(|e| ControlPlaneError::Kubeconfig(e.to_string()))?;
        }
        Ok(())
    }

    /// Process ids of etcd and kube-apiserver.
    pub fn pids(&self) -> [u32; 2] {
        [self.etcd.id(), self.apiserver.id()]
    }

    /// True while both processes run.
    pub fn is_running(&mut self) -> bool {
        self.etcd.is_running() && self.apiserver.is_running()
    }
}

/// The credentials `dir` holds from an earlier start, if all of them are there.
fn read_credentials(dir: &Path) -> Option<Credentials> {
    if !CREDENTIAL_FILES.iter().all(|f| dir.join(f).is_file()) {
        return None;
    }
    let ca_pem = std::fs::read_to_string(dir.join("pki/ca.crt")).ok()?;
    let tokens = std::fs::read_to_string(dir.join("tokens.csv")).ok()?;
    // `token,user,uid[,"groups"]`, one identity per line, as `write_credentials` wrote them.
    let token_of = |user: &str| {
        tokens.lines().find_map(|line| {
            let mut cells = line.split(',');
            let token = cells.next()?;
            (cells.next()? == user).then(|| token.to_string())
        })
    };
    Some(Credentials {
        ca_pem,
        admin_token: token_of("kubosh-admin")?,
        operator_token: token_of("kubosh-operator")?,
    })
}

/// Whom kube-apiserver serves.
#[derive(Debug, Clone, Copy)]
enum Serving {
    /// Processes of this machine only (loopback), with no node: the `kubernetes` Service
    /// has no endpoints and Pods get no ServiceAccount token (no controller makes the
    /// `default` accounts the admission plugin wants).
    Loopback,
    /// Pods of the node too: every address, the `kubernetes` Service pointing at the host's
    /// side of the node's link, ServiceAccount tokens mounted into Pods.
    Pods,
}

impl Serving {
    fn flags(self) -> Vec<String> {
        match self {
            Serving::Loopback => vec![
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                "--endpoint-reconciler-type=none".into(),
                "--disable-admission-plugins=ServiceAccount".into(),
            ],
            Serving::Pods => vec![
                "--bind-address=0.0.0.0".into(),
                format!("--advertise-address={}", node::HOST_SIDE_ADDRESS),
                "--endpoint-reconciler-type=lease".into(),
                // The node's name resolves nowhere; its address does.
                "--kubelet-preferred-address-types=InternalIP".into(),
            ],
        }
    }
}

/// The image archives a node imports: the `*.tar` links in `KUBOSH_IMAGE_DIR`, else in
/// `~/.cache/kubosh/images` (tools/images.sh links each image's current archive there, beside
/// the versioned files).
fn image_archives() -> Vec<PathBuf> {
    let Some(Ok(entries)) = super::bins::image_dir().map(std::fs::read_dir) else {
        return Vec::new();
    };
    let mut archives: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tar") && p.is_symlink())
        .collect();
    archives.sort();
    archives
}

/// The aggregation layer: requests to an APIService (kubosh's ops API) are proxied to its
/// endpoints with the front-proxy client certificate (in `pki`) and the user in headers.
fn aggregation_flags(pki: &Path) -> Vec<String> {
    let p = |n: &str| pki.join(n).display().to_string();
    vec![
        format!("--requestheader-client-ca-file={}", p("front-proxy-ca.crt")),
        format!("--requestheader-allowed-names={FRONT_PROXY_CLIENT}"),
        "--requestheader-username-headers=X-Remote-User".into(),
        "--requestheader-group-headers=X-Remote-Group".into(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
        format!("--proxy-client-cert-file={}", p("front-proxy-client.crt")),
        format!("--proxy-client-key-file={}", p("front-proxy-client.key")),
        "--enable-aggregator-routing=true".into(),
    ]
}

/// The common name of the certificate kube-apiserver proxies aggregated requests with.
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// Writes the front-proxy CA and kube-apiserver's client certificate of it into `dir`,
/// unless they are there (a state directory from before they existed gets them).
fn ensure_front_proxy(dir: &Path) -> Result<(), ControlPlaneError> {
    ensure_client_pair(
        dir,
        [
            "pki/front-proxy-ca.crt",
            "pki/front-proxy-client.crt",
            "pki/front-proxy-client.key",
        ],
        "kubosh-front-proxy-ca",
        &Leaf {
            common_name: FRONT_PROXY_CLIENT,
            client: true,
            ..Leaf::default()
        },
    )
}

/// Writes the CA the kubelet trusts for kube-apiserver's client certificate (logs, exec) and
/// that certificate (group `system:masters`) into `dir`, unless they are there.
fn ensure_kubelet_client(dir: &Path) -> Result<(), ControlPlaneError> {
    ensure_client_pair(
        dir,
        [
            "pki/kubelet-client-ca.crt",
            "pki/kubelet-client.crt",
            "pki/kubelet-client.key",
        ],
        "kubosh-kubelet-client-ca",
        &Leaf {
            common_name: "kube-apiserver-kubelet-client",
            organizations: &["system:masters"],
            client: true,
            ..Leaf::default()
        },
    )
}

/// A CA named `ca_name` and a `client` certificate it issues, written into `dir` as
/// `files` (the CA's certificate, the client's certificate, its key) unless all are there.
fn ensure_client_pair(
    dir: &Path,
    files: [&str; 3],
    ca_name: &str,
    client: &Leaf<'_>,
) -> Result<(), ControlPlaneError> {
    if files.iter().all(|f| dir.join(f).is_file()) {
        return Ok(());
    }
    let ca = Ca::new(ca_name)?;
    let client = ca.issue(client)?;
    let contents = [ca.cert_pem(), client.cert_pem, client.key_pem];
    for (name, content) in files.iter().zip(contents) {
        write_private(&dir.join(name), &content)?;
    }
    Ok(())
}

/// Generates a CA, the apiserver's serving certificate, a service-account signing key and
/// the identities' tokens, and writes them into `dir` (see [`CREDENTIAL_FILES`]).
fn write_credentials(dir: &Path) -> Result<Credentials, ControlPlaneError> {
    let ca = Ca::new("kubosh-test-ca")?;
    let serving = ca.issue(&Leaf {
        common_name: "kube-apiserver",
        // The loopback names, and those Pods use: the `kubernetes` Service's name and IP,
        // the address a node reaches it on.
        alternative_names: &[
            "localhost",
            "127.0.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "10.0.0.1",
            node::HOST_SIDE_ADDRESS,
        ],
        server: true,
        ..Leaf::default()
    })?;
    let (sa_key, sa_pub) = key_pair_pem()?;
    let admin_token = kubosh_base::ids::random_hex(24);
    let operator_token = kubosh_base::ids::random_hex(24);
    let files = [
        ("pki/ca.crt", ca.cert_pem()),
        ("pki/apiserver.crt", serving.cert_pem),
        ("pki/apiserver.key", serving.key_pem),
        ("pki/sa.key", sa_key),
        ("pki/sa.pub", sa_pub),
        (
            "tokens.csv",
            format!(
                "{admin_token},kubosh-admin,u-admin,\"system:masters\"\n{operator_token},kubosh-operator,u-operator\n"
            ),
        ),
    ];
    // The token file last: its presence says the set is complete.
    for (name, content) in &files {
        write_private(&dir.join(name), content)?;
    }
    Ok(Credentials {
        ca_pem: ca.cert_pem(),
        admin_token,
        operator_token,
    })
}

fn write_private(path: &Path, content: &str) -> Result<(), ControlPlaneError> {
    files::write_private(path, content).map_err(io(format!("write {}", path.display())))
}

fn spawn_logged(cmd: Command, log: &Path) -> Result<ManagedChild, ControlPlaneError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    process::spawn_logged(cmd, log).map_err(io(format!("start {program}")))
}

/// A kubeconfig with one user and one context of its name per `(name, token)`, the first
/// current.
pub(crate) fn kubeconfig_yaml(server: &str, ca_pem: &str, users: &[(&str, &str)]) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubosh-test\n  cluster:\n    \
         server: {server}\n    certificate-authority-data: {ca}\nusers:\n"
    );
    for (name, token) in users {
        yaml += &format!("- name: {name}\n  user:\n    token: {token}\n");
    }
    yaml += "contexts:\n";
    for (name, _) in users {
        yaml += &format!("- name: {name}\n  context: {{cluster: kubosh-test, user: {name}}}\n");
    }
    let current = users.first().map_or("", |(name, _)| name);
    yaml + &format!("current-context: {current}\n")
}
