//! No stray processes: etcd and kube-apiserver die with the test process that started them,
//! even when it panics while holding them in a static, or is killed outright; what they
//! leave on disk goes at the next start.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD_MODE: &str = "KUBOSH_TEARDOWN_CHILD";

fn alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; only count processes that are not zombies.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.split_whitespace().nth(2) != Some("Z"))
        .unwrap_or(false)
}

/// Runs in a child copy of this test binary: starts a control plane, records its pids,
/// leaks it (as a shared static would), then ends the way `how` says.
#[test]
fn child_starts_a_control_plane_and_dies() {
    let Ok(spec) = std::env::var(CHILD_MODE) else {
        return;
    };
    let (how, pid_file) = spec.split_once(':').unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cp = rt.block_on(kubosh_devenv::ControlPlane::start()).unwrap();
    let [etcd, apiserver] = cp.pids();
    std::fs::write(
        pid_file,
        format!("{etcd} {apiserver}\n{}", cp.dir().display()),
    )
    .unwrap();
    std::mem::forget(cp);
    match how {
        "panic" => panic!("a test failing while it holds a control plane"),
        _ => std::process::abort(),
    }
}

/// The pids of the child's etcd and kube-apiserver, and its control plane's directory.
fn run_child(how: &str, dir: &Path) -> (Vec<u32>, PathBuf) {
    let pid_file = dir.join(format!("{how}.pids"));
    // The child's own test report (which says FAILED, on purpose) is kept out of ours.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "teardown::child_starts_a_control_plane_and_dies",
            "--test-threads=1",
        ])
        .env(CHILD_MODE, format!("{how}:{}", pid_file.display()))
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child was meant to fail:\n{log}");
    let text = std::fs::read_to_string(&pid_file)
        .unwrap_or_else(|_| panic!("the child recorded no pids:\n{log}"));
    let (pids, cp_dir) = text.split_once('\n').expect("pids, then the directory");
    let pids = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    (pids, PathBuf::from(cp_dir))
}

#[test]
fn control_plane_processes_die_with_a_panicking_or_aborted_test() {
    if std::env::var(CHILD_MODE).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut left_behind = Vec::new();
    for how in ["panic", "abort"] {
        let (pids, cp_dir) = run_child(how, dir.path());
        assert!(
            cp_dir.exists(),
            "a leaked control plane keeps its directory"
        );
        left_behind.push(cp_dir);
        let deadline = Instant::now() + Duration::from_secs(10);
        while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let left: Vec<u32> = pids.into_iter().filter(|p| alive(*p)).collect();
        assert!(
            left.is_empty(),
            "after a {how}: processes {left:?} outlived the test"
        );
    }
    // Their directories (etcd's data) go at the next start; one without an owner file
    // (being made) stays.
    let unowned = tempfile::Builder::new()
        .prefix("kubosh-cp-")
        .tempdir()
        .unwrap();
    kubosh_devenv::ControlPlane::remove_abandoned();
    for cp_dir in left_behind {
        assert!(!cp_dir.exists(), "{} was left behind", cp_dir.display());
    }
    assert!(unowned.path().exists());
}
