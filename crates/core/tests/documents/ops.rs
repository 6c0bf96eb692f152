//! Interpolation semantics (bosh-cli `director/template` expectations) and the real-world
//! fixtures under `../shared/fixtures/real-world/`.

use std::path::PathBuf;

use kubosh_base::yaml;
use kubosh_core::ops::{
    self, InterpolateOptions, InterpolationError, MissingVars, OpsFile, Vars, interpolate,
    interpolate_with, placeholders,
};
use proptest::prelude::*;
use serde_json::{Value, json};

fn doc(text: &str) -> Value {
    yaml::parse_value(text, "doc").unwrap()
}

fn vars(pairs: Value) -> Vars {
    match pairs {
        Value::Object(map) => Vars::from_map(map),
        _ => panic!("vars must be a map"),
    }
}

fn lenient(text: &str, v: Value) -> Value {
    interpolate(&doc(text), &vars(v), MissingVars::Leave).unwrap()
}

fn strict_err(text: &str, v: Value) -> String {
    interpolate(&doc(text), &vars(v), MissingVars::Error)
        .unwrap_err()
        .to_string()
}

#[test]
fn whole_placeholders_keep_the_value_type() {
    assert_eq!(lenient("((key))", json!({"key": "foo"})), json!("foo"));
    assert_eq!(lenient("(( key ))", json!({"key": "foo"})), json!("foo"));
    assert_eq!(lenient("((key ))", json!({"key": "foo"})), json!("foo"));
    assert_eq!(
        lenient(
            "a: ((n))\nb: ((m))\nc: ((l))\nd: ((z))\ne: ((!n))\n",
            json!({"n": 1, "m": {"x": [1]}, "l": [true], "z": null})
        ),
        json!({"a": 1, "b": {"x": [1]}, "c": [true], "d": null, "e": 1})
    );
    assert_eq!(lenient("((Ω))", json!({"Ω": "☃"})), json!("☃"));
    assert_eq!(
        lenient("((/director/dep/pw))", json!({"/director/dep/pw": "s"})),
        json!("s")
    );
}

#[test]
fn embedded_placeholders_are_text() {
    assert_eq!(
        lenient(
            "uri: nats://((user)):((!password))@((ip)):((port))\n",
            json!({"user": "nats", "password": "secret", "ip": "10.0.0.0", "port": 4222})
        ),
        json!({"uri": "nats://nats:secret@10.0.0.0:4222"})
    );
    assert_eq!(
        lenient("a: ((x)):((x))\n", json!({"x": "nats"})),
        json!({"a": "nats:nats"})
    );
    // Upstream replaces only the exact `((name))` spelling inside longer strings.
    assert_eq!(
        lenient("a: x (( y ))\n", json!({"y": "z"})),
        json!({"a": "x (( y ))"})
    );
}

#[test]
fn unsupported_embedded_types_fail_like_upstream() {
    let err = interpolate(
        &doc("a: e=((eulers_number))\n"),
        &vars(json!({"eulers_number": 2.717})),
        MissingVars::Leave,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid type 'float64' for value '2.717' and variable 'eulers_number'. Supported types for interpolation within a string are integers and strings."
    );
    let err = interpolate(
        &doc("a: x((m))\n"),
        &vars(json!({"m": {"k": [1, 2]}})),
        MissingVars::Leave,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid type 'map[interface {}]interface {}' for value 'map[k:[1 2]]' and variable 'm'. Supported types for interpolation within a string are integers and strings."
    );
    assert!(
        interpolate(
            &doc("a: x((b))\n"),
            &vars(json!({"b": true})),
            MissingVars::Leave
        )
        .unwrap_err()
        .to_string()
        .starts_with("Invalid type 'bool' for value 'true'")
    );
}

#[test]
fn sub_keys_and_indexes() {
    let v = json!({"cert": {"ca": "CA", "list": ["a", "b"], "0": "zero"}, "arr": ["x", "y"]});
    assert_eq!(
        lenient(
            "a: ((cert.ca))\nb: ((arr.1))\nc: ((cert.list.0))\nd: ((cert.0))\n",
            v.clone()
        ),
        json!({"a": "CA", "b": "y", "c": "a", "d": "zero"})
    );
    let err = interpolate(&doc("a: ((cert.nope))\n"), &vars(v), MissingVars::Leave).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Finding variable 'cert.nope': Expected to find a map key 'nope' for path '/nope' (found map keys: '0', 'ca', 'list')"
    );
    // A missing variable used with a sub-key is missing under its own name.
    assert_eq!(
        strict_err("a: ((gone.ca))\n", json!({})),
        "Expected to find variables: gone"
    );
}

#[test]
fn dotted_var_names_nest() {
    let mut v = Vars::new();
    v.add_var_arg("a.b=1").unwrap();
    assert_eq!(
        interpolate(&doc("x: ((a.b))\n"), &v, MissingVars::Error).unwrap(),
        json!({"x": 1})
    );
}

#[test]
fn keys_are_interpolated() {
    assert_eq!(
        lenient("((key)): ((key2))\n((key3)): 2\n", json!({"key3": "foo"})),
        json!({"((key))": "((key2))", "foo": 2})
    );
    assert_eq!(
        lenient("((k))_cpi: props\n", json!({"k": "aws"})),
        json!({"aws_cpi": "props"})
    );
    assert_eq!(
        lenient("((k)): v\n", json!({"k": null})),
        json!({"null": "v"})
    );
    assert!(
        interpolate(
            &doc("((k)): v\n"),
            &vars(json!({"k": [1]})),
            MissingVars::Leave
        )
        .is_err()
    );
}

#[test]
fn missing_variables_are_left_or_listed_once_sorted() {
    let text =
        "((key)): ((key2))\n((key3)): 2\ndup-key: ((key3))\n((key4))_array:\n- ((key_in_array))\n";
    assert_eq!(
        strict_err(text, json!({"key3": "foo"})),
        "Expected to find variables: key\nkey2\nkey4\nkey_in_array"
    );
    let out = interpolate_with(
        &doc(text),
        &vars(json!({"key3": "foo"})),
        &InterpolateOptions::default(),
    )
    .unwrap();
    assert_eq!(out.missing, ["key", "key2", "key4", "key_in_array"]);
    assert_eq!(out.value["dup-key"], json!("foo"));
}

#[test]
fn unused_variables() {
    let opts = InterpolateOptions {
        missing: MissingVars::Leave,
        error_on_unused: true,
    };
    let err = interpolate_with(
        &doc("((key2))"),
        &vars(json!({"key1": "1", "key2": "2", "key3": "3"})),
        &opts,
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "Expected to use variables: key1\nkey3");
    let both = InterpolateOptions {
        missing: MissingVars::Error,
        error_on_unused: true,
    };
    let err = interpolate_with(
        &doc("((key2))"),
        &vars(json!({"key1": "1", "key3": "3"})),
        &both,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Expected to find variables: key2\nExpected to use variables: key1\nkey3"
    );
    match err {
        InterpolationError::Variables { missing, unused } => {
            assert_eq!(missing, ["key2"]);
            assert_eq!(unused, ["key1", "key3"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn values_are_not_interpolated_again() {
    assert_eq!(
        lenient("a: ((x))\nb: pre-((x))\n", json!({"x": "((y))", "y": "no"})),
        json!({"a": "((y))", "b": "pre-((y))"})
    );
}

#[test]
fn variable_definitions() {
    let text = "\
cert: ((c.certificate))
pw: ((p))
variables:
- name: p
  type: password
- name: ca
  type: certificate
  options: {is_ca: true, common_name: ca}
- name: c
  type: certificate
  options: {ca: ca, common_name: ((ip))}
";
    // Found definitions are dropped from `variables`, the rest stay.
    let out = lenient(text, json!({"p": "secret", "ip": "10.0.0.1"}));
    assert_eq!(out["pw"], json!("secret"));
    assert_eq!(out["cert"], json!("((c.certificate))"));
    assert_eq!(
        out["variables"],
        json!([
            {"name": "ca", "type": "certificate", "options": {"is_ca": true, "common_name": "ca"}},
            {"name": "c", "type": "certificate", "options": {"ca": "ca", "common_name": "10.0.0.1"}}
        ])
    );
    // Definitions that are never used still count as missing.
    assert_eq!(
        strict_err(text, json!({"p": "secret", "ip": "10.0.0.1"})),
        "Expected to find variables: c\nca"
    );
    // A definition whose options need a missing variable is not reported itself (upstream).
    assert_eq!(
        strict_err(text, json!({"p": "secret"})),
        "Expected to find variables: ca\nip"
    );
}

#[test]
fn recursive_definitions_are_rejected() {
    let text = "\
variables:
- name: key1
  type: t
  options: {var: ((key2))}
- name: key2
  type: t
  options: {var: ((key1))}
";
    let err = strict_err(text, json!({}));
    assert_eq!(
        err,
        "Getting all variables from variable definitions sections: Interpolating variable 'key1' definition options: Finding variable 'key2': Interpolating variable 'key2' definition options: Finding variable 'key1': Detected recursion"
    );
    // Referencing the same variable twice is not recursion.
    let text = "\
top: ((t))
top2: ((t))
variables:
- name: key1
  type: t
  options: {a: ((o)), b: ((o))}
- name: key2
  type: t
  options: {var: ((key1))}
";
    interpolate(&doc(text), &Vars::new(), MissingVars::Leave).unwrap();
}

#[test]
fn substituted_definition_options_are_seen_by_later_lookups() {
    // Upstream interpolates definition options in place: once v9's options got v2's value
    // (itself a placeholder), resolving v1 -> v9 -> v1 is a cycle.
    let text = "\
variables:
- {name: v2, type: certificate, options: {cn: x}}
- {name: v9, type: password, options: {cn: ((v2))}}
- {name: v1, type: certificate, options: {cn: ((v9))}}
";
    let err = strict_err(text, json!({"v1": "a", "v2": "((v1))"}));
    assert_eq!(
        err,
        "Getting all variables from variable definitions sections: Interpolating variable 'v1' definition options: Finding variable 'v9': Interpolating variable 'v9' definition options: Finding variable 'v1': Detected recursion"
    );
}

#[test]
fn renamed_keys_win_over_unchanged_ones() {
    let out = lenient("((kk)): renamed\n((v1)): kept\n", json!({"kk": "((v1))"}));
    assert_eq!(out, json!({"((v1))": "renamed"}));
    let out = lenient("((v1)): kept\n((kk)): renamed\n", json!({"kk": "((v1))"}));
    assert_eq!(out, json!({"((v1))": "renamed"}));
}

#[test]
fn non_string_documents_pass_through() {
    assert_eq!(lenient("1234", json!({"key": "x"})), json!(1234));
    assert_eq!(lenient("(()", json!({})), json!("(()"));
}

#[test]
fn placeholders_are_listed_in_order_once() {
    let d = doc("a: ((x))\n((k)): [((!y.z)), ((x))]\nb: pre ((w)) and (( v ))\n");
    assert_eq!(placeholders(&d), ["x", "k", "y.z", "w", "v"]);
    assert_eq!(ops::variable_of("y.z"), "y");
}

// ---- real-world fixtures ----

fn fixture(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/real-world")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixture_doc(rel: &str) -> Value {
    yaml::parse_value(&fixture(rel), rel).unwrap()
}

fn ops_file(rel: &str) -> OpsFile {
    OpsFile::parse(&fixture(rel), rel).unwrap()
}

fn instances(d: &Value, group: &str) -> Option<i64> {
    ops::find(
        d,
        &format!("/instance_groups/name={group}/instances")
            .parse()
            .unwrap(),
    )
    .ok()?
    .as_i64()
}

#[test]
fn cf_deployment_bosh_lite_and_one_az() {
    let mut d = fixture_doc("cf-deployment/cf-deployment.yml");
    assert_eq!(instances(&d, "diego-cell"), Some(3));
    ops_file("cf-deployment/bosh-lite.yml")
        .apply(&mut d)
        .unwrap();
    ops_file("cf-deployment/scale-to-one-az.yml")
        .apply(&mut d)
        .unwrap();
    for group in [
        "nats",
        "diego-api",
        "uaa",
        "scheduler",
        "diego-cell",
        "router",
        "api",
    ] {
        assert_eq!(instances(&d, group), Some(1), "{group}");
    }
    let groups = d["instance_groups"].as_array().unwrap();
    assert!(
        groups.iter().all(|g| g["azs"] == json!(["z1"])),
        "every group in z1"
    );
    // Nothing from the ops files is left as an unexpanded pointer.
    let ph = placeholders(&d);
    assert!(ph.contains(&"system_domain".to_string()));
}

#[test]
fn cf_deployment_with_compiled_releases() {
    let mut d = fixture_doc("cf-deployment/cf-deployment.yml");
    ops_file("cf-deployment/use-compiled-releases.yml")
        .apply(&mut d)
        .unwrap();
    let releases = d["releases"].as_array().unwrap();
    assert!(releases.iter().any(|r| r.get("stemcell").is_some()));
}

fn bosh_director() -> Value {
    let mut d = fixture_doc("bosh-deployment/bosh.yml");
    for f in [
        "bosh-deployment/warden/cpi.yml",
        "bosh-deployment/jumpbox-user.yml",
    ] {
        ops_file(f).apply(&mut d).unwrap();
    }
    d
}

fn director_vars() -> Vars {
    let mut v = Vars::new();
    v.add_vars_file(
        "internal_ip: 192.168.56.6\ninternal_gw: 192.168.56.1\ninternal_cidr: 192.168.56.0/24\n",
        "vars.yml",
    )
    .unwrap();
    v.add_var_arg("director_name=bosh-lite").unwrap();
    v.add_var_arg("garden_host=127.0.0.1").unwrap();
    v
}

const GENERATED: [&str; 18] = [
    "admin_password",
    "blobstore_agent_password",
    "blobstore_ca",
    "blobstore_director_password",
    "blobstore_server_tls",
    "default_ca",
    "director_ssl",
    "hm_password",
    "jumpbox_ssh",
    "mbus_bootstrap_password",
    "mbus_bootstrap_ssl",
    "nats_ca",
    "nats_clients_director_tls",
    "nats_clients_health_monitor_tls",
    "nats_password",
    "nats_server_tls",
    "nats_sync_password",
    "postgres_password",
];

#[test]
fn bosh_deployment_on_warden_interpolates() {
    let d = bosh_director();
    let out = interpolate_with(&d, &director_vars(), &InterpolateOptions::default()).unwrap();
    assert_eq!(out.missing, GENERATED);
    assert!(out.unused.is_empty(), "{:?}", out.unused);
    let v = &out.value;
    assert_eq!(v["name"], json!("bosh"));
    assert_eq!(
        v["cloud_provider"]["mbus"],
        json!("https://mbus:((mbus_bootstrap_password))@192.168.56.6:6868")
    );
    assert_eq!(
        v["cloud_provider"]["properties"]["warden_cpi"]["warden"]["connect_address"],
        json!("127.0.0.1:7777")
    );
    let rendered = yaml::to_string(v).unwrap();
    for name in ["((internal_ip))", "((garden_host))", "((director_name))"] {
        assert!(!rendered.contains(name), "{name} left over");
    }
    for name in [
        "((director_ssl.ca))",
        "((jumpbox_ssh.public_key))",
        "((admin_password))",
    ] {
        assert!(rendered.contains(name), "{name} should stay");
    }
    // Definitions' options got the provided values, and no definition was removed.
    let defs = v["variables"].as_array().unwrap();
    assert_eq!(defs.len(), 18);
    let ssl = defs.iter().find(|d| d["name"] == "director_ssl").unwrap();
    assert_eq!(ssl["options"]["common_name"], json!("192.168.56.6"));

    let err = interpolate(&d, &director_vars(), MissingVars::Error).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Expected to find variables: {}", GENERATED.join("\n"))
    );
}

#[test]
fn bosh_deployment_with_all_vars_drops_definitions() {
    let d = bosh_director();
    let mut v = director_vars();
    for name in GENERATED {
        v.add_var(
            name,
            json!({"ca": "C", "certificate": "X", "private_key": "K", "public_key": "P"}),
        );
    }
    // Passwords embedded in URLs must be strings.
    for name in GENERATED.iter().filter(|n| n.ends_with("password")) {
        v.add_var(name, json!("pw"));
    }
    let out = interpolate(&d, &v, MissingVars::Error).unwrap();
    assert_eq!(out["variables"], json!([]));
    assert!(placeholders(&out).is_empty(), "{:?}", placeholders(&out));
}

#[test]
fn ops_errors_on_real_files_name_the_file() {
    let mut d = fixture_doc("zookeeper-release/zookeeper.yml");
    let err = ops_file("cf-deployment/scale-to-one-az.yml")
        .apply(&mut d)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "Error 'operation [0] in cf-deployment/scale-to-one-az.yml failed': Expected to find exactly one matching array item for path '/instance_groups/name=nats' but found 0"
        ),
        "{err}"
    );
}

// ---- no panics ----

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-".to_string()),
        Just("name=a".to_string()),
        Just("name=b?".to_string()),
        Just("a?".to_string()),
        Just("b".to_string()),
        (-4i64..4).prop_map(|i| i.to_string()),
        Just("0:before".to_string()),
        Just("1:after:prev".to_string()),
        Just("0:next".to_string()),
        Just("x:bogus".to_string()),
        "[a-z=?~:0-9-]{0,4}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(segment(), 0..5)
        .prop_map(|s| s.iter().map(|p| format!("/{p}")).collect::<String>())
}

proptest! {
    #[test]
    fn random_ops_never_panic(p in path(), kind in 0..3usize, name in "[a-z.!0-9 ]{0,6}") {
        let base = doc("a: [1, {name: a, b: [2]}, [3]]\nb: {a: x, name: a}\nlist: [{name: a}, {name: b}]\n");
        let mut d = base.clone();
        let op = match kind {
            0 => json!([{"type": "replace", "path": p, "value": {"v": 1}}]),
            1 => json!([{"type": "remove", "path": p}]),
            _ => json!([{"type": "test", "path": p, "absent": true}]),
        };
        if let Ok(file) = OpsFile::from_value(op, "prop.yml")
            && file.apply(&mut d).is_err()
        {
            prop_assert_eq!(&d, &base);
        }
        if let Ok(ptr) = p.parse() {
            let _ = ops::find(&base, &ptr);
        }
        let text = format!("k: (({name}))\n(({name})): x(({name}))\n");
        let _ = interpolate(&doc(&text), &vars(json!({"a": {"b": [1]}, "b": 2.5})), MissingVars::Error);
    }
}

#[test]
fn shared_dependencies_cannot_blow_up() {
    let mut text = String::from("variables:\n");
    for i in 0..40 {
        text.push_str(&format!(
            "- {{name: d{i}, type: t, options: {{a: ((d{n})), b: ((d{n})), c: ((d{n}))}}}}\n",
            n = i + 1
        ));
    }
    let started = std::time::Instant::now();
    let err = interpolate(&doc(&text), &Vars::new(), MissingVars::Leave).unwrap_err();
    assert!(
        err.to_string().contains("refer to each other too deeply"),
        "{err}"
    );
    assert!(started.elapsed().as_secs() < 10);
}
