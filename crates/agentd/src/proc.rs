//! Reading `/proc` (Linux): process liveness, process groups, trees and their vitals, and
//! signalling process groups safely.

use std::path::Path;

/// The fields of `/proc/<pid>/stat` the agent uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub ppid: i32,
    pub pgrp: i32,
    /// `R`, `S`, `D`, `Z`, `X`, ...
    pub state: u8,
    /// User + system time, in clock ticks.
    pub cpu_ticks: u64,
    /// Start time after boot, in clock ticks.
    pub start_ticks: u64,
    /// Resident set size, in pages.
    pub rss_pages: u64,
}

impl Stat {
    /// Neither a zombie nor dead: the process still runs.
    pub fn is_live(&self) -> bool {
        !matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// Parses the text of a `/proc/<pid>/stat` file. `comm` may contain spaces and parentheses,
/// so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let pid = text.get(..open)?.trim().parse().ok()?;
    let close = text.rfind(')')?;
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); field n is rest[n - 3].
    let field = |n: usize| rest.get(n - 3).copied();
    let num = |n: usize| field(n).and_then(|f| f.parse::<u64>().ok());
    Some(Stat {
        pid,
        state: *field(3)?.as_bytes().first()?,
        ppid: field(4)?.parse().ok()?,
        pgrp: field(5)?.parse().ok()?,
        cpu_ticks: num(14)?.saturating_add(num(15)?),
        start_ticks: num(22)?,
        rss_pages: num(24)?,
    })
}

/// The stat of one process, if it exists.
pub fn stat(pid: i32) -> Option<Stat> {
    if pid <= 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Whether `pid` names a live (non-zombie) process.
pub fn is_live(pid: i32) -> bool {
    stat(pid).is_some_and(|s| s.is_live())
}

/// Every process visible in `/proc`.
pub fn all() -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .collect()
}

/// Whether any live process belongs to process group `pgid`.
pub fn group_live(pgid: i32) -> bool {
    pgid > 1 && all().iter().any(|s| s.pgrp == pgid && s.is_live())
}

/// `root` and all its live descendants, from a snapshot of [`all`].
pub fn tree(root: i32, procs: &[Stat]) -> Vec<Stat> {
    let mut out: Vec<Stat> = procs
        .iter()
        .filter(|s| s.pid == root && s.is_live())
        .copied()
        .collect();
    let mut i = 0;
    while i < out.len() {
        let parent = out[i].pid;
        for s in procs {
            if s.ppid == parent && s.is_live() && !out.iter().any(|o| o.pid == s.pid) {
                out.push(*s);
            }
        }
        i += 1;
    }
    out
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), 100 if unknown.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as u64 } else { 100 }
}

/// Page size in bytes, 4096 if unknown.
pub fn page_size() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 { v as u64 } else { 4096 }
}

/// Number of online CPUs, at least 1.
pub fn cpu_count() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// `MemTotal` from `/proc/meminfo`, in KiB.
pub fn mem_total_kb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Seconds since boot, from `/proc/uptime`.
pub fn uptime_secs() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The process id in a pid file, if the file holds a positive integer.
pub fn read_pidfile(path: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    let pid: i32 = text.trim().parse().ok()?;
    (pid > 0).then_some(pid)
}

/// Our own process group, which must never be signalled.
fn own_pgrp() -> i32 {
    // SAFETY: getpgrp has no preconditions.
    unsafe { libc::getpgrp() }
}

/// Sends `sig` to every process of group `pgid`. Refuses groups 0 and 1 and our own group.
pub fn signal_group(pgid: i32, sig: i32) {
    if pgid > 1 && pgid != own_pgrp() {
        // SAFETY: kill with a negative pid signals a process group; no memory is involved.
        unsafe { libc::kill(-pgid, sig) };
    }
}

/// Sends `sig` to one process. Refuses pids 0 and 1, negative pids and ourselves.
pub fn signal_pid(pid: i32, sig: i32) {
    if pid > 1 && pid != std::process::id() as i32 {
        // SAFETY: kill signals one process; no memory is involved.
        unsafe { libc::kill(pid, sig) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        let text = "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 555 1000 25 18446744073709551615";
        let s = parse_stat(text).unwrap();
        assert_eq!(s.pid, 1234);
        assert_eq!(s.state, b'S');
        assert_eq!(s.ppid, 1);
        assert_eq!(s.pgrp, 1234);
        assert_eq!(s.cpu_ticks, 10);
        assert_eq!(s.start_ticks, 555);
        assert_eq!(s.rss_pages, 25);
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("12 (x) S").is_none());
    }

    #[test]
    fn sees_itself() {
        let me = std::process::id() as i32;
        assert!(is_live(me));
        let t = tree(me, &all());
        assert_eq!(t.first().map(|s| s.pid), Some(me));
        assert!(!is_live(-5));
    }
}
