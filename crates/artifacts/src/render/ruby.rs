//! Running `renderer.rb`: batches of render units through one `ruby` process each.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use kubosh_process::{Exchange, ExchangeError, Exchanged};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::job::JobTemplates;
use super::spec::{DnsTables, ReleaseRef, TemplateSpec};
use super::{RenderError, RenderedFile, RenderedJob, TemplateError};

/// The renderer script, shipped inside the binary.
pub const RENDERER_RB: &str = include_str!("renderer.rb");

/// Output larger than this is refused (a runaway template).
const MAX_STDOUT: u64 = 1 << 30;

/// One job of one instance to render.
#[derive(Debug, Clone)]
pub struct RenderUnit {
    /// The release job (shared by every instance that runs it).
    pub job: Arc<JobTemplates>,
    /// Its template spec on this instance, with bound properties.
    pub spec: TemplateSpec,
}

/// How the [`Renderer`] runs Ruby.
#[derive(Debug, Clone)]
pub struct RendererConfig {
    /// The Ruby interpreter (`ruby`, looked up on `PATH`).
    pub ruby: PathBuf,
    /// Where `renderer.rb` is written (one file per script version).
    pub cache_dir: PathBuf,
    /// Ruby processes running at once.
    pub concurrency: usize,
    /// Most units per Ruby process; a render call uses at least `concurrency` processes when
    /// it has enough units.
    pub units_per_batch: usize,
    /// Time limit of one Ruby process.
    pub timeout: Duration,
}

impl Default for RendererConfig {
    fn default() -> Self {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        Self {
            ruby: PathBuf::from("ruby"),
            cache_dir: cache.join("kubosh").join("render"),
            concurrency: std::thread::available_parallelism().map_or(2, |n| n.get()),
            units_per_batch: 1000,
            timeout: Duration::from_secs(300),
        }
    }
}

/// Renders job templates with Ruby's ERB through `renderer.rb`, many units per process.
#[derive(Debug, Clone)]
pub struct Renderer {
    config: RendererConfig,
    script: PathBuf,
}

impl Renderer {
    /// Writes `renderer.rb` to the cache directory (named by its SHA-256, so versions never
    /// clash and an existing copy is reused).
    pub fn new(config: RendererConfig) -> Result<Self, RenderError> {
        let digest = Sha256::digest(RENDERER_RB.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let script = config.cache_dir.join(format!("renderer-{hex}.rb"));
        let setup = |e: std::io::Error| RenderError::Setup {
            path: script.clone(),
            reason: e.to_string(),
        };
        let current = std::fs::read(&script).ok();
        if current.as_deref() != Some(RENDERER_RB.as_bytes()) {
            std::fs::create_dir_all(&config.cache_dir).map_err(setup)?;
            let tmp = tempfile::NamedTempFile::new_in(&config.cache_dir).map_err(setup)?;
            std::fs::write(tmp.path(), RENDERER_RB).map_err(setup)?;
            tmp.persist(&script).map_err(|e| setup(e.error))?;
        }
        Ok(Self { config, script })
    }

    /// The script this renderer runs.
    pub fn script(&self) -> &Path {
        &self.script
    }

    /// Renders every unit; results are in unit order. A unit whose templates fail does not
    /// affect the others; a Ruby process that fails as a whole fails the units it had.
    /// `dns` lets templates call `link(...).address(...)` on links without a fixed address.
    pub async fn render(
        &self,
        units: &[RenderUnit],
        dns: Option<&DnsTables>,
    ) -> Vec<Result<RenderedJob, RenderError>> {
        if units.is_empty() {
            return Vec::new();
        }
        let concurrency = self.config.concurrency.max(1);
        let per_batch = self.config.units_per_batch.max(1);
        let batches = units
            .len()
            .div_ceil(per_batch)
            .max(concurrency.min(units.len()));
        let size = units.len().div_ceil(batches);
        let started = Instant::now();
        // The batches are built before the stream so that no closure is held across an
        // await (which would keep the future from being `Send` for every lifetime).
        let batches: Vec<_> = units
            .chunks(size)
            .map(|chunk| self.run_batch(chunk, dns))
            .collect();
        let results: Vec<Vec<Result<RenderedJob, RenderError>>> = futures::stream::iter(batches)
            .buffered(concurrency)
            .collect()
            .await;
        tracing::debug!(
            units = units.len(),
            processes = results.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "rendered job templates"
        );
        results.into_iter().flatten().collect()
    }

    async fn run_batch(
        &self,
        units: &[RenderUnit],
        dns: Option<&DnsTables>,
    ) -> Vec<Result<RenderedJob, RenderError>> {
        match self.exchange(units, dns).await {
            Ok(results) => results,
            Err(e) => units.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    async fn exchange(
        &self,
        units: &[RenderUnit],
        dns: Option<&DnsTables>,
    ) -> Result<Vec<Result<RenderedJob, RenderError>>, RenderError> {
        let failed = |reason: String| RenderError::Ruby {
            units: units.len(),
            reason,
        };
        let input = batch_input(units, dns);
        let body = serde_json::to_vec(&input).map_err(|e| failed(format!("encoding: {e}")))?;

        let mut command = tokio::process::Command::new(&self.config.ruby);
        command.arg(&self.script);
        let exchange = Exchange {
            max_stdout: MAX_STDOUT,
            timeout: self.config.timeout,
        };
        // Templates may print (to stderr, where the script sends them); what they print
        // may hold property values, so it is counted, never logged.
        let mut stderr_bytes = 0usize;
        let Exchanged {
            stdout,
            status,
            overflowed,
        } = exchange
            .run(command, &body, |line| stderr_bytes += line.len())
            .await
            .map_err(|e| match e {
                ExchangeError::Spawn(e) => {
                    failed(format!("cannot run {}: {e}", self.config.ruby.display()))
                }
                other => failed(other.to_string()),
            })?;
        if stderr_bytes > 0 {
            tracing::debug!(stderr_bytes, "renderer wrote to stderr (not logged)");
        }
        if overflowed {
            return Err(failed(format!("output exceeds {MAX_STDOUT} bytes")));
        }
        let output: BatchOutput = serde_json::from_slice(&stdout).map_err(|e| {
            failed(if stdout.is_empty() {
                format!("no answer ({status})")
            } else {
                format!("answer is not the expected JSON ({e}; {status})")
            })
        })?;
        if let Some(fatal) = output.fatal {
            return Err(failed(fatal));
        }
        if output.results.len() != units.len() {
            return Err(failed(format!(
                "{} results for {} units",
                output.results.len(),
                units.len()
            )));
        }
        Ok(units
            .iter()
            .zip(output.results)
            .map(|(unit, result)| convert(unit, result))
            .collect())
    }
}

impl super::TemplateRenderer for Renderer {
    fn render<'a>(
        &'a self,
        units: &'a [RenderUnit],
    ) -> BoxFuture<'a, Vec<Result<RenderedJob, RenderError>>> {
        Box::pin(Renderer::render(self, units, None))
    }
}

#[derive(Serialize)]
struct BatchInput<'a> {
    jobs: Vec<JobInput<'a>>,
    units: Vec<UnitInput<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dns: Option<&'a DnsTables>,
}

#[derive(Serialize)]
struct JobInput<'a> {
    release: &'a ReleaseRef,
    job: &'a str,
    templates: &'a [super::job::TemplateSource],
    monit: Option<&'a str>,
}

#[derive(Serialize)]
struct UnitInput<'a> {
    job: usize,
    context: &'a TemplateSpec,
}

/// Each job goes once into a batch (templates are compiled once per process).
fn batch_input<'a>(units: &'a [RenderUnit], dns: Option<&'a DnsTables>) -> BatchInput<'a> {
    let mut index: HashMap<*const JobTemplates, usize> = HashMap::new();
    let mut jobs = Vec::new();
    let units = units
        .iter()
        .map(|unit| {
            let job = *index.entry(Arc::as_ptr(&unit.job)).or_insert_with(|| {
                jobs.push(JobInput {
                    release: &unit.job.release,
                    job: &unit.job.name,
                    templates: &unit.job.templates,
                    monit: unit.job.monit.as_deref(),
                });
                jobs.len() - 1
            });
            UnitInput {
                job,
                context: &unit.spec,
            }
        })
        .collect();
    BatchInput { jobs, units, dns }
}

#[derive(Deserialize)]
struct BatchOutput {
    #[serde(default)]
    results: Vec<UnitOutput>,
    #[serde(default)]
    fatal: Option<String>,
}

#[derive(Deserialize)]
struct UnitOutput {
    #[serde(default)]
    monit: Option<String>,
    #[serde(default)]
    files: Vec<RenderedFile>,
    #[serde(default)]
    errors: Vec<ErrorOutput>,
}

#[derive(Deserialize)]
struct ErrorOutput {
    #[serde(default)]
    template: String,
    #[serde(default)]
    line: Option<u64>,
    #[serde(default)]
    message: String,
}

fn convert(unit: &RenderUnit, output: UnitOutput) -> Result<RenderedJob, RenderError> {
    if !output.errors.is_empty() {
        return Err(RenderError::Templates {
            release: unit.job.release.clone(),
            job: unit.job.name.clone(),
            errors: output
                .errors
                .into_iter()
                .map(|e| TemplateError {
                    template: e.template,
                    instance_group: unit.spec.name.clone(),
                    index: unit.spec.index,
                    line: e.line,
                    message: e.message,
                })
                .collect(),
        });
    }
    Ok(RenderedJob {
        name: unit.job.name.clone(),
        release: unit.job.release.clone(),
        monit: output.monit.unwrap_or_default(),
        files: output.files,
    })
}
