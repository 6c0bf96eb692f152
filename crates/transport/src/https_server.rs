//! A small HTTPS server (hyper over tokio-rustls) shared by kubosh's HTTPS endpoints: the
//! agent's HTTPS mbus (`agentd::mbus::https`) and the blobstore's signed-URL endpoint
//! (`blobstore::endpoint`); without TLS, the controller's metrics and health endpoints.
//!
//! Each connection gets its own task; the TLS handshake has a time limit; HTTP/1.1 only.
//! Stopping stops accepting, winds down idle connections and lets requests in flight finish
//! (hyper-util's graceful shutdown).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Empty, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// How long a client may take to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of a file is read per response chunk.
const CHUNK: usize = 64 * 1024;

/// A response body: empty, a buffer, or a file streamed in chunks.
pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// What answers the requests of a server.
pub trait Routes: Send + Sync + 'static {
    /// The response to `req`.
    fn route(&self, req: hyper::Request<Incoming>) -> impl Future<Output = Response<Body>> + Send;
}

/// A response without a body.
pub fn empty(status: StatusCode) -> Response<Body> {
    let mut resp = Response::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
    *resp.status_mut() = status;
    resp
}

/// A response with `body`, labelled `content_type`.
pub fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(body.into())
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// A `200` streaming `file` (`len` bytes) as `application/octet-stream`.
pub fn file_response(file: tokio::fs::File, len: u64) -> Response<Body> {
    let chunks = futures::stream::try_unfold(file, |mut file| async move {
        let mut buf = vec![0u8; CHUNK];
        let n = file.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.truncate(n);
        Ok(Some((Frame::data(Bytes::from(buf)), file)))
    });
    let mut resp = Response::new(StreamBody::new(chunks).boxed_unsync());
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    resp.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(len));
    resp
}

/// A running server. Dropping it stops accepting connections; requests in flight still
/// finish in the background.
#[derive(Debug)]
pub struct HttpsServer {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
    name: &'static str,
}

impl HttpsServer {
    /// Serves `routes` on `listener` with TLS from `acceptor`. `name` labels log lines.
    pub fn spawn<R: Routes>(
        listener: TcpListener,
        acceptor: TlsAcceptor,
        routes: Arc<R>,
        name: &'static str,
    ) -> std::io::Result<HttpsServer> {
        HttpsServer::start(listener, Some(acceptor), routes, name)
    }

    /// Serves `routes` on `listener` over plain HTTP (what probes and Prometheus scrape).
    pub fn spawn_plain<R: Routes>(
        listener: TcpListener,
        routes: Arc<R>,
        name: &'static str,
    ) -> std::io::Result<HttpsServer> {
        HttpsServer::start(listener, None, routes, name)
    }

    fn start<R: Routes>(
        listener: TcpListener,
        acceptor: Option<TlsAcceptor>,
        routes: Arc<R>,
        name: &'static str,
    ) -> std::io::Result<HttpsServer> {
        let local_addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, acceptor, routes, stopped, name));
        tracing::info!(server = name, addr = %local_addr, "listening");
        Ok(HttpsServer {
            local_addr,
            stop,
            task: Some(task),
            name,
        })
    }

    /// The address the server listens on (useful when the configured port was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting connections, closes idle ones, and returns once every request in
    /// flight has been answered.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
        {
            tracing::warn!(server = self.name, error = %e, "server task failed");
        }
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn accept_loop<R: Routes>(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    routes: Arc<R>,
    mut stopped: watch::Receiver<bool>,
    name: &'static str,
) {
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.wait_for(|stop| *stop) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: back off as Go's http.Server does.
                tracing::warn!(server = name, error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let routes = routes.clone();
        // Taken before the handshake, so a shutdown during the handshake still waits for
        // (and immediately winds down) this connection.
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let routes = routes.clone();
                async move { Ok::<_, Infallible>(routes.route(req).await) }
            });
            let http = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .clone();
            let served = match acceptor {
                None => {
                    watcher
                        .watch(http.serve_connection(TokioIo::new(tcp), service))
                        .await
                }
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
                    let tls = match handshake.await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(server = name, %peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(server = name, %peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    watcher
                        .watch(http.serve_connection(TokioIo::new(tls), service))
                        .await
                }
            };
            if let Err(e) = served {
                tracing::debug!(server = name, %peer, error = %e, "connection error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    tracing::info!(server = name, "stopped");
}
