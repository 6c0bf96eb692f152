//! `kubosh stemcell create` and `kubosh stemcell inspect`.

use super::out::{out, outln};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use kubosh_artifacts::stemcell::{self, CreateStemcellOptions, Stemcell};

/// `kubosh stemcell ...`.
#[derive(Debug, Subcommand)]
pub enum StemcellCommand {
    /// Write a minimal stemcell tarball that kubosh's local cloud accepts.
    Create(CreateArgs),
    /// Read a stemcell tarball, verify its image digest and print its manifest.
    Inspect(InspectArgs),
}

/// Arguments of `kubosh stemcell create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Stemcell name.
    #[arg(long)]
    pub name: String,
    /// Stemcell version.
    #[arg(long)]
    pub version: String,
    /// Operating system, as deployment manifests name it.
    #[arg(long)]
    pub os: String,
    /// Where to write the tarball.
    #[arg(long, value_name = "OUT")]
    pub tarball: PathBuf,
    /// The image: a file (kept verbatim) or a directory (packed as a tgz); default: empty.
    #[arg(long, value_name = "DIR_OR_FILE")]
    pub image: Option<PathBuf>,
    /// Stemcell formats (repeatable).
    #[arg(long = "format", default_value = "warden-tar")]
    pub formats: Vec<String>,
    /// Agent API version.
    #[arg(long, default_value_t = 3)]
    pub api_version: u32,
    /// Cloud properties for `create_stemcell`, as a JSON object.
    #[arg(long, value_name = "JSON")]
    pub cloud_properties: Option<String>,
}

/// Arguments of `kubosh stemcell inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The stemcell tarball.
    pub tarball: PathBuf,
}

/// Runs a `kubosh stemcell` subcommand.
pub fn run(command: &StemcellCommand) -> ExitCode {
    let result = match command {
        StemcellCommand::Create(args) => create(args),
        StemcellCommand::Inspect(args) => inspect(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubosh stemcell: {e}");
            ExitCode::FAILURE
        }
    }
}

fn create(args: &CreateArgs) -> Result<(), Box<dyn std::error::Error>> {
    let cloud_properties = match &args.cloud_properties {
        None => serde_json::Map::new(),
        Some(text) => match serde_json::from_str(text)? {
            serde_json::Value::Object(m) => m,
            _ => return Err("--cloud-properties must be a JSON object".into()),
        },
    };
    let opts = CreateStemcellOptions {
        name: args.name.clone(),
        version: args.version.clone(),
        operating_system: args.os.clone(),
        image: args.image.clone(),
        stemcell_formats: args.formats.clone(),
        api_version: args.api_version,
        cloud_properties,
    };
    let manifest = stemcell::create(&opts, &args.tarball)?;
    out!("{}", kubosh_base::yaml::to_string(&manifest)?);
    outln!("wrote {}", args.tarball.display());
    Ok(())
}

fn inspect(args: &InspectArgs) -> Result<(), Box<dyn std::error::Error>> {
    let s = Stemcell::read(&args.tarball)?;
    out!("{}", kubosh_base::yaml::to_string(&s.manifest)?);
    outln!("image: {} bytes, digest verified", s.image_size);
    Ok(())
}
