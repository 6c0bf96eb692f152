//! `kubosh controller`: reconciles `Deployment`, `Release` and `Stemcell` resources against
//! the cloud and the message bus of a director configuration file (`-d`, the same file
//! `kubosh deploy` reads: CPI, NATS, blobstore, engine settings; its `state_dir` holds the
//! controller's scratch space). The cluster is the one of `KUBECONFIG` (or in-cluster).
//!
//! Replicas elect a leader with a Lease; only the leader reconciles
//! ([`kubosh_kube::controller::serve`]). On SIGINT/SIGTERM, or when leadership is lost,
//! running deploys start no new step, the steps in flight finish, and the process exits (a
//! lost leadership with a failure, for its supervisor to restart it as a standby).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use kubosh_cloud::CallObserver;
use kubosh_director::DirectorConfig;
use kubosh_engine::clouds::CloudMaker;
use kubosh_engine::{AgentHealth, Engine, NoEvents};
use kubosh_kube::client::RequestBudget;
use kubosh_kube::controller::resurrection::MeltdownPolicy;
use kubosh_kube::controller::serve::{EdgeError, Edges, ServeOptions};
use kubosh_kube::ops_api::{Certificate, OpsApiOptions};

/// Arguments of `kubosh controller`.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// The director configuration file (CPI, NATS, blobstore, scratch directory).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// Watch one namespace only (default: all).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Deploys running at once, at most.
    #[arg(long = "max-deploys", default_value_t = 32)]
    pub max_deploys: usize,
    /// This replica's name, unique among the live ones (default: `$CONTROLLER_POD_NAME`,
    /// `$HOSTNAME`, or the host name). A restarted process with the same name takes over its
    /// predecessor's leadership and locks at once.
    #[arg(long)]
    pub identity: Option<String>,
    /// Run without leader election (one replica only).
    #[arg(long = "no-leader-election")]
    pub no_leader_election: bool,
    /// The namespace of the leader election Lease (default: `$POD_NAMESPACE`, the watched
    /// namespace, or `default`).
    #[arg(long = "leader-election-namespace")]
    pub leader_election_namespace: Option<String>,
    /// How long orphaned disks are kept (so a returning instance group gets them back)
    /// before they are deleted from the cloud: `5d`, `12h`, `30m` (the Director's
    /// `max_orphaned_age_in_days`: 5 days).
    #[arg(long = "orphaned-disk-max-age", default_value = "5d", value_parser = humantime::parse_duration)]
    pub orphaned_disk_max_age: std::time::Duration,
    /// Requests per second to the Kubernetes API, on average: `0` (the default) sets no
    /// client-side limit, leaving it to the apiserver's API Priority and Fairness (as
    /// controller-runtime does).
    #[arg(long = "kube-api-qps", default_value_t = 0.0)]
    pub kube_api_qps: f64,
    /// Requests to the Kubernetes API that may start at once (with `--kube-api-qps`).
    #[arg(long = "kube-api-burst", default_value_t = 30)]
    pub kube_api_burst: u64,
    /// How long an agent may send no heartbeat before its instance shows `Unresponsive`
    /// (the health monitor's `agent_timeout`): `60s`, `2m`.
    #[arg(long = "agent-timeout", default_value = "60s", value_parser = humantime::parse_duration)]
    pub agent_timeout: std::time::Duration,
    /// Recreate no instance that lost its agent or VM, in any deployment (BOSH's resurrector
    /// off; each deployment may also opt out with `spec.resurrection: false`).
    #[arg(long = "no-resurrection")]
    pub no_resurrection: bool,
    /// Meltdown: resurrection stops for a deployment when more than this many of its
    /// instances went down within `--meltdown-window`...
    #[arg(long = "meltdown-minimum-down", default_value_t = 5)]
    pub meltdown_minimum_down: usize,
    /// ... and more than this percentage of them.
    #[arg(long = "meltdown-percent", default_value_t = 20)]
    pub meltdown_percent: u32,
    /// How far back instances that went down count towards a meltdown: `10m`.
    #[arg(long = "meltdown-window", default_value = "10m", value_parser = humantime::parse_duration)]
    pub meltdown_window: std::time::Duration,
    /// How often each instance's agent is asked for its processes and vitals, kept in the
    /// `Instance`'s status (`kubectl bosh instances --ps --vitals`): one agent request and
    /// at most one status write per instance each time; `0s`: never.
    #[arg(long = "instance-details-interval", default_value = "2m", value_parser = humantime::parse_duration)]
    pub instance_details_interval: std::time::Duration,
    /// Where the ops API (`kubectl bosh logs`, `kubectl bosh ssh`; an extension API server
    /// behind kube-apiserver's aggregation layer, reached only by its front proxy) is
    /// served while this process leads, e.g. `0.0.0.0:8443`; empty: nowhere.
    #[arg(long = "ops-api-bind-address", default_value = "")]
    pub ops_api_bind_address: String,
    /// The ops API's serving certificate (PEM), for the `APIService`'s `caBundle`; without
    /// it (and its key), the leader makes one for `--ops-api-service` and writes its CA
    /// into the `APIService`.
    #[arg(long = "ops-api-tls-cert-file", value_name = "PATH")]
    pub ops_api_cert: Option<PathBuf>,
    /// The ops API's private key (PEM).
    #[arg(long = "ops-api-tls-private-key-file", value_name = "PATH")]
    pub ops_api_key: Option<PathBuf>,
    /// The Service in front of the ops API, `NAMESPACE/NAME`: the name its self-made
    /// certificate is for. In a Pod (`CONTROLLER_POD_NAME`, `POD_NAMESPACE`), the leader
    /// labels its Pod `kubosh.io/ops-api=serving`, which the Service selects.
    #[arg(long = "ops-api-service", value_name = "NAMESPACE/NAME")]
    pub ops_api_service: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served (plain HTTP); empty: nowhere.
    #[arg(long = "metrics-bind-address", default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: String,
}

/// Runs `kubosh controller`.
pub fn run_controller(args: &ControllerArgs) -> ExitCode {
    super::run_async("kubosh controller", serve(args))
}

async fn serve(args: &ControllerArgs) -> Result<(), String> {
    let config = DirectorConfig::load(&args.director).map_err(|e| e.to_string())?;
    let options = ServeOptions {
        namespace: args.namespace.clone(),
        max_deploys: args.max_deploys,
        identity: args.identity.clone(),
        leader_election: !args.no_leader_election,
        leader_election_namespace: args.leader_election_namespace.clone(),
        orphaned_disk_max_age: args.orphaned_disk_max_age,
        budget: RequestBudget {
            qps: args.kube_api_qps,
            burst: args.kube_api_burst,
        },
        agent_timeout: args.agent_timeout,
        resurrection: !args.no_resurrection,
        meltdown: MeltdownPolicy {
            minimum_down: args.meltdown_minimum_down,
            percent: args.meltdown_percent,
            window: args.meltdown_window,
        },
        details_interval: Some(args.instance_details_interval).filter(|d| !d.is_zero()),
        ops_api: ops_api(args)?,
        metrics_bind_address: Some(args.metrics_bind_address.clone()).filter(|a| !a.is_empty()),
        work_dir: config.state_dir.join("controller"),
    };
    let edges = Director(config);
    kubosh_kube::controller::serve::serve(&options, &edges, super::signals::stop_requested())
        .await
        .map_err(|e| e.to_string())
}

/// The ops API's options, when it is asked for.
fn ops_api(args: &ControllerArgs) -> Result<Option<OpsApiOptions>, String> {
    if args.ops_api_bind_address.is_empty() {
        return Ok(None);
    }
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let certificate = match (&args.ops_api_cert, &args.ops_api_key, &args.ops_api_service) {
        (Some(cert), Some(key), _) => Certificate::Files {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        },
        (None, None, Some(service)) => match service.split_once('/') {
            Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
                Certificate::SelfSigned {
                    namespace: namespace.into(),
                    name: name.into(),
                }
            }
            _ => return Err(format!("--ops-api-service '{service}': NAMESPACE/NAME")),
        },
        _ => {
            return Err("--ops-api-bind-address needs --ops-api-tls-cert-file with \
                        --ops-api-tls-private-key-file, or --ops-api-service"
                .into());
        }
    };
    let pod = match (
        std::env::var("POD_NAMESPACE"),
        std::env::var("CONTROLLER_POD_NAME"),
    ) {
        (Ok(namespace), Ok(name)) if !namespace.is_empty() && !name.is_empty() => {
            Some((namespace, name))
        }
        _ => None,
    };
    Ok(Some(OpsApiOptions {
        bind_address: args.ops_api_bind_address.clone(),
        certificate,
        pod,
    }))
}

/// The edges of the director configuration file.
struct Director(DirectorConfig);

impl Edges for Director {
    async fn engine(&self, observer: Arc<dyn CallObserver>) -> Result<Engine, EdgeError> {
        Ok(self
            .0
            .observed_engine("controller", Arc::new(NoEvents), false, Some(observer))
            .await?)
    }

    async fn heartbeats(&self) -> Result<Arc<dyn AgentHealth>, EdgeError> {
        Ok(Arc::new(self.0.heartbeat_monitor().await?))
    }

    fn cloud_maker(&self, observer: Arc<dyn CallObserver>) -> Arc<dyn CloudMaker> {
        self.0.cloud_maker(Some(observer))
    }
}
