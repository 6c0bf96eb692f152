//! `CompiledPackage` (`compiledpackages.kubosh.io`): a cache entry for one compiled package.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::release::StemcellVersion;

/// A package compiled for one stemcell, stored in the blobstore, written by kubosh. Before
/// compiling, kubosh looks for an entry with the same package, version, stemcell and
/// dependency key, and reuses its blob.
///
/// There is no status: the entry is a record of a blob kubosh stored, which nothing could
/// observe or derive again, so it all lives in the spec. Deleting an entry makes kubosh
/// compile the package again when it is next needed.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "kubosh.io",
    version = "v1alpha1",
    kind = "CompiledPackage",
    plural = "compiledpackages",
    shortname = "bcp",
    category = "bosh",
    namespaced,
    derive = "Default",
    derive = "PartialEq",
    doc = "A BOSH package compiled for one stemcell, cached in the blobstore by kubosh so it is \
           compiled only once.",
    printcolumn(name = "Package", type_ = "string", json_path = ".spec.package"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "OS", type_ = "string", json_path = ".spec.stemcell.os"),
    printcolumn(
        name = "Stemcell",
        type_ = "string",
        json_path = ".spec.stemcell.version"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Blob",
        type_ = "string",
        json_path = ".spec.blobstoreId",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CompiledPackageSpec {
    /// Package name.
    pub package: String,
    /// Package version (for releases built by current BOSH CLIs, its fingerprint).
    pub version: String,
    /// Content fingerprint of the package source, when it differs from `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The stemcell it was compiled on.
    pub stemcell: StemcellVersion,
    /// The compiled dependencies it was built against: `name/version` of every package it
    /// depends on, directly or not, sorted and joined with `,` (empty without dependencies).
    /// The same package compiled against other dependencies is another entry.
    #[serde(default)]
    pub dependency_key: String,
    /// The build number, per package and stemcell: agents see the version
    /// `<version>.<build>`.
    #[serde(default = "first_build")]
    pub build: i64,
    /// Where the compiled tarball is in the blobstore.
    pub blobstore_id: String,
    /// Digest of the compiled tarball: sha1 hex, or `sha256:<hex>`.
    pub sha1: String,
}

fn first_build() -> i64 {
    1
}
