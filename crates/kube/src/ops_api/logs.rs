//! `boshdeployments/D/logs`: `bosh logs` through the Kubernetes API. The chosen instances'
//! agents pack their logs (`fetch_logs`, through the blobstore), and the answer is one
//! instance's tarball or the Director's bundle of them (`kubosh_engine::logs::write_archive`),
//! streamed back as `application/gzip`. Read only: no lock, no record written.

use std::sync::Arc;

use http::{Response, StatusCode};
use kubosh_engine::logs::{LogsRequest, write_archive};
use kubosh_transport::https_server::{self, Body};

use super::{Failure, Target, deployment_instances, query_pairs, status};
use crate::controller::deployment::DeploymentContext;

/// Query parameters: `instance` (`GROUP`, `GROUP/INDEX`, `GROUP/ID`), `job` and `only`
/// (repeatable), `agent=true`.
struct Asked {
    instance: Option<String>,
    request: LogsRequest,
}

impl Asked {
    fn of(query: &str) -> Asked {
        let pairs = query_pairs(query);
        let all = |key: &str| -> Vec<String> {
            (pairs.iter())
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .collect()
        };
        let agent = all("agent").iter().any(|v| v == "true");
        let jobs = all("job").into_iter().map(|job| format!("{job}/**"));
        Asked {
            instance: all("instance").into_iter().next().filter(|s| !s.is_empty()),
            request: LogsRequest {
                log_type: if agent { "agent" } else { "job" }.into(),
                filters: jobs.chain(all("only")).collect(),
            },
        }
    }
}

/// Answers a logs request for `target` (authorised already).
pub(super) async fn serve(
    ctx: &Arc<DeploymentContext>,
    target: &Target,
    query: &str,
) -> Response<Body> {
    let asked = Asked::of(query);
    match fetch(ctx, target, &asked).await {
        Ok(response) => response,
        Err((code, reason, message)) => status(code, reason, &message),
    }
}

async fn fetch(
    ctx: &Arc<DeploymentContext>,
    target: &Target,
    asked: &Asked,
) -> Result<Response<Body>, Failure> {
    let unavailable = |e: String| (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", e);
    let (engine, chosen) = deployment_instances(ctx, target, asked.instance.as_deref()).await?;
    let scratch_dir = ctx.work_dir.join("logs");
    let scratch = std::fs::create_dir_all(&scratch_dir)
        .and_then(|()| tempfile::tempdir_in(&scratch_dir))
        .map_err(|e| {
            unavailable(format!(
                "no scratch space in {}: {e}",
                scratch_dir.display()
            ))
        })?;
    let fetched = (engine
        .fetch_logs(chosen, &asked.request, scratch.path())
        .await)
        .map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                e.to_string(),
            )
        })?;
    let path = scratch.path().join("logs.tgz");
    let time = kubosh_engine::logs::download_stamp();
    write_archive(&fetched, &time, &path)
        .map_err(|e| unavailable(format!("cannot bundle the logs: {e}")))?;
    let file = (tokio::fs::File::open(&path).await).map_err(|e| unavailable(e.to_string()))?;
    let len = (file.metadata().await)
        .map_err(|e| unavailable(e.to_string()))?
        .len();
    // Open, the file outlives its directory's removal.
    drop(scratch);
    let mut response = https_server::file_response(file, len);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/gzip"),
    );
    Ok(response)
}
