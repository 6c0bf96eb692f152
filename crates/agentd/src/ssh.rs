//! `ssh setup|cleanup` (bosh-agent's `ssh` action). bosh-agent creates a user with the
//! caller's public key and answers with the VM's address and host key, so the caller's
//! `ssh` opens a session. kubosh's agent runs where the VM is a directory of its host (the
//! local cloud, which says where in `KUBOSH_VM_ROOT`; or a base other than `/var/vcap`):
//! there is no sshd of the VM to reach, so setup keeps the key under the VM's base
//! (`bosh_ssh/<user>/.ssh/authorized_keys`, the record of the session) and adds
//! `local_root`, the VM's directory on the host, where `kubectl bosh ssh` opens a shell
//! instead; cleanup removes the users `user_regex` matches. Elsewhere (a real machine, which
//! runs bosh-agent) it refuses.

use std::path::Path;

use kubosh_bosh::agent::protocol::SshUser;
use serde_json::{Map, Value, json};

use super::service::ActionError;

/// Where a real VM keeps everything.
const VM_BASE: &str = "/var/vcap";

/// The local cloud's word for where a VM is on its host.
pub const VM_ROOT_ENV: &str = "KUBOSH_VM_ROOT";

/// Answers `ssh <command> <params>` for the VM under `base` (at `host_root` on its host,
/// when it is a directory of its host) whose networks are `networks`.
pub fn ssh(
    base: &Path,
    host_root: Option<&Path>,
    networks: &Map<String, Value>,
    args: &[Value],
) -> Result<Value, ActionError> {
    let outside = (base != Path::new(VM_BASE)).then_some(base);
    let Some(host_root) = host_root.or(outside) else {
        return Err(ActionError::Other(
            "ssh: kubosh's agent opens sessions only on the local cloud (a VM runs bosh-agent)"
                .into(),
        ));
    };
    let command = args.first().and_then(Value::as_str).unwrap_or_default();
    let params = args.get(1).cloned().unwrap_or_default();
    let users = base.join("bosh_ssh");
    match command {
        "setup" => {
            let user = params["user"].as_str().unwrap_or_default();
            let key = params["public_key"].as_str().unwrap_or_default();
            if SshUser::new(user).is_none() || key.is_empty() {
                return Err(ActionError::Other(format!(
                    "ssh setup: a user name ([a-z_][a-z0-9_-]*) and a public key are needed, got user '{user}'"
                )));
            }
            let dir = users.join(user).join(".ssh");
            let written = std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(dir.join("authorized_keys"), format!("{key}\n")));
            written.map_err(|e| ActionError::Other(format!("ssh setup: {e}")))?;
            Ok(json!({
                "command": "setup",
                "status": "success",
                "ip": default_ip(networks),
                "host_public_key": host_public_key(),
                "local_root": host_root.display().to_string(),
            }))
        }
        "cleanup" => {
            let pattern = params["user_regex"].as_str().unwrap_or_default();
            let matches = regex::Regex::new(pattern)
                .map_err(|e| ActionError::Other(format!("ssh cleanup: user_regex: {e}")))?;
            for entry in std::fs::read_dir(&users).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if matches.is_match(&name) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
            Ok(json!({"command": "cleanup", "status": "success"}))
        }
        other => Err(ActionError::Other(format!(
            "ssh: unknown command '{other}' (setup or cleanup)"
        ))),
    }
}

/// The address on the network with the default gateway, else the first that has one.
fn default_ip(networks: &Map<String, Value>) -> String {
    let ip = |n: &Value| n["ip"].as_str().map(str::to_string);
    let gateway = networks
        .values()
        .find(|n| (n["default"].as_array()).is_some_and(|d| d.iter().any(|v| v == "gateway")));
    (gateway.and_then(ip))
        .or_else(|| networks.values().find_map(ip))
        .unwrap_or_default()
}

/// The host's SSH host key, as bosh-agent reads it (empty when there is none).
fn host_public_key() -> String {
    std::fs::read_to_string("/etc/ssh/ssh_host_rsa_key.pub")
        .map(|k| k.trim_end().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_keeps_the_key_and_cleanup_removes_the_users_it_matches() {
        let base = tempfile::tempdir().unwrap();
        let networks: Map<String, Value> = serde_json::from_value(json!({
            "other": {"ip": "10.0.1.5"},
            "default": {"ip": "10.0.0.5", "default": ["dns", "gateway"]},
        }))
        .unwrap();
        let setup = |user: &str| {
            ssh(
                base.path(),
                None,
                &networks,
                &[
                    json!("setup"),
                    json!({"user": user, "public_key": "ssh-rsa AAAA x"}),
                ],
            )
        };
        let answer = setup("bosh_abc").unwrap();
        assert_eq!(answer["status"], "success");
        assert_eq!(answer["ip"], "10.0.0.5");
        assert_eq!(answer["local_root"], base.path().display().to_string());
        let keys = base.path().join("bosh_ssh/bosh_abc/.ssh/authorized_keys");
        assert_eq!(std::fs::read_to_string(&keys).unwrap(), "ssh-rsa AAAA x\n");
        setup("bosh_other").unwrap();
        assert!(setup("../escape").is_err(), "no path in a user name");
        let cleanup = [json!("cleanup"), json!({"user_regex": "^bosh_abc"})];
        ssh(base.path(), None, &networks, &cleanup).unwrap();
        assert!(!keys.exists());
        assert!(base.path().join("bosh_ssh/bosh_other").exists());
        let real = ssh(Path::new(VM_BASE), None, &networks, &cleanup).unwrap_err();
        assert!(real.to_string().contains("local cloud"), "{real}");
        // Isolated, the VM sees /var/vcap; the local cloud says where it is on the host.
        let host = Path::new("/srv/cloud/vms/vm-1/root");
        let isolated = [json!("setup"), json!({"user": "bosh_x", "public_key": "k"})];
        let inside = tempfile::tempdir().unwrap();
        let answer = ssh(inside.path(), Some(host), &networks, &isolated).unwrap();
        assert_eq!(answer["local_root"], "/srv/cloud/vms/vm-1/root");
    }
}
