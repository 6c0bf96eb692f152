//! Agent processes: started detached (own session and process group), found again by pid and
//! start time. The session is the VM: the agent's job processes run in process groups of
//! their own but stay in its session, so stopping a VM stops the whole session.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How a started agent is remembered: its pid (also its process group and session ID) and
/// its start time in clock ticks since boot, which tells it apart from a later process that
/// got the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub pid: i32,
    pub start_time: u64,
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy)]
struct Stat {
    state: u8,
    #[cfg_attr(not(test), allow(dead_code))]
    pgrp: i32,
    session: i32,
    start_time: u64,
}

fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain anything.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); start time is field 22.
    Some(Stat {
        state: *fields.first()?.as_bytes().first()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

fn is_dead(state: u8) -> bool {
    matches!(state, b'Z' | b'X' | b'x')
}

/// Live (not zombie) processes whose `/proc` stat satisfies `member`.
fn live_where(member: impl Fn(&Stat) -> bool) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|s| member(&s) && !is_dead(s.state)))
        .collect()
}

/// Live members of process group `pgid`.
#[cfg(test)]
fn group_members(pgid: i32) -> Vec<i32> {
    live_where(|s| s.pgrp == pgid)
}

/// Live members of session `sid`: the agent and every job process it started.
fn session_members(sid: i32) -> Vec<i32> {
    live_where(|s| s.session == sid)
}

/// Whether process group `record.pid` is still the agent's: the leader is there with the
/// recorded start time, or the leader is gone (then the number cannot have been reused as a
/// group ID while any member is alive, so whoever is in the group is the agent's).
fn owns_group(record: &ProcessRecord) -> bool {
    match stat(record.pid) {
        Some(s) => s.start_time == record.start_time,
        None => true,
    }
}

/// True while any process of the agent's session runs (a stopped — SIGSTOPped — agent
/// counts as running).
pub fn is_alive(record: &ProcessRecord) -> bool {
    match stat(record.pid) {
        // The leader itself runs: no need to look at the rest of the session.
        Some(s) if s.start_time == record.start_time && !is_dead(s.state) => true,
        Some(s) if s.start_time != record.start_time => false,
        _ => !session_members(record.pid).is_empty(),
    }
}

fn signal_group(record: &ProcessRecord, signal: i32) {
    if record.pid > 1 && owns_group(record) {
        // SAFETY: kill(2) with a negative pid signals that process group; no memory involved.
        unsafe { libc::kill(-record.pid, signal) };
    }
}

/// Stops the VM: SIGTERM (and SIGCONT, so a frozen agent sees it) to the agent's process
/// group, so the agent stops its jobs; up to `grace` for the whole session to exit (none when
/// the agent is dead already); then
/// SIGKILL to every process left in the session. Returns once nothing of the session runs
/// (or after another second of waiting for the kill to land).
pub fn stop_group(record: &ProcessRecord, grace: Duration) {
    // With its agent dead nothing stops the jobs gracefully: no grace to wait for.
    let agent_alive =
        stat(record.pid).is_some_and(|s| s.start_time == record.start_time && !is_dead(s.state));
    signal_group(record, libc::SIGTERM);
    signal_group(record, libc::SIGCONT);
    if wait_gone(record, if agent_alive { grace } else { Duration::ZERO }) {
        return;
    }
    signal_group(record, libc::SIGKILL);
    if record.pid > 1 && owns_group(record) {
        for pid in session_members(record.pid) {
            // SAFETY: kill(2) on a pid of the VM's session; no memory involved.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    wait_gone(record, Duration::from_secs(1));
}

fn wait_gone(record: &ProcessRecord, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    // Most agents exit within a millisecond of SIGTERM: poll fast first.
    let mut pause = Duration::from_micros(200);
    loop {
        if !is_alive(record) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// SIGKILL to the agent process alone (its group's other members run on).
pub fn kill_leader(record: &ProcessRecord) {
    if record.pid > 1 && stat(record.pid).is_some_and(|s| s.start_time == record.start_time) {
        // SAFETY: kill(2) on the recorded pid, checked to be the same process.
        unsafe { libc::kill(record.pid, libc::SIGKILL) };
    }
}

/// Freezes (SIGSTOP) or thaws (SIGCONT) the agent's group: an unresponsive agent.
pub fn freeze_group(record: &ProcessRecord, frozen: bool) {
    signal_group(record, if frozen { libc::SIGSTOP } else { libc::SIGCONT });
}

/// Starts `argv` detached: new session (so its own process group, and no controlling
/// terminal), stdin from /dev/null, stdout and stderr appended to `log`, working directory
/// `cwd`. The process outlives the CPI call that started it.
pub fn spawn_detached(
    argv: &[String],
    env: &[(String, String)],
    cwd: &Path,
    log: &Path,
) -> io::Result<ProcessRecord> {
    let Some((program, args)) = argv.split_first() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the agent command is empty",
        ));
    };
    let out = File::options().create(true).append(true).open(log)?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .envs(env.iter().map(|(k, v)| (k, v)));
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = i32::try_from(child.id()).map_err(io::Error::other)?;
    // Not waited for: the CPI process exits right after, and the agent lives on.
    drop(child);
    let start_time = stat(pid).map(|s| s.start_time).unwrap_or_default();
    Ok(ProcessRecord { pid, start_time })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detached_group_is_stopped_whole() {
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<String> = ["/bin/sh", "-c", "sleep 300 & sleep 300 & wait"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let record = spawn_detached(&argv, &[], dir.path(), &dir.path().join("log")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while group_members(record.pid).len() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(group_members(record.pid).len(), 3);
        assert!(is_alive(&record));
        freeze_group(&record, true);
        stop_group(&record, Duration::from_secs(5));
        assert!(!is_alive(&record));
        assert!(group_members(record.pid).is_empty());
    }

    #[test]
    fn a_recycled_pid_is_not_ours() {
        let me = std::process::id() as i32;
        let record = ProcessRecord {
            pid: me,
            start_time: stat(me).unwrap().start_time + 1,
        };
        assert!(!owns_group(&record));
        assert!(!is_alive(&record));
    }
}
