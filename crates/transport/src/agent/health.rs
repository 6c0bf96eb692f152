//! Agent heartbeats as the engine's [`AgentHealth`]: the health monitor's ear on NATS
//! (`bosh-protocols.md` §2.1, §4.17).
//!
//! [`HeartbeatMonitor`] connects with the health monitor's identity (a client certificate
//! with CN `default.hm.bosh-internal`: with BOSH's production permissions only that identity
//! may subscribe `hm.agent.*`; the director may not), subscribes `hm.agent.heartbeat.*` and
//! `hm.agent.shutdown.*`, and keeps each agent's last heartbeat in memory
//! ([`HeartbeatTable`]). The engine asks it for an agent's recent `job_state` instead of
//! calling the agent, so a deploy that changes nothing makes no call at all.
//!
//! A shutdown notice (sent when a `drain shutdown` starts) ends what is known of the agent's
//! jobs: they are about to stop. A heartbeat that arrives later is news again (the VM lived
//! on, as after a soft stop or a disk change, which drain with `shutdown` too), as the Health
//! Monitor re-adds an agent it hears from. The notice itself is a sign of life, and so is an
//! answer the director reports ([`AgentHealth::answered`]): silence counts from the last
//! one, so neither an agent that just drained nor a new one not heard yet is "silent".

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::nats::{self, Bus, MbusTls, NatsError, NatsOptions};
use super::protocol::Heartbeat;
use kubosh_base::pki::{Ca, Leaf, PkiError};
use kubosh_bosh::agent::AgentHealth;

/// The health monitor's certificate common name, which BOSH's NATS permissions let
/// subscribe to heartbeats.
pub const HM_COMMON_NAME: &str = "default.hm.bosh-internal";

/// The heartbeat subscription (every agent).
pub const HEARTBEAT_SUBJECT: &str = "hm.agent.heartbeat.*";

/// The shutdown notice subscription (every agent).
pub const SHUTDOWN_SUBJECT: &str = "hm.agent.shutdown.*";

/// How long a heartbeat is kept when its agent says nothing more. Far longer than any window
/// the engine asks about (60 s), so only agents that are gone are forgotten.
pub const RETAIN_FOR: Duration = Duration::from_secs(3600);

/// How long after the monitor's connection comes back the agents may take to be heard again:
/// they reconnect on their own schedule (async-nats retries at most every 4 s), and silence
/// counts only from this long after the reconnection.
pub const AGENTS_RECONNECT_WITHIN: Duration = Duration::from_secs(5);

/// How often records older than [`RETAIN_FOR`] are dropped.
const PRUNE_EVERY: Duration = Duration::from_secs(300);

/// How long [`HeartbeatMonitor::connect`] waits for nats-server to refuse a subscription
/// after the subscriptions were flushed. The refusal is read before the flush's answer, but
/// reaches us through async-nats's event task, which may run a moment later.
const REFUSAL_GRACE: Duration = Duration::from_millis(250);

/// Why the monitor could not start.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// Connecting or subscribing failed.
    #[error(transparent)]
    Nats(#[from] NatsError),
    /// The health monitor's certificate could not be issued.
    #[error("cannot issue the health monitor's NATS certificate: {0}")]
    Pki(#[from] PkiError),
    /// nats-server's permissions refused a subscription (the identity is not the health
    /// monitor's).
    #[error(
        "nats-server refused the subscription: {reason} (heartbeats need the health monitor's identity, CN {HM_COMMON_NAME})"
    )]
    Refused {
        /// The server's words.
        reason: String,
    },
}

/// What an agent said in its last heartbeat, and when it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastHeartbeat {
    /// `job_state` as sent (`running`, `failing`, `stopped`, ...).
    pub job_state: String,
    /// Deployment name (empty before the first apply).
    pub deployment: String,
    /// Instance group name.
    pub job: Option<String>,
    /// Instance index.
    pub index: Option<u64>,
    /// When it arrived.
    pub received: Instant,
}

/// The last heartbeat of each agent id: what the monitor knows, without I/O.
#[derive(Debug, Default, Clone)]
pub struct HeartbeatTable {
    agents: HashMap<String, LastHeartbeat>,
    /// When each agent last showed it was alive other than by a heartbeat (a shutdown
    /// notice, an answer to the director): it is not silent since, though its jobs'
    /// state is unknown.
    signs_of_life: HashMap<String, Instant>,
}

impl HeartbeatTable {
    /// Records `heartbeat` from `agent_id`, received at `now`.
    pub fn heartbeat(&mut self, agent_id: &str, heartbeat: &Heartbeat, now: Instant) {
        self.agents.insert(
            agent_id.to_string(),
            LastHeartbeat {
                job_state: heartbeat.job_state.as_str().to_string(),
                deployment: heartbeat.deployment.clone(),
                job: heartbeat.job.clone(),
                index: heartbeat.index,
                received: now,
            },
        );
    }

    /// Agent `agent_id` announced its shutdown at `now`: nothing is known of its jobs any
    /// more, but it was alive then.
    pub fn shutdown(&mut self, agent_id: &str, now: Instant) {
        self.agents.remove(agent_id);
        self.answered(agent_id, now);
    }

    /// Agent `agent_id` showed it was alive at `now` without a heartbeat (it answered the
    /// director).
    pub fn answered(&mut self, agent_id: &str, now: Instant) {
        self.signs_of_life.insert(agent_id.to_string(), now);
    }

    /// The last heartbeat of `agent_id`, however old.
    pub fn last(&self, agent_id: &str) -> Option<&LastHeartbeat> {
        self.agents.get(agent_id)
    }

    /// The `job_state` of `agent_id` if its last heartbeat arrived within `within` of `now`.
    pub fn recent_job_state(&self, agent_id: &str, within: Duration, now: Instant) -> Option<&str> {
        self.agents
            .get(agent_id)
            .filter(|last| now.saturating_duration_since(last.received) <= within)
            .map(|last| last.job_state.as_str())
    }

    /// Whether, listened to since `listening_since`, the table proves `agent_id` silent for
    /// `at_least` at `now` ([`AgentHealth::silent_for`]): the heartbeats flow (`feed_up`: the
    /// monitor is connected and has heard agents; or some agent was heard within
    /// `at_least`) and this agent was neither heard nor otherwise seen alive in that time.
    pub fn silent_for(
        &self,
        agent_id: &str,
        at_least: Duration,
        (listening_since, feed_up): (Instant, bool),
        now: Instant,
    ) -> bool {
        let within = |at: Instant| now.saturating_duration_since(at) <= at_least;
        let recent = |last: &LastHeartbeat| within(last.received);
        now.saturating_duration_since(listening_since) >= at_least
            && (feed_up || self.agents.values().any(recent))
            && !self.agents.get(agent_id).is_some_and(recent)
            && !self
                .signs_of_life
                .get(agent_id)
                .is_some_and(|at| within(*at))
    }

    /// When `agent_id` was last heard (a heartbeat or another sign of life), if it was.
    pub fn heard_last(&self, agent_id: &str) -> Option<Instant> {
        let heartbeat = self.agents.get(agent_id).map(|last| last.received);
        heartbeat.max(self.signs_of_life.get(agent_id).copied())
    }

    /// Forgets agents whose last heartbeat (or other sign of life) is older than `age` at
    /// `now`.
    pub fn prune(&mut self, age: Duration, now: Instant) {
        self.agents
            .retain(|_, last| now.saturating_duration_since(last.received) <= age);
        self.signs_of_life
            .retain(|_, at| now.saturating_duration_since(*at) <= age);
    }

    /// How many agents are known.
    pub fn len(&self) -> usize {
        self.agents.len()
    }

    /// True if no agent is known.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }
}

/// One message of the monitor's subscriptions, read.
#[derive(Debug, Clone, PartialEq)]
pub enum HmMessage {
    /// `hm.agent.heartbeat.<agent_id>` with a heartbeat payload.
    Heartbeat {
        /// The agent id (last subject token).
        agent_id: String,
        /// What it said.
        heartbeat: Box<Heartbeat>,
    },
    /// `hm.agent.shutdown.<agent_id>` (payload `null`, not looked at).
    Shutdown {
        /// The agent id.
        agent_id: String,
    },
    /// Anything else: not a subject we know, or a payload that is not a heartbeat.
    Ignored {
        /// Why.
        reason: String,
    },
}

impl HmMessage {
    /// Reads a message by subject and payload. Never fails: what cannot be read is
    /// [`HmMessage::Ignored`].
    pub fn read(subject: &str, payload: &[u8]) -> HmMessage {
        let agent_id = |prefix: &str| {
            subject
                .strip_prefix(prefix)
                .filter(|id| nats::is_subject_token(id))
                .map(str::to_string)
        };
        if let Some(agent_id) = agent_id("hm.agent.heartbeat.") {
            match serde_json::from_slice::<Heartbeat>(payload) {
                Ok(heartbeat) => HmMessage::Heartbeat {
                    agent_id,
                    heartbeat: Box::new(heartbeat),
                },
                Err(e) => HmMessage::Ignored {
                    reason: format!("not a heartbeat: {e}"),
                },
            }
        } else if let Some(agent_id) = agent_id("hm.agent.shutdown.") {
            HmMessage::Shutdown { agent_id }
        } else {
            HmMessage::Ignored {
                reason: "not a heartbeat or shutdown subject".into(),
            }
        }
    }

    /// Applies the message to `table` at `now`.
    pub fn apply(&self, table: &mut HeartbeatTable, now: Instant) {
        match self {
            HmMessage::Heartbeat {
                agent_id,
                heartbeat,
            } => table.heartbeat(agent_id, heartbeat, now),
            HmMessage::Shutdown { agent_id } => table.shutdown(agent_id, now),
            HmMessage::Ignored { .. } => {}
        }
    }
}

/// The health monitor's identity: a client certificate for [`HM_COMMON_NAME`] signed by
/// `ca` (the NATS CA, which the director holds to sign agents' certificates).
pub fn hm_identity(ca: &Ca) -> Result<MbusTls, HealthError> {
    let cert = ca.issue(&Leaf {
        common_name: HM_COMMON_NAME,
        client: true,
        ..Leaf::default()
    })?;
    Ok(MbusTls::new(ca.cert_pem(), cert.cert_pem, cert.key_pem))
}

type Table = Arc<Mutex<HeartbeatTable>>;

/// Listens to agents' heartbeats and shutdown notices on NATS and remembers each agent's
/// last one. A background task owned by the monitor does the listening; dropping the
/// monitor (or [`HeartbeatMonitor::close`]) stops it. Reconnecting is async-nats's job (it
/// subscribes again on its own).
pub struct HeartbeatMonitor {
    table: Table,
    listening_since: Instant,
    client: async_nats::Client,
    /// The connection's state: silence counts only while it is up, from when it came up.
    bus: Bus,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for HeartbeatMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeartbeatMonitor")
            .field("agents", &self.agents_heard())
            .field("listening_since", &self.listening_since)
            .finish_non_exhaustive()
    }
}

impl Drop for HeartbeatMonitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HeartbeatMonitor {
    /// Connects with `options` (whose identity must be the health monitor's, see
    /// [`hm_identity`]), subscribes to heartbeats and shutdown notices, and starts listening.
    /// Fails if nats-server refuses either subscription.
    pub async fn connect(options: &NatsOptions) -> Result<HeartbeatMonitor, HealthError> {
        let (refusals_tx, mut refusals) = tokio::sync::mpsc::unbounded_channel::<String>();
        let client = nats::connect_with(options, |o| {
            let refusals_tx = refusals_tx.clone();
            o.event_callback(move |event| {
                let refusals_tx = refusals_tx.clone();
                async move {
                    if let async_nats::Event::ServerError(async_nats::ServerError::Other(text)) =
                        event
                        && text
                            .to_ascii_lowercase()
                            .contains("permissions violation for subscription")
                    {
                        let _ = refusals_tx.send(text);
                    }
                }
            })
        })
        .await?;
        let heartbeats = nats::subscribe_flushed(&client, HEARTBEAT_SUBJECT.into()).await?;
        let shutdowns = nats::subscribe_flushed(&client, SHUTDOWN_SUBJECT.into()).await?;
        if let Ok(Some(reason)) = tokio::time::timeout(REFUSAL_GRACE, refusals.recv()).await {
            return Err(HealthError::Refused { reason });
        }
        let table = Table::default();
        let task = tokio::spawn(listen(
            futures::stream::select(heartbeats, shutdowns),
            refusals,
            table.clone(),
        ));
        let bus = Bus::watch(&client, nats::server_names(&options.urls));
        Ok(HeartbeatMonitor {
            table,
            listening_since: Instant::now(),
            client,
            bus,
            task,
        })
    }

    /// The last heartbeat of `agent_id` since the monitor started, however old.
    pub fn last_heartbeat(&self, agent_id: &str) -> Option<LastHeartbeat> {
        self.table().last(agent_id).cloned()
    }

    /// How many agents the monitor knows.
    pub fn agents_heard(&self) -> usize {
        self.table().len()
    }

    /// How long the monitor has been listening.
    pub fn listening_for(&self) -> Duration {
        self.listening_since.elapsed()
    }

    /// Stops listening and closes the connection.
    pub async fn close(self) {
        self.task.abort();
        // Bounded: the server may be gone for good.
        let _ = tokio::time::timeout(Duration::from_secs(2), self.client.drain()).await;
    }

    /// Since when silence counts at `now`: while the connection is down nothing can be
    /// heard (`None`); after it came back, from when the agents have had time to come back
    /// too (heartbeats sent meanwhile were lost, not unsent).
    fn listening_since(&self, now: Instant) -> Option<Instant> {
        let up_for = self.bus.up_for()?;
        Some(match now.checked_sub(up_for) {
            Some(up) if up > self.listening_since => up + AGENTS_RECONNECT_WITHIN,
            _ => self.listening_since,
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HeartbeatTable> {
        // The table is plain data: a panic elsewhere cannot leave it half-written.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl AgentHealth for HeartbeatMonitor {
    fn recent_job_state(&self, agent_id: &str, within: Duration) -> Option<String> {
        self.table()
            .recent_job_state(agent_id, within, Instant::now())
            .map(str::to_string)
    }

    fn silent_for(&self, agent_id: &str, at_least: Duration) -> bool {
        let now = Instant::now();
        let Some(listening_since) = self.listening_since(now) else {
            return false;
        };
        // Heartbeats came through (permissions let them): silence is the agent's, even when
        // every agent is silent.
        let table = self.table();
        let feed_up = !table.is_empty();
        table.silent_for(agent_id, at_least, (listening_since, feed_up), now)
    }

    fn silent_from(&self, agent_id: &str, at_least: Duration) -> Option<Instant> {
        let listening_since = self.listening_since(Instant::now())?;
        let heard = (self.table().heard_last(agent_id))
            .map_or(listening_since, |at| at.max(listening_since));
        // Proven once more than `at_least` has passed (`silent_for` counts a heartbeat
        // exactly `at_least` old as recent).
        Some(heard + at_least + Duration::from_millis(1))
    }

    fn unreachable(&self) -> Option<String> {
        self.bus.check().err().map(|e| e.to_string())
    }

    fn answered(&self, agent_id: &str) {
        self.table().answered(agent_id, Instant::now());
    }
}

/// The monitor's task: applies every message to the table until the subscriptions end.
async fn listen(
    mut messages: impl futures::Stream<Item = async_nats::Message> + Unpin,
    mut refusals: tokio::sync::mpsc::UnboundedReceiver<String>,
    table: Table,
) {
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some(message) = message else { break };
                let read = HmMessage::read(message.subject.as_str(), &message.payload);
                if let HmMessage::Ignored { reason } = &read {
                    tracing::debug!(subject = %message.subject, %reason, "ignoring a message");
                }
                let mut table = table.lock().unwrap_or_else(PoisonError::into_inner);
                read.apply(&mut table, Instant::now());
            }
            Some(reason) = refusals.recv() => {
                // After a reconnect with other permissions, say, heartbeats stop coming and
                // what is known ages out of every window.
                tracing::warn!(%reason, "nats-server refused a health monitor subscription");
            }
            _ = prune.tick() => {
                let mut table = table.lock().unwrap_or_else(PoisonError::into_inner);
                table.prune(RETAIN_FOR, Instant::now());
            }
        }
    }
    tracing::debug!("the heartbeat subscriptions ended");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(job_state: &str) -> Vec<u8> {
        serde_json::json!({
            "deployment": "hello",
            "job": "web",
            "index": 1,
            "job_state": job_state,
            "vitals": {
                "cpu": {"sys": "0.1", "user": "0.5", "wait": "0.0"},
                "disk": {"system": {"percent": "40", "inode_percent": "10"}},
                "load": ["0.01", "0.05", "0.10"],
                "mem": {"kb": "1024", "percent": "12"},
                "swap": {"kb": "0", "percent": "0"},
                "uptime": {"secs": 1234},
            },
            "node_id": "6c8b5e3c-0000-4000-8000-000000000001",
            "number_of_processes": 2,
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_bosh_agent_heartbeat_is_read() {
        let read = HmMessage::read("hm.agent.heartbeat.agent-1", &beat("running"));
        let HmMessage::Heartbeat {
            agent_id,
            heartbeat,
        } = read
        else {
            panic!("{read:?}");
        };
        assert_eq!(agent_id, "agent-1");
        assert_eq!(heartbeat.job_state.as_str(), "running");
        assert_eq!(heartbeat.deployment, "hello");
        assert_eq!(heartbeat.job.as_deref(), Some("web"));
        assert_eq!(heartbeat.index, Some(1));
        assert_eq!(heartbeat.number_of_processes, Some(2));
    }

    #[test]
    fn shutdown_notices_are_read_whatever_their_payload() {
        for payload in [&b"null"[..], b"", b"{}"] {
            assert_eq!(
                HmMessage::read("hm.agent.shutdown.agent-1", payload),
                HmMessage::Shutdown {
                    agent_id: "agent-1".into()
                }
            );
        }
    }

    #[test]
    fn malformed_messages_are_ignored() {
        let cases: [(&str, &[u8]); 6] = [
            ("hm.agent.heartbeat.agent-1", b"not json"),
            ("hm.agent.heartbeat.agent-1", b"null"),
            ("hm.agent.heartbeat.agent-1", b"[1, 2]"),
            ("hm.agent.heartbeat.agent-1", br#"{"job_state": 7}"#),
            ("hm.agent.heartbeat.", b"{}"),
            ("hm.agent.alert.agent-1", b"{}"),
        ];
        for (subject, payload) in cases {
            let read = HmMessage::read(subject, payload);
            assert!(
                matches!(read, HmMessage::Ignored { .. }),
                "{subject} {payload:?}: {read:?}"
            );
            let mut table = HeartbeatTable::default();
            read.apply(&mut table, Instant::now());
            assert!(table.is_empty());
        }
        // A heartbeat without job_state is one whose state is unknown, not a running one.
        let read = HmMessage::read("hm.agent.heartbeat.agent-1", b"{}");
        let mut table = HeartbeatTable::default();
        let now = Instant::now();
        read.apply(&mut table, now);
        assert_eq!(
            table.recent_job_state("agent-1", Duration::from_secs(1), now),
            Some("unknown")
        );
    }

    #[test]
    fn silence_is_proven_only_when_the_feed_works_and_was_listened_to_long_enough() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let window = Duration::from_secs(60);
        let mut table = HeartbeatTable::default();
        let read =
            |agent: &str| HmMessage::read(&format!("hm.agent.heartbeat.{agent}"), &beat("running"));
        read("alive").apply(&mut table, at(10));
        read("dead").apply(&mut table, at(10));
        read("alive").apply(&mut table, at(70));
        let unknown = (start, false);
        assert!(
            table.silent_for("dead", window, unknown, at(75)),
            "others heard, it was not"
        );
        assert!(table.silent_for("never-heard", window, unknown, at(75)));
        assert!(!table.silent_for("alive", window, unknown, at(75)));
        assert!(
            !table.silent_for("dead", window, (at(30), true), at(75)),
            "not listened to for a whole window"
        );
        assert!(
            !table.silent_for("dead", window, unknown, at(200)),
            "nobody heard, and the feed is not known to be up: it may be down"
        );
        assert!(
            table.silent_for("dead", window, (start, true), at(200)),
            "nobody heard on a feed that is up: every agent is silent"
        );
    }

    #[test]
    fn the_last_heartbeat_counts_within_its_window_and_a_shutdown_ends_it() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let window = Duration::from_secs(60);
        let mut table = HeartbeatTable::default();
        for (agent, state, when) in [
            ("a", "starting", 0),
            ("a", "running", 10),
            ("b", "failing", 5),
        ] {
            HmMessage::read(&format!("hm.agent.heartbeat.{agent}"), &beat(state))
                .apply(&mut table, at(when));
        }
        assert_eq!(table.recent_job_state("a", window, at(70)), Some("running"));
        assert_eq!(table.recent_job_state("a", window, at(71)), None);
        assert_eq!(table.recent_job_state("b", window, at(65)), Some("failing"));
        assert_eq!(table.recent_job_state("c", window, at(10)), None);
        // Old news is kept, only not recent.
        assert_eq!(table.last("a").map(|l| l.received), Some(at(10)));
        assert_eq!(
            table.last("a").and_then(|l| l.job.clone()),
            Some("web".into())
        );

        HmMessage::read("hm.agent.shutdown.a", b"null").apply(&mut table, at(20));
        assert_eq!(table.recent_job_state("a", window, at(20)), None);
        assert_eq!(table.recent_job_state("b", window, at(20)), Some("failing"));
        // Heard again after its shutdown: the VM lived on.
        HmMessage::read("hm.agent.heartbeat.a", &beat("stopped")).apply(&mut table, at(30));
        assert_eq!(table.recent_job_state("a", window, at(30)), Some("stopped"));
    }

    #[test]
    fn a_shutdown_notice_or_an_answer_to_the_director_is_a_sign_of_life_not_a_job_state() {
        // bosh-agent drains with `shutdown` before a disk change that keeps its VM, and a new
        // bosh-agent's first heartbeat is lost (sent before it connects): neither makes a
        // live agent silent at once.
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let window = Duration::from_secs(40);
        let up = (start, true);
        let mut table = HeartbeatTable::default();
        HmMessage::read("hm.agent.heartbeat.drained", &beat("running")).apply(&mut table, at(50));
        HmMessage::read("hm.agent.shutdown.drained", b"null").apply(&mut table, at(60));
        table.answered("new", at(60));
        for agent in ["drained", "new"] {
            assert!(!table.silent_for(agent, window, up, at(65)), "{agent}");
            assert_eq!(
                table.recent_job_state(agent, window, at(65)),
                None,
                "{agent}: its jobs are unknown"
            );
            assert!(
                table.silent_for(agent, window, up, at(101)),
                "{agent}: silent since"
            );
        }
        assert!(table.silent_for("never-heard", window, up, at(65)));
        // Signs of life are not what shows the feed works.
        assert!(table.is_empty());
        assert!(!table.silent_for("never-heard", window, (start, false), at(65)));
        table.prune(RETAIN_FOR, at(60) + RETAIN_FOR + Duration::from_secs(1));
        assert!(table.signs_of_life.is_empty());
    }

    #[test]
    fn an_agent_is_last_heard_at_its_latest_heartbeat_or_sign_of_life() {
        // Where the health watch looks again: the moment silence can first be proven.
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let window = Duration::from_secs(40);
        let up = (start, true);
        let mut table = HeartbeatTable::default();
        HmMessage::read("hm.agent.heartbeat.a", &beat("running")).apply(&mut table, at(50));
        HmMessage::read("hm.agent.heartbeat.b", &beat("running")).apply(&mut table, at(50));
        table.answered("b", at(55));
        assert_eq!(table.heard_last("a"), Some(at(50)));
        assert_eq!(table.heard_last("b"), Some(at(55)));
        assert_eq!(table.heard_last("never-heard"), None);
        for agent in ["a", "b"] {
            let last = table.heard_last(agent).expect("heard");
            let proven = last + window + Duration::from_millis(1);
            assert!(
                !table.silent_for(agent, window, up, last + window),
                "{agent}"
            );
            assert!(table.silent_for(agent, window, up, proven), "{agent}");
        }
    }

    #[test]
    fn only_agents_silent_for_longer_than_the_retention_are_forgotten() {
        let start = Instant::now();
        let mut table = HeartbeatTable::default();
        table.heartbeat("old", &Heartbeat::default(), start);
        table.heartbeat(
            "new",
            &Heartbeat::default(),
            start + Duration::from_secs(100),
        );
        table.prune(RETAIN_FOR, start + RETAIN_FOR);
        assert_eq!(table.len(), 2);
        table.prune(RETAIN_FOR, start + RETAIN_FOR + Duration::from_secs(1));
        assert!(table.last("old").is_none());
        assert!(table.last("new").is_some());
    }

    #[test]
    fn the_hm_identity_is_a_client_certificate_of_the_ca() {
        let ca = Ca::new("nats-ca").unwrap();
        let tls = hm_identity(&ca).unwrap();
        assert_eq!(tls.ca_pem, ca.cert_pem());
        assert!(tls.verify_server_cn);
        tls.client_config().expect("a usable TLS identity");
    }
}
