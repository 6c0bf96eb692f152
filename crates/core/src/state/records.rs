//! The records the engine keeps between deploys. They are plain data (serde), written one
//! record at a time, so a crash between two writes leaves every record whole.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use serde_json::json;

/// Everything the engine knows of one deployment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeploymentState {
    /// Instances by uuid.
    pub instances: BTreeMap<String, InstanceRecord>,
    /// Cloud creations started and not yet settled, by intent id.
    pub intents: BTreeMap<String, Intent>,
    /// Disks no instance uses any more, kept for the operator, by CID.
    pub orphaned_disks: BTreeMap<String, OrphanedDisk>,
    /// Compiled packages, by [`CompiledPackage::key`].
    pub compiled_packages: BTreeMap<String, CompiledPackage>,
    /// Stemcells uploaded to the cloud, by `name/version`.
    pub stemcells: BTreeMap<String, StemcellRecord>,
    /// Deployment-wide facts.
    pub meta: DeploymentMeta,
}

impl DeploymentState {
    /// Applies one write, as a store does.
    pub fn apply(&mut self, write: &Write) {
        match write {
            Write::Instance(r) => {
                self.instances.insert(r.uuid.clone(), (**r).clone());
            }
            Write::DeleteInstance(uuid) => {
                self.instances.remove(uuid);
            }
            Write::Intent(r) => {
                self.intents.insert(r.id.clone(), r.clone());
            }
            Write::DeleteIntent(id) => {
                self.intents.remove(id);
            }
            Write::OrphanedDisk(r) => {
                self.orphaned_disks.insert(r.disk.cid.clone(), r.clone());
            }
            Write::DeleteOrphanedDisk(cid) => {
                self.orphaned_disks.remove(cid);
            }
            Write::CompiledPackage(r) => {
                self.compiled_packages
                    .insert(compiled_package_key(r), r.clone());
            }
            Write::Stemcell(r) => {
                self.stemcells.insert(r.key(), r.clone());
            }
            Write::DeleteStemcell(key) => {
                self.stemcells.remove(key);
            }
            Write::Meta(m) => self.meta = m.clone(),
        }
    }

    /// Marks as not completed every instance whose update [`DeploymentMeta::updating`]
    /// announced and whose record does not show it done (its applied spec is not the one
    /// announced): a run stopped mid-update leaves those dirty, as the Director's
    /// `update_completed = false` does, while the ones it finished stay clean.
    pub fn mark_unfinished_updates(&mut self) {
        for (uuid, target) in &self.meta.updating {
            let Some(record) = self.instances.get_mut(uuid) else {
                continue;
            };
            let done = record
                .applied
                .as_ref()
                .is_some_and(|applied| &applied.digest() == target);
            if !done {
                record.update_completed = false;
            }
        }
    }
}

/// One change to a [`DeploymentState`]; a store makes each durable on its own.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Insert or replace an instance (boxed: it is by far the biggest record).
    Instance(Box<InstanceRecord>),
    /// Forget an instance (by uuid).
    DeleteInstance(String),
    /// Insert or replace an intent.
    Intent(Intent),
    /// Settle an intent (by id).
    DeleteIntent(String),
    /// Insert or replace an orphaned disk.
    OrphanedDisk(OrphanedDisk),
    /// Forget an orphaned disk (by CID), after it was deleted or re-used.
    DeleteOrphanedDisk(String),
    /// Insert or replace a compiled package.
    CompiledPackage(CompiledPackage),
    /// Insert or replace a stemcell.
    Stemcell(StemcellRecord),
    /// Forget a stemcell (by `name/version`).
    DeleteStemcell(String),
    /// Replace the deployment-wide facts.
    Meta(DeploymentMeta),
}

/// What the engine wants an instance's processes to be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceState {
    /// Jobs running (`bosh start`, the default).
    #[default]
    Started,
    /// Jobs stopped, VM kept (`bosh stop`).
    Stopped,
    /// Jobs stopped, VM deleted, disks kept (`bosh stop --hard`).
    Detached,
}

impl InstanceState {
    /// The state's name, as the Director names it (`started`, `stopped`, `detached`).
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Started => "started",
            InstanceState::Stopped => "stopped",
            InstanceState::Detached => "detached",
        }
    }
}

/// One instance of an instance group: its identity, its VM and disks, and what was last
/// applied to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// The instance group.
    pub group: String,
    /// Index in the group; never reused while the instance exists.
    pub index: u64,
    /// Immutable identity.
    pub uuid: String,
    /// Availability zone, when the group has AZs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub az: Option<String>,
    /// The group's bootstrap instance.
    #[serde(default)]
    pub bootstrap: bool,
    /// Desired process state.
    #[serde(default)]
    pub state: InstanceState,
    /// False from the start of an update until it finished; a false value makes the next
    /// deploy redo the instance (`dirty`).
    #[serde(default)]
    pub update_completed: bool,
    /// The active VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmRecord>,
    /// Active persistent disks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<DiskRecord>,
    /// IP reservations, by network name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ips: BTreeMap<String, IpRecord>,
    /// What the last completed update installed: the baseline of change detection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<AppliedSpec>,
    /// The instance's second VM while `vm_strategy: create-swap-delete` replaces its VM:
    /// the one made ahead, or the one the swap replaced (see [`InactiveVm`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactive_vm: Option<InactiveVm>,
}

impl InstanceRecord {
    /// `group/uuid`, how BOSH addresses an instance.
    pub fn name(&self) -> String {
        format!("{}/{}", self.group, self.uuid)
    }

    /// `group/uuid (index)`, how BOSH names an instance in messages.
    pub fn display_name(&self) -> String {
        format!("{}/{} ({})", self.group, self.uuid, self.index)
    }
}

/// A VM the cloud made for an instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmRecord {
    /// The cloud's id of the VM.
    pub cid: String,
    /// The agent id, a new uuid per VM.
    pub agent_id: String,
    /// Stemcell `name/version` it was made from.
    pub stemcell: String,
    /// Merged cloud properties it was made with.
    #[serde(default)]
    pub cloud_properties: Value,
    /// The group's `env` it was made with.
    #[serde(default)]
    pub env: Value,
    /// Network settings it was made with (by network name), dynamic addresses as the agent
    /// reported them.
    #[serde(default)]
    pub networks: Value,
    /// The CPI that made it (`None`: the director's own), from its AZ's `cpi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpi: Option<String>,
}

/// An instance's VM that is not (or no longer) the active one, with the addresses it holds:
/// with `vm_strategy: create-swap-delete` an instance has two VMs for a while (the
/// Director's `vms` rows with `active = false`). It never has a disk attached: the disks
/// leave the old VM before the swap is recorded and reach the new one after it. The
/// addresses count as the instance's reservations until the VM is gone, so they are
/// released only then. Recovery deletes it, whichever it is: a VM made ahead ran no job
/// (the next deploy makes another if it still needs one), and a replaced one is done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InactiveVm {
    /// The VM.
    pub vm: VmRecord,
    /// Whether it is the instance's next VM or its previous one.
    pub role: VmRole,
    /// The addresses it holds, by network name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ips: BTreeMap<String, IpRecord>,
}

/// What an [`InactiveVm`] is to its instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VmRole {
    /// Made ahead ("Creating missing vms"), with new addresses; becomes the active VM when
    /// the instance's update swaps.
    Next,
    /// The VM the swap replaced; deleted once the instance runs on its new VM.
    Previous,
}

impl InstanceRecord {
    /// The agent ids of every VM the instance has: the active one, then the inactive one.
    pub fn agent_ids(&self) -> impl Iterator<Item = &str> {
        (self.vm.iter())
            .chain(self.inactive_vm.iter().map(|i| &i.vm))
            .map(|vm| vm.agent_id.as_str())
    }

    /// Every address the instance holds: its own, then its inactive VM's.
    pub fn held_ips(&self) -> impl Iterator<Item = (&String, &IpRecord)> {
        self.ips
            .iter()
            .chain(self.inactive_vm.iter().flat_map(|i| i.ips.iter()))
    }
}

/// A persistent disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskRecord {
    /// The cloud's id of the disk.
    pub cid: String,
    /// The disk's name (`""` for the group's unnamed `persistent_disk`).
    #[serde(default)]
    pub name: String,
    /// Size in MiB.
    pub size_mib: u64,
    /// Cloud properties it was made with.
    #[serde(default)]
    pub cloud_properties: Value,
    /// CIDs of the snapshots taken of it, oldest first. They stay with the disk: an orphaned
    /// disk keeps them, and deleting it deletes them first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<String>,
    /// The CPI that made it (`None`: the director's own), from its AZ's `cpi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpi: Option<String>,
}

impl DiskRecord {
    /// The agent manages it (the group's unnamed `persistent_disk`): it is mounted at
    /// `/var/vcap/store` and migrated on a change. Named disks are only attached and handed
    /// to the jobs through the agent's disk associations (the Director's `managed?`).
    pub fn is_managed(&self) -> bool {
        self.name.is_empty()
    }
}

/// An IP address held by an instance on one network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpRecord {
    /// The address.
    pub ip: String,
    /// A `static_ips` address (as opposed to one picked from the range).
    #[serde(default)]
    pub is_static: bool,
}

/// Everything change detection compares (`bosh-protocols.md` §4.3), as last applied.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AppliedSpec {
    /// Stemcell `name/version`.
    pub stemcell: String,
    /// Merged cloud properties.
    #[serde(default)]
    pub cloud_properties: Value,
    /// The group's `env`.
    #[serde(default)]
    pub env: Value,
    /// Network settings by network name (what was sent to the CPI and agent).
    #[serde(default)]
    pub networks: Value,
    /// Persistent disks wanted: name, size, cloud properties.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<DiskSpec>,
    /// Jobs as `(release, name, fingerprint)`, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobVersion>,
    /// Packages installed, by name: version and the compiled package's sha1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub packages: BTreeMap<String, PackageVersion>,
    /// The rendered templates' configuration hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration_hash: Option<String>,
    /// Hash of this instance's DNS records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<String>,
    /// Deployment tags.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub tags: Value,
    /// SHA-1 of the director's trusted certificates the VM was given (`update_settings`);
    /// none when the director has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_certs: Option<String>,
}

impl AppliedSpec {
    /// Its digest, the same whether its `env` is sealed (as stores keep it) or not.
    pub fn digest(&self) -> String {
        let mut sealed = self.clone();
        sealed.env = kubosh_base::secret::seal(&sealed.env);
        let value = serde_json::to_value(&sealed).unwrap_or(Value::Null);
        kubosh_base::secret::digest(&value)
    }
}

/// A persistent disk as the manifest wants it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskSpec {
    /// `""` for the unnamed disk.
    pub name: String,
    /// Size in MiB.
    pub size_mib: u64,
    /// Cloud properties (from the disk type).
    pub cloud_properties: Value,
}

/// A job of an instance, identified the way the Director compares them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobVersion {
    /// Job name.
    pub name: String,
    /// Release name.
    pub release: String,
    /// The job's fingerprint (its version).
    pub version: String,
}

/// A package installed on an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageVersion {
    /// The version sent to the agent.
    pub version: String,
    /// The compiled package's sha1 (or multi-digest).
    pub sha1: String,
    /// Blob id of the compiled package.
    pub blobstore_id: String,
}

/// A cloud creation recorded before it is asked for, so a crash between the call and
/// recording its result can be repaired (`bosh-protocols.md` §4 "Nothing lost, nothing
/// leaked").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    /// Unique id; also sent as the CPI `request_id` of the create call.
    pub id: String,
    /// What is being created.
    pub kind: IntentKind,
    /// The CID, recorded right after the call returned, until the owner record carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cid: Option<String>,
    /// The CPI called (`None`: the director's own): where recovery looks for what it made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpi: Option<String>,
}

/// What an [`Intent`] creates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum IntentKind {
    /// A VM for an instance (or a compilation worker when `instance` is `None`). The agent id
    /// finds it again: its agent answers `get_state` with the VM's CID.
    CreateVm {
        /// The instance uuid.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<String>,
        /// The new VM's agent id.
        agent_id: String,
    },
    /// Deleting an instance's VM: recorded before `delete_vm`, settled once the instance
    /// record no longer names the VM, so a killed run never leaves a record of a VM that is
    /// gone.
    DeleteVm {
        /// The instance uuid.
        instance: String,
        /// The VM's CID.
        vm: String,
    },
    /// A persistent disk for an instance.
    CreateDisk {
        /// The instance uuid.
        instance: String,
        /// The disk's name.
        name: String,
    },
    /// A snapshot of a disk: kept when the disk's record (an instance's or an orphan's) lists
    /// the snapshot CID, deleted otherwise.
    SnapshotDisk {
        /// The disk's CID.
        disk: String,
    },
    /// A stemcell uploaded to the cloud.
    CreateStemcell {
        /// `name/version`.
        stemcell: String,
    },
}

/// A disk no instance uses any more. The cloud disk is kept; the operator may delete it or
/// attach it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrphanedDisk {
    /// The disk.
    pub disk: DiskRecord,
    /// `group/uuid` of the instance that had it.
    pub instance: String,
    /// That instance's index: an instance at the same index of the same group gets the
    /// disk back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// The disk's availability zone (that of the instance that had it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub az: Option<String>,
    /// When it was orphaned (RFC 3339).
    pub orphaned_at: String,
}

/// The key a [`CompiledPackage`] is stored under: `(package, fingerprint, os, stemcell
/// version, dependency key)`.
pub fn compiled_package_key(p: &CompiledPackage) -> String {
    format!(
        "{}/{}/{}/{}/{}/{}",
        p.name, p.version, p.fingerprint, p.stemcell_os, p.stemcell_version, p.dependency_key
    )
}

/// A stemcell the cloud holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StemcellRecord {
    /// Stemcell name.
    pub name: String,
    /// Stemcell version.
    pub version: String,
    /// Operating system.
    pub os: String,
    /// The cloud's id of it.
    pub cid: String,
    /// The CPI holding it (`None`: the director's own): a stemcell is uploaded once per CPI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpi: Option<String>,
}

impl StemcellRecord {
    /// `name/version`.
    pub fn stemcell(&self) -> String {
        format!("{}/{}", self.name, self.version)
    }

    /// What it is stored under: [`stemcell_key`] of `name/version` and its CPI.
    pub fn key(&self) -> String {
        stemcell_key(&self.stemcell(), self.cpi.as_deref())
    }
}

/// The key of stemcell `name_version` (`name/version`) in the cloud of CPI `cpi`: the
/// stemcell itself for the director's own CPI, `name/version@cpi` for a named one.
pub fn stemcell_key(name_version: &str, cpi: Option<&str>) -> String {
    match cpi {
        None => name_version.to_string(),
        Some(cpi) => format!("{name_version}@{cpi}"),
    }
}

/// Deployment-wide facts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeploymentMeta {
    /// Version of the last DNS records blob published.
    #[serde(default)]
    pub dns_version: u64,
    /// Blob id of that DNS records blob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_blob: Option<String>,
    /// Digest of the records in it (publishing is skipped while it holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_records: Option<String>,
    /// Digest of the inputs of the last deploy that completed; equal inputs and healthy
    /// agents make a deploy a no-op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_inputs: Option<String>,
    /// The ids of link groups (`<name>-<type>`) in `.bosh/links.json`: given once and kept,
    /// as the Director's `local_dns_encoded_groups` rows are, so a provider that comes or
    /// goes does not renumber the others (and restart their instances).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub link_group_ids: BTreeMap<String, u64>,
    /// Instances a deploy is updating, by uuid, each with the [`AppliedSpec::digest`] of
    /// what its update installs: written once before a rollout instead of marking every
    /// record not completed, so an instance's update costs one record write. See
    /// [`DeploymentState::mark_unfinished_updates`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub updating: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_records_without_snapshots_read_and_write_as_before() {
        let old =
            serde_json::json!({"cid": "d-1", "name": "", "size_mib": 10, "cloud_properties": {}});
        let disk: DiskRecord = serde_json::from_value(old.clone()).unwrap();
        assert!(disk.snapshots.is_empty());
        assert_eq!(serde_json::to_value(&disk).unwrap(), old);
        let with = DiskRecord {
            snapshots: vec!["s-1".into()],
            ..disk
        };
        let back: DiskRecord =
            serde_json::from_value(serde_json::to_value(&with).unwrap()).unwrap();
        assert_eq!(back, with);
    }

    fn updated(uuid: &str, applied: AppliedSpec) -> InstanceRecord {
        InstanceRecord {
            group: "web".into(),
            index: 0,
            uuid: uuid.into(),
            az: None,
            bootstrap: false,
            state: InstanceState::Started,
            update_completed: true,
            vm: None,
            disks: vec![],
            ips: BTreeMap::new(),
            applied: Some(applied),
            inactive_vm: None,
        }
    }

    #[test]
    fn an_announced_update_is_unfinished_until_its_record_shows_it_applied() {
        let old = AppliedSpec {
            stemcell: "s/1".into(),
            env: json!({"bosh": {"password": "secret"}}),
            ..AppliedSpec::default()
        };
        let new = AppliedSpec {
            configuration_hash: Some("new".into()),
            ..old.clone()
        };
        let mut state = DeploymentState::default();
        // "a" finished (its record holds the new spec, env sealed as stores keep it), "b"
        // did not start or stopped half-way, "c" was not part of the update.
        let mut sealed = new.clone();
        sealed.env = kubosh_base::secret::seal(&sealed.env);
        state.instances.insert("a".into(), updated("a", sealed));
        state
            .instances
            .insert("b".into(), updated("b", old.clone()));
        state.instances.insert("c".into(), updated("c", old));
        state.meta.updating = BTreeMap::from([
            ("a".to_string(), new.digest()),
            ("b".to_string(), new.digest()),
            ("gone".to_string(), new.digest()),
        ]);
        state.mark_unfinished_updates();
        assert!(state.instances["a"].update_completed);
        assert!(!state.instances["b"].update_completed);
        assert!(state.instances["c"].update_completed);
    }
}

/// A package compiled for one stemcell, stored in the blobstore: what the state store keeps
/// and what compilation produces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledPackage {
    /// Package name.
    pub name: String,
    /// Package version.
    pub version: String,
    /// Fingerprint of the package source.
    pub fingerprint: String,
    /// Stemcell operating system (`ubuntu-jammy`).
    pub stemcell_os: String,
    /// Stemcell version (`1.500`).
    pub stemcell_version: String,
    /// The Director's dependency key ([`dependency_key`]): compiled against other
    /// dependency versions, the same package is another record.
    pub dependency_key: String,
    /// The Director's build number, per package and stemcell: agents see the version
    /// `<version>.<build>`.
    #[serde(default = "first_build")]
    pub build: u64,
    /// Blob id of the compiled tarball.
    pub blob_id: String,
    /// Digest of the compiled tarball (sha1 hex, or a multi-digest).
    pub sha1: String,
}

fn first_build() -> u64 {
    1
}

impl CompiledPackage {
    /// The version agents are told: `<version>.<build>`.
    pub fn agent_version(&self) -> String {
        format!("{}.{}", self.version, self.build)
    }

    /// The entry of the apply spec's `packages` map (and of `compile_package`'s dependency
    /// map): `{name, version: "<version>.<build>", sha1, blobstore_id}`, as the Director
    /// sends it (§2.5). Signed URLs, when used, are added by the engine.
    pub fn apply_spec_entry(&self) -> Value {
        json!({
            "name": self.name,
            "version": self.agent_version(),
            "sha1": self.sha1,
            "blobstore_id": self.blob_id,
        })
    }
}
