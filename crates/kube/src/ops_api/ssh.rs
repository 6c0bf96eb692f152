//! `boshdeployments/D/ssh`: `bosh ssh`'s setup and cleanup through the Kubernetes API.
//! `POST` a JSON body `{"command": "setup", "instance": "web/0", "user": "bosh_1a2b",
//! "publicKey": "ssh-rsa ..."}` (the caller made the key pair and keeps the private half;
//! `instance` left out: every instance) and the answer is `{"hosts": [{"instance", "ip",
//! "hostPublicKey", "localRoot"}]}`; `{"command": "cleanup", "instance", "user"}` removes
//! the user again. Read only for the deployment: no lock, no record written.

use std::sync::Arc;

use http::{Response, StatusCode};
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use kubosh_bosh::agent::protocol::SshUser;
use kubosh_transport::https_server::{self, Body};
use serde::{Deserialize, Serialize};

use super::{Failure, Target, deployment_instances, status};
use crate::controller::deployment::DeploymentContext;

/// The largest request body read.
const MAX_BODY: usize = 64 * 1024;

/// What the caller asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SshRequest {
    /// `setup` or `cleanup`.
    pub command: String,
    /// `GROUP`, `GROUP/INDEX` or `GROUP/ID`; every instance when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The one-time user (`[a-z_][a-z0-9_-]*`).
    pub user: String,
    /// Its public key (setup).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_key: String,
}

/// Where the sessions go (the answer to a setup).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SshHosts {
    /// One per instance.
    pub hosts: Vec<SshHostAnswer>,
}

/// One instance's session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SshHostAnswer {
    /// `group/id`.
    pub instance: String,
    /// Its address.
    pub ip: String,
    /// Its SSH host key (empty when unknown).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_public_key: String,
    /// On the local cloud, the VM's directory on its host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_root: Option<String>,
}

/// Answers an ssh request for `target` (authorised already).
pub(super) async fn serve(
    ctx: &Arc<DeploymentContext>,
    target: &Target,
    req: hyper::Request<Incoming>,
) -> Response<Body> {
    match answer(ctx, target, req).await {
        Ok(body) => https_server::full(StatusCode::OK, "application/json", body),
        Err((code, reason, message)) => status(code, reason, &message),
    }
}

async fn answer(
    ctx: &Arc<DeploymentContext>,
    target: &Target,
    req: hyper::Request<Incoming>,
) -> Result<String, Failure> {
    let bad = |m: String| (StatusCode::BAD_REQUEST, "BadRequest", m);
    let body = (Limited::new(req.into_body(), MAX_BODY).collect().await)
        .map_err(|e| bad(format!("cannot read the request: {e}")))?
        .to_bytes();
    let asked: SshRequest =
        serde_json::from_slice(&body).map_err(|e| bad(format!("not an ssh request: {e}")))?;
    let user = SshUser::new(&asked.user).ok_or_else(|| {
        bad(format!(
            "'{}' is not a user name ([a-z_][a-z0-9_-]*)",
            asked.user
        ))
    })?;
    let (engine, chosen) = deployment_instances(ctx, target, asked.instance.as_deref()).await?;
    let failed = |e: kubosh_engine::EngineError| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            e.to_string(),
        )
    };
    match asked.command.as_str() {
        "setup" if !asked.public_key.is_empty() => {
            let hosts =
                (engine.ssh_setup(chosen, &user, &asked.public_key).await).map_err(failed)?;
            let hosts = (hosts.into_iter())
                .map(|h| SshHostAnswer {
                    instance: h.instance,
                    ip: h.ip,
                    host_public_key: h.host_public_key,
                    local_root: h.local_root,
                })
                .collect();
            Ok(serde_json::to_string(&SshHosts { hosts }).unwrap_or_default())
        }
        "setup" => Err(bad("a setup needs a publicKey".into())),
        "cleanup" => {
            engine.ssh_cleanup(chosen, &user).await.map_err(failed)?;
            Ok("{}".into())
        }
        other => Err(bad(format!("unknown command '{other}' (setup or cleanup)"))),
    }
}
