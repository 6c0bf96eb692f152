//! BOSH links: jobs that `provides` a link and jobs that `consumes` it, across the instance
//! groups of a deployment and across deployments (`shared`).
//!
//! Pure: no I/O, no Kubernetes. Two steps, as the Director does them
//! (`links/links_parser.rb`, `links/links_manager.rb`):
//!
//! 1. [`resolve`]: reads the typed manifest (instance groups and addons), the release job
//!    specs ([`JobSpecs`]) and the providers of the other deployments in the namespace
//!    ([`OtherDeployment`]); returns one [`Binding`] per (instance group, job, consumed link):
//!    a provider, a manual link, blocked (`consumes: {x: nil}`) or unresolved (optional).
//!    Every problem is reported at once, each with the Director's words and a manifest path.
//! 2. [`provider_content`] builds a provider's link content from its instances (BOSH's
//!    `DeploymentPlan::Link#spec`, storable for consumers in other deployments), and
//!    [`content`] turns a binding plus that content into the link exactly as templates see it
//!    in the template spec (`spec.links`), choosing addresses per `ip_addresses`, `network`
//!    and the provider's `use_dns_addresses`.
//!
//! [`group_address`] is what `link("x").address` returns in a template;
//! [`consumed_deployments`] names the other deployments a manifest consumes from.

mod addons;
mod content;
mod dns;
mod model;
mod parse;
mod properties;
mod resolve;
mod shared;

pub use addons::addon_applies;
pub use content::{
    ContentError, InstanceNetwork, LinkInstance, ProviderContent, ProviderFeatures,
    ProviderInstance, content, group_address, provider_content,
};
pub use dns::{DnsNameError, DnsSettings, GroupType, ShortDnsIds, canonicalize};
pub use model::{
    Binding, ConsumerSite, JobSpecs, ManualLink, OtherDeployment, ProviderRef, Resolution, Target,
};
pub use properties::link_properties;
pub use resolve::resolve;
pub use shared::consumed_deployments;
