//! YAML as go-yaml v2 (`gopkg.in/yaml.v2` v2.4.0) `Marshal`s a generic tree, byte for byte:
//! what `bosh int` prints, and what bosh-cli's `current_manifest_sha` is the SHA-512 of.
//! Written from the emitter's rules, not its code:
//!
//! - mapping keys sorted by `keyList.Less` (strings rune by rune, runs of digits by value,
//!   non-letters before letters), 2-space indentation, a sequence under a key not indented;
//! - a string is plain unless it would read back as something else (YAML 1.1: `yes`, `on`,
//!   `1.0`, `0x1f`, `2006-01-02`, `1:20`, `null`, `""`…, then double-quoted) or the plain
//!   style cannot carry it (indicators, `: `, ` #`, leading or trailing spaces, then single-
//!   quoted; control characters, then double-quoted); a string with a line break is a
//!   literal block (`|`, `|-`, `|+`, an indentation digit when it starts with a space);
//! - plain and quoted scalars fold at a space past column 80;
//! - numbers as Go formats them (`strconv.FormatFloat(f, 'g', -1, 64)` for floats);
//! - marked scalars ([`super::mark`]: non-string keys, `.inf`) as the scalars they stand
//!   for, non-string keys sorted among the others as go-yaml v2 sorts mixed keys.

use serde_json::{Map, Value};

use super::mark::{Marked, go_float, unmark};
use super::resolve::{Resolved, is_base60_float, resolve_plain};

/// Where scalars fold.
const BEST_WIDTH: usize = 80;

/// The document as go-yaml v2 writes it.
pub fn to_string(value: &Value) -> String {
    let mut e = Emitter::default();
    match value {
        Value::Object(m) if !m.is_empty() => e.mapping(m, 0, false),
        Value::Array(a) if !a.is_empty() => e.sequence(a, 0),
        other => {
            e.inline_value(other, 0);
            e.newline();
        }
    }
    e.out
}

#[derive(Default)]
struct Emitter {
    out: String,
    column: usize,
}

impl Emitter {
    fn write(&mut self, s: &str) {
        for c in s.chars() {
            self.out.push(c);
            if c == '\n' {
                self.column = 0;
            } else {
                self.column += 1;
            }
        }
    }

    fn newline(&mut self) {
        self.write("\n");
    }

    fn indent(&mut self, n: usize) {
        if self.column > 0 {
            self.newline();
        }
        self.write(&" ".repeat(n));
    }

    /// A block mapping at `indent`; `inline_first`: the first key goes where the cursor is
    /// (after `- `).
    fn mapping(&mut self, m: &Map<String, Value>, indent: usize, inline_first: bool) {
        let mut keys: Vec<&String> = m.keys().collect();
        sort_keys(&mut keys);
        for (i, key) in keys.into_iter().enumerate() {
            if !(i == 0 && inline_first) {
                self.indent(indent);
            }
            self.scalar(key, indent, true);
            self.write(":");
            let value = &m[key];
            match value {
                Value::Object(inner) if !inner.is_empty() => {
                    self.newline();
                    self.mapping(inner, indent + 2, false);
                }
                Value::Array(items) if !items.is_empty() => {
                    self.newline();
                    // A sequence in a mapping is not indented.
                    self.sequence(items, indent);
                }
                other => {
                    self.write(" ");
                    self.inline_value(other, indent);
                    self.newline();
                }
            }
        }
    }

    fn sequence(&mut self, items: &[Value], indent: usize) {
        self.sequence_from(items, indent, false);
    }

    fn sequence_from(&mut self, items: &[Value], indent: usize, inline_first: bool) {
        for (i, item) in items.iter().enumerate() {
            if !(i == 0 && inline_first) {
                self.indent(indent);
            }
            self.write("- ");
            match item {
                Value::Object(m) if !m.is_empty() => self.mapping(m, indent + 2, true),
                Value::Array(a) if !a.is_empty() => self.sequence_from(a, indent + 2, true),
                other => {
                    self.inline_value(other, indent);
                    self.newline();
                }
            }
        }
    }

    /// A scalar or empty collection after `key: ` or `- `; `indent` is its parent's.
    fn inline_value(&mut self, v: &Value, indent: usize) {
        match v {
            Value::Null => self.write("null"),
            Value::Bool(b) => self.write(if *b { "true" } else { "false" }),
            Value::Number(n) => {
                let text = number(n);
                self.write(&text);
            }
            Value::String(s) => match unmark(s) {
                Some(marked) => self.write(&marked.text()),
                None => self.scalar(s, indent, false),
            },
            Value::Object(_) => self.write("{}"),
            Value::Array(_) => self.write("[]"),
        }
    }

    /// A string scalar; `indent` is the enclosing node's (continuation lines and block
    /// contents are 2 deeper); `key`: a simple key (no folding, no block).
    fn scalar(&mut self, s: &str, indent: usize, key: bool) {
        if let Some(marked) = unmark(s) {
            self.write(&marked.text());
            return;
        }
        let a = analyze(s);
        let can_use_plain = resolves_to_string(s) && !is_base60_float(s);
        let mut style = if s.contains('\n') && !key {
            Style::Literal
        } else if can_use_plain {
            Style::Plain
        } else {
            Style::Double
        };
        if key && a.multiline {
            style = Style::Double;
        }
        if style == Style::Plain && (!a.block_plain_allowed || (s.is_empty() && key)) {
            style = Style::Single;
        }
        if style == Style::Single && !a.single_quoted_allowed {
            style = Style::Double;
        }
        if style == Style::Literal && (!a.block_allowed || key) {
            style = Style::Double;
        }
        let inner = indent + 2;
        match style {
            Style::Plain => self.folded(s, inner, !key, None),
            Style::Single => {
                self.write("'");
                self.folded(s, inner, !key, Some('\''));
                self.write("'");
            }
            Style::Double => self.double_quoted(s, inner, !key),
            Style::Literal => self.literal(s, inner),
        }
    }

    /// Plain or single-quoted text, folding at a space past the best width (single quotes
    /// doubled when `quote` is set).
    fn folded(&mut self, s: &str, indent: usize, allow_breaks: bool, quote: Option<char>) {
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == ' ' {
                let next_is_space = chars.get(i + 1) == Some(&' ');
                // Single-quoted text never folds at its first or last character.
                let edge = quote.is_some() && (i == 0 || i + 1 == chars.len());
                if allow_breaks && !spaces && self.column > BEST_WIDTH && !next_is_space && !edge {
                    self.newline();
                    self.write(&" ".repeat(indent));
                } else {
                    self.write(" ");
                }
                spaces = true;
            } else {
                if Some(c) == quote {
                    self.write("''");
                } else {
                    self.out.push(c);
                    self.column += 1;
                }
                spaces = false;
            }
            i += 1;
        }
    }

    fn double_quoted(&mut self, s: &str, indent: usize, allow_breaks: bool) {
        self.write("\"");
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if !is_printable(c) || c == '\u{feff}' || is_break(c) || c == '"' || c == '\\' {
                let esc = match c {
                    '\0' => "\\0".to_string(),
                    '\u{7}' => "\\a".to_string(),
                    '\u{8}' => "\\b".to_string(),
                    '\t' => "\\t".to_string(),
                    '\n' => "\\n".to_string(),
                    '\u{b}' => "\\v".to_string(),
                    '\u{c}' => "\\f".to_string(),
                    '\r' => "\\r".to_string(),
                    '\u{1b}' => "\\e".to_string(),
                    '"' => "\\\"".to_string(),
                    '\\' => "\\\\".to_string(),
                    '\u{85}' => "\\N".to_string(),
                    '\u{a0}' => "\\_".to_string(),
                    '\u{2028}' => "\\L".to_string(),
                    '\u{2029}' => "\\P".to_string(),
                    c if (c as u32) <= 0xff => format!("\\x{:02X}", c as u32),
                    c if (c as u32) <= 0xffff => format!("\\u{:04X}", c as u32),
                    c => format!("\\U{:08X}", c as u32),
                };
                self.write(&esc);
                spaces = false;
            } else if c == ' ' {
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i != 0
                    && i + 1 != chars.len()
                {
                    self.newline();
                    self.write(&" ".repeat(indent));
                    if chars.get(i + 1) == Some(&' ') {
                        self.write("\\");
                    }
                } else {
                    self.write(" ");
                }
                spaces = true;
            } else {
                self.out.push(c);
                self.column += 1;
                spaces = false;
            }
        }
        self.write("\"");
    }

    fn literal(&mut self, s: &str, indent: usize) {
        self.write("|");
        if s.starts_with(' ') || s.starts_with(is_break) {
            self.write("2");
        }
        let trailing = s.chars().rev().take_while(|c| is_break(*c)).count();
        if trailing == 0 {
            self.write("-");
        } else if trailing > 1 || s.chars().count() == 1 {
            self.write("+");
        }
        self.newline();
        let mut at_line_start = true;
        for c in s.chars() {
            if is_break(c) {
                self.newline();
                at_line_start = true;
            } else {
                if at_line_start {
                    self.write(&" ".repeat(indent));
                    at_line_start = false;
                }
                self.out.push(c);
                self.column += 1;
            }
        }
        // The mapping or sequence ends the line; a text that ended with a break has.
        if self.column == 0 {
            // Undo: the caller writes the line break after the value.
            self.out.pop();
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

struct Analysis {
    multiline: bool,
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_printable(c: char) -> bool {
    let u = c as u32;
    u == 0x0a
        || (0x20..=0x7e).contains(&u)
        || u == 0x85
        || (0xa0..=0xd7ff).contains(&u)
        || ((0xe000..=0xfffd).contains(&u) && u != 0xfeff)
        || (0x10000..=0x10ffff).contains(&u)
}

/// The emitter's scalar analysis, for block context.
fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            multiline: false,
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    let chars: Vec<char> = s.chars().collect();
    let mut block_indicators = false;
    if s.starts_with("---") || s.starts_with("...") {
        block_indicators = true;
    }
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break, mut previous_space, mut previous_break) =
        (false, false, false, false);
    let (mut line_breaks, mut special) = (false, false);
    let mut preceded_by_whitespace = true;
    let n = chars.len();
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_whitespace =
            i + 1 >= n || matches!(chars[i + 1], ' ' | '\t') || is_break(chars[i + 1]);
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' if followed_by_whitespace => block_indicators = true,
                '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) {
            special = true;
        }
        if c == ' ' {
            if i == 0 {
                leading_space = true;
            }
            if i + 1 == n {
                trailing_space = true;
            }
            if previous_break {
                break_space = true;
            }
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            line_breaks = true;
            if i == 0 {
                leading_break = true;
            }
            if i + 1 == n {
                trailing_break = true;
            }
            if previous_space {
                space_break = true;
            }
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = matches!(c, ' ' | '\t') || is_break(c);
    }
    let mut a = Analysis {
        multiline: line_breaks,
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.block_plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || special {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
        a.block_allowed = false;
    }
    if line_breaks || block_indicators {
        a.block_plain_allowed = false;
    }
    a
}

/// Whether go-yaml v2 reads `s`, unquoted, back as a string (YAML 1.1 resolution).
fn resolves_to_string(s: &str) -> bool {
    resolve_plain(s) == Resolved::Str
}

/// Sorts keys as go-yaml v2 sorts them. `keyList.Less` is not a total order when a key is
/// `.nan` (it is neither less nor more than any number), so no library sort may be used
/// (Rust's panics on such an order): up to 12 keys, the insertion sort Go's `sort.Sort`
/// runs on so few, which gives Go's very order; beyond, a merge sort, which gives Go's
/// order whenever the order is total (always, but for `.nan` keys).
fn sort_keys(keys: &mut Vec<&String>) {
    let less = |a: &str, b: &str| key_order(a, b) == std::cmp::Ordering::Less;
    if keys.len() <= 12 {
        for i in 1..keys.len() {
            let mut j = i;
            while j > 0 && less(keys[j], keys[j - 1]) {
                keys.swap(j, j - 1);
                j -= 1;
            }
        }
        return;
    }
    let middle = keys.len() / 2;
    let mut right = keys.split_off(middle);
    sort_keys(keys);
    sort_keys(&mut right);
    let left = std::mem::take(keys);
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    while let (Some(a), Some(b)) = (l.peek(), r.peek()) {
        let next = if less(b, a) { r.next() } else { l.next() };
        keys.extend(next);
    }
    keys.extend(l);
    keys.extend(r);
}

/// go-yaml v2's `keyList.Less` as an ordering of two keys, marked ones by their type:
/// numbers and booleans by value (before anything else), then a null, then strings.
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let less = |a: &str, b: &str| match (key_kind(a), key_kind(b)) {
        ((ak, Some(af)), (bk, Some(bf))) => {
            if af != bf {
                af < bf
            } else {
                ak < bk
            }
        }
        ((24, _), (24, _)) => key_less(a, b),
        ((ak, _), (bk, _)) => ak < bk,
    };
    if less(a, b) {
        Ordering::Less
    } else if less(b, a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// A key's Go `reflect.Kind` number (bool 1, int 2, uint64 11, float64 14, a nil interface
/// 20, string 24) and, for numbers and booleans, its value as a float.
fn key_kind(key: &str) -> (u8, Option<f64>) {
    match unmark(key) {
        None => (24, None),
        Some(Marked::Null) => (20, None),
        Some(Marked::Bool(b)) => (1, Some(if b { 1.0 } else { 0.0 })),
        Some(Marked::Int(i)) => (2, Some(i as f64)),
        Some(Marked::Uint(u)) => (11, Some(u as f64)),
        Some(Marked::Float(f, _)) => (14, Some(f)),
    }
}

/// go-yaml v2's `keyList.Less` for two string keys.
fn key_less(a: &str, b: &str) -> bool {
    let ar: Vec<char> = a.chars().collect();
    let br: Vec<char> = b.chars().collect();
    let mut i = 0;
    while i < ar.len() && i < br.len() {
        if ar[i] == br[i] {
            i += 1;
            continue;
        }
        let al = ar[i].is_alphabetic();
        let bl = br[i].is_alphabetic();
        if al && bl {
            return ar[i] < br[i];
        }
        if al || bl {
            return bl;
        }
        let (mut an, mut bn): (i64, i64) = (0, 0);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an.wrapping_mul(10).wrapping_add(ar[ai] as i64 - '0' as i64);
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn.wrapping_mul(10).wrapping_add(br[bi] as i64 - '0' as i64);
            bi += 1;
        }
        if an != bn {
            return an < bn;
        }
        if ai != bi {
            return ai < bi;
        }
        return ar[i] < br[i];
    }
    ar.len() < br.len()
}

/// A number as go-yaml v2 writes it: integers in decimal, floats as Go's
/// `strconv.FormatFloat(f, 'g', -1, 64)`.
fn number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    go_float(n.as_f64().unwrap_or(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_sort_as_go_yaml_v2_sorts_them() {
        let mut keys = vec!["b", "a10", "a2", "_x", "A", "a", "z1", "z01", "1"];
        keys.sort_by(|a, b| {
            if key_less(a, b) {
                std::cmp::Ordering::Less
            } else if key_less(b, a) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        assert_eq!(keys, ["_x", "1", "A", "a", "a2", "a10", "b", "z1", "z01"]);
    }

    #[test]
    fn block_layout_and_scalars() {
        let v = json!({
            "name": "bosh",
            "releases": [{"name": "bosh", "version": "282.1.6", "sha1": "abc"}],
            "empty": {}, "none": [], "nothing": null,
            "nested": [[1, 2], {"a": true}],
            "strings": ["yes", "1.0", "0x1f", "", "a: b", "- x", "#c", "plain text", "2006-01-02", "1:20", " lead"],
            "cert": "-----BEGIN-----\nabc\n-----END-----\n",
            "nonl": "a\nb",
            "num": 1.5, "big": 1e21, "int": 6868,
        });
        assert_eq!(
            to_string(&v),
            "big: 1e+21
cert: |
  -----BEGIN-----
  abc
  -----END-----
empty: {}
int: 6868
name: bosh
nested:
- - 1
  - 2
- a: true
none: []
nonl: |-
  a
  b
nothing: null
num: 1.5
releases:
- name: bosh
  sha1: abc
  version: 282.1.6
strings:
- \"yes\"
- \"1.0\"
- \"0x1f\"
- \"\"
- 'a: b'
- '- x'
- '#c'
- plain text
- \"2006-01-02\"
- \"1:20\"
- ' lead'
"
        );
    }

    #[test]
    fn long_plain_text_folds_past_column_80() {
        let words = vec!["word"; 30].join(" ");
        let text = to_string(&json!({"description": words}));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].len() > 80 && lines[0].len() < 90, "{text}");
        assert!(lines[1].starts_with("  word"), "{text}");
    }

    #[test]
    fn keys_that_are_not_ordered_never_panic() {
        // `.nan` is neither less nor more than any number: no total order.
        let nan = crate::yaml::mark::mark(crate::yaml::resolve::Resolved::Float(f64::NAN)).unwrap();
        let mut map = serde_json::Map::new();
        for i in 0..40 {
            let key = crate::yaml::mark::mark(crate::yaml::resolve::Resolved::Int(40 - i)).unwrap();
            map.insert(key, json!(i));
        }
        map.insert(nan, json!("x"));
        let text = to_string(&Value::Object(map));
        assert!(text.contains(".nan: x"), "{text}");
        assert!(
            text.find("1: 39").unwrap() < text.find("2: 38").unwrap(),
            "{text}"
        );
    }
}
