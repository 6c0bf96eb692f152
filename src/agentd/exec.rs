//! Running programs the way the agent does: a clean environment, no stdin, a process group of
//! their own (so the whole tree can be signalled), and termination (TERM, grace period, KILL).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::Command;

use super::proc;

/// A command with the agent's conventions: `env` only, stdin from `/dev/null`, working
/// directory `/`, its own process group, killed if the handle is dropped.
pub(crate) fn command(program: impl AsRef<OsStr>, env: &BTreeMap<String, String>) -> Command {
    let mut c = Command::new(program);
    c.env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .current_dir("/")
        .process_group(0)
        .kill_on_drop(true);
    c
}

/// SIGTERM to a process group, up to `grace` for it to go, then SIGKILL (and up to 2 s more
/// for the kernel to reap it).
pub(crate) async fn terminate_group(pgid: i32, grace: Duration) {
    if !proc::group_live(pgid) {
        return;
    }
    proc::signal_group(pgid, libc::SIGTERM);
    if wait_until(grace, || !proc::group_live(pgid)).await {
        return;
    }
    proc::signal_group(pgid, libc::SIGKILL);
    wait_until(Duration::from_secs(2), || !proc::group_live(pgid)).await;
}

/// Polls `done` every 20 ms for at most `limit`; whether it became true.
pub(crate) async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `exited with status N` / `killed by signal N`.
pub(crate) fn describe_status(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "ended".to_string(),
    }
}
