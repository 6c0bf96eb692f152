//! What this process knows of each deployment, by uid: the task running on it, how its last
//! deploy or deletion ended, its backoff, and when it last read its inputs. In memory only:
//! a restarted controller starts with an empty ledger and asks the engine again (which
//! knows from its records what is deployed).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::super::backoff::Backoffs;
use super::super::inputs::Inputs;
use kubosh_engine::CancellationToken;

/// What a deployment's inputs were when a deploy was attempted: the engine's digest of the
/// deploy (`kubosh_engine::inputs_digest`: the validated documents, release and stemcell
/// versions), computed from the resources before anything is materialised, the blob each
/// `Release` and `Stemcell` resource stored, so one stored anew under the same version is a
/// new attempt, and what the deployments it consumes links from share, so a provider that
/// scaled out (or appeared) makes a new attempt too.
///
/// The ledger remembers it for every attempt, failed and stalled ones too (the engine records
/// its digest only when a deploy succeeds): a stalled deploy is not tried again until its
/// inputs change. Whether a deploy has anything to do is still the engine's decision, from
/// the same digest: equal inputs and healthy agents make it a no-op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct InputsKey {
    /// The engine's digest of the deploy's inputs.
    digest: String,
    /// The blob each release (its `release.MF`) and stemcell resource stored, in order.
    blobs: Vec<Option<String>>,
    /// The digest of the shares of the deployments it consumes links from (`None`: it
    /// consumes from none).
    links: Option<String>,
}

impl InputsKey {
    /// The key of `inputs`, `links` being the digest of what the deployments it consumes
    /// from share.
    pub(super) fn of(inputs: &Inputs, links: Option<String>) -> InputsKey {
        let version = |name: &str, version: &str| format!("{name}/{version}");
        let releases: Vec<String> = (inputs.releases.iter())
            .map(|r| version(&r.spec.name, r.spec.version.as_str()))
            .collect();
        let stemcells: Vec<String> = (inputs.stemcells.iter())
            .map(|s| version(&s.spec.name, s.spec.version.as_str()))
            .collect();
        let release_blobs = (inputs.releases.iter())
            .map(|r| r.status.as_ref().and_then(|s| s.manifest_blob_id.clone()));
        let stemcell_blobs =
            (inputs.stemcells.iter()).map(|s| s.status.as_ref().and_then(|x| x.blob_id.clone()));
        InputsKey {
            digest: kubosh_engine::inputs_digest(&inputs.documents, &releases, &stemcells),
            blobs: release_blobs.chain(stemcell_blobs).collect(),
            links,
        }
    }
}

impl InputsKey {
    /// The key as one SHA-256 hex text (what an `ErrandRun` keeps of the deployment it ran
    /// on, for `whenChanged`).
    pub(super) fn fingerprint(&self) -> String {
        use sha2::Digest as _;
        let text = serde_json::json!([self.digest, self.blobs, self.links]).to_string();
        kubosh_base::digest::to_hex(&sha2::Sha256::digest(text.as_bytes()))
    }
}

/// What one deploy attempt was for: a generation of the spec with its inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Attempt {
    /// `metadata.generation`.
    pub(super) generation: i64,
    /// The inputs it read.
    pub(super) inputs: InputsKey,
}

/// The last outcome of a deployment's task, as this process saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Deployed.
    Deployed(Attempt),
    /// Failed for good until the spec or inputs change.
    Stalled(Attempt),
    /// Failed; retried not before `at`.
    DeployRetry {
        /// What failed.
        attempt: Attempt,
        /// When to try again.
        at: Instant,
    },
    /// Invalid or waiting inputs were reported for this generation.
    Reported {
        /// `metadata.generation`.
        generation: i64,
        /// What the status says.
        message: String,
    },
    /// Deleting failed; retried not before `at`.
    DeleteRetry {
        /// When to try again.
        at: Instant,
    },
    /// Deleted: its finalizer may go.
    Deleted,
}

/// What a deployment's running task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskKind {
    /// A deploy or an instance action.
    Deploy,
    /// Deleting the deployment (its finalizer).
    Delete,
    /// Running one of its errands (an `ErrandRun`).
    Errand,
}

/// A running task: what it does, its token, and why it was cancelled (when it was).
struct Running {
    kind: TaskKind,
    /// The uid of the `ErrandRun` an errand task runs.
    errand_run: Option<String>,
    token: CancellationToken,
    cancelled_because: Option<&'static str>,
}

/// Running tasks and last outcomes, by deployment uid.
#[derive(Default)]
pub struct Ledger {
    running: Mutex<HashMap<String, Running>>,
    outcomes: Mutex<HashMap<String, Outcome>>,
    backoff: Backoffs,
    /// When each deployment's last task ended (what agents said before is not news).
    ended: Mutex<HashMap<String, Instant>>,
    /// When each deployment last read its inputs, and its namespace's
    /// [`InputChanges`](super::InputChanges) counter then.
    read: Mutex<HashMap<String, (u64, Instant)>>,
    /// The generation whose spec this process kept for each deployment (see
    /// [`DeployedSpec`](crate::deployed_spec::DeployedSpec)).
    kept: Mutex<HashMap<String, i64>>,
    /// When a repair of each deployment from its kept spec may run again (after one failed).
    repair_not_before: Mutex<HashMap<String, Instant>>,
    /// Why each deployment's instances cannot be repaired, as last told (told once).
    repair_blocked: Mutex<HashMap<String, String>>,
}

impl Ledger {
    pub(super) fn outcome(&self, uid: &str) -> Option<Outcome> {
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .cloned()
    }

    pub(super) fn set_outcome(&self, uid: &str, outcome: Outcome) {
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uid.to_string(), outcome);
    }

    pub(super) fn clear_outcome(&self, uid: &str) {
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }

    pub(super) fn next_delay(&self, uid: &str) -> Duration {
        self.backoff.next(uid)
    }

    pub(super) fn reset_backoff(&self, uid: &str) {
        self.backoff.reset(uid);
    }

    /// Marks a task of `kind` on `uid` running, with a token cancelled with `parent` or by
    /// [`Ledger::cancel_deploy`]; `None` if one already runs.
    pub(super) fn start(
        &self,
        uid: &str,
        kind: TaskKind,
        parent: &CancellationToken,
    ) -> Option<CancellationToken> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if running.contains_key(uid) {
            return None;
        }
        let token = parent.child_token();
        let entry = Running {
            kind,
            errand_run: None,
            token: token.clone(),
            cancelled_because: None,
        };
        running.insert(uid.to_string(), entry);
        // Whatever blocked a repair, a task runs now: a new block is news again.
        (self
            .repair_blocked
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
        .remove(uid);
        Some(token)
    }

    /// [`Ledger::start`] of the errand task of `ErrandRun` `run` on deployment `uid`.
    pub(super) fn start_errand(
        &self,
        uid: &str,
        run: &str,
        parent: &CancellationToken,
    ) -> Option<CancellationToken> {
        let token = self.start(uid, TaskKind::Errand, parent)?;
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = running.get_mut(uid) {
            entry.errand_run = Some(run.to_string());
        }
        Some(token)
    }

    /// Whether the task of `ErrandRun` `run` runs in this process.
    pub(super) fn runs_errand(&self, run: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        (running.values()).any(|r| r.errand_run.as_deref() == Some(run))
    }

    /// Instances of `uid` cannot be repaired `because`: whether that is news (not what was
    /// last told since a task last started).
    pub(super) fn repair_blocked(&self, uid: &str, because: &str) -> bool {
        let mut told = (self.repair_blocked.lock()).unwrap_or_else(PoisonError::into_inner);
        told.insert(uid.to_string(), because.to_string()).as_deref() != Some(because)
    }

    /// Asks the deploy or errand running on `uid`, if any, to start no new step, `because`
    /// (said in its status); a deletion always runs to its end.
    pub(super) fn cancel_deploy(&self, uid: &str, because: &'static str) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = running.get_mut(uid).filter(|r| r.kind != TaskKind::Delete) {
            r.cancelled_because.get_or_insert(because);
            r.token.cancel();
        }
    }

    /// Why the task running on `uid` was cancelled, if it was by [`Ledger::cancel_deploy`].
    pub(super) fn cancelled_because(&self, uid: &str) -> Option<&'static str> {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        running.get(uid).and_then(|r| r.cancelled_because)
    }

    pub(super) fn finish(&self, uid: &str) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
        self.ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uid.to_string(), Instant::now());
    }

    /// Records that `uid` reads its inputs now, its namespace's counter at `counter`.
    pub(super) fn reading_inputs(&self, uid: &str, counter: u64) {
        self.read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uid.to_string(), (counter, Instant::now()));
    }

    /// How long ago `uid` read its inputs, if none changed since (the namespace's counter
    /// is still `counter`).
    pub(super) fn inputs_unchanged_for(&self, uid: &str, counter: u64) -> Option<Duration> {
        let read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        read.get(uid)
            .filter(|(c, _)| *c == counter)
            .map(|(_, at)| at.elapsed())
    }

    /// When the last task on `uid` ended in this process, if one did.
    pub(crate) fn ended(&self, uid: &str) -> Option<Instant> {
        self.ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .copied()
    }

    /// The generation whose spec this process kept for `uid`, if it kept one.
    pub(super) fn kept_generation(&self, uid: &str) -> Option<i64> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.get(uid).copied()
    }

    /// Records that `uid`'s spec of `generation` is kept.
    pub(super) fn set_kept_generation(&self, uid: &str, generation: i64) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.insert(uid.to_string(), generation);
    }

    /// How long until a repair of `uid` from its kept spec may run (zero: now).
    pub(super) fn repair_wait(&self, uid: &str) -> Duration {
        let not_before = self
            .repair_not_before
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (not_before.get(uid)).map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(Instant::now())
        })
    }

    /// A repair of `uid` ended: after a failure the next waits for the backoff; a success
    /// starts the backoff over.
    pub(super) fn repair_ended(&self, uid: &str, succeeded: bool) {
        if succeeded {
            self.reset_backoff(uid);
        }
        let at = (!succeeded).then(|| Instant::now() + self.next_delay(uid));
        let mut not_before = self
            .repair_not_before
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match at {
            Some(at) => not_before.insert(uid.to_string(), at),
            None => not_before.remove(uid),
        };
    }

    pub(crate) fn is_running(&self, uid: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_repair_waits_longer_each_time_and_a_success_starts_over() {
        let ledger = Ledger::default();
        assert_eq!(ledger.repair_wait("d"), Duration::ZERO);
        ledger.repair_ended("d", false);
        let first = ledger.repair_wait("d");
        assert!(
            first > Duration::ZERO && first <= Duration::from_secs(10),
            "{first:?}"
        );
        ledger.repair_ended("d", false);
        let second = ledger.repair_wait("d");
        assert!(second > Duration::from_secs(9), "{second:?}");
        ledger.repair_ended("d", true);
        assert_eq!(ledger.repair_wait("d"), Duration::ZERO);
        ledger.repair_ended("d", false);
        let again = ledger.repair_wait("d");
        assert!(
            again <= Duration::from_secs(10),
            "from the first delay: {again:?}"
        );
    }

    #[test]
    fn why_a_repair_is_blocked_is_news_once_until_a_task_starts() {
        let ledger = Ledger::default();
        assert!(ledger.repair_blocked("d", "no spec"));
        assert!(!ledger.repair_blocked("d", "no spec"));
        assert!(ledger.repair_blocked("d", "inputs"));
        let parent = CancellationToken::new();
        ledger
            .start("d", TaskKind::Deploy, &parent)
            .expect("none running");
        assert!(ledger.repair_blocked("d", "inputs"));
    }
}
