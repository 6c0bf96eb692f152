//! `bosh deploy`: the seed's steps in order (lock, validate, ask every VM, plan networks,
//! delete removed groups, compile, create missing VMs, update groups, publish DNS).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError};

use futures::StreamExt;
use indexmap::IndexMap;
use serde_json::Value;

use super::instance::InstanceTarget;
use super::progress::{self, InstanceName, Milestone, StageRun};
use super::templates::{InstanceView, RenderedInstance, TemplateContext};
use super::vm::VmRequest;
use super::{DeployRequest, Engine, EngineError, InstanceAction, releases_by_name};
use crate::state::{
    AppliedSpec, DeploymentMeta, DeploymentState, InstanceRecord, InstanceState, IntentKind,
    JobVersion, StemcellRecord, Write,
};
use kubosh_bosh::events::instance_task;
use kubosh_cloud::CreateStemcell;
use kubosh_core::manifest::{CloudConfig, DeploymentManifest};
use kubosh_core::plan::changes::{self, Changes, Observed};
use kubosh_core::plan::desired::{self, GroupSpec, StemcellInfo};
use kubosh_core::plan::dns::{self, DnsInstance};
use kubosh_core::plan::placement::{self, GroupDemand, Placed};
use kubosh_core::plan::rollout::{
    GroupInput, GroupRollout, InstanceInput, RolloutOptions, plan_rollout,
};
use kubosh_transport::agent::protocol::{
    ApplySpec, JobSpec, JobTemplateSpec, PackageSpec, RenderedTemplatesArchive,
};

/// What a deploy did (or, from [`Engine::plan`], would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeployReport {
    /// Nothing needed changing.
    pub noop: bool,
    /// Every desired instance: what it gets and why.
    pub plan: Vec<InstancePlan>,
    /// Instances to delete (`group/uuid (index)`).
    pub obsolete: Vec<String>,
    /// Packages to compile (`name/version` on `stemcell`).
    pub to_compile: Vec<String>,
    /// Instances updated (created, changed, recreated).
    pub updated: Vec<String>,
    /// Instances deleted.
    pub deleted: Vec<String>,
    /// Packages compiled.
    pub compiled: usize,
}

/// What the plan holds for one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstancePlan {
    /// `group/uuid (index)`.
    pub instance: String,
    /// `create`, `recreate`, `update`, `dns/tags only` or `none`.
    pub action: &'static str,
    /// The Director's change names.
    pub changes: Vec<&'static str>,
    /// Addresses by network.
    pub ips: BTreeMap<String, String>,
    /// AZ.
    pub az: Option<String>,
}

impl std::fmt::Display for DeployReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for name in &self.obsolete {
            writeln!(f, "{name}: delete (no longer in the manifest)")?;
        }
        for p in &self.to_compile {
            writeln!(f, "compile {p}")?;
        }
        for i in &self.plan {
            let ips: Vec<String> = i.ips.iter().map(|(n, ip)| format!("{n}={ip}")).collect();
            write!(f, "{}: {}", i.instance, i.action)?;
            if !i.changes.is_empty() {
                write!(f, " ({})", i.changes.join(", "))?;
            }
            if let Some(az) = &i.az {
                write!(f, " az={az}")?;
            }
            if !ips.is_empty() {
                write!(f, " {}", ips.join(" "))?;
            }
            writeln!(f)?;
        }
        if self.noop {
            writeln!(f, "no changes")?;
        }
        Ok(())
    }
}

/// What updating one group did: the records updated (by planned index) and the failure that
/// stopped it.
type GroupOutcome = (Vec<(usize, InstanceRecord)>, Option<EngineError>);

/// One desired instance while a deploy is planned.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Index of its group in the resolved groups.
    pub group: usize,
    /// Identity and placement.
    pub placed: Placed,
    /// Its record (new instances get a fresh one).
    pub record: InstanceRecord,
    /// What its agent said.
    pub observed: Observed,
    /// Network settings by network name, IPs included.
    pub networks: IndexMap<String, Value>,
    /// Rendered templates.
    pub rendered: Option<RenderedInstance>,
    /// The desired spec.
    pub desired: AppliedSpec,
    /// Why it is touched.
    pub changes: Changes,
}

/// How a deploy's updates run: whether it is the deployment's first, which updates it
/// announced, and (filled as they go) which it started.
struct Rollout<'a> {
    initial_deploy: bool,
    announced: &'a BTreeSet<String>,
    started: &'a std::sync::Mutex<BTreeSet<String>>,
}

impl Engine {
    /// Deploys: brings the cloud in line with the request. Every failure is also reported
    /// on the event log as BOSH's error line.
    pub async fn deploy(&self, request: &DeployRequest) -> Result<DeployReport, EngineError> {
        let result = self.deploy_locked(request).await;
        if let Err(e) = &result {
            progress::error(self.events.as_ref(), e.code(), e.to_string());
        }
        result
    }

    async fn deploy_locked(&self, request: &DeployRequest) -> Result<DeployReport, EngineError> {
        let name = request
            .manifest
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.under_deployment_lock(name, "create deployment", |engine| async move {
            let result = engine.deploy_validated(request, false).await;
            if result.is_err() {
                // Addresses claimed for instances this deploy did not get to record go back.
                match engine.store.load().await {
                    Ok(state) => {
                        let held: Vec<&InstanceRecord> = state.instances.values().collect();
                        if let Err(e) = engine.release_unused_ips(name, held).await {
                            tracing::warn!(deployment = %name, error = %e, "cannot release addresses");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(deployment = %name, error = %e, "cannot release addresses")
                    }
                }
            }
            result
        })
        .await
    }

    /// What a deploy would do, without changing anything: validation, the agents' state,
    /// placement, addresses, rendering and change detection, as `bosh deploy --dry-run`
    /// (which stops after rendering) and a little more (what would be compiled, created,
    /// updated and deleted, and why).
    pub async fn plan(&self, request: &DeployRequest) -> Result<DeployReport, EngineError> {
        self.deploy_validated(request, true).await
    }

    async fn deploy_validated(
        &self,
        req: &DeployRequest,
        dry_run: bool,
    ) -> Result<DeployReport, EngineError> {
        let validated = kubosh_core::validate::deployment(&req.manifest, &req.cloud_config)
            .map_err(EngineError::Invalid)?;
        for w in validated.warnings.all() {
            progress::warn(self.events.as_ref(), w.to_string());
        }
        let (manifest, cloud) = validated.document;
        let mut state = self.store.load().await?;
        if !dry_run {
            // Agents recorded before the bus was confined (or whose admission a killed run
            // lost) are let in again: one write, and nothing if they all are.
            let recorded: Vec<String> = (state.instances.values())
                .filter_map(|i| i.vm.as_ref().map(|vm| vm.agent_id.clone()))
                .collect();
            self.admit_agents(&recorded).await?;
            self.recover(&mut state, self.config.recovery_wait).await?;
        }

        // What the director adds to every deployment counts too: new trusted certificates
        // must reach every VM.
        let inputs = match self.config.trusted_certs.as_str() {
            "" => req.inputs_digest(),
            certs => kubosh_core::digest::sha256_hex(
                format!("{}\n{}", req.inputs_digest(), certs).as_bytes(),
            ),
        };
        let settled = state.meta.deployed_inputs.as_deref() == Some(inputs.as_str())
            && req.requests == changes::Requests::default()
            && req.action.is_none()
            && state.instances.values().all(|i| i.update_completed);

        // Nothing changed and every agent said `running` in a recent heartbeat: no call at all.
        if settled
            && !dry_run
            && let Some(health) = &self.config.health
            && state.intents.is_empty()
            && state.instances.values().all(|i| match (&i.vm, i.state) {
                (_, InstanceState::Detached) => i.vm.is_none(),
                (Some(vm), InstanceState::Started) => {
                    health.recent_job_state(&vm.agent_id, self.config.health_window)
                        == Some("running".into())
                }
                (Some(vm), InstanceState::Stopped) => health
                    .recent_job_state(&vm.agent_id, self.config.health_window)
                    .is_some(),
                (None, _) => false,
            })
        {
            return Ok(DeployReport {
                noop: true,
                ..DeployReport::default()
            });
        }
        let preparing = StageRun::new(self.events.clone(), "Preparing deployment", vec![], 2);
        let (observed, vanished) = preparing
            .task("Preparing deployment", self.observe(&state))
            .await?;
        self.forget_vanished_vms(&mut state, &vanished, dry_run)
            .await?;
        if settled
            && !dry_run
            && state.instances.values().all(|i| {
                i.state != InstanceState::Started
                    || matches!(observed.get(&i.uuid), Some(Observed::Answered { job_state }) if job_state == "running")
            })
        {
            return Ok(DeployReport {
                noop: true,
                ..DeployReport::default()
            });
        }

        let infos: Vec<StemcellInfo> = req.stemcells.iter().map(|s| s.info.clone()).collect();
        let groups = desired::groups(&manifest, &cloud, &infos)
            .map_err(|e| EngineError::Plan(e.iter().map(ToString::to_string).collect()))?;
        // vm_resources become cloud properties before anything is made or compared.
        let calculated = self
            .calculate_vm_resources(groups.iter().filter_map(|g| g.vm_resources).chain(
                super::resources::compilation_resources(cloud.compilation.as_ref()),
            ))
            .await?;
        let releases = releases_by_name(&req.releases);
        let deployment = manifest.name.clone().unwrap_or_default();
        // Everything is planned before anything changes: placement, addresses, templates,
        // compilation (an unusable release fails here, before any address is claimed, any
        // stemcell uploaded or any record written). Only then are the addresses claimed
        // among the director's deployments; one claimed elsewhere meanwhile means planning
        // again around it.
        let compile_inputs = super::compile::CompileInputs {
            manifest: &manifest,
            cloud: &cloud,
            groups: &groups,
            releases: &releases,
            held: &[],
            elsewhere: &[],
            calculated: &calculated,
            dry_run,
        };
        let mut attempt = 0;
        let (mut planned, obsolete, addresses, link_group_ids, compilation) = loop {
            attempt += 1;
            let (mut planned, obsolete) = place_all(&cloud, &groups, &state, &observed)?;
            let addresses = self
                .plan_addresses(&manifest, &cloud, &groups, &mut planned, &state)
                .await?;
            let mut link_group_ids = state.meta.link_group_ids.clone();
            preparing
                .task(
                    "Rendering templates",
                    self.render_all(
                        &manifest,
                        &groups,
                        &releases,
                        &mut link_group_ids,
                        &mut planned,
                    ),
                )
                .await?;
            let compile_inputs = super::compile::CompileInputs {
                held: &addresses.held,
                elsewhere: &addresses.elsewhere,
                ..compile_inputs
            };
            let compilation = self.plan_compile(&compile_inputs, &state)?;
            self.check_stored_archives(&compilation, &releases).await?;
            if dry_run {
                break (planned, obsolete, addresses, link_group_ids, compilation);
            }
            self.checkpoint()?;
            match self.claim_addresses(&deployment, &addresses).await? {
                None => break (planned, obsolete, addresses, link_group_ids, compilation),
                Some(e) if attempt >= super::network::CLAIM_ATTEMPTS => return Err(e),
                Some(_) => continue,
            }
        };
        // New link groups keep their ids from now on, whatever happens to this deploy.
        if !dry_run && link_group_ids != state.meta.link_group_ids {
            state.meta.link_group_ids = link_group_ids;
            self.write(Write::Meta(state.meta.clone())).await?;
        }

        let stemcells = if dry_run {
            state
                .stemcells
                .iter()
                .map(|(k, s)| (k.clone(), s.cid.clone()))
                .collect()
        } else {
            self.upload_stemcells(req, &groups, &planned, &mut state)
                .await?
        };
        let compile_inputs = super::compile::CompileInputs {
            held: &addresses.held,
            elsewhere: &addresses.elsewhere,
            ..compile_inputs
        };
        let packages = self
            .compile(compile_inputs, compilation, &stemcells, &mut state)
            .await?;

        for p in planned.iter_mut() {
            let group = &groups[p.group];
            let calculated = calculated.get(group.vm_resources.as_ref());
            p.desired = desired_spec(
                &manifest,
                &cloud,
                group,
                p,
                &packages,
                calculated,
                &self.config,
            );
            let mut requests = req.requests;
            let mut in_scope = true;
            if let Some((action, scope)) = &req.action {
                in_scope = scope.as_ref().is_none_or(|s| s.contains(&p.record));
                if in_scope {
                    match action {
                        InstanceAction::Start => p.record.state = InstanceState::Started,
                        InstanceAction::Stop => p.record.state = InstanceState::Stopped,
                        InstanceAction::StopHard => p.record.state = InstanceState::Detached,
                        InstanceAction::Restart => requests.restart = true,
                        InstanceAction::Recreate => requests.recreate = true,
                    }
                }
            }
            p.changes = match &p.record.applied {
                _ if !in_scope => Changes::default(),
                None => Changes(BTreeSet::from([changes::Change::Dirty])),
                Some(_) => {
                    changes::detect(&p.record, &p.desired, p.record.state, &p.observed, requests)
                }
            };
        }

        let mut report = DeployReport {
            compiled: packages.compiled,
            plan: planned.iter().map(instance_plan).collect(),
            obsolete: obsolete
                .iter()
                .filter_map(|u| state.instances.get(u))
                .map(InstanceRecord::display_name)
                .collect(),
            to_compile: packages.to_compile.clone(),
            ..DeployReport::default()
        };
        if dry_run {
            report.noop = report.obsolete.is_empty()
                && report.to_compile.is_empty()
                && planned.iter().all(|p| p.changes.is_empty());
            return Ok(report);
        }
        self.delete_obsolete(&state, &obsolete, &mut report).await?;
        self.create_missing_vms(&manifest, &groups, &mut planned, &stemcells)
            .await?;
        let initial_deploy = state.meta.deployed_inputs.is_none();
        let announced = self.announce_updates(&planned, &mut state).await?;
        let started = std::sync::Mutex::new(BTreeSet::new());
        let updated = self
            .update_groups(
                &manifest,
                &groups,
                &mut planned,
                &stemcells,
                Rollout {
                    initial_deploy,
                    announced: &announced,
                    started: &started,
                },
                &mut report,
            )
            .await;
        if let Err(e) = updated {
            let started = started.into_inner().unwrap_or_else(PoisonError::into_inner);
            self.withdraw_announcements(&started, &mut state).await;
            return Err(e);
        }
        self.publish_dns(&manifest, &planned, &mut state).await?;
        let held: Vec<&InstanceRecord> = planned.iter().map(|p| &p.record).collect();
        self.release_unused_ips(manifest.name.as_deref().unwrap_or_default(), held)
            .await?;
        if !report.updated.is_empty() || !report.deleted.is_empty() {
            self.run_post_deploy(&planned).await?;
        }
        let mut meta = DeploymentMeta {
            deployed_inputs: Some(inputs),
            ..state.meta.clone()
        };
        // Announcements end with the updates: only instances still dirty keep theirs.
        meta.updating.retain(|uuid, _| {
            planned
                .iter()
                .any(|p| &p.record.uuid == uuid && !p.record.update_completed)
        });
        self.write(Write::Meta(meta)).await?;
        Ok(report)
    }

    /// After a failed rollout: the announcements of instances whose update never started
    /// are withdrawn (their records are as before, so a rollback leaves them alone, as the
    /// Director's would). Not once cancelled: the lock may be another run's by now. Best
    /// effort: a failed write leaves them dirty, which is safe.
    async fn withdraw_announcements(
        &self,
        started: &BTreeSet<String>,
        state: &mut DeploymentState,
    ) {
        if self.cancel.is_cancelled() {
            return;
        }
        let mut updating = state.meta.updating.clone();
        updating.retain(|uuid, _| {
            let dirty_before = state
                .instances
                .get(uuid)
                .is_some_and(|r| !r.update_completed);
            // One that started and finished shows its new applied spec: clean all the same.
            dirty_before || started.contains(uuid)
        });
        if updating != state.meta.updating {
            state.meta.updating = updating;
            if let Err(e) = self.write(Write::Meta(state.meta.clone())).await {
                tracing::warn!(error = %e, "cannot withdraw the announcements of updates not started");
            }
        }
    }

    /// Announces the updates this deploy makes to instances already recorded, in one write
    /// ([`DeploymentMeta::updating`]); the uuids announced. Earlier announcements of
    /// instances still dirty stay (an instance out of an action's scope keeps its mark).
    async fn announce_updates(
        &self,
        planned: &[Planned],
        state: &mut DeploymentState,
    ) -> Result<BTreeSet<String>, EngineError> {
        let mut updating = state.meta.updating.clone();
        updating.retain(|uuid, _| {
            state
                .instances
                .get(uuid)
                .is_some_and(|r| !r.update_completed)
        });
        let mut announced = BTreeSet::new();
        for p in planned.iter().filter(|p| !p.changes.is_empty()) {
            let recorded = state.instances.contains_key(&p.record.uuid) || p.record.vm.is_some();
            if recorded {
                updating.insert(p.record.uuid.clone(), p.desired.digest());
                announced.insert(p.record.uuid.clone());
            }
        }
        if updating != state.meta.updating {
            state.meta.updating = updating;
            self.write(Write::Meta(state.meta.clone())).await?;
        }
        Ok(announced)
    }

    /// Step 3: `get_state` of every VM (bounded concurrency). An agent that does not answer
    /// fails the deploy with BOSH's timeout text, before anything changed, unless the cloud
    /// says its VM is gone (cck's `missing_vm`): such instances are listed second, to be
    /// given a new VM.
    async fn observe(
        &self,
        state: &DeploymentState,
    ) -> Result<(BTreeMap<String, Observed>, Vec<String>), EngineError> {
        let records: Vec<InstanceRecord> = state.instances.values().cloned().collect();
        let asks = records.into_iter().map(|i| async move {
            let observed = match &i.vm {
                None => Ok(Observed::NoVm),
                Some(vm) => match self.agent(&vm.agent_id, &i.name()).get_state(false).await {
                    Ok(s) => Ok(Observed::Answered {
                        job_state: String::from(s.job_state),
                    }),
                    Err(e) if e.is_timeout() && self.vm_is_gone(&vm.cid).await => {
                        Ok(Observed::NoVm)
                    }
                    Err(e) => {
                        self.events.milestone(Milestone::AgentUnresponsive {
                            instance: InstanceName::of(&i),
                            error: e.to_string(),
                        });
                        Err(e)
                    }
                },
            };
            let vanished = i.vm.is_some() && matches!(observed, Ok(Observed::NoVm));
            (i.uuid.clone(), observed, vanished)
        });
        let answers: Vec<(
            String,
            Result<Observed, kubosh_transport::agent::AgentError>,
            bool,
        )> = futures::stream::iter(asks)
            .buffer_unordered(self.config.get_state_concurrency.max(1))
            .collect()
            .await;
        let mut out = BTreeMap::new();
        let mut vanished = Vec::new();
        let mut errors = Vec::new();
        for (uuid, answer, gone) in answers {
            match answer {
                Ok(o) => {
                    if gone {
                        vanished.push(uuid.clone());
                    }
                    out.insert(uuid, o);
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            vanished.sort();
            Ok((out, vanished))
        } else {
            errors.sort_by_cached_key(ToString::to_string);
            Err(EngineError::AgentsUnanswered(errors))
        }
    }

    /// Whether the cloud says the VM no longer exists (`has_vm` false). A failing `has_vm`
    /// proves nothing: the VM counts as there.
    async fn vm_is_gone(&self, cid: &str) -> bool {
        matches!(
            self.cloud
                .has_vm(&kubosh_cloud::VmCid(cid.to_string()))
                .await,
            Ok(false)
        )
    }

    /// Instances whose VM vanished keep their disks and addresses but lose the VM record and
    /// are dirty, so this deploy makes them a new VM and re-attaches their disks.
    async fn forget_vanished_vms(
        &self,
        state: &mut DeploymentState,
        vanished: &[String],
        dry_run: bool,
    ) -> Result<(), EngineError> {
        for uuid in vanished {
            let Some(record) = state.instances.get_mut(uuid) else {
                continue;
            };
            let Some(vm) = record.vm.take() else {
                continue;
            };
            record.update_completed = false;
            progress::warn(
                self.events.as_ref(),
                format!(
                    "VM for '{}' with cloud ID '{}' missing.",
                    record.display_name(),
                    vm.cid
                ),
            );
            if !dry_run {
                let record = record.clone();
                self.persist(&record).await?;
            }
        }
        Ok(())
    }

    /// Renders every planned instance's templates (one batch). Link groups without an id
    /// in `link_group_ids` get the next free one.
    async fn render_all(
        &self,
        manifest: &DeploymentManifest,
        groups: &[GroupSpec],
        releases: &BTreeMap<String, Arc<kubosh_artifacts::release::Release>>,
        link_group_ids: &mut BTreeMap<String, u64>,
        planned: &mut [Planned],
    ) -> Result<(), EngineError> {
        let specs = LinkSpecs(releases);
        let resolution = kubosh_core::links::resolve(manifest, &specs, &[])
            .map_err(|p| EngineError::Plan(vec![p.to_string()]))?
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
        let units = super::templates::units(&ctx, &views).map_err(|errors| {
            EngineError::Plan(errors.iter().map(ToString::to_string).collect())
        })?;
        let (positions, units): (Vec<usize>, Vec<_>) = units.into_iter().unzip();
        let results = self.renderer.render(&units).await;
        let mut jobs: BTreeMap<usize, Vec<kubosh_artifacts::render::RenderedJob>> = BTreeMap::new();
        let mut errors = Vec::new();
        for (position, result) in positions.into_iter().zip(results) {
            match result {
                Ok(job) => jobs.entry(position).or_default().push(job),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if !errors.is_empty() {
            return Err(EngineError::Plan(errors));
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
        Ok(())
    }

    /// Step 5: deletes instances no longer wanted, disks orphaned.
    async fn delete_obsolete(
        &self,
        state: &DeploymentState,
        obsolete: &[String],
        report: &mut DeployReport,
    ) -> Result<(), EngineError> {
        if obsolete.is_empty() {
            return Ok(());
        }
        // Collected first: a lazy iterator with a borrowing closure would make the deploy
        // future not `Send` (rust-lang/rust#102211), and the controller spawns it.
        let records: Vec<InstanceRecord> = obsolete
            .iter()
            .filter_map(|uuid| state.instances.get(uuid).cloned())
            .collect();
        report.deleted = self
            .delete_instances("Deleting unneeded instances", records)
            .await?;
        Ok(())
    }

    /// Deletes `records` as the tasks of stage `stage`, `create_vm_concurrency` at a time,
    /// none started once the task is cancelled; their names, sorted.
    pub(crate) async fn delete_instances(
        &self,
        stage: &str,
        records: Vec<InstanceRecord>,
    ) -> Result<Vec<String>, EngineError> {
        let stage = StageRun::new(self.events.clone(), stage, vec![], records.len());
        let work = records.into_iter().map(|r| {
            let stage = stage.clone();
            async move {
                self.checkpoint()?;
                let name = r.display_name();
                stage
                    .task(name.clone(), self.delete_instance(r))
                    .await
                    .map(|()| name)
            }
        });
        let results: Vec<Result<String, EngineError>> = futures::stream::iter(work)
            .buffer_unordered(self.config.create_vm_concurrency.max(1))
            .collect()
            .await;
        let mut deleted = results.into_iter().collect::<Result<Vec<_>, _>>()?;
        deleted.sort();
        Ok(deleted)
    }

    /// Uploads the stemcells in use that the cloud does not have yet; their CIDs by
    /// `name/version`.
    async fn upload_stemcells(
        &self,
        req: &DeployRequest,
        groups: &[GroupSpec],
        planned: &[Planned],
        state: &mut DeploymentState,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        let used: BTreeSet<String> = planned
            .iter()
            .map(|p| groups[p.group].stemcell.key())
            .collect();
        let mut out = BTreeMap::new();
        for key in used {
            if let Some(s) = state.stemcells.get(&key) {
                out.insert(key, s.cid.clone());
                continue;
            }
            let Some(source) = req.stemcells.iter().find(|s| s.info.key() == key) else {
                return Err(EngineError::Plan(vec![format!(
                    "Stemcell '{key}' doesn't exist"
                )]));
            };
            let intent = crate::state::Intent {
                id: kubosh_core::ids::uuid_v4(),
                kind: IntentKind::CreateStemcell {
                    stemcell: key.clone(),
                },
                cid: None,
            };
            self.write(Write::Intent(intent.clone())).await?;
            let cid = self
                .cloud
                .create_stemcell(&CreateStemcell {
                    image_path: source.image_path.clone(),
                    cloud_properties: source.cloud_properties.clone(),
                })
                .await
                .map_err(EngineError::from)?;
            let record = StemcellRecord {
                name: source.info.name.clone(),
                version: source.info.version.clone(),
                os: source.info.os.clone(),
                cid: cid.0.clone(),
            };
            self.write(Write::Stemcell(record.clone())).await?;
            state.apply(&Write::Stemcell(record));
            self.settle(intent.id).await?;
            out.insert(key, cid.0);
        }
        Ok(out)
    }

    /// Steps 9–10: VMs for instances that have none ("Creating missing vms").
    async fn create_missing_vms(
        &self,
        manifest: &DeploymentManifest,
        groups: &[GroupSpec],
        planned: &mut [Planned],
        stemcells: &BTreeMap<String, String>,
    ) -> Result<(), EngineError> {
        let missing: Vec<usize> = planned
            .iter()
            .enumerate()
            .filter(|(_, p)| p.record.vm.is_none() && p.record.state != InstanceState::Detached)
            .map(|(i, _)| i)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let stage = StageRun::new(
            self.events.clone(),
            "Creating missing vms",
            vec![],
            missing.len(),
        );
        let deployment = manifest.name.clone().unwrap_or_default();
        let tags = manifest.tags.clone().unwrap_or_default();
        let tag_value = Value::Object(tags.clone());
        let labels = super::disks::DiskLabels {
            deployment: &deployment,
            tags: &tag_value,
        };
        let work = missing.clone().into_iter().map(|i| {
            let p = &planned[i];
            let request = vm_request(&deployment, &tags, &groups[p.group], p, stemcells);
            let mut record = p.record.clone();
            let stage = stage.clone();
            async move {
                let task = instance_task(&record.group, &record.uuid, record.index, false);
                let created = stage
                    .task(task, async {
                        self.checkpoint()?;
                        self.persist(&record).await?;
                        let vm = self.create_instance_vm(&mut record, &request, None).await?;
                        // A detached instance coming back keeps its disks.
                        self.attach_disks(&record, &vm, &labels).await?;
                        self.send_vm_settings(&vm.agent_id, &record.display_name(), &record.disks)
                            .await
                    })
                    .await;
                (i, created.map(|_| record))
            }
        });
        let results: Vec<(usize, Result<InstanceRecord, EngineError>)> =
            futures::stream::iter(work)
                .buffer_unordered(self.config.create_vm_concurrency.max(1))
                .collect()
                .await;
        let mut first_error = None;
        for (i, result) in results {
            match result {
                Ok(record) => planned[i].record = record,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Step 11: updates changed instances: runs of groups (serial or together), each group
    /// AZ by AZ (or all AZs at once), canaries first, then `max_in_flight` at a time on a
    /// work-conserving pool.
    async fn update_groups(
        &self,
        manifest: &DeploymentManifest,
        groups: &[GroupSpec],
        planned: &mut [Planned],
        stemcells: &BTreeMap<String, String>,
        Rollout {
            initial_deploy,
            announced,
            started,
        }: Rollout<'_>,
        report: &mut DeployReport,
    ) -> Result<(), EngineError> {
        let deployment = manifest.name.clone().unwrap_or_default();
        let changed: Vec<usize> = (0..planned.len())
            .filter(|&i| !planned[i].changes.is_empty())
            .collect();
        for &i in &changed {
            self.upload_archive(&mut planned[i]).await?;
        }
        let tags = manifest.tags.clone().unwrap_or_default();
        let mut targets: BTreeMap<usize, InstanceTarget> = BTreeMap::new();
        for &i in &changed {
            let p = &planned[i];
            let mut target = self.target(&deployment, &tags, &groups[p.group], p, stemcells)?;
            target.announced = announced.contains(&p.record.uuid);
            targets.insert(i, target);
        }
        let inputs: Vec<GroupInput<usize>> = groups
            .iter()
            .enumerate()
            .map(|(gi, g)| GroupInput {
                name: g.name.clone(),
                update: g.update.clone(),
                initial_deploy,
                instances: (0..planned.len())
                    .filter(|&i| planned[i].group == gi)
                    .map(|i| InstanceInput {
                        key: i,
                        az: planned[i].placed.az.clone(),
                        bootstrap: planned[i].placed.bootstrap,
                        sort_key: planned[i].record.name(),
                        changed: !planned[i].changes.is_empty(),
                    })
                    .collect(),
            })
            .collect();
        let rollout = plan_rollout(
            inputs,
            RolloutOptions {
                parallel_azs: self.config.parallel_azs,
            },
        );
        let mut error = None;
        for run in &rollout.runs {
            let groups: Vec<&GroupRollout<usize>> =
                run.groups.iter().filter(|g| !g.phases.is_empty()).collect();
            let outcomes: Vec<GroupOutcome> = if run.serial {
                let mut out = Vec::new();
                for g in groups {
                    let o = self.update_group(g, &targets, started).await;
                    let failed = o.1.is_some();
                    out.push(o);
                    if failed {
                        break;
                    }
                }
                out
            } else {
                futures::future::join_all(
                    groups
                        .into_iter()
                        .map(|g| self.update_group(g, &targets, started)),
                )
                .await
            };
            for (records, failure) in outcomes {
                for (i, record) in records {
                    report.updated.push(record.display_name());
                    planned[i].record = record;
                }
                if error.is_none() {
                    error = failure;
                }
            }
            if error.is_some() {
                break;
            }
        }
        error.map_or(Ok(()), Err)
    }

    /// One group's phases; the updated records and the failure that stopped it.
    async fn update_group(
        &self,
        group: &GroupRollout<usize>,
        targets: &BTreeMap<usize, InstanceTarget>,
        started: &std::sync::Mutex<BTreeSet<String>>,
    ) -> GroupOutcome {
        let total = group.phases.iter().map(|p| p.len()).sum();
        let stage = StageRun::new(
            self.events.clone(),
            "Updating instance",
            vec![group.name.clone()],
            total,
        );
        let mut done = Vec::new();
        for phase in &group.phases {
            let steps: Vec<_> = phase.steps().collect();
            let phases = [super::pool::Phase {
                len: steps.len(),
                canaries: phase.canaries.len(),
                max_in_flight: phase.max_in_flight,
            }];
            let outcome = super::pool::run_phases(&phases, |n: usize, _slot: usize| {
                let step = steps[n];
                let target = targets.get(&step.key).cloned();
                let stage = stage.clone();
                async move {
                    let Some(mut target) = target else {
                        return Err(EngineError::Plan(vec![format!(
                            "no update planned for instance #{}",
                            step.key
                        )]));
                    };
                    self.checkpoint()?;
                    started
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(target.record.uuid.clone());
                    target.canary = step.canary;
                    if let Some(watch) = step.watch_time {
                        target.watch = watch;
                    }
                    let task = stage.start(instance_task(
                        &target.record.group,
                        &target.record.uuid,
                        target.record.index,
                        step.canary,
                    ));
                    // Its log lines carry the instance (`--log-format json` shows the span).
                    let span = tracing::info_span!("instance", instance = %task.name);
                    let result = tracing::Instrument::instrument(
                        self.update_instance(&stage, &task, target),
                        span,
                    )
                    .await;
                    stage.end(&task, &result);
                    result.map(|r| (step.key, r))
                }
            })
            .await;
            let first_failure = outcome.first_failure;
            let mut error = None;
            for (n, task) in outcome.tasks.into_iter().enumerate() {
                match task {
                    super::pool::TaskOutcome::Succeeded(r) => done.push(r),
                    super::pool::TaskOutcome::Failed(e)
                        if first_failure == Some(n) || error.is_none() =>
                    {
                        error = Some(e);
                    }
                    _ => {}
                }
            }
            if error.is_some() {
                return (done, error);
            }
        }
        (done, None)
    }

    /// Stores an instance's rendered templates archive in the blobstore (once).
    async fn upload_archive(&self, p: &mut Planned) -> Result<(), EngineError> {
        let Some(rendered) = p.rendered.as_mut() else {
            return Ok(());
        };
        if rendered.archive.is_some() {
            return Ok(());
        }
        let bytes = kubosh_artifacts::render::rendered_templates_archive(&rendered.jobs)
            .map_err(|e| EngineError::Plan(vec![e.to_string()]))?;
        let stored = self
            .blobstore
            .put_bytes(bytes::Bytes::from(bytes))
            .await
            .map_err(EngineError::Blobstore)?;
        rendered.archive = Some((stored.id, stored.sha1));
        Ok(())
    }

    /// What one changed instance gets (canary and watch time are the rollout's to set).
    fn target(
        &self,
        deployment: &str,
        tags: &serde_json::Map<String, Value>,
        group: &GroupSpec,
        p: &Planned,
        stemcells: &BTreeMap<String, String>,
    ) -> Result<InstanceTarget, EngineError> {
        let canary = false;
        let watch = group
            .update
            .update_watch_time
            .unwrap_or(kubosh_core::manifest::WatchTime {
                min_ms: 30_000,
                max_ms: 30_000,
            });
        Ok(InstanceTarget {
            record: p.record.clone(),
            desired: p.desired.clone(),
            desired_state: p.record.state,
            changes: p.changes.clone(),
            apply: apply_spec(deployment, group, p, &self.config.dns_root_domain),
            vm: vm_request(deployment, tags, group, p, stemcells),
            watch,
            canary,
            // A VM made by this deploy (the instance had none when asked) runs nothing to
            // stop, as the Director's stopper skips new instances.
            responsive: matches!(p.observed, Observed::Answered { .. }),
            was_running: matches!(&p.observed, Observed::Answered { job_state } if job_state != "stopped"),
            announced: false,
        })
    }

    /// §4.1 step 6: `post-deploy` on every running instance, once anything changed.
    async fn run_post_deploy(&self, planned: &[Planned]) -> Result<(), EngineError> {
        let vms: Vec<_> = planned
            .iter()
            .filter(|p| p.record.state == InstanceState::Started)
            .filter_map(|p| Some((p.record.vm.clone()?, p.record.display_name())))
            .collect();
        let runs = vms.into_iter().map(|(vm, name)| async move {
            super::instance::run_script(&self.agent(&vm.agent_id, &name), "post-deploy", None).await
        });
        let results: Vec<Result<(), EngineError>> = futures::stream::iter(runs)
            .buffer_unordered(self.config.get_state_concurrency.max(1))
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Step 12: when the deployment's records changed, publishes the records dataset of all
    /// deployments and sends `sync_dns` to every VM of every deployment, each agent given at
    /// most [`DNS_SYNC_WAIT`] (the Director's broadcast wait).
    async fn publish_dns(
        &self,
        manifest: &DeploymentManifest,
        planned: &[Planned],
        state: &mut DeploymentState,
    ) -> Result<(), EngineError> {
        let deployment = manifest.name.clone().unwrap_or_default();
        let instances: Vec<DnsInstance> = planned.iter().map(|p| dns_instance(p, true)).collect();
        let records = dns::records(&deployment, &self.config.dns_root_domain, false, &instances);
        let digest = records.digest();
        if state.meta.dns_records.as_deref() == Some(digest.as_str()) {
            return Ok(());
        }
        let (version, blob) = self
            .publish_dns_entries(&deployment, Some(instances), state.meta.dns_version)
            .await?;
        state.meta.dns_version = version;
        state.meta.dns_blob = Some(blob);
        state.meta.dns_records = Some(digest);
        self.write(Write::Meta(state.meta.clone())).await
    }

    /// Replaces `deployment`'s DNS entries in the dataset of all deployments (`None`: it is
    /// gone), stores the records blob of the new version and sends it to every agent of
    /// every deployment (§4.10); agents that do not acknowledge are a warning. The version
    /// and the blob id.
    pub(crate) async fn publish_dns_entries(
        &self,
        deployment: &str,
        instances: Option<Vec<DnsInstance>>,
        at_least: u64,
    ) -> Result<(u64, String), EngineError> {
        let dataset = match &self.config.dns_registry {
            Some(registry) => registry.publish(deployment, instances, at_least).await?,
            None => {
                let mut alone = crate::state::DnsDataset::default();
                alone.publish(deployment, instances, at_least);
                alone
            }
        };
        let version = dataset.version;
        let blob = dns::records_of_all(&self.config.dns_root_domain, false, &dataset.deployments)
            .blob(version);
        let stored = self
            .blobstore
            .put_bytes(bytes::Bytes::from(blob))
            .await
            .map_err(EngineError::Blobstore)?;
        let sha = format!("sha256:{}", stored.sha256);
        let syncs = dataset.agent_ids().into_iter().map(|agent_id| {
            let agent = self.agent(&agent_id, "dns");
            let (id, sha) = (stored.id.clone(), sha.clone());
            async move {
                tokio::time::timeout(DNS_SYNC_WAIT, agent.sync_dns(&id, &sha, version))
                    .await
                    .is_ok_and(|r| r.is_ok())
            }
        });
        let synced: Vec<bool> = futures::stream::iter(syncs)
            .buffer_unordered(self.config.get_state_concurrency.max(1))
            .collect()
            .await;
        let failed = synced.iter().filter(|ok| !**ok).count();
        self.events.milestone(Milestone::DnsSynced {
            version,
            agents: synced.len(),
            failed,
        });
        if failed > 0 {
            progress::warn(
                self.events.as_ref(),
                format!(
                    "{failed} of {} agents did not acknowledge DNS records version {version}",
                    synced.len()
                ),
            );
        }
        Ok((version, stored.id))
    }
}

/// How long `sync_dns` waits for an agent (the Director's broadcast waits 10 s in all).
pub const DNS_SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The plan of one instance, for reports.
fn instance_plan(p: &Planned) -> InstancePlan {
    let action = if p.changes.is_empty() {
        "none"
    } else if p.record.vm.is_none() && p.record.applied.is_none() {
        "create"
    } else if p.changes.recreates_vm() || p.record.vm.is_none() {
        "recreate"
    } else if p.changes.is_minimal() {
        "dns/tags only"
    } else {
        "update"
    };
    InstancePlan {
        instance: p.record.display_name(),
        action,
        changes: p.changes.names(),
        ips: p
            .record
            .ips
            .iter()
            .map(|(n, r)| (n.clone(), r.ip.clone()))
            .collect(),
        az: p.placed.az.clone(),
    }
}

/// Places every group; the planned instances and the uuids of obsolete instances (those
/// of groups no longer in the manifest included).
fn place_all(
    cloud: &CloudConfig,
    groups: &[GroupSpec],
    state: &DeploymentState,
    observed: &BTreeMap<String, Observed>,
) -> Result<(Vec<Planned>, Vec<String>), EngineError> {
    let existing: Vec<&InstanceRecord> = state.instances.values().collect();
    let mut planned = Vec::new();
    let mut obsolete = Vec::new();
    let mut claimed: BTreeSet<String> = BTreeSet::new();
    for (gi, group) in groups.iter().enumerate() {
        let demand = GroupDemand {
            name: group.name.clone(),
            instances: if group.errand { 0 } else { group.instances },
            azs: group.azs.clone(),
            static_ip_azs: super::network::static_ip_azs(cloud, group)?,
            migrated_from: group.migrated_from.clone(),
        };
        let placement = placement::place(&demand, &existing, &mut kubosh_core::ids::uuid_v4);
        obsolete.extend(placement.obsolete);
        for placed in placement.instances {
            claimed.insert(placed.uuid.clone());
            let record = match state.instances.get(&placed.uuid) {
                Some(r) => InstanceRecord {
                    group: group.name.clone(),
                    index: placed.index,
                    az: placed.az.clone(),
                    bootstrap: placed.bootstrap,
                    ..r.clone()
                },
                None => InstanceRecord {
                    group: group.name.clone(),
                    index: placed.index,
                    uuid: placed.uuid.clone(),
                    az: placed.az.clone(),
                    bootstrap: placed.bootstrap,
                    state: InstanceState::Started,
                    update_completed: false,
                    vm: None,
                    disks: vec![],
                    ips: BTreeMap::new(),
                    applied: None,
                },
            };
            planned.push(Planned {
                group: gi,
                observed: observed
                    .get(&placed.uuid)
                    .cloned()
                    .unwrap_or(Observed::NoVm),
                placed,
                record,
                networks: IndexMap::new(),
                rendered: None,
                desired: AppliedSpec::default(),
                changes: Changes::default(),
            });
        }
    }
    // Instances of groups that left the manifest.
    for r in state.instances.values() {
        if !claimed.contains(&r.uuid) && !obsolete.contains(&r.uuid) {
            obsolete.push(r.uuid.clone());
        }
    }
    Ok((planned, obsolete))
}

/// The desired spec of a planned instance.
fn desired_spec(
    manifest: &DeploymentManifest,
    cloud: &CloudConfig,
    group: &GroupSpec,
    p: &Planned,
    packages: &super::compile::Packages,
    calculated: Option<&serde_json::Map<String, Value>>,
    config: &super::EngineConfig,
) -> AppliedSpec {
    let deployment = manifest.name.clone().unwrap_or_default();
    let jobs = super::templates::group_jobs(manifest, &group.name);
    let mut job_versions: Vec<JobVersion> = jobs
        .iter()
        .map(|j| JobVersion {
            name: j.name.clone(),
            release: j.release.clone(),
            version: packages.job_version(&j.release, &j.name),
        })
        .collect();
    job_versions.sort();
    AppliedSpec {
        stemcell: group.stemcell.key(),
        cloud_properties: group.cloud_properties(cloud, p.placed.az.as_deref(), calculated),
        env: group.env.clone(),
        networks: Value::Object(p.networks.clone().into_iter().collect()),
        disks: group.disks.clone(),
        jobs: job_versions,
        packages: packages.for_jobs(&group.stemcell, &jobs),
        configuration_hash: p.rendered.as_ref().map(|r| r.configuration_hash.clone()),
        dns: Some(dns::instance_digest(
            &deployment,
            &config.dns_root_domain,
            &dns_instance(p, false),
        )),
        tags: manifest
            .tags
            .clone()
            .map(Value::Object)
            .unwrap_or(Value::Null),
        trusted_certs: (!config.trusted_certs.is_empty())
            .then(|| kubosh_core::digest::sha1_hex(config.trusted_certs.as_bytes())),
    }
}

/// The instance as DNS sees it; with `reported`, a dynamic network's address is the one the
/// agent reported for the VM (for the records), without, only planned addresses count (for
/// change detection, which must not see a dynamic address appear once the VM exists).
fn dns_instance(p: &Planned, reported: bool) -> DnsInstance {
    DnsInstance {
        uuid: p.placed.uuid.clone(),
        index: p.placed.index,
        group: p.record.group.clone(),
        az: p.placed.az.clone(),
        addresses: p
            .networks
            .iter()
            .filter_map(|(net, s)| {
                let from_agent = || {
                    let vm = p.record.vm.as_ref().filter(|_| reported)?;
                    vm.networks.get(net)?.get("ip")
                };
                let ip = s.get("ip").or_else(from_agent)?.as_str()?;
                Some((net.clone(), ip.to_string()))
            })
            .collect(),
        agent_id: p.record.vm.as_ref().map(|vm| vm.agent_id.clone()),
    }
}

/// How a planned instance's VM is made.
fn vm_request(
    deployment: &str,
    tags: &serde_json::Map<String, Value>,
    group: &GroupSpec,
    p: &Planned,
    stemcells: &BTreeMap<String, String>,
) -> VmRequest {
    // The manifest's tags, then the director's own keys over them (`metadata_updater.rb`);
    // `created_at` is added when the VM exists.
    let mut metadata = tags.clone();
    for (k, v) in [
        ("director", "kubosh".to_string()),
        ("deployment", deployment.to_string()),
        ("instance_group", group.name.clone()),
        ("job", group.name.clone()),
        ("id", p.placed.uuid.clone()),
        ("index", p.placed.index.to_string()),
        ("name", format!("{}/{}", group.name, p.placed.uuid)),
    ] {
        metadata.insert(k.into(), Value::String(v));
    }
    VmRequest {
        instance: Some(p.placed.uuid.clone()),
        display_name: p.record.display_name(),
        stemcell_cid: stemcells
            .get(&group.stemcell.key())
            .cloned()
            .unwrap_or_default(),
        stemcell: group.stemcell.key(),
        cloud_properties: p.desired.cloud_properties.clone(),
        networks: Value::Object(p.networks.clone().into_iter().collect()),
        env: group.env.clone(),
        disk_cids: p.record.disks.iter().map(|d| d.cid.clone()).collect(),
        metadata,
    }
}

/// The full apply spec (§2.5) of a planned instance.
fn apply_spec(deployment: &str, group: &GroupSpec, p: &Planned, root: &str) -> ApplySpec {
    let templates: Vec<JobTemplateSpec> = p
        .desired
        .jobs
        .iter()
        .map(|j| JobTemplateSpec {
            name: j.name.clone(),
            version: j.version.clone(),
            ..JobTemplateSpec::default()
        })
        .collect();
    let packages: IndexMap<String, PackageSpec> = p
        .desired
        .packages
        .iter()
        .map(|(name, v)| {
            (
                name.clone(),
                PackageSpec {
                    name: name.clone(),
                    version: v.version.clone(),
                    sha1: v.sha1.clone(),
                    blobstore_id: v.blobstore_id.clone(),
                    ..PackageSpec::default()
                },
            )
        })
        .collect();
    let rendered = p.rendered.as_ref();
    ApplySpec {
        deployment: Some(deployment.to_string()),
        job: Some(Some(JobSpec {
            name: Some(Some(group.name.clone())),
            template: templates.first().map(|t| t.name.clone()),
            version: templates.first().map(|t| t.version.clone()),
            templates: Some(Some(templates)),
            ..JobSpec::default()
        })),
        index: Some(Some(p.placed.index)),
        name: Some(group.name.clone()),
        id: Some(p.placed.uuid.clone()),
        az: Some(p.placed.az.clone()),
        networks: Some(p.networks.clone().into_iter().collect()),
        packages: Some(packages),
        dns_domain_name: Some(root.to_string()),
        persistent_disk: Some(
            group
                .disks
                .iter()
                .find(|d| d.name.is_empty())
                .map_or(0, |d| d.size_mib),
        ),
        template_hashes: rendered.map(|r| r.template_hashes.clone()),
        rendered_templates_archive: rendered
            .and_then(|r| r.archive.clone())
            .map(|(blobstore_id, sha1)| Some(RenderedTemplatesArchive { blobstore_id, sha1 })),
        configuration_hash: rendered.map(|r| r.configuration_hash.clone()),
        extra: serde_json::Map::new(),
    }
}

/// A digest of everything a deploy reads: equal digests, healthy agents and no pending work
/// make a deploy a no-op.
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
