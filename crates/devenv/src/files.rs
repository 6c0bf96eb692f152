//! Files that hold secrets.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes a file only its owner may read (keys, tokens, a kubeconfig with a token). A file
/// that exists keeps its mode: these are only ever written by this module.
pub(crate) fn write_private(path: &Path, text: &str) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
}
