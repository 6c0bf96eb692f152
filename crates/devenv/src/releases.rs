//! The repository's example release (`examples/releases/hello`: a C library, a server
//! depending on it, a job with ERB templates, a link and a drain script), for tests and
//! benchmarks.

use std::path::PathBuf;

use kubosh_artifacts::release::{
    CreateError, CreateOptions, Release, ReleaseError, create::create,
};

/// The example release could not be built or read back.
#[derive(Debug, thiserror::Error)]
pub enum ExampleReleaseError {
    /// Building it from its directory failed.
    #[error("building the example release: {0}")]
    Create(#[from] CreateError),
    /// Its tarball did not read back.
    #[error("reading the example release's tarball: {0}")]
    Tarball(#[from] ReleaseError),
}

/// Where the example release's source is.
pub fn example_release_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/releases/hello")
}

/// The example release as `kubosh release create --version 1.0.0` builds it.
pub fn build_example_release() -> Result<Release, ExampleReleaseError> {
    let options = CreateOptions {
        name: None,
        version: Some("1.0.0".into()),
    };
    Ok(create(&example_release_dir(), &options)?)
}

/// The example release through its tarball and back, as an uploaded release comes.
pub fn example_release() -> Result<Release, ExampleReleaseError> {
    let built = build_example_release()?;
    Ok(Release::from_bytes(&built.to_tarball()?)?)
}
