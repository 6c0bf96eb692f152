//! kubosh's blob endpoint: a [`LocalBlobstore`] served over HTTPS to agents that cannot see
//! its directory, through URLs signed by an [`HmacSigner`] (the director hands them out in
//! `signed_url` fields, `bosh-protocols.md` §2.9).
//!
//! * `GET /blobs/<id>?expires=…&method=GET&sig=…` streams the blob (`200`, `404` if there is
//!   none).
//! * `PUT /blobs/<id>?expires=…&method=PUT&sig=…` stores the body as blob `<id>` (`201`). The
//!   id is the director's choice, as it signed it: a content id (64 lowercase hex digits)
//!   must be the sha256 of the body, or nothing is stored and the answer is `400`; any other
//!   id (a UUID the director picked for a compiled package) is taken as it is, replacing an
//!   earlier upload under that id (an agent may retry). The body is staged and moved into
//!   place only when complete.
//! * A missing, malformed, expired or wrong signature, or one for another method or id ⇒
//!   `403`; other methods ⇒ `405`; other paths ⇒ `404`.
//!
//! The signing key is never logged; request logs carry the method and the blob id only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use futures::TryStreamExt as _;
use http::{Method, Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::core::Naming;
use super::{BlobstoreError, HmacSigner, LocalBlobstore, SignedMethod, check_id};
use kubosh_transport::https_server::{self, Body, HttpsServer, empty, file_response, full};
use kubosh_transport::tls::{self, TlsError};

/// Where the endpoint listens and its TLS identity. `Debug` leaves out the key.
#[derive(Clone)]
pub struct EndpointConfig {
    /// The address to listen on.
    pub listen: SocketAddr,
    /// The server certificate chain, PEM, leaf first.
    pub cert_pem: String,
    /// The server private key, PEM.
    pub key_pem: String,
}

impl std::fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("listen", &self.listen)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Why the endpoint could not start. Never contains the key.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The certificate or key is unusable.
    #[error("blob endpoint certificate: {0}")]
    Tls(#[from] TlsError),
    /// The listening socket could not be bound.
    #[error("blob endpoint: listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

/// A running blob endpoint. Dropping it stops accepting connections.
#[derive(Debug)]
pub struct BlobEndpoint {
    server: HttpsServer,
}

impl BlobEndpoint {
    /// The address it listens on (useful when the configured port was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Stops accepting connections and waits for requests in flight.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

/// Serves `store` on `config.listen`, accepting URLs signed by `signer`.
pub async fn serve(
    config: EndpointConfig,
    store: LocalBlobstore,
    signer: HmacSigner,
) -> Result<BlobEndpoint, EndpointError> {
    let tls = tls::server_config(&config.cert_pem, &config.key_pem, &[b"http/1.1"])?;
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let bind = |source| EndpointError::Bind {
        addr: config.listen,
        source,
    };
    let listener = TcpListener::bind(config.listen).await.map_err(bind)?;
    let routes = Arc::new(Routes { store, signer });
    let server = HttpsServer::spawn(listener, acceptor, routes, "blob endpoint").map_err(bind)?;
    Ok(BlobEndpoint { server })
}

struct Routes {
    store: LocalBlobstore,
    signer: HmacSigner,
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    full(status, "text/plain; charset=utf-8", body.into())
}

impl https_server::Routes for Routes {
    async fn route(&self, req: hyper::Request<Incoming>) -> Response<Body> {
        let Some(id) = req
            .uri()
            .path()
            .strip_prefix("/blobs/")
            .filter(|id| check_id(id).is_ok())
            .map(str::to_string)
        else {
            return text(StatusCode::NOT_FOUND, "404 page not found\n");
        };
        let method = match *req.method() {
            Method::GET => SignedMethod::Get,
            Method::PUT => SignedMethod::Put,
            _ => return empty(StatusCode::METHOD_NOT_ALLOWED),
        };
        let query = req.uri().query().unwrap_or_default();
        if let Err(e) = self.signer.verify(method, &id, query, SystemTime::now()) {
            tracing::info!(method = method.as_str(), blob = %id, reason = %e, "blob endpoint: refused");
            return text(StatusCode::FORBIDDEN, format!("{e}\n"));
        }
        tracing::info!(method = method.as_str(), blob = %id, "blob endpoint request");
        match method {
            SignedMethod::Get => self.get(&id).await,
            SignedMethod::Put => self.put(&id, req.into_body()).await,
        }
    }
}

impl Routes {
    async fn get(&self, id: &str) -> Response<Body> {
        let Ok(path) = self.store.path_of(id) else {
            return empty(StatusCode::NOT_FOUND);
        };
        let opened = async {
            let file = tokio::fs::File::open(&path).await?;
            let meta = file.metadata().await?;
            Ok::<_, std::io::Error>((file, meta))
        }
        .await;
        match opened {
            Ok((file, meta)) if meta.is_file() => file_response(file, meta.len()),
            Ok(_) => empty(StatusCode::NOT_FOUND),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => empty(StatusCode::NOT_FOUND),
            Err(e) => {
                tracing::error!(blob = %id, error = %e, "blob endpoint: reading blob");
                empty(StatusCode::INTERNAL_SERVER_ERROR)
            }
        }
    }

    async fn put(&self, id: &str, body: Incoming) -> Response<Body> {
        let chunks = body.into_data_stream().map_err(|e| BlobstoreError::Io {
            id: id.to_string(),
            path: "request body".into(),
            source: std::io::Error::other(e),
        });
        match self.store.core().put_stream(chunks, Naming::Id(id)).await {
            Ok(_) => empty(StatusCode::CREATED),
            Err(e @ BlobstoreError::NotItsId { .. }) => {
                text(StatusCode::BAD_REQUEST, format!("{e}\n"))
            }
            Err(e) => {
                tracing::error!(blob = %id, error = %e, "blob endpoint: storing blob");
                text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
            }
        }
    }
}
