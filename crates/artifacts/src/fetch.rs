//! Downloading a release or stemcell tarball: `http(s)://` (optionally with credentials, e.g.
//! from the Secret a `Release` names) or `file://`, streamed to a file and hashed on the way
//! so the digest can be checked before anything is read. The controller's `Release` and
//! `Stemcell` reconcilers and `kubosh create-env` use it.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use sha1::Digest as _;
use tokio::io::AsyncWriteExt;

use kubosh_base::digest::to_hex;

/// Credentials for a URL, from the Secret a resource names. `Debug` hides them.
#[derive(Clone, Default)]
pub struct Credentials {
    /// Basic auth user.
    pub username: Option<String>,
    /// Basic auth password.
    pub password: Option<String>,
    /// Bearer token.
    pub token: Option<String>,
    /// Extra CA certificates (PEM) to trust.
    pub ca_pem: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_pem", &self.ca_pem.as_ref().map(String::len))
            .finish()
    }
}

/// Why a download failed. Never contains credentials.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// A URL scheme other than `http`, `https` and `file`, or an unparsable URL.
    #[error("unsupported URL {0:?}: use https://, http:// or file://")]
    Unsupported(String),
    /// The request failed or the server answered an error.
    #[error("downloading {url}: {reason}")]
    Http {
        /// The URL (without credentials).
        url: String,
        /// Why.
        reason: String,
    },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// A downloaded file and its digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Where it is.
    pub path: PathBuf,
    /// SHA1, hex.
    pub sha1: String,
    /// SHA256, hex.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

impl Fetched {
    /// `sha1;sha256:<hex>`.
    pub fn multi_digest(&self) -> String {
        format!("{};sha256:{}", self.sha1, self.sha256)
    }

    /// Checks the file against `expected`, any BOSH multi-digest (its strongest digest).
    pub fn check(&self, expected: &str) -> Result<(), DigestCheck> {
        let digest: kubosh_base::digest::MultiDigest = expected
            .parse()
            .map_err(|e| DigestCheck::Invalid(format!("{expected:?}: {e}")))?;
        let file = std::fs::File::open(&self.path).map_err(|e| {
            DigestCheck::Unreadable(format!("reading {}: {e}", self.path.display()))
        })?;
        digest.verify_reader(file).map_err(|_| {
            DigestCheck::Mismatch(format!(
                "the tarball's digest is {}, not {expected}",
                self.multi_digest()
            ))
        })
    }
}

/// Why a download does not match its digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestCheck {
    /// The expected digest is not one.
    #[error("invalid digest {0}")]
    Invalid(String),
    /// The file could not be read back.
    #[error("{0}")]
    Unreadable(String),
    /// The file has another digest.
    #[error("{0}")]
    Mismatch(String),
}

struct Hasher {
    sha1: sha1::Sha1,
    sha256: sha2::Sha256,
    size: u64,
}

impl Hasher {
    fn new() -> Hasher {
        Hasher {
            sha1: sha1::Sha1::new(),
            sha256: sha2::Sha256::new(),
            size: 0,
        }
    }

    fn update(&mut self, chunk: &[u8]) {
        self.sha1.update(chunk);
        self.sha256.update(chunk);
        self.size += chunk.len() as u64;
    }

    fn finish(self, path: PathBuf) -> Fetched {
        Fetched {
            path,
            sha1: to_hex(&self.sha1.finalize()),
            sha256: to_hex(&self.sha256.finalize()),
            size: self.size,
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FetchError + '_ {
    move |source| FetchError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The system's trusted CAs (Debian's bundle, or `SSL_CERT_FILE`) plus `extra`.
fn root_store(extra: Option<&str>) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let system = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"));
    let mut pems = std::fs::read_to_string(system).unwrap_or_default();
    if let Some(extra) = extra {
        pems.push('\n');
        pems.push_str(extra);
    }
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    for cert in CertificateDer::pem_slice_iter(pems.as_bytes()).flatten() {
        let _ = roots.add(cert);
    }
    roots
}

/// Downloads `url` into `dir` (a fresh file), hashing it as it streams.
pub async fn fetch(
    url: &str,
    credentials: &Credentials,
    dir: &Path,
) -> Result<Fetched, FetchError> {
    let parsed = reqwest::Url::parse(url).map_err(|_| FetchError::Unsupported(url.to_string()))?;
    let dest = dir.join(format!("download-{}", kubosh_base::ids::uuid_v4()));
    match parsed.scheme() {
        "file" => {
            let src = parsed
                .to_file_path()
                .map_err(|_| FetchError::Unsupported(url.to_string()))?;
            let mut input = tokio::fs::File::open(&src).await.map_err(io(&src))?;
            let mut out = tokio::fs::File::create(&dest).await.map_err(io(&dest))?;
            let mut hasher = Hasher::new();
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                use tokio::io::AsyncReadExt;
                let n = input.read(&mut buf).await.map_err(io(&src))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                out.write_all(&buf[..n]).await.map_err(io(&dest))?;
            }
            out.flush().await.map_err(io(&dest))?;
            Ok(hasher.finish(dest))
        }
        "http" | "https" => {
            let mut shown = parsed.clone();
            let _ = shown.set_username("");
            let _ = shown.set_password(None);
            shown.set_query(None);
            let shown = shown.to_string();
            let fail = |reason: String| FetchError::Http {
                url: shown.clone(),
                reason,
            };
            let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(e.to_string()))?
            .with_root_certificates(root_store(credentials.ca_pem.as_deref()))
            .with_no_client_auth();
            let client = reqwest::Client::builder()
                .tls_backend_preconfigured(tls)
                .build()
                .map_err(|e| fail(e.to_string()))?;
            let mut req = client.get(parsed.clone());
            if let Some(token) = &credentials.token {
                req = req.bearer_auth(token);
            } else if let Some(user) = &credentials.username {
                req = req.basic_auth(user, credentials.password.as_ref());
            }
            let resp = req
                .send()
                .await
                .map_err(|e| fail(e.without_url().to_string()))?;
            if !resp.status().is_success() {
                return Err(fail(format!("the server answered {}", resp.status())));
            }
            let mut out = tokio::fs::File::create(&dest).await.map_err(io(&dest))?;
            let mut hasher = Hasher::new();
            let mut body = resp.bytes_stream();
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| fail(e.without_url().to_string()))?;
                hasher.update(&chunk);
                out.write_all(&chunk).await.map_err(io(&dest))?;
            }
            out.flush().await.map_err(io(&dest))?;
            Ok(hasher.finish(dest))
        }
        _ => Err(FetchError::Unsupported(url.to_string())),
    }
}
