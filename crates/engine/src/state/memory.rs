//! A state store in memory.

use std::sync::{Arc, Mutex, PoisonError};

use super::{DeploymentState, StateStore, StoreFuture, Write};

/// State in memory; clones share it. Counts writes, which tests and benchmarks read.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<(DeploymentState, u64)>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A copy of the state.
    pub fn snapshot(&self) -> DeploymentState {
        self.lock().0.clone()
    }

    /// Writes made so far.
    pub fn writes(&self) -> u64 {
        self.lock().1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (DeploymentState, u64)> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StateStore for MemoryStore {
    fn load_records(&self) -> StoreFuture<'_, DeploymentState> {
        let state = self.snapshot();
        Box::pin(async move { Ok(state) })
    }

    /// Only the orphaned disks, not a copy of every record.
    fn orphaned_disks(
        &self,
    ) -> StoreFuture<'_, std::collections::BTreeMap<String, super::OrphanedDisk>> {
        let orphans = self.lock().0.orphaned_disks.clone();
        Box::pin(async move { Ok(orphans) })
    }

    fn write<'a>(&'a self, write: &'a Write) -> StoreFuture<'a, ()> {
        let mut inner = self.lock();
        inner.0.apply(write);
        inner.1 += 1;
        Box::pin(async { Ok(()) })
    }
}
