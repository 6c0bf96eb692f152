//! Every deployment's DNS entries as one dataset (`bosh-protocols.md` §4.10): the Director
//! publishes one records blob for all deployments, versioned above every blob before it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One instance as DNS sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsInstance {
    /// Uuid.
    pub uuid: String,
    /// Index.
    pub index: u64,
    /// Instance group.
    pub group: String,
    /// AZ.
    pub az: Option<String>,
    /// `(network, ip)` pairs of networks with an address.
    pub addresses: Vec<(String, String)>,
    /// The agent id of its VM.
    pub agent_id: Option<String>,
}

/// What all deployments published last, under the version of the newest blob.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DnsDataset {
    /// The newest blob's version.
    pub version: u64,
    /// Instances by deployment.
    pub deployments: BTreeMap<String, Vec<DnsInstance>>,
}

impl DnsDataset {
    /// Replaces one deployment's entries (removes them for `None`) and takes the next version,
    /// above both the dataset's and `at_least`.
    pub fn publish(
        &mut self,
        deployment: &str,
        instances: Option<Vec<DnsInstance>>,
        at_least: u64,
    ) {
        match instances {
            Some(instances) => {
                self.deployments.insert(deployment.to_string(), instances);
            }
            None => {
                self.deployments.remove(deployment);
            }
        }
        self.version = self.version.max(at_least) + 1;
    }

    /// The agent ids of every instance of every deployment.
    pub fn agent_ids(&self) -> Vec<String> {
        self.deployments
            .values()
            .flatten()
            .filter_map(|i| i.agent_id.clone())
            .collect()
    }
}
