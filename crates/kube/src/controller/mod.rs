//! The Kubernetes side of kubosh: reconcilers that turn resources into work and work into
//! status. Thin on purpose: the logic lives in the core and the protocol edges; this layer
//! reads resources, calls them and writes kstatus conditions.
//!
//! - [`artifacts`] reconciles `Release` and `Stemcell` resources (download, verify, store in
//!   the blobstore) and tells a deployment what it still waits for.
//! - [`fetch`] downloads `http(s)://` and `file://` URLs with optional Secret credentials.
//! - [`deployment`] reconciles `Deployment`s (deploys, actions, deletion) and `ErrandRun`s.
//! - [`details`] keeps each `Instance`'s processes and vitals, refreshed on a schedule.
//! - [`disk`] deletes orphaned `Disk`s once expired or when their resource is deleted.
//! - [`events`] publishes Events with both the events.k8s.io and the core/v1 timestamps.
//! - [`health`] follows the agents' heartbeats into each `Instance`'s state between deploys;
//!   [`resurrection`] decides what to do about instances that lost their agent or VM.
//! - [`requests`] reads the action and reconcile-request annotations.
//! - [`status`] writes `Ready`/`Reconciling`/`Stalled` conditions.
//! - [`run`] runs the controllers together; [`serve`] is the process around them (probes,
//!   metrics, leader election).

pub mod artifacts;
pub mod backoff;
pub mod cpis;
pub mod deployment;
pub mod details;
pub mod disk;
pub mod events;
pub use kubosh_artifacts::fetch;
pub mod health;
pub mod inputs;
pub mod progress;
pub mod requests;
pub mod resurrection;
pub mod run;
pub mod serve;
pub mod status;
