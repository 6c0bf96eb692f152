//! One planned instance from placement to the specs it gets: identity and placement of every
//! group (`place_all`), the desired spec and its changes (`desire`), and what the executor
//! sends for it (the VM request, the apply spec, the update target). Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use indexmap::IndexMap;
use serde_json::Value;

use super::compile::Packages;
use super::network::static_ip_azs;
use crate::instance::InstanceTarget;
use crate::state::{AppliedSpec, DeploymentState, InstanceRecord, InstanceState, JobVersion};
use crate::vm::VmRequest;
use crate::{EngineConfig, EngineError, InstanceAction, Scope};
use kubosh_core::manifest::{CloudConfig, DeploymentManifest, VmStrategy};
use kubosh_core::plan::changes::{self, Changes, Observed, Requests};
use kubosh_core::plan::desired::GroupSpec;
use kubosh_core::plan::dns::{self, DnsInstance};
use kubosh_core::plan::placement::{self, GroupDemand, Placed};
use kubosh_transport::agent::protocol::{
    ApplySpec, JobSpec, JobTemplateSpec, PackageSpec, RenderedTemplatesArchive,
};

/// One desired instance while a deploy is planned and carried out.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Index of its group in the resolved groups.
    pub group: usize,
    /// Identity and placement.
    pub placed: Placed,
    /// The CPI of its AZ (`None`: the director's own): where its VM and disks are made.
    pub cpi: Option<String>,
    /// Its record (new instances get a fresh one).
    pub record: InstanceRecord,
    /// What its agent said.
    pub observed: Observed,
    /// Network settings by network name, IPs included.
    pub networks: IndexMap<String, Value>,
    /// Rendered templates.
    pub rendered: Option<crate::templates::RenderedInstance>,
    /// The desired spec.
    pub desired: AppliedSpec,
    /// Why it is touched.
    pub changes: Changes,
    /// Its VM is replaced create-swap-delete ([`mark_swaps`]): a new VM with new addresses
    /// is made ahead, and the old one deleted after the swap.
    pub swap: bool,
}

/// Places every group (an errand group's instances only when `errands` names it); the
/// planned instances and the uuids of obsolete instances (those of groups no longer in the
/// manifest included).
pub(crate) fn place_all(
    cloud: &CloudConfig,
    groups: &[GroupSpec],
    state: &DeploymentState,
    observed: &BTreeMap<String, Observed>,
    errands: &BTreeSet<String>,
) -> Result<(Vec<Planned>, Vec<String>), EngineError> {
    let existing: Vec<&InstanceRecord> = state.instances.values().collect();
    let mut planned = Vec::new();
    let mut obsolete = Vec::new();
    let mut claimed: BTreeSet<String> = BTreeSet::new();
    for (gi, group) in groups.iter().enumerate() {
        let demand = GroupDemand {
            name: group.name.clone(),
            instances: if group.errand && !errands.contains(&group.name) {
                0
            } else {
                group.instances
            },
            azs: group.azs.clone(),
            static_ip_azs: static_ip_azs(cloud, group)?,
            migrated_from: group.migrated_from.clone(),
        };
        let placement = placement::place(&demand, &existing, &mut kubosh_base::ids::uuid_v4);
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
                    inactive_vm: None,
                },
            };
            planned.push(Planned {
                group: gi,
                cpi: crate::clouds::cpi_of_az(cloud, placed.az.as_deref()),
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
                swap: false,
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

/// What decides each instance's desired spec and changes besides the instance itself.
pub(crate) struct Desire<'a> {
    pub manifest: &'a DeploymentManifest,
    pub cloud: &'a CloudConfig,
    pub groups: &'a [GroupSpec],
    pub packages: &'a Packages,
    pub calculated: &'a crate::resources::CalculatedProperties,
    pub config: &'a EngineConfig,
    /// `--recreate`, `restart`, ...
    pub requests: Requests,
    /// An instance command and the instances it is for.
    pub action: Option<&'a (InstanceAction, Option<Scope>)>,
    /// Instances (by uuid) to recreate (cck's `recreate_vm`).
    pub recreate: &'a std::collections::BTreeSet<String>,
    /// The named CPIs: a VM in another cloud than its AZ's CPI is made again there.
    pub named_clouds: &'a crate::clouds::NamedClouds,
}

/// Sets each planned instance's desired spec and its changes: the instance command applied
/// to the instances in its scope, then change detection (§4.3) for all, so an action never
/// leaves a pending change of the manifest half deployed (an instance outside its scope is
/// updated only when it differs from the manifest). Running it again with the same packages
/// gives the same result.
pub(crate) fn desire(planned: &mut [Planned], d: &Desire<'_>, groups: Option<&BTreeSet<usize>>) {
    let wanted = |p: &Planned| groups.is_none_or(|g| g.contains(&p.group));
    for p in planned.iter_mut().filter(|p| wanted(p)) {
        let group = &d.groups[p.group];
        let calculated = (d.calculated).get(group.vm_resources.as_ref(), p.cpi.as_deref());
        p.desired = desired_spec(
            d.manifest, d.cloud, group, p, d.packages, calculated, d.config,
        );
        let mut requests = d.requests;
        requests.recreate |= d.recreate.contains(&p.record.uuid);
        if let Some((action, scope)) = d.action
            && scope.as_ref().is_none_or(|s| s.contains(&p.record))
        {
            match action {
                InstanceAction::Start => p.record.state = InstanceState::Started,
                InstanceAction::Stop => p.record.state = InstanceState::Stopped,
                InstanceAction::StopHard => p.record.state = InstanceState::Detached,
                InstanceAction::Restart => requests.restart = true,
                InstanceAction::Recreate => requests.recreate = true,
            }
        }
        // Also for an instance whose first update never completed (`Dirty` then): a
        // `--recreate`, `--fix` or `recreate_vm` must still replace its VM.
        p.changes = changes::detect(&p.record, &p.desired, p.record.state, &p.observed, requests);
        if let Some(vm) = &p.record.vm
            && !d.named_clouds.same(vm.cpi.as_deref(), p.cpi.as_deref())
        {
            p.changes.0.insert(changes::Change::Cpi);
        }
    }
}

/// Marks the instances whose VM `vm_strategy: create-swap-delete` replaces (`swap`), from
/// changes detected before addresses are planned (so those instances get new ones): as the
/// Director's `should_create_swap_delete?`, only in groups without static IPs, and only
/// for a VM replaced for reasons other than its networks (stemcell, cloud properties, env,
/// a recreate). Where ours differs from the Director: an instance that is not to run
/// (stopped or detached, whose update does not recreate its VM), whose agent did not
/// answer (its VM is deleted without asking it, as with `delete-create`) or whose VM is
/// replaced only because its networks changed (the Director then gives the new VM the new
/// addresses while the old keeps its own; ours cannot know before planning addresses) is
/// replaced delete-create.
pub(crate) fn mark_swaps(planned: &mut [Planned], groups: &[GroupSpec]) {
    for p in planned.iter_mut() {
        p.swap = groups.get(p.group).is_some_and(|g| swaps_vm(g, p));
    }
}

fn swaps_vm(group: &GroupSpec, p: &Planned) -> bool {
    use changes::Change;
    group.update.vm_strategy == Some(VmStrategy::CreateSwapDelete)
        && group.networks.iter().all(|n| n.static_ips.is_empty())
        && p.record.vm.is_some()
        && p.record.state == InstanceState::Started
        && matches!(p.observed, Observed::Answered { .. })
        && [
            Change::Recreate,
            Change::Stemcell,
            Change::CloudProperties,
            Change::Env,
        ]
        .into_iter()
        .any(|c| p.changes.contains(c))
}

/// The desired spec of a planned instance.
fn desired_spec(
    manifest: &DeploymentManifest,
    cloud: &CloudConfig,
    group: &GroupSpec,
    p: &Planned,
    packages: &Packages,
    calculated: Option<&serde_json::Map<String, Value>>,
    config: &EngineConfig,
) -> AppliedSpec {
    let deployment = manifest.name.clone().unwrap_or_default();
    let jobs = crate::templates::group_jobs(manifest, &group.name);
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
            &dns_instance(p),
        )),
        tags: manifest
            .tags
            .clone()
            .map(Value::Object)
            .unwrap_or(Value::Null),
        trusted_certs: (!config.trusted_certs.is_empty())
            .then(|| kubosh_base::digest::sha1_hex(config.trusted_certs.as_bytes())),
    }
}

/// The instance as its desired spec's DNS digest sees it: planned addresses only (change
/// detection must not see a dynamic address appear once the VM exists). The records
/// published name instances as they are (`execute::dns::live_entries`).
fn dns_instance(p: &Planned) -> DnsInstance {
    DnsInstance {
        uuid: p.placed.uuid.clone(),
        index: p.placed.index,
        group: p.record.group.clone(),
        az: p.placed.az.clone(),
        addresses: p
            .networks
            .iter()
            .filter_map(|(net, s)| Some((net.clone(), s.get("ip")?.as_str()?.to_string())))
            .collect(),
        agent_id: None,
    }
}

/// How a planned instance's VM is made.
pub(crate) fn vm_request(
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
            .get(&crate::state::stemcell_key(
                &group.stemcell.key(),
                p.cpi.as_deref(),
            ))
            .cloned()
            .unwrap_or_default(),
        stemcell: group.stemcell.key(),
        cloud_properties: p.desired.cloud_properties.clone(),
        networks: Value::Object(p.networks.clone().into_iter().collect()),
        env: group.env.clone(),
        disk_cids: p.record.disks.iter().map(|d| d.cid.clone()).collect(),
        metadata,
        cpi: p.cpi.clone(),
    }
}

/// What one changed instance gets (canary and watch time are the rollout's to set).
pub(crate) fn target(
    deployment: &str,
    tags: &serde_json::Map<String, Value>,
    group: &GroupSpec,
    p: &Planned,
    stemcells: &BTreeMap<String, String>,
    dns_root_domain: &str,
) -> InstanceTarget {
    let watch = group
        .update
        .update_watch_time
        .unwrap_or(kubosh_core::manifest::WatchTime {
            min_ms: 30_000,
            max_ms: 30_000,
        });
    InstanceTarget {
        record: p.record.clone(),
        desired: p.desired.clone(),
        desired_state: p.record.state,
        changes: p.changes.clone(),
        apply: apply_spec(deployment, group, p, dns_root_domain),
        vm: vm_request(deployment, tags, group, p, stemcells),
        watch,
        canary: false,
        // A VM made by this deploy (the instance had none when asked) runs nothing to
        // stop, as the Director's stopper skips new instances.
        responsive: matches!(p.observed, Observed::Answered { .. }),
        was_running: matches!(&p.observed, Observed::Answered { job_state } if job_state != "stopped"),
        announced: false,
        // No VM when asked, one now: "Creating missing vms" made it.
        new_vm: p.observed == Observed::NoVm && p.record.vm.is_some(),
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

/// Refuses a plan that would move a persistent disk to another cloud: an instance whose AZ
/// is now served by a CPI that cannot reach its disks (not the CPI that made them, nor one
/// migrated from it). Disks never move between clouds; nothing is changed.
pub(crate) fn disks_stay_in_their_clouds(
    planned: &[Planned],
    named_clouds: &crate::clouds::NamedClouds,
) -> Result<(), EngineError> {
    let stuck: Vec<crate::error::DiskInOtherCloud> = (planned.iter())
        .flat_map(|p| {
            (p.record.disks.iter())
                .filter(|d| !named_clouds.same(d.cpi.as_deref(), p.cpi.as_deref()))
                .map(|d| crate::error::DiskInOtherCloud {
                    instance: p.record.display_name(),
                    az: p.placed.az.clone().unwrap_or_default(),
                    disk: d.cid.clone(),
                    from: d.cpi.clone(),
                    to: p.cpi.clone(),
                })
        })
        .collect();
    if stuck.is_empty() {
        Ok(())
    } else {
        Err(crate::PlanError::DisksInOtherCloud(stuck).into())
    }
}
