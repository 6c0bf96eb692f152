//! The Kubernetes API of kubosh: group `kubosh.io`, version `v1alpha1`.
//!
//! | Kind              | Plural             | Short   | Written by | What it is                       |
//! |-------------------|--------------------|---------|------------|----------------------------------|
//! | [`Deployment`]    | `boshdeployments`  | `bd`    | you        | a manifest, ops and vars         |
//! | [`CloudConfig`]   | `cloudconfigs`     | `bcc`   | you        | AZs, networks, VM/disk types     |
//! | [`RuntimeConfig`] | `runtimeconfigs`   | `brc`   | you        | addons for every deployment      |
//! | [`CpiConfig`]     | `cpiconfigs`       | `bcpi`  | you        | named CPIs the AZs name          |
//! | [`Release`]       | `releases`         | `brel`  | you        | a release tarball to upload      |
//! | [`Stemcell`]      | `stemcells`        | `bsc`   | you        | a stemcell tarball to upload     |
//! | [`Instance`]      | `instances`        | `binst` | kubosh     | one VM slot of a deployment      |
//! | [`Disk`]          | `disks`            | `bdisk` | kubosh     | a persistent disk, maybe orphaned|
//! | [`CompiledPackage`]| `compiledpackages`| `bcp`   | kubosh     | a compiled-package cache entry   |
//! | [`ErrandRun`]     | `errandruns`       | `berr`  | you        | one run of a deployment's errand |
//!
//! All are namespaced and in the category `bosh` (`kubectl get bosh` lists them all). Our own
//! fields are camelCase, as Kubernetes has it; the BOSH documents embedded in them (the
//! deployment manifest, the cloud and runtime configs) keep BOSH's snake_case so they can be pasted in.
//!
//! Where state lives: a `status` holds only what kubosh can observe or derive again (it is
//! not kept by backups or `clusterctl move`-style migrations). Identifiers only the IaaS
//! knows (VM, disk and stemcell CIDs, agent IDs, IPs, blobstore IDs) are written by kubosh
//! into the *spec* of the resource they belong to ([`Instance`], [`Disk`], [`Stemcell`],
//! [`CompiledPackage`]).
//!
//! [`crds`] is the single source of the CRD manifests in `crds/` (`kubosh crd --write crds/`).

// `#[kube(printcolumn(type_ = "string", ...), printcolumn(type_ = "string", ...))]` repeats
// arguments by design; clippy's `duplicated_attributes` mistakes them for duplicates.
#![allow(clippy::duplicated_attributes)]

mod cloud_config;
mod compiled_package;
pub mod condition;
mod cpi_config;
mod deployment;
mod disk;
mod errand_run;
mod instance;
mod release;
mod runtime_config;
mod schema;
mod stemcell;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use cloud_config::{CloudConfig, CloudConfigSpec, CloudConfigStatus};
pub use compiled_package::{CompiledPackage, CompiledPackageSpec};
pub use cpi_config::{CpiConfig, CpiConfigSpec};
pub use deployment::{
    CloudConfigRef, DeletionPolicy, Deployment, DeploymentSpec, DeploymentStatus,
    InstanceGroupStatus, Operation, OperationType, ProblemStatus, Progress, RuntimeConfigRef,
    TaskState, TaskSummary, VarsKeyRef, VarsSource,
};
pub use disk::{Disk, DiskSpec};
pub use errand_run::{
    ErrandInstanceResult, ErrandPhase, ErrandRun, ErrandRunSpec, ErrandRunStatus,
};
pub use instance::{
    DiskUsage, Instance, InstanceNetwork, InstanceSpec, InstanceState, InstanceStatus,
    InstanceVitals, Process, ProcessState, RECORD_ANNOTATION,
};
pub use release::{Release, ReleaseItem, ReleaseSpec, ReleaseStatus, StemcellVersion};
pub use runtime_config::{RuntimeConfig, RuntimeConfigSpec};
pub use stemcell::{
    CID_ANNOTATION, OS_ANNOTATION, Stemcell, StemcellSpec, StemcellStatus, cid_annotation,
    recorded_cids,
};

use schema::{Tweaks, finish};

/// The API group of every kubosh kind.
pub const GROUP: &str = "kubosh.io";

/// The API version of every kubosh kind.
pub const VERSION: &str = "v1alpha1";

/// Labels kubosh puts on the resources it creates ([`Instance`], [`Disk`]).
pub mod labels {
    /// Name of the `Deployment` the resource belongs to.
    pub const DEPLOYMENT: &str = "kubosh.io/deployment";
    /// Name of the instance group (in the manifest) the resource belongs to.
    pub const INSTANCE_GROUP: &str = "kubosh.io/instance-group";
    /// Index of the instance within its group, in decimal.
    pub const INDEX: &str = "kubosh.io/index";
}

/// The embedded deployment manifest (`spec.manifest`) is stored as written, and its keyed
/// lists merge item by item under server-side apply. Each key is a required field (the
/// apiserver insists) and BOSH rejects duplicates anyway.
const DEPLOYMENT_TWEAKS: Tweaks = Tweaks {
    verbatim: &["spec.manifest"],
    keyed: &[
        ("spec.manifest.releases", &["name"]),
        ("spec.manifest.stemcells", &["alias"]),
        ("spec.manifest.instance_groups", &["name"]),
        ("spec.manifest.instance_groups[].jobs", &["name"]),
        ("spec.manifest.instance_groups[].networks", &["name"]),
        (
            "spec.manifest.instance_groups[].persistent_disks",
            &["name"],
        ),
        ("spec.manifest.addons", &["name"]),
        ("spec.manifest.addons[].jobs", &["name"]),
        ("spec.manifest.variables", &["name"]),
    ],
};

/// The embedded cloud config is the whole spec; the same rules as for the manifest.
const CLOUD_CONFIG_TWEAKS: Tweaks = Tweaks {
    verbatim: &["spec"],
    keyed: &[
        ("spec.azs", &["name"]),
        ("spec.vm_types", &["name"]),
        ("spec.vm_extensions", &["name"]),
        ("spec.disk_types", &["name"]),
        ("spec.networks", &["name"]),
    ],
};

/// The embedded runtime config is the whole spec; the same rules as for the manifest.
const RUNTIME_CONFIG_TWEAKS: Tweaks = Tweaks {
    verbatim: &["spec"],
    keyed: &[
        ("spec.releases", &["name"]),
        ("spec.addons", &["name"]),
        ("spec.addons[].jobs", &["name"]),
        ("spec.variables", &["name"]),
    ],
};

/// The embedded CPI config's list of CPIs, as written and keyed by name.
const CPI_CONFIG_TWEAKS: Tweaks = Tweaks {
    verbatim: &["spec.cpis"],
    keyed: &[("spec.cpis", &["name"])],
};

/// Every CustomResourceDefinition kubosh serves, in a fixed order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let none = Tweaks::default();
    vec![
        finish(Deployment::crd(), &DEPLOYMENT_TWEAKS),
        finish(CloudConfig::crd(), &CLOUD_CONFIG_TWEAKS),
        finish(RuntimeConfig::crd(), &RUNTIME_CONFIG_TWEAKS),
        finish(CpiConfig::crd(), &CPI_CONFIG_TWEAKS),
        finish(Release::crd(), &none),
        finish(Stemcell::crd(), &none),
        finish(Instance::crd(), &none),
        finish(Disk::crd(), &none),
        finish(CompiledPackage::crd(), &none),
        finish(ErrandRun::crd(), &none),
    ]
}

/// The first line of every file [`crd_files`] makes.
pub const GENERATED_HEADER: &str =
    "# Generated from src/api by `cargo run -q -- crd --write crds/`. Do not edit.\n";

/// Every CRD as `(file name, YAML text)`, the file named after the CRD
/// (`boshdeployments.kubosh.io.yaml`) and starting with [`GENERATED_HEADER`], in the order of
/// [`crds`]. This is what `crds/` holds.
pub fn crd_files() -> Result<Vec<(String, String)>, kubosh_base::yaml::YamlError> {
    Ok(documents()?
        .into_iter()
        .map(|(name, yaml)| (format!("{name}.yaml"), format!("{GENERATED_HEADER}{yaml}")))
        .collect())
}

/// All CustomResourceDefinitions kubosh serves, as one multi-document YAML text.
pub fn crds_yaml() -> Result<String, kubosh_base::yaml::YamlError> {
    let docs: Vec<String> = documents()?.into_iter().map(|(_, yaml)| yaml).collect();
    Ok(docs.join("---\n"))
}

/// Every CRD as `(metadata.name, YAML document)`.
fn documents() -> Result<Vec<(String, String)>, kubosh_base::yaml::YamlError> {
    crds()
        .iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            Ok((name, kubosh_base::yaml::to_string(crd)?))
        })
        .collect()
}

#[cfg(test)]
mod tests;
