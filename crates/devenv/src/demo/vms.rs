//! The local cloud's VMs between runs: powered off (every agent and its jobs stopped, the
//! VM kept) when the stack stops, booted again through the CPI when it starts.

use std::path::Path;
use std::time::Duration;

use kubosh_cloud::{CpiCommand, ExternalCpi, local};

use crate::LocalDirector;

/// Why VMs could not be powered on or off.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// The local cloud's state could not be read.
    #[error("the local cloud's inventory: {0}")]
    Inventory(std::io::Error),
    /// A VM could not be booted.
    #[error(transparent)]
    Boot(#[from] local::BootError),
}

/// How long a VM's agent gets to stop its jobs before its session is killed.
const POWER_OFF_GRACE: Duration = Duration::from_secs(20);

/// Boots every VM of `director`'s local cloud whose agent is not running, with the CPI's
/// `reboot_vm` (`kubosh cpi`, as the director calls it): its agent starts again with the
/// settings it was created with and starts its jobs, as after a reboot. VMs whose agents
/// still run (a run that was killed rather than stopped) are left as they are. The VMs
/// booted, by CID.
pub async fn power_on_vms(director: &LocalDirector, kubosh: &Path) -> Result<Vec<String>, VmError> {
    let cpi = ExternalCpi::new(
        CpiCommand::new(kubosh)
            .args([
                "cpi".to_string(),
                "--config".into(),
                director.cpi_config().display().to_string(),
            ])
            .timeout(Duration::from_secs(120))
            .current_dir(director.dir()),
        "kubosh-up",
    );
    Ok(local::boot_stopped_vms(&cpi, &director.cloud()).await?)
}

/// Stops the agent of every VM of `director`'s local cloud and all its processes (the jobs),
/// keeping the VMs, their disks and settings: what shutting a host down does to its VMs.
pub fn power_off_vms(director: &LocalDirector) -> Result<(), VmError> {
    let cloud = director.cloud();
    if !cloud.exists() {
        return Ok(());
    }
    local::stop_all_agents(&cloud, POWER_OFF_GRACE).map_err(VmError::Inventory)
}
