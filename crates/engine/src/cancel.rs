//! Stopping a task between steps: a deploy or delete runs under its deployment lock and a
//! cancellation token ([`Engine::cancel`]). Once the token is cancelled (the driver shuts
//! down, the deployment is paused) or the lock is lost (its renewal failed: someone else
//! may hold the deployment now), the task starts no new step (no compilation, VM creation,
//! instance update or deletion) but lets the steps in flight finish, so every cloud
//! creation it made is recorded or left as an intent the next run settles. It then fails
//! with [`EngineError::Cancelled`], which a driver retries.

use std::future::Future;

use super::{Engine, EngineError};
use crate::lock::{Holder, deployment_lock};

impl Engine {
    /// `Err(Cancelled)` once this task must start nothing new.
    pub(crate) fn checkpoint(&self) -> Result<(), EngineError> {
        if self.cancel.is_cancelled() {
            return Err(EngineError::Cancelled { lock_lost: false });
        }
        Ok(())
    }

    /// Runs `task` on a copy of this engine whose token is cancelled when ours is or when
    /// the lock of deployment `name` (taken first, as `description`) is lost; the lock is
    /// released when `task` ends.
    pub(crate) async fn under_deployment_lock<T, F>(
        &self,
        name: &str,
        description: &str,
        task: impl FnOnce(Engine) -> F,
    ) -> Result<T, EngineError>
    where
        F: Future<Output = Result<T, EngineError>>,
    {
        let holder = Holder::new(kubosh_base::ids::uuid_v4(), description);
        let guard = self
            .locks
            .acquire(&deployment_lock(name), &holder, self.config.lock_wait)
            .await?;
        let cancel = self.cancel.child_token();
        let engine = Engine {
            cancel: cancel.clone(),
            ..self.clone()
        };
        let run = task(engine);
        tokio::pin!(run);
        let result = tokio::select! {
            result = &mut run => result,
            () = guard.lost() => {
                tracing::warn!(deployment = %name, "the deployment lock was lost: no new step starts");
                cancel.cancel();
                run.await
            }
        };
        let lock_lost = guard.is_lost();
        drop(guard);
        match result {
            Err(EngineError::Cancelled { .. }) => Err(EngineError::Cancelled { lock_lost }),
            other => other,
        }
    }
}
