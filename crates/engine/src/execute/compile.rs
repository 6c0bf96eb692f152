//! Steps 6–8 of the seed, carried out: compilation VMs, `compile_package` for every missing
//! package in dependency order (critical path first, work-conserving), and the VMs deleted
//! again — also when compilation fails (`bosh-protocols.md` §4.12).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use indexmap::IndexMap;
use serde_json::Value;

use crate::prepare::{
    CompileInputs, Packages, PlannedCompilation, WorkerIdentity, worker_networks,
};
use crate::progress::StageRun;
use crate::state::{Write, stemcell_key};
use crate::vm::{NewVm, VmRequest};
use crate::{Engine, EngineError, PlanError};
use kubosh_artifacts::blobstore::BlobstoreError;
use kubosh_artifacts::release::{PackageArchive, Release};
use kubosh_core::manifest::{CloudConfig, DeploymentManifest};
use kubosh_core::plan::compile::{self, CompilePlan, CompiledPackage, Provision, ReuseSource};
use kubosh_core::plan::ip::Reservation;
use kubosh_transport::agent::protocol::{CompilePackageArgs, PackageRef};

/// A reusable compilation VM, the stemcell (`name/version`) it runs and its pending
/// intent (settled when the VM is deleted).
type WorkerVm = (String, NewVm, String);

/// What compilation has done so far, as the deploy's other branch sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Compiled {
    /// Compilation's first workers whose VMs are not up yet.
    first_workers_left: usize,
    /// Each task's record once it compiled.
    pub(crate) results: Vec<Option<CompiledPackage>>,
    /// Compilation is over and succeeded.
    succeeded: bool,
}

/// Tells the deploy's other branch what compilation has done ([`CompileWatch`]): its first
/// workers' VMs up (the instances' VMs wait for them: the cloud's pace is first come, first
/// served and compilation is the longer path, and a cloud that cannot make a worker's VM —
/// no capacity, a wrong network or stemcell — is not asked for hundreds more), and each
/// package compiled (a group rolls out once its own packages are). Dropped when
/// compilation ends; it succeeded when everything was [`CompileProgress::done`].
pub(crate) struct CompileProgress {
    tx: tokio::sync::watch::Sender<Compiled>,
    /// Cancelled by the other branch when it failed: no further package starts compiling.
    stop: tokio_util::sync::CancellationToken,
}

/// Waits on [`CompileProgress`], and stops it.
#[derive(Clone)]
pub(crate) struct CompileWatch {
    rx: tokio::sync::watch::Receiver<Compiled>,
    stop: tokio_util::sync::CancellationToken,
}

impl CompileProgress {
    /// For `planned`: as many first workers as start at once (one per slot, at most one
    /// per package that depends on none); none when nothing is compiled.
    pub(crate) fn of(planned: &PlannedCompilation) -> (CompileProgress, CompileWatch) {
        let roots = (planned.plan.tasks.iter())
            .filter(|t| t.depends_on.is_empty())
            .count();
        let (tx, rx) = tokio::sync::watch::channel(Compiled {
            first_workers_left: roots.min(planned.workers.len().max(1)),
            results: vec![None; planned.plan.tasks.len()],
            succeeded: false,
        });
        let stop = tokio_util::sync::CancellationToken::new();
        let watch = CompileWatch {
            rx,
            stop: stop.clone(),
        };
        (CompileProgress { tx, stop }, watch)
    }

    /// Fails once the other branch said to stop (its error is the deploy's).
    fn go_on(&self) -> Result<(), EngineError> {
        if self.stop.is_cancelled() {
            return Err(EngineError::Cancelled { lock_lost: false });
        }
        Ok(())
    }

    fn worker_up(&self) {
        self.tx
            .send_modify(|c| c.first_workers_left = c.first_workers_left.saturating_sub(1));
    }

    fn compiled(&self, task: usize, record: CompiledPackage) {
        self.tx.send_modify(|c| {
            if let Some(slot) = c.results.get_mut(task) {
                *slot = Some(record);
            }
        });
    }

    /// Task `task`'s record, once it compiled.
    fn record(&self, task: usize) -> Option<CompiledPackage> {
        self.tx.borrow().results.get(task).cloned().flatten()
    }

    /// Each task's record so far, in task order.
    fn results(&self) -> Vec<Option<CompiledPackage>> {
        self.tx.borrow().results.clone()
    }

    /// Compilation succeeded: every package is there, nobody is left to wait for.
    fn done(self) {
        self.tx.send_modify(|c| {
            c.first_workers_left = 0;
            c.succeeded = true;
        });
    }
}

impl CompileWatch {
    /// Waits until `ready` holds of what compilation did, or it succeeded; `None` once it
    /// failed (nothing new starts then, whatever it compiled before).
    pub(crate) async fn until(
        &mut self,
        mut ready: impl FnMut(&Compiled) -> bool,
    ) -> Option<Compiled> {
        let seen = (self.rx.wait_for(|c| c.succeeded || ready(c)).await)
            .ok()
            .map(|c| (*c).clone())?;
        // The sender gone without succeeding: compilation failed.
        (seen.succeeded || self.rx.has_changed().is_ok()).then_some(seen)
    }

    /// Waits for the first workers' VMs or the end of compilation: whether the VMs came up,
    /// or compilation succeeded. `false` when compilation failed before (a worker's VM
    /// refused, an address taken meanwhile, a package not found).
    pub(crate) async fn first_workers_up(&mut self) -> bool {
        self.until(|c| c.first_workers_left == 0).await.is_some()
    }

    /// What compilation has done by now, marked seen; `None` once it failed.
    pub(crate) fn now(&mut self) -> Option<Compiled> {
        let now = self.rx.borrow_and_update().clone();
        (now.succeeded || self.rx.has_changed().is_ok()).then_some(now)
    }

    /// Waits for compilation's next news since [`CompileWatch::now`] (or its end).
    pub(crate) async fn changed(&mut self) {
        // An error is compilation over: `now` tells how.
        let _ = self.rx.changed().await;
    }

    /// This branch failed: compilation starts no further package (those compiling finish,
    /// and are kept).
    pub(crate) fn stop_compiling(&self) {
        self.stop.cancel();
    }
}

impl Engine {
    /// Carries out a [`PlannedCompilation`]: stores compiled releases' packages, claims the
    /// workers' addresses, compiles on compilation VMs, records each compiled package (each
    /// durable as its compile ends), and returns every needed package and the records of
    /// those compiled now, telling `progress` as it goes.
    pub(crate) async fn compile(
        &self,
        inputs: CompileInputs<'_>,
        planned: PlannedCompilation,
        stemcell_cids: &BTreeMap<String, String>,
        progress: CompileProgress,
    ) -> Result<(Packages, Vec<CompiledPackage>), EngineError> {
        let CompileInputs {
            manifest,
            cloud,
            releases,
            held,
            calculated,
            ..
        } = inputs;
        let PlannedCompilation {
            plan,
            packages: mut out,
            workers,
        } = planned;
        // Packages of compiled releases go into the blobstore under their own id.
        for reused in &plan.reused {
            if let ReuseSource::CompiledRelease { release } = &reused.source {
                self.store_compiled_release_package(releases, release, &reused.record)
                    .await?;
            }
        }
        let compilation = cloud.compilation.clone();
        let mut workers = workers;
        if !workers.is_empty() {
            let deployment = manifest.name.clone().unwrap_or_default();
            workers = self
                .claim_worker_ips(&deployment, cloud, held, workers)
                .await?;
        }
        let cpi =
            crate::clouds::cpi_of_az(cloud, compilation.as_ref().and_then(|c| c.az.as_deref()));
        let calculated = calculated.get(
            crate::resources::compilation_resources(cloud.compilation.as_ref()).as_ref(),
            cpi.as_deref(),
        );
        let workers = Workers {
            slots: workers,
            cloud_properties: compilation
                .as_ref()
                .map(|c| compilation_cloud_properties(cloud, c, calculated))
                .unwrap_or_else(|| Value::Object(Default::default())),
            cpi,
        };
        if !plan.tasks.is_empty() {
            let place = (manifest, &workers, &progress);
            self.compile_tasks(cloud, &plan, releases, stemcell_cids, place)
                .await?;
        }
        let provided = progress.results();
        out.provide(&plan, &provided);
        let results: Vec<CompiledPackage> = provided.into_iter().flatten().collect();
        out.compiled = results.len();
        progress.done();
        Ok((out, results))
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

    /// Runs the compile tasks on compilation VMs, each record told to `progress` as its
    /// task ends.
    async fn compile_tasks(
        &self,
        cloud: &CloudConfig,
        plan: &CompilePlan,
        releases: &BTreeMap<String, Arc<Release>>,
        stemcell_cids: &BTreeMap<String, String>,
        (manifest, workers_spec, progress): (&DeploymentManifest, &Workers, &CompileProgress),
    ) -> Result<(), EngineError> {
        let worker_slots = &workers_spec.slots;
        let compilation = cloud.compilation.clone().unwrap_or_default();
        // One slot per reserved worker address: a slot's VMs follow one another, so they
        // share its address.
        let workers = worker_slots.len().max(1);
        let reuse = compilation.reuse_compilation_vms.unwrap_or(false);
        let sources = self.prepare_sources(plan, releases).await?;

        let stage = StageRun::new(
            self.events.clone(),
            "Compiling packages",
            vec![],
            plan.tasks.len(),
        );
        // With reuse, one VM per worker slot, kept until the end of the stage.
        let slots: Arc<Mutex<Vec<Option<WorkerVm>>>> = Arc::new(Mutex::new(vec![None; workers]));
        let deployment = manifest.name.clone().unwrap_or_default();
        let tags = manifest.tags.clone().unwrap_or_default();
        let dag: Vec<crate::pool::DagTask> = plan
            .tasks
            .iter()
            .map(|t| crate::pool::DagTask {
                depends_on: t.depends_on.clone(),
                priority: t.priority,
            })
            .collect();
        let outcome = crate::pool::run_dag(&dag, workers, |i: usize, slot: usize| {
            let t = plan.tasks[i].clone();
            let stage = stage.clone();
            let slots = slots.clone();
            let (blob, sha1) = sources[i].clone();
            let compilation = compilation.clone();
            let deployment = deployment.clone();
            let tags = tags.clone();
            let worker = worker_slots
                .get(slot)
                .cloned()
                .unwrap_or_else(|| (WorkerIdentity::default(), Value::Object(Default::default())));
            async move {
                let name = format!("{}/{}", t.package.name, t.package.version);
                stage
                    .task(name, async {
                        self.checkpoint()?;
                        progress.go_on()?;
                        let key = format!("{}/{}", t.stemcell.name, t.stemcell.version);
                        let kept = if reuse {
                            slots.lock().unwrap_or_else(PoisonError::into_inner)[slot].take()
                        } else {
                            None
                        };
                        let metadata =
                            worker_metadata(&tags, &deployment, &worker.0, &t.package.name);
                        let stemcell_cid = workers_spec.stemcell_cid(stemcell_cids, &key);
                        let env = Value::Object(compilation.env.clone().unwrap_or_default());
                        let request =
                            workers_spec.request(&worker, (&key, stemcell_cid), env, metadata);
                        let (vm, intent) = self.worker_vm(&key, kept, &request, progress).await?;
                        let compiled =
                            (self.compile_on(&vm, &t, (&blob, &sha1), plan, progress)).await;
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
                        progress.compiled(i, record);
                        Ok::<(), EngineError>(())
                    })
                    .await
            }
        })
        .await;
        // The workers go, whatever happened.
        let leftovers = std::mem::take(&mut *slots.lock().unwrap_or_else(PoisonError::into_inner));
        for (_, vm, intent) in leftovers.into_iter().flatten() {
            self.delete_unowned_vm(&vm, intent).await?;
        }
        outcome
            .map_err(PlanError::CompileOrder)?
            .into_result()
            .map_err(|(_, e)| e)?;
        Ok(())
    }

    /// The "Preparing package compilation" stage: the tasks' source packages stored.
    async fn prepare_sources(
        &self,
        plan: &CompilePlan,
        releases: &BTreeMap<String, Arc<Release>>,
    ) -> Result<Vec<(String, String)>, EngineError> {
        let preparing = StageRun::new(
            self.events.clone(),
            "Preparing package compilation",
            vec![],
            1,
        );
        let task = preparing.start("Finding packages to compile");
        let sources = self.store_sources(plan, releases).await;
        match &sources {
            Ok(_) => preparing.end(&task, &Ok::<(), EngineError>(())),
            Err(e) => preparing.end(&task, &Err::<(), _>(e)),
        }
        sources
    }

    /// Source packages into the blobstore (content-addressed: a stored one is kept): each
    /// task's blob id and digest.
    async fn store_sources(
        &self,
        plan: &CompilePlan,
        releases: &BTreeMap<String, Arc<Release>>,
    ) -> Result<Vec<(String, String)>, EngineError> {
        let mut sources = Vec::new();
        for t in &plan.tasks {
            let package = releases
                .get(&t.release)
                .and_then(|r| r.package(&t.package.name));
            let Some(package) = package else {
                return Err(PlanError::PackageMissing {
                    package: t.package.name.clone(),
                    release: t.release.clone(),
                }
                .into());
            };
            let id = self.stored_archive(&package.archive).await?;
            sources.push((id, package.digest.to_string()));
        }
        Ok(sources)
    }

    /// A compilation VM for a task on stemcell `key`: the slot's kept worker when it runs
    /// that stemcell (a worker of another stemcell makes room), else a new one made as
    /// `request` says, with its settings sent (deleted again when they cannot be).
    async fn worker_vm(
        &self,
        key: &str,
        kept: Option<WorkerVm>,
        request: &VmRequest,
        progress: &CompileProgress,
    ) -> Result<(NewVm, String), EngineError> {
        match kept {
            Some((k, vm, intent)) if k == key => return Ok((vm, intent)),
            Some((_, other, intent)) => self.delete_unowned_vm(&other, intent).await?,
            None => {}
        }
        let (vm, intent) = self.create_unowned_vm(request).await?;
        progress.worker_up();
        if let Err(e) = self
            .send_vm_settings(&vm.agent_id, &request.display_name, &[])
            .await
        {
            self.delete_unowned_vm(&vm, intent).await?;
            return Err(e);
        }
        Ok((vm, intent))
    }

    /// One `compile_package` call.
    async fn compile_on(
        &self,
        vm: &NewVm,
        t: &compile::CompileTask,
        (blob, sha1): (&str, &str),
        plan: &CompilePlan,
        progress: &CompileProgress,
    ) -> Result<CompiledPackage, EngineError> {
        let mut dependencies: IndexMap<String, PackageRef> = IndexMap::new();
        for d in &t.dependencies {
            let record = match d {
                Provision::Compile(j) => progress.record(*j),
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
            if attempt >= super::addresses::CLAIM_ATTEMPTS {
                return Err(super::addresses::claim_conflict(&claim, first));
            }
            let mut taken = held.to_vec();
            taken.extend(registry.held_elsewhere(deployment).await?);
            let identities: Vec<WorkerIdentity> = workers.into_iter().map(|(w, _)| w).collect();
            let networks = worker_networks(deployment, cloud, &compilation, &taken, &identities)?;
            workers = identities.into_iter().zip(networks).collect();
        }
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
        crate::desired_merge(&mut out, calculated);
    }
    if let Some(t) = compilation
        .vm_type
        .as_ref()
        .and_then(|t| cloud.vm_types.iter().find(|v| &v.name == t))
    {
        crate::desired_merge(&mut out, &t.cloud_properties.clone().unwrap_or_default());
    }
    for name in &compilation.vm_extensions {
        if let Some(e) = cloud.vm_extensions.iter().find(|e| &e.name == name) {
            crate::desired_merge(&mut out, &e.cloud_properties.clone().unwrap_or_default());
        }
    }
    crate::desired_merge(
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
    /// The CPI of the compilation AZ.
    pub cpi: Option<String>,
}

impl Workers {
    /// The CID of stemcell `key` (`name/version`) in the workers' cloud.
    fn stemcell_cid(&self, cids: &BTreeMap<String, String>, key: &str) -> String {
        let key = stemcell_key(key, self.cpi.as_deref());
        cids.get(&key).cloned().unwrap_or_default()
    }

    /// How the VM of `worker` (a slot) is made on `stemcell` (`name/version` and its CID).
    fn request(
        &self,
        (identity, networks): &(WorkerIdentity, Value),
        (stemcell, stemcell_cid): (&str, String),
        env: Value,
        metadata: serde_json::Map<String, Value>,
    ) -> VmRequest {
        VmRequest {
            instance: None,
            display_name: format!("{}/{} (0)", identity.group, identity.uuid),
            stemcell_cid,
            stemcell: stemcell.to_string(),
            cloud_properties: self.cloud_properties.clone(),
            networks: networks.clone(),
            env,
            disk_cids: vec![],
            metadata,
            cpi: self.cpi.clone(),
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
