//! What the demo applies, with `kubectl apply --server-side` as a user would: its
//! namespace, `examples/local/cloud-config.yaml`, the Release and Stemcell objects naming
//! the tarballs it built (written to the state directory's `manifests/`: their URLs and
//! digests are this machine's, or, in the cluster, the tarballs served to the node's Pods),
//! and `examples/local/hello.yaml`.

use std::path::{Path, PathBuf};

use kubosh_devenv::ControlPlane;
use kubosh_devenv::demo::{DemoLayout, TarballSource, example_objects};

use super::{DEPLOYMENT, Say};

/// The examples the demo applies as they are.
pub(super) fn examples_dir() -> PathBuf {
    super::source_tree().join("examples/local")
}

/// Applies the demo's namespace (the controller watches it, so it must exist first) and
/// makes it the kubeconfig's default.
pub(super) fn apply_namespace(
    cp: &ControlPlane,
    layout: &DemoLayout,
    namespace: &str,
    say: Say,
) -> Result<(), String> {
    let file = write(
        &manifests_dir(layout)?.join("namespace.yaml"),
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n"),
    )?;
    apply(cp, &file, say)?;
    kubectl(
        cp,
        &[
            "config",
            "set-context",
            "--current",
            "--namespace",
            namespace,
        ],
    )?;
    Ok(())
}

/// Applies the cloud config, the release, the stemcell and the deployment, in that order.
pub(super) fn apply_examples(
    cp: &ControlPlane,
    layout: &DemoLayout,
    release: &TarballSource,
    stemcell: &TarballSource,
    namespace: &str,
    say: Say,
) -> Result<(), String> {
    let manifests = manifests_dir(layout)?;
    let [release_object, stemcell_object] = example_objects(release, stemcell, namespace);
    let release_file = write(&manifests.join("release.yaml"), &release_object)?;
    let stemcell_file = write(&manifests.join("stemcell.yaml"), &stemcell_object)?;
    let examples = examples_dir();
    for file in [
        examples.join("cloud-config.yaml"),
        release_file,
        stemcell_file,
        examples.join("hello.yaml"),
    ] {
        apply(cp, &file, say)?;
    }
    // Asked, the controller answers with a task even when the deployment is as it should
    // be (unasked, a deploy that finds nothing to do says nothing): what the demo waits for.
    let asked = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let request = format!("kubosh.io/reconcile-request=up-{asked}");
    say.line(&format!(
        "kubectl annotate boshdeployment/{DEPLOYMENT} {request}"
    ));
    let target = format!("boshdeployment/{DEPLOYMENT}");
    kubectl(
        cp,
        &[
            "annotate",
            "--overwrite",
            "-n",
            namespace,
            &target,
            &request,
        ],
    )?;
    Ok(())
}

/// `kubectl apply --server-side -f file`, told to `say` with what kubectl answered.
fn apply(cp: &ControlPlane, file: &Path, say: Say) -> Result<(), String> {
    let path = file.display().to_string();
    say.line(&format!("kubectl apply --server-side -f {path}"));
    let out = kubectl(cp, &["apply", "--server-side", "-f", &path])?;
    for line in out.lines() {
        say.line(&format!("  {line}"));
    }
    Ok(())
}

fn manifests_dir(layout: &DemoLayout) -> Result<PathBuf, String> {
    let dir = layout.manifests();
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

fn write(path: &Path, text: &str) -> Result<PathBuf, String> {
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(path.to_path_buf())
}

/// Runs `kubectl` on the demo's cluster; its stdout, or why it failed.
pub(super) fn kubectl(cp: &ControlPlane, args: &[&str]) -> Result<String, String> {
    let out = cp
        .kubectl()
        .map_err(|e| e.to_string())?
        .args(args)
        .output()
        .map_err(|e| format!("kubectl {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
