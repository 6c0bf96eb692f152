//! Who asks, and whether they may: kube-apiserver's requestheader configuration (the CA
//! its front proxy's client certificate is of, the names it may have, the headers that
//! carry the user), and a `SubjectAccessReview` of each request (an extension API server
//! authorises again what kube-apiserver authorised, as it may be reached otherwise).

use std::collections::BTreeMap;

use http::HeaderMap;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use super::{GROUP, OpsApiError, RESOURCE, Target};

/// Where kube-apiserver publishes its requestheader configuration.
const CONFIG_MAP: (&str, &str) = ("kube-system", "extension-apiserver-authentication");

/// kube-apiserver's requestheader configuration.
#[derive(Debug, Clone)]
pub struct RequestHeaderAuth {
    /// The CA of the front proxy's client certificate (PEM).
    pub client_ca_pem: String,
    /// The common names the front proxy's certificate may have (any when empty).
    pub allowed_names: Vec<String>,
    /// The headers carrying the user's name, in order.
    username_headers: Vec<String>,
    /// The headers carrying the user's groups.
    group_headers: Vec<String>,
    /// The prefixes of headers carrying the user's extra attributes.
    extra_prefixes: Vec<String>,
}

/// The user a request is made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The name.
    pub name: String,
    /// The groups.
    pub groups: Vec<String>,
    /// The extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl RequestHeaderAuth {
    /// Reads it from kube-apiserver's ConfigMap.
    pub async fn read(client: &kube::Client) -> Result<RequestHeaderAuth, OpsApiError> {
        let (namespace, name) = CONFIG_MAP;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let map = (api.get(name).await).map_err(|e| OpsApiError::RequestHeader(e.to_string()))?;
        RequestHeaderAuth::from_data(&map.data.unwrap_or_default())
    }

    /// From the ConfigMap's data (lists are JSON arrays, as kube-apiserver writes them).
    fn from_data(data: &BTreeMap<String, String>) -> Result<RequestHeaderAuth, OpsApiError> {
        let list = |key: &str| -> Vec<String> {
            (data.get(key))
                .and_then(|v| serde_json::from_str(v).ok())
                .unwrap_or_default()
        };
        let client_ca_pem = data
            .get("requestheader-client-ca-file")
            .cloned()
            .ok_or_else(|| {
                OpsApiError::RequestHeader(
                    "no requestheader-client-ca-file: kube-apiserver runs without \
                     --requestheader-client-ca-file (the aggregation layer is off)"
                        .into(),
                )
            })?;
        Ok(RequestHeaderAuth {
            client_ca_pem,
            allowed_names: list("requestheader-allowed-names"),
            username_headers: list("requestheader-username-headers"),
            group_headers: list("requestheader-group-headers"),
            extra_prefixes: list("requestheader-extra-headers-prefix"),
        })
    }

    /// The user `headers` name (only the front proxy reaches this server).
    pub fn user(&self, headers: &HeaderMap) -> Option<User> {
        let values = |name: &str| -> Vec<String> {
            (headers.get_all(name).iter())
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        };
        let name = (self.username_headers.iter())
            .find_map(|h| values(h).into_iter().find(|v| !v.is_empty()))?;
        let groups = self.group_headers.iter().flat_map(|h| values(h)).collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in headers {
            let header = header.as_str();
            let key = (self.extra_prefixes.iter())
                .find_map(|p| header.strip_prefix(&p.to_ascii_lowercase()));
            if let (Some(key), Ok(value)) = (key, value.to_str()) {
                // Keys are percent-encoded (kube-apiserver's requestheader convention).
                let key = percent_encoding::percent_decode_str(key)
                    .decode_utf8_lossy()
                    .into_owned();
                extra.entry(key).or_default().push(value.to_string());
            }
        }
        Some(User {
            name,
            groups,
            extra,
        })
    }
}

/// Whether `user` may `verb` the subresource of `target` (kube-apiserver's answer).
pub(super) async fn allowed(
    client: &kube::Client,
    user: &User,
    verb: &str,
    target: &Target,
) -> Result<bool, kube::Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some(RESOURCE.into()),
                subresource: Some(target.subresource.clone()),
                verb: Some(verb.into()),
                namespace: Some(target.namespace.clone()),
                name: Some(target.deployment.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> RequestHeaderAuth {
        let data: BTreeMap<String, String> = [
            ("requestheader-client-ca-file", "PEM"),
            ("requestheader-allowed-names", "[\"front-proxy-client\"]"),
            ("requestheader-username-headers", "[\"X-Remote-User\"]"),
            ("requestheader-group-headers", "[\"X-Remote-Group\"]"),
            (
                "requestheader-extra-headers-prefix",
                "[\"X-Remote-Extra-\"]",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        RequestHeaderAuth::from_data(&data).unwrap()
    }

    #[test]
    fn the_user_comes_from_the_front_proxys_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "alice".parse().unwrap());
        headers.append("x-remote-group", "ops".parse().unwrap());
        headers.append("x-remote-group", "system:authenticated".parse().unwrap());
        headers.insert("x-remote-extra-scopes", "view".parse().unwrap());
        let user = auth().user(&headers).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["ops", "system:authenticated"]);
        assert_eq!(user.extra["scopes"], ["view"]);
        assert!(
            auth().user(&HeaderMap::new()).is_none(),
            "no user, no request"
        );
        assert_eq!(auth().allowed_names, ["front-proxy-client"]);
    }

    #[test]
    fn without_the_aggregation_layer_it_says_so() {
        let err = RequestHeaderAuth::from_data(&BTreeMap::new()).unwrap_err();
        assert!(
            err.to_string().contains("--requestheader-client-ca-file"),
            "{err}"
        );
    }
}
