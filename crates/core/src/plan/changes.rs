//! Change detection (`bosh-protocols.md` §4.3): what differs between what an instance has and
//! what the manifest wants, and what that costs (nothing, a minimal update, an in-place
//! update, or a new VM).

use std::collections::BTreeSet;
use std::fmt;

use crate::state::{AppliedSpec, InstanceRecord, InstanceState};
use kubosh_base::secret::same_value;

/// One reason to touch an instance, named as the Director names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Change {
    /// The previous update did not complete.
    Dirty,
    /// `bosh restart`.
    Restart,
    /// `bosh recreate`, `--recreate`, or the agent does not answer.
    Recreate,
    /// `--recreate-persistent-disks`.
    RecreatePersistentDisks,
    /// Merged cloud properties differ.
    CloudProperties,
    /// Stemcell name or version differs.
    Stemcell,
    /// `env` differs.
    Env,
    /// IPs or network settings differ.
    Network,
    /// Packages differ.
    Packages,
    /// Persistent disks (size, cloud properties, names) differ.
    PersistentDisk,
    /// The rendered configuration hash differs.
    Configuration,
    /// Job names or versions differ.
    Job,
    /// Desired process state differs from the agent's.
    State,
    /// This instance's DNS records differ.
    Dns,
    /// Deployment tags differ.
    Tags,
    /// The director's trusted certificates differ from the VM's (`update_settings` sends
    /// them in the update).
    TrustedCerts,
    /// The VM is in another cloud than the CPI its AZ names now (a CPI config change): a
    /// new VM is made there.
    Cpi,
}

impl Change {
    /// The Director's symbol for the change (event `context.changes`, `kubosh plan`).
    pub fn name(self) -> &'static str {
        match self {
            Change::Dirty => "dirty",
            Change::Restart => "restart",
            Change::Recreate => "recreate",
            Change::RecreatePersistentDisks => "recreate_persistent_disks",
            Change::CloudProperties => "cloud_properties",
            Change::Stemcell => "stemcell",
            Change::Env => "env",
            Change::Network => "network",
            Change::Packages => "packages",
            Change::PersistentDisk => "persistent_disk",
            Change::Configuration => "configuration",
            Change::Job => "job",
            Change::State => "state",
            Change::Dns => "dns",
            Change::Tags => "tags",
            Change::TrustedCerts => "trusted_certs",
            Change::Cpi => "cpi",
        }
    }

    /// Whether the change needs a new VM (§4.3 "needs shutting down").
    pub fn recreates_vm(self) -> bool {
        matches!(
            self,
            Change::Recreate
                | Change::Cpi
                | Change::CloudProperties
                | Change::Stemcell
                | Change::Env
                | Change::Network
        )
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The set of changes of one instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes(pub BTreeSet<Change>);

impl Changes {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a change needs a new VM.
    pub fn recreates_vm(&self) -> bool {
        self.0.iter().any(|c| c.recreates_vm())
    }

    /// Only DNS records and/or tags: updated without stopping anything.
    pub fn is_minimal(&self) -> bool {
        !self.is_empty()
            && self
                .0
                .iter()
                .all(|c| matches!(c, Change::Dns | Change::Tags))
    }

    /// Whether `change` is among them.
    pub fn contains(&self, change: Change) -> bool {
        self.0.contains(&change)
    }

    /// The Director's names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|c| c.name()).collect()
    }
}

/// What the operator asked for beyond the manifest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    /// Recreate VMs.
    pub recreate: bool,
    /// Recreate persistent disks.
    pub recreate_persistent_disks: bool,
    /// Restart jobs.
    pub restart: bool,
    /// `--fix`: recreate the VMs of instances whose agents do not answer, instead of failing
    /// before anything changes. Changes nothing by itself.
    pub fix: bool,
}

impl Requests {
    /// Whether the operator asked for a change the manifest does not make (`--fix` alone
    /// asks for none: it only says what to do about silent agents).
    pub fn asks_for_changes(&self) -> bool {
        self.recreate || self.recreate_persistent_disks || self.restart
    }
}

/// What the agent said at the start of the deploy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// It answered; `job_state` as it reported it (`running`, `failing`, `stopped`, ...).
    Answered {
        /// The agent's `job_state`.
        job_state: String,
    },
    /// It did not answer.
    Unresponsive,
    /// There is no VM to ask.
    NoVm,
}

/// The changes of an existing instance whose desired spec is `desired`.
pub fn detect(
    record: &InstanceRecord,
    desired: &AppliedSpec,
    desired_state: InstanceState,
    observed: &Observed,
    requests: Requests,
) -> Changes {
    let mut out = BTreeSet::new();
    if !record.update_completed {
        out.insert(Change::Dirty);
    }
    if requests.restart {
        out.insert(Change::Restart);
    }
    if requests.recreate || matches!(observed, Observed::Unresponsive) {
        out.insert(Change::Recreate);
    }
    if requests.recreate_persistent_disks {
        out.insert(Change::RecreatePersistentDisks);
    }
    match &record.applied {
        None => {
            // Never completely applied: everything is new.
            out.insert(Change::Dirty);
        }
        Some(applied) => {
            let pairs = [
                (
                    Change::CloudProperties,
                    applied.cloud_properties != desired.cloud_properties,
                ),
                (Change::Stemcell, applied.stemcell != desired.stemcell),
                (Change::Env, !same_value(&applied.env, &desired.env)),
                (Change::Network, applied.networks != desired.networks),
                (Change::Packages, applied.packages != desired.packages),
                (Change::PersistentDisk, applied.disks != desired.disks),
                (
                    Change::Configuration,
                    applied.configuration_hash != desired.configuration_hash,
                ),
                (Change::Job, applied.jobs != desired.jobs),
                (Change::Dns, applied.dns != desired.dns),
                (Change::Tags, applied.tags != desired.tags),
                (
                    Change::TrustedCerts,
                    applied.trusted_certs != desired.trusted_certs,
                ),
            ];
            out.extend(
                pairs
                    .into_iter()
                    .filter(|(_, differs)| *differs)
                    .map(|(c, _)| c),
            );
        }
    }
    // The VM itself must still be the one the spec was applied to.
    if let (Some(vm), Some(applied)) = (&record.vm, &record.applied)
        && (vm.stemcell != applied.stemcell || !same_value(&vm.env, &applied.env))
    {
        out.insert(Change::Recreate);
    }
    let state_differs = match (desired_state, observed) {
        (InstanceState::Detached, _) => record.vm.is_some(),
        (_, Observed::NoVm) => true,
        (_, Observed::Unresponsive) => true,
        (InstanceState::Started, Observed::Answered { job_state }) => job_state != "running",
        (InstanceState::Stopped, Observed::Answered { job_state }) => job_state == "running",
    };
    if state_differs || record.state != desired_state {
        out.insert(Change::State);
    }
    Changes(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{DiskSpec, VmRecord};
    use serde_json::json;

    fn spec() -> AppliedSpec {
        AppliedSpec {
            stemcell: "ubuntu/1.0".into(),
            cloud_properties: json!({"type": "small"}),
            env: json!({}),
            networks: json!({"default": {"ip": "10.0.0.2"}}),
            disks: vec![DiskSpec {
                name: String::new(),
                size_mib: 1024,
                cloud_properties: json!({}),
            }],
            configuration_hash: Some("abc".into()),
            ..AppliedSpec::default()
        }
    }

    fn record() -> InstanceRecord {
        InstanceRecord {
            group: "web".into(),
            index: 0,
            uuid: "u".into(),
            az: None,
            bootstrap: true,
            state: InstanceState::Started,
            update_completed: true,
            vm: Some(VmRecord {
                cid: "vm-1".into(),
                agent_id: "a".into(),
                stemcell: "ubuntu/1.0".into(),
                cloud_properties: json!({"type": "small"}),
                env: json!({}),
                networks: json!({}),
                cpi: None,
            }),
            disks: vec![],
            ips: Default::default(),
            applied: Some(spec()),
            inactive_vm: None,
        }
    }

    fn running() -> Observed {
        Observed::Answered {
            job_state: "running".into(),
        }
    }

    #[test]
    fn an_unchanged_running_instance_has_no_changes() {
        let c = detect(
            &record(),
            &spec(),
            InstanceState::Started,
            &running(),
            Requests::default(),
        );
        assert!(c.is_empty(), "{:?}", c.names());
    }

    #[test]
    fn each_difference_is_named_and_classified() {
        type Edit = Box<dyn Fn(&mut AppliedSpec)>;
        let cases: Vec<(Edit, Change, bool)> = vec![
            (
                Box::new(|s| s.stemcell = "ubuntu/2.0".into()),
                Change::Stemcell,
                true,
            ),
            (
                Box::new(|s| s.cloud_properties = json!({"type": "big"})),
                Change::CloudProperties,
                true,
            ),
            (
                Box::new(|s| s.env = json!({"bosh": {"x": 1}})),
                Change::Env,
                true,
            ),
            (
                Box::new(|s| s.networks = json!({"default": {"ip": "10.0.0.3"}})),
                Change::Network,
                true,
            ),
            (
                Box::new(|s| s.configuration_hash = Some("def".into())),
                Change::Configuration,
                false,
            ),
            (
                Box::new(|s| s.disks[0].size_mib = 2048),
                Change::PersistentDisk,
                false,
            ),
            (Box::new(|s| s.dns = Some("x".into())), Change::Dns, false),
        ];
        for (edit, change, recreates) in cases {
            let mut desired = spec();
            edit(&mut desired);
            let c = detect(
                &record(),
                &desired,
                InstanceState::Started,
                &running(),
                Requests::default(),
            );
            assert_eq!(c.0.iter().copied().collect::<Vec<_>>(), [change]);
            assert_eq!(c.recreates_vm(), recreates, "{change}");
            assert_eq!(c.is_minimal(), change == Change::Dns);
        }
    }

    #[test]
    fn dirty_unresponsive_stopped_and_requests() {
        let mut r = record();
        r.update_completed = false;
        let c = detect(
            &r,
            &spec(),
            InstanceState::Started,
            &running(),
            Requests::default(),
        );
        assert_eq!(c.names(), ["dirty"]);

        let c = detect(
            &record(),
            &spec(),
            InstanceState::Started,
            &Observed::Unresponsive,
            Requests::default(),
        );
        assert_eq!(c.names(), ["recreate", "state"]);

        let failing = Observed::Answered {
            job_state: "failing".into(),
        };
        let c = detect(
            &record(),
            &spec(),
            InstanceState::Started,
            &failing,
            Requests::default(),
        );
        assert_eq!(c.names(), ["state"]);

        let c = detect(
            &record(),
            &spec(),
            InstanceState::Stopped,
            &running(),
            Requests::default(),
        );
        assert_eq!(c.names(), ["state"]);

        let requests = Requests {
            recreate: true,
            restart: true,
            recreate_persistent_disks: true,
            fix: true,
        };
        assert!(requests.asks_for_changes());
        assert!(
            !Requests {
                fix: true,
                ..Requests::default()
            }
            .asks_for_changes(),
            "--fix alone changes nothing"
        );
        let c = detect(
            &record(),
            &spec(),
            InstanceState::Started,
            &running(),
            requests,
        );
        assert_eq!(
            c.names(),
            ["restart", "recreate", "recreate_persistent_disks"]
        );
        assert!(c.recreates_vm());
    }
}
