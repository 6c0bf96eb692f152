//! `kubosh vm run`: a local-cloud VM's first process, for an agent that is not kubosh's (the
//! real bosh-agent with its dummy platform). It gives the VM a private `/var/vcap` (its own
//! mount namespace — and user namespace when not root — with the VM's root directory
//! bind-mounted there, [`crate::isolate`]), so the agent runs with `-b /var/vcap` and the
//! releases' scripts, which hard-code `/var/vcap`, never touch the host's; starts the agent
//! there and stays its parent: SIGTERM is passed on, the agent's exit status is the
//! launcher's, and the agent's output reaches the VM's log without the dummy platform's
//! endless syslog retries. With `--dummy-disks` it also makes the agent's recorded disk
//! mounts and migrations real ([`dummy_disks`]).

pub mod dummy_disks;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

pub use dummy_disks::{DummyDiskError, DummyDisks};

/// `PATH` for the agent when the launcher was given none (the agent runs `bash`, `tar` and
/// the packaging scripts' compilers from it).
pub const FALLBACK_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How to launch a VM's agent.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The VM's root directory on the host, mounted on `base`.
    pub root: PathBuf,
    /// Where the VM sees its root: `/var/vcap`.
    pub base: PathBuf,
    /// The launcher's record of the dummy platform's disks (in the VM's directory, outside
    /// its root); `None`: the agent's disks are left alone.
    pub dummy_disks: Option<PathBuf>,
    /// The agent's program and arguments.
    pub argv: Vec<String>,
}

/// Why the launcher could not run the agent.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No program given.
    #[error("no agent command given (kubosh vm run --root DIR -- PROGRAM [ARGS...])")]
    NoCommand,
    /// The private `/var/vcap` could not be set up.
    #[error("cannot mount {} on {}: {source}", .root.display(), .base.display())]
    Isolate {
        /// The VM's root.
        root: PathBuf,
        /// The base directory.
        base: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The agent's disks could not be set up before it started.
    #[error("persistent disks: {0}")]
    Disks(#[from] DummyDiskError),
    /// The agent could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The error.
        source: std::io::Error,
    },
    /// Anything else of the launcher's own (runtime, directories, waiting).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// Runs the agent in the VM's private `/var/vcap` until it exits; its exit code (128 + the
/// signal when a signal ended it). Call before any thread is started.
pub fn run(options: &LaunchOptions) -> Result<i32, LaunchError> {
    if options.argv.is_empty() {
        return Err(LaunchError::NoCommand);
    }
    crate::isolate::bind_base(&options.root, &options.base).map_err(|source| {
        LaunchError::Isolate {
            root: options.root.clone(),
            base: options.base.clone(),
            source,
        }
    })?;
    let tmp = options.base.join("data").join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|source| LaunchError::Io {
        what: "creating the agent's TMPDIR",
        source,
    })?;
    // A rebooted VM gets its disks back before its agent looks for them.
    let disks = match &options.dummy_disks {
        Some(state) => {
            let mut disks = DummyDisks::open(&options.base, state.clone())?;
            disks.apply()?;
            Some(disks)
        }
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| LaunchError::Io {
            what: "starting the runtime",
            source,
        })?;
    runtime.block_on(supervise(options, &tmp, disks))
}

async fn supervise(
    options: &LaunchOptions,
    tmp: &Path,
    disks: Option<DummyDisks>,
) -> Result<i32, LaunchError> {
    let (program, args) = options.argv.split_first().ok_or(LaunchError::NoCommand)?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(&options.base)
        .env("TMPDIR", tmp)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if std::env::var_os("PATH").is_none() {
        command.env("PATH", FALLBACK_PATH);
    }
    let mut child = command.spawn().map_err(|source| LaunchError::Spawn {
        program: program.clone(),
        source,
    })?;
    let mut output = Vec::new();
    if let Some(out) = child.stdout.take() {
        output.push(tokio::spawn(pass_on(out, false)));
    }
    if let Some(err) = child.stderr.take() {
        output.push(tokio::spawn(pass_on(err, true)));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = disks.map(|disks| {
        let stop = stop.clone();
        std::thread::spawn(move || watch(disks, &stop))
    });
    let signal = |kind| {
        tokio::signal::unix::signal(kind).map_err(|source| LaunchError::Io {
            what: "handling signals",
            source,
        })
    };
    let mut term = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = signal(tokio::signal::unix::SignalKind::interrupt())?;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            // The CPI signals the whole group, so the agent usually has it already; passing
            // it on covers a launcher signalled alone.
            _ = term.recv() => forward(child.id(), libc::SIGTERM),
            _ = int.recv() => forward(child.id(), libc::SIGINT),
        }
    }
    .map_err(|source| LaunchError::Io {
        what: "waiting for the agent",
        source,
    })?;
    for task in output {
        let _ = task.await;
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(watcher) = watcher
        && let Ok(mut disks) = watcher.join()
        && let Err(e) = disks.apply()
    {
        tracing::warn!(error = %e, "applying the persistent disks after the agent exited");
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1))
}

fn forward(pid: Option<u32>, signal: libc::c_int) {
    if let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) on our own child's pid; no memory involved.
        unsafe { libc::kill(pid, signal) };
    }
}

/// Lines the dummy platform prints ~20 times a second, forever, when it finds no syslog
/// socket (`platform/delayed_audit_logger_unix.go` retrying `syslog.New`).
pub fn is_syslog_retry_noise(line: &str) -> bool {
    line.contains("[DelayedAuditLogger]")
        || (line.contains("[unlimitedRetryStrategy]") && line.contains("Making attempt"))
}

/// Copies the agent's output to ours line by line, without [`is_syslog_retry_noise`].
async fn pass_on(stream: impl tokio::io::AsyncRead + Unpin, to_stderr: bool) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if is_syslog_retry_noise(&line) {
            continue;
        }
        let _ = if to_stderr {
            writeln!(std::io::stderr().lock(), "{line}")
        } else {
            writeln!(std::io::stdout().lock(), "{line}")
        };
    }
}

/// Applies the agent's disk files whenever its `bosh` directory changes (inotify), and at
/// least every 200 ms, until `stop`; gives the disks back for a last pass.
fn watch(mut disks: DummyDisks, stop: &AtomicBool) -> DummyDisks {
    let changes = Changes::watch(&disks.watched_dir());
    let mut last_error = String::new();
    while !stop.load(Ordering::Relaxed) {
        match disks.apply() {
            Ok(_) => last_error.clear(),
            // Said once, not every pass: the agent may be half-way through writing.
            Err(e) if e.to_string() != last_error => {
                last_error = e.to_string();
                tracing::warn!(error = %e, "applying the persistent disks");
                eprintln!("kubosh vm run: persistent disks: {e}");
            }
            Err(_) => {}
        }
        changes.wait(Duration::from_millis(200));
    }
    disks
}

/// An inotify watch on a directory (or nothing, when inotify is unavailable: then
/// [`Changes::wait`] just sleeps).
struct Changes {
    fd: Option<libc::c_int>,
}

impl Changes {
    fn watch(dir: &Path) -> Changes {
        use std::os::unix::ffi::OsStrExt;
        let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return Changes { fd: None };
        };
        // SAFETY: plain system calls; the path is NUL-terminated.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if fd < 0 {
            return Changes { fd: None };
        }
        let mask = libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO | libc::IN_DELETE | libc::IN_CREATE;
        // SAFETY: as above.
        if unsafe { libc::inotify_add_watch(fd, path.as_ptr(), mask) } < 0 {
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
            return Changes { fd: None };
        }
        Changes { fd: Some(fd) }
    }

    /// Waits until something changed in the directory or `limit` passed.
    fn wait(&self, limit: Duration) {
        let Some(fd) = self.fd else {
            std::thread::sleep(limit);
            return;
        };
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = libc::c_int::try_from(limit.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut poll, 1, millis) } > 0 {
            let mut buf = [0u8; 4096];
            // Drain the events: which file changed does not matter, the files are re-read.
            // SAFETY: reading into our own buffer of the given length.
            while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
        }
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        if let Some(fd) = self.fd {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(fd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_syslog_retries_are_dropped() {
        assert!(is_syslog_retry_noise(
            "[DelayedAuditLogger] 2026/01/01 ERROR - Unix syslog delivery error"
        ));
        assert!(is_syslog_retry_noise(
            "[unlimitedRetryStrategy] 2026/01/01 DEBUG - Making attempt #7 for *retrystrategy.retryable"
        ));
        assert!(!is_syslog_retry_noise(
            "[unlimitedRetryStrategy] DEBUG - Making attempt #2 for NATS connect"
                .replace("unlimitedRetryStrategy", "NATS")
                .as_str()
        ));
        assert!(!is_syslog_retry_noise(
            "[File System] DEBUG - Writing /var/vcap/bosh/spec.json"
        ));
    }
}
