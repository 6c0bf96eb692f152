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
