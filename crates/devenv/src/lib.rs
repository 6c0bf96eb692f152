//! Real Kubernetes, NATS and S3 for tests and demos: etcd + kube-apiserver (with RBAC, a CA, a
//! service-account signer, admin and operator identities), nats-server (optionally with
//! mutual TLS) and an S3-compatible server (moto), started as child processes on free
//! loopback ports.
//!
//! Children are tied to the life of this process (they get SIGKILL when it dies, even on a
//! panic or a kill), so no test run leaves stray processes behind.

mod bins;
mod control_plane;
mod logs;
mod nats;
mod process;
mod releases;
mod s3;

pub use bins::{BinError, bin_dir, binary};
pub use control_plane::{ControlPlane, ControlPlaneError};
pub use logs::{CapturedLogs, captured_logs};
pub use nats::{BoshNats, BoshNatsError, ClientPem, NatsError, NatsServer, NatsTls};
pub use process::{ManagedChild, free_port, spawn_tied};
pub use releases::{
    ExampleReleaseError, build_example_release, example_release, example_release_dir,
    write_create_env_artifacts,
};
pub use s3::{S3Server, S3ServerError};
