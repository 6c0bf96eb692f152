//! Who may call a CPI served over HTTP (`kubosh cpi serve`): callers present a
//! ServiceAccount token bound to the server's audience (a projected volume of the
//! controller's Pod), and kube-apiserver tells whose it is (a `TokenReview`).
//!
//! Nothing secret is configured on either side: the kubelet renews the caller's token, and
//! a token made for another audience (the Pod's default one, say) is refused.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};
use sha2::{Digest as _, Sha256};

use kubosh_transport::cpi_http::Authenticate;

/// How long a token kube-apiserver accepted is taken without asking again: a CPI call
/// rarely comes alone, and a token lives an hour or more.
const REMEMBERED: Duration = Duration::from_secs(60);

/// Allows the tokens of the named users, as kube-apiserver authenticates them for one
/// audience.
pub struct TokenReviewer {
    client: kube::Client,
    audience: String,
    allowed: Vec<String>,
    accepted: Mutex<HashMap<[u8; 32], Instant>>,
}

impl TokenReviewer {
    /// Tokens for `audience` whose user is one of `allowed`
    /// (`system:serviceaccount:<namespace>:<name>`).
    pub fn new(client: kube::Client, audience: impl Into<String>, allowed: Vec<String>) -> Self {
        TokenReviewer {
            client,
            audience: audience.into(),
            allowed,
            accepted: Mutex::new(HashMap::new()),
        }
    }

    fn remembered(&self, key: &[u8; 32]) -> bool {
        let mut accepted = self.accepted.lock().unwrap_or_else(|e| e.into_inner());
        accepted.retain(|_, at| at.elapsed() < REMEMBERED);
        accepted.contains_key(key)
    }
}

impl Authenticate for TokenReviewer {
    async fn allows(&self, token: &str) -> Result<bool, String> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if self.remembered(&key) {
            return Ok(true);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: Some(vec![self.audience.clone()]),
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview: {e}"))?;
        let status = reviewed.status.unwrap_or_default();
        let audience_ok = status
            .audiences
            .as_ref()
            .is_none_or(|a| a.contains(&self.audience));
        let user = status.user.and_then(|u| u.username).unwrap_or_default();
        let allowed =
            status.authenticated == Some(true) && audience_ok && self.allowed.contains(&user);
        if allowed {
            self.accepted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, Instant::now());
        } else {
            tracing::info!(user = %user, "a CPI caller was refused");
        }
        Ok(allowed)
    }
}
