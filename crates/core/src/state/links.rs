//! The link providers the deployments of a director share (`shared: true`): what each
//! deployment published after its last successful deploy, read by the deploys of the others
//! that consume from it (`consumes: {x: {from: y, deployment: other}}`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::links::{OtherDeployment, ProviderContent, ProviderRef};

/// One link provider a deployment shares, with what it offers consumers elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedLink {
    /// The provider, as [`resolve`](crate::links::resolve) matches it.
    pub provider: ProviderRef,
    /// Its content (instances, addresses, properties), as templates get it.
    pub content: ProviderContent,
}

/// What deployments published, by deployment. A deployment that shares nothing publishes
/// an empty list: it exists, so a consumer naming it is told that no provider matches rather
/// than that the deployment does not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkTable {
    /// Shared providers by deployment.
    pub deployments: BTreeMap<String, Vec<SharedLink>>,
}

impl LinkTable {
    /// Replaces one deployment's share (removes it for `None`).
    pub fn publish(&mut self, deployment: &str, links: Option<Vec<SharedLink>>) {
        match links {
            Some(links) => {
                self.deployments.insert(deployment.to_string(), links);
            }
            None => {
                self.deployments.remove(deployment);
            }
        }
    }

    /// Only the shares of `names` (those that published).
    pub fn only(&self, names: &BTreeSet<String>) -> LinkTable {
        LinkTable {
            deployments: (self.deployments.iter())
                .filter(|(name, _)| names.contains(*name))
                .map(|(name, links)| (name.clone(), links.clone()))
                .collect(),
        }
    }

    /// The deployments with their providers, as [`resolve`](crate::links::resolve) reads
    /// them.
    pub fn others(&self) -> Vec<OtherDeployment> {
        (self.deployments.iter())
            .map(|(name, links)| OtherDeployment {
                name: name.clone(),
                providers: links.iter().map(|l| l.provider.clone()).collect(),
            })
            .collect()
    }

    /// The content of `provider` (of one of these deployments).
    pub fn content(&self, provider: &ProviderRef) -> Option<&ProviderContent> {
        let links = self.deployments.get(&provider.deployment)?;
        (links.iter())
            .find(|l| {
                l.provider.instance_group == provider.instance_group
                    && l.provider.job == provider.job
                    && l.provider.name == provider.name
            })
            .map(|l| &l.content)
    }

    /// A digest of every share: a consumer whose providers' content changed has new inputs.
    pub fn digest(&self) -> String {
        let text = serde_json::to_string(&self.deployments).unwrap_or_default();
        kubosh_base::digest::sha256_hex(text.as_bytes())
    }
}
