//! The HTTPS message bus of `create-env` (`bosh-protocols.md` §2.2): the agent is the
//! server. `POST /agent` carries the request envelope without `protocol`; `PUT`/`GET
//! /blobs/<xx>/<blob_id>` is the agent's blobstore, addressed as the BOSH CLI's davcli does
//! (`xx` = first byte of SHA1(blob id) in hex). Every route takes HTTP Basic auth with the
//! user and password of the mbus URL.
//!
//! HTTP is reqwest (hyper underneath) with rustls/ring, trusting only the given CA.

use std::path::Path;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::{StatusCode, Url};
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::client::{AgentClient, ClientOptions, Transport, TransportError};
use super::protocol::{Reply, Request};
use crate::tls::{self, TlsError};

/// Why the HTTPS transport could not be built or a blob operation failed. Never contains
/// the mbus password.
#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    /// The mbus URL is not an `https://user:password@host:port` URL.
    #[error("invalid mbus URL: {0}")]
    Url(&'static str),
    /// The CA is unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(String),
    /// A blob id that cannot be a path segment.
    #[error("invalid blob id {0:?}")]
    BlobId(String),
    /// The request failed.
    #[error("{0}")]
    Http(String),
    /// The agent answered a blob request with an unexpected status (davcli's text).
    #[error("{action} dav blob {blob_id}: Wrong response code: {status}; body: {body}")]
    BlobStatus {
        /// `Getting` or `Putting`.
        action: &'static str,
        /// The blob id.
        blob_id: String,
        /// The HTTP status.
        status: u16,
        /// The first KiB of the response body.
        body: String,
    },
    /// A local file could not be read or written.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// The create-env client side of the agent's HTTPS mbus.
#[derive(Clone)]
pub struct HttpsTransport {
    client: reqwest::Client,
    agent_url: Url,
    blobs_url: Url,
    user: String,
    password: String,
    director_id: String,
}

impl std::fmt::Debug for HttpsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsTransport")
            .field("agent_url", &self.agent_url.as_str())
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("director_id", &self.director_id)
            .finish()
    }
}

impl HttpsTransport {
    /// A transport for the agent at `mbus_url` (`https://mbus:<password>@10.0.0.6:6868`),
    /// whose server certificate must chain to `ca_pem` and match the URL's host. Requests
    /// carry `reply_to: <director_id>` as the CLI's do.
    pub fn new(
        mbus_url: &str,
        ca_pem: &str,
        director_id: impl Into<String>,
    ) -> Result<HttpsTransport, HttpsError> {
        let url = Url::parse(mbus_url).map_err(|_| HttpsError::Url("cannot parse"))?;
        if url.scheme() != "https" {
            return Err(HttpsError::Url("the scheme must be https"));
        }
        if url.host_str().is_none() {
            return Err(HttpsError::Url("no host"));
        }
        let user = percent_decode(url.username());
        let password = url.password().map(percent_decode).unwrap_or_default();
        let mut base = url.clone();
        base.set_username("")
            .map_err(|_| HttpsError::Url("cannot remove the user"))?;
        base.set_password(None)
            .map_err(|_| HttpsError::Url("cannot remove the password"))?;
        base.set_query(None);
        base.set_fragment(None);
        // The CLI posts to "<mbus URL>/agent" and puts blobs under "<scheme>://<host>/blobs".
        let agent_url = Url::parse(&format!("{}/agent", base.as_str().trim_end_matches('/')))
            .map_err(|_| HttpsError::Url("cannot build the agent URL"))?;
        let mut blobs_url = base.clone();
        blobs_url.set_path("/blobs");
        let config = tls::client_config(ca_pem, None, false)?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(config)
            .https_only(true)
            .no_proxy()
            .build()
            .map_err(|e| HttpsError::Client(e.to_string()))?;
        Ok(HttpsTransport {
            client,
            agent_url,
            blobs_url,
            user,
            password,
            director_id: director_id.into(),
        })
    }

    /// `POST` URL of agent requests (no credentials).
    pub fn agent_url(&self) -> &Url {
        &self.agent_url
    }

    /// A typed client over this transport with the CLI's create-env options. The agent id
    /// only names the agent in messages (the URL identifies it).
    pub fn agent(self, agent_id: impl Into<String>) -> AgentClient {
        AgentClient::new(std::sync::Arc::new(self), agent_id)
            .with_options(ClientOptions::create_env())
    }

    /// Where davcli puts `blob_id`: `<scheme>://<host>/blobs/<xx>/<blob_id>` (no
    /// credentials).
    pub fn blob_url(&self, blob_id: &str) -> Result<Url, HttpsError> {
        if blob_id.is_empty() || blob_id == "." || blob_id == ".." || blob_id.contains(['/', '\\'])
        {
            return Err(HttpsError::BlobId(blob_id.to_string()));
        }
        let mut url = self.blobs_url.clone();
        url.path_segments_mut()
            .map_err(|_| HttpsError::BlobId(blob_id.to_string()))?
            .push(&blob_prefix(blob_id))
            .push(blob_id);
        Ok(url)
    }

    /// Uploads `data` as blob `blob_id` (201 or 204 expected).
    pub async fn put_blob(&self, blob_id: &str, data: Vec<u8>) -> Result<(), HttpsError> {
        self.put(blob_id, reqwest::Body::from(data), None).await
    }

    /// Uploads the file at `path` as blob `blob_id`, streaming it.
    pub async fn put_blob_file(&self, blob_id: &str, path: &Path) -> Result<(), HttpsError> {
        let file_err = |e: std::io::Error| HttpsError::File {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let file = tokio::fs::File::open(path).await.map_err(file_err)?;
        let len = file.metadata().await.map_err(file_err)?.len();
        self.put(blob_id, reqwest::Body::from(file), Some(len))
            .await
    }

    /// Like davcli, sends a Content-Length (not chunked) for files too.
    async fn put(
        &self,
        blob_id: &str,
        body: reqwest::Body,
        len: Option<u64>,
    ) -> Result<(), HttpsError> {
        let url = self.blob_url(blob_id)?;
        let mut req = self
            .client
            .put(url)
            .basic_auth(&self.user, Some(&self.password));
        if let Some(len) = len {
            req = req.header(reqwest::header::CONTENT_LENGTH, len);
        }
        let resp = req.body(body).send().await.map_err(|e| {
            HttpsError::Http(format!("Putting dav blob {blob_id}: {}", e.without_url()))
        })?;
        match resp.status() {
            StatusCode::CREATED | StatusCode::NO_CONTENT => Ok(()),
            status => Err(blob_status("Putting", blob_id, status, resp).await),
        }
    }

    /// Downloads blob `blob_id` into memory.
    pub async fn get_blob(&self, blob_id: &str) -> Result<Vec<u8>, HttpsError> {
        let mut resp = self.get(blob_id).await?;
        let mut out = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| {
            HttpsError::Http(format!("Getting dav blob {blob_id}: {}", e.without_url()))
        })? {
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// Downloads blob `blob_id` into the file at `path`, streaming it.
    pub async fn get_blob_to_file(&self, blob_id: &str, path: &Path) -> Result<(), HttpsError> {
        let file_err = |e: std::io::Error| HttpsError::File {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let mut resp = self.get(blob_id).await?;
        let mut file = tokio::fs::File::create(path).await.map_err(file_err)?;
        while let Some(chunk) = resp.chunk().await.map_err(|e| {
            HttpsError::Http(format!("Getting dav blob {blob_id}: {}", e.without_url()))
        })? {
            file.write_all(&chunk).await.map_err(file_err)?;
        }
        file.flush().await.map_err(file_err)
    }

    async fn get(&self, blob_id: &str) -> Result<reqwest::Response, HttpsError> {
        let url = self.blob_url(blob_id)?;
        let resp = self
            .client
            .get(url)
            .basic_auth(&self.user, Some(&self.password))
            .send()
            .await
            .map_err(|e| {
                HttpsError::Http(format!("Getting dav blob {blob_id}: {}", e.without_url()))
            })?;
        match resp.status() {
            StatusCode::OK => Ok(resp),
            status => Err(blob_status("Getting", blob_id, status, resp).await),
        }
    }

    async fn post(
        &self,
        body: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>, TransportError> {
        let mut req = self
            .client
            .post(self.agent_url.clone())
            .basic_auth(&self.user, Some(&self.password))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        let resp = req.send().await.map_err(transport_error)?;
        if resp.status() != StatusCode::OK {
            return Err(TransportError::Status(resp.status().as_u16()));
        }
        resp.bytes()
            .await
            .map(|b| b.to_vec())
            .map_err(transport_error)
    }

    fn envelope(&self, method: &str, arguments: &[Value]) -> Result<Vec<u8>, TransportError> {
        let request = Request {
            protocol: None,
            method: method.to_string(),
            arguments: arguments.to_vec(),
            reply_to: self.director_id.clone(),
        };
        serde_json::to_vec(&request)
            .map_err(|e| TransportError::Connection(format!("cannot encode request: {e}")))
    }
}

fn transport_error(e: reqwest::Error) -> TransportError {
    if e.is_timeout() {
        TransportError::Timeout
    } else {
        TransportError::Connection(e.without_url().to_string())
    }
}

async fn blob_status(
    action: &'static str,
    blob_id: &str,
    status: StatusCode,
    resp: reqwest::Response,
) -> HttpsError {
    let bytes = resp.bytes().await.unwrap_or_default();
    let body = String::from_utf8_lossy(&bytes[..bytes.len().min(1024)]).into_owned();
    HttpsError::BlobStatus {
        action,
        blob_id: blob_id.to_string(),
        status: status.as_u16(),
        body,
    }
}

/// davcli's prefix directory: the first byte of SHA1(`blob_id`), two hex digits.
pub fn blob_prefix(blob_id: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, blob_id.as_bytes());
    format!("{:02x}", digest.as_ref()[0])
}

impl Transport for HttpsTransport {
    fn request<'a>(
        &'a self,
        _agent_id: &'a str,
        method: &'a str,
        arguments: &'a [Value],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Reply, TransportError>> {
        Box::pin(async move {
            let body = self.envelope(method, arguments)?;
            let reply = self.post(body, Some(timeout)).await?;
            Ok(Reply::from_slice(&reply)?)
        })
    }

    fn notify<'a>(
        &'a self,
        _agent_id: &'a str,
        method: &'a str,
        arguments: &'a [Value],
    ) -> BoxFuture<'a, Result<(), TransportError>> {
        Box::pin(async move {
            let body = self.envelope(method, arguments)?;
            self.post(body, Some(Duration::from_secs(10)))
                .await
                .map(|_| ())
        })
    }

    fn protocol(&self) -> Option<u32> {
        None
    }
}

/// `s` percent-decoded (invalid UTF-8 replaced). Malformed escapes stay as they are.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_first_sha1_byte() {
        // sha1("abc") = a9993e36...
        assert_eq!(blob_prefix("abc"), "a9");
        // sha1("") = da39a3ee...
        assert_eq!(blob_prefix(""), "da");
    }

    #[test]
    fn percent_decoding_of_userinfo() {
        assert_eq!(percent_decode("p%40ss%3Aword"), "p@ss:word");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    fn ca() -> String {
        kubosh_base::pki::Ca::new("ca").unwrap().cert_pem()
    }

    #[test]
    fn urls_without_credentials() {
        let t = HttpsTransport::new("https://mbus:s3cret@10.0.0.6:6868", &ca(), "dir").unwrap();
        assert_eq!(t.agent_url().as_str(), "https://10.0.0.6:6868/agent");
        let blob = t.blob_url("abc").unwrap();
        assert_eq!(blob.as_str(), "https://10.0.0.6:6868/blobs/a9/abc");
        assert!(!format!("{t:?}").contains("s3cret"));
        assert!(t.blob_url("../x").is_err());
        assert!(t.blob_url("").is_err());
    }

    #[test]
    fn bad_urls() {
        for u in ["http://a:b@h:1", "not a url", "https://"] {
            let e = HttpsTransport::new(u, &ca(), "d").unwrap_err();
            assert!(!e.to_string().contains(":b@"), "{e}");
        }
    }
}
