//! Named locks for the controller: everything of `kubosh_engine::lock` (re-exported) and
//! [`LeaseLocks`], a `coordination.k8s.io/v1` Lease per name: held while renewed, taken over
//! once expired, every write guarded by `resourceVersion`.
//!
//! A Lease also names the [`Process`] holding it. A process that restarts with the same
//! identity (a controller container restarted in its pod: pod names are unique among live
//! pods) takes its dead predecessor's locks at once instead of waiting for them to expire.

use futures::future::BoxFuture;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use tokio::sync::watch;

use crate::state::is_conflict;

pub use kubosh_engine::lock::*;

/// Locks as Leases in one namespace.
#[derive(Clone)]
pub struct LeaseLocks {
    api: Api<Lease>,
    expiry: Duration,
    renew: Duration,
    process: Option<Process>,
}

/// Which process holds a lock.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Process {
    /// Unique among the live processes (a pod name).
    pub identity: String,
    /// Unique per start of the process.
    pub incarnation: String,
}

impl Process {
    /// This start of the process named `identity`.
    pub fn new(identity: impl Into<String>) -> Process {
        Process {
            identity: identity.into(),
            incarnation: kubosh_base::ids::uuid_v4(),
        }
    }

    /// `other` is an earlier start of this process, so it is dead.
    fn succeeds(&self, other: &Process) -> bool {
        self.identity == other.identity && self.incarnation != other.incarnation
    }
}

impl LeaseLocks {
    /// Leases in `namespace`, with the Director's expiry and renewal periods.
    pub fn new(client: kube::Client, namespace: &str) -> LeaseLocks {
        LeaseLocks {
            api: Api::namespaced(client, namespace),
            expiry: EXPIRY,
            renew: RENEW,
            process: None,
        }
    }

    /// Locks held by `process`, which takes over those of its earlier starts.
    pub fn held_by(mut self, process: Process) -> LeaseLocks {
        self.process = Some(process);
        self
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
            &kubosh_base::digest::sha256_hex(name.as_bytes())[..10]
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
/// Where a Lease records the holder's [`Process`].
const PROCESS_ANNOTATION: &str = "kubosh.io/lock-process";

fn process_of(lease: &Lease) -> Option<Process> {
    let text = lease
        .metadata
        .annotations
        .as_ref()?
        .get(PROCESS_ANNOTATION)?;
    serde_json::from_str(text).ok()
}

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
        let annotations = meta.annotations.get_or_insert_with(Default::default);
        annotations.insert(
            HOLDER_ANNOTATION.to_string(),
            serde_json::to_string(holder).unwrap_or_default(),
        );
        match &self.process {
            Some(p) => annotations.insert(
                PROCESS_ANNOTATION.to_string(),
                serde_json::to_string(p).unwrap_or_default(),
            ),
            None => annotations.remove(PROCESS_ANNOTATION),
        };
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
    /// (with who, for the error). A lock is usually free (its holder deletes the Lease when
    /// done): the Lease is created first, and read only when one exists.
    async fn try_take(
        &self,
        lease_name: &str,
        holder: &Holder,
    ) -> Result<Result<Lease, Option<Holder>>, kube::Error> {
        let fresh = self.lease(lease_name, holder, None);
        match self.api.create(&PostParams::default(), &fresh).await {
            Ok(l) => return Ok(Ok(l)),
            Err(e) if is_conflict(&e) => {}
            Err(e) => return Err(e),
        }
        match self.api.get_opt(lease_name).await? {
            // Released in between: the next attempt creates it.
            None => Ok(Err(None)),
            Some(existing)
                if expired(&existing, self.expiry)
                    || self
                        .process
                        .as_ref()
                        .zip(process_of(&existing))
                        .is_some_and(|(ours, theirs)| ours.succeeds(&theirs)) =>
            {
                let next = self.lease(lease_name, holder, Some(&existing));
                match self
                    .api
                    .replace(lease_name, &PostParams::default(), &next)
                    .await
                {
                    Ok(l) => Ok(Ok(l)),
                    Err(e) if is_conflict(&e) => Ok(Err(holder_of(&existing))),
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
            Ok(Guard::new(lost, Box::new(release)))
        })
    }
}

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
    }
}
