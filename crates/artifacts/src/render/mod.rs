//! Job template rendering: BOSH's ERB templates, rendered by Ruby.
//!
//! Templates are rendered by Ruby's own ERB through `renderer.rb`, a script of ours shipped
//! inside the binary, as the BOSH CLI renders with its embedded script; unlike the CLI (a
//! process per file) and the Director (in-process, one file after another), one `ruby`
//! process renders a whole batch of instances, several batches at once.
//!
//! The flow for one job on one instance:
//! 1. [`properties::property_source`] picks the manifest properties the job sees;
//! 2. [`PropertyBinder::bind`] keeps the declared ones, fills spec defaults and validates
//!    against `properties_schema.json`;
//! 3. the bound properties go into the job's [`TemplateSpec`], which becomes a
//!    [`RenderUnit`];
//! 4. [`Renderer::render`] renders many units at once and answers per unit: the rendered
//!    `monit` and files, or every template error of that job.
//!
//! This module runs processes (`ruby`) but knows nothing of Kubernetes, NATS or CPIs.
//! Property values are never logged.

pub mod archive;
pub mod job;
pub mod properties;
pub mod ruby;
pub mod spec;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub use crate::release::PropertyDefinition;
pub use archive::{
    ProvidedLinkEntry, add_links_json, configuration_hash, rendered_templates_archive,
    template_hash, template_hashes,
};
pub use job::{JobTemplates, NotText, TemplateSource};
pub use properties::{PropertyBinder, property_source};
pub use ruby::{RENDERER_RB, RenderUnit, Renderer, RendererConfig};
pub use spec::{
    DnsGroup, DnsTables, InstanceGroupSpec, LinkInstance, LinkSpec, NetworkSpec, ReleaseRef,
    TemplateSpec,
};

/// Renders template units; results in unit order. The engine's view of rendering
/// (`dyn`-compatible): [`Renderer`] runs Ruby's ERB; tests and benchmarks use a renderer
/// without Ruby (`kubosh_sim::LiteralRenderer`).
pub trait TemplateRenderer: Send + Sync {
    /// Renders every unit.
    fn render<'a>(
        &'a self,
        units: &'a [RenderUnit],
    ) -> BoxFuture<'a, Vec<Result<RenderedJob, RenderError>>>;
}

/// One job rendered for one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RenderedJob {
    /// Job name.
    pub name: String,
    /// The job's release.
    pub release: ReleaseRef,
    /// The rendered `monit` file (empty when the job has none).
    pub monit: String,
    /// Rendered templates, in job-spec order.
    pub files: Vec<RenderedFile>,
}

/// One rendered template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderedFile {
    /// Path under the job's `templates/`.
    pub source_path: String,
    /// Path under the job's directory on the VM.
    pub destination: String,
    /// The rendered text.
    pub content: String,
}

/// A template that failed to render, located as the BOSH CLI words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// Template source path (`config.yml.erb`, or `monit`).
    pub template: String,
    /// Instance group of the instance.
    pub instance_group: String,
    /// Instance index.
    pub index: u64,
    /// Line in the template, when Ruby says.
    pub line: Option<u64>,
    /// Ruby's message (`Can't find property '["a.b"]'`).
    pub message: String,
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Error filling in template '{}' for {}/{} (line ",
            self.template, self.instance_group, self.index
        )?;
        match self.line {
            Some(line) => write!(f, "{line}")?,
            None => f.write_str("(unknown)")?,
        }
        write!(f, ": {})", self.message)
    }
}

/// Why a job could not be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RenderError {
    /// One or more templates of the job failed (all of them are listed).
    #[error("{}", templates_message(release, job, errors))]
    Templates {
        /// The job's release.
        release: ReleaseRef,
        /// Job name.
        job: String,
        /// Each failing template (each names the instance).
        errors: Vec<TemplateError>,
    },
    /// A value on the way to a declared property is not a hash (`a` is a string, `a.b` is
    /// declared).
    #[error(
        "Property '{property}' expects a hash, but received '{received}' (job '{job}' of release '{release}')"
    )]
    PropertyType {
        /// The job's release.
        release: ReleaseRef,
        /// Job name.
        job: String,
        /// The declared property.
        property: String,
        /// Ruby class name of what was found.
        received: String,
    },
    /// The bound properties do not satisfy `properties_schema.json`.
    #[error("Error validating properties for {job} (release '{release}')\n{}", errors.join("\n"))]
    Schema {
        /// The job's release.
        release: ReleaseRef,
        /// Job name.
        job: String,
        /// One line per problem: ``value at `/path`: ...`` (values masked).
        errors: Vec<String>,
    },
    /// The job's `properties_schema.json` is not usable.
    #[error("invalid properties_schema.json of job '{job}' (release '{release}'): {reason}")]
    InvalidSchema {
        /// The job's release.
        release: ReleaseRef,
        /// Job name.
        job: String,
        /// What is wrong.
        reason: String,
    },
    /// `renderer.rb` could not be installed.
    #[error("cannot write the template renderer to {}: {reason}", path.display())]
    Setup {
        /// Script path.
        path: std::path::PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// The Ruby process failed as a whole (not found, timed out, crashed); every unit it had
    /// gets this error.
    #[error("rendering templates with ruby failed ({units} jobs in the batch): {reason}")]
    Ruby {
        /// Units in the failed batch.
        units: usize,
        /// What happened.
        reason: String,
    },
}

fn templates_message(release: &ReleaseRef, job: &str, errors: &[TemplateError]) -> String {
    let mut out =
        format!("Unable to render templates for job '{job}' of release '{release}'. Errors are:");
    for e in errors {
        out.push_str("\n  - ");
        out.push_str(&e.to_string());
    }
    out
}
