//! The real bosh-agent (cloudfoundry/bosh-agent, dummy platform, built by tools/testbins.sh)
//! as the local cloud's VMs under `kubosh deploy`: each VM's first process is `kubosh vm
//! run`, which gives the agent a private `/var/vcap` and makes its disk bookkeeping real.
//! With `-M dummy` the agent starts no job process, so what the jobs did is read from the
//! lifecycle scripts' traces (hello's `pre-start` makes `/var/vcap/sys/run/hello` and prints
//! the greeting into its log) and from the agent's own files in the VM's root.

use crate::director_world;

use std::path::{Path, PathBuf};

use director_world::{AgentKind, World, hello_deployment};
use kubosh_engine::state::{DeploymentState, InstanceRecord};
use serde_json::{Value, json};

/// `path` as the VM sees it, resolved on the host under the VM's root `root` (the agent's
/// links are absolute `/var/vcap/...` paths, meaningful only inside the VM).
fn in_vm(root: &Path, path: &str) -> PathBuf {
    let mut at = root.to_path_buf();
    let inside = path.strip_prefix("/var/vcap/").unwrap_or(path);
    for part in inside.split('/').filter(|p| !p.is_empty()) {
        at.push(part);
        for _ in 0..8 {
            let Ok(target) = std::fs::read_link(&at) else {
                break;
            };
            at = match target.strip_prefix("/var/vcap") {
                Ok(rest) => root.join(rest),
                Err(_) if target.is_absolute() => target,
                Err(_) => at.parent().unwrap().join(target),
            };
        }
    }
    at
}

fn deploy(w: &World) -> String {
    let (ok, stdout, stderr) = w.output(w.command("deploy"));
    assert!(ok, "deploy failed:\n{stdout}\n{stderr}\n{}", agent_logs(w));
    stdout
}

/// The tail of every VM's agent log, for failure messages.
fn agent_logs(w: &World) -> String {
    let mut out = String::new();
    for vm in std::fs::read_dir(w.cloud().join("vms"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let log = std::fs::read_to_string(vm.path().join("agent.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        out.push_str(&format!("--- {}\n", vm.path().display()));
        for line in tail.into_iter().rev() {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn instances<'a>(state: &'a DeploymentState, group: &str) -> Vec<&'a InstanceRecord> {
    let mut v: Vec<_> = state
        .instances
        .values()
        .filter(|i| i.group == group)
        .collect();
    v.sort_by_key(|i| i.index);
    v
}

fn root_of(w: &World, i: &InstanceRecord) -> PathBuf {
    w.vm_root(&i.vm.as_ref().expect("a VM").cid)
}

/// Everything under the host's `/var/vcap` (nothing a VM does may land there).
fn host_var_vcap() -> Vec<PathBuf> {
    walkdir(Path::new("/var/vcap"))
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_agent_compiles_deploys_and_updates() {
    let before = host_var_vcap();
    let w = World::with_agent(31, AgentKind::Bosh);
    let mut manifest = hello_deployment(w.port, "Hello");
    manifest["instance_groups"][0]["instances"] = json!(1);
    manifest["instance_groups"][0]["persistent_disk"] = json!(64);
    w.write_manifest(&manifest);
    let stdout = deploy(&w);
    assert!(stdout.contains("Compiling packages"), "{stdout}");
    let state = w.state().await;
    let web = instances(&state, "web");
    assert_eq!(web.len(), 1);
    let root = root_of(&w, web[0]);
    assert!(
        in_vm(&root, "/var/vcap/sys/run/hello").is_dir(),
        "pre-start ran"
    );
    let config =
        std::fs::read_to_string(in_vm(&root, "/var/vcap/jobs/hello/config/config.json")).unwrap();
    assert!(config.contains("Hello"), "{config}");
    assert_eq!(
        host_var_vcap(),
        before,
        "a VM wrote into the host's /var/vcap"
    );
    let _ = Value::Null;
}
