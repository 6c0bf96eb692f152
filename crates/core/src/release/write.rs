//! Writing a [`Release`] as a tarball, laid out as bosh-cli's `ArchiveWriter` does:
//! `release.MF`, `jobs/`, `packages/`, `compiled_packages/`, `license.tgz` and the license's
//! `LICENSE*`/`NOTICE*` files at the top. Plain tar when `no_compression` is set.

use super::tarball::{self, TarWriter};
use super::{Release, ReleaseError};

impl Release {
    /// The release as tarball bytes.
    pub fn to_tarball(&self) -> Result<Vec<u8>, ReleaseError> {
        let write_err = |e: std::io::Error| ReleaseError::Write {
            path: "(memory)".into(),
            message: e.to_string(),
        };
        let manifest = crate::yaml::to_string(&self.manifest).map_err(|e| ReleaseError::Write {
            path: "release.MF".into(),
            message: e.to_string(),
        })?;
        let mut w = TarWriter::new();
        w.file("release.MF", manifest.as_bytes(), false)
            .map_err(write_err)?;
        for j in &self.jobs {
            w.file(&format!("jobs/{}.tgz", j.name), &j.archive, false)
                .map_err(write_err)?;
        }
        for p in &self.packages {
            w.file(&format!("packages/{}.tgz", p.name), &p.archive, false)
                .map_err(write_err)?;
        }
        for p in &self.compiled_packages {
            w.file(
                &format!("compiled_packages/{}.tgz", p.name),
                &p.archive,
                false,
            )
            .map_err(write_err)?;
        }
        if let Some(l) = &self.license {
            w.file("license.tgz", &l.archive, false)
                .map_err(write_err)?;
            if let Ok(files) = tarball::read_all(&l.archive) {
                for (path, f) in &files.files {
                    let top = !path.contains('/');
                    if top
                        && f.link_target.is_none()
                        && (path.starts_with("LICENSE") || path.starts_with("NOTICE"))
                    {
                        w.file(path, &f.data, false).map_err(write_err)?;
                    }
                }
            }
        }
        w.finish(self.manifest.no_compression).map_err(write_err)
    }
}
