//! The bottom layer of kubosh: small pieces that the VM-side agent, the transports, the
//! clouds, the wire types and the domain model all use, kept apart from the model so that
//! none of those has to link the planner and validator for them.
//!
//! - [`civil`]: calendar dates of Unix days;
//! - [`digest`]: BOSH multi-digests, verified with the strongest algorithm present;
//! - [`ids`]: UUIDs and random bytes;
//! - [`secret`]: [`secret::Secret`] and the helpers that keep secrets out of messages;
//! - [`pki`]: a small certificate authority and the RSA keys BOSH variables use;
//! - [`yaml`]: YAML in and out, always through [`serde_json::Value`];
//! - [`vm_resources`]: the one piece of vocabulary the manifest model and the CPI wire types
//!   share, [`vm_resources::VmResources`].
//!
//! No async runtime, no Kubernetes, no I/O beyond what these utilities themselves do
//! (hashing a reader, the operating system's random source).

pub mod civil;
pub mod digest;
pub mod ids;
pub mod pki;
pub mod secret;
pub mod vm_resources;
pub mod yaml;
