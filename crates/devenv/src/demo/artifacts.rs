//! The example release and the local stemcell as tarballs in the state directory, built on
//! the first run and whenever their source changed; otherwise the existing files are used
//! as they are (so the `Release` and `Stemcell` objects that name them do not change, and
//! the controller fetches nothing again).

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::releases::{
    ExampleReleaseError, build_example_release, example_release_dir, write_local_stemcell,
};

/// Why a tarball could not be built or read.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// Building it failed.
    #[error(transparent)]
    Build(#[from] ExampleReleaseError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A tarball in the state directory.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// Where it is.
    pub path: PathBuf,
    /// Its `sha256:<hex>` digest (what a `Release` or `Stemcell` names in `spec.sha1`).
    pub digest: String,
    /// True when this run built it; false when an earlier run's was used.
    pub built: bool,
}

impl Artifact {
    /// Where a `Release` or `Stemcell` on this machine finds it: a `file://` URL.
    pub fn on_this_machine(&self) -> TarballSource {
        TarballSource {
            url: format!("file://{}", self.path.display()),
            digest: self.digest.clone(),
        }
    }
}

/// What a `Release` or `Stemcell` names of its tarball: where it is and its digest.
#[derive(Debug, Clone)]
pub struct TarballSource {
    /// `spec.url`.
    pub url: String,
    /// `spec.sha1`: the tarball's `sha256:<hex>` digest.
    pub digest: String,
}

/// The example's `Release` (`hello-1.0.0`) and `Stemcell`
/// (`bosh-kubosh-local-ubuntu-jammy-1.0`) in `namespace`, naming `release` and `stemcell`, as
/// YAML documents: a changed tarball changes its object, and the controller reads it again.
pub fn example_objects(
    release: &TarballSource,
    stemcell: &TarballSource,
    namespace: &str,
) -> [String; 2] {
    let object = |kind: &str, object: &str, name: &str, version: &str, tarball: &TarballSource| {
        format!(
            "# Written by kubosh for the tarball it built.\napiVersion: kubosh.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {object}\n  namespace: {namespace}\nspec:\n  name: {name}\n  version: \"{version}\"\n  url: {}\n  sha1: \"{}\"\n",
            tarball.url, tarball.digest,
        )
    };
    [
        object("Release", "hello-1.0.0", "hello", "1.0.0", release),
        object(
            "Stemcell",
            "bosh-kubosh-local-ubuntu-jammy-1.0",
            "bosh-kubosh-local-ubuntu-jammy",
            "1.0",
            stemcell,
        ),
    ]
}

/// The example release (`examples/releases/hello`, version 1.0.0) in `dir`, built when there
/// is none or its source changed since it was built (a digest of the source files is kept
/// beside it).
pub fn example_release_artifact(dir: &Path) -> Result<Artifact, ArtifactError> {
    let path = dir.join("hello-1.0.0.tgz");
    let source_file = dir.join("hello-1.0.0.source-sha256");
    let source = source_digest(&example_release_dir())?;
    let unchanged = path.is_file()
        && std::fs::read_to_string(&source_file).is_ok_and(|kept| kept.trim() == source);
    if !unchanged {
        let tarball = build_example_release()?
            .to_tarball()
            .map_err(ExampleReleaseError::from)?;
        write_file(&path, &tarball)?;
        write_file(&source_file, source.as_bytes())?;
    }
    Ok(Artifact {
        digest: file_digest(&path)?,
        path,
        built: !unchanged,
    })
}

/// The local cloud's stemcell in `dir`, written when there is none (it is the same bytes
/// every time).
pub fn local_stemcell_artifact(dir: &Path) -> Result<Artifact, ArtifactError> {
    let path = dir.join("bosh-kubosh-local-ubuntu-jammy-1.0.tgz");
    let built = !path.is_file();
    if built {
        create_dir(dir)?;
        write_local_stemcell(&path)?;
    }
    Ok(Artifact {
        digest: file_digest(&path)?,
        path,
        built,
    })
}

/// A digest of every file under `dir` (paths and contents, in path order), leaving out
/// what release tooling writes there (`dev_releases`, `.dev_builds`, hidden files).
fn source_digest(dir: &Path) -> Result<String, ArtifactError> {
    let mut files = Vec::new();
    collect_files(dir, dir, &mut files)?;
    files.sort();
    let mut hash = Sha256::new();
    for relative in files {
        let path = dir.join(&relative);
        let bytes = std::fs::read(&path).map_err(|source| ArtifactError::File { path, source })?;
        hash.update(relative.to_string_lossy().as_bytes());
        hash.update([0]);
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
    }
    Ok(format!("{:x}", hash.finalize()))
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ArtifactError> {
    let failed = |source| ArtifactError::File {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(failed)? {
        let entry = entry.map_err(failed)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "dev_releases" {
            continue;
        }
        let path = entry.path();
        if entry.file_type().map_err(failed)?.is_dir() {
            collect_files(root, &path, out)?;
        } else if let Ok(relative) = path.strip_prefix(root) {
            out.push(relative.to_path_buf());
        }
    }
    Ok(())
}

/// `sha256:<hex>` of a file, read in pieces.
fn file_digest(path: &Path) -> Result<String, ArtifactError> {
    let failed = |source| ArtifactError::File {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(failed)?;
    let mut hash = Sha256::new();
    let mut buffer = vec![0; 1 << 16];
    loop {
        let n = file.read(&mut buffer).map_err(failed)?;
        if n == 0 {
            break;
        }
        hash.update(&buffer[..n]);
    }
    Ok(format!("sha256:{:x}", hash.finalize()))
}

fn create_dir(dir: &Path) -> Result<(), ArtifactError> {
    std::fs::create_dir_all(dir).map_err(|source| ArtifactError::File {
        path: dir.to_path_buf(),
        source,
    })
}

/// Writes `bytes` to a temporary file beside `path` and renames it into place, so an
/// interrupted run never leaves half a tarball under the final name.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ArtifactError> {
    let failed = |source| ArtifactError::File {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    create_dir(dir)?;
    let mut staged = tempfile::NamedTempFile::new_in(dir).map_err(failed)?;
    std::io::Write::write_all(&mut staged, bytes).map_err(failed)?;
    staged.persist(path).map_err(|e| failed(e.error))?;
    Ok(())
}
