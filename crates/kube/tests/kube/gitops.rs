//! GitOps health of a `Deployment`, judged by the upstream code: the Argo CD health check in
//! `deploy/argocd/kubosh.io/Deployment` run by Argo CD's own Lua evaluation, and kstatus'
//! `Compute` (what Flux waits on), both through `gitops-health` (tools/gitops-health, built
//! by tools/testbins.sh). One set of fixtures, the check's `testdata/`, serves both; the
//! same objects stored in and read back from the real API server are judged the same.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubosh_devenv::binary;
use kubosh_kube::api::{Deployment, DeploymentSpec, DeploymentStatus};
use serde_json::{Value, json};

use crate::support;

/// The check's directory, in Argo CD's resource_customizations layout.
fn check_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/argocd/kubosh.io/Deployment")
}

/// The fixtures, by name (file stem), in name order.
fn fixtures() -> BTreeMap<String, PathBuf> {
    let dir = check_dir().join("testdata");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .collect()
}

/// Runs gitops-health; its stdout, or a panic with what it said.
fn gitops_health<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let tool = binary("gitops-health").unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(&tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", tool.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "gitops-health {:?} failed:\n{stdout}{}",
        args.iter().map(|a| a.as_ref()).collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// One object's verdict, as `gitops-health -o json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
struct Verdict {
    name: String,
    status: String,
    message: String,
}

/// `gitops-health <command> -o json ...files`: the verdicts in order.
fn verdicts(command: &[&str], files: &[PathBuf]) -> Vec<Verdict> {
    let mut args: Vec<std::ffi::OsString> = command.iter().map(Into::into).collect();
    args.push("-o".into());
    args.push("json".into());
    if command == ["argo"] {
        args.push(check_dir().join("health.lua").into());
    }
    args.extend(files.iter().map(Into::into));
    let out = gitops_health(&args);
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The fixtures' verdicts by fixture name.
fn fixture_verdicts(command: &[&str]) -> BTreeMap<String, Verdict> {
    let fixtures = fixtures();
    let files: Vec<PathBuf> = fixtures.values().cloned().collect();
    let found = verdicts(command, &files);
    assert_eq!(found.len(), fixtures.len(), "one object per fixture");
    fixtures.into_keys().zip(found).collect()
}

/// What kstatus says of each fixture (every fixture is listed: a new one needs a line).
const KSTATUS: &[(&str, &str)] = &[
    ("degraded_deployFailed", "Failed"),
    ("degraded_invalidManifest", "Failed"),
    ("healthy_deployed", "Current"),
    ("healthy_instanceFailing", "Current"),
    ("progressing_compiling", "InProgress"),
    ("progressing_deleting", "Terminating"),
    ("progressing_deletionRequested", "Terminating"),
    ("progressing_inputsUnavailable", "InProgress"),
    ("progressing_interrupted", "InProgress"),
    // kstatus skips the generation check without status.observedGeneration and calls an
    // object without conditions Current: a Flux health check passes before kubosh wrote
    // anything (the window is one reconcile: kubosh's first write has both).
    ("progressing_noStatus", "Current"),
    ("progressing_retrying", "InProgress"),
    ("progressing_staleGeneration", "InProgress"),
    ("progressing_updating", "InProgress"),
    ("progressing_waitingForInputs", "InProgress"),
    // Paused: kstatus knows no pause; kubosh keeps Ready as it was and Reconciling False,
    // so Ready decides (a pause before the first deploy waits forever in Flux).
    ("suspended_paused", "Current"),
    ("suspended_pausedBeforeFirstDeploy", "InProgress"),
    // The inputs are judged before the pause: Stalled (and Reconciling while waiting) stay.
    ("suspended_pausedInvalidManifest", "Failed"),
    ("suspended_pausedWaitingForInputs", "InProgress"),
];

#[test]
fn argo_cds_lua_evaluation_passes_the_health_checks_tests() {
    let out = gitops_health(&["argo-test".as_ref(), check_dir().as_os_str()]);
    let tests = out.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(tests, fixtures().len(), "every fixture is a test:\n{out}");
    assert!(out.contains(&format!("PASS {tests} test(s)")), "{out}");
}

#[test]
fn argo_cds_application_controller_shows_pending_deletion_without_running_the_check() {
    for (name, v) in fixture_verdicts(&["argo"]) {
        let deleting = name.starts_with("progressing_delet");
        if deleting {
            assert_eq!(
                (v.status.as_str(), v.message.as_str()),
                ("Progressing", "Pending deletion"),
                "{name}"
            );
        } else {
            let want = name.split('_').next().unwrap();
            assert_eq!(v.status.to_lowercase(), want, "{name}: {v:?}");
            assert!(!v.message.is_empty(), "{name}: {v:?}");
        }
    }
}

#[test]
fn kstatus_says_in_progress_while_deploying_current_when_ready_failed_when_stalled() {
    let found = fixture_verdicts(&["kstatus"]);
    let want: BTreeMap<String, String> = KSTATUS
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "every fixture has a kstatus expectation"
    );
    for (name, v) in &found {
        assert_eq!(&v.status, &want[name], "{name}: {v:?}");
    }
    // The messages are kubosh's own words from the conditions.
    assert_eq!(
        found["progressing_updating"].message,
        "Deploying generation 2: Updating instance group zookeeper: 1/5, canary done"
    );
    assert_eq!(
        found["progressing_staleGeneration"].message,
        "Deployment generation is 2, but latest observed generation is 1"
    );
    assert!(
        found["degraded_deployFailed"]
            .message
            .ends_with("is not running after update. Review logs for failed jobs: zookeeper"),
        "{:?}",
        found["degraded_deployFailed"]
    );
}

/// A fixture as the tool reads it (YAML to JSON, numbers as the API machinery has them).
fn fixture_json(path: &Path) -> Value {
    let out = gitops_health(&["json".as_ref(), path.as_os_str()]);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Stores a fixture in the API server under `name` as kubosh and the apiserver would have
/// written it: the spec at the fixture's generation (a deletion bumps it once more), then
/// the status through the status subresource with kubosh's field manager.
async fn store(api: &Api<Deployment>, name: &str, fixture: &Value) {
    let meta = &fixture["metadata"];
    let generation = meta["generation"].as_i64().unwrap();
    let deleting = meta.get("deletionTimestamp").is_some();
    let before_deletion = if deleting { generation - 1 } else { generation };
    let spec: DeploymentSpec = serde_json::from_value(fixture["spec"].clone())
        .unwrap_or_else(|e| panic!("{name}: spec: {e}"));

    // Generations 1..before_deletion: spec changes through `spec.vars`, the last one back to
    // the fixture's spec.
    let mut first = spec.clone();
    if before_deletion > 1 {
        first.vars = Some(serde_json::Map::from_iter([("bump".into(), json!(1))]));
    }
    let mut d = Deployment::new(name, first);
    d.metadata.labels = serde_json::from_value(meta["labels"].clone()).unwrap();
    d.metadata.finalizers = serde_json::from_value(meta["finalizers"].clone()).unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    for k in 2..before_deletion {
        let patch = json!({"spec": {"vars": {"bump": k}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    if before_deletion > 1 {
        let patch = json!({"spec": {"vars": null}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    if deleting {
        // The finalizer keeps it, as kubosh's does until the VMs are gone.
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let stored = api.get(name).await.unwrap();
    assert_eq!(stored.metadata.generation, Some(generation), "{name}");
    assert_eq!(stored.spec, spec, "{name}");

    if let Some(status) = fixture.get("status") {
        // The fixture's status is exactly what kubosh's types write: nothing unknown, nothing
        // misnamed, nothing missing.
        let typed: DeploymentStatus = serde_json::from_value(status.clone())
            .unwrap_or_else(|e| panic!("{name}: status: {e}"));
        assert_eq!(&serde_json::to_value(&typed).unwrap(), status, "{name}");
        let patch = json!({
            "apiVersion": "kubosh.io/v1alpha1",
            "kind": "Deployment",
            "status": typed,
        });
        api.patch_status(
            name,
            &PatchParams::apply("kubosh").force(),
            &Patch::Apply(&patch),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: status: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn live_objects_read_back_from_the_api_server_are_judged_like_the_fixtures() {
    let ns = support::namespace("gitops").await;
    let cp = support::control_plane().await;
    let api: Api<Deployment> = Api::namespaced(cp.client().await.unwrap(), &ns);
    let fixtures = fixtures();
    let mut by_object = BTreeMap::new();
    for (name, path) in &fixtures {
        let object = name.to_lowercase().replace('_', "-");
        store(&api, &object, &fixture_json(path)).await;
        by_object.insert(object, name.clone());
    }

    // What `kubectl get -o yaml` prints: a List of the live objects, managedFields and all.
    let out = cp
        .kubectl()
        .unwrap()
        .args(["get", "boshdeployments", "-n", &ns, "-o", "yaml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.yaml");
    std::fs::write(&live, &out.stdout).unwrap();

    for command in [&["argo"][..], &["kstatus"][..]] {
        let want = fixture_verdicts(command);
        let got = verdicts(command, std::slice::from_ref(&live));
        assert_eq!(got.len(), fixtures.len(), "{command:?}: {got:?}");
        for v in got {
            let fixture = &by_object[&v.name];
            let w = &want[fixture];
            assert_eq!(
                (&v.status, &v.message),
                (&w.status, &w.message),
                "{command:?} {fixture}: live {v:?}, file {w:?}"
            );
        }
    }
}

/// The `ErrandRun` check (`deploy/argocd/kubosh.io/ErrandRun`): Argo CD's evaluation passes
/// its tests (one per fixture) and kstatus agrees on each fixture: a hook Argo CD and Flux
/// both wait on while it runs, and that fails the sync when the errand failed.
#[test]
fn an_errand_runs_health_is_progressing_while_it_runs_and_healthy_or_degraded_after() {
    let dir = check_dir().join("../ErrandRun");
    let out = gitops_health(&["argo-test".as_ref(), dir.as_os_str()]);
    let files: Vec<PathBuf> = std::fs::read_dir(dir.join("testdata"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        out.contains(&format!("PASS {} test(s)", files.len())),
        "{out}"
    );
    let mut args: Vec<std::ffi::OsString> = vec!["kstatus".into(), "-o".into(), "json".into()];
    args.extend(files.iter().map(Into::into));
    let kstatus: Vec<Verdict> = (gitops_health(&args).lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (file, verdict) in files.iter().zip(kstatus) {
        let stem = file.file_stem().unwrap().to_string_lossy();
        let want = match stem.split('_').next().unwrap() {
            "healthy" => "Current",
            "degraded" => "Failed",
            // Before kubosh wrote anything, kstatus calls it Current (see KSTATUS).
            _ if stem == "progressing_noStatus" => "Current",
            _ => "InProgress",
        };
        assert_eq!(verdict.status, want, "{stem}: {verdict:?}");
    }
}
