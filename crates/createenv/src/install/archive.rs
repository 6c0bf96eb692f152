//! Directory archives of compiled packages: what `packaging` put in the install target, as a
//! gzipped tar of its contents, and back.

use std::io::Read;
use std::path::Path;

/// Archives the contents of `dir` (relative paths, symlinks kept as symlinks), gzipped.
pub fn pack_dir(dir: &Path) -> std::io::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut builder = tar::Builder::new(gz);
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Complete);
    builder.append_dir_all(".", dir)?;
    builder.into_inner()?.finish()
}

/// Unpacks a tar or tar.gz into `dir` (emptied first). Entries that would land outside
/// `dir` are refused by `tar`.
pub fn unpack(bytes: &[u8], dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(dir)?;
    let reader: Box<dyn Read> = if bytes.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    };
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    archive.unpack(dir)
}
