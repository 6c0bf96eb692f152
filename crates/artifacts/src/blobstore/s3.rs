//! The S3 store: a bucket on AWS or on any S3-compatible server (path-style requests), with
//! presigned URLs for agents.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::signer::Signer as _;
use object_store::{Certificate, ClientOptions};
use serde_json::{Value, json};
use url::Url;

use super::core::{Core, location};
use super::{BlobFuture, Blobstore, BlobstoreError, SignedMethod};

/// Where the bucket is and how to reach it. `Debug` leaves out the secret key.
#[derive(Clone)]
pub struct S3Config {
    /// The server, e.g. `https://minio.example:9000`; `None` for AWS S3 itself.
    pub endpoint: Option<Url>,
    /// The bucket (it must exist).
    pub bucket: String,
    /// The region (`us-east-1` for most S3-compatible servers).
    pub region: String,
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// Path-style requests (`<endpoint>/<bucket>/<key>`), as S3-compatible servers usually
    /// need; otherwise virtual-hosted style (`<bucket>.<host>`).
    pub path_style: bool,
    /// Extra CA certificates (PEM) to trust for the endpoint.
    pub ca_pem: Option<String>,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint.as_ref().map(Url::as_str))
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("path_style", &self.path_style)
            .field("ca_pem", &self.ca_pem.is_some())
            .finish()
    }
}

/// A blobstore in an S3 bucket.
#[derive(Debug, Clone)]
pub struct S3Blobstore {
    core: Core,
    s3: Arc<AmazonS3>,
    config: S3Config,
}

impl S3Blobstore {
    /// A store for `config`. Does not contact the server.
    ///
    /// The HTTP client is reqwest with rustls; kubosh builds rustls with the ring provider
    /// only, and object_store builds its own client, so the ring provider is installed as
    /// the process default here (if another default is already installed, that one stays).
    pub fn new(config: S3Config) -> Result<S3Blobstore, BlobstoreError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut options = ClientOptions::new();
        if let Some(endpoint) = &config.endpoint {
            options = options.with_allow_http(endpoint.scheme() == "http");
        }
        if let Some(pem) = &config.ca_pem {
            let cert = Certificate::from_pem(pem.as_bytes())
                .map_err(|e| BlobstoreError::Config(format!("CA certificate: {e}")))?;
            options = options.with_root_certificate(cert);
        }
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_access_key_id(&config.access_key_id)
            .with_secret_access_key(&config.secret_access_key)
            .with_virtual_hosted_style_request(!config.path_style)
            .with_client_options(options);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint.as_str().trim_end_matches('/'));
        }
        // The builder's errors name settings, never their values.
        let s3 = Arc::new(
            builder
                .build()
                .map_err(|e| BlobstoreError::Config(e.to_string()))?,
        );
        Ok(S3Blobstore {
            core: Core { store: s3.clone() },
            s3,
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &S3Config {
        &self.config
    }
}

impl Blobstore for S3Blobstore {
    super::core::forward_to_core!();

    /// Removes staged objects under `.staging/`. Multipart uploads that were never completed
    /// are invisible to listing; a bucket lifecycle rule
    /// (`AbortIncompleteMultipartUpload`) cleans those.
    fn sweep_staging(&self, older_than: Duration) -> BlobFuture<'_, usize> {
        Box::pin(self.core.sweep_staging(SystemTime::now() - older_than))
    }

    /// A SigV4 presigned URL.
    fn signed_url<'a>(
        &'a self,
        id: &'a str,
        method: SignedMethod,
        ttl: Duration,
    ) -> BlobFuture<'a, Option<Url>> {
        Box::pin(async move {
            let path = location(id)?;
            let method = match method {
                SignedMethod::Get => http::Method::GET,
                SignedMethod::Put => http::Method::PUT,
            };
            let url = self
                .s3
                .signed_url(method, &path, ttl)
                .await
                .map_err(|source| BlobstoreError::Store {
                    id: id.to_string(),
                    source,
                })?;
            Ok(Some(url))
        })
    }

    /// The `s3` provider's options, as bosh-s3cli reads them: `bucket_name`,
    /// `credentials_source: static` with `access_key_id`/`secret_access_key`, `region`, and
    /// for a custom endpoint `host`, `port`, `use_ssl`, `ssl_verify_peer`, `host_style`.
    fn agent_settings(&self) -> Value {
        let c = &self.config;
        let mut options = json!({
            "bucket_name": c.bucket,
            "credentials_source": "static",
            "access_key_id": c.access_key_id,
            "secret_access_key": c.secret_access_key,
            "region": c.region,
        });
        if let Some(endpoint) = &c.endpoint {
            let use_ssl = endpoint.scheme() == "https";
            options["host"] = json!(endpoint.host_str().unwrap_or_default());
            options["port"] = json!(endpoint.port_or_known_default().unwrap_or(443));
            options["use_ssl"] = json!(use_ssl);
            options["ssl_verify_peer"] = json!(use_ssl);
            options["host_style"] = json!(!c.path_style);
        }
        json!({"provider": "s3", "options": options})
    }
}
