//! Steps 6–8 of the seed, planned: which packages each job needs on each stemcell, which
//! are reused and which compiled (an unusable release fails here, with the Director's
//! error), and the address each compilation worker will hold (`bosh-protocols.md` §4.12).
//! `execute::compile` carries the plan out.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::state::{DeploymentState, PackageVersion};
use crate::{Engine, EngineError, PlanError};
use kubosh_artifacts::release::{PackageArchive, Release};
use kubosh_core::manifest::{CloudConfig, DeploymentManifest, JobRef};
use kubosh_core::plan::compile::{
    self, CompileInput, CompilePlan, CompiledPackage, JobUse, Provision, ReuseSource, Stemcell,
    StemcellJobs,
};
use kubosh_core::plan::desired::{GroupSpec, StemcellInfo};
use kubosh_core::plan::ip::{self, IpRequest, Reservation};

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
    /// Fills in the package each job gets: the compiled `results` (in task order; those
    /// not compiled yet are left out) or the reused records.
    pub(crate) fn provide(&mut self, plan: &CompilePlan, results: &[Option<CompiledPackage>]) {
        for (used, provision) in &plan.provisions {
            let record = match provision {
                Provision::Compile(i) => results.get(*i).cloned().flatten(),
                Provision::Reuse(i) => plan.reused.get(*i).map(|r| r.record.clone()),
            };
            if let Some(record) = record {
                self.packages.insert(
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
    }

    /// A job's version (fingerprint).
    pub fn job_version(&self, release: &str, job: &str) -> String {
        self.jobs
            .get(&(release.to_string(), job.to_string()))
            .map(|(v, _)| v.clone())
            .unwrap_or_default()
    }

    /// The compiled packages the jobs need on `stemcell`, by name, as the apply spec lists
    /// them.
    pub(crate) fn for_jobs(
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
    pub calculated: &'a crate::resources::CalculatedProperties,
}

/// What compilation will do, decided before the deploy changes anything
/// ([`Engine::plan_compile`]).
pub struct PlannedCompilation {
    /// Reuses, compile tasks and which package each job gets.
    pub(crate) plan: CompilePlan,
    /// The jobs' versions and what is to be compiled; the packages are filled in once
    /// compiled ([`Packages::provide`]).
    pub(crate) packages: Packages,
    /// Each compilation worker's identity and network settings.
    pub(crate) workers: Vec<(WorkerIdentity, Value)>,
}

impl PlannedCompilation {
    /// The packages as they will be once compiled, but for what only compiling tells (the
    /// blob and its digest): what planning compares instances against.
    pub(crate) fn tentative_packages(&self) -> Packages {
        let results: Vec<Option<CompiledPackage>> = (self.plan.tasks.iter())
            .map(|t| Some(t.record("", "")))
            .collect();
        let mut packages = self.packages.clone();
        packages.provide(&self.plan, &results);
        packages
    }
}

impl PlannedCompilation {
    /// What the rollout needs to desire a group before compilation ends
    /// ([`PackageSource`]).
    pub(crate) fn package_source(&self) -> PackageSource {
        PackageSource {
            plan: self.plan.clone(),
            packages: self.packages.clone(),
        }
    }
}

/// The packages as planned and the compile tasks that give them, so a group's packages
/// can be had as soon as its own tasks compiled (issue 29: groups roll out while others'
/// packages still compile).
pub(crate) struct PackageSource {
    plan: CompilePlan,
    packages: Packages,
}

impl PackageSource {
    /// The compile tasks whose packages `jobs` need on `stemcell` (their dependencies come
    /// first: a task starts after them).
    pub(crate) fn tasks_for(&self, stemcell: &StemcellInfo, jobs: &[JobRef]) -> Vec<usize> {
        let on = self::stemcell(stemcell);
        let mut tasks = Vec::new();
        for job in jobs {
            let key = (job.release.clone(), job.name.clone());
            let Some((_, names)) = self.packages.jobs.get(&key) else {
                continue;
            };
            for name in names {
                if let Some(Provision::Compile(i)) = self.plan.provision(&job.release, name, &on) {
                    tasks.push(i);
                }
            }
        }
        tasks
    }

    /// The packages with what has compiled so far (`results`, in task order).
    pub(crate) fn packages(&self, results: &[Option<CompiledPackage>]) -> Packages {
        let mut packages = self.packages.clone();
        packages.provide(&self.plan, results);
        packages
    }
}

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
    pub(crate) fn plan_compile(
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
            for j in crate::templates::group_jobs(manifest, &g.name) {
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
            return Err(PlanError::Compilation(plan.problems).into());
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
                    group: format!("compilation-{}", kubosh_base::ids::uuid_v4()),
                    uuid: kubosh_base::ids::uuid_v4(),
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

    /// Checks, before the deploy changes anything, that every package archive the planned
    /// compilation takes from the blobstore by id (a release by reference) is there: one
    /// line per missing archive.
    pub(crate) async fn check_stored_archives(
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

/// The network settings of each compilation worker (§4.9, §4.12): on a manual network a
/// dynamic reservation from the same allocator instances use, avoiding every address in
/// `held` (and each other's); a dynamic network's settings as the allocator gives them
/// (the IaaS picks the address); on a vip network the bare `type: vip` settings.
/// Exhaustion is the Director's "Failed to reserve IP for ..." error.
pub(crate) fn worker_networks(
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
    let allocation =
        ip::allocate(deployment, cloud, &requests, &[], held).map_err(PlanError::Ip)?;
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
