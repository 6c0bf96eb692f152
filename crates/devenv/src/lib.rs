//! Real Kubernetes, NATS and S3 for tests and demos: etcd + kube-apiserver (with RBAC, a CA, a
//! service-account signer, admin and operator identities), nats-server (optionally with
//! mutual TLS) and an S3-compatible server (moto), started as child processes on free
//! loopback ports or in a directory kept between runs; a director's files for the local
//! cloud (`LocalDirector`); the one-command demo's stack (`demo`, `kubosh up`); and kubosh
//! installed on the dev cluster's node with Helm (`in_cluster`, `kubosh up --in-cluster`).
//!
//! Children are tied to the life of this process (they get SIGKILL when it dies, even on a
//! panic or a kill), so no test run leaves stray processes behind.

mod bins;
mod control_plane;
pub mod demo;
mod director;
mod files;
mod http;
pub mod in_cluster;
mod logs;
mod nats;
mod node;
mod process;
mod releases;
mod s3;

pub use bins::{BinError, InstallError, bin_dir, binary, install_bins, install_images};
pub use control_plane::{ControlPlane, ControlPlaneError, ControlPlanePorts};
pub use director::{DirectorError, DirectorSettings, LocalDirector, NatsPki, kubosh_agent_command};
pub use http::{http_get, http_request};
pub use logs::{CapturedLogs, captured_logs};
pub use nats::{BoshNats, BoshNatsError, ClientPem, NatsError, NatsServer, NatsTls};
pub use node::{HOST_SIDE_ADDRESS as NODE_HOST_SIDE_ADDRESS, NODE_NAME, Node, NodeError};
pub use process::{ManagedChild, free_port, host_address, spawn_logged, spawn_tied};
pub use releases::{
    ExampleReleaseError, build_example_release, example_release, example_release_dir,
    local_stemcell_options, write_create_env_artifacts, write_local_stemcell,
};
pub use s3::{S3Server, S3ServerError};
