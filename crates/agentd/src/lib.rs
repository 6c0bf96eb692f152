//! The VM side of `kubosh agent`: what the BOSH agent does on a VM, without the message bus.
//!
//! A "VM" of kubosh's local cloud is a directory that plays `/var/vcap` plus the processes
//! started from it. This module is the machinery behind the agent's actions
//! (`bosh-protocols.md` §2.4), with no dependency on NATS or on the protocol types:
//!
//! - [`layout`] computes the `/var/vcap` tree under a configurable base directory.
//! - [`monit`] parses the `monit` files BOSH jobs ship.
//! - [`supervisor`] runs the job processes the way monit does on a BOSH VM, and reports the
//!   `job_state` / `processes` of `get_state`.
//! - [`scripts`] and [`drain`] run lifecycle scripts (`run_script`) and drain scripts
//!   (`drain`).
//! - [`compile`] is `compile_package`.
//! - [`install`] and [`blobs`] install rendered jobs and compiled packages for
//!   `prepare`/`apply`, from the blobs the director stored.
//! - [`disk`] is `add_persistent_disk`, `mount_disk`, `unmount_disk`, `migrate_disk` and
//!   `list_disk`, emulated with directories.
//! - [`isolate`] gives a VM a private `/var/vcap`; [`launcher`] is `kubosh vm run`, the first
//!   process of a VM whose agent is the real bosh-agent (dummy platform), which also makes
//!   that agent's recorded disk mounts and migrations real.

//!
//! Child processes never inherit the agent's environment: they get [`default_env`] plus what
//! the caller adds, so nothing secret the agent holds leaks into job processes.

pub mod blobs;
pub mod compile;
pub mod disk;
pub mod drain;
mod exec;
pub mod install;
pub mod isolate;
pub mod launcher;
pub mod layout;
pub mod mbus;
pub mod monit;
mod proc;
pub mod scripts;
pub mod service;
pub mod settings;
mod ssh;
pub mod supervisor;
pub mod tasks;
pub mod vitals;

use std::collections::BTreeMap;

/// `PATH` for every program the agent starts. The real agent gives scripts
/// `/usr/sbin:/usr/bin:/sbin:/bin` (`agent/script/pathenv`).
pub const DEFAULT_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment every program started by the agent gets before the caller's additions:
/// only `PATH` ([`DEFAULT_PATH`]).
pub fn default_env() -> BTreeMap<String, String> {
    BTreeMap::from([("PATH".to_string(), DEFAULT_PATH.to_string())])
}
