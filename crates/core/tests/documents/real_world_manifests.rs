//! Real manifests from public BOSH releases (read from `shared/fixtures/real-world`, never
//! copied here) validate as the Director would have them.

use kubosh_core::validate::{self, Document, Segment};
use serde_json::Value;

const REAL_WORLD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/real-world"
);
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn load(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    kubosh_base::yaml::parse_value(&text, path).unwrap_or_else(|e| panic!("{e}"))
}

fn lookup<'a>(value: &'a Value, segments: &[Segment]) -> Option<&'a Value> {
    segments.iter().try_fold(value, |v, s| match s {
        Segment::Key(k) => v.as_object()?.get(k),
        Segment::Index(i) => v.as_array()?.get(*i),
    })
}

/// cf-deployment.yml as published targets every IaaS; on bosh-lite its ops file removes the
/// two VM extensions that the bosh-lite cloud config does not define. Without the ops file,
/// those two references are the only errors.
#[test]
fn cf_deployment_without_ops_lacks_exactly_two_vm_extensions_on_bosh_lite() {
    let manifest = load(&format!("{REAL_WORLD}/cf-deployment/cf-deployment.yml"));
    let cloud_config = load(&format!(
        "{REAL_WORLD}/cf-deployment/bosh-lite-cloud-config.yml"
    ));
    let problems = validate::deployment(&manifest, &cloud_config)
        .expect_err("the two bosh-lite-only VM extensions are missing");
    let errors: Vec<_> = problems.errors().collect();
    assert_eq!(errors.len(), 2, "expected exactly two errors:\n{problems}");
    let mut missing: Vec<&str> = Vec::new();
    for p in errors {
        assert_eq!(p.document, Document::Manifest, "{p}");
        let segments = p.path.segments();
        assert!(
            matches!(
                segments,
                [Segment::Key(a), Segment::Index(_), Segment::Key(b), Segment::Index(_)]
                    if a == "instance_groups" && b == "vm_extensions"
            ),
            "not at an instance group's VM extension: {p}"
        );
        let name = lookup(&manifest, segments)
            .and_then(Value::as_str)
            .expect("the path names a VM extension of the manifest");
        assert!(p.message.contains(&format!("'{name}'")), "{p}");
        missing.push(name);
    }
    missing.sort();
    assert_eq!(
        missing,
        [
            "cf-router-network-properties",
            "diego-ssh-proxy-network-properties"
        ]
    );
}

#[test]
fn zookeeper_validates_cleanly() {
    let manifest = load(&format!("{REAL_WORLD}/zookeeper-release/zookeeper.yml"));
    let cloud_config = load(&format!("{DATA}/zookeeper-cloud-config.yml"));
    let validated = validate::deployment(&manifest, &cloud_config)
        .unwrap_or_else(|problems| panic!("zookeeper.yml must validate:\n{problems}"));
    let (m, _) = &validated.document;
    assert_eq!(m.name.as_deref(), Some("zookeeper"));
    assert_eq!(m.instance_groups.len(), 2);
    assert!(
        validated.warnings.is_empty(),
        "unexpected warnings:\n{}",
        validated.warnings
    );
}

#[test]
fn the_zookeeper_cloud_config_validates_on_its_own() {
    let cloud_config = load(&format!("{DATA}/zookeeper-cloud-config.yml"));
    if let Err(problems) = validate::cloud_config(&cloud_config) {
        panic!("{problems}");
    }
}
