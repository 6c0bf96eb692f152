//! `kubosh up`, the one-command demo, run as a user runs it: from a clean state directory
//! it converges (the `hello` deployment Ready, its job answering), stops everything it
//! started, and a second run on the same directory reuses what the first left (binaries,
//! etcd's data, certificates, the release and stemcell, the VMs and their compiled
//! packages) and converges again, faster, with a deploy that finds nothing to do.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubosh_devenv::demo::{DemoLayout, DemoPorts};
use kubosh_devenv::{http_get, http_request};

use crate::director_world::{KUBOSH, StopAgents};

/// What `kubosh up` prints once everything runs (without `--exit-when-ready`).
const RUNNING: &str = "running; Ctrl-C stops everything";

/// A `kubosh up` process and everything it printed so far.
struct Up {
    child: Child,
    started: Instant,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// Each stdout line as it comes.
    lines: mpsc::Receiver<String>,
}

/// How a run ended.
struct Ended {
    status: ExitStatus,
    took: Duration,
    stdout: String,
    stderr: String,
}

impl Up {
    fn start(state: &Path, more: &[&str]) -> Up {
        let mut child = Command::new(KUBOSH)
            .args([
                "up",
                "--state-dir",
                state.to_str().unwrap(),
                "--timeout",
                "8m",
            ])
            .args(more)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubosh up starts");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        let keep = stdout.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                keep.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        });
        let err = child.stderr.take().unwrap();
        let keep = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                keep.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Up {
            child,
            started: Instant::now(),
            stdout,
            stderr,
            lines,
        }
    }

    /// Waits for a stdout line containing `text`; false after `limit` or when stdout ends.
    fn wait_for_line(&self, text: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    }

    fn interrupt(&self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
    }

    /// Waits for the process to exit; after `limit`, interrupts it (and kills it a minute
    /// later) and fails with its output.
    fn wait(mut self, limit: Duration) -> Ended {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                self.interrupt();
                std::thread::sleep(Duration::from_secs(60));
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "kubosh up did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    self.stdout.lock().unwrap(),
                    self.stderr.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let took = self.started.elapsed();
        // The readers finish once the pipes close (every writer gone).
        std::thread::sleep(Duration::from_millis(200));
        Ended {
            status,
            took,
            stdout: self.stdout.lock().unwrap().clone(),
            stderr: self.stderr.lock().unwrap().clone(),
        }
    }
}

impl Ended {
    fn assert_converged(&self, layout: &DemoLayout) {
        let out = &self.stdout;
        let context = format!("stdout:\n{out}\nstderr:\n{}", self.stderr);
        assert!(self.status.success(), "kubosh up failed: {context}");
        assert!(out.contains("hello: Ready (2/2 instances)"), "{context}");
        assert!(
            out.contains("$ kubectl get boshdeployments,instances"),
            "{context}"
        );
        // `kubectl get` shows the deployment and both instances.
        for row in [
            "deployment.kubosh.io/hello",
            "instance.kubosh.io/hello-web-0",
            "instance.kubosh.io/hello-web-1",
        ] {
            assert!(out.contains(row), "{row} missing: {context}");
        }
        // Each instance's job answered on its own address, with the greeting.
        let answers = out.matches("$ curl http://127.0.77.").count();
        assert_eq!(answers, 2, "{context}");
        assert!(out.contains("Hello, 127.0.77."), "{context}");
        // The example's errand ran as an ErrandRun: its VM asked both web instances.
        assert!(
            out.contains("Errand 'smoke-tests' completed successfully on 1 instance(s)"),
            "{context}"
        );
        assert_eq!(out.matches(":8080 says 'Hello, ").count(), 2, "{context}");
        // Its ops API is registered with kube-apiserver (kubectl bosh logs, ssh).
        assert!(
            out.contains("the ops API (kubectl bosh logs, ssh) is served at"),
            "{context}"
        );
        assert!(
            out.contains(&format!(
                "export KUBECONFIG={}",
                layout.kubeconfig().display()
            )),
            "{context}"
        );
        assert!(
            out.contains("stopped: nothing of this run is running any more"),
            "{context}"
        );
    }

    /// No line of the NATS CA key or the cluster's tokens was printed.
    fn assert_no_secrets(&self, layout: &DemoLayout) {
        let key = std::fs::read_to_string(layout.root().join("pki/ca.key")).unwrap();
        let tokens = std::fs::read_to_string(layout.control_plane().join("tokens.csv")).unwrap();
        let secrets = key
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .map(str::to_string)
            .chain(
                tokens
                    .lines()
                    .filter_map(|l| l.split(',').next())
                    .map(str::to_string),
            );
        for secret in secrets {
            assert!(
                !self.stdout.contains(&secret) && !self.stderr.contains(&secret),
                "a secret was printed"
            );
        }
    }
}

/// Nothing the demo started runs: no process names the state directory, no VM's agent is
/// alive, no port of the run is open, no instance answers.
fn assert_nothing_running(layout: &DemoLayout) {
    let root = layout.root().display().to_string();
    let me = std::process::id().to_string();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // A zombie's command line is empty: it runs nothing.
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&root) {
            left.push(format!("{pid}: {cmdline}"));
        }
    }
    assert!(left.is_empty(), "still running: {left:#?}");

    let inventory = kubosh_cloud::local::inventory(&layout.director().cloud()).unwrap();
    assert_eq!(
        inventory.vms.len(),
        2,
        "the VMs stay, powered off: {inventory:?}"
    );
    for vm in &inventory.vms {
        assert!(!vm.agent_alive, "VM {} still runs its agent", vm.cid);
        for ip in &vm.ips {
            assert_eq!(http_get(ip, 8080), None, "{ip}:8080 still answers");
        }
    }
    let ports = DemoPorts::read(&layout.ports()).expect("the run wrote its ports");
    for port in ports.all() {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} is still open"
        );
    }
}

/// Whether a ConfigMap owned by another goes once its owner is deleted (the demo's garbage
/// collector), within 30 s; else what is left.
fn garbage_collected(layout: &DemoLayout) -> Result<(), String> {
    let kubectl = |args: &[&str], stdin: Option<&str>| -> Result<String, String> {
        let mut child = Command::new(kubosh_devenv::binary("kubectl").map_err(|e| e.to_string())?)
            .args(["-n", "default"])
            .args(args)
            .env("KUBECONFIG", layout.kubeconfig())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
            std::io::Write::write_all(&mut input, text.as_bytes()).map_err(|e| e.to_string())?;
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        match out.status.success() {
            true => Ok(text),
            false => Err(format!(
                "kubectl {args:?}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    };
    kubectl(&["create", "configmap", "gc-owner"], None)?;
    let uid = kubectl(
        &[
            "get",
            "configmap",
            "gc-owner",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        None,
    )?;
    let dependent = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "gc-dependent", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "gc-owner", "uid": uid},
        ]},
    });
    kubectl(&["create", "-f", "-"], Some(&dependent.to_string()))?;
    kubectl(&["delete", "configmap", "gc-owner"], None)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = kubectl(
            &["get", "configmaps", "--ignore-not-found", "-o", "name"],
            None,
        )?;
        if !left.contains("configmap/gc-dependent") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("not collected within 30 s: {left}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// SIGKILL to the `kubosh controller` the demo in `layout` started (found in /proc by its
/// director configuration, which is this test's own).
fn kill_controller(layout: &DemoLayout) {
    let config = layout.director().director_config();
    let config = config.to_string_lossy();
    let killed = crate::director_world::kill_processes(|args| {
        args.iter().any(|a| a == "controller") && args.iter().any(|a| a == &*config)
    });
    assert_eq!(
        killed.len(),
        1,
        "the demo's controller ({config}): {killed:?}"
    );
}

#[test]
fn kubosh_up_converges_from_a_clean_state_dir_leaves_nothing_running_and_a_second_run_reuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let state: PathBuf = dir.path().join("demo");
    let layout = DemoLayout::new(&state).unwrap();
    // Whatever happens, no VM's agent outlives the test.
    let _stop_agents = StopAgents(layout.director().cloud());

    // First run, from nothing: builds, deploys (compiling the packages), stops.
    let first = Up::start(&state, &["--exit-when-ready"]).wait(Duration::from_secs(600));
    first.assert_converged(&layout);
    for built in [
        "built the example release hello/1.0.0",
        "built the stemcell",
        "starting etcd + kube-apiserver (new data",
        "new certificates",
        "Reconciling",
    ] {
        assert!(first.stdout.contains(built), "{built}: {}", first.stdout);
    }
    first.assert_no_secrets(&layout);
    assert_nothing_running(&layout);

    // Second run, until it runs; then Ctrl-C: everything is reused, nothing deployed.
    let second = Up::start(&state, &[]);
    let running = second.wait_for_line(RUNNING, Duration::from_secs(300));
    // The controller serves its metrics on the port the report names, on loopback only:
    // never on 8080, where the example's jobs listen.
    let ports = DemoPorts::read(&layout.ports()).expect("the run wrote its ports");
    let metrics = running
        .then(|| http_request("127.0.0.1", ports.metrics, "/metrics"))
        .flatten();
    let collected = running.then(|| garbage_collected(&layout));
    // A controller killed behind the demo's back is started again.
    let restarted = running && {
        kill_controller(&layout);
        second.wait_for_line(
            "kubosh controller exited (signal: 9",
            Duration::from_secs(30),
        )
    };
    second.interrupt();
    let second = second.wait(Duration::from_secs(180));
    assert!(running, "{}\n{}", second.stdout, second.stderr);
    assert!(restarted, "{}\n{}", second.stdout, second.stderr);
    assert!(
        second.stdout.contains("; starting it again (its log: "),
        "{}",
        second.stdout
    );
    second.assert_converged(&layout);
    assert_eq!(
        collected,
        Some(Ok(())),
        "kube-controller-manager's garbage collector runs beside the demo's apiserver"
    );
    let (status, metrics) = metrics.expect("the controller's /metrics answers");
    assert_eq!(status, 200);
    assert!(metrics.contains("kubosh_leader 1"), "{metrics}");
    assert!(
        second.stdout.contains(&format!(
            "The controller's metrics: curl http://127.0.0.1:{}/metrics",
            ports.metrics
        )),
        "{}",
        second.stdout
    );
    for reused in [
        "reusing the example release hello/1.0.0 (source unchanged)",
        "reusing the stemcell",
        "starting etcd + kube-apiserver on the data of the last run",
        "the last run's certificates",
        "booted the 2 VM(s) the last run powered off",
        "every instance answers again",
    ] {
        assert!(
            second.stdout.contains(reused),
            "{reused}: {}",
            second.stdout
        );
    }
    assert!(!second.stdout.contains("built the"), "{}", second.stdout);
    // The VMs' jobs came back by themselves and the controller found nothing to do: no
    // compilation, no update.
    assert!(
        second
            .stdout
            .contains("Ready (2/2 instances): No changes: the deployment is up to date"),
        "{}",
        second.stdout
    );
    for work in ["Compiling packages", "Updating instance group"] {
        assert!(!second.stdout.contains(work), "{work}: {}", second.stdout);
    }
    assert!(
        second.took < first.took,
        "the second run ({:?}) was not faster than the first ({:?})",
        second.took,
        first.took
    );
    second.assert_no_secrets(&layout);
    assert_nothing_running(&layout);
    eprintln!(
        "kubosh up: first run {:.1}s, second run {:.1}s",
        first.took.as_secs_f64(),
        second.took.as_secs_f64()
    );
}
