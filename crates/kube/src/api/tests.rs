//! The CRDs kubosh generates are structural, keep the model's free-form and int-or-string
//! markers, and the examples round-trip through the Rust types.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::schema::KNOWN_FORMATS;
use super::schema::tests::structural_problems;
use super::*;
use kubosh_core::manifest::DeploymentManifest;

const DEPLOYMENT_EXAMPLE: &str = include_str!("../../../../examples/deployment.yaml");
const CLOUD_CONFIG_EXAMPLE: &str = include_str!("../../../../examples/cloud-config.yaml");

fn schema_of(crd: &CustomResourceDefinition) -> Value {
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("every kubosh CRD has a schema");
    serde_json::to_value(schema).unwrap()
}

fn crd_named(plural: &str) -> CustomResourceDefinition {
    crds()
        .into_iter()
        .find(|c| c.spec.names.plural == plural)
        .unwrap_or_else(|| panic!("no CRD {plural}"))
}

/// The schema node at a `a.b[].c` path (see `schema::Tweaks`), if there is one.
fn node<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = schema;
    for segment in path.split('.') {
        let (name, into_items) = match segment.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (segment, false),
        };
        node = node.get("properties")?.get(name)?;
        if into_items {
            node = node.get("items")?;
        }
    }
    Some(node)
}

/// Paths (`a.b[].c`) of the nodes of a plain schemars schema that carry `key`, following
/// `$ref`s, `anyOf`/`oneOf`/`allOf` branches (an `Option<T>`) included.
fn paths_with(root: &Value, key: &str) -> BTreeSet<String> {
    fn walk(root: &Value, node: &Value, path: &str, key: &str, out: &mut BTreeSet<String>) {
        let node = match node
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
        {
            Some(name) => &root["$defs"][name],
            None => node,
        };
        if node.get(key).is_some() {
            out.insert(path.to_string());
        }
        if let Some(Value::Object(props)) = node.get("properties") {
            for (name, child) in props {
                let child_path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                walk(root, child, &child_path, key, out);
            }
        }
        if let Some(items) = node.get("items") {
            walk(root, items, &format!("{path}[]"), key, out);
        }
        for junctor in ["anyOf", "oneOf", "allOf"] {
            if let Some(Value::Array(branches)) = node.get(junctor) {
                for branch in branches {
                    walk(root, branch, path, key, out);
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, "", key, &mut out);
    out
}

fn plain_schema<T: schemars::JsonSchema>() -> Value {
    schemars::SchemaGenerator::default()
        .into_root_schema_for::<T>()
        .to_value()
}

/// The embedded BOSH documents: (CRD plural, where the document sits, its plain schema).
fn embedded_documents() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "boshdeployments",
            "spec.manifest",
            plain_schema::<DeploymentManifest>(),
        ),
        (
            "cloudconfigs",
            "spec",
            plain_schema::<kubosh_core::manifest::CloudConfig>(),
        ),
        (
            "runtimeconfigs",
            "spec",
            plain_schema::<kubosh_core::manifest::RuntimeConfig>(),
        ),
    ]
}

#[test]
fn every_crd_is_structural() {
    for crd in crds() {
        let problems = structural_problems(&schema_of(&crd));
        assert!(
            problems.is_empty(),
            "{} is not structural:\n{}",
            crd.spec.names.plural,
            problems.join("\n")
        );
    }
}

#[test]
fn no_private_keys_or_unknown_formats_reach_the_output() {
    let yaml = crds_yaml().unwrap();
    assert!(
        !yaml.contains("x-kubosh"),
        "a private x-kubosh-* key leaked"
    );
    for crd in crds() {
        let schema = schema_of(&crd);
        let formats = paths_with(&schema, "format");
        for path in formats {
            let format = node(&schema, &path).unwrap()["format"].as_str().unwrap();
            assert!(KNOWN_FORMATS.contains(&format), "{path}: format {format}");
        }
    }
}

#[test]
fn free_form_blocks_are_preserved_not_pruned() {
    for (plural, at, plain) in embedded_documents() {
        let schema = schema_of(&crd_named(plural));
        let free_form = paths_with(&plain, "x-kubernetes-preserve-unknown-fields");
        assert!(!free_form.is_empty());
        for path in free_form {
            let full = format!("{at}.{path}");
            let n = node(&schema, &full).unwrap_or_else(|| panic!("{plural}: no {full}"));
            assert_eq!(
                n["x-kubernetes-preserve-unknown-fields"], true,
                "{plural}: {full}"
            );
        }
    }
    let deployment = schema_of(&crd_named("boshdeployments"));
    for path in ["spec.vars", "spec.ops[].value"] {
        assert_eq!(
            node(&deployment, path).unwrap()["x-kubernetes-preserve-unknown-fields"],
            true,
            "{path}"
        );
    }
    // An ops value may be a scalar or a list, not only a mapping, and may be null.
    let value = node(&deployment, "spec.ops[].value").unwrap();
    assert!(value.get("type").is_none());
    assert_eq!(value["nullable"], true);
}

#[test]
fn int_or_string_scalars_keep_their_marker() {
    let mut seen = 0;
    for (plural, at, plain) in embedded_documents() {
        let schema = schema_of(&crd_named(plural));
        for path in paths_with(&plain, "x-kubosh-format") {
            let full = format!("{at}.{path}");
            let n = node(&schema, &full).unwrap_or_else(|| panic!("{plural}: no {full}"));
            assert_eq!(n["x-kubernetes-int-or-string"], true, "{plural}: {full}");
            assert!(n.get("type").is_none(), "{plural}: {full} has a type");
            seen += 1;
        }
    }
    assert!(
        seen >= 5,
        "expected versions, canaries, max_in_flight, watch times"
    );
    for (plural, path) in [("releases", "spec.version"), ("stemcells", "spec.version")] {
        let schema = schema_of(&crd_named(plural));
        assert_eq!(
            node(&schema, path).unwrap()["x-kubernetes-int-or-string"],
            true
        );
    }
}

#[test]
fn keyed_lists_are_list_maps() {
    let deployment = schema_of(&crd_named("boshdeployments"));
    for (path, key) in [
        ("spec.manifest.instance_groups", "name"),
        ("spec.manifest.instance_groups[].jobs", "name"),
        ("spec.manifest.stemcells", "alias"),
        ("status.conditions", "type"),
        ("status.instanceGroups", "name"),
    ] {
        let n = node(&deployment, path).unwrap();
        assert_eq!(n["x-kubernetes-list-type"], "map", "{path}");
        assert_eq!(
            n["x-kubernetes-list-map-keys"],
            serde_json::json!([key]),
            "{path}"
        );
    }
    // Subnets have no key: they stay atomic.
    let cloud = schema_of(&crd_named("cloudconfigs"));
    assert!(
        node(&cloud, "spec.networks[].subnets")
            .unwrap()
            .get("x-kubernetes-list-type")
            .is_none()
    );
    for crd in crds() {
        if let Some(conditions) = node(&schema_of(&crd), "status.conditions") {
            assert_eq!(conditions["x-kubernetes-list-type"], "map");
        }
    }
}

#[test]
fn embedded_documents_carry_no_defaults() {
    for (plural, at, _) in embedded_documents() {
        let schema = schema_of(&crd_named(plural));
        let defaults = paths_with(node(&schema, at).unwrap(), "default");
        assert!(defaults.is_empty(), "{plural}: defaults at {defaults:?}");
    }
}

#[test]
fn every_field_is_documented_for_kubectl_explain() {
    for crd in crds() {
        let schema = schema_of(&crd);
        assert!(schema.get("description").is_some());
        let mut undocumented = Vec::new();
        for path in paths_with(&schema, "type")
            .into_iter()
            .chain(paths_with(&schema, "x-kubernetes-int-or-string"))
            .chain(paths_with(&schema, "x-kubernetes-preserve-unknown-fields"))
        {
            if path.is_empty() || path.ends_with("[]") {
                continue; // the root and list items are described by their list
            }
            if node(&schema, &path).unwrap().get("description").is_none() {
                undocumented.push(path);
            }
        }
        assert!(
            undocumented.is_empty(),
            "{}: {undocumented:?}",
            crd.spec.names.plural
        );
    }
}

#[test]
fn names_do_not_collide_with_built_ins() {
    const BUILT_IN_SHORT_NAMES: &[&str] = &[
        "cm", "cs", "csr", "crd", "crds", "deploy", "ds", "ep", "ev", "hpa", "ing", "ingclass",
        "limits", "netpol", "no", "ns", "pc", "pdb", "po", "psp", "pv", "pvc", "quota", "rc", "rs",
        "sa", "sc", "sts", "svc",
    ];
    let mut seen = BTreeSet::new();
    for crd in crds() {
        let names = &crd.spec.names;
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.versions[0].name, VERSION);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(names.categories.as_deref(), Some(&["bosh".to_string()][..]));
        assert_ne!(
            names.plural, "deployments",
            "would shadow apps/v1 deployments"
        );
        for short in names.short_names.iter().flatten() {
            assert!(!BUILT_IN_SHORT_NAMES.contains(&short.as_str()), "{short}");
            assert!(seen.insert(short.clone()), "short name {short} used twice");
        }
        let columns = crd.spec.versions[0].additional_printer_columns.as_ref();
        let age = columns.and_then(|c| c.iter().find(|c| c.name == "Age"));
        assert_eq!(
            age.map(|c| c.type_.as_str()),
            Some("date"),
            "{}",
            names.plural
        );
    }
    let deployment = crd_named("boshdeployments");
    assert_eq!(deployment.spec.names.kind, "Deployment");
    assert_eq!(
        deployment.spec.names.singular.as_deref(),
        Some("boshdeployment")
    );
    assert_eq!(
        deployment.spec.names.short_names,
        Some(vec!["bd".to_string()])
    );
}

#[test]
fn output_is_deterministic_and_reads_back() {
    let yaml = crds_yaml().unwrap();
    assert_eq!(yaml, crds_yaml().unwrap());
    let docs: Vec<&str> = yaml.split("---\n").collect();
    assert_eq!(docs.len(), crds().len());
    for (doc, crd) in docs.iter().zip(crds()) {
        let back: CustomResourceDefinition = kubosh_base::yaml::parse(doc, "crd").unwrap();
        assert_eq!(back, crd);
    }
    for (name, text) in crd_files().unwrap() {
        assert!(name.ends_with(".kubosh.io.yaml"), "{name}");
        assert!(text.starts_with(GENERATED_HEADER));
    }
}

/// Parses `text` into `T` and writes it back: nothing may be lost, added or reordered.
fn round_trip<T: DeserializeOwned + Serialize>(text: &str, origin: &str) -> T {
    let typed: T = kubosh_base::yaml::parse(text, origin).unwrap();
    let back = serde_json::to_value(&typed).unwrap();
    let original = kubosh_base::yaml::parse_value(text, origin).unwrap();
    assert_eq!(back, original, "{origin} does not round-trip");
    typed
}

#[test]
fn the_deployment_example_round_trips() {
    let d: Deployment = round_trip(DEPLOYMENT_EXAMPLE, "examples/deployment.yaml");
    assert!(d.spec.uses_cloud_config("default"));
    assert!(
        !d.spec.uses_cloud_config("other"),
        "it names its cloud config"
    );
    assert_eq!(d.spec.ops.len(), 3);
    let zk = &d.spec.manifest.instance_groups[0];
    let props = zk.jobs[0].properties.as_ref().unwrap();
    assert_eq!(props["autopurge"]["snap_retain_count"], 3);
    assert_eq!(props["admin"]["password"], "((zookeeper_admin_password))");
}

#[test]
fn the_cloud_config_example_round_trips() {
    let cc: CloudConfig = round_trip(CLOUD_CONFIG_EXAMPLE, "examples/cloud-config.yaml");
    assert_eq!(cc.spec.config.azs.len(), 3);
}

#[test]
fn the_examples_are_a_valid_bosh_deployment() {
    let mut deployment = kubosh_base::yaml::parse_value(DEPLOYMENT_EXAMPLE, "deployment").unwrap();
    let cloud = kubosh_base::yaml::parse_value(CLOUD_CONFIG_EXAMPLE, "cloud config").unwrap();
    let manifest = &mut deployment["spec"]["manifest"];
    manifest["name"] = deployment_name(DEPLOYMENT_EXAMPLE).into();
    if let Err(problems) = kubosh_core::validate::deployment(manifest, &cloud["spec"]) {
        panic!("{problems}");
    }
}

fn deployment_name(text: &str) -> String {
    let d: Deployment = kubosh_base::yaml::parse(text, "deployment").unwrap();
    d.metadata.name.unwrap()
}

#[test]
fn other_kinds_round_trip() {
    let instance = r#"
apiVersion: kubosh.io/v1alpha1
kind: Instance
metadata:
  name: zookeeper-zookeeper-0
  labels: {kubosh.io/deployment: zookeeper, kubosh.io/instance-group: zookeeper, kubosh.io/index: "0"}
spec:
  deployment: zookeeper
  instanceGroup: zookeeper
  index: 0
  id: 6e0e2b5c-1d1b-4f51-9d0e-3c7c5e0b2f11
  az: z1
  bootstrap: true
  state: Started
  vmCid: i-0abc
  agentId: 1b9e6a3c-0e51-4e8a-a1f0-1d3e4b5c6d7e
  networks: [{name: default, ip: 10.0.16.10}]
  diskCids: [vol-0123]
status:
  observedGeneration: 1
  conditions:
  - {type: Ready, status: "True", reason: Running, message: "", observedGeneration: 1,
     lastTransitionTime: "2026-01-02T03:04:05Z"}
  processState: Running
  processes: [{name: zookeeper, state: Running}]
"#;
    let i: Instance = round_trip(instance, "instance");
    assert_eq!(i.status.unwrap().conditions[0].type_, condition::READY);
    let disk = r#"
apiVersion: kubosh.io/v1alpha1
kind: Disk
metadata: {name: vol-0123}
spec:
  cid: vol-0123
  size: 10240
  deployment: zookeeper
  instanceGroup: zookeeper
  az: z1
  diskType: 10GB
  cloudProperties: {type: gp3}
  orphaned: true
  orphanedAt: "2026-01-02T03:04:05Z"
"#;
    round_trip::<Disk>(disk, "disk");
    let package = r#"
apiVersion: kubosh.io/v1alpha1
kind: CompiledPackage
metadata: {name: openjdk-0f1e2d}
spec:
  package: openjdk
  version: 0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6
  stemcell: {os: ubuntu-jammy, version: "1.83"}
  dependencyKey: ""
  build: 1
  blobstoreId: 8c5b2a9e-6a0f-4c1e-9b7d-3e2f1a0b9c8d
  sha1: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
"#;
    round_trip::<CompiledPackage>(package, "compiled package");
}
