//! `delete-env` (the research notes §5): the VM's jobs stopped, the VM, the disk and the
//! stemcell deleted, the unused ones too, then the CPI installation and the state file
//! removed, as bosh-cli leaves an environment: no state file at all.

use crate::deploy::{header, open_state, read_releases, transport, validate_manifest};
use crate::install::Installation;
use crate::install::{api_version_of, cloud, install_cpi, renderer, validate_cpi_release};
use crate::instance::Session;
use crate::store::StateFile;
use crate::{EnvError, EnvInput, Ui, redact_url, run};

/// bosh-cli's text when there is nothing to delete.
pub const NO_STATE: &str = "No deployment state file found.";

/// `delete-env`. Answers false when there was no state file.
pub async fn delete_env(input: &EnvInput, ui: &Ui) -> Result<bool, EnvError> {
    header(input, ui);
    if !StateFile::exists(&input.state_path) {
        ui.line(NO_STATE);
        return Ok(false);
    }
    let (_lock, file) = open_state(input).await?;
    let (env, releases, cpi_job) = ui
        .stage("validating", async {
            let (env, _) = validate_manifest(input)?;
            // Only the CPI's releases are read: the deployment's are not needed to delete.
            let cpi_releases = env
                .releases
                .iter()
                .filter(|r| env.installation.jobs.iter().any(|j| j.release == r.name));
            let releases = read_releases(ui, input, cpi_releases).await?;
            let cpi_job = run(ui, "Validating cpi release", async {
                validate_cpi_release(&env.installation, &releases).cloned()
            })
            .await?;
            Ok::<_, EnvError>((env, releases, cpi_job))
        })
        .await?;
    let installation = Installation::new(input.installation_dir(&file.state().installation_id));
    let renderer = renderer(&input.home)?;
    let bin = ui
        .stage(
            "installing CPI",
            install_cpi(
                ui,
                &installation,
                &renderer,
                &env.installation,
                &cpi_job,
                &releases,
                &env.name,
            ),
        )
        .await?;
    let result = delete(ui, file, &installation, bin, &env).await;
    let cleanup = run(ui, "Cleaning up rendered CPI jobs", async {
        installation.remove_jobs().map_err(EnvError::from)
    })
    .await;
    result?;
    cleanup?;
    Ok(true)
}

async fn delete(
    ui: &Ui,
    file: StateFile,
    installation: &Installation,
    bin: std::path::PathBuf,
    env: &crate::model::EnvManifest,
) -> Result<(), EnvError> {
    let api_version = file
        .state()
        .current_stemcell()
        .and_then(|s| api_version_of(s.api_version));
    let cloud = cloud(installation, bin, &file.state().director_id, api_version).await?;
    let cpi = &env.installation;
    let transport = transport(cpi, &file.state().director_id)?;
    let mut session = Session {
        ui: ui.clone(),
        cloud,
        file,
        transport,
        mbus: redact_url(cpi.mbus.expose()),
        skip_drain: false,
    };
    session.recover().await?;
    let current_disk = session.file.state().current_disk().cloned();
    let current_stemcell = session.file.state().current_stemcell().cloned();
    ui.stage("deleting deployment", async {
        session.delete_current_vm().await?;
        if let Some(disk) = &current_disk {
            session
                .delete_disk(disk, "Deleting disk", "Disk not found")
                .await?;
        }
        if let Some(stemcell) = &current_stemcell {
            session
                .delete_stemcell(stemcell, "Deleting stemcell")
                .await?;
        }
        Ok::<_, EnvError>(())
    })
    .await?;
    session.delete_unused_disks().await?;
    for stemcell in session.file.state().stemcells.clone().unwrap_or_default() {
        session
            .delete_stemcell(&stemcell, "Deleting unused stemcell")
            .await?;
    }
    run(
        ui,
        "Uninstalling local artifacts for CPI and deployment",
        async {
            installation.uninstall()?;
            session.file.remove()
        },
    )
    .await
}
