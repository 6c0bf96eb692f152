//! Validation never panics, whatever it is given, and every error it reports points into
//! the document: at a value that exists, or at a missing key of a value that exists.
//!
//! Three sources of input:
//! (a) arbitrary JSON-like trees (bounded), with BOSH keys and values mixed in so that they
//!     get past the first checks;
//! (b) the real cf-deployment manifest and the corpus base manifest (with their cloud
//!     configs), mutated: a key deleted, a node replaced by a random value, a list item
//!     duplicated, a value turned into another type;
//! (c) arbitrary text, and the base manifest's text with bytes changed, through the YAML
//!     parser and then validation.
//!
//! Cases per property are set below and can be changed with `PROPTEST_CASES`.

use std::sync::LazyLock;

use kubosh_core::validate::{self, Document, Path, Problems, Segment};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Value};

const REAL_WORLD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/real-world"
);
const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/invalid");

fn load(path: &str) -> (String, Value) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let value = kubosh_base::yaml::parse_value(&text, path).unwrap_or_else(|e| panic!("{e}"));
    (text, value)
}

static CF_MANIFEST: LazyLock<Value> =
    LazyLock::new(|| load(&format!("{REAL_WORLD}/cf-deployment/cf-deployment.yml")).1);
static CF_CLOUD_CONFIG: LazyLock<Value> = LazyLock::new(|| {
    load(&format!(
        "{REAL_WORLD}/cf-deployment/bosh-lite-cloud-config.yml"
    ))
    .1
});
static BASE_MANIFEST: LazyLock<(String, Value)> =
    LazyLock::new(|| load(&format!("{CORPUS}/base-manifest.yml")));
static BASE_CLOUD_CONFIG: LazyLock<Value> =
    LazyLock::new(|| load(&format!("{CORPUS}/base-cloud-config.yml")).1);
static BASE_INIT: LazyLock<Value> =
    LazyLock::new(|| load(&format!("{CORPUS}/init/base-manifest.yml")).1);

/// `default` cases, or `PROPTEST_CASES` when set.
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// What is asserted

fn lookup<'a>(value: &'a Value, segments: &[Segment]) -> Option<&'a Value> {
    segments.iter().try_fold(value, |v, s| match s {
        Segment::Key(k) => v.as_object()?.get(k),
        Segment::Index(i) => v.as_array()?.get(*i),
    })
}

/// The path is in the document, or names a key missing from a value that is.
fn points_into(document: &Value, path: &Path) -> bool {
    let segments = path.segments();
    lookup(document, segments).is_some()
        || segments
            .split_last()
            .is_some_and(|(_, parent)| lookup(document, parent).is_some())
}

fn check_errors(problems: &Problems, manifest: &Value, cloud_config: Option<&Value>) {
    assert!(problems.has_errors(), "an Err without errors:\n{problems}");
    for p in problems.errors() {
        let document = match p.document {
            Document::Manifest => manifest,
            Document::CloudConfig => cloud_config.expect("an error in a cloud config not given"),
            Document::RuntimeConfig | Document::CpiConfig => {
                panic!("an error in a {} not given: {p}", p.document)
            }
        };
        assert!(
            points_into(document, &p.path),
            "error at a path that is not in the {}: {p}",
            p.document
        );
        assert!(!p.message.trim().is_empty(), "empty message: {p}");
        // Raised when the typed model cannot be built after the shape check passed: the
        // shape check and the types disagree, a kubosh bug.
        assert!(
            !p.message.contains("cannot be read"),
            "shape and types disagree: {p}"
        );
    }
}

fn check_deployment(manifest: &Value, cloud_config: &Value) {
    if let Err(problems) = validate::deployment(manifest, cloud_config) {
        check_errors(&problems, manifest, Some(cloud_config));
    }
}

fn check_all(value: &Value) {
    check_deployment(value, &BASE_CLOUD_CONFIG);
    check_deployment(&BASE_MANIFEST.1, value);
    if let Err(problems) = validate::cloud_config(value) {
        check_errors(&problems, &Value::Null, Some(value));
    }
    if let Err(problems) = validate::init_manifest(value) {
        check_errors(&problems, value, None);
    }
}

// ---------------------------------------------------------------------------------------
// Generators

/// Keys BOSH documents use, so random trees reach past the shape check now and then.
const KEYS: &[&str] = &[
    "name",
    "azs",
    "az",
    "instances",
    "jobs",
    "release",
    "releases",
    "version",
    "stemcell",
    "stemcells",
    "alias",
    "os",
    "vm_type",
    "vm_types",
    "vm_resources",
    "cpu",
    "ram",
    "ephemeral_disk_size",
    "vm_extensions",
    "networks",
    "static_ips",
    "default",
    "update",
    "canaries",
    "max_in_flight",
    "canary_watch_time",
    "update_watch_time",
    "serial",
    "instance_groups",
    "persistent_disk",
    "persistent_disk_type",
    "persistent_disks",
    "type",
    "disk_types",
    "disk_size",
    "subnets",
    "range",
    "gateway",
    "reserved",
    "static",
    "dns",
    "compilation",
    "workers",
    "network",
    "migrated_from",
    "variables",
    "options",
    "ca",
    "is_ca",
    "common_name",
    "lifecycle",
    "properties",
    "cloud_properties",
    "addons",
    "resource_pools",
    "resource_pool",
    "cloud_provider",
    "mbus",
    "template",
    "templates",
];

const STRINGS: &[&str] = &[
    "",
    "z1",
    "z2",
    "z3",
    "default",
    "small",
    "latest",
    "((var))",
    "10.0.1.10",
    "10.0.1.0/24",
    "10.0.1.10 - 10.0.1.20",
    "10.0.1.20-10.0.1.10",
    "10.244.0.0/20",
    "::/0",
    "fd00::/8",
    "fd00::1",
    "0.0.0.0/0",
    "25%",
    "0%",
    "5000-60000",
    "60000-5000",
    "5000-",
    "manual",
    "dynamic",
    "vip",
    "errand",
    "certificate",
    "password",
    "dns",
    "gateway",
    "https://mbus:p@10.0.0.6:6868",
    "web_",
    "Web",
    "-",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u64..300).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop::sample::select(STRINGS).prop_map(Value::from),
        "[a-z0-9_.%/ -]{0,12}".prop_map(Value::from),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(KEYS).prop_map(String::from),
        1 => "[a-z_.]{0,8}",
    ]
}

fn tree() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// A top-level mapping of BOSH keys to random trees.
fn document() -> impl Strategy<Value = Value> {
    prop::collection::vec((key(), tree()), 0..8)
        .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>()))
}

// ---------------------------------------------------------------------------------------
// Mutations

#[derive(Debug, Clone)]
enum Mutation {
    Delete(Index),
    Replace(Index, Value),
    Duplicate(Index, Index),
    SwapType(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Delete),
        (any::<Index>(), tree()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        (any::<Index>(), any::<Index>()).prop_map(|(i, j)| Mutation::Duplicate(i, j)),
        any::<Index>().prop_map(Mutation::SwapType),
    ]
}

/// Every path in the document, the root first.
fn paths(value: &Value) -> Vec<Vec<Segment>> {
    fn walk(value: &Value, here: &mut Vec<Segment>, out: &mut Vec<Vec<Segment>>) {
        out.push(here.clone());
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    here.push(Segment::Key(k.clone()));
                    walk(v, here, out);
                    here.pop();
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    here.push(Segment::Index(i));
                    walk(v, here, out);
                    here.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, &mut Vec::new(), &mut out);
    out
}

fn lookup_mut<'a>(value: &'a mut Value, segments: &[Segment]) -> Option<&'a mut Value> {
    segments.iter().try_fold(value, |v, s| match s {
        Segment::Key(k) => v.as_object_mut()?.get_mut(k),
        Segment::Index(i) => v.as_array_mut()?.get_mut(*i),
    })
}

fn swapped(value: &Value) -> Value {
    match value {
        Value::Null => Value::from(""),
        Value::Bool(b) => Value::from(b.to_string()),
        Value::Number(n) => Value::from(n.to_string()),
        Value::String(s) => s
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::Array(vec![Value::from(s.as_str())])),
        Value::Array(items) => Value::Object(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v.clone()))
                .collect(),
        ),
        Value::Object(map) => Value::Array(map.values().cloned().collect()),
    }
}

fn apply(doc: &mut Value, m: &Mutation) {
    let all = paths(doc);
    match m {
        Mutation::Delete(i) => {
            let path: &Vec<Segment> = i.get(&all);
            let Some((last, parent)) = path.split_last() else {
                return;
            };
            match (lookup_mut(doc, parent), last) {
                (Some(Value::Object(map)), Segment::Key(k)) => {
                    map.shift_remove(k);
                }
                (Some(Value::Array(items)), Segment::Index(i)) => {
                    items.remove(*i);
                }
                _ => {}
            }
        }
        Mutation::Replace(i, v) => {
            let path: &Vec<Segment> = i.get(&all);
            if let Some(node) = lookup_mut(doc, path) {
                *node = v.clone();
            }
        }
        Mutation::Duplicate(i, j) => {
            let lists: Vec<&Vec<Segment>> = all
                .iter()
                .filter(|p| {
                    lookup(doc, p).is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()))
                })
                .collect();
            if lists.is_empty() {
                return;
            }
            let path = i.get(&lists).to_vec();
            if let Some(Value::Array(items)) = lookup_mut(doc, &path) {
                let item = j.get(items).clone();
                items.push(item);
            }
        }
        Mutation::SwapType(i) => {
            let path: &Vec<Segment> = i.get(&all);
            if let Some(node) = lookup_mut(doc, path) {
                *node = swapped(node);
            }
        }
    }
}

fn mutated(base: &Value, mutations: &[Mutation]) -> Value {
    let mut doc = base.clone();
    for m in mutations {
        apply(&mut doc, m);
    }
    doc
}

// ---------------------------------------------------------------------------------------
// Properties

proptest! {
    #![proptest_config(config(256))]

    /// (a) Arbitrary trees as manifest, as cloud config, and as create-env manifest.
    #[test]
    fn arbitrary_trees(manifest in document(), cloud_config in document(), any_value in tree()) {
        check_deployment(&manifest, &cloud_config);
        check_all(&manifest);
        check_all(&any_value);
    }
}

proptest! {
    #![proptest_config(config(128))]

    /// (b) The base corpus documents with a few mutations each.
    #[test]
    fn mutated_base_documents(
        manifest_mutations in prop::collection::vec(mutation(), 1..4),
        cloud_config_mutations in prop::collection::vec(mutation(), 0..3),
        init_mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let manifest = mutated(&BASE_MANIFEST.1, &manifest_mutations);
        let cloud_config = mutated(&BASE_CLOUD_CONFIG, &cloud_config_mutations);
        check_deployment(&manifest, &cloud_config);
        let init = mutated(&BASE_INIT, &init_mutations);
        if let Err(problems) = validate::init_manifest(&init) {
            check_errors(&problems, &init, None);
        }
    }

    /// (b) The real cf-deployment manifest (and bosh-lite cloud config), mutated.
    #[test]
    fn mutated_cf_deployment(
        manifest_mutations in prop::collection::vec(mutation(), 1..4),
        cloud_config_mutations in prop::collection::vec(mutation(), 0..2),
    ) {
        let manifest = mutated(&CF_MANIFEST, &manifest_mutations);
        let cloud_config = mutated(&CF_CLOUD_CONFIG, &cloud_config_mutations);
        check_deployment(&manifest, &cloud_config);
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// (c) Arbitrary text through the YAML parser, then validation.
    #[test]
    fn arbitrary_text(text in prop_oneof![
        any::<String>(),
        "[a-z_:{}\\[\\]\\-,&*!|>'\"#%@ \n0-9.]{0,200}",
        prop::collection::vec(any::<u8>(), 0..200)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]) {
        if let Ok(value) = kubosh_base::yaml::parse_value(&text, "random") {
            check_all(&value);
        }
    }

    /// (c) The base manifest's text with bytes changed, through the YAML parser.
    #[test]
    fn damaged_yaml_text(edits in prop::collection::vec((any::<Index>(), any::<u8>(), 0u8..3), 1..6)) {
        let mut bytes = BASE_MANIFEST.0.clone().into_bytes();
        for (at, byte, kind) in &edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 => bytes.insert(i, *byte),
                1 if i < bytes.len() => { bytes.remove(i); }
                _ if i < bytes.len() => bytes[i] = *byte,
                _ => {}
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(value) = kubosh_base::yaml::parse_value(&text, "damaged") {
            check_all(&value);
        }
    }
}

#[test]
fn the_unmutated_documents_are_valid() {
    assert!(validate::deployment(&BASE_MANIFEST.1, &BASE_CLOUD_CONFIG).is_ok());
    assert!(validate::init_manifest(&BASE_INIT).is_ok());
    // cf-deployment without its bosh-lite ops has exactly two errors (see real_world.rs).
    let problems = validate::deployment(&CF_MANIFEST, &CF_CLOUD_CONFIG).unwrap_err();
    check_errors(&problems, &CF_MANIFEST, Some(&CF_CLOUD_CONFIG));
}
