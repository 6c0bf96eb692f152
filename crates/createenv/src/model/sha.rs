//! `current_manifest_sha`: the digest that tells whether a manifest was deployed.
//!
//! As bosh-cli computes it: SHA-512 (lowercase hex) of go-yaml v2's serialization
//! ([`kubosh_base::yaml::to_string`]) of the manifest after ops files and variables, the same bytes `bosh int`
//! prints. So an environment deployed by one tool is "nothing to do" for the other.

use serde_json::Value;
use sha2::{Digest, Sha512};

/// SHA-512 (lowercase hex) of the interpolated manifest as go-yaml v2 writes it.
pub fn manifest_sha(manifest: &Value) -> String {
    let text = kubosh_base::yaml::to_string(manifest).unwrap_or_default();
    kubosh_base::digest::to_hex(&Sha512::digest(text.as_bytes()))
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
        // sha512 of "name: x\nreleases:\n- name: a\n  version: 1\n"
        assert_eq!(
            a,
            kubosh_base::digest::to_hex(&Sha512::digest(
                b"name: x\nreleases:\n- name: a\n  version: 1\n"
            ))
        );
    }
}
