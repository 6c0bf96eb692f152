//! `kubosh stemcell create`: a minimal stemcell tarball for kubosh's local cloud.
//!
//! The image is a file taken verbatim, a directory packed as a gzipped tar (a root file
//! system, as `warden-tar` images are), or, when none is given, an empty gzipped tar. The
//! local CPI keeps the image as a file and never looks inside it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{StemcellError, StemcellManifest};
use crate::release::tarball::TarWriter;

/// What goes into a created stemcell.
#[derive(Debug, Clone)]
pub struct CreateStemcellOptions {
    /// Stemcell name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Operating system (`ubuntu-jammy`).
    pub operating_system: String,
    /// The image: a file (verbatim) or a directory (packed); `None`: an empty tarball.
    pub image: Option<PathBuf>,
    /// Formats (`warden-tar`, `general-tar`: what the local CPI's `info` lists).
    pub stemcell_formats: Vec<String>,
    /// Agent API version.
    pub api_version: u32,
    /// Passed verbatim to `create_stemcell`.
    pub cloud_properties: Map<String, Value>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> StemcellError + '_ {
    move |e| StemcellError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Packs `dir` as a deterministic gzipped tar (symlinks kept, modes 0755/0644).
fn pack_dir(dir: &Path) -> Result<Vec<u8>, StemcellError> {
    let mut w = TarWriter::new();
    let mut stack = vec![(String::new(), dir.to_path_buf())];
    let mut files = Vec::new();
    while let Some((rel, path)) = stack.pop() {
        for entry in std::fs::read_dir(&path).map_err(io(&path))? {
            let entry = entry.map_err(io(&path))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let t = entry.file_type().map_err(io(&entry.path()))?;
            if t.is_dir() {
                stack.push((r, entry.path()));
            } else {
                files.push((r, entry.path(), t.is_symlink()));
            }
        }
    }
    files.sort();
    for (rel, path, link) in files {
        if link {
            let target = std::fs::read_link(&path).map_err(io(&path))?;
            w.symlink(&rel, &target.to_string_lossy())
                .map_err(io(&path))?;
        } else {
            let data = std::fs::read(&path).map_err(io(&path))?;
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&path).map_err(io(&path))?.permissions(),
            );
            w.file(&rel, &data, mode & 0o100 != 0).map_err(io(&path))?;
        }
    }
    w.finish(false).map_err(io(dir))
}

/// sha1 hex and size of the file at `path`, streamed.
fn sha1_file(path: &Path) -> Result<(String, u64), StemcellError> {
    use sha1::Digest as _;
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut h = sha1::Sha1::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        h.update(&buf[..n]);
    }
    Ok((kubosh_base::digest::to_hex(&h.finalize()), size))
}

/// Writes a stemcell tarball to `out` and returns its manifest.
pub fn create(opts: &CreateStemcellOptions, out: &Path) -> Result<StemcellManifest, StemcellError> {
    enum Image {
        Bytes(Vec<u8>),
        File(PathBuf),
    }
    let image = match &opts.image {
        None => Image::Bytes(TarWriter::new().finish(false).map_err(io(out))?),
        Some(p) if p.is_dir() => Image::Bytes(pack_dir(p)?),
        Some(p) => Image::File(p.clone()),
    };
    let (sha1, size) = match &image {
        Image::Bytes(b) => (kubosh_base::digest::sha1_hex(b), b.len() as u64),
        Image::File(p) => sha1_file(p)?,
    };
    let manifest = StemcellManifest {
        name: opts.name.clone(),
        version: opts.version.clone(),
        operating_system: opts.operating_system.clone(),
        api_version: Some(opts.api_version),
        sha1,
        stemcell_formats: opts.stemcell_formats.clone(),
        cloud_properties: opts.cloud_properties.clone(),
        extra: Map::new(),
    };
    let manifest_text = kubosh_base::yaml::to_string(&manifest)
        .map_err(|e| StemcellError::Manifest(e.to_string()))?;

    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(io(dir))?;
    let gz = flate2::GzBuilder::new().mtime(0).write(
        std::io::BufWriter::new(tmp.as_file()),
        flate2::Compression::fast(),
    );
    let mut b = tar::Builder::new(gz);
    let header = |size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(size);
        h.set_mtime(946_684_800);
        h
    };
    b.append_data(
        &mut header(manifest_text.len() as u64),
        "stemcell.MF",
        manifest_text.as_bytes(),
    )
    .map_err(io(out))?;
    match &image {
        Image::Bytes(data) => b.append_data(&mut header(size), "image", &data[..]),
        Image::File(p) => {
            let f = std::fs::File::open(p).map_err(io(p))?;
            b.append_data(&mut header(size), "image", f.take(size))
        }
    }
    .map_err(io(out))?;
    for empty in ["packages.txt", "dev_tools_file_list.txt"] {
        b.append_data(&mut header(0), empty, std::io::empty())
            .map_err(io(out))?;
    }
    let gz = b.into_inner().map_err(io(out))?;
    let mut buffered = gz.finish().map_err(io(out))?;
    buffered.flush().map_err(io(out))?;
    drop(buffered);
    let mut perms = tmp.as_file().metadata().map_err(io(out))?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    tmp.as_file().set_permissions(perms).map_err(io(out))?;
    tmp.persist(out).map_err(|e| io(out)(e.error))?;
    Ok(manifest)
}
