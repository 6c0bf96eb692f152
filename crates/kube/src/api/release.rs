//! `Release` (`releases.kubosh.io`): a BOSH release tarball kubosh fetches and unpacks.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kubosh_core::manifest::Version;

/// A release to upload, like `bosh upload-release URL --sha1 ... --name ... --version ...`.
///
/// One resource per release version: name them e.g. `zookeeper-0.0.10`. Deployments in the
/// same namespace use it when their manifest lists the same `name` and `version`.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "Release",
    plural = "releases",
    shortname = "brel",
    category = "bosh",
    namespaced,
    status = "ReleaseStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A BOSH release version (a tarball of jobs and packages) that Deployments in this \
           namespace can use; kubosh downloads it, checks its digest and unpacks it.",
    printcolumn(name = "Release", type_ = "string", json_path = ".spec.name"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url", priority = 1)
)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseSpec {
    /// Release name, as in the manifest's `releases[].name` and the tarball's `release.MF`.
    pub name: String,
    /// Release version, as in the manifest's `releases[].version` and the tarball's
    /// `release.MF`. Quote versions with a dot (`"1.10"`): the API rejects a YAML float, which
    /// would have lost the trailing zero anyway.
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

/// The observed state of a `Release`: what the tarball turned out to contain. All of it is
/// read again from the tarball if lost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Ready` once the tarball is downloaded, verified and unpacked; `Stalled` when it
    /// cannot be (bad digest, name or version differ from `release.MF`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 32),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Vec<Condition>,

    /// The jobs in the release.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub jobs: Vec<ReleaseItem>,

    /// The packages in the release.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub packages: Vec<ReleaseItem>,

    /// For a compiled release: the stemcell its packages were compiled for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiled_for: Option<StemcellVersion>,

    /// Where `release.MF` is in kubosh's blobstore: with the job and package ids above, the
    /// release as deploys use it (by reference: packages stay in the blobstore). Read again
    /// from the URL if lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_blob_id: Option<String>,
}

/// A job or package of a release.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseItem {
    /// Job or package name.
    pub name: String,
    /// Version (for releases built by current BOSH CLIs, the same as the fingerprint).
    #[serde(default)]
    pub version: String,
    /// Content fingerprint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fingerprint: String,
    /// Packages: names of the packages it depends on. Jobs: packages it uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<String>,
    /// Where kubosh stored its archive in the blobstore (content-addressed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob_id: Option<String>,
}

/// A stemcell operating system and version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StemcellVersion {
    /// Operating system, e.g. `ubuntu-jammy`.
    pub os: String,
    /// Stemcell version, e.g. `"1.83"`.
    pub version: String,
}
