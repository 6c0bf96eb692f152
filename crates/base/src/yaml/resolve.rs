//! What a plain YAML scalar means, by YAML 1.1 as go-yaml v2 (`resolve.go`) decides it: the
//! rules the BOSH CLI reads manifests, ops files and variables with, and that its writer
//! quotes by (a string that would read back as something else is quoted).
//!
//! A table first (`y`/`yes`/`on`/`true` and their `n`/`no`/`off`/`false` twins in three
//! casings, `~`/`null`/empty, `.inf`/`.nan`); a scalar starting with a digit or sign is then
//! tried as a timestamp, as Go's `strconv.ParseInt(s, 0, 64)` with `_` removed (`0777` is
//! octal 511, `0x1F`, `0o17`, `0b101`), as an unsigned, and as a float if it has YAML's
//! float shape (`08080` and `1e3` are floats); one starting with `.` as a float. Everything
//! else is a string. No sexagesimal numbers (go-yaml v2 dropped them on reading).

/// The value of a scalar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Resolved {
    /// `~`, `null`, `Null`, `NULL`, or nothing.
    Null,
    /// `true`/`y`/`yes`/`on`… or `false`/`n`/`no`/`off`….
    Bool(bool),
    /// An integer that fits 64 signed bits.
    Int(i64),
    /// A positive integer beyond `i64::MAX` that fits 64 unsigned bits.
    Uint(u64),
    /// A float, `.inf` and `.nan` included.
    Float(f64),
    /// A date or date and time. go-yaml v2 hands these to generic trees as the text itself,
    /// so it only decides that such a string is quoted on the way out.
    Timestamp,
    /// The merge key `<<`.
    Merge,
    /// Text.
    Str,
}

/// How go-yaml v2 resolves `s` written plain (unquoted, untagged).
pub fn resolve_plain(s: &str) -> Resolved {
    let Some(&first) = s.as_bytes().first() else {
        return Resolved::Null;
    };
    if let Some(known) = table(s) {
        return known;
    }
    match first {
        b'.' => match s.parse::<f64>() {
            // Go's ParseFloat refuses what overflows; Rust's gives an infinity.
            Ok(f) if f.is_finite() => Resolved::Float(f),
            _ => Resolved::Str,
        },
        b'0'..=b'9' | b'+' | b'-' => number_or_timestamp(s),
        _ => Resolved::Str,
    }
}

/// How go-yaml v2 resolves `s` under the explicit core tag `!!suffix` (`!!str`, `!!int`…).
/// A scalar whose text is not of its tag's type is an error, as go-yaml's `cannot decode`.
pub fn resolve_tagged(suffix: &str, s: &str) -> Result<Resolved, String> {
    let resolved = match suffix {
        "str" | "binary" => return Ok(Resolved::Str),
        "merge" if s == "<<" => return Ok(Resolved::Merge),
        _ => resolve_plain(s),
    };
    let fits = match (suffix, resolved) {
        ("null", Resolved::Null)
        | ("bool", Resolved::Bool(_))
        | ("timestamp", Resolved::Timestamp) => true,
        ("int", Resolved::Int(_) | Resolved::Uint(_)) | ("float", Resolved::Float(_)) => true,
        ("float", Resolved::Int(i)) => return Ok(Resolved::Float(i as f64)),
        ("float", Resolved::Uint(u)) => return Ok(Resolved::Float(u as f64)),
        _ => false,
    };
    if fits {
        Ok(resolved)
    } else {
        Err(format!(
            "cannot decode {} `{s}` as a !!{suffix}",
            tag_of(resolved)
        ))
    }
}

fn tag_of(r: Resolved) -> &'static str {
    match r {
        Resolved::Null => "!!null",
        Resolved::Bool(_) => "!!bool",
        Resolved::Int(_) | Resolved::Uint(_) => "!!int",
        Resolved::Float(_) => "!!float",
        Resolved::Timestamp => "!!timestamp",
        Resolved::Merge => "!!merge",
        Resolved::Str => "!!str",
    }
}

fn table(s: &str) -> Option<Resolved> {
    Some(match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            Resolved::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            Resolved::Bool(false)
        }
        "~" | "null" | "Null" | "NULL" => Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Resolved::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Resolved::Float(f64::NEG_INFINITY),
        _ => return None,
    })
}

fn number_or_timestamp(s: &str) -> Resolved {
    if is_timestamp(s) {
        return Resolved::Timestamp;
    }
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    if let Some(i) = go_parse_int(&plain) {
        return Resolved::Int(i);
    }
    if let Some(u) = go_parse_uint(&plain) {
        return Resolved::Uint(u);
    }
    if is_yaml_float(&plain)
        && let Ok(f) = plain.parse::<f64>()
        && f.is_finite()
    {
        return Resolved::Float(f);
    }
    Resolved::Str
}

/// Go's `strconv.ParseUint(s, 0, 64)`: a `0x`/`0o`/`0b` prefix or a leading `0` (octal)
/// picks the base; no sign.
fn go_parse_uint(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let (digits, radix) = if b.first() == Some(&b'0') && b.len() > 1 {
        match (b.len() >= 3).then(|| b[1].to_ascii_lowercase()) {
            Some(b'x') => (&s[2..], 16),
            Some(b'o') => (&s[2..], 8),
            Some(b'b') => (&s[2..], 2),
            _ => (&s[1..], 8),
        }
    } else {
        (s, 10)
    };
    if s.is_empty() || !digits.bytes().all(|c| (c as char).is_digit(radix)) {
        return None;
    }
    if digits.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
fn go_parse_int(s: &str) -> Option<i64> {
    let (negative, body) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let u = go_parse_uint(body)?;
    if negative {
        (u <= 1 << 63).then(|| (u as i64).wrapping_neg())
    } else {
        i64::try_from(u).ok()
    }
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && frac.bytes().all(|c| c.is_ascii_digit()),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// go-yaml v2's `parseTimestamp`: Go's `time.Parse` with the layouts
/// `2006-1-2T15:4:5.999999999Z07:00` (also with `t`), `2006-1-2 15:4:5.999999999` and
/// `2006-1-2`: a four-digit year, one- or two-digit fields in range, a day that exists in
/// its month, optional fractional seconds, and `Z` or `±hh:mm` after a `T`.
pub fn is_timestamp(s: &str) -> bool {
    let mut t = Cursor(s.as_bytes());
    let Some(year) = t.fixed(4) else {
        return false;
    };
    if !t.eat(b'-') {
        return false;
    }
    let (Some(month), true, Some(day)) = (t.number(), t.eat(b'-'), t.number()) else {
        return false;
    };
    if !(1..=12).contains(&month) || day < 1 || day > days_in(month, year) {
        return false;
    }
    if t.0.is_empty() {
        return true;
    }
    let zoned = match t.0[0] {
        b'T' | b't' => true,
        b' ' => false,
        _ => return false,
    };
    t.0 = &t.0[1..];
    let clock = (t.number(), t.eat(b':'), t.number(), t.eat(b':'), t.number());
    let (Some(h), true, Some(m), true, Some(sec)) = clock else {
        return false;
    };
    if h >= 24 || m >= 60 || sec >= 60 {
        return false;
    }
    if t.0.len() >= 2 && matches!(t.0[0], b'.' | b',') && t.0[1].is_ascii_digit() {
        let digits = t.0[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        t.0 = &t.0[1 + digits..];
    }
    if zoned && !t.eat(b'Z') {
        let z = t.0;
        if z.len() < 6 || !matches!(z[0], b'+' | b'-') || z[3] != b':' {
            return false;
        }
        t.0 = &z[1..];
        let (Some(hh), _, Some(mm)) = (t.fixed(2), t.eat(b':'), t.fixed(2)) else {
            return false;
        };
        if hh > 24 || mm > 60 {
            return false;
        }
    }
    t.0.is_empty()
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn eat(&mut self, c: u8) -> bool {
        let ate = self.0.first() == Some(&c);
        if ate {
            self.0 = &self.0[1..];
        }
        ate
    }

    /// Go's `getnum(value, false)`: one digit, and a second if there is one.
    fn number(&mut self) -> Option<u32> {
        let n = self
            .0
            .iter()
            .take(2)
            .take_while(|c| c.is_ascii_digit())
            .count();
        (n > 0).then(|| self.take(n))
    }

    /// Exactly `n` digits.
    fn fixed(&mut self, n: usize) -> Option<u32> {
        (self.0.len() >= n && self.0[..n].iter().all(u8::is_ascii_digit)).then(|| self.take(n))
    }

    fn take(&mut self, n: usize) -> u32 {
        let v = self.0[..n]
            .iter()
            .fold(0, |v, c| v * 10 + u32::from(c - b'0'));
        self.0 = &self.0[n..];
        v
    }
}

fn days_in(month: u32, year: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`: YAML 1.1's sexagesimal float.
/// go-yaml v2 reads such text as a string but quotes it on the way out.
pub fn is_base60_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, frac) = match body.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (body, None),
    };
    if frac.is_some_and(|f| !f.bytes().all(|c| c.is_ascii_digit() || c == b'_')) {
        return false;
    }
    let mut parts = main.split(':');
    let head = parts.next().unwrap_or("");
    if !head.starts_with(|c: char| c.is_ascii_digit())
        || !head.bytes().all(|c| c.is_ascii_digit() || c == b'_')
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

#[cfg(test)]
mod tests {
    use super::*;
    use Resolved::*;

    #[test]
    fn resolves_as_go_yaml_v2() {
        let cases: &[(&str, Resolved)] = &[
            ("", Null),
            ("~", Null),
            ("NULL", Null),
            ("nUll", Str),
            ("y", Bool(true)),
            ("Yes", Bool(true)),
            ("ON", Bool(true)),
            ("n", Bool(false)),
            ("off", Bool(false)),
            ("oN", Str),
            ("0777", Int(511)),
            ("0644", Int(420)),
            ("-0777", Int(-511)),
            ("08080", Float(8080.0)),
            ("0x1F", Int(31)),
            ("0o17", Int(15)),
            ("0b101", Int(5)),
            ("-0b101", Int(-5)),
            ("1_000", Int(1000)),
            ("+12", Int(12)),
            ("0", Int(0)),
            ("00", Int(0)),
            ("0x", Str),
            ("1e3", Float(1000.0)),
            ("1.", Float(1.0)),
            (".5", Float(0.5)),
            ("1_000.5", Float(1000.5)),
            ("1e400", Str),
            ("9223372036854775807", Int(i64::MAX)),
            ("9223372036854775808", Uint(1 << 63)),
            ("-9223372036854775808", Int(i64::MIN)),
            ("18446744073709551616", Float(18446744073709551616.0)),
            ("+9223372036854775808", Float(9223372036854775808.0)),
            (".inf", Float(f64::INFINITY)),
            ("-.Inf", Float(f64::NEG_INFINITY)),
            ("2001-12-14", Timestamp),
            ("2001-12-14t21:59:43.10-05:00", Timestamp),
            ("2001-12-14 21:59:43.10", Timestamp),
            ("2001-2-30", Str),
            ("2001-12-14 21:59:43.10 -5", Str),
            ("1:20", Str),
            ("1.2.3", Str),
            ("-", Str),
            ("<<", Str),
            ("yes please", Str),
        ];
        for (text, want) in cases {
            let got = resolve_plain(text);
            let same = match (got, want) {
                (Float(a), Float(b)) => a == *b || (a.is_nan() && b.is_nan()),
                (a, b) => a == *b,
            };
            assert!(same, "{text:?}: {got:?}, want {want:?}");
        }
        assert!(matches!(resolve_plain(".nan"), Float(f) if f.is_nan()));
    }

    #[test]
    fn tags_force_or_refuse_a_type() {
        assert_eq!(resolve_tagged("str", "0777"), Ok(Str));
        assert_eq!(resolve_tagged("float", "3"), Ok(Float(3.0)));
        assert_eq!(resolve_tagged("int", "0x10"), Ok(Int(16)));
        assert_eq!(
            resolve_tagged("int", "abc").unwrap_err(),
            "cannot decode !!str `abc` as a !!int"
        );
    }

    #[test]
    fn sexagesimal_text_is_recognised_for_quoting() {
        assert!(is_base60_float("1:20"));
        assert!(is_base60_float("190:20:30.15"));
        assert!(!is_base60_float("1:70"));
        assert!(!is_base60_float("a:20"));
    }
}
