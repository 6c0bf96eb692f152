//! Helpers shared by the `agentd_*` test binaries: real files, real processes, bounded waits.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Writes `text` to `path` (creating parent directories) with mode `mode`.
pub fn write_file(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Writes an executable shell script.
pub fn write_script(path: &Path, body: &str) {
    write_file(path, &format!("#!/bin/sh\n{body}\n"), 0o755);
}

/// A number no other test (in this or another test binary) uses: usable as a `sleep`
/// duration that marks a process in `/proc/*/cmdline`.
pub fn unique_secs() -> u64 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) as u64;
    100_000 + (std::process::id() as u64 % 100_000) * 100 + n
}

/// A free loopback TCP port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Live (non-zombie) processes whose command line contains all of `needles` (as whole
/// arguments).
pub fn live_processes(needles: &[&str]) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !needles.iter().all(|n| args.iter().any(|a| a == n)) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .unwrap_or("Z");
        if state != "Z" && state != "X" {
            out.push(pid);
        }
    }
    out
}

/// Polls `f` every 50 ms until it returns `Some`, for at most `limit`.
pub async fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET /` on a loopback port: the status line, if anything answered.
pub fn http_get(port: u16) -> Option<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    text.lines().next().map(str::to_string)
}

/// A plain tar of `(path, content, mode)` entries, paths as given.
pub fn tar(files: &[(&str, &str, u32)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, content, mode) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(content.len() as u64);
        h.set_mode(*mode);
        h.set_cksum();
        b.append_data(&mut h, path, content.as_bytes()).unwrap();
    }
    b.into_inner().unwrap()
}

/// A gzipped [`tar`].
pub fn tgz(files: &[(&str, &str, u32)]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar(files)).unwrap();
    gz.finish().unwrap()
}
