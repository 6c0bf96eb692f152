//! Running programs the way the agent does: a clean environment, no stdin, a process group of
//! their own (so the whole tree can be signalled), bounded output capture, and termination
//! (TERM, grace period, KILL) on timeout, cancellation or drop.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::future::Future;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::proc;

/// How much of each output stream [`run`] keeps (the tail).
pub const CAPTURE_LIMIT: usize = 64 * 1024;

/// A command with the agent's conventions: `env` only, stdin from `/dev/null`, working
/// directory `/`, its own process group, killed if the handle is dropped.
pub fn command(program: impl AsRef<OsStr>, env: &BTreeMap<String, String>) -> Command {
    let mut c = Command::new(program);
    c.env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .current_dir("/")
        .process_group(0)
        .kill_on_drop(true);
    c
}

/// SIGKILLs a process group when dropped, unless disarmed: nothing a dropped future started
/// keeps running.
pub struct GroupGuard(Option<i32>);

impl GroupGuard {
    pub fn new(pgid: i32) -> Self {
        Self(Some(pgid))
    }

    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            proc::signal_group(pgid, libc::SIGKILL);
        }
    }
}

/// A program that ran to completion.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    /// The tail ([`CAPTURE_LIMIT`]) of stdout, when captured.
    pub stdout: Vec<u8>,
    /// The tail ([`CAPTURE_LIMIT`]) of stderr, when captured.
    pub stderr: Vec<u8>,
}

/// Why [`run`] did not return a [`Finished`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("could not start: {0}")]
    Spawn(std::io::Error),
    #[error("could not wait for it: {0}")]
    Wait(std::io::Error),
    #[error("timed out after {0:?} and was killed")]
    TimedOut(Duration),
    #[error("cancelled")]
    Cancelled,
}

/// Runs `cmd` to completion. With `capture`, stdout and stderr are piped and their tails
/// returned (otherwise the caller has set them). On `timeout` or when `cancel` completes, the
/// process group gets SIGTERM, then SIGKILL after `grace`.
pub async fn run(
    mut cmd: Command,
    capture: bool,
    timeout: Option<Duration>,
    cancel: impl Future<Output = ()>,
    grace: Duration,
) -> Result<Finished, RunError> {
    if capture {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    let mut child = cmd.spawn().map_err(RunError::Spawn)?;
    let pgid = child.id().map_or(0, |p| p as i32);
    let mut guard = GroupGuard::new(pgid);
    let out_task = child.stdout.take().map(|s| tokio::spawn(read_tail(s)));
    let err_task = child.stderr.take().map(|s| tokio::spawn(read_tail(s)));

    let limit = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        status = child.wait() => status.map_err(RunError::Wait),
        () = limit => Err(RunError::TimedOut(timeout.unwrap_or_default())),
        () = cancel => Err(RunError::Cancelled),
    };
    if outcome.is_err() {
        terminate_group(pgid, grace).await;
        let _ = child.kill().await;
    }
    // The program is done; descendants may still hold the pipes open. Give them a moment,
    // then stop reading.
    let stdout = collect(out_task).await;
    let stderr = collect(err_task).await;
    let status = outcome?;
    guard.disarm();
    Ok(Finished {
        status,
        stdout,
        stderr,
    })
}

async fn collect(task: Option<tokio::task::JoinHandle<Vec<u8>>>) -> Vec<u8> {
    let Some(mut task) = task else {
        return Vec::new();
    };
    match tokio::time::timeout(Duration::from_secs(2), &mut task).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => Vec::new(),
        Err(_) => {
            task.abort();
            Vec::new()
        }
    }
}

/// Reads a stream to its end, keeping the last [`CAPTURE_LIMIT`] bytes.
async fn read_tail(mut r: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * CAPTURE_LIMIT {
                    kept.drain(..kept.len() - CAPTURE_LIMIT);
                }
            }
        }
    }
    if kept.len() > CAPTURE_LIMIT {
        kept.drain(..kept.len() - CAPTURE_LIMIT);
    }
    kept
}

/// SIGTERM to a process group, up to `grace` for it to go, then SIGKILL (and up to 2 s more
/// for the kernel to reap it).
pub async fn terminate_group(pgid: i32, grace: Duration) {
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
pub async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
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

/// The last `max` bytes of `bytes` as text (lossy UTF-8), marked when cut.
pub fn tail_text(bytes: &[u8], max: usize) -> String {
    if bytes.len() <= max {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let cut = &bytes[bytes.len() - max..];
    format!("...{}", String::from_utf8_lossy(cut))
}

/// `exited with status N` / `killed by signal N`.
pub fn describe_status(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "ended".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = command("/bin/sh", &crate::default_env());
        c.arg("-c").arg(script);
        c
    }

    #[tokio::test]
    async fn captures_output_and_env_is_clean() {
        let f = run(
            sh("echo out; echo err >&2; echo \"[$HOME]\""),
            true,
            None,
            std::future::pending(),
            Duration::from_secs(1),
        )
        .await
        .unwrap();
        assert!(f.status.success());
        assert_eq!(String::from_utf8_lossy(&f.stdout), "out\n[]\n");
        assert_eq!(String::from_utf8_lossy(&f.stderr), "err\n");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let started = std::time::Instant::now();
        let err = run(
            sh("sleep 30 & sleep 31"),
            true,
            Some(Duration::from_millis(200)),
            std::future::pending(),
            Duration::from_millis(500),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, RunError::TimedOut(_)), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn tails() {
        assert_eq!(tail_text(b"abcdef", 3), "...def");
        assert_eq!(tail_text(b"ab", 3), "ab");
    }
}
