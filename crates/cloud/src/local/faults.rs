//! Fault switches for tests: `<state>/faults.json` makes methods fail or hang, and new agents
//! start frozen (SIGSTOP) to play unresponsive VMs. Freezing one existing VM's agent is a VM
//! operation (`vms.rs`).
//!
//! ```json
//! {"methods": {
//!    "create_vm": {"times": 2, "fail": {"type": "Bosh::Clouds::VMCreationFailed",
//!                                       "message": "no capacity", "ok_to_retry": true}},
//!    "has_vm":    {"hang": {"seconds": null}}},
//!  "start_agents_frozen": false}
//! ```
//!
//! A fault with `times` fires that many times and is then removed; without it, it fires on
//! every call. A hang sleeps for `seconds` (forever when null) before answering normally —
//! the caller is expected to time out.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::store::{Store, read_json, write_json};
use crate::ErrorKind;

/// The fault switches of one state directory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Faults {
    /// Method name ⇒ its fault.
    #[serde(default)]
    pub methods: BTreeMap<String, Fault>,
    /// Start agents (create_vm, reboot_vm) frozen: the VM exists but its agent never answers.
    #[serde(default)]
    pub start_agents_frozen: bool,
}

/// What happens to calls of one method.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// How many calls it affects; unlimited when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
    /// Answer with this error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail: Option<FaultError>,
    /// Sleep before answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang: Option<Hang>,
}

/// An injected error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultError {
    /// Error type, e.g. `Bosh::Clouds::VMCreationFailed`.
    #[serde(rename = "type")]
    pub error_type: String,
    /// Message.
    #[serde(default)]
    pub message: String,
    /// `ok_to_retry` of the answer.
    #[serde(default)]
    pub ok_to_retry: bool,
}

/// An injected hang.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Hang {
    /// How long; forever when absent.
    #[serde(default)]
    pub seconds: Option<f64>,
}

impl Fault {
    /// Fails every call with `kind`.
    pub fn fail(kind: ErrorKind, message: impl Into<String>, ok_to_retry: bool) -> Fault {
        Fault {
            times: None,
            fail: Some(FaultError {
                error_type: kind.type_name().to_string(),
                message: message.into(),
                ok_to_retry,
            }),
            hang: None,
        }
    }

    /// Hangs every call forever.
    pub fn hang() -> Fault {
        Fault {
            times: None,
            fail: None,
            hang: Some(Hang::default()),
        }
    }

    /// Limits the fault to the next `n` calls.
    pub fn times(mut self, n: u32) -> Fault {
        self.times = Some(n);
        self
    }
}

/// What the dispatcher must do for one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Fired {
    Fail(FaultError),
    Hang(Option<f64>),
}

pub const FILE: &str = "faults.json";

impl Faults {
    /// Reads `<state_dir>/faults.json` (no file: no faults).
    pub fn load(state_dir: &Path) -> io::Result<Faults> {
        Ok(read_json(&state_dir.join(FILE))?.unwrap_or_default())
    }

    /// Replaces `<state_dir>/faults.json` (atomically, under the state lock).
    pub fn save(&self, state_dir: &Path) -> io::Result<()> {
        let store = Store::open(state_dir)?;
        let _lock = store.lock()?;
        write_json(&state_dir.join(FILE), self)
    }

    /// Removes every fault.
    pub fn clear(state_dir: &Path) -> io::Result<()> {
        Faults::default().save(state_dir)
    }
}

/// Takes the fault for `method`, if any, counting it down (call under the lock).
pub fn fire(store: &Store, method: &str) -> io::Result<Option<Fired>> {
    let path = store.root().join(FILE);
    let Some(mut faults) = read_json::<Faults>(&path)? else {
        return Ok(None);
    };
    let Some(fault) = faults.methods.get_mut(method) else {
        return Ok(None);
    };
    let fired = if let Some(error) = &fault.fail {
        Fired::Fail(error.clone())
    } else if let Some(hang) = &fault.hang {
        Fired::Hang(hang.seconds)
    } else {
        return Ok(None);
    };
    if let Some(times) = &mut fault.times {
        *times = times.saturating_sub(1);
        if *times == 0 {
            faults.methods.remove(method);
        }
        write_json(&path, &faults)?;
    }
    Ok(Some(fired))
}

/// Whether new agents start frozen.
pub fn start_frozen(store: &Store) -> bool {
    read_json::<Faults>(&store.root().join(FILE))
        .ok()
        .flatten()
        .is_some_and(|f| f.start_agents_frozen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_faults_run_out() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut faults = Faults::default();
        faults.methods.insert(
            "create_vm".into(),
            Fault::fail(ErrorKind::VmCreationFailed, "no capacity", true).times(2),
        );
        faults.methods.insert("has_vm".into(), Fault::hang());
        faults.save(dir.path()).unwrap();
        for _ in 0..2 {
            assert!(matches!(
                fire(&store, "create_vm").unwrap(),
                Some(Fired::Fail(FaultError {
                    ok_to_retry: true,
                    ..
                }))
            ));
        }
        assert_eq!(fire(&store, "create_vm").unwrap(), None);
        assert_eq!(fire(&store, "has_vm").unwrap(), Some(Fired::Hang(None)));
        assert_eq!(fire(&store, "has_vm").unwrap(), Some(Fired::Hang(None)));
        assert_eq!(fire(&store, "delete_vm").unwrap(), None);
    }

    #[test]
    fn the_file_format_is_plain_json() {
        let f: Faults = serde_json::from_str(
            r#"{"methods": {"create_vm": {"times": 1, "fail": {"type": "X", "message": "m"}}}}"#,
        )
        .unwrap();
        assert_eq!(
            f.methods["create_vm"].fail.as_ref().unwrap().error_type,
            "X"
        );
        assert!(!f.start_agents_frozen);
    }
}
