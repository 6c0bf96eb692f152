//! The agent's asynchronous tasks (`bosh-protocols.md` §2.3): an asynchronous action answers
//! at once with `{"agent_task_id", "state": "running"}` and runs on; `get_task` reports its
//! progress or result and `cancel_task` asks it to stop.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::watch;

/// What a finished task produced: its value, or the error message of its action.
pub type TaskResult = Result<Value, String>;

/// Why a task request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// No task has this id.
    #[error("Task with id {0} could not be found")]
    NotFound(String),
    /// The task's action does not support cancellation.
    #[error("not supported")]
    NotCancellable,
    /// The task failed (the agent's wording; the dispatcher adds "Action Failed get_task").
    #[error("Task {id} result: {message}")]
    Failed {
        /// The task.
        id: String,
        /// Its action's error.
        message: String,
    },
}

/// Tells a running task it was cancelled.
#[derive(Debug, Clone)]
pub struct Cancellation(watch::Receiver<bool>);

impl Cancellation {
    /// A cancellation that never comes (for synchronous actions).
    pub fn never() -> Cancellation {
        let (tx, rx) = watch::channel(false);
        // Dropping the sender makes `cancelled` pend forever.
        drop(tx);
        Cancellation(rx)
    }

    /// Completes when the task is cancelled (never, if it is not).
    pub async fn cancelled(mut self) {
        // An error means the sender is gone: the task can no longer be cancelled.
        if self.0.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

enum State {
    Running { cancel: Option<watch::Sender<bool>> },
    Done(TaskResult),
}

/// The tasks of one agent. Finished tasks are kept (the director polls once more after the
/// end); the oldest finished ones are dropped beyond [`Tasks::KEEP_FINISHED`].
#[derive(Default)]
pub struct Tasks {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, State>,
    finished: std::collections::VecDeque<String>,
}

fn lock(inner: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tasks {
    /// How many finished tasks are remembered.
    pub const KEEP_FINISHED: usize = 1000;

    /// Starts `run` as a task and returns the `{"agent_task_id", "state": "running"}` value.
    /// `cancellable` actions get a [`Cancellation`] that completes on `cancel_task`.
    pub fn start<F, Fut>(&self, cancellable: bool, run: F) -> Value
    where
        F: FnOnce(Cancellation) -> Fut,
        Fut: Future<Output = TaskResult> + Send + 'static,
    {
        let id = kubosh_base::ids::uuid_v4();
        let (tx, rx) = watch::channel(false);
        let cancel = cancellable.then_some(tx);
        lock(&self.inner)
            .tasks
            .insert(id.clone(), State::Running { cancel });
        let fut = run(Cancellation(rx));
        let inner = self.inner.clone();
        let task_id = id.clone();
        tokio::spawn(async move {
            let result = fut.await;
            if let Err(message) = &result {
                tracing::error!(task = %task_id, "task failed: {message}");
            }
            let mut g = lock(&inner);
            g.tasks.insert(task_id.clone(), State::Done(result));
            g.finished.push_back(task_id);
            while g.finished.len() > Self::KEEP_FINISHED {
                if let Some(old) = g.finished.pop_front() {
                    g.tasks.remove(&old);
                }
            }
        });
        running(&id)
    }

    /// `get_task`: the running shape, the task's value, or its failure.
    pub fn get(&self, id: &str) -> Result<Value, TaskError> {
        match lock(&self.inner).tasks.get(id) {
            None => Err(TaskError::NotFound(id.to_string())),
            Some(State::Running { .. }) => Ok(running(id)),
            Some(State::Done(Ok(v))) => Ok(v.clone()),
            Some(State::Done(Err(message))) => Err(TaskError::Failed {
                id: id.to_string(),
                message: message.clone(),
            }),
        }
    }

    /// `cancel_task`: signals a running cancellable task. Cancelling a finished task is a
    /// no-op, as in the agent.
    pub fn cancel(&self, id: &str) -> Result<(), TaskError> {
        match lock(&self.inner).tasks.get(id) {
            None => Err(TaskError::NotFound(id.to_string())),
            Some(State::Running { cancel: Some(tx) }) => {
                let _ = tx.send(true);
                Ok(())
            }
            Some(State::Running { cancel: None }) => Err(TaskError::NotCancellable),
            Some(State::Done(_)) => Ok(()),
        }
    }

    /// How many tasks are running.
    pub fn running_count(&self) -> usize {
        lock(&self.inner)
            .tasks
            .values()
            .filter(|s| matches!(s, State::Running { .. }))
            .count()
    }
}

fn running(id: &str) -> Value {
    json!({"agent_task_id": id, "state": "running"})
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn wait_done(tasks: &Tasks, id: &str) -> Result<Value, TaskError> {
        for _ in 0..500 {
            match tasks.get(id) {
                Ok(v) if v.get("state") == Some(&json!("running")) => {}
                other => return other,
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("task {id} did not finish");
    }

    #[tokio::test]
    async fn tasks_run_report_and_fail() {
        let tasks = Tasks::default();
        let started = tasks.start(false, |_| async { Ok(json!("applied")) });
        assert_eq!(started["state"], "running");
        let id = started["agent_task_id"].as_str().unwrap().to_string();
        assert_eq!(wait_done(&tasks, &id).await.unwrap(), json!("applied"));

        let failed = tasks.start(false, |_| async { Err("boom".to_string()) });
        let id = failed["agent_task_id"].as_str().unwrap().to_string();
        let err = wait_done(&tasks, &id).await.unwrap_err();
        assert_eq!(err.to_string(), format!("Task {id} result: boom"));
        assert_eq!(
            tasks.get("nope").unwrap_err().to_string(),
            "Task with id nope could not be found"
        );
    }

    #[tokio::test]
    async fn only_cancellable_tasks_cancel() {
        let tasks = Tasks::default();
        let started = tasks.start(true, |c| async move {
            c.cancelled().await;
            Err("cancelled".to_string())
        });
        let id = started["agent_task_id"].as_str().unwrap().to_string();
        assert_eq!(tasks.running_count(), 1);
        tasks.cancel(&id).unwrap();
        assert!(wait_done(&tasks, &id).await.is_err());
        // Cancelling again, once done, is fine.
        tasks.cancel(&id).unwrap();

        let plain = tasks.start(false, |_| std::future::pending());
        let id = plain["agent_task_id"].as_str().unwrap().to_string();
        assert_eq!(tasks.cancel(&id), Err(TaskError::NotCancellable));
    }
}
