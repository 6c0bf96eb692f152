//! Child processes that cannot outlive the process that started them.

use std::io;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Linux delivers PR_SET_PDEATHSIG when the *thread* that forked the child exits, so children
/// are forked from one thread that lives as long as the process.
static SPAWNER: LazyLock<Mutex<mpsc::Sender<SpawnRequest>>> = LazyLock::new(|| {
    let (tx, rx) = mpsc::channel::<SpawnRequest>();
    std::thread::Builder::new()
        .name("kubosh-spawner".into())
        .spawn(move || {
            for (mut cmd, reply) in rx {
                // SAFETY: prctl and setpgid are async-signal-safe and touch no memory of
                // the parent.
                unsafe {
                    cmd.pre_exec(|| {
                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                            return Err(io::Error::last_os_error());
                        }
                        // A process group of its own: a terminal's Ctrl-C reaches only the
                        // process that started it, which stops its children in order.
                        if libc::setpgid(0, 0) != 0 {
                            return Err(io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                let _ = reply.send(cmd.spawn());
            }
        })
        .expect("spawn the process-spawner thread");
    Mutex::new(tx)
});

/// Spawns `cmd` so that it gets SIGKILL when this process dies, in a process group of its
/// own.
pub fn spawn_tied(cmd: Command) -> io::Result<ManagedChild> {
    let (tx, rx) = mpsc::channel();
    SPAWNER
        .lock()
        .map_err(|_| io::Error::other("spawner lock poisoned"))?
        .send((cmd, tx))
        .map_err(|_| io::Error::other("spawner thread is gone"))?;
    let child = rx
        .recv()
        .map_err(|_| io::Error::other("spawner thread is gone"))??;
    Ok(ManagedChild { child: Some(child) })
}

/// Spawns `cmd` as [`spawn_tied`] does, its stdin empty and its stdout and stderr appended
/// to `log` (so a log kept across restarts keeps every run's lines).
pub fn spawn_logged(mut cmd: Command, log: &Path) -> io::Result<ManagedChild> {
    let file = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)?;
    cmd.stdout(file.try_clone()?)
        .stderr(file)
        .stdin(std::process::Stdio::null());
    spawn_tied(cmd)
}

/// A child process stopped (SIGTERM, then SIGKILL) when dropped.
pub struct ManagedChild {
    child: Option<Child>,
}

impl ManagedChild {
    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// How the process ended, once it has (`None` while it runs or after [`Self::stop`]).
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stops the process: SIGTERM, up to `grace` to exit, then SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: signalling a child we own.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// This machine's address on its default route (not loopback): where kube-apiserver can
/// reach a process of this machine through an EndpointSlice, which refuses loopback
/// addresses. `None` without such a route.
pub fn host_address() -> Option<std::net::IpAddr> {
    // Connecting a UDP socket sends nothing; it only picks the route and its source.
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    ["192.0.2.1:9", "10.255.255.254:9", "198.51.100.1:9"]
        .iter()
        .find_map(|target| {
            socket.connect(target).ok()?;
            let ip = socket.local_addr().ok()?.ip();
            (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
        })
}
