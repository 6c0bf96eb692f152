//! bosh-cli's deployment state file (`<manifest>-state.json`, `bosh-protocols.md` §5.1 and
//! the research notes §1), exactly: the same keys in the same order, 4-space indentation,
//! no trailing newline, Go's HTML escaping, `null` for lists never set (both `null` and `[]`
//! are read), `api_version` left out when 0, unknown keys ignored. So `bosh create-env` and
//! `kubosh create-env` take over each other's state.
//!
//! Every change is one method here; the engine saves the file after each, as bosh-cli's
//! repositories do.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use kubosh_core::manifest::Map;

/// The state of one create-env environment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvState {
    /// Generated on first load; the CPI's `context.director_uuid` and the agent's `reply_to`.
    #[serde(default)]
    pub director_id: String,
    /// Names the local CPI installation directory.
    #[serde(default)]
    pub installation_id: String,
    /// The VM, saved right after `create_vm` answers.
    #[serde(default)]
    pub current_vm_cid: String,
    /// The id of the stemcell record the VM was made from.
    #[serde(default)]
    pub current_stemcell_id: String,
    /// The id of the disk record in use.
    #[serde(default)]
    pub current_disk_id: String,
    /// Ids of the deployed release records (`[]` while a deploy runs).
    #[serde(default)]
    pub current_release_ids: Option<Vec<String>>,
    /// SHA-512 (hex) of the deployed manifest (empty while a deploy runs).
    #[serde(default)]
    pub current_manifest_sha: String,
    /// Persistent disks in the cloud.
    #[serde(default)]
    pub disks: Option<Vec<DiskRecord>>,
    /// Stemcells in the cloud.
    #[serde(default)]
    pub stemcells: Option<Vec<StemcellRecord>>,
    /// The deployed releases.
    #[serde(default)]
    pub releases: Option<Vec<ReleaseRecord>>,
}

/// A persistent disk in the cloud.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskRecord {
    /// kubosh's/bosh-cli's id of the record.
    #[serde(default)]
    pub id: String,
    /// The cloud's id of the disk.
    #[serde(default)]
    pub cid: String,
    /// Size in MiB.
    #[serde(default)]
    pub size: u64,
    /// The IaaS properties it was made with.
    #[serde(default, deserialize_with = "null_as_empty_map")]
    pub cloud_properties: Map,
}

/// A stemcell in the cloud.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StemcellRecord {
    /// The record's id.
    #[serde(default)]
    pub id: String,
    /// `stemcell.MF` name.
    #[serde(default)]
    pub name: String,
    /// `stemcell.MF` version.
    #[serde(default)]
    pub version: String,
    /// `stemcell.MF` `api_version` (left out when 0, as Go's `omitempty`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub api_version: u32,
    /// The cloud's id of the stemcell.
    #[serde(default)]
    pub cid: String,
}

/// A deployed release.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReleaseRecord {
    /// The record's id (new each deploy).
    #[serde(default)]
    pub id: String,
    /// `release.MF` name.
    #[serde(default)]
    pub name: String,
    /// `release.MF` version.
    #[serde(default)]
    pub version: String,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn null_as_empty_map<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Map, D::Error> {
    Ok(Option::<Map>::deserialize(d)?.unwrap_or_default())
}

/// A state file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("the deployment state is not bosh-cli's state file format: {0}")]
pub struct StateFormatError(String);

impl EnvState {
    /// Reads a state file's bytes; an empty file is an empty state (as bosh-cli reads one).
    pub fn from_bytes(bytes: &[u8]) -> Result<EnvState, StateFormatError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(EnvState::default());
        }
        serde_json::from_slice(bytes).map_err(|e| StateFormatError(e.to_string()))
    }

    /// The file's bytes as bosh-cli writes them (`json.MarshalIndent(state, "", "    ")`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
        // Serializing plain strings, numbers and maps cannot fail.
        let _ = self.serialize(&mut ser);
        go_html_escape(&out)
    }

    /// The record the VM was made from.
    pub fn current_stemcell(&self) -> Option<&StemcellRecord> {
        if self.current_stemcell_id.is_empty() {
            return None;
        }
        self.stemcells
            .iter()
            .flatten()
            .find(|s| s.id == self.current_stemcell_id)
    }

    /// The stemcell record with this name and version.
    pub fn stemcell(&self, name: &str, version: &str) -> Option<&StemcellRecord> {
        self.stemcells
            .iter()
            .flatten()
            .find(|s| s.name == name && s.version == version)
    }

    /// The disk in use.
    pub fn current_disk(&self) -> Option<&DiskRecord> {
        if self.current_disk_id.is_empty() {
            return None;
        }
        self.disks
            .iter()
            .flatten()
            .find(|d| d.id == self.current_disk_id)
    }

    /// Every disk CID, as `create_vm`'s `disk_cids` carries them.
    pub fn disk_cids(&self) -> Vec<String> {
        self.disks.iter().flatten().map(|d| d.cid.clone()).collect()
    }

    /// Disks other than the current one.
    pub fn unused_disks(&self) -> Vec<DiskRecord> {
        self.disks
            .iter()
            .flatten()
            .filter(|d| d.id != self.current_disk_id)
            .cloned()
            .collect()
    }

    /// Stemcells other than the current one.
    pub fn unused_stemcells(&self) -> Vec<StemcellRecord> {
        self.stemcells
            .iter()
            .flatten()
            .filter(|s| s.id != self.current_stemcell_id)
            .cloned()
            .collect()
    }

    /// Adds a disk record (right after `create_disk`).
    pub fn add_disk(&mut self, disk: DiskRecord) {
        self.disks.get_or_insert_with(Vec::new).push(disk);
    }

    /// Removes a disk record (after `delete_disk`); the current disk id goes with it.
    pub fn remove_disk(&mut self, id: &str) {
        if let Some(disks) = &mut self.disks {
            disks.retain(|d| d.id != id);
        }
        if self.current_disk_id == id {
            self.current_disk_id.clear();
        }
    }

    /// Adds a stemcell record (right after `create_stemcell`).
    pub fn add_stemcell(&mut self, stemcell: StemcellRecord) {
        self.stemcells.get_or_insert_with(Vec::new).push(stemcell);
    }

    /// Removes a stemcell record (after `delete_stemcell`); the current id goes with it.
    pub fn remove_stemcell(&mut self, id: &str) {
        if let Some(stemcells) = &mut self.stemcells {
            stemcells.retain(|s| s.id != id);
        }
        if self.current_stemcell_id == id {
            self.current_stemcell_id.clear();
        }
    }

    /// The VM is gone (`delete_vm` answered, or it was not found).
    pub fn forget_vm(&mut self) {
        self.current_vm_cid.clear();
        self.current_stemcell_id.clear();
    }

    /// A deploy starts: nothing counts as deployed until it ends (bosh-cli's `Record.Clear`).
    pub fn start_deploy(&mut self) {
        self.current_manifest_sha.clear();
        self.current_release_ids = Some(Vec::new());
        self.releases = Some(Vec::new());
    }

    /// A deploy ended: the manifest's digest and the releases, each with a new record id
    /// (bosh-cli's `Record.Update`).
    pub fn finish_deploy(&mut self, manifest_sha: &str, releases: Vec<ReleaseRecord>) {
        self.current_release_ids = Some(releases.iter().map(|r| r.id.clone()).collect());
        self.releases = Some(releases);
        self.current_manifest_sha = manifest_sha.to_string();
    }

    /// bosh-cli's `IsDeployed`: the stored digest equals `manifest_sha`, the current stemcell
    /// record has the tarball's name and version, and the stored releases are the manifest's
    /// (same count, each found by name and version). The VM, its agent and the disk are not
    /// looked at.
    pub fn is_deployed(
        &self,
        manifest_sha: &str,
        releases: &[(String, String)],
        stemcell: (&str, &str),
    ) -> bool {
        if self.current_manifest_sha.is_empty() || self.current_manifest_sha != manifest_sha {
            return false;
        }
        let Some(current) = self.current_stemcell() else {
            return false;
        };
        if current.name != stemcell.0 || current.version != stemcell.1 {
            return false;
        }
        let stored = self.releases.as_deref().unwrap_or_default();
        !stored.is_empty()
            && stored.len() == releases.len()
            && releases
                .iter()
                .all(|(n, v)| stored.iter().any(|r| &r.name == n && &r.version == v))
    }
}

/// Go's `encoding/json` escapes `<`, `>`, `&`, U+2028 and U+2029 inside strings; outside
/// strings JSON has none of them, so replacing every occurrence is exact.
fn go_html_escape(json: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(json);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.into_bytes()
}

/// Canonical JSON of a value (keys sorted at every level), as Go marshals a map; used to
/// compare cloud properties as bosh-cli does.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A state file as bosh-cli v7 writes it after a first deploy.
    const BOSH_CLI_STATE: &str = r#"{
    "director_id": "d1",
    "installation_id": "i1",
    "current_vm_cid": "vm-1",
    "current_stemcell_id": "s1",
    "current_disk_id": "k1",
    "current_release_ids": [
        "r1",
        "r2"
    ],
    "current_manifest_sha": "abc",
    "disks": [
        {
            "id": "k1",
            "cid": "disk-1",
            "size": 65536,
            "cloud_properties": {}
        }
    ],
    "stemcells": [
        {
            "id": "s1",
            "name": "bosh-warden-boshlite-ubuntu-noble",
            "version": "1.484",
            "api_version": 3,
            "cid": "stemcell-1"
        }
    ],
    "releases": [
        {
            "id": "r1",
            "name": "bosh",
            "version": "282.1.6"
        },
        {
            "id": "r2",
            "name": "cpi",
            "version": "1"
        }
    ]
}"#;

    #[test]
    fn a_bosh_cli_state_file_round_trips_byte_for_byte() {
        let state = EnvState::from_bytes(BOSH_CLI_STATE.as_bytes()).unwrap();
        assert_eq!(state.current_disk().unwrap().cid, "disk-1");
        assert_eq!(state.current_stemcell().unwrap().api_version, 3);
        assert_eq!(String::from_utf8(state.to_bytes()).unwrap(), BOSH_CLI_STATE);
    }

    #[test]
    fn a_fresh_state_has_nulls_and_reads_them_back() {
        let state = EnvState {
            director_id: "d".into(),
            ..EnvState::default()
        };
        let text = String::from_utf8(state.to_bytes()).unwrap();
        assert_eq!(
            text,
            "{\n    \"director_id\": \"d\",\n    \"installation_id\": \"\",\n    \"current_vm_cid\": \"\",\n    \"current_stemcell_id\": \"\",\n    \"current_disk_id\": \"\",\n    \"current_release_ids\": null,\n    \"current_manifest_sha\": \"\",\n    \"disks\": null,\n    \"stemcells\": null,\n    \"releases\": null\n}"
        );
        assert_eq!(EnvState::from_bytes(text.as_bytes()).unwrap(), state);
        let empty_lists = text.replace("null", "[]");
        let read = EnvState::from_bytes(empty_lists.as_bytes()).unwrap();
        assert_eq!(read.disks, Some(vec![]));
        assert!(read.current_disk().is_none());
        // Unknown keys are ignored; an empty file is an empty state.
        let read = EnvState::from_bytes(br#"{"director_id": "x", "future": 1}"#).unwrap();
        assert_eq!(read.director_id, "x");
        assert_eq!(EnvState::from_bytes(b"").unwrap(), EnvState::default());
    }

    #[test]
    fn api_version_zero_is_left_out_and_html_is_escaped_as_go_does() {
        let mut state = EnvState::default();
        state.add_stemcell(StemcellRecord {
            id: "s".into(),
            name: "a<b>&c".into(),
            version: "1".into(),
            api_version: 0,
            cid: "c".into(),
        });
        let text = String::from_utf8(state.to_bytes()).unwrap();
        assert!(!text.contains("api_version"));
        assert!(
            text.contains(r#""name": "a\u003cb\u003e\u0026c""#),
            "{text}"
        );
        let read = EnvState::from_bytes(text.as_bytes()).unwrap();
        assert_eq!(read.stemcells.unwrap()[0].name, "a<b>&c");
    }

    #[test]
    fn is_deployed_needs_sha_stemcell_and_every_release() {
        let state = EnvState::from_bytes(BOSH_CLI_STATE.as_bytes()).unwrap();
        let releases = vec![
            ("cpi".to_string(), "1".to_string()),
            ("bosh".to_string(), "282.1.6".to_string()),
        ];
        let stemcell = ("bosh-warden-boshlite-ubuntu-noble", "1.484");
        assert!(state.is_deployed("abc", &releases, stemcell));
        assert!(!state.is_deployed("abd", &releases, stemcell));
        assert!(!state.is_deployed("abc", &releases[..1], stemcell));
        assert!(!state.is_deployed(
            "abc",
            &releases,
            ("bosh-warden-boshlite-ubuntu-noble", "1.485")
        ));
        let mut running = state.clone();
        running.start_deploy();
        assert!(!running.is_deployed("", &releases, stemcell));
        assert!(!running.is_deployed("abc", &releases, stemcell));
        let mut no_vm = state.clone();
        no_vm.forget_vm();
        assert!(!no_vm.is_deployed("abc", &releases, stemcell));
    }

    #[test]
    fn records_come_and_go_with_their_current_ids() {
        let mut state = EnvState::from_bytes(BOSH_CLI_STATE.as_bytes()).unwrap();
        state.add_disk(DiskRecord {
            id: "k2".into(),
            cid: "disk-2".into(),
            size: 1,
            cloud_properties: Map::new(),
        });
        assert_eq!(state.disk_cids(), ["disk-1", "disk-2"]);
        assert_eq!(state.unused_disks().len(), 1);
        state.remove_disk("k1");
        assert_eq!(state.current_disk_id, "");
        assert_eq!(state.unused_disks()[0].cid, "disk-2");
        state.remove_stemcell("s1");
        assert_eq!(state.current_stemcell_id, "");
        assert_eq!(state.stemcells, Some(vec![]));
        state.finish_deploy(
            "sha",
            vec![ReleaseRecord {
                id: "n".into(),
                name: "x".into(),
                version: "1".into(),
            }],
        );
        assert_eq!(state.current_release_ids, Some(vec!["n".to_string()]));
        assert_eq!(
            canonical_json(&json!({"b": {"d": 1, "c": 2}, "a": [ {"z": 1, "y": 2} ]})),
            r#"{"a":[{"y":2,"z":1}],"b":{"c":2,"d":1}}"#
        );
    }
}
