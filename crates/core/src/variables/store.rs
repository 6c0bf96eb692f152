//! Where generated variables live: the [`VariableStore`] trait and an in-memory store
//! ([`MemoryStore`]). The vars-store file is in `kubosh-engine`, the Kubernetes Secret store
//! in `kubosh-kube`.

use std::path::PathBuf;
use std::sync::Mutex;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

use super::SecretValue;

/// A stored variable: its value and, when the store can keep it, a digest of the type and
/// options it was generated with (for `update_mode: converge`).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVariable {
    /// The value.
    pub value: SecretValue,
    /// SHA-256 (hex) of the generation parameters; `None` when unknown (a vars-store file,
    /// or a value the user put there).
    pub options_digest: Option<String>,
}

/// A store failure. Texts name the store and the variable, never a value.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The vars-store file could not be read or is not a YAML map.
    #[error("Deserializing variables file store '{path}': {message}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The vars-store file could not be written.
    #[error("Writing variables to file store '{path}': {message}")]
    WriteFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The Kubernetes API refused or failed.
    #[error("{action} Secret '{secret}' for variable '{variable}': {message}")]
    Kube {
        /// `Reading`, `Creating`, `Replacing`.
        action: &'static str,
        /// The Secret's name.
        secret: String,
        /// The variable's name.
        variable: String,
        /// The API's error.
        message: String,
    },
    /// A stored value that cannot be read back.
    #[error("Stored variable '{variable}' is malformed: {message}")]
    Malformed {
        /// The variable's name.
        variable: String,
        /// What is wrong (never the value).
        message: String,
    },
}

/// A place to keep generated variables, by name. Implementations must be safe to share
/// between tasks; values are [`SecretValue`]s end to end, and `Debug` must not show them.
pub trait VariableStore: Send + Sync + std::fmt::Debug {
    /// The stored variable `name`, if there is one.
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredVariable>, StoreError>>;

    /// Stores `variable` under `name` unless something is stored there already; returns what
    /// is stored afterwards (the existing variable when another writer got there first), so
    /// a value is generated once even when two resolutions race.
    fn create<'a>(
        &'a self,
        name: &'a str,
        variable: &'a StoredVariable,
    ) -> BoxFuture<'a, Result<StoredVariable, StoreError>>;

    /// Stores `variable` under `name`, replacing what is there (`update_mode: overwrite` or
    /// `converge`).
    fn replace<'a>(
        &'a self,
        name: &'a str,
        variable: &'a StoredVariable,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// Variables of two scopes, as the Director's config server keeps them: a name starting with
/// `/` (`((/dns_api_client_tls))`) is the director's, one value for every deployment and
/// runtime config; any other name is the deployment's.
#[derive(Debug)]
pub struct ScopedStore<D, O> {
    /// Where the director's variables are.
    pub director: D,
    /// Where the deployment's are.
    pub deployment: O,
}

impl<D: VariableStore, O: VariableStore> ScopedStore<D, O> {
    fn scope(&self, name: &str) -> &dyn VariableStore {
        if is_director_variable(name) {
            &self.director
        } else {
            &self.deployment
        }
    }
}

/// Whether `name` is a director-wide variable (`/name`).
pub fn is_director_variable(name: &str) -> bool {
    name.starts_with('/')
}

impl<D: VariableStore, O: VariableStore> VariableStore for ScopedStore<D, O> {
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredVariable>, StoreError>> {
        self.scope(name).get(name)
    }

    fn create<'a>(
        &'a self,
        name: &'a str,
        variable: &'a StoredVariable,
    ) -> BoxFuture<'a, Result<StoredVariable, StoreError>> {
        self.scope(name).create(name, variable)
    }

    fn replace<'a>(
        &'a self,
        name: &'a str,
        variable: &'a StoredVariable,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.scope(name).replace(name, variable)
    }
}

/// Variables kept in memory (tests, dry runs). `Debug` shows names only.
#[derive(Default)]
pub struct MemoryStore {
    values: Mutex<Map<String, Value>>,
    digests: Mutex<std::collections::HashMap<String, String>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("names", &self.names())
            .finish()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// The names stored, in insertion order.
    pub fn names(&self) -> Vec<String> {
        self.values
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    fn put(&self, name: &str, variable: &StoredVariable) {
        self.values
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), variable.value.expose().clone());
        let mut digests = self.digests.lock().unwrap_or_else(|e| e.into_inner());
        match &variable.options_digest {
            Some(d) => digests.insert(name.to_string(), d.clone()),
            None => digests.remove(name),
        };
    }

    fn read(&self, name: &str) -> Option<StoredVariable> {
        let value = self
            .values
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()?;
        let options_digest = self
            .digests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned();
        Some(StoredVariable {
            value: SecretValue::new(value),
            options_digest,
        })
    }
}

impl VariableStore for MemoryStore {
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredVariable>, StoreError>> {
        Box::pin(async move { Ok(self.read(name)) })
    }

    fn create<'a>(
        &'a self,
        name: &'a str,
        variable: &'a StoredVariable,
    ) -> BoxFuture<'a, Result<StoredVariable, StoreError>> {
        Box::pin(async move {
            if let Some(existing) = self.read(name) {
                return Ok(existing);
            }
            self.put(name, variable);
            Ok(variable.clone())
        })
    }

    fn replace<'a>(
        &'a self,
        name: &'a str,
        variable: &'a StoredVariable,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.put(name, variable);
            Ok(())
        })
    }
}
