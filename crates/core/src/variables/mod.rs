//! A deployment's `variables:` section: values generated once, kept in a store, and handed
//! to `((name))` / `((name.key))` interpolation ([`crate::ops`]) at render time.
//!
//! - [`generate`]: the generators, with config-server's types, options, defaults and value
//!   shapes (`password`, `certificate`, `rsa`, `ssh`).
//! - [`VariableStore`]: where generated values live. `kubosh_engine::variables::FileStore` is
//!   a vars-store file as `bosh int --vars-store` keeps it (create-env);
//!   `kubosh_kube::variables::SecretStore` keeps one Kubernetes Secret per variable (the
//!   controller); [`MemoryStore`] is for tests.
//! - [`resolve`]: for every definition, the user's value if one is given, else the stored
//!   one, else a freshly generated one (stored before use). Certificates' CAs are generated
//!   before the certificates they sign. The result is a [`Vars`] for
//!   [`interpolate`]/[`crate::ops::interpolate`].
//!
//! Values never reach logs, errors or `Debug` output: they travel as [`SecretValue`]s, errors
//! name variables and paths only, and [`interpolate`] scrubs the interpolator's errors (which
//! may quote a value) of every variable's text.
//!
//! ```
//! use kubosh_core::ops::{InterpolateOptions, Vars};
//! use kubosh_core::variables::{self, MemoryStore};
//!
//! let doc = kubosh_base::yaml::parse_value(
//!     "admin: ((admin_password))\nvariables:\n- {name: admin_password, type: password}\n",
//!     "manifest",
//! ).unwrap();
//! let defs = variables::definitions(&doc).unwrap();
//! let store = MemoryStore::new();
//! let resolved = futures::executor::block_on(variables::resolve(&defs, &Vars::new(), &store)).unwrap();
//! let out = variables::interpolate(&doc, &resolved.vars, &InterpolateOptions::default()).unwrap();
//! assert_eq!(out.value["admin"].as_str().unwrap().len(), 20);
//! ```

pub mod generate;
mod keys;
mod order;
mod resolve;
mod store;

pub use generate::{CaMaterial, CertificateOptions, ExtendedKeyUsage, GenerateError, Kind};
pub use keys::KeyMaker;
pub use resolve::{ResolveOptions, Resolved, Source, UpdateMode, resolve, resolve_with};
pub use store::{
    MemoryStore, ScopedStore, StoreError, StoredVariable, VariableStore, is_director_variable,
};

use serde_json::Value;

use crate::manifest::Variable;
use crate::ops::{self, InterpolateOptions, Interpolated, Vars};

/// A variable's value: `Debug` and `Display` print `<redacted>`.
pub type SecretValue = kubosh_base::secret::Secret<Value>;

/// Why variables could not be resolved or interpolated. Texts carry the variable's name and
/// the path of its definition (`variables[3].options.ca`), never a value.
#[derive(Debug, thiserror::Error)]
pub enum VariableError {
    /// A definition is malformed: no or a duplicate name, an unknown `update_mode`, a cycle.
    #[error("{path}: {message}")]
    Definition {
        /// Where, e.g. `variables[2].name`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A certificate's `ca` is neither defined, provided nor stored.
    #[error(
        "{path}: variable '{name}' is signed by CA '{ca}', which is not defined, provided or stored"
    )]
    MissingCa {
        /// `variables[i].options.ca`.
        path: String,
        /// The certificate variable.
        name: String,
        /// The CA variable it names.
        ca: String,
    },
    /// Generation failed (bad options, unsupported type, unusable CA).
    #[error("{path}: Generating variable '{name}': {source}")]
    Generate {
        /// `variables[i]` or the option's path.
        path: String,
        /// The variable.
        name: String,
        /// Why.
        source: GenerateError,
    },
    /// A definition's options could not be interpolated.
    #[error("{path}: Interpolating variable '{name}' definition options: {message}")]
    Options {
        /// `variables[i].options`.
        path: String,
        /// The variable.
        name: String,
        /// Why (scrubbed of values).
        message: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Interpolating the document failed (scrubbed of values).
    #[error("{0}")]
    Interpolation(String),
}

/// The `variables:` section of a document (manifest or not), typed. Absent or `null` is none.
pub fn definitions(doc: &Value) -> Result<Vec<Variable>, VariableError> {
    match doc.get("variables") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(section) => {
            serde_json::from_value(section.clone()).map_err(|e| VariableError::Definition {
                path: "variables".into(),
                message: e.to_string(),
            })
        }
    }
}

/// [`ops::interpolate_with`], with any error as the BOSH CLI prints it
/// ([`ops::InterpolationError::multiline`]) and scrubbed of the variables' values (the
/// interpolator quotes values it cannot embed in a string).
pub fn interpolate(
    doc: &Value,
    vars: &Vars,
    options: &InterpolateOptions,
) -> Result<Interpolated, VariableError> {
    ops::interpolate_with(doc, vars, options)
        .map_err(|e| VariableError::Interpolation(scrub(&e.multiline(), vars)))
}

/// `text` with every string in `vars` (and every line of multi-line ones) replaced by
/// `<redacted>`.
pub fn scrub(text: &str, vars: &Vars) -> String {
    let mut secrets = Vec::new();
    kubosh_base::secret::collect_strings(&Value::Object(vars.resolved()), &mut secrets);
    kubosh_base::secret::scrub(text, &secrets)
}
