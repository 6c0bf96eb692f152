//! Problems found in a document, each with the path of the value it concerns.

use std::fmt;

/// One step into a document: a mapping key or a list index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Segment {
    /// A key of a mapping.
    Key(String),
    /// An index into a list.
    Index(usize),
}

/// Where a value sits in a document, written as BOSH operators read it:
/// `instance_groups[2].networks[0].static_ips[1]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Path(Vec<Segment>);

impl Path {
    /// The document itself.
    pub fn root() -> Path {
        Path(Vec::new())
    }

    /// This path extended by a mapping key.
    pub fn key(&self, key: &str) -> Path {
        let mut p = self.clone();
        p.0.push(Segment::Key(key.to_string()));
        p
    }

    /// This path extended by a list index.
    pub fn index(&self, index: usize) -> Path {
        let mut p = self.clone();
        p.0.push(Segment::Index(index));
        p
    }

    /// The steps of the path.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// Parses the text form back (`a[1].b`, `a["x.y"]`, `a["say \"hi\""]`); used by tests
    /// and corpora.
    pub fn parse(text: &str) -> Option<Path> {
        let mut p = Path::root();
        let mut rest = text;
        if rest.is_empty() || rest == "(document)" {
            return Some(p);
        }
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("[\"") {
                let (key, after) = unquote(r)?;
                p = p.key(&key);
                rest = after.strip_prefix(']')?;
            } else if let Some(r) = rest.strip_prefix('[') {
                let end = r.find(']')?;
                p = p.index(r[..end].parse().ok()?);
                rest = &r[end + 1..];
            } else {
                let r = rest.strip_prefix('.').unwrap_or(rest);
                let end = r.find(['.', '[']).unwrap_or(r.len());
                if end == 0 {
                    return None;
                }
                p = p.key(&r[..end]);
                rest = &r[end..];
            }
        }
        Some(p)
    }
}

/// Reads a quoted key up to its closing quote (the opening one already read), undoing
/// [`quote`]; returns the key and the text after the closing quote.
fn unquote(text: &str) -> Option<(String, &str)> {
    let mut key = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((key, &text[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => key.push('\n'),
                'r' => key.push('\r'),
                't' => key.push('\t'),
                'u' => {
                    let rest = &text[i + 2..];
                    let hex = rest.strip_prefix('{')?.split('}').next()?;
                    key.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
                    for _ in 0..hex.len() + 2 {
                        chars.next();
                    }
                }
                other => key.push(other),
            },
            other => key.push(other),
        }
    }
    None
}

/// A key as it appears between `["` and `"]`: quotes and backslashes escaped, control
/// characters written `\n`, `\u{1b}`, everything else (accents included) as is.
fn quote(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

fn is_plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(document)");
        }
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Segment::Key(k) if is_plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Key(k) => write!(f, "[\"{}\"]", quote(k))?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Which document a problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Document {
    /// The deployment manifest.
    Manifest,
    /// The cloud config.
    CloudConfig,
    /// A runtime config.
    RuntimeConfig,
    /// A CPI config.
    CpiConfig,
}

impl fmt::Display for Document {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Document::Manifest => "manifest",
            Document::CloudConfig => "cloud-config",
            Document::RuntimeConfig => "runtime-config",
            Document::CpiConfig => "cpi-config",
        })
    }
}

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// The document cannot be deployed.
    Error,
    /// Deployable, but probably not what was meant (e.g. a key BOSH ignores).
    Warning,
}

/// One thing wrong with a document.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Problem {
    /// The document the problem is in.
    pub document: Document,
    /// Where in that document.
    pub path: Path,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, in words an operator understands.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{level}: {}: {}: {}",
            self.document, self.path, self.message
        )
    }
}

/// Collects problems while a document is checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems {
    list: Vec<Problem>,
}

impl Problems {
    /// Records an error.
    pub fn error(&mut self, document: Document, path: Path, message: impl Into<String>) {
        self.push(document, path, Severity::Error, message.into());
    }

    /// Records a warning.
    pub fn warning(&mut self, document: Document, path: Path, message: impl Into<String>) {
        self.push(document, path, Severity::Warning, message.into());
    }

    fn push(&mut self, document: Document, path: Path, severity: Severity, message: String) {
        self.list.push(Problem {
            document,
            path,
            severity,
            message,
        });
    }

    /// These problems, each message starting with `about` (`runtime config 'dns': ...`): for
    /// documents that come in several named pieces.
    pub fn about(mut self, about: &str) -> Problems {
        for p in &mut self.list {
            p.message = format!("{about}: {}", p.message);
        }
        self
    }

    /// Adds all problems of another collection.
    pub fn extend(&mut self, other: Problems) {
        self.list.extend(other.list);
    }

    /// True when there is at least one error (warnings do not count).
    pub fn has_errors(&self) -> bool {
        self.list.iter().any(|p| p.severity == Severity::Error)
    }

    /// The errors only.
    pub fn errors(&self) -> impl Iterator<Item = &Problem> {
        self.list.iter().filter(|p| p.severity == Severity::Error)
    }

    /// All problems, in the order they were found.
    pub fn all(&self) -> &[Problem] {
        &self.list
    }

    /// Number of problems.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when nothing was found.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.list {
            writeln!(f, "{p}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::strategy::Strategy;

    use super::*;

    #[test]
    fn paths_print_like_bosh_operators_write_them() {
        let p = Path::root()
            .key("instance_groups")
            .index(2)
            .key("networks")
            .index(0)
            .key("static_ips")
            .index(1);
        assert_eq!(
            p.to_string(),
            "instance_groups[2].networks[0].static_ips[1]"
        );
        assert_eq!(
            Path::root().key("properties").key("a.b").to_string(),
            "properties[\"a.b\"]"
        );
        assert_eq!(Path::root().to_string(), "(document)");
    }

    proptest::proptest! {
        #[test]
        fn any_path_parses_back(steps in proptest::collection::vec(
            proptest::prop_oneof![
                (0usize..1000).prop_map(Segment::Index),
                ".*".prop_map(Segment::Key),
                "[a-z_\\-\\.\\[\\]\"\\\\]{0,6}".prop_map(Segment::Key),
            ],
            0..6,
        )) {
            let path = Path(steps);
            let text = path.to_string();
            proptest::prop_assert_eq!(Path::parse(&text), Some(path), "{}", text);
        }
    }

    #[test]
    fn paths_parse_back() {
        for text in [
            "instance_groups[2].networks[0].static_ips[1]",
            "properties[\"a.b\"].c",
            "update",
        ] {
            assert_eq!(Path::parse(text).unwrap().to_string(), text);
        }
    }
}
