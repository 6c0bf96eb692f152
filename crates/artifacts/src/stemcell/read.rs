//! Reading a stemcell tarball as a stream, hashing the image on the way.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha1::Digest as _;

use super::{StemcellError, StemcellManifest};
use crate::release::tarball::tar_problem;
use kubosh_base::digest::{Algorithm, DigestError, MultiDigest, to_hex};

/// A stemcell whose image matches its manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Stemcell {
    /// `stemcell.MF`.
    pub manifest: StemcellManifest,
    /// The image's size in bytes.
    pub image_size: u64,
}

/// A stemcell with its image extracted to a file, ready for `create_stemcell`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtractedStemcell {
    /// The verified stemcell.
    pub stemcell: Stemcell,
    /// `<dir>/image`.
    pub image_path: PathBuf,
}

/// sha1, sha256 and sha512 of one stream, computed together.
struct Hashes {
    sha1: sha1::Sha1,
    sha256: sha2::Sha256,
    sha512: sha2::Sha512,
    size: u64,
}

impl Hashes {
    fn new() -> Self {
        Self {
            sha1: sha1::Sha1::new(),
            sha256: sha2::Sha256::new(),
            sha512: sha2::Sha512::new(),
            size: 0,
        }
    }

    fn update(&mut self, data: &[u8]) {
        self.sha1.update(data);
        self.sha256.update(data);
        self.sha512.update(data);
        self.size += data.len() as u64;
    }

    fn hex(self, algorithm: &Algorithm) -> Option<String> {
        match algorithm {
            Algorithm::Sha1 => Some(to_hex(&self.sha1.finalize())),
            Algorithm::Sha256 => Some(to_hex(&self.sha256.finalize())),
            Algorithm::Sha512 => Some(to_hex(&self.sha512.finalize())),
            Algorithm::Unknown(_) => None,
        }
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> StemcellError + '_ {
    move |e| StemcellError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

impl Stemcell {
    /// Reads the stemcell tarball at `path` and verifies its image digest.
    pub fn read(path: &Path) -> Result<Self, StemcellError> {
        let file = std::fs::File::open(path).map_err(io(path))?;
        Self::from_reader(std::io::BufReader::new(file))
    }

    /// Reads a stemcell tarball from a stream and verifies its image digest.
    pub fn from_reader(reader: impl Read) -> Result<Self, StemcellError> {
        scan(reader, None)
    }

    /// Reads the stemcell tarball at `path`, writes its image to `<dir>/image` and verifies
    /// it; on a mismatch the image file is removed.
    pub fn extract(path: &Path, dir: &Path) -> Result<ExtractedStemcell, StemcellError> {
        let file = std::fs::File::open(path).map_err(io(path))?;
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let image_path = dir.join("image");
        let result = scan(std::io::BufReader::new(file), Some(&image_path));
        match result {
            Ok(stemcell) => Ok(ExtractedStemcell {
                stemcell,
                image_path,
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&image_path);
                Err(e)
            }
        }
    }
}

/// Walks the archive: parses `stemcell.MF`, hashes `image` (copying it to `out`).
fn scan(reader: impl Read, out: Option<&Path>) -> Result<Stemcell, StemcellError> {
    let mut archive = tar::Archive::new(decompressed(reader)?);
    let mut manifest_text: Option<String> = None;
    let mut hashes: Option<Hashes> = None;
    let entries = archive
        .entries()
        .map_err(|e| StemcellError::Archive(tar_problem(&e)))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| StemcellError::Archive(tar_problem(&e)))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry
            .path()
            .map(|p| crate::release::tarball::normalize(&p.to_string_lossy()))
            .map_err(|e| StemcellError::Archive(tar_problem(&e)))?;
        match path.as_str() {
            "stemcell.MF" => {
                let mut text = String::new();
                entry
                    .by_ref()
                    .take(16 << 20)
                    .read_to_string(&mut text)
                    .map_err(|e| {
                        StemcellError::Archive(format!("reading stemcell.MF: {}", tar_problem(&e)))
                    })?;
                manifest_text = Some(text);
            }
            "image" => hashes = Some(hash_image(&mut entry, out)?),
            _ => {}
        }
    }
    verified(manifest_text, hashes)
}

/// The tarball's stream, gunzipped when it starts with gzip's magic bytes.
fn decompressed<'r>(mut reader: impl Read + 'r) -> Result<Box<dyn Read + 'r>, StemcellError> {
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < 2 {
        match reader.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(StemcellError::Archive(tar_problem(&e))),
        }
    }
    let chained = std::io::Cursor::new(magic[..got].to_vec()).chain(reader);
    Ok(if crate::release::tarball::is_gzip(&magic[..got]) {
        Box::new(flate2::read::GzDecoder::new(chained))
    } else {
        Box::new(chained)
    })
}

/// Hashes the `image` entry, copying it to `out` (synced) when given.
fn hash_image(image: &mut impl Read, out: Option<&Path>) -> Result<Hashes, StemcellError> {
    let mut file = match out {
        Some(p) => Some(std::fs::File::create(p).map_err(io(p))?),
        None => None,
    };
    let mut h = Hashes::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = image
            .read(&mut buf)
            .map_err(|e| StemcellError::Archive(format!("reading image: {}", tar_problem(&e))))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        if let (Some(f), Some(p)) = (file.as_mut(), out) {
            f.write_all(&buf[..n]).map_err(io(p))?;
        }
    }
    if let (Some(f), Some(p)) = (file, out) {
        f.sync_all().map_err(io(p))?;
    }
    Ok(h)
}

/// The stemcell: `stemcell.MF` parsed and complete, the image's `hashes` matching its
/// strongest digest.
fn verified(
    manifest_text: Option<String>,
    hashes: Option<Hashes>,
) -> Result<Stemcell, StemcellError> {
    let text = manifest_text.ok_or(StemcellError::Missing("stemcell.MF"))?;
    let manifest: StemcellManifest = crate::release::manifest::parse_yaml(&text, "stemcell.MF")
        .map_err(StemcellError::Manifest)?;
    for (what, v) in [
        ("name", &manifest.name),
        ("version", &manifest.version),
        ("operating_system", &manifest.operating_system),
    ] {
        if v.is_empty() {
            return Err(StemcellError::Manifest(format!("'{what}' is empty")));
        }
    }
    let hashes = hashes.ok_or(StemcellError::Missing("image"))?;
    let image_size = hashes.size;
    let expected: MultiDigest = manifest.sha1.parse()?;
    let strongest = expected.strongest().clone();
    let actual = hashes
        .hex(&strongest.algorithm)
        .ok_or_else(|| DigestError::UnknownAlgorithm(strongest.algorithm.name().to_string()))?;
    if !actual.eq_ignore_ascii_case(&strongest.hex) {
        return Err(DigestError::Mismatch {
            expected: strongest.to_string(),
            actual: kubosh_base::digest::Digest {
                algorithm: strongest.algorithm.clone(),
                hex: actual,
            }
            .to_string(),
        }
        .into());
    }
    Ok(Stemcell {
        manifest,
        image_size,
    })
}
