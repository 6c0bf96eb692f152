//! Who may do what on the director's NATS server, as BOSH confines it (the nats job's
//! `nats.cfg` and bosh-nats-sync's `auth.json`): nats-server maps each client certificate's
//! subject to a user (`tls { verify_and_map: true }`) whose permissions are
//!
//! - the director: publish `agent.*` and `hm.director.alert`, subscribe `director.>`;
//! - the health monitor: subscribe `hm.agent.{heartbeat,alert,shutdown}.*` and
//!   `hm.director.alert`, publish nothing;
//! - agent `<id>` (certificate `CN=<id>.agent.bosh-internal`): subscribe only `agent.<id>`,
//!   publish only `hm.agent.{heartbeat,alert,shutdown}.<id>` and the director's replies
//!   `director.*.<id>.*`.
//!
//! [`authorization`] writes that as the `authorization` block of a nats-server configuration
//! (JSON, which nats-server's configuration format accepts, as bosh-nats-sync writes it).

use serde_json::{Value, json};

/// Why an authorization block could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NatsAuthError {
    /// An agent id that is not a single subject token would widen or break its permissions.
    #[error("agent id {0:?} is not a NATS subject token (no '.', '*', '>' or whitespace)")]
    BadAgentId(String),
    /// An identity's subject is empty.
    #[error("the {0} certificate's subject is empty")]
    EmptySubject(&'static str),
}

/// True when `s` is one subject token: not empty, no `.`, `*`, `>`, whitespace or control
/// character.
pub fn is_subject_token(s: &str) -> bool {
    !s.is_empty()
        && !s
            .chars()
            .any(|c| c == '.' || c == '*' || c == '>' || c.is_whitespace() || c.is_control())
}

/// The user name nats-server maps agent `agent_id`'s certificate to (its subject, whose only
/// attribute is the common name kubosh issues).
pub fn agent_user(agent_id: &str) -> String {
    format!("CN={agent_id}.agent.bosh-internal")
}

/// The `{"authorization": {"users": [...]}}` document for the director's and the health
/// monitor's certificate subjects (`CN=...` strings as nats-server matches them, e.g.
/// `CN=default.director.bosh-internal`) and the agents `agent_ids`, in that order.
pub fn authorization(
    director_subject: &str,
    hm_subject: &str,
    agent_ids: &[String],
) -> Result<Value, NatsAuthError> {
    if director_subject.is_empty() {
        return Err(NatsAuthError::EmptySubject("director"));
    }
    if hm_subject.is_empty() {
        return Err(NatsAuthError::EmptySubject("health monitor"));
    }
    let mut users = vec![
        json!({"user": director_subject, "permissions": {
            "publish": ["agent.*", "hm.director.alert"],
            "subscribe": ["director.>"],
        }}),
        json!({"user": hm_subject, "permissions": {
            "publish": [],
            "subscribe": ["hm.agent.heartbeat.*", "hm.agent.alert.*", "hm.agent.shutdown.*", "hm.director.alert"],
        }}),
    ];
    for id in agent_ids {
        if !is_subject_token(id) {
            return Err(NatsAuthError::BadAgentId(id.clone()));
        }
        users.push(json!({"user": agent_user(id), "permissions": {
            "publish": [
                format!("hm.agent.heartbeat.{id}"),
                format!("hm.agent.alert.{id}"),
                format!("hm.agent.shutdown.{id}"),
                format!("director.*.{id}.*"),
            ],
            "subscribe": [format!("agent.{id}")],
        }}));
    }
    Ok(json!({"authorization": {"users": users}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_gets_only_its_own_subjects() {
        let doc = authorization(
            "CN=default.director.bosh-internal",
            "CN=default.hm.bosh-internal",
            &["a-1".into()],
        )
        .unwrap();
        let users = doc["authorization"]["users"].as_array().unwrap();
        assert_eq!(users.len(), 3);
        assert_eq!(users[0]["permissions"]["subscribe"], json!(["director.>"]));
        assert_eq!(users[2]["user"], "CN=a-1.agent.bosh-internal");
        assert_eq!(users[2]["permissions"]["subscribe"], json!(["agent.a-1"]));
        assert_eq!(
            users[2]["permissions"]["publish"][3],
            json!("director.*.a-1.*")
        );
    }

    #[test]
    fn ids_and_subjects_that_would_widen_permissions_are_refused() {
        for bad in ["", "a.b", "*", ">", "a b"] {
            assert_eq!(
                authorization("CN=d", "CN=h", &[bad.to_string()]),
                Err(NatsAuthError::BadAgentId(bad.to_string()))
            );
        }
        assert!(authorization("", "CN=h", &[]).is_err());
        assert!(is_subject_token("4149ba0f-38d9-4485-476f-1581be36f290"));
    }
}
