//! Why a deploy failed, with the Director's error codes (`errors.rb`) for the task's error
//! line, and what whoever drives the engine should do about it ([`Disposition`]).

use kubosh_artifacts::blobstore::BlobstoreError;
use kubosh_artifacts::render::RenderError;
use kubosh_cloud::CpiError;
use kubosh_core::plan::compile::{self, CompileProblem};
use kubosh_core::plan::desired::DesiredError;
use kubosh_core::plan::ip::IpError;
use kubosh_core::validate::Problems;
use kubosh_transport::agent::AgentError;

use crate::progress::InstanceName;
use crate::templates::TemplateError;

/// A deploy failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Another task holds the deployment.
    #[error("{0}")]
    Lock(#[from] crate::lock::LockError),
    /// The state store failed.
    #[error("{0}")]
    Store(#[from] crate::state::StoreError),
    /// A cloud call failed (boxed: CPI errors are large and deploys return them rarely).
    #[error("{0}")]
    Cloud(Box<CpiError>),
    /// A named cloud cannot be made, or no longer serves what was recorded under it.
    #[error("{0}")]
    Clouds(#[from] crate::clouds::CloudsError),
    /// An agent call failed.
    #[error("{0}")]
    Agent(#[from] AgentError),
    /// Agents did not answer `get_state` before anything changed (each error, by text), and
    /// the deploy was not asked to recreate them (`--fix`).
    #[error("{}", .0.iter().map(|u| u.error.to_string()).collect::<Vec<_>>().join("\n"))]
    AgentsUnanswered(Vec<Unanswered>),
    /// The blobstore failed.
    #[error("{0}")]
    Blobstore(#[from] BlobstoreError),
    /// The message bus's permissions could not be changed for a new agent.
    #[error("{0}")]
    AgentAccess(#[from] crate::agent_access::AccessError),
    /// Package archives a release references are not in the blobstore (one line each);
    /// whatever uploaded the release stores them again.
    #[error("{}", .0.join("\n"))]
    MissingArchives(Vec<String>),
    /// An instance's update ended without a VM record (a bug or a concurrent writer).
    #[error("instance {instance} has no VM after its update")]
    NoVmAfterUpdate {
        /// `group/uuid (index)`.
        instance: String,
    },
    /// Planning failed (IPs, stemcells, links, templates, packages): nothing was changed.
    #[error("{0}")]
    Plan(#[from] PlanError),
    /// The agent has a different persistent disk mounted than the record says (BOSH error
    /// 400010, `AgentDiskOutOfSync`).
    #[error(
        "'{instance}' has invalid disks: agent reports '{agent}' while director record shows '{recorded}'"
    )]
    AgentDiskOutOfSync {
        /// `group/uuid (index)`.
        instance: String,
        /// The disk the agent reports.
        agent: String,
        /// The disk the record shows.
        recorded: String,
    },
    /// Addresses this deploy chose were claimed by other deployments of the director in the
    /// meantime, at every attempt (many deploys planning at once): retried later.
    #[error(
        "{0}; other deployments of this director claimed addresses at the same time, so the deploy tries again later"
    )]
    AddressesContended(PlanError),
    /// The task was cancelled, or lost its deployment lock, and stopped between steps (the
    /// Director's "Task cancelled").
    #[error("Task cancelled{}", if *.lock_lost { ": the deployment lock was lost (its renewal failed)" } else { "" })]
    Cancelled {
        /// The lock was lost (rather than the token cancelled).
        lock_lost: bool,
    },
    /// No instance of the deployment matches what was asked for (`web/0`, `web/<uuid>`).
    #[error("No instance of deployment '{deployment}' matches '{asked}'")]
    NoSuchInstance {
        /// The deployment.
        deployment: String,
        /// What was asked for.
        asked: String,
    },
    /// No instance of the deployment has the errand's job (the Director's "Errand 'x'
    /// doesn't exist").
    #[error(
        "Errand '{errand}' doesn't exist in deployment '{deployment}': neither an instance group with lifecycle: errand nor a job of an instance has that name"
    )]
    NoSuchErrand {
        /// The deployment.
        deployment: String,
        /// The errand asked for.
        errand: String,
    },
    /// An instance without a VM was asked something only its agent can answer (the
    /// Director's `InstanceVmMissing`).
    #[error("'{instance}' doesn't reference a VM")]
    InstanceVmMissing {
        /// `group/uuid (index)`.
        instance: String,
    },
    /// An instance did not reach running in its watch time (BOSH error 400007).
    #[error("'{instance}' is not running after update. Review logs for failed jobs: {}", .failing.join(", "))]
    NotRunning {
        /// `group/uuid (index)`.
        instance: String,
        /// Processes not running.
        failing: Vec<String>,
    },
}

impl EngineError {
    /// The Director's error code for the task's error line.
    pub fn code(&self) -> u32 {
        match self {
            EngineError::NotRunning { .. } => 400_007,
            EngineError::AgentDiskOutOfSync { .. } => 400_010,
            EngineError::Lock(_) => 100_001,
            EngineError::Plan(e) | EngineError::AddressesContended(e) => e.code(),
            EngineError::Agent(AgentError::Timeout { .. }) => 450_002,
            EngineError::AgentsUnanswered(unanswered) if matches!(unanswered.first(), Some(u) if u.error.is_silence()) => {
                450_002
            }
            _ => 100,
        }
    }

    /// What whoever drives the engine should do about this error: try again later (a fault
    /// of the cloud, an agent, the network, the store, or a lock another task holds), or
    /// stall until the input changes (an unsatisfiable plan, a failed
    /// canary, a disk the agent disagrees about, a CPI that refuses the request).
    pub fn disposition(&self) -> Disposition {
        match self {
            EngineError::Plan(_)
            | EngineError::Clouds(_)
            | EngineError::NotRunning { .. }
            | EngineError::AgentDiskOutOfSync { .. }
            | EngineError::NoSuchInstance { .. }
            | EngineError::NoSuchErrand { .. }
            | EngineError::InstanceVmMissing { .. } => Disposition::Stall,
            EngineError::Cloud(e) => match e.as_ref() {
                CpiError::Cloud { kind, .. } if kind.is_refusal() => Disposition::Stall,
                CpiError::NoDiskHint { .. } | CpiError::ApiVersion(_) => Disposition::Stall,
                _ => Disposition::Retry,
            },
            EngineError::Agent(AgentError::Unsupported { .. }) => Disposition::Stall,
            // Silent agents stay silent until something recreates their VMs (`--fix`, the
            // resurrector, a `recreate` of them); an agent that answered with an error, or a
            // bus that could not be reached, may pass.
            EngineError::AgentsUnanswered(unanswered)
                if unanswered.iter().all(|u| u.error.is_silence()) =>
            {
                Disposition::Stall
            }
            EngineError::Lock(_)
            | EngineError::Store(_)
            | EngineError::Agent(_)
            | EngineError::AgentsUnanswered(_)
            | EngineError::Blobstore(_)
            | EngineError::AgentAccess(_)
            | EngineError::MissingArchives(_)
            | EngineError::NoVmAfterUpdate { .. }
            | EngineError::AddressesContended(_)
            | EngineError::Cancelled { .. } => Disposition::Retry,
        }
    }
}

impl From<CpiError> for EngineError {
    fn from(e: CpiError) -> EngineError {
        EngineError::Cloud(Box::new(e))
    }
}

/// An instance whose agent did not answer `get_state` at the start of a deploy.
#[derive(Debug)]
pub struct Unanswered {
    /// The instance.
    pub instance: InstanceName,
    /// Why nothing was heard.
    pub error: Unheard,
}

/// Why an agent said nothing.
#[derive(Debug, thiserror::Error)]
pub enum Unheard {
    /// Asking it failed (BOSH's timeout text, or the transport's error).
    #[error(transparent)]
    Asked(AgentError),
    /// The heartbeats prove it silent, so it was not asked (that would take 3 x 45 s).
    #[error("No heartbeat from agent '{agent_id}' for more than {} seconds", .for_at_least.as_secs())]
    Silent {
        /// The agent.
        agent_id: String,
        /// How long it has been silent, at least.
        for_at_least: std::time::Duration,
    },
}

impl Unheard {
    /// Whether the agent is silent (a timeout, or no heartbeat), rather than failing
    /// otherwise: only a new VM helps.
    pub fn is_silence(&self) -> bool {
        match self {
            Unheard::Asked(e) => e.is_timeout(),
            Unheard::Silent { .. } => true,
        }
    }
}

impl EngineError {
    /// The instances whose agents did not answer, when that is why the deploy failed.
    pub fn unanswered(&self) -> &[Unanswered] {
        match self {
            EngineError::AgentsUnanswered(unanswered) => unanswered,
            _ => &[],
        }
    }
}

/// What to do about a failed deploy ([`EngineError::disposition`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// A fault that may pass: try the same input again later, with backoff.
    Retry,
    /// The same input will fail the same way: wait until it changes.
    Stall,
}

/// Why a deploy cannot be planned (or a step found its plan unusable): every problem of one
/// kind at once, in the Director's words. Nothing was changed when planning fails.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The instance groups cannot be resolved against the cloud config and the stemcells.
    #[error("{}", lines(.0))]
    Desired(Vec<DesiredError>),
    /// Addresses cannot be reserved or described (§4.9).
    #[error("{}", lines(.0))]
    Ip(Vec<IpError>),
    /// A group's static IP entry is not an address or a range.
    #[error("Instance group '{group}' has an invalid static IP '{entry}': {reason}")]
    InvalidStaticIp {
        /// Instance group.
        group: String,
        /// The entry as the manifest has it.
        entry: String,
        /// Why it cannot be read.
        reason: String,
    },
    /// An instance record holds an address that is not one (a damaged record).
    #[error("instance {instance} holds an unreadable address '{ip}' on network '{network}'")]
    UnreadableAddress {
        /// `group/uuid (index)`.
        instance: String,
        /// What the record holds.
        ip: String,
        /// The network.
        network: String,
    },
    /// Another deployment of the director holds an address this deploy wants.
    #[error(
        "Failed to reserve IP '{ip}/{prefix}': already reserved by instance '{holder}' from deployment '{deployment}'"
    )]
    TakenElsewhere {
        /// The address.
        ip: std::net::IpAddr,
        /// Its prefix.
        prefix: u8,
        /// The holder, `group/uuid`.
        holder: String,
        /// The holder's deployment.
        deployment: String,
    },
    /// Links cannot be resolved (every problem, with its manifest path).
    #[error("{0}")]
    Links(Problems),
    /// A release the manifest names, or its version, is not among the deploy's releases
    /// (every problem, with its manifest path).
    #[error("{0}")]
    Releases(Problems),
    /// Templates cannot be prepared for rendering (jobs, properties, link contents).
    #[error("{}", lines(.0))]
    Templates(Vec<TemplateError>),
    /// Templates failed to render (each failing job).
    #[error("{}", lines(.0))]
    Render(Vec<RenderError>),
    /// The rendered templates archive cannot be written.
    #[error("{0}")]
    Archive(#[from] kubosh_artifacts::render::archive::ArchiveError),
    /// A job's packages cannot be provided: unknown releases, jobs or packages, broken
    /// dependency graphs, packages without source that nothing compiled.
    #[error("{}", compilation_lines(.0))]
    Compilation(Vec<CompileProblem>),
    /// A package to compile is not in its release.
    #[error("Package '{package}' is missing from release '{release}'")]
    PackageMissing {
        /// Package name.
        package: String,
        /// Release name.
        release: String,
    },
    /// The compilation tasks cannot be ordered.
    #[error("{0}")]
    CompileOrder(#[from] crate::pool::PoolError),
    /// Instances whose persistent disks are in another cloud than the CPI their AZ now names
    /// (disks never move between clouds).
    #[error("{}", lines(.0))]
    DisksInOtherCloud(Vec<DiskInOtherCloud>),
    /// The rollout names an instance it has no update for (a bug).
    #[error("no update planned for instance #{0}")]
    Unplanned(usize),
    /// Compilation succeeded but the rollout saw it fail (a bug).
    #[error("compilation succeeded, but the rollout stopped waiting for its packages")]
    RolloutWithoutPackages,
    /// Problems of different kinds, found together (one line or more each).
    #[error("{}", lines(.0))]
    All(Vec<PlanError>),
}

impl PlanError {
    /// One error for every problem found: the problem itself when there is one.
    pub fn all(mut problems: Vec<PlanError>) -> PlanError {
        if problems.len() == 1 {
            problems.remove(0)
        } else {
            PlanError::All(problems)
        }
    }

    /// The Director's error code (`errors.rb`) of the problem, or of the first problem of a
    /// list (the Director raises on the first).
    pub fn code(&self) -> u32 {
        match self {
            PlanError::Desired(errors) => match errors.first() {
                // InstanceGroupUnknownStemcell
                Some(DesiredError::UnknownStemcellAlias { .. }) => 140_005,
                // StemcellNotFound
                Some(DesiredError::StemcellMissing { .. }) => 50_003,
                // InstanceGroupUnknownVmType, InstanceGroupUnknownDiskType; VM extensions
                // have no code of their own.
                Some(DesiredError::UnknownType { kind, .. }) => match *kind {
                    "vm_type" => 140_004,
                    "disk_type" => 140_012,
                    _ => 100,
                },
                None => 100,
            },
            PlanError::Ip(errors) => errors.first().map_or(100, IpError::code),
            PlanError::All(problems) => problems.first().map_or(100, PlanError::code),
            // JobInvalidStaticIPs
            PlanError::InvalidStaticIp { .. } => 150_009,
            // NetworkReservationAlreadyInUse
            PlanError::TakenElsewhere { .. } => 130_008,
            // DeploymentInvalidLink
            PlanError::Links(_) => 190_016,
            // ReleaseNotFound, ReleaseVersionNotFound
            PlanError::Releases(problems) => match problems.errors().next() {
                Some(p) if p.message.starts_with("Release version") => 30_006,
                _ => 30_005,
            },
            // JobTemplateBindingFailed
            PlanError::Templates(_) | PlanError::Render(_) => 80_006,
            // PackageMissingSourceCode, when a package without source is not compiled.
            PlanError::Compilation(problems)
                if problems
                    .iter()
                    .any(|p| matches!(p, CompileProblem::NotCompiled { .. })) =>
            {
                60_001
            }
            PlanError::UnreadableAddress { .. }
            | PlanError::Archive(_)
            | PlanError::Compilation(_)
            | PlanError::PackageMissing { .. }
            | PlanError::CompileOrder(_)
            | PlanError::DisksInOtherCloud(_)
            | PlanError::Unplanned(_)
            | PlanError::RolloutWithoutPackages => 100,
        }
    }
}

/// One line per problem.
/// A persistent disk its instance would take to another cloud.
#[derive(Debug)]
pub struct DiskInOtherCloud {
    /// `group/uuid (index)`.
    pub instance: String,
    /// The instance's AZ.
    pub az: String,
    /// The disk's CID.
    pub disk: String,
    /// The CPI holding it (`None`: the director's own).
    pub from: Option<String>,
    /// The CPI the AZ names now.
    pub to: Option<String>,
}

impl std::fmt::Display for DiskInOtherCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cpi = |c: &Option<String>| match c {
            Some(name) => format!("CPI '{name}'"),
            None => "the director's own CPI".to_string(),
        };
        let (from, to) = (cpi(&self.from), cpi(&self.to));
        write!(
            f,
            "Instance '{}' cannot keep its persistent disk '{}': the disk is in the cloud of {from}, and AZ '{}' is now served by {to}. Disks do not move between clouds: serve the AZ with {from} again, or, if {to} reaches the same cloud, list {from} in its migrated_from",
            self.instance, self.disk, self.az
        )
    }
}

fn lines<T: std::fmt::Display>(problems: &[T]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Compilation problems as the Director reports them: each problem but the packages not
/// compiled, then those in one "Can't use release" message.
fn compilation_lines(problems: &[CompileProblem]) -> String {
    let mut out: Vec<String> = problems
        .iter()
        .filter(|p| !matches!(p, CompileProblem::NotCompiled { .. }))
        .map(ToString::to_string)
        .collect();
    out.extend(compile::not_compiled_message(problems));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubosh_cloud::ErrorKind;
    use std::time::Duration;

    fn cpi(kind: ErrorKind) -> EngineError {
        EngineError::from(CpiError::Cloud {
            error_type: kind.to_string(),
            kind,
            message: "m".into(),
            ok_to_retry: false,
            method: "create_vm".into(),
            request_id: "r".into(),
        })
    }

    fn timeout(agent_id: &str) -> AgentError {
        AgentError::Timeout {
            method: "get_state".into(),
            instance: "web/0".into(),
            agent_id: agent_id.into(),
            after: Duration::from_secs(45),
        }
    }

    #[test]
    fn refusals_and_bad_input_stall_faults_are_retried() {
        assert_eq!(
            cpi(ErrorKind::NotSupported).disposition(),
            Disposition::Stall
        );
        assert_eq!(cpi(ErrorKind::CpiError).disposition(), Disposition::Stall);
        assert_eq!(cpi(ErrorKind::CloudError).disposition(), Disposition::Retry);
        assert_eq!(
            cpi(ErrorKind::VmCreationFailed).disposition(),
            Disposition::Retry
        );
        assert_eq!(
            EngineError::Plan(PlanError::Unplanned(0)).disposition(),
            Disposition::Stall
        );
        let canary = EngineError::NotRunning {
            instance: "web/0".into(),
            failing: vec!["hello".into()],
        };
        assert_eq!(canary.disposition(), Disposition::Stall);
        assert_eq!(
            EngineError::Agent(timeout("a")).disposition(),
            Disposition::Retry
        );
        assert_eq!(
            EngineError::Agent(AgentError::Unsupported {
                method: "sync_dns".into()
            })
            .disposition(),
            Disposition::Stall
        );
    }

    #[test]
    fn codes_come_from_the_error_not_its_text() {
        let timed_out = EngineError::Agent(timeout("a"));
        assert_eq!(timed_out.code(), 450_002);
        let silent = |agent: &str| Unanswered {
            instance: InstanceName {
                group: "web".into(),
                index: 0,
                display: format!("web/{agent} (0)"),
            },
            error: Unheard::Asked(timeout(agent)),
        };
        let several = EngineError::AgentsUnanswered(vec![silent("a"), silent("b")]);
        assert_eq!(several.disposition(), Disposition::Stall);
        assert_eq!(several.unanswered().len(), 2);
        assert_eq!(several.code(), 450_002);
        assert_eq!(
            several.to_string(),
            format!("{}\n{}", timeout("a"), timeout("b"))
        );
        assert_eq!(cpi(ErrorKind::CloudError).code(), 100);
    }

    #[test]
    fn plan_errors_carry_the_directors_codes() {
        let exhausted = IpError::NoMoreAvailable {
            instance: "web/0".into(),
            network_type: "manual",
            network: "private".into(),
        };
        let plan = EngineError::Plan(PlanError::Ip(vec![exhausted.clone()]));
        assert_eq!(plan.code(), 130_011);
        assert_eq!(plan.to_string(), exhausted.to_string());
        let taken = PlanError::TakenElsewhere {
            ip: "10.0.0.5".parse().unwrap(),
            prefix: 32,
            holder: "web/abc".into(),
            deployment: "other".into(),
        };
        assert_eq!(taken.code(), 130_008);
        assert_eq!(
            taken.to_string(),
            "Failed to reserve IP '10.0.0.5/32': already reserved by instance 'web/abc' from deployment 'other'"
        );
        let missing = PlanError::Desired(vec![DesiredError::StemcellMissing {
            wanted: "ubuntu/1".into(),
        }]);
        assert_eq!(missing.code(), 50_003);
        assert_eq!(missing.to_string(), "Stemcell 'ubuntu/1' doesn't exist");
        let contended = EngineError::AddressesContended(taken);
        assert_eq!(contended.code(), 130_008);
        assert_eq!(contended.disposition(), Disposition::Retry);
    }
}
