//! `kubosh nats-pki`: the certificates a director's NATS needs (a CA whose key signs every
//! new agent's client certificate, nats-server's certificate, the director's client
//! certificate), written as files, and the nats-server and director configuration that use
//! them, printed. What `kubosh up` and the tests make for themselves, for a user's own
//! nats-server.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::out::out;
use kubosh_devenv::NatsPki;

/// Arguments of `kubosh nats-pki`.
#[derive(Debug, Args)]
pub struct NatsPkiArgs {
    /// The directory to write the certificates and keys into (created). Files already
    /// there are never overwritten: the CA's key signs every agent's certificate.
    #[arg(long, default_value = "pki")]
    pub dir: PathBuf,
    /// An address or DNS name the agents and the director reach nats-server by (repeatable;
    /// its certificate is valid for these).
    #[arg(long = "host", default_value = "127.0.0.1")]
    pub hosts: Vec<String>,
    /// The port nats-server listens on, for the printed configurations.
    #[arg(long, default_value_t = 4222)]
    pub port: u16,
}

/// The per-agent authorization file's first content (no agent yet), for a nats-server whose
/// users the director keeps (`nats.authorization`).
const AUTHORIZATION_SEED: &str = "authorization.json";

/// Runs the command.
pub fn run(args: &NatsPkiArgs) -> ExitCode {
    match write(args) {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kubosh nats-pki: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes the files; the text that tells what was written and how to use it.
fn write(args: &NatsPkiArgs) -> Result<String, String> {
    let taken: Vec<String> = (NatsPki::FILES.iter().chain([&AUTHORIZATION_SEED]))
        .map(|name| args.dir.join(name))
        .filter(|path| path.exists())
        .map(|path| path.display().to_string())
        .collect();
    if !taken.is_empty() {
        return Err(format!(
            "{} already exist{}: kept as they are (a new CA would not sign the agents' certificates the old one did); remove them or choose another --dir",
            taken.join(", "),
            if taken.len() == 1 { "s" } else { "" }
        ));
    }
    let hosts: Vec<&str> = args.hosts.iter().map(String::as_str).collect();
    let pki = NatsPki::generate_for(&hosts).map_err(|e| e.to_string())?;
    pki.write_into(&args.dir).map_err(|e| e.to_string())?;
    let seed = pki.authorization_seed().map_err(|e| e.to_string())?;
    let seed_path = args.dir.join(AUTHORIZATION_SEED);
    std::fs::write(&seed_path, format!("{seed:#}\n"))
        .map_err(|e| format!("{}: {e}", seed_path.display()))?;
    let dir =
        std::fs::canonicalize(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    Ok(instructions(&dir, hosts[0], args.port))
}

/// What was written, nats-server's configuration and the director's `nats` block.
fn instructions(dir: &Path, host: &str, port: u16) -> String {
    let file = |name: &str| dir.join(name).display().to_string();
    let host = match host.parse::<std::net::Ipv6Addr>() {
        Ok(_) => format!("[{host}]"),
        Err(_) => host.to_string(),
    };
    format!(
        r#"Wrote {files} and {seed} into {dir} (the keys readable by their owner only).

nats-server's configuration (mutual TLS: agents and the director present certificates the CA signed):

listen: 0.0.0.0:{port}
tls {{
  cert_file: "{nats_crt}"
  key_file: "{nats_key}"
  ca_file: "{ca_crt}"
  verify: true
  timeout: 5
}}

The director configuration's nats block (director.yml):

nats:
  url: nats://{host}:{port}
  ca_certificate_path: {ca_crt}
  ca_private_key_path: {ca_key}
  director_certificate_path: {director_crt}
  director_private_key_path: {director_key}

To confine each agent to its own subjects (BOSH's production permissions): nats-server with
`verify_and_map: true` instead of `verify: true` and `include "authorization.json"` (a copy
of {seed}, in its configuration's directory, that the director may write), and the
director's `nats.authorization.file` naming that copy (examples/cluster/nats.yaml does it in
a cluster).
"#,
        files = NatsPki::FILES.join(", "),
        seed = AUTHORIZATION_SEED,
        dir = dir.display(),
        nats_crt = file("nats.crt"),
        nats_key = file("nats.key"),
        ca_crt = file("ca.crt"),
        ca_key = file("ca.key"),
        director_crt = file("director.crt"),
        director_key = file("director.key"),
    )
}
