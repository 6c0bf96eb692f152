//! The repository's example release (`examples/releases/hello`: a C library, a server
//! depending on it, a job with ERB templates, a link and a drain script), for tests and
//! benchmarks; and what the create-env example (`examples/create-env/hello.yml`) deploys.

use std::path::{Path, PathBuf};

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
    /// A tarball could not be written.
    #[error("writing {path}: {reason}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
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

/// Writes the tarballs `examples/create-env/hello.yml` deploys into `dir`, as `kubosh release
/// create` and `kubosh stemcell create` write them: `hello.tgz` (the example release,
/// 1.0.0), `cpi.tgz` (`examples/releases/kubosh-cpi`, 1) and `stemcell.tgz`
/// (`bosh-kubosh-local-ubuntu-jammy/1.0`, API version 3).
pub fn write_create_env_artifacts(dir: &Path) -> Result<(), ExampleReleaseError> {
    let write = |name: &str, bytes: Vec<u8>| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| ExampleReleaseError::Write {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    };
    write("hello.tgz", build_example_release()?.to_tarball()?)?;
    let cpi = create(
        &example_release_dir().join("../kubosh-cpi"),
        &CreateOptions {
            name: None,
            version: Some("1".into()),
        },
    )?;
    write("cpi.tgz", cpi.to_tarball()?)?;
    write_local_stemcell(&dir.join("stemcell.tgz"))
}

/// The local cloud's stemcell, as `kubosh stemcell create --name
/// bosh-kubosh-local-ubuntu-jammy --version 1.0 --os ubuntu-jammy` makes it (API version 3,
/// no image: the local cloud's VMs are processes).
pub fn local_stemcell_options() -> kubosh_artifacts::stemcell::CreateStemcellOptions {
    kubosh_artifacts::stemcell::CreateStemcellOptions {
        name: "bosh-kubosh-local-ubuntu-jammy".into(),
        version: "1.0".into(),
        operating_system: "ubuntu-jammy".into(),
        image: None,
        stemcell_formats: vec!["warden-tar".into()],
        api_version: 3,
        cloud_properties: Default::default(),
    }
}

/// Writes the stemcell of [`local_stemcell_options`] to `out` (byte for byte the same every
/// time).
pub fn write_local_stemcell(out: &Path) -> Result<(), ExampleReleaseError> {
    kubosh_artifacts::stemcell::create(&local_stemcell_options(), out).map_err(|e| {
        ExampleReleaseError::Write {
            path: out.display().to_string(),
            reason: e.to_string(),
        }
    })?;
    Ok(())
}
