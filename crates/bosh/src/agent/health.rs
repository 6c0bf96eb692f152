//! What the engine asks of whoever listens to agent heartbeats.

use std::time::Duration;

/// Recent agent heartbeats, as the health monitor hears them: lets a deploy skip asking
/// agents it heard from.
pub trait AgentHealth: Send + Sync {
    /// The `job_state` agent `agent_id` reported within the last `within`, if it did.
    fn recent_job_state(&self, agent_id: &str, within: Duration) -> Option<String>;
}
