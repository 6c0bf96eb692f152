//! What the engine asks of whoever listens to agent heartbeats.

use std::time::{Duration, Instant};

/// Recent agent heartbeats, as the health monitor hears them: lets a deploy skip asking
/// agents it heard from.
pub trait AgentHealth: Send + Sync {
    /// The `job_state` agent `agent_id` reported within the last `within`, if it did.
    fn recent_job_state(&self, agent_id: &str, within: Duration) -> Option<String>;

    /// Whether the heartbeats prove agent `agent_id` silent for at least `at_least`: they
    /// have been listened to that long, other agents were heard in that time (the feed
    /// works), and this one was not. `false` when they cannot tell.
    fn silent_for(&self, agent_id: &str, at_least: Duration) -> bool {
        let _ = (agent_id, at_least);
        false
    }

    /// When agent `agent_id` will be proven silent for `at_least` ([`AgentHealth::silent_for`])
    /// if nothing more is heard from it: where a watcher looks again so that silence is
    /// noticed when it can first be proven, not at its next periodic check. `None` when
    /// that cannot be told.
    fn silent_from(&self, agent_id: &str, at_least: Duration) -> Option<Instant> {
        let _ = (agent_id, at_least);
        None
    }

    /// Why no heartbeat can arrive now, in an operator's words (`NATS at nats://10.0.0.6:4222
    /// is unreachable: no connection for 12 s`): silence then says nothing of the agents.
    /// `None` when heartbeats can arrive, or when that is not known.
    fn unreachable(&self) -> Option<String> {
        None
    }

    /// Agent `agent_id` has just answered the director (the agent of a VM it made came up):
    /// a sign of life that counts against [`AgentHealth::silent_for`] as a heartbeat would,
    /// though it says nothing of the jobs. A new VM's first heartbeat may be long in coming:
    /// bosh-agent sends it while still connecting to NATS, where it is dropped, so it is
    /// first heard a heartbeat interval (30 s) after it started.
    fn answered(&self, agent_id: &str) {
        let _ = agent_id;
    }
}
