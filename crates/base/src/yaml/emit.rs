//! YAML as go-yaml v2 (`gopkg.in/yaml.v2` v2.4.0) `Marshal`s a generic tree, byte for byte,
//! because bosh-cli's `current_manifest_sha` is the SHA-512 of exactly those bytes
//! (`bosh int … | sha512sum`). Written from the emitter's rules, not its code:
//!
//! - mapping keys sorted by `keyList.Less` (strings rune by rune, runs of digits by value,
//!   non-letters before letters), 2-space indentation, a sequence under a key not indented;
//! - a string is plain unless it would read back as something else (YAML 1.1: `yes`, `on`,
//!   `1.0`, `0x1f`, `2006-01-02`, `1:20`, `null`, `""`…, then double-quoted) or the plain
//!   style cannot carry it (indicators, `: `, ` #`, leading or trailing spaces, then single-
//!   quoted; control characters, then double-quoted); a string with a line break is a
//!   literal block (`|`, `|-`, `|+`, an indentation digit when it starts with a space);
//! - plain and quoted scalars fold at a space past column 80;
//! - numbers as Go formats them (`strconv.FormatFloat(f, 'g', -1, 64)` for floats).

use serde_json::{Map, Value};

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
        keys.sort_by(|a, b| {
            if key_less(a, b) {
                std::cmp::Ordering::Less
            } else if key_less(b, a) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
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
            Value::String(s) => self.scalar(s, indent, false),
            Value::Object(_) => self.write("{}"),
            Value::Array(_) => self.write("[]"),
        }
    }

    /// A string scalar; `indent` is the enclosing node's (continuation lines and block
    /// contents are 2 deeper); `key`: a simple key (no folding, no block).
    fn scalar(&mut self, s: &str, indent: usize, key: bool) {
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
    const WORDS: &[&str] = &[
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
        "-.Inf", "-.INF", "<<",
    ];
    if WORDS.contains(&s) {
        return false;
    }
    let Some(first) = s.chars().next() else {
        return false;
    };
    if !(first.is_ascii_digit() || first == '+' || first == '-' || first == '.') {
        return true;
    }
    if first != '.' && is_timestamp(s) {
        return false;
    }
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    if first != '.' && (go_parse_int(&plain) || is_binary(&plain)) {
        return false;
    }
    !is_yaml_float(&plain)
}

/// Go's `strconv.ParseInt(s, 0, 64)` / `ParseUint` acceptance (underscores removed).
fn go_parse_int(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (digits, radix) =
        if let Some(r) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (r, 16)
        } else if let Some(r) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (r, 2)
        } else if let Some(r) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (r, 8)
        } else if body.len() > 1 && body.starts_with('0') {
            (&body[1..], 8)
        } else {
            (body, 10)
        };
    !digits.is_empty() && u128::from_str_radix(digits, radix).is_ok_and(|v| v <= u64::MAX as u128)
}

fn is_binary(s: &str) -> bool {
    let body = s.strip_prefix('-').unwrap_or(s);
    body.strip_prefix("0b")
        .is_some_and(|r| !r.is_empty() && r.chars().all(|c| c == '0' || c == '1'))
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let digits = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && frac.chars().all(|c| c.is_ascii_digit()),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// `YYYY-M-D` with an optional time, as go-yaml v2's `parseTimestamp` accepts.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 8 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let rest = &s[5..];
    let (date, time) = match rest.find(['T', 't', ' ']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let Some((m, d)) = date.split_once('-') else {
        return false;
    };
    let num = |t: &str, max: u32| {
        (1..=2).contains(&t.len()) && t.parse::<u32>().is_ok_and(|v| (1..=max).contains(&v))
    };
    if !num(m, 12) || !num(d, 31) {
        return false;
    }
    match time {
        None => true,
        Some(t) => {
            let t = t.trim_end_matches('Z');
            let clock = t.split(['+', '-']).next().unwrap_or("");
            let parts: Vec<&str> = clock.split(':').collect();
            parts.len() == 3
                && parts[..2]
                    .iter()
                    .all(|p| (1..=2).contains(&p.len()) && p.chars().all(|c| c.is_ascii_digit()))
                && parts[2].split('.').next().is_some_and(|p| {
                    (1..=2).contains(&p.len()) && p.chars().all(|c| c.is_ascii_digit())
                })
        }
    }
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`
fn is_base60_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, frac) = match body.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (body, None),
    };
    if frac.is_some_and(|f| !f.chars().all(|c| c.is_ascii_digit() || c == '_')) {
        return false;
    }
    let mut parts = main.split(':');
    let head = parts.next().unwrap_or("");
    if !head.starts_with(|c: char| c.is_ascii_digit())
        || !head.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return false;
    }
    let rest: Vec<&str> = parts.collect();
    !rest.is_empty()
        && rest.iter().all(|p| {
            let b = p.as_bytes();
            match b.len() {
                1 => b[0].is_ascii_digit(),
                2 => (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit(),
                _ => false,
            }
        })
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

/// A number as go-yaml v2 writes it: integers in decimal, floats as
/// `strconv.FormatFloat(f, 'g', -1, 64)` (`.inf`, `-.inf`, `.nan` for the specials).
fn number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    go_float(f)
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`: the shortest digits that read back, in
/// exponent form (`1e+06`) when the exponent is below -4 or at least 6.
fn go_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Shortest round-trip digits from Rust's `{:e}`: "d.ddddde-x".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let nd = digits.len() as i32;
    // Shortest formatting decides with a precision of 6.
    let eprec = 6;
    let sign = if negative { "-" } else { "" };
    if exp < -4 || exp >= eprec {
        let mut m = digits[..1].to_string();
        if nd > 1 {
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
    fn floats_as_go_formats_them() {
        for (f, text) in [
            (1.0, "1"),
            (0.5, "0.5"),
            (100000.0, "100000"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
        ] {
            assert_eq!(go_float(f), text, "{f}");
        }
    }
}
