//! Stemcell tarballs as the engine takes them: read, verified and extracted once.

use std::path::Path;

use kubosh_artifacts::stemcell::Stemcell;
use kubosh_core::plan::desired::StemcellInfo;

use super::StemcellSource;

impl StemcellSource {
    /// A stemcell tarball as the engine takes it. With `extract`, its image is extracted to
    /// `<stemcells_dir>/<name>-<version>/image` unless a previous run extracted the same image
    /// (same digest); without, the tarball is only read and verified, and the image path is
    /// where it would be.
    pub fn prepare(
        stemcells_dir: &Path,
        tarball: &Path,
        extract: bool,
    ) -> Result<StemcellSource, String> {
        let stemcell = Stemcell::read(tarball).map_err(|e| e.to_string())?;
        let m = &stemcell.manifest;
        let dir_name = format!("{}-{}", m.name, m.version);
        if !is_path_component(&dir_name) {
            return Err(format!("'{dir_name}' cannot name a directory"));
        }
        let dir = stemcells_dir.join(dir_name);
        let image_path = dir.join("image");
        // Written after a complete extraction: an interrupted one is redone.
        let marker = dir.join("digest");
        let extracted = std::fs::read_to_string(&marker).is_ok_and(|d| d == m.sha1);
        if extract && !(extracted && image_path.is_file()) {
            let _ = std::fs::remove_file(&marker);
            Stemcell::extract(tarball, &dir).map_err(|e| e.to_string())?;
            write_atomically(&marker, m.sha1.as_bytes())?;
        }
        Ok(StemcellSource {
            info: StemcellInfo {
                name: m.name.clone(),
                version: m.version.clone(),
                os: m.operating_system.clone(),
            },
            image_path,
            cloud_properties: m.cloud_properties.clone(),
        })
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// True if `s` is one plain path component (no separators, not `.` or `..`).
pub fn is_path_component(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\0'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    fn tarball(dir: &Path, version: &str, image: &[u8]) -> PathBuf {
        let image_path = dir.join(format!("image-{version}"));
        std::fs::write(&image_path, image).unwrap();
        let tarball = dir.join(format!("stemcell-{version}.tgz"));
        kubosh_artifacts::stemcell::create(
            &kubosh_artifacts::stemcell::CreateStemcellOptions {
                name: "bosh-kubosh-local".into(),
                version: version.into(),
                operating_system: "ubuntu-jammy".into(),
                image: Some(image_path),
                stemcell_formats: vec!["warden-tar".into()],
                api_version: 3,
                cloud_properties: serde_json::Map::from_iter([("a".to_string(), json!(1))]),
            },
            &tarball,
        )
        .unwrap();
        tarball
    }

    #[test]
    fn a_stemcell_is_extracted_once_and_again_when_its_image_changes() {
        let dir = tempfile::tempdir().unwrap();
        let stemcells = dir.path().join("stemcells");
        let first = tarball(dir.path(), "1.0", b"one");

        // Without extraction nothing is written.
        let s = StemcellSource::prepare(&stemcells, &first, false).unwrap();
        assert!(!stemcells.exists());
        assert_eq!(s.image_path, stemcells.join("bosh-kubosh-local-1.0/image"));
        assert_eq!(s.info.key(), "bosh-kubosh-local/1.0");
        assert_eq!(s.cloud_properties["a"], 1);

        let s = StemcellSource::prepare(&stemcells, &first, true).unwrap();
        assert_eq!(std::fs::read(&s.image_path).unwrap(), b"one");
        // Extracted already: the image is not written again.
        std::fs::write(&s.image_path, b"touched").unwrap();
        StemcellSource::prepare(&stemcells, &first, true).unwrap();
        assert_eq!(std::fs::read(&s.image_path).unwrap(), b"touched");

        // Same name and version, another image: extracted again.
        let rebuilt = tarball(dir.path(), "1.0", b"two");
        let s = StemcellSource::prepare(&stemcells, &rebuilt, true).unwrap();
        assert_eq!(std::fs::read(&s.image_path).unwrap(), b"two");
    }

    #[test]
    fn a_bad_stemcell_tarball_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.tgz");
        std::fs::write(&path, b"not a tarball").unwrap();
        assert!(StemcellSource::prepare(&dir.path().join("s"), &path, true).is_err());
    }
}
