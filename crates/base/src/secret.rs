//! Values that must never reach a log: CPI properties (IaaS credentials), agent certificates.

use serde_json::Value;

/// A value whose `Debug` and `Display` print `<redacted>`; read it with [`Secret::expose`].
#[derive(Clone, Default, PartialEq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps a value.
    pub fn new(value: T) -> Self {
        Secret(value)
    }

    /// The value itself; do not log it.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> From<T> for Secret<T> {
    fn from(value: T) -> Self {
        Secret(value)
    }
}

impl<T> std::fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl<T> std::fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Reads the plain value (configuration files); there is deliberately no `Serialize`.
impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Secret<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Secret::new)
    }
}

/// Strings shorter than this are not scrubbed from free-form text (they would mangle it and
/// are not credentials worth the name).
const MIN_SCRUB_LEN: usize = 4;

/// Collects the string leaves of `value` (and each line of multi-line strings, so PEM blocks
/// are caught line by line) into `out`, for [`scrub`].
pub fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            let mut push = |s: &str| {
                let s = s.trim();
                if s.len() >= MIN_SCRUB_LEN && !out.iter().any(|o| o == s) {
                    out.push(s.to_string());
                }
            };
            push(s);
            if s.contains('\n') {
                s.lines().for_each(push);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// Replaces every occurrence of each secret in `text` with `<redacted>`; longest first, so a
/// secret that contains another is removed whole.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    if secrets.is_empty() {
        return text.to_string();
    }
    let mut sorted: Vec<&String> = secrets.iter().collect();
    sorted.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_string();
    for s in sorted {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "<redacted>");
        }
    }
    out
}

/// The first `max` characters of `text`, with a marker when cut.
pub fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((at, _)) => format!("{}... ({} bytes in all)", &text[..at], text.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_never_prints() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?}"), "<redacted> <redacted>");
        assert_eq!(*s.expose(), "hunter2");
    }

    #[test]
    fn scrub_removes_leaves_and_pem_lines() {
        let mut secrets = Vec::new();
        collect_strings(
            &json!({"a": "s3cr3t-key", "b": ["x", "-----BEGIN KEY-----\nAAAABBBB\n-----END KEY-----"], "n": 1}),
            &mut secrets,
        );
        let text = "key=s3cr3t-key short=x line AAAABBBB";
        assert_eq!(
            scrub(text, &secrets),
            "key=<redacted> short=x line <redacted>"
        );
    }

    #[test]
    fn excerpt_cuts_on_char_boundaries() {
        assert_eq!(excerpt("héllo", 10), "héllo");
        assert_eq!(excerpt("héllo", 2), "hé... (6 bytes in all)");
    }
}

/// The key of a sealed value ([`seal`]).
const SEALED: &str = "kubosh.io/sealed-sha256";

/// A value standing for `value` by its digest, for records kept where others can read them
/// (a VM's `env` holds the agent's password hash, mbus credentials, interpolated variables):
/// `{"kubosh.io/sealed-sha256": "<hex>"}`, the sha256 of its JSON with keys sorted. Sealing a
/// sealed value changes nothing, nor does sealing `null` or `{}` (nothing to hide); compare
/// with [`same_value`].
pub fn seal(value: &Value) -> Value {
    let empty = value.is_null() || value.as_object().is_some_and(|m| m.is_empty());
    if empty || sealed_digest(value).is_some() {
        return value.clone();
    }
    serde_json::json!({ SEALED: digest(value) })
}

/// The sha256 (hex) of `value`'s JSON with object keys sorted: equal values, one digest.
pub fn digest(value: &Value) -> String {
    let mut text = String::new();
    canonical_json(value, &mut text);
    crate::digest::sha256_hex(text.as_bytes())
}

/// Whether `a` and `b` are the same value, either possibly [`seal`]ed.
pub fn same_value(a: &Value, b: &Value) -> bool {
    match (sealed_digest(a), sealed_digest(b)) {
        (None, None) => a == b,
        _ => seal(a) == seal(b),
    }
}

fn sealed_digest(value: &Value) -> Option<&str> {
    let map = value.as_object().filter(|m| m.len() == 1)?;
    map.get(SEALED)?.as_str()
}

/// JSON with object keys sorted at every level, so equal values (maps compare without
/// order) have one text.
fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod sealing {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sealed_value_hides_it_and_compares_equal_to_it_in_any_key_order() {
        let env = json!({"bosh": {"password": "s3cret", "mbus": {"cert": "pem"}}, "a": [1, 2]});
        let reordered =
            json!({"a": [1, 2], "bosh": {"mbus": {"cert": "pem"}, "password": "s3cret"}});
        let sealed = seal(&env);
        assert!(!sealed.to_string().contains("s3cret"));
        assert_eq!(seal(&sealed), sealed);
        assert_eq!(seal(&reordered), sealed);
        assert!(same_value(&sealed, &env) && same_value(&env, &sealed));
        assert!(same_value(&env, &reordered));
        assert!(!same_value(
            &sealed,
            &json!({"bosh": {"password": "other"}})
        ));
        assert!(!same_value(&json!({}), &sealed));
        assert_eq!(seal(&json!({})), json!({}));
        assert_eq!(seal(&Value::Null), Value::Null);
    }
}
