//! What the local cloud does for a VM whose agent is the real bosh-agent with its dummy
//! platform, run by `kubosh vm run --dummy-disks` (`kubosh_bosh::agent::dummy`):
//!
//! - `detach_disk` first waits (bounded) until the launcher applied the agent's latest disk
//!   bookkeeping, so the copy of a migration and the unmount the Director sent before the
//!   detach are done when the disk leaves the VM.
//! - `reboot_vm` removes `managed_disk_settings.json` when the disk it names is no longer
//!   attached: the agent never clears that file and, at boot, fails for good when it cannot
//!   mount the disk it names ("Persistent disk with volume id ... could not be found").
//!   Upstream nothing clears it either; a VM rebooted by the IaaS after its disk was removed
//!   stays down until the Director's resurrector (or `bosh cck`) recreates it, on a fresh
//!   root disk without the file. The local cloud's reboot keeps the root, so it does the
//!   fresh disk's part.

use std::path::Path;
use std::time::{Duration, Instant};

use kubosh_bosh::agent::dummy::{self, LauncherState};

use super::process::{self, ProcessRecord};
use super::settings::VmPaths;

/// How long `detach_disk` waits for a VM's launcher to catch up.
pub const CATCH_UP: Duration = Duration::from_secs(10);

/// Waits until the launcher of a VM (when it has one, and it runs) applied the agent's
/// current disk files; false when it did not within `limit`.
pub fn wait_for_launcher(paths: &VmPaths, agent: Option<&ProcessRecord>, limit: Duration) -> bool {
    let state_file = paths.dir.join(dummy::LAUNCHER_STATE);
    if !state_file.exists() || !agent.is_some_and(process::is_alive) {
        return true;
    }
    let bosh = paths.root().join("bosh");
    let deadline = Instant::now() + limit;
    loop {
        let current = dummy::fingerprint(
            read(&bosh.join(dummy::MOUNTS)).as_deref(),
            read(&bosh.join(dummy::DISK_MIGRATIONS)).as_deref(),
        );
        let applied = read(&state_file)
            .and_then(|b| serde_json::from_slice::<LauncherState>(&b).ok())
            .map(|s| s.applied);
        if applied.as_deref() == Some(current.as_str()) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes the agent's `managed_disk_settings.json` when it names a disk not in `attached`;
/// the removed cid, if any.
pub fn forget_detached_managed_disk(
    root: &Path,
    attached: &[String],
) -> std::io::Result<Option<String>> {
    let file = root.join("bosh").join(dummy::MANAGED_DISK_SETTINGS);
    let cid = match std::fs::read_to_string(&file) {
        Ok(cid) => cid.trim().to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if cid.is_empty() || attached.contains(&cid) {
        return Ok(None);
    }
    std::fs::remove_file(&file)?;
    Ok(Some(cid))
}

fn read(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_detached_managed_disk_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("bosh")).unwrap();
        assert_eq!(forget_detached_managed_disk(root, &[]).unwrap(), None);
        let file = root.join("bosh").join(dummy::MANAGED_DISK_SETTINGS);
        std::fs::write(&file, "disk-1").unwrap();
        assert_eq!(
            forget_detached_managed_disk(root, &["disk-1".into()]).unwrap(),
            None
        );
        assert!(file.exists());
        assert_eq!(
            forget_detached_managed_disk(root, &["disk-2".into()]).unwrap(),
            Some("disk-1".into())
        );
        assert!(!file.exists());
    }
}
