//! prepare/apply: rendered jobs and compiled packages from blobs, switched on by symlinks.

use crate::agentd_common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use agentd_common::*;
use kubosh_agentd::blobs::Blobstore;
use kubosh_agentd::install::{InstallError, InstallPlan, Installer};
use kubosh_agentd::layout::Layout;
use kubosh_agentd::supervisor::{JobState, Supervisor, SupervisorConfig};
use kubosh_base::digest::{sha1_hex, sha256_hex};

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn installs_activates_and_garbage_collects() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path().join("vcap"));
    layout.create().unwrap();
    let shared = dir.path().join("blobstore");
    let blobs = Blobstore::new(&layout, Some(shared));
    let s = unique_secs();

    // The director's blobs: a compiled package and the rendered templates archive (one job
    // with a "./" prefix, one without, as the two director code paths write them).
    let tool_v1 = tgz(&[("./bin/tool", "#!/bin/sh\necho tool v1\n", 0o755)]);
    let tool_v1_id = blobs.put(&tool_v1).await.unwrap();
    let monit = format!(
        "check process web\n  start program \"{}/jobs/web/bin/ctl\"\n  group vcap\n",
        layout.base().display()
    );
    let ctl = format!("#!/bin/sh\nexec sleep {s}\n");
    let rta = tgz(&[
        ("./web/monit", monit.as_str(), 0o644),
        ("./web/bin/ctl", ctl.as_str(), 0o644),
        ("./web/config/web.yml", "port: 80\n", 0o644),
        ("worker/monit", "", 0o644),
        ("worker/bin/pre-start", "#!/bin/sh\n", 0o644),
    ]);
    let rta_id = blobs.put(&rta).await.unwrap();
    let spec = serde_json::json!({
        "job": {"name": "ig", "templates": [
            {"name": "web", "version": "w1"}, {"name": "worker", "version": "k1"}]},
        "packages": {"tool": {"name": "tool", "version": "1.0", "sha1": sha1_hex(&tool_v1), "blobstore_id": tool_v1_id}},
        "rendered_templates_archive": {"blobstore_id": rta_id, "sha1": format!("sha256:{}", sha256_hex(&rta))},
    });

    let installer = Installer::new(layout.clone());
    let plan = InstallPlan::from_apply_spec(&spec).unwrap();
    apply(&installer, &blobs, &plan).await;

    let web = layout.job_dir("web");
    assert!(
        std::fs::symlink_metadata(&web)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(std::fs::read_link(&web).unwrap().is_relative());
    assert_eq!(
        std::fs::read_to_string(web.join("config/web.yml")).unwrap(),
        "port: 80\n"
    );
    assert_eq!(mode(&web.join("bin/ctl")), 0o750);
    assert_eq!(mode(&web.join("config/web.yml")), 0o640);
    assert_eq!(mode(&web.join("config")), 0o750);
    assert!(layout.job_dir("worker").join("bin/pre-start").is_file());
    let run = std::process::Command::new(layout.package_dir("tool").join("bin/tool"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout), "tool v1\n");
    assert!(web.join("packages/tool/bin/tool").is_file());
    for d in [
        layout.job_log_dir("web"),
        layout.job_run_dir("web"),
        layout.job_data_dir("web"),
    ] {
        assert!(d.is_dir(), "{}", d.display());
    }

    // The supervisor runs the installed job.
    let mut config = SupervisorConfig::new(layout.clone());
    config.tick = Duration::from_millis(100);
    let sup = Supervisor::new(config);
    let warnings = sup
        .load_jobs(&["web".into(), "worker".into()])
        .await
        .unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}"); // no pidfile
    sup.start().await.unwrap();
    wait_for(Duration::from_secs(20), "web running", || {
        (sup.status().job_state == JobState::Running).then_some(())
    })
    .await;
    tokio::time::timeout(Duration::from_secs(20), sup.shutdown())
        .await
        .unwrap()
        .unwrap();
    assert!(live_processes(&["sleep", &s.to_string()]).is_empty());

    // A second apply: worker goes, tool moves to v2; the old versions are removed.
    let old_tool_dir = installer.package_install_dir(&plan.packages[0]).unwrap();
    let old_web_dir = installer.job_install_dir(&plan, &plan.jobs[0]).unwrap();
    let tool_v2 = tgz(&[("bin/tool", "#!/bin/sh\necho tool v2\n", 0o755)]);
    let tool_v2_id = blobs.put(&tool_v2).await.unwrap();
    let rta2 = tgz(&[
        ("web/monit", "", 0o644),
        ("web/bin/ctl", "#!/bin/sh\n", 0o644),
    ]);
    let rta2_id = blobs.put(&rta2).await.unwrap();
    let spec2 = serde_json::json!({
        "job": {"name": "ig", "templates": [{"name": "web", "version": "w2"}]},
        "packages": {"tool": {"name": "tool", "version": "2.0", "sha1": sha1_hex(&tool_v2), "blobstore_id": tool_v2_id}},
        "rendered_templates_archive": {"blobstore_id": rta2_id, "sha1": sha1_hex(&rta2)},
    });
    let plan2 = InstallPlan::from_apply_spec(&spec2).unwrap();
    apply(&installer, &blobs, &plan2).await;
    let run = std::process::Command::new(web.join("packages/tool/bin/tool"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout), "tool v2\n");
    assert!(std::fs::symlink_metadata(layout.job_dir("worker")).is_err());
    assert!(!layout.data_jobs_dir().join("worker").exists());
    assert!(!old_tool_dir.exists());
    assert!(!old_web_dir.exists());
    assert_eq!(
        std::fs::read_to_string(web.join("config/web.yml")).ok(),
        None
    );
}

async fn apply(installer: &Installer, blobs: &Blobstore, plan: &InstallPlan) {
    for pkg in &plan.packages {
        if !installer.is_package_installed(pkg) {
            let bytes = blobs.get(&pkg.blobstore_id).await.unwrap();
            installer.install_package(pkg, bytes).await.unwrap();
        }
    }
    let archive = blobs.get(&plan.templates_blobstore_id).await.unwrap();
    installer.install_jobs(plan, archive).await.unwrap();
    installer.activate(plan).unwrap();
}

#[tokio::test]
async fn refuses_bad_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path().join("vcap"));
    layout.create().unwrap();
    let installer = Installer::new(layout.clone());
    let pkg_tgz = tgz(&[("bin/x", "x", 0o755)]);
    let rta = tgz(&[("web/monit", "", 0o644)]);
    let spec = serde_json::json!({
        "job": {"name": "ig", "templates": [{"name": "web", "version": "1"}, {"name": "gone", "version": "1"}]},
        "packages": {"p": {"name": "p", "version": "1", "sha1": sha1_hex(b"something else")}},
        "rendered_templates_archive": {"blobstore_id": "x", "sha1": sha1_hex(&rta)},
    });
    let plan = InstallPlan::from_apply_spec(&spec).unwrap();
    let err = installer
        .install_package(&plan.packages[0], pkg_tgz)
        .await
        .unwrap_err();
    assert!(matches!(err, InstallError::Digest { .. }), "{err}");
    let err = installer
        .install_jobs(&plan, rta.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, InstallError::MissingJob(j) if j == "gone"),
        "{err}"
    );
    let err = installer
        .install_jobs(&plan, b"garbage".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(err, InstallError::Digest { .. }), "{err}");
    let err = installer.activate(&plan).unwrap_err();
    assert!(matches!(err, InstallError::NotInstalled(_)), "{err}");
    // Nothing half-installed, no scratch left.
    assert_eq!(std::fs::read_dir(layout.tmp_dir()).unwrap().count(), 0);
    assert_eq!(
        std::fs::read_dir(layout.data_jobs_dir()).unwrap().count(),
        0
    );
    assert!(std::fs::symlink_metadata(layout.job_dir("web")).is_err());
}
