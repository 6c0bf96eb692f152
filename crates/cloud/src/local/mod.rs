//! The local cloud: kubosh's own CPI (`kubosh cpi`), a real CPI executable whose "VMs" are
//! directories with a detached agent process, whose disks are directories, and whose state
//! lives in one state directory ([`store`] describes the layout).
//!
//! Any BOSH director or `bosh create-env` can use it: one JSON request on stdin, one JSON
//! response on stdout ([`serve`]). Tests get fault switches ([`Faults`]), a call log
//! ([`read_calls`]) and an [`inventory`] for leak checks.
//!
//! Deviations from IaaS CPIs, all deliberate: a VM's agent settings are a file the agent reads
//! with its `File` settings source (and `attach_disk` keeps `disks.persistent` in it up to
//! date); the disk hint is `{"path": "<the disk's data directory>"}`; the network methods
//! answer `NotImplemented`. Four extensions: `kubosh_find_disk(request_id)`,
//! `kubosh_find_snapshot(request_id)` and `kubosh_find_stemcell(request_id)` answer the disk,
//! snapshot or stemcell a `create_disk`, `snapshot_disk` or `create_stemcell` with that
//! `context.request_id` made, `kubosh_find_vm(agent_id)` the VM made for that agent (or null),
//! so a director killed before the cloud answered can find what it made.

mod calls;
mod config;
mod disks;
mod dummy;
mod faults;
mod inventory;
mod process;
mod settings;
mod stemcells;
pub mod store;
mod vms;

use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use super::protocol::{self, Response};
use crate::ErrorKind;

pub use calls::{CallRecord, read_calls};
pub use config::{AgentConfig, CONFIG_KEYS, Config, ConfigError};
pub use faults::{Fault, FaultError, Faults, Hang};
pub use inventory::{DiskEntry, Inventory, SnapshotEntry, StemcellEntry, VmEntry, inventory};
pub use vms::{BootError, boot_stopped_vms, kill_agent, set_agent_frozen, stop_all_agents};

use store::Store;

/// A failed method: the error object of the response.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub kind: ErrorKind,
    pub message: String,
    pub ok_to_retry: bool,
}

impl Failure {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
            ok_to_retry: false,
        }
    }

    pub fn cloud(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::CloudError, message)
    }

    fn into_response(self) -> Response {
        Response::err(self.kind.type_name(), self.message, self.ok_to_retry)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::cloud(format!("local cloud I/O error: {e}"))
    }
}

/// Positional arguments of one call, with typed access and clear errors.
pub struct Args<'a> {
    method: &'a str,
    values: &'a [Value],
}

impl<'a> Args<'a> {
    fn bad(&self, index: usize, name: &str, expected: &str) -> Failure {
        Failure::new(
            ErrorKind::CpiError,
            format!(
                "{}: argument {} ({name}) must be {expected}",
                self.method,
                index + 1
            ),
        )
    }

    pub fn string(&self, index: usize, name: &str) -> Result<&'a str, Failure> {
        self.values
            .get(index)
            .and_then(Value::as_str)
            .ok_or_else(|| self.bad(index, name, "a string"))
    }

    pub fn opt_string(&self, index: usize, name: &str) -> Result<Option<&'a str>, Failure> {
        match self.values.get(index) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.bad(index, name, "a string or null")),
        }
    }

    /// An object; `null` or a missing argument is an empty one.
    pub fn object(&self, index: usize, name: &str) -> Result<Map<String, Value>, Failure> {
        match self.values.get(index) {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(m)) => Ok(m.clone()),
            Some(_) => Err(self.bad(index, name, "an object")),
        }
    }

    pub fn size(&self, index: usize, name: &str) -> Result<u64, Failure> {
        self.values
            .get(index)
            .and_then(Value::as_u64)
            .ok_or_else(|| self.bad(index, name, "a non-negative integer (MiB)"))
    }

    /// A list of strings; `null` or a missing argument is an empty one.
    pub fn strings(&self, index: usize, name: &str) -> Result<Vec<String>, Failure> {
        match self.values.get(index) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad(index, name, "an array of strings")),
            Some(_) => Err(self.bad(index, name, "an array of strings")),
        }
    }
}

/// One open cloud: configuration and state directory.
pub struct Local {
    pub config: Config,
    pub store: Store,
    /// Whether answers use API v2 shapes (the request asked for v2 and `info` offers it).
    pub v2: bool,
    /// The request's `context.request_id` (`create_disk` records it with the disk).
    pub request_id: String,
}

/// Answers one CPI request (the bytes read from stdin). Never panics and always answers:
/// malformed input gets a `Bosh::Clouds::CpiError` response, as the Go CPI library does.
///
/// `config_file` is the local cloud's configuration file; the request's context may
/// override any of its keys (see [`Config`]).
pub fn serve(input: &[u8], config_file: Option<&Path>) -> Response {
    std::panic::catch_unwind(|| serve_request(input, config_file)).unwrap_or_else(|_| {
        Response::err(
            ErrorKind::CpiError.type_name(),
            "internal error in the local CPI (see stderr)",
            false,
        )
    })
}

fn serve_request(input: &[u8], config_file: Option<&Path>) -> Response {
    let cpi_error = |message: &str| Response::err(ErrorKind::CpiError.type_name(), message, false);
    let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(input) else {
        return cpi_error("Must provide valid JSON payload");
    };
    let Some(method) = request.get("method").and_then(Value::as_str) else {
        return cpi_error("Must provide 'method' key");
    };
    let Some(arguments) = request.get("arguments").and_then(Value::as_array) else {
        return cpi_error("Must provide 'arguments' key");
    };
    let empty = Map::new();
    let context = request
        .get("context")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let api_version = request
        .get("api_version")
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok());
    let request_id = context
        .get("request_id")
        .and_then(Value::as_str)
        .unwrap_or_default();

    let config = match Config::load(config_file, context) {
        Ok(config) => config,
        Err(e) => return cpi_error(&e.to_string()),
    };
    let store = match Store::open(&config.state_dir) {
        Ok(store) => store,
        Err(e) => {
            return Failure::cloud(format!(
                "cannot open state directory {}: {e}",
                config.state_dir.display()
            ))
            .into_response();
        }
    };
    let v2 = api_version.unwrap_or(1) >= 2 && config.api_version >= 2;
    let local = Local {
        config,
        store,
        v2,
        request_id: request_id.to_string(),
    };
    eprintln!("kubosh cpi: {method} (request {request_id})");
    local.call(method, arguments, api_version, request_id)
}

impl Local {
    fn call(
        &self,
        method: &str,
        arguments: &[Value],
        api_version: Option<u32>,
        request_id: &str,
    ) -> Response {
        let (redacted, _) = protocol::redact_arguments(method, arguments);
        let mut record = CallRecord {
            time: String::new(),
            request_id: request_id.to_string(),
            method: method.to_string(),
            arguments: redacted,
            api_version,
            result: None,
            error: None,
            fault: None,
        };

        // Without a faults file there is nothing to count down: skip the lock.
        let fired = if self.store.root().join(faults::FILE).exists() {
            self.store
                .lock()
                .and_then(|_lock| faults::fire(&self.store, method))
        } else {
            Ok(None)
        };
        let outcome = match fired {
            Err(e) => Err(Failure::from(e)),
            Ok(Some(faults::Fired::Fail(error))) => {
                record.fault = Some("fail".into());
                Err(Failure {
                    kind: ErrorKind::from_type_name(&error.error_type),
                    message: error.message,
                    ok_to_retry: error.ok_to_retry,
                })
            }
            Ok(Some(faults::Fired::Hang(seconds))) => {
                record.fault = Some("hang".into());
                self.log_call(&record);
                eprintln!("kubosh cpi: {method}: hanging (fault switch)");
                match seconds {
                    Some(s) if s.is_finite() && s >= 0.0 => {
                        std::thread::sleep(Duration::from_secs_f64(s.min(1e9)));
                    }
                    _ => loop {
                        std::thread::sleep(Duration::from_secs(3600));
                    },
                }
                record.fault = None;
                self.dispatch(method, arguments)
            }
            Ok(None) => self.dispatch(method, arguments),
        };

        let response = match outcome {
            Ok(result) => {
                record.result = Some(redact_result(method, &result));
                Response::ok(result)
            }
            Err(failure) => {
                eprintln!(
                    "kubosh cpi: {method}: {}: {}",
                    failure.kind, failure.message
                );
                let response = failure.into_response();
                record.error = response.error.clone();
                response
            }
        };
        self.log_call(&record);
        response
    }

    fn log_call(&self, record: &CallRecord) {
        let mut record = record.clone();
        record.time = store::now_rfc3339();
        let logged = self
            .store
            .lock()
            .and_then(|_lock| calls::append(self.store.root(), &record));
        if let Err(e) = logged {
            eprintln!("kubosh cpi: cannot write the call log: {e}");
        }
    }

    fn dispatch(&self, method: &str, values: &[Value]) -> Result<Value, Failure> {
        let args = Args { method, values };
        match method {
            "info" => Ok(serde_json::json!({
                "api_version": self.config.api_version,
                "stemcell_formats": self.config.stemcell_formats,
            })),
            "create_stemcell" => self.create_stemcell(&args),
            "delete_stemcell" => self.delete_stemcell(&args),
            "create_vm" => self.create_vm(&args),
            "delete_vm" => self.delete_vm(&args),
            "has_vm" => self.has_vm(&args),
            "reboot_vm" => self.reboot_vm(&args),
            "set_vm_metadata" => self.set_vm_metadata(&args),
            "calculate_vm_cloud_properties" => self.calculate_vm_cloud_properties(&args),
            "create_disk" => self.create_disk(&args),
            "delete_disk" => self.delete_disk(&args),
            "has_disk" => self.has_disk(&args),
            "attach_disk" => self.attach_disk(&args),
            "detach_disk" => self.detach_disk(&args),
            "get_disks" => self.get_disks(&args),
            "resize_disk" => self.resize_disk(&args),
            "update_disk" => self.update_disk(&args),
            "set_disk_metadata" => self.set_disk_metadata(&args),
            "snapshot_disk" => self.snapshot_disk(&args),
            "delete_snapshot" => self.delete_snapshot(&args),
            crate::FIND_DISK => self.find_disk(&args),
            crate::FIND_VM => self.find_vm(&args),
            crate::FIND_SNAPSHOT => self.find_snapshot(&args),
            crate::FIND_STEMCELL => self.find_stemcell(&args),
            _ => Err(Failure::new(
                ErrorKind::NotImplemented,
                format!("Must call implemented method: Unknown method '{method}'"),
            )),
        }
    }
}

/// A result as the call log keeps it: `create_vm`'s networks get their `cloud_properties`
/// redacted like the arguments'.
fn redact_result(method: &str, result: &Value) -> Value {
    let mut result = result.clone();
    if method == "create_vm"
        && let Some(networks) = result.get_mut(1)
    {
        let args = [Value::Null, Value::Null, Value::Null, networks.clone()];
        let (redacted, _) = protocol::redact_arguments(method, &args);
        if let Some(r) = redacted.into_iter().nth(3) {
            *networks = r;
        }
    }
    result
}
