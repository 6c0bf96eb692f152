//! How a long-running command is asked to stop.

/// Resolves at the first SIGINT (Ctrl-C) or SIGTERM (what a service manager or Kubernetes
/// sends).
pub(crate) async fn stop_requested() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminated = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminated => {}
    }
}
