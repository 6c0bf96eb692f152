//! The director configuration file of `kubosh deploy` and `kubosh plan`: where the state
//! lives, how to run the CPI, how to reach the agents and where blobs go. YAML:
//!
//! ```yaml
//! state_dir: ./state            # DirStore in <state_dir>/deployments/<name>, FileLocks in <state_dir>/locks,
//!                               # the DNS records and IP reservations of all deployments in
//!                               # <state_dir>/dns.json and <state_dir>/ips.json,
//!                               # extracted stemcells in <state_dir>/stemcells/<name>-<version>
//! cpi:
//!   command: [kubosh, cpi, --config, cpi.yml]   # ExternalCpi (required)
//!   timeout_seconds: 600        # per CPI call
//!   properties: {}              # CPI context properties (secrets: never logged)
//!   properties_path: cpi-properties.yml   # optional: a YAML map merged over `properties`
//!                               #   (its keys win), e.g. the CPI's credentials from a mounted Secret
//! nats:
//!   url: nats://127.0.0.1:4222  # required; TLS is always used
//!   ca_certificate: <PEM>       # or ca_certificate_path: the CA of the server and of every client
//!   ca_private_key: <PEM>       # or ca_private_key_path: signs each new agent's client certificate
//!                               #   (CN <agent_id>.agent.bosh-internal)
//!   director_certificate: <PEM> # or director_certificate_path: the director's client identity
//!   director_private_key: <PEM> # or director_private_key_path
//!   hm_certificate: <PEM>       # optional, or hm_certificate_path: the health monitor's identity
//!   hm_private_key: <PEM>       #   (CN default.hm.bosh-internal); without them the CA issues one
//!   authorization:              # optional: confine each agent to its own subjects
//!     file: ./nats/authorization.json  # kubosh keeps nats-server's `authorization` block here
//!     pid_file: ./nats/nats.pid # nats-server's pid_file: signalled (SIGHUP) to reload
//! blobstore: {local: {path: ./blobs}}   # LocalBlobstore (the only provider for now)
//! engine: {agent_wait_timeout_seconds: 600, recovery_wait_seconds: 60, parallel_azs: false}
//! health: {listen_for: 35}      # optional: `kubosh deploy` listens to agents' heartbeats this
//!                               #   many seconds, then skips `get_state` for agents it heard;
//!                               #   `agent_timeout: 60`: silence that proves an agent dead
//! snapshots: {enabled: false}   # snapshot persistent disks when an update stops an instance
//! enable_cpi_resize_disk: false # grow disks with the CPI's resize_disk (else a new disk and a copy)
//! enable_cpi_update_disk: false # change disks with the CPI's update_disk
//! ```
//!
//! The last three are spelled as in the BOSH Director's own configuration.
//!
//! Relative paths (`state_dir`, `*_path`, `blobstore.local.path`, a CPI program with a `/`)
//! are relative to the file's directory, and the CPI runs in that directory, so relative
//! arguments such as `cpi.yml` are too. A CPI program without a `/` is looked up on `PATH`
//! when the file is read (the CPI itself gets the Director's fixed `PATH`).
//!
//! The NATS server must present a certificate for `*.nats.bosh-internal` signed by the CA
//! (bosh-agent checks that CN) and accept client certificates the CA signed. With
//! `nats.authorization` it maps them to users (`tls { verify_and_map: true }` and `include`
//! of the file): kubosh then writes the director's, the health monitor's and every agent's
//! permissions there, each agent let in before its VM is created and locked out after it is
//! deleted (`kubosh_engine::agent_access`), and reloads the server; without it, every certificate the CA
//! signed may use every subject. The agents must read blobs from the same place as the director (the local
//! cloud: its `blobstore` setting).
//!
//! This crate reads the file ([`config`]: [`DirectorConfig`]) and wires the concrete edges the
//! engine drives through traits ([`DirectorConfig::engine`], [`DirectorConfig::heartbeat_monitor`]),
//! for `kubosh deploy`, `kubosh plan` and the controller alike.

pub mod config;
pub mod tasks;
mod wiring;

pub use config::{
    AuthorizationSettings, BlobstoreFile, ConfigError, CpiFile, CpiSettings, DirectorConfig,
    DirectorFile, DiskSettings, EngineFile, EngineSettings, HealthFile, HealthSettings, KeyError,
    LocalBlobstoreFile, NatsAuthorizationSection, NatsFile, NatsSettings, SnapshotsFile,
};
