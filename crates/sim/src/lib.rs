//! A simulated cloud and simulated agents, in memory, for the engine's fast tests and
//! benchmarks (thousands of VMs in well under a second of CPU).
//!
//! [`SimCloud`] is a [`kubosh_cloud::Cloud`]; [`SimAgents`] is an agent
//! [`kubosh_transport::agent::Transport`], so the engine drives them through the same
//! [`kubosh_transport::agent::AgentClient`] it uses over NATS. Both share one world ([`pair`]): creating a
//! VM creates its agent, deleting the VM kills it (later messages time out), and a disk's
//! simulated files ([`SimDisk::files`]) move with the agent's `migrate_disk`.
//!
//! Time is `tokio::time`: latencies ([`SimCloud::set_latency`], [`SimAgents::set_latency`])
//! and timeouts are sleeps, so on a paused clock (`#[tokio::test(start_paused = true)]`) a
//! deploy of hours of simulated time runs in no real time and the virtual elapsed time can be
//! asserted. Faults ([`CloudFault`], [`AgentFault`]), a call log and counters steer and observe
//! both sides; [`SimCloud::inventory`] shows what is left.
//!
//! [`LiteralRenderer`] renders templates without Ruby, so a configuration hash changes exactly
//! when a job's properties or the instance do.
//!
//! The real pair — the `kubosh cpi` executable ([`kubosh_cloud::local`]) and `kubosh agent`
//! ([`kubosh_agentd`]) over NATS — stays what the protocol tests use; this module mirrors
//! their reply values without depending on them.

mod actions;
mod agents;
mod cloud;
mod instruments;
mod render;
mod spec;
mod world;

use std::sync::{Arc, Mutex, MutexGuard};

pub use agents::{AgentView, SimAgents};
pub use cloud::{RATE_LIMITED_MESSAGE, SimCloud};
pub use instruments::{
    AgentEffect, AgentFault, Call, CloudEffect, CloudFault, Fault, Side, Step, spread_latency,
};
pub use render::LiteralRenderer;
pub use world::{NewAgents, SimDisk, SimInventory, SimSnapshot, SimStemcell, SimVm};

use kubosh_artifacts::blobstore::Blobstore;

/// How a simulated pair behaves.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The CPI API version the cloud implements (2: `create_vm` reports networks and
    /// `attach_disk` a disk hint; 1: neither).
    pub api_version: u32,
    /// The stemcell formats `info` reports.
    pub stemcell_formats: Vec<String>,
    /// Whether `resize_disk` works (else `NotImplemented`, so the engine copies instead).
    pub resize_disk: bool,
    /// Whether `update_disk` works (else `NotImplemented`).
    pub update_disk: bool,
    /// The agent protocol of the transport: `Some(3)` as over NATS, `None` as over HTTPS.
    pub agent_protocol: Option<u32>,
    /// Keep the call logs (counters are always kept). Off for the largest benchmarks.
    pub record_calls: bool,
    /// Where `compile_package` stores the compiled bytes; without one it only answers the
    /// blob id and digest the bytes would have.
    pub blobstore: Option<Arc<dyn Blobstore>>,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            api_version: 2,
            stemcell_formats: vec!["sim-raw".into()],
            resize_disk: true,
            update_disk: true,
            agent_protocol: Some(kubosh_transport::agent::protocol::PROTOCOL_VERSION),
            record_calls: true,
            blobstore: None,
        }
    }
}

/// A test helper named something the simulation does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// No such VM.
    #[error("simulated VM '{0}' not found")]
    VmNotFound(String),
    /// No such agent.
    #[error("simulated agent '{0}' not found")]
    AgentNotFound(String),
    /// No such disk.
    #[error("simulated disk '{0}' not found")]
    DiskNotFound(String),
    /// The agent has no disk mounted at `store`.
    #[error("simulated agent '{0}' has no persistent disk mounted")]
    NoPersistentDisk(String),
}

/// What the cloud and the agents share.
#[derive(Debug)]
pub struct Shared {
    pub config: SimConfig,
    pub world: Mutex<world::World>,
    /// Both sides' calls in the order they arrived (when [`SimConfig::record_calls`]).
    pub timeline: Mutex<Vec<Step>>,
}

impl Shared {
    pub fn world(&self) -> MutexGuard<'_, world::World> {
        lock(&self.world)
    }

    /// Appends a call to the timeline (when calls are recorded).
    pub fn record(&self, step: impl FnOnce() -> Step) {
        if self.config.record_calls {
            lock(&self.timeline).push(step());
        }
    }
}

/// A lock that survives a panicked holder (a failed test must not poison the others' view).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A simulated cloud and the agents of its VMs, sharing one world.
pub fn pair(config: SimConfig) -> (Arc<SimCloud>, Arc<SimAgents>) {
    let shared = Arc::new(Shared {
        config,
        world: Mutex::new(world::World::default()),
        timeline: Mutex::new(Vec::new()),
    });
    (
        Arc::new(SimCloud::new(shared.clone())),
        Arc::new(SimAgents::new(shared)),
    )
}

/// Sets how long `method` takes: on the cloud when it is a CPI method
/// ([`kubosh_bosh::cpi::protocol::METHODS`]), else on the agents (an agent action).
pub fn set_latency(
    cloud: &SimCloud,
    agents: &SimAgents,
    method: &str,
    latency: std::time::Duration,
) {
    if kubosh_bosh::cpi::protocol::METHODS.contains(&method) {
        cloud.set_latency(method, latency);
    } else {
        agents.set_latency(method, latency);
    }
}

#[cfg(test)]
mod tests;
