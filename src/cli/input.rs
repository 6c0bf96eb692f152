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

/// Reads a YAML file into a value.
pub fn read_yaml(path: &Path) -> Result<Value, String> {
    kubosh_base::yaml::parse_value(&read(path)?, &path.display().to_string())
        .map_err(|e| e.to_string())
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
            vars.add_env(prefix, std::env::vars())
                .map_err(|e| e.to_string())?;
        }
        for path in &self.vars_files {
            vars.add_vars_file(&read(path)?, &path.display().to_string())
                .map_err(|e| e.to_string())?;
        }
        for arg in &self.var_files {
            let (name, path) = Vars::split_var_file_arg(arg).map_err(|e| e.to_string())?;
            vars.add_var_file(name, &read(Path::new(path))?);
        }
        for arg in &self.vars {
            vars.add_var_arg(arg).map_err(|e| e.to_string())?;
        }
        Ok(vars)
    }

    /// Reads `path`, applies the ops files and interpolates the variables.
    pub fn load(&self, path: &Path) -> Result<Value, String> {
        let doc = self.patched(path)?;
        let out = ops::interpolate_with(&doc, &self.vars()?, &self.options())
            .map_err(|e| e.to_string())?;
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
        let doc = self.patched(path)?;
        let mut defs = variables::definitions(&doc).map_err(|e| e.to_string())?;
        defs.retain(|d| generate(&d.name));
        let mut resolved =
            futures::executor::block_on(variables::resolve(&defs, &self.vars()?, store))
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
        let mut doc = read_yaml(path)?;
        let ops: Vec<OpsFile> = self
            .ops_files
            .iter()
            .map(|p| OpsFile::parse(&read(p)?, &p.display().to_string()).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
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
