//! `Instance` (`instances.kubosh.io`): one BOSH instance (one VM slot) of a deployment.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One instance of an instance group, created and owned by kubosh: `kubectl get binst` is
/// `bosh instances`.
///
/// Named `<deployment>-<group>-<index>`, owned by its `Deployment`, and labelled
/// [`labels::DEPLOYMENT`](crate::api::labels::DEPLOYMENT),
/// [`labels::INSTANCE_GROUP`](crate::api::labels::INSTANCE_GROUP) and
/// [`labels::INDEX`](crate::api::labels::INDEX) so that `kubectl get binst -l
/// kubosh.io/deployment=zookeeper` selects a deployment's instances.
///
/// The whole spec is written by kubosh, from its record of the instance
/// ([`RECORD_ANNOTATION`]). The identifiers (instance ID, VM CID, agent ID, IPs, disk CIDs)
/// cannot be derived again, so they live in the spec and that annotation, not the status: a
/// status is not kept by backups or by moving resources between clusters, and losing a CID
/// would leak a VM or a disk in the IaaS.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "Instance",
    plural = "instances",
    shortname = "binst",
    category = "bosh",
    namespaced,
    status = "InstanceStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "One instance of a BOSH deployment (a VM running the jobs of its instance group), \
           managed by kubosh. Labelled kubosh.io/deployment, kubosh.io/instance-group and \
           kubosh.io/index.",
    selectable = ".spec.deployment",
    printcolumn(name = "Deployment", type_ = "string", json_path = ".spec.deployment"),
    printcolumn(name = "Group", type_ = "string", json_path = ".spec.instanceGroup"),
    printcolumn(name = "Index", type_ = "integer", json_path = ".spec.index"),
    printcolumn(name = "AZ", type_ = "string", json_path = ".spec.az"),
    printcolumn(
        name = "IP",
        type_ = "string",
        description = "IP on the default gateway network",
        json_path = ".spec.networks[0].ip"
    ),
    printcolumn(name = "VM", type_ = "string", json_path = ".spec.vmCid"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.processState"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "ID", type_ = "string", json_path = ".spec.id", priority = 1),
    printcolumn(
        name = "Desired",
        type_ = "string",
        json_path = ".spec.state",
        priority = 1
    ),
    printcolumn(
        name = "Bootstrap",
        type_ = "boolean",
        json_path = ".spec.bootstrap",
        priority = 1
    ),
    printcolumn(
        name = "Load",
        type_ = "string",
        description = "1-minute load average (status.vitals)",
        json_path = ".status.vitals.load[0]",
        priority = 1
    ),
    printcolumn(
        name = "CPU%",
        type_ = "string",
        description = "CPU time in user space, in percent",
        json_path = ".status.vitals.cpuUser",
        priority = 1
    ),
    printcolumn(
        name = "Mem%",
        type_ = "string",
        description = "Memory used, in percent",
        json_path = ".status.vitals.memoryPercent",
        priority = 1
    ),
    printcolumn(
        name = "Disk%",
        type_ = "string",
        description = "Persistent disk used, in percent",
        json_path = ".status.vitals.disks[?(@.name==\"persistent\")].percent",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InstanceSpec {
    /// Name of the `Deployment` this instance belongs to.
    pub deployment: String,
    /// Name of its instance group in the manifest.
    pub instance_group: String,
    /// Index within the instance group, stable for the instance's life.
    pub index: i32,
    /// BOSH instance ID (a UUID), as in `group/id` and in job templates' `spec.id`.
    pub id: String,
    /// Availability zone, when the instance group has AZs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub az: Option<String>,
    /// The one instance of its group that runs bootstrap-only work (`spec.bootstrap`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bootstrap: bool,
    /// What the instance should be doing: `Started` (the default), `Stopped` (VM kept, jobs
    /// stopped, like `bosh stop`) or `Detached` (VM deleted, disks kept, like `bosh stop
    /// --hard`).
    #[serde(default)]
    pub state: InstanceState,
    /// IaaS identifier of the VM, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_cid: Option<String>,
    /// Identifier the VM's agent answers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The networks the instance joins, with its address on each; the default gateway
    /// network first (its IP is the one `kubectl get` shows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub networks: Vec<InstanceNetwork>,
    /// IaaS identifiers of its persistent disks (see the `Disk` resources).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disk_cids: Vec<String>,
    /// The stemcell (`name/version`) its VM was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stemcell: Option<String>,
}

/// Annotation of an `Instance` with kubosh's own record of it (JSON), the source the spec's
/// fields are copied from: the VM and disks with what they were made with, addresses,
/// whether the last update completed, and what it applied (the baseline of change
/// detection, as the Director's database keeps it). An annotation, not a spec field, so an
/// update that changes only what was applied leaves the `generation` (and the status that
/// observed it) as they are. Written by kubosh; not for editing.
pub const RECORD_ANNOTATION: &str = "kubosh.io/record";

/// The instance's address on one network.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceNetwork {
    /// Network name from the cloud config.
    pub name: String,
    /// The IP address (for a dynamic network, as the agent reported it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
}

/// What an instance should be doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum InstanceState {
    /// VM running, jobs started.
    #[default]
    Started,
    /// VM running, jobs stopped (`bosh stop`).
    Stopped,
    /// No VM; persistent disks kept (`bosh stop --hard`).
    Detached,
}

/// The observed state of an `Instance`, as its agent reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Ready` when the instance is in its desired state with all jobs running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Vec<Condition>,

    /// The jobs' state taken together, as `bosh instances` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_state: Option<ProcessState>,

    /// Each monitored process, as `bosh instances --ps` shows it (refreshed on the
    /// controller's `--instance-details-interval`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub processes: Vec<Process>,

    /// The machine's vitals, as `bosh instances --vitals` shows them (refreshed with the
    /// processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vitals: Option<InstanceVitals>,

    /// When the agent last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Time>,
}

/// The observed state of an instance's jobs, or of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ProcessState {
    /// Everything is running.
    Running,
    /// Something is failing or restarting.
    Failing,
    /// Stopped on purpose.
    Stopped,
    /// The agent does not answer.
    Unresponsive,
    /// The agent answered, but not with a known state.
    Unknown,
}

/// One monitored process of an instance, as its agent last said (`bosh instances --ps`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// Process name (from the jobs' monit files).
    pub name: String,
    /// The agent's word for its state: `running`, `failing`, `starting`, `stopped`, ...
    pub state: String,
    /// How long it has run, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime_seconds: Option<u64>,
    /// Its CPU use, in percent (`"0.3"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<String>,
    /// Its resident memory, in KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_kb: Option<u64>,
    /// Its resident memory, in percent of the machine's (`"1.2"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_percent: Option<String>,
}

/// The machine's vitals, as its agent last said (`bosh instances --vitals`). Percentages
/// and load averages are decimal strings, as the agent sends them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceVitals {
    /// The 1, 5 and 15 minute load averages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load: Vec<String>,
    /// CPU time in user space, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_user: Option<String>,
    /// CPU time in the kernel, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_sys: Option<String>,
    /// CPU time waiting for I/O, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_wait: Option<String>,
    /// Memory used, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_percent: Option<String>,
    /// Memory used, in KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_kb: Option<u64>,
    /// Swap used, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_percent: Option<String>,
    /// Swap used, in KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_kb: Option<u64>,
    /// The machine's uptime, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime_seconds: Option<u64>,
    /// Each disk's use (`system`, `ephemeral`, `persistent`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub disks: Vec<DiskUsage>,
}

/// One disk's use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskUsage {
    /// `system`, `ephemeral` or `persistent`.
    pub name: String,
    /// Space used, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<String>,
    /// Inodes used, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inode_percent: Option<String>,
}

mod agent_words {
    //! The status's processes and vitals from the agent's words (`get_state ["full"]`) and
    //! back (for `kubectl bosh instances`, which prints them as bosh-cli does).

    use kubosh_bosh::agent::protocol::{
        self as wire, CpuVitals, DiskVitals, MemVitals, ProcessCpu, ProcessMem, ProcessUptime,
        UptimeVitals,
    };
    use serde_json::Number;

    use super::{DiskUsage, InstanceVitals, Process};

    /// A wire number as text (`0.3`), as the agent sent it.
    fn text(n: Option<&Number>) -> Option<String> {
        n.map(Number::to_string)
    }

    /// A text back to a wire number.
    fn number(s: Option<&String>) -> Option<Number> {
        let parsed = s?.parse::<f64>().ok()?;
        Number::from_f64(parsed)
    }

    impl From<&wire::Process> for Process {
        fn from(p: &wire::Process) -> Process {
            let mem = p.mem.as_ref();
            Process {
                name: p.name.clone(),
                state: p.state.clone(),
                uptime_seconds: (p.uptime.as_ref())
                    .and_then(|u| u.secs.as_ref())
                    .and_then(|n| n.as_f64())
                    .map(|s| s as u64),
                cpu_percent: text(p.cpu.as_ref().and_then(|c| c.total.as_ref())),
                memory_kb: (mem.and_then(|m| m.kb.as_ref()))
                    .and_then(|n| n.as_f64())
                    .map(|kb| kb as u64),
                memory_percent: text(mem.and_then(|m| m.percent.as_ref())),
            }
        }
    }

    impl Process {
        /// The process in the agent's words.
        pub fn to_wire(&self) -> wire::Process {
            wire::Process {
                name: self.name.clone(),
                state: self.state.clone(),
                uptime: (self.uptime_seconds).map(|s| ProcessUptime {
                    secs: Some(s.into()),
                }),
                mem: (self.memory_kb.is_some() || self.memory_percent.is_some()).then(|| {
                    ProcessMem {
                        kb: self.memory_kb.map(Number::from),
                        percent: number(self.memory_percent.as_ref()),
                    }
                }),
                cpu: (self.cpu_percent.as_ref()).map(|c| ProcessCpu {
                    total: number(Some(c)),
                }),
                extra: serde_json::Map::new(),
            }
        }
    }

    impl From<&wire::Vitals> for InstanceVitals {
        fn from(v: &wire::Vitals) -> InstanceVitals {
            let cpu = v.cpu.as_ref();
            let kb = |m: Option<&MemVitals>| m.and_then(|m| m.kb.as_deref()?.parse().ok());
            InstanceVitals {
                load: v.load.clone().unwrap_or_default(),
                cpu_user: cpu.and_then(|c| c.user.clone()),
                cpu_sys: cpu.and_then(|c| c.sys.clone()),
                cpu_wait: cpu.and_then(|c| c.wait.clone()),
                memory_percent: v.mem.as_ref().and_then(|m| m.percent.clone()),
                memory_kb: kb(v.mem.as_ref()),
                swap_percent: v.swap.as_ref().and_then(|m| m.percent.clone()),
                swap_kb: kb(v.swap.as_ref()),
                uptime_seconds: v.uptime.as_ref().and_then(|u| u.secs),
                disks: (v.disk.iter().flatten())
                    .map(|(name, d)| DiskUsage {
                        name: name.clone(),
                        percent: d.percent.clone(),
                        inode_percent: d.inode_percent.clone(),
                    })
                    .collect(),
            }
        }
    }

    impl InstanceVitals {
        /// The vitals in the agent's words.
        pub fn to_wire(&self) -> wire::Vitals {
            let memory = |percent: &Option<String>, kb: Option<u64>| {
                (percent.is_some() || kb.is_some()).then(|| MemVitals {
                    kb: kb.map(|kb| kb.to_string()),
                    percent: percent.clone(),
                })
            };
            let cpu = CpuVitals {
                sys: self.cpu_sys.clone(),
                user: self.cpu_user.clone(),
                wait: self.cpu_wait.clone(),
            };
            let any_cpu = cpu.sys.is_some() || cpu.user.is_some() || cpu.wait.is_some();
            wire::Vitals {
                cpu: any_cpu.then_some(cpu),
                disk: (!self.disks.is_empty()).then(|| {
                    (self.disks.iter())
                        .map(|d| {
                            let usage = DiskVitals {
                                inode_percent: d.inode_percent.clone(),
                                percent: d.percent.clone(),
                            };
                            (d.name.clone(), usage)
                        })
                        .collect()
                }),
                load: (!self.load.is_empty()).then(|| self.load.clone()),
                mem: memory(&self.memory_percent, self.memory_kb),
                swap: memory(&self.swap_percent, self.swap_kb),
                uptime: self.uptime_seconds.map(|s| UptimeVitals { secs: Some(s) }),
                extra: serde_json::Map::new(),
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_agents_words_survive_the_status() {
            let process: wire::Process = serde_json::from_value(serde_json::json!({
                "name": "hello", "state": "running", "uptime": {"secs": 3725},
                "mem": {"kb": 2048, "percent": 0.4}, "cpu": {"total": 1.5}
            }))
            .unwrap();
            let status = Process::from(&process);
            assert_eq!(status.cpu_percent.as_deref(), Some("1.5"));
            assert_eq!(status.memory_kb, Some(2048));
            let back = status.to_wire();
            assert_eq!(back.uptime, process.uptime);
            assert_eq!(back.cpu, process.cpu);
            assert_eq!(
                back.mem.as_ref().and_then(|m| m.percent.clone()),
                process.mem.as_ref().and_then(|m| m.percent.clone())
            );
            let vitals: wire::Vitals = serde_json::from_value(serde_json::json!({
                "cpu": {"sys": "1.0", "user": "2.5", "wait": "0.1"},
                "disk": {"system": {"percent": "41", "inode_percent": "12"},
                         "ephemeral": {"percent": "3", "inode_percent": "1"}},
                "load": ["0.05", "0.10", "0.20"],
                "mem": {"kb": "1048576", "percent": "12"},
                "swap": {"kb": "0", "percent": "0"},
                "uptime": {"secs": 93784}
            }))
            .unwrap();
            assert_eq!(InstanceVitals::from(&vitals).to_wire(), vitals);
        }
    }
}
