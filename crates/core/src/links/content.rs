//! What a link contains: the provider's side (`deployment_plan/links/link.rb`) and the link
//! as templates see it (`links_manager.rb#update_addresses`, `instance_spec.rb`'s link keys).

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::dns::{DnsNameError, DnsSettings, GroupType, Query, encode};
use super::model::{Binding, ProviderRef, Target};
use super::properties::link_properties;
use crate::manifest::DeploymentManifest;
use crate::release::PropertyDefinition;

/// Why a link's content cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentError {
    /// Declared link properties neither set nor defined in the job spec.
    #[error("{}", .0.join("\n"))]
    Properties(Vec<String>),
    /// The providing instance group has no default network.
    #[error("instance group '{0}' has no default network")]
    NoDefaultNetwork(String),
    /// The consumer asks for a network the provider's instances are not on.
    #[error("Provider link does not have network: '{0}'")]
    MissingNetwork(String),
    /// An instance has no IP on a (non-dynamic) network where an IP is needed.
    #[error("instance {instance} has no IP on network '{network}'")]
    MissingIp {
        /// `group/id`.
        instance: String,
        /// The network.
        network: String,
    },
    /// A DNS name cannot be formed.
    #[error(transparent)]
    Dns(#[from] DnsNameError),
    /// A binding to a provider needs the provider's content.
    #[error("no content for link provider '{0}'")]
    MissingProviderContent(String),
    /// A manual link without a string `address`.
    #[error("manual link has no address")]
    NoAddress,
}

/// The provider deployment's `features` that shape its links.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderFeatures {
    /// `use_dns_addresses`.
    pub use_dns_addresses: bool,
    /// `use_short_dns_addresses`.
    pub use_short_dns_addresses: bool,
    /// `use_link_dns_names`.
    pub use_link_dns_names: bool,
}

impl ProviderFeatures {
    /// The features of a deployment manifest (absent means false).
    pub fn of(manifest: &DeploymentManifest) -> ProviderFeatures {
        let f = manifest.features.clone().unwrap_or_default();
        ProviderFeatures {
            use_dns_addresses: f.use_dns_addresses.unwrap_or(false),
            use_short_dns_addresses: f.use_short_dns_addresses.unwrap_or(false),
            use_link_dns_names: f.use_link_dns_names.unwrap_or(false),
        }
    }
}

/// One network of a providing instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceNetwork {
    /// Network name.
    pub name: String,
    /// The instance's IP there (may be unknown on a dynamic network).
    pub ip: Option<String>,
    /// A dynamic network: addresses there are always DNS names, as in the Director.
    pub dynamic: bool,
}

/// One instance of the providing instance group, as the planner knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInstance {
    /// Index in the group.
    pub index: u64,
    /// Instance id (uuid).
    pub id: String,
    /// AZ, if the group has AZs.
    pub az: Option<String>,
    /// The group's bootstrap instance.
    pub bootstrap: bool,
    /// Its networks, in the group's order.
    pub networks: Vec<InstanceNetwork>,
}

/// One instance in a provider's content, with its address on every network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderInstance {
    /// The instance group name.
    pub name: String,
    /// Instance id.
    pub id: String,
    /// Index.
    pub index: u64,
    /// Bootstrap instance.
    pub bootstrap: bool,
    /// AZ.
    pub az: Option<String>,
    /// Address on the default network (IP or DNS per `use_dns_addresses`).
    pub address: String,
    /// IP (DNS name on dynamic networks) by network.
    pub addresses: IndexMap<String, String>,
    /// DNS name (IP when local DNS is off) by network.
    pub dns_addresses: IndexMap<String, String>,
}

/// A provider's link content (`DeploymentPlan::Link#spec`): what it offers every consumer,
/// before a consumer's `network`/`ip_addresses` choose addresses. Serializable, so a
/// controller can keep it for consumers in other deployments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderContent {
    /// Providing deployment.
    pub deployment_name: String,
    /// DNS root domain.
    pub domain: String,
    /// The group's default network.
    pub default_network: String,
    /// The group's networks.
    pub networks: Vec<String>,
    /// The providing instance group.
    pub instance_group: String,
    /// The link's properties (declared names only, defaults applied).
    pub properties: Value,
    /// Provider deployment's `use_short_dns_addresses`.
    pub use_short_dns_addresses: bool,
    /// Provider deployment's `use_dns_addresses`.
    pub use_dns_addresses: bool,
    /// Provider deployment's `use_link_dns_names`.
    pub use_link_dns_names: bool,
    /// The group's instances, by index.
    pub instances: Vec<ProviderInstance>,
}

/// Builds a provider's content from its instances and the providing job's properties
/// (`job_properties`, after defaults; the declared link properties are picked with
/// [`link_properties`](super::link_properties) against the job spec's `definitions`).
pub fn provider_content(
    provider: &ProviderRef,
    features: ProviderFeatures,
    instances: &[LinkInstance],
    job_properties: &Value,
    definitions: &IndexMap<String, PropertyDefinition>,
    dns: &DnsSettings,
) -> Result<ProviderContent, ContentError> {
    let properties = link_properties(
        job_properties,
        &provider.property_names,
        definitions,
        &provider.job,
    )
    .map_err(ContentError::Properties)?;
    let default_network = provider
        .default_network
        .clone()
        .ok_or_else(|| ContentError::NoDefaultNetwork(provider.instance_group.clone()))?;
    let mut sorted: Vec<&LinkInstance> = instances.iter().collect();
    sorted.sort_by_key(|i| i.index);
    let mut out = Vec::new();
    for inst in sorted {
        let address = |net: &InstanceNetwork, prefer_dns: bool| {
            link_address(provider, features, dns, inst, net, prefer_dns)
        };
        let mut addresses = IndexMap::new();
        let mut dns_addresses = IndexMap::new();
        for net in &inst.networks {
            addresses.insert(net.name.clone(), address(net, false)?);
            dns_addresses.insert(net.name.clone(), address(net, true)?);
        }
        let default = inst
            .networks
            .iter()
            .find(|n| n.name == default_network)
            .ok_or_else(|| ContentError::MissingNetwork(default_network.clone()))?;
        out.push(ProviderInstance {
            name: provider.instance_group.clone(),
            id: inst.id.clone(),
            index: inst.index,
            bootstrap: inst.bootstrap,
            az: inst.az.clone(),
            address: address(default, features.use_dns_addresses)?,
            addresses,
            dns_addresses,
        });
    }
    Ok(ProviderContent {
        deployment_name: provider.deployment.clone(),
        domain: dns.root_domain.clone(),
        default_network,
        networks: provider.networks.clone(),
        instance_group: provider.instance_group.clone(),
        properties,
        use_short_dns_addresses: features.use_short_dns_addresses,
        use_dns_addresses: features.use_dns_addresses,
        use_link_dns_names: features.use_link_dns_names,
        instances: out,
    })
}

/// `NetworkSettings#get_link_address`: a DNS name on dynamic networks or when DNS is
/// preferred and local DNS is on, else the IP.
fn link_address(
    provider: &ProviderRef,
    features: ProviderFeatures,
    dns: &DnsSettings,
    inst: &LinkInstance,
    net: &InstanceNetwork,
    prefer_dns: bool,
) -> Result<String, ContentError> {
    if net.dynamic || (prefer_dns && dns.local_dns_enabled) {
        let link_group = provider.group_name();
        let (group_type, group_name, short) = if features.use_link_dns_names {
            (GroupType::Link, link_group.as_str(), true)
        } else {
            (
                GroupType::InstanceGroup,
                provider.instance_group.as_str(),
                features.use_short_dns_addresses,
            )
        };
        Ok(encode(
            &Query {
                group_type,
                group_name,
                network: &net.name,
                deployment: &provider.deployment,
                root_domain: &dns.root_domain,
                uuid: Some(&inst.id),
                short,
            },
            dns.short.as_ref(),
        )?)
    } else {
        net.ip.clone().ok_or_else(|| ContentError::MissingIp {
            instance: format!("{}/{}", provider.instance_group, inst.id),
            network: net.name.clone(),
        })
    }
}

/// The link as templates see it in the template spec (`spec.links.<name>`), or `None` for a
/// blocked or unresolved link (templates then see no link: `if_link` is false).
///
/// A provider link gets `{deployment_name, domain, default_network, instance_group,
/// properties, use_short_dns_addresses, use_link_dns_names, instances: [{name, id, index,
/// bootstrap, az, address}], group_name}`, each instance's `address` taken from the
/// consumer's `network` (else the provider's default network): an IP with `ip_addresses:
/// true`, a DNS name with `ip_addresses: false`, else per the provider's
/// `use_dns_addresses`. A manual link gets `{instances, properties, address,
/// deployment_name, group_name}` (absent keys `null`).
///
/// `provider` is the content of the binding's provider (ignored for other targets).
pub fn content(
    binding: &Binding,
    provider: Option<&ProviderContent>,
) -> Result<Option<Value>, ContentError> {
    let site = &binding.consumer;
    match &binding.target {
        Target::Blocked | Target::Unresolved => Ok(None),
        Target::Manual(m) => Ok(Some(json!({
            "instances": m.instances.clone().unwrap_or(Value::Null),
            "properties": m.properties.clone().unwrap_or(Value::Null),
            "address": m.address.clone().unwrap_or(Value::Null),
            "deployment_name": site.deployment,
            "group_name": format!("{}-{}", site.name, site.link_type),
        }))),
        Target::Provider(p) => {
            let c = provider.ok_or_else(|| ContentError::MissingProviderContent(p.name.clone()))?;
            let network = binding.network.as_ref().unwrap_or(&c.default_network);
            let mut instances = Vec::new();
            for i in &c.instances {
                let use_ips = binding.ip_addresses.unwrap_or(!c.use_dns_addresses);
                let desired = if use_ips {
                    &i.addresses
                } else {
                    &i.dns_addresses
                };
                let address = desired
                    .get(network)
                    .ok_or_else(|| ContentError::MissingNetwork(network.clone()))?;
                instances.push(json!({
                    "name": i.name,
                    "id": i.id,
                    "index": i.index,
                    "bootstrap": i.bootstrap,
                    "az": i.az,
                    "address": address,
                }));
            }
            let mut m = Map::new();
            m.insert("deployment_name".into(), json!(c.deployment_name));
            m.insert("domain".into(), json!(c.domain));
            m.insert("default_network".into(), json!(network));
            m.insert("instance_group".into(), json!(c.instance_group));
            m.insert("properties".into(), c.properties.clone());
            m.insert(
                "use_short_dns_addresses".into(),
                json!(c.use_short_dns_addresses),
            );
            m.insert("use_link_dns_names".into(), json!(c.use_link_dns_names));
            m.insert("instances".into(), Value::Array(instances));
            m.insert("group_name".into(), json!(p.group_name()));
            Ok(Some(Value::Object(m)))
        }
    }
}

/// What `link("x").address` returns in a template (`EvaluationLink#address` without AZ or
/// health criteria): a manual link's `address`, else the group query
/// `q-s0.<group>.<network>.<deployment>.<domain>` (`q-n<network>s0.q-g<group>.<domain>`
/// with `use_short_dns_addresses`), the group being the instance group, or `<link
/// name>-<type>` with `use_link_dns_names`.
pub fn group_address(link: &Value, dns: &DnsSettings) -> Result<String, ContentError> {
    if let Some(address) = link.get("address") {
        return address
            .as_str()
            .map(str::to_string)
            .ok_or(ContentError::NoAddress);
    }
    let text = |key: &str| link.get(key).and_then(Value::as_str).unwrap_or_default();
    let flag = |key: &str| link.get(key).and_then(Value::as_bool).unwrap_or(false);
    let (group_type, group_name) = if flag("use_link_dns_names") {
        (GroupType::Link, text("group_name"))
    } else {
        (GroupType::InstanceGroup, text("instance_group"))
    };
    Ok(encode(
        &Query {
            group_type,
            group_name,
            network: text("default_network"),
            deployment: text("deployment_name"),
            root_domain: text("domain"),
            uuid: None,
            short: flag("use_short_dns_addresses"),
        },
        dns.short.as_ref(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::links::{ConsumerSite, ShortDnsIds};
    use crate::validate::Path;

    fn provider() -> ProviderRef {
        ProviderRef {
            deployment: "cf".into(),
            instance_group: "nats".into(),
            job: "nats".into(),
            original_name: "nats".into(),
            name: "nats".into(),
            link_type: "nats".into(),
            shared: false,
            consumable: true,
            custom: false,
            property_names: vec![],
            networks: vec!["default".into(), "dyn".into()],
            default_network: Some("default".into()),
        }
    }

    fn instance() -> LinkInstance {
        LinkInstance {
            index: 0,
            id: "abc".into(),
            az: None,
            bootstrap: true,
            networks: vec![
                InstanceNetwork {
                    name: "default".into(),
                    ip: Some("10.0.0.5".into()),
                    dynamic: false,
                },
                InstanceNetwork {
                    name: "dyn".into(),
                    ip: None,
                    dynamic: true,
                },
            ],
        }
    }

    fn binding(network: Option<&str>) -> Binding {
        Binding {
            consumer: ConsumerSite {
                deployment: "cf".into(),
                instance_group: "router".into(),
                job: "gorouter".into(),
                release: "routing".into(),
                name: "nats".into(),
                link_type: "nats".into(),
                optional: false,
                explicit: false,
                path: Path::root(),
            },
            target: Target::Provider(provider()),
            network: network.map(String::from),
            ip_addresses: None,
        }
    }

    fn ids() -> ShortDnsIds {
        let mut ids = ShortDnsIds::default();
        ids.instances.insert("abc".into(), 4);
        ids.networks.insert("default".into(), 1);
        ids.networks.insert("dyn".into(), 2);
        ids.groups
            .insert((GroupType::Link, "nats-nats".into(), "cf".into()), 9);
        ids.groups
            .insert((GroupType::InstanceGroup, "nats".into(), "cf".into()), 2);
        ids
    }

    fn build(
        features: ProviderFeatures,
        dns: &DnsSettings,
    ) -> Result<ProviderContent, ContentError> {
        provider_content(
            &provider(),
            features,
            &[instance()],
            &Value::Null,
            &IndexMap::new(),
            dns,
        )
    }

    #[test]
    fn dynamic_networks_always_get_dns_names() {
        let c = build(ProviderFeatures::default(), &DnsSettings::default()).unwrap();
        assert_eq!(c.instances[0].addresses["dyn"], "abc.nats.dyn.cf.bosh");
        assert_eq!(c.instances[0].addresses["default"], "10.0.0.5");
        let v = content(&binding(Some("dyn")), Some(&c)).unwrap().unwrap();
        assert_eq!(v["instances"][0]["address"], "abc.nats.dyn.cf.bosh");
        assert_eq!(
            content(&binding(Some("other")), Some(&c))
                .unwrap_err()
                .to_string(),
            "Provider link does not have network: 'other'"
        );
    }

    #[test]
    fn short_and_link_dns_names() {
        let dns = DnsSettings {
            short: Some(ids()),
            ..DnsSettings::default()
        };
        let short = ProviderFeatures {
            use_dns_addresses: true,
            use_short_dns_addresses: true,
            use_link_dns_names: false,
        };
        let c = build(short, &dns).unwrap();
        assert_eq!(c.instances[0].address, "q-m4n1s0.q-g2.bosh");
        let v = content(&binding(None), Some(&c)).unwrap().unwrap();
        assert_eq!(group_address(&v, &dns).unwrap(), "q-n1s0.q-g2.bosh");

        let link = ProviderFeatures {
            use_link_dns_names: true,
            use_short_dns_addresses: false,
            ..short
        };
        let c = build(link, &dns).unwrap();
        assert_eq!(c.instances[0].address, "q-m4n1s0.q-g9.bosh");
        let v = content(&binding(None), Some(&c)).unwrap().unwrap();
        assert_eq!(v["group_name"], "nats-nats");
        // `link.address` with link DNS names but no short names: the long form of the group.
        assert_eq!(
            group_address(&v, &dns).unwrap(),
            "q-s0.nats-nats.default.cf.bosh"
        );

        // Short names need the numeric encodings.
        assert!(matches!(
            build(short, &DnsSettings::default()),
            Err(ContentError::Dns(_))
        ));
    }

    #[test]
    fn missing_inputs_are_errors_not_panics() {
        let mut p = provider();
        p.default_network = None;
        assert_eq!(
            provider_content(
                &p,
                ProviderFeatures::default(),
                &[],
                &Value::Null,
                &IndexMap::new(),
                &DnsSettings::default()
            )
            .unwrap_err(),
            ContentError::NoDefaultNetwork("nats".into())
        );
        let mut i = instance();
        i.networks[0].ip = None;
        let e = provider_content(
            &provider(),
            ProviderFeatures::default(),
            &[i],
            &Value::Null,
            &IndexMap::new(),
            &DnsSettings::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "instance nats/abc has no IP on network 'default'"
        );
        assert_eq!(
            content(&binding(None), None).unwrap_err(),
            ContentError::MissingProviderContent("nats".into())
        );
        let mut b = binding(None);
        b.target = Target::Unresolved;
        assert_eq!(content(&b, None).unwrap(), None);
    }
}
