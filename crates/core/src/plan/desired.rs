//! What each instance group of a validated manifest asks for, resolved against the cloud
//! config and the stemcells at hand: merged cloud properties, stemcell, env, persistent
//! disks, jobs, networks and update settings.

use serde_json::{Map as JsonMap, Value};

use crate::manifest::{
    CloudConfig, DeploymentManifest, InstanceGroup, JobRef, Lifecycle, NetworkRef, Update,
};
use crate::state::DiskSpec;

/// A stemcell the deployment may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StemcellInfo {
    /// `name` from `stemcell.MF`.
    pub name: String,
    /// `version`.
    pub version: String,
    /// `operating_system`.
    pub os: String,
}

impl StemcellInfo {
    /// `name/version`, how the state refers to it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.name, self.version)
    }
}

/// One instance group, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// Name.
    pub name: String,
    /// `instances`.
    pub instances: u64,
    /// `azs`.
    pub azs: Vec<String>,
    /// The stemcell its VMs boot.
    pub stemcell: StemcellInfo,
    /// `vm_type` and `vm_extensions` cloud properties merged (the AZ's are merged per
    /// instance by [`GroupSpec::cloud_properties`]).
    pub vm_cloud_properties: JsonMap<String, Value>,
    /// `vm_resources`, which the CPI turns into cloud properties.
    pub vm_resources: Option<crate::manifest::VmResources>,
    /// `env`.
    pub env: Value,
    /// Persistent disks wanted.
    pub disks: Vec<DiskSpec>,
    /// Jobs.
    pub jobs: Vec<JobRef>,
    /// Networks.
    pub networks: Vec<NetworkRef>,
    /// Update settings, the group's over the deployment's.
    pub update: Update,
    /// An errand group: no VMs are kept for it.
    pub errand: bool,
    /// `migrated_from`: `(group, az)`.
    pub migrated_from: Vec<(String, Option<String>)>,
}

impl GroupSpec {
    /// Cloud properties of an instance in `az`: the AZ's, then the VM type's and extensions'
    /// over them, then `vm_resources` results (`calculated`) when the group uses them.
    pub fn cloud_properties(
        &self,
        cloud: &CloudConfig,
        az: Option<&str>,
        calculated: Option<&JsonMap<String, Value>>,
    ) -> Value {
        let mut out = az
            .and_then(|az| cloud.azs.iter().find(|a| a.name == az))
            .and_then(|a| a.cloud_properties.clone())
            .unwrap_or_default();
        if let Some(calculated) = calculated {
            deep_merge(&mut out, calculated);
        }
        deep_merge(&mut out, &self.vm_cloud_properties);
        Value::Object(out)
    }
}

/// A manifest's group cannot be resolved (validation catches these first; they are here so
/// nothing panics when it did not).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DesiredError {
    /// The group's stemcell alias names no `stemcells` entry.
    #[error("Instance group '{group}' references an unknown stemcell alias '{alias}'")]
    UnknownStemcellAlias {
        /// Group.
        group: String,
        /// Alias.
        alias: String,
    },
    /// No stemcell at hand matches the manifest's.
    #[error("Stemcell '{wanted}' doesn't exist")]
    StemcellMissing {
        /// `os/version` or `name/version` as the manifest has it.
        wanted: String,
    },
    /// The cloud config lacks a named type.
    #[error("Instance group '{group}' references an unknown {kind} '{name}'")]
    UnknownType {
        /// Group.
        group: String,
        /// `vm_type`, `vm_extension` or `disk_type`.
        kind: &'static str,
        /// The name.
        name: String,
    },
}

/// Resolves every instance group of `manifest` (in manifest order).
pub fn groups(
    manifest: &DeploymentManifest,
    cloud: &CloudConfig,
    stemcells: &[StemcellInfo],
) -> Result<Vec<GroupSpec>, Vec<DesiredError>> {
    let base_update = manifest.update.clone().unwrap_or_default();
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for group in &manifest.instance_groups {
        match group_spec(manifest, cloud, stemcells, group, &base_update) {
            Ok(g) => out.push(g),
            Err(mut e) => errors.append(&mut e),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn group_spec(
    manifest: &DeploymentManifest,
    cloud: &CloudConfig,
    stemcells: &[StemcellInfo],
    group: &InstanceGroup,
    base_update: &Update,
) -> Result<GroupSpec, Vec<DesiredError>> {
    let mut errors = Vec::new();
    let stemcell = resolve_stemcell(manifest, stemcells, group).map_err(|e| errors.push(e));
    let mut vm_cloud_properties = JsonMap::new();
    if let Some(name) = &group.vm_type {
        match cloud.vm_types.iter().find(|t| &t.name == name) {
            Some(t) => deep_merge(
                &mut vm_cloud_properties,
                &t.cloud_properties.clone().unwrap_or_default(),
            ),
            None => errors.push(unknown(group, "vm_type", name)),
        }
    }
    for name in &group.vm_extensions {
        match cloud.vm_extensions.iter().find(|t| &t.name == name) {
            Some(t) => deep_merge(
                &mut vm_cloud_properties,
                &t.cloud_properties.clone().unwrap_or_default(),
            ),
            None => errors.push(unknown(group, "vm_extension", name)),
        }
    }
    let mut disks = Vec::new();
    if let Some(size) = group.persistent_disk.filter(|s| *s > 0) {
        disks.push(DiskSpec {
            name: String::new(),
            size_mib: size,
            cloud_properties: Value::Object(JsonMap::new()),
        });
    }
    let mut disk_of_type =
        |name: String, type_name: &str| match cloud.disk_types.iter().find(|t| t.name == type_name)
        {
            Some(t) => disks.push(DiskSpec {
                name,
                size_mib: t.disk_size.unwrap_or(0),
                cloud_properties: Value::Object(t.cloud_properties.clone().unwrap_or_default()),
            }),
            None => errors.push(unknown(group, "disk_type", type_name)),
        };
    if let Some(t) = &group.persistent_disk_type {
        disk_of_type(String::new(), t);
    }
    for d in &group.persistent_disks {
        disk_of_type(d.name.clone(), &d.disk_type);
    }
    let update = group
        .update
        .as_ref()
        .map_or_else(|| base_update.clone(), |u| u.overlaid_on(base_update));
    match stemcell {
        Ok(stemcell) if errors.is_empty() => Ok(GroupSpec {
            name: group.name.clone(),
            instances: group.instances.unwrap_or(0),
            azs: group.azs.clone(),
            stemcell,
            vm_cloud_properties,
            vm_resources: group.vm_resources,
            env: Value::Object(group.env.clone().unwrap_or_default()),
            disks,
            jobs: group.jobs.clone(),
            networks: group.networks.clone(),
            update,
            errand: matches!(group.lifecycle, Some(Lifecycle::Errand)),
            migrated_from: group
                .migrated_from
                .iter()
                .map(|m| (m.name.clone(), m.az.clone()))
                .collect(),
        }),
        _ => Err(errors),
    }
}

fn unknown(group: &InstanceGroup, kind: &'static str, name: &str) -> DesiredError {
    DesiredError::UnknownType {
        group: group.name.clone(),
        kind,
        name: name.to_string(),
    }
}

/// The stemcell a group boots: its alias's `os` (or `name`) and `version` (`latest`: the
/// highest version at hand).
fn resolve_stemcell(
    manifest: &DeploymentManifest,
    stemcells: &[StemcellInfo],
    group: &InstanceGroup,
) -> Result<StemcellInfo, DesiredError> {
    let alias = group.stemcell.clone().unwrap_or_default();
    let entry = manifest
        .stemcells
        .iter()
        .find(|s| s.alias == alias)
        .ok_or_else(|| DesiredError::UnknownStemcellAlias {
            group: group.name.clone(),
            alias: alias.clone(),
        })?;
    let matches = |s: &&StemcellInfo| match (&entry.os, &entry.name) {
        (Some(os), _) => &s.os == os,
        (None, Some(name)) => &s.name == name,
        (None, None) => false,
    };
    let version = entry.version.as_ref().map(|v| v.as_str().to_string());
    let candidates: Vec<&StemcellInfo> = stemcells.iter().filter(matches).collect();
    let found = match version.as_deref() {
        None | Some("latest") => candidates
            .into_iter()
            .max_by(|a, b| compare_versions(&a.version, &b.version)),
        Some(v) => candidates.into_iter().find(|s| s.version == v),
    };
    found.cloned().ok_or_else(|| DesiredError::StemcellMissing {
        wanted: format!(
            "{}/{}",
            entry.os.as_deref().or(entry.name.as_deref()).unwrap_or(""),
            version.as_deref().unwrap_or("latest")
        ),
    })
}

/// Orders dotted versions numerically where both parts are numbers (`621.10 > 621.9`).
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let parts = |v: &str| -> Vec<String> { v.split(['.', '-']).map(String::from).collect() };
    let (pa, pb) = (parts(a), parts(b));
    for (x, y) in pa.iter().zip(pb.iter()) {
        let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            _ => x.cmp(y),
        };
        if ord != std::cmp::Ordering::Equal {
            return ord;
        }
    }
    pa.len().cmp(&pb.len())
}

/// Merges `from` into `into`: objects recursively, anything else replaced (Ruby's
/// `deep_merge`, which the Director uses for VM extensions).
pub fn deep_merge(into: &mut JsonMap<String, Value>, from: &JsonMap<String, Value>) {
    for (k, v) in from {
        match (into.get_mut(k), v) {
            (Some(Value::Object(a)), Value::Object(b)) => deep_merge(a, b),
            _ => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn cloud() -> CloudConfig {
        parse(json!({
            "azs": [{"name": "z1", "cloud_properties": {"zone": "a", "tags": {"x": 1}}}],
            "vm_types": [{"name": "small", "cloud_properties": {"cpu": 1, "tags": {"y": 2}}}],
            "vm_extensions": [{"name": "lb", "cloud_properties": {"tags": {"z": 3}, "lb": "web"}}],
            "disk_types": [{"name": "fast", "disk_size": 2048, "cloud_properties": {"ssd": true}}],
            "networks": [{"name": "default", "subnets": [{"range": "10.0.0.0/24", "gateway": "10.0.0.1", "az": "z1"}]}],
        }))
    }

    fn stemcells() -> Vec<StemcellInfo> {
        ["1.9", "1.10", "1.2"]
            .iter()
            .map(|v| StemcellInfo {
                name: "bosh-local-ubuntu".into(),
                version: v.to_string(),
                os: "ubuntu-jammy".into(),
            })
            .collect()
    }

    #[test]
    fn a_group_resolves_properties_disks_stemcell_and_update() {
        let manifest: DeploymentManifest = parse(json!({
            "name": "d",
            "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "latest"}],
            "update": {"canaries": 1, "max_in_flight": 2, "canary_watch_time": 1000, "update_watch_time": 1000},
            "instance_groups": [{
                "name": "web", "instances": 2, "azs": ["z1"], "vm_type": "small",
                "vm_extensions": ["lb"], "stemcell": "default", "persistent_disk_type": "fast",
                "persistent_disks": [{"name": "logs", "type": "fast"}],
                "networks": [{"name": "default"}], "jobs": [],
                "update": {"max_in_flight": 5},
                "env": {"bosh": {"password": "x"}}
            }]
        }));
        let groups = groups(&manifest, &cloud(), &stemcells()).unwrap();
        let g = &groups[0];
        assert_eq!(g.stemcell.version, "1.10");
        assert_eq!(
            g.cloud_properties(&cloud(), Some("z1"), None),
            json!({"zone": "a", "cpu": 1, "lb": "web", "tags": {"x": 1, "y": 2, "z": 3}})
        );
        assert_eq!(g.disks.len(), 2);
        assert_eq!(g.disks[1].name, "logs");
        assert_eq!(g.disks[1].size_mib, 2048);
        assert_eq!(
            g.update.max_in_flight,
            Some(crate::manifest::Quantity::Count(5))
        );
        assert!(g.update.canaries.is_some());
        assert_eq!(g.env, json!({"bosh": {"password": "x"}}));
    }

    #[test]
    fn every_unresolvable_reference_is_reported() {
        let manifest: DeploymentManifest = parse(json!({
            "name": "d",
            "stemcells": [{"alias": "default", "os": "ubuntu-jammy", "version": "9"}],
            "instance_groups": [
                {"name": "a", "instances": 1, "vm_type": "huge", "stemcell": "default", "networks": [], "jobs": []},
                {"name": "b", "instances": 1, "vm_type": "small", "stemcell": "other", "networks": [], "jobs": []}
            ]
        }));
        let errors: Vec<String> = groups(&manifest, &cloud(), &stemcells())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            [
                "Stemcell 'ubuntu-jammy/9' doesn't exist",
                "Instance group 'a' references an unknown vm_type 'huge'",
                "Instance group 'b' references an unknown stemcell alias 'other'",
            ]
        );
    }
}
