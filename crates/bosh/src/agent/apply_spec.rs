//! The apply spec as an agent keeps it (`bosh-protocols.md` §2.5).
//!
//! bosh-agent persists the spec as its typed `V1ApplySpec`: exactly its keys (each job reduced
//! to `name` and `version`, each package to its blob fields, `properties` to
//! `logging.max_log_file_size`), Go's zero values where the director sent nothing (`""`, `0`,
//! `null` for nil maps, slices and pointers), `networks` and `resource_pool` verbatim, and
//! `rendered_templates_archive` null unless it names a blob or a digest. `get_state` reports
//! nil maps as `{}`, then adds the agent's own keys. The director compares what comes back,
//! so kubosh's agent and the simulated one both answer from here.

use serde_json::{Map, Value, json};

fn text(v: &Value) -> Value {
    Value::String(v.as_str().unwrap_or_default().to_string())
}

fn object_or_null(v: &Value) -> Value {
    if v.is_object() {
        v.clone()
    } else {
        Value::Null
    }
}

/// A JSON object of exactly these entries, allocated once (these objects are built for
/// every `apply` and `get_state` of thousands of simulated agents).
fn map<const N: usize>(entries: [(&str, Value); N]) -> Map<String, Value> {
    let mut map = Map::with_capacity(N);
    for (key, value) in entries {
        map.insert(key.to_string(), value);
    }
    map
}

fn object<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Object(map(entries))
}

/// The spec as the agent persists it after `apply`: bosh-agent's typed `V1ApplySpec`
/// (`agent/applier/applyspec`) marshalled.
pub fn persisted(spec: &Value) -> Map<String, Value> {
    let job = &spec["job"];
    let templates = job["templates"].as_array().map(|ts| {
        ts.iter()
            .map(|t| object([("name", text(&t["name"])), ("version", text(&t["version"]))]))
            .collect::<Vec<_>>()
    });
    let packages = spec["packages"].as_object().map(|ps| {
        let mut out = Map::with_capacity(ps.len());
        for (key, p) in ps {
            let headers = p["blobstore_headers"]
                .as_object()
                .map(|h| {
                    h.iter()
                        .map(|(k, v)| (k.clone(), text(v)))
                        .collect::<Map<_, _>>()
                })
                .map_or(Value::Null, Value::Object);
            let package = object([
                ("name", text(&p["name"])),
                ("version", text(&p["version"])),
                ("sha1", text(&p["sha1"])),
                ("blobstore_id", text(&p["blobstore_id"])),
                ("signed_url", text(&p["signed_url"])),
                ("blobstore_headers", headers),
            ]);
            out.insert(key.clone(), package);
        }
        out
    });
    let archive = &spec["rendered_templates_archive"];
    let named = ["blobstore_id", "sha1"]
        .iter()
        .any(|k| archive[k].as_str().is_some_and(|s| !s.is_empty()));
    let archive = if named {
        object([
            ("sha1", text(&archive["sha1"])),
            ("blobstore_id", text(&archive["blobstore_id"])),
        ])
    } else {
        Value::Null
    };
    let max_log_file_size = text(&spec["properties"]["logging"]["max_log_file_size"]);
    map([
        (
            "properties",
            object([(
                "logging",
                object([("max_log_file_size", max_log_file_size)]),
            )]),
        ),
        (
            "job",
            object([
                ("name", json!(job["name"].as_str())),
                ("release", text(&job["release"])),
                ("template", text(&job["template"])),
                ("version", text(&job["version"])),
                ("templates", templates.map_or(Value::Null, Value::Array)),
            ]),
        ),
        ("packages", packages.map_or(Value::Null, Value::Object)),
        ("configuration_hash", text(&spec["configuration_hash"])),
        ("networks", object_or_null(&spec["networks"])),
        ("resource_pool", spec["resource_pool"].clone()),
        ("deployment", text(&spec["deployment"])),
        ("name", text(&spec["name"])),
        ("index", json!(spec["index"].as_i64())),
        ("id", text(&spec["id"])),
        ("az", text(&spec["az"])),
        (
            "persistent_disk",
            json!(spec["persistent_disk"].as_i64().unwrap_or(0)),
        ),
        ("rendered_templates_archive", archive),
    ])
}

/// Dynamic networks get the address the VM actually has (`vm_networks`: its settings'
/// networks), as the agent fills them in on `apply`.
pub fn fill_dynamic_networks(spec: &mut Value, vm_networks: &Map<String, Value>) {
    let Some(networks) = spec.get_mut("networks").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, net) in networks.iter_mut() {
        if net["type"] != "dynamic" {
            continue;
        }
        let Some(actual) = vm_networks.get(name) else {
            continue;
        };
        for key in ["ip", "netmask", "gateway"] {
            if let Some(v) = actual
                .get(key)
                .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            {
                net[key] = v.clone();
            }
        }
    }
}

/// The spec part of a `get_state` value: the persisted spec (`{}` or null: a fresh agent's)
/// with nil `networks`, `resource_pool` and `packages` as `{}` (`get_state.go`), sized for
/// `extra` more keys (the agent's own: `agent_id`, `job_state`, ...).
pub fn state_base(persisted_spec: &Value, extra: usize) -> Map<String, Value> {
    let fresh;
    let base = match persisted_spec.as_object().filter(|m| !m.is_empty()) {
        Some(m) => m,
        None => {
            fresh = persisted(&Value::Null);
            &fresh
        }
    };
    let mut out = Map::with_capacity(base.len() + extra);
    for (key, value) in base {
        let value = match key.as_str() {
            "networks" | "resource_pool" | "packages" if value.is_null() => json!({}),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_persisted_spec_keeps_only_what_the_agent_keeps() {
        let spec = json!({
            "deployment": "d", "name": "web", "index": 0, "id": "uuid-1", "az": null,
            "job": {"name": "web", "templates": [{"name": "nginx", "version": "v1",
                    "sha1": "x", "blobstore_id": "b"}]},
            "packages": {"ruby": {"name": "ruby", "version": "1.1", "sha1": "s",
                    "blobstore_id": "p", "extra": true}},
            "networks": {"n": {"type": "manual", "ip": "10.0.0.5"}},
            "template_hashes": {"nginx": "h"},
            "dns_domain_name": "bosh",
            "configuration_hash": "c",
            "persistent_disk": 1024,
        });
        let p = persisted(&spec);
        assert_eq!(
            p["job"]["templates"],
            json!([{"name": "nginx", "version": "v1"}])
        );
        assert_eq!(p["packages"]["ruby"]["blobstore_headers"], Value::Null);
        assert!(p["packages"]["ruby"].get("extra").is_none());
        assert!(p.get("template_hashes").is_none() && p.get("dns_domain_name").is_none());
        assert_eq!(p["az"], json!(""));
        assert_eq!(p["rendered_templates_archive"], Value::Null);
        assert_eq!(p["persistent_disk"], json!(1024));
    }

    #[test]
    fn a_fresh_agent_reports_empty_maps() {
        let base = state_base(&json!({}), 0);
        assert_eq!(base["networks"], json!({}));
        assert_eq!(base["packages"], json!({}));
        assert_eq!(base["job"]["templates"], Value::Null);
    }
}
