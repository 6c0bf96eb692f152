//! The ops API: what `kubectl bosh logs` and `kubectl bosh ssh` ask of a deployment, served
//! by the leading controller as an extension API server behind kube-apiserver's aggregation
//! layer (an `APIService` for [`GROUP`]/[`VERSION`]), so every byte travels through the
//! Kubernetes API, authenticated and authorised as `kubectl logs` is for a pod:
//!
//! ```text
//! kubectl bosh ──TLS, the user's credentials──▶ kube-apiserver ── authenticates the user,
//!   authorises the verb on boshdeployments/<subresource> in ops.kubosh.io (RBAC), proxies
//!   ──TLS, front-proxy client certificate + X-Remote-User/Group──▶ controller (this server:
//!   accepts only the front proxy's certificate, asks kube-apiserver again with a
//!   SubjectAccessReview) ── NATS ──▶ agents (fetch_logs, ssh) ── blobstore ──▶ controller
//!   ── the same way back ──▶ kubectl bosh
//! ```
//!
//! The port accepts no other client: the handshake requires a certificate of kube-apiserver's
//! requestheader CA with one of its allowed names (`kube-system/
//! extension-apiserver-authentication`), so it adds no unauthenticated entry.
//!
//! | Request | RBAC (group `ops.kubosh.io`) |
//! |---------|------------------------------|
//! | `GET .../namespaces/N/boshdeployments/D/logs?instance=G[/ID]&job=J&only=GLOB&agent=true` | `get` `boshdeployments/logs` |
//! | `POST .../namespaces/N/boshdeployments/D/ssh` | `create` `boshdeployments/ssh` |

mod auth;
mod discovery;
mod logs;
pub mod register;
mod ssh;

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Response, StatusCode};
use hyper::body::Incoming;
use kubosh_transport::https_server::{self, Body, HttpsServer, Routes};

pub use auth::{RequestHeaderAuth, User};
pub use ssh::{SshHostAnswer, SshHosts, SshRequest};

use crate::controller::deployment::DeploymentContext;

/// The API group of the ops API.
pub const GROUP: &str = "ops.kubosh.io";
/// Its version.
pub const VERSION: &str = "v1alpha1";
/// The resource whose subresources it serves.
pub const RESOURCE: &str = "boshdeployments";

/// How the ops API is served.
#[derive(Debug, Clone)]
pub struct OpsApiOptions {
    /// Where it listens, e.g. `0.0.0.0:8443`.
    pub bind_address: String,
    /// Its serving certificate.
    pub certificate: Certificate,
    /// The Pod this process runs in (`namespace`, `name`): labelled
    /// [`SERVING_LABEL`]` = serving` while it serves, so the Service in front of the
    /// replicas sends requests to the leader only.
    pub pod: Option<(String, String)>,
}

/// Where the ops API's serving certificate comes from.
#[derive(Debug, Clone)]
pub enum Certificate {
    /// Given (PEM): the `APIService`'s `caBundle` is the operator's to set.
    Files {
        /// The certificate chain.
        cert_pem: String,
        /// Its private key.
        key_pem: String,
    },
    /// Made by the serving process for the Service `namespace/name` (the name
    /// kube-apiserver checks), its CA written into the `APIService`'s `caBundle` once the
    /// server listens (a new leader makes a new one).
    SelfSigned {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
    },
}

/// The label of the Pod that serves the ops API (the leader's).
pub const SERVING_LABEL: &str = "kubosh.io/ops-api";

/// The `APIService`'s name.
pub fn api_service_name() -> String {
    format!("{VERSION}.{GROUP}")
}

/// Why the ops API cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum OpsApiError {
    /// kube-apiserver's requestheader configuration cannot be read.
    #[error("cannot read kube-system/extension-apiserver-authentication: {0}")]
    RequestHeader(String),
    /// The serving certificate could not be made.
    #[error("ops API certificate: {0}")]
    Certificate(String),
    /// The `APIService` or the Pod could not be told.
    #[error("ops API: {0}")]
    Registration(String),
    /// The TLS configuration was refused.
    #[error("ops API TLS: {0}")]
    Tls(#[from] kubosh_transport::tls::TlsError),
    /// The port cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Serves the ops API with `ctx` (the leader's) until the returned server is dropped.
pub async fn serve(
    options: &OpsApiOptions,
    ctx: Arc<DeploymentContext>,
) -> Result<HttpsServer, OpsApiError> {
    let auth = RequestHeaderAuth::read(&ctx.client).await?;
    let (cert_pem, key_pem, made_ca) = match &options.certificate {
        Certificate::Files { cert_pem, key_pem } => (cert_pem.clone(), key_pem.clone(), None),
        Certificate::SelfSigned { namespace, name } => {
            let made = self_signed(&format!("{name}.{namespace}.svc"))?;
            (made.1.cert_pem, made.1.key_pem, Some(made.0))
        }
    };
    let tls = kubosh_transport::tls::server_config_for_clients_of(
        &cert_pem,
        &key_pem,
        &auth.client_ca_pem,
        auth.allowed_names.clone(),
    )?;
    let listener = tokio::net::TcpListener::bind(&options.bind_address)
        .await
        .map_err(|source| OpsApiError::Listen {
            addr: options.bind_address.clone(),
            source,
        })?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let client = ctx.client.clone();
    let cancel = ctx.cancel.clone();
    let routes = Arc::new(OpsApi { ctx, auth });
    let server = HttpsServer::spawn(listener, acceptor, routes, "ops-api").map_err(|source| {
        OpsApiError::Listen {
            addr: options.bind_address.clone(),
            source,
        }
    })?;
    // Told in the background until it works: an installer may create the APIService after
    // the controller starts (Helm applies APIServices last).
    let pod = options.pod.clone();
    tokio::spawn(async move {
        let mut wait = Duration::from_secs(1);
        loop {
            let told = async {
                if let Some(ca_pem) = &made_ca {
                    trust(&client, ca_pem).await?;
                }
                if let Some((namespace, pod)) = &pod {
                    label_pod(&client, namespace, pod, true).await?;
                }
                Ok::<(), OpsApiError>(())
            };
            match told.await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?wait, "the ops API is not reachable yet")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = cancel.cancelled() => return,
            }
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    });
    Ok(server)
}

/// A CA and a serving certificate of it for `dns_name`.
fn self_signed(dns_name: &str) -> Result<(String, kubosh_base::pki::CertifiedKey), OpsApiError> {
    use kubosh_base::pki::{Ca, Leaf};
    let failed = |e: kubosh_base::pki::PkiError| OpsApiError::Certificate(e.to_string());
    let ca = Ca::new("kubosh-ops-api-ca").map_err(failed)?;
    let leaf = ca
        .issue(&Leaf {
            common_name: dns_name,
            alternative_names: &[dns_name],
            server: true,
            ..Leaf::default()
        })
        .map_err(failed)?;
    Ok((ca.cert_pem(), leaf))
}

/// Writes `ca_pem` as the `APIService`'s `caBundle` (a merge patch: the rest is the
/// installer's).
async fn trust(client: &kube::Client, ca_pem: &str) -> Result<(), OpsApiError> {
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<APIService> = Api::all(client.clone());
    let bundle = k8s_openapi::ByteString(ca_pem.as_bytes().to_vec());
    let patch = serde_json::json!({"spec": {"caBundle": bundle}});
    let name = api_service_name();
    (api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await)
        .map_err(|e| OpsApiError::Registration(format!("APIService {name}: {e}")))?;
    Ok(())
}

/// Sets (or removes) [`SERVING_LABEL`] on Pod `namespace/pod`.
pub async fn label_pod(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    serving: bool,
) -> Result<(), OpsApiError> {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let value = serving.then_some("serving");
    let patch = serde_json::json!({"metadata": {"labels": {SERVING_LABEL: value}}});
    (api.patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await)
        .map_err(|e| OpsApiError::Registration(format!("Pod {namespace}/{pod}: {e}")))?;
    Ok(())
}

/// The ops API's routes.
struct OpsApi {
    ctx: Arc<DeploymentContext>,
    auth: RequestHeaderAuth,
}

/// A request for a subresource of one deployment.
struct Target {
    namespace: String,
    deployment: String,
    subresource: String,
}

impl Target {
    /// `/apis/ops.kubosh.io/v1alpha1/namespaces/N/boshdeployments/D/S`.
    fn of(path: &str) -> Option<Target> {
        let rest = path.strip_prefix(&format!("/apis/{GROUP}/{VERSION}/namespaces/"))?;
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            [namespace, RESOURCE, deployment, subresource]
                if !namespace.is_empty() && !deployment.is_empty() =>
            {
                Some(Target {
                    namespace: namespace.to_string(),
                    deployment: deployment.to_string(),
                    subresource: subresource.to_string(),
                })
            }
            _ => None,
        }
    }
}

impl Routes for OpsApi {
    async fn route(&self, req: hyper::Request<Incoming>) -> Response<Body> {
        let path = req.uri().path().to_string();
        if let Some(found) = discovery::answer(req.method(), &path) {
            return found;
        }
        let Some(target) = Target::of(&path) else {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("no route {path}"),
            );
        };
        let Some(user) = self.auth.user(req.headers()) else {
            return status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "no user in the request",
            );
        };
        let verb = match (req.method(), target.subresource.as_str()) {
            (&Method::GET, "logs") => "get",
            (&Method::POST, "ssh") => "create",
            _ => {
                return status(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    &format!("{} is not served on {}", req.method(), target.subresource),
                );
            }
        };
        match auth::allowed(&self.ctx.client, &user, verb, &target).await {
            Ok(true) => {}
            Ok(false) => {
                return status(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    &format!(
                        "{} cannot {verb} {RESOURCE}/{} of '{}' in namespace '{}'",
                        user.name, target.subresource, target.deployment, target.namespace
                    ),
                );
            }
            Err(e) => {
                return status(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailable",
                    &format!("cannot check the request's authorization: {e}"),
                );
            }
        }
        match target.subresource.as_str() {
            "logs" => logs::serve(&self.ctx, &target, req.uri().query().unwrap_or("")).await,
            _ => ssh::serve(&self.ctx, &target, req).await,
        }
    }
}

/// Why a request failed: its HTTP status, reason and message.
type Failure = (StatusCode, &'static str, String);

/// The engine of a read-only request on `target`'s deployment, and the instances `slug`
/// names (all when `None`); a missing deployment or instance is `404 Not Found`.
async fn deployment_instances(
    ctx: &Arc<DeploymentContext>,
    target: &Target,
    slug: Option<&str>,
) -> Result<
    (
        kubosh_engine::Engine,
        Vec<kubosh_engine::state::InstanceRecord>,
    ),
    Failure,
> {
    use kube::api::Api;
    let (namespace, name) = (&target.namespace, &target.deployment);
    let deployments: Api<crate::api::Deployment> = Api::namespaced(ctx.client.clone(), namespace);
    let unavailable = |e: String| (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", e);
    if (deployments.get_opt(name).await)
        .map_err(|e| unavailable(e.to_string()))?
        .is_none()
    {
        let message = format!("boshdeployments.kubosh.io \"{name}\" not found");
        return Err((StatusCode::NOT_FOUND, "NotFound", message));
    }
    let store = crate::state::KubeStore::new(ctx.client.clone(), namespace, name, None);
    let engine = ctx.engine(
        Arc::new(store),
        namespace,
        Arc::new(kubosh_engine::NoEvents),
        ctx.cancel.child_token(),
    );
    let chosen = (engine.instances_named(name, slug).await)
        .map_err(|e| (StatusCode::NOT_FOUND, "NotFound", e.to_string()))?;
    Ok((engine, chosen))
}

/// A Kubernetes `Status` answer (what kubectl prints as the error).
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    https_server::full(code, "application/json", body.to_string())
}

/// Query parameters, decoded, in order.
fn query_pairs(query: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_deployments_subresource_is_a_target() {
        let t =
            Target::of("/apis/ops.kubosh.io/v1alpha1/namespaces/bosh/boshdeployments/hello/logs")
                .unwrap();
        assert_eq!(
            (
                t.namespace.as_str(),
                t.deployment.as_str(),
                t.subresource.as_str()
            ),
            ("bosh", "hello", "logs")
        );
        for path in [
            "/apis/ops.kubosh.io/v1alpha1/namespaces/bosh/boshdeployments/hello",
            "/apis/ops.kubosh.io/v1alpha1/namespaces//boshdeployments/hello/logs",
            "/apis/ops.kubosh.io/v1alpha1/namespaces/bosh/instances/hello/logs",
            "/apis/kubosh.io/v1alpha1/namespaces/bosh/boshdeployments/hello/logs",
        ] {
            assert!(Target::of(path).is_none(), "{path}");
        }
    }
}
