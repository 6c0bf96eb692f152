//! What this process knows of each deployment, by uid: the task running on it, how its last
//! deploy or deletion ended, its backoff, and when it last read its inputs. In memory only:
//! a restarted controller starts with an empty ledger and asks the engine again (which
//! knows from its records what is deployed).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use serde_json::json;

use super::super::backoff::Backoffs;
use super::super::inputs::Inputs;
use kubosh_engine::CancellationToken;

/// What a deployment's inputs were when a deploy was attempted: the manifest and cloud
/// config as deployed, and each `Release` and `Stemcell` resource with the blob it stored.
///
/// Not the engine's digest (`DeployRequest::inputs_digest`, recorded as
/// `DeploymentMeta::deployed_inputs`), for three reasons:
/// - The engine's digest names release and stemcell versions, which only the materialised
///   request knows (`release.MF` read from the blobstore, the stemcell tarball fetched and
///   extracted); the deploy task does that, a reconcile must not: every reconcile of every
///   deployment would pay blobstore reads and a stemcell extraction.
/// - The engine records its digest only when a deploy succeeds (with the director's trusted
///   certificates mixed in); this key also remembers attempts that failed or stalled, so a
///   stalled deploy is not tried again until its inputs change.
/// - It names the stored blobs, so a `Release` or `Stemcell` stored anew under the same
///   name is a new attempt.
///
/// It only decides whether to start a deploy task. Whether a deploy has anything to do is
/// still the engine's decision, from its own digest: equal inputs and healthy agents make
/// it a no-op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct InputsKey(String);

impl InputsKey {
    /// The key of `inputs`.
    pub(super) fn of(inputs: &Inputs) -> InputsKey {
        let doc = json!({
            "manifest": inputs.documents.document.0,
            "cloud_config": inputs.documents.document.1,
            "releases": inputs.releases.iter().map(|r| (r.name_any(), r.status.as_ref().and_then(|s| s.manifest_blob_id.clone()))).collect::<Vec<_>>(),
            "stemcells": inputs.stemcells.iter().map(|s| (s.name_any(), s.status.as_ref().and_then(|x| x.blob_id.clone()))).collect::<Vec<_>>(),
        });
        InputsKey(kubosh_base::digest::sha256_hex(doc.to_string().as_bytes()))
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
}

/// A running task: what it does, its token, and why it was cancelled (when it was).
struct Running {
    kind: TaskKind,
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
            token: token.clone(),
            cancelled_because: None,
        };
        running.insert(uid.to_string(), entry);
        Some(token)
    }

    /// Asks the deploy running on `uid`, if any, to start no new step, `because` (said in
    /// its status); a deletion always runs to its end.
    pub(super) fn cancel_deploy(&self, uid: &str, because: &'static str) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = running.get_mut(uid).filter(|r| r.kind == TaskKind::Deploy) {
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

    pub(crate) fn is_running(&self, uid: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(uid)
    }
}
