//! The YAML reader: granit-parser's events built into a [`Value`] as go-yaml v2 builds a
//! generic tree (`yaml.Unmarshal` into `interface{}`), which is how the BOSH CLI reads every
//! manifest, config, ops file and variable.
//!
//! - plain scalars resolve by YAML 1.1 ([`super::resolve`]); quoted and block scalars are
//!   strings; `!!str`, `!!int`… force a type, `!!binary` decodes; other tags read as text;
//! - a key that is not a string, and a non-finite float, is kept marked ([`super::mark`]);
//! - `<<` merges a mapping, or a list of them (earlier ones win), into the mapping it is in,
//!   in place: keys after it override it, it overrides keys before it (go-yaml v2's order);
//! - a repeated key: the last one wins, as in go-yaml v2;
//! - only the first document is read, as `yaml.Unmarshal` does.
//!
//! The reader bounds what a document may expand to (nodes, with aliases counted at their
//! full size; nesting; text), so an alias bomb or a hostile depth stops with a message.

use std::collections::HashMap;

use granit_parser::{Event, Parser, ScalarStyle, Span, Tag};
use serde_json::{Map, Value};

use super::mark::{MARK, mark};
use super::resolve::{Resolved, resolve_plain, resolve_tagged};

/// The most nodes one document may expand to (cf-deployment is ~40,000).
pub const MAX_NODES: u64 = 250_000;
/// The deepest nesting one document may have.
pub const MAX_DEPTH: usize = 64;
/// The most text (in bytes, aliases counted at their full size) one document may hold.
pub const MAX_TEXT_BYTES: u64 = 256 << 20;

/// Why a document could not be read, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    /// What is wrong.
    pub kind: ReadErrorKind,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

/// The kinds of [`ReadError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadErrorKind {
    /// Not YAML at all (the parser's explanation).
    Syntax(String),
    /// YAML, but not something go-yaml v2 builds a tree of (a list as a key, a bad merge,
    /// a tagged scalar of another type).
    Meaning(String),
    /// Beyond one of the reader's limits.
    Limit(Limit),
}

/// The reader's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`MAX_NODES`].
    Nodes,
    /// [`MAX_DEPTH`].
    Depth,
    /// [`MAX_TEXT_BYTES`].
    Text,
}

/// A node's expanded size, for the limits.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    nodes: u64,
    bytes: u64,
}

enum Frame {
    Seq {
        items: Vec<Value>,
        anchor: usize,
        size: Size,
    },
    Map {
        map: Map<String, Value>,
        anchor: usize,
        size: Size,
        key: Option<Key>,
    },
}

enum Key {
    Merge,
    Name(String),
}

struct Builder {
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Value, Size)>,
    total: Size,
    root: Option<Value>,
}

/// Reads the first document of `text` (an empty one is `null`).
pub fn read(text: &str) -> Result<Value, ReadError> {
    let mut b = Builder {
        stack: Vec::new(),
        anchors: HashMap::new(),
        total: Size::default(),
        root: None,
    };
    let mut parser = Parser::new_from_str(text);
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| ReadError {
            kind: ReadErrorKind::Syntax(e.info()),
            line: e.marker().line(),
            column: e.marker().col() + 1,
        })?;
        let at = |kind| ReadError {
            kind,
            line: span.start.line(),
            column: span.start.col() + 1,
        };
        match event {
            Event::DocumentEnd | Event::StreamEnd => break,
            Event::Scalar(text, style, anchor, tag) => {
                b.scalar(&text, style, anchor, tag.as_deref()).map_err(at)?
            }
            Event::SequenceStart(_, anchor, _) => b.open(
                Frame::Seq {
                    items: Vec::new(),
                    anchor,
                    size: Size::default(),
                },
                &span,
            )?,
            Event::MappingStart(_, anchor, _) => b.open(
                Frame::Map {
                    map: Map::new(),
                    anchor,
                    size: Size::default(),
                    key: None,
                },
                &span,
            )?,
            Event::SequenceEnd | Event::MappingEnd => b.close().map_err(at)?,
            Event::Alias(id) => {
                let (value, size) = b
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| at(ReadErrorKind::Meaning("unknown anchor".into())))?;
                b.count(size).map_err(at)?;
                b.complete(value, size, 0).map_err(at)?;
            }
            _ => {}
        }
    }
    Ok(b.root.unwrap_or(Value::Null))
}

impl Builder {
    fn count(&mut self, size: Size) -> Result<(), ReadErrorKind> {
        self.total.nodes += size.nodes;
        self.total.bytes += size.bytes;
        if self.total.nodes > MAX_NODES {
            return Err(ReadErrorKind::Limit(Limit::Nodes));
        }
        if self.total.bytes > MAX_TEXT_BYTES {
            return Err(ReadErrorKind::Limit(Limit::Text));
        }
        Ok(())
    }

    fn open(&mut self, frame: Frame, span: &Span) -> Result<(), ReadError> {
        let at = |kind| ReadError {
            kind,
            line: span.start.line(),
            column: span.start.col() + 1,
        };
        if let Some(Frame::Map { key: None, .. }) = self.stack.last() {
            return Err(at(ReadErrorKind::Meaning(
                "a mapping key must be a scalar, not a list or a mapping".into(),
            )));
        }
        if self.stack.len() >= MAX_DEPTH {
            return Err(at(ReadErrorKind::Limit(Limit::Depth)));
        }
        self.count(Size { nodes: 1, bytes: 0 }).map_err(at)?;
        self.stack.push(frame);
        Ok(())
    }

    fn close(&mut self) -> Result<(), ReadErrorKind> {
        let Some(frame) = self.stack.pop() else {
            return Ok(());
        };
        let (value, anchor, mut size) = match frame {
            Frame::Seq {
                items,
                anchor,
                size,
            } => (Value::Array(items), anchor, size),
            Frame::Map {
                map, anchor, size, ..
            } => (Value::Object(map), anchor, size),
        };
        size.nodes += 1;
        self.complete(value, size, anchor)
    }

    fn scalar(
        &mut self,
        text: &str,
        style: ScalarStyle,
        anchor: usize,
        tag: Option<&Tag>,
    ) -> Result<(), ReadErrorKind> {
        if text.starts_with(MARK) {
            return Err(ReadErrorKind::Meaning(format!(
                "a value starts with U+FDD0, a Unicode noncharacter kubosh reserves for {}",
                "keys and numbers JSON cannot hold"
            )));
        }
        let resolved = match tag.and_then(Tag::core_suffix) {
            Some(suffix) => resolve_tagged(suffix, text).map_err(ReadErrorKind::Meaning)?,
            None if style == ScalarStyle::Plain && tag.is_none() => resolve_plain(text),
            None => Resolved::Str,
        };
        let size = Size {
            nodes: 1,
            bytes: text.len() as u64,
        };
        self.count(size)?;
        let expects_key = matches!(self.stack.last(), Some(Frame::Map { key: None, .. }));
        if expects_key && resolved == Resolved::Merge
            || expects_key && style == ScalarStyle::Plain && tag.is_none() && text == "<<"
        {
            if let Some(Frame::Map { key, size: s, .. }) = self.stack.last_mut() {
                *key = Some(Key::Merge);
                s.nodes += 1;
            }
            return Ok(());
        }
        let value = match resolved {
            Resolved::Null => Value::Null,
            Resolved::Bool(b) => Value::Bool(b),
            Resolved::Int(i) => Value::from(i),
            Resolved::Uint(u) => Value::from(u),
            Resolved::Float(f) if f.is_finite() => Value::from(f),
            Resolved::Float(_) => Value::String(mark(resolved).unwrap_or_default()),
            Resolved::Str if tag.and_then(Tag::core_suffix) == Some("binary") => {
                Value::String(binary(text)?)
            }
            Resolved::Str | Resolved::Timestamp | Resolved::Merge => Value::String(text.into()),
        };
        self.complete(value, size, anchor)
    }

    /// A finished node: kept for its aliases, then given to its parent.
    fn complete(&mut self, value: Value, size: Size, anchor: usize) -> Result<(), ReadErrorKind> {
        if anchor != 0 {
            self.anchors.insert(anchor, (value.clone(), size));
        }
        let Some(parent) = self.stack.last_mut() else {
            self.root.get_or_insert(value);
            return Ok(());
        };
        match parent {
            Frame::Seq { items, size: s, .. } => {
                add(s, size);
                items.push(value);
            }
            Frame::Map {
                map, key, size: s, ..
            } => {
                add(s, size);
                match key.take() {
                    None => *key = Some(Key::Name(key_text(value)?)),
                    Some(Key::Name(name)) => {
                        map.insert(name, value);
                    }
                    Some(Key::Merge) => merge(map, value)?,
                }
            }
        }
        Ok(())
    }
}

fn add(into: &mut Size, size: Size) {
    into.nodes += size.nodes;
    into.bytes += size.bytes;
}

/// A scalar as a mapping key: strings as they are, other scalars marked.
fn key_text(value: Value) -> Result<String, ReadErrorKind> {
    let resolved = match value {
        Value::String(s) => return Ok(s),
        Value::Null => Resolved::Null,
        Value::Bool(b) => Resolved::Bool(b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Resolved::Int(i),
            (_, Some(u), _) => Resolved::Uint(u),
            (_, _, f) => Resolved::Float(f.unwrap_or(0.0)),
        },
        Value::Array(_) | Value::Object(_) => {
            return Err(ReadErrorKind::Meaning(
                "a mapping key must be a scalar, not a list or a mapping".into(),
            ));
        }
    };
    Ok(mark(resolved).unwrap_or_default())
}

/// `<<: value` into `map`: a mapping's keys, or each mapping's of a list, the first last
/// (so it wins).
fn merge(map: &mut Map<String, Value>, value: Value) -> Result<(), ReadErrorKind> {
    let bad =
        || ReadErrorKind::Meaning("map merge requires map or sequence of maps as the value".into());
    match value {
        Value::Object(from) => map.extend(from),
        Value::Array(items) => {
            if !items.iter().all(Value::is_object) {
                return Err(bad());
            }
            for item in items.into_iter().rev() {
                if let Value::Object(from) = item {
                    map.extend(from);
                }
            }
        }
        _ => return Err(bad()),
    }
    Ok(())
}

fn binary(text: &str) -> Result<String, ReadErrorKind> {
    use base64::Engine as _;
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|_| {
            ReadErrorKind::Meaning("!!binary value contains invalid base64 data".into())
        })?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::mark::unmark;
    use serde_json::json;

    fn read_ok(text: &str) -> Value {
        read(text).unwrap_or_else(|e| panic!("{text:?}: {e:?}"))
    }

    #[test]
    fn scalars_resolve_by_yaml_1_1_and_quotes_keep_text() {
        let v = read_ok(
            "a: 0777\nb: '0777'\nc: y\nd: \"on\"\ne: 1e3\nf: ~\ng: 08080\nh: 2001-12-14\ni: |\n  0777\nj: !!str 12\nk: !!float 3\n",
        );
        assert_eq!(
            v,
            json!({"a": 511, "b": "0777", "c": true, "d": "on", "e": 1000.0, "f": null,
                   "g": 8080.0, "h": "2001-12-14", "i": "0777\n", "j": "12", "k": 3.0})
        );
    }

    #[test]
    fn non_string_keys_and_infinities_are_marked() {
        let v = read_ok("y: 1\n0777: 2\n~: 3\n1.5: 4\nname: .inf\n");
        let map = v.as_object().unwrap();
        let keys: Vec<String> = map
            .keys()
            .map(|k| unmark(k).map_or(k.clone(), |m| m.text()))
            .collect();
        assert_eq!(keys, ["true", "511", "null", "1.5", "name"]);
        assert_eq!(
            unmark(map["name"].as_str().unwrap()).unwrap().text(),
            ".inf"
        );
    }

    #[test]
    fn merge_keys_follow_go_yaml_v2() {
        let v = read_ok(
            "base: &b {x: 1, q: 1}\nother: &o {q: 2, z: 2}\nm:\n  x: 0\n  <<: [*b, *o]\n  z: 9\n",
        );
        assert_eq!(v["m"], json!({"x": 1, "q": 1, "z": 9}));
        let err = read("a: &s 1\nm:\n  <<: *s\n").unwrap_err();
        assert!(
            matches!(err.kind, ReadErrorKind::Meaning(ref m) if m.contains("map merge")),
            "{err:?}"
        );
    }

    #[test]
    fn repeated_keys_keep_the_last_and_only_the_first_document_counts() {
        assert_eq!(read_ok("a: 1\na: 2\n---\nb: [\n"), json!({"a": 2}));
        assert_eq!(read_ok(""), Value::Null);
        assert_eq!(read_ok("# only a comment\n"), Value::Null);
    }

    #[test]
    fn limits_count_aliases_at_their_size() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let prev = if i == 1 {
                "a".to_string()
            } else {
                format!("a{}", i - 1)
            };
            bomb.push_str(&format!("a{i}: &a{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        let err = read(&bomb).unwrap_err();
        assert_eq!(err.kind, ReadErrorKind::Limit(Limit::Nodes), "{err:?}");
        let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(
            read(&deep).unwrap_err().kind,
            ReadErrorKind::Limit(Limit::Depth)
        );
    }

    #[test]
    fn errors_say_where() {
        let err = read("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(matches!(err.kind, ReadErrorKind::Syntax(_)), "{err:?}");
        assert!(err.line >= 1, "{err:?}");
        let err = read("x: 1\n? [a]\n: 2\n").unwrap_err();
        assert!(matches!(err.kind, ReadErrorKind::Meaning(_)), "{err:?}");
        assert_eq!(err.line, 2, "{err:?}");
    }
}
