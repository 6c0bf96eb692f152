//! `kubosh agent`: kubosh's BOSH agent. Takes bosh-agent's flags (`-b` base directory, `-C`
//! agent.json; `-P`/`-M` accepted for compatibility) so a CPI can start it exactly as it
//! starts bosh-agent.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use kubosh_agentd::layout::Layout;
use kubosh_agentd::mbus::https::{self as mbus_https, HttpsMbusConfig};
use kubosh_agentd::mbus::nats::{self as mbus_nats, NatsMbusOptions};
use kubosh_agentd::service::{Agent, AgentOptions, Notice};
use kubosh_agentd::settings;

/// Arguments of `kubosh agent`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The VM's base directory (bosh-agent's `-b`).
    #[arg(short = 'b', long = "base-dir", default_value = "/var/vcap")]
    base_dir: PathBuf,
    /// The agent configuration (`agent.json`) naming the settings file (bosh-agent's `-C`).
    #[arg(short = 'C', long = "config", conflicts_with = "settings")]
    config: Option<PathBuf>,
    /// The settings file itself, instead of an agent.json.
    #[arg(long)]
    settings: Option<PathBuf>,
    /// Platform (bosh-agent's `-P`); accepted and ignored.
    #[arg(short = 'P', long = "platform")]
    platform: Option<String>,
    /// Job supervisor (bosh-agent's `-M`); accepted and ignored: jobs always run under
    /// kubosh's monit-compatible supervisor.
    #[arg(short = 'M', long = "job-supervisor")]
    job_supervisor: Option<String>,
    /// Seconds between heartbeats.
    #[arg(long, default_value_t = 30)]
    heartbeat_interval: u64,
    /// Run in a private mount namespace with this directory bind-mounted on the base
    /// directory, so jobs find their files at `/var/vcap/...` (Linux, root). The local cloud
    /// uses it to run real releases: `--bind-base {root} -b /var/vcap`.
    #[arg(long, value_name = "DIR")]
    bind_base: Option<PathBuf>,
}

/// Runs the agent until SIGTERM or SIGINT, then stops the job processes and exits.
pub fn run(args: &AgentArgs) -> ExitCode {
    if let Some(dir) = &args.bind_base
        && let Err(e) = kubosh_agentd::isolate::bind_base(dir, &args.base_dir)
    {
        eprintln!(
            "kubosh agent: cannot mount {} on {}: {e}",
            dir.display(),
            args.base_dir.display()
        );
        return ExitCode::FAILURE;
    }
    super::run_async("kubosh agent", serve(args))
}

async fn serve(args: &AgentArgs) -> Result<(), Box<dyn std::error::Error>> {
    let settings = match (&args.settings, &args.config) {
        (Some(path), _) => settings::read(path)?,
        (None, Some(config)) => settings::from_agent_config(config)?,
        (None, None) => return Err("give -C <agent.json> or --settings <file>".into()),
    };
    if let Some(m) = &args.job_supervisor {
        tracing::info!(supervisor = %m, "-M is ignored: jobs run under kubosh's supervisor");
    }
    let _ = &args.platform;
    let layout = Layout::new(&args.base_dir);
    let agent = Agent::new(AgentOptions::new(layout.clone(), settings)).await?;
    agent.resume().await?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        let _ = stop_tx.send(true);
    });
    let heartbeat = Duration::from_secs(args.heartbeat_interval.max(1));
    let result = async {
        // A settings change of the message bus ends one round; serve again with the new
        // settings (bosh-agent exits and is restarted by its service manager).
        while !*stop_rx.borrow() {
            let settings = agent.settings();
            let https_url = settings
                .mbus_urls()
                .into_iter()
                .find(|u| u.starts_with("https://"));
            if let Some(url) = https_url {
                // create-env: the agent is the server, with its mbus certificate.
                let cert = &settings.env.bosh.mbus.cert;
                let config = HttpsMbusConfig::from_url(
                    &url,
                    &cert.certificate,
                    &cert.private_key,
                    layout.blobs_dir(),
                )?;
                let server = mbus_https::serve(config, Arc::new(agent.clone())).await?;
                tracing::info!(addr = %server.local_addr(), "serving the HTTPS mbus");
                let mut notices = agent.notices();
                let stop = stopped(stop_rx.clone());
                tokio::pin!(stop);
                loop {
                    tokio::select! {
                        () = &mut stop => break,
                        n = notices.recv() => if matches!(n, Ok(Notice::Restart)) { break },
                    }
                }
                server.shutdown().await;
            } else {
                let mut options = NatsMbusOptions::from_agent(&agent)?;
                options.heartbeat_interval = heartbeat;
                mbus_nats::serve(agent.clone(), options, stopped(stop_rx.clone())).await?;
            }
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    }
    .await;
    agent.shutdown().await;
    result
}

async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
