//! `Stemcell` (`stemcells.kubosh.io`): a stemcell tarball kubosh uploads to the IaaS.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kubosh_core::manifest::Version;

/// A stemcell to upload, like `bosh upload-stemcell URL --sha1 ... --name ... --version ...`.
///
/// One resource per stemcell version: name them e.g. `ubuntu-jammy-1.83`.
///
/// The annotations [`CID_ANNOTATION`] and [`OS_ANNOTATION`] are written by kubosh, not by
/// you: the IaaS's identifier of the uploaded image (what the CPI's `create_stemcell`
/// returned) and its OS. They live in metadata rather than the status because nothing can
/// derive them again (a status is not kept by backups or by moving resources between
/// clusters, and losing the CID would leak the image in the IaaS), and rather than the spec
/// so that writing them neither bumps the generation nor fights the spec's owner (GitOps).
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "Stemcell",
    plural = "stemcells",
    shortname = "bsc",
    category = "bosh",
    namespaced,
    status = "StemcellStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A BOSH stemcell version (the base VM image of instances) that Deployments in this \
           namespace can use; kubosh downloads it, checks its digest and uploads it to the IaaS.",
    printcolumn(name = "Stemcell", type_ = "string", json_path = ".spec.name"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "OS", type_ = "string", json_path = ".status.os"),
    printcolumn(
        name = "CID",
        type_ = "string",
        json_path = ".metadata.annotations.kubosh\\.io/cid"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url", priority = 1)
)]
#[serde(rename_all = "camelCase")]
pub struct StemcellSpec {
    /// Full stemcell name, e.g. `bosh-openstack-kvm-ubuntu-jammy-go_agent`, as in the
    /// tarball's `stemcell.MF`.
    pub name: String,
    /// Stemcell version, e.g. `"1.83"`. Quote it: the API rejects a YAML float.
    pub version: Version,
    /// Where to download the tarball (`https://...`).
    pub url: String,
    /// Digest of the tarball: sha1 hex, or `sha256:<hex>`. Strongly recommended: without it
    /// kubosh trusts whatever the URL serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha1: Option<String>,
    /// A Secret in this namespace with credentials for `url`: `username` and `password`
    /// (basic auth) or `token` (bearer), and optionally `ca.crt` to trust.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
}

/// Annotation with the IaaS identifier of the uploaded stemcell (written by kubosh).
pub const CID_ANNOTATION: &str = "kubosh.io/cid";

/// The annotation with the stemcell's CID in the cloud of CPI `cpi`: [`CID_ANNOTATION`] for
/// the director's own CPI, `kubosh.io/cid.<cpi>` for a named one (written by kubosh).
pub fn cid_annotation(cpi: Option<&str>) -> String {
    match cpi {
        None => CID_ANNOTATION.to_string(),
        Some(cpi) => format!("{CID_ANNOTATION}.{cpi}"),
    }
}

/// Every copy of the stemcell the annotations record: `(CPI, CID)`, the director's own
/// CPI's (`None`) first.
pub fn recorded_cids(
    annotations: &std::collections::BTreeMap<String, String>,
) -> Vec<(Option<String>, String)> {
    let named = format!("{CID_ANNOTATION}.");
    let mut out: Vec<(Option<String>, String)> = (annotations.iter())
        .filter_map(|(key, cid)| {
            let cpi = key.strip_prefix(&named)?;
            Some((Some(cpi.to_string()), cid.clone()))
        })
        .collect();
    if let Some(cid) = annotations.get(CID_ANNOTATION) {
        out.insert(0, (None, cid.clone()));
    }
    out
}

/// Annotation with the stemcell's operating system, next to its CID (written by kubosh).
pub const OS_ANNOTATION: &str = "kubosh.io/os";

/// The observed state of a `Stemcell`. All of it is read again from the tarball if lost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StemcellStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Ready` once the image is uploaded to the IaaS; `Stalled` when it cannot be.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Vec<Condition>,

    /// Operating system, from `stemcell.MF`, e.g. `ubuntu-jammy`: what manifests match with
    /// `stemcells[].os`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,

    /// Version of the agent API the stemcell speaks (`api_version` in `stemcell.MF`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<i32>,

    /// Where kubosh stored the tarball in the blobstore (content-addressed), for the CPI's
    /// `create_stemcell` when a deployment first needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob_id: Option<String>,
}
