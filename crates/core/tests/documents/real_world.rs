//! The real-world manifests validate the way they deploy with BOSH.

use kubosh_core::ops::{self, MissingVars, OpsFile, Vars};
use serde_json::Value;

fn text(rel: &str) -> String {
    let path = format!(
        "{}/../../../shared/fixtures/real-world/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(rel: &str) -> Value {
    kubosh_base::yaml::parse_value(&text(rel), rel).unwrap()
}

fn with_ops(base: &str, ops_files: &[&str]) -> Value {
    let mut doc = yaml(base);
    let ops: Vec<OpsFile> = ops_files
        .iter()
        .map(|f| OpsFile::parse(&text(f), f).unwrap())
        .collect();
    ops::apply_all(&ops, &mut doc).unwrap();
    doc
}

#[test]
fn cf_deployment_for_bosh_lite_on_one_az_validates_with_zero_errors() {
    let manifest = with_ops(
        "cf-deployment/cf-deployment.yml",
        &[
            "cf-deployment/bosh-lite.yml",
            "cf-deployment/scale-to-one-az.yml",
        ],
    );
    let validated = kubosh_core::validate::deployment(
        &manifest,
        &yaml("cf-deployment/bosh-lite-cloud-config.yml"),
    )
    .unwrap_or_else(|problems| panic!("cf-deployment should validate:\n{problems}"));
    let (m, _) = &validated.document;
    assert_eq!(m.name.as_deref(), Some("cf"));
    // scale-to-one-az puts every group in z1.
    assert!(
        m.instance_groups.iter().all(|g| g.azs == ["z1"]),
        "all groups in z1"
    );
    // The only warning is the manifest_version key BOSH ignores too.
    let warnings: Vec<String> = validated
        .warnings
        .all()
        .iter()
        .map(|p| p.path.to_string())
        .collect();
    assert_eq!(warnings, ["manifest_version"]);
}

#[test]
fn cf_deployment_with_compiled_releases_validates() {
    let manifest = with_ops(
        "cf-deployment/cf-deployment.yml",
        &[
            "cf-deployment/bosh-lite.yml",
            "cf-deployment/use-compiled-releases.yml",
        ],
    );
    let validated = kubosh_core::validate::deployment(
        &manifest,
        &yaml("cf-deployment/bosh-lite-cloud-config.yml"),
    )
    .unwrap_or_else(|problems| panic!("{problems}"));
    assert!(
        validated
            .document
            .0
            .releases
            .iter()
            .any(|r| r.stemcell.is_some()),
        "compiled releases name their stemcell"
    );
}

#[test]
fn bosh_director_manifest_interpolates_for_create_env() {
    let manifest = with_ops(
        "bosh-deployment/bosh.yml",
        &[
            "bosh-deployment/warden/cpi.yml",
            "bosh-deployment/jumpbox-user.yml",
        ],
    );
    let mut vars = Vars::new();
    for arg in [
        "director_name=bosh-lite",
        "internal_ip=192.168.56.6",
        "internal_gw=192.168.56.1",
        "internal_cidr=192.168.56.0/24",
        "garden_host=127.0.0.1",
    ] {
        vars.add_var_arg(arg).unwrap();
    }
    let out = ops::interpolate(&manifest, &vars, MissingVars::Leave).unwrap();
    assert_eq!(out["networks"][0]["subnets"][0]["range"], "192.168.56.0/24");
    assert_eq!(out["cloud_provider"]["template"]["name"], "warden_cpi");
    // Generated credentials are still placeholders until a vars store fills them.
    assert_eq!(
        out["instance_groups"][0]["properties"]["nats"]["password"],
        "((nats_password))"
    );
    // The result is a valid create-env manifest.
    let init = kubosh_core::validate::init_manifest(&out).unwrap_or_else(|p| panic!("{p}"));
    assert_eq!(
        init.document.instance_groups[0].jobs.last().unwrap().name,
        "user_add"
    );
}

/// bosh-deployment's runtime configs (bosh-dns with its director-wide certificates, bpm)
/// validate, and applied to the zookeeper manifest they add their releases, addons and
/// variables; the whole still validates against its cloud config.
#[test]
fn bosh_deployment_runtime_configs_validate_and_apply_to_a_real_manifest() {
    let dns = yaml("bosh-deployment/runtime-configs/dns.yml");
    let bpm = yaml("bosh-deployment/runtime-configs/bpm.yml");
    for (name, rc) in [("dns", &dns), ("bpm", &bpm)] {
        let validated =
            kubosh_core::validate::runtime_config(rc).unwrap_or_else(|p| panic!("{name}:\n{p}"));
        assert!(
            validated.warnings.is_empty(),
            "{name}: {}",
            validated.warnings
        );
    }
    let mut manifest = yaml("zookeeper-release/zookeeper.yml");
    let warnings = kubosh_core::validate::apply_runtime_configs(
        &mut manifest,
        &[("dns", &dns), ("bpm", &bpm)],
        None,
    )
    .unwrap_or_else(|p| panic!("{p}"));
    assert!(warnings.is_empty(), "{warnings}");
    let releases: Vec<&str> = (manifest["releases"].as_array().unwrap().iter())
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(releases, ["zookeeper", "bosh-dns", "bpm"]);
    let addons: Vec<&str> = (manifest["addons"].as_array().unwrap().iter())
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(addons[..2], ["bosh-dns", "bosh-dns-systemd"]);
    assert_eq!(addons.last(), Some(&"bpm"));
    assert!(
        (manifest["variables"].as_array().unwrap().iter())
            .any(|v| v["name"] == "/dns_api_client_tls")
    );
    let cloud_config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/zookeeper-cloud-config.yml"
    );
    let cloud_config = std::fs::read_to_string(cloud_config).unwrap();
    let cloud_config = kubosh_base::yaml::parse_value(&cloud_config, "cloud config").unwrap();
    let validated = kubosh_core::validate::deployment(&manifest, &cloud_config);
    if let Err(problems) = validated {
        panic!("{problems}");
    }
}
