//! `kubosh validate`.

use super::out::outln;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::input::{DocumentArgs, read_cloud_configs, read_cpi_configs};
use kubosh_core::validate;

/// Arguments of `kubosh validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The deployment manifest (YAML).
    pub manifest: PathBuf,
    /// The cloud config (YAML); repeatable: several are merged as the Director merges named
    /// cloud configs.
    #[arg(long = "cloud-config", short = 'c', required = true)]
    pub cloud_config: Vec<PathBuf>,
    /// A runtime config applied to the manifest; repeatable, applied in order.
    #[arg(long = "runtime-config", value_name = "PATH")]
    pub runtime_configs: Vec<PathBuf>,
    /// A CPI config; repeatable, merged. Checked on its own and against the cloud config's
    /// AZs (each may only name a CPI it defines).
    #[arg(long = "cpi-config", value_name = "PATH")]
    pub cpi_configs: Vec<PathBuf>,
    /// Ops files and variables, applied to the manifest as `bosh interpolate` does.
    #[command(flatten)]
    pub input: DocumentArgs,
}

/// Runs the command: exit 0 when there are no errors (warnings are printed), 1 otherwise.
pub fn run(args: &ValidateArgs) -> ExitCode {
    let input = super::input::DocumentArgs {
        runtime_configs: args.runtime_configs.clone(),
        ..args.input.clone()
    };
    let (manifest, cloud_config) = match (
        (input.load(&args.manifest)).and_then(|m| super::input::director_view(m, &args.manifest)),
        read_cloud_configs(&args.cloud_config),
    ) {
        (Ok(m), Ok(c)) => (m, c),
        (m, c) => {
            for e in [m.err(), c.err()].into_iter().flatten() {
                eprintln!("{e}");
            }
            return ExitCode::from(2);
        }
    };
    let cpis = match input
        .vars()
        .and_then(|vars| read_cpi_configs(&args.cpi_configs, &vars))
    {
        Ok(cpis) => cpis,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let validated = validate::deployment(&manifest, &cloud_config).and_then(|v| {
        let problems = validate::azs_on_cpis(&v.document.1, &cpis);
        if problems.has_errors() {
            Err(problems)
        } else {
            Ok(v)
        }
    });
    match validated {
        Ok(v) => {
            eprint!("{}", v.warnings);
            let (m, _) = &v.document;
            outln!(
                "manifest '{}' is valid: {} instance groups",
                m.name.as_deref().unwrap_or(""),
                m.instance_groups.len()
            );
            ExitCode::SUCCESS
        }
        Err(problems) => {
            eprint!("{problems}");
            let errors = problems.errors().count();
            eprintln!("{errors} error(s): nothing was deployed");
            ExitCode::FAILURE
        }
    }
}
