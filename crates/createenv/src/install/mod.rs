//! Installing the CPI on this machine (seed step 2, the research notes §2): the CPI jobs'
//! packages compiled and installed, the jobs rendered with `cloud_provider.properties`, and
//! the cloud their `bin/cpi` is, checked to speak CPI API v2. The installation directory
//! itself, its package compilation and its index are [`Installation`].

mod archive;
mod installation;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;

pub use installation::{InstallError, Installation, LocalCompiled};

use crate::model::{CpiInstallation, needed_packages_by_name};
use crate::{EnvError, Ui, run};
use kubosh_artifacts::release::Release;
use kubosh_artifacts::render::{
    InstanceGroupSpec, JobTemplates, NetworkSpec, PropertyBinder, ReleaseRef, RenderUnit,
    RenderedJob, Renderer, RendererConfig, TemplateSpec,
};
use kubosh_cloud::{Cloud, CpiCommand, EnvMode, ExternalCpi};
use kubosh_core::manifest::{CpiTemplate, Map};

/// Where a CPI job's executable is rendered to.
const CPI_TEMPLATE: &str = "bin/cpi";

/// How long one CPI call may take (bosh-cli has no limit; a stemcell upload can be slow).
const CPI_TIMEOUT: Duration = Duration::from_secs(3600);

/// The release a CPI job comes from, by its manifest name.
fn release_of<'a>(releases: &'a [Release], name: &str) -> Result<&'a Release, EnvError> {
    releases.iter().find(|r| r.name() == name).ok_or_else(|| {
        EnvError::CpiRelease(format!(
            "cloud_provider.template.release '{name}' must refer to a release in releases"
        ))
    })
}

/// bosh-cli's `ValidateCpiRelease`: across the CPI jobs exactly one has a template that
/// renders to `bin/cpi`. Answers that job.
pub(super) fn validate_cpi_release<'a>(
    cpi: &'a CpiInstallation,
    releases: &[Release],
) -> Result<&'a CpiTemplate, EnvError> {
    let mut with_cpi = Vec::new();
    let mut inspected = Vec::new();
    for t in &cpi.jobs {
        let release = release_of(releases, &t.release)?;
        let job = release.job(&t.name).ok_or_else(|| {
            EnvError::CpiRelease(format!(
                "Job '{}' not found in release '{}' (cloud_provider.template)",
                t.name, t.release
            ))
        })?;
        inspected.push(t.release.clone());
        if job.spec.templates.values().any(|d| d == CPI_TEMPLATE) {
            with_cpi.push(t);
        }
    }
    match with_cpi.as_slice() {
        [one] => Ok(one),
        _ => Err(EnvError::CpiRelease(format!(
            "Found {} releases containing a template that renders to target '{CPI_TEMPLATE}'. Expected to find 1. Releases inspected: [{}]",
            with_cpi.len(),
            inspected.join(", ")
        ))),
    }
}

/// A renderer whose script lives under kubosh's home.
pub(super) fn renderer(home: &std::path::Path) -> Result<Renderer, EnvError> {
    Renderer::new(RendererConfig {
        cache_dir: home.join("cache").join("render"),
        concurrency: 1,
        ..RendererConfig::default()
    })
    .map_err(|e| EnvError::Render(e.to_string()))
}

/// Renders `jobs` (release, job) with create-env's template context: index 0, bootstrap,
/// a fresh id, az `unknown`, the given networks and address, properties bound from the
/// given global, group and job properties.
#[allow(clippy::too_many_arguments)]
pub(super) async fn render_jobs(
    renderer: &Renderer,
    deployment: &str,
    group: &str,
    jobs: &[(&Release, &str, Option<&Map>)],
    global: Option<&Map>,
    group_properties: Option<&Map>,
    networks: IndexMap<String, NetworkSpec>,
    ip: Option<String>,
    persistent_disk: u64,
) -> Result<Vec<RenderedJob>, EnvError> {
    let mut units = Vec::new();
    for (release, job_name, job_properties) in jobs {
        let job = release.job(job_name).ok_or_else(|| {
            EnvError::Render(format!(
                "Job '{job_name}' not found in release '{}'",
                release.name()
            ))
        })?;
        let release_ref = ReleaseRef {
            name: release.name().to_string(),
            version: release.version().to_string(),
        };
        let templates = JobTemplates::from_release_job(job, release_ref.clone())
            .map_err(|e| EnvError::Render(e.to_string()))?;
        let source =
            kubosh_artifacts::render::property_source(global, group_properties, *job_properties);
        let properties = PropertyBinder::new(&templates)
            .and_then(|b| b.bind(&source))
            .map_err(|e| EnvError::Render(e.to_string()))?;
        units.push(RenderUnit {
            job: Arc::new(templates),
            spec: TemplateSpec {
                deployment: deployment.to_string(),
                job: InstanceGroupSpec {
                    name: group.to_string(),
                    extra: Map::new(),
                },
                index: 0,
                bootstrap: true,
                name: group.to_string(),
                id: kubosh_base::ids::uuid_v4(),
                az: Some("unknown".into()),
                networks: networks.clone(),
                properties_need_filtering: true,
                dns_domain_name: "bosh".into(),
                persistent_disk,
                address: ip.clone(),
                ip: ip.clone(),
                properties,
                links: IndexMap::new(),
                release: release_ref,
            },
        });
    }
    let mut out = Vec::new();
    for result in renderer.render(&units, None).await {
        out.push(result.map_err(|e| EnvError::Render(e.to_string()))?);
    }
    Ok(out)
}

/// The CPI's template context networks: `default` with empty address fields, as bosh-cli.
fn cpi_networks() -> IndexMap<String, NetworkSpec> {
    let empty = || Some(String::new());
    IndexMap::from([(
        "default".to_string(),
        NetworkSpec {
            ip: empty(),
            netmask: empty(),
            gateway: empty(),
            ..NetworkSpec::default()
        },
    )])
}

/// The "installing CPI" stage: compile, install packages, render and install the jobs.
/// Answers the installed `bin/cpi`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn install_cpi(
    ui: &Ui,
    installation: &Installation,
    renderer: &Renderer,
    cpi: &CpiInstallation,
    cpi_job: &CpiTemplate,
    releases: &[Release],
    deployment: &str,
) -> Result<PathBuf, EnvError> {
    installation.prepare()?;
    let jobs: Vec<(&str, &str)> = cpi
        .jobs
        .iter()
        .map(|t| (t.release.as_str(), t.name.as_str()))
        .collect();
    let needed = needed_packages_by_name(releases, &jobs)
        .map_err(|e| EnvError::CpiRelease(e.to_string()))?;
    let mut compiled: BTreeMap<String, LocalCompiled> = BTreeMap::new();
    for package in &needed {
        let name = format!(
            "Compiling package '{}/{}'",
            package.name, package.fingerprint
        );
        let done = run(ui, &name, async {
            Ok::<_, EnvError>(installation.compile(package, &compiled).await?.0)
        })
        .await?;
        compiled.insert(package.name.clone(), done);
    }
    let all: Vec<LocalCompiled> = compiled.values().cloned().collect();
    run(ui, "Installing packages", async {
        installation.install_packages(&all).map_err(EnvError::from)
    })
    .await?;
    let properties = cpi.properties.expose();
    let job_refs: Vec<(&Release, &str, Option<&Map>)> = cpi
        .jobs
        .iter()
        .map(|t| Ok((release_of(releases, &t.release)?, t.name.as_str(), None)))
        .collect::<Result<_, EnvError>>()?;
    let rendered = run(ui, "Rendering job templates", async {
        // bosh-cli: cluster properties = cloud_provider.properties, no global, no job ones.
        render_jobs(
            renderer,
            deployment,
            &cpi_job.name,
            &job_refs,
            None,
            Some(properties),
            cpi_networks(),
            None,
            0,
        )
        .await
    })
    .await?;
    for job in &rendered {
        run(ui, &format!("Installing job '{}'", job.name), async {
            installation.install_job(job).map_err(EnvError::from)
        })
        .await?;
    }
    let bin = installation
        .jobs_dir()
        .join(&cpi_job.name)
        .join(CPI_TEMPLATE);
    if !bin.is_file() {
        return Err(EnvError::CpiRelease(format!(
            "Found 0 Jobs with a '{CPI_TEMPLATE}' binary. Expected 1."
        )));
    }
    Ok(bin)
}

/// The cloud behind the installed `bin/cpi`, as bosh-cli runs it (its environment plus
/// `BOSH_PACKAGES_DIR` and `BOSH_JOBS_DIR`), identifying as `director_id`, checked to speak
/// CPI API v2 with a stemcell of API version 2 or more.
pub(super) async fn cloud(
    installation: &Installation,
    bin: PathBuf,
    director_id: &str,
    stemcell_api_version: Option<u32>,
) -> Result<ExternalCpi, EnvError> {
    let command = CpiCommand::new(bin)
        .env_mode(EnvMode::Cli {
            packages_dir: Some(installation.packages_dir()),
            jobs_dir: Some(installation.jobs_dir()),
        })
        .timeout(CPI_TIMEOUT);
    let cloud = ExternalCpi::new(command, director_id)
        .with_min_api_version(1)
        .with_stemcell_api_version(stemcell_api_version);
    let info = cloud.info().await?;
    if info.api_version < 2 {
        return Err(EnvError::Unsupported(format!(
            "create-env requires CPI API v2 or greater (settings reach the VM with create_vm, so no registry or SSH tunnel is needed), the CPI reports API version {}: use a newer release of the CPI",
            info.api_version
        )));
    }
    if let Some(v) = stemcell_api_version
        && v < 2
    {
        return Err(EnvError::Unsupported(format!(
            "create-env requires a stemcell of API version 2 or greater (its agent reads settings the CPI writes at create_vm), the stemcell has API version {v}: use a newer stemcell"
        )));
    }
    Ok(cloud)
}

/// The stemcell API version a state's current stemcell has, for delete-env's cloud.
pub(super) fn api_version_of(value: u32) -> Option<u32> {
    (value > 0).then_some(value)
}
