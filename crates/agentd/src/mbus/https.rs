//! The agent's HTTPS message bus, the server side of `bosh create-env`
//! (`bosh-protocols.md` §2.2; bosh-agent's `mbus/https_handler.go` and
//! `mbus/https_dispatcher.go`).
//!
//! The agent listens on the host and port of its `https://user:password@host:port` mbus URL,
//! with TLS (1.2 and 1.3, ALPN `http/1.1`) using the server certificate and key of its
//! settings. Routes, as bosh-agent answers them:
//!
//! * `/agent` and `/blobs/…` require the header `Authorization: Basic <base64(user:password)>`
//!   exactly (compared in constant time); otherwise `401` with
//!   `WWW-Authenticate: Basic realm=""` and no body.
//! * `POST /agent`: the body is the request envelope without `protocol`
//!   (`{"method","arguments","reply_to"}`); the [`Handler`]'s reply goes back as `200` with
//!   the `{"value"}`/`{"exception"}` JSON, without a size limit. Any other method ⇒ `404`;
//!   a body that is not a JSON request object ⇒ `500`, both without a body, as the agent does.
//! * `PUT /blobs/<anything>/<blob_id>` stores the body as blob `<blob_id>` (only the last path
//!   segment counts) in the blobs directory ⇒ `201`; `GET` of the same path streams it back
//!   (`200`), `404` if there is no such blob; other methods ⇒ `404`.
//! * Any other path ⇒ `404 page not found`, without authentication (bosh-agent registers
//!   only the two routes above).
//!
//! Where kubosh deliberately differs from bosh-agent:
//!
//! * A blob id must be one safe path segment ([`check_name`]); otherwise `400` (bosh-agent's
//!   router redirects `..` paths instead). A blob is written to `<blobs_dir>/tmp` first and
//!   renamed into place, so readers never see a partial blob.
//! * The mbus URL must carry a user and a password; bosh-agent would accept an empty pair.
//! * `arguments` that are not an array make the request unparseable (`500`); bosh-agent
//!   reads them later and answers with an exception. A `protocol` key, which the CLI never
//!   sends, is passed on as bosh-agent does.
//! * Replies are labelled `Content-Type: application/json` (bosh-agent lets Go guess).
//! * rustls's default TLS 1.2 cipher suites (bosh-agent restricts TLS 1.2 to ECDHE-RSA with
//!   AES-GCM, which would leave ECDSA certificates to TLS 1.3 only).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use http::header::{AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};
use http::{Method, Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::Value;
use subtle::ConstantTimeEq as _;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::Handler;
use crate::layout::check_name;
use kubosh_transport::agent::protocol::Request;
use kubosh_transport::https_server::{Body, HttpsServer, empty, file_response, full};
use kubosh_transport::tls::{self, TlsError};

/// The subdirectory of the blobs directory where uploads are written before they are
/// renamed into place (bosh-agent's blob manager keeps its temporary files there too).
const TMP_DIR: &str = "tmp";

/// Why the HTTPS mbus could not be configured or started. Never contains the mbus password
/// or the private key.
#[derive(Debug, thiserror::Error)]
pub enum HttpsMbusError {
    /// The mbus URL is not an `https://user:password@host:port` URL.
    #[error("invalid mbus URL: {0}")]
    Url(&'static str),
    /// The mbus URL's host does not resolve to an address.
    #[error("invalid mbus URL: cannot resolve host {host:?}: {reason}")]
    Resolve {
        /// The host.
        host: String,
        /// Why.
        reason: String,
    },
    /// The server certificate or key is unusable.
    #[error("mbus server certificate: {0}")]
    Tls(#[from] TlsError),
    /// The blobs directory could not be created.
    #[error("blobs directory {path}: {source}")]
    BlobsDir {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The listening socket could not be bound.
    #[error("Starting HTTP listener on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

/// What the HTTPS mbus server needs: where to listen, the Basic auth credentials, the TLS
/// identity and where blobs go. `Debug` leaves out the password and the key.
#[derive(Clone)]
pub struct HttpsMbusConfig {
    /// The address to listen on (host and port of the mbus URL).
    pub listen: SocketAddr,
    /// The Basic auth user (the mbus URL's, percent-decoded).
    pub user: String,
    /// The Basic auth password (the mbus URL's, percent-decoded).
    pub password: String,
    /// The server certificate chain, PEM, leaf first (`env.bosh.mbus.cert.certificate`).
    pub cert_pem: String,
    /// The server private key, PEM (`env.bosh.mbus.cert.private_key`).
    pub key_pem: String,
    /// Where PUT blobs are stored: the agent's `<base>/data/blobs`. Created if missing.
    pub blobs_dir: PathBuf,
}

impl std::fmt::Debug for HttpsMbusConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsMbusConfig")
            .field("listen", &self.listen)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("blobs_dir", &self.blobs_dir)
            .finish()
    }
}

impl HttpsMbusConfig {
    /// The configuration for the settings' mbus URL, e.g. `https://mbus:<password>@0.0.0.0:6868`
    /// (user and password percent-decoded; the port defaults to 443; a host name is resolved
    /// and its first address used), with the server certificate and key PEM and the blobs
    /// directory.
    pub fn from_url(
        url: &str,
        cert_pem: impl Into<String>,
        key_pem: impl Into<String>,
        blobs_dir: impl Into<PathBuf>,
    ) -> Result<HttpsMbusConfig, HttpsMbusError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| HttpsMbusError::Url("cannot parse"))?;
        if parsed.scheme() != "https" {
            return Err(HttpsMbusError::Url("the scheme must be https"));
        }
        let user = percent_decode(parsed.username())
            .ok_or(HttpsMbusError::Url("the user is not UTF-8"))?;
        let password = percent_decode(parsed.password().unwrap_or_default())
            .ok_or(HttpsMbusError::Url("the password is not UTF-8"))?;
        if user.is_empty() {
            return Err(HttpsMbusError::Url("no user"));
        }
        if password.is_empty() {
            return Err(HttpsMbusError::Url("no password"));
        }
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or(HttpsMbusError::Url("no host"))?
            .to_string();
        let listen = parsed
            .socket_addrs(|| None)
            .map_err(|e| HttpsMbusError::Resolve {
                host: host.clone(),
                reason: e.to_string(),
            })?
            .into_iter()
            .next()
            .ok_or_else(|| HttpsMbusError::Resolve {
                host,
                reason: "no address".to_string(),
            })?;
        Ok(HttpsMbusConfig {
            listen,
            user,
            password,
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
            blobs_dir: blobs_dir.into(),
        })
    }
}

/// A running HTTPS mbus server. Dropping it stops accepting connections; requests in
/// flight still finish in the background.
#[derive(Debug)]
pub struct HttpsMbusServer {
    server: HttpsServer,
}

impl HttpsMbusServer {
    /// The address the server listens on (useful when the configured port was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Stops accepting connections, closes idle ones, and returns once every request in
    /// flight has been answered.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

/// Binds `config.listen` and serves the agent's HTTPS mbus with `handler` answering
/// `POST /agent` requests. Connections are served concurrently, each on its own task.
/// Creates the blobs directory (and its `tmp` subdirectory) if missing.
pub async fn serve(
    config: HttpsMbusConfig,
    handler: Arc<dyn Handler>,
) -> Result<HttpsMbusServer, HttpsMbusError> {
    let tls = tls::server_config(&config.cert_pem, &config.key_pem, &[b"http/1.1"])?;
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let tmp_dir = config.blobs_dir.join(TMP_DIR);
    create_dir(&tmp_dir).await?;
    let listener =
        TcpListener::bind(config.listen)
            .await
            .map_err(|source| HttpsMbusError::Bind {
                addr: config.listen,
                source,
            })?;
    let credentials = format!("{}:{}", config.user, config.password);
    let expected_authorization = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
    .into_bytes();
    let routes = Arc::new(Routes {
        handler,
        expected_authorization,
        blobs_dir: config.blobs_dir,
        tmp_dir,
    });
    let server =
        HttpsServer::spawn(listener, acceptor, routes, "HTTPS mbus").map_err(|source| {
            HttpsMbusError::Bind {
                addr: config.listen,
                source,
            }
        })?;
    Ok(HttpsMbusServer { server })
}

async fn create_dir(dir: &Path) -> Result<(), HttpsMbusError> {
    let mut builder = tokio::fs::DirBuilder::new();
    builder.recursive(true).mode(0o750);
    builder
        .create(dir)
        .await
        .map_err(|source| HttpsMbusError::BlobsDir {
            path: dir.to_path_buf(),
            source,
        })
}

/// The request envelope as bosh-agent reads it: every key optional, `null` as absent.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    protocol: Option<u32>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    arguments: Option<Vec<Value>>,
    #[serde(default)]
    reply_to: Option<String>,
}

struct Routes {
    handler: Arc<dyn Handler>,
    expected_authorization: Vec<u8>,
    blobs_dir: PathBuf,
    tmp_dir: PathBuf,
}

enum Route {
    Agent,
    Blobs,
}

impl kubosh_transport::https_server::Routes for Routes {
    async fn route(&self, req: hyper::Request<Incoming>) -> Response<Body> {
        self.route(req).await
    }
}

impl Routes {
    async fn route(&self, req: hyper::Request<Incoming>) -> Response<Body> {
        let path = req.uri().path();
        let route = if path == "/agent" {
            Route::Agent
        } else if path.starts_with("/blobs/") {
            Route::Blobs
        } else {
            return full(
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "404 page not found\n",
            );
        };
        tracing::info!(method = %req.method(), path, "HTTPS mbus request");
        if !self.authorized(&req) {
            let mut resp = empty(StatusCode::UNAUTHORIZED);
            resp.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Basic realm="""#),
            );
            return resp;
        }
        match route {
            Route::Agent => self.agent(req).await,
            Route::Blobs => self.blobs(req).await,
        }
    }

    fn authorized(&self, req: &hyper::Request<Incoming>) -> bool {
        let given = req
            .headers()
            .get(AUTHORIZATION)
            .map(HeaderValue::as_bytes)
            .unwrap_or_default();
        bool::from(given.ct_eq(&self.expected_authorization))
    }

    async fn agent(&self, req: hyper::Request<Incoming>) -> Response<Body> {
        if req.method() != Method::POST {
            return empty(StatusCode::NOT_FOUND);
        }
        let body = match req.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(e) => {
                tracing::error!(error = %e, "HTTPS mbus: reading http body");
                return empty(StatusCode::BAD_REQUEST);
            }
        };
        let envelope: Envelope = match serde_json::from_slice(&body) {
            Ok(envelope) => envelope,
            Err(e) => {
                tracing::error!(error = %e, "HTTPS mbus: unmarshalling JSON payload");
                return empty(StatusCode::INTERNAL_SERVER_ERROR);
            }
        };
        let request = Request {
            protocol: envelope.protocol,
            method: envelope.method.unwrap_or_default(),
            arguments: envelope.arguments.unwrap_or_default(),
            reply_to: envelope.reply_to.unwrap_or_default(),
        };
        let reply = self.handler.handle(request).await;
        full(StatusCode::OK, "application/json", reply.to_vec())
    }

    async fn blobs(&self, req: hyper::Request<Incoming>) -> Response<Body> {
        let method = req.method().clone();
        if method != Method::GET && method != Method::PUT {
            return empty(StatusCode::NOT_FOUND);
        }
        let last = req.uri().path().rsplit('/').next().unwrap_or_default();
        let Some(blob_id) = percent_decode(last).filter(|id| check_name("blob id", id).is_ok())
        else {
            return full(
                StatusCode::BAD_REQUEST,
                "text/plain; charset=utf-8",
                format!("invalid blob id {last:?}"),
            );
        };
        if method == Method::PUT {
            match self.put_blob(&blob_id, req.into_body()).await {
                Ok(()) => empty(StatusCode::CREATED),
                Err(e) => {
                    tracing::error!(blob_id, error = %e, "HTTPS mbus: storing blob");
                    full(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "text/plain; charset=utf-8",
                        e.to_string(),
                    )
                }
            }
        } else {
            self.get_blob(&blob_id).await
        }
    }

    /// Streams `body` into a temporary file and renames it to the blob; the temporary file
    /// is removed if anything fails (including the client going away).
    async fn put_blob(&self, blob_id: &str, mut body: Incoming) -> Result<(), BlobWriteError> {
        let tmp_dir = self.tmp_dir.clone();
        let (file, tmp_path) = tokio::task::spawn_blocking(move || {
            tempfile::Builder::new()
                .prefix("blob-")
                .tempfile_in(tmp_dir)
                .map(tempfile::NamedTempFile::into_parts)
        })
        .await
        .map_err(|e| BlobWriteError::Io(std::io::Error::other(e)))?
        .map_err(BlobWriteError::Io)?;
        let mut file = tokio::fs::File::from_std(file);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BlobWriteError::Body(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                file.write_all(&data).await.map_err(BlobWriteError::Io)?;
            }
        }
        file.flush().await.map_err(BlobWriteError::Io)?;
        file.set_permissions(
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o640),
        )
        .await
        .map_err(BlobWriteError::Io)?;
        file.sync_all().await.map_err(BlobWriteError::Io)?;
        drop(file);
        let dest = self.blobs_dir.join(blob_id);
        tokio::task::spawn_blocking(move || tmp_path.persist(dest))
            .await
            .map_err(|e| BlobWriteError::Io(std::io::Error::other(e)))?
            .map_err(|e| BlobWriteError::Io(e.error))
    }

    async fn get_blob(&self, blob_id: &str) -> Response<Body> {
        let path = self.blobs_dir.join(blob_id);
        let opened = async {
            let file = tokio::fs::File::open(&path).await?;
            let meta = file.metadata().await?;
            Ok::<_, std::io::Error>((file, meta))
        }
        .await;
        let (file, meta) = match opened {
            Ok((file, meta)) if meta.is_file() => (file, meta),
            Ok(_) => return empty(StatusCode::NOT_FOUND),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::info!(blob_id, "HTTPS mbus: no such blob");
                return empty(StatusCode::NOT_FOUND);
            }
            Err(e) => {
                tracing::error!(blob_id, error = %e, "HTTPS mbus: reading blob");
                return empty(StatusCode::INTERNAL_SERVER_ERROR);
            }
        };
        file_response(file, meta.len())
    }
}

/// Why a PUT blob was not stored; the text is the `500` response body.
#[derive(Debug, thiserror::Error)]
enum BlobWriteError {
    #[error("Updating blob: {0}")]
    Body(String),
    #[error("Opening blob store file: {0}")]
    Io(std::io::Error),
}

/// `s` percent-decoded, `None` unless the result is UTF-8. Malformed escapes stay as
/// they are.
fn percent_decode(s: &str) -> Option<String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_url_reads_the_settings_url() {
        let c = HttpsMbusConfig::from_url(
            "https://mbus:p%40ss%3Aw@0.0.0.0:6868",
            "CERT",
            "KEY",
            "/var/vcap/data/blobs",
        )
        .unwrap();
        assert_eq!(c.listen, "0.0.0.0:6868".parse().unwrap());
        assert_eq!(c.user, "mbus");
        assert_eq!(c.password, "p@ss:w");
        assert_eq!(c.blobs_dir, PathBuf::from("/var/vcap/data/blobs"));
        let c = HttpsMbusConfig::from_url("https://u:p@[::1]", "", "", "/b").unwrap();
        assert_eq!(c.listen, "[::1]:443".parse().unwrap());
        let c = HttpsMbusConfig::from_url("https://u:p@localhost:1", "", "", "/b").unwrap();
        assert_eq!(c.listen.port(), 1);
        assert!(c.listen.ip().is_loopback());
    }

    #[test]
    fn from_url_errors_are_clear_and_keep_secrets() {
        for (url, expected) in [
            ("not a url", "invalid mbus URL: cannot parse"),
            (
                "nats://u:s3cret@h:1",
                "invalid mbus URL: the scheme must be https",
            ),
            ("https://:s3cret@h:1", "invalid mbus URL: no user"),
            ("https://u@h:1", "invalid mbus URL: no password"),
            (
                "https://u:s3cret%FF@h:1",
                "invalid mbus URL: the password is not UTF-8",
            ),
        ] {
            let e = HttpsMbusConfig::from_url(url, "", "", "/b").unwrap_err();
            assert_eq!(e.to_string(), expected, "{url}");
        }
        let e = HttpsMbusConfig::from_url("https://u:s3cret@no-such-host.invalid:1", "", "", "/b")
            .unwrap_err();
        assert!(matches!(e, HttpsMbusError::Resolve { .. }), "{e:?}");
        assert!(!e.to_string().contains("s3cret"));
    }

    #[test]
    fn debug_redacts_password_and_key() {
        let c = HttpsMbusConfig::from_url("https://u:s3cret@127.0.0.1:1", "CERT", "KEYDATA", "/b")
            .unwrap();
        let text = format!("{c:?}");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(!text.contains("KEYDATA"), "{text}");
        assert!(text.contains("CERT"), "{text}");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(percent_decode("%2e%2E").as_deref(), Some(".."));
        assert_eq!(percent_decode("100%").as_deref(), Some("100%"));
        assert_eq!(percent_decode("%zz").as_deref(), Some("%zz"));
        assert_eq!(percent_decode("%ff"), None);
    }
}
