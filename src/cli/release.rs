//! `kubosh release create` and `kubosh release inspect`.

use super::out::outln;
use kubosh_artifacts::release::ReleaseFile as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use kubosh_artifacts::release::{self, CreateOptions, Release};

/// `kubosh release ...`.
#[derive(Debug, Subcommand)]
pub enum ReleaseCommand {
    /// Build a release tarball from a BOSH release directory (`bosh create-release --force`).
    Create(CreateArgs),
    /// Read and verify a release tarball; print its jobs and packages.
    Inspect(InspectArgs),
}

/// Arguments of `kubosh release create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The release directory (`jobs/`, `packages/`, `src/`, `config/final.yml`).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Where to write the tarball.
    #[arg(long, value_name = "OUT")]
    pub tarball: PathBuf,
    /// Release name (default: `name` in config/final.yml).
    #[arg(long)]
    pub name: Option<String>,
    /// Release version (default: the next dev version, `0+dev.1` in a fresh directory).
    #[arg(long)]
    pub version: Option<String>,
}

/// Arguments of `kubosh release inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The release tarball.
    pub tarball: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `kubosh release` subcommand.
pub fn run(command: &ReleaseCommand) -> ExitCode {
    let result = match command {
        ReleaseCommand::Create(args) => create(args),
        ReleaseCommand::Inspect(args) => inspect(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubosh release: {e}");
            ExitCode::FAILURE
        }
    }
}

fn create(args: &CreateArgs) -> Result<(), Box<dyn std::error::Error>> {
    let opts = CreateOptions {
        name: args.name.clone(),
        version: args.version.clone(),
    };
    let release = release::create::create(&args.dir, &opts)?;
    release.write(&args.tarball)?;
    print_tables(&release.summary());
    outln!("\nwrote {}", args.tarball.display());
    Ok(())
}

fn inspect(args: &InspectArgs) -> Result<(), Box<dyn std::error::Error>> {
    let release = Release::read(&args.tarball)?;
    let summary = release.summary();
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_tables(&summary);
    }
    Ok(())
}

fn print_tables(s: &release::summary::ReleaseSummary) {
    outln!("Name        {}", s.name);
    outln!("Version     {}", s.version);
    let dirty = if s.uncommitted_changes { "+" } else { "" };
    outln!("Commit Hash {}{dirty}", s.commit_hash);
    outln!();
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    let rows: Vec<Vec<String>> = s
        .jobs
        .iter()
        .map(|j| {
            vec![
                format!("{}/{}", j.name, j.version),
                j.sha1.clone(),
                list(&j.packages),
                list(&j.provides),
                list(&j.consumes),
            ]
        })
        .collect();
    table(
        &["Job", "Digest", "Packages", "Provides", "Consumes"],
        &rows,
    );
    outln!("\n{} jobs\n", s.jobs.len());
    let rows: Vec<Vec<String>> = s
        .packages
        .iter()
        .map(|p| {
            vec![
                format!("{}/{}", p.name, p.version),
                p.sha1.clone(),
                list(&p.dependencies),
                p.compiled_for.clone().unwrap_or_else(|| "(source)".into()),
            ]
        })
        .collect();
    table(
        &["Package", "Digest", "Dependencies", "Compiled For"],
        &rows,
    );
    outln!("\n{} packages", s.packages.len());
}

/// Left-aligned columns separated by two spaces.
fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  "));
            }
        }
        outln!("{}", out.trim_end());
    };
    line(headers.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}
