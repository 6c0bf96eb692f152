//! The inputs and outputs of link resolution.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::release::JobSpec;
use crate::validate::Path;

/// Where the release job specs come from: looked up by (release name, job name).
pub trait JobSpecs {
    /// The spec of `job` in release `release`, if that release has such a job.
    fn job_spec(&self, release: &str, job: &str) -> Option<&JobSpec>;
}

impl JobSpecs for BTreeMap<(String, String), JobSpec> {
    fn job_spec(&self, release: &str, job: &str) -> Option<&JobSpec> {
        self.get(&(release.to_string(), job.to_string()))
    }
}

impl JobSpecs for HashMap<(String, String), JobSpec> {
    fn job_spec(&self, release: &str, job: &str) -> Option<&JobSpec> {
        self.get(&(release.to_string(), job.to_string()))
    }
}

/// One link a job provides (a `LinkProviderIntent` in the Director).
///
/// [`resolve`](super::resolve) returns those of the deployment it resolved in
/// [`Resolution::providers`]; the caller keeps them (with their
/// [`ProviderContent`](super::ProviderContent)) so that other deployments can consume the
/// `shared` ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderRef {
    /// The providing deployment.
    pub deployment: String,
    /// The providing instance group.
    pub instance_group: String,
    /// The providing job.
    pub job: String,
    /// The link's name in the job spec (or custom provider definition).
    pub original_name: String,
    /// The name consumers match: `as` from the manifest, else the original name.
    pub name: String,
    /// The link type.
    #[serde(rename = "type")]
    pub link_type: String,
    /// `shared: true`: consumable from other deployments.
    pub shared: bool,
    /// False when the manifest disables the provider (`provides: {x: nil}`).
    pub consumable: bool,
    /// Declared in the manifest's `custom_provider_definitions` rather than the release.
    pub custom: bool,
    /// The job properties the link exposes, by dotted name.
    pub property_names: Vec<String>,
    /// The providing instance group's networks, in manifest order.
    pub networks: Vec<String>,
    /// The providing instance group's default network (`addressable`, else `gateway`, else
    /// the only network).
    pub default_network: Option<String>,
}

impl ProviderRef {
    /// BOSH's link group name (`<name>-<type>`), used for link DNS names and `group_name`.
    pub fn group_name(&self) -> String {
        format!("{}-{}", self.name, self.link_type)
    }
}

/// The providers of another deployment in the same namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OtherDeployment {
    /// The deployment's name.
    pub name: String,
    /// Its link providers; only `shared` ones can be consumed from here.
    pub providers: Vec<ProviderRef>,
}

/// The consuming side of a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSite {
    /// The consuming deployment.
    pub deployment: String,
    /// The consuming instance group.
    pub instance_group: String,
    /// The consuming job.
    pub job: String,
    /// The job's release.
    pub release: String,
    /// The consumed link's name in the job spec (the key templates use in `link(...)`).
    pub name: String,
    /// The consumed link's type.
    pub link_type: String,
    /// The job spec marks the link optional.
    pub optional: bool,
    /// The manifest names the link under `consumes`.
    pub explicit: bool,
    /// Manifest path of the link (`instance_groups[1].jobs[0].consumes.db`).
    pub path: Path,
}

/// A link written out literally in the manifest (`consumes: {x: {instances, properties,
/// address}}`). Absent keys stay `None` and appear as `null` in the link, as in BOSH.
#[derive(Debug, Clone, PartialEq)]
pub struct ManualLink {
    /// `instances`, verbatim.
    pub instances: Option<Value>,
    /// `properties`, verbatim.
    pub properties: Option<Value>,
    /// `address`, verbatim.
    pub address: Option<Value>,
}

/// What a consumed link is bound to.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A provider in this deployment or a shared one in another.
    Provider(ProviderRef),
    /// A literal link from the manifest.
    Manual(ManualLink),
    /// The manifest blocks the link (`consumes: {x: nil}`) and it is optional.
    Blocked,
    /// An optional link with no provider.
    Unresolved,
}

/// One consumed link of one job of one instance group, and what it is bound to.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// Who consumes.
    pub consumer: ConsumerSite,
    /// What it gets.
    pub target: Target,
    /// `network`: the provider network whose addresses the link carries.
    pub network: Option<String>,
    /// `ip_addresses`: force IPs (`true`) or DNS names (`false`) whatever the provider's
    /// `use_dns_addresses`.
    pub ip_addresses: Option<bool>,
}

/// The result of [`resolve`](super::resolve).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Resolution {
    /// Every consumed link, in the Director's order: instance groups, their jobs, each job
    /// spec's `consumes`; then addons, their jobs, the groups each applies to.
    pub bindings: Vec<Binding>,
    /// Every link provided in this deployment, in the same order (custom definitions of a
    /// job before its release's).
    pub providers: Vec<ProviderRef>,
}

impl Resolution {
    /// The binding of link `name` consumed by `job` in `instance_group`.
    pub fn binding(&self, instance_group: &str, job: &str, name: &str) -> Option<&Binding> {
        self.bindings.iter().find(|b| {
            b.consumer.instance_group == instance_group
                && b.consumer.job == job
                && b.consumer.name == name
        })
    }
}
