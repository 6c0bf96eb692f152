//! `kubosh up --in-cluster` as a user runs it: a node of its own, NATS and the chart
//! installed, the example deployed to Ready by the controller's Pods and its errand run; it
//! keeps running until Ctrl-C, then removes the node, its Pods and the control plane.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubosh_devenv::NODE_NAME;
use kubosh_devenv::in_cluster::RELEASE_NAMESPACE;

use crate::{node_alone, root};

/// `kubosh up --in-cluster`, stopped with SIGINT (as Ctrl-C) when dropped.
struct Up {
    child: Child,
    said: Arc<Mutex<Vec<String>>>,
}

impl Up {
    fn start(state: &Path) -> Up {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubosh"))
            .args(["up", "--in-cluster", "--timeout", "10m", "--state-dir"])
            .arg(state)
            .current_dir(root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let said = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let said = Arc::clone(&said);
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    said.lock().unwrap().push(line);
                }
            });
        }
        Up { child, said }
    }

    fn output(&self) -> String {
        self.said.lock().unwrap().join("\n")
    }

    /// Waits (at most `within`) for a line containing `text`; panics with the output if the
    /// run ends or the time is up first.
    async fn wait_for(&mut self, text: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if self.said.lock().unwrap().iter().any(|l| l.contains(text)) {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                // The readers may still hold the last lines.
                tokio::time::sleep(Duration::from_millis(200)).await;
                panic!(
                    "kubosh up ended ({status}) before {text:?}:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {text:?} within {within:?}:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Ctrl-C: SIGINT, then its exit (at most `within`).
    async fn interrupt(&mut self, within: Duration) -> std::process::ExitStatus {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                tokio::time::sleep(Duration::from_millis(200)).await;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "kubosh up still runs {within:?} after SIGINT:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: signalling our own child, which then removes its cluster.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(120);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = self.child.kill();
        }
    }
}

/// `kubectl ARGS` on the cluster of `kubeconfig`, which must succeed: its stdout.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(kubosh_devenv::binary("kubectl").unwrap())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubosh_up_in_cluster_runs_the_demo_with_the_controller_as_pods_and_removes_it_when_stopped()
 {
    let _alone = node_alone().await;
    let state = tempfile::tempdir().unwrap();
    let mut up = Up::start(state.path());
    up.wait_for("running; Ctrl-C stops everything", Duration::from_secs(900))
        .await;
    let said = up.output();
    let kubeconfig = said
        .lines()
        .find_map(|l| l.trim().strip_prefix("export KUBECONFIG="))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no KUBECONFIG in:\n{said}"));
    // The chart's path, in order, and the errand's answer from both instances.
    for step in [
        "kubectl create namespace kubosh-system",
        "helm install kubosh charts/kubosh",
        "hello: Ready",
        "errand: ",
    ] {
        assert!(said.contains(step), "no {step:?} in:\n{said}");
    }
    assert_eq!(said.matches("says 'Hello").count(), 2, "{said}");

    // What it says runs, runs: the deployment is Ready, deployed by the controller's Pods on
    // the node (one of them leading), with the local cloud's VMs in the cloud's Pod.
    let ready = kubectl(
        &kubeconfig,
        &[
            "get",
            "boshdeployment",
            "hello",
            "-n",
            "bosh",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
    );
    assert_eq!(ready, "True");
    let pods = kubectl(
        &kubeconfig,
        &[
            "get",
            "pods",
            "-n",
            RELEASE_NAMESPACE,
            "-l",
            "app.kubernetes.io/name=kubosh",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase}{\"\\n\"}{end}",
        ],
    );
    let running: Vec<&str> = (pods.lines())
        .filter_map(|l| l.strip_suffix(&format!(" {NODE_NAME} Running")))
        .collect();
    assert_eq!(running.len(), 2, "{pods}");
    let leader = kubectl(
        &kubeconfig,
        &[
            "get",
            "lease",
            "kubosh-controller",
            "-n",
            RELEASE_NAMESPACE,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    );
    assert!(running.contains(&leader.as_str()), "{leader}: {pods}");
    let inventory = kubectl(
        &kubeconfig,
        &[
            "exec",
            "-n",
            RELEASE_NAMESPACE,
            "deploy/kubosh-cloud",
            "--",
            "kubosh",
            "cpi",
            "--config",
            "/etc/kubosh/cpi/cpi.yml",
            "inventory",
        ],
    );
    let inventory: serde_json::Value = serde_json::from_str(&inventory).unwrap();
    assert_eq!(inventory["vms"].as_array().unwrap().len(), 2, "{inventory}");

    // Ctrl-C: everything it made is gone, the node's network namespace too.
    let status = up.interrupt(Duration::from_secs(180)).await;
    let said = up.output();
    assert!(status.success(), "{status}:\n{said}");
    assert!(
        said.contains("stopped: the node, its Pods and the control plane are removed"),
        "{said}"
    );
    assert!(!kubeconfig.exists(), "{} is left", kubeconfig.display());
    let namespaces = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let namespaces = String::from_utf8_lossy(&namespaces.stdout);
    assert!(!namespaces.contains("kubosh-node"), "{namespaces}");
}
