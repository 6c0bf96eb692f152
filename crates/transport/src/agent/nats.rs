//! The NATS transport (`bosh-protocols.md` §2.1): requests published to `agent.<agent_id>`,
//! replies collected by one subscription on `director.<process uuid>.>` and matched by the
//! last subject token, as the Director's `nats_rpc.rb` does. Also the Health Monitor's
//! heartbeat subscription.
//!
//! The connection always uses mutual TLS with a CA of its own (no system roots) and, like
//! bosh-agent, refuses a server whose certificate CN does not match `*.nats.bosh-internal`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::oneshot;

use super::client::{AgentClient, Transport, TransportError};
use super::protocol::{Heartbeat, PROTOCOL_VERSION, Reply, Request};
use crate::tls::{self, TlsError};

/// Why a NATS connection or subscription failed. Never contains key material or URL
/// passwords.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// The TLS settings are unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A URL is not a NATS URL.
    #[error("invalid NATS URL (entry {0})")]
    Url(usize),
    /// No URL given.
    #[error("no NATS URL given")]
    NoUrl,
    /// Connecting failed.
    #[error("cannot connect to NATS: {0}")]
    Connect(String),
    /// Subscribing failed.
    #[error("cannot subscribe to {subject}: {reason}")]
    Subscribe {
        /// The subject.
        subject: String,
        /// Why.
        reason: String,
    },
}

/// The TLS identity for the message bus: the CA that signed the NATS server certificate and
/// the client certificate and key (`nats.server_ca_path`, `client_certificate_path`,
/// `client_private_key_path`). `Debug` hides the key.
#[derive(Clone)]
pub struct MbusTls {
    /// CA certificate(s), PEM.
    pub ca_pem: String,
    /// Client certificate, PEM. `None` only to probe servers that do not verify clients.
    pub cert_pem: Option<String>,
    /// Client private key, PEM.
    pub key_pem: Option<String>,
    /// Require the server certificate CN to match `*.nats.bosh-internal` (bosh-agent's
    /// rule). On by default.
    pub verify_server_cn: bool,
}

impl MbusTls {
    /// A client identity with the server CN check on.
    pub fn new(
        ca_pem: impl Into<String>,
        cert_pem: impl Into<String>,
        key_pem: impl Into<String>,
    ) -> MbusTls {
        MbusTls {
            ca_pem: ca_pem.into(),
            cert_pem: Some(cert_pem.into()),
            key_pem: Some(key_pem.into()),
            verify_server_cn: true,
        }
    }

    /// The rustls client configuration.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let identity = match (&self.cert_pem, &self.key_pem) {
            (Some(c), Some(k)) => Some((c.as_str(), k.as_str())),
            (None, None) => None,
            (Some(_), None) => return Err(TlsError::BadKey),
            (None, Some(_)) => return Err(TlsError::NoCert),
        };
        tls::client_config(&self.ca_pem, identity, self.verify_server_cn)
    }
}

impl std::fmt::Debug for MbusTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MbusTls")
            .field("ca_pem", &format_args!("<{} bytes>", self.ca_pem.len()))
            .field("cert_pem", &self.cert_pem.as_ref().map(|c| c.len()))
            .field("key_pem", &self.key_pem.as_ref().map(|_| "<redacted>"))
            .field("verify_server_cn", &self.verify_server_cn)
            .finish()
    }
}

/// How to reach NATS.
#[derive(Debug, Clone)]
pub struct NatsOptions {
    /// Server URLs, e.g. `nats://10.0.0.6:4222` (`mbus`). TLS is required whatever the scheme.
    pub urls: Vec<String>,
    /// TLS identity.
    pub tls: MbusTls,
    /// Connection name shown by the server.
    pub name: String,
    /// Timeout of one connection attempt.
    pub connect_timeout: Duration,
}

impl NatsOptions {
    /// Options for one URL with defaults (name `kubosh-director`, 10 s connect timeout).
    pub fn new(url: impl Into<String>, tls: MbusTls) -> NatsOptions {
        NatsOptions {
            urls: vec![url.into()],
            tls,
            name: "kubosh-director".into(),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Connects to NATS with mutual TLS. Fails at once if no server accepts (async-nats then
/// reconnects forever on its own once connected).
pub async fn connect(options: &NatsOptions) -> Result<async_nats::Client, NatsError> {
    connect_with(options, |o| o).await
}

/// How long a server that refuses connections (nats-server starting, or restarting) is
/// waited for before connecting fails.
const REFUSED_FOR_AT_MOST: Duration = Duration::from_secs(10);

/// [`connect`] with extra connection settings from `configure` (an event callback, say);
/// TLS, name, timeout and servers are always those of `options`. A refused connection is
/// tried again for up to [`REFUSED_FOR_AT_MOST`]; any other failure (TLS, authorization,
/// a timeout) fails at once.
pub async fn connect_with(
    options: &NatsOptions,
    configure: impl Fn(async_nats::ConnectOptions) -> async_nats::ConnectOptions,
) -> Result<async_nats::Client, NatsError> {
    if options.urls.is_empty() {
        return Err(NatsError::NoUrl);
    }
    let addrs = options
        .urls
        .iter()
        .enumerate()
        .map(|(i, u)| {
            u.parse::<async_nats::ServerAddr>()
                .map_err(|_| NatsError::Url(i))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let config = options.tls.client_config()?;
    let attempt = || {
        configure(async_nats::ConnectOptions::new())
            .name(&options.name)
            .require_tls(true)
            .tls_client_config(config.clone())
            .connection_timeout(options.connect_timeout)
            .connect(addrs.clone())
    };
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(1))
        .with_max_times(usize::MAX)
        .with_total_delay(Some(REFUSED_FOR_AT_MOST));
    attempt
        .retry(backoff)
        .when(refused)
        .await
        .map_err(|e| NatsError::Connect(redact_userinfo(&e.to_string(), &options.urls)))
}

/// Whether nothing listened where the server should be.
fn refused(e: &async_nats::ConnectError) -> bool {
    e.kind() == async_nats::ConnectErrorKind::Io
        && std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
}

/// The servers as messages name them: each URL without its `user:password@`.
pub(crate) fn server_names(urls: &[String]) -> String {
    urls.iter()
        .map(|u| match u.split_once("://") {
            Some((scheme, rest)) => {
                let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                format!("{scheme}://{host}")
            }
            None => u
                .rsplit_once('@')
                .map_or(u.as_str(), |(_, h)| h)
                .to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Removes any `user:password@` of the configured URLs from an error text.
fn redact_userinfo(text: &str, urls: &[String]) -> String {
    let mut text = text.to_string();
    for u in urls {
        if let Some((_, rest)) = u.split_once("://")
            && let Some((userinfo, _)) = rest.split_once('@')
            && !userinfo.is_empty()
        {
            text = text.replace(userinfo, "<redacted>");
        }
    }
    text
}

pub use kubosh_bosh::agent::nats_auth::is_subject_token;

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<async_nats::Message>>>>;

/// How long the connection may be down before requests fail as "NATS is unreachable"
/// rather than wait for their reply: async-nats reconnects within a few seconds when the
/// server is back (its delay grows to 4 s), and what is published meanwhile is sent then.
pub const OUTAGE_GRACE: Duration = Duration::from_secs(5);

/// How often the connection state is looked at.
const LINK_POLL: Duration = Duration::from_millis(100);

/// The connection to the server, as last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Up { since: tokio::time::Instant },
    Down { since: tokio::time::Instant },
}

/// Follows the connection's state (async-nats exposes it only to be polled) for requests
/// to wait on, and for the health monitor to tell silence from an outage. Dropping it stops
/// the polling.
pub(crate) struct Bus {
    /// The servers, without credentials, for messages.
    servers: String,
    link: tokio::sync::watch::Receiver<Link>,
    grace: Duration,
    watcher: tokio::task::JoinHandle<()>,
}

impl Bus {
    /// Polls `client`'s connection to `servers` (as messages name them).
    pub(crate) fn watch(client: &async_nats::Client, servers: String) -> Bus {
        let link = |state: async_nats::connection::State, was: Link| {
            let now = tokio::time::Instant::now();
            match (state, was) {
                (async_nats::connection::State::Connected, Link::Up { since }) => {
                    Link::Up { since }
                }
                (async_nats::connection::State::Connected, Link::Down { .. }) => {
                    Link::Up { since: now }
                }
                (_, Link::Down { since }) => Link::Down { since },
                (_, Link::Up { .. }) => Link::Down { since: now },
            }
        };
        let now = tokio::time::Instant::now();
        let first = link(client.connection_state(), Link::Up { since: now });
        let (tx, rx) = tokio::sync::watch::channel(first);
        let client = client.clone();
        let watcher = tokio::spawn(async move {
            let mut tick = tokio::time::interval(LINK_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                let state = client.connection_state();
                tx.send_if_modified(|was| {
                    let now = link(state, *was);
                    std::mem::replace(was, now) != now
                });
            }
        });
        Bus {
            servers,
            link: rx,
            grace: OUTAGE_GRACE,
            watcher,
        }
    }

    /// The error of a connection down since `since`.
    fn unreachable(&self, since: tokio::time::Instant) -> TransportError {
        TransportError::Unreachable(format!(
            "NATS at {} is unreachable: no connection for {} s",
            self.servers,
            since.elapsed().as_secs()
        ))
    }

    /// How long the connection has been up without a break (`None` while it is down).
    pub(crate) fn up_for(&self) -> Option<Duration> {
        match *self.link.borrow() {
            Link::Up { since } => Some(since.elapsed()),
            Link::Down { .. } => None,
        }
    }

    /// An error when the connection has been down longer than the grace period.
    pub(crate) fn check(&self) -> Result<(), TransportError> {
        match *self.link.borrow() {
            Link::Down { since } if since.elapsed() >= self.grace => Err(self.unreachable(since)),
            _ => Ok(()),
        }
    }

    /// Completes once the connection has been down for the grace period (never, while it is
    /// up).
    async fn outage(&self) -> TransportError {
        let mut link = self.link.clone();
        loop {
            let seen = *link.borrow_and_update();
            match seen {
                Link::Down { since } if since.elapsed() >= self.grace => {
                    return self.unreachable(since);
                }
                Link::Down { since } => {
                    tokio::select! {
                        () = tokio::time::sleep_until(since + self.grace) => {}
                        changed = link.changed() => if changed.is_err() {
                            std::future::pending::<()>().await;
                        },
                    }
                }
                Link::Up { .. } => {
                    if link.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }
}

/// The Director's side of NATS: publishes requests and routes replies back to callers.
///
/// One inbox subscription (`director.<process uuid>.>`) serves all requests; each request's
/// `reply_to` is `director.<process uuid>.<agent_id>.<request uuid>`.
pub struct NatsTransport {
    client: async_nats::Client,
    inbox: String,
    pending: Pending,
    reader: tokio::task::JoinHandle<()>,
    bus: Bus,
}

impl std::fmt::Debug for NatsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsTransport")
            .field("inbox", &self.inbox)
            .finish_non_exhaustive()
    }
}

impl Drop for NatsTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// Removes a pending request when its caller stops waiting (reply, timeout or drop).
struct PendingGuard<'a> {
    pending: &'a Pending,
    id: String,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&self.id);
        }
    }
}

impl NatsTransport {
    /// Subscribes the inbox of a new process UUID on `client`.
    pub async fn new(client: async_nats::Client) -> Result<NatsTransport, NatsError> {
        NatsTransport::with_process_uuid(client, &kubosh_base::ids::uuid_v4()).await
    }

    /// Connects ([`connect`]) and subscribes the inbox. Errors name the servers as
    /// `options` does, without credentials.
    pub async fn connect(options: &NatsOptions) -> Result<NatsTransport, NatsError> {
        let client = connect(options).await?;
        NatsTransport::start(
            client,
            &kubosh_base::ids::uuid_v4(),
            server_names(&options.urls),
        )
        .await
    }

    /// Subscribes the inbox `director.<process_uuid>.>` on `client`.
    pub async fn with_process_uuid(
        client: async_nats::Client,
        process_uuid: &str,
    ) -> Result<NatsTransport, NatsError> {
        let info = client.server_info();
        let servers = format!("nats://{}:{}", info.host, info.port);
        NatsTransport::start(client, process_uuid, servers).await
    }

    async fn start(
        client: async_nats::Client,
        process_uuid: &str,
        servers: String,
    ) -> Result<NatsTransport, NatsError> {
        let inbox = format!("director.{process_uuid}");
        let subject = format!("{inbox}.>");
        if !is_subject_token(process_uuid) {
            return Err(NatsError::Subscribe {
                subject,
                reason: "the process uuid is not a subject token".into(),
            });
        }
        // The SUB must reach the server before any request is published.
        let mut sub = subscribe_flushed(&client, subject).await?;
        let pending: Pending = Arc::default();
        let routes = pending.clone();
        let reader = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let id = msg.subject.rsplit('.').next().unwrap_or_default();
                let waiter = routes.lock().ok().and_then(|mut p| p.remove(id));
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(msg);
                    }
                    None => {
                        tracing::debug!(subject = %msg.subject, "reply to an unknown or abandoned request")
                    }
                }
            }
            // The subscription ended: wake every waiter with "connection closed".
            if let Ok(mut p) = routes.lock() {
                p.clear();
            }
        });
        let bus = Bus::watch(&client, servers);
        Ok(NatsTransport {
            client,
            inbox,
            pending,
            reader,
            bus,
        })
    }

    /// Sets how long the connection may be down before requests fail as "NATS is
    /// unreachable" ([`OUTAGE_GRACE`] by default).
    pub fn with_outage_grace(mut self, grace: Duration) -> NatsTransport {
        self.bus.grace = grace;
        self
    }

    /// `director.<process uuid>`.
    pub fn inbox(&self) -> &str {
        &self.inbox
    }

    /// The underlying connection.
    pub fn nats(&self) -> &async_nats::Client {
        &self.client
    }

    /// A typed client for one agent over this transport.
    pub fn agent(self: &Arc<Self>, agent_id: impl Into<String>) -> AgentClient {
        AgentClient::new(self.clone(), agent_id)
    }

    /// Requests waiting for their reply (for metrics and tests).
    pub fn pending_requests(&self) -> usize {
        self.pending.lock().map(|p| p.len()).unwrap_or(0)
    }

    fn envelope(
        &self,
        agent_id: &str,
        method: &str,
        arguments: &[Value],
    ) -> Result<(String, String, Vec<u8>), TransportError> {
        if !is_subject_token(agent_id) {
            return Err(TransportError::InvalidAgentId(agent_id.to_string()));
        }
        let request_id = kubosh_base::ids::uuid_v4();
        let request = Request {
            protocol: Some(PROTOCOL_VERSION),
            method: method.to_string(),
            arguments: arguments.to_vec(),
            reply_to: format!("{}.{agent_id}.{request_id}", self.inbox),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|e| TransportError::Connection(format!("cannot encode request: {e}")))?;
        Ok((request_id, format!("agent.{agent_id}"), body))
    }

    async fn request_inner(
        &self,
        agent_id: &str,
        method: &str,
        arguments: &[Value],
        timeout: Duration,
    ) -> Result<Reply, TransportError> {
        let (request_id, subject, body) = self.envelope(agent_id, method, arguments)?;
        // A bus down for a while answers for every agent at once, instead of each request
        // waiting out its timeout.
        self.bus.check()?;
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .map_err(|_| TransportError::Connection("reply table poisoned".into()))?
            .insert(request_id.clone(), tx);
        let _guard = PendingGuard {
            pending: &self.pending,
            id: request_id,
        };
        self.client
            .publish(subject, body.into())
            .await
            .map_err(|e| TransportError::Connection(e.to_string()))?;
        tokio::select! {
            reply = tokio::time::timeout(timeout, rx) => match reply {
                Ok(Ok(msg)) => Ok(Reply::from_slice(&msg.payload)?),
                Ok(Err(_)) => Err(TransportError::Connection(
                    "the reply subscription closed".into(),
                )),
                Err(_) => Err(TransportError::Timeout),
            },
            outage = self.bus.outage() => Err(outage),
        }
    }
}

impl Transport for NatsTransport {
    fn request<'a>(
        &'a self,
        agent_id: &'a str,
        method: &'a str,
        arguments: &'a [Value],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Reply, TransportError>> {
        Box::pin(self.request_inner(agent_id, method, arguments, timeout))
    }

    fn notify<'a>(
        &'a self,
        agent_id: &'a str,
        method: &'a str,
        arguments: &'a [Value],
    ) -> BoxFuture<'a, Result<(), TransportError>> {
        Box::pin(async move {
            let (_, subject, body) = self.envelope(agent_id, method, arguments)?;
            self.bus.check()?;
            self.client
                .publish(subject, body.into())
                .await
                .map_err(|e| TransportError::Connection(e.to_string()))
        })
    }

    fn protocol(&self) -> Option<u32> {
        Some(PROTOCOL_VERSION)
    }
}

/// A heartbeat that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed heartbeat on {subject}: {reason}")]
pub struct HeartbeatError {
    /// The subject it came on.
    pub subject: String,
    /// Why it could not be read.
    pub reason: String,
}

/// Heartbeats as they arrive: `(agent_id, heartbeat)`, or an error item for a payload that
/// is not a heartbeat (the stream goes on).
pub struct Heartbeats {
    sub: async_nats::Subscriber,
}

impl Heartbeats {
    /// Unsubscribes.
    pub async fn unsubscribe(mut self) {
        let _ = self.sub.unsubscribe().await;
    }
}

impl futures::Stream for Heartbeats {
    type Item = Result<(String, Heartbeat), HeartbeatError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.sub.poll_next_unpin(cx).map(|m| m.map(parse_heartbeat))
    }
}

fn parse_heartbeat(msg: async_nats::Message) -> Result<(String, Heartbeat), HeartbeatError> {
    let subject = msg.subject.to_string();
    let agent_id = subject
        .strip_prefix("hm.agent.heartbeat.")
        .filter(|id| is_subject_token(id))
        .map(str::to_string);
    let Some(agent_id) = agent_id else {
        return Err(HeartbeatError {
            subject,
            reason: "not a heartbeat subject".into(),
        });
    };
    serde_json::from_slice(&msg.payload)
        .map(|hb| (agent_id, hb))
        .map_err(|e| HeartbeatError {
            subject,
            reason: e.to_string(),
        })
}

/// Subscribes to `hm.agent.heartbeat.<agent_id>`, or to every agent's with `None`
/// (`hm.agent.heartbeat.*`, the Health Monitor's subscription).
pub async fn heartbeats(
    client: &async_nats::Client,
    agent_id: Option<&str>,
) -> Result<Heartbeats, NatsError> {
    let subject = match agent_id {
        Some(id) if is_subject_token(id) => format!("hm.agent.heartbeat.{id}"),
        Some(_) => {
            return Err(NatsError::Subscribe {
                subject: "hm.agent.heartbeat.<invalid>".into(),
                reason: "the agent id is not a subject token".into(),
            });
        }
        None => "hm.agent.heartbeat.*".into(),
    };
    let sub = subscribe_flushed(client, subject).await?;
    Ok(Heartbeats { sub })
}

/// Subscribes to `subject` and flushes, so the subscription is sent before anything else.
pub async fn subscribe_flushed(
    client: &async_nats::Client,
    subject: String,
) -> Result<async_nats::Subscriber, NatsError> {
    let failed = |subject: &str, e: &dyn std::fmt::Display| NatsError::Subscribe {
        subject: subject.to_string(),
        reason: e.to_string(),
    };
    let sub = client
        .subscribe(subject.clone())
        .await
        .map_err(|e| failed(&subject, &e))?;
    client.flush().await.map_err(|e| failed(&subject, &e))?;
    Ok(sub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_tokens() {
        assert!(is_subject_token("4149ba0f-38d9-4485-476f-1581be36f290"));
        for bad in ["", "a.b", "*", ">", "a b", "a\nb"] {
            assert!(!is_subject_token(bad), "{bad:?}");
        }
    }

    #[test]
    fn userinfo_is_redacted() {
        let urls = vec!["nats://nats:s3cret@10.0.0.6:4222".to_string()];
        let text = redact_userinfo("failed nats://nats:s3cret@10.0.0.6:4222", &urls);
        assert!(!text.contains("s3cret"), "{text}");
    }

    #[test]
    fn server_names_carry_no_credentials() {
        let urls = vec![
            "nats://nats:s3cret@10.0.0.6:4222".to_string(),
            "tls://10.0.0.7:4222".to_string(),
        ];
        assert_eq!(
            server_names(&urls),
            "nats://10.0.0.6:4222, tls://10.0.0.7:4222"
        );
    }

    #[test]
    fn tls_debug_hides_the_key() {
        let t = MbusTls::new("CA", "CERT", "-----BEGIN PRIVATE KEY----- SECRET");
        assert!(!format!("{t:?}").contains("SECRET"));
    }
}
