//! One request/response exchange with a child process, as CPIs and the template renderer
//! need it: the request written to stdin (then closed), stdout read up to a bound, stderr
//! handed over line by line, all within a timeout. The child runs in its own process group,
//! so a timeout or an oversized answer kills whatever it started too.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// The longest piece of stderr handed over at once.
const MAX_STDERR_LINE: u64 = 64 * 1024;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The program could not be started.
    #[error("cannot start: {0}")]
    Spawn(#[source] std::io::Error),
    /// Reading or writing a pipe, or waiting for the child, failed.
    #[error("i/o: {0}")]
    Io(#[source] std::io::Error),
    /// The child did not finish in time; its process group was killed.
    #[error("timed out after {}s", .0.as_secs_f64())]
    Timeout(Duration),
}

/// What the child answered.
#[derive(Debug)]
pub struct Exchanged {
    /// Its stdout, at most `max_stdout + 1` bytes (more means it was cut off and the child
    /// killed: see [`Exchanged::overflowed`]).
    pub stdout: Vec<u8>,
    /// How it exited.
    pub status: ExitStatus,
    /// Whether stdout went past the bound.
    pub overflowed: bool,
}

/// A bounded exchange with one child process.
#[derive(Debug, Clone, Copy)]
pub struct Exchange {
    /// Stdout beyond this many bytes is not read: the child is killed.
    pub max_stdout: u64,
    /// The whole exchange, start to exit.
    pub timeout: Duration,
}

impl Exchange {
    /// Runs `command` (its program, arguments, environment and directory as the caller set
    /// them; stdio, process group and kill-on-drop are set here) with `input` on stdin;
    /// `on_stderr_line` sees each line of stderr (newline included) as it comes, a line
    /// longer than 64 KiB in pieces of that size.
    pub async fn run(
        self,
        mut command: Command,
        input: &[u8],
        mut on_stderr_line: impl FnMut(&[u8]),
    ) -> Result<Exchanged, ExchangeError> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group, so a kill reaches whatever it started too.
            .process_group(0);
        let mut child = command.spawn().map_err(ExchangeError::Spawn)?;
        let pid = child.id();
        let max = self.max_stdout;
        let exchange = async {
            let stdin = child.stdin.take();
            let stdout = child.stdout.take();
            let stderr = child.stderr.take();
            let write = async {
                if let Some(mut stdin) = stdin {
                    match stdin.write_all(input).await {
                        // A child may answer without reading its input.
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                        other => other?,
                    }
                    drop(stdin);
                }
                Ok::<_, std::io::Error>(())
            };
            let read = async {
                let mut out = Vec::new();
                if let Some(stdout) = stdout {
                    stdout.take(max + 1).read_to_end(&mut out).await?;
                }
                if out.len() as u64 > max {
                    // It would block writing the rest: stop it, the answer is garbage anyway.
                    kill_group(pid);
                }
                Ok::<_, std::io::Error>(out)
            };
            let lines = async {
                if let Some(stderr) = stderr {
                    let mut reader = BufReader::new(stderr);
                    let mut line = Vec::new();
                    // A line longer than the bound is handed over in pieces, so a child that
                    // never prints a newline cannot fill our memory.
                    while (&mut reader)
                        .take(MAX_STDERR_LINE)
                        .read_until(b'\n', &mut line)
                        .await?
                        > 0
                    {
                        on_stderr_line(&line);
                        line.clear();
                    }
                }
                Ok::<_, std::io::Error>(())
            };
            let (written, out, read_stderr) = tokio::join!(write, read, lines);
            written?;
            read_stderr?;
            let stdout = out?;
            let status = child.wait().await?;
            Ok::<_, std::io::Error>((stdout, status))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Ok((stdout, status))) => Ok(Exchanged {
                overflowed: stdout.len() as u64 > max,
                stdout,
                status,
            }),
            Ok(Err(e)) => Err(ExchangeError::Io(e)),
            Err(_) => {
                kill_group(pid);
                let _ = child.kill().await;
                Err(ExchangeError::Timeout(self.timeout))
            }
        }
    }
}

/// Kills the child's process group (the child is its leader; called only before the child
/// is reaped, so the id cannot have been reused).
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 1) {
        // SAFETY: kill(2) on the process group of a child we have not reaped; no memory is
        // involved.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script);
        cmd
    }

    const ROOMY: Exchange = Exchange {
        max_stdout: 1024,
        timeout: Duration::from_secs(10),
    };

    #[tokio::test]
    async fn answers_with_stdout_and_hands_stderr_over_by_line() {
        let mut lines = Vec::new();
        let out = ROOMY
            .run(
                sh("echo one >&2; echo two >&2; tr a-z A-Z"),
                b"hello",
                |l| lines.push(String::from_utf8_lossy(l).into_owned()),
            )
            .await
            .unwrap();
        assert_eq!(out.stdout, b"HELLO");
        assert!(out.status.success() && !out.overflowed);
        assert_eq!(lines, ["one\n", "two\n"]);
    }

    #[tokio::test]
    async fn stderr_without_newlines_comes_in_bounded_pieces() {
        let mut pieces = Vec::new();
        let out = ROOMY
            .run(sh("head -c 200000 /dev/zero >&2"), b"", |l| {
                pieces.push(l.len())
            })
            .await
            .unwrap();
        assert!(out.status.success());
        assert_eq!(pieces.iter().sum::<usize>(), 200_000);
        assert!(
            pieces.iter().all(|&n| n as u64 <= MAX_STDERR_LINE),
            "{pieces:?}"
        );
    }

    #[tokio::test]
    async fn a_child_that_ignores_its_input_is_fine() {
        let out = ROOMY
            .run(sh("echo ok"), &vec![b'x'; 1 << 20], |_| {})
            .await
            .unwrap();
        assert_eq!(out.stdout, b"ok\n");
    }

    #[tokio::test]
    async fn oversized_output_is_cut_off_and_the_child_killed() {
        let bounded = Exchange {
            max_stdout: 10,
            ..ROOMY
        };
        let out = bounded.run(sh("yes"), b"", |_| {}).await.unwrap();
        assert!(out.overflowed);
        assert_eq!(out.stdout.len(), 11);
        assert!(!out.status.success());
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group() {
        let dir = std::env::temp_dir().join(format!("kubosh-process-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("grandchild-ran");
        let quick = Exchange {
            timeout: Duration::from_millis(300),
            ..ROOMY
        };
        // The grandchild would write the marker after the timeout unless its group is killed.
        let script = format!("(sleep 1; touch {}) & sleep 30", marker.display());
        let err = quick.run(sh(&script), b"", |_| {}).await.unwrap_err();
        assert!(matches!(err, ExchangeError::Timeout(_)), "{err}");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!marker.exists(), "the grandchild outlived the timeout");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error() {
        let err = ROOMY
            .run(Command::new("/nonexistent/kubosh-x"), b"", |_| {})
            .await
            .unwrap_err();
        assert!(matches!(err, ExchangeError::Spawn(_)), "{err}");
    }
}
