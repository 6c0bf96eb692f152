//! BOSH CLI ops files (go-patch) and `((variable))` interpolation, as `bosh int` does them.
//!
//! Pure: callers read files and the environment and hand text or values in.
//!
//! - [`OpsFile`]: parse an ops file and [apply](OpsFile::apply) it to a document. Pointers
//!   ([`Pointer`]) and error texts follow cppforlife/go-patch; errors name the file and the
//!   operation index the way the BOSH CLI does.
//! - [`find`]: the value at a pointer (`bosh int --path`).
//! - [`Vars`]: variable values from `-v`, `--var-file`, `-l` and `--vars-env` style sources,
//!   with the CLI's precedence.
//! - [`interpolate`] / [`interpolate_with`]: replace placeholders, with bosh-cli's
//!   `director/template` semantics, leaving or rejecting missing variables.
//! - [`placeholders`]: every placeholder a document uses.
//!
//! ```
//! use kubosh_core::ops::{self, MissingVars, OpsFile, Vars};
//!
//! let mut doc = kubosh_base::yaml::parse_value("name: ((name))\ninstances: 3\n", "manifest").unwrap();
//! let ops = OpsFile::parse("- type: replace\n  path: /instances\n  value: 1\n", "one.yml").unwrap();
//! ops.apply(&mut doc).unwrap();
//!
//! let mut vars = Vars::new();
//! vars.add_var_arg("name=demo").unwrap();
//! let out = ops::interpolate(&doc, &vars, MissingVars::Error).unwrap();
//! assert_eq!(out, serde_json::json!({"name": "demo", "instances": 1}));
//! ```

mod file;
mod gofmt;
mod interpolate;
mod patch;
mod pointer;
mod tracker;
mod vars;

#[cfg(test)]
mod tests;

pub use file::{OpsError, OpsFile, apply_all};
pub use interpolate::{
    InterpolateOptions, Interpolated, InterpolationError, MissingVars, interpolate,
    interpolate_with, placeholders, variable_of,
};
pub use patch::{PatchError, find};
pub use pointer::{MAX_POINTER_STEPS, Modifier, Pointer, PointerError, Token};
pub use vars::{Vars, VarsError};
