//! The one-command demo's local stack (`kubosh up`): everything a BOSH deployment on the
//! local cloud needs, started from one state directory and stopped in order, kept between
//! runs so a second start reuses it.
//!
//! ```text
//! <state>/control-plane/   etcd's data, the apiserver's credentials, logs, `kubeconfig`
//! <state>/director.yml ... a [`LocalDirector`](crate::LocalDirector): NATS PKI and server,
//!                          the local cloud (cpi.json, cloud/), blobs/, state/
//! <state>/artifacts/       the example release and the stemcell, built once
//! <state>/manifests/       the Release and Stemcell objects that name them
//! <state>/controller.log   `kubosh controller`'s log
//! <state>/ports.json       the ports of the last run, used again when free
//! ```
//!
//! Between runs the VMs are powered off, not deleted: stopping the stack stops every VM's
//! agent and its jobs (the VM records, disks and compiled packages stay), and the next start
//! boots them again through the CPI's `reboot_vm` before the controller starts. The agents
//! start their jobs as they do after a reboot, the controller finds the generation it
//! deployed and deploys nothing, and the instances answer again within seconds.

mod artifacts;
mod layout;
mod ports;
mod stack;
mod vms;

pub use artifacts::{
    Artifact, ArtifactError, TarballSource, example_objects, example_release_artifact,
    local_stemcell_artifact,
};
pub use layout::DemoLayout;
pub use ports::{DemoPorts, PortsError};
pub use stack::{DemoError, Ended, Stack};
pub use vms::{VmError, power_off_vms, power_on_vms};
