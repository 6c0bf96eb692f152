//! BOSH stemcell tarballs (`bosh-protocols.md` §6.4): reading `stemcell.MF`, verifying the
//! image's digest, extracting the image for a CPI's `create_stemcell(image_path,
//! cloud_properties)`, and creating minimal stemcells for kubosh's local cloud.
//!
//! ```text
//! stemcell.MF               name, version, operating_system, api_version, sha1 (of image),
//!                           stemcell_formats, cloud_properties
//! image                     the IaaS image (for the local cloud: any file, kept verbatim)
//! packages.txt, dev_tools_file_list.txt
//! ```
//!
//! The tarball is read as a stream: the image is never held in memory, and is hashed (sha1,
//! sha256, sha512 at once, whichever `stemcell.MF` names) while it is skipped or written out.
//! This module is an I/O edge for files only: no Kubernetes, no agent.

mod create;
mod read;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use create::{CreateStemcellOptions, create};
use kubosh_base::digest::DigestError;
pub use read::{ExtractedStemcell, Stemcell};

/// A stemcell tarball that cannot be used, or cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum StemcellError {
    /// A file could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// The system's explanation.
        message: String,
    },
    /// Not a (gzipped) tar archive, or a corrupt one.
    #[error("stemcell tarball is not a valid archive: {0}")]
    Archive(String),
    /// `stemcell.MF` or `image` is absent.
    #[error("{0} not found in stemcell tarball")]
    Missing(&'static str),
    /// `stemcell.MF` is invalid.
    #[error("invalid stemcell.MF: {0}")]
    Manifest(String),
    /// The image does not match `stemcell.MF`'s digest (or the digest is malformed).
    #[error("stemcell image: {0}")]
    Digest(#[from] DigestError),
}

/// `stemcell.MF`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StemcellManifest {
    /// Stemcell name (`bosh-warden-boshlite-ubuntu-jammy-go_agent`).
    #[serde(deserialize_with = "crate::release::manifest::string_like")]
    pub name: String,
    /// Version (`1.500`).
    #[serde(deserialize_with = "crate::release::manifest::string_like")]
    pub version: String,
    /// Operating system (`ubuntu-jammy`), matched against manifests' `stemcells[].os`.
    #[serde(deserialize_with = "crate::release::manifest::string_like")]
    pub operating_system: String,
    /// Agent API level (2: registry-less, 3: signed URLs); absent means 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<u32>,
    /// Multi-digest of `image`.
    #[serde(deserialize_with = "crate::release::manifest::string_like")]
    pub sha1: String,
    /// Formats, matched against the CPI's `info.stemcell_formats`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stemcell_formats: Vec<String>,
    /// Passed verbatim to `create_stemcell`.
    #[serde(default)]
    pub cloud_properties: Map<String, Value>,
    /// Other keys (`bosh_protocol`, ...), verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
