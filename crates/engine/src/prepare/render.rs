//! Rendering while a deploy is planned (§4.1 "Rendering templates"): links resolved (those
//! consumed from other deployments against what they share in the
//! [`LinkRegistry`](crate::state::LinkRegistry)), every planned instance's jobs rendered in
//! one batch, each job's `.bosh/links.json` with its link groups' ids (new groups get the
//! next free id), and the deployment's own `shared` providers kept for publishing.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::instances::Planned;
use crate::templates::{InstanceView, RenderedInstance, TemplateContext};
use crate::{DeployRequest, Engine, EngineError, PlanError};
use kubosh_core::manifest::DeploymentManifest;
use kubosh_core::plan::desired::GroupSpec;
use kubosh_core::state::{LinkTable, SharedLink};

impl Engine {
    /// What the deployments `request` consumes links from share (nothing without a
    /// registry, or when it consumes from no other deployment).
    pub(crate) async fn consumed_links(
        &self,
        request: &DeployRequest,
    ) -> Result<LinkTable, EngineError> {
        let names = kubosh_core::links::consumed_deployments(request.manifest());
        match &self.config.link_registry {
            Some(registry) if !names.is_empty() => Ok(registry.shared(&names).await?),
            _ => Ok(LinkTable::default()),
        }
    }

    /// Renders every planned instance's templates (one batch), links consumed from other
    /// deployments taken from `shared`. Link groups without an id in `link_group_ids` get
    /// the next free one. Returns the deployment's consumable `shared` providers with their
    /// content.
    pub(crate) async fn render_all(
        &self,
        manifest: &DeploymentManifest,
        groups: &[GroupSpec],
        releases: &BTreeMap<String, Arc<kubosh_artifacts::release::Release>>,
        shared: &LinkTable,
        link_group_ids: &mut BTreeMap<String, u64>,
        planned: &mut [Planned],
    ) -> Result<Vec<SharedLink>, EngineError> {
        let specs = LinkSpecs(releases);
        let resolution = kubosh_core::links::resolve(manifest, &specs, &shared.others())
            .map_err(PlanError::Links)?
            .document;
        for provider in &resolution.providers {
            let next = link_group_ids.values().max().map_or(1, |max| max + 1);
            link_group_ids.entry(provider.group_name()).or_insert(next);
        }
        let dns = kubosh_core::links::DnsSettings {
            root_domain: self.config.dns_root_domain.clone(),
            ..kubosh_core::links::DnsSettings::default()
        };
        let ctx = TemplateContext {
            manifest,
            releases,
            links: &resolution,
            shared,
            dns: &dns,
        };
        let views: Vec<InstanceView> = planned
            .iter()
            .map(|p| InstanceView {
                group: p.record.group.clone(),
                uuid: p.placed.uuid.clone(),
                index: p.placed.index,
                az: p.placed.az.clone(),
                bootstrap: p.placed.bootstrap,
                networks: p.networks.clone(),
                persistent_disk: groups[p.group]
                    .disks
                    .iter()
                    .find(|d| d.name.is_empty())
                    .map_or(0, |d| d.size_mib),
            })
            .collect();
        let (units, contents) =
            crate::templates::units(&ctx, &views).map_err(PlanError::Templates)?;
        let (positions, units): (Vec<usize>, Vec<_>) = units.into_iter().unzip();
        let results = self.renderer.render(&units).await;
        let mut jobs: BTreeMap<usize, Vec<kubosh_artifacts::render::RenderedJob>> = BTreeMap::new();
        let mut errors = Vec::new();
        for (position, result) in positions.into_iter().zip(results) {
            match result {
                Ok(job) => jobs.entry(position).or_default().push(job),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(PlanError::Render(errors).into());
        }
        for (position, p) in planned.iter_mut().enumerate() {
            let mut rendered = jobs.remove(&position).unwrap_or_default();
            // Each job lists the links it provides (`.bosh/links.json`) with their groups'
            // ids.
            for job in rendered.iter_mut() {
                let entries: Vec<kubosh_artifacts::render::ProvidedLinkEntry> = resolution
                    .providers
                    .iter()
                    .filter(|pr| pr.instance_group == p.record.group && pr.job == job.name)
                    .map(|pr| kubosh_artifacts::render::ProvidedLinkEntry {
                        name: pr.name.clone(),
                        kind: pr.link_type.clone(),
                        group: link_group_ids
                            .get(&pr.group_name())
                            .copied()
                            .unwrap_or_default()
                            .to_string(),
                    })
                    .collect();
                kubosh_artifacts::render::add_links_json(job, &entries);
            }
            p.rendered = Some(RenderedInstance::new(rendered));
        }
        Ok(resolution
            .providers
            .iter()
            .filter(|p| p.shared && p.consumable)
            .filter_map(|p| {
                let key = (p.instance_group.clone(), p.job.clone(), p.name.clone());
                contents.get(&key).map(|content| SharedLink {
                    provider: p.clone(),
                    content: content.clone(),
                })
            })
            .collect())
    }
}

/// Job specs of the deploy's releases, for link resolution.
struct LinkSpecs<'a>(&'a BTreeMap<String, Arc<kubosh_artifacts::release::Release>>);

impl kubosh_core::links::JobSpecs for LinkSpecs<'_> {
    fn job_spec(
        &self,
        release: &str,
        job: &str,
    ) -> Option<&kubosh_artifacts::release::manifest::JobSpec> {
        self.0.get(release)?.job(job).map(|j| &j.spec)
    }
}
