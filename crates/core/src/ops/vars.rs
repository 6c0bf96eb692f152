//! Variable values for interpolation, gathered the way the BOSH CLI's flags gather them
//! (bosh-cli `cmd/opts/var_flags.go`, `director/template/var_kv.go`, `var_file_arg.go`,
//! `vars_file_arg.go`, `vars_env_arg.go`, `static_vars.go`).
//!
//! Precedence does not depend on the order calls are made in, only on the kind of source,
//! lowest first: a vars store (`--vars-store`), `--vars-env`, `-l`/`--vars-file`,
//! `--var-file`, `-v`/`--var`. Within one kind, later additions win. A later source replaces
//! a variable whole (no deep merge).

use serde_json::{Map, Value};

use kubosh_base::yaml;

/// A variable source that could not be read. Texts follow the CLI's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VarsError {
    /// A `-v` / `--var-file` argument is not `name=value`, or has an empty part.
    #[error("{0}")]
    Argument(String),
    /// A `-v` value that looks like YAML but is broken.
    #[error("Deserializing variables '{arg}': {message}")]
    VarValue {
        /// The whole `name=value` argument.
        arg: String,
        /// The parser's explanation.
        message: String,
    },
    /// A vars file that is not YAML or not a map.
    #[error("Deserializing variables file '{origin}': {message}")]
    VarsFile {
        /// The file, as the caller named it.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// An environment variable whose value is not YAML.
    #[error("Deserializing YAML from environment variable '{name}': {message}")]
    Env {
        /// The environment variable's full name.
        name: String,
        /// The parser's explanation.
        message: String,
    },
}

/// Variable values from CLI-style sources. Build it up, then pass it to
/// [`interpolate`](super::interpolate). `Debug` shows names only: values are often secrets.
#[derive(Clone, Default)]
pub struct Vars {
    /// Stored and generated values (a vars store): below every user source.
    stored: Map<String, Value>,
    env: Map<String, Value>,
    files: Map<String, Value>,
    var_files: Map<String, Value>,
    kvs: Map<String, Value>,
}

fn set(layer: &mut Map<String, Value>, name: String, value: Value) {
    // Re-inserting moves the name last, so it is also applied last when names are nested.
    layer.shift_remove(&name);
    layer.insert(name, value);
}

impl std::fmt::Debug for Vars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |m: &Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
        f.debug_struct("Vars")
            .field("stored", &names(&self.stored))
            .field("env", &names(&self.env))
            .field("files", &names(&self.files))
            .field("var_files", &names(&self.var_files))
            .field("kvs", &names(&self.kvs))
            .finish_non_exhaustive()
    }
}

impl Vars {
    /// No variables.
    pub fn new() -> Vars {
        Vars::default()
    }

    /// Vars-file level values from a map already in hand (e.g. a test or a stored vars set).
    pub fn from_map(map: Map<String, Value>) -> Vars {
        let mut vars = Vars::new();
        vars.add_vars_map(map);
        vars
    }

    /// `-l FILE`: a YAML map of variables; an empty file adds nothing. `origin` names the file.
    pub fn add_vars_file(&mut self, text: &str, origin: &str) -> Result<(), VarsError> {
        let value = yaml::parse_document(text, origin).map_err(|e| VarsError::VarsFile {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        match value {
            Value::Null => Ok(()),
            Value::Object(map) => {
                self.add_vars_map(map);
                Ok(())
            }
            _ => Err(VarsError::VarsFile {
                origin: origin.to_string(),
                message: "expected a map of variables".into(),
            }),
        }
    }

    /// `-l`-level values from a map already parsed.
    pub fn add_vars_map(&mut self, map: Map<String, Value>) {
        for (name, value) in map {
            set(&mut self.files, name, value);
        }
    }

    /// `-v name=value`. As in the CLI the value is read as YAML, so `-v n=1` is a number and
    /// `-v 'm={a: 1}'` a map; when it reads as a plain string, the raw text is kept (newlines
    /// and all) with one pair of wrapping quotes removed.
    pub fn add_var_arg(&mut self, arg: &str) -> Result<(), VarsError> {
        let (name, raw) = split_arg(arg, "value")?;
        let parsed = yaml::parse_document(raw, "variable").map_err(|e| VarsError::VarValue {
            arg: arg.to_string(),
            message: e.to_string(),
        })?;
        let value = match parsed {
            Value::String(s) if yaml::mark::unmark(&s).is_none() => {
                Value::String(trim_wrapping_quotes(raw).to_string())
            }
            other => other,
        };
        set(&mut self.kvs, name.to_string(), value);
        Ok(())
    }

    /// A stored or generated value (a vars store's): lower precedence than every user
    /// source, as bosh-cli consults `--vars-store` after `-v`, `-l` and the rest.
    pub fn add_stored(&mut self, name: &str, value: Value) {
        set(&mut self.stored, name.to_string(), value);
    }

    /// `-v`-level value given directly (no parsing).
    pub fn add_var(&mut self, name: &str, value: Value) {
        set(&mut self.kvs, name.to_string(), value);
    }

    /// `--var-file name=PATH`: the variable is the file's contents as a string. The caller
    /// reads the file; see [`Vars::split_var_file_arg`] for the argument.
    pub fn add_var_file(&mut self, name: &str, contents: &str) {
        set(
            &mut self.var_files,
            name.to_string(),
            Value::String(contents.to_string()),
        );
    }

    /// Splits a `--var-file` argument into name and path, with the CLI's checks.
    pub fn split_var_file_arg(arg: &str) -> Result<(&str, &str), VarsError> {
        split_arg(arg, "path")
    }

    /// `--vars-env PREFIX`: every `PREFIX_name=value` in `env` sets `name`, the value read as
    /// YAML. Pass the process environment (e.g. `std::env::vars()`) or any pairs.
    pub fn add_env<I, K, V>(&mut self, prefix: &str, env: I) -> Result<(), VarsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        if prefix.is_empty() {
            return Err(VarsError::Argument(
                "Expected environment variable prefix to be non-empty".into(),
            ));
        }
        let lead = format!("{prefix}_");
        for (key, value) in env {
            let key = key.as_ref();
            let Some(name) = key.strip_prefix(&lead) else {
                continue;
            };
            let parsed = yaml::parse_document(value.as_ref(), "environment").map_err(|e| {
                VarsError::Env {
                    name: key.to_string(),
                    message: e.to_string(),
                }
            })?;
            set(&mut self.env, name.to_string(), parsed);
        }
        Ok(())
    }

    /// The variables as interpolation sees them: sources merged by precedence, and dotted
    /// names (`-v a.b=1`) nested into maps (`a: {b: 1}`), merging with what is there.
    pub fn resolved(&self) -> Map<String, Value> {
        let mut flat = Map::new();
        for layer in [
            &self.stored,
            &self.env,
            &self.files,
            &self.var_files,
            &self.kvs,
        ] {
            for (name, value) in layer {
                set(&mut flat, name.clone(), value.clone());
            }
        }
        let mut out = Map::new();
        for (name, value) in flat {
            let pieces: Vec<&str> = name.split('.').collect();
            insert_nested(&mut out, &pieces, value);
        }
        out
    }

    /// The value of one top-level variable, after merging (see [`Vars::resolved`]).
    pub fn get(&self, name: &str) -> Option<Value> {
        self.resolved().remove(name)
    }

    /// Whether no source set anything.
    pub fn is_empty(&self) -> bool {
        self.stored.is_empty()
            && self.env.is_empty()
            && self.files.is_empty()
            && self.var_files.is_empty()
            && self.kvs.is_empty()
    }
}

/// Sets `pieces` (a dotted name) in `map`, making or replacing intermediate maps.
fn insert_nested(map: &mut Map<String, Value>, pieces: &[&str], value: Value) {
    match pieces {
        [] => {}
        [last] => {
            map.insert((*last).to_string(), value);
        }
        [first, rest @ ..] => {
            let slot = map
                .entry((*first).to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(inner) = slot {
                insert_nested(inner, rest, value);
            }
        }
    }
}

fn split_arg<'a>(arg: &'a str, what: &str) -> Result<(&'a str, &'a str), VarsError> {
    let Some((name, rest)) = arg.split_once('=') else {
        return Err(VarsError::Argument(format!(
            "Expected var '{arg}' to be in format 'name={what}'"
        )));
    };
    if name.is_empty() {
        return Err(VarsError::Argument(format!(
            "Expected var '{arg}' to specify non-empty name"
        )));
    }
    if rest.is_empty() {
        return Err(VarsError::Argument(format!(
            "Expected var '{arg}' to specify non-empty {what}"
        )));
    }
    Ok((name, rest))
}

fn trim_wrapping_quotes(s: &str) -> &str {
    for q in ['"', '\''] {
        if s.len() >= 2
            && let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q))
        {
            return inner;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn var_args_are_yaml_but_strings_stay_raw() {
        let mut v = Vars::new();
        v.add_var_arg("n=1").unwrap();
        v.add_var_arg("b=true").unwrap();
        v.add_var_arg("m={a: 1}").unwrap();
        v.add_var_arg("s='quoted'").unwrap();
        v.add_var_arg("t=a: b: c").unwrap_err();
        v.add_var_arg("raw=x # not a comment").unwrap();
        v.add_var_arg("eq=a=b").unwrap();
        let r = v.resolved();
        assert_eq!(r["n"], json!(1));
        assert_eq!(r["b"], json!(true));
        assert_eq!(r["m"], json!({"a": 1}));
        assert_eq!(r["s"], json!("quoted"));
        assert_eq!(r["raw"], json!("x # not a comment"));
        assert_eq!(r["eq"], json!("a=b"));
    }

    #[test]
    fn var_arg_errors_read_like_the_cli() {
        let mut v = Vars::new();
        let err = |v: &mut Vars, a: &str| v.add_var_arg(a).unwrap_err().to_string();
        assert_eq!(
            err(&mut v, "novalue"),
            "Expected var 'novalue' to be in format 'name=value'"
        );
        assert_eq!(
            err(&mut v, "=x"),
            "Expected var '=x' to specify non-empty name"
        );
        assert_eq!(
            err(&mut v, "x="),
            "Expected var 'x=' to specify non-empty value"
        );
        assert!(err(&mut v, "x=[1").starts_with("Deserializing variables 'x=[1': "));
        assert_eq!(
            Vars::split_var_file_arg("a").unwrap_err().to_string(),
            "Expected var 'a' to be in format 'name=path'"
        );
        assert_eq!(Vars::split_var_file_arg("a=b=c").unwrap(), ("a", "b=c"));
    }

    #[test]
    fn precedence_is_by_kind_not_call_order() {
        let mut v = Vars::new();
        v.add_var("x", json!("kv"));
        v.add_var_file("x", "file contents");
        v.add_vars_file("x: vars-file\ny: vars-file\nz: 1\n", "vars.yml")
            .unwrap();
        v.add_env(
            "PFX",
            [
                ("PFX_x", "env"),
                ("PFX_y", "env"),
                ("PFX_w", "[1]"),
                ("OTHER_q", "1"),
            ],
        )
        .unwrap();
        v.add_var_file("y", "file contents");
        let r = v.resolved();
        assert_eq!(r["x"], json!("kv"));
        assert_eq!(r["y"], json!("file contents"));
        assert_eq!(r["z"], json!(1));
        assert_eq!(r["w"], json!([1]));
        assert!(!r.contains_key("q"));
    }

    #[test]
    fn later_files_replace_whole_values() {
        let mut v = Vars::new();
        v.add_vars_file("a: {x: 1, y: 2}\n", "one.yml").unwrap();
        v.add_vars_file("a: {x: 3}\n", "two.yml").unwrap();
        assert_eq!(v.get("a"), Some(json!({"x": 3})));
        assert!(v.add_vars_file("- 1\n", "list.yml").is_err());
        v.add_vars_file("", "empty.yml").unwrap();
    }

    #[test]
    fn dotted_names_nest() {
        let mut v = Vars::new();
        v.add_vars_file("a: {b: 1, c: 2}\n", "v.yml").unwrap();
        v.add_var_arg("a.b=5").unwrap();
        v.add_var_arg("d.e.f=x").unwrap();
        v.add_var_arg("d.e.g=w").unwrap();
        let r = v.resolved();
        assert_eq!(r["a"], json!({"b": 5, "c": 2}));
        assert_eq!(r["d"], json!({"e": {"f": "x", "g": "w"}}));
    }

    #[test]
    fn env_needs_a_prefix() {
        let mut v = Vars::new();
        assert!(v.add_env("", Vec::<(String, String)>::new()).is_err());
    }
}
