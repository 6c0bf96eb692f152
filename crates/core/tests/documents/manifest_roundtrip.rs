//! Real-world documents parse into the typed model, and model → YAML → model is lossless.

use kubosh_core::manifest::{CloudConfig, DeploymentManifest, InitManifest};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn fixture(rel: &str) -> Value {
    let path = format!(
        "{}/../../../shared/fixtures/real-world/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    kubosh_base::yaml::parse_value(&text, &path).unwrap()
}

/// Parses `value` as `T`, writes it as YAML, reads it back, and checks nothing was lost.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &Value) -> T {
    let typed: T = serde_json::from_value(value.clone()).expect("parses into the model");
    let text = kubosh_base::yaml::to_string(&typed).unwrap();
    let again: T =
        serde_json::from_value(kubosh_base::yaml::parse_value(&text, "round trip").unwrap())
            .unwrap();
    assert_eq!(typed, again, "model → YAML → model changed the document");
    typed
}

#[test]
fn cf_deployment_round_trips_with_properties_verbatim() {
    let raw = fixture("cf-deployment/cf-deployment.yml");
    let m: DeploymentManifest = round_trip(&raw);
    assert_eq!(m.name.as_deref(), Some("cf"));
    assert!(m.instance_groups.len() > 15);
    // Every job's properties survive exactly, nested maps and ((placeholders)) included.
    let typed_value = serde_json::to_value(&m).unwrap();
    for (gi, group) in raw["instance_groups"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        for (ji, job) in group["jobs"].as_array().unwrap().iter().enumerate() {
            let original = job.get("properties").cloned().unwrap_or(Value::Null);
            let kept = typed_value["instance_groups"][gi]["jobs"][ji]
                .get("properties")
                .cloned()
                .unwrap_or(Value::Null);
            assert_eq!(
                original, kept,
                "instance_groups[{gi}].jobs[{ji}].properties"
            );
        }
    }
    // Placeholders stay untouched.
    let text = serde_json::to_string(&typed_value).unwrap();
    assert!(text.contains("((loggregator_tls_agent.ca))"));
    assert_eq!(
        m.variables.len(),
        raw["variables"].as_array().unwrap().len()
    );
}

#[test]
fn cloud_config_round_trips() {
    let cc: CloudConfig = round_trip(&fixture("cf-deployment/bosh-lite-cloud-config.yml"));
    assert_eq!(cc.azs.len(), 3);
    assert_eq!(cc.networks[0].subnets[0].static_ips.len(), 4);
    assert_eq!(cc.compilation.as_ref().and_then(|c| c.workers), Some(6));
}

#[test]
fn zookeeper_round_trips() {
    let m: DeploymentManifest = round_trip(&fixture("zookeeper-release/zookeeper.yml"));
    assert_eq!(m.instance_groups[0].instances, Some(5));
    assert!(m.instance_groups[1].is_errand());
}

#[test]
fn bosh_init_manifest_round_trips() {
    let m: InitManifest = round_trip(&fixture("bosh-deployment/bosh.yml"));
    assert_eq!(m.instance_groups.len(), 1);
    assert_eq!(m.resource_pools[0].name, "vms");
    assert_eq!(m.disk_pools[0].disk_size, Some(65536));
    let cp = m.cloud_provider.expect("cloud_provider");
    assert!(cp.mbus.unwrap().starts_with("https://mbus:"));
}

#[test]
fn every_fixture_is_valid_yaml() {
    for rel in [
        "bosh-deployment/bosh-lite.yml",
        "bosh-deployment/credhub.yml",
        "bosh-deployment/uaa.yml",
        "bosh-deployment/jumpbox-user.yml",
        "bosh-deployment/warden/cpi.yml",
        "bosh-deployment/virtualbox/cpi.yml",
        "cf-deployment/bosh-lite.yml",
        "cf-deployment/scale-to-one-az.yml",
        "cf-deployment/use-compiled-releases.yml",
        "zookeeper-release/zookeeper-job-spec.yml",
    ] {
        assert!(!fixture(rel).is_null(), "{rel} is empty");
    }
}
