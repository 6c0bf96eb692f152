//! Reading and writing the tar archives releases are made of.
//!
//! Reading keeps regular files in memory, keyed by their path without a leading `./`
//! (bosh-cli writes `./job.MF`, the Director `job.MF`); gzip is detected by its magic bytes,
//! so `no_compression` archives read the same way. Nothing is extracted to disk here.
//!
//! Writing is deterministic: entries in the order added, parent directories first, fixed
//! owner (0/0), fixed modification time, modes `0755`/`0644` as bosh-cli normalizes them, a
//! gzip header without name or time. The same inputs give byte-identical archives.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};

/// The modification time written into every entry (2000-01-01T00:00:00Z).
const MTIME: u64 = 946_684_800;

/// An archive that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TarError(pub String);

/// What a tar reader's error says, without the bytes it quotes: the `tar` crate puts a
/// header's raw fields into its messages (`numeric field did not have utf-8 text: <bytes>
/// when getting cksum for <bytes>`), which for a file that is no tar archive at all is
/// binary noise on the operator's terminal.
pub fn tar_problem(e: &std::io::Error) -> String {
    let text = e.to_string();
    if text.chars().any(|c| c.is_control() || c == '\u{fffd}') {
        "a header is not a tar header (the file is not a tar archive, or it is truncated or corrupt)".to_string()
    } else {
        text
    }
}

/// The regular files (and symlinks) of an archive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TarFiles {
    /// Path (no leading `./`) to contents.
    pub files: BTreeMap<String, TarFile>,
}

/// One file of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarFile {
    /// Contents (empty for a symlink).
    pub data: Vec<u8>,
    /// Permission bits from the header.
    pub mode: u32,
    /// The target, for a symlink.
    pub link_target: Option<String>,
}

impl TarFiles {
    /// The contents of `path`, if it is a regular file.
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files
            .get(path)
            .filter(|f| f.link_target.is_none())
            .map(|f| f.data.as_slice())
    }
}

/// Whether `data` starts like a gzip stream.
pub fn is_gzip(data: &[u8]) -> bool {
    data.starts_with(&[0x1f, 0x8b])
}

/// Reads every regular file and symlink of a (possibly gzipped) tar archive into memory.
pub fn read_all(data: &[u8]) -> Result<TarFiles, TarError> {
    if is_gzip(data) {
        read_tar(flate2::read::GzDecoder::new(data))
    } else {
        read_tar(data)
    }
}

/// Like [`read_all`], for a stream (gzip detected from the first bytes).
pub fn read_stream(mut reader: impl Read) -> Result<TarFiles, TarError> {
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < 2 {
        match reader.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(TarError(format!("reading archive: {e}"))),
        }
    }
    let chained = std::io::Cursor::new(magic[..got].to_vec()).chain(reader);
    if is_gzip(&magic[..got]) {
        read_tar(flate2::read::GzDecoder::new(chained))
    } else {
        read_tar(chained)
    }
}

fn read_tar(reader: impl Read) -> Result<TarFiles, TarError> {
    let mut archive = tar::Archive::new(reader);
    let mut out = TarFiles::default();
    let entries = archive
        .entries()
        .map_err(|e| TarError(format!("not a tar archive: {}", tar_problem(&e))))?;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| TarError(format!("corrupt tar archive: {}", tar_problem(&e))))?;
        let path = entry
            .path()
            .map_err(|e| TarError(format!("bad path in tar archive: {e}")))?
            .to_string_lossy()
            .into_owned();
        let path = normalize(&path);
        let kind = entry.header().entry_type();
        let mode = entry.header().mode().unwrap_or(0o644);
        if kind.is_symlink() {
            let target = entry
                .link_name()
                .ok()
                .flatten()
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.files.insert(
                path,
                TarFile {
                    data: Vec::new(),
                    mode,
                    link_target: Some(target),
                },
            );
            continue;
        }
        if !(kind.is_file() || kind == tar::EntryType::Continuous) || path.is_empty() {
            continue;
        }
        let mut data = Vec::new();
        entry.read_to_end(&mut data).map_err(|e| {
            TarError(format!(
                "corrupt tar archive: reading '{path}': {}",
                tar_problem(&e)
            ))
        })?;
        out.files.insert(
            path,
            TarFile {
                data,
                mode,
                link_target: None,
            },
        );
    }
    Ok(out)
}

/// `./a/b` and `a/b` and `/a//b` alike become `a/b`.
pub fn normalize(path: &str) -> String {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Builds a deterministic tar archive in memory.
pub struct TarWriter {
    builder: tar::Builder<Vec<u8>>,
    dirs: BTreeSet<String>,
}

impl Default for TarWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl TarWriter {
    /// A new, empty archive. Paths are written relative (`job.MF`; the `tar` crate has no
    /// `./` prefix as bosh-cli's `tar -C dir .` writes, which readers treat alike).
    pub fn new() -> Self {
        let mut builder = tar::Builder::new(Vec::new());
        builder.mode(tar::HeaderMode::Deterministic);
        Self {
            builder,
            dirs: BTreeSet::new(),
        }
    }

    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_mtime(MTIME);
        h.set_uid(0);
        h.set_gid(0);
        h
    }

    fn parents(&mut self, path: &str) -> std::io::Result<()> {
        let parts: Vec<&str> = path.split('/').collect();
        for i in 1..parts.len() {
            let dir = parts[..i].join("/");
            if self.dirs.insert(dir.clone()) {
                let mut h = Self::header(tar::EntryType::Directory, 0o755, 0);
                let name = format!("{dir}/");
                self.builder.append_data(&mut h, name, std::io::empty())?;
            }
        }
        Ok(())
    }

    /// Adds a regular file; `executable` picks mode 0755 over 0644.
    pub fn file(&mut self, path: &str, data: &[u8], executable: bool) -> std::io::Result<()> {
        self.parents(path)?;
        let mode = if executable { 0o755 } else { 0o644 };
        let mut h = Self::header(tar::EntryType::Regular, mode, data.len() as u64);
        self.builder.append_data(&mut h, path, data)
    }

    /// Adds a symlink to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> std::io::Result<()> {
        self.parents(path)?;
        let mut h = Self::header(tar::EntryType::Symlink, 0o777, 0);
        self.builder.append_link(&mut h, path, target)
    }

    /// The finished archive, gzipped unless `plain`.
    pub fn finish(self, plain: bool) -> std::io::Result<Vec<u8>> {
        let tar = self.builder.into_inner()?;
        if plain {
            return Ok(tar);
        }
        let mut gz = flate2::GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), flate2::Compression::default());
        gz.write_all(&tar)?;
        gz.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_no_archive_is_said_so_without_its_bytes() {
        // Binary where a header's fields should be, and an uncompressed and a gzipped copy.
        let garbage: Vec<u8> = (0..1536u32).map(|i| 0x80 | (i * 37 % 128) as u8).collect();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&garbage).unwrap();
        for data in [garbage.clone(), gz.finish().unwrap()] {
            let message = read_all(&data).unwrap_err().to_string();
            assert!(message.contains("not a tar header"), "{message}");
            assert!(
                !message.chars().any(|c| c.is_control() || c == '\u{fffd}'),
                "{message:?}"
            );
        }
    }

    #[test]
    fn writes_deterministically_and_reads_back() {
        let build = || {
            let mut w = TarWriter::new();
            w.file("job.MF", b"name: x\n", false).unwrap();
            w.file("templates/bin/ctl.erb", b"#!/bin/sh\n", true)
                .unwrap();
            w.symlink("templates/link", "bin/ctl.erb").unwrap();
            w.finish(false).unwrap()
        };
        let a = build();
        assert_eq!(a, build());
        assert!(is_gzip(&a));
        let files = read_all(&a).unwrap();
        assert_eq!(files.get("job.MF"), Some(&b"name: x\n"[..]));
        assert_eq!(files.files["templates/bin/ctl.erb"].mode, 0o755);
        assert_eq!(
            files.files["templates/link"].link_target.as_deref(),
            Some("bin/ctl.erb")
        );
        assert_eq!(files.get("templates/link"), None);
        let streamed = read_stream(&a[..]).unwrap();
        assert_eq!(streamed, files);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for data in [&b""[..], b"\x1f\x8b", b"\x1f\x8bgarbage", &[7u8; 1024][..]] {
            let _ = read_all(data);
            let _ = read_stream(data);
        }
    }

    #[test]
    fn normalizes_paths() {
        assert_eq!(normalize("./a/b"), "a/b");
        assert_eq!(normalize("/a//./b/"), "a/b");
        assert_eq!(normalize("."), "");
    }
}
