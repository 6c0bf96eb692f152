//! Parsing the `monit` files BOSH jobs ship (`jobs/<job>/monit`, `jobs/<job>/*.monit`).
//!
//! Monit's control-file syntax is free-form: newlines are plain whitespace, `#` starts a
//! comment, strings are in double or single quotes (no escapes), and the optional noise words
//! `with`, `and`, `using`, `=` may appear anywhere between statements. What the supervisor
//! uses is read from `check process` blocks:
//!
//! ```text
//! check process nginx
//!   with pidfile /var/vcap/sys/run/nginx/nginx.pid
//!   start program "/var/vcap/jobs/nginx/bin/ctl start" with timeout 60 seconds
//!   stop program = "/var/vcap/jobs/nginx/bin/ctl stop"
//!   group vcap
//!   depends on consul_agent, syslog
//!   if failed port 80 protocol http then restart
//! ```
//!
//! `if … then <action> [else if … then <action>]`, `mode`, `every`, `alert`, `noalert` are
//! accepted and ignored. `check file|host|system|filesystem|directory|program|…` blocks and
//! top-level `set`/`include` statements are skipped with a warning, as is any other unknown
//! statement (to the end of its line). Hard errors (unterminated string, a statement missing
//! its value, a duplicate service) name the file and the line.

use std::path::PathBuf;
use std::time::Duration;

/// Seconds one monit "cycle" lasts on a stemcell (`set daemon 10`), for `timeout N cycles`.
const CYCLE_SECS: u64 = 10;

/// A monit file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct MonitError {
    /// The file, as named by the caller.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Something in a monit file that was skipped or is unusual, but not fatal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitWarning {
    /// The file, as named by the caller.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What was skipped and why.
    pub message: String,
}

impl std::fmt::Display for MonitWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

/// A `start`, `stop` or `restart` program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitProgram {
    /// The command line, run with `/bin/sh -c`.
    pub command: String,
    /// `with timeout N seconds`; the supervisor's default when absent.
    pub timeout: Option<Duration>,
    /// `as uid X` (recorded, not applied: the local cloud runs jobs as the agent's user).
    pub uid: Option<String>,
    /// `and gid Y` (recorded, not applied).
    pub gid: Option<String>,
}

/// One `depends on` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    /// The service depended on.
    pub name: String,
    /// Line of the `depends` statement.
    pub line: usize,
}

/// A `check process` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitService {
    /// The service (process) name, as `get_state` reports it.
    pub name: String,
    /// The file it comes from.
    pub file: String,
    /// Line of its `check process`.
    pub line: usize,
    /// `with pidfile PATH`.
    pub pidfile: Option<PathBuf>,
    /// `matching "regex"` (recorded; the supervisor tracks the process it started instead).
    pub matching: Option<String>,
    /// `start program`.
    pub start: Option<MonitProgram>,
    /// `stop program`.
    pub stop: Option<MonitProgram>,
    /// `restart program` (recorded; restarts run stop then start, as monit does without one).
    pub restart: Option<MonitProgram>,
    /// `group NAME` statements.
    pub groups: Vec<String>,
    /// `depends on A, B` statements.
    pub depends_on: Vec<Dependency>,
}

/// The usable content of one monit file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MonitFile {
    /// The `check process` blocks, in file order.
    pub services: Vec<MonitService>,
    /// What was skipped.
    pub warnings: Vec<MonitWarning>,
}

/// Parses the monit file `text`; `file` names it in errors and warnings. Never panics.
pub fn parse(file: &str, text: &str) -> Result<MonitFile, MonitError> {
    let tokens = tokenize(file, text)?;
    let mut p = Parser {
        file,
        tokens,
        pos: 0,
        out: MonitFile::default(),
    };
    p.file_body()?;
    Ok(p.out)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Str(String),
    Comma,
    Eq,
    LBrace,
    RBrace,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

fn tokenize(file: &str, text: &str) -> Result<Vec<Token>, MonitError> {
    let mut out = Vec::new();
    let mut line = 1usize;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '"' | '\'' => {
                let start = line;
                let mut s = String::new();
                let mut closed = false;
                for d in chars.by_ref() {
                    if d == c {
                        closed = true;
                        break;
                    }
                    if d == '\n' {
                        line += 1;
                    }
                    s.push(d);
                }
                if !closed {
                    return Err(MonitError {
                        file: file.to_string(),
                        line: start,
                        message: format!("unterminated string (missing closing {c})"),
                    });
                }
                out.push(Token {
                    tok: Tok::Str(s),
                    line: start,
                });
            }
            ',' | '=' | '{' | '}' => {
                let tok = match c {
                    ',' => Tok::Comma,
                    '=' => Tok::Eq,
                    '{' => Tok::LBrace,
                    _ => Tok::RBrace,
                };
                out.push(Token { tok, line });
            }
            _ => {
                let mut w = String::from(c);
                while let Some(&d) = chars.peek() {
                    if d.is_whitespace() || matches!(d, '"' | '\'' | ',' | '=' | '{' | '}') {
                        break;
                    }
                    w.push(d);
                    chars.next();
                }
                out.push(Token {
                    tok: Tok::Word(w),
                    line,
                });
            }
        }
    }
    Ok(out)
}

const SKIPPED_CHECK_TYPES: &[&str] = &[
    "file",
    "fifo",
    "directory",
    "filesystem",
    "device",
    "host",
    "system",
    "program",
    "network",
    "remote",
];

struct Parser<'a> {
    file: &'a str,
    tokens: Vec<Token>,
    pos: usize,
    out: MonitFile,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek_word(&self) -> Option<String> {
        self.peek_word_at(0)
    }

    fn peek_word_at(&self, ahead: usize) -> Option<String> {
        match self.tokens.get(self.pos + ahead) {
            Some(Token {
                tok: Tok::Word(w), ..
            }) => Some(w.to_ascii_lowercase()),
            _ => None,
        }
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    /// Line of the current token, or of the last one at the end of the file.
    fn line(&self) -> usize {
        self.tokens
            .get(self.pos)
            .or_else(|| self.tokens.last())
            .map_or(1, |t| t.line)
    }

    fn error(&self, line: usize, message: impl Into<String>) -> MonitError {
        MonitError {
            file: self.file.to_string(),
            line,
            message: message.into(),
        }
    }

    fn warn(&mut self, line: usize, message: impl Into<String>) {
        self.out.warnings.push(MonitWarning {
            file: self.file.to_string(),
            line,
            message: message.into(),
        });
    }

    /// A word or string, as the value of the statement on `line`.
    fn value(&mut self, line: usize, what: &str) -> Result<String, MonitError> {
        match self.peek().map(|t| t.tok.clone()) {
            Some(Tok::Word(w)) | Some(Tok::Str(w)) => {
                self.pos += 1;
                Ok(w)
            }
            _ => Err(self.error(line, format!("{what} needs a value"))),
        }
    }

    fn eat_word(&mut self, word: &str) -> bool {
        if self.peek_word().as_deref() == Some(word) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn at_top_level_statement(&self) -> bool {
        matches!(
            self.peek_word().as_deref(),
            Some("check" | "set" | "include")
        )
    }

    /// Skips to the next `check`, `set` or `include`.
    fn skip_to_top_level(&mut self) {
        while self.peek().is_some() && !self.at_top_level_statement() {
            self.pos += 1;
        }
    }

    /// Skips the current token and the rest of its line (and a `{ … }` block it opens).
    fn skip_rest_of_line(&mut self) {
        let line = self.line();
        let mut depth = 0usize;
        while let Some(t) = self.next() {
            match t.tok {
                Tok::LBrace => depth += 1,
                Tok::RBrace => depth = depth.saturating_sub(1),
                _ => {}
            }
            match self.peek() {
                Some(n) if depth > 0 || n.line == line || n.tok == Tok::LBrace => {}
                _ => break,
            }
        }
    }

    fn file_body(&mut self) -> Result<(), MonitError> {
        while let Some(t) = self.peek() {
            let line = t.line;
            match self.peek_word().as_deref() {
                Some("check") => self.check()?,
                Some(w @ ("set" | "include")) => {
                    self.warn(
                        line,
                        format!("`{w}` statement ignored (monit daemon settings)"),
                    );
                    self.pos += 1;
                    self.skip_to_top_level();
                }
                _ => {
                    let shown = describe(&t.tok);
                    return Err(self.error(
                        line,
                        format!("unexpected {shown}: a monit file is a list of `check` blocks"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn check(&mut self) -> Result<(), MonitError> {
        let line = self.line();
        self.pos += 1; // check
        let Some(kind) = self.peek_word() else {
            return Err(self.error(line, "`check` needs a service type (e.g. `check process`)"));
        };
        self.pos += 1;
        if kind == "process" {
            let name = self.value(line, "`check process`")?;
            if name.is_empty() {
                return Err(self.error(line, "empty service name"));
            }
            if self.out.services.iter().any(|s| s.name == name) {
                return Err(self.error(line, format!("service {name:?} is defined twice")));
            }
            return self.process(name, line);
        }
        if SKIPPED_CHECK_TYPES.contains(&kind.as_str()) {
            let name = self.value(line, &format!("`check {kind}`"))?;
            self.warn(
                line,
                format!(
                    "`check {kind} {name}` skipped: only `check process` services are supervised"
                ),
            );
            self.skip_to_top_level();
            return Ok(());
        }
        Err(self.error(line, format!("unknown service type `check {kind}`")))
    }

    /// The statements of `check process <name>` (at `line`) up to the next top-level
    /// statement: the service, added to the output.
    fn process(&mut self, name: String, line: usize) -> Result<(), MonitError> {
        let mut svc = MonitService {
            name,
            file: self.file.to_string(),
            line,
            pidfile: None,
            matching: None,
            start: None,
            stop: None,
            restart: None,
            groups: Vec::new(),
            depends_on: Vec::new(),
        };
        while let Some(t) = self.peek() {
            let at = t.line;
            let tok = t.tok.clone();
            let Tok::Word(word) = tok else {
                if tok == Tok::Eq || tok == Tok::Comma {
                    self.pos += 1;
                    continue;
                }
                self.warn(at, format!("unexpected {} ignored", describe(&tok)));
                self.skip_rest_of_line();
                continue;
            };
            match word.to_ascii_lowercase().as_str() {
                "check" | "set" | "include" => break,
                "with" | "and" | "using" | "is" => self.pos += 1,
                "pidfile" => {
                    self.pos += 1;
                    let path = self.value(at, "`pidfile`")?;
                    if svc.pidfile.replace(PathBuf::from(path)).is_some() {
                        return Err(self.error(at, format!("{:?} has two pidfiles", svc.name)));
                    }
                }
                "matching" => {
                    self.pos += 1;
                    svc.matching = Some(self.value(at, "`matching`")?);
                }
                kind @ ("start" | "stop" | "restart") => {
                    let kind = kind.to_string();
                    self.pos += 1;
                    let program = self.program(at, &kind)?;
                    let slot = match kind.as_str() {
                        "start" => &mut svc.start,
                        "stop" => &mut svc.stop,
                        _ => &mut svc.restart,
                    };
                    if slot.replace(program).is_some() {
                        return Err(
                            self.error(at, format!("{:?} has two {kind} programs", svc.name))
                        );
                    }
                }
                "group" => {
                    self.pos += 1;
                    svc.groups.push(self.value(at, "`group`")?);
                }
                "depends" => {
                    self.pos += 1;
                    self.eat_word("on");
                    self.dependencies(at, &mut svc.depends_on)?;
                }
                "if" => self.skip_if(at)?,
                "mode" | "onreboot" | "description" => {
                    self.pos += 1;
                    self.value(at, &format!("`{word}`"))?;
                }
                "every" => {
                    self.pos += 1;
                    self.value(at, "`every`")?;
                    if !self.eat_word("cycles") {
                        self.eat_word("cycle");
                    }
                }
                "alert" | "noalert" => {
                    self.pos += 1;
                    self.value(at, &format!("`{word}`"))?;
                    if self.peek().is_some_and(|n| n.line == at) && !self.at_top_level_statement() {
                        self.skip_rest_of_line();
                    }
                }
                other => {
                    self.warn(at, format!("unsupported statement `{other}` ignored"));
                    self.skip_rest_of_line();
                }
            }
        }
        self.warn_about_gaps(&svc);
        self.out.services.push(svc);
        Ok(())
    }

    /// After `depends [on]`: one or more service names, separated by commas.
    fn dependencies(&mut self, line: usize, out: &mut Vec<Dependency>) -> Result<(), MonitError> {
        loop {
            let dep = self.value(line, "`depends on`")?;
            out.push(Dependency { name: dep, line });
            if self.peek().map(|t| &t.tok) == Some(&Tok::Comma) {
                self.pos += 1;
            } else {
                return Ok(());
            }
        }
    }

    /// Warns about what a parsed service lacks: a pidfile, a start program, group vcap.
    fn warn_about_gaps(&mut self, svc: &MonitService) {
        if svc.pidfile.is_none() && svc.matching.is_none() {
            self.warn(
                svc.line,
                format!(
                    "{:?} has no pidfile: the process its start program starts is the service",
                    svc.name
                ),
            );
        }
        if svc.start.is_none() {
            self.warn(
                svc.line,
                format!("{:?} has no start program: it cannot be started", svc.name),
            );
        }
        if !svc.groups.iter().any(|g| g == "vcap") {
            self.warn(
                svc.line,
                format!(
                    "{:?} is not in group vcap: supervised and reported anyway",
                    svc.name
                ),
            );
        }
    }

    /// After `start`/`stop`/`restart`: `[program] [=] "command" [as uid U] [and gid G]
    /// [with timeout N seconds]`.
    fn program(&mut self, line: usize, kind: &str) -> Result<MonitProgram, MonitError> {
        self.eat_word("program");
        if self.peek().map(|t| &t.tok) == Some(&Tok::Eq) {
            self.pos += 1;
        }
        let command = match self.peek().map(|t| t.tok.clone()) {
            Some(Tok::Str(s)) => {
                self.pos += 1;
                s
            }
            _ => {
                return Err(self.error(
                    line,
                    format!("`{kind} program` needs a quoted command line"),
                ));
            }
        };
        let mut program = MonitProgram {
            command,
            timeout: None,
            uid: None,
            gid: None,
        };
        loop {
            let next = self.peek_word();
            let after = self.peek_word_at(1);
            match next.as_deref() {
                Some("as") | Some("and")
                    if matches!(after.as_deref(), Some("uid" | "gid" | "timeout")) =>
                {
                    self.pos += 1
                }
                Some("with") if after.as_deref() == Some("timeout") => self.pos += 1,
                Some("uid") => {
                    self.pos += 1;
                    program.uid = Some(self.value(line, "`uid`")?);
                }
                Some("gid") => {
                    self.pos += 1;
                    program.gid = Some(self.value(line, "`gid`")?);
                }
                Some("timeout") => {
                    self.pos += 1;
                    let n = self.value(line, "`timeout`")?;
                    let n: u64 = n.parse().map_err(|_| {
                        self.error(
                            line,
                            format!("`timeout` needs a number of seconds, not {n:?}"),
                        )
                    })?;
                    let secs = match self.peek_word().as_deref() {
                        Some("second" | "seconds") => {
                            self.pos += 1;
                            n
                        }
                        Some("cycle" | "cycles") => {
                            self.pos += 1;
                            n.saturating_mul(CYCLE_SECS)
                        }
                        _ => n,
                    };
                    program.timeout = Some(Duration::from_secs(secs));
                }
                _ => break,
            }
        }
        Ok(program)
    }

    /// `if <condition> then <action> [else if <condition> then <action>]`, ignored.
    fn skip_if(&mut self, line: usize) -> Result<(), MonitError> {
        self.pos += 1; // if
        self.skip_condition(line)?;
        self.action(line)?;
        if self.peek_word().as_deref() == Some("else") {
            self.pos += 1;
            self.eat_word("if");
            self.skip_condition(line)?;
            self.action(line)?;
        }
        Ok(())
    }

    fn skip_condition(&mut self, line: usize) -> Result<(), MonitError> {
        loop {
            let word = self.peek_word();
            if self.peek().is_none() || word.as_deref() == Some("check") {
                return Err(self.error(line, "`if` statement without `then`"));
            }
            self.pos += 1;
            if word.as_deref() == Some("then") {
                return Ok(());
            }
        }
    }

    fn action(&mut self, line: usize) -> Result<(), MonitError> {
        let Some(action) = self.peek_word() else {
            return Err(self.error(line, "`then` needs an action"));
        };
        self.pos += 1;
        if action == "exec" {
            self.value(line, "`exec`")?;
            loop {
                match self.peek_word().as_deref() {
                    Some("as" | "and") => self.pos += 1,
                    Some("uid" | "gid") => {
                        self.pos += 1;
                        self.value(line, "`uid`/`gid`")?;
                    }
                    Some("repeat") => {
                        self.pos += 1;
                        self.eat_word("every");
                        self.value(line, "`repeat every`")?;
                        if !self.eat_word("cycles") {
                            self.eat_word("cycle");
                        }
                    }
                    _ => break,
                }
            }
        }
        Ok(())
    }
}

fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Word(w) => format!("`{w}`"),
        // Not the content: quoted strings are command lines, which may hold secrets.
        Tok::Str(_) => "quoted string".to_string(),
        Tok::Comma => "`,`".to_string(),
        Tok::Eq => "`=`".to_string(),
        Tok::LBrace => "`{`".to_string(),
        Tok::RBrace => "`}`".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NGINX: &str = r#"
# monit file for nginx
check process nginx
  with pidfile /var/vcap/sys/run/nginx/nginx.pid
  start program "/var/vcap/jobs/nginx/bin/ctl start" with timeout 60 seconds
  stop program = "/var/vcap/jobs/nginx/bin/ctl stop"
  group vcap
  depends on consul, syslog_forwarder
  if failed host 127.0.0.1 port 80
     protocol http
     then restart
  if 5 restarts within 5 cycles then timeout

check process worker with pidfile '/var/vcap/sys/run/nginx/worker.pid'
  start program "/bin/bash -c 'cd /var/vcap; exec ./worker'" as uid vcap and gid vcap
  stop program "/bin/bash -c 'kill $(cat /var/vcap/sys/run/nginx/worker.pid)'"
  group vcap
  mode manual

check file access_log with path /var/vcap/sys/log/nginx/access.log
  if size > 100 MB then exec "/bin/rotate"
  group vcap
"#;

    #[test]
    fn parses_a_typical_file() {
        let f = parse("nginx/monit", NGINX).unwrap();
        assert_eq!(f.services.len(), 2);
        let n = &f.services[0];
        assert_eq!(n.name, "nginx");
        assert_eq!(n.line, 3);
        assert_eq!(
            n.pidfile.as_deref(),
            Some(std::path::Path::new("/var/vcap/sys/run/nginx/nginx.pid"))
        );
        let start = n.start.as_ref().unwrap();
        assert_eq!(start.command, "/var/vcap/jobs/nginx/bin/ctl start");
        assert_eq!(start.timeout, Some(Duration::from_secs(60)));
        assert_eq!(
            n.stop.as_ref().unwrap().command,
            "/var/vcap/jobs/nginx/bin/ctl stop"
        );
        assert_eq!(n.groups, ["vcap"]);
        let deps: Vec<_> = n.depends_on.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(deps, ["consul", "syslog_forwarder"]);
        assert_eq!(n.depends_on[0].line, 8);
        let w = &f.services[1];
        assert_eq!(w.name, "worker");
        let ws = w.start.as_ref().unwrap();
        assert_eq!(ws.command, "/bin/bash -c 'cd /var/vcap; exec ./worker'");
        assert_eq!(ws.uid.as_deref(), Some("vcap"));
        assert_eq!(ws.gid.as_deref(), Some("vcap"));
        assert_eq!(f.warnings.len(), 1, "{:?}", f.warnings);
        assert_eq!(f.warnings[0].line, 20);
        assert!(f.warnings[0].message.contains("check file access_log"));
    }

    #[test]
    fn one_line_and_odd_spacing() {
        let f = parse(
            "m",
            "check process a with pidfile /p start program=\"x\" stop program \"y\" group vcap depends on b,c",
        )
        .unwrap();
        let a = &f.services[0];
        assert_eq!(a.start.as_ref().unwrap().command, "x");
        assert_eq!(a.stop.as_ref().unwrap().command, "y");
        assert_eq!(a.depends_on.len(), 2);
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
    }

    #[test]
    fn errors_name_file_and_line() {
        let cases = [
            (
                "check process a\n  start program \"unterminated\n",
                2,
                "unterminated",
            ),
            ("\n\ncheck process a\n  with pidfile\n", 4, "needs a value"),
            ("check process a\n  start program /bin/x\n", 2, "quoted"),
            ("check process a\ncheck process a\n", 2, "twice"),
            ("hello\n", 1, "unexpected"),
            ("check process a\n if failed port 80\n", 2, "without `then`"),
            (
                "check process a\n start program \"x\" with timeout many seconds",
                2,
                "number",
            ),
            ("check widget a\n", 1, "unknown service type"),
        ];
        for (text, line, needle) in cases {
            let err = parse("jobs/x/monit", text).unwrap_err();
            assert_eq!(err.file, "jobs/x/monit");
            assert_eq!(err.line, line, "{text:?}: {err}");
            assert!(err.message.contains(needle), "{text:?}: {err}");
            assert!(
                err.to_string()
                    .starts_with(&format!("jobs/x/monit:{line}:"))
            );
        }
    }

    #[test]
    fn tolerates_unknown_statements_and_settings() {
        let text = "set daemon 10\nset httpd port 2822 and use address 127.0.0.1\n\
            check process a\n  with pidfile /p\n  start program \"s\"\n  frobnicate hard now\n  group vcap\n\
            check host h with address 1.2.3.4\n  if failed port 80 then alert\n";
        let f = parse("m", text).unwrap();
        assert_eq!(f.services.len(), 1);
        assert_eq!(f.services[0].groups, ["vcap"]);
        let lines: Vec<usize> = f.warnings.iter().map(|w| w.line).collect();
        assert_eq!(lines, [1, 2, 6, 8], "{:?}", f.warnings);
    }

    #[test]
    fn empty_and_comment_only_files() {
        assert!(parse("m", "").unwrap().services.is_empty());
        assert!(parse("m", "# nothing\n\n").unwrap().services.is_empty());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn monitish() -> impl Strategy<Value = String> {
            let atoms = prop::sample::select(vec![
                "check",
                "process",
                "file",
                "host",
                "a",
                "b",
                "with",
                "pidfile",
                "/p",
                "start",
                "stop",
                "program",
                "\"cmd x\"",
                "'q'",
                "=",
                ",",
                "group",
                "vcap",
                "depends",
                "on",
                "if",
                "failed",
                "then",
                "restart",
                "else",
                "exec",
                "timeout",
                "5",
                "seconds",
                "cycles",
                "as",
                "uid",
                "and",
                "gid",
                "{",
                "}",
                "#c",
                "\n",
                "\"",
                "set",
                "include",
                "alert",
                "mode",
                "every",
                "matching",
            ]);
            prop::collection::vec(atoms, 0..60).prop_map(|v| v.join(" "))
        }

        proptest! {
            #[test]
            fn never_panics_on_any_text(s in ".*") {
                let _ = parse("m", &s);
            }

            #[test]
            fn never_panics_on_monit_like_text(s in monitish()) {
                match parse("m", &s) {
                    Ok(f) => for svc in &f.services { prop_assert!(!svc.name.is_empty()); },
                    Err(e) => prop_assert!(e.line >= 1),
                }
            }
        }
    }
}
