//! `kubectl bosh logs` and `kubectl bosh ssh`: requests to the controller's ops API
//! (`ops.kubosh.io`, behind kube-apiserver's aggregation layer), so they are made with the
//! operator's credentials and decided by the operator's RBAC: `get` on
//! `boshdeployments/logs`, `create` on `boshdeployments/ssh`.

use std::path::{Path, PathBuf};

use clap::Args;
use futures::AsyncReadExt as _;
use kubosh_base::pki::RsaKey;
use kubosh_bosh::agent::protocol::SshUser;
use kubosh_engine::ssh::SshHost;
use kubosh_kube::ops_api::{GROUP, RESOURCE, VERSION};
use serde_json::json;

use super::out;

/// `kubectl bosh logs DEPLOYMENT [GROUP[/ID]]`.
#[derive(Debug, Args)]
pub(super) struct LogsArgs {
    /// The Deployment.
    deployment: String,
    /// The instances: `GROUP`, `GROUP/INDEX` or `GROUP/ID`; without it, every instance.
    instance: Option<String>,
    /// Only this job's logs (repeatable).
    #[arg(long = "job", value_name = "NAME")]
    jobs: Vec<String>,
    /// Only the log files matching this glob, relative to the log directory (repeatable).
    #[arg(long = "only", value_name = "GLOB", value_delimiter = ',')]
    only: Vec<String>,
    /// The agent's logs instead of the jobs'.
    #[arg(long)]
    agent: bool,
    /// Where to write the tarball.
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
}

/// `kubectl bosh ssh DEPLOYMENT GROUP[/ID]`.
#[derive(Debug, Args)]
pub(super) struct SshArgs {
    /// The Deployment.
    deployment: String,
    /// The instances: `GROUP/INDEX` or `GROUP/ID` (a session), or `GROUP` with `-c`.
    instance: String,
    /// Run this command instead of an interactive session.
    #[arg(short = 'c', long = "command", value_name = "CMD")]
    command: Option<String>,
}

/// The ops API's path of `deployment`'s `subresource` in `namespace`.
fn path(namespace: &str, deployment: &str, subresource: &str) -> String {
    format!("/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{RESOURCE}/{deployment}/{subresource}")
}

/// What the API server said, as kubectl says it.
fn refused(e: kube::Error) -> String {
    match e {
        kube::Error::Api(status) if status.code == 503 || status.code == 404 => format!(
            "{} (is the controller's ops API installed? see kubectl get apiservice v1alpha1.{GROUP})",
            status.message
        ),
        kube::Error::Api(status) => status.message,
        other => other.to_string(),
    }
}

/// Fetches the logs into `--dir`; the line saying where.
pub(super) async fn logs(
    client: kube::Client,
    namespace: &str,
    args: &LogsArgs,
) -> Result<String, String> {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    if let Some(instance) = &args.instance {
        query.append_pair("instance", instance);
    }
    for job in &args.jobs {
        query.append_pair("job", job);
    }
    for glob in &args.only {
        query.append_pair("only", glob);
    }
    if args.agent {
        query.append_pair("agent", "true");
    }
    let uri = format!(
        "{}?{}",
        path(namespace, &args.deployment, "logs"),
        query.finish()
    );
    let request = http::Request::get(uri)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    out::progress(format_args!(
        "Using deployment '{}'\n\nFetching logs...\n",
        args.deployment
    ));
    let mut body = client.request_stream(request).await.map_err(refused)?;
    let time = kubosh_engine::logs::download_stamp();
    let name = super::logs::archive_name(&args.deployment, args.instance.as_deref(), &time);
    let target = args.dir.join(name);
    let partial = args.dir.join(format!(".{time}.partial"));
    let copied = async {
        let mut file = std::fs::File::create(&partial)?;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = body.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            std::io::Write::write_all(&mut file, &buf[..n])?;
        }
        file.sync_all()?;
        std::fs::rename(&partial, &target)
    };
    if let Err(e) = copied.await {
        let _ = std::fs::remove_file(&partial);
        return Err(format!("cannot write {}: {e}", target.display()));
    }
    Ok(format!(
        "\nLogs written to '{}'\n\nSucceeded\n",
        target.display()
    ))
}

/// A session (or `-c`'s command) on each chosen instance, the one-time user removed after.
pub(super) async fn ssh(
    client: kube::Client,
    namespace: &str,
    args: &SshArgs,
) -> Result<Option<String>, String> {
    let (user, key) = one_time_user()?;
    let user = user.as_str().to_string();
    let uri = path(namespace, &args.deployment, "ssh");
    let post = |body: serde_json::Value| {
        http::Request::post(uri.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.to_string().into_bytes())
            .map_err(|e| e.to_string())
    };
    let setup = post(json!({
        "command": "setup", "instance": args.instance, "user": user,
        "publicKey": key.ssh_authorized_key(),
    }))?;
    let answer = client.request_text(setup).await.map_err(refused)?;
    let hosts: kubosh_kube::ops_api::SshHosts =
        serde_json::from_str(&answer).map_err(|e| format!("the ops API answered: {e}"))?;
    let hosts: Vec<SshHost> = (hosts.hosts.into_iter())
        .map(|h| SshHost {
            instance: h.instance,
            ip: h.ip,
            host_public_key: h.host_public_key,
            local_root: h.local_root,
        })
        .collect();
    let ran = sessions(&hosts, &user, &key, args.command.as_deref());
    let cleanup = post(json!({"command": "cleanup", "instance": args.instance, "user": user}))?;
    if let Err(e) = client.request_text(cleanup).await {
        eprintln!(
            "warning: the one-time user {user} was not removed: {}",
            refused(e)
        );
    }
    ran
}

/// A one-time user name (`bosh_` and random hex, as bosh-cli makes them) and its key pair.
pub(super) fn one_time_user() -> Result<(SshUser, RsaKey), String> {
    let name = format!("bosh_{}", kubosh_base::ids::random_hex(7));
    let user = SshUser::new(&name).ok_or_else(|| format!("'{name}' is not a user name"))?;
    let key = RsaKey::generate(2048).map_err(|e| e.to_string())?;
    Ok((user, key))
}

/// Runs the sessions; why one failed, if one did.
pub(super) fn sessions(
    hosts: &[SshHost],
    user: &str,
    key: &RsaKey,
    command: Option<&str>,
) -> Result<Option<String>, String> {
    if command.is_none() && hosts.len() != 1 {
        return Err(format!(
            "Interactive SSH only works for a single host at a time ({} instances chosen): give GROUP/INDEX, or -c",
            hosts.len()
        ));
    }
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let key_file = scratch.path().join("id_rsa");
    let pem = key.private_pkcs1_pem().map_err(|e| e.to_string())?;
    write_private(&key_file, &pem).map_err(|e| e.to_string())?;
    let mut failed = None;
    for host in hosts {
        if command.is_some() && hosts.len() > 1 {
            out::progress(format_args!("{}:\n", host.instance));
        }
        let status = match host.local_root.as_deref().filter(|r| Path::new(r).is_dir()) {
            Some(root) => local_shell(root, command),
            None => remote_shell(host, user, &key_file, scratch.path(), command),
        }
        .map_err(|e| format!("{}: {e}", host.instance))?;
        if !status.success() {
            failed = Some(format!(
                "Running SSH on {} exited with {}",
                host.instance,
                status.code().map_or("a signal".into(), |c| c.to_string())
            ));
        }
    }
    Ok(failed)
}

/// The local cloud: the VM is a directory of this machine, a session is a shell in it.
fn local_shell(root: &str, command: Option<&str>) -> std::io::Result<std::process::ExitStatus> {
    let mut shell = std::process::Command::new("bash");
    if let Some(command) = command {
        shell.args(["-c", command]);
    }
    shell.current_dir(root).env("BOSH_VM_ROOT", root).status()
}

/// `ssh` to the instance with the one-time key, its host key pinned when the agent said it.
fn remote_shell(
    host: &SshHost,
    user: &str,
    key_file: &Path,
    scratch: &Path,
    command: Option<&str>,
) -> std::io::Result<std::process::ExitStatus> {
    let known_hosts = scratch.join("known_hosts");
    let pinned = !host.host_public_key.is_empty();
    if pinned {
        std::fs::write(
            &known_hosts,
            format!("{} {}\n", host.ip, host.host_public_key),
        )?;
    }
    let mut ssh = std::process::Command::new("ssh");
    ssh.arg("-i").arg(key_file);
    ssh.arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()));
    ssh.args([
        "-o",
        if pinned {
            "StrictHostKeyChecking=yes"
        } else {
            "StrictHostKeyChecking=accept-new"
        },
    ]);
    ssh.args(["-o", "IdentitiesOnly=yes"]);
    if command.is_none() {
        ssh.arg("-t");
    }
    ssh.arg(format!("{user}@{}", host.ip));
    if let Some(command) = command {
        ssh.arg(command);
    }
    ssh.status()
}

/// Writes `text` to `path`, readable by this user only (ssh refuses a key others can read).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    std::io::Write::write_all(&mut file, text.as_bytes())
}
