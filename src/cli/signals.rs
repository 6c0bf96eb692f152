//! How a long-running command is asked to stop.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Listens for SIGINT (Ctrl-C) and SIGTERM (what a service manager or Kubernetes sends)
/// from the moment it is made: a signal that arrives while nobody awaits
/// [`StopSignals::requested`] is kept for the next await, not lost between two phases of
/// a command. Made inside a tokio runtime.
pub(crate) struct StopSignals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
}

impl StopSignals {
    pub(crate) fn listen() -> StopSignals {
        StopSignals {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    /// Resolves at the first SIGINT or SIGTERM since [`StopSignals::listen`] not yet
    /// consumed by an earlier call.
    pub(crate) async fn requested(&mut self) {
        async fn next(signal: Option<&mut Signal>) {
            match signal {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            () = next(self.interrupt.as_mut()) => {}
            () = next(self.terminate.as_mut()) => {}
        }
    }
}

/// Resolves at the first SIGINT or SIGTERM after the call.
pub(crate) async fn stop_requested() {
    StopSignals::listen().requested().await
}
