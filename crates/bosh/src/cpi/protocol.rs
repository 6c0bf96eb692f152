//! The CPI wire format (`bosh-protocols.md` §1.2–1.3), shared by the client
//! ([`ExternalCpi`](super::ExternalCpi)) and kubosh's own CPI ([`local`](super::local)).
//!
//! Field names and order follow the director (`external_cpi.rb`): the request is
//! `{"method", "arguments", "context", "api_version"}` with `api_version` left out when not yet
//! negotiated; the context is `{"director_uuid", "request_id", "vm"?, ...CPI properties}`; the
//! response is `{"result", "error", "log"}` with `"error": null` on success.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One CPI call as written on the CPI's stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The method name, e.g. `create_vm`.
    pub method: String,
    /// Positional arguments (`bosh-protocols.md` §1.6).
    pub arguments: Vec<Value>,
    /// `director_uuid`, `request_id`, optional `vm.stemcell.api_version`, then every CPI
    /// property at top level.
    pub context: Map<String, Value>,
    /// The CPI contract version the caller wants; absent before negotiation (`info`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<u32>,
}

/// Builds a request context the way the director does: `director_uuid`, `request_id`, then
/// `vm: {stemcell: {api_version}}` when the stemcell's API version is known, then the CPI's
/// properties merged at top level (a property with the same name as one of the keys above
/// replaces its value in place, as Ruby's `Hash#merge!` does).
pub fn context(
    director_uuid: &str,
    request_id: &str,
    stemcell_api_version: Option<u32>,
    properties: &Map<String, Value>,
) -> Map<String, Value> {
    let mut context = Map::new();
    context.insert("director_uuid".into(), director_uuid.into());
    context.insert("request_id".into(), request_id.into());
    if let Some(version) = stemcell_api_version {
        context.insert(
            "vm".into(),
            serde_json::json!({"stemcell": {"api_version": version}}),
        );
    }
    for (key, value) in properties {
        context.insert(key.clone(), value.clone());
    }
    context
}

/// One CPI answer as read from the CPI's stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The method's result; `null` when `error` is set.
    #[serde(default)]
    pub result: Value,
    /// The error, or `null` on success.
    #[serde(default)]
    pub error: Option<ResponseError>,
    /// Free-form log text the director appends to the task's CPI log.
    #[serde(default)]
    pub log: String,
}

impl Response {
    /// A successful answer.
    pub fn ok(result: Value) -> Self {
        Response {
            result,
            error: None,
            log: String::new(),
        }
    }

    /// A failed answer.
    pub fn err(error_type: &str, message: impl Into<String>, ok_to_retry: bool) -> Self {
        Response {
            result: Value::Null,
            error: Some(ResponseError {
                error_type: error_type.to_string(),
                message: message.into(),
                ok_to_retry,
            }),
            log: String::new(),
        }
    }
}

/// The `error` object of a response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseError {
    /// The Ruby class name, e.g. `Bosh::Clouds::VMNotFound` (see [`ErrorKind`](super::ErrorKind)).
    #[serde(rename = "type")]
    pub error_type: String,
    /// Human-readable message.
    pub message: String,
    /// Whether the caller may retry the same call.
    #[serde(default)]
    pub ok_to_retry: bool,
}

/// The arguments with credentials replaced by `"<redacted>"`, the way the director logs them
/// (`external_cpi.rb#redact_arguments`): for `create_vm`, every `env` key but `bosh`, every
/// `env.bosh` key but `group`, `groups` and `tags`, every value of `cloud_properties` and of
/// each network's `cloud_properties`; for `create_disk`, every value of `cloud_properties`.
///
/// Also returns the strings that were removed, so free-form text (stderr, `log`) can be
/// scrubbed of them.
pub fn redact_arguments(method: &str, arguments: &[Value]) -> (Vec<Value>, Vec<String>) {
    let mut args = arguments.to_vec();
    let mut removed = Vec::new();
    fn redact_all_but(value: &mut Value, keep: &[&str], removed: &mut Vec<String>) {
        if let Value::Object(map) = value {
            for (key, v) in map.iter_mut() {
                if !keep.contains(&key.as_str()) {
                    kubosh_base::secret::collect_strings(v, removed);
                    *v = Value::String("<redacted>".into());
                }
            }
        }
    }
    match method {
        "create_vm" => {
            if let Some(env) = args.get_mut(5) {
                redact_all_but(env, &["bosh"], &mut removed);
                if let Some(bosh) = env.get_mut("bosh") {
                    redact_all_but(bosh, &["group", "groups", "tags"], &mut removed);
                }
            }
            if let Some(Value::Object(networks)) = args.get_mut(3) {
                for network in networks.values_mut() {
                    if let Some(cp) = network.get_mut("cloud_properties") {
                        redact_all_but(cp, &[], &mut removed);
                    }
                }
            }
            if let Some(cp) = args.get_mut(2) {
                redact_all_but(cp, &[], &mut removed);
            }
        }
        "create_disk" => {
            if let Some(cp) = args.get_mut(1) {
                redact_all_but(cp, &[], &mut removed);
            }
        }
        _ => {}
    }
    (args, removed)
}

/// Every method name of CPI API v2 (`bosh-protocols.md` §1.6), in the table's order.
pub const METHODS: &[&str] = &[
    "info",
    "create_stemcell",
    "delete_stemcell",
    "create_vm",
    "delete_vm",
    "has_vm",
    "reboot_vm",
    "set_vm_metadata",
    "set_disk_metadata",
    "create_disk",
    "delete_disk",
    "attach_disk",
    "detach_disk",
    "has_disk",
    "get_disks",
    "resize_disk",
    "update_disk",
    "snapshot_disk",
    "delete_snapshot",
    "calculate_vm_cloud_properties",
    "create_network",
    "delete_network",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_matches_the_directors_key_order_and_omits_unknown_api_version() {
        let mut props = Map::new();
        props.insert("region".into(), "r1".into());
        props.insert("request_id".into(), "overridden".into());
        let req = Request {
            method: "has_vm".into(),
            arguments: vec![json!("vm-1")],
            context: context("dir-1", "cpi-123456", Some(3), &props),
            api_version: None,
        };
        assert_eq!(
            serde_json::to_string(&req).unwrap(),
            r#"{"method":"has_vm","arguments":["vm-1"],"context":{"director_uuid":"dir-1","request_id":"overridden","vm":{"stemcell":{"api_version":3}},"region":"r1"}}"#
        );
    }

    #[test]
    fn response_writes_a_null_error_on_success() {
        assert_eq!(
            serde_json::to_string(&Response::ok(json!(["i-1", {}]))).unwrap(),
            r#"{"result":["i-1",{}],"error":null,"log":""}"#
        );
        assert_eq!(
            serde_json::to_string(&Response::err("Bosh::Clouds::VMNotFound", "gone", false))
                .unwrap(),
            r#"{"result":null,"error":{"type":"Bosh::Clouds::VMNotFound","message":"gone","ok_to_retry":false},"log":""}"#
        );
    }

    #[test]
    fn redaction_follows_the_director() {
        let args = vec![
            json!("agent"),
            json!("sc"),
            json!({"instance_type": "m5.large", "key": "AKIA1234"}),
            json!({"private": {"ip": "10.0.0.6", "cloud_properties": {"subnet": "subnet-secret"}}}),
            json!(["disk-1"]),
            json!({"bosh": {"group": "d-dep-web", "groups": ["d"], "tags": {"t": "v"},
                "password": "hash-secret", "mbus": {"cert": {"private_key": "PEM-secret"}}},
                "other": "top-secret"}),
        ];
        let (redacted, removed) = redact_arguments("create_vm", &args);
        assert_eq!(
            redacted,
            vec![
                json!("agent"),
                json!("sc"),
                json!({"instance_type": "<redacted>", "key": "<redacted>"}),
                json!({"private": {"ip": "10.0.0.6", "cloud_properties": {"subnet": "<redacted>"}}}),
                json!(["disk-1"]),
                json!({"bosh": {"group": "d-dep-web", "groups": ["d"], "tags": {"t": "v"},
                    "password": "<redacted>", "mbus": "<redacted>"}, "other": "<redacted>"}),
            ]
        );
        for s in [
            "AKIA1234",
            "subnet-secret",
            "hash-secret",
            "PEM-secret",
            "top-secret",
        ] {
            assert!(removed.iter().any(|r| r == s), "{s} in {removed:?}");
        }
        let (disk, _) =
            redact_arguments("create_disk", &[json!(10), json!({"k": "v"}), json!(null)]);
        assert_eq!(disk[1], json!({"k": "<redacted>"}));
        let (other, removed) = redact_arguments("has_vm", &[json!("vm-1")]);
        assert_eq!(other, vec![json!("vm-1")]);
        assert!(removed.is_empty());
    }
}
