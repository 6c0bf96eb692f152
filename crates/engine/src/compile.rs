//! Steps 6–8 of the seed: compilation VMs, `compile_package` for every missing package in
//! dependency order (critical path first, work-conserving), and the VMs deleted again —
//! also when compilation fails (`bosh-protocols.md` §4.12).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use indexmap::IndexMap;
use serde_json::Value;

use super::progress::StageRun;
use super::vm::{NewVm, VmRequest};
use super::{Engine, EngineError};
use crate::state::{DeploymentState, PackageVersion, Write};
use kubosh_artifacts::blobstore::BlobstoreError;
use kubosh_artifacts::release::{PackageArchive, Release};
use kubosh_core::manifest::{CloudConfig, DeploymentManifest, JobRef};
use kubosh_core::plan::compile::{
    self, CompileInput, CompilePlan, CompiledPackage, JobUse, Provision, ReuseSource, Stemcell,
    StemcellJobs,
};
use kubosh_core::plan::desired::{GroupSpec, StemcellInfo};
use kubosh_core::plan::ip::{self, IpRequest, Reservation};
use kubosh_transport::agent::protocol::{CompilePackageArgs, PackageRef};

/// The packages of a deploy: every job's version and every needed package compiled.
#[derive(Debug, Clone, Default)]
pub struct Packages {
    /// How many were compiled by this deploy.
    pub compiled: usize,
    /// What is (or would be) compiled: `name/version on stemcell`.
    pub to_compile: Vec<String>,
    /// Job fingerprints by `(release, job)`.
    jobs: BTreeMap<(String, String), (String, Vec<String>)>,
    /// Compiled packages by `(os, stemcell version, release, package)`.
    packages: BTreeMap<(String, String, String, String), CompiledPackage>,
}

impl Packages {
    /// A job's version (fingerprint).
    pub fn job_version(&self, release: &str, job: &str) -> String {
        self.jobs
            .get(&(release.to_string(), job.to_string()))
            .map(|(v, _)| v.clone())
            .unwrap_or_default()
    }

    /// The compiled packages the jobs need on `stemcell`, by name, as the apply spec lists
    /// them.
    pub fn for_jobs(
        &self,
        stemcell: &StemcellInfo,
        jobs: &[JobRef],
    ) -> BTreeMap<String, PackageVersion> {
        let mut out = BTreeMap::new();
        for job in jobs {
            let Some((_, packages)) = self.jobs.get(&(job.release.clone(), job.name.clone()))
            else {
                continue;
            };
            for name in packages {
                let key = (
                    stemcell.os.clone(),
                    stemcell.version.clone(),
                    job.release.clone(),
                    name.clone(),
                );
                if let Some(p) = self.packages.get(&key) {
                    out.insert(
                        name.clone(),
                        PackageVersion {
                            version: p.agent_version(),
                            sha1: p.sha1.clone(),
                            blobstore_id: p.blob_id.clone(),
                        },
                    );
                }
            }
        }
        out
    }
}

/// What compilation reads.
#[derive(Clone, Copy)]
pub struct CompileInputs<'a> {
    /// The manifest.
    pub manifest: &'a DeploymentManifest,
    /// The cloud config (`compilation`).
    pub cloud: &'a CloudConfig,
    /// The resolved instance groups.
    pub groups: &'a [GroupSpec],
    /// Releases by name.
    pub releases: &'a BTreeMap<String, Arc<Release>>,
    /// Every address instances hold during this deploy (kept, new and about to be
    /// released): compilation workers take none of them.
    pub held: &'a [Reservation],
    /// What other deployments hold: workers take none of it either.
    pub elsewhere: &'a [Reservation],
    /// Cloud properties of `vm_resources`, the workers' included.
    pub calculated: &'a super::resources::CalculatedProperties,
    /// Plan only: compile nothing, store nothing.
    pub dry_run: bool,
}

/// What compilation will do, decided before the deploy changes anything
/// ([`Engine::plan_compile`]).
pub struct PlannedCompilation {
    /// Reuses, compile tasks and which package each job gets.
    plan: CompilePlan,
    /// The jobs' packages and what is to be compiled, filled in by [`Engine::compile`].
    packages: Packages,
    /// Each compilation worker's identity and network settings.
    workers: Vec<(WorkerIdentity, Value)>,
}

/// A reusable compilation VM, the stemcell (`name/version`) it runs and its pending
/// intent (settled when the VM is deleted).
type WorkerVm = (String, NewVm, String);

/// The stemcell as compilation sees it.
fn stemcell(info: &StemcellInfo) -> Stemcell {
    Stemcell {
        name: info.name.clone(),
        os: info.os.clone(),
        version: info.version.clone(),
        sha1: String::new(),
    }
}

impl Engine {
    /// Decides what compilation will do, changing nothing: which packages are reused and
    /// which compiled (an unusable release fails here, with the Director's error), and the
    /// address each compilation worker will hold (a network too small for the workers fails
    /// here too). Runs before the deploy's first change.
    pub fn plan_compile(
        &self,
        inputs: &CompileInputs<'_>,
        state: &DeploymentState,
    ) -> Result<PlannedCompilation, EngineError> {
        let CompileInputs {
            manifest,
            cloud,
            groups,
            releases,
            held,
            elsewhere,
            ..
        } = *inputs;
        let mut by_stemcell: BTreeMap<String, StemcellJobs> = BTreeMap::new();
        for g in groups.iter().filter(|g| g.instances > 0) {
            let entry = by_stemcell
                .entry(g.stemcell.key())
                .or_insert_with(|| StemcellJobs {
                    stemcell: stemcell(&g.stemcell),
                    jobs: Vec::new(),
                });
            for j in super::templates::group_jobs(manifest, &g.name) {
                entry.jobs.push(JobUse {
                    release: j.release,
                    job: j.name,
                });
            }
        }
        let stemcells: Vec<StemcellJobs> = by_stemcell.into_values().collect();
        let compiled: Vec<CompiledPackage> = state.compiled_packages.values().cloned().collect();
        let release_list: Vec<&Release> = releases.values().map(|r| r.as_ref()).collect();
        let plan = compile::plan_compilation(
            CompileInput {
                releases: &release_list,
                stemcells: &stemcells,
                compiled: &compiled,
            },
            |_| 1,
        );
        if !plan.problems.is_empty() {
            let message = compile::not_compiled_message(&plan.problems);
            let mut lines: Vec<String> = plan
                .problems
                .iter()
                .filter(|p| !matches!(p, compile::CompileProblem::NotCompiled { .. }))
                .map(ToString::to_string)
                .collect();
            lines.extend(message);
            return Err(EngineError::Plan(lines));
        }

        let mut packages = Packages::default();
        for r in releases.values() {
            for j in &r.jobs {
                packages.jobs.insert(
                    (r.name().to_string(), j.name.clone()),
                    (j.fingerprint.clone(), j.spec.packages.clone()),
                );
            }
        }
        packages.to_compile = plan
            .tasks
            .iter()
            .map(|t| {
                format!(
                    "{}/{} on {}",
                    t.package.name,
                    t.package.version,
                    t.stemcell.desc()
                )
            })
            .collect();
        // Every worker's address is chosen before the first VM exists, so a network too
        // small for the workers fails here with the Director's error and leaves nothing behind.
        let workers = if plan.tasks.is_empty() {
            Vec::new()
        } else {
            let compilation = cloud.compilation.clone().unwrap_or_default();
            let count = compilation
                .workers
                .unwrap_or(1)
                .clamp(1, u64::try_from(plan.tasks.len()).unwrap_or(u64::MAX));
            let identities = (0..count)
                .map(|_| WorkerIdentity {
                    group: format!("compilation-{}", kubosh_core::ids::uuid_v4()),
                    uuid: kubosh_core::ids::uuid_v4(),
                })
                .collect::<Vec<_>>();
            let deployment = manifest.name.clone().unwrap_or_default();
            let taken: Vec<Reservation> = held.iter().chain(elsewhere).cloned().collect();
            let networks = worker_networks(&deployment, cloud, &compilation, &taken, &identities)?;
            identities.into_iter().zip(networks).collect()
        };
        Ok(PlannedCompilation {
            plan,
            packages,
            workers,
        })
    }

    /// Carries out a [`PlannedCompilation`]: stores compiled releases' packages, claims the
    /// workers' addresses, compiles on compilation VMs, records each compiled package, and
    /// returns every needed package.
    pub async fn compile(
        &self,
        inputs: CompileInputs<'_>,
        planned: PlannedCompilation,
        stemcell_cids: &BTreeMap<String, String>,
        state: &mut DeploymentState,
    ) -> Result<Packages, EngineError> {
        let CompileInputs {
            manifest,
            cloud,
            releases,
            held,
            calculated,
            dry_run,
            ..
        } = inputs;
        let PlannedCompilation {
            plan,
            packages: mut out,
            workers,
        } = planned;
        // Packages of compiled releases go into the blobstore under their own id.
        for reused in plan.reused.iter().filter(|_| !dry_run) {
            if let ReuseSource::CompiledRelease { release } = &reused.source {
                self.store_compiled_release_package(releases, release, &reused.record)
                    .await?;
            }
        }
        let compilation = cloud.compilation.clone();
        let mut workers = workers;
        if !dry_run && !workers.is_empty() {
            let deployment = manifest.name.clone().unwrap_or_default();
            workers = self
                .claim_worker_ips(&deployment, cloud, held, workers)
                .await?;
        }
        let calculated = calculated
            .get(super::resources::compilation_resources(cloud.compilation.as_ref()).as_ref());
        let workers = Workers {
            slots: workers,
            cloud_properties: compilation
                .as_ref()
                .map(|c| compilation_cloud_properties(cloud, c, calculated))
                .unwrap_or_else(|| Value::Object(Default::default())),
        };
        let results = if dry_run {
            // What the records will be, but for the blob the compilation makes.
            plan.tasks.iter().map(|t| t.record("", "")).collect()
        } else if plan.tasks.is_empty() {
            Vec::new()
        } else {
            self.compile_tasks(cloud, &plan, releases, stemcell_cids, manifest, &workers)
                .await?
        };
        out.compiled = if dry_run { 0 } else { results.len() };
        // Each was made durable as its task ended (`compile_tasks`).
        for record in results.iter().filter(|_| !dry_run) {
            state.apply(&Write::CompiledPackage(record.clone()));
        }
        for (used, provision) in &plan.provisions {
            let record = match provision {
                Provision::Compile(i) => results.get(*i).cloned(),
                Provision::Reuse(i) => plan.reused.get(*i).map(|r| r.record.clone()),
            };
            if let Some(record) = record {
                out.packages.insert(
                    (
                        used.stemcell_os.clone(),
                        used.stemcell_version.clone(),
                        used.release.clone(),
                        used.package.clone(),
                    ),
                    record,
                );
            }
        }
        Ok(out)
    }

    async fn store_compiled_release_package(
        &self,
        releases: &BTreeMap<String, Arc<Release>>,
        release: &str,
        record: &CompiledPackage,
    ) -> Result<(), EngineError> {
        let exists = self
            .blobstore
            .exists(&record.blob_id)
            .await
            .map_err(EngineError::Blobstore)?;
        if exists {
            return Ok(());
        }
        let compiled = releases.get(release).and_then(|r| {
            r.compiled_packages.iter().find(|cp| {
                cp.name == record.name
                    && cp.version == record.version
                    && cp.stemcell.os == record.stemcell_os
            })
        });
        let Some(compiled) = compiled else {
            return Err(BlobstoreError::NotFound(record.blob_id.clone()).into());
        };
        self.stored_archive(&compiled.archive).await?;
        Ok(())
    }

    /// Checks, before the deploy changes anything, that every package archive the planned
    /// compilation takes from the blobstore by id (a release by reference) is there: one
    /// line per missing archive.
    pub async fn check_stored_archives(
        &self,
        planned: &PlannedCompilation,
        releases: &BTreeMap<String, Arc<Release>>,
    ) -> Result<(), EngineError> {
        let mut needed: Vec<(&str, &str, &str)> = Vec::new();
        for t in &planned.plan.tasks {
            let package = releases
                .get(&t.release)
                .and_then(|r| r.package(&t.package.name));
            if let Some(PackageArchive::Stored(id)) = package.map(|p| &p.archive) {
                needed.push((&t.release, &t.package.name, id));
            }
        }
        for reused in &planned.plan.reused {
            if let ReuseSource::CompiledRelease { release } = &reused.source {
                let compiled = releases.get(release).and_then(|r| {
                    (r.compiled_packages.iter()).find(|cp| cp.name == reused.record.name)
                });
                if let Some(PackageArchive::Stored(id)) = compiled.map(|cp| &cp.archive) {
                    needed.push((release, &reused.record.name, id));
                }
            }
        }
        let mut missing = Vec::new();
        for (release, package, id) in needed {
            if !self.blobstore.exists(id).await? {
                missing.push(format!(
                    "Package '{package}' of release '{release}' is missing from the blobstore (blob {id})"
                ));
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(EngineError::MissingArchives(missing))
        }
    }

    /// The blobstore id of a package archive: stored now when its bytes are here, checked
    /// when only its id is (a release by reference).
    async fn stored_archive(&self, archive: &PackageArchive) -> Result<String, EngineError> {
        match archive {
            PackageArchive::Bytes(bytes) => {
                let stored = (self.blobstore)
                    .put_bytes(bytes::Bytes::from(bytes.clone()))
                    .await?;
                Ok(stored.id)
            }
            PackageArchive::Stored(id) if self.blobstore.exists(id).await? => Ok(id.clone()),
            PackageArchive::Stored(id) => Err(BlobstoreError::NotFound(id.clone()).into()),
        }
    }

    /// Runs the compile tasks on compilation VMs; the records in task order.
    async fn compile_tasks(
        &self,
        cloud: &CloudConfig,
        plan: &CompilePlan,
        releases: &BTreeMap<String, Arc<Release>>,
        stemcell_cids: &BTreeMap<String, String>,
        manifest: &DeploymentManifest,
        workers_spec: &Workers,
    ) -> Result<Vec<CompiledPackage>, EngineError> {
        let worker_slots = &workers_spec.slots;
        let compilation = cloud.compilation.clone().unwrap_or_default();
        // One slot per reserved worker address: a slot's VMs follow one another, so they
        // share its address.
        let workers = worker_slots.len().max(1);
        let reuse = compilation.reuse_compilation_vms.unwrap_or(false);
        let preparing = StageRun::new(
            self.events.clone(),
            "Preparing package compilation",
            vec![],
            1,
        );
        let task = preparing.start("Finding packages to compile");
        // Source packages into the blobstore (content-addressed: a stored one is kept).
        let mut sources: Vec<(String, String)> = Vec::new();
        for t in &plan.tasks {
            let package = releases
                .get(&t.release)
                .and_then(|r| r.package(&t.package.name));
            let Some(package) = package else {
                let e = EngineError::Plan(vec![format!(
                    "Package '{}' is missing from release '{}'",
                    t.package.name, t.release
                )]);
                preparing.end(&task, &Err::<(), _>(&e));
                return Err(e);
            };
            let id = self.stored_archive(&package.archive).await?;
            sources.push((id, package.digest.to_string()));
        }
        preparing.end(&task, &Ok::<(), EngineError>(()));

        let stage = StageRun::new(
            self.events.clone(),
            "Compiling packages",
            vec![],
            plan.tasks.len(),
        );
        let results: Arc<Mutex<Vec<Option<CompiledPackage>>>> =
            Arc::new(Mutex::new(vec![None; plan.tasks.len()]));
        // With reuse, one VM per worker slot, kept until the end of the stage.
        let slots: Arc<Mutex<Vec<Option<WorkerVm>>>> = Arc::new(Mutex::new(vec![None; workers]));
        let deployment = manifest.name.clone().unwrap_or_default();
        let tags = manifest.tags.clone().unwrap_or_default();
        let dag: Vec<super::pool::DagTask> = plan
            .tasks
            .iter()
            .map(|t| super::pool::DagTask {
                depends_on: t.depends_on.clone(),
                priority: t.priority,
            })
            .collect();
        let outcome = super::pool::run_dag(&dag, workers, |i: usize, slot: usize| {
            let t = plan.tasks[i].clone();
            let stage = stage.clone();
            let results = results.clone();
            let slots = slots.clone();
            let (blob, sha1) = sources[i].clone();
            let compilation = compilation.clone();
            let deployment = deployment.clone();
            let tags = tags.clone();
            let (identity, networks) = worker_slots
                .get(slot)
                .cloned()
                .unwrap_or_else(|| (WorkerIdentity::default(), Value::Object(Default::default())));
            async move {
                let name = format!("{}/{}", t.package.name, t.package.version);
                stage
                    .task(name, async {
                        self.checkpoint()?;
                        let key = format!("{}/{}", t.stemcell.name, t.stemcell.version);
                        let kept = if reuse {
                            slots.lock().unwrap_or_else(PoisonError::into_inner)[slot].take()
                        } else {
                            None
                        };
                        let reused_vm = match kept {
                            Some((k, vm, intent)) if k == key => Some((vm, intent)),
                            Some((_, other, intent)) => {
                                // A worker of another stemcell makes room.
                                self.delete_unowned_vm(&other, intent).await?;
                                None
                            }
                            None => None,
                        };
                        let (vm, intent) = match reused_vm {
                            Some(worker) => worker,
                            None => {
                                let request = VmRequest {
                                    instance: None,
                                    display_name: format!(
                                        "{}/{} (0)",
                                        identity.group, identity.uuid
                                    ),
                                    stemcell_cid: stemcell_cids
                                        .get(&key)
                                        .cloned()
                                        .unwrap_or_default(),
                                    stemcell: key.clone(),
                                    cloud_properties: workers_spec.cloud_properties.clone(),
                                    networks: networks.clone(),
                                    env: Value::Object(compilation.env.clone().unwrap_or_default()),
                                    disk_cids: vec![],
                                    metadata: worker_metadata(
                                        &tags,
                                        &deployment,
                                        &identity,
                                        &t.package.name,
                                    ),
                                };
                                let (vm, intent) = self.create_unowned_vm(&request).await?;
                                if let Err(e) = self
                                    .send_vm_settings(&vm.agent_id, &request.display_name, &[])
                                    .await
                                {
                                    self.delete_unowned_vm(&vm, intent).await?;
                                    return Err(e);
                                }
                                (vm, intent)
                            }
                        };
                        let compiled = self.compile_on(&vm, &t, &blob, &sha1, plan, &results).await;
                        if reuse && compiled.is_ok() {
                            slots.lock().unwrap_or_else(PoisonError::into_inner)[slot] =
                                Some((key, vm, intent));
                        } else {
                            self.delete_unowned_vm(&vm, intent).await?;
                        }
                        let record = compiled?;
                        // Recorded at once: a compile that succeeded is kept (its blob
                        // referenced, reused next time) whatever happens to the others.
                        self.write(Write::CompiledPackage(record.clone())).await?;
                        results.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(record);
                        Ok::<(), EngineError>(())
                    })
                    .await
            }
        })
        .await;
        // The workers go, whatever happened.
        let leftovers: Vec<WorkerVm> = slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .flatten()
            .collect();
        for (_, vm, intent) in leftovers {
            self.delete_unowned_vm(&vm, intent).await?;
        }
        outcome
            .map_err(|e| EngineError::Plan(vec![e.to_string()]))?
            .into_result()
            .map_err(|(_, e)| e)?;
        let results = results
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Ok(results.into_iter().flatten().collect())
    }

    /// One `compile_package` call.
    async fn compile_on(
        &self,
        vm: &NewVm,
        t: &compile::CompileTask,
        blob: &str,
        sha1: &str,
        plan: &CompilePlan,
        results: &Mutex<Vec<Option<CompiledPackage>>>,
    ) -> Result<CompiledPackage, EngineError> {
        let mut dependencies: IndexMap<String, PackageRef> = IndexMap::new();
        for d in &t.dependencies {
            let record = match d {
                Provision::Compile(j) => results
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(*j)
                    .cloned()
                    .flatten(),
                Provision::Reuse(j) => plan.reused.get(*j).map(|r| r.record.clone()),
            };
            if let Some(r) = record {
                dependencies.insert(
                    r.name.clone(),
                    PackageRef {
                        name: r.name.clone(),
                        version: r.agent_version(),
                        sha1: r.sha1.clone(),
                        blobstore_id: r.blob_id.clone(),
                        ..PackageRef::default()
                    },
                );
            }
        }
        let agent = self.agent(&vm.agent_id, &format!("compilation/{}", t.package.name));
        let result = agent
            .compile_package(&CompilePackageArgs {
                blobstore_id: blob.to_string(),
                sha1: sha1.to_string(),
                name: t.package.name.clone(),
                version: format!("{}.{}", t.package.version, t.build),
                dependencies,
            })
            .await
            .map_err(EngineError::Agent)?;
        Ok(t.record(&result.result.blobstore_id, &result.result.sha1))
    }
}

/// The workers' cloud properties: the AZ's, then the calculated `vm_resources` ones, then
/// the VM type's and extensions' over them, then the compilation block's own.
fn compilation_cloud_properties(
    cloud: &CloudConfig,
    compilation: &kubosh_core::manifest::Compilation,
    calculated: Option<&serde_json::Map<String, Value>>,
) -> Value {
    let mut out = compilation
        .az
        .as_ref()
        .and_then(|az| cloud.azs.iter().find(|a| &a.name == az))
        .and_then(|a| a.cloud_properties.clone())
        .unwrap_or_default();
    if let Some(calculated) = calculated {
        super::desired_merge(&mut out, calculated);
    }
    if let Some(t) = compilation
        .vm_type
        .as_ref()
        .and_then(|t| cloud.vm_types.iter().find(|v| &v.name == t))
    {
        super::desired_merge(&mut out, &t.cloud_properties.clone().unwrap_or_default());
    }
    for name in &compilation.vm_extensions {
        if let Some(e) = cloud.vm_extensions.iter().find(|e| &e.name == name) {
            super::desired_merge(&mut out, &e.cloud_properties.clone().unwrap_or_default());
        }
    }
    super::desired_merge(
        &mut out,
        &compilation.cloud_properties.clone().unwrap_or_default(),
    );
    Value::Object(out)
}

/// A worker's VM metadata: the manifest's tags, then the director's keys as for an
/// instance (the worker's group, index 0), and the package it compiles first.
fn worker_metadata(
    tags: &serde_json::Map<String, Value>,
    deployment: &str,
    worker: &WorkerIdentity,
    package: &str,
) -> serde_json::Map<String, Value> {
    let mut out = tags.clone();
    for (k, v) in [
        ("director", "kubosh".to_string()),
        ("deployment", deployment.to_string()),
        ("id", worker.uuid.clone()),
        ("job", worker.group.clone()),
        ("index", "0".to_string()),
        ("name", format!("{}/{}", worker.group, worker.uuid)),
        ("compiling", package.to_string()),
    ] {
        out.insert(k.to_string(), Value::String(v));
    }
    out
}

/// The compilation workers of one deploy: one slot per reserved address, and their cloud
/// properties.
pub struct Workers {
    /// Each slot's identity and network settings.
    pub slots: Vec<(WorkerIdentity, Value)>,
    /// Merged cloud properties.
    pub cloud_properties: Value,
}

/// Who a compilation worker is, as the Director names it: a group `compilation-<uuid>` of
/// one instance (index 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerIdentity {
    /// `compilation-<uuid>`.
    pub group: String,
    /// The worker instance's uuid.
    pub uuid: String,
}

impl Engine {
    /// Claims the workers' addresses in the IP registry, with the deployment's own (which
    /// it keeps while the deploy runs); they go back when the deploy ends. An address
    /// another deployment claimed since it was planned is replaced by one free now (a few
    /// times); the workers as claimed.
    async fn claim_worker_ips(
        &self,
        deployment: &str,
        cloud: &CloudConfig,
        held: &[Reservation],
        mut workers: Vec<(WorkerIdentity, Value)>,
    ) -> Result<Vec<(WorkerIdentity, Value)>, EngineError> {
        let Some(registry) = &self.config.ip_registry else {
            return Ok(workers);
        };
        let compilation = cloud.compilation.clone().unwrap_or_default();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let claim = worker_claim(deployment, held, &workers);
            let conflicts = registry.claim(deployment, claim.clone()).await?;
            let Some(first) = conflicts.first() else {
                return Ok(workers);
            };
            if attempt >= super::network::CLAIM_ATTEMPTS {
                return Err(super::network::claim_conflict(&claim, first));
            }
            let mut taken = held.to_vec();
            taken.extend(registry.held_elsewhere(deployment).await?);
            let identities: Vec<WorkerIdentity> = workers.into_iter().map(|(w, _)| w).collect();
            let networks = worker_networks(deployment, cloud, &compilation, &taken, &identities)?;
            workers = identities.into_iter().zip(networks).collect();
        }
    }
}

/// What a deploy claims while its workers exist: its own addresses and the workers'.
fn worker_claim(
    deployment: &str,
    held: &[Reservation],
    workers: &[(WorkerIdentity, Value)],
) -> Vec<Reservation> {
    let mut claim = held.to_vec();
    for (worker, settings) in workers {
        for (network, s) in settings.as_object().into_iter().flatten() {
            let Some(ip) = s.get("ip").and_then(Value::as_str) else {
                continue;
            };
            let Ok(ip) = ip.parse::<std::net::IpAddr>() else {
                continue;
            };
            claim.push(Reservation {
                ip,
                prefix: if ip.is_ipv4() { 32 } else { 128 },
                network: network.clone(),
                group: worker.group.clone(),
                instance_id: worker.uuid.clone(),
                deployment: deployment.to_string(),
                is_static: false,
            });
        }
    }
    claim
}

/// The network settings of each compilation worker (§4.9, §4.12): on a manual network a
/// dynamic reservation from the same allocator instances use, avoiding every address in
/// `held` (and each other's); a dynamic network's settings as the allocator gives them
/// (the IaaS picks the address); on a vip network the bare `type: vip` settings.
/// Exhaustion is the Director's "Failed to reserve IP for ..." error.
pub fn worker_networks(
    deployment: &str,
    cloud: &CloudConfig,
    compilation: &kubosh_core::manifest::Compilation,
    held: &[Reservation],
    workers: &[WorkerIdentity],
) -> Result<Vec<Value>, EngineError> {
    let name = compilation.network.clone().unwrap_or_default();
    let kind = cloud
        .networks
        .iter()
        .find(|n| n.name == name)
        .map(|n| n.network_type());
    let one = |settings: Value| {
        let mut out = serde_json::Map::new();
        out.insert(name.clone(), settings);
        Value::Object(out)
    };
    if kind == Some(kubosh_core::manifest::NetworkType::Vip) {
        let settings = serde_json::json!({
            "type": "vip", "default": ["dns", "gateway"], "cloud_properties": {},
        });
        return Ok(workers.iter().map(|_| one(settings.clone())).collect());
    }
    let requests: Vec<IpRequest> = workers
        .iter()
        .map(|w| IpRequest {
            group: w.group.clone(),
            index: 0,
            instance_id: w.uuid.clone(),
            az: compilation.az.clone(),
            network: name.clone(),
            static_ip: None,
            // A worker's only network is its default for everything that needs one.
            default_for: vec!["dns".into(), "gateway".into()],
            nic_group: None,
        })
        .collect();
    let allocation = ip::allocate(deployment, cloud, &requests, &[], held)
        .map_err(|e| EngineError::Plan(e.iter().map(ToString::to_string).collect()))?;
    Ok(allocation
        .assigned
        .iter()
        .map(|a| one(a.settings.to_json()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cloud(reserved: &str) -> CloudConfig {
        serde_json::from_value(json!({
            "azs": [{"name": "z1"}],
            "networks": [
                {"name": "private", "type": "manual", "subnets": [{
                    "range": "10.0.0.0/24", "gateway": "10.0.0.1", "az": "z1",
                    "dns": ["8.8.8.8"], "reserved": [reserved], "static": ["10.0.0.50"],
                    "cloud_properties": {"subnet": "a"},
                }]},
                {"name": "dyn", "type": "dynamic", "subnets": [{"az": "z1",
                    "cloud_properties": {"net": "d"}}]},
            ],
            "compilation": {"workers": 2, "network": "private", "az": "z1"},
        }))
        .unwrap()
    }

    fn held(ip: &str, is_static: bool) -> Reservation {
        Reservation {
            ip: ip.parse().unwrap(),
            prefix: 32,
            network: "private".into(),
            group: "web".into(),
            instance_id: format!("uuid-{ip}"),
            deployment: "d".into(),
            is_static,
        }
    }

    fn workers(n: usize) -> Vec<WorkerIdentity> {
        (0..n)
            .map(|i| WorkerIdentity {
                group: format!("compilation-{i}"),
                uuid: format!("w{i}"),
            })
            .collect()
    }

    #[test]
    fn workers_get_distinct_free_addresses_of_the_compilation_subnet() {
        let cloud = cloud("10.0.0.2 - 10.0.0.9");
        let compilation = cloud.compilation.clone().unwrap();
        let instances = [held("10.0.0.10", false), held("10.0.0.12", false)];
        let nets = worker_networks("d", &cloud, &compilation, &instances, &workers(2)).unwrap();
        let ips: Vec<&str> = nets
            .iter()
            .map(|n| n["private"]["ip"].as_str().unwrap())
            .collect();
        assert_eq!(ips, ["10.0.0.11", "10.0.0.13"]);
        // The Director's manual settings, in its key order.
        assert_eq!(
            serde_json::to_string(&nets[0]["private"]).unwrap(),
            r#"{"type":"manual","ip":"10.0.0.11","prefix":"32","netmask":"255.255.255.0","cloud_properties":{"subnet":"a"},"default":["dns","gateway"],"dns":["8.8.8.8"],"gateway":"10.0.0.1"}"#
        );
    }

    #[test]
    fn too_few_addresses_fail_with_the_directors_error() {
        // .2-.48 reserved, .50 static: .49 and .51-.254 are free; hold all but .49.
        let cloud = cloud("10.0.0.2 - 10.0.0.48");
        let mut compilation = cloud.compilation.clone().unwrap();
        compilation.workers = Some(2);
        let mut instances: Vec<Reservation> = (51..=254)
            .map(|h| held(&format!("10.0.0.{h}"), false))
            .collect();
        instances.push(held("10.0.0.50", true));
        let err = worker_networks("d", &cloud, &compilation, &instances, &workers(2)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Failed to reserve IP for 'compilation-1/w1 (0)' for manual network 'private': no more available"
        );
        let one = worker_networks("d", &cloud, &compilation, &instances, &workers(1)).unwrap();
        assert_eq!(one[0]["private"]["ip"], "10.0.0.49");
    }

    #[test]
    fn a_dynamic_compilation_network_stays_dynamic() {
        let cloud = cloud("10.0.0.2 - 10.0.0.9");
        let mut compilation = cloud.compilation.clone().unwrap();
        compilation.network = Some("dyn".into());
        let nets = worker_networks("d", &cloud, &compilation, &[], &workers(2)).unwrap();
        for n in &nets {
            assert_eq!(n["dyn"]["type"], "dynamic");
            assert_eq!(n["dyn"]["cloud_properties"], json!({"net": "d"}));
            assert!(n["dyn"].get("ip").is_none());
        }
    }
}
