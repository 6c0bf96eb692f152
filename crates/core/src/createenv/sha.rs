//! `current_manifest_sha`: the digest that tells whether a manifest was deployed.
//!
//! bosh-cli hashes (SHA-512, hex) go-yaml v2's re-serialization of the manifest after ops
//! files and variables (`bosh int … | sha512sum`). kubosh hashes the same document (after
//! ops files and variables) in its canonical JSON form (keys sorted at every level): equal
//! documents give equal digests, whatever the key order or formatting of the file. Since
//! kubosh does not reproduce go-yaml v2's bytes, each tool sees the other's digest as a
//! change and deploys once when it takes over an environment (correct, just not a no-op).

use serde_json::Value;
use sha2::{Digest, Sha512};

use super::state::canonical_json;

/// SHA-512 (lowercase hex) of the interpolated manifest.
pub fn manifest_sha(manifest: &Value) -> String {
    crate::digest::to_hex(&Sha512::digest(canonical_json(manifest).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_matter_values_do() {
        let a = manifest_sha(&json!({"name": "x", "releases": [{"name": "a", "version": 1}]}));
        let b = manifest_sha(&json!({"releases": [{"version": 1, "name": "a"}], "name": "x"}));
        let c = manifest_sha(&json!({"releases": [{"version": 2, "name": "a"}], "name": "x"}));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 128);
    }
}
