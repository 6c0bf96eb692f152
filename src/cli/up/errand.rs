//! The demo's errand: once `hello` converged, `kubectl create -f
//! examples/local/smoke-tests.yaml` (an `ErrandRun` of the errand group `smoke-tests`), its
//! run followed to its end, and what it said kept for the report.

use std::time::{Duration, Instant};

use kube::api::Api;
use kubosh_devenv::ControlPlane;
use kubosh_kube::api::{ErrandPhase, ErrandRun};

use super::Say;
use super::apply::{examples_dir, kubectl};

/// How the demo's errand ended.
pub(super) struct ErrandReport {
    /// The `ErrandRun`'s name.
    pub name: String,
    /// Whether it succeeded.
    pub succeeded: bool,
    /// Its `Ready` condition's message.
    pub message: String,
    /// Each instance's `GROUP/ID` and stdout (stderr when it failed).
    pub outputs: Vec<(String, String)>,
}

/// How often the run is read.
const POLL: Duration = Duration::from_millis(500);

/// Creates the example's `ErrandRun` in `namespace` and waits (at most `limit`) for its end.
pub(super) async fn run_smoke_tests(
    cp: &ControlPlane,
    client: &kube::Client,
    namespace: &str,
    limit: Duration,
    say: Say,
) -> Result<ErrandReport, String> {
    let file = examples_dir().join("smoke-tests.yaml");
    let path = file.display().to_string();
    say.line(&format!("kubectl create -f {path}"));
    let created = kubectl(cp, &["create", "-f", &path, "-o", "name"])?;
    let name = created
        .trim()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    say.line(&format!("  errandrun.kubosh.io/{name} created"));
    let api: Api<ErrandRun> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + limit;
    let mut said = String::new();
    loop {
        let run = (api.get(&name).await).map_err(|e| format!("reading ErrandRun {name}: {e}"))?;
        let status = run.status.unwrap_or_default();
        let reconciling = (status.conditions.iter())
            .find(|c| c.type_ == "Reconciling" && c.status == "True")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        if !reconciling.is_empty() && reconciling != said {
            say.line(&format!("errand: {reconciling}"));
            said = reconciling;
        }
        if status.phase.is_some_and(ErrandPhase::is_final) {
            let succeeded = status.phase == Some(ErrandPhase::Succeeded);
            let message = (status.conditions.iter())
                .find(|c| c.type_ == "Ready")
                .map(|c| c.message.clone())
                .unwrap_or_default();
            say.line(&format!("errand: {message}"));
            let outputs = (status.instances.iter())
                .map(|i| {
                    let text = if i.exit_code == 0 {
                        &i.stdout
                    } else {
                        &i.stderr
                    };
                    (i.instance.clone(), text.clone())
                })
                .collect();
            return Ok(ErrandReport {
                name,
                succeeded,
                message,
                outputs,
            });
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the errand run {name} did not end within {}",
                humantime::format_duration(limit)
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}
