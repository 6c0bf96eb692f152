//! Which namespaces' watched inputs changed, and their last read, shared by the
//! deployments of each namespace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::super::inputs::Watched;

/// A counter per namespace, moved by every change of a `CloudConfig`, `RuntimeConfig`, `CpiConfig`, `Release` or
/// `Stemcell` there (the watches call [`InputChanges::changed`] before the reconciles they
/// trigger run), and the namespace's [`Watched`] inputs as read at a counter value: read
/// again only once the counter moved, so the deployments of a namespace share one read
/// per change, and a resync reads only what is not watched (Secrets, ConfigMaps). A
/// reconcile of a deployed deployment whose namespace's counter has not moved since it
/// last read its inputs, less than [`RESYNC`](super::RESYNC) ago, reads nothing at all: its
/// own `Instance`s' changes wake it too, and they change no input.
#[derive(Debug, Default)]
pub struct InputChanges {
    counters: Mutex<HashMap<String, u64>>,
    watched: Mutex<HashMap<String, (u64, Arc<Watched>)>>,
}

impl InputChanges {
    /// Something changed in `namespace`.
    pub fn changed(&self, namespace: Option<&str>) {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        *counters
            .entry(namespace.unwrap_or_default().to_string())
            .or_default() += 1;
    }

    pub(super) fn counter(&self, namespace: &str) -> u64 {
        let counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters.get(namespace).copied().unwrap_or_default()
    }

    /// The watched inputs of `namespace`, read no earlier than counter value `counter`
    /// (read now unless they were then).
    pub(super) async fn watched(
        &self,
        client: &kube::Client,
        namespace: &str,
        counter: u64,
    ) -> Result<Arc<Watched>, kube::Error> {
        let cached = (self.watched.lock().unwrap_or_else(PoisonError::into_inner))
            .get(namespace)
            .filter(|(c, _)| *c == counter)
            .map(|(_, w)| w.clone());
        if let Some(watched) = cached {
            return Ok(watched);
        }
        let watched = Arc::new(Watched::read(client, namespace).await?);
        (self.watched.lock().unwrap_or_else(PoisonError::into_inner))
            .insert(namespace.to_string(), (counter, watched.clone()));
        Ok(watched)
    }
}
