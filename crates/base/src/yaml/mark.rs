//! Scalars a YAML document holds and JSON cannot: a mapping key that is not a string
//! (`y:` is the key `true`, `0777:` the key `511`) and the floats `.inf`, `-.inf`, `.nan`.
//!
//! A document read by [`super::parse_document`] keeps them as strings marked with U+FDD0 (a
//! Unicode noncharacter, reserved for exactly such internal use), a letter for the type and
//! go-yaml v2's text of the value: `"\u{FDD0}btrue"`, `"\u{FDD0}i511"`, `"\u{FDD0}f.inf"`.
//! Ops files and variables then treat them as bosh-cli does (a path cannot name a
//! non-string key), and [`super::to_string`] writes them back unquoted, as `bosh int` does.
//! [`plain`] turns a document into what the Director works with: non-string keys become
//! their text (`"true"`, `"511"`, as BOSH's JSON has them), and a non-finite float is
//! refused (JSON, and so every job, has no such number).

use serde_json::{Map, Value};

use super::resolve::Resolved;

/// The first character of a marked scalar.
pub const MARK: char = '\u{FDD0}';

/// A scalar JSON has no place for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Marked<'a> {
    /// `~` or `null` as a key.
    Null,
    /// A boolean key.
    Bool(bool),
    /// An integer key (go-yaml's `int` kind).
    Int(i64),
    /// An integer key beyond `i64` (go-yaml's `uint64`).
    Uint(u64),
    /// A float key, or a non-finite float anywhere; `text` as go-yaml v2 writes it.
    Float(f64, &'a str),
}

impl Marked<'_> {
    /// The text go-yaml v2 writes for the scalar (and the key the Director sees).
    pub fn text(&self) -> String {
        match self {
            Marked::Null => "null".into(),
            Marked::Bool(b) => b.to_string(),
            Marked::Int(i) => i.to_string(),
            Marked::Uint(u) => u.to_string(),
            Marked::Float(_, text) => (*text).to_string(),
        }
    }
}

/// The marked string for a resolved non-string scalar (`Str`, `Timestamp` and `Merge` are
/// strings already and come back unmarked).
pub fn mark(resolved: Resolved) -> Option<String> {
    let (kind, text) = match resolved {
        Resolved::Null => ('n', "null".to_string()),
        Resolved::Bool(b) => ('b', b.to_string()),
        Resolved::Int(i) => ('i', i.to_string()),
        Resolved::Uint(u) => ('u', u.to_string()),
        Resolved::Float(f) => ('f', go_float(f)),
        Resolved::Str | Resolved::Timestamp | Resolved::Merge => return None,
    };
    Some(format!("{MARK}{kind}{text}"))
}

/// The scalar a marked string stands for, or `None` for an ordinary string.
pub fn unmark(s: &str) -> Option<Marked<'_>> {
    let rest = s.strip_prefix(MARK)?;
    let mut chars = rest.chars();
    let kind = chars.next()?;
    let text = chars.as_str();
    match kind {
        'n' => Some(Marked::Null),
        'b' => Some(Marked::Bool(text == "true")),
        'i' => text.parse().ok().map(Marked::Int),
        'u' => text.parse().ok().map(Marked::Uint),
        'f' => Some(Marked::Float(float_of(text), text)),
        _ => None,
    }
}

fn float_of(text: &str) -> f64 {
    match text {
        ".inf" => f64::INFINITY,
        "-.inf" => f64::NEG_INFINITY,
        ".nan" => f64::NAN,
        _ => text.parse().unwrap_or(0.0),
    }
}

/// A value that JSON cannot hold and a job cannot be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} {}", self.reason())]
pub struct NotJson {
    /// Where in the document, as `instance_groups[0].properties.x`.
    pub path: String,
    /// The value as written back (`.inf`, `-.inf`, `.nan`).
    pub text: String,
}

impl NotJson {
    /// What is wrong, without where.
    pub fn reason(&self) -> String {
        let text = &self.text;
        format!(
            "is {text}, a number JSON cannot hold, so no BOSH job can be given it; quote it ('{text}') to mean the text"
        )
    }
}

/// The document as the Director works with it: non-string keys as their text, no marks.
pub fn plain(value: Value) -> Result<Value, NotJson> {
    let mut path = String::new();
    plain_at(value, &mut path)
}

fn plain_at(value: Value, path: &mut String) -> Result<Value, NotJson> {
    Ok(match value {
        Value::String(s) => match unmark(&s) {
            Some(marked) => {
                return Err(NotJson {
                    path: if path.is_empty() {
                        "the document".into()
                    } else {
                        path.clone()
                    },
                    text: marked.text(),
                });
            }
            None => Value::String(s),
        },
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                out.push(plain_at(item, path)?);
                path.truncate(len);
            }
            Value::Array(out)
        }
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, item) in map {
                let key = match unmark(&key) {
                    Some(marked) => marked.text(),
                    None => key,
                };
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key);
                let item = plain_at(item, path)?;
                path.truncate(len);
                out.insert(key, item);
            }
            Value::Object(out)
        }
        other => other,
    })
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)` as go-yaml v2 writes floats: the shortest
/// digits that read back, in exponent form (`1e+06`) when the exponent is below -4 or at
/// least 6 (Go's shortest `%g` switches at a precision of 6); `.inf`, `-.inf`, `.nan` for
/// the non-finite.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Shortest round-trip digits from Rust's `{:e}`: "d.ddddde-x".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let sign = if mantissa.starts_with('-') { "-" } else { "" };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if !(-4..6).contains(&exp) {
        let mut m = digits[..1].to_string();
        if digits.len() > 1 {
            m.push('.');
            m.push_str(&digits[1..]);
        }
        let e_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{e_sign}{:02}", exp.abs())
    } else if exp >= 0 {
        let point = (exp + 1) as usize;
        if digits.len() <= point {
            format!("{sign}{digits}{}", "0".repeat(point - digits.len()))
        } else {
            format!("{sign}{}.{}", &digits[..point], &digits[point..])
        }
    } else {
        format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn marks_round_trip() {
        for r in [
            Resolved::Null,
            Resolved::Bool(true),
            Resolved::Int(-511),
            Resolved::Uint(u64::MAX),
            Resolved::Float(1.5),
            Resolved::Float(f64::NEG_INFINITY),
        ] {
            let marked = mark(r).unwrap();
            assert!(unmark(&marked).is_some(), "{marked:?}");
        }
        assert_eq!(
            unmark(&mark(Resolved::Int(511)).unwrap()).unwrap().text(),
            "511"
        );
        assert_eq!(unmark("plain"), None);
        assert_eq!(mark(Resolved::Str), None);
    }

    #[test]
    fn plain_gives_keys_their_text_and_refuses_infinity() {
        let key = mark(Resolved::Bool(true)).unwrap();
        let doc = json!({"properties": {key: 1, "x": [1, {"y": 2}]}});
        assert_eq!(
            plain(doc).unwrap(),
            json!({"properties": {"true": 1, "x": [1, {"y": 2}]}})
        );
        let inf = mark(Resolved::Float(f64::INFINITY)).unwrap();
        let err = plain(json!({"a": [{"b": inf}]})).unwrap_err();
        assert_eq!(err.path, "a[0].b");
        assert!(
            err.to_string()
                .starts_with("a[0].b is .inf, a number JSON cannot hold"),
            "{err}"
        );
    }

    #[test]
    fn floats_as_go_formats_them() {
        for (f, text) in [
            (1.0, "1"),
            (0.5, "0.5"),
            (100000.0, "100000"),
            (1e6, "1e+06"),
            (1e21, "1e+21"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (f64::NAN, ".nan"),
        ] {
            assert_eq!(go_float(f), text, "{f}");
        }
    }
}
