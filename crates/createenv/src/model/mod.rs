//! The create-env model (`bosh create-env`, the bosh-init single-VM flow), pure: the
//! manifest split into the deployment and the CPI installation ([`split`]), the state file
//! bosh-cli keeps next to the manifest ([`state`]), and the decisions the flow takes from
//! them: skip the deploy, what to do with the persistent disk, what is unused
//! ([`decide`]).

pub mod decide;
pub mod packages;
pub mod sha;
pub mod split;
pub mod state;

pub use decide::{DiskAction, disk_action, needs_migration};
pub use packages::{NeededPackage, PackagesError, needed_packages, needed_packages_by_name};
pub use sha::manifest_sha;
pub use split::{
    CpiInstallation, DiskSpec, EnvDeployment, EnvManifest, ReleaseSource, SplitError, split,
};
pub use state::{DiskRecord, EnvState, ReleaseRecord, StemcellRecord};
