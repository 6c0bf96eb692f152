//! The jobs on the new VM (the research notes §3.2 steps 13–19): the networks-only apply,
//! templates rendered here and uploaded to the agent's `/blobs`, packages compiled on the VM
//! in dependency order, then stop, apply, pre-start, start, the wait for `running` and
//! post-start.
//!
//! A kubosh addition: compiled packages are kept in a local cache
//! (`~/.kubosh/cache/compiled/<key>`, keyed by package fingerprint, dependency key and
//! stemcell) when the agent serves them back on `/blobs` (kubosh's agent with a `dav`
//! blobstore does; bosh-agent with a `local` one does not, and then nothing is cached); a
//! later deploy uploads the cached package instead of compiling it again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::install::render_jobs;
use crate::instance::Session;
use crate::model::{EnvDeployment, NeededPackage, needed_packages_by_name};
use crate::{EnvError, run, step};
use kubosh_artifacts::release::Release;
use kubosh_artifacts::render::{NetworkSpec, Renderer, rendered_templates_archive};
use kubosh_base::digest::{MultiDigest, sha256_hex};
use kubosh_transport::agent::AgentClient;
use kubosh_transport::agent::protocol::{
    ApplySpec, CompilePackageArgs, JobSpec, JobState, JobTemplateSpec, PackageSpec,
    RenderedTemplatesArchive, RunScriptOptions,
};

/// bosh-cli computes no configuration hash; agents only need one to install jobs.
const CONFIGURATION_HASH: &str = "unused-configuration-hash";

/// What the deploy needs to put jobs on the VM.
pub(super) struct JobsInput<'a> {
    pub deployment: &'a EnvDeployment,
    pub releases: &'a [Release],
    pub renderer: &'a Renderer,
    /// `~/.kubosh/cache/compiled`.
    pub cache_dir: PathBuf,
    /// `name/version` of the stemcell, part of the cache key.
    pub stemcell: String,
}

/// A compiled package in the local cache: its digest as the agent reported it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CacheEntry {
    sha1: String,
}

impl Session {
    /// Steps 13–19 on the VM whose agent is `agent_id`.
    pub async fn update_jobs(&self, input: &JobsInput<'_>, agent_id: &str) -> Result<(), EnvError> {
        let d = input.deployment;
        let agent = self.agent(agent_id);
        let instance = format!("{}/0", d.group);
        // The networks-only spec, so the agent knows its (dynamic) addresses.
        agent.apply(&initial_spec(d)).await?;
        let state = agent.get_state(false).await?;
        let ip = d.ip.clone().or_else(|| dynamic_ip(&state.spec, d));

        let archive = run(&self.ui, "Rendering job templates", async {
            let releases = job_releases(input)?;
            let refs: Vec<(&Release, &str, Option<&kubosh_core::manifest::Map>)> = releases
                .iter()
                .zip(&d.jobs)
                .map(|(r, j)| (*r, j.name.as_str(), j.properties.as_ref()))
                .collect();
            let rendered = render_jobs(
                input.renderer,
                &d.name,
                &d.group,
                &refs,
                d.global_properties.as_ref(),
                d.group_properties.as_ref(),
                template_networks(d, ip.as_deref()),
                ip.clone(),
                d.disk.as_ref().map_or(0, |x| x.size),
            )
            .await?;
            let bytes = rendered_templates_archive(&rendered)
                .map_err(|e| EnvError::Render(e.to_string()))?;
            let sha = format!("sha256:{}", sha256_hex(&bytes));
            let id = kubosh_base::ids::uuid_v4();
            self.put_blob(&id, bytes).await?;
            Ok(RenderedTemplatesArchive {
                blobstore_id: id,
                sha1: sha,
            })
        })
        .await?;

        let packages = self.compile_packages(input, &agent).await?;

        run(
            &self.ui,
            &format!("Updating instance '{instance}'"),
            async {
                agent.stop().await?;
                agent
                    .apply(&full_spec(input, d, packages.clone(), archive.clone()))
                    .await?;
                agent
                    .run_script("pre-start", &RunScriptOptions::default())
                    .await?;
                agent.start().await?;
                Ok(())
            },
        )
        .await?;
        run(
            &self.ui,
            &format!("Waiting for instance '{instance}' to be running"),
            wait_running(&agent, d),
        )
        .await?;
        run(
            &self.ui,
            &format!("Running the post-start scripts '{instance}'"),
            async {
                agent
                    .run_script("post-start", &RunScriptOptions::default())
                    .await?;
                Ok(())
            },
        )
        .await
    }

    async fn put_blob(&self, id: &str, bytes: Vec<u8>) -> Result<(), EnvError> {
        // davcli tries three times.
        let mut last = None;
        for _ in 0..3 {
            match self.transport.put_blob(id, bytes.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(EnvError::Blob(
            last.map(|e| e.to_string()).unwrap_or_default(),
        ))
    }

    /// Every package the jobs need, in dependency order: a compiled release's as it is, a
    /// cached one uploaded, the rest compiled by the agent (and cached when it can be fetched
    /// back).
    async fn compile_packages(
        &self,
        input: &JobsInput<'_>,
        agent: &AgentClient,
    ) -> Result<IndexMap<String, PackageSpec>, EnvError> {
        let jobs: Vec<(&str, &str)> = input
            .deployment
            .jobs
            .iter()
            .map(|j| (j.release.as_str(), j.name.as_str()))
            .collect();
        let needed = needed_packages_by_name(input.releases, &jobs)
            .map_err(|e| EnvError::Render(e.to_string()))?;
        let mut done: IndexMap<String, PackageSpec> = IndexMap::new();
        for package in &needed {
            let name = format!(
                "Compiling package '{}/{}'",
                package.name, package.fingerprint
            );
            let spec = step(
                &self.ui,
                &name,
                self.compile_one(input, agent, package, &done),
            )
            .await?;
            done.insert(package.name.clone(), spec);
        }
        Ok(done)
    }

    async fn compile_one(
        &self,
        input: &JobsInput<'_>,
        agent: &AgentClient,
        package: &NeededPackage,
        done: &IndexMap<String, PackageSpec>,
    ) -> Result<(PackageSpec, Option<String>), EnvError> {
        let spec = |blob: String, sha1: String| PackageSpec {
            name: package.name.clone(),
            version: package.fingerprint.clone(),
            sha1,
            blobstore_id: blob,
            ..PackageSpec::default()
        };
        let archive = package.archive.bytes().ok_or_else(|| {
            EnvError::Render(format!("package '{}' has no archive", package.name))
        })?;
        if package.precompiled {
            let id = kubosh_base::ids::uuid_v4();
            self.put_blob(&id, archive.to_vec()).await?;
            return Ok((
                spec(id, package.digest.to_string()),
                Some("Package already compiled".into()),
            ));
        }
        let key = package.cache_key(&input.stemcell);
        if let Some((bytes, sha1)) = read_cache(&input.cache_dir, &key) {
            let id = kubosh_base::ids::uuid_v4();
            self.put_blob(&id, bytes).await?;
            return Ok((spec(id, sha1), None));
        }
        let source = kubosh_base::ids::uuid_v4();
        self.put_blob(&source, archive.to_vec()).await?;
        let dependencies: IndexMap<String, PackageSpec> = package
            .dependencies
            .iter()
            .filter_map(|d| done.get(d).map(|s| (d.clone(), s.clone())))
            .collect();
        let compiled = agent
            .compile_package(&CompilePackageArgs {
                blobstore_id: source,
                sha1: package.digest.to_string(),
                name: package.name.clone(),
                version: package.fingerprint.clone(),
                dependencies,
            })
            .await?
            .result;
        // Best effort: a cache that cannot be filled only costs a compilation next time.
        match self.transport.get_blob(&compiled.blobstore_id).await {
            Ok(bytes) => {
                let verified = compiled
                    .sha1
                    .parse::<MultiDigest>()
                    .is_ok_and(|d| d.verify(&bytes).is_ok());
                if verified {
                    write_cache(&input.cache_dir, &key, &bytes, &compiled.sha1);
                }
            }
            Err(e) => {
                tracing::info!(package = %package.name, error = %e, "the agent does not serve compiled packages back; not cached")
            }
        }
        Ok((spec(compiled.blobstore_id, compiled.sha1), None))
    }
}

/// The release of each job of the group, in job order.
fn job_releases<'a>(input: &JobsInput<'a>) -> Result<Vec<&'a Release>, EnvError> {
    input
        .deployment
        .jobs
        .iter()
        .map(|j| {
            input
                .releases
                .iter()
                .find(|r| r.name() == j.release)
                .ok_or_else(|| {
                    EnvError::Render(format!(
                        "Job '{}' refers to release '{}', which is not in releases",
                        j.name, j.release
                    ))
                })
        })
        .collect()
}

fn read_cache(dir: &Path, key: &str) -> Option<(Vec<u8>, String)> {
    let entry: CacheEntry =
        serde_json::from_slice(&std::fs::read(dir.join(format!("{key}.json"))).ok()?).ok()?;
    let bytes = std::fs::read(dir.join(format!("{key}.tgz"))).ok()?;
    let digest: MultiDigest = entry.sha1.parse().ok()?;
    digest.verify(&bytes).ok()?;
    Some((bytes, entry.sha1))
}

fn write_cache(dir: &Path, key: &str, bytes: &[u8], sha1: &str) {
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        // The archive first, its entry last: an entry always has its archive.
        kubosh_engine::state::replace_bytes(dir, &format!("{key}.tgz"), bytes)?;
        let entry = serde_json::to_vec(&CacheEntry { sha1: sha1.into() }).unwrap_or_default();
        kubosh_engine::state::replace_bytes(dir, &format!("{key}.json"), &entry)
    };
    if let Err(e) = write() {
        tracing::warn!(error = %e, "cannot write the compiled-package cache");
    }
}

/// Sleeps the watch time's start, then asks every second until `running` or its end.
async fn wait_running(agent: &AgentClient, d: &EnvDeployment) -> Result<(), EnvError> {
    tokio::time::sleep(Duration::from_millis(d.watch_time.min_ms)).await;
    let attempts = (d.watch_time.max_ms.saturating_sub(d.watch_time.min_ms) / 1000).max(1);
    let mut last = String::new();
    for attempt in 0..attempts {
        let state = agent.get_state(false).await?;
        if state.job_state == JobState::Running {
            return Ok(());
        }
        last = serde_json::to_value(&state.job_state)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        if attempt + 1 < attempts {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    Err(EnvError::NotRunning(last))
}

/// `spec.networks` for templates: the interfaces with their addresses.
fn template_networks(d: &EnvDeployment, ip: Option<&str>) -> IndexMap<String, NetworkSpec> {
    d.networks
        .iter()
        .map(|(name, v)| {
            let text = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
            let list = |k: &str| -> Vec<String> {
                v.get(k)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let spec = NetworkSpec {
                kind: text("type"),
                ip: text("ip").or_else(|| ip.map(String::from)),
                netmask: text("netmask"),
                gateway: text("gateway"),
                default: list("default"),
                dns: list("dns"),
                cloud_properties: v
                    .get("cloud_properties")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
                ..NetworkSpec::default()
            };
            (name.clone(), spec)
        })
        .collect()
}

/// A dynamic network's address, from the agent's applied spec.
fn dynamic_ip(spec: &ApplySpec, d: &EnvDeployment) -> Option<String> {
    let networks = spec.networks.as_ref()?;
    d.networks.keys().find_map(|name| {
        networks
            .get(name)
            .and_then(|n| n.get("ip"))
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty())
            .map(String::from)
    })
}

fn base_spec(d: &EnvDeployment) -> ApplySpec {
    ApplySpec {
        deployment: Some(d.name.clone()),
        name: Some(d.group.clone()),
        index: Some(Some(0)),
        id: Some("0".into()),
        az: Some(Some("unknown".into())),
        networks: Some(d.networks.clone()),
        configuration_hash: Some(CONFIGURATION_HASH.into()),
        ..ApplySpec::default()
    }
}

/// The first apply: networks only, no packages, no jobs.
fn initial_spec(d: &EnvDeployment) -> ApplySpec {
    ApplySpec {
        packages: Some(IndexMap::new()),
        job: Some(Some(JobSpec {
            name: Some(Some(d.group.clone())),
            templates: Some(Some(Vec::new())),
            ..JobSpec::default()
        })),
        rendered_templates_archive: Some(Some(RenderedTemplatesArchive::default())),
        ..base_spec(d)
    }
}

/// The full apply: every package, the jobs, the rendered templates.
fn full_spec(
    input: &JobsInput<'_>,
    d: &EnvDeployment,
    packages: IndexMap<String, PackageSpec>,
    archive: RenderedTemplatesArchive,
) -> ApplySpec {
    let templates = d
        .jobs
        .iter()
        .map(|j| {
            let version = input
                .releases
                .iter()
                .find(|r| r.name() == j.release)
                .and_then(|r| r.job(&j.name))
                .map(|job| job.fingerprint.clone())
                .unwrap_or_default();
            JobTemplateSpec {
                name: j.name.clone(),
                version,
                sha1: Some(String::new()),
                blobstore_id: Some(String::new()),
                ..JobTemplateSpec::default()
            }
        })
        .collect();
    ApplySpec {
        packages: Some(packages),
        job: Some(Some(JobSpec {
            name: Some(Some(d.group.clone())),
            templates: Some(Some(templates)),
            ..JobSpec::default()
        })),
        rendered_templates_archive: Some(Some(archive)),
        ..base_spec(d)
    }
}
