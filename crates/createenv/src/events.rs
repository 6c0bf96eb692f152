//! What create-env shows while it runs, as typed events (bosh-cli's UI stages): lines,
//! complex stages (`Started validating` … `Finished validating (00:00:05)`) and the steps
//! inside or outside them (`Compiling package 'x/fp'... Finished (00:00:09)`). The engine
//! only emits them; the binary prints them as bosh-cli does, or as JSON lines.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "message", rename_all = "snake_case")]
pub enum StepOutcome {
    /// `Finished`.
    Finished,
    /// `Failed`; the message is the error's first line.
    Failed(String),
    /// `Skipped [<reason>]`.
    Skipped(String),
}

/// One thing to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EnvEvent {
    /// A line of its own (`Deployment manifest: '…'`, `No deployment, stemcell or release
    /// changes. Skipping deploy.`).
    Line {
        /// The text.
        text: String,
    },
    /// A warning line.
    Warning {
        /// The text.
        text: String,
    },
    /// `Started <stage>`.
    StageStarted {
        /// The stage (`validating`, `installing CPI`, `deploying`, `deleting deployment`).
        stage: String,
    },
    /// `Finished <stage> (HH:MM:SS)` or `Failed <stage> (HH:MM:SS)`.
    StageEnded {
        /// The stage.
        stage: String,
        /// Whether it failed.
        failed: bool,
        /// How long it took, in whole seconds.
        seconds: u64,
    },
    /// `<step>...` (inside the current stage, if any).
    StepStarted {
        /// The step.
        step: String,
    },
    /// How a step ended and how long it took.
    StepEnded {
        /// The step.
        step: String,
        /// How it ended.
        #[serde(flatten)]
        outcome: StepOutcome,
        /// Whole seconds.
        seconds: u64,
    },
}

/// Where events go.
pub trait EnvEventSink: Send + Sync {
    /// Shows one event.
    fn emit(&self, event: EnvEvent);
}

/// The emitter the flow uses: timing and the outcome of steps and stages.
#[derive(Clone)]
pub struct Ui {
    sink: Arc<dyn EnvEventSink>,
}

impl Ui {
    /// Emits to `sink`.
    pub fn new(sink: Arc<dyn EnvEventSink>) -> Ui {
        Ui { sink }
    }

    /// A line of its own.
    pub fn line(&self, text: impl Into<String>) {
        self.sink.emit(EnvEvent::Line { text: text.into() });
    }

    /// A warning.
    pub fn warn(&self, text: impl Into<String>) {
        // Shown once, by the sink (a log line too would print it twice on a terminal).
        let text = text.into();
        tracing::debug!("warning: {text}");
        self.sink.emit(EnvEvent::Warning { text });
    }

    /// Runs `body` as stage `name`.
    pub async fn stage<T, E>(
        &self,
        name: &str,
        body: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.sink.emit(EnvEvent::StageStarted {
            stage: name.to_string(),
        });
        let started = Instant::now();
        let result = body.await;
        self.sink.emit(EnvEvent::StageEnded {
            stage: name.to_string(),
            failed: result.is_err(),
            seconds: whole_seconds(started.elapsed()),
        });
        result
    }

    /// Runs `body` as step `name`: `Finished`, `Skipped [reason]` when it answers
    /// `Ok(Some(reason))`, `Failed` with the error.
    pub async fn step<T, E: std::fmt::Display>(
        &self,
        name: &str,
        body: impl Future<Output = Result<(T, Option<String>), E>>,
    ) -> Result<T, E> {
        self.sink.emit(EnvEvent::StepStarted {
            step: name.to_string(),
        });
        let started = Instant::now();
        let result = body.await;
        let outcome = match &result {
            Ok((_, None)) => StepOutcome::Finished,
            Ok((_, Some(reason))) => StepOutcome::Skipped(reason.clone()),
            Err(e) => StepOutcome::Failed(e.to_string().lines().next().unwrap_or("").into()),
        };
        self.sink.emit(EnvEvent::StepEnded {
            step: name.to_string(),
            outcome,
            seconds: whole_seconds(started.elapsed()),
        });
        result.map(|(value, _)| value)
    }

    /// [`Ui::step`] for a body that is never skipped.
    pub async fn run<T, E: std::fmt::Display>(
        &self,
        name: &str,
        body: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.step(name, async { body.await.map(|v| (v, None)) })
            .await
    }
}

fn whole_seconds(d: Duration) -> u64 {
    d.as_secs()
}
