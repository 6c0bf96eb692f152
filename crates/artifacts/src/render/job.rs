//! What rendering needs of a release job: its templates, its `monit` file, its declared
//! properties and its optional `properties_schema.json`. Filled from the release model.

use indexmap::IndexMap;

use crate::release::PropertyDefinition;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::spec::ReleaseRef;

/// A release job, as far as rendering is concerned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobTemplates {
    /// Job name within its release.
    pub name: String,
    /// The job's release.
    pub release: ReleaseRef,
    /// The `monit` file's text (an ERB template too); none when the job has none.
    pub monit: Option<String>,
    /// Templates in job-spec order.
    pub templates: Vec<TemplateSource>,
    /// Properties declared in the job spec, in spec order.
    pub properties: IndexMap<String, PropertyDefinition>,
    /// `properties_schema.json`, when the job has one.
    pub properties_schema: Option<Value>,
}

/// One entry of the job spec's `templates:` with its text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateSource {
    /// Path under the job's `templates/` directory (`config.yml.erb`).
    pub source_path: String,
    /// Path under the job's directory on the VM (`config/config.yml`).
    pub destination: String,
    /// The ERB text.
    pub text: String,
}

/// A release job template that is not UTF-8 text (ERB needs text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("template {template:?} of job {job:?} is not UTF-8 text")]
pub struct NotText {
    /// The job.
    pub job: String,
    /// The template's source path.
    pub template: String,
}

impl JobTemplates {
    /// What rendering needs of a job of a release: templates in job-spec order with their
    /// text, the `monit` file, declared properties and `properties_schema.json`.
    pub fn from_release_job(
        job: &crate::release::Job,
        release: ReleaseRef,
    ) -> Result<JobTemplates, NotText> {
        let mut templates = Vec::new();
        for (source, destination) in &job.spec.templates {
            let bytes = job
                .templates
                .get(source)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let text = String::from_utf8(bytes.to_vec()).map_err(|_| NotText {
                job: job.name.clone(),
                template: source.clone(),
            })?;
            templates.push(TemplateSource {
                source_path: source.clone(),
                destination: destination.clone(),
                text,
            });
        }
        let properties = job.spec.properties.clone();
        Ok(JobTemplates {
            name: job.name.clone(),
            release,
            monit: job.monit.clone(),
            templates,
            properties,
            properties_schema: job.properties_schema.clone(),
        })
    }
}
