//! What must be compiled before a deploy, and what can be reused (`bosh-protocols.md` §4.12;
//! the Director's `package_compile_stage.rb`, `compiled_package_requirement_generator.rb`,
//! `compiled_package_finder.rb`, `package_validator.rb`, `key_generator.rb`).
//!
//! For every stemcell, the packages of the jobs that run on it, and their dependencies, are
//! looked up depth-first. A package is *reused* when a compiled record matches exactly
//! (package, stemcell OS and version, [`dependency_key`]); a package without source (from a
//! compiled release) may also use the newest record for a stemcell of the same major
//! version, as the Director allows. Otherwise a source package becomes a [`CompileTask`];
//! a package with neither is a [`CompileProblem::NotCompiled`], reported in the Director's
//! words by [`not_compiled_message`].
//!
//! Two deliberate differences from the Director, both saving work and neither changing a
//! result: the dependencies of a reused package are not visited (the Director compiles them
//! too, though no instance installs them unless a job lists them), and identical packages
//! of different releases (same name, version, fingerprint and dependency key) are compiled
//! once.
//!
//! Pure: no I/O. Compiled packages of compiled releases become records here; their blob id is
//! the content address the blobstore gives them (their sha256).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Value, json};

use crate::plan::bound::remaining_chains;
use crate::release::{GraphError, Release, graph};
use kubosh_base::digest::{Algorithm, sha1_hex};

pub use crate::state::CompiledPackage;

/// A stemcell that instance groups use.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stemcell {
    /// Full name (`bosh-warden-boshlite-ubuntu-jammy-go_agent`), for messages.
    pub name: String,
    /// Operating system.
    pub os: String,
    /// Version.
    pub version: String,
    /// sha1 of the stemcell image, for [`CompileTask::cache_key`].
    pub sha1: String,
}

impl Stemcell {
    /// `<name>/<version>`, as the Director names a stemcell in messages.
    pub fn desc(&self) -> String {
        format!("{}/{}", self.name, self.version)
    }
}

/// A release job that runs on a stemcell.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobUse {
    /// Release name.
    pub release: String,
    /// Job name.
    pub job: String,
}

/// A stemcell and the jobs instance groups run on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StemcellJobs {
    /// The stemcell.
    pub stemcell: Stemcell,
    /// The jobs, in the order to look at them (duplicates are ignored).
    pub jobs: Vec<JobUse>,
}

/// What [`plan_compilation`] needs.
#[derive(Debug, Clone, Copy)]
pub struct CompileInput<'a> {
    /// The deployment's releases, one version per name.
    pub releases: &'a [&'a Release],
    /// Each stemcell with the jobs that run on it.
    pub stemcells: &'a [StemcellJobs],
    /// Packages already compiled (the compiled package store).
    pub compiled: &'a [CompiledPackage],
}

/// A package, as compilation identifies it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PackageId {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Fingerprint.
    pub fingerprint: String,
}

/// How a needed package is had: compiled by a task, or reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Provision {
    /// Compiled by [`CompilePlan::tasks`]`[i]`.
    Compile(usize),
    /// Taken from [`CompilePlan::reused`]`[i]`.
    Reuse(usize),
}

/// One package to compile for one stemcell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileTask {
    /// The release whose source package is compiled (the first that needs it).
    pub release: String,
    /// The package.
    pub package: PackageId,
    /// The source tarball's digest as `release.MF` lists it.
    pub source_sha1: String,
    /// The stemcell to compile on.
    pub stemcell: Stemcell,
    /// The Director's dependency key.
    pub dependency_key: String,
    /// The Director's cache key: sha1 of the package fingerprint, the stemcell sha1 and the
    /// fingerprints of all transitive dependencies (by name).
    pub cache_key: String,
    /// The build number the result gets (one more than any record of this package and
    /// stemcell).
    pub build: u64,
    /// Direct dependencies in name order: what `compile_package` gets as its dependency map.
    pub dependencies: Vec<Provision>,
    /// Indexes of the tasks that must finish first (the [`Provision::Compile`] ones).
    pub depends_on: Vec<usize>,
    /// The longest chain of estimated durations from this task to the end of the graph,
    /// itself included: run the highest first.
    pub priority: u64,
}

impl CompileTask {
    /// The record of this task's result, compiled to blob `blob_id` with digest `sha1`.
    pub fn record(&self, blob_id: &str, sha1: &str) -> CompiledPackage {
        CompiledPackage {
            name: self.package.name.clone(),
            version: self.package.version.clone(),
            fingerprint: self.package.fingerprint.clone(),
            stemcell_os: self.stemcell.os.clone(),
            stemcell_version: self.stemcell.version.clone(),
            dependency_key: self.dependency_key.clone(),
            build: self.build,
            blob_id: blob_id.to_string(),
            sha1: sha1.to_string(),
        }
    }
}

/// Where a reused package comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReuseSource {
    /// The compiled package store ([`CompileInput::compiled`]).
    Store,
    /// A compiled release's compiled packages.
    CompiledRelease {
        /// The release name.
        release: String,
    },
}

/// A package needed on a stemcell and already compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reused {
    /// The stemcell it is needed on (the record may be for another minor version).
    pub stemcell: Stemcell,
    /// The compiled package: blob id and digest for the apply spec.
    pub record: CompiledPackage,
    /// Where the record comes from.
    pub source: ReuseSource,
}

/// A release package needed on a stemcell.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PackageUse {
    /// Release name.
    pub release: String,
    /// Package name.
    pub package: String,
    /// Stemcell OS.
    pub stemcell_os: String,
    /// Stemcell version.
    pub stemcell_version: String,
}

/// Why a deploy cannot get every package it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompileProblem {
    /// A job names a release the deployment does not have.
    UnknownRelease {
        /// Release name.
        release: String,
    },
    /// A job is not in its release.
    UnknownJob {
        /// `<name>/<version>` of the release.
        release: String,
        /// Job name.
        job: String,
    },
    /// A job needs a package its release does not have.
    UnknownPackage {
        /// `<name>/<version>` of the release.
        release: String,
        /// Job name.
        job: String,
        /// Package name.
        package: String,
    },
    /// A release's packages depend on missing packages or on each other in a cycle.
    Graph {
        /// `<name>/<version>` of the release.
        release: String,
        /// The problem.
        error: GraphError,
    },
    /// A package without source code is not compiled for a stemcell.
    NotCompiled {
        /// `<name>/<version>` of the release.
        release: String,
        /// `<name>/<version>` of the package.
        package: String,
        /// `<name>/<version>` of the stemcell.
        stemcell: String,
    },
}

impl fmt::Display for CompileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompileProblem::UnknownRelease { release } => {
                write!(f, "release '{release}' is not part of the deployment")
            }
            CompileProblem::UnknownJob { release, job } => {
                write!(f, "job '{job}' is not in release '{release}'")
            }
            CompileProblem::UnknownPackage {
                release,
                job,
                package,
            } => write!(
                f,
                "job '{job}' of release '{release}' needs package '{package}', which is not in \
                 the release"
            ),
            CompileProblem::Graph { release, error } => write!(f, "release '{release}': {error}"),
            CompileProblem::NotCompiled {
                release,
                package,
                stemcell,
            } => write!(
                f,
                "release '{release}': package '{package}' has no source code and is not \
                 compiled against stemcell '{stemcell}'"
            ),
        }
    }
}

/// The Director's error for packages without source that are not compiled for a stemcell
/// (`PackageMissingSourceCode`), over all [`CompileProblem::NotCompiled`] problems: one
/// paragraph per release, packages by name. `None` when there are none. (The Director's
/// text starts with a newline, left out here.)
pub fn not_compiled_message(problems: &[CompileProblem]) -> Option<String> {
    let mut by_release: Vec<(&str, Vec<(&str, &str)>)> = Vec::new();
    let mut stemcells = BTreeSet::new();
    for p in problems {
        if let CompileProblem::NotCompiled {
            release,
            package,
            stemcell,
        } = p
        {
            stemcells.insert(stemcell.as_str());
            match by_release.iter_mut().find(|(r, _)| r == release) {
                Some((_, faults)) => faults.push((package, stemcell)),
                None => by_release.push((release, vec![(package, stemcell)])),
            }
        }
    }
    if by_release.is_empty() {
        return None;
    }
    let mut msg = String::new();
    for (release, mut faults) in by_release {
        faults.sort_by_key(|(package, _)| package_name(package).to_string());
        if stemcells.len() > 1 {
            msg.push_str(&format!(
                "Can't use release '{release}'. It references packages without source code and \
                 are not compiled against intended stemcells:\n"
            ));
            for (package, stemcell) in faults {
                msg.push_str(&format!(" - '{package}' against stemcell '{stemcell}'\n"));
            }
        } else {
            let stemcell = faults.first().map_or("", |f| f.1);
            msg.push_str(&format!(
                "Can't use release '{release}'. It references packages without source code and \
                 are not compiled against stemcell '{stemcell}':\n"
            ));
            for (package, _) in faults {
                msg.push_str(&format!(" - '{package}'\n"));
            }
        }
    }
    Some(msg)
}

/// The name part of a `<name>/<version>` description.
fn package_name(desc: &str) -> &str {
    desc.split_once('/').map_or(desc, |(name, _)| name)
}

/// The plan: what to compile, what to reuse, and what cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CompilePlan {
    /// Packages to compile; every task comes after the tasks it depends on.
    pub tasks: Vec<CompileTask>,
    /// Packages already compiled.
    pub reused: Vec<Reused>,
    /// How each needed release package is had, per stemcell.
    pub provisions: BTreeMap<PackageUse, Provision>,
    /// What stands in the way; the plan is usable only when this is empty.
    pub problems: Vec<CompileProblem>,
}

impl CompilePlan {
    /// How `package` of `release` is had on `stemcell`, if it is needed there.
    pub fn provision(
        &self,
        release: &str,
        package: &str,
        stemcell: &Stemcell,
    ) -> Option<Provision> {
        let key = PackageUse {
            release: release.to_string(),
            package: package.to_string(),
            stemcell_os: stemcell.os.clone(),
            stemcell_version: stemcell.version.clone(),
        };
        self.provisions.get(&key).copied()
    }
}

/// The Director's dependency key of a package: its direct dependencies sorted by name, each
/// as `[name, version]` followed, if it has dependencies, by the same list for them, as
/// compact JSON (`[]` without dependencies). `packages` gives `(version, dependencies)` by
/// name; unknown names and cycles are left out (release validation rejects both).
pub fn dependency_key<'a>(
    package: &str,
    packages: &impl Fn(&str) -> Option<(&'a str, &'a [String])>,
) -> String {
    let mut visiting = vec![package.to_string()];
    let list = dependency_list(package, packages, &mut visiting);
    Value::Array(list).to_string()
}

fn dependency_list<'a>(
    package: &str,
    packages: &impl Fn(&str) -> Option<(&'a str, &'a [String])>,
    visiting: &mut Vec<String>,
) -> Vec<Value> {
    let Some((_, deps)) = packages(package) else {
        return Vec::new();
    };
    let mut sorted: Vec<&String> = deps.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut list = Vec::new();
    for dep in sorted {
        let Some((version, sub)) = packages(dep) else {
            continue;
        };
        if visiting.contains(dep) {
            continue;
        }
        let mut item = vec![json!(dep), json!(version)];
        if !sub.is_empty() {
            visiting.push(dep.clone());
            item.push(Value::Array(dependency_list(dep, packages, visiting)));
            visiting.pop();
        }
        list.push(Value::Array(item));
    }
    list
}

/// The Director's cache key: sha1 hex of the package fingerprint, the stemcell sha1 and the
/// fingerprints of the transitive dependencies sorted by name, concatenated.
pub fn cache_key(
    fingerprint: &str,
    stemcell_sha1: &str,
    dependency_fingerprints: &[(&str, &str)],
) -> String {
    let mut deps = dependency_fingerprints.to_vec();
    deps.sort();
    let mut input = format!("{fingerprint}{stemcell_sha1}");
    for (_, fp) in deps {
        input.push_str(fp);
    }
    sha1_hex(input.as_bytes())
}

/// Whether two stemcell versions share their major version (the Director's
/// `StemcellVersion.match`; `_` counts as `.`).
pub fn same_major_version(a: &str, b: &str) -> bool {
    match (release_components(a), release_components(b)) {
        (Some(x), Some(y)) => match (x.first(), y.first()) {
            (Some(p), Some(q)) => p == q,
            _ => false,
        },
        _ => false,
    }
}

/// The second release component as a number (0 if absent or not a number): "newest" among
/// same-major records.
fn minor_version(v: &str) -> u64 {
    release_components(v)
        .and_then(|c| c.get(1).cloned())
        .and_then(|c| match c {
            Component::Number(n) => Some(n),
            Component::Text(_) => None,
        })
        .unwrap_or(0)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Component {
    Number(u64),
    Text(String),
}

/// The release segment of a semi-semantic version (before `-` or `+`), split at dots.
fn release_components(version: &str) -> Option<Vec<Component>> {
    let v = version.replace('_', ".");
    let release = v.split(['-', '+']).next().unwrap_or("");
    if release.is_empty() {
        return None;
    }
    release
        .split('.')
        .map(|c| {
            if c.is_empty() || !c.bytes().all(|b| b.is_ascii_alphanumeric()) {
                None
            } else if c.bytes().all(|b| b.is_ascii_digit()) {
                c.parse().ok().map(Component::Number)
            } else {
                Some(Component::Text(c.to_string()))
            }
        })
        .collect()
}

/// A package of a release as compilation sees it: source if the release has it, else a
/// compiled package.
#[derive(Debug, Clone, Copy)]
struct Entry<'r> {
    version: &'r str,
    fingerprint: &'r str,
    dependencies: &'r [String],
    /// The source tarball's digest; `None` for a compiled-only package.
    source_sha1: Option<&'r kubosh_base::digest::MultiDigest>,
}

struct Catalog<'r> {
    desc: String,
    entries: BTreeMap<&'r str, Entry<'r>>,
    jobs: BTreeMap<&'r str, &'r [String]>,
    /// Whether the package graph is sound; `None` until checked (once per release).
    sound: Option<bool>,
}

impl<'r> Catalog<'r> {
    fn new(release: &'r Release) -> Self {
        let mut entries = BTreeMap::new();
        for cp in &release.compiled_packages {
            entries.insert(
                cp.name.as_str(),
                Entry {
                    version: &cp.version,
                    fingerprint: &cp.fingerprint,
                    dependencies: &cp.dependencies,
                    source_sha1: None,
                },
            );
        }
        for p in &release.packages {
            entries.insert(
                p.name.as_str(),
                Entry {
                    version: &p.version,
                    fingerprint: &p.fingerprint,
                    dependencies: &p.dependencies,
                    source_sha1: Some(&p.digest),
                },
            );
        }
        let jobs = release
            .jobs
            .iter()
            .map(|j| (j.name.as_str(), j.spec.packages.as_slice()))
            .collect();
        Catalog {
            desc: format!("{}/{}", release.name(), release.version()),
            entries,
            jobs,
            sound: None,
        }
    }

    fn lookup(&self) -> impl Fn(&str) -> Option<(&'r str, &'r [String])> + '_ {
        |name| self.entries.get(name).map(|e| (e.version, e.dependencies))
    }

    fn dependency_key(&self, package: &str) -> String {
        dependency_key(package, &self.lookup())
    }

    /// Every package `package` depends on, directly or not.
    fn transitive(&self, package: &str) -> BTreeSet<&'r str> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&str> = vec![package];
        while let Some(p) = stack.pop() {
            if let Some(e) = self.entries.get(p) {
                for d in e.dependencies {
                    if let Some((name, _)) = self.entries.get_key_value(d.as_str())
                        && seen.insert(*name)
                    {
                        stack.push(name);
                    }
                }
            }
        }
        seen.remove(package);
        seen
    }
}

/// A record to match, with where it comes from.
struct Candidate {
    record: CompiledPackage,
    source: ReuseSource,
}

/// The records of a compiled release's packages.
fn compiled_release_records(release: &Release) -> Vec<Candidate> {
    let compiled_lookup = |name: &str| {
        release
            .compiled_packages
            .iter()
            .find(|c| c.name == name)
            .map(|c| (c.version.as_str(), c.dependencies.as_slice()))
    };
    release
        .compiled_packages
        .iter()
        .map(|cp| {
            // The blobstore stores it content-addressed: its id is the sha256.
            let blob_id = cp
                .digest
                .digests()
                .iter()
                .find(|d| d.algorithm == Algorithm::Sha256)
                .map(|d| d.hex.to_ascii_lowercase())
                .unwrap_or_else(|| cp.archive.blob_id());
            Candidate {
                record: CompiledPackage {
                    name: cp.name.clone(),
                    version: cp.version.clone(),
                    fingerprint: cp.fingerprint.clone(),
                    stemcell_os: cp.stemcell.os.clone(),
                    stemcell_version: cp.stemcell.version.clone(),
                    dependency_key: dependency_key(&cp.name, &compiled_lookup),
                    build: 1,
                    blob_id,
                    sha1: cp.digest.to_string(),
                },
                source: ReuseSource::CompiledRelease {
                    release: release.name().to_string(),
                },
            }
        })
        .collect()
}

/// Plans compilation for `input`; `estimate` gives a task's expected duration (any unit,
/// e.g. `|_| 1`) for the priorities.
pub fn plan_compilation(
    input: CompileInput<'_>,
    estimate: impl Fn(&CompileTask) -> u64,
) -> CompilePlan {
    let mut planner = Planner::new(input);
    for sj in input.stemcells {
        let mut seen = BTreeSet::new();
        for job in &sj.jobs {
            if seen.insert(job) {
                planner.plan_job(&sj.stemcell, job);
            }
        }
    }
    let mut plan = planner.plan;
    set_priorities(&mut plan.tasks, estimate);
    plan
}

/// Priority = the longest chain of estimates from the task to the end of the graph.
fn set_priorities(tasks: &mut [CompileTask], estimate: impl Fn(&CompileTask) -> u64) {
    let durations: Vec<u64> = tasks.iter().map(&estimate).collect();
    let depends_on: Vec<Vec<usize>> = tasks.iter().map(|t| t.depends_on.clone()).collect();
    // The planner only makes sound graphs; should that ever fail, fall back to estimates.
    let chains = remaining_chains(&durations, &depends_on).unwrap_or(durations);
    for (task, chain) in tasks.iter_mut().zip(chains) {
        task.priority = chain;
    }
}

type ContentKey = (PackageId, String, String, String);

struct Planner<'a> {
    input: CompileInput<'a>,
    catalogs: BTreeMap<&'a str, Catalog<'a>>,
    candidates: Vec<Candidate>,
    plan: CompilePlan,
    /// Outcome per (release, package, stemcell): `None` when it cannot be had.
    done: BTreeMap<(String, String, Stemcell), Option<Provision>>,
    tasks_by_content: BTreeMap<ContentKey, usize>,
    reused_by_record: BTreeMap<(ContentKey, String), usize>,
}

impl<'a> Planner<'a> {
    fn new(input: CompileInput<'a>) -> Self {
        let mut catalogs = BTreeMap::new();
        let mut candidates: Vec<Candidate> = input
            .compiled
            .iter()
            .map(|r| Candidate {
                record: r.clone(),
                source: ReuseSource::Store,
            })
            .collect();
        for release in input.releases {
            candidates.extend(compiled_release_records(release));
            catalogs
                .entry(release.name())
                .or_insert_with(|| Catalog::new(release));
        }
        Planner {
            input,
            catalogs,
            candidates,
            plan: CompilePlan::default(),
            done: BTreeMap::new(),
            tasks_by_content: BTreeMap::new(),
            reused_by_record: BTreeMap::new(),
        }
    }

    fn problem(&mut self, p: CompileProblem) {
        if !self.plan.problems.contains(&p) {
            self.plan.problems.push(p);
        }
    }

    fn plan_job(&mut self, stemcell: &Stemcell, job: &JobUse) {
        let Some(catalog) = self.catalogs.get_mut(job.release.as_str()) else {
            self.problem(CompileProblem::UnknownRelease {
                release: job.release.clone(),
            });
            return;
        };
        let desc = catalog.desc.clone();
        let Some(packages) = catalog.jobs.get(job.job.as_str()).copied() else {
            self.problem(CompileProblem::UnknownJob {
                release: desc,
                job: job.job.clone(),
            });
            return;
        };
        let sound = match catalog.sound {
            Some(sound) => sound,
            None => {
                let check = graph::compile_order(
                    catalog
                        .entries
                        .iter()
                        .map(|(name, e)| (*name, e.dependencies)),
                );
                catalog.sound = Some(check.is_ok());
                match check {
                    Ok(_) => true,
                    Err(error) => {
                        self.problem(CompileProblem::Graph {
                            release: desc.clone(),
                            error,
                        });
                        false
                    }
                }
            }
        };
        if !sound {
            return;
        }
        for package in packages {
            let known = self
                .catalogs
                .get(job.release.as_str())
                .is_some_and(|c| c.entries.contains_key(package.as_str()));
            if known {
                self.visit(stemcell, &job.release, package);
            } else {
                self.problem(CompileProblem::UnknownPackage {
                    release: desc.clone(),
                    job: job.job.clone(),
                    package: package.clone(),
                });
            }
        }
    }

    /// How `package` of `release` is had on `stemcell`; dependencies first.
    fn visit(&mut self, stemcell: &Stemcell, release: &str, package: &str) -> Option<Provision> {
        let memo = (release.to_string(), package.to_string(), stemcell.clone());
        if let Some(done) = self.done.get(&memo) {
            return *done;
        }
        // Mark as unavailable while visiting: a cycle (excluded by the graph check) could
        // not recurse forever.
        self.done.insert(memo.clone(), None);
        let result = self.provide(stemcell, release, package);
        self.done.insert(memo, result);
        if let Some(p) = result {
            self.plan.provisions.insert(
                PackageUse {
                    release: release.to_string(),
                    package: package.to_string(),
                    stemcell_os: stemcell.os.clone(),
                    stemcell_version: stemcell.version.clone(),
                },
                p,
            );
        }
        result
    }

    /// How `package` of `release` is had on `stemcell`: a matching compiled record, a
    /// compile task already planned for the same content, or a new compile task after its
    /// dependencies. `None` (with the problem noted) when it cannot be had.
    fn provide(&mut self, stemcell: &Stemcell, release: &str, package: &str) -> Option<Provision> {
        let catalog = self.catalogs.get(release)?;
        let entry = *catalog.entries.get(package)?;
        let id = PackageId {
            name: package.to_string(),
            version: entry.version.to_string(),
            fingerprint: entry.fingerprint.to_string(),
        };
        let key = catalog.dependency_key(package);
        let release_desc = catalog.desc.clone();
        let content: ContentKey = (
            id.clone(),
            key.clone(),
            stemcell.os.clone(),
            stemcell.version.clone(),
        );

        if let Some(i) = self.find(&id, &key, stemcell, true) {
            return self.reuse(stemcell, content, i);
        }
        let Some(source_sha1) = entry.source_sha1 else {
            // Compiled releases: the newest record for the same major stemcell version.
            if let Some(i) = self.find(&id, &key, stemcell, false) {
                return self.reuse(stemcell, content, i);
            }
            // Like the Director's validation, name the missing dependencies too.
            let mut deps: Vec<&String> = entry.dependencies.iter().collect();
            deps.sort();
            for dep in deps {
                self.visit(stemcell, release, dep);
            }
            self.problem(CompileProblem::NotCompiled {
                release: release_desc,
                package: format!("{}/{}", id.name, id.version),
                stemcell: stemcell.desc(),
            });
            return None;
        };
        if let Some(&task) = self.tasks_by_content.get(&content) {
            return Some(Provision::Compile(task));
        }

        let mut deps: Vec<&String> = entry.dependencies.iter().collect();
        deps.sort();
        deps.dedup();
        let mut dependencies = Vec::with_capacity(deps.len());
        let mut available = true;
        for dep in deps {
            match self.visit(stemcell, release, dep) {
                Some(p) => dependencies.push(p),
                None => available = false,
            }
        }
        if !available {
            return None;
        }

        let catalog = self.catalogs.get(release)?;
        let transitive: Vec<(&str, &str)> = catalog
            .transitive(package)
            .into_iter()
            .filter_map(|d| catalog.entries.get(d).map(|e| (d, e.fingerprint)))
            .collect();
        let cache_key = cache_key(entry.fingerprint, &stemcell.sha1, &transitive);
        let build = self.next_build(&id, stemcell);
        let depends_on = dependencies
            .iter()
            .filter_map(|p| match p {
                Provision::Compile(t) => Some(*t),
                Provision::Reuse(_) => None,
            })
            .collect();
        let index = self.plan.tasks.len();
        self.plan.tasks.push(CompileTask {
            release: release.to_string(),
            package: id,
            source_sha1: source_sha1.to_string(),
            stemcell: stemcell.clone(),
            dependency_key: key,
            cache_key,
            build,
            dependencies,
            depends_on,
            priority: 0,
        });
        self.tasks_by_content.insert(content, index);
        Some(Provision::Compile(index))
    }

    /// The build number a new compilation of `id` on `stemcell` gets: one more than the
    /// highest recorded.
    fn next_build(&self, id: &PackageId, stemcell: &Stemcell) -> u64 {
        1 + self
            .input
            .compiled
            .iter()
            .filter(|r| {
                r.name == id.name
                    && r.version == id.version
                    && r.fingerprint == id.fingerprint
                    && r.stemcell_os == stemcell.os
                    && r.stemcell_version == stemcell.version
            })
            .map(|r| r.build)
            .max()
            .unwrap_or(0)
    }

    /// A matching record: exactly for this stemcell, or (`exact` false) the newest one for a
    /// stemcell of the same OS and major version.
    fn find(&self, id: &PackageId, key: &str, stemcell: &Stemcell, exact: bool) -> Option<usize> {
        let same_package = |r: &CompiledPackage| {
            r.name == id.name
                && r.version == id.version
                && r.fingerprint == id.fingerprint
                && r.stemcell_os == stemcell.os
                && r.dependency_key == key
        };
        let records = self.candidates.iter().enumerate();
        if exact {
            return records
                .filter(|(_, c)| same_package(&c.record))
                .find(|(_, c)| c.record.stemcell_version == stemcell.version)
                .map(|(i, _)| i);
        }
        let mut best: Option<(u64, usize)> = None;
        for (i, c) in records {
            if same_package(&c.record)
                && same_major_version(&c.record.stemcell_version, &stemcell.version)
            {
                let minor = minor_version(&c.record.stemcell_version);
                // The first of equal minors wins, as with the Director's max_by.
                if best.is_none_or(|(m, _)| minor > m) {
                    best = Some((minor, i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    fn reuse(
        &mut self,
        stemcell: &Stemcell,
        content: ContentKey,
        candidate: usize,
    ) -> Option<Provision> {
        let c = self.candidates.get(candidate)?;
        let key = (content, c.record.blob_id.clone());
        if let Some(&i) = self.reused_by_record.get(&key) {
            return Some(Provision::Reuse(i));
        }
        let index = self.plan.reused.len();
        self.plan.reused.push(Reused {
            stemcell: stemcell.clone(),
            record: c.record.clone(),
            source: c.source.clone(),
        });
        self.reused_by_record.insert(key, index);
        Some(Provision::Reuse(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::{self, Job, Package, ReleaseManifest, StemcellRef};
    use kubosh_base::digest::MultiDigest;
    use kubosh_base::digest::sha256_hex;

    fn digest(text: &str) -> MultiDigest {
        sha1_hex(text.as_bytes()).parse().unwrap()
    }

    fn manifest(name: &str, version: &str) -> ReleaseManifest {
        ReleaseManifest {
            name: name.into(),
            version: version.into(),
            commit_hash: "abc".into(),
            uncommitted_changes: false,
            jobs: vec![],
            packages: vec![],
            compiled_packages: vec![],
            license: None,
            no_compression: false,
        }
    }

    fn job(name: &str, packages: &[&str]) -> Job {
        Job {
            name: name.into(),
            version: format!("{name}-v"),
            fingerprint: format!("{name}-v"),
            digest: digest(name),
            spec: serde_json::from_value(json!({"name": name, "packages": packages})).unwrap(),
            monit: None,
            extra_monit: BTreeMap::new(),
            templates: BTreeMap::new(),
            properties_schema: None,
            archive: vec![],
        }
    }

    fn package(name: &str, deps: &[&str]) -> Package {
        Package {
            name: name.into(),
            version: format!("{name}-v"),
            fingerprint: format!("{name}-fp"),
            digest: digest(name),
            dependencies: deps.iter().map(|d| d.to_string()).collect(),
            archive: release::PackageArchive::Bytes(vec![]),
        }
    }

    fn compiled(name: &str, deps: &[&str], os: &str, version: &str) -> release::PrecompiledPackage {
        release::PrecompiledPackage {
            name: name.into(),
            version: format!("{name}-v"),
            fingerprint: format!("{name}-fp"),
            digest: format!(
                "{};sha256:{}",
                sha1_hex(name.as_bytes()),
                sha256_hex(name.as_bytes())
            )
            .parse()
            .unwrap(),
            stemcell: StemcellRef {
                os: os.into(),
                version: version.into(),
            },
            dependencies: deps.iter().map(|d| d.to_string()).collect(),
            archive: release::PackageArchive::Bytes(name.as_bytes().to_vec()),
        }
    }

    fn source_release(name: &str, jobs: Vec<Job>, packages: Vec<Package>) -> Release {
        Release {
            manifest: manifest(name, "1"),
            jobs,
            packages,
            compiled_packages: vec![],
            license: None,
        }
    }

    fn stemcell(version: &str) -> Stemcell {
        Stemcell {
            name: "bosh-stemcell".into(),
            os: "ubuntu-jammy".into(),
            version: version.into(),
            sha1: format!("sc-{version}"),
        }
    }

    fn uses(stemcell: Stemcell, jobs: &[(&str, &str)]) -> StemcellJobs {
        StemcellJobs {
            stemcell,
            jobs: jobs
                .iter()
                .map(|(r, j)| JobUse {
                    release: r.to_string(),
                    job: j.to_string(),
                })
                .collect(),
        }
    }

    fn record(name: &str, version: &str, key: &str, build: u64) -> CompiledPackage {
        CompiledPackage {
            name: name.into(),
            version: format!("{name}-v"),
            fingerprint: format!("{name}-fp"),
            stemcell_os: "ubuntu-jammy".into(),
            stemcell_version: version.into(),
            dependency_key: key.into(),
            build,
            blob_id: format!("blob-{name}-{version}-{build}"),
            sha1: format!("sha-{name}"),
        }
    }

    #[test]
    fn dependency_keys_match_the_directors_key_generator() {
        // The cases of the Director's key_generator_spec.rb.
        let packages: Vec<(&str, &str, Vec<String>)> = vec![
            ("fake-pkg0", "fake-pkg0-version", vec!["fake-pkg2".into()]),
            ("fake-pkg1", "fake-pkg1-version", vec![]),
            ("fake-pkg2", "fake-pkg2-version", vec!["fake-pkg3".into()]),
            ("fake-pkg3", "fake-pkg3-version", vec![]),
            (
                "fake-pkg4",
                "fake-pkg4-version",
                vec!["fake-pkg3".into(), "fake-pkg1".into()],
            ),
        ];
        let lookup = |name: &str| {
            packages
                .iter()
                .find(|p| p.0 == name)
                .map(|p| (p.1, p.2.as_slice()))
        };
        assert_eq!(dependency_key("fake-pkg1", &lookup), "[]");
        assert_eq!(
            dependency_key("fake-pkg0", &lookup),
            r#"[["fake-pkg2","fake-pkg2-version",[["fake-pkg3","fake-pkg3-version"]]]]"#
        );
        assert_eq!(
            dependency_key("fake-pkg2", &lookup),
            r#"[["fake-pkg3","fake-pkg3-version"]]"#
        );
        assert_eq!(
            dependency_key("fake-pkg4", &lookup),
            r#"[["fake-pkg1","fake-pkg1-version"],["fake-pkg3","fake-pkg3-version"]]"#
        );
    }

    #[test]
    fn cache_keys_match_the_directors() {
        // compiled_package_spec.rb: fingerprint, stemcell sha1, dependency fingerprints by name.
        assert_eq!(
            cache_key(
                "<package2-fingerprint>",
                "<stemcell-sha1>",
                &[
                    ("package3", "<package3-fingerprint>"),
                    ("package1", "<package1-fingerprint>")
                ]
            ),
            sha1_hex(b"<package2-fingerprint><stemcell-sha1><package1-fingerprint><package3-fingerprint>")
        );
        assert_eq!(
            cache_key("<package1-fingerprint>", "<stemcell-sha1>", &[]),
            sha1_hex(b"<package1-fingerprint><stemcell-sha1>")
        );
    }

    fn app_release() -> Release {
        source_release(
            "app",
            vec![job("web", &["app", "tool"]), job("worker", &["golang"])],
            vec![
                package("golang", &[]),
                package("libpq", &[]),
                package("app", &["libpq", "golang"]),
                package("tool", &["app"]),
                package("unused", &[]),
            ],
        )
    }

    #[test]
    fn plans_tasks_after_their_dependencies_and_reuses_exact_records() {
        let owned = [app_release()];
        let releases: Vec<&Release> = owned.iter().collect();
        let stemcells = [
            uses(stemcell("1.10"), &[("app", "web"), ("app", "worker")]),
            uses(stemcell("2.0"), &[("app", "worker")]),
        ];
        let app_key = r#"[["golang","golang-v"],["libpq","libpq-v"]]"#;
        let compiled = [
            record("golang", "1.10", "[]", 2),
            // Same package compiled against another libpq: not this one, but it counts for
            // the build number.
            record(
                "app",
                "1.10",
                "[[\"golang\",\"golang-v\"],[\"libpq\",\"old\"]]",
                4,
            ),
            // Another stemcell version: no exact match for a source package.
            record("golang", "2.1", "[]", 1),
        ];
        let plan = plan_compilation(
            CompileInput {
                releases: &releases,
                stemcells: &stemcells,
                compiled: &compiled,
            },
            |_| 1,
        );
        assert!(plan.problems.is_empty(), "{:?}", plan.problems);
        let names: Vec<(&str, &str)> = plan
            .tasks
            .iter()
            .map(|t| (t.package.name.as_str(), t.stemcell.version.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("libpq", "1.10"),
                ("app", "1.10"),
                ("tool", "1.10"),
                ("golang", "2.0")
            ]
        );
        let app = &plan.tasks[1];
        assert_eq!(app.dependency_key, app_key);
        assert_eq!(app.build, 5);
        assert_eq!(app.depends_on, vec![0]);
        assert_eq!(
            app.dependencies,
            vec![Provision::Reuse(0), Provision::Compile(0)]
        );
        assert_eq!(app.cache_key, sha1_hex(b"app-fpsc-1.10golang-fplibpq-fp"));
        assert_eq!(app.source_sha1, sha1_hex(b"app"));
        assert_eq!(plan.tasks[2].depends_on, vec![1]);
        assert_eq!(
            plan.tasks[2].dependency_key,
            format!("[[\"app\",\"app-v\",{app_key}]]")
        );
        // Longest remaining chain: libpq -> app -> tool.
        let priorities: Vec<u64> = plan.tasks.iter().map(|t| t.priority).collect();
        assert_eq!(priorities, vec![3, 2, 1, 1]);
        assert_eq!(plan.tasks[3].build, 1);

        assert_eq!(plan.reused.len(), 1);
        assert_eq!(plan.reused[0].record, compiled[0]);
        assert_eq!(plan.reused[0].source, ReuseSource::Store);
        assert_eq!(
            plan.provision("app", "golang", &stemcell("1.10")),
            Some(Provision::Reuse(0))
        );
        assert_eq!(
            plan.provision("app", "golang", &stemcell("2.0")),
            Some(Provision::Compile(3))
        );
        assert_eq!(plan.provision("app", "unused", &stemcell("1.10")), None);
        assert_eq!(plan.provisions.len(), 5);
    }

    #[test]
    fn priorities_weigh_the_estimate() {
        let owned = [app_release()];
        let releases: Vec<&Release> = owned.iter().collect();
        let stemcells = [uses(stemcell("1"), &[("app", "web")])];
        let plan = plan_compilation(
            CompileInput {
                releases: &releases,
                stemcells: &stemcells,
                compiled: &[],
            },
            |t| if t.package.name == "golang" { 25 } else { 2 },
        );
        let by_name: BTreeMap<&str, u64> = plan
            .tasks
            .iter()
            .map(|t| (t.package.name.as_str(), t.priority))
            .collect();
        assert_eq!(
            by_name,
            BTreeMap::from([("golang", 29), ("libpq", 6), ("app", 4), ("tool", 2)])
        );
    }

    #[test]
    fn identical_packages_of_two_releases_compile_once() {
        let owned = [
            source_release(
                "a",
                vec![job("x", &["golang"])],
                vec![package("golang", &[])],
            ),
            source_release(
                "b",
                vec![job("y", &["golang"])],
                vec![package("golang", &[])],
            ),
        ];
        let releases: Vec<&Release> = owned.iter().collect();
        let stemcells = [uses(stemcell("1"), &[("a", "x"), ("b", "y"), ("a", "x")])];
        let plan = plan_compilation(
            CompileInput {
                releases: &releases,
                stemcells: &stemcells,
                compiled: &[],
            },
            |_| 1,
        );
        assert_eq!(plan.tasks.len(), 1);
        assert_eq!(plan.tasks[0].release, "a");
        assert_eq!(
            plan.provision("b", "golang", &stemcell("1")),
            Some(Provision::Compile(0))
        );
    }

    fn compiled_release(os: &str, version: &str) -> Release {
        let mut r = source_release("cr", vec![job("db", &["mariadb"])], vec![]);
        r.compiled_packages = vec![
            compiled("mariadb", &["cmake"], os, version),
            compiled("cmake", &[], os, version),
        ];
        r
    }

    #[test]
    fn compiled_releases_match_exactly_or_by_major_version() {
        let owned = [compiled_release("ubuntu-jammy", "1.10")];
        let releases: Vec<&Release> = owned.iter().collect();
        let stemcells = [
            uses(stemcell("1.10"), &[("cr", "db")]),
            uses(stemcell("1.20"), &[("cr", "db")]),
        ];
        let newer = CompiledPackage {
            dependency_key: r#"[["cmake","cmake-v"]]"#.into(),
            ..record("mariadb", "1.15", "", 1)
        };
        let compiled = [newer.clone()];
        let plan = plan_compilation(
            CompileInput {
                releases: &releases,
                stemcells: &stemcells,
                compiled: &compiled,
            },
            |_| 1,
        );
        assert!(plan.problems.is_empty(), "{:?}", plan.problems);
        assert!(plan.tasks.is_empty());
        let on = |v: &str, p: &str| match plan.provision("cr", p, &stemcell(v)) {
            Some(Provision::Reuse(i)) => plan.reused[i].record.clone(),
            other => panic!("{other:?}"),
        };
        // Exact: the release's own package, content-addressed by its sha256.
        let exact = on("1.10", "mariadb");
        assert_eq!(exact.stemcell_version, "1.10");
        assert_eq!(exact.blob_id, sha256_hex(b"mariadb"));
        assert_eq!(
            exact.sha1,
            format!("{};sha256:{}", sha1_hex(b"mariadb"), sha256_hex(b"mariadb"))
        );
        assert_eq!(exact.dependency_key, r#"[["cmake","cmake-v"]]"#);
        assert_eq!(
            plan.reused
                .iter()
                .find(|r| r.record == exact)
                .map(|r| r.source.clone()),
            Some(ReuseSource::CompiledRelease {
                release: "cr".into()
            })
        );
        // 1.20: the newest of the same major version, 1.15 over 1.10.
        assert_eq!(on("1.20", "mariadb"), newer);
        // A reused package's dependencies are not needed (no job lists cmake).
        assert_eq!(plan.provision("cr", "cmake", &stemcell("1.20")), None);
    }

    #[test]
    fn packages_without_source_for_another_major_version_are_reported_as_the_director_does() {
        let owned = [compiled_release("ubuntu-jammy", "1.10")];
        let releases: Vec<&Release> = owned.iter().collect();
        let stemcells = [uses(stemcell("2.1"), &[("cr", "db")])];
        let plan = plan_compilation(
            CompileInput {
                releases: &releases,
                stemcells: &stemcells,
                compiled: &[],
            },
            |_| 1,
        );
        assert!(plan.tasks.is_empty());
        let missing = |package: &str| CompileProblem::NotCompiled {
            release: "cr/1".into(),
            package: format!("{package}/{package}-v"),
            stemcell: "bosh-stemcell/2.1".into(),
        };
        // The job needs mariadb only; its dependency is named too, as the Director does.
        assert_eq!(plan.problems, vec![missing("cmake"), missing("mariadb")]);
        let owned = [compiled_release("ubuntu-jammy", "1.10")];
        let releases: Vec<&Release> = owned.iter().collect();
        let two = [
            uses(stemcell("2.1"), &[("cr", "db")]),
            uses(stemcell("3.1"), &[("cr", "db")]),
        ];
        let single = plan_compilation(
            CompileInput {
                releases: &releases,
                stemcells: &two[..1],
                compiled: &[],
            },
            |_| 1,
        );
        assert_eq!(
            not_compiled_message(&single.problems).unwrap(),
            "Can't use release 'cr/1'. It references packages without source code and are not \
             compiled against stemcell 'bosh-stemcell/2.1':\n - 'cmake/cmake-v'\n - \
             'mariadb/mariadb-v'\n"
        );
        let multi = plan_compilation(
            CompileInput {
                releases: &releases,
                stemcells: &two,
                compiled: &[],
            },
            |_| 1,
        );
        assert_eq!(
            not_compiled_message(&multi.problems).unwrap(),
            "Can't use release 'cr/1'. It references packages without source code and are not \
             compiled against intended stemcells:\n - 'cmake/cmake-v' against stemcell \
             'bosh-stemcell/2.1'\n - 'cmake/cmake-v' against stemcell 'bosh-stemcell/3.1'\n - \
             'mariadb/mariadb-v' against stemcell 'bosh-stemcell/2.1'\n - 'mariadb/mariadb-v' \
             against stemcell 'bosh-stemcell/3.1'\n"
        );
        assert_eq!(not_compiled_message(&[]), None);
    }

    #[test]
    fn unknown_names_and_broken_graphs_are_problems() {
        let mut broken = source_release(
            "broken",
            vec![job("j", &["a"])],
            vec![package("a", &["b"]), package("b", &["a"])],
        );
        broken.manifest.version = "2".into();
        let owned = [app_release(), broken];
        let releases: Vec<&Release> = owned.iter().collect();
        let stemcells = [uses(
            stemcell("1"),
            &[
                ("nope", "x"),
                ("app", "nojob"),
                ("broken", "j"),
                ("broken", "j"),
            ],
        )];
        let mut with_missing = app_release();
        with_missing.jobs.push(job("bad", &["ghost"]));
        let plan = plan_compilation(
            CompileInput {
                releases: &releases,
                stemcells: &stemcells,
                compiled: &[],
            },
            |_| 1,
        );
        assert_eq!(
            plan.problems,
            vec![
                CompileProblem::UnknownRelease {
                    release: "nope".into()
                },
                CompileProblem::UnknownJob {
                    release: "app/1".into(),
                    job: "nojob".into()
                },
                CompileProblem::Graph {
                    release: "broken/2".into(),
                    error: GraphError::Cycle {
                        cycle: vec!["a".into(), "b".into(), "a".into()]
                    }
                },
            ]
        );
        assert_eq!(
            plan.problems[2].to_string(),
            "release 'broken/2': package dependency cycle: a => b => a"
        );
        let owned = [with_missing];
        let releases: Vec<&Release> = owned.iter().collect();
        let stemcells = [uses(stemcell("1"), &[("app", "bad")])];
        let plan = plan_compilation(
            CompileInput {
                releases: &releases,
                stemcells: &stemcells,
                compiled: &[],
            },
            |_| 1,
        );
        assert_eq!(
            plan.problems[0].to_string(),
            "job 'bad' of release 'app/1' needs package 'ghost', which is not in the release"
        );
    }

    #[test]
    fn records_serialize_and_give_the_apply_spec_entry() {
        let task_plan = plan_compilation(
            CompileInput {
                releases: &[&app_release()],
                stemcells: &[uses(stemcell("1"), &[("app", "worker")])],
                compiled: &[],
            },
            |_| 1,
        );
        let rec = task_plan.tasks[0].record("blob-1", "abc");
        assert_eq!(rec.agent_version(), "golang-v.1");
        assert_eq!(
            rec.apply_spec_entry(),
            json!({"name": "golang", "version": "golang-v.1", "sha1": "abc", "blobstore_id": "blob-1"})
        );
        let text = serde_json::to_value(&rec).unwrap();
        assert_eq!(
            text,
            json!({
                "name": "golang", "version": "golang-v", "fingerprint": "golang-fp",
                "stemcell_os": "ubuntu-jammy", "stemcell_version": "1", "dependency_key": "[]",
                "build": 1, "blob_id": "blob-1", "sha1": "abc"
            })
        );
        let mut old = text.clone();
        old.as_object_mut().unwrap().remove("build");
        assert_eq!(serde_json::from_value::<CompiledPackage>(old).unwrap(), rec);
    }

    #[test]
    fn stemcell_versions_match_by_major() {
        assert!(same_major_version("621.74", "621.5"));
        assert!(same_major_version("3000", "3000.1"));
        assert!(same_major_version("1_2", "1.9"));
        assert!(!same_major_version("621.74", "622.74"));
        assert!(!same_major_version("", "1"));
        assert!(!same_major_version("1..2", "1"));
        assert_eq!(minor_version("621.74"), 74);
        assert_eq!(minor_version("621"), 0);
        assert_eq!(minor_version("1.2-beta"), 2);
    }
}
