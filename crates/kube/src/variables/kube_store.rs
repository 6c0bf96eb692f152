//! Variables kept as Kubernetes Secrets (the controller's store): one Secret per variable in
//! the deployment's namespace.
//!
//! - Name: `<deployment>-var-<variable>`, lower-cased and reduced to DNS-1123 characters;
//!   when that changed the name (e.g. `_` in `nats_password`) or it is too long, a short hash
//!   of the exact names is appended, so distinct variables never share a Secret.
//! - Labels: `kubosh.io/deployment: <deployment>`. Annotations: `kubosh.io/variable` (the
//!   exact name) and `kubosh.io/options-sha256` (for `update_mode: converge`).
//! - Data: key `value`, the value as JSON.
//! - Owner references: whatever the caller sets with [`SecretStore::with_owner`].
//!
//! An absolute name (`((/dns_api_client_tls))`) is the director's, not the deployment's: the
//! namespace is the director, so it is one value for every deployment (and runtime config)
//! of the namespace. Its Secret is `director-var-<variable>`, labelled
//! `kubosh.io/director-variable: "true"` and owned by nobody: it outlives any deployment.
//!
//! Created with a plain create, so when two writers race, the first value wins and the
//! second reads it back ([`VariableStore::create`]).
//!
//! [`SecretStore::preloaded`] reads all of a deployment's variable Secrets with one list (by
//! label) instead of one read per variable: what a deployment with a hundred variables costs
//! the apiserver each time its inputs are read; without the right to list Secrets it reads
//! them one by one.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, ListParams, PostParams};
use serde_json::Value;

use super::SecretValue;
use kubosh_core::variables::{StoreError, StoredVariable, VariableStore};

/// Label naming the deployment a variable Secret belongs to.
pub const DEPLOYMENT_LABEL: &str = crate::api::labels::DEPLOYMENT;
/// Annotation with the variable's exact name.
pub const VARIABLE_ANNOTATION: &str = "kubosh.io/variable";
/// Annotation with the digest of the generation parameters.
pub const OPTIONS_ANNOTATION: &str = "kubosh.io/options-sha256";
/// The data key holding the value (JSON).
pub const VALUE_KEY: &str = "value";
/// Label of the Secrets of director-wide (absolute) variables.
pub const DIRECTOR_VARIABLE_LABEL: &str = "kubosh.io/director-variable";

/// Whether `variable` is the director's (`/name`), one value for the whole namespace.
pub fn is_director_wide(variable: &str) -> bool {
    variable.starts_with('/')
}

/// A [`VariableStore`] of Kubernetes Secrets for one deployment. `Debug` shows where, not
/// what.
#[derive(Clone)]
pub struct SecretStore {
    api: Api<Secret>,
    namespace: String,
    deployment: String,
    owners: Vec<OwnerReference>,
    /// The deployment's variable Secrets by name, when read with one list.
    preloaded: Option<Arc<BTreeMap<String, Secret>>>,
}

impl std::fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretStore")
            .field("namespace", &self.namespace)
            .field("deployment", &self.deployment)
            .finish_non_exhaustive()
    }
}

impl SecretStore {
    /// The store of `deployment`'s variables in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, deployment: &str) -> SecretStore {
        SecretStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            deployment: deployment.to_string(),
            owners: Vec::new(),
            preloaded: None,
        }
    }

    /// This store, with every variable Secret of the deployment read now in one list:
    /// reads answer from it (a variable whose Secret was not listed does not exist yet);
    /// writes go to the apiserver as always. Where listing Secrets is forbidden (a
    /// controller granted only `get`, `create` and `update` on Secrets, as the chart's
    /// cluster-wide RBAC does), the store stays as it was: one read per variable.
    pub async fn preloaded(mut self) -> Result<SecretStore, StoreError> {
        let selector = format!("{DEPLOYMENT_LABEL}={}", self.label_value());
        let list = match self
            .api
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.is_forbidden() => {
                tracing::debug!(namespace = %self.namespace, "listing Secrets is forbidden: one read per variable");
                return Ok(self);
            }
            Err(e) => return Err(self.kube_error("Listing", "*", e)),
        };
        let by_name = (list.items.into_iter())
            .filter_map(|s| Some((s.metadata.name.clone()?, s)))
            .collect();
        self.preloaded = Some(Arc::new(by_name));
        Ok(self)
    }

    /// Sets owner references on the Secrets this store creates or replaces (e.g. the
    /// `Deployment` resource, so deleting it deletes its variables).
    pub fn with_owner(mut self, owner: OwnerReference) -> SecretStore {
        self.owners.push(owner);
        self
    }

    /// The Secret name for `variable` of `deployment` (see the module documentation).
    pub fn secret_name(deployment: &str, variable: &str) -> String {
        if is_director_wide(variable) {
            let name = variable.trim_start_matches('/');
            return crate::names::object_name(
                &format!("director-var-{name}"),
                &format!("\0director\0{variable}"),
            );
        }
        crate::names::object_name(
            &format!("{deployment}-var-{variable}"),
            &format!("{deployment}\0{variable}"),
        )
    }

    fn label_value(&self) -> String {
        crate::names::label_value(&self.deployment)
    }

    fn secret(&self, name: &str, variable: &StoredVariable) -> Result<Secret, StoreError> {
        let json = serde_json::to_vec(variable.value.expose())
            .map_err(|e| self.malformed(name, e.to_string()))?;
        let mut annotations = BTreeMap::from([(VARIABLE_ANNOTATION.to_string(), name.to_string())]);
        if let Some(d) = &variable.options_digest {
            annotations.insert(OPTIONS_ANNOTATION.to_string(), d.clone());
        }
        let director_wide = is_director_wide(name);
        let label = match director_wide {
            true => (DIRECTOR_VARIABLE_LABEL.to_string(), "true".to_string()),
            false => (DEPLOYMENT_LABEL.to_string(), self.label_value()),
        };
        Ok(Secret {
            metadata: ObjectMeta {
                name: Some(Self::secret_name(&self.deployment, name)),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([label])),
                annotations: Some(annotations),
                owner_references: (!self.owners.is_empty() && !director_wide)
                    .then(|| self.owners.clone()),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([(VALUE_KEY.to_string(), ByteString(json))])),
            ..Secret::default()
        })
    }

    fn malformed(&self, variable: &str, message: String) -> StoreError {
        StoreError::Malformed {
            variable: variable.to_string(),
            message,
        }
    }

    fn kube_error(&self, action: &'static str, variable: &str, e: kube::Error) -> StoreError {
        // Only the API's message (never the request), which names the object, not its data.
        let message = match e {
            kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
            other => other.to_string(),
        };
        StoreError::Kube {
            action,
            secret: Self::secret_name(&self.deployment, variable),
            variable: variable.to_string(),
            message,
        }
    }

    fn read(&self, name: &str, secret: &Secret) -> Result<StoredVariable, StoreError> {
        let annotations = secret.metadata.annotations.as_ref();
        let owner = annotations.and_then(|a| a.get(VARIABLE_ANNOTATION));
        if owner.is_some_and(|o| o != name) {
            return Err(self.malformed(
                name,
                "its Secret belongs to another variable (kubosh.io/variable differs)".into(),
            ));
        }
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(VALUE_KEY))
            .ok_or_else(|| self.malformed(name, format!("Secret has no '{VALUE_KEY}' key")))?;
        let value: Value = serde_json::from_slice(&bytes.0)
            .map_err(|_| self.malformed(name, format!("'{VALUE_KEY}' is not JSON")))?;
        Ok(StoredVariable {
            value: SecretValue::new(value),
            options_digest: annotations.and_then(|a| a.get(OPTIONS_ANNOTATION)).cloned(),
        })
    }
}

impl VariableStore for SecretStore {
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredVariable>, StoreError>> {
        Box::pin(async move {
            let secret_name = Self::secret_name(&self.deployment, name);
            // The list was of the deployment's own; the director's are read one by one.
            if let Some(listed) = self.preloaded.as_ref().filter(|_| !is_director_wide(name)) {
                return match listed.get(&secret_name) {
                    Some(secret) => self.read(name, secret).map(Some),
                    None => Ok(None),
                };
            }
            match self.api.get_opt(&secret_name).await {
                Ok(None) => Ok(None),
                Ok(Some(secret)) => self.read(name, &secret).map(Some),
                Err(e) => Err(self.kube_error("Reading", name, e)),
            }
        })
    }

    fn create<'a>(
        &'a self,
        name: &'a str,
        variable: &'a StoredVariable,
    ) -> BoxFuture<'a, Result<StoredVariable, StoreError>> {
        Box::pin(async move {
            let secret = self.secret(name, variable)?;
            match self.api.create(&PostParams::default(), &secret).await {
                Ok(_) => Ok(variable.clone()),
                Err(kube::Error::Api(status)) if status.is_already_exists() => {
                    // Someone else generated it first: theirs is the value.
                    match self.get(name).await? {
                        Some(existing) => Ok(existing),
                        None => Err(self.malformed(name, "vanished while being created".into())),
                    }
                }
                Err(e) => Err(self.kube_error("Creating", name, e)),
            }
        })
    }

    fn replace<'a>(
        &'a self,
        name: &'a str,
        variable: &'a StoredVariable,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let secret_name = Self::secret_name(&self.deployment, name);
            let mut secret = self.secret(name, variable)?;
            match self.api.get_opt(&secret_name).await {
                Err(e) => return Err(self.kube_error("Reading", name, e)),
                Ok(None) => {
                    self.api
                        .create(&PostParams::default(), &secret)
                        .await
                        .map_err(|e| self.kube_error("Creating", name, e))?;
                }
                Ok(Some(existing)) => {
                    // Optimistic concurrency: replace exactly the version read.
                    secret.metadata.resource_version = existing.metadata.resource_version;
                    self.api
                        .replace(&secret_name, &PostParams::default(), &secret)
                        .await
                        .map_err(|e| self.kube_error("Replacing", name, e))?;
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_dns_1123_and_distinct() {
        assert_eq!(SecretStore::secret_name("cf", "admin"), "cf-var-admin");
        let a = SecretStore::secret_name("cf", "nats_password");
        let b = SecretStore::secret_name("cf", "nats-password");
        assert_ne!(a, b);
        assert!(a.starts_with("cf-var-nats-password-"), "{a}");
        assert_eq!(b, "cf-var-nats-password");
        let long = SecretStore::secret_name("cf", &"x".repeat(400));
        assert!(long.len() <= 253);
        let abs = SecretStore::secret_name("cf", "/director/cf/Admin");
        assert!(
            abs.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
            "{abs}"
        );
        // The director's variables: one Secret whichever deployment asks.
        assert_eq!(
            SecretStore::secret_name("cf", "/dns_api_client_tls"),
            SecretStore::secret_name("zookeeper", "/dns_api_client_tls")
        );
        assert!(
            SecretStore::secret_name("cf", "/dns_api_client_tls")
                .starts_with("director-var-dns-api-client-tls-")
        );
    }
}
