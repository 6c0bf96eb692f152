//! Job, package and license fingerprints, computed exactly as bosh-cli does
//! (`release/resource/fingerprint.go`), so a release built by kubosh has the fingerprints
//! (and so the job and package versions) `bosh create-release` gives the same directory.
//!
//! The fingerprint is the sha256 (hex) of the concatenation of `"v2"`, then one chunk per
//! file in the order of their relative paths (byte order), then, when there are any, the
//! extra chunks (a package's dependency names) sorted and joined with `,`. A file's chunk is
//! its relative path, its digest as bosh-cli writes it (`sha256:<hex>`) and, unless the file
//! is exempt (a package's `packaging`, license files), a mode: `100755` when any execute bit
//! is set, else `100644`, `40755` for a directory and `symlink` for a symlink that is not
//! followed (whose digest is then that of the link's target path, not of a file).

use std::path::Path;

use kubosh_base::digest::sha256_hex;

/// One file's contribution to a fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FingerprintFile {
    /// The path the file has in the archive (`templates/ctl.erb`, `hello/main.c`).
    pub relative_path: String,
    /// Its digest as bosh-cli writes it: `sha256:<hex>`.
    pub digest: String,
    /// Its mode chunk (`100644`, `100755`, `40755`, `symlink`), or `None` when exempt.
    pub mode: Option<&'static str>,
}

impl FingerprintFile {
    /// A regular file with these contents and unix permission bits.
    pub fn regular(relative_path: &str, contents: &[u8], permissions: u32) -> Self {
        Self {
            relative_path: relative_path.to_string(),
            digest: sha256_digest(contents),
            mode: Some(if permissions & 0o111 != 0 {
                "100755"
            } else {
                "100644"
            }),
        }
    }

    /// A symlink kept as a link (packages): digest of the target path, mode `symlink`.
    pub fn symlink(relative_path: &str, target: &Path) -> Self {
        Self {
            relative_path: relative_path.to_string(),
            digest: sha256_digest(target.as_os_str().as_encoded_bytes()),
            mode: Some("symlink"),
        }
    }

    /// The same file without its mode in the fingerprint.
    pub fn without_mode(mut self) -> Self {
        self.mode = None;
        self
    }
}

/// `sha256:<hex>` of `data`, the digest bosh-cli writes for files and archives.
pub fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(data))
}

/// The fingerprint of `files` plus `extra_chunks`.
pub fn fingerprint(files: &[FingerprintFile], extra_chunks: &[String]) -> String {
    let mut sorted: Vec<&FingerprintFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.relative_path.cmp(&b.relative_path));
    let mut text = String::from("v2");
    for f in sorted {
        text.push_str(&f.relative_path);
        text.push_str(&f.digest);
        if let Some(mode) = f.mode {
            text.push_str(mode);
        }
    }
    if !extra_chunks.is_empty() {
        let mut chunks = extra_chunks.to_vec();
        chunks.sort();
        text.push_str(&chunks.join(","));
    }
    sha256_hex(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_sorted_and_concatenated() {
        let a = FingerprintFile::regular("b/x", b"1", 0o644);
        let b = FingerprintFile::regular("a", b"2", 0o755);
        let fp = fingerprint(&[a.clone(), b.clone()], &["z".into(), "y".into()]);
        let text = format!(
            "v2a{}100755b/x{}100644y,z",
            sha256_digest(b"2"),
            sha256_digest(b"1")
        );
        assert_eq!(fp, sha256_hex(text.as_bytes()));
        // Input order does not matter.
        assert_eq!(fp, fingerprint(&[b, a], &["y".into(), "z".into()]));
    }

    #[test]
    fn exempt_files_and_no_extra_chunks() {
        let p = FingerprintFile::regular("packaging", b"make", 0o755).without_mode();
        let text = format!("v2packaging{}", sha256_digest(b"make"));
        assert_eq!(fingerprint(&[p], &[]), sha256_hex(text.as_bytes()));
    }
}
