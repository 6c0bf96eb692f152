//! End to end through the `kubosh` binary: the CPI client and the local cloud (`kubosh cpi`),
//! kubosh's agent as a VM's process, release and stemcell commands, `kubosh deploy` on the
//! local cloud, crash safety, the CLI, and the controller under the Helm chart's RBAC.

mod agent_e2e;
mod agent_health;
#[path = "../../crates/agentd/tests/agents/agentd_common.rs"]
mod agentd_common;
mod bosh_cli_parity;
mod chart_rbac;
mod cli;
mod cli_deploy;
mod cli_deploy_health;
mod controller;
mod controller_crash;
mod controller_lifecycle;
mod cpi_client;
mod cpi_config;
mod cpi_local;
mod crash_safety;
mod create_env;
mod deploy_local;
mod director_world;
mod errands;
#[path = "../../crates/kube/tests/kube/helm.rs"]
mod helm;
mod kubectl_plugin;
mod nats_confinement;
mod ops_api;
mod readme;
mod real_agent;
mod release;
mod resurrection;
mod runtime_config;
mod stemcell;
mod up;
