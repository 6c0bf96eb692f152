//! `bosh logs`: each chosen instance's agent packs its log files (`fetch_logs`: the jobs'
//! logs, or the agent's, optionally only some files) into a tarball in the blobstore; the
//! engine streams each tarball into a file the caller names, checked against the agent's
//! SHA-1, and deletes the blob (as the Director's `LogsFetcher` does after downloading).
//! Read only for the deployment: no lock, no record written.

use std::path::{Path, PathBuf};

use kubosh_base::digest::MultiDigest;

use crate::progress::StageRun;
use crate::state::InstanceRecord;
use crate::{Engine, EngineError, Scope};

/// Which logs an agent packs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogsRequest {
    /// `job` (the jobs' `/var/vcap/sys/log`) or `agent` (the agent's own), or both
    /// comma-separated, as bosh-cli asks.
    pub log_type: String,
    /// Only the files matching one of these globs, relative to the log directory
    /// (`hello/**`, `*.log`; `**` crosses directories); empty: every file.
    pub filters: Vec<String>,
}

/// One instance's logs, fetched.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchedLogs {
    /// The instance.
    pub instance: InstanceRecord,
    /// The tarball.
    pub path: PathBuf,
}

impl Engine {
    /// The instances of the engine's deployment `name` that `asked` names (`group`,
    /// `group/index`, `group/uuid`; `None`: all), sorted by group and index. An instance
    /// without a VM fails the request, as the Director's does.
    pub async fn instances_named(
        &self,
        name: &str,
        asked: Option<&str>,
    ) -> Result<Vec<InstanceRecord>, EngineError> {
        let no_such = || EngineError::NoSuchInstance {
            deployment: name.to_string(),
            asked: asked.unwrap_or("*").to_string(),
        };
        let scope = asked
            .map(|slug| Scope::parse(slug).ok_or_else(no_such))
            .transpose()?;
        let state = self.store.load().await?;
        let mut chosen: Vec<InstanceRecord> = (state.instances.into_values())
            .filter(|r| scope.as_ref().is_none_or(|s| s.contains(r)))
            .collect();
        if chosen.is_empty() {
            return Err(no_such());
        }
        chosen.sort_by(|a, b| (a.group.as_str(), a.index).cmp(&(b.group.as_str(), b.index)));
        Ok(chosen)
    }

    /// The instances any of `slugs` names ([`Engine::instances_named`] each, in order, each
    /// instance once); all of them when `slugs` is empty.
    pub async fn instances_selected(
        &self,
        name: &str,
        slugs: &[String],
    ) -> Result<Vec<InstanceRecord>, EngineError> {
        if slugs.is_empty() {
            return self.instances_named(name, None).await;
        }
        let mut chosen: Vec<InstanceRecord> = Vec::new();
        for slug in slugs {
            for record in self.instances_named(name, Some(slug)).await? {
                if !chosen.iter().any(|c| c.uuid == record.uuid) {
                    chosen.push(record);
                }
            }
        }
        Ok(chosen)
    }

    /// Fetches the logs of `instances` into `dir` (`<group>.<uuid>.tgz` each), one
    /// `Fetching logs for ...` stage per instance, as the Director's task shows them.
    pub async fn fetch_logs(
        &self,
        instances: Vec<InstanceRecord>,
        request: &LogsRequest,
        dir: &Path,
    ) -> Result<Vec<FetchedLogs>, EngineError> {
        let mut fetched = Vec::new();
        for instance in instances {
            let name = instance.display_name();
            let Some(vm) = &instance.vm else {
                return Err(EngineError::InstanceVmMissing { instance: name });
            };
            let stage = StageRun::new(
                self.events.clone(),
                &format!(
                    "Fetching logs for {}/{} ({})",
                    instance.group, instance.uuid, instance.index
                ),
                vec![],
                1,
            );
            let path = dir.join(format!("{}.{}.tgz", instance.group, instance.uuid));
            let agent = self.agent(&vm.agent_id, &name);
            let fetch = async {
                let blob = agent
                    .fetch_logs(&request.log_type, &request.filters)
                    .await?;
                let digest: MultiDigest = blob.sha1.parse().map_err(|e| {
                    kubosh_transport::agent::AgentError::MalformedReply {
                        method: "fetch_logs".into(),
                        agent_id: vm.agent_id.clone(),
                        reason: format!("the digest '{}' cannot be read: {e}", blob.sha1),
                    }
                })?;
                let got = self.blobstore.get(&blob.blobstore_id, &digest, &path).await;
                // The blob was made for this request only.
                let _ = self.blobstore.delete(&blob.blobstore_id).await;
                got?;
                Ok::<(), EngineError>(())
            };
            stage.task("Finding and packing log files", fetch).await?;
            fetched.push(FetchedLogs { instance, path });
        }
        Ok(fetched)
    }
}

/// Writes `fetched` to `path` as `bosh logs` hands them over: one instance's tarball as it
/// is, several in one tarball holding `<group>.<uuid>.<time>.tgz` each (as the Director
/// bundles a group's logs), `time` being the download's stamp.
pub fn write_archive(fetched: &[FetchedLogs], time: &str, path: &Path) -> std::io::Result<()> {
    if let [one] = fetched {
        return std::fs::rename(&one.path, path);
    }
    let mut tar = kubosh_core::release::tarball::TarWriter::new();
    for logs in fetched {
        let bytes = std::fs::read(&logs.path)?;
        let i = &logs.instance;
        tar.file(
            &format!("./{}.{}.{time}.tgz", i.group, i.uuid),
            &bytes,
            false,
        )?;
    }
    std::fs::write(path, tar.finish(false)?)
}

/// Now as bosh-cli stamps downloads (`20060102-150405-999999999`, UTC here).
pub fn download_stamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (y, m, d) = kubosh_base::civil::civil_from_days((secs / 86_400) as i64);
    let rest = secs % 86_400;
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}-{:09}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        now.subsec_nanos()
    )
}
