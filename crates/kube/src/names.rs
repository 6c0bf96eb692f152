//! Kubernetes names and label values made from BOSH names, which may hold characters
//! Kubernetes refuses (`diego_cell`, upper case, any length).

use kubosh_base::digest::sha256_hex;

/// Longest object name (a DNS subdomain).
const MAX_NAME: usize = 253;

/// Longest label value.
const MAX_LABEL: usize = 63;

/// An object name for `readable` (e.g. `zookeeper-diego_cell-0`): `readable` itself when it
/// is a valid DNS subdomain; otherwise lower-cased, other characters made `-`, shortened,
/// and suffixed with a hash of `exact` (the parts it was made from, unambiguously joined),
/// so two different sources never share a name.
pub fn object_name(readable: &str, exact: &str) -> String {
    let mut name = String::with_capacity(readable.len());
    for c in readable.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
            name.push(c);
        } else {
            name.push('-');
        }
    }
    let trimmed = name.trim_matches(|c: char| c == '-' || c == '.');
    if trimmed == readable && readable.len() <= MAX_NAME {
        return readable.to_string();
    }
    let hash = sha256_hex(exact.as_bytes());
    let suffix = &hash[..10];
    let room = MAX_NAME - suffix.len() - 1;
    let mut head: String = trimmed.chars().take(room).collect();
    while head.ends_with(['-', '.']) {
        head.pop();
    }
    if head.is_empty() {
        format!("h-{suffix}")
    } else {
        format!("{head}-{suffix}")
    }
}

/// Not empty, at most 63 characters of `[A-Za-z0-9_.-]`, alphanumeric at both ends: the
/// syntax of a label value and of a key's name part.
fn is_label_syntax(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_LABEL
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// `value` as a label value: itself when valid, otherwise `h-` and a hash of it.
pub fn label_value(value: &str) -> String {
    if is_label_syntax(value) {
        value.to_string()
    } else {
        format!("h-{}", &sha256_hex(value.as_bytes())[..20])
    }
}

/// The name part of an annotation or label key (after the `prefix/`): `name` when valid,
/// otherwise a hash of it.
pub fn key_name(name: &str) -> String {
    if is_label_syntax(name) {
        name.to_string()
    } else {
        sha256_hex(name.as_bytes())[..32].to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names_stay_and_others_get_a_hash() {
        assert_eq!(object_name("zk-web-0", "x"), "zk-web-0");
        let a = object_name("zk-diego_cell-0", "zk\0diego_cell\u{0}0");
        let b = object_name("zk-diego-cell-0", "zk\0diego-cell\u{0}0");
        assert!(a.starts_with("zk-diego-cell-0-"), "{a}");
        assert_ne!(a, b);
        let long = object_name(&"a".repeat(300), "long");
        assert_eq!(long.len(), MAX_NAME);
        assert_eq!(
            object_name("__", "u"),
            format!("h-{}", &sha256_hex(b"u")[..10])
        );
        assert_eq!(label_value("zookeeper"), "zookeeper");
        assert!(label_value("-bad").starts_with("h-"));
        assert_eq!(key_name("6f1c-uuid"), "6f1c-uuid");
        assert_eq!(key_name("a/b").len(), 32);
    }
}
