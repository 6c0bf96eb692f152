//! Named locks with the Director's semantics (`bosh-protocols.md` §4.14): one holder at a time
//! per name (`lock:deployment:<name>`, ...), acquisition polls every 0.5 s until a wait
//! timeout and then fails with BOSH's text, a held lock expires 240 s after its last renewal
//! and is renewed every 120 s, and a holder whose renewal fails learns that it lost the lock
//! (the Director then cancels the task).
//!
//! Two implementations of [`Lock`]: [`FileLocks`] (`flock(2)` on a file per name, for
//! create-env; the kernel drops the lock when the process dies, so it never needs to expire)
//! and [`LeaseLocks`] (a `coordination.k8s.io/v1` Lease per name, for the controller: held
//! while renewed, taken over once expired, every write guarded by `resourceVersion`).

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
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
            uid: crate::ids::uuid_v4(),
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
    fn timeout(name: &str, ours: &Holder, other: Option<Holder>) -> LockError {
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
    release: Option<Box<dyn FnOnce() + Send>>,
}

impl Guard {
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
        if let Some(release) = self.release.take() {
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
        &crate::digest::sha256_hex(name.as_bytes())[..12]
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
            Ok(Guard {
                lost,
                // Closing the file releases the flock.
                release: Some(Box::new(move || {
                    let _ = file.set_len(0);
                    drop(file);
                    drop(_tx);
                })),
            })
        })
    }
}

/// Locks as Leases in one namespace.
#[derive(Clone)]
pub struct LeaseLocks {
    api: Api<Lease>,
    expiry: Duration,
    renew: Duration,
}

impl LeaseLocks {
    /// Leases in `namespace`, with the Director's expiry and renewal periods.
    pub fn new(client: kube::Client, namespace: &str) -> LeaseLocks {
        LeaseLocks {
            api: Api::namespaced(client, namespace),
            expiry: EXPIRY,
            renew: RENEW,
        }
    }

    /// Other periods (tests shrink them).
    pub fn with_periods(mut self, expiry: Duration, renew: Duration) -> LeaseLocks {
        self.expiry = expiry;
        self.renew = renew;
        self
    }

    /// The Lease name of lock `name`.
    pub fn lease_name(name: &str) -> String {
        let safe: String = name
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let safe = safe.trim_matches('-');
        let short: String = safe.chars().take(40).collect();
        format!(
            "{short}-{}",
            &crate::digest::sha256_hex(name.as_bytes())[..10]
        )
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn holder_of(lease: &Lease) -> Option<Holder> {
    let text = lease
        .metadata
        .annotations
        .as_ref()?
        .get(HOLDER_ANNOTATION)?;
    serde_json::from_str(text).ok()
}

/// Where a Lease records the holder's task and description.
const HOLDER_ANNOTATION: &str = "kubosh.io/lock-holder";

fn expired(lease: &Lease, expiry: Duration) -> bool {
    let Some(spec) = &lease.spec else { return true };
    if spec
        .holder_identity
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        return true;
    }
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(renewed.0);
    let limit = spec.lease_duration_seconds.map_or(expiry, |s| {
        Duration::from_secs(u64::try_from(s).unwrap_or(0))
    });
    age.unsigned_abs() >= limit && age.is_positive()
}

impl LeaseLocks {
    fn lease(&self, lease_name: &str, holder: &Holder, base: Option<&Lease>) -> Lease {
        let mut meta = base
            .map(|b| b.metadata.clone())
            .unwrap_or_else(|| ObjectMeta {
                name: Some(lease_name.to_string()),
                ..ObjectMeta::default()
            });
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(
                HOLDER_ANNOTATION.to_string(),
                serde_json::to_string(holder).unwrap_or_default(),
            );
        let transitions = base
            .and_then(|b| b.spec.as_ref())
            .and_then(|s| s.lease_transitions)
            .unwrap_or(0);
        Lease {
            metadata: meta,
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.uid.clone()),
                lease_duration_seconds: Some(
                    i32::try_from(self.expiry.as_secs()).unwrap_or(i32::MAX),
                ),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(transitions + i32::from(base.is_some())),
                ..LeaseSpec::default()
            }),
        }
    }

    /// One attempt: `Ok(Some(lease))` when we hold it now, `Ok(None)` when someone else does
    /// (with who, for the error).
    async fn try_take(
        &self,
        lease_name: &str,
        holder: &Holder,
    ) -> Result<Result<Lease, Option<Holder>>, kube::Error> {
        match self.api.get_opt(lease_name).await? {
            None => match self
                .api
                .create(
                    &PostParams::default(),
                    &self.lease(lease_name, holder, None),
                )
                .await
            {
                Ok(l) => Ok(Ok(l)),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Err(None)),
                Err(e) => Err(e),
            },
            Some(existing) if expired(&existing, self.expiry) => {
                let next = self.lease(lease_name, holder, Some(&existing));
                match self
                    .api
                    .replace(lease_name, &PostParams::default(), &next)
                    .await
                {
                    Ok(l) => Ok(Ok(l)),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(Err(holder_of(&existing))),
                    Err(e) => Err(e),
                }
            }
            Some(existing) => Ok(Err(holder_of(&existing))),
        }
    }
}

impl Lock for LeaseLocks {
    fn acquire<'a>(
        &'a self,
        name: &'a str,
        holder: &'a Holder,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Guard, LockError>> {
        Box::pin(async move {
            let lease_name = LeaseLocks::lease_name(name);
            let store = |e: kube::Error| LockError::Store {
                name: name.to_string(),
                reason: e.to_string(),
            };
            let deadline = tokio::time::Instant::now() + wait;
            let lease = loop {
                match self.try_take(&lease_name, holder).await.map_err(store)? {
                    Ok(lease) => break lease,
                    Err(other) => {
                        if tokio::time::Instant::now() >= deadline {
                            return Err(LockError::timeout(name, holder, other));
                        }
                        tokio::time::sleep(POLL).await;
                    }
                }
            };
            let (lost_tx, lost) = watch::channel(false);
            let (stop_tx, mut stop_rx) = watch::channel(false);
            let api = self.api.clone();
            let renew = self.renew;
            let uid = holder.uid.clone();
            let renewer = tokio::spawn({
                let lease_name = lease_name.clone();
                async move {
                    let mut current = lease;
                    loop {
                        tokio::select! {
                            _ = stop_rx.wait_for(|s| *s) => break,
                            () = tokio::time::sleep(renew) => {}
                        }
                        let ours = current
                            .spec
                            .as_ref()
                            .and_then(|s| s.holder_identity.as_deref())
                            == Some(uid.as_str());
                        if !ours {
                            let _ = lost_tx.send(true);
                            break;
                        }
                        let mut next = current.clone();
                        if let Some(spec) = next.spec.as_mut() {
                            spec.renew_time = Some(now());
                        }
                        match api
                            .replace(&lease_name, &PostParams::default(), &next)
                            .await
                        {
                            Ok(l) => current = l,
                            Err(e) => {
                                tracing::warn!(lease = %lease_name, "lock renewal failed: {e}");
                                let _ = lost_tx.send(true);
                                break;
                            }
                        }
                    }
                    current
                }
            });
            let api = self.api.clone();
            let release_uid = holder.uid.clone();
            let release = move || {
                let _ = stop_tx.send(true);
                // Delete the Lease if it is still ours (best effort, off the dropping thread).
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    handle.spawn(async move {
                        let Ok(current) = renewer.await else { return };
                        let ours = current
                            .spec
                            .as_ref()
                            .and_then(|s| s.holder_identity.as_deref())
                            == Some(release_uid.as_str());
                        if !ours {
                            return;
                        }
                        let params = DeleteParams {
                            preconditions: Some(Preconditions {
                                resource_version: current.metadata.resource_version.clone(),
                                uid: current.metadata.uid.clone(),
                            }),
                            ..DeleteParams::default()
                        };
                        let name = current.metadata.name.clone().unwrap_or_default();
                        let _ = api.delete(&name, &params).await;
                    });
                }
            };
            Ok(Guard {
                lost,
                release: Some(Box::new(release)),
            })
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
        let a = LeaseLocks::lease_name("lock:deployment:my_dep");
        let b = LeaseLocks::lease_name("lock:deployment:my-dep");
        assert_ne!(a, b);
        assert!(a.starts_with("lock-deployment-my-dep-"), "{a}");
        assert!(a.len() <= 63);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
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
