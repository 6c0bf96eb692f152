//! The spec of a deployment's last deployed generation, kept so its instances can be
//! repaired while a newer generation does not validate (BOSH's resurrector and cck recreate
//! from what is deployed, not from a manifest that cannot be deployed).
//!
//! One `Secret` per deployment (`<deployment>.kubosh-deployed`, key `spec`): a spec may
//! carry variable values (`spec.vars`), which a ConfigMap would show to every reader of
//! ConfigMaps. Written when a generation deploys (not at every deploy of it), with the
//! uid of the `Deployment` it belongs to, so one left behind by a deleted `Deployment` of
//! the same name is never taken for the new one's; the deletion removes it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};

use crate::api::{DeploymentSpec, labels};
use crate::names;
use crate::state::{DEPLOYMENT_UID_ANNOTATION, is_not_found};

/// The annotation of the `Secret` with the generation whose spec it holds.
pub const GENERATION_ANNOTATION: &str = "kubosh.io/generation";

/// The key of the `Secret` with the spec (JSON).
const SPEC_KEY: &str = "spec";

/// Why the kept spec could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DeployedSpecError {
    /// The apiserver refused or failed.
    #[error("the deployed spec of {deployment}: {source}")]
    Kube {
        /// The deployment.
        deployment: String,
        /// What the apiserver said.
        source: kube::Error,
    },
    /// The kept spec does not parse (written by hand, or by another version).
    #[error("the deployed spec of {deployment} does not parse: {reason}")]
    Corrupt {
        /// The deployment.
        deployment: String,
        /// Why.
        reason: String,
    },
}

/// The spec of deployment `name`'s last deployed generation, in `namespace`.
pub struct DeployedSpec {
    api: Api<Secret>,
    deployment: String,
}

impl DeployedSpec {
    /// The kept spec of `deployment` in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, deployment: &str) -> DeployedSpec {
        DeployedSpec {
            api: Api::namespaced(client, namespace),
            deployment: deployment.to_string(),
        }
    }

    /// The name of the `Secret` that holds it.
    pub fn name(deployment: &str) -> String {
        names::object_name(
            &format!("{deployment}.kubosh-deployed"),
            &format!("{deployment}\0kubosh-deployed"),
        )
    }

    fn kube(&self, source: kube::Error) -> DeployedSpecError {
        DeployedSpecError::Kube {
            deployment: self.deployment.clone(),
            source,
        }
    }

    /// Keeps `spec` as generation `generation` of the `Deployment` whose uid is `uid`: a
    /// replace, or a create the first time.
    pub async fn keep(
        &self,
        uid: &str,
        generation: i64,
        spec: &DeploymentSpec,
    ) -> Result<(), DeployedSpecError> {
        let text = serde_json::to_vec(spec).map_err(|e| DeployedSpecError::Corrupt {
            deployment: self.deployment.clone(),
            reason: e.to_string(),
        })?;
        let mut secret = Secret {
            data: Some(BTreeMap::from([(SPEC_KEY.to_string(), ByteString(text))])),
            ..Secret::default()
        };
        let metadata = &mut secret.metadata;
        metadata.name = Some(Self::name(&self.deployment));
        metadata.labels = Some(BTreeMap::from([(
            labels::DEPLOYMENT.to_string(),
            names::label_value(&self.deployment),
        )]));
        metadata.annotations = Some(BTreeMap::from([
            (DEPLOYMENT_UID_ANNOTATION.to_string(), uid.to_string()),
            (GENERATION_ANNOTATION.to_string(), generation.to_string()),
        ]));
        let name = Self::name(&self.deployment);
        let params = PostParams::default();
        match self.api.replace(&name, &params, &secret).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => {
                (self.api.create(&params, &secret).await).map_err(|e| self.kube(e))?;
                Ok(())
            }
            Err(e) => Err(self.kube(e)),
        }
    }

    /// The generation and spec last kept for the `Deployment` whose uid is `uid` (none
    /// when nothing was kept for it).
    pub async fn read(
        &self,
        uid: &str,
    ) -> Result<Option<(i64, DeploymentSpec)>, DeployedSpecError> {
        let secret =
            (self.api.get_opt(&Self::name(&self.deployment)).await).map_err(|e| self.kube(e))?;
        let Some(secret) = secret else {
            return Ok(None);
        };
        let annotations = secret.annotations();
        if annotations
            .get(DEPLOYMENT_UID_ANNOTATION)
            .map(String::as_str)
            != Some(uid)
        {
            return Ok(None);
        }
        let corrupt = |reason: String| DeployedSpecError::Corrupt {
            deployment: self.deployment.clone(),
            reason,
        };
        let generation = (annotations.get(GENERATION_ANNOTATION))
            .and_then(|g| g.parse().ok())
            .ok_or_else(|| corrupt(format!("no {GENERATION_ANNOTATION} annotation")))?;
        let text = (secret.data.as_ref())
            .and_then(|d| d.get(SPEC_KEY))
            .ok_or_else(|| corrupt(format!("no key {SPEC_KEY}")))?;
        let spec = serde_json::from_slice(&text.0).map_err(|e| corrupt(e.to_string()))?;
        Ok(Some((generation, spec)))
    }

    /// Removes it (the deployment's deletion has succeeded).
    pub async fn forget(&self) -> Result<(), DeployedSpecError> {
        match (self.api)
            .delete(&Self::name(&self.deployment), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(self.kube(e)),
        }
    }
}
