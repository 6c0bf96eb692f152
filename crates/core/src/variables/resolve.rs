//! Resolution: for each definition, the user's value, else the stored one, else a generated
//! one, stored before it is used.

use serde_json::{Map, Value};

use super::generate::{self, CaMaterial, Kind, key_bits};
use super::keys::KeyMaker;
use super::order::generation_order;
use super::store::{StoredVariable, VariableStore};
use super::{SecretValue, VariableError};
use crate::manifest::Variable;
use crate::ops::{self, InterpolateOptions, InterpolationError, MissingVars, Vars};

/// When a stored value is replaced (`update_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateMode {
    /// `no-overwrite` (the default): a stored value is kept forever.
    NoOverwrite,
    /// `overwrite`: generated anew at every resolution.
    Overwrite,
    /// `converge`: generated anew when the type or options changed (stores that keep a
    /// digest of them only), or, for a certificate, when its CA's certificate changed.
    Converge,
}

impl UpdateMode {
    fn parse(
        def: &Variable,
        i: usize,
        options: &ResolveOptions,
    ) -> Result<UpdateMode, VariableError> {
        match def.update_mode.as_deref() {
            None if options.converge_variables => Ok(UpdateMode::Converge),
            None | Some("no-overwrite") => Ok(UpdateMode::NoOverwrite),
            Some("overwrite") => Ok(UpdateMode::Overwrite),
            Some("converge") => Ok(UpdateMode::Converge),
            Some(other) => Err(VariableError::Definition {
                path: format!("variables[{i}].update_mode"),
                message: format!(
                    "unknown update_mode '{other}' (expected no-overwrite, overwrite or converge)"
                ),
            }),
        }
    }
}

/// Resolution settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResolveOptions {
    /// The manifest's `features.converge_variables`: definitions without `update_mode` behave
    /// as `converge`.
    pub converge_variables: bool,
}

/// Where a variable's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The user gave it (`-v`, `-l`, ...); never stored.
    Provided,
    /// Found in the store.
    Stored,
    /// Generated now and stored.
    Generated,
    /// Generated now, replacing a stored value (`overwrite`, `converge`).
    Regenerated,
    /// No value: the definition has no `type`, or its options use variables nothing
    /// provides; nothing provides it either.
    Missing,
}

/// The outcome of [`resolve`]: variables for interpolation and where each came from.
/// `Debug` shows names only.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The user's variables, plus stored and generated ones below them.
    pub vars: Vars,
    /// Each definition, in generation order, with its source.
    pub sources: Vec<(String, Source)>,
}

/// [`resolve_with`] with default options.
pub async fn resolve(
    defs: &[Variable],
    user: &Vars,
    store: &dyn VariableStore,
) -> Result<Resolved, VariableError> {
    resolve_with(defs, user, store, &ResolveOptions::default()).await
}

/// Resolves every definition: the user's value wins; else the stored value (kept or replaced
/// per `update_mode`); else a value is generated and stored first. Dependencies (a
/// certificate's `ca`, variables its options use) are resolved first. The CA of a
/// certificate may also be a variable the user provides or the store holds without a
/// definition.
pub async fn resolve_with(
    defs: &[Variable],
    user: &Vars,
    store: &dyn VariableStore,
    options: &ResolveOptions,
) -> Result<Resolved, VariableError> {
    let order = generation_order(defs)?;
    let modes = defs
        .iter()
        .enumerate()
        .map(|(i, d)| UpdateMode::parse(d, i, options))
        .collect::<Result<Vec<_>, _>>()?;
    let provided = user.resolved();
    let mut vars = user.clone();
    // Stored and generated values so far, for CA look-ups (cheaper than `vars.get`).
    let mut values: Map<String, Value> = Map::new();
    let mut sources = Vec::with_capacity(defs.len());
    // Made at the first key a definition needs (a run that generates nothing makes none).
    let mut keys: Option<KeyMaker> = None;

    for (at, &i) in order.iter().enumerate() {
        let def = &defs[i];
        let name = def.name.as_str();
        if provided.contains_key(name) {
            tracing::debug!(variable = name, "variable provided by the user");
            sources.push((name.to_string(), Source::Provided));
            continue;
        }
        let def_options = match interpolated_options(def, i, &vars)? {
            Options::Ready(options) => options,
            Options::Missing(missing) => {
                // As bosh-cli: a definition whose options need a variable nothing provides
                // is not generated (the placeholders stay, and strict interpolation names
                // the missing variables).
                tracing::debug!(
                    variable = name,
                    ?missing,
                    "variable not generated: its options use missing variables"
                );
                sources.push((name.to_string(), Source::Missing));
                continue;
            }
        };
        let stored = store.get(name).await?;
        let kind = Kind::parse(&def.kind);

        // A certificate's CA: needed to generate, and for `converge` to notice a new CA.
        let ca = match (&kind, ca_name(def_options.as_ref())) {
            (Some(Kind::Certificate), Some(ca)) => {
                let known = provided.get(ca).or_else(|| values.get(ca)).cloned();
                Some(certificate_ca(def, i, ca, known, store).await?)
            }
            _ => None,
        };

        let digest = options_digest(&def.kind, def_options.as_ref());
        let keep = match &stored {
            None => false,
            Some(_) if def.kind.is_empty() => true,
            Some(s) => keeps_stored(s, modes[i], &digest, ca.as_ref()),
        };

        let (value, source) = if keep {
            let stored = stored.map(|s| s.value).unwrap_or_default();
            (stored, Source::Stored)
        } else if def.kind.is_empty() {
            tracing::debug!(variable = name, "variable has no type and no value");
            sources.push((name.to_string(), Source::Missing));
            continue;
        } else {
            if keys.is_none()
                && let Some(bits) = kind.and_then(|k| key_bits(k, def_options.as_ref()))
            {
                let later = keys_to_come(defs, &order[at + 1..], &provided, store).await?;
                keys = Some(KeyMaker::ahead([vec![bits], later].concat()));
            }
            let keys = keys.as_ref().unwrap_or(&INLINE);
            let options = def_options.as_ref();
            let fresh = generated(def, i, kind, options, ca.as_ref(), digest, keys)?;
            store_generated(def, fresh, stored.is_none(), modes[i], store).await?
        };
        if source == Source::Stored {
            tracing::debug!(variable = name, "variable found in the store");
        }
        let value: Value = SecretValue::expose(&value).clone();
        values.insert(name.to_string(), value.clone());
        vars.add_stored(name, value);
        sources.push((name.to_string(), source));
    }
    Ok(Resolved { vars, sources })
}

/// The CA `ca` of certificate definition `def` (at `variables[i]`): `known` (the user's
/// or resolved so far), else the stored one.
async fn certificate_ca(
    def: &Variable,
    i: usize,
    ca: &str,
    known: Option<Value>,
    store: &dyn VariableStore,
) -> Result<CaMaterial, VariableError> {
    let value = match known {
        Some(v) => Some(v),
        None => store.get(ca).await?.map(|s| s.value.expose().clone()),
    };
    let Some(value) = value else {
        return Err(VariableError::MissingCa {
            path: format!("variables[{i}].options.ca"),
            name: def.name.clone(),
            ca: ca.to_string(),
        });
    };
    CaMaterial::from_value(ca, &value).map_err(|source| VariableError::Generate {
        path: format!("variables[{i}].options.ca"),
        name: def.name.clone(),
        source,
    })
}

/// Whether the stored value of a typed definition stays, per its update mode: `converge`
/// keeps it while the options (`digest`) and the certificate's CA are the same.
fn keeps_stored(
    stored: &StoredVariable,
    mode: UpdateMode,
    digest: &str,
    ca: Option<&CaMaterial>,
) -> bool {
    match mode {
        UpdateMode::NoOverwrite => true,
        UpdateMode::Overwrite => false,
        UpdateMode::Converge => {
            let same_options = stored.options_digest.as_ref().is_none_or(|d| d == digest);
            let same_ca = ca.is_none_or(|ca| {
                stored
                    .value
                    .expose()
                    .get("ca")
                    .and_then(Value::as_str)
                    .map(str::trim)
                    == Some(ca.certificate.trim())
            });
            same_options && same_ca
        }
    }
}

/// Keys made when asked for (a run that needs none made ahead).
static INLINE: KeyMaker = KeyMaker::inline();

/// The sizes of the keys the definitions at `order` will ask for, in that order: those of
/// key types the user gives no value and the store holds none for. (A stored value that
/// `converge` replaces gets its key when it is replaced.)
async fn keys_to_come(
    defs: &[Variable],
    order: &[usize],
    provided: &Map<String, Value>,
    store: &dyn VariableStore,
) -> Result<Vec<usize>, VariableError> {
    let mut sizes = Vec::new();
    for &i in order {
        let def = &defs[i];
        let options = def.options.clone().map(Value::Object);
        let Some(bits) = Kind::parse(&def.kind).and_then(|k| key_bits(k, options.as_ref())) else {
            continue;
        };
        if !provided.contains_key(&def.name) && store.get(&def.name).await?.is_none() {
            sizes.push(bits);
        }
    }
    Ok(sizes)
}

/// A new value for typed definition `def` (at `variables[i]`) of `kind` (`None`: a type
/// kubosh cannot generate), with the digest of its options, its RSA key from `keys`.
fn generated(
    def: &Variable,
    i: usize,
    kind: Option<Kind>,
    options: Option<&Value>,
    ca: Option<&CaMaterial>,
    digest: String,
    keys: &KeyMaker,
) -> Result<StoredVariable, VariableError> {
    let Some(kind) = kind else {
        return Err(VariableError::Generate {
            path: format!("variables[{i}].type"),
            name: def.name.clone(),
            source: generate::GenerateError::UnsupportedType(def.kind.clone()),
        });
    };
    let value =
        generate::generate(kind, options, ca, keys).map_err(|source| VariableError::Generate {
            path: format!("variables[{i}]"),
            name: def.name.clone(),
            source,
        })?;
    Ok(StoredVariable {
        value,
        options_digest: Some(digest),
    })
}

/// Stores a value generated for `def`: created when nothing was stored (what is stored
/// afterwards wins a race), else replacing the stored one.
async fn store_generated(
    def: &Variable,
    fresh: StoredVariable,
    is_new: bool,
    mode: UpdateMode,
    store: &dyn VariableStore,
) -> Result<(SecretValue, Source), VariableError> {
    let name = def.name.as_str();
    if is_new {
        let kept = store.create(name, &fresh).await?;
        tracing::info!(variable = name, kind = %def.kind, "generated variable");
        Ok((kept.value, Source::Generated))
    } else {
        store.replace(name, &fresh).await?;
        tracing::info!(variable = name, kind = %def.kind, ?mode, "regenerated variable");
        Ok((fresh.value, Source::Regenerated))
    }
}

fn ca_name(options: Option<&Value>) -> Option<&str> {
    options?
        .get("ca")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A definition's options, ready for generation or not.
enum Options {
    /// Interpolated (or none).
    Ready(Option<Value>),
    /// They use these variables, which have no value.
    Missing(Vec<String>),
}

/// The definition's options with placeholders resolved from `vars` (dependencies come
/// first, so any variable still missing is one nothing provides).
fn interpolated_options(def: &Variable, i: usize, vars: &Vars) -> Result<Options, VariableError> {
    let Some(options) = &def.options else {
        return Ok(Options::Ready(None));
    };
    let options = Value::Object(options.clone());
    if ops::placeholders(&options).is_empty() {
        return Ok(Options::Ready(Some(options)));
    }
    let strict = InterpolateOptions {
        missing: MissingVars::Error,
        error_on_unused: false,
    };
    match ops::interpolate_with(&options, vars, &strict) {
        Ok(done) => Ok(Options::Ready(Some(done.value))),
        Err(InterpolationError::Variables { missing, .. }) if !missing.is_empty() => {
            Ok(Options::Missing(missing))
        }
        Err(e) => Err(VariableError::Options {
            path: format!("variables[{i}].options"),
            name: def.name.clone(),
            message: super::scrub(&e.to_string(), vars),
        }),
    }
}

/// SHA-256 (hex) of the type and options, with map keys sorted (so reordering options in a
/// manifest is not a change).
fn options_digest(kind: &str, options: Option<&Value>) -> String {
    fn canonical(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), canonical(&map[k])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    let doc = serde_json::json!({
        "type": kind,
        "options": options.map(canonical).unwrap_or(Value::Null),
    });
    let text = serde_json::to_string(&doc).unwrap_or_default();
    kubosh_base::digest::sha256_hex(text.as_bytes())
}
