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

use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use http::header::AUTHORIZATION;
use http::{Method, StatusCode};
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use tokio::io::AsyncWriteExt as _;

use crate::https_server::{Body, Routes, empty, full};

/// The largest request body accepted: CPI requests are small JSON documents (a stemcell's
/// image is a path, not its bytes).
const MAX_REQUEST: usize = 4 * 1024 * 1024;

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

/// Posts `request` to `url` (a server's `/cpi`) with `token`: the CPI's response bytes.
/// `timeout` bounds the whole call.
pub async fn call(
    url: &str,
    token: &str,
    request: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, CpiHttpError> {
    let unreachable = |e: &dyn std::fmt::Display| CpiHttpError::Unreachable {
        url: url.to_string(),
        message: e.to_string(),
    };
    // The server is plain HTTP inside the cluster; TLS would still need a provider.
    let tls = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| unreachable(&e))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .no_proxy()
        .timeout(timeout)
        .build()
        .map_err(|e| unreachable(&e))?;
    let answer = client
        .post(url)
        .bearer_auth(token)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(request)
        .send()
        .await
        .map_err(|e| unreachable(&e))?;
    let status = answer.status();
    let body = answer.bytes().await.map_err(|e| unreachable(&e))?;
    if !status.is_success() {
        return Err(CpiHttpError::Status {
            url: url.to_string(),
            status,
            body: String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
        });
    }
    Ok(body.to_vec())
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
}

impl<A: Authenticate> CpiRoutes<A> {
    /// Runs `program` (its path and arguments) for each request `auth` allows.
    pub fn new(program: Vec<String>, auth: A) -> Arc<Self> {
        Arc::new(CpiRoutes { program, auth })
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
            (&Method::POST, "/cpi") => {}
            (_, "/cpi" | "/healthz") => return empty(StatusCode::METHOD_NOT_ALLOWED),
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
        match self.run(&body).await {
            Ok(response) => full(StatusCode::OK, "application/json", response),
            Err(e) => {
                tracing::warn!(error = %e, "a CPI call failed");
                full(StatusCode::BAD_GATEWAY, "text/plain", format!("{e}\n"))
            }
        }
    }
}
