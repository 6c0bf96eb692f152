//! Writing a [`Release`] as a tarball, laid out as bosh-cli's `ArchiveWriter` does:
//! `release.MF`, `jobs/`, `packages/`, `compiled_packages/`, `license.tgz` and the license's
//! `LICENSE*`/`NOTICE*` files at the top. Plain tar when `no_compression` is set.

use super::tarball::{self, TarWriter};
use super::{Release, ReleaseError};

impl Release {
    /// `release.MF` as written in a tarball.
    pub fn manifest_yaml(&self) -> Result<String, ReleaseError> {
        kubosh_base::yaml::to_string(&self.manifest).map_err(|e| ReleaseError::Write {
            path: "release.MF".into(),
            message: e.to_string(),
        })
    }

    /// The release as tarball bytes.
    pub fn to_tarball(&self) -> Result<Vec<u8>, ReleaseError> {
        let write_err = |e: std::io::Error| ReleaseError::Write {
            path: "(memory)".into(),
            message: e.to_string(),
        };
        let manifest = self.manifest_yaml()?;
        let mut w = TarWriter::new();
        w.file("release.MF", manifest.as_bytes(), false)
            .map_err(write_err)?;
        for j in &self.jobs {
            w.file(&format!("jobs/{}.tgz", j.name), &j.archive, false)
                .map_err(write_err)?;
        }
        let packages = self
            .packages
            .iter()
            .map(|p| ("packages", &p.name, &p.archive));
        let compiled =
            (self.compiled_packages.iter()).map(|p| ("compiled_packages", &p.name, &p.archive));
        for (dir, name, archive) in packages.chain(compiled) {
            let path = format!("{dir}/{name}.tgz");
            let bytes = archive.bytes().ok_or_else(|| ReleaseError::Write {
                path: path.clone(),
                message: "a release by reference has no package bytes to write".into(),
            })?;
            w.file(&path, bytes, false).map_err(write_err)?;
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
