//! Release tarballs as files: [`ReleaseFile`] reads and writes the [`Release`] model of
//! `kubosh-core` at a path.

use std::path::Path;

use super::{Release, ReleaseError};

/// A [`Release`] read from or written to a tarball file.
pub trait ReleaseFile: Sized {
    /// Reads and verifies the release tarball at `path`.
    fn read(path: &Path) -> Result<Self, ReleaseError>;

    /// Writes the release tarball to `path` (through a temporary file in the same
    /// directory, renamed into place).
    fn write(&self, path: &Path) -> Result<(), ReleaseError>;
}

impl ReleaseFile for Release {
    fn read(path: &Path) -> Result<Self, ReleaseError> {
        let file = std::fs::File::open(path).map_err(|e| ReleaseError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_reader(std::io::BufReader::new(file))
    }

    fn write(&self, path: &Path) -> Result<(), ReleaseError> {
        let err = |e: std::io::Error| ReleaseError::Write {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let data = self.to_tarball()?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
        let mut perms = tmp.as_file().metadata().map_err(err)?.permissions();
        std::io::Write::write_all(&mut tmp, &data).map_err(err)?;
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
        tmp.as_file().set_permissions(perms).map_err(err)?;
        tmp.persist(path).map_err(|e| err(e.error))?;
        Ok(())
    }
}
