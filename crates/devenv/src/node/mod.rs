//! A node for the dev cluster, so Deployments, Services and Pods run: kube-controller-manager
//! and kube-scheduler beside the control plane, and containerd (runc, CNI bridge networking),
//! a kubelet and kube-proxy in a network namespace of their own.
//!
//! The namespace keeps the node's bridge, its iptables rules (kube-proxy's, CNI's) and its
//! Pods' addresses off the host: deleting it takes them all. The host reaches it through a
//! veth pair (`10.89.0.1` here, `10.89.0.2` there), with routes to the Pod and Service
//! ranges; kube-apiserver serves the Pods on the host's side of the pair. Nothing can be
//! pulled from a registry here: a Pod's image must be imported first ([`Node::import`]), and
//! the Pod sandbox is `localhost/kubosh/pause:1` (tools/images.sh).
//!
//! One node per machine at a time (the lock file [`LOCK_FILE`]): the namespace, the cgroup
//! and the addresses have fixed names. A node whose process died (a killed test run) is torn
//! down by the next start: its containers, the shims that hold them, its mounts, cgroups and
//! namespace.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as NodeObject;
use kube::Api;

use super::bins::{BinError, binary};
use super::files;
use super::process::{self, ManagedChild};

/// The node's name in the API.
pub const NODE_NAME: &str = "kubosh-node";
/// The address of kube-apiserver as the node and its Pods see it: the host's end of the
/// veth pair.
pub const HOST_SIDE_ADDRESS: &str = "10.89.0.1";
/// The node's own address (the other end of the pair), its `InternalIP`.
pub const NODE_ADDRESS: &str = "10.89.0.2";
/// The Pods' addresses (one bridge, host-local allocation).
pub const POD_CIDR: &str = "10.244.0.0/24";
/// The Services' cluster IPs (kube-apiserver's `--service-cluster-ip-range`).
pub const SERVICE_CIDR: &str = "10.0.0.0/24";
/// The lock file held by the process whose node runs; it names the node's directory.
pub const LOCK_FILE: &str = "/run/kubosh-node.lock";

const NETNS: &str = "kubosh-node";
const HOST_LINK: &str = "kubosh-node";
const CGROUP: &str = "kubosh-node";
const READY_WITHIN: Duration = Duration::from_secs(120);
/// The cluster DNS's Service address (the kubelet's `clusterDNS`).
const DNS_ADDRESS: &str = "10.0.0.10";
const DNS_MANIFEST: &str = include_str!("dns.yaml");

/// Why a node could not be started.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A binary is missing.
    #[error(transparent)]
    Binary(#[from] BinError),
    /// A system tool (containerd, runc, ip, iptables, nsenter) is missing.
    #[error(
        "the node needs `{0}` (Debian: apt-get install containerd runc containernetworking-plugins iptables conntrack iproute2)"
    )]
    Tool(&'static str),
    /// The node needs root (network namespaces, cgroups, mounts).
    #[error("a node needs root: it makes a network namespace, cgroups and mounts")]
    NotRoot,
    /// Another process's node runs on this machine.
    #[error("another kubosh node runs on this machine (its directory: {0}); stop it first")]
    Busy(String),
    /// A command failed.
    #[error("{what}: {detail}")]
    Command {
        /// What was being done.
        what: String,
        /// The command's error output or exit status.
        detail: String,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The node did not become Ready in time.
    #[error("node {NODE_NAME} was not Ready within {0:?}; the end of the kubelet's log:\n{1}")]
    NotReady(Duration, String),
    /// The Kubernetes client failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodeError {
    let what = what.into();
    move |source| NodeError::Io { what, source }
}

/// What the node needs of its control plane.
pub(crate) struct ControlPlaneAccess<'a> {
    /// kube-apiserver's port (it listens on every address).
    pub apiserver_port: u16,
    /// The cluster CA (PEM).
    pub ca_pem: &'a str,
    /// A `system:masters` bearer token for the node's components.
    pub admin_token: &'a str,
    /// The service-account signing key (kube-controller-manager's token controller).
    pub service_account_key: &'a Path,
    /// The CA kube-apiserver's kubelet client certificate is issued by.
    pub kubelet_client_ca: &'a Path,
}

/// A running node. Torn down when dropped (or at exit, for a shared one).
pub struct Node {
    // Field order is drop order: the kubelet first, containerd last.
    kubelet: ManagedChild,
    proxy: ManagedChild,
    scheduler: ManagedChild,
    controller_manager: ManagedChild,
    containerd: ManagedChild,
    dir: PathBuf,
    _lock: std::fs::File,
}

impl Node {
    /// Starts a node whose files live in `dir` (removed on teardown), for the control plane
    /// `access` describes, and waits until it is Ready; `client` is an admin client.
    pub(crate) async fn start(
        dir: &Path,
        access: &ControlPlaneAccess<'_>,
        client: kube::Client,
        images: &[PathBuf],
    ) -> Result<Node, NodeError> {
        Self::preflight()?;
        let lock = take_lock(dir)?;
        // A node that did not come up leaves nothing behind either (its processes are
        // stopped as they are dropped).
        Self::start_locked(dir, access, client, images, lock)
            .await
            .inspect_err(|_| teardown(dir))
    }

    async fn start_locked(
        dir: &Path,
        access: &ControlPlaneAccess<'_>,
        client: kube::Client,
        images: &[PathBuf],
        lock: std::fs::File,
    ) -> Result<Node, NodeError> {
        std::fs::create_dir_all(dir).map_err(io("create the node directory"))?;
        let files = NodeFiles::write(dir, access)?;
        make_network()?;
        make_cgroup()?;
        let containerd = spawn_in_netns(
            Command::new("containerd")
                .arg("--config")
                .arg(&files.containerd_config),
            &dir.join("containerd.log"),
        )?;
        wait_containerd(&files.containerd_socket, &dir.join("containerd.log")).await?;
        for archive in images {
            import(&files.containerd_socket, archive)?;
        }

        let mut controller_manager = Command::new(binary("kube-controller-manager")?);
        controller_manager
            .arg(format!("--kubeconfig={}", files.kubeconfig.display()))
            .args(["--leader-elect=false", "--secure-port=0"])
            .arg(format!(
                "--service-account-private-key-file={}",
                access.service_account_key.display()
            ))
            .arg(format!("--root-ca-file={}", files.ca.display()))
            .arg(format!("--cluster-cidr={POD_CIDR}"))
            .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"));
        let controller_manager =
            spawn(controller_manager, &dir.join("kube-controller-manager.log"))?;
        let mut scheduler = Command::new(binary("kube-scheduler")?);
        scheduler
            .arg(format!("--kubeconfig={}", files.kubeconfig.display()))
            .args(["--leader-elect=false", "--secure-port=0"]);
        let scheduler = spawn(scheduler, &dir.join("kube-scheduler.log"))?;

        let mut kubelet = Command::new(binary("kubelet")?);
        kubelet
            .arg(format!("--config={}", files.kubelet_config.display()))
            .arg(format!("--kubeconfig={}", files.kubeconfig.display()))
            .arg(format!("--root-dir={}", dir.join("kubelet").display()))
            .arg(format!("--cert-dir={}", dir.join("kubelet/pki").display()))
            .arg(format!("--hostname-override={NODE_NAME}"))
            .arg(format!("--node-ip={NODE_ADDRESS}"));
        let kubelet = spawn_in_netns(&mut kubelet, &dir.join("kubelet.log"))?;
        let mut proxy = Command::new(binary("kube-proxy")?);
        proxy.arg(format!("--config={}", files.proxy_config.display()));
        let proxy = spawn_in_netns(&mut proxy, &dir.join("kube-proxy.log"))?;

        let node = Node {
            kubelet,
            proxy,
            scheduler,
            controller_manager,
            containerd,
            dir: dir.to_path_buf(),
            _lock: lock,
        };
        node.wait_ready(client.clone()).await?;
        node.start_dns(&files.kubeconfig, client).await?;
        Ok(node)
    }

    /// Imports an OCI image archive into the node's containerd (see [`import`]).
    pub fn import(&self, archive: &Path) -> Result<(), NodeError> {
        import(&self.dir.join("containerd/containerd.sock"), archive)
    }

    /// Applies the cluster DNS (`dns.yaml`) and waits until it answers.
    async fn start_dns(&self, kubeconfig: &Path, client: kube::Client) -> Result<(), NodeError> {
        let manifest = self.dir.join("dns.yaml");
        std::fs::write(&manifest, DNS_MANIFEST).map_err(io("write dns.yaml"))?;
        run(
            Command::new(binary("kubectl")?)
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["apply", "--server-side", "-f"])
                .arg(&manifest),
            "apply the cluster DNS",
        )?;
        let deployments =
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client, "kube-system");
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let ready = (deployments.get_opt("coredns").await.ok().flatten())
                .and_then(|d| d.status?.ready_replicas)
                .is_some_and(|n| n > 0);
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(NodeError::Command {
                    what: "the cluster DNS".into(),
                    detail: format!(
                        "kube-system/coredns was not ready within {READY_WITHIN:?} (is localhost/kubosh/coredns:1.15.0 among the imported images? tools/images.sh builds it)"
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The directory holding the node's configuration, logs and state.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    async fn wait_ready(&self, client: kube::Client) -> Result<(), NodeError> {
        let nodes = Api::<NodeObject>::all(client);
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let ready = nodes
                .get_opt(NODE_NAME)
                .await
                .ok()
                .flatten()
                .is_some_and(|n| {
                    (n.status.and_then(|s| s.conditions).unwrap_or_default())
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(NodeError::NotReady(
                    READY_WITHIN,
                    log_tail(&self.dir.join("kubelet.log")),
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Stops the node's processes and removes everything it made (see [`teardown`]).
    pub fn stop(&mut self) {
        for child in [
            &mut self.kubelet,
            &mut self.proxy,
            &mut self.scheduler,
            &mut self.controller_manager,
        ] {
            child.stop(Duration::from_secs(5));
        }
        teardown(&self.dir);
        self.containerd.stop(Duration::from_secs(5));
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The files a node runs from.
struct NodeFiles {
    ca: PathBuf,
    kubeconfig: PathBuf,
    containerd_config: PathBuf,
    containerd_socket: PathBuf,
    kubelet_config: PathBuf,
    proxy_config: PathBuf,
}

impl NodeFiles {
    fn write(dir: &Path, access: &ControlPlaneAccess<'_>) -> Result<NodeFiles, NodeError> {
        let write = |name: &str, content: &str| -> Result<PathBuf, NodeError> {
            let path = dir.join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(io(format!("create {}", parent.display())))?;
            }
            files::write_private(&path, content)
                .map_err(io(format!("write {}", path.display())))?;
            Ok(path)
        };
        let d = dir.display();
        let ca = write("pki/ca.crt", access.ca_pem)?;
        let server = format!("https://{HOST_SIDE_ADDRESS}:{}", access.apiserver_port);
        let kubeconfig = write(
            "kubeconfig",
            &crate::control_plane::kubeconfig_yaml(
                &server,
                access.ca_pem,
                &[("admin", access.admin_token)],
            ),
        )?;
        let socket = dir.join("containerd/containerd.sock");
        let containerd_config = write("containerd/config.toml", &containerd_config(&d, &socket))?;
        write("cni/10-kubosh.conflist", &cni_config(&d))?;
        let kubelet_config = write(
            "kubelet/config.yaml",
            &kubelet_config(&d, &socket, access.kubelet_client_ca),
        )?;
        let proxy_config = write("kube-proxy.yaml", &proxy_config(&d))?;
        Ok(NodeFiles {
            ca,
            kubeconfig,
            containerd_config,
            containerd_socket: socket,
            kubelet_config,
            proxy_config,
        })
    }
}

/// containerd's configuration: its state under the node's directory, the CRI plugin's
/// sandbox image and CNI directories.
fn containerd_config(d: &std::path::Display<'_>, socket: &Path) -> String {
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/kubosh/pause:1"
  # Lowering a process's OOM score needs a privilege this machine may not grant: a Pod
  # sandbox's -998 becomes containerd's own score.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"#,
        socket = socket.display()
    )
}

/// The Pods' network: one bridge, addresses from [`POD_CIDR`], masqueraded beyond it.
fn cni_config(d: &std::path::Display<'_>) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "kubosh",
        "plugins": [
            {
                "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": format!("{d}/cni-ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    })
    .to_string()
}

/// The kubelet's configuration (cgroup v1 machines too; Pods under the node's cgroup).
fn kubelet_config(d: &std::path::Display<'_>, socket: &Path, client_ca: &Path) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 machines too (this one is); the node's Pods under a cgroup of their own.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /{CGROUP}
containerRuntimeEndpoint: unix://{socket}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {client_ca}}}
authorization: {{mode: Webhook}}
clusterDomain: cluster.local
clusterDNS: [{DNS_ADDRESS}]
failSwapOn: false
enforceNodeAllocatable: []
evictionHard: {{}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
localStorageCapacityIsolation: false
protectKernelDefaults: false
resolvConf: /etc/resolv.conf
podLogsDir: {d}/pod-logs
staticPodPath: \"\"
",
        socket = socket.display(),
        client_ca = client_ca.display(),
    )
}

/// kube-proxy's configuration (iptables, in the node's namespace).
fn proxy_config(d: &std::path::Display<'_>) -> String {
    format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {d}/kubeconfig}}
hostnameOverride: {NODE_NAME}
clusterCIDR: {POD_CIDR}
mode: iptables
# Leave the host's conntrack table size alone.
conntrack: {{maxPerCore: 0}}
"
    )
}

impl Node {
    /// Whether a node can start here: root, and the system tools it runs. Checked before
    /// anything is made; a caller about to build for minutes checks it first.
    pub fn preflight() -> Result<(), NodeError> {
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            return Err(NodeError::NotRoot);
        }
        for tool in ["containerd", "ctr", "runc", "ip", "iptables", "nsenter"] {
            if which(tool).is_none() {
                return Err(NodeError::Tool(tool));
            }
        }
        if !Path::new("/usr/lib/cni/bridge").is_file() {
            return Err(NodeError::Tool("/usr/lib/cni/bridge"));
        }
        Ok(())
    }
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Takes the machine's node lock, tearing down what a dead holder left behind, and records
/// `dir` in it.
fn take_lock(dir: &Path) -> Result<std::fs::File, NodeError> {
    let mut file = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(LOCK_FILE)
        .map_err(io(format!("open {LOCK_FILE}")))?;
    let previous = std::fs::read_to_string(LOCK_FILE).unwrap_or_default();
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(NodeError::Busy(previous.trim().to_string()));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(format!("lock {LOCK_FILE}"))(e)),
    }
    teardown(Path::new(previous.trim()));
    use std::io::Write;
    file.set_len(0)
        .map_err(io(format!("truncate {LOCK_FILE}")))?;
    file.write_all(dir.as_os_str().as_encoded_bytes())
        .map_err(io(format!("write {LOCK_FILE}")))?;
    Ok(file)
}

/// Tears down a node whose process is gone, if the lock is free (what a control plane's
/// start does before removing abandoned directories, whose mounts would stop it).
pub(crate) fn remove_abandoned() {
    let Ok(file) = std::fs::File::options()
        .read(true)
        .write(true)
        .open(LOCK_FILE)
    else {
        return;
    };
    if file.try_lock().is_ok() {
        let previous = std::fs::read_to_string(LOCK_FILE).unwrap_or_default();
        teardown(Path::new(previous.trim()));
        let _ = file.set_len(0);
    }
}

/// The network namespace, the veth pair, the host's routes to the Pods and Services.
fn make_network() -> Result<(), NodeError> {
    let _ = quiet(Command::new("ip").args(["netns", "del", NETNS]));
    let ip = |args: &[&str]| {
        run(
            Command::new("ip").args(args),
            &format!("ip {}", args.join(" ")),
        )
    };
    let in_ns = |args: &[&str]| {
        run(
            Command::new("ip").args(["-n", NETNS]).args(args),
            &format!("ip -n {NETNS} {}", args.join(" ")),
        )
    };
    ip(&["netns", "add", NETNS])?;
    ip(&[
        "link", "add", HOST_LINK, "type", "veth", "peer", "name", "eth0", "netns", NETNS,
    ])?;
    ip(&[
        "addr",
        "add",
        &format!("{HOST_SIDE_ADDRESS}/30"),
        "dev",
        HOST_LINK,
    ])?;
    ip(&["link", "set", HOST_LINK, "up"])?;
    in_ns(&["link", "set", "lo", "up"])?;
    in_ns(&["addr", "add", &format!("{NODE_ADDRESS}/30"), "dev", "eth0"])?;
    in_ns(&["link", "set", "eth0", "up"])?;
    in_ns(&["route", "add", "default", "via", HOST_SIDE_ADDRESS])?;
    ip(&["route", "replace", POD_CIDR, "via", NODE_ADDRESS])?;
    ip(&["route", "replace", SERVICE_CIDR, "via", NODE_ADDRESS])?;
    // The node routes for its Pods; Services between Pods on one bridge need the bridge's
    // traffic to pass iptables (per namespace on this kernel; best effort elsewhere).
    for (key, value) in [
        ("net.ipv4.ip_forward", "1"),
        ("net.bridge.bridge-nf-call-iptables", "1"),
    ] {
        let _ = quiet(
            Command::new("nsenter")
                .arg(format!("--net=/run/netns/{NETNS}"))
                .args(["sysctl", "-q", "-w", &format!("{key}={value}")]),
        );
    }
    Ok(())
}

/// The cgroup the kubelet puts its Pods under (it must exist), in every hierarchy.
fn make_cgroup() -> Result<(), NodeError> {
    for hierarchy in cgroup_hierarchies() {
        let path = hierarchy.join(CGROUP);
        std::fs::create_dir_all(&path).map_err(io(format!("create {}", path.display())))?;
    }
    Ok(())
}

/// The mounted cgroup hierarchies: `/sys/fs/cgroup` itself on cgroup v2; each v1
/// controller's directory otherwise, and the v2 one beside them (`unified`), where the
/// kubelet makes its cgroup too.
fn cgroup_hierarchies() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").is_file() {
        return vec![root.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("cgroup.procs").is_file())
        .collect()
}

/// Removes everything a node in `dir` made: kills its Pods' processes (by cgroup) and every
/// process started from `dir` (containerd, the shims, the kubelet), unmounts what is
/// mounted under `dir`, removes its cgroups and its network namespace (with the veth
/// pair, the routes through it, the bridge and the node's iptables rules), then `dir`.
pub(crate) fn teardown(dir: &Path) {
    for _ in 0..50 {
        let mut pids = cgroup_processes();
        if !dir.as_os_str().is_empty() {
            pids.extend(processes_mentioning(dir));
        }
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: signalling a process id we read from /proc or a cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !dir.as_os_str().is_empty() {
        unmount_under(dir);
        remove_links_into(Path::new(CONTAINER_LOG_LINKS), dir);
    }
    remove_cgroups();
    let _ = quiet(Command::new("ip").args(["netns", "del", NETNS]));
    let _ = quiet(Command::new("ip").args(["link", "del", HOST_LINK]));
    if !dir.as_os_str().is_empty()
        && dir.is_dir()
        && let Err(e) = std::fs::remove_dir_all(dir)
    {
        tracing::debug!(dir = %dir.display(), error = %e, "cannot remove a node directory");
    }
}

/// The processes in the node's cgroup, in any hierarchy, at any depth.
fn cgroup_processes() -> Vec<i32> {
    let mut pids = Vec::new();
    for hierarchy in cgroup_hierarchies() {
        walk_dirs(&hierarchy.join(CGROUP), &mut |d| {
            if let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) {
                pids.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        });
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Processes whose command line names a path under `dir`.
fn processes_mentioning(dir: &Path) -> Vec<i32> {
    let needle = dir.as_os_str().as_encoded_bytes();
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

/// Calls `visit` on `dir` and every directory below it, deepest last.
fn walk_dirs(dir: &Path, visit: &mut dyn FnMut(&Path)) {
    if !dir.is_dir() {
        return;
    }
    visit(dir);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk_dirs(&entry.path(), visit);
            }
        }
    }
}

/// Removes the node's cgroups, deepest first (a cgroup directory goes with `rmdir` once
/// it has no processes and no children).
fn remove_cgroups() {
    for hierarchy in cgroup_hierarchies() {
        let mut dirs = Vec::new();
        walk_dirs(&hierarchy.join(CGROUP), &mut |d| dirs.push(d.to_path_buf()));
        for d in dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Where the kubelet links each container's log (a fixed path, not configurable).
const CONTAINER_LOG_LINKS: &str = "/var/log/containers";

/// Removes the symbolic links in `links` that point under `dir`.
fn remove_links_into(links: &Path, dir: &Path) {
    let Ok(entries) = std::fs::read_dir(links) else {
        return;
    };
    for entry in entries.flatten() {
        if std::fs::read_link(entry.path()).is_ok_and(|target| target.starts_with(dir)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Detaches every mount at or under `dir`, deepest first.
fn unmount_under(dir: &Path) {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mount_path(p)))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort();
    for point in points.iter().rev() {
        let Ok(c) = std::ffi::CString::new(point.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        // SAFETY: a NUL-terminated path; MNT_DETACH only unlinks the mount.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Mount paths in mountinfo escape space, tab, newline and backslash as `\ooo`.
fn unescape_mount_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out + rest
}

/// The last lines of a log (the node's directory goes with a node that did not start).
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Imports an OCI image archive (`buildah push IMAGE oci-archive:FILE:IMAGE`) into the
/// containerd at `socket`, under the name it carries (the Pods' namespace, `k8s.io`).
fn import(socket: &Path, archive: &Path) -> Result<(), NodeError> {
    run(
        Command::new("ctr")
            .arg("--address")
            .arg(socket)
            .args(["--namespace", "k8s.io", "images", "import"])
            .arg(archive),
        &format!("import {}", archive.display()),
    )
}

async fn wait_containerd(socket: &Path, log: &Path) -> Result<(), NodeError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answered = Command::new("ctr")
            .arg("--address")
            .arg(socket)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        if answered {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(NodeError::Command {
                what: "containerd".into(),
                detail: format!(
                    "did not answer within 30 s; the end of its log:\n{}",
                    log_tail(log)
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn spawn(cmd: Command, log: &Path) -> Result<ManagedChild, NodeError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    process::spawn_logged(cmd, log).map_err(io(format!("start {program}")))
}

/// Starts `cmd` inside the node's network namespace (only that namespace: the node's
/// mounts and cgroups are the host's).
fn spawn_in_netns(cmd: &mut Command, log: &Path) -> Result<ManagedChild, NodeError> {
    let mut nsenter = Command::new("nsenter");
    nsenter
        .arg(format!("--net=/run/netns/{NETNS}"))
        .arg(cmd.get_program())
        .args(cmd.get_args());
    spawn(nsenter, log)
}

fn run(cmd: &mut Command, what: &str) -> Result<(), NodeError> {
    let output = cmd.output().map_err(io(what.to_string()))?;
    if output.status.success() {
        return Ok(());
    }
    Err(NodeError::Command {
        what: what.to_string(),
        detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
    })
}

fn quiet(cmd: &mut Command) -> std::io::Result<std::process::ExitStatus> {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
}
