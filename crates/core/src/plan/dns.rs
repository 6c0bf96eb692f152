//! The local DNS records dataset (`bosh-protocols.md` §4.10) that agents write to
//! `instance/dns/records.json`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::links::canonicalize;
pub use crate::state::DnsInstance;

/// The record keys, in the order of each `record_infos` row.
pub const RECORD_KEYS: [&str; 13] = [
    "id",
    "num_id",
    "instance_group",
    "group_ids",
    "az",
    "az_id",
    "network",
    "network_id",
    "deployment",
    "ip",
    "domain",
    "agent_id",
    "instance_index",
];

/// The records of one deployment, without the version (which the publisher assigns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Records {
    /// `[ip, name]` pairs.
    pub records: Vec<(String, String)>,
    /// One row per instance and network, in [`RECORD_KEYS`] order.
    pub record_infos: Vec<Vec<Value>>,
}

impl Records {
    /// The blob agents download, as JSON text with `version`.
    pub fn blob(&self, version: u64) -> String {
        json!({
            "records": self.records,
            "version": version,
            "record_keys": RECORD_KEYS,
            "record_infos": self.record_infos,
            "aliases": {},
        })
        .to_string()
    }

    /// A digest of the records alone (publishing is skipped when it did not change).
    pub fn digest(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        hex(&Sha256::digest(text.as_bytes()))
    }
}

/// The digest of one instance's own records (its `dns` change detection input).
pub fn instance_digest(deployment: &str, root: &str, inst: &DnsInstance) -> String {
    let names: Vec<(String, String)> = inst
        .addresses
        .iter()
        .map(|(net, ip)| {
            (
                ip.clone(),
                name(&inst.uuid, &inst.group, net, deployment, root),
            )
        })
        .collect();
    hex(&Sha256::digest(
        serde_json::to_string(&names).unwrap_or_default().as_bytes(),
    ))
}

/// The records of one deployment's `instances`: [`records_of_all`] with that deployment alone.
pub fn records(
    deployment: &str,
    root: &str,
    include_index: bool,
    instances: &[DnsInstance],
) -> Records {
    let one = BTreeMap::from([(deployment.to_string(), instances.to_vec())]);
    records_of_all(root, include_index, &one)
}

/// The records of every deployment's instances (sorted by deployment, group and index): the
/// one dataset all agents of all deployments share (§4.10), with index-based names too when
/// `include_index`. Group ids number `(deployment, group)` pairs, AZ and network ids the
/// names, in order of appearance (1-based), so a group's id is unique across deployments.
pub fn records_of_all(
    root: &str,
    include_index: bool,
    deployments: &BTreeMap<String, Vec<DnsInstance>>,
) -> Records {
    let mut sorted: Vec<(&str, &DnsInstance)> = deployments
        .iter()
        .flat_map(|(d, instances)| instances.iter().map(move |i| (d.as_str(), i)))
        .collect();
    sorted.sort_by(|(da, a), (db, b)| (da, &a.group, a.index).cmp(&(db, &b.group, b.index)));
    let mut groups: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut azs: BTreeMap<&str, u64> = BTreeMap::new();
    let mut networks: BTreeMap<&str, u64> = BTreeMap::new();
    fn next_id<K: Ord>(map: &mut BTreeMap<K, u64>, key: K) -> u64 {
        let n = map.len() as u64 + 1;
        *map.entry(key).or_insert(n)
    }
    let mut out = Records {
        records: Vec::new(),
        record_infos: Vec::new(),
    };
    for (num, (deployment, inst)) in sorted.iter().enumerate() {
        let deployment = *deployment;
        let group_id = next_id(&mut groups, (deployment, inst.group.as_str()));
        let az_id = inst.az.as_deref().map(|az| next_id(&mut azs, az));
        for (net, ip) in &inst.addresses {
            let network_id = next_id(&mut networks, net.as_str());
            out.records.push((
                ip.clone(),
                name(&inst.uuid, &inst.group, net, deployment, root),
            ));
            if include_index {
                out.records.push((
                    ip.clone(),
                    name(&inst.index.to_string(), &inst.group, net, deployment, root),
                ));
            }
            out.record_infos.push(vec![
                json!(inst.uuid),
                json!((num + 1).to_string()),
                json!(inst.group),
                json!([group_id.to_string()]),
                json!(inst.az),
                json!(az_id.map(|n| n.to_string())),
                json!(net),
                json!(network_id.to_string()),
                json!(deployment),
                json!(ip),
                json!(root),
                json!(inst.agent_id),
                json!(inst.index),
            ]);
        }
    }
    out
}

/// `<id>.<group>.<network>.<deployment>.<root>`, each label canonicalized.
fn name(id: &str, group: &str, network: &str, deployment: &str, root: &str) -> String {
    let label = |s: &str| canonicalize(s).unwrap_or_else(|_| s.to_lowercase());
    format!(
        "{}.{}.{}.{}.{root}",
        label(id),
        label(group),
        label(network),
        label(deployment)
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(group: &str, index: u64, ip: &str) -> DnsInstance {
        DnsInstance {
            uuid: format!("uuid-{group}-{index}"),
            index,
            group: group.into(),
            az: Some("z1".into()),
            addresses: vec![("default".into(), ip.into())],
            agent_id: Some(format!("agent-{index}")),
        }
    }

    #[test]
    fn the_blob_has_the_directors_shape() {
        let r = records(
            "dep1",
            "bosh",
            true,
            &[
                inst("web_server", 1, "10.0.0.6"),
                inst("web_server", 0, "10.0.0.5"),
            ],
        );
        let blob: Value = serde_json::from_str(&r.blob(42)).unwrap();
        assert_eq!(blob["version"], 42);
        assert_eq!(
            blob["records"][0],
            json!(["10.0.0.5", "uuid-web-server-0.web-server.default.dep1.bosh"])
        );
        assert_eq!(
            blob["records"][1],
            json!(["10.0.0.5", "0.web-server.default.dep1.bosh"])
        );
        assert_eq!(blob["record_keys"].as_array().unwrap().len(), 13);
        assert_eq!(
            blob["record_infos"][0],
            json!([
                "uuid-web_server-0",
                "1",
                "web_server",
                ["1"],
                "z1",
                "1",
                "default",
                "1",
                "dep1",
                "10.0.0.5",
                "bosh",
                "agent-0",
                0
            ])
        );
        assert_eq!(blob["aliases"], json!({}));
    }

    #[test]
    fn digests_follow_the_records() {
        let a = records("d", "bosh", false, &[inst("web", 0, "10.0.0.5")]);
        let b = records("d", "bosh", false, &[inst("web", 0, "10.0.0.6")]);
        assert_ne!(a.digest(), b.digest());
        assert_eq!(
            a.digest(),
            records("d", "bosh", false, &[inst("web", 0, "10.0.0.5")]).digest()
        );
        let i = inst("web", 0, "10.0.0.5");
        assert_eq!(
            instance_digest("d", "bosh", &i),
            instance_digest("d", "bosh", &i)
        );
    }

    #[test]
    fn every_deployment_shares_one_dataset_with_group_ids_unique_across_them() {
        let all = BTreeMap::from([
            ("b-dep".to_string(), vec![inst("web", 0, "10.0.1.5")]),
            (
                "a-dep".to_string(),
                vec![inst("web", 0, "10.0.0.5"), inst("db", 0, "10.0.0.6")],
            ),
        ]);
        let r = records_of_all("bosh", false, &all);
        let names: Vec<&str> = r.records.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "uuid-db-0.db.default.a-dep.bosh",
                "uuid-web-0.web.default.a-dep.bosh",
                "uuid-web-0.web.default.b-dep.bosh"
            ]
        );
        let group_ids: Vec<&Value> = r.record_infos.iter().map(|row| &row[3]).collect();
        assert_eq!(group_ids, [&json!(["1"]), &json!(["2"]), &json!(["3"])]);
        let num_ids: Vec<&Value> = r.record_infos.iter().map(|row| &row[1]).collect();
        assert_eq!(num_ids, [&json!("1"), &json!("2"), &json!("3")]);
        // One deployment alone is the same as `records` of it.
        let one = BTreeMap::from([("a-dep".to_string(), vec![inst("web", 0, "10.0.0.5")])]);
        assert_eq!(
            records_of_all("bosh", false, &one),
            records("a-dep", "bosh", false, &[inst("web", 0, "10.0.0.5")])
        );
    }
}
