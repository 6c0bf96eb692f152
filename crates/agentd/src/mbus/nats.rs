//! The agent on NATS (`bosh-protocols.md` §2.1): connect with the agent's client certificate
//! (the server's CN must match `*.nats.bosh-internal`), subscribe to `agent.<agent_id>`,
//! answer each request on its `reply_to`, and publish heartbeats on
//! `hm.agent.heartbeat.<agent_id>` (at once, then every interval) and
//! `hm.agent.shutdown.<agent_id>` when a `drain shutdown` starts.
//!
//! Requests are handled concurrently (bosh-agent handles them one at a time; a slow
//! synchronous action then delays every other request). Replies larger than 1 MiB are cut
//! as the agent cuts them: an exception keeps the head and tail of its message, a value is
//! replaced by the exception "Response exceeded maximum allowed length".

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::Handler;
use crate::service::{Agent, Notice};
use kubosh_transport::agent::nats::{self as director_nats, MbusTls, NatsError, NatsOptions};
use kubosh_transport::agent::protocol::{Reply, Request};

/// The largest reply the agent sends over NATS.
pub const MAX_REPLY_BYTES: usize = 1024 * 1024;

const TRUNCATION_MARKER: &str = "\n...[truncated]...\n";

/// Why the agent stopped serving NATS.
#[derive(Debug, thiserror::Error)]
pub enum NatsMbusError {
    /// The settings lack what NATS needs.
    #[error("{0}")]
    Settings(String),
    /// Connecting, subscribing or publishing failed.
    #[error(transparent)]
    Nats(#[from] NatsError),
}

/// How the agent uses NATS.
#[derive(Debug, Clone)]
pub struct NatsMbusOptions {
    /// Server URLs.
    pub urls: Vec<String>,
    /// The agent's identity (`env.bosh.mbus.cert`).
    pub tls: MbusTls,
    /// How often heartbeats go out (the agent: 30 s).
    pub heartbeat_interval: Duration,
}

impl NatsMbusOptions {
    /// Options from the agent's settings: `env.bosh.mbus.urls` or `mbus`, and the
    /// certificate in `env.bosh.mbus.cert` (required, as in bosh-agent).
    pub fn from_agent(agent: &Agent) -> Result<NatsMbusOptions, NatsMbusError> {
        let settings = agent.settings();
        let cert = &settings.env.bosh.mbus.cert;
        if cert.certificate.is_empty() || cert.private_key.is_empty() {
            return Err(NatsMbusError::Settings(
                "Parsing certificate and private key: env.bosh.mbus.cert has no certificate or private key"
                    .into(),
            ));
        }
        Ok(NatsMbusOptions {
            urls: settings.mbus_urls(),
            tls: MbusTls::new(&cert.ca, &cert.certificate, &cert.private_key),
            heartbeat_interval: Duration::from_secs(30),
        })
    }
}

/// Serves `agent` on NATS until `stop` completes. Connection attempts are retried forever
/// (2 s × attempt, at most 10 s apart), as the agent does; once connected, async-nats
/// reconnects on its own.
pub async fn serve(
    agent: Agent,
    options: NatsMbusOptions,
    stop: impl Future<Output = ()>,
) -> Result<(), NatsMbusError> {
    let agent_id = agent.agent_id();
    if !director_nats::is_subject_token(&agent_id) {
        return Err(NatsMbusError::Settings(format!(
            "agent_id {agent_id:?} cannot be a NATS subject token"
        )));
    }
    let nats_options = NatsOptions {
        urls: options.urls.clone(),
        tls: options.tls.clone(),
        name: format!("agent.{agent_id}"),
        connect_timeout: Duration::from_secs(10),
    };
    tokio::pin!(stop);
    let mut attempt: u32 = 0;
    let client = loop {
        match director_nats::connect(&nats_options).await {
            Ok(c) => break c,
            Err(NatsError::Tls(e)) => return Err(NatsError::Tls(e).into()),
            Err(e) => {
                attempt += 1;
                let pause = Duration::from_secs(u64::from(attempt.saturating_mul(2)).min(10));
                tracing::warn!("connecting to NATS failed (attempt {attempt}): {e}");
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = &mut stop => return Ok(()),
                }
            }
        }
    };
    let subject = format!("agent.{agent_id}");
    tracing::info!(%subject, "subscribing");
    let mut requests = director_nats::subscribe_flushed(&client, subject).await?;

    let heartbeat_subject = format!("hm.agent.heartbeat.{agent_id}");
    let shutdown_subject = format!("hm.agent.shutdown.{agent_id}");
    let mut notices = agent.notices();
    let mut ticker = tokio::time::interval(options.heartbeat_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let handler: Arc<dyn Handler> = Arc::new(agent.clone());
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = ticker.tick() => {
                let payload = agent.heartbeat().to_string();
                if let Err(e) = client.publish(heartbeat_subject.clone(), payload.into()).await {
                    tracing::warn!("publishing heartbeat: {e}");
                }
            }
            notice = notices.recv() => match notice {
                Ok(Notice::Shutdown) => {
                    if let Err(e) = client.publish(shutdown_subject.clone(), "null".into()).await {
                        tracing::warn!("publishing shutdown notice: {e}");
                    }
                }
                Ok(Notice::Restart) => {
                    tracing::info!("settings changed the message bus: restarting");
                    break;
                }
                Err(_) => {}
            },
            msg = requests.next() => {
                let Some(msg) = msg else { break };
                let client = client.clone();
                let handler = handler.clone();
                tokio::spawn(async move {
                    let request: Request = match serde_json::from_slice(&msg.payload) {
                        Ok(r) => r,
                        Err(e) => {
                            tracing::error!("Running handler: Unmarshalling JSON payload: {e}");
                            return;
                        }
                    };
                    if request.reply_to.is_empty() {
                        tracing::error!(method = %request.method, "request without reply_to");
                        return;
                    }
                    let reply_to = request.reply_to.clone();
                    let reply = handler.handle(request).await;
                    let bytes = fit_reply(&reply, MAX_REPLY_BYTES);
                    if let Err(e) = client.publish(reply_to, bytes.into()).await {
                        tracing::error!("Publishing to the client: {e}");
                    }
                });
            }
        }
    }
    // Bounded: a flush waits for the server, which may be gone for good.
    let _ = tokio::time::timeout(Duration::from_secs(2), client.flush()).await;
    Ok(())
}

/// The reply's bytes, cut to at most `max` as the agent cuts them.
pub fn fit_reply(reply: &Reply, max: usize) -> Vec<u8> {
    let bytes = reply.to_vec();
    if bytes.len() <= max {
        return bytes;
    }
    match reply {
        Reply::Value(_) => Reply::exception("Response exceeded maximum allowed length").to_vec(),
        Reply::Exception(e) => {
            let message = &e.message;
            let mut content = message.len();
            loop {
                let head_len = content / 2;
                let tail_len = content - head_len;
                let head = floor_boundary(message, head_len);
                let tail = ceil_boundary(message, message.len().saturating_sub(tail_len));
                let cut = format!(
                    "{}{TRUNCATION_MARKER}{}",
                    &message[..head],
                    &message[tail..]
                );
                let out = Reply::exception(cut).to_vec();
                if out.len() <= max || content == 0 {
                    return out;
                }
                // Shrink by the overshoot (escaping can make the JSON longer than the text).
                content = content.saturating_sub(out.len() - max).min(content - 1);
            }
        }
    }
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn small_replies_are_untouched() {
        let r = Reply::value(json!("pong"));
        assert_eq!(fit_reply(&r, 100), br#"{"value":"pong"}"#.to_vec());
    }

    #[test]
    fn big_values_become_the_agents_exception() {
        let r = Reply::value(json!("x".repeat(200)));
        let out: serde_json::Value = serde_json::from_slice(&fit_reply(&r, 100)).unwrap();
        assert_eq!(
            out,
            json!({"exception": {"message": "Response exceeded maximum allowed length"}})
        );
    }

    #[test]
    fn big_exceptions_keep_head_and_tail() {
        let message = format!("HEAD{}\"é\"{}TAIL", "a".repeat(500), "b".repeat(500));
        let out = fit_reply(&Reply::exception(message), 200);
        assert!(out.len() <= 200, "{}", out.len());
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let m = v["exception"]["message"].as_str().unwrap();
        assert!(m.starts_with("HEAD") && m.ends_with("TAIL"), "{m}");
        assert!(m.contains("...[truncated]..."));
    }
}
