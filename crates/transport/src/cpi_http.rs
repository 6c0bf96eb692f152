//! A CPI served over HTTP: a CPI executable (one JSON request on stdin, one JSON response on
//! stdout) that runs on another machine or Pod than its caller.
//!
//! kubosh's local cloud keeps its VMs as processes of whoever runs it. Served from a Pod of
//! its own (`kubosh cpi serve`), its VMs outlive the controller's Pods, so a new leader finds
//! them; the controller calls it through `kubosh cpi --remote`, an executable like any CPI.
//!
//! `POST /cpi` with `Authorization: Bearer <token>` and the request as the body answers
//! `200` with the program's stdout. `GET /healthz` answers `200` (the Pod's probes). Each
//! request runs the program once, as a director runs a CPI: calls stay independent, and a
//! VM a call starts outlives the call.
//!
//! `create_stemcell` names an image file on the caller's machine: the caller first sends it
//! (`POST /images`, the file as the body; the answer is `{"path": ...}` on the server), then
//! calls with that path, and the server removes the file once the call is answered.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use http::header::AUTHORIZATION;
use http::{Method, StatusCode};
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use tokio::io::AsyncWriteExt as _;

use crate::https_server::{Body, Routes, empty, full};

/// The largest request body accepted: CPI requests are small JSON documents (a stemcell's
/// image is a path, not its bytes).
const MAX_REQUEST: usize = 4 * 1024 * 1024;

/// How long a call keeps trying to connect to a server that does not take connections
/// (its Pod restarting: it boots its VMs before it listens, and the Service reaches the
/// new Pod once kube-proxy knows it). Nothing was sent, so trying again is safe.
const CONNECT_FOR_AT_MOST: Duration = Duration::from_secs(120);

/// Why a call over HTTP failed.
#[derive(Debug, thiserror::Error)]
pub enum CpiHttpError {
    /// The server could not be reached, or the connection broke.
    #[error("cannot reach the CPI at {url}: {message}")]
    Unreachable {
        /// The URL called.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// A stemcell image could not be read or sent.
    #[error("cannot send the stemcell image {path}: {message}")]
    Image {
        /// The image's path on the caller's machine.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The server answered with an error status.
    #[error("the CPI at {url} answered {status}: {body}")]
    Status {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: StatusCode,
        /// The start of the answer's body.
        body: String,
    },
}

/// The caller's side: calls the server at a base URL (`http://host:port`) with a token.
#[derive(Debug)]
pub struct RemoteCpi {
    base: String,
    token: String,
    client: reqwest::Client,
}

impl RemoteCpi {
    /// A caller of the server at `base` presenting `token`; `timeout` bounds each request.
    pub fn new(base: &str, token: &str, timeout: Duration) -> Result<Self, CpiHttpError> {
        // The server is plain HTTP inside the cluster.
        let tls =
            crate::tls::client_config_trusting_nothing().map_err(|e| unreachable(base, &e))?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            // An address nothing answers at (a Pod gone, kube-proxy not caught up) is tried
            // again soon instead of for the kernel's minutes of SYN retries.
            .connect_timeout(Duration::from_secs(10))
            .timeout(timeout)
            .build()
            .map_err(|e| unreachable(base, &e))?;
        Ok(RemoteCpi {
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
            client,
        })
    }

    /// Calls the CPI with `request` (a CPI request, JSON): its response bytes. The image of
    /// a `create_stemcell` is sent first.
    pub async fn call(&self, request: Vec<u8>) -> Result<Vec<u8>, CpiHttpError> {
        let mut request = request;
        if let Ok(mut parsed) = serde_json::from_slice::<serde_json::Value>(&request)
            && parsed["method"] == "create_stemcell"
            && let Some(image) = parsed["arguments"][0].as_str().map(PathBuf::from)
        {
            let uploaded = self.upload(&image).await?;
            parsed["arguments"][0] = serde_json::Value::String(uploaded);
            request = serde_json::to_vec(&parsed).map_err(|e| CpiHttpError::Image {
                path: image.display().to_string(),
                message: e.to_string(),
            })?;
        }
        self.post("/cpi", "application/json", || {
            std::future::ready(Ok(reqwest::Body::from(request.clone())))
        })
        .await
    }

    /// Sends the file at `path`: its path on the server.
    async fn upload(&self, path: &Path) -> Result<String, CpiHttpError> {
        let image_error = |e: &dyn std::fmt::Display| CpiHttpError::Image {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let body = self
            .post("/images", "application/octet-stream", || async {
                let file = tokio::fs::File::open(path)
                    .await
                    .map_err(|e| image_error(&e))?;
                Ok(reqwest::Body::from(file))
            })
            .await?;
        let uploaded: Uploaded = serde_json::from_slice(&body).map_err(|e| image_error(&e))?;
        Ok(uploaded.path)
    }

    /// Posts the body `body` makes to `path` with the token: the answer's body, when it is
    /// a success. A connection the server refuses is tried again, with a new body, for up
    /// to [`CONNECT_FOR_AT_MOST`].
    async fn post<B, F>(
        &self,
        path: &str,
        content_type: &'static str,
        body: B,
    ) -> Result<Vec<u8>, CpiHttpError>
    where
        B: Fn() -> F,
        F: Future<Output = Result<reqwest::Body, CpiHttpError>>,
    {
        let url = format!("{}{path}", self.base);
        let send = || async {
            let body = body().await.map_err(Unsent::Body)?;
            (self.client.post(&url))
                .bearer_auth(&self.token)
                .header(http::header::CONTENT_TYPE, content_type)
                .body(body)
                .send()
                .await
                .map_err(Unsent::Request)
        };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(5))
            .with_max_times(usize::MAX)
            .with_total_delay(Some(CONNECT_FOR_AT_MOST));
        let answer = send
            .retry(backoff)
            .when(|e| matches!(e, Unsent::Request(e) if e.is_connect()))
            .notify(|e, after| {
                tracing::info!(url = %url, "cannot connect to the CPI ({e}); trying again in {after:?}");
            })
            .await
            .map_err(|e| match e {
                Unsent::Body(e) => e,
                // The message names the URL already.
                Unsent::Request(e) => unreachable(&url, &e.without_url()),
            })?;
        let status = answer.status();
        let body = (answer.bytes().await).map_err(|e| unreachable(&url, &e.without_url()))?;
        if !status.is_success() {
            return Err(CpiHttpError::Status {
                url,
                status,
                body: String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
            });
        }
        Ok(body.to_vec())
    }
}

/// Why a request was not answered: its body could not be made, or sending it failed.
#[derive(Debug)]
enum Unsent {
    Body(CpiHttpError),
    Request(reqwest::Error),
}

impl std::fmt::Display for Unsent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsent::Body(e) => e.fmt(f),
            Unsent::Request(e) => f.write_str(&causes(e)),
        }
    }
}

/// `e` and every error under it, as "what: why: why": reqwest's own message alone says
/// "error sending request", not that the connection was refused.
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text += &format!(": {said}");
        }
        source = cause.source();
    }
    text
}

fn unreachable(url: &str, e: &dyn std::error::Error) -> CpiHttpError {
    CpiHttpError::Unreachable {
        url: url.to_string(),
        message: causes(e),
    }
}

/// The answer to `POST /images`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Uploaded {
    path: String,
}

/// Who may call the server: a bearer token's verdict.
pub trait Authenticate: Send + Sync + 'static {
    /// `Ok(true)` when `token` may call the CPI; `Err` when that cannot be told now.
    fn allows(&self, token: &str) -> impl Future<Output = Result<bool, String>> + Send;
}

/// The server's routes: `/cpi` runs `program` for each authenticated request.
#[derive(Debug)]
pub struct CpiRoutes<A> {
    program: Vec<String>,
    auth: A,
    uploads: PathBuf,
}

impl<A: Authenticate> CpiRoutes<A> {
    /// Runs `program` (its path and arguments) for each request `auth` allows; stemcell
    /// images sent before their `create_stemcell` are kept in `uploads` (made empty now:
    /// what an earlier server kept there was for calls that will not come).
    pub fn new(program: Vec<String>, auth: A, uploads: PathBuf) -> std::io::Result<Arc<Self>> {
        match std::fs::remove_dir_all(&uploads) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::fs::create_dir_all(&uploads)?;
        Ok(Arc::new(CpiRoutes {
            program,
            auth,
            uploads,
        }))
    }

    async fn run(&self, request: &[u8]) -> Result<Vec<u8>, String> {
        let (path, args) = self
            .program
            .split_first()
            .ok_or_else(|| "no CPI program".to_string())?;
        let mut child = tokio::process::Command::new(path)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run {path}: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(request)
                .await
                .map_err(|e| format!("cannot write the request to {path}: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        if out.stdout.is_empty() {
            return Err(format!("{path} answered nothing ({})", out.status));
        }
        Ok(out.stdout)
    }

    /// The uploaded image a request names, if any: removed once the call is answered.
    fn uploaded_image(&self, request: &[u8]) -> Option<PathBuf> {
        let parsed: serde_json::Value = serde_json::from_slice(request).ok()?;
        let path = PathBuf::from(parsed["arguments"][0].as_str()?);
        (parsed["method"] == "create_stemcell" && path.parent() == Some(self.uploads.as_path()))
            .then_some(path)
    }

    async fn call(&self, req: hyper::Request<Incoming>) -> http::Response<Body> {
        let body = match Limited::new(req.into_body(), MAX_REQUEST).collect().await {
            Ok(body) => body.to_bytes(),
            Err(e) => {
                return full(
                    StatusCode::BAD_REQUEST,
                    "text/plain",
                    format!("cannot read the request: {e}\n"),
                );
            }
        };
        let answer = self.run(&body).await;
        if let Some(image) = self.uploaded_image(&body) {
            let _ = tokio::fs::remove_file(image).await;
        }
        match answer {
            Ok(response) => full(StatusCode::OK, "application/json", response),
            Err(e) => {
                tracing::warn!(error = %e, "a CPI call failed");
                full(StatusCode::BAD_GATEWAY, "text/plain", format!("{e}\n"))
            }
        }
    }

    /// Stores the body as a new file in the uploads directory: `{"path": ...}`.
    async fn upload(&self, req: hyper::Request<Incoming>) -> http::Response<Body> {
        let name = kubosh_base::ids::uuid_v4();
        let partial = self.uploads.join(format!(".{name}.part"));
        let path = self.uploads.join(&name);
        let stored = async {
            let mut file = tokio::fs::File::create(&partial).await?;
            let mut body = req.into_body();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(std::io::Error::other)?;
                if let Some(data) = frame.data_ref() {
                    file.write_all(data).await?;
                }
            }
            file.flush().await?;
            tokio::fs::rename(&partial, &path).await
        };
        if let Err(e) = stored.await {
            let _ = tokio::fs::remove_file(&partial).await;
            return full(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                format!("cannot store the image: {e}\n"),
            );
        }
        let answer = Uploaded {
            path: path.display().to_string(),
        };
        full(
            StatusCode::OK,
            "application/json",
            serde_json::to_vec(&answer).unwrap_or_default(),
        )
    }
}

fn bearer(req: &hyper::Request<Incoming>) -> Option<&str> {
    let value = req.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?.trim();
    (!token.is_empty()).then_some(token)
}

impl<A: Authenticate> Routes for CpiRoutes<A> {
    async fn route(&self, req: hyper::Request<Incoming>) -> http::Response<Body> {
        match (req.method(), req.uri().path()) {
            (&Method::GET, "/healthz") => return full(StatusCode::OK, "text/plain", "ok\n"),
            (&Method::POST, "/cpi" | "/images") => {}
            (_, "/cpi" | "/images" | "/healthz") => {
                return empty(StatusCode::METHOD_NOT_ALLOWED);
            }
            _ => return empty(StatusCode::NOT_FOUND),
        }
        let Some(token) = bearer(&req).map(str::to_owned) else {
            return full(
                StatusCode::UNAUTHORIZED,
                "text/plain",
                "a bearer token is required\n",
            );
        };
        match self.auth.allows(&token).await {
            Ok(true) => {}
            Ok(false) => return full(StatusCode::FORBIDDEN, "text/plain", "token not allowed\n"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot check a CPI caller's token");
                return full(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("cannot check the token: {e}\n"),
                );
            }
        }
        if req.uri().path() == "/images" {
            self.upload(req).await
        } else {
            self.call(req).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::causes;

    #[derive(Debug, thiserror::Error)]
    #[error("error sending request")]
    struct Sending(#[source] Connecting);

    #[derive(Debug, thiserror::Error)]
    #[error("tcp connect error: {0}")]
    struct Connecting(#[source] std::io::Error);

    #[test]
    fn an_error_says_each_of_its_causes_once() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Sending(Connecting(refused));
        // The second cause is in the first's text already.
        assert_eq!(
            causes(&e),
            "error sending request: tcp connect error: refused"
        );
    }
}
