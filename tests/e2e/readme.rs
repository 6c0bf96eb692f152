//! The README's "Deploy without a cluster" walk-through, run as written: its `sh` blocks in
//! order, from a fresh environment, in a directory of its own. Only what a test must change
//! is changed: the build step (the binary under test and the test binaries' nats-server
//! instead of `cargo build` and `tools/testbins.sh`), the directory, and NATS's port (4222
//! may be taken on a machine running tests).

use std::path::Path;
use std::process::Command;

use crate::director_world::{KUBOSH, StopAgents, free_port, text};

const SECTION: &str = "### Deploy without a cluster";
const BUILD: &str = "cargo build --release\nexport PATH=$PWD/target/release:$(tools/testbins.sh):$PATH\nsrc=$PWD\nmkdir -p /tmp/walk && cd /tmp/walk\n";

/// The walk-through's `sh` blocks, up to the commands' general forms.
fn walk_through(readme: &str) -> Vec<String> {
    let start = readme.find(SECTION).expect("the README has the section");
    let section = &readme[start..];
    let end = section
        .find("The general forms")
        .expect("the walk-through ends");
    section[..end]
        .split("```sh\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_readme_deploy_without_a_cluster_walk_through_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = walk_through(&readme);
    assert!(blocks.len() >= 6, "{blocks:?}");
    assert_eq!(
        blocks[0], BUILD,
        "the walk-through starts by building kubosh"
    );
    let dir = tempfile::tempdir().unwrap();
    let _stop_agents = StopAgents(dir.path().join("cloud"));
    let nats = kubosh_devenv::binary("nats-server").unwrap_or_else(|e| panic!("{e}"));
    let bins = [Path::new(KUBOSH).parent().unwrap(), nats.parent().unwrap()];
    let port = free_port().to_string();
    let mut script = format!(
        "set -ex\nexport PATH={}:{}:$PATH\nsrc={}\ncd {}\n",
        bins[0].display(),
        bins[1].display(),
        root.display(),
        dir.path().display()
    );
    for block in &blocks[1..] {
        script.push_str(&block.replace(":4222", &format!(":{port}")));
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env_clear()
        .env("HOME", dir.path())
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .current_dir(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    // Whatever happened, no nats-server is left behind.
    if let Ok(pid) = std::fs::read_to_string(dir.path().join("nats.pid")) {
        let _ = Command::new("kill").arg(pid.trim()).status();
    }
    assert!(
        out.status.success(),
        "the walk-through failed:\n{stdout}\n{stderr}"
    );
    for expected in [
        "Hello, 127.0.78.2!",
        "Hello, 127.0.78.3!",
        "No changes: the deployment is up to date",
        "Logs written to './hello.web.0-",
        "says 'Hello, 127.0.78.2!'",
        "1\tdone\t",
    ] {
        assert!(
            stdout.contains(expected),
            "no {expected:?} in:\n{stdout}\n{stderr}"
        );
    }
    let inventory = kubosh_cloud::local::inventory(&dir.path().join("cloud")).unwrap();
    assert!(
        inventory.vms.is_empty(),
        "delete-deployment left {inventory:?}"
    );
}
