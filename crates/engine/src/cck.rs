//! `bosh cck` (`bosh-protocols.md` §4.16): a scan of a deployment for what its records, the
//! cloud and the agents disagree about, and the resolutions the operator chooses.
//!
//! The scan reads only, under the deployment lock: each instance with a VM is asked
//! `get_state` once, with a short timeout and no retry (heartbeats that prove its agent silent
//! spare the question); a silent agent's VM is looked up (`has_vm`: gone is `missing_vm`,
//! there is `unresponsive_agent`); an answering agent's disks are looked up (`has_disk`: gone
//! is `missing_disk`) and listed (`list_disk`: a managed disk it does not list is
//! `mount_info_mismatch`). BOSH's `inactive_disk` has no counterpart: a disk kubosh creates
//! is recorded by an intent before the cloud call and settled by the next run, never left
//! half-recorded.
//!
//! Resolutions change the cloud and the records through the engine's crash-safe steps;
//! `recreate_vm` is a deploy of the request that recreates the chosen instances (on their
//! disks, with their identity and addresses), so it needs the deployment's documents.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;

use crate::progress::InstanceName;
use crate::state::{DeploymentState, InstanceRecord, Write};
use crate::{DeployRequest, Engine, EngineError};
use kubosh_cloud::{DiskCid, VmCid};
use kubosh_transport::agent::ClientOptions;

/// How long the scan waits for an agent's `get_state` (the Director's scan: 10 s, no retry).
pub const SCAN_TIMEOUT: Duration = Duration::from_secs(10);

/// What kind of problem a scan found (BOSH's problem types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProblemKind {
    /// The instance's VM is gone from the cloud.
    MissingVm,
    /// The VM is there, its agent does not answer.
    UnresponsiveAgent,
    /// A persistent disk of the instance is gone from the cloud.
    MissingDisk,
    /// The agent does not have a disk mounted that the records say it has.
    MountInfoMismatch,
}

impl ProblemKind {
    /// BOSH's name (`missing_vm`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::MissingVm => "missing_vm",
            ProblemKind::UnresponsiveAgent => "unresponsive_agent",
            ProblemKind::MissingDisk => "missing_disk",
            ProblemKind::MountInfoMismatch => "mount_info_mismatch",
        }
    }

    /// The resolutions offered, the automatic one (`bosh cck --auto`) first.
    pub fn resolutions(self) -> &'static [Resolution] {
        use Resolution::*;
        match self {
            ProblemKind::MissingVm => &[RecreateVm, Ignore, DeleteVmReference],
            ProblemKind::UnresponsiveAgent => {
                &[Ignore, RebootVm, RecreateVm, DeleteVm, DeleteVmReference]
            }
            ProblemKind::MissingDisk => &[Ignore, DeleteDiskReference],
            ProblemKind::MountInfoMismatch => &[Ignore, ReattachDisk, ReattachDiskAndReboot],
        }
    }

    /// What `--auto` chooses.
    pub fn auto(self) -> Resolution {
        self.resolutions()[0]
    }
}

/// How a problem is resolved (BOSH's resolution names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resolution {
    /// Leave it.
    Ignore,
    /// A new VM on the instance's disks (a deploy that recreates it).
    RecreateVm,
    /// Reboot the VM (`reboot_vm`) and wait for its agent.
    RebootVm,
    /// Delete the VM from the cloud; the next deploy makes a new one.
    DeleteVm,
    /// Forget the VM (the cloud keeps it); the next deploy makes a new one.
    DeleteVmReference,
    /// Forget the disk (detached where possible); the next deploy makes a new one.
    DeleteDiskReference,
    /// Attach the disk again and have the agent mount it.
    ReattachDisk,
    /// Attach the disk again, then reboot the VM.
    ReattachDiskAndReboot,
}

impl Resolution {
    /// Every resolution.
    pub const ALL: [Resolution; 8] = [
        Resolution::Ignore,
        Resolution::RecreateVm,
        Resolution::RebootVm,
        Resolution::DeleteVm,
        Resolution::DeleteVmReference,
        Resolution::DeleteDiskReference,
        Resolution::ReattachDisk,
        Resolution::ReattachDiskAndReboot,
    ];

    /// BOSH's name (`recreate_vm`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Resolution::Ignore => "ignore",
            Resolution::RecreateVm => "recreate_vm",
            Resolution::RebootVm => "reboot_vm",
            Resolution::DeleteVm => "delete_vm",
            Resolution::DeleteVmReference => "delete_vm_reference",
            Resolution::DeleteDiskReference => "delete_disk_reference",
            Resolution::ReattachDisk => "reattach_disk",
            Resolution::ReattachDiskAndReboot => "reattach_disk_and_reboot",
        }
    }

    /// The resolution named `name` (BOSH's `recreate_vm_without_wait` is `recreate_vm`).
    pub fn parse(name: &str) -> Option<Resolution> {
        match name {
            "recreate_vm_without_wait" => Some(Resolution::RecreateVm),
            _ => Resolution::ALL.into_iter().find(|r| r.name() == name),
        }
    }
}

/// One problem a scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// A short id, the same in every scan while the problem lasts.
    pub id: String,
    /// What is wrong.
    pub kind: ProblemKind,
    /// The instance.
    pub instance: InstanceName,
    /// The instance's uuid.
    pub uuid: String,
    /// The VM concerned.
    pub vm_cid: Option<String>,
    /// The disk concerned.
    pub disk_cid: Option<String>,
    /// What BOSH says of it.
    pub description: String,
}

impl Problem {
    fn new(
        kind: ProblemKind,
        record: &InstanceRecord,
        vm_cid: Option<&str>,
        disk: Option<&str>,
        description: String,
    ) -> Problem {
        let key = format!(
            "{}\0{}\0{}\0{}",
            kind.name(),
            record.uuid,
            vm_cid.unwrap_or_default(),
            disk.unwrap_or_default()
        );
        Problem {
            id: kubosh_base::digest::sha256_hex(key.as_bytes())[..8].to_string(),
            kind,
            instance: InstanceName::of(record),
            uuid: record.uuid.clone(),
            vm_cid: vm_cid.map(str::to_string),
            disk_cid: disk.map(str::to_string),
            description,
        }
    }

    /// The resolutions offered for it.
    pub fn resolutions(&self) -> &'static [Resolution] {
        self.kind.resolutions()
    }
}

/// What resolving did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProblemsResolved {
    /// `(problem id, resolution)` applied, in order.
    pub applied: Vec<(String, Resolution)>,
}

/// Why a resolution cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The resolution is not one of the problem's.
    #[error("'{resolution}' does not resolve {kind} (choose one of: {offered})")]
    NotOffered {
        /// The problem's type.
        kind: &'static str,
        /// The resolution asked.
        resolution: &'static str,
        /// What is offered.
        offered: String,
    },
    /// Recreating needs the deployment's documents.
    #[error("recreate_vm needs the deployment's manifest, cloud config, releases and stemcells")]
    NoRequest,
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl Engine {
    /// Scans deployment `name` (under its lock): every problem found, sorted by instance.
    pub async fn scan(&self, name: &str) -> Result<Vec<Problem>, EngineError> {
        self.under_deployment_lock(name, "scan and fix", |engine| async move {
            let state = engine.store.load().await?;
            Ok(engine.scan_state(&state).await)
        })
        .await
    }

    /// The problems of `state`.
    async fn scan_state(&self, state: &DeploymentState) -> Vec<Problem> {
        // Owned records in `async move` blocks: a stream of futures that borrow from the
        // closure's argument is not `Send` for every lifetime, and callers need it to be.
        let records: Vec<InstanceRecord> = state.instances.values().cloned().collect();
        let asks =
            (records.into_iter()).map(|record| async move { self.scan_instance(&record).await });
        let mut problems: Vec<Problem> = futures::stream::iter(asks)
            .buffer_unordered(self.config.get_state_concurrency.max(1))
            .collect::<Vec<Vec<Problem>>>()
            .await
            .into_iter()
            .flatten()
            .collect();
        problems.sort_by(|a, b| {
            (a.instance.group.as_str(), a.instance.index, a.kind).cmp(&(
                b.instance.group.as_str(),
                b.instance.index,
                b.kind,
            ))
        });
        problems
    }

    /// The problems of one instance.
    async fn scan_instance(&self, record: &InstanceRecord) -> Vec<Problem> {
        let Some(vm) = &record.vm else {
            return Vec::new();
        };
        let name = record.display_name();
        let options = ClientOptions {
            timeout: SCAN_TIMEOUT,
            get_state_retries: 0,
            ..self.config.agent_options.clone()
        };
        let agent = self.agent(&vm.agent_id, &name).with_options(options);
        let answered = !self.proven_silent(&vm.agent_id) && agent.get_state(false).await.is_ok();
        if !answered {
            let (kind, what) = if self.vm_is_gone(&vm.cid, vm.cpi.as_deref()).await {
                (ProblemKind::MissingVm, "missing.")
            } else {
                (ProblemKind::UnresponsiveAgent, "is not responding.")
            };
            let description = format!("VM for '{name}' with cloud ID '{}' {what}", vm.cid);
            return vec![Problem::new(kind, record, Some(&vm.cid), None, description)];
        }
        let mounted = agent.list_disk().await.unwrap_or_default();
        let mut problems = Vec::new();
        for disk in &record.disks {
            let gone = match self.cloud_of(disk.cpi.as_deref(), &format!("disk {}", disk.cid)) {
                Ok(cloud) => matches!(cloud.has_disk(&DiskCid(disk.cid.clone())).await, Ok(false)),
                Err(_) => false,
            };
            if gone {
                let description = format!(
                    "Disk '{}' ({}/{}, {}M) is missing",
                    disk.cid, record.group, record.index, disk.size_mib
                );
                problems.push(Problem::new(
                    ProblemKind::MissingDisk,
                    record,
                    Some(&vm.cid),
                    Some(&disk.cid),
                    description,
                ));
            } else if disk.is_managed() && !mounted.contains(&disk.cid) {
                let description = format!(
                    "Inconsistent mount information:\nRecord shows that disk '{}' should be mounted on {}.\nHowever it is currently :\n\tNot mounted in any VM",
                    disk.cid, vm.cid
                );
                problems.push(Problem::new(
                    ProblemKind::MountInfoMismatch,
                    record,
                    Some(&vm.cid),
                    Some(&disk.cid),
                    description,
                ));
            }
        }
        problems
    }

    /// Applies `choices` to deployment `name` (under its lock), each a problem of the last
    /// scan with one of its resolutions; `request` (the deployment's documents) is needed when
    /// one is `recreate_vm`. Every choice is checked before anything changes.
    pub async fn resolve_problems(
        &self,
        name: &str,
        choices: &[(Problem, Resolution)],
        request: Option<&DeployRequest>,
    ) -> Result<ProblemsResolved, ResolveError> {
        for (problem, resolution) in choices {
            if !problem.resolutions().contains(resolution) {
                return Err(not_offered(problem, *resolution));
            }
        }
        let recreate: BTreeSet<String> = (choices.iter())
            .filter(|(_, r)| *r == Resolution::RecreateVm)
            .map(|(p, _)| p.uuid.clone())
            .collect();
        if !recreate.is_empty() && request.is_none() {
            return Err(ResolveError::NoRequest);
        }
        let resolved = self
            .under_deployment_lock(name, "scan and fix", |engine| async move {
                // What a killed run left is settled first, as a deploy does (a
                // create-swap-delete's inactive VM included), so no resolution meets it.
                let mut state = engine.store.load().await?;
                engine
                    .recover(&mut state, engine.config.recovery_wait)
                    .await?;
                let mut applied = Vec::new();
                for (problem, resolution) in choices {
                    engine.resolve_one(problem, *resolution).await?;
                    applied.push((problem.id.clone(), *resolution));
                }
                Ok(ProblemsResolved { applied })
            })
            .await?;
        if let Some(request) = request.filter(|_| !recreate.is_empty()) {
            let request = DeployRequest {
                recreate_instances: recreate,
                errands: Default::default(),
                ..request.clone()
            };
            self.deploy(&request).await?;
        }
        Ok(resolved)
    }

    /// Applies one resolution (a `recreate_vm` is the deploy after them all).
    async fn resolve_one(
        &self,
        problem: &Problem,
        resolution: Resolution,
    ) -> Result<(), EngineError> {
        let mut state = self.store.load().await?;
        let Some(record) = state.instances.get_mut(&problem.uuid) else {
            return Ok(());
        };
        let name = record.display_name();
        match resolution {
            Resolution::Ignore | Resolution::RecreateVm => {}
            Resolution::RebootVm => {
                if let Some(vm) = &record.vm {
                    (self.cloud_of(vm.cpi.as_deref(), &name)?)
                        .reboot_vm(&VmCid(vm.cid.clone()))
                        .await?;
                    let agent = self.agent(&vm.agent_id, &name);
                    self.wait_for_agent(&agent, &vm.cid).await?;
                }
            }
            Resolution::DeleteVm => {
                self.delete_vm_of(record, false).await?;
                record.update_completed = false;
                self.persist(record).await?;
            }
            Resolution::DeleteVmReference => {
                record.vm = None;
                record.update_completed = false;
                self.persist(record).await?;
            }
            Resolution::DeleteDiskReference => {
                let disk = problem.disk_cid.clone().unwrap_or_default();
                if let Some(vm) = &record.vm {
                    // Best effort: the disk is gone or unusable.
                    let _ = (self.cloud_of(vm.cpi.as_deref(), &name)?)
                        .detach_disk(&VmCid(vm.cid.clone()), &DiskCid(disk.clone()))
                        .await;
                }
                record.disks.retain(|d| d.cid != disk);
                record.update_completed = false;
                self.write(Write::Instance(Box::new(record.clone())))
                    .await?;
            }
            Resolution::ReattachDisk | Resolution::ReattachDiskAndReboot => {
                let disk = problem.disk_cid.as_deref().unwrap_or_default();
                let (Some(vm), Some(disk)) = (
                    record.vm.clone(),
                    record.disks.iter().find(|d| d.cid == disk),
                ) else {
                    return Ok(());
                };
                let cloud = self.cloud_of(vm.cpi.as_deref(), &name)?;
                let attached = cloud
                    .attach_disk(&VmCid(vm.cid.clone()), &DiskCid(disk.cid.clone()))
                    .await;
                if let Err(e) = attached {
                    // Still attached, most likely: mounting tells.
                    tracing::warn!(disk = %disk.cid, error = %e, "attaching the disk again");
                }
                let agent = self.agent(&vm.agent_id, &name);
                if resolution == Resolution::ReattachDiskAndReboot {
                    cloud.reboot_vm(&VmCid(vm.cid.clone())).await?;
                }
                self.wait_for_agent(&agent, &vm.cid).await?;
                if disk.is_managed() {
                    agent.mount_disk(&disk.cid).await?;
                }
            }
        }
        Ok(())
    }
}

fn not_offered(problem: &Problem, resolution: Resolution) -> ResolveError {
    ResolveError::NotOffered {
        kind: problem.kind.name(),
        resolution: resolution.name(),
        offered: (problem.resolutions().iter())
            .map(|r| r.name())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_offers_boshs_resolutions_the_automatic_one_first() {
        assert_eq!(ProblemKind::MissingVm.auto(), Resolution::RecreateVm);
        assert_eq!(ProblemKind::UnresponsiveAgent.auto(), Resolution::Ignore);
        assert_eq!(ProblemKind::MissingDisk.auto(), Resolution::Ignore);
        assert_eq!(ProblemKind::MountInfoMismatch.auto(), Resolution::Ignore);
        for r in Resolution::ALL {
            assert_eq!(Resolution::parse(r.name()), Some(r));
        }
        assert_eq!(
            Resolution::parse("recreate_vm_without_wait"),
            Some(Resolution::RecreateVm)
        );
        assert_eq!(Resolution::parse("reboot"), None);
    }
}
