//! Reading a document the way `bosh interpolate` does: the YAML file, then ops files in
//! order, then variables.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::Value;

use kubosh_core::ops::{self, InterpolateOptions, MissingVars, OpsFile, Vars};
use kubosh_kube::variables::{self, FileStore};

/// Ops-file and variable flags, as the BOSH CLI spells them.
#[derive(Debug, Clone, Default, Args)]
pub struct DocumentArgs {
    /// Apply an ops file (go-patch), in order; repeatable.
    #[arg(long = "ops-file", short = 'o', value_name = "PATH")]
    pub ops_files: Vec<PathBuf>,
    /// Load variables from a YAML file; repeatable.
    #[arg(long = "vars-file", short = 'l', value_name = "PATH")]
    pub vars_files: Vec<PathBuf>,
    /// Set a variable, `name=value` (the value is read as YAML); repeatable.
    #[arg(long = "var", short = 'v', value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Set a variable to a file's contents, `name=path`; repeatable.
    #[arg(long = "var-file", value_name = "NAME=PATH")]
    pub var_files: Vec<String>,
    /// Load variables from environment variables with this prefix (`PREFIX_name`).
    #[arg(long = "vars-env", value_name = "PREFIX")]
    pub vars_env: Vec<String>,
    /// Fail when a variable has no value (by default placeholders are left in place).
    #[arg(long = "var-errs")]
    pub var_errs: bool,
    /// Fail when a provided variable is not used.
    #[arg(long = "var-errs-unused")]
    pub var_errs_unused: bool,
    /// Runtime configs applied to the document after the ops files, before variables (the
    /// commands that deploy set it from their `--runtime-config` flags).
    #[arg(skip)]
    pub runtime_configs: Vec<PathBuf>,
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// One of bosh-cli's document flags: as its help names it, and the Go type it parses into.
struct Flag(&'static str, &'static str);

impl Flag {
    /// The flag's argument could not be used, worded as go-flags (bosh-cli's flag parser)
    /// words it.
    fn error(&self, message: impl std::fmt::Display) -> String {
        let Flag(flag, expected) = self;
        format!("invalid argument for flag `{flag}' (expected {expected}): {message}")
    }
}

const OPS_FILE_FLAG: Flag = Flag("-o, --ops-file", "[]opts.OpsFileArg");
const VARS_FILE_FLAG: Flag = Flag("-l, --vars-file", "[]template.VarsFileArg");
const VAR_FLAG: Flag = Flag("-v, --var", "[]template.VarKV");
const VAR_FILE_FLAG: Flag = Flag("--var-file", "[]template.VarFileArg");
const VARS_ENV_FLAG: Flag = Flag("--vars-env", "[]template.VarsEnvArg");

/// A file's text, or bosh-cli's file system error (`Opening file X: open X: reason`).
fn read_as_bosh(path: &Path) -> Result<String, String> {
    let shown = path.display();
    std::fs::read_to_string(path).map_err(|e| {
        use std::io::ErrorKind;
        let (verb, why) = match e.kind() {
            ErrorKind::NotFound => ("open", "no such file or directory".to_string()),
            ErrorKind::PermissionDenied => ("open", "permission denied".to_string()),
            ErrorKind::IsADirectory => ("read", "is a directory".to_string()),
            _ => ("read", e.to_string()),
        };
        match verb {
            "open" => format!("Opening file {shown}: open {shown}: {why}"),
            _ => format!("Reading file {shown}: read {shown}: {why}"),
        }
    })
}

/// `path` made absolute, as bosh-cli expands the paths of files it reads whole.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Reads a YAML file into a value, as the Director sees it.
pub fn read_yaml(path: &Path) -> Result<Value, String> {
    kubosh_base::yaml::parse_value(&read(path)?, &path.display().to_string())
        .map_err(|e| e.to_string())
}

/// Reads a manifest as bosh-cli reads it, marks kept (`kubosh_base::yaml::parse_document`);
/// a file that cannot be opened is said so as bosh-cli says it.
fn read_document(path: &Path) -> Result<Value, String> {
    let text = read_as_bosh(&absolute(path)).map_err(|e| match e.split_once(": ") {
        // bosh-cli prints the cause on a line of its own under the wrapping message.
        Some((wrap, cause)) => format!("{wrap}:\n  {cause}"),
        None => e,
    })?;
    kubosh_base::yaml::parse_document(&text, &path.display().to_string()).map_err(|e| e.to_string())
}

/// A document read by [`DocumentArgs`] as the Director works with it: non-string keys as
/// their text, a number JSON cannot hold refused (`kubosh_base::yaml::plain`).
pub fn director_view(document: Value, path: &Path) -> Result<Value, String> {
    kubosh_base::yaml::plain(document).map_err(|e| format!("{}: {e}", path.display()))
}

/// Each YAML file of `paths`, named by its path (for the core's merges of named configs).
fn read_named(paths: &[PathBuf]) -> Result<Vec<(String, Value)>, String> {
    (paths.iter())
        .map(|p| Ok((p.display().to_string(), read_yaml(p)?)))
        .collect()
}

/// The cloud configs at `paths` as one, merged as the Director merges named cloud configs
/// (each named by its path).
pub fn read_cloud_configs(paths: &[PathBuf]) -> Result<Value, String> {
    kubosh_core::validate::merge_cloud_configs(&read_named(paths)?).map_err(|p| p.to_string())
}

/// The CPI configs at `paths` as one (each named by its path), their `((variables))` filled
/// in from `vars` (every one must have a value: a CPI is never sent a placeholder).
pub fn read_cpi_configs(
    paths: &[PathBuf],
    vars: &Vars,
) -> Result<kubosh_core::manifest::CpiConfig, String> {
    let mut configs = Vec::new();
    for (name, document) in read_named(paths)? {
        let document = ops::interpolate(&document, vars, MissingVars::Error)
            .map_err(|e| format!("{name}: {e}"))?;
        configs.push((name, document));
    }
    let merged = kubosh_core::validate::merge_cpi_configs(&configs).map_err(|p| p.to_string())?;
    eprint!("{}", merged.warnings);
    Ok(merged.document)
}

impl DocumentArgs {
    /// The variables the flags give.
    pub fn vars(&self) -> Result<Vars, String> {
        let mut vars = Vars::new();
        for prefix in &self.vars_env {
            (vars.add_env(prefix, std::env::vars())).map_err(|e| VARS_ENV_FLAG.error(e))?;
        }
        for path in &self.vars_files {
            let shown = path.display().to_string();
            let text = read_as_bosh(path).map_err(|e| {
                VARS_FILE_FLAG.error(format!("Reading variables file '{shown}': {e}"))
            })?;
            (vars.add_vars_file(&text, &shown)).map_err(|e| VARS_FILE_FLAG.error(e))?;
        }
        for arg in &self.var_files {
            let (name, path) = Vars::split_var_file_arg(arg).map_err(|e| VAR_FILE_FLAG.error(e))?;
            let path = absolute(Path::new(path));
            let text = read_as_bosh(&path).map_err(|e| {
                VAR_FILE_FLAG.error(format!(
                    "Reading variable from file '{}': {e}",
                    path.display()
                ))
            })?;
            vars.add_var_file(name, &text);
        }
        for arg in &self.vars {
            vars.add_var_arg(arg).map_err(|e| VAR_FLAG.error(e))?;
        }
        Ok(vars)
    }

    /// Reads `path`, applies the ops files and interpolates the variables. The document
    /// keeps what JSON cannot hold marked, as `bosh int` has it; [`director_view`] gives the
    /// Director's view.
    pub fn load(&self, path: &Path) -> Result<Value, String> {
        // Flags first, as bosh-cli parses them before it reads the manifest.
        let vars = self.vars()?;
        let doc = self.patched(path)?;
        let out = ops::interpolate_with(&doc, &vars, &self.options()).map_err(|e| e.multiline())?;
        Ok(out.value)
    }

    /// [`DocumentArgs::load`] with a vars-store file, as bosh-cli's `--vars-store`: every
    /// variable in the file is a variable (below all other sources), and the document's
    /// definitions that nothing gives a value are generated and saved to the file first.
    pub fn load_with_vars_store(&self, path: &Path, store: &Path) -> Result<Value, String> {
        let store = FileStore::new(store);
        self.load_resolved(path, &store, &[&store], |_| true)
    }

    /// [`DocumentArgs::load`] for a deploy of a director: `((/name))` variables are the
    /// director's, kept in its file `director` (generated there once, whichever of its
    /// deployments asks first; the file is locked while a value is added), the others the
    /// deployment's, in the vars-store file `store` as `--vars-store` keeps them (without
    /// one, they must be given).
    pub fn load_for_director(
        &self,
        path: &Path,
        store: Option<&Path>,
        director: &Path,
    ) -> Result<Value, String> {
        let director = FileStore::new(director);
        // Without a vars store, only the director's variables are generated (the scoped
        // store never asks the deployment's side then).
        let deployment = store.map_or_else(|| director.clone(), FileStore::new);
        let scoped = variables::ScopedStore {
            director: director.clone(),
            deployment: deployment.clone(),
        };
        let files: Vec<&FileStore> = match store {
            Some(_) => vec![&director, &deployment],
            None => vec![&director],
        };
        self.load_resolved(path, &scoped, &files, |name| {
            store.is_some() || variables::is_director_variable(name)
        })
    }

    /// The document with the ops files applied and the variables interpolated, the
    /// definitions `generate` keeps resolved through `store` (the values given win; then
    /// what `store` has; else generated into it), every other variable of `vars_files` a
    /// variable too (as bosh-cli's vars store).
    fn load_resolved(
        &self,
        path: &Path,
        store: &dyn variables::VariableStore,
        vars_files: &[&FileStore],
        generate: impl Fn(&str) -> bool,
    ) -> Result<Value, String> {
        let vars = self.vars()?;
        let doc = self.patched(path)?;
        let mut defs = variables::definitions(&doc).map_err(|e| e.to_string())?;
        defs.retain(|d| generate(&d.name));
        let mut resolved = futures::executor::block_on(variables::resolve(&defs, &vars, store))
            .map_err(|e| e.to_string())?;
        // The rest of the file are variables too.
        let present = resolved.vars.resolved();
        for file in vars_files {
            for (name, value) in file.load().map_err(|e| e.to_string())? {
                if !present.contains_key(&name) {
                    resolved.vars.add_stored(&name, value);
                }
            }
        }
        let out = variables::interpolate(&doc, &resolved.vars, &self.options())
            .map_err(|e| e.to_string())?;
        Ok(out.value)
    }

    /// The document with the ops files applied.
    fn patched(&self, path: &Path) -> Result<Value, String> {
        let ops: Vec<OpsFile> = (self.ops_files.iter())
            .map(|p| {
                let shown = p.display().to_string();
                let text = read_as_bosh(p)
                    .map_err(|e| OPS_FILE_FLAG.error(format!("Reading ops file '{shown}': {e}")))?;
                OpsFile::parse(&text, &shown).map_err(|e| OPS_FILE_FLAG.error(e))
            })
            .collect::<Result<_, _>>()?;
        let mut doc = read_document(path)?;
        ops::apply_all(&ops, &mut doc).map_err(|e| e.to_string())?;
        if !self.runtime_configs.is_empty() {
            let configs = read_named(&self.runtime_configs)?;
            // A deployment without a director has no team.
            let warnings = kubosh_core::validate::apply_runtime_configs(&mut doc, &configs, None)
                .map_err(|p| p.to_string())?;
            eprint!("{warnings}");
        }
        Ok(doc)
    }

    fn options(&self) -> InterpolateOptions {
        InterpolateOptions {
            missing: if self.var_errs {
                MissingVars::Error
            } else {
                MissingVars::Leave
            },
            error_on_unused: self.var_errs_unused,
        }
    }
}
