//! `create-env`, stage by stage as bosh-cli runs it (seed 002; the research notes §1–§6).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::install::Installation;
use crate::install::{cloud, install_cpi, renderer, validate_cpi_release};
use crate::instance::{NEW_AGENT_WAIT, Session};
use crate::jobs::JobsInput;
use crate::model::{
    EnvManifest, ReleaseRecord, ReleaseSource, StemcellRecord, disk_action, manifest_sha, split,
};
use crate::store::{EnvIntent, StateFile};
use crate::{EnvError, EnvInput, Ui, redact_url, run, step};
use kubosh_artifacts::release::{Release, ReleaseFile};
use kubosh_artifacts::stemcell::{Stemcell, StemcellManifest};
use kubosh_cloud::{Cloud, CreateStemcell};
use kubosh_core::validate;
use kubosh_engine::lock::{FileLocks, Guard, Holder, Lock};
use kubosh_transport::agent::HttpsTransport;

/// bosh-cli's only Skipping-deploy text.
pub const SKIPPING_DEPLOY: &str = "No deployment, stemcell or release changes. Skipping deploy.";

/// How `create-env` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deployed {
    /// Deployed; the VM.
    Deployed {
        /// The VM's CID.
        vm_cid: String,
    },
    /// Nothing changed: no CPI or agent call was made.
    Skipped,
}

/// The manifest, validated and split, with what it names read from disk.
pub(super) struct Inputs {
    pub env: EnvManifest,
    pub sha: String,
    pub releases: Vec<Release>,
}

/// Validates the manifest (every problem at once) and splits it.
pub(super) fn validate_manifest(input: &EnvInput) -> Result<(EnvManifest, String), EnvError> {
    let manifest = kubosh_base::yaml::plain(input.manifest.clone()).map_err(|e| {
        let mut problems = validate::Problems::default();
        let path = validate::Path::parse(&e.path).unwrap_or_else(validate::Path::root);
        problems.error(validate::Document::Manifest, path, e.reason());
        EnvError::Invalid(problems)
    })?;
    let validated = validate::init_manifest(&manifest).map_err(EnvError::Invalid)?;
    let env = split(&validated.document).map_err(|e| {
        let mut problems = validate::Problems::default();
        let path = validate::Path::parse(&e.path).unwrap_or_else(validate::Path::root);
        problems.error(validate::Document::Manifest, path, e.message);
        EnvError::Invalid(problems)
    })?;
    if env.installation.ca.is_none() {
        let mut p = validate::Problems::default();
        p.error(
            validate::Document::Manifest,
            validate::Path::root()
                .key("cloud_provider")
                .key("cert")
                .key("ca"),
            "is required: kubosh verifies the agent's mbus certificate against it",
        );
        return Err(EnvError::Invalid(p));
    }
    Ok((env, manifest_sha(&input.manifest)))
}

/// The local file of a tarball: a `file://` URL or a path (relative to the manifest's
/// directory), or an `http(s)://` URL downloaded once into `~/.kubosh/downloads` (named by
/// the URL's and the digest's SHA-1, as bosh-cli's `~/.bosh/downloads`) and checked against
/// `sha1`, which such a URL needs.
pub(super) async fn local_path(
    input: &EnvInput,
    url: &str,
    sha1: Option<&str>,
    what: &str,
) -> Result<PathBuf, EnvError> {
    if url.starts_with("http://") || url.starts_with("https://") {
        return download(input, url, sha1, what).await;
    }
    let rest = url.strip_prefix("file://").unwrap_or(url);
    let path = Path::new(rest);
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        input.manifest_dir().join(path)
    })
}

/// [`local_path`] of an `http(s)://` URL.
async fn download(
    input: &EnvInput,
    url: &str,
    sha1: Option<&str>,
    what: &str,
) -> Result<PathBuf, EnvError> {
    let failed = |reason: String| EnvError::Artifact {
        what: what.to_string(),
        reason,
    };
    let Some(sha1) = sha1 else {
        return Err(failed(format!(
            "{url} is downloaded, so the manifest must give its sha1"
        )));
    };
    let dir = input.home.join("downloads");
    let cached = dir.join(format!(
        "{}-{}",
        kubosh_base::digest::sha1_hex(url.as_bytes()),
        kubosh_base::digest::sha1_hex(sha1.as_bytes())
    ));
    if cached.is_file() {
        return Ok(cached);
    }
    std::fs::create_dir_all(&dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
    let fetched = kubosh_artifacts::fetch::fetch(url, &Default::default(), &dir)
        .await
        .map_err(|e| failed(e.to_string()))?;
    if let Err(e) = fetched.check(sha1) {
        let _ = std::fs::remove_file(&fetched.path);
        return Err(failed(format!("{url}: {e}")));
    }
    std::fs::rename(&fetched.path, &cached)
        .map_err(|e| failed(format!("{}: {e}", cached.display())))?;
    Ok(cached)
}

/// Reads each release tarball of `sources`, a `Validating release '<name>'` step each.
pub(super) async fn read_releases(
    ui: &Ui,
    input: &EnvInput,
    sources: impl IntoIterator<Item = &ReleaseSource>,
) -> Result<Vec<Release>, EnvError> {
    let mut releases = Vec::new();
    for source in sources {
        let step = format!("Validating release '{}'", source.name);
        releases.push(run(ui, &step, read_release(input, source)).await?);
    }
    Ok(releases)
}

/// Reads one release tarball.
async fn read_release(input: &EnvInput, source: &ReleaseSource) -> Result<Release, EnvError> {
    let what = format!("Validating release '{}'", source.name);
    let url = source.url.as_deref().ok_or_else(|| EnvError::Artifact {
        what: what.clone(),
        reason: "the release has no url".into(),
    })?;
    let path = local_path(input, url, source.sha1.as_deref(), &what).await?;
    let release = Release::read(&path).map_err(|e| EnvError::Artifact {
        what: what.clone(),
        reason: format!("{}: {e}", path.display()),
    })?;
    if release.name() != source.name {
        return Err(EnvError::Artifact {
            what,
            reason: format!(
                "{} is release '{}', the manifest names it '{}'",
                path.display(),
                release.name(),
                source.name
            ),
        });
    }
    Ok(release)
}

/// The two lines every run starts with.
pub(super) fn header(input: &EnvInput, ui: &Ui) {
    ui.line(format!(
        "Deployment manifest: '{}'",
        input.manifest_path.display()
    ));
    ui.line(format!(
        "Deployment state: '{}'",
        input.state_path.display()
    ));
}

/// The state file, locked for the run, with an installation id (given on first use, as
/// bosh-cli's target provider does).
pub(super) async fn open_state(input: &EnvInput) -> Result<(Guard, StateFile), EnvError> {
    let guard = lock(input).await?;
    let mut file = StateFile::load(&input.state_path)?;
    if file.state().installation_id.is_empty() {
        file.update(|s| s.installation_id = kubosh_base::ids::uuid_v4())?;
    }
    Ok((guard, file))
}

/// Takes the state file's lock for the whole run: two runs on one environment would each
/// create a VM.
async fn lock(input: &EnvInput) -> Result<Guard, EnvError> {
    let canonical = std::fs::canonicalize(input.state_path.parent().unwrap_or(Path::new(".")))
        .unwrap_or_default()
        .join(input.state_path.file_name().unwrap_or_default());
    let name = format!("lock:create-env:{}", canonical.display());
    let holder = Holder::new(std::process::id().to_string(), "create-env");
    FileLocks::new(input.home.join("locks"))
        .acquire(&name, &holder, Duration::ZERO)
        .await
        .map_err(|e| EnvError::Locked(e.to_string()))
}

fn session_director(file: &StateFile) -> String {
    file.state().director_id.clone()
}

/// The agent's HTTPS mbus client: `cloud_provider.mbus`, trusting `cloud_provider.cert.ca`.
pub(super) fn transport(
    cpi: &crate::model::CpiInstallation,
    director_id: &str,
) -> Result<HttpsTransport, EnvError> {
    // Validation made sure there is one.
    let ca = cpi.ca.clone().unwrap_or_default();
    HttpsTransport::new(cpi.mbus.expose(), &ca, director_id)
        .map_err(|e| EnvError::Blob(format!("cloud_provider.mbus: {e}")))
}

/// `create-env`.
pub async fn create_env(input: &EnvInput, ui: &Ui) -> Result<Deployed, EnvError> {
    header(input, ui);
    let (_lock, file) = open_state(input).await?;

    let (inputs, stemcell_path, stemcell) = ui
        .stage("validating", async {
            // The manifest names the releases, so it is read first; its step comes where
            // bosh-cli shows it (after the releases) unless it fails.
            let manifest_step = "Validating deployment manifest";
            let (env, sha) = match validate_manifest(input) {
                Ok(valid) => valid,
                Err(e) => return run(ui, manifest_step, async { Err(e) }).await,
            };
            let releases = read_releases(ui, input, &env.releases).await?;
            run(ui, "Validating cpi release", async {
                validate_cpi_release(&env.installation, &releases).map(|_| ())
            })
            .await?;
            run(ui, manifest_step, async { Ok(()) }).await?;
            let stemcell_url = env.deployment.stemcell.url.clone().unwrap_or_default();
            let stemcell_sha1 = env.deployment.stemcell.sha1.clone();
            let (path, manifest) = run(ui, "Validating stemcell", async {
                let path = local_path(
                    input,
                    &stemcell_url,
                    stemcell_sha1.as_deref(),
                    "Validating stemcell",
                )
                .await?;
                let stemcell = Stemcell::read(&path).map_err(|e| EnvError::Artifact {
                    what: "Validating stemcell".into(),
                    reason: e.to_string(),
                })?;
                Ok((path, stemcell.manifest))
            })
            .await?;
            Ok::<_, EnvError>((Inputs { env, sha, releases }, path, manifest))
        })
        .await?;

    let release_versions: Vec<(String, String)> = inputs
        .releases
        .iter()
        .map(|r| (r.name().to_string(), r.version().to_string()))
        .collect();
    // A killed run's pending creations are settled by a deploy, never skipped over.
    if !input.recreate
        && !input.recreate_persistent_disks
        && file.intents().is_empty()
        && file.state().is_deployed(
            &inputs.sha,
            &release_versions,
            (&stemcell.name, &stemcell.version),
        )
    {
        ui.line(SKIPPING_DEPLOY);
        return Ok(Deployed::Skipped);
    }
    if inputs.env.installation.ssh_tunnel {
        ui.line(
            "cloud_provider.ssh_tunnel is not used: with CPI API v2 the agent gets its settings with create_vm, so no registry runs and no tunnel to it is needed",
        );
    }

    let installation = Installation::new(input.installation_dir(&file.state().installation_id));
    let renderer = renderer(&input.home)?;
    let cpi_job = validate_cpi_release(&inputs.env.installation, &inputs.releases)?.clone();
    let bin = ui
        .stage(
            "installing CPI",
            install_cpi(
                ui,
                &installation,
                &renderer,
                &inputs.env.installation,
                &cpi_job,
                &inputs.releases,
                &inputs.env.name,
            ),
        )
        .await?;
    let result = deploy(
        input,
        ui,
        file,
        &installation,
        bin,
        inputs,
        stemcell_path,
        stemcell,
    )
    .await;
    let cleanup = run(ui, "Cleaning up rendered CPI jobs", async {
        installation.remove_jobs().map_err(EnvError::from)
    })
    .await;
    let deployed = result?;
    cleanup?;
    Ok(deployed)
}

#[allow(clippy::too_many_arguments)]
async fn deploy(
    input: &EnvInput,
    ui: &Ui,
    file: StateFile,
    installation: &Installation,
    bin: PathBuf,
    inputs: Inputs,
    stemcell_path: PathBuf,
    stemcell: StemcellManifest,
) -> Result<Deployed, EnvError> {
    let api_version = stemcell.api_version.filter(|v| *v > 0).or(Some(1));
    let cloud = cloud(installation, bin, &file.state().director_id, api_version).await?;
    let cpi = &inputs.env.installation;
    let transport = transport(cpi, &session_director(&file))?;
    let mut session = Session {
        ui: ui.clone(),
        cloud,
        file,
        transport,
        mbus: redact_url(cpi.mbus.expose()),
        skip_drain: input.skip_drain,
    };
    session.recover().await?;

    let stemcell_name = format!("{}/{}", stemcell.name, stemcell.version);
    let stemcell_record = upload_stemcell(
        &mut session,
        ui,
        installation,
        &stemcell_path,
        &stemcell,
        &stemcell_name,
    )
    .await?;
    let vm = ui
        .stage(
            "deploying",
            deploy_vm(
                &mut session,
                ui,
                input,
                &inputs,
                &stemcell_record,
                &stemcell_name,
            ),
        )
        .await?;

    for unused in session.file.state().unused_stemcells() {
        session
            .delete_stemcell(&unused, "Deleting unused stemcell")
            .await?;
    }
    Ok(Deployed::Deployed { vm_cid: vm })
}

/// The stemcell named `stemcell_name`, unless the state has it: extracted next to the
/// installation, created in the cloud (an intent covers the call) and recorded.
async fn upload_stemcell(
    session: &mut Session,
    ui: &Ui,
    installation: &Installation,
    stemcell_path: &Path,
    stemcell: &StemcellManifest,
    stemcell_name: &str,
) -> Result<StemcellRecord, EnvError> {
    let existing = session
        .file
        .state()
        .stemcell(&stemcell.name, &stemcell.version)
        .cloned();
    if let Some(record) = existing {
        return step(
            ui,
            &format!("Uploading stemcell '{stemcell_name}'"),
            async { Ok((record, Some("Stemcell already uploaded".to_string()))) },
        )
        .await;
    }
    let tmp = installation.tmp_dir().join("stemcell");
    run(
        ui,
        &format!("Uploading stemcell '{stemcell_name}'"),
        async {
            let extracted =
                Stemcell::extract(stemcell_path, &tmp).map_err(|e| EnvError::Artifact {
                    what: "Uploading stemcell".into(),
                    reason: e.to_string(),
                })?;
            let request_id = kubosh_base::ids::uuid_v4();
            let intent = EnvIntent::CreateStemcell {
                stemcell: stemcell_name.to_string(),
                request_id: request_id.clone(),
            };
            session.file.add_intent(intent.clone())?;
            let request = CreateStemcell {
                image_path: extracted.image_path.clone(),
                cloud_properties: stemcell.cloud_properties.clone(),
            };
            let cid = session
                .cloud
                .create_stemcell_with_request_id(&request, &request_id)
                .await?;
            let record = StemcellRecord {
                id: kubosh_base::ids::uuid_v4(),
                name: stemcell.name.clone(),
                version: stemcell.version.clone(),
                api_version: stemcell.api_version.unwrap_or(0),
                cid: cid.0,
            };
            let saved = record.clone();
            session.file.update(|s| s.add_stemcell(saved))?;
            session.file.remove_intent(&intent)?;
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(record)
        },
    )
    .await
}

/// The "deploying" stage: the VM replaced, its agent awaited, the disk attached, the jobs
/// updated and the deploy recorded. Returns the VM's CID.
async fn deploy_vm(
    session: &mut Session,
    ui: &Ui,
    input: &EnvInput,
    inputs: &Inputs,
    stemcell_record: &StemcellRecord,
    stemcell_name: &str,
) -> Result<String, EnvError> {
    let d = &inputs.env.deployment;
    session.file.update(|s| s.start_deploy())?;
    session.delete_current_vm().await?;
    let (agent_id, vm) = session
        .create_vm(d, &stemcell_record.id, &stemcell_record.cid)
        .await?;
    run(
        ui,
        &format!("Waiting for the agent on VM '{vm}' to be ready"),
        async { session.wait_for_agent(&vm, NEW_AGENT_WAIT).await },
    )
    .await?;
    let action = disk_action(
        session.file.state(),
        d.disk.as_ref(),
        input.recreate_persistent_disks,
    );
    session.deploy_disk(d, &vm, action).await?;
    let jobs = JobsInput {
        deployment: d,
        releases: &inputs.releases,
        renderer: &renderer(&input.home)?,
        cache_dir: input.home.join("cache").join("compiled"),
        stemcell: stemcell_name.to_string(),
    };
    session.update_jobs(&jobs, &agent_id).await?;
    let releases: Vec<ReleaseRecord> = inputs
        .releases
        .iter()
        .map(|r| ReleaseRecord {
            id: kubosh_base::ids::uuid_v4(),
            name: r.name().to_string(),
            version: r.version().to_string(),
        })
        .collect();
    let sha = inputs.sha.clone();
    session.file.update(|s| s.finish_deploy(&sha, releases))?;
    Ok(vm)
}
