//! `kubosh create-env` and `kubosh delete-env`: the bosh-init single-VM flow
//! (`kubosh_createenv`), with the manifest read as `bosh create-env` reads it and
//! the run shown stage by stage as bosh-cli shows it (spinners on a terminal), or as JSON
//! lines with `--json`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use super::input::{DocumentArgs, read_yaml};
use kubosh_base::secret::{collect_strings, scrub};
use kubosh_createenv::{EnvError, EnvEvent, EnvEventSink, EnvInput, StepOutcome, Ui};

/// Arguments of `kubosh create-env` and `kubosh delete-env`.
#[derive(Debug, Clone, clap::Args)]
pub struct EnvArgs {
    /// The create-env manifest (bosh-init shape: resource_pools, disk_pools, networks, one
    /// instance group, cloud_provider).
    manifest: PathBuf,
    /// The deployment state file (default: `<manifest dir>/<manifest name>-state.json`,
    /// bosh-cli's).
    #[arg(long, value_name = "PATH")]
    state: Option<PathBuf>,
    /// Load variables from, and save generated ones to, this YAML file (bosh-cli's
    /// `--vars-store`).
    #[arg(long = "vars-store", value_name = "PATH")]
    vars_store: Option<PathBuf>,
    #[command(flatten)]
    document: DocumentArgs,
    /// Recreate the VM even when nothing changed.
    #[arg(long)]
    recreate: bool,
    /// Recreate the persistent disk even when nothing changed (its data is migrated).
    #[arg(long = "recreate-persistent-disks")]
    recreate_persistent_disks: bool,
    /// Do not drain the jobs before the old VM is stopped.
    #[arg(long = "skip-drain")]
    skip_drain: bool,
    /// Print one JSON object per event instead of text (for scripts).
    #[arg(long)]
    json: bool,
    /// kubosh's home: CPI installations, the compiled-package cache, locks.
    #[arg(long, env = "KUBOSH_HOME", value_name = "DIR")]
    home: Option<PathBuf>,
}

/// Which command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvCommand {
    /// `create-env`.
    Create,
    /// `delete-env`.
    Delete,
}

/// bosh-cli's default state file: `<dir>/<base without its last extension>-state.json`.
pub fn default_state_path(manifest: &Path) -> PathBuf {
    let stem = manifest
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    manifest.with_file_name(format!("{stem}-state.json"))
}

fn home(args: &EnvArgs) -> Result<PathBuf, String> {
    if let Some(h) = &args.home {
        return Ok(h.clone());
    }
    std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".kubosh"))
        .ok_or_else(|| "HOME is not set: give --home".to_string())
}

/// Reads the manifest as bosh-cli does (ops files, then variables; a missing variable is an
/// error); answers it and the strings never to show (generated and stored variables).
fn read_manifest(args: &EnvArgs) -> Result<(Value, Vec<String>), String> {
    let mut document = args.document.clone();
    document.var_errs = true;
    let manifest = match &args.vars_store {
        Some(store) => document.load_with_vars_store(&args.manifest, store)?,
        None => document.load(&args.manifest)?,
    };
    let mut secrets = Vec::new();
    if let Some(store) = &args.vars_store
        && let Ok(stored) = read_yaml(store)
    {
        collect_strings(&stored, &mut secrets);
    }
    // The mbus password, wherever the URL came from.
    if let Some(url) = manifest
        .pointer("/cloud_provider/mbus")
        .and_then(Value::as_str)
        && let Some((userinfo, _)) = url
            .split_once("://")
            .and_then(|(_, rest)| rest.rsplit_once('@'))
        && let Some((_, password)) = userinfo.split_once(':')
        && !password.is_empty()
    {
        secrets.push(password.to_string());
    }
    Ok((manifest, secrets))
}

/// Runs `kubosh create-env` or `kubosh delete-env`.
pub fn run(command: EnvCommand, args: &EnvArgs) -> ExitCode {
    let name = match command {
        EnvCommand::Create => "create-env",
        EnvCommand::Delete => "delete-env",
    };
    let printer = Arc::new(Printer::new(args.json));
    let prepared = home(args).and_then(|home| {
        let (manifest, secrets) = read_manifest(args)?;
        Ok((home, manifest, secrets))
    });
    let (home, manifest, secrets) = match prepared {
        Ok(p) => p,
        Err(e) => {
            printer.failed(
                &format!("Parsing deployment manifest: {e}"),
                "Fix the manifest, ops files or variables and run the command again.",
                &[],
            );
            return ExitCode::FAILURE;
        }
    };
    printer.set_secrets(secrets.clone());
    let input = EnvInput {
        state_path: absolute(
            &args
                .state
                .clone()
                .unwrap_or_else(|| default_state_path(&args.manifest)),
        ),
        manifest_path: absolute(&args.manifest),
        manifest,
        home,
        recreate: args.recreate,
        recreate_persistent_disks: args.recreate_persistent_disks,
        skip_drain: args.skip_drain,
    };
    let ui = Ui::new(printer.clone());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kubosh {name}: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: Result<(), EnvError> = runtime.block_on(async {
        match command {
            EnvCommand::Create => kubosh_createenv::create_env(&input, &ui).await.map(|_| ()),
            EnvCommand::Delete => kubosh_createenv::delete_env(&input, &ui).await.map(|_| ()),
        }
    });
    match result {
        Ok(()) => {
            printer.succeeded();
            ExitCode::SUCCESS
        }
        Err(e) => {
            printer.failed(&e.to_string(), e.hint(), &secrets);
            ExitCode::FAILURE
        }
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Prints events as bosh-cli does (or as JSON lines), every line scrubbed of secrets.
struct Printer {
    json: bool,
    tty: bool,
    inner: Mutex<PrinterState>,
}

#[derive(Default)]
struct PrinterState {
    secrets: Vec<String>,
    in_stage: bool,
    after_stage: bool,
    spinner: Option<ProgressBar>,
}

impl Printer {
    fn new(json: bool) -> Printer {
        Printer {
            json,
            tty: std::io::stdout().is_terminal(),
            inner: Mutex::new(PrinterState::default()),
        }
    }

    fn set_secrets(&self, secrets: Vec<String>) {
        self.state().secrets = secrets;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PrinterState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn out(&self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
    }

    fn succeeded(&self) {
        if self.json {
            self.out(&format!("{}\n", json!({"event": "succeeded"})));
        } else {
            self.out("\nSucceeded\n");
        }
    }

    fn failed(&self, error: &str, hint: &str, secrets: &[String]) {
        let error = scrub(error, secrets);
        if self.json {
            self.out(&format!(
                "{}\n",
                json!({"event": "failed", "error": error, "hint": hint})
            ));
            return;
        }
        if let Some(spinner) = self.state().spinner.take() {
            spinner.finish_and_clear();
        }
        eprintln!("\n{error}\n\n{hint}\n\nExit code 1");
    }
}

/// `HH:MM:SS`, as bosh-cli prints durations.
fn clock(seconds: u64) -> String {
    kubosh_bosh::events::duration_text(seconds as i64)
}

impl EnvEventSink for Printer {
    fn emit(&self, event: EnvEvent) {
        let mut st = self.state();
        if self.json {
            let text = scrub(
                &serde_json::to_string(&event).unwrap_or_default(),
                &st.secrets,
            );
            drop(st);
            self.out(&format!("{text}\n"));
            return;
        }
        let indent = if st.in_stage { "  " } else { "" };
        let text = match event {
            EnvEvent::Line { text } => {
                st.after_stage = false;
                format!("{text}\n")
            }
            EnvEvent::Warning { text } => {
                st.after_stage = false;
                format!("{indent}Warning: {text}\n")
            }
            EnvEvent::StageStarted { stage } => {
                st.in_stage = true;
                st.after_stage = false;
                format!("\nStarted {stage}\n")
            }
            EnvEvent::StageEnded {
                stage,
                failed,
                seconds,
            } => {
                st.in_stage = false;
                st.after_stage = true;
                let verb = if failed { "Failed" } else { "Finished" };
                format!("{verb} {stage} ({})\n", clock(seconds))
            }
            EnvEvent::StepStarted { step } => {
                let lead = if st.after_stage && !st.in_stage {
                    "\n"
                } else {
                    ""
                };
                st.after_stage = false;
                let begin = format!("{indent}{step}...");
                if self.tty {
                    self.out(lead);
                    let spinner = ProgressBar::new_spinner();
                    spinner.set_style(
                        ProgressStyle::with_template("{msg} {spinner} {elapsed}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    spinner.set_message(scrub(&begin, &st.secrets));
                    spinner.enable_steady_tick(Duration::from_millis(120));
                    st.spinner = Some(spinner);
                    String::new()
                } else {
                    format!("{lead}{begin}")
                }
            }
            EnvEvent::StepEnded {
                step,
                outcome,
                seconds,
            } => {
                let end = match outcome {
                    StepOutcome::Finished => format!(" Finished ({})", clock(seconds)),
                    StepOutcome::Failed(_) => format!(" Failed ({})", clock(seconds)),
                    StepOutcome::Skipped(reason) => {
                        format!(" Skipped [{reason}] ({})", clock(seconds))
                    }
                };
                match st.spinner.take() {
                    Some(spinner) => {
                        spinner.finish_and_clear();
                        format!("{indent}{step}...{end}\n")
                    }
                    None => format!("{end}\n"),
                }
            }
        };
        let text = scrub(&text, &st.secrets);
        drop(st);
        self.out(&text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_state_file_is_bosh_cli_s() {
        assert_eq!(
            default_state_path(Path::new("/w/bosh.yml")),
            Path::new("/w/bosh-state.json")
        );
        assert_eq!(
            default_state_path(Path::new("a.b.yml")),
            Path::new("a.b-state.json")
        );
        assert_eq!(
            default_state_path(Path::new("dir/manifest")),
            Path::new("dir/manifest-state.json")
        );
    }
}
