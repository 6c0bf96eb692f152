//! go-patch pointers: `/key`, `/0`, `/-`, `/name=value`, `?` optionality, `:prev`-style
//! modifiers and `~0`/`~1`/`~7` escapes.
//!
//! Parsing and printing follow cppforlife/go-patch `patch/pointer.go`; the printed form is
//! the one go-patch puts in its error messages.

use std::fmt;
use std::str::FromStr;

/// The most steps a pointer may have. go-patch has no limit; this one keeps recursion over
/// documents built by ops files bounded (real paths have a handful of steps).
pub const MAX_POINTER_STEPS: usize = 512;

/// A pointer that could not be parsed. The message is go-patch's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PointerError(pub String);

/// A modifier attached to an index or matching token with `:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modifier {
    /// `:prev` — the item before the selected one.
    Prev,
    /// `:next` — the item after the selected one.
    Next,
    /// `:before` — insert before the selected item instead of replacing it.
    Before,
    /// `:after` — insert after the selected item instead of replacing it.
    After,
}

impl Modifier {
    /// The Go type name go-patch prints for this modifier (`%T`).
    pub fn go_type(self) -> &'static str {
        match self {
            Modifier::Prev => "patch.PrevModifier",
            Modifier::Next => "patch.NextModifier",
            Modifier::Before => "patch.BeforeModifier",
            Modifier::After => "patch.AfterModifier",
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Modifier::Prev => "prev",
            Modifier::Next => "next",
            Modifier::Before => "before",
            Modifier::After => "after",
        }
    }
}

/// One step of a pointer (the root is implicit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// `/3`, `/-1`: an array index; negative counts from the end.
    Index {
        /// The index as written.
        index: i64,
        /// Modifiers such as `:prev` or `:before`.
        modifiers: Vec<Modifier>,
    },
    /// `/-` as the last step: the position after the last array item.
    AfterLast,
    /// `/name=value`: the one map in an array whose `name` is the string `value`.
    Matching {
        /// The map key compared.
        key: String,
        /// The string value it must have.
        value: String,
        /// Set by a `?` on this step or an earlier one.
        optional: bool,
        /// Modifiers such as `:after`.
        modifiers: Vec<Modifier>,
    },
    /// `/key`: a map key.
    Key {
        /// The key, unescaped.
        key: String,
        /// Set by a `?` on this step or an earlier one.
        optional: bool,
    },
}

/// A parsed go-patch pointer. The empty string is the whole document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pointer {
    tokens: Vec<Token>,
}

impl Pointer {
    /// Parses a pointer with go-patch's rules and error texts.
    pub fn parse(text: &str) -> Result<Pointer, PointerError> {
        let mut tokens = Vec::new();
        if text.is_empty() {
            return Ok(Pointer { tokens });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PointerError("Expected to start with '/'".into()));
        };
        let raw: Vec<&str> = rest.split('/').collect();
        if raw.len() > MAX_POINTER_STEPS {
            return Err(PointerError(format!(
                "Expected at most {MAX_POINTER_STEPS} path steps but found {}",
                raw.len()
            )));
        }
        let mut optional = false;
        for (i, raw_token) in raw.iter().enumerate() {
            let is_last = i + 1 == raw.len();
            let mut pieces = raw_token.split(':');
            let head = pieces.next().unwrap_or_default();
            let rest: Vec<&str> = pieces.collect();
            let mut modifiers = Vec::with_capacity(rest.len());
            for piece in &rest {
                modifiers.push(match *piece {
                    "prev" => Modifier::Prev,
                    "next" => Modifier::Next,
                    "before" => Modifier::Before,
                    "after" => Modifier::After,
                    // go-patch names the first modifier, not the bad one.
                    _ => {
                        return Err(PointerError(format!(
                            "Expected to find one of the following modifiers: 'prev', 'next', \
                             'before', or 'after' but found '{}'",
                            rest[0]
                        )));
                    }
                });
            }
            let tok = decode(head);

            if is_last && tok == "-" {
                if !modifiers.is_empty() {
                    return Err(PointerError(
                        "Expected not to find any modifiers with after last index token".into(),
                    ));
                }
                tokens.push(Token::AfterLast);
                continue;
            }
            if let Ok(index) = tok.parse::<i64>() {
                tokens.push(Token::Index { index, modifiers });
                continue;
            }
            if tok.ends_with('?') {
                optional = true;
            }
            if let Some((key, value)) = tok.split_once('=') {
                tokens.push(Token::Matching {
                    key: key.to_string(),
                    value: value.strip_suffix('?').unwrap_or(value).to_string(),
                    optional,
                    modifiers,
                });
                continue;
            }
            if !modifiers.is_empty() {
                return Err(PointerError(
                    "Expected not to find any modifiers with key token".into(),
                ));
            }
            tokens.push(Token::Key {
                key: tok.strip_suffix('?').unwrap_or(&tok).to_string(),
                optional,
            });
        }
        Ok(Pointer { tokens })
    }

    /// Builds a pointer from tokens (the root is implicit).
    pub fn from_tokens(tokens: Vec<Token>) -> Pointer {
        Pointer { tokens }
    }

    /// The steps after the root.
    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }
}

impl FromStr for Pointer {
    type Err = PointerError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Pointer::parse(s)
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_tokens(&self.tokens))
    }
}

/// Prints tokens the way go-patch's `Pointer.String` does: `?` only on the first optional
/// step, keys and values escaped.
pub fn format_tokens(tokens: &[Token]) -> String {
    let mut out = String::new();
    let mut optional_shown = false;
    for token in tokens {
        out.push('/');
        match token {
            Token::Index { index, modifiers } => {
                out.push_str(&index.to_string());
                push_modifiers(&mut out, modifiers);
            }
            Token::AfterLast => out.push('-'),
            Token::Matching {
                key,
                value,
                optional,
                modifiers,
            } => {
                out.push_str(&encode(key));
                out.push('=');
                out.push_str(&encode(value));
                if *optional && !optional_shown {
                    out.push('?');
                    optional_shown = true;
                }
                push_modifiers(&mut out, modifiers);
            }
            Token::Key { key, optional } => {
                out.push_str(&encode(key));
                if *optional && !optional_shown {
                    out.push('?');
                    optional_shown = true;
                }
            }
        }
    }
    out
}

fn push_modifiers(out: &mut String, modifiers: &[Modifier]) {
    for m in modifiers {
        out.push(':');
        out.push_str(m.as_str());
    }
}

/// `~0` → `~`, `~1` → `/`, `~7` → `:`, in one left-to-right pass (like Go's `strings.Replacer`).
fn decode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' {
            let replacement = match chars.peek() {
                Some('0') => Some('~'),
                Some('1') => Some('/'),
                Some('7') => Some(':'),
                _ => None,
            };
            if let Some(r) = replacement {
                chars.next();
                out.push(r);
                continue;
            }
        }
        out.push(c);
    }
    out
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            ':' => out.push_str("~7"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str, optional: bool) -> Token {
        Token::Key {
            key: k.into(),
            optional,
        }
    }
    fn idx(index: i64, modifiers: Vec<Modifier>) -> Token {
        Token::Index { index, modifiers }
    }
    fn matching(k: &str, v: &str, optional: bool, modifiers: Vec<Modifier>) -> Token {
        Token::Matching {
            key: k.into(),
            value: v.into(),
            optional,
            modifiers,
        }
    }

    /// go-patch's own round-trip table (patch/pointer_test.go).
    fn cases() -> Vec<(&'static str, Vec<Token>)> {
        use Modifier::*;
        vec![
            ("", vec![]),
            ("/", vec![key("", false)]),
            ("//", vec![key("", false), key("", false)]),
            ("/ ", vec![key(" ", false)]),
            ("/key", vec![key("key", false)]),
            ("/key/", vec![key("key", false), key("", false)]),
            ("/key/key2", vec![key("key", false), key("key2", false)]),
            (
                "/key?/key2/key3",
                vec![key("key", true), key("key2", true), key("key3", true)],
            ),
            ("/0", vec![idx(0, vec![])]),
            ("/1000001", vec![idx(1000001, vec![])]),
            ("/-2", vec![idx(-2, vec![])]),
            ("/-", vec![Token::AfterLast]),
            ("/ary/-", vec![key("ary", false), Token::AfterLast]),
            ("/-/key", vec![key("-", false), key("key", false)]),
            ("/0:before", vec![idx(0, vec![Before])]),
            ("/0:after", vec![idx(0, vec![After])]),
            ("/-1:before", vec![idx(-1, vec![Before])]),
            ("/-1:prev:before", vec![idx(-1, vec![Prev, Before])]),
            ("/name=val", vec![matching("name", "val", false, vec![])]),
            ("/name=val?", vec![matching("name", "val", true, vec![])]),
            (
                "/name=val?/name2=val",
                vec![
                    matching("name", "val", true, vec![]),
                    matching("name2", "val", true, vec![]),
                ],
            ),
            ("/=", vec![matching("", "", false, vec![])]),
            ("/=?", vec![matching("", "", true, vec![])]),
            ("/name=", vec![matching("name", "", false, vec![])]),
            ("/=val", vec![matching("", "val", false, vec![])]),
            ("/==", vec![matching("", "=", false, vec![])]),
            (
                "/name=val:before",
                vec![matching("name", "val", false, vec![Before])],
            ),
            (
                "/name=val:after",
                vec![matching("name", "val", false, vec![After])],
            ),
            (
                "/key?/name=val",
                vec![key("key", true), matching("name", "val", true, vec![])],
            ),
            (
                "/name=val?/key",
                vec![matching("name", "val", true, vec![]), key("key", true)],
            ),
            ("/m~0n", vec![key("m~n", false)]),
            ("/a~01b", vec![key("a~1b", false)]),
            ("/a~1b", vec![key("a/b", false)]),
            (
                "/name~0n=val~0n",
                vec![matching("name~n", "val~n", false, vec![])],
            ),
            ("/m~7n", vec![key("m:n", false)]),
            ("/c%d", vec![key("c%d", false)]),
            ("/i\\j", vec![key("i\\j", false)]),
            ("/k\"l", vec![key("k\"l", false)]),
        ]
    }

    #[test]
    fn parses_and_prints_like_go_patch() {
        for (text, tokens) in cases() {
            let parsed = Pointer::parse(text).unwrap();
            assert_eq!(parsed.tokens(), tokens.as_slice(), "parsing {text:?}");
            assert_eq!(Pointer::from_tokens(tokens).to_string(), text, "printing");
        }
    }

    #[test]
    fn optionality_only_from_the_question_mark_on() {
        let p = Pointer::parse("/key/key2?").unwrap();
        assert_eq!(p.tokens(), &[key("key", false), key("key2", true)]);
    }

    #[test]
    fn plus_sign_and_overflow_follow_go_atoi() {
        assert_eq!(Pointer::parse("/+3").unwrap().tokens(), &[idx(3, vec![])]);
        assert_eq!(
            Pointer::parse("/99999999999999999999").unwrap().tokens(),
            &[key("99999999999999999999", false)]
        );
    }

    #[test]
    fn reports_go_patch_errors() {
        let err = |s: &str| Pointer::parse(s).unwrap_err().to_string();
        assert_eq!(err("abc"), "Expected to start with '/'");
        assert_eq!(
            err("/abc:unknown"),
            "Expected to find one of the following modifiers: 'prev', 'next', 'before', or 'after' but found 'unknown'"
        );
        assert_eq!(
            err("/0:prev:bogus"),
            "Expected to find one of the following modifiers: 'prev', 'next', 'before', or 'after' but found 'prev'"
        );
        assert_eq!(
            err("/-:prev"),
            "Expected not to find any modifiers with after last index token"
        );
        assert_eq!(
            err("/key:prev"),
            "Expected not to find any modifiers with key token"
        );
    }
}
