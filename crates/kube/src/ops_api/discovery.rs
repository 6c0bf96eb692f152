//! Discovery and health: what kube-apiserver's aggregator asks an extension API server
//! before it routes to it (`/apis/<group>/<version>` marks the `APIService` Available), and
//! what `kubectl api-resources` lists.

use http::{Method, Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, GroupVersionForDiscovery,
};
use kubosh_transport::https_server::{self, Body};

use super::{GROUP, RESOURCE, VERSION};

/// The answer to a discovery or health request, `None` for any other.
pub(super) fn answer(method: &Method, path: &str) -> Option<Response<Body>> {
    if method != Method::GET {
        return None;
    }
    let group_path = format!("/apis/{GROUP}");
    let version_path = format!("/apis/{GROUP}/{VERSION}");
    let body = match path {
        "/healthz" | "/livez" | "/readyz" => {
            return Some(https_server::full(StatusCode::OK, "text/plain", "ok"));
        }
        "/apis" => serde_json::to_string(&APIGroupList {
            groups: vec![group()],
        }),
        p if p == group_path => serde_json::to_string(&group()),
        p if p == version_path => serde_json::to_string(&resources()),
        // The aggregator merges these into kube-apiserver's OpenAPI; nothing to add.
        "/openapi/v2" => Ok(serde_json::json!({
            "swagger": "2.0",
            "info": {"title": "kubosh ops API", "version": VERSION},
            "paths": {},
        })
        .to_string()),
        "/openapi/v3" => Ok(serde_json::json!({"paths": {}}).to_string()),
        _ => return None,
    };
    let body = body.unwrap_or_default();
    Some(https_server::full(StatusCode::OK, "application/json", body))
}

fn group() -> APIGroup {
    let version = GroupVersionForDiscovery {
        group_version: format!("{GROUP}/{VERSION}"),
        version: VERSION.into(),
    };
    APIGroup {
        name: GROUP.into(),
        preferred_version: Some(version.clone()),
        versions: vec![version],
        server_address_by_client_cidrs: None,
    }
}

fn resources() -> APIResourceList {
    let subresource = |name: &str, kind: &str, verb: &str| APIResource {
        name: format!("{RESOURCE}/{name}"),
        namespaced: true,
        kind: kind.into(),
        verbs: vec![verb.into()],
        singular_name: String::new(),
        ..APIResource::default()
    };
    APIResourceList {
        group_version: format!("{GROUP}/{VERSION}"),
        resources: vec![
            subresource("logs", "DeploymentLogs", "get"),
            subresource("ssh", "SshSession", "create"),
        ],
    }
}
