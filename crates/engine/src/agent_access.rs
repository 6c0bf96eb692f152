//! Who may use the message bus: each agent is let in before its VM is created and locked out
//! once its VM is deleted (what bosh-nats-sync does for BOSH, `bosh-protocols.md` §2.1), so
//! an agent can only hear its own requests and answer as itself
//! (`kubosh_bosh::agent::nats_auth`).
//!
//! The engine calls an [`AgentAccess`] ([`crate::EngineConfig::agent_access`]); kubosh's is
//! [`NatsAuthorizationFile`]: the whole `authorization` block of the nats-server
//! configuration in a file the server `include`s, rewritten atomically under a file lock
//! (every process sharing the server — deploys of other deployments, the controller — keeps
//! the others' agents), then a reload signalled to the server (`SIGHUP` to the pid in its
//! `pid_file`; without one, something else must reload it, e.g. a config-reloader sidecar
//! watching the file). Reloads apply to open connections: a removed agent's connection is
//! closed (nats-server `reloadAuthorization`). Concurrent changes of one process go out in
//! one write and one reload.

use std::collections::BTreeSet;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use futures::future::BoxFuture;
use serde_json::Value;

use kubosh_bosh::agent::nats_auth::{self, NatsAuthError};

/// Lets agents onto the message bus and locks them out.
pub trait AgentAccess: Send + Sync {
    /// Lets `agent_ids` in (before their VMs are created).
    fn admit<'a>(&'a self, agent_ids: &'a [String]) -> BoxFuture<'a, Result<(), AccessError>>;
    /// Locks `agent_ids` out (after their VMs are deleted).
    fn revoke<'a>(&'a self, agent_ids: &'a [String]) -> BoxFuture<'a, Result<(), AccessError>>;
}

/// Why the bus's permissions could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// A file could not be read, written or locked.
    #[error("NATS authorization: {what} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file holds something else than an authorization block.
    #[error("NATS authorization: {} is not an authorization block kubosh wrote: {reason}", .path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An agent id or identity cannot be written as a user.
    #[error("NATS authorization: {0}")]
    Users(#[from] NatsAuthError),
    /// nats-server could not be told to reload.
    #[error("NATS authorization: cannot signal nats-server (pid file {}): {reason}", .pid_file.display())]
    Reload {
        /// The pid file.
        pid_file: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// One change, in the order asked.
#[derive(Debug, Clone)]
enum Change {
    Admit(String),
    Revoke(String),
}

/// The nats-server authorization block in a file ([module docs](self)).
#[derive(Debug)]
pub struct NatsAuthorizationFile {
    file: PathBuf,
    pid_file: Option<PathBuf>,
    director_subject: String,
    hm_subject: String,
    /// Changes not written yet; the next writer takes them all.
    pending: Mutex<Vec<Change>>,
    /// One writer at a time in this process (the file lock covers other processes).
    writer: tokio::sync::Mutex<()>,
}

impl NatsAuthorizationFile {
    /// The block in `file` for the director's and the health monitor's certificate subjects
    /// (as [`kubosh_base::pki::subject_dn`] gives them); `pid_file` is nats-server's, to
    /// signal a reload after each change.
    pub fn new(
        file: PathBuf,
        pid_file: Option<PathBuf>,
        director_subject: String,
        hm_subject: String,
    ) -> NatsAuthorizationFile {
        NatsAuthorizationFile {
            file,
            pid_file,
            director_subject,
            hm_subject,
            pending: Mutex::new(Vec::new()),
            writer: tokio::sync::Mutex::new(()),
        }
    }

    /// The agents the file lets in now.
    pub fn agents(&self) -> Result<BTreeSet<String>, AccessError> {
        read_agents(&self.file)
    }

    async fn change(&self, changes: Vec<Change>) -> Result<(), AccessError> {
        if changes.is_empty() {
            return Ok(());
        }
        lock(&self.pending).extend(changes);
        let _writer = self.writer.lock().await;
        let batch = std::mem::take(&mut *lock(&self.pending));
        if batch.is_empty() {
            // A writer before us took our changes along.
            return Ok(());
        }
        // Small file work under a lock other processes hold only as briefly.
        let changed = self.rewrite(&batch, false)?;
        if changed {
            self.reload()?;
        }
        Ok(())
    }

    /// Applies `changes` to the file under its lock; true when its content changed.
    fn rewrite(&self, changes: &[Change], always: bool) -> Result<bool, AccessError> {
        let lock_path = self.file.with_extension("lock");
        if let Some(dir) = self.file.parent() {
            std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        }
        let lock_file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io("opening", &lock_path))?;
        // SAFETY: flock(2) on a descriptor we own; released when the file is closed.
        if unsafe { libc::flock(lock_file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io("locking", &lock_path)(std::io::Error::last_os_error()));
        }
        let before = read_agents(&self.file)?;
        let mut agents = before.clone();
        for change in changes {
            match change {
                Change::Admit(id) => agents.insert(id.clone()),
                Change::Revoke(id) => agents.remove(id),
            };
        }
        if agents == before && !always {
            return Ok(false);
        }
        let ids: Vec<String> = agents.into_iter().collect();
        let doc = nats_auth::authorization(&self.director_subject, &self.hm_subject, &ids)?;
        let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(io("writing", &tmp))?;
        std::fs::rename(&tmp, &self.file).map_err(io("replacing", &self.file))?;
        drop(lock_file);
        Ok(true)
    }

    /// Tells nats-server to read its configuration again (`SIGHUP`, as
    /// `nats-server --signal reload=<pid file>` does).
    fn reload(&self) -> Result<(), AccessError> {
        let Some(pid_file) = &self.pid_file else {
            return Ok(());
        };
        let failed = |reason: String| AccessError::Reload {
            pid_file: pid_file.clone(),
            reason,
        };
        let text = std::fs::read_to_string(pid_file).map_err(|e| failed(e.to_string()))?;
        let pid: libc::pid_t = text
            .trim()
            .parse()
            .ok()
            .filter(|p| *p > 1)
            .ok_or_else(|| failed(format!("{:?} is not a pid", text.trim())))?;
        // SAFETY: kill(2) with a plain pid and signal.
        if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
            return Err(failed(std::io::Error::last_os_error().to_string()));
        }
        Ok(())
    }
}

impl AgentAccess for NatsAuthorizationFile {
    fn admit<'a>(&'a self, agent_ids: &'a [String]) -> BoxFuture<'a, Result<(), AccessError>> {
        let changes = agent_ids.iter().cloned().map(Change::Admit).collect();
        Box::pin(self.change(changes))
    }

    fn revoke<'a>(&'a self, agent_ids: &'a [String]) -> BoxFuture<'a, Result<(), AccessError>> {
        let changes = agent_ids.iter().cloned().map(Change::Revoke).collect();
        Box::pin(self.change(changes))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> AccessError {
    let path = path.to_path_buf();
    move |source| AccessError::Io { what, path, source }
}

/// The agent ids of the users in an authorization file (none when it does not exist).
fn read_agents(file: &Path) -> Result<BTreeSet<String>, AccessError> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(io("reading", file)(e)),
    };
    let unreadable = |reason: String| AccessError::Unreadable {
        path: file.to_path_buf(),
        reason,
    };
    let doc: Value = serde_json::from_str(&text).map_err(|e| unreadable(e.to_string()))?;
    let users = doc["authorization"]["users"]
        .as_array()
        .ok_or_else(|| unreadable("no authorization.users list".into()))?;
    Ok(users
        .iter()
        .filter_map(|u| u["user"].as_str())
        .filter_map(|u| u.strip_prefix("CN=")?.strip_suffix(".agent.bosh-internal"))
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path) -> NatsAuthorizationFile {
        NatsAuthorizationFile::new(
            dir.join("nats/authorization.json"),
            None,
            "CN=default.director.bosh-internal".into(),
            "CN=default.hm.bosh-internal".into(),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn agents_come_and_go_and_every_writer_keeps_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let (one, other) = (file(dir.path()), file(dir.path()));
        one.admit(&["a".into(), "b".into()]).await.unwrap();
        other.admit(&["c".into()]).await.unwrap();
        one.revoke(&["a".into()]).await.unwrap();
        let expected: BTreeSet<String> = ["b", "c"].into_iter().map(String::from).collect();
        assert_eq!(one.agents().unwrap(), expected);
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&one.file).unwrap()).unwrap();
        assert_eq!(
            doc["authorization"]["users"][0]["user"],
            "CN=default.director.bosh-internal"
        );
        assert!(one.admit(&["x.y".into()]).await.is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_cannot_be_signalled_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = file(dir.path());
        f.pid_file = Some(dir.path().join("missing.pid"));
        let err = f.admit(&["a".into()]).await.unwrap_err();
        assert!(matches!(err, AccessError::Reload { .. }), "{err}");
    }
}
