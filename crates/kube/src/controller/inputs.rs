//! What a `Deployment` deploys, read from the apiserver as `bosh deploy` reads its files: the
//! cloud config it names, the manifest with `spec.ops` applied and `((variables))` filled in
//! from `varsFrom`, `vars` and the generated variables (Secrets), checked by the validator,
//! and the Ready `Release` and `Stemcell` resources the manifest names.
//!
//! What is missing (a cloud config, a release, a Secret) makes the deployment wait; what is
//! wrong (an ops file that does not apply, a variable without a value, an invalid manifest)
//! stalls it until the spec changes. Neither makes any call to the cloud.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::status;
use crate::api::{
    CloudConfig, CpiConfig, Deployment, Release as ReleaseResource, RuntimeConfig,
    RuntimeConfigRef, Stemcell as StemcellResource, VarsSource,
};
use crate::variables::{SecretStore, VariableError};
use kubosh_core::manifest::{DeploymentManifest, StemcellRef};
use kubosh_core::ops::{InterpolateOptions, MissingVars, OpsFile, Vars};
use kubosh_core::plan::desired::compare_versions;
use kubosh_core::validate::Validated;
use kubosh_engine::clouds::{CloudMaker, NamedClouds};

/// A deployment's inputs, ready to deploy.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The manifest (ops applied, variables filled in) and the cloud config, validated
    /// together once: the engine deploys them as they are.
    pub documents: Validated<(DeploymentManifest, kubosh_core::manifest::CloudConfig)>,
    /// The `Release` resource of each release the manifest names.
    pub releases: Vec<ReleaseResource>,
    /// The `Stemcell` resource of each stemcell alias.
    pub stemcells: Vec<StemcellResource>,
    /// Every secret string in the manifest (values from Secrets, generated variables), to
    /// scrub from messages before they reach a status or an Event.
    pub secrets: Vec<String>,
    /// The `RuntimeConfig`s applied to the manifest, at the versions read.
    pub runtime_configs: Vec<RuntimeConfigRef>,
    /// The clouds of the namespace's `CpiConfig`s, which the AZs may name.
    pub named_clouds: NamedClouds,
}

impl Inputs {
    /// `text` with every secret of these inputs replaced by `<redacted>`.
    pub fn scrub(&self, text: &str) -> String {
        kubosh_base::secret::scrub(text, &self.secrets)
    }
}

/// Why a deployment cannot be deployed yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unready {
    /// Something it names does not exist or is not Ready yet: one line each.
    Waiting(Vec<String>),
    /// Its input is wrong and stays wrong until a spec changes: a PascalCase reason and one
    /// line per problem.
    Invalid {
        /// e.g. `InvalidManifest`.
        reason: &'static str,
        /// Every problem.
        problems: Vec<String>,
    },
}

impl std::fmt::Display for Unready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unready::Waiting(lines) => write!(f, "waiting for: {}", lines.join("; ")),
            Unready::Invalid { reason, problems } => {
                write!(f, "{reason}: {}", problems.join("\n"))
            }
        }
    }
}

/// Reading the inputs failed for a reason that may pass (the apiserver, a Secret store).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The Kubernetes API failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// A document of the resource cannot be turned into JSON (it came from JSON: a bug).
    #[error("variables: {what}: {source}")]
    Document {
        /// `manifest` or `cloud config`.
        what: &'static str,
        /// Why.
        source: serde_json::Error,
    },
    /// The Secrets that hold generated variables cannot be read or written.
    #[error("variables: {0}")]
    Variables(#[from] crate::variables::StoreError),
}

/// The watched inputs of one namespace: its cloud and runtime configs, releases and stemcells (what
/// the controller is told of when they change; Secrets and ConfigMaps it is not).
#[derive(Debug, Clone, Default)]
pub struct Watched {
    /// The `CloudConfig`s.
    pub cloud_configs: Vec<CloudConfig>,
    /// The `Release`s.
    pub releases: Vec<ReleaseResource>,
    /// The `Stemcell`s.
    pub stemcells: Vec<StemcellResource>,
    /// The `RuntimeConfig`s.
    pub runtime_configs: Vec<RuntimeConfig>,
    /// The `CpiConfig`s.
    pub cpi_configs: Vec<CpiConfig>,
}

impl Watched {
    /// Reads them (five lists).
    pub async fn read(client: &kube::Client, namespace: &str) -> Result<Watched, kube::Error> {
        let list = ListParams::default();
        Ok(Watched {
            cloud_configs: (Api::<CloudConfig>::namespaced(client.clone(), namespace))
                .list(&list)
                .await?
                .items,
            releases: (Api::<ReleaseResource>::namespaced(client.clone(), namespace))
                .list(&list)
                .await?
                .items,
            stemcells: (Api::<StemcellResource>::namespaced(client.clone(), namespace))
                .list(&list)
                .await?
                .items,
            runtime_configs: (Api::<RuntimeConfig>::namespaced(client.clone(), namespace))
                .list(&list)
                .await?
                .items,
            cpi_configs: (Api::<CpiConfig>::namespaced(client.clone(), namespace))
                .list(&list)
                .await?
                .items,
        })
    }
}

/// Reads everything `deployment` needs, its namespace's watched inputs being `watched`
/// (read no earlier than their last change), the CPI config's clouds made by `maker`. The
/// inner error is a deployment that must wait or is invalid.
pub async fn gather(
    client: &kube::Client,
    deployment: &Deployment,
    watched: &Watched,
    maker: &dyn CloudMaker,
) -> Result<Result<Inputs, Unready>, InputError> {
    let namespace = deployment.namespace().unwrap_or_default();
    let spec = &deployment.spec;

    // Everything missing is listed at once: the cloud config, Secrets and ConfigMaps, and
    // the releases and stemcells.
    let mut waiting = Vec::new();
    let cloud_config = match cloud_config_of(deployment, &watched.cloud_configs)? {
        Ok(merged) => merged,
        Err(CloudConfigUnready::Missing(line)) => {
            waiting.push(line);
            None
        }
        Err(CloudConfigUnready::Invalid(problems)) => {
            return Ok(Err(Unready::Invalid {
                reason: "InvalidCloudConfig",
                problems: problems.to_string().lines().map(String::from).collect(),
            }));
        }
    };
    let mut manifest = match manifest_with_ops(deployment)? {
        Ok(manifest) => manifest,
        Err(unready) => return Ok(Err(unready)),
    };
    let runtime_configs =
        match with_runtime_configs(&mut manifest, &namespace, &watched.runtime_configs)? {
            Ok(applied) => applied,
            Err(unready) => return Ok(Err(unready)),
        };
    let mut secrets = Vec::new();
    let mut vars = vars_from(
        client,
        &namespace,
        &spec.vars_from,
        &mut waiting,
        &mut secrets,
    )
    .await?;
    if !waiting.is_empty() {
        // The releases and stemcells the manifest names literally are waited for too.
        if let Ok(typed) = serde_json::from_value::<DeploymentManifest>(manifest) {
            let literal = |line: &String| !line.contains("((");
            waiting.extend(
                waiting_for(&typed, &watched.releases, &watched.stemcells)
                    .into_iter()
                    .filter(literal),
            );
        }
        return Ok(Err(Unready::Waiting(waiting)));
    }
    let cloud_config = cloud_config.unwrap_or_default();
    if let Some(given) = &spec.vars {
        for (k, v) in given {
            vars.add_var(k, v.clone());
        }
    }
    let manifest = match interpolated(client, deployment, &manifest, &vars, &mut secrets).await? {
        Ok(manifest) => manifest,
        Err(unready) => return Ok(Err(unready)),
    };

    let documents = match kubosh_core::validate::deployment(&manifest, &cloud_config) {
        Ok(documents) => documents,
        Err(problems) => return Ok(Err(invalid_manifest(&problems, &secrets))),
    };
    let named_clouds =
        match clouds_of(client, &namespace, watched, &documents.document.1, maker).await? {
            Ok((clouds, cpi_secrets)) => {
                secrets.extend(cpi_secrets);
                clouds
            }
            Err(unready) => return Ok(Err(unready)),
        };
    let (releases, stemcells) = match artifacts_of(&documents.document.0, watched, &secrets) {
        Ok(chosen) => chosen,
        Err(unready) => return Ok(Err(unready)),
    };
    Ok(Ok(Inputs {
        documents,
        releases,
        stemcells,
        secrets,
        runtime_configs,
        named_clouds,
    }))
}

/// The `Release` and `Stemcell` resources `manifest` deploys, or why it cannot.
fn artifacts_of(
    manifest: &DeploymentManifest,
    watched: &Watched,
    secrets: &[String],
) -> Result<(Vec<ReleaseResource>, Vec<StemcellResource>), Unready> {
    // A version no `Release` of the namespace has, while others of its name are there, is
    // the manifest's error (the Director's), not something to wait for.
    let available: Vec<(&str, &str)> = (watched.releases.iter())
        .map(|r| (r.spec.name.as_str(), r.spec.version.as_str()))
        .collect();
    if let Err(problems) = kubosh_core::validate::choose_releases(manifest, &available) {
        return Err(invalid_manifest(&problems, secrets));
    }
    let (releases, stemcells) =
        choose(manifest, &watched.releases, &watched.stemcells).map_err(Unready::Waiting)?;
    // A job its release lacks is the manifest's fault too, found before any agent is asked.
    let problems = unknown_jobs(manifest, &releases);
    if problems.has_errors() {
        return Err(invalid_manifest(&problems, secrets));
    }
    Ok((releases, stemcells))
}

/// The variables of `sources` (a `varsFrom`), in order; what is missing goes to `waiting`,
/// every value a Secret gave to `secrets`.
pub(super) async fn vars_from(
    client: &kube::Client,
    namespace: &str,
    sources: &[VarsSource],
    waiting: &mut Vec<String>,
    secrets: &mut Vec<String>,
) -> Result<Vars, InputError> {
    let mut vars = Vars::new();
    for (i, source) in sources.iter().enumerate() {
        let before = vars.resolved();
        if let Some(line) = add_source(client, namespace, i, source, &mut vars).await? {
            waiting.push(line);
        }
        if source.secret_ref.is_some() {
            for (k, v) in vars.resolved() {
                if before.get(&k) != Some(&v) {
                    kubosh_base::secret::collect_strings(&v, secrets);
                }
            }
        }
    }
    Ok(vars)
}

/// The clouds of the namespace's CPI config, which `cloud`'s AZs may name (an AZ naming a
/// CPI no `CpiConfig` defines is the cloud config's error), and the secrets of its
/// properties.
async fn clouds_of(
    client: &kube::Client,
    namespace: &str,
    watched: &Watched,
    cloud: &kubosh_core::manifest::CloudConfig,
    maker: &dyn CloudMaker,
) -> Result<Result<(NamedClouds, Vec<String>), Unready>, InputError> {
    let cpis = match super::cpis::read(client, namespace, &watched.cpi_configs).await? {
        Ok(cpis) => cpis,
        Err(unready) => return Ok(Err(unready)),
    };
    let problems = kubosh_core::validate::azs_on_cpis(cloud, &cpis.config);
    if problems.has_errors() {
        return Ok(Err(Unready::Invalid {
            reason: "InvalidCloudConfig",
            problems: problems.to_string().lines().map(String::from).collect(),
        }));
    }
    let secrets = cpis.secrets.clone();
    Ok(match super::cpis::make(cpis, maker) {
        Ok(clouds) => Ok((clouds, secrets)),
        Err(message) => Err(Unready::Invalid {
            reason: "InvalidCpiConfig",
            problems: message.lines().map(String::from).collect(),
        }),
    })
}

/// `manifest` with every `RuntimeConfig` of the namespace applied in name order (before
/// variables: their `((variables))` are the manifest's); which ones, at which versions.
fn with_runtime_configs(
    manifest: &mut Value,
    namespace: &str,
    all: &[RuntimeConfig],
) -> Result<Result<Vec<RuntimeConfigRef>, Unready>, InputError> {
    let mut used: Vec<&RuntimeConfig> = all.iter().collect();
    used.sort_by_key(|c| c.name_any());
    let documents = named_documents(
        "runtime config",
        used.iter().map(|c| (c.name_any(), &c.spec.config)),
    )?;
    // A namespace is one team: the runtime configs' `teams` filters name namespaces.
    if let Err(problems) =
        kubosh_core::validate::apply_runtime_configs(manifest, &documents, Some(namespace))
    {
        return Ok(Err(Unready::Invalid {
            reason: "InvalidRuntimeConfig",
            problems: problems.to_string().lines().map(String::from).collect(),
        }));
    }
    Ok(Ok((used.iter())
        .map(|c| RuntimeConfigRef {
            name: c.name_any(),
            resource_version: c.resource_version().unwrap_or_default(),
        })
        .collect()))
}

/// Each `(name, document)` of `what` (`cloud config`) as JSON, for the core's merges.
fn named_documents<'a, T: serde::Serialize + 'a>(
    what: &'static str,
    documents: impl Iterator<Item = (String, &'a T)>,
) -> Result<Vec<(String, Value)>, InputError> {
    documents
        .map(|(name, document)| {
            let document = serde_json::to_value(document)
                .map_err(|source| InputError::Document { what, source })?;
            Ok((name, document))
        })
        .collect()
}

/// Why a deployment's cloud config cannot be had.
enum CloudConfigUnready {
    /// What it waits for.
    Missing(String),
    /// The named configs do not merge.
    Invalid(kubosh_core::validate::Problems),
}

/// The cloud config `deployment` deploys with: the `CloudConfig` its `cloudConfigRef`
/// names, else every one of the namespace merged in name order.
fn cloud_config_of(
    deployment: &Deployment,
    all: &[CloudConfig],
) -> Result<Result<Option<Value>, CloudConfigUnready>, InputError> {
    let mut used: Vec<&CloudConfig> = (all.iter())
        .filter(|c| deployment.spec.uses_cloud_config(&c.name_any()))
        .collect();
    used.sort_by_key(|c| c.name_any());
    let namespace = deployment.namespace().unwrap_or_default();
    if used.is_empty() {
        let line = match &deployment.spec.cloud_config_ref {
            Some(r) => format!(
                "cloud config {0} (CloudConfig {namespace}/{0} does not exist)",
                r.name
            ),
            None => format!("cloud config (namespace {namespace} has no CloudConfig)"),
        };
        return Ok(Err(CloudConfigUnready::Missing(line)));
    }
    let documents = named_documents(
        "cloud config",
        used.iter().map(|c| (c.name_any(), &c.spec.config)),
    )?;
    Ok(kubosh_core::validate::merge_cloud_configs(&documents)
        .map(Some)
        .map_err(CloudConfigUnready::Invalid))
}

/// `InvalidManifest` with every problem, one line each. The validator quotes what it
/// found, which may be a variable's value: the problems reach conditions, Events and the
/// log scrubbed of `secrets`, as deploy errors do.
fn invalid_manifest(problems: &kubosh_core::validate::Problems, secrets: &[String]) -> Unready {
    let text = kubosh_base::secret::scrub(&problems.to_string(), secrets);
    Unready::Invalid {
        reason: "InvalidManifest",
        problems: text.lines().map(String::from).collect(),
    }
}

/// The manifest's jobs that the chosen releases (their Ready status lists their jobs) lack.
fn unknown_jobs(
    manifest: &DeploymentManifest,
    releases: &[ReleaseResource],
) -> kubosh_core::validate::Problems {
    kubosh_core::validate::release_jobs(
        manifest,
        releases.iter().map(|r| {
            let jobs = (r.status.iter()).flat_map(|s| s.jobs.iter().map(|j| j.name.as_str()));
            (r.spec.name.as_str(), r.spec.version.as_str(), jobs)
        }),
    )
}

/// The deployment's manifest as a document, named after the resource unless it names
/// itself, with `spec.ops` applied (a failing op makes it invalid).
fn manifest_with_ops(deployment: &Deployment) -> Result<Result<Value, Unready>, InputError> {
    let spec = &deployment.spec;
    let mut manifest =
        serde_json::to_value(&spec.manifest).map_err(|source| InputError::Document {
            what: "manifest",
            source,
        })?;
    if let Value::Object(m) = &mut manifest {
        m.entry("name")
            .or_insert_with(|| Value::String(deployment.name_any()));
    }
    if !spec.ops.is_empty() {
        let applied = serde_json::to_value(&spec.ops)
            .map_err(|e| e.to_string())
            .and_then(|v| OpsFile::from_value(v, "spec.ops").map_err(|e| e.to_string()))
            .and_then(|ops| ops.apply(&mut manifest).map_err(|e| e.to_string()));
        if let Err(problem) = applied {
            return Ok(Err(Unready::Invalid {
                reason: "InvalidOps",
                problems: vec![problem],
            }));
        }
    }
    Ok(Ok(manifest))
}

/// `manifest` with its variables filled in: the user's values (`vars`), else those stored in
/// the deployment's Secrets, else generated and stored there (each generated or stored value
/// joins `secrets`). Bad definitions or a variable without a value make it invalid.
async fn interpolated(
    client: &kube::Client,
    deployment: &Deployment,
    manifest: &Value,
    vars: &Vars,
    secrets: &mut Vec<String>,
) -> Result<Result<Value, Unready>, InputError> {
    let invalid = |reason, problem: String| {
        Ok(Err(Unready::Invalid {
            reason,
            problems: vec![problem],
        }))
    };
    let definitions = match crate::variables::definitions(manifest) {
        Ok(d) => d,
        Err(e) => return invalid("InvalidVariables", e.to_string()),
    };
    let namespace = deployment.namespace().unwrap_or_default();
    let mut store = SecretStore::new(client.clone(), &namespace, &deployment.name_any());
    if let Some(owner) = deployment.controller_owner_ref(&()) {
        store = store.with_owner(owner);
    }
    if !definitions.is_empty() {
        store = store.preloaded().await?;
    }
    let resolved = match crate::variables::resolve(&definitions, vars, &store).await {
        Ok(r) => r,
        Err(VariableError::Store(e)) => return Err(InputError::Variables(e)),
        Err(e) => return invalid("InvalidVariables", e.to_string()),
    };
    for (name, source) in &resolved.sources {
        if *source != crate::variables::Source::Provided
            && let Some(value) = resolved.vars.get(name)
        {
            kubosh_base::secret::collect_strings(&value, secrets);
        }
    }
    let options = InterpolateOptions {
        missing: MissingVars::Error,
        error_on_unused: false,
    };
    match crate::variables::interpolate(manifest, &resolved.vars, &options) {
        Ok(out) => Ok(Ok(out.value)),
        Err(e) => invalid("MissingVariables", e.to_string()),
    }
}

/// Adds the variables of `varsFrom[index]`; a line naming what is missing when the Secret,
/// ConfigMap or key is not there (and the source is not optional).
async fn add_source(
    client: &kube::Client,
    namespace: &str,
    index: usize,
    source: &VarsSource,
    vars: &mut Vars,
) -> Result<Option<String>, InputError> {
    let (kind, reference, data) = if let Some(r) = &source.secret_ref {
        let secret = Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(&r.name)
            .await?;
        let data = secret.map(|s| {
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect::<Vec<_>>()
        });
        ("Secret", r, data)
    } else if let Some(r) = &source.config_map_ref {
        let map = Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(&r.name)
            .await?;
        let data = map.map(|m| m.data.unwrap_or_default().into_iter().collect::<Vec<_>>());
        ("ConfigMap", r, data)
    } else {
        return Ok(None);
    };
    let at = format!("spec.varsFrom[{index}]");
    let Some(data) = data else {
        return Ok((!source.optional).then(|| {
            format!(
                "{kind} {namespace}/{} ({at}) does not exist",
                reference.name
            )
        }));
    };
    match &reference.key {
        Some(key) => match data.iter().find(|(k, _)| k == key) {
            Some((_, text)) => {
                let origin = format!("{kind} {}, key {key}", reference.name);
                if let Err(e) = vars.add_vars_file(text, &origin) {
                    // A vars file that does not parse: named, never quoted.
                    return Ok(Some(format!("{at}: {e}")));
                }
            }
            None if source.optional => {}
            None => {
                return Ok(Some(format!(
                    "{kind} {namespace}/{} ({at}) has no key {key}",
                    reference.name
                )));
            }
        },
        None => {
            for (k, text) in data {
                vars.add_var_file(&k, &text);
            }
        }
    }
    Ok(None)
}

fn is_ready_now(conditions: Option<&[Condition]>, generation: Option<i64>) -> bool {
    conditions.is_some_and(|c| status::is_ready(c, generation))
}

/// The Ready `Release` of `name` at `version` (`latest`: the highest Ready version).
pub fn pick_release<'a>(
    releases: &'a [ReleaseResource],
    name: &str,
    version: &str,
) -> Option<&'a ReleaseResource> {
    releases
        .iter()
        .filter(|r| r.spec.name == name)
        .filter(|r| version == "latest" || r.spec.version.as_str() == version)
        .filter(|r| {
            is_ready_now(
                r.status.as_ref().map(|s| s.conditions.as_slice()),
                r.metadata.generation,
            )
        })
        .max_by(|a, b| compare_versions(a.spec.version.as_str(), b.spec.version.as_str()))
}

/// The Ready `Stemcell` a manifest's stemcell entry names (by `name`, or by `os` once the
/// tarball was read), at its version (`latest`: the highest Ready one).
pub fn pick_stemcell<'a>(
    stemcells: &'a [StemcellResource],
    wanted: &StemcellRef,
) -> Option<&'a StemcellResource> {
    let version = wanted.version.as_ref().map_or("latest", |v| v.as_str());
    stemcells
        .iter()
        .filter(|s| {
            let status = s.status.as_ref();
            match (&wanted.name, &wanted.os) {
                (Some(name), _) => &s.spec.name == name,
                (None, Some(os)) => status.and_then(|x| x.os.as_ref()) == Some(os),
                (None, None) => false,
            }
        })
        .filter(|s| version == "latest" || s.spec.version.as_str() == version)
        .filter(|s| {
            is_ready_now(
                s.status.as_ref().map(|x| x.conditions.as_slice()),
                s.metadata.generation,
            )
        })
        .max_by(|a, b| compare_versions(a.spec.version.as_str(), b.spec.version.as_str()))
}

/// The resources of the manifest's releases and stemcells, or one line per release or
/// stemcell that has no Ready resource in the namespace.
fn choose(
    manifest: &DeploymentManifest,
    releases: &[ReleaseResource],
    stemcells: &[StemcellResource],
) -> Result<(Vec<ReleaseResource>, Vec<StemcellResource>), Vec<String>> {
    let mut waiting = Vec::new();
    let mut chosen_releases = Vec::new();
    for r in &manifest.releases {
        let version = r.version.as_ref().map_or("latest", |v| v.as_str());
        match pick_release(releases, &r.name, version) {
            Some(found) => chosen_releases.push(found.clone()),
            None => {
                let candidates = (releases.iter())
                    .filter(|x| x.spec.name == r.name)
                    .filter(|x| version == "latest" || x.spec.version.as_str() == version)
                    .map(|x| {
                        let conditions = x.status.as_ref().map(|s| s.conditions.as_slice());
                        (x.name_any(), conditions, x.metadata.generation)
                    });
                let why = why_not_ready("Release", candidates);
                waiting.push(format!("release {}/{version}{why}", r.name));
            }
        }
    }
    let mut chosen_stemcells = Vec::new();
    for s in &manifest.stemcells {
        match pick_stemcell(stemcells, s) {
            Some(found) => chosen_stemcells.push(found.clone()),
            None => {
                let version = s.version.as_ref().map_or("latest", |v| v.as_str());
                let what = s.name.as_deref().or(s.os.as_deref()).unwrap_or(&s.alias);
                let candidates = (stemcells.iter())
                    .filter(|x| s.name.as_ref().is_some_and(|n| &x.spec.name == n))
                    .filter(|x| version == "latest" || x.spec.version.as_str() == version)
                    .map(|x| {
                        let conditions = x.status.as_ref().map(|s| s.conditions.as_slice());
                        (x.name_any(), conditions, x.metadata.generation)
                    });
                let why = why_not_ready("Stemcell", candidates);
                waiting.push(format!("stemcell {what}/{version}{why}"));
            }
        }
    }
    if waiting.is_empty() {
        Ok((chosen_releases, chosen_stemcells))
    } else {
        Err(waiting)
    }
}

/// ` (Release ns/x is Stalled: InvalidTarball: ...)` for the resources of that name and
/// version that exist but are not Ready, or nothing.
fn why_not_ready<'a>(
    kind: &str,
    candidates: impl Iterator<Item = (String, Option<&'a [Condition]>, Option<i64>)>,
) -> String {
    let said: Vec<String> = candidates
        .map(|(name, conditions, generation)| {
            let why = conditions
                .and_then(|c| status::not_ready_because(c, generation))
                .unwrap_or_else(|| "not Ready yet".into());
            format!("{kind} {name}: {why}")
        })
        .collect();
    match said.as_slice() {
        [] => String::new(),
        _ => format!(" ({})", said.join("; ")),
    }
}

/// What a deployment still waits for: one line per release or stemcell of the manifest that
/// has no Ready resource in the namespace. Empty when everything is there.
pub fn waiting_for(
    manifest: &DeploymentManifest,
    releases: &[ReleaseResource],
    stemcells: &[StemcellResource],
) -> Vec<String> {
    choose(manifest, releases, stemcells)
        .err()
        .unwrap_or_default()
}
