//! The machine's vitals for `get_state ["full"]` and heartbeats (`bosh-protocols.md` §2.6):
//! load, CPU, memory, swap, uptime and disk use, read from `/proc` and `statvfs(3)`. Values
//! are strings, as the agent sends them.

use std::path::Path;

use indexmap::IndexMap;

use kubosh_transport::agent::protocol::{CpuVitals, DiskVitals, MemVitals, UptimeVitals, Vitals};

/// Disks to report: `system`, `ephemeral` and, when mounted, `persistent`.
#[derive(Debug, Clone, Default)]
pub struct VitalsDisks<'a> {
    /// The system disk (the VM's root).
    pub system: Option<&'a Path>,
    /// The ephemeral disk (`<base>/data`).
    pub ephemeral: Option<&'a Path>,
    /// The persistent disk (`<base>/store`), when one is mounted.
    pub persistent: Option<&'a Path>,
}

/// Reads the vitals now. Anything unreadable is left out rather than failing.
pub fn read(disks: &VitalsDisks<'_>) -> Vitals {
    let mut disk = IndexMap::new();
    for (name, path) in [
        ("system", disks.system),
        ("ephemeral", disks.ephemeral),
        ("persistent", disks.persistent),
    ] {
        if let Some(v) = path.and_then(disk_use) {
            disk.insert(name.to_string(), v);
        }
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| -> Option<u64> {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    let mem = match (field("MemTotal"), field("MemAvailable")) {
        (Some(total), Some(avail)) if total > 0 => {
            let used = total.saturating_sub(avail);
            Some(mem_vitals(used, total))
        }
        _ => None,
    };
    let swap = match (field("SwapTotal"), field("SwapFree")) {
        (Some(total), Some(free)) => Some(mem_vitals(total.saturating_sub(free), total)),
        _ => None,
    };
    Vitals {
        cpu: cpu(),
        disk: Some(disk),
        load: std::fs::read_to_string("/proc/loadavg").ok().map(|t| {
            t.split_whitespace()
                .take(3)
                .map(str::to_string)
                .collect::<Vec<_>>()
        }),
        mem,
        swap,
        uptime: std::fs::read_to_string("/proc/uptime").ok().and_then(|t| {
            let secs: f64 = t.split_whitespace().next()?.parse().ok()?;
            Some(UptimeVitals {
                secs: Some(secs as u64),
            })
        }),
        extra: Default::default(),
    }
}

fn mem_vitals(used_kb: u64, total_kb: u64) -> MemVitals {
    let percent = if total_kb == 0 {
        0.0
    } else {
        used_kb as f64 * 100.0 / total_kb as f64
    };
    MemVitals {
        kb: Some(used_kb.to_string()),
        percent: Some(format!("{percent:.0}")),
    }
}

/// CPU use since boot from the first line of `/proc/stat`, in percent.
fn cpu() -> Option<CpuVitals> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    if total == 0 || v.len() < 5 {
        return None;
    }
    let pct = |ticks: u64| format!("{:.1}", ticks as f64 * 100.0 / total as f64);
    Some(CpuVitals {
        user: Some(pct(v[0] + v[1])),
        sys: Some(pct(v[2])),
        wait: Some(pct(v[4])),
    })
}

fn disk_use(path: &Path) -> Option<DiskVitals> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let pct = |used: u64, total: u64| {
        if total == 0 {
            "0".to_string()
        } else {
            format!("{}", (used as f64 * 100.0 / total as f64).round() as u64)
        }
    };
    let blocks = st.f_blocks as u64;
    let inodes = st.f_files as u64;
    Some(DiskVitals {
        percent: Some(pct(blocks.saturating_sub(st.f_bfree as u64), blocks)),
        inode_percent: Some(pct(inodes.saturating_sub(st.f_ffree as u64), inodes)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_machine() {
        let dir = tempfile::tempdir().unwrap();
        let v = read(&VitalsDisks {
            system: Some(dir.path()),
            ephemeral: Some(dir.path()),
            persistent: None,
        });
        assert_eq!(v.load.as_ref().map(Vec::len), Some(3));
        let disk = v.disk.unwrap();
        assert!(disk.contains_key("system") && disk.contains_key("ephemeral"));
        assert!(!disk.contains_key("persistent"));
        let pct: f64 = v.mem.unwrap().percent.unwrap().parse().unwrap();
        assert!((0.0..=100.0).contains(&pct));
        assert!(v.uptime.unwrap().secs.unwrap() > 0);
    }
}
