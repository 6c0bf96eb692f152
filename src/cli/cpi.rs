//! `kubosh cpi`: the local cloud as a CPI executable (one JSON request on stdin, one JSON
//! response on stdout), `kubosh cpi inventory`, and the local cloud served over HTTP from
//! one place (`kubosh cpi serve`) to callers elsewhere (`kubosh cpi --remote`).

use super::out::outln;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;

use kubosh_cloud::local;
use kubosh_cloud::protocol::Response;
use kubosh_transport::cpi_http::{CpiRoutes, RemoteCpi};

/// Arguments of `kubosh cpi`.
#[derive(Debug, clap::Args)]
pub struct CpiArgs {
    /// The local cloud's configuration (JSON or YAML); the request's context may override
    /// its keys.
    #[arg(long, env = "KUBOSH_CPI_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Call the local cloud that `kubosh cpi serve` serves at this URL (`http://HOST:PORT`)
    /// instead of running it here: its VMs are processes of that server.
    #[arg(long, value_name = "URL")]
    remote: Option<String>,
    /// With `--remote`: the file holding the bearer token, read at each call (a projected
    /// ServiceAccount token, which the kubelet renews).
    #[arg(long, value_name = "PATH", requires = "remote")]
    token_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<CpiCommand>,
}

#[derive(Debug, Subcommand)]
enum CpiCommand {
    /// Print every VM (with whether its agent runs), disk, stemcell and snapshot, as JSON.
    Inventory,
    /// Serve the local cloud over HTTP (`POST /cpi`, `GET /healthz`) to `kubosh cpi
    /// --remote` callers, who present a ServiceAccount token kube-apiserver accepts for
    /// `--audience`. Each call runs `kubosh cpi` here; the VMs are this process's. First
    /// it boots the VMs its state holds whose agents do not run (a restart's).
    Serve(ServeArgs),
}

/// Arguments of `kubosh cpi serve`.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Where to listen (plain HTTP).
    #[arg(long, default_value = "0.0.0.0:8088")]
    listen: SocketAddr,
    /// The audience callers' tokens must be bound to.
    #[arg(long)]
    audience: String,
    /// A user who may call, as kube-apiserver names it
    /// (`system:serviceaccount:NAMESPACE:NAME`); repeat for more.
    #[arg(long = "allow", value_name = "USER", required = true)]
    allow: Vec<String>,
}

/// How long a call through `--remote` may take: the director's own per-call limit kills the
/// caller sooner.
const REMOTE_CALL_LIMIT: Duration = Duration::from_secs(3600);

/// Runs `kubosh cpi`. Answering a call always exits 0: the answer is the JSON, as for any
/// CPI.
pub fn run(args: &CpiArgs) -> ExitCode {
    match &args.command {
        None => answer(args),
        Some(CpiCommand::Inventory) => inventory(args),
        Some(CpiCommand::Serve(serve)) => {
            super::run_async("kubosh cpi serve", serve_until_stopped(args, serve))
        }
    }
}

fn answer(args: &CpiArgs) -> ExitCode {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        return write_response(&cpi_error(format!(
            "cannot read the request from stdin: {e}"
        )));
    }
    match &args.remote {
        None => write_response(&local::serve(&input, args.config.as_deref())),
        Some(url) => match call_remote(url, args.token_file.as_ref(), input) {
            Ok(answer) => write_bytes(&answer),
            Err(e) => write_response(&cpi_error(e)),
        },
    }
}

fn cpi_error(message: String) -> Response {
    Response::err("Bosh::Clouds::CpiError", message, false)
}

fn call_remote(
    url: &str,
    token_file: Option<&PathBuf>,
    request: Vec<u8>,
) -> Result<Vec<u8>, String> {
    let token = match token_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the token {}: {e}", path.display()))?,
        None => String::new(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let remote = RemoteCpi::new(url, token.trim(), REMOTE_CALL_LIMIT).map_err(|e| e.to_string())?;
    runtime
        .block_on(remote.call(request))
        .map_err(|e| e.to_string())
}

fn write_response(response: &Response) -> ExitCode {
    let text = serde_json::to_string(response).unwrap_or_else(|_| {
        r#"{"result":null,"error":{"type":"Bosh::Clouds::CpiError","message":"cannot write the response","ok_to_retry":false},"log":""}"#.to_string()
    });
    write_bytes(text.as_bytes())
}

fn write_bytes(answer: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let newline: &[u8] = if answer.ends_with(b"\n") { b"" } else { b"\n" };
    if stdout
        .write_all(answer)
        .and_then(|()| stdout.write_all(newline))
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

async fn serve_until_stopped(args: &CpiArgs, serve: &ServeArgs) -> Result<(), String> {
    let mut stop = super::signals::StopSignals::listen();
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("cannot reach kube-apiserver to check callers' tokens: {e}"))?;
    let reviewer = kubosh_kube::token_review::TokenReviewer::new(
        client,
        serve.audience.clone(),
        serve.allow.clone(),
    );
    let me = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut program = vec![me.display().to_string(), "cpi".to_string()];
    if let Some(config) = &args.config {
        program.extend(["--config".to_string(), config.display().to_string()]);
    }
    boot_stopped_vms(&program, args.config.as_deref()).await?;
    let listener = tokio::net::TcpListener::bind(serve.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", serve.listen))?;
    // Stemcell images sent before their create_stemcell wait here (the Pod's /tmp).
    let uploads = std::env::temp_dir().join("kubosh-cpi-images");
    let routes = CpiRoutes::new(program, reviewer, uploads.clone())
        .map_err(|e| format!("cannot prepare {}: {e}", uploads.display()))?;
    let server = kubosh_transport::https_server::HttpsServer::spawn_plain(listener, routes, "cpi")
        .map_err(|e| format!("cannot serve on {}: {e}", serve.listen))?;
    stop.requested().await;
    server.shutdown().await;
    Ok(())
}

/// Before serving: the VMs this cloud holds whose agents do not run, booted. A server that
/// starts again on its earlier state (a restarted Pod whose state is on a volume) finds
/// every VM stopped, as a host that restarts finds its VMs, and boots them, so their
/// instances run again before the controller misses them; their disks are as they were.
async fn boot_stopped_vms(program: &[String], config: Option<&Path>) -> Result<(), String> {
    let state_dir = local::Config::load(config, &serde_json::Map::new())
        .map_err(|e| e.to_string())?
        .state_dir;
    let cpi = kubosh_cloud::ExternalCpi::new(
        kubosh_cloud::CpiCommand::new(&program[0])
            .args(program[1..].iter().cloned())
            .timeout(Duration::from_secs(120)),
        "kubosh-cpi-serve",
    );
    let booted = local::boot_stopped_vms(&cpi, &state_dir)
        .await
        .map_err(|e| e.to_string())?;
    if !booted.is_empty() {
        tracing::info!(vms = ?booted, "booted the VMs whose agents did not run");
    }
    Ok(())
}

fn inventory(args: &CpiArgs) -> ExitCode {
    let result = local::Config::load(args.config.as_deref(), &serde_json::Map::new())
        .map_err(|e| e.to_string())
        .and_then(|config| {
            local::inventory(&config.state_dir)
                .map_err(|e| format!("cannot read {}: {e}", config.state_dir.display()))
        });
    match result {
        Ok(inventory) => {
            outln!(
                "{}",
                serde_json::to_string_pretty(&inventory).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kubosh cpi inventory: {e}");
            ExitCode::FAILURE
        }
    }
}
