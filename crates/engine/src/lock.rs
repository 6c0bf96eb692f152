//! Named locks with the Director's semantics (`bosh-protocols.md` §4.14): one holder at a time
//! per name (`lock:deployment:<name>`, ...), acquisition polls every 0.5 s until a wait
//! timeout and then fails with BOSH's text, a held lock expires 240 s after its last renewal
//! and is renewed every 120 s, and a holder whose renewal fails learns that it lost the lock
//! (the Director then cancels the task).
//!
//! [`FileLocks`] (`flock(2)` on a file per name, for create-env and `kubosh deploy`; the
//! kernel drops the lock when the process dies, so it never needs to expire) implements
//! [`Lock`] here; `kubosh_kube::lock::LeaseLocks` (a Lease per name) is the controller's.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// How often acquisition retries (the Director: 0.5 s).
pub const POLL: Duration = Duration::from_millis(500);
/// How long a lease lives without renewal (the Director: 240 s).
pub const EXPIRY: Duration = Duration::from_secs(240);
/// How often a held lease is renewed (the Director: 120 s).
pub const RENEW: Duration = Duration::from_secs(120);

/// Who holds a lock: shown to whoever waits for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Unique id of this acquisition.
    pub uid: String,
    /// The task holding it.
    pub task_id: String,
    /// What the task does, e.g. `create deployment`.
    pub description: String,
}

impl Holder {
    /// A holder with a fresh uid.
    pub fn new(task_id: impl Into<String>, description: impl Into<String>) -> Holder {
        Holder {
            uid: kubosh_base::ids::uuid_v4(),
            task_id: task_id.into(),
            description: description.into(),
        }
    }
}

/// Why a lock was not acquired.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Someone else held it for the whole wait (the Director's `Lock::TimeoutError` text).
    #[error(
        "Failed to acquire lock for {name} uid: {uid}. Locking task id is {task_id}, description: '{description}'"
    )]
    Timeout {
        /// The lock.
        name: String,
        /// Our uid.
        uid: String,
        /// The holder's task.
        task_id: String,
        /// The holder's description.
        description: String,
    },
    /// The lock store failed.
    #[error("lock {name}: {reason}")]
    Store {
        /// The lock.
        name: String,
        /// Why.
        reason: String,
    },
}

impl LockError {
    /// The timeout error for `ours`, naming the `other` holder when it is known.
    pub fn timeout(name: &str, ours: &Holder, other: Option<Holder>) -> LockError {
        let (task_id, description) =
            other.map_or_else(Default::default, |o| (o.task_id, o.description));
        LockError::Timeout {
            name: name.to_string(),
            uid: ours.uid.clone(),
            task_id,
            description,
        }
    }
}

/// A held lock. Dropping it releases it (best effort); [`Guard::lost`] completes if the lock
/// was taken away (renewal failed).
pub struct Guard {
    lost: watch::Receiver<bool>,
    /// In a mutex so a guard can be shared while a task watches it for loss.
    release: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Guard {
    /// A guard that reports loss through `lost` (`true` once the lock is taken away) and runs
    /// `release` when dropped.
    pub fn new(lost: watch::Receiver<bool>, release: Box<dyn FnOnce() + Send>) -> Guard {
        Guard {
            lost,
            release: std::sync::Mutex::new(Some(release)),
        }
    }

    /// Completes when the lock is lost; never, while it is held.
    pub async fn lost(&self) {
        let mut rx = self.lost.clone();
        if rx.wait_for(|l| *l).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// True once the lock is lost.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let release = self
            .release
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(release) = release {
            release();
        }
    }
}

/// A store of named locks.
pub trait Lock: Send + Sync {
    /// Takes lock `name` for `holder`, waiting at most `wait` (polling every [`POLL`]).
    fn acquire<'a>(
        &'a self,
        name: &'a str,
        holder: &'a Holder,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Guard, LockError>>;
}

/// Held by a deploy while it uploads stemcells: each is uploaded once per CPI for all the
/// director's deployments.
pub const STEMCELL_LOCK: &str = "lock:stemcells";

/// `lock:deployment:<name>`.
pub fn deployment_lock(deployment: &str) -> String {
    format!("lock:deployment:{deployment}")
}

fn file_name(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{safe}-{}.lock",
        &kubosh_base::digest::sha256_hex(name.as_bytes())[..12]
    )
}

/// Locks as files under a directory, held with `flock(2)`.
#[derive(Debug, Clone)]
pub struct FileLocks {
    dir: PathBuf,
}

impl FileLocks {
    /// Locks under `dir` (created when needed).
    pub fn new(dir: impl Into<PathBuf>) -> FileLocks {
        FileLocks { dir: dir.into() }
    }
}

impl Lock for FileLocks {
    fn acquire<'a>(
        &'a self,
        name: &'a str,
        holder: &'a Holder,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Guard, LockError>> {
        Box::pin(async move {
            let store = |reason: String| LockError::Store {
                name: name.to_string(),
                reason,
            };
            std::fs::create_dir_all(&self.dir).map_err(|e| store(e.to_string()))?;
            let path = self.dir.join(file_name(name));
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| store(format!("{}: {e}", path.display())))?;
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                // SAFETY: flock on a descriptor we own; LOCK_NB never blocks.
                if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                    break;
                }
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                    return Err(store(err.to_string()));
                }
                if tokio::time::Instant::now() >= deadline {
                    let other = std::fs::read(&path)
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok());
                    return Err(LockError::timeout(name, holder, other));
                }
                tokio::time::sleep(POLL).await;
            }
            // Who holds it, for whoever waits next (the flock is what counts).
            let text = serde_json::to_vec(holder).unwrap_or_default();
            use std::io::{Seek, Write};
            let mut f = &file;
            let _ = f.set_len(0);
            let _ = f.seek(std::io::SeekFrom::Start(0));
            let _ = f.write_all(&text);
            let (_tx, lost) = watch::channel(false);
            // Closing the file releases the flock.
            Ok(Guard::new(
                lost,
                Box::new(move || {
                    let _ = file.set_len(0);
                    drop(file);
                    drop(_tx);
                }),
            ))
        })
    }
}

/// Shared handle to any lock store.
pub type Locks = Arc<dyn Lock>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe_and_distinct() {
        assert_ne!(file_name("a/b"), file_name("a_b"));
        assert!(!file_name("../x").contains('/'));
    }

    #[tokio::test]
    async fn file_locks_exclude_and_name_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let locks = FileLocks::new(dir.path());
        let first = Holder::new("17", "create deployment");
        let guard = locks
            .acquire("lock:deployment:web", &first, Duration::ZERO)
            .await
            .unwrap();
        let second = Holder::new("18", "create deployment");
        let err = locks
            .acquire("lock:deployment:web", &second, Duration::from_millis(600))
            .await
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "Failed to acquire lock for lock:deployment:web uid: {}. Locking task id is 17, description: 'create deployment'",
                second.uid
            )
        );
        // Another name is free.
        let _other = locks
            .acquire("lock:deployment:db", &second, Duration::ZERO)
            .await
            .unwrap();
        assert!(!guard.is_lost());
        drop(guard);
        locks
            .acquire("lock:deployment:web", &second, Duration::ZERO)
            .await
            .expect("free again once released");
    }
}
