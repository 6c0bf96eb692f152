//! Reading the providers and consumers of every job out of the manifest and the job specs
//! (`links/link_providers_parser.rb`, `links/link_consumers_parser.rb`,
//! `links/link_helpers.rb`), with the Director's checks and messages.

use serde_json::{Map, Value};

use super::addons::addon_applies;
use super::model::{ConsumerSite, JobSpecs, ManualLink, OtherDeployment, ProviderRef};
use super::properties::link_properties;
use crate::manifest::{DeploymentManifest, InstanceGroup, JobRef};
use crate::release::JobSpec;
use crate::validate::{Document, Path, Problems};

/// The keys that make a consumed link a manual one.
const MANUAL_LINK_KEYS: [&str; 3] = ["instances", "properties", "address"];

/// A consumed link as the manifest asks for it (a `LinkConsumerIntent`).
#[derive(Debug, Clone)]
pub(super) struct Consumer {
    pub site: ConsumerSite,
    /// `from` (or the original name), as written.
    pub alias: String,
    /// The provider name to match: the last `.`-separated segment of `alias`.
    pub name: String,
    pub blocked: bool,
    pub manual: Option<ManualLink>,
    pub network: Option<String>,
    pub ip_addresses: Option<bool>,
    /// `deployment` when it names another deployment.
    pub from_deployment: Option<String>,
}

/// Everything the manifest provides and consumes.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub providers: Vec<ProviderRef>,
    pub consumers: Vec<Consumer>,
}

/// One job placed on one instance group.
struct Site<'a> {
    group: &'a InstanceGroup,
    job: &'a JobRef,
    /// Manifest path of the job entry.
    path: Path,
    /// The properties the job gets (raw, before defaults).
    properties: Value,
}

/// Reads every job of every instance group, then every addon job of every group the addon
/// applies to (the Director's order).
pub(super) fn parse(
    manifest: &DeploymentManifest,
    deployment: &str,
    specs: &dyn JobSpecs,
    others: &[OtherDeployment],
    problems: &mut Problems,
) -> Parsed {
    let mut parsed = Parsed::default();
    let global = manifest
        .properties
        .clone()
        .map(Value::Object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    let mut sites = Vec::new();
    for (gi, group) in manifest.instance_groups.iter().enumerate() {
        let group_props = group
            .properties
            .clone()
            .map(Value::Object)
            .unwrap_or_else(|| Value::Object(Map::new()));
        let merged = merge(&global, &group_props);
        for (ji, job) in group.jobs.iter().enumerate() {
            sites.push(Site {
                group,
                job,
                path: Path::root()
                    .key("instance_groups")
                    .index(gi)
                    .key("jobs")
                    .index(ji),
                properties: job.properties.clone().map_or(merged.clone(), Value::Object),
            });
        }
    }
    for (ai, addon) in manifest.addons.iter().enumerate() {
        let addon_props = addon
            .properties
            .clone()
            .map(Value::Object)
            .unwrap_or_else(|| Value::Object(Map::new()));
        for (ji, job) in addon.jobs.iter().enumerate() {
            for group in &manifest.instance_groups {
                if addon_applies(manifest, addon, group) {
                    sites.push(Site {
                        group,
                        job,
                        path: Path::root().key("addons").index(ai).key("jobs").index(ji),
                        properties: job
                            .properties
                            .clone()
                            .map_or(addon_props.clone(), Value::Object),
                    });
                }
            }
        }
    }
    for site in &sites {
        let Some(spec) = specs.job_spec(&site.job.release, &site.job.name) else {
            problems.error(
                Document::Manifest,
                site.path.key("name"),
                format!(
                    "Job '{}' not found in release '{}'",
                    site.job.name, site.job.release
                ),
            );
            continue;
        };
        providers(site, spec, deployment, &mut parsed.providers, problems);
        consumers(
            site,
            spec,
            deployment,
            others,
            &mut parsed.consumers,
            problems,
        );
    }
    parsed
}

/// Deep merge (`Hash#recursive_merge`): mappings merge key by key, anything else replaces.
fn merge(base: &Value, over: &Value) -> Value {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            let mut out = b.clone();
            for (k, v) in o {
                let merged = match out.get(k) {
                    Some(existing) => merge(existing, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (_, o) => o.clone(),
    }
}

/// The default network of an instance group: `addressable`, else `gateway`, else the only
/// network.
fn default_network(group: &InstanceGroup) -> Option<String> {
    let with = |d: &str| {
        group
            .networks
            .iter()
            .find(|n| n.default.iter().any(|x| x == d))
    };
    with("addressable")
        .or_else(|| with("gateway"))
        .or(match group.networks.as_slice() {
            [only] => Some(only),
            _ => None,
        })
        .map(|n| n.name.clone())
}

fn is_nil(v: &Value) -> bool {
    v.as_str() == Some("nil")
}

/// A provider definition: from the release or from `custom_provider_definitions`.
struct Definition<'a> {
    name: &'a str,
    link_type: &'a str,
    properties: &'a [String],
    custom: bool,
}

/// The providers of one job: its custom definitions (checked first: any problem there
/// stops the job's providers), then the release's, each as the manifest's `provides`
/// shapes it.
fn providers(
    site: &Site<'_>,
    spec: &JobSpec,
    deployment: &str,
    out: &mut Vec<ProviderRef>,
    problems: &mut Problems,
) {
    let job = &site.job.name;
    let group = &site.group.name;
    if !custom_providers_valid(site, spec, problems) {
        return;
    }

    let manifest_provides = site.job.provides.clone().unwrap_or_default();
    let definitions = site
        .job
        .custom_provider_definitions
        .iter()
        .map(|c| Definition {
            name: &c.name,
            link_type: &c.kind,
            properties: &c.properties,
            custom: true,
        })
        .chain(spec.provides.iter().map(|p| Definition {
            name: &p.name,
            link_type: &p.link_type,
            properties: &p.properties,
            custom: false,
        }));
    let mut used = Vec::new();
    for d in definitions {
        let shape = match manifest_provides.get(d.name) {
            None => ProviderShape::unchanged(d.name),
            Some(source) => {
                used.push(d.name.to_string());
                match provider_shape(site, &d, source, problems) {
                    Some(shape) => shape,
                    None => continue,
                }
            }
        };
        if let Err(errors) = link_properties(&site.properties, d.properties, &spec.properties, job)
        {
            for e in errors {
                problems.error(Document::Manifest, site.path.clone(), e);
            }
            continue;
        }
        out.push(ProviderRef {
            deployment: deployment.to_string(),
            instance_group: group.clone(),
            job: job.clone(),
            original_name: d.name.to_string(),
            name: shape.alias,
            link_type: d.link_type.to_string(),
            shared: shape.shared,
            consumable: shape.consumable,
            custom: d.custom,
            property_names: d.properties.to_vec(),
            networks: site.group.networks.iter().map(|n| n.name.clone()).collect(),
            default_network: default_network(site.group),
        });
    }
    for key in manifest_provides.keys().filter(|k| !used.contains(k)) {
        problems.warning(
            Document::Manifest,
            site.path.key("provides").key(key),
            format!("Job '{job}' does not define link provider '{key}' in the release spec"),
        );
    }
}

/// `validate_custom_providers`: every custom provider definition has a name and a type,
/// and its name is neither the release's nor given twice. False when any is not.
fn custom_providers_valid(site: &Site<'_>, spec: &JobSpec, problems: &mut Problems) -> bool {
    let job = &site.job.name;
    let group = &site.group.name;
    let err = |problems: &mut Problems, path: Path, msg: String| {
        problems.error(Document::Manifest, path, msg)
    };
    let mut custom_ok = true;
    let customs = &site.job.custom_provider_definitions;
    for (k, c) in customs.iter().enumerate() {
        let p = site.path.key("custom_provider_definitions").index(k);
        if c.name.is_empty() {
            custom_ok = false;
            err(
                problems,
                p.key("name"),
                format!(
                    "Name for custom link provider definition in manifest in job '{job}' in instance group '{group}' must be a valid non-empty string."
                ),
            );
        }
        if c.kind.is_empty() {
            custom_ok = false;
            err(
                problems,
                p.key("type"),
                format!(
                    "Type for custom link provider definition in manifest in job '{job}' in instance group '{group}' must be a valid non-empty string."
                ),
            );
        }
        if spec.provides.iter().any(|r| r.name == c.name) {
            custom_ok = false;
            err(
                problems,
                p.key("name"),
                format!(
                    "Custom provider '{}' in job '{job}' in instance group '{group}' is already defined in release '{}'",
                    c.name, site.job.release
                ),
            );
        }
        if customs[..k].iter().any(|o| o.name == c.name)
            && !customs[k + 1..].iter().any(|o| o.name == c.name)
        {
            custom_ok = false;
            err(
                problems,
                p.key("name"),
                format!(
                    "Custom provider '{}' in job '{job}' in instance group '{group}' is defined multiple times in manifest.",
                    c.name
                ),
            );
        }
    }
    custom_ok
}

/// What the manifest's `provides` entry makes of a provider.
struct ProviderShape {
    /// The name consumers match (`as`, else the definition's name).
    alias: String,
    shared: bool,
    /// False when the entry is `nil`.
    consumable: bool,
}

impl ProviderShape {
    /// A provider the manifest does not mention.
    fn unchanged(name: &str) -> Self {
        ProviderShape {
            alias: name.to_string(),
            shared: false,
            consumable: true,
        }
    }
}

/// The manifest's `provides` entry `source` for definition `d`: `nil`, or a mapping with
/// `as` and `shared`. `None` (with the problem reported) when the entry is not usable.
fn provider_shape(
    site: &Site<'_>,
    d: &Definition<'_>,
    source: &Value,
    problems: &mut Problems,
) -> Option<ProviderShape> {
    let job = &site.job.name;
    let group = &site.group.name;
    let path = site.path.key("provides").key(d.name);
    let mut shape = ProviderShape::unchanged(d.name);
    if is_nil(source) {
        shape.consumable = false;
    } else if let Some(source) = source.as_object() {
        if source.contains_key("name") || source.contains_key("type") {
            problems.error(
                Document::Manifest,
                path,
                format!(
                    "Cannot specify 'name' or 'type' properties in the manifest for link '{}' in job '{job}' in instance group '{group}'. Please provide these keys in the release only.",
                    d.name
                ),
            );
            return None;
        }
        match source.get("as") {
            None => {}
            Some(Value::String(s)) => shape.alias = s.clone(),
            Some(other) => {
                problems.error(
                    Document::Manifest,
                    path.key("as"),
                    format!(
                        "Provider '{}' in job '{job}' in instance group '{group}' has a non-string 'as': {other}",
                        d.name
                    ),
                );
                return None;
            }
        }
        shape.shared = source.get("shared") == Some(&Value::Bool(true));
    } else {
        problems.error(
            Document::Manifest,
            path,
            format!(
                "Provider '{}' in job '{job}' in instance group '{group}' specified in the manifest should only be a hash or string 'nil'",
                d.name
            ),
        );
        return None;
    }
    Some(shape)
}

fn consumers(
    site: &Site<'_>,
    spec: &JobSpec,
    deployment: &str,
    others: &[OtherDeployment],
    out: &mut Vec<Consumer>,
    problems: &mut Problems,
) {
    let job = &site.job.name;
    let group = &site.group.name;
    let manifest_consumes = site.job.consumes.clone().unwrap_or_default();
    let mut used = Vec::new();
    for c in &spec.consumes {
        let path = site.path.key("consumes").key(&c.name);
        let mut consumer = Consumer {
            site: ConsumerSite {
                deployment: deployment.to_string(),
                instance_group: group.clone(),
                job: job.clone(),
                release: site.job.release.clone(),
                name: c.name.clone(),
                link_type: c.link_type.clone(),
                optional: c.optional,
                explicit: false,
                path: path.clone(),
            },
            alias: c.name.clone(),
            name: c.name.clone(),
            blocked: false,
            manual: None,
            network: None,
            ip_addresses: None,
            from_deployment: None,
        };
        if let Some(source) = manifest_consumes.get(&c.name) {
            used.push(c.name.clone());
            let errors = check_consume(source, &c.name, job, group);
            if !errors.is_empty() {
                for e in errors {
                    problems.error(Document::Manifest, path.clone(), e);
                }
                continue;
            }
            consumer.site.explicit = true;
            if is_nil(source) {
                consumer.blocked = true;
            } else {
                let source = source.as_object().expect("checked: a mapping");
                if MANUAL_LINK_KEYS.iter().any(|k| source.contains_key(*k)) {
                    consumer.manual = Some(ManualLink {
                        instances: source.get("instances").cloned(),
                        properties: source.get("properties").cloned(),
                        address: source.get("address").cloned(),
                    });
                } else if !explicit_options(
                    &mut consumer,
                    source,
                    deployment,
                    others,
                    &path,
                    problems,
                ) {
                    continue;
                }
            }
        }
        consumer.name = consumer
            .alias
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_string();
        out.push(consumer);
    }
    for key in manifest_consumes.keys().filter(|k| !used.contains(k)) {
        problems.warning(
            Document::Manifest,
            site.path.key("consumes").key(key),
            format!("Job '{job}' does not define link consumer '{key}' in the release spec"),
        );
    }
}

/// `from`, `network`, `ip_addresses` and `deployment` of an explicit link; false (with the
/// problems recorded) when the consumer cannot be used.
fn explicit_options(
    consumer: &mut Consumer,
    source: &Map<String, Value>,
    deployment: &str,
    others: &[OtherDeployment],
    path: &Path,
    problems: &mut Problems,
) -> bool {
    let mut ok = true;
    let site = &consumer.site;
    let mut string = |key: &str| -> Option<String> {
        match source.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                problems.error(
                    Document::Manifest,
                    path.key(key),
                    format!(
                        "Cannot specify non string value {other} for '{key}' field for link '{}' in job '{}' in instance group '{}'.",
                        site.name, site.job, site.instance_group
                    ),
                );
                ok = false;
                None
            }
        }
    };
    let from = string("from");
    let network = string("network");
    let from_deployment = string("deployment");
    if let Some(from) = from {
        consumer.alias = from;
    }
    consumer.network = network;
    consumer.ip_addresses = source.get("ip_addresses").and_then(Value::as_bool);
    if let Some(d) = from_deployment
        && d != deployment
    {
        if !others.iter().any(|o| o.name == d) {
            problems.error(
                Document::Manifest,
                path.key("deployment"),
                format!(
                    "Link '{}' in job '{}' from instance group '{}' consumes from deployment '{d}', but the deployment does not exist.",
                    consumer.alias, consumer.site.job, consumer.site.instance_group
                ),
            );
            ok = false;
        }
        consumer.from_deployment = Some(d);
    }
    ok
}

/// `LinkHelpers#validate_consume_link`.
fn check_consume(source: &Value, link: &str, job: &str, group: &str) -> Vec<String> {
    if is_nil(source) {
        return Vec::new();
    }
    let Some(source) = source.as_object() else {
        return vec![format!(
            "Consumer '{link}' in job '{job}' in instance group '{group}' specified in the manifest should only be a hash or string 'nil'"
        )];
    };
    let mut errors = Vec::new();
    for (a, b) in [("instances", "from"), ("properties", "from")] {
        if source.contains_key(a) && source.contains_key(b) {
            errors.push(format!(
                "Cannot specify both '{a}' and '{b}' keys for link '{link}' in job '{job}' in instance group '{group}'."
            ));
        }
    }
    if source.contains_key("properties") && !source.contains_key("instances") {
        errors.push(format!(
            "Cannot specify 'properties' without 'instances' for link '{link}' in job '{job}' in instance group '{group}'."
        ));
    }
    if source.get("ip_addresses").is_some_and(|v| !v.is_boolean()) {
        errors.push(format!(
            "Cannot specify non boolean values for 'ip_addresses' field for link '{link}' in job '{job}' in instance group '{group}'."
        ));
    }
    if source.contains_key("name") || source.contains_key("type") {
        errors.push(format!(
            "Cannot specify 'name' or 'type' properties in the manifest for link '{link}' in job '{job}' in instance group '{group}'. Please provide these keys in the release only."
        ));
    }
    errors
}
