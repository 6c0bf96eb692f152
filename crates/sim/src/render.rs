//! A template renderer without Ruby, for the engine's tests on the simulated cloud and the
//! benchmarks.

use futures::future::BoxFuture;

use kubosh_artifacts::render::{
    RenderError, RenderUnit, RenderedFile, RenderedJob, TemplateRenderer,
};

/// A renderer without Ruby for the simulated cloud and benchmarks: each template's text
/// followed by the instance's bound properties and identity, so the configuration hash
/// changes exactly when a property (or the instance) does.
#[derive(Debug, Default, Clone, Copy)]
pub struct LiteralRenderer;

impl TemplateRenderer for LiteralRenderer {
    fn render<'a>(
        &'a self,
        units: &'a [RenderUnit],
    ) -> BoxFuture<'a, Vec<Result<RenderedJob, RenderError>>> {
        let out = units
            .iter()
            .map(|u| {
                let context = serde_json::json!({
                    "properties": u.spec.properties,
                    "index": u.spec.index,
                    "bootstrap": u.spec.bootstrap,
                    "networks": u.spec.networks,
                })
                .to_string();
                Ok(RenderedJob {
                    name: u.job.name.clone(),
                    release: u.job.release.clone(),
                    monit: u.job.monit.clone().unwrap_or_default(),
                    files: u
                        .job
                        .templates
                        .iter()
                        .map(|t| RenderedFile {
                            source_path: t.source_path.clone(),
                            destination: t.destination.clone(),
                            content: format!("{}\n{context}\n", t.text),
                        })
                        .collect(),
                })
            })
            .collect();
        Box::pin(async move { out })
    }
}
