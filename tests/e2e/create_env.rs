//! `kubosh create-env` and `kubosh delete-env` on the local cloud, through the `kubosh`
//! binary: the example manifest (`examples/create-env/hello.yml`) with the example CPI
//! release (`examples/releases/kubosh-cpi`, whose `bin/cpi` runs `kubosh cpi`), the hello
//! release, a stemcell, agents serving the HTTPS mbus in their own mount namespaces. The
//! real `bosh` CLI deploys on the state kubosh wrote and kubosh on bosh's; `create-env` is
//! killed at random points and converges.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use kubosh_cloud::local::{self, read_calls};
use kubosh_createenv::model::EnvState;
use serde_json::Value;

use crate::cpi_local::run_cpi;
use crate::crash_safety::{run_and_kill, runs_from_env, seeded_rng};
use crate::director_world::{self, KUBOSH, StopAgents, free_port, http_get, text};

/// One create-env environment: its directory (manifest, vars, tarballs, state), the local
/// cloud's directory, kubosh's home, and the addresses it uses.
pub struct EnvWorld {
    _stop_agents: StopAgents,
    pub dir: tempfile::TempDir,
    pub ip: String,
    pub port: u16,
}

impl EnvWorld {
    /// An environment on loopback address `127.0.<net>.10`.
    pub fn new(net: u8) -> EnvWorld {
        let dir = tempfile::tempdir().unwrap();
        kubosh_devenv::write_create_env_artifacts(dir.path()).expect("the example tarballs");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(
            root.join("examples/create-env/hello.yml"),
            dir.path().join("env.yml"),
        )
        .unwrap();
        let w = EnvWorld {
            _stop_agents: StopAgents(dir.path().join("cloud")),
            ip: format!("127.0.{net}.10"),
            port: free_port(),
            dir,
        };
        w.write_vars("Hello", 64);
        w
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The variables of the example: addresses, ports, tarballs, the cloud's directory.
    pub fn write_vars(&self, greeting: &str, disk_size: u64) {
        let net = self.ip.rsplit_once('.').unwrap().0;
        let vars = serde_json::json!({
            "internal_ip": self.ip,
            "internal_cidr": format!("{net}.0/24"),
            "internal_gw": format!("{net}.1"),
            "mbus_port": free_port_for(&self.path("mbus-port")),
            "hello_port": self.port,
            "greeting": greeting,
            "disk_size": disk_size,
            "kubosh": KUBOSH,
            "hello_release": self.path("hello.tgz"),
            "cpi_release": self.path("cpi.tgz"),
            "stemcell": self.path("stemcell.tgz"),
            "cloud_dir": self.cloud(),
        });
        std::fs::write(self.path("vars.yml"), vars.to_string()).unwrap();
    }

    pub fn cloud(&self) -> PathBuf {
        self.path("cloud")
    }

    pub fn home(&self) -> PathBuf {
        self.path("home")
    }

    pub fn state_path(&self) -> PathBuf {
        self.path("env-state.json")
    }

    /// `kubosh <command> env.yml -l vars.yml --vars-store creds.yml` with HOME in the
    /// world's directory.
    pub fn command(&self, command: &str) -> Command {
        let mut c = Command::new(KUBOSH);
        c.current_dir(self.dir.path())
            .env("HOME", self.path("home-dir"))
            .env("KUBOSH_HOME", self.home())
            .args([
                command,
                "env.yml",
                "-l",
                "vars.yml",
                "--vars-store",
                "creds.yml",
            ]);
        c
    }

    /// The real `bosh <command> env.yml -l vars.yml --vars-store creds.yml --tty` (HOME in
    /// the world's directory); it must succeed. Answers stdout.
    pub fn bosh(&self, bosh: &Path, command: &str) -> String {
        let out = Command::new(bosh)
            .current_dir(self.dir.path())
            .env("HOME", self.path("home-dir"))
            .args([
                command,
                "env.yml",
                "-l",
                "vars.yml",
                "--vars-store",
                "creds.yml",
                "--tty",
            ])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "bosh {command} failed:\n{stdout}\n{stderr}"
        );
        stdout
    }

    /// Runs a command: success, stdout, stderr; no generated secret appears in either.
    pub fn output(&self, mut command: Command) -> (bool, String, String) {
        let out: Output = command.output().expect("kubosh runs");
        let (stdout, stderr) = text(&out);
        let creds = std::fs::read_to_string(self.path("creds.yml")).unwrap_or_default();
        let creds: Value = kubosh_base::yaml::parse_value(&creds, "creds").unwrap_or(Value::Null);
        let mut secrets = Vec::new();
        kubosh_base::secret::collect_strings(&creds, &mut secrets);
        for s in secrets
            .iter()
            .filter(|s| s.len() > 12 && !s.starts_with("-----"))
        {
            assert!(!stdout.contains(s.as_str()), "a secret leaked on stdout");
            assert!(!stderr.contains(s.as_str()), "a secret leaked on stderr");
        }
        (out.status.success(), stdout, stderr)
    }

    /// Runs `create-env`; it must succeed. Answers stdout.
    pub fn create_env(&self) -> String {
        let (ok, stdout, stderr) = self.output(self.command("create-env"));
        assert!(
            ok,
            "create-env failed:\n{stdout}\n{stderr}\njob logs:\n{}",
            director_world::job_log_tails(&self.cloud())
        );
        stdout
    }

    pub fn state(&self) -> EnvState {
        EnvState::from_bytes(&std::fs::read(self.state_path()).unwrap()).unwrap()
    }

    pub fn calls(&self) -> usize {
        read_calls(&self.cloud()).map(|c| c.len()).unwrap_or(0)
    }

    /// The host path of the VM's persistent disk mount (`/var/vcap/store`).
    pub fn store(&self) -> PathBuf {
        self.cloud()
            .join("vms")
            .join(&self.state().current_vm_cid)
            .join("root/store")
    }

    pub fn greeting(&self) -> String {
        http_get(&self.ip, self.port).unwrap_or_default()
    }

    /// The cloud holds exactly what the state file records: the VM, the disks, the
    /// stemcells; and nothing is pending.
    pub fn check_inventory_matches_state(&self, context: &str) {
        let state = self.state();
        let inventory = local::inventory(&self.cloud()).unwrap();
        let vms: BTreeSet<String> = inventory.vms.iter().map(|v| v.cid.clone()).collect();
        let recorded: BTreeSet<String> = [state.current_vm_cid.clone()]
            .into_iter()
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(vms, recorded, "{context}: VMs");
        let disks: BTreeSet<String> = inventory.disks.iter().map(|d| d.cid.clone()).collect();
        assert_eq!(
            disks,
            state.disk_cids().into_iter().collect(),
            "{context}: disks"
        );
        let stemcells: BTreeSet<String> =
            inventory.stemcells.iter().map(|s| s.cid.clone()).collect();
        let recorded: BTreeSet<String> = state
            .stemcells
            .iter()
            .flatten()
            .map(|s| s.cid.clone())
            .collect();
        assert_eq!(stemcells, recorded, "{context}: stemcells");
        assert!(
            !self.path("env-state.json.kubosh-intents").exists(),
            "{context}: pending intents"
        );
    }
}

/// A free port, the same for the whole world (kept in a file), so the mbus URL, the CPI's
/// configuration and the certificate stay the same across runs.
fn free_port_for(file: &Path) -> u16 {
    if let Some(port) = std::fs::read_to_string(file)
        .ok()
        .and_then(|t| t.trim().parse().ok())
    {
        return port;
    }
    let port = free_port();
    std::fs::write(file, port.to_string()).unwrap();
    port
}

/// The whole life of an environment: created (the job answers), created again (Skipping
/// deploy, no CPI call), a property change (new VM, same disk, its data kept), a disk size
/// change (data migrated to a new disk, the old one deleted), `--recreate`,
/// `--recreate-persistent-disks`, `--json`, then deleted
/// (nothing left in the cloud, no state file, no installation).
#[test]
fn create_env_deploys_skips_updates_migrates_and_deletes() {
    let w = EnvWorld::new(93);
    let out = w.create_env();
    for expected in [
        "Started validating",
        "Started installing CPI",
        "  Installing job 'kubosh_cpi'... Finished (00:00:0",
        "Uploading stemcell 'bosh-kubosh-local-ubuntu-jammy/1.0'... Finished",
        "  Creating VM for instance 'hello/0' from stemcell 'sc-",
        "  Creating disk... Finished",
        "  Compiling package 'hello-server/",
        "Finished deploying (",
        "Cleaning up rendered CPI jobs... Finished",
        "\nSucceeded\n",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(w.greeting().starts_with("Hello"), "{}", w.greeting());
    let first = w.state();
    assert!(!first.current_vm_cid.is_empty() && !first.current_disk_id.is_empty());
    assert_eq!(first.releases.as_ref().unwrap().len(), 2);
    // bosh-cli's format: four-space indentation, no trailing newline.
    let text = std::fs::read_to_string(w.state_path()).unwrap();
    assert!(text.starts_with("{\n    \"director_id\": \"") && !text.ends_with('\n'));
    w.check_inventory_matches_state("after the first create-env");

    // Nothing changed: no CPI call at all.
    let calls = w.calls();
    let out = w.create_env();
    assert!(
        out.contains("No deployment, stemcell or release changes. Skipping deploy."),
        "{out}"
    );
    assert!(!out.contains("installing CPI"), "{out}");
    assert_eq!(w.calls(), calls, "Skipping deploy made CPI calls");

    // A property change: a new VM, the same disk, its data kept.
    std::fs::write(w.store().join("marker"), "keep me").unwrap();
    w.write_vars("Howdy", 64);
    let out = w.create_env();
    assert!(
        out.contains("Running the pre-stop scripts 'unknown/0'"),
        "{out}"
    );
    assert!(
        out.contains("Stopping jobs on instance 'unknown/0'"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Deleting VM '{}'... Finished",
            first.current_vm_cid
        )),
        "{out}"
    );
    let second = w.state();
    assert_ne!(second.current_vm_cid, first.current_vm_cid);
    assert_eq!(second.disk_cids(), first.disk_cids());
    assert_eq!(
        std::fs::read_to_string(w.store().join("marker")).unwrap(),
        "keep me"
    );
    assert!(w.greeting().starts_with("Howdy"), "{}", w.greeting());
    // The second deploy took both packages from the compiled-package cache.
    assert_eq!(
        std::fs::read_dir(w.home().join("cache/compiled"))
            .unwrap()
            .count(),
        4
    );
    w.check_inventory_matches_state("after a property change");

    // A bigger disk: the data moves to a new disk, the old one is deleted.
    w.write_vars("Howdy", 96);
    let out = w.create_env();
    let old_disk = second.current_disk().unwrap().cid.clone();
    assert!(out.contains("  Migrating disk content from '"), "{out}");
    assert!(
        out.contains(&format!("  Deleting disk '{old_disk}'... Finished")),
        "{out}"
    );
    let third = w.state();
    assert_eq!(third.current_disk().unwrap().size, 96);
    assert_ne!(third.current_disk().unwrap().cid, old_disk);
    assert_eq!(third.disks.as_ref().unwrap().len(), 1);
    assert_eq!(
        std::fs::read_to_string(w.store().join("marker")).unwrap(),
        "keep me"
    );
    w.check_inventory_matches_state("after a disk size change");

    // --recreate: a new VM for the same manifest; --recreate-persistent-disks: a new disk,
    // the data migrated.
    let mut recreate = w.command("create-env");
    recreate.arg("--recreate");
    let (ok, stdout, stderr) = w.output(recreate);
    assert!(ok, "{stdout}\n{stderr}");
    assert_ne!(w.state().current_vm_cid, third.current_vm_cid);
    assert_eq!(w.state().disk_cids(), third.disk_cids());
    let mut new_disk = w.command("create-env");
    new_disk.arg("--recreate-persistent-disks");
    let (ok, stdout, stderr) = w.output(new_disk);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("  Migrating disk content from '"),
        "{stdout}"
    );
    let fourth = w.state();
    assert_ne!(fourth.disk_cids(), third.disk_cids());
    assert_eq!(fourth.current_disk().unwrap().size, 96);
    assert_eq!(
        std::fs::read_to_string(w.store().join("marker")).unwrap(),
        "keep me"
    );
    w.check_inventory_matches_state("after --recreate-persistent-disks");

    // --json: one object per line, ending with success.
    let mut json = w.command("create-env");
    json.arg("--json");
    let (ok, stdout, stderr) = w.output(json);
    assert!(ok, "{stdout}\n{stderr}");
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(events.last().unwrap()["event"], "succeeded");
    assert!(events.iter().any(|e| e["event"] == "line"
        && e["text"] == "No deployment, stemcell or release changes. Skipping deploy."));

    // delete-env: nothing left, as bosh-cli leaves it.
    let installation = w.home().join("installations").join(&fourth.installation_id);
    assert!(installation.is_dir());
    let (ok, stdout, stderr) = w.output(w.command("delete-env"));
    assert!(ok, "{stdout}\n{stderr}");
    for expected in [
        "Started deleting deployment",
        "  Deleting disk '",
        "  Deleting stemcell '",
        "Uninstalling local artifacts for CPI and deployment... Finished",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    assert!(local::inventory(&w.cloud()).unwrap().is_empty());
    assert!(!w.state_path().exists());
    assert!(!installation.exists());
    assert!(w.greeting().is_empty());
    // Again: nothing to delete.
    let (ok, stdout, _) = w.output(w.command("delete-env"));
    assert!(
        ok && stdout.contains("No deployment state file found."),
        "{stdout}"
    );
}

/// Every problem of a manifest at once, each with its path; nothing is created.
#[test]
fn an_invalid_manifest_reports_every_problem_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yml"),
        r#"
name: bad
releases: [{name: r}]
resource_pools: [{name: vms, network: nowhere}]
disk_pools: [{name: disks, disk_size: 0}]
networks: [{name: default, type: manual, subnets: []}]
instance_groups:
- {name: a, instances: 2, resource_pool: vms, networks: [{name: default}], jobs: [{name: j, release: nope}]}
cloud_provider: {template: {name: cpi, release: r}, mbus: "http://mbus:x@1.2.3.4:6868"}
"#,
    )
    .unwrap();
    let out = Command::new(KUBOSH)
        .current_dir(dir.path())
        .env("KUBOSH_HOME", dir.path().join("home"))
        .args(["create-env", "bad.yml"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    for path in [
        "releases[0].url",
        "resource_pools[0].network",
        "resource_pools[0].stemcell",
        "disk_pools[0].disk_size",
        "networks[0].subnets",
        "instance_groups[0].instances",
        "instance_groups[0].jobs[0].release",
        "cloud_provider.mbus",
    ] {
        assert!(stderr.contains(path), "missing {path} in:\n{stderr}");
    }
    assert!(
        stdout.contains("Validating deployment manifest... Failed"),
        "{stdout}"
    );
    assert!(stderr.contains("Fix the manifest"), "{stderr}");
    assert!(stderr.trim_end().ends_with("Exit code 1"), "{stderr}");
    assert!(!dir.path().join("home/installations").exists());
}

/// A CPI that speaks only API v1 is refused with a clear error before anything is created;
/// `ssh_tunnel` gets a line saying why no tunnel is needed.
#[test]
fn a_v1_only_cpi_is_refused_and_ssh_tunnel_is_explained() {
    let w = EnvWorld::new(97);
    std::fs::write(
        w.path("v1.yml"),
        r#"
- type: replace
  path: /cloud_provider/properties/kubosh_cpi/api_version?
  value: 1
- type: replace
  path: /cloud_provider/ssh_tunnel?
  value: {host: 127.0.0.1, port: 22, user: vcap}
"#,
    )
    .unwrap();
    let mut command = w.command("create-env");
    command.args(["-o", "v1.yml"]);
    let (ok, stdout, stderr) = w.output(command);
    assert!(!ok, "{stdout}");
    assert!(
        stdout.contains("cloud_provider.ssh_tunnel is not used"),
        "{stdout}"
    );
    assert!(
        stderr.contains("create-env requires CPI API v2 or greater")
            && stderr.contains("the CPI reports API version 1"),
        "{stderr}"
    );
    assert!(local::inventory(&w.cloud()).unwrap_or_default().is_empty());
}

/// One request to the local cloud behind the environment, as a killed run's CPI process
/// would have sent it: the result.
fn cpi_call(w: &EnvWorld, method: &str, arguments: Value, request_id: &str) -> Value {
    let config = w.path("direct-cpi.json");
    // An mbus the orphans' agents never reach: the local cloud makes no VM without one.
    std::fs::write(
        &config,
        serde_json::json!({"state_dir": w.cloud(), "mbus": "https://mbus:unused@127.0.0.1:9"})
            .to_string(),
    )
    .unwrap();
    let request = serde_json::json!({
        "method": method,
        "arguments": arguments,
        "context": {"director_uuid": w.state().director_id, "request_id": request_id},
        "api_version": 2,
    });
    let (response, _) = run_cpi(
        &["cpi", "--config", config.to_str().unwrap()],
        &request.to_string(),
    );
    assert!(response["error"].is_null(), "{method}: {response}");
    response["result"].clone()
}

/// A run killed after the cloud made a VM, a disk and a stemcell but before their CIDs were
/// saved left intents beside the state file: the next run (never a Skipping deploy while
/// intents are pending) finds them through the local cloud's `kubosh_find_vm`,
/// `kubosh_find_disk` and `kubosh_find_stemcell` and deletes them.
#[test]
fn a_run_deletes_what_a_killed_run_made_but_did_not_record() {
    let w = EnvWorld::new(98);
    w.create_env();
    let stemcell = w.state().stemcells.unwrap()[0].cid.clone();
    let disk = cpi_call(
        &w,
        "create_disk",
        serde_json::json!([32, {}, null]),
        "req-orphan",
    );
    let vm = cpi_call(
        &w,
        "create_vm",
        serde_json::json!(["agent-orphan", stemcell, {}, {}, [], {}]),
        "req-vm",
    );
    let vm = vm.as_array().map_or(vm.clone(), |a| a[0].clone());
    std::fs::write(w.path("image"), b"an image").unwrap();
    let orphan_stemcell = cpi_call(
        &w,
        "create_stemcell",
        serde_json::json!([w.path("image"), {}]),
        "req-stemcell",
    );
    std::fs::write(
        w.path("env-state.json.kubosh-intents"),
        serde_json::json!([
            {"kind": "create_vm", "agent_id": "agent-orphan"},
            {"kind": "create_disk", "request_id": "req-orphan"},
            {"kind": "create_stemcell", "stemcell": "other/2", "request_id": "req-stemcell"},
        ])
        .to_string(),
    )
    .unwrap();
    let out = w.create_env();
    assert!(!out.contains("Skipping deploy"), "{out}");
    assert!(
        out.contains(&format!(
            "Deleted VM '{}', which a previous run created but did not record",
            vm.as_str().unwrap()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Deleted disk '{}', which a previous run created but did not record",
            disk.as_str().unwrap()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Deleted stemcell '{}', which a previous run created but did not record",
            orphan_stemcell.as_str().unwrap()
        )),
        "{out}"
    );
    w.check_inventory_matches_state("after recovery");
}

/// The real `bosh` CLI and kubosh take over each other's environment: each sees nothing to
/// do on the state the other wrote (same manifest digest, releases and stemcell), bosh
/// deploys a change on kubosh's state (kubosh's VM stopped and deleted through kubosh's
/// agent, the disk and its data kept), kubosh deploys a change on bosh's state, and
/// kubosh deletes the environment bosh created the VM of. Both print the same lines for
/// the same work (CIDs and durations aside).
#[test]
fn the_bosh_cli_and_kubosh_take_over_each_other() {
    let bosh = kubosh_devenv::binary("bosh").unwrap_or_else(|e| panic!("{e}"));
    let w = EnvWorld::new(94);
    w.create_env();
    std::fs::write(w.store().join("marker"), "keep me").unwrap();
    let bosh_create_env = || w.bosh(&bosh, "create-env");
    let skipping = "No deployment, stemcell or release changes. Skipping deploy.";
    let by_kubosh = w.state();
    let out = bosh_create_env();
    assert!(out.contains(skipping), "bosh on kubosh's state:\n{out}");
    let bosh_skip = normalized(&out);
    assert_eq!(
        w.state(),
        by_kubosh,
        "bosh changed a state it had nothing to do for"
    );

    // bosh deploys a change on kubosh's state.
    w.write_vars("Howdy", 64);
    let out = bosh_create_env();
    let bosh_deploy = normalized(&out);
    assert!(
        out.contains(&format!(
            "Deleting VM '{}'... Finished",
            by_kubosh.current_vm_cid
        )),
        "{out}"
    );
    assert!(w.greeting().starts_with("Howdy"), "{}", w.greeting());
    let by_bosh = w.state();
    assert_ne!(by_bosh.current_vm_cid, by_kubosh.current_vm_cid);
    assert_eq!(by_bosh.disk_cids(), by_kubosh.disk_cids());
    assert_eq!(
        std::fs::read_to_string(w.store().join("marker")).unwrap(),
        "keep me"
    );
    w.check_inventory_matches_state("after bosh create-env");

    // kubosh on bosh's state: nothing to do, then a change.
    let calls = w.calls();
    let out = w.create_env();
    assert!(out.contains(skipping), "kubosh on bosh's state:\n{out}");
    assert_eq!(normalized(&out), bosh_skip);
    assert_eq!(w.calls(), calls);
    w.write_vars("Hello", 64);
    let out = w.create_env();
    // Line for line what bosh printed for the same deploy, but for CIDs and durations.
    assert_eq!(normalized(&out), bosh_deploy);
    let taken = w.state();
    assert_eq!(taken.director_id, by_bosh.director_id);
    assert_eq!(taken.installation_id, by_bosh.installation_id);
    assert_eq!(taken.disk_cids(), by_bosh.disk_cids());
    assert_ne!(taken.current_vm_cid, by_bosh.current_vm_cid);
    assert_eq!(
        std::fs::read_to_string(w.store().join("marker")).unwrap(),
        "keep me"
    );
    assert!(w.greeting().starts_with("Hello"), "{}", w.greeting());
    w.check_inventory_matches_state("after kubosh took over");

    // bosh deletes what kubosh deployed last; kubosh deletes a new one the same way.
    let bosh_delete = w.bosh(&bosh, "delete-env");
    assert!(local::inventory(&w.cloud()).unwrap().is_empty());
    assert!(!w.state_path().exists());
    w.create_env();
    let (ok, stdout, stderr) = w.output(w.command("delete-env"));
    assert!(ok, "{stdout}\n{stderr}");
    assert!(local::inventory(&w.cloud()).unwrap().is_empty());
    assert_eq!(normalized(&stdout), normalized(&bosh_delete));
}

/// YAML 1.1 values mean to kubosh what they mean to bosh-cli: with a greeting written
/// `0777` (octal: 511) the job says 511 whichever tool deployed it, and each tool sees the
/// other's deploy as its own (the same manifest digest), so neither redeploys.
#[test]
fn octal_values_read_as_bosh_cli_reads_them() {
    let bosh = kubosh_devenv::binary("bosh").unwrap_or_else(|e| panic!("{e}"));
    let w = EnvWorld::new(92);
    let vars = std::fs::read_to_string(w.path("vars.yml")).unwrap();
    let octal = vars.replace("\"greeting\":\"Hello\"", "\"greeting\":0777");
    assert_ne!(octal, vars, "the greeting is in the vars file");
    std::fs::write(w.path("vars.yml"), octal).unwrap();
    w.create_env();
    assert!(w.greeting().starts_with("511"), "{}", w.greeting());
    let skipping = "No deployment, stemcell or release changes. Skipping deploy.";
    let deployed = w.state();
    let out = w.bosh(&bosh, "create-env");
    assert!(out.contains(skipping), "bosh on kubosh's state:\n{out}");
    assert_eq!(w.state(), deployed);
    let calls = w.calls();
    let out = w.create_env();
    assert!(out.contains(skipping), "kubosh after bosh:\n{out}");
    assert_eq!(w.calls(), calls);
    let (ok, stdout, stderr) = w.output(w.command("delete-env"));
    assert!(ok, "{stdout}\n{stderr}");
}

/// Output with VM, disk and stemcell CIDs and durations replaced, to compare two runs.
fn normalized(out: &str) -> String {
    let cid = regex::Regex::new(r"'(vm|disk|sc)-[0-9a-f-]+'").unwrap();
    let duration = regex::Regex::new(r"\(\d{2}:\d{2}:\d{2}\)").unwrap();
    let out = cid.replace_all(out, "'$1-<cid>'");
    duration.replace_all(&out, "(<time>)").into_owned()
}

/// `create-env` killed (SIGKILL) at random instants of deploys that change the greeting and
/// the disk size; every few kills one runs to the end: the environment converges, the cloud
/// holds exactly what the state file records, and the marker on the disk survives.
/// `KUBOSH_CREATE_ENV_KILLS` sets the number of kills (default 20); `KUBOSH_CRASH_SEED`
/// replays a run.
#[test]
fn create_env_killed_anywhere_converges_without_leaks_or_data_loss() {
    let kills = runs_from_env("KUBOSH_CREATE_ENV_KILLS", 20);
    let (seed, mut rng) = seeded_rng();
    let w = EnvWorld::new(95);
    w.create_env();
    std::fs::write(w.store().join("marker"), "keep me").unwrap();
    let log = w.path("killed.log");
    let variant = |n: u64| {
        let greeting = if n.is_multiple_of(2) {
            "Hello"
        } else {
            "Howdy"
        };
        let disk = if (n / 3).is_multiple_of(2) { 64 } else { 96 };
        (greeting, disk)
    };
    let mut instants = Vec::new();
    for n in 1..=kills {
        let (greeting, disk) = variant(n);
        w.write_vars(greeting, disk);
        // A changing deploy takes about 3 s: kill anywhere in it.
        let delay = rng.below(3500);
        instants.push(delay);
        run_and_kill(w.command("create-env"), &log, Duration::from_millis(delay));
        if n.is_multiple_of(5) || n == kills {
            let context = format!("after kill {n} (seed {seed}, kill instants {instants:?} ms)");
            let (ok, stdout, stderr) = w.output(w.command("create-env"));
            if !ok {
                let killed = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = killed.lines().rev().take(80).collect();
                panic!(
                    "{context}: the converging create-env failed:\n{stdout}\n{stderr}\nkilled runs (newest first):\n{}",
                    tail.join("\n")
                );
            }
            w.check_inventory_matches_state(&context);
            let state = w.state();
            assert_eq!(state.current_disk().unwrap().size, disk, "{context}");
            assert_eq!(
                std::fs::read_to_string(w.store().join("marker"))
                    .ok()
                    .as_deref(),
                Some("keep me"),
                "{context}: the marker on the disk"
            );
            assert!(
                w.greeting().starts_with(greeting),
                "{context}: {}",
                w.greeting()
            );
        }
    }
    println!("kill instants (ms): {instants:?}");
}

/// kubosh's manifest digest is bosh-cli's: go-yaml v2's bytes of the interpolated manifest
/// (`kubosh_base::yaml::to_string`) equal what `bosh int` prints, for the example with its
/// generated certificates, for bosh-deployment's `bosh.yml` on warden, and for
/// cf-deployment.
#[test]
fn the_manifest_digest_is_bosh_cli_s() {
    let bosh = kubosh_devenv::binary("bosh").unwrap_or_else(|e| panic!("{e}"));
    let w = EnvWorld::new(96);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/real-world");
    let bosh_yml = fixtures.join("bosh-deployment/bosh.yml");
    let warden = fixtures.join("bosh-deployment/warden/cpi.yml");
    let cf = fixtures.join("cf-deployment/cf-deployment.yml");
    let cases: Vec<Vec<String>> = vec![
        vec!["env.yml".into(), "-l".into(), "vars.yml".into(), "--vars-store".into(), "creds.yml".into()],
        vec![
            bosh_yml.display().to_string(),
            "-o".into(),
            warden.display().to_string(),
            "-v".into(),
            "internal_ip=10.245.0.11".into(),
            "-v".into(),
            "director_name=a director with a long name that goes past the eightieth column of the line".into(),
            "--vars-store".into(),
            "bosh-creds.yml".into(),
        ],
        vec![cf.display().to_string()],
    ];
    for args in cases {
        // bosh first: it generates the vars store both then read.
        let out = Command::new(&bosh)
            .current_dir(w.dir.path())
            .env("HOME", w.path("home-dir"))
            .arg("int")
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "bosh int {args:?}: {:?}", text(&out));
        let expected = String::from_utf8(out.stdout).unwrap();
        let out = Command::new(KUBOSH)
            .current_dir(w.dir.path())
            .arg("interpolate")
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubosh interpolate {args:?}: {:?}",
            text(&out)
        );
        let value =
            kubosh_base::yaml::parse_value(&String::from_utf8(out.stdout).unwrap(), "out").unwrap();
        let ours = kubosh_base::yaml::to_string(&value).unwrap();
        if ours != expected {
            let first = ours
                .lines()
                .zip(expected.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            let show = |t: &str| {
                t.lines()
                    .skip(first.saturating_sub(2))
                    .take(5)
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            panic!(
                "{args:?}: go-yaml v2 bytes differ at line {}:\nkubosh:\n{}\nbosh:\n{}",
                first + 1,
                show(&ours),
                show(&expected)
            );
        }
    }
}

/// Releases and stemcells at `http(s)://` URLs are downloaded once into
/// `~/.kubosh/downloads` (checked against their `sha1`) and read from there next time; a
/// tarball whose digest differs is refused before anything is created.
#[test]
fn tarballs_at_http_urls_are_downloaded_once_and_checked() {
    let w = EnvWorld::new(99);
    let port = free_port();
    let mut server = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .arg("--directory")
        .arg(w.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 serves the tarballs");
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the HTTP server never listened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let digest = |name: &str| kubosh_base::digest::sha1_hex(&std::fs::read(w.path(name)).unwrap());
    let ops = |hello_sha1: &str| {
        format!(
            "- {{type: replace, path: /releases/name=hello/url, value: 'http://127.0.0.1:{port}/hello.tgz'}}\n\
             - {{type: replace, path: /releases/name=hello/sha1?, value: '{hello_sha1}'}}\n\
             - {{type: replace, path: /resource_pools/name=vms/stemcell/url, value: 'http://127.0.0.1:{port}/stemcell.tgz'}}\n\
             - {{type: replace, path: /resource_pools/name=vms/stemcell/sha1?, value: '{}'}}\n",
            digest("stemcell.tgz")
        )
    };
    let with_ops = |command: &str, name: &str| {
        let mut c = w.command(command);
        c.args(["-o", name]);
        c
    };

    // A wrong digest: refused, nothing created.
    std::fs::write(w.path("bad.yml"), ops(&"0".repeat(40))).unwrap();
    let (ok, stdout, stderr) = w.output(with_ops("create-env", "bad.yml"));
    assert!(!ok, "{stdout}");
    assert!(
        format!("{stdout}{stderr}").contains("the tarball's digest is"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(w.calls(), 0, "nothing was asked of the cloud");

    // The right one: downloaded, deployed.
    std::fs::write(w.path("downloads.yml"), ops(&digest("hello.tgz"))).unwrap();
    let (ok, stdout, stderr) = w.output(with_ops("create-env", "downloads.yml"));
    assert!(ok, "{stdout}\n{stderr}");
    assert!(w.greeting().starts_with("Hello"));
    let downloads = w.home().join("downloads");
    assert_eq!(
        std::fs::read_dir(&downloads).unwrap().count(),
        2,
        "two tarballs kept"
    );

    // Again, with the server gone: read from the downloads, nothing to do.
    let _ = server.kill();
    let _ = server.wait();
    let (ok, stdout, stderr) = w.output(with_ops("create-env", "downloads.yml"));
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("Skipping deploy"), "{stdout}");
    let (ok, stdout, stderr) = w.output(with_ops("delete-env", "downloads.yml"));
    assert!(ok, "{stdout}\n{stderr}");
    let inventory = local::inventory(&w.cloud()).unwrap();
    assert!(
        inventory.vms.is_empty() && inventory.disks.is_empty() && inventory.stemcells.is_empty(),
        "{inventory:?}"
    );
}
