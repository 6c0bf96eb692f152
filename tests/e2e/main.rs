//! End to end through the `kubosh` binary: the CPI client and the local cloud (`kubosh cpi`),
//! kubosh's agent as a VM's process, release and stemcell commands, `kubosh deploy` on the
//! local cloud, crash safety and the CLI.

mod agent_e2e;
mod agent_health;
#[path = "../../crates/agentd/tests/agents/agentd_common.rs"]
mod agentd_common;
mod cli;
mod cli_deploy;
mod cli_deploy_health;
mod controller;
mod controller_crash;
mod controller_lifecycle;
mod cpi_client;
mod cpi_local;
mod crash_safety;
mod create_env;
mod deploy_local;
mod director_world;
mod nats_confinement;
mod real_agent;
mod release;
mod stemcell;
mod up;
