//! What deploys are made of, as files and blobs: release tarballs and release directories
//! ([`release`]), stemcells ([`stemcell`]), the director's blobstore ([`blobstore`]) and job
//! templates rendered with Ruby's ERB ([`render`]). No Kubernetes, no CPI, no agent calls.

pub mod blobstore;
pub mod fetch;
pub mod release;
pub mod render;
pub mod stemcell;
