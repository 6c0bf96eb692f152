//! `bosh ssh`: a one-time user with the caller's public key set up on each chosen instance
//! (the agent's `ssh setup`), and removed again after the session (`ssh cleanup` with the
//! user as `^<user>`, as bosh-cli asks). The engine holds no key: the caller made the pair
//! and keeps the private half. Read only for the deployment: no lock, no record written.

use futures::StreamExt;
use kubosh_bosh::agent::protocol::{SshCommand, SshUser};

use crate::state::InstanceRecord;
use crate::{Engine, EngineError};

/// Where a session on one instance goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshHost {
    /// `group/id`.
    pub instance: String,
    /// The instance's address.
    pub ip: String,
    /// Its SSH host key (empty when its agent has none to say).
    pub host_public_key: String,
    /// On the local cloud, the VM's directory on its host (kubosh's agent): a session there
    /// is a shell in it.
    pub local_root: Option<String>,
}

impl Engine {
    /// Sets `user` up with `public_key` on each of `instances`, at most the engine's
    /// `get_state_concurrency` at once.
    pub async fn ssh_setup(
        &self,
        instances: Vec<InstanceRecord>,
        user: &SshUser,
        public_key: &str,
    ) -> Result<Vec<SshHost>, EngineError> {
        let command = SshCommand::Setup {
            user: user.as_str().to_string(),
            public_key: public_key.to_string(),
        };
        let setups = instances.into_iter().map(|instance| {
            let command = &command;
            async move {
                let name = instance.display_name();
                let Some(vm) = &instance.vm else {
                    return Err(EngineError::InstanceVmMissing { instance: name });
                };
                let answer = self.agent(&vm.agent_id, &name).ssh(command).await?;
                Ok(SshHost {
                    instance: format!("{}/{}", instance.group, instance.uuid),
                    ip: answer.ip.unwrap_or_default(),
                    host_public_key: answer.host_public_key.unwrap_or_default(),
                    local_root: answer.local_root,
                })
            }
        });
        let mut answers =
            futures::stream::iter(setups).buffered(self.config.get_state_concurrency.max(1));
        let mut hosts = Vec::new();
        while let Some(host) = answers.next().await {
            hosts.push(host?);
        }
        Ok(hosts)
    }

    /// Removes `user` from each of `instances` (every instance is asked, the first failure
    /// is the answer).
    pub async fn ssh_cleanup(
        &self,
        instances: Vec<InstanceRecord>,
        user: &SshUser,
    ) -> Result<(), EngineError> {
        let command = SshCommand::Cleanup {
            user_regex: user.cleanup_regex(),
        };
        let cleanups = instances.into_iter().filter_map(|instance| {
            let vm = instance.vm.clone()?;
            let command = &command;
            Some(async move {
                let agent = self.agent(&vm.agent_id, &instance.display_name());
                agent.ssh(command).await.map(|_| ())
            })
        });
        let results: Vec<Result<(), _>> = futures::stream::iter(cleanups)
            .buffer_unordered(self.config.get_state_concurrency.max(1))
            .collect()
            .await;
        results.into_iter().collect::<Result<(), _>>()?;
        Ok(())
    }
}
