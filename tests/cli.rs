//! The `kubosh` binary, run as a user would.

use std::process::Command;

fn kubosh(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubosh"))
        .args(args)
        .output()
        .expect("run kubosh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/real-world");

#[test]
fn validate_accepts_cf_deployment_with_ops() {
    let cf = format!("{FIXTURES}/cf-deployment");
    let (code, out, err) = kubosh(&[
        "validate",
        &format!("{cf}/cf-deployment.yml"),
        "--cloud-config",
        &format!("{cf}/bosh-lite-cloud-config.yml"),
        "-o",
        &format!("{cf}/bosh-lite.yml"),
        "-o",
        &format!("{cf}/scale-to-one-az.yml"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("manifest 'cf' is valid"), "{out}");
    assert!(!err.contains("error:"), "{err}");
}

#[test]
fn validate_reports_every_problem_with_its_path_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("bad.yml");
    std::fs::write(
        &manifest,
        "name: web\nreleases: [{name: kv, version: '1'}]\nstemcells: [{alias: default, os: ubuntu-noble, version: latest}]\n\
         update: {canaries: 1, max_in_flight: 1, canary_watch_time: 1000, update_watch_time: 1000}\n\
         instance_groups:\n- name: web\n  azs: [z1, z9]\n  instances: 1\n  vm_type: tiny\n  stemcell: default\n  networks: [{name: default}]\n  jobs: [{name: web-server, release: kv}]\n",
    )
    .unwrap();
    let cc = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/bosh/cloud-config.yml"
    );
    let (code, _, err) = kubosh(&["validate", manifest.to_str().unwrap(), "-c", cc]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("instance_groups[0].azs[1]: AZ 'z9' is not defined"),
        "{err}"
    );
    assert!(
        err.contains("instance_groups[0].vm_type: VM type 'tiny' is not defined"),
        "{err}"
    );
    assert!(err.contains("2 error(s)"), "{err}");
}

#[test]
fn interpolate_prints_a_path_like_bosh_int() {
    let b = format!("{FIXTURES}/bosh-deployment");
    let (code, out, err) = kubosh(&[
        "interpolate",
        &format!("{b}/bosh.yml"),
        "-o",
        &format!("{b}/warden/cpi.yml"),
        "-v",
        "internal_ip=10.0.0.6",
        "--path",
        "/cloud_provider/mbus",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "https://mbus:((mbus_bootstrap_password))@10.0.0.6:6868\n"
    );
}

#[test]
fn interpolate_with_var_errs_lists_missing_variables() {
    let b = format!("{FIXTURES}/bosh-deployment");
    let (code, _, err) = kubosh(&["interpolate", &format!("{b}/bosh.yml"), "--var-errs"]);
    assert_eq!(code, 1);
    assert!(err.contains("Expected to find variables:"), "{err}");
    assert!(err.contains("internal_ip"), "{err}");
}
