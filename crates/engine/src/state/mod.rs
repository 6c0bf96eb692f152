//! What the engine remembers between deploys, behind the [`StateStore`] trait. The records
//! themselves are `kubosh_core::state` (re-exported here).
//!
//! Every write is durable on its own before the call returns: the engine records an intent
//! before each non-idempotent cloud call and the resulting CID right after, so a process
//! killed at any instant leaves a state the next run can repair. Stores: [`MemoryStore`]
//! (tests, benchmarks, the simulated cloud), [`DirStore`] (one file per record, for
//! create-env and `kubosh deploy` without a cluster); the controller stores records as
//! Kubernetes objects.

mod dir;
mod dns;
mod ips;
mod links;
mod memory;
mod shared_file;

use std::future::Future;
use std::pin::Pin;

pub use dir::{DirStore, replace_bytes, replace_private_bytes};
pub use dns::{DNS_LOCK, DirDnsRegistry, DnsRegistry, MemoryDnsRegistry};
pub use ips::{DirIpRegistry, IP_LOCK, IpRegistry, MemoryIpRegistry};
pub use kubosh_core::state::*;
pub use links::{DirLinkRegistry, LINK_LOCK, LinkRegistry, MemoryLinkRegistry};
pub use memory::MemoryStore;

/// Stemcell records by [`StemcellRecord::key`].
pub type StemcellMap = std::collections::BTreeMap<String, StemcellRecord>;

/// A store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading or writing the backing storage failed.
    #[error("state store: {0}")]
    Io(String),
    /// A stored record could not be read back.
    #[error("state store: record {record} is unreadable: {reason}")]
    Corrupt {
        /// Which record.
        record: String,
        /// Why.
        reason: String,
    },
}

/// The future store methods return (boxed, so `dyn StateStore` works).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Durable deployment state.
pub trait StateStore: Send + Sync {
    /// Every record as stored.
    fn load_records(&self) -> StoreFuture<'_, DeploymentState>;

    /// The state: the records, with the instances whose announced update did not finish
    /// marked not completed ([`DeploymentState::mark_unfinished_updates`]).
    fn load(&self) -> StoreFuture<'_, DeploymentState> {
        Box::pin(async move {
            let mut state = self.load_records().await?;
            state.mark_unfinished_updates();
            Ok(state)
        })
    }

    /// The orphaned disks, by CID (a store that keeps what it read and wrote may answer
    /// without reading again: the deployment lock keeps others from changing them).
    fn orphaned_disks(&self) -> StoreFuture<'_, std::collections::BTreeMap<String, OrphanedDisk>> {
        Box::pin(async move { Ok(self.load_records().await?.orphaned_disks) })
    }

    /// The stemcells the clouds hold, by [`StemcellRecord::key`] (shared by the director's
    /// deployments where the store shares them).
    fn stemcells(&self) -> StoreFuture<'_, StemcellMap> {
        Box::pin(async move { Ok(self.load_records().await?.stemcells) })
    }

    /// Makes one write durable. A store may defer settling ([`Write::DeleteIntent`]) to a
    /// later write: an intent still pending after a crash is one whose owner record carries
    /// its result, which recovery settles without deleting anything.
    fn write<'a>(&'a self, write: &'a Write) -> StoreFuture<'a, ()>;
}
