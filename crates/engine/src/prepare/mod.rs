//! A deploy planned before anything changes (`bosh deploy` up to its first change): what
//! the agents say, where every instance goes, its addresses, templates and packages, and
//! what changes for it. Planning reads — the state, the agents (`get_state`), the other
//! deployments' reservations, the blobstore (archives a release references), the renderer,
//! the CPI's `calculate_vm_cloud_properties` — and writes nothing; [`Engine::execute`]
//! carries a [`DeployPlan`] out. `kubosh deploy --dry-run` prints a plan's
//! [`DeployPlan::report`].

mod compile;
mod instances;
mod network;
mod render;
mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;

pub(crate) use compile::{
    CompileInputs, PackageSource, Packages, PlannedCompilation, WorkerIdentity, worker_networks,
};
use instances::{Desire, desire};
pub(crate) use instances::{Planned, target, vm_request};
pub(crate) use network::{Addresses, reservations};
pub(crate) use report::instance_plan;
pub use report::{DeployReport, GroupPlan, InstancePlan, PlanSummary};

use crate::progress::{self, InstanceName, Lost, Milestone, StageRun};
use crate::resources::CalculatedProperties;
use crate::state::{DeploymentState, InstanceRecord, VmRecord};
use crate::{DeployRequest, Engine, EngineError, InstanceAction, PlanError, Unanswered, Unheard};
use kubosh_artifacts::release::Release;
use kubosh_core::manifest::{CloudConfig, DeploymentManifest, VmStrategy};
use kubosh_core::plan::changes::Observed;
use kubosh_core::plan::desired::{self, GroupSpec, StemcellInfo};
use kubosh_core::state::{LinkTable, SharedLink};

/// What a deploy found before planning: the deployment's state and what each agent said.
pub struct Observation {
    /// The state; instances whose VM vanished have lost their VM record (in memory only:
    /// [`Engine::execute`] writes them first).
    pub(crate) state: DeploymentState,
    /// What each instance's agent said, by uuid.
    pub(crate) observed: BTreeMap<String, Observed>,
    /// Instances whose VM the cloud says is gone (cck's `missing_vm`), sorted.
    pub(crate) vanished: Vec<String>,
    /// The "Preparing deployment" stage; rendering is its second task.
    preparing: Arc<StageRun>,
}

/// Whether a deploy of `request` recreates the VM of `record` when its agent is silent:
/// `--fix` (the resurrector's deploys), or a `recreate` of it (an action, or cck's
/// `recreate_vm`).
fn recreates_if_silent(request: &DeployRequest, record: &InstanceRecord) -> bool {
    request.requests.fix
        || request.recreate_instances.contains(&record.uuid)
        || matches!(&request.action, Some((InstanceAction::Recreate, scope))
                if scope.as_ref().is_none_or(|s| s.contains(record)))
}

impl Observation {
    /// Whether every instance meant to run answered `running`.
    pub(crate) fn all_running(&self) -> bool {
        self.state.instances.values().all(|i| {
            i.state != crate::state::InstanceState::Started
                || matches!(self.observed.get(&i.uuid), Some(Observed::Answered { job_state }) if job_state == "running")
        })
    }
}

/// The request's documents resolved: what every planning attempt starts from (a plan keeps
/// it, and hands it back for the next attempt when its addresses were claimed elsewhere).
pub struct Resolved<'r> {
    /// The manifest, as the request validated it.
    pub(crate) manifest: &'r DeploymentManifest,
    /// The cloud config, as the request validated it.
    pub(crate) cloud: &'r CloudConfig,
    /// Every instance group resolved against the cloud config and the stemcells.
    pub(crate) groups: Vec<GroupSpec>,
    /// `vm_resources` as the CPI's cloud properties (the compilation workers' included).
    pub(crate) calculated: CalculatedProperties,
    /// Releases by name.
    pub(crate) releases: BTreeMap<String, Arc<Release>>,
    /// What the deployments this one consumes links from share
    /// ([`Engine::consumed_links`]).
    pub(crate) links: LinkTable,
    /// The named CPIs, to tell whether a VM is in the cloud its AZ now names.
    pub(crate) named_clouds: crate::clouds::NamedClouds,
}

impl Resolved<'_> {
    /// What compilation reads, around `addresses`.
    pub(crate) fn compile_inputs<'a>(&'a self, addresses: &'a Addresses) -> CompileInputs<'a> {
        CompileInputs {
            manifest: self.manifest,
            cloud: self.cloud,
            groups: &self.groups,
            releases: &self.releases,
            held: &addresses.held,
            elsewhere: &addresses.elsewhere,
            calculated: &self.calculated,
        }
    }

    /// Sets each planned instance's desired spec and changes with `packages` ([`desire`]);
    /// with `groups`, only those of these groups (by index).
    pub(crate) fn desire(
        &self,
        planned: &mut [Planned],
        packages: &Packages,
        (request, config): (&DeployRequest, &crate::EngineConfig),
        groups: Option<&BTreeSet<usize>>,
    ) {
        let d = Desire {
            manifest: self.manifest,
            cloud: self.cloud,
            groups: &self.groups,
            packages,
            calculated: &self.calculated,
            config,
            requests: request.requests,
            action: request.action.as_ref(),
            recreate: &request.recreate_instances,
            named_clouds: &self.named_clouds,
        };
        desire(planned, &d, groups);
    }
}

/// What a deploy will do, decided before anything changes.
pub struct DeployPlan<'r> {
    /// What was asked.
    pub(crate) request: &'r DeployRequest,
    /// The documents it was planned from.
    pub(crate) resolved: Resolved<'r>,
    /// The digest recorded once the deploy succeeds.
    pub(crate) inputs: String,
    /// The deployment's state as planned from.
    pub(crate) state: DeploymentState,
    /// Instances whose VM vanished (their records lost the VM).
    pub(crate) vanished: Vec<String>,
    /// Every desired instance, with its desired spec and changes as far as planning knows
    /// them (the blobs of packages still to compile are known once compiled).
    pub(crate) instances: Vec<Planned>,
    /// Uuids of the instances to delete.
    pub(crate) obsolete: Vec<String>,
    /// The addresses planned (claimed by [`Engine::claim_addresses`]).
    pub(crate) addresses: Addresses,
    /// Link group ids, new groups included.
    pub(crate) link_group_ids: BTreeMap<String, u64>,
    /// What compilation will do.
    pub(crate) compilation: PlannedCompilation,
    /// The deployment's `shared` link providers, published once the deploy succeeds.
    pub(crate) shared_links: Vec<SharedLink>,
}

impl DeployPlan<'_> {
    /// What the deploy would do, and why (nothing is compiled yet: `compiled` is 0).
    pub fn report(&self) -> DeployReport {
        let mut report = DeployReport::of(
            &self.instances,
            &self.obsolete,
            &self.state,
            &self.compilation.packages,
        );
        report.noop = DeployReport::changes_nothing(
            &self.instances,
            &self.obsolete,
            !report.to_compile.is_empty(),
        );
        report
    }

    /// What the deploy will change, group by group.
    pub fn summary(&self) -> PlanSummary {
        PlanSummary::of(
            &self.instances,
            &self.obsolete,
            &self.state,
            self.compilation.packages.to_compile.len(),
        )
    }
}

impl Engine {
    /// What a deploy would do, without changing anything: validation, the agents' state,
    /// placement, addresses, rendering, compilation and change detection, as `bosh deploy
    /// --dry-run` (which stops after rendering) and a little more (what would be compiled,
    /// created, updated and deleted, and why).
    pub async fn prepare<'r>(
        &self,
        request: &'r DeployRequest,
    ) -> Result<DeployPlan<'r>, EngineError> {
        self.warn_of(request);
        let state = self.store.load().await?;
        let observation = self.observe_deployment(state, request).await?;
        let links = self.consumed_links(request).await?;
        let inputs = self.inputs_digest(request, &links);
        let resolved = self.resolve(request, links).await?;
        self.plan_deploy(request, resolved, &observation, inputs)
            .await
    }

    /// The warnings validation found in the request's documents, on the event log.
    pub(crate) fn warn_of(&self, request: &DeployRequest) {
        for w in request.documents.warnings.all() {
            progress::warn(self.events.as_ref(), w.to_string());
        }
    }

    /// Step 3: asks every VM for its state (the "Preparing deployment" task); instances whose
    /// VM vanished lose their VM record (in memory) and are dirty, so the deploy makes them a
    /// new VM and re-attaches their disks; silent agents fail the deploy unless `request`
    /// recreates them.
    pub(crate) async fn observe_deployment(
        &self,
        mut state: DeploymentState,
        request: &DeployRequest,
    ) -> Result<Observation, EngineError> {
        let preparing = StageRun::new(self.events.clone(), "Preparing deployment", vec![], 2);
        let (observed, vanished) = preparing
            .task("Preparing deployment", self.observe(&state, request))
            .await?;
        for uuid in &vanished {
            let Some(record) = state.instances.get_mut(uuid) else {
                continue;
            };
            let Some(vm) = record.vm.take() else {
                continue;
            };
            record.update_completed = false;
            self.events.milestone(Milestone::Resurrecting {
                instance: InstanceName::of(record),
                cid: vm.cid,
                lost: Lost::Vm,
            });
        }
        Ok(Observation {
            state,
            observed,
            vanished,
            preparing,
        })
    }

    /// The groups resolved and `vm_resources` turned into cloud properties, before anything
    /// is made or compared; `links` are what the deployments it consumes from share.
    pub(crate) async fn resolve<'r>(
        &self,
        request: &'r DeployRequest,
        links: LinkTable,
    ) -> Result<Resolved<'r>, EngineError> {
        let (manifest, cloud) = &request.documents.document;
        let infos: Vec<StemcellInfo> = request.stemcells.iter().map(|s| s.info.clone()).collect();
        let groups = desired::groups(manifest, cloud, &infos).map_err(PlanError::Desired)?;
        let calculated = self
            .calculate_vm_resources(vm_resources_wanted(cloud, &groups))
            .await?;
        Ok(Resolved {
            releases: chosen_releases(manifest, &request.releases)?,
            manifest,
            cloud,
            groups,
            calculated,
            links,
            named_clouds: self.named_clouds.clone(),
        })
    }

    /// One planning attempt: placement, addresses around what the other deployments hold
    /// now, templates, compilation (an unusable release fails here, before any address is
    /// claimed, any stemcell uploaded or any record written), and each instance's desired
    /// spec and changes. `inputs` is the request's digest ([`Engine::inputs_digest`]).
    pub(crate) async fn plan_deploy<'r>(
        &self,
        request: &'r DeployRequest,
        resolved: Resolved<'r>,
        observation: &Observation,
        inputs: String,
    ) -> Result<DeployPlan<'r>, EngineError> {
        let Resolved {
            manifest,
            cloud,
            groups,
            releases,
            links,
            ..
        } = &resolved;
        let state = observation.state.clone();
        let (mut planned, obsolete) = instances::place_all(
            cloud,
            groups,
            &state,
            &observation.observed,
            &request.errands,
        )?;
        instances::disks_stay_in_their_clouds(&planned, &self.named_clouds)?;
        // Whose VM is replaced create-swap-delete decides who gets new addresses: the
        // changes that decide it need neither addresses nor packages.
        if (groups.iter()).any(|g| g.update.vm_strategy == Some(VmStrategy::CreateSwapDelete)) {
            let asked = (request, &self.config);
            resolved.desire(&mut planned, &Packages::default(), asked, None);
            instances::mark_swaps(&mut planned, groups);
        }
        let addresses = self
            .plan_addresses(manifest, cloud, groups, &mut planned, &state)
            .await?;
        let mut link_group_ids = state.meta.link_group_ids.clone();
        let shared_links = observation
            .preparing
            .task(
                "Rendering templates",
                self.render_all(
                    manifest,
                    groups,
                    releases,
                    links,
                    &mut link_group_ids,
                    &mut planned,
                ),
            )
            .await?;
        let compilation = self.plan_compile(&resolved.compile_inputs(&addresses), &state)?;
        self.check_stored_archives(&compilation, releases).await?;
        let tentative = compilation.tentative_packages();
        resolved.desire(&mut planned, &tentative, (request, &self.config), None);
        Ok(DeployPlan {
            request,
            resolved,
            inputs,
            vanished: observation.vanished.clone(),
            state,
            instances: planned,
            obsolete,
            addresses,
            link_group_ids,
            compilation,
            shared_links,
        })
    }

    /// The digest of what a deploy reads, with what the director adds to every deployment
    /// (new trusted certificates must reach every VM) and what the deployments it consumes
    /// links from share (a provider that scaled out makes its consumers out of date).
    pub(crate) fn inputs_digest(&self, request: &DeployRequest, links: &LinkTable) -> String {
        let mut digest = request.inputs_digest();
        // A deploy that brings errand VMs up is never the deploy before it.
        if !request.errands.is_empty() {
            let errands: Vec<&str> = request.errands.iter().map(String::as_str).collect();
            digest = kubosh_base::digest::sha256_hex(
                format!("{digest}\nerrands {}", errands.join(",")).as_bytes(),
            );
        }
        if !links.deployments.is_empty() {
            digest = kubosh_base::digest::sha256_hex(
                format!("{digest}\nlinks {}", links.digest()).as_bytes(),
            );
        }
        match self.config.trusted_certs.as_str() {
            "" => digest,
            certs => kubosh_base::digest::sha256_hex(format!("{digest}\n{certs}").as_bytes()),
        }
    }

    /// `get_state` of every VM (bounded concurrency). An agent that does not answer fails
    /// the deploy with BOSH's timeout text, before anything changed, unless the cloud says
    /// its VM is gone (cck's `missing_vm`: such instances are listed second, to be given a
    /// new VM) or the request recreates silent agents' VMs ([`recreates_if_silent`]: the
    /// instance is `Unresponsive`, and heartbeats that prove it silent spare the question).
    async fn observe(
        &self,
        state: &DeploymentState,
        request: &DeployRequest,
    ) -> Result<(BTreeMap<String, Observed>, Vec<String>), EngineError> {
        let records: Vec<InstanceRecord> = state.instances.values().cloned().collect();
        let asks = records.into_iter().map(|i| async move {
            let observed = match &i.vm {
                None => Ok(Observed::NoVm),
                Some(vm) => {
                    self.observe_vm(&i, vm, recreates_if_silent(request, &i))
                        .await
                }
            };
            let vanished = i.vm.is_some() && matches!(observed, Ok(Observed::NoVm));
            (i, observed, vanished)
        });
        let answers: Vec<(InstanceRecord, Result<Observed, Unheard>, bool)> =
            futures::stream::iter(asks)
                .buffer_unordered(self.config.get_state_concurrency.max(1))
                .collect()
                .await;
        let mut out = BTreeMap::new();
        let mut vanished = Vec::new();
        let mut unanswered = Vec::new();
        let mut unreachable = None;
        for (record, answer, gone) in answers {
            match answer {
                Ok(o) => {
                    if gone {
                        vanished.push(record.uuid.clone());
                    }
                    out.insert(record.uuid, o);
                }
                // The bus is down: nothing is known of any agent; said once.
                Err(Unheard::Asked(e)) if e.is_unreachable() => unreachable = Some(e),
                Err(error) => {
                    let instance = InstanceName::of(&record);
                    self.events.milestone(Milestone::AgentUnresponsive {
                        instance: instance.clone(),
                        error: error.to_string(),
                    });
                    unanswered.push(Unanswered { instance, error });
                }
            }
        }
        if let Some(bus) = unreachable {
            Err(EngineError::Agent(bus))
        } else if unanswered.is_empty() {
            vanished.sort();
            Ok((out, vanished))
        } else {
            unanswered.sort_by_cached_key(|u| u.error.to_string());
            Err(EngineError::AgentsUnanswered(unanswered))
        }
    }

    /// `get_state` of `vm`'s agent (`None`: the cloud says the VM is gone), and whether
    /// the cloud was asked. When the agent has not answered within one message timeout, the
    /// cloud is asked whether the VM still exists (a VM deleted behind the director's back
    /// is not waited for through every retry), and if it does a milestone says so while the
    /// agent is asked again, unless `first_timeout_is_enough` (`--fix`: the instance is to
    /// be recreated if its agent does not answer, and one timeout shows it does not).
    async fn get_state_saying_when_slow(
        &self,
        record: &InstanceRecord,
        vm: &VmRecord,
        first_timeout_is_enough: bool,
    ) -> (
        Result<
            Option<kubosh_transport::agent::protocol::AgentState>,
            kubosh_transport::agent::AgentError,
        >,
        bool,
    ) {
        let options = &self.config.agent_options;
        let agent = self.agent(&vm.agent_id, &record.name());
        let ask = agent.get_state(false);
        tokio::pin!(ask);
        tokio::select! {
            answer = &mut ask => return (answer.map(Some), false),
            () = tokio::time::sleep(options.timeout) => {}
        }
        if self.vm_is_gone(&vm.cid, vm.cpi.as_deref()).await {
            return (Ok(None), true);
        }
        if first_timeout_is_enough {
            let timeout = kubosh_transport::agent::AgentError::Timeout {
                method: "get_state".into(),
                instance: record.name(),
                agent_id: vm.agent_id.clone(),
                after: options.timeout,
            };
            return (Err(timeout), true);
        }
        self.events.milestone(Milestone::AgentNotAnswering {
            instance: InstanceName::of(record),
            waited: options.timeout,
            at_most: options.timeout * (options.get_state_retries + 1),
        });
        (ask.await.map(Some), true)
    }

    /// What the agent of `record`'s VM `vm` says, or why it says nothing. An agent the
    /// heartbeats prove silent is not asked (3 x 45 s of timeouts would say the same).
    async fn observe_vm(
        &self,
        record: &InstanceRecord,
        vm: &VmRecord,
        recreate_if_silent: bool,
    ) -> Result<Observed, Unheard> {
        let (unheard, cloud_asked) = if self.proven_silent(&vm.agent_id) {
            let silent = Unheard::Silent {
                agent_id: vm.agent_id.clone(),
                for_at_least: self.config.health_window,
            };
            (silent, false)
        } else {
            match (self.get_state_saying_when_slow(record, vm, recreate_if_silent)).await {
                (Ok(Some(s)), _) => {
                    return Ok(Observed::Answered {
                        job_state: String::from(s.job_state),
                    });
                }
                (Ok(None), _) => return Ok(Observed::NoVm),
                (Err(e), asked) if e.is_timeout() => (Unheard::Asked(e), asked),
                (Err(e), _) => return Err(Unheard::Asked(e)),
            }
        };
        // Asked once: the cloud said the VM exists after the first timeout.
        if !cloud_asked && self.vm_is_gone(&vm.cid, vm.cpi.as_deref()).await {
            return Ok(Observed::NoVm);
        }
        if !recreate_if_silent {
            return Err(unheard);
        }
        self.events.milestone(Milestone::Resurrecting {
            instance: InstanceName::of(record),
            cid: vm.cid.clone(),
            lost: Lost::Agent,
        });
        Ok(Observed::Unresponsive)
    }
}

/// The release each of the manifest's `releases` entries deploys, by name: its version, or
/// the highest with `latest`, among those the request brings.
fn chosen_releases(
    manifest: &DeploymentManifest,
    releases: &[Arc<Release>],
) -> Result<BTreeMap<String, Arc<Release>>, PlanError> {
    let available: Vec<(&str, &str)> = (releases.iter()).map(|r| (r.name(), r.version())).collect();
    let chosen = kubosh_core::validate::require_releases(manifest, &available)
        .map_err(PlanError::Releases)?;
    Ok((chosen.into_iter())
        .map(|i| (releases[i].name().to_string(), releases[i].clone()))
        .collect())
}

/// Every `vm_resources` a deploy asks for, with each CPI whose VMs get it: a group's in each
/// of its AZs' CPIs, the compilation workers' in the compilation AZ's.
fn vm_resources_wanted(
    cloud: &CloudConfig,
    groups: &[GroupSpec],
) -> Vec<(kubosh_cloud::VmResources, Option<String>)> {
    let cpi = |az: Option<&str>| crate::clouds::cpi_of_az(cloud, az);
    let mut wanted = Vec::new();
    for group in groups {
        let Some(resources) = group.vm_resources else {
            continue;
        };
        if group.azs.is_empty() {
            wanted.push((resources, None));
        }
        for az in &group.azs {
            wanted.push((resources, cpi(Some(az))));
        }
    }
    if let Some(resources) = crate::resources::compilation_resources(cloud.compilation.as_ref()) {
        let az = cloud.compilation.as_ref().and_then(|c| c.az.as_deref());
        wanted.push((resources, cpi(az)));
    }
    wanted
}
