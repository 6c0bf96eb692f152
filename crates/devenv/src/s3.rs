//! A real S3-compatible server (moto's `moto_server`, installed by `tools/testbins.sh` into a
//! Python venv and linked into the bin directory) on a free loopback port.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::bins::{BinError, binary};
use super::process::{ManagedChild, free_port, spawn_tied};

/// Why the S3 server could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum S3ServerError {
    /// moto_server is not installed.
    #[error(transparent)]
    Binary(#[from] BinError),
    /// A file, process or socket operation failed.
    #[error("moto_server: {0}")]
    Io(#[from] std::io::Error),
    /// The server did not answer in time.
    #[error("moto_server did not answer within {0:?}; its log is in {1}")]
    NotReady(Duration, PathBuf),
    /// A request was refused.
    #[error("moto_server: {0}")]
    Refused(String),
}

/// A running moto S3 server. Stopped when dropped. It accepts any credentials.
pub struct S3Server {
    _child: ManagedChild,
    port: u16,
    dir: tempfile::TempDir,
}

impl S3Server {
    /// Starts moto_server on a free port and waits until it answers.
    pub fn start() -> Result<S3Server, S3ServerError> {
        let bin = binary("moto_server")?;
        let dir = tempfile::Builder::new().prefix("kubosh-moto-").tempdir()?;
        let port = free_port()?;
        let log = dir.path().join("moto.log");
        let out = std::fs::File::create(&log)?;
        let mut cmd = Command::new(bin);
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(std::process::Stdio::null());
        let child = spawn_tied(cmd)?;
        let server = S3Server {
            _child: child,
            port,
            dir,
        };
        let within = Duration::from_secs(60);
        let deadline = Instant::now() + within;
        loop {
            if let Ok(200) = server.request("GET", "/") {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(S3ServerError::NotReady(within, log));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The endpoint, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory with the server's log.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Creates bucket `name` (path style, no signature: moto does not check by default).
    pub fn create_bucket(&self, name: &str) -> Result<(), S3ServerError> {
        match self.request("PUT", &format!("/{name}"))? {
            200 => Ok(()),
            status => Err(S3ServerError::Refused(format!(
                "creating bucket {name}: HTTP {status}"
            ))),
        }
    }

    /// A bodiless HTTP/1.1 request; the response status.
    fn request(&self, method: &str, path: &str) -> Result<u16, S3ServerError> {
        let mut tcp = TcpStream::connect(("127.0.0.1", self.port))?;
        tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            tcp,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )?;
        let mut response = Vec::new();
        tcp.read_to_end(&mut response)?;
        let text = String::from_utf8_lossy(&response);
        text.split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                S3ServerError::Refused(format!("unreadable response to {method} {path}"))
            })
    }
}
