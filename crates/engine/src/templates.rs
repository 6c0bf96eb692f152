//! Rendering job templates for the planned instances: template specs with bound properties
//! and resolved links (§4.11), the renderer behind [`crate::TemplateRenderer`], and what the
//! Director makes of the output (configuration hash, template hashes, archive).

use std::collections::BTreeMap;
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::Value;

use kubosh_artifacts::release::Release;
use kubosh_artifacts::render::{
    self, InstanceGroupSpec, JobTemplates, LinkSpec, NetworkSpec, PropertyBinder, ReleaseRef,
    RenderError, RenderUnit, RenderedJob, TemplateSpec, property_source,
};
use kubosh_core::links::{
    self, DnsSettings, InstanceNetwork, LinkInstance, ProviderContent, ProviderFeatures,
    Resolution, Target,
};
use kubosh_core::manifest::{DeploymentManifest, JobRef};
use kubosh_core::state::LinkTable;

/// The content of every provider of a deployment, by `(group, job, link name)`.
pub type ProviderContents = BTreeMap<(String, String, String), ProviderContent>;

/// Template units, each with its instance's position.
pub type Units = Vec<(usize, RenderUnit)>;

/// Rendering cannot be prepared.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateError {
    /// The manifest names a job its release lacks.
    #[error("Can't find job '{job}' in release '{release}'")]
    UnknownJob {
        /// Release.
        release: String,
        /// Job.
        job: String,
    },
    /// A template is not UTF-8 text.
    #[error("{0}")]
    NotText(String),
    /// Properties cannot be bound.
    #[error("{0}")]
    Render(#[from] RenderError),
    /// A link's content cannot be built.
    #[error("{0}")]
    Link(String),
}

/// One planned instance as templates see it.
#[derive(Debug, Clone)]
pub struct InstanceView {
    /// Instance group.
    pub group: String,
    /// Uuid.
    pub uuid: String,
    /// Index.
    pub index: u64,
    /// AZ.
    pub az: Option<String>,
    /// Bootstrap.
    pub bootstrap: bool,
    /// Network settings by network name (manifest order), IPs included.
    pub networks: IndexMap<String, Value>,
    /// Size of the unnamed persistent disk (0: none).
    pub persistent_disk: u64,
}

/// Everything shared by the template specs of one deploy.
pub struct TemplateContext<'a> {
    /// The deployment manifest (interpolated).
    pub manifest: &'a DeploymentManifest,
    /// Releases by name.
    pub releases: &'a BTreeMap<String, Arc<Release>>,
    /// Link bindings of the manifest.
    pub links: &'a Resolution,
    /// What the deployments it consumes links from share.
    pub shared: &'a LinkTable,
    /// How addresses are formed.
    pub dns: &'a DnsSettings,
}

/// The jobs an instance group runs: its own, then the addons' that apply to it.
pub(crate) fn group_jobs(manifest: &DeploymentManifest, group: &str) -> Vec<JobRef> {
    let Some(g) = manifest.instance_groups.iter().find(|g| g.name == group) else {
        return Vec::new();
    };
    let mut jobs = g.jobs.clone();
    for addon in &manifest.addons {
        if links::addon_applies(manifest, addon, g) {
            jobs.extend(addon.jobs.iter().cloned());
        }
    }
    jobs
}

/// Template units for `instances`: for each instance its units in job order, with the
/// instance's position in `instances`; and the content of the deployment's providers.
pub fn units(
    ctx: &TemplateContext<'_>,
    instances: &[InstanceView],
) -> Result<(Units, ProviderContents), Vec<TemplateError>> {
    let deployment = ctx.manifest.name.clone().unwrap_or_default();
    let mut jobs: BTreeMap<(String, String), Arc<JobTemplates>> = BTreeMap::new();
    let mut bound: BTreeMap<(String, String, String), serde_json::Map<String, Value>> =
        BTreeMap::new();
    let mut errors = Vec::new();
    // Every job of every group, with its properties bound once per group.
    for group in &ctx.manifest.instance_groups {
        for job in group_jobs(ctx.manifest, &group.name) {
            let key = (job.release.clone(), job.name.clone());
            let templates = match jobs.get(&key) {
                Some(t) => t.clone(),
                None => match job_templates(ctx, &job) {
                    Ok(t) => {
                        let t = Arc::new(t);
                        jobs.insert(key.clone(), t.clone());
                        t
                    }
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                },
            };
            let source = property_source(
                ctx.manifest.properties.as_ref(),
                group.properties.as_ref(),
                job.properties.as_ref(),
            );
            match PropertyBinder::new(&templates).and_then(|b| b.bind(&source)) {
                Ok(props) => {
                    bound.insert(
                        (group.name.clone(), job.release.clone(), job.name.clone()),
                        props,
                    );
                }
                Err(e) => errors.push(e.into()),
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let providers = match provider_contents(ctx, instances, &bound) {
        Ok(p) => p,
        Err(e) => return Err(vec![e]),
    };
    let mut out = Vec::new();
    for (position, inst) in instances.iter().enumerate() {
        for job in group_jobs(ctx.manifest, &inst.group) {
            let key = (job.release.clone(), job.name.clone());
            let (Some(templates), Some(properties)) = (
                jobs.get(&key),
                bound.get(&(inst.group.clone(), job.release.clone(), job.name.clone())),
            ) else {
                continue;
            };
            let links = match consumed_links(ctx, &inst.group, &job.name, &providers) {
                Ok(l) => l,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            out.push((
                position,
                RenderUnit {
                    job: templates.clone(),
                    spec: template_spec(
                        &deployment,
                        ctx,
                        inst,
                        properties.clone(),
                        links,
                        templates,
                    ),
                },
            ));
        }
    }
    if errors.is_empty() {
        Ok((out, providers))
    } else {
        Err(errors)
    }
}

fn job_templates(ctx: &TemplateContext<'_>, job: &JobRef) -> Result<JobTemplates, TemplateError> {
    let unknown = || TemplateError::UnknownJob {
        release: job.release.clone(),
        job: job.name.clone(),
    };
    let release = ctx.releases.get(&job.release).ok_or_else(unknown)?;
    let release_job = release.job(&job.name).ok_or_else(unknown)?;
    JobTemplates::from_release_job(
        release_job,
        ReleaseRef {
            name: release.name().to_string(),
            version: release.version().to_string(),
        },
    )
    .map_err(|e| TemplateError::NotText(e.to_string()))
}

fn template_spec(
    deployment: &str,
    ctx: &TemplateContext<'_>,
    inst: &InstanceView,
    properties: serde_json::Map<String, Value>,
    links: IndexMap<String, LinkSpec>,
    job: &JobTemplates,
) -> TemplateSpec {
    let networks: IndexMap<String, NetworkSpec> = inst
        .networks
        .iter()
        .map(|(name, settings)| {
            let mut spec: NetworkSpec =
                serde_json::from_value(settings.clone()).unwrap_or_default();
            if spec.ip.is_none() {
                // Dynamic networks: a placeholder until the agent reports the address.
                spec.ip = Some("127.0.0.1".into());
            }
            (name.clone(), spec)
        })
        .collect();
    let gateway_network = networks
        .values()
        .find(|n| n.default.iter().any(|d| d == "gateway"))
        .or_else(|| networks.values().next());
    let ip = gateway_network.and_then(|n| n.ip.clone());
    TemplateSpec {
        deployment: deployment.to_string(),
        job: InstanceGroupSpec {
            name: inst.group.clone(),
            extra: Default::default(),
        },
        index: inst.index,
        bootstrap: inst.bootstrap,
        name: inst.group.clone(),
        id: inst.uuid.clone(),
        az: inst.az.clone(),
        networks,
        properties_need_filtering: true,
        dns_domain_name: ctx.dns.root_domain.clone(),
        persistent_disk: inst.persistent_disk,
        address: ip.clone(),
        ip,
        properties,
        links,
        release: job.release.clone(),
    }
}

/// The content of every provider of this deployment, by `(group, job, link name)`.
fn provider_contents(
    ctx: &TemplateContext<'_>,
    instances: &[InstanceView],
    bound: &BTreeMap<(String, String, String), serde_json::Map<String, Value>>,
) -> Result<ProviderContents, TemplateError> {
    let features = ProviderFeatures::of(ctx.manifest);
    let mut out = BTreeMap::new();
    for provider in &ctx.links.providers {
        let link_instances: Vec<LinkInstance> = instances
            .iter()
            .filter(|i| i.group == provider.instance_group)
            .map(|i| LinkInstance {
                index: i.index,
                id: i.uuid.clone(),
                az: i.az.clone(),
                bootstrap: i.bootstrap,
                networks: i
                    .networks
                    .iter()
                    .map(|(name, s)| InstanceNetwork {
                        name: name.clone(),
                        ip: s.get("ip").and_then(Value::as_str).map(String::from),
                        dynamic: s.get("type").and_then(Value::as_str) == Some("dynamic"),
                    })
                    .collect(),
            })
            .collect();
        let release = ctx
            .manifest
            .instance_groups
            .iter()
            .find(|g| g.name == provider.instance_group)
            .map(|g| group_jobs(ctx.manifest, &g.name))
            .unwrap_or_default()
            .into_iter()
            .find(|j| j.name == provider.job)
            .map(|j| j.release)
            .unwrap_or_default();
        let properties = bound
            .get(&(
                provider.instance_group.clone(),
                release.clone(),
                provider.job.clone(),
            ))
            .cloned()
            .unwrap_or_default();
        let definitions = ctx
            .releases
            .get(&release)
            .and_then(|r| r.job(&provider.job))
            .map(|j| j.spec.properties.clone())
            .unwrap_or_default();
        let content = links::provider_content(
            provider,
            features,
            &link_instances,
            &Value::Object(properties),
            &definitions,
            ctx.dns,
        )
        .map_err(|e| TemplateError::Link(e.to_string()))?;
        out.insert(
            (
                provider.instance_group.clone(),
                provider.job.clone(),
                provider.name.clone(),
            ),
            content,
        );
    }
    Ok(out)
}

fn consumed_links(
    ctx: &TemplateContext<'_>,
    group: &str,
    job: &str,
    providers: &ProviderContents,
) -> Result<IndexMap<String, LinkSpec>, TemplateError> {
    let deployment = ctx.manifest.name.as_deref().unwrap_or_default();
    let mut out = IndexMap::new();
    for binding in ctx
        .links
        .bindings
        .iter()
        .filter(|b| b.consumer.instance_group == group && b.consumer.job == job)
    {
        let provider = match &binding.target {
            // Another deployment's, as it shared it.
            Target::Provider(p) if p.deployment != deployment => ctx.shared.content(p),
            Target::Provider(p) => {
                providers.get(&(p.instance_group.clone(), p.job.clone(), p.name.clone()))
            }
            _ => None,
        };
        let content =
            links::content(binding, provider).map_err(|e| TemplateError::Link(e.to_string()))?;
        if let Some(value) = content {
            let spec: LinkSpec =
                serde_json::from_value(value).map_err(|e| TemplateError::Link(e.to_string()))?;
            out.insert(binding.consumer.name.clone(), spec);
        }
    }
    Ok(out)
}

/// What the Director keeps of an instance's rendered jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedInstance {
    /// Jobs in job order.
    pub jobs: Vec<RenderedJob>,
    /// §4.11 configuration hash.
    pub configuration_hash: String,
    /// §4.11 template hashes by job.
    pub template_hashes: IndexMap<String, String>,
    /// The rendered templates archive in the blobstore: `(blob id, sha1)`, once uploaded.
    pub archive: Option<(String, String)>,
}

impl RenderedInstance {
    /// Hashes `jobs`.
    pub fn new(jobs: Vec<RenderedJob>) -> RenderedInstance {
        RenderedInstance {
            configuration_hash: render::configuration_hash(&jobs),
            template_hashes: render::template_hashes(&jobs),
            jobs,
            archive: None,
        }
    }
}
