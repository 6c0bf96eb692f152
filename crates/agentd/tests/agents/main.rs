//! The agent protocol against a real nats-server with mutual TLS and kubosh's own agent (its
//! supervisor, scripts, packages, disks, HTTPS mbus) running real processes.

mod agent_https;
mod agent_nats;
mod agentd_common;
mod agentd_compile;
mod agentd_disk;
mod agentd_https_mbus;
mod agentd_install;
mod agentd_scripts;
mod agentd_service;
mod agentd_supervisor;
mod nats;
