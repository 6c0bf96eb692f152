//! The call log, `<state>/calls.jsonl`: one JSON line per CPI call, arguments redacted the way
//! the director redacts them. Tests read it to assert what the engine asked the cloud for
//! (and that it asked nothing).

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::protocol::ResponseError;

/// One logged call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// When the answer was given (RFC 3339, UTC).
    pub time: String,
    /// The request's `context.request_id` (empty when none was sent).
    pub request_id: String,
    /// The method.
    pub method: String,
    /// The arguments, with credentials replaced by `<redacted>`.
    pub arguments: Vec<Value>,
    /// The request's `api_version`.
    #[serde(default)]
    pub api_version: Option<u32>,
    /// The result, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ResponseError>,
    /// `"fail"` or `"hang"` when a fault switch fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

const FILE: &str = "calls.jsonl";

/// Appends one record (call under the state lock, so lines never interleave).
pub fn append(state_dir: &Path, record: &CallRecord) -> io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
    line.push(b'\n');
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(state_dir.join(FILE))?
        .write_all(&line)
}

/// Every logged call, oldest first (no log: none). A torn last line is skipped.
pub fn read_calls(state_dir: &Path) -> io::Result<Vec<CallRecord>> {
    let text = match std::fs::read_to_string(state_dir.join(FILE)) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}
