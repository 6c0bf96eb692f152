//! Package `files` / `excluded_files` globs with the semantics bosh-cli gets from
//! `doublestar` v1 (`RecursiveGlob`): `*` and `?` never cross `/`, a path component that is
//! exactly `**` matches zero or more directories (`**` elsewhere in a component acts as `*`),
//! `[abc]`, `[a-z]`, `[^a]`/`[!a]` classes, `{a,b}` alternatives and `\` escapes. Leading dots
//! are not special: `*` matches `.hidden`.
//!
//! Patterns are translated into an anchored [`regex::Regex`] matched against paths relative
//! to the directory being searched (`src/` or `blobs/`), `/`-separated.

use regex::Regex;

/// A glob that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// An unterminated `[` class or `{` group.
    #[error("bad glob pattern '{pattern}': {reason}")]
    Syntax {
        /// The pattern as written in the spec.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    pattern: String,
    regex: Regex,
}

impl Glob {
    /// Compiles `pattern`.
    pub fn new(pattern: &str) -> Result<Self, GlobError> {
        let syntax = |reason: &str| GlobError::Syntax {
            pattern: pattern.to_string(),
            reason: reason.to_string(),
        };
        let mut re = String::from("^");
        let components: Vec<&str> = pattern.split('/').collect();
        let last = components.len() - 1;
        for (i, comp) in components.iter().enumerate() {
            if *comp == "**" {
                if i == last {
                    // `dir/**` matches everything below dir (and `**` alone everything).
                    re.push_str(".*");
                } else {
                    // zero or more whole directories, each followed by `/`.
                    re.push_str("(?:[^/]*/)*");
                }
                continue;
            }
            translate_component(comp, &mut re).map_err(|r| syntax(&r))?;
            if i != last {
                re.push('/');
            }
        }
        re.push('$');
        let regex = Regex::new(&re).map_err(|e| syntax(&e.to_string()))?;
        Ok(Self {
            pattern: pattern.to_string(),
            regex,
        })
    }

    /// Does `relative` (a `/`-separated path) match?
    pub fn is_match(&self, relative: &str) -> bool {
        self.regex.is_match(relative)
    }

    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }
}

/// Appends the regex for one path component (no `/` inside) to `re`.
fn translate_component(comp: &str, re: &mut String) -> Result<(), String> {
    let chars: Vec<char> = comp.chars().collect();
    let mut i = 0;
    let mut alternation_depth = 0usize;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '*' => {
                while i + 1 < chars.len() && chars[i + 1] == '*' {
                    i += 1;
                }
                re.push_str("[^/]*");
            }
            '?' => re.push_str("[^/]"),
            '\\' => {
                i += 1;
                match chars.get(i) {
                    Some(&e) => re.push_str(&regex::escape(&e.to_string())),
                    None => return Err("trailing '\\'".into()),
                }
            }
            '[' => {
                let mut j = i + 1;
                let negated = matches!(chars.get(j), Some('^' | '!'));
                if negated {
                    j += 1;
                }
                let start = j;
                let mut body = String::new();
                loop {
                    match chars.get(j) {
                        None => return Err("unterminated '['".into()),
                        Some(']') if j > start => break,
                        Some('\\') => {
                            j += 1;
                            let Some(&e) = chars.get(j) else {
                                return Err("unterminated '['".into());
                            };
                            body.push_str(&regex::escape(&e.to_string()));
                        }
                        Some('-') => body.push('-'),
                        Some(&e) => {
                            if matches!(e, '[' | ']' | '^' | '&' | '~' | '\\') {
                                body.push('\\');
                            }
                            body.push(e);
                        }
                    }
                    j += 1;
                }
                // A class never matches the separator: a negated one excludes it too.
                if negated {
                    re.push_str(&format!("[^/{body}]"));
                } else {
                    re.push_str(&format!("[{body}]"));
                }
                i = j;
            }
            '{' => {
                alternation_depth += 1;
                re.push_str("(?:");
            }
            ',' if alternation_depth > 0 => re.push('|'),
            '}' if alternation_depth > 0 => {
                alternation_depth -= 1;
                re.push(')');
            }
            other => re.push_str(&regex::escape(&other.to_string())),
        }
        i += 1;
    }
    if alternation_depth > 0 {
        return Err("unterminated '{'".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, path: &str) -> bool {
        Glob::new(p).unwrap().is_match(path)
    }

    #[test]
    fn stars_stay_within_a_component() {
        assert!(m("hello/*.c", "hello/main.c"));
        assert!(!m("hello/*.c", "hello/sub/main.c"));
        assert!(m("hello/*", "hello/.hidden"));
        assert!(m("a?c", "abc"));
        assert!(!m("a?c", "a/c"));
    }

    #[test]
    fn double_star_spans_directories() {
        assert!(m("hello/**/*", "hello/a"));
        assert!(m("hello/**/*", "hello/a/b/c"));
        assert!(!m("hello/**/*", "other/a"));
        assert!(m("**/*.c", "x.c"));
        assert!(m("**/*.c", "d/e/x.c"));
        assert!(m("hello/**", "hello/a/b"));
        assert!(m("**", "anything/at/all"));
        // `**` inside a component is a plain star.
        assert!(m("a**b", "axyb"));
        assert!(!m("a**b", "ax/yb"));
    }

    #[test]
    fn classes_alternatives_and_escapes() {
        assert!(m("[ab].c", "a.c"));
        assert!(!m("[!ab].c", "a.c"));
        assert!(m("[^ab].c", "z.c"));
        assert!(m("[a-c]x", "bx"));
        assert!(m("{foo,bar}/*.h", "bar/x.h"));
        assert!(!m("{foo,bar}/*.h", "baz/x.h"));
        assert!(m(r"a\*b", "a*b"));
        assert!(!m(r"a\*b", "axb"));
        assert!(m("a.b", "a.b"));
        assert!(!m("a.b", "axb"));
        assert!(Glob::new("[abc").is_err());
        assert!(Glob::new("{a,b").is_err());
    }
}
