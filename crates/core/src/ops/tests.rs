//! Unit tests for pointers-in-action, operations and their error texts (go-patch's own
//! expectations where it has them).

use serde_json::{Value, json};

use super::*;

fn doc(text: &str) -> Value {
    kubosh_base::yaml::parse_value(text, "doc").unwrap()
}

fn apply(document: &str, ops: &str) -> Result<Value, String> {
    let mut d = doc(document);
    let file = OpsFile::parse(ops, "ops.yml").map_err(|e| e.to_string())?;
    file.apply(&mut d).map_err(|e| e.to_string())?;
    Ok(d)
}

fn replace(document: &str, path: &str, value: &str) -> Result<Value, String> {
    apply(
        document,
        &format!("- type: replace\n  path: '{path}'\n  value: {value}\n"),
    )
}

fn remove(document: &str, path: &str) -> Result<Value, String> {
    apply(document, &format!("- type: remove\n  path: '{path}'\n"))
}

/// The go-patch part of an apply error.
fn cause(err: String) -> String {
    let prefix = "Error 'operation [0] in ops.yml failed': ";
    err.strip_prefix(prefix)
        .map(str::to_string)
        .unwrap_or_else(|| panic!("unexpected error shape: {err}"))
}

#[test]
fn replaces_map_keys_and_requires_them() {
    assert_eq!(
        replace("a: 1\nb: 2\n", "/a", "10").unwrap(),
        json!({"a": 10, "b": 2})
    );
    assert_eq!(
        cause(replace("c: 1\nb: 2\n", "/x", "1").unwrap_err()),
        "Expected to find a map key 'x' for path '/x' (found map keys: 'b', 'c')"
    );
    assert_eq!(
        cause(replace("a: {}\n", "/a/x", "1").unwrap_err()),
        "Expected to find a map key 'x' for path '/a/x' (found no other map keys)"
    );
    assert_eq!(replace("a: 1\n", "", "{b: 2}").unwrap(), json!({"b": 2}));
}

#[test]
fn optional_keys_create_maps_and_arrays() {
    assert_eq!(
        replace("a: 1\n", "/b?/c/d", "x").unwrap(),
        json!({"a": 1, "b": {"c": {"d": "x"}}})
    );
    assert_eq!(
        replace("a: 1\n", "/b?/-", "x").unwrap(),
        json!({"a": 1, "b": ["x"]})
    );
    assert_eq!(
        replace("a: 1\n", "/b?/name=z/v", "x").unwrap(),
        json!({"a": 1, "b": [{"name": "z", "v": "x"}]})
    );
    assert_eq!(
        cause(replace("a: 1\n", "/b?/0", "x").unwrap_err()),
        "Expected to find key, matching index or after last index token at path '/b?/0'"
    );
    // Existing keys are kept in place, new ones go last.
    let v = replace("a: 1\nb: 2\n", "/a?", "3").unwrap();
    assert_eq!(serde_json::to_string(&v).unwrap(), r#"{"a":3,"b":2}"#);
}

#[test]
fn array_indexes() {
    assert_eq!(replace("[1, 2, 3]", "/0", "9").unwrap(), json!([9, 2, 3]));
    assert_eq!(replace("[1, 2, 3]", "/-1", "9").unwrap(), json!([1, 2, 9]));
    assert_eq!(replace("[1, 2, 3]", "/-3", "9").unwrap(), json!([9, 2, 3]));
    assert_eq!(
        cause(replace("[1, 2, 3]", "/3", "9").unwrap_err()),
        "Expected to find array index '3' but found array of length '3' for path '/3'"
    );
    assert_eq!(
        cause(replace("[1, 2, 3]", "/-4", "9").unwrap_err()),
        "Expected to find array index '-4' but found array of length '3' for path '/-4'"
    );
    assert_eq!(replace("[1, 2]", "/-", "9").unwrap(), json!([1, 2, 9]));
    assert_eq!(
        cause(replace("a: 1\n", "/-", "9").unwrap_err()),
        "Expected to find an array at path '/-' but found 'map[interface {}]interface {}'"
    );
    assert_eq!(
        cause(replace("a: [1]\n", "/a/0/b", "9").unwrap_err()),
        "Expected to find a map at path '/a/0/b' but found 'int'"
    );
    assert_eq!(
        cause(replace("a: x\n", "/a/0", "9").unwrap_err()),
        "Expected to find an array at path '/a/0' but found 'string'"
    );
}

#[test]
fn modifiers_move_and_insert() {
    assert_eq!(
        replace("[1, 2, 3]", "/0:next", "9").unwrap(),
        json!([1, 9, 3])
    );
    assert_eq!(
        replace("[1, 2, 3]", "/2:prev", "9").unwrap(),
        json!([1, 9, 3])
    );
    assert_eq!(
        replace("[1, 2, 3]", "/0:before", "9").unwrap(),
        json!([9, 1, 2, 3])
    );
    assert_eq!(
        replace("[1, 2, 3]", "/0:after", "9").unwrap(),
        json!([1, 9, 2, 3])
    );
    assert_eq!(
        replace("[1, 2, 3]", "/-1:after", "9").unwrap(),
        json!([1, 2, 3, 9])
    );
    assert_eq!(
        replace("[1, 2, 3]", "/0:next:before", "9").unwrap(),
        json!([1, 9, 2, 3])
    );
    assert_eq!(
        replace("[{name: a}, {name: b}]", "/name=b:before", "{name: c}").unwrap(),
        json!([{"name": "a"}, {"name": "c"}, {"name": "b"}])
    );
    assert_eq!(
        replace("[{name: a}, {name: b}]", "/name=a:after", "{name: c}").unwrap(),
        json!([{"name": "a"}, {"name": "c"}, {"name": "b"}])
    );
    assert_eq!(
        replace("[{name: a, v: 1}, {name: b, v: 2}]", "/name=a:next/v", "9").unwrap(),
        json!([{"name": "a", "v": 1}, {"name": "b", "v": 9}])
    );
    assert_eq!(
        cause(replace("[1, 2, 3]", "/0:before:prev", "9").unwrap_err()),
        "Expected to not find any modifiers after 'before' modifier, but found modifier 'patch.PrevModifier'"
    );
    assert_eq!(
        cause(replace("[1, 2, 3]", "/2:next", "9").unwrap_err()),
        "Expected to find array index '3' but found array of length '3' for path '/2:next'"
    );
    assert_eq!(
        cause(remove("[1, 2, 3]", "/0:after").unwrap_err()),
        "Expected to find one of the following modifiers: 'prev', 'next', but found modifier 'patch.AfterModifier'"
    );
}

#[test]
fn matching_items() {
    let d = "jobs:\n- name: a\n  v: 1\n- name: b\n  v: 2\n- name: b\n- name: 7\n";
    assert_eq!(
        replace(d, "/jobs/name=a/v", "9").unwrap()["jobs"][0],
        json!({"name": "a", "v": 9})
    );
    assert_eq!(
        cause(replace(d, "/jobs/name=b/v", "9").unwrap_err()),
        "Expected to find exactly one matching array item for path '/jobs/name=b' but found 2"
    );
    assert_eq!(
        cause(replace(d, "/jobs/name=z/v", "9").unwrap_err()),
        "Expected to find exactly one matching array item for path '/jobs/name=z' but found 0"
    );
    // Only string values match, as in Go (`7` the integer is not "7").
    assert!(replace(d, "/jobs/name=7/v", "9").is_err());
    assert_eq!(
        replace(d, "/jobs/name=z?/v", "9").unwrap()["jobs"][4],
        json!({"name": "z", "v": 9})
    );
    assert_eq!(
        replace(d, "/jobs/name=z?", "{name: z, w: 1}").unwrap()["jobs"][4],
        json!({"name": "z", "w": 1})
    );
    assert_eq!(
        replace(d, "/jobs/name=a", "{name: q}").unwrap()["jobs"][0],
        json!({"name": "q"})
    );
    assert_eq!(
        cause(replace("jobs: {}\n", "/jobs/name=a", "1").unwrap_err()),
        "Expected to find an array at path '/jobs/name=a' but found 'map[interface {}]interface {}'"
    );
    // Optionality carries to the right and shows once in paths.
    assert_eq!(
        cause(replace("a: []\n", "/a/name=x?/b/0", "1").unwrap_err()),
        "Expected to find key, matching index or after last index token at path '/a/name=x?/b/0'"
    );
}

#[test]
fn escapes_in_paths() {
    let d = "a/b: 1\n\"c~d\": 2\n\"e:f\": 3\n";
    assert_eq!(replace(d, "/a~1b", "9").unwrap()["a/b"], json!(9));
    assert_eq!(replace(d, "/c~0d", "9").unwrap()["c~d"], json!(9));
    assert_eq!(replace(d, "/e~7f", "9").unwrap()["e:f"], json!(9));
    assert_eq!(
        cause(replace(d, "/x~1y", "9").unwrap_err()),
        "Expected to find a map key 'x/y' for path '/x~1y' (found map keys: 'a/b', 'c~d', 'e:f')"
    );
}

#[test]
fn removes() {
    let d = "a: 1\nb: [1, 2, 3]\nc: [{name: x}, {name: q}]\nd: 4\n";
    let v = remove(d, "/a").unwrap();
    assert_eq!(serde_json::to_string(&v).unwrap().find("\"b\""), Some(1));
    assert_eq!(
        v.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["b", "c", "d"]
    );
    assert_eq!(remove(d, "/b/1").unwrap()["b"], json!([1, 3]));
    assert_eq!(remove(d, "/b/-1").unwrap()["b"], json!([1, 2]));
    assert_eq!(remove(d, "/c/name=x").unwrap()["c"], json!([{"name": "q"}]));
    assert_eq!(remove(d, "/c/name=z?").unwrap(), doc(d));
    assert_eq!(remove(d, "/zz?/y").unwrap(), doc(d));
    assert_eq!(
        cause(remove(d, "/zz").unwrap_err()),
        "Expected to find a map key 'zz' for path '/zz' (found map keys: 'a', 'b', 'c', 'd')"
    );
    assert_eq!(
        cause(remove(d, "/c/name=z").unwrap_err()),
        "Expected to find exactly one matching array item for path '/c/name=z' but found 0"
    );
    assert_eq!(
        cause(remove(d, "/b/-").unwrap_err()),
        "Expected to not find token 'patch.AfterLastIndexToken' at path '/b/-'"
    );
    assert_eq!(
        cause(remove(d, "").unwrap_err()),
        "Cannot remove entire document"
    );
}

#[test]
fn test_operations() {
    let d = "a: {b: [1, 2]}\n";
    apply(d, "- type: test\n  path: /a/b/0\n  value: 1\n").unwrap();
    apply(d, "- type: test\n  path: /a/b\n  value: [1, 2]\n").unwrap();
    assert_eq!(
        cause(apply(d, "- type: test\n  path: /a/b/0\n  value: 2\n").unwrap_err()),
        "Found value does not match expected value"
    );
    // 1 and 1.0 differ, as reflect.DeepEqual(int, float64) does.
    assert!(apply(d, "- type: test\n  path: /a/b/0\n  value: 1.0\n").is_err());
    apply(d, "- type: test\n  path: /a/c\n  absent: true\n").unwrap();
    apply(d, "- type: test\n  path: /a/b/5\n  absent: true\n").unwrap();
    assert_eq!(
        cause(apply(d, "- type: test\n  path: /a/b\n  absent: true\n").unwrap_err()),
        "Expected to not find '/a/b'"
    );
    assert_eq!(
        cause(apply(d, "- type: test\n  path: /x/y\n  absent: true\n").unwrap_err()),
        "Expected to find a map key 'x' for path '/x' (found map keys: 'a')"
    );
}

#[test]
fn build_errors_render_the_operation_like_go_patch() {
    let err = |ops: &str| OpsFile::parse(ops, "ops.yml").unwrap_err().to_string();
    assert_eq!(
        err("- type: op\n  path: abc\n  value: {a: 1}\n"),
        "Building ops: Unknown operation [0] with type 'op' within\n{\n  \"Type\": \"op\",\n  \"Path\": \"abc\",\n  \"Value\": \"<redacted>\",\n  \"Error\": \"operation [0] in ops.yml failed\"\n}"
    );
    assert_eq!(
        err("- type: replace\n  path: /a\n- type: replace\n"),
        "Building ops: Replace operation [0]: Missing value within\n{\n  \"Type\": \"replace\",\n  \"Path\": \"/a\",\n  \"Error\": \"operation [0] in ops.yml failed\"\n}"
    );
    assert!(
        err("- type: replace\n  path: abc\n  value: 1\n").starts_with(
            "Building ops: Replace operation [0]: Invalid path: Expected to start with '/' within\n"
        )
    );
    assert!(
        err("- type: remove\n  path: /a\n  value: 1\n")
            .starts_with("Building ops: Remove operation [0]: Cannot specify value within\n")
    );
    assert!(
        err("- type: remove\n")
            .starts_with("Building ops: Remove operation [0]: Missing path within\n")
    );
    assert!(
        err("- type: test\n  path: /a\n")
            .starts_with("Building ops: Test operation [0]: Missing value or absent within\n")
    );
    // An explicit null value counts as no value, as with yaml.v2 pointers.
    assert!(err("- type: replace\n  path: /a\n  value: ~\n").contains("Missing value"));
    assert!(err("- path: /a\n").starts_with("Building ops: Unknown operation [0] with type ''"));
    assert!(
        err("- type: replace\n  path: /a\n  value: 1\n- nope\n")
            .starts_with("Deserializing ops file 'ops.yml': ")
    );
    assert!(err("type: replace\n").starts_with("Deserializing ops file 'ops.yml': "));
    assert!(err("- type: [replace]\n").starts_with("Deserializing ops file 'ops.yml': "));
}

#[test]
fn apply_errors_name_the_file_and_operation() {
    let ops = "- type: replace\n  path: /a\n  value: 1\n- type: replace\n  path: /x\n  value: 1\n";
    let mut d = doc("a: 0\n");
    let err = OpsFile::parse(ops, "dir/my-ops.yml")
        .unwrap()
        .apply(&mut d)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Error 'operation [1] in dir/my-ops.yml failed': Expected to find a map key 'x' for path '/x' (found map keys: 'a')"
    );
    match err {
        OpsError::Apply { index, origin, .. } => {
            assert_eq!((index, origin.as_str()), (1, "dir/my-ops.yml"))
        }
        other => panic!("{other:?}"),
    }
    // Unchanged on error, though op 0 had succeeded.
    assert_eq!(d, json!({"a": 0}));

    // An op's own `error:` text is kept inside the CLI's.
    let err = apply(
        "a: 0\n",
        "- type: replace\n  path: /x\n  value: 1\n  error: needs x\n",
    )
    .unwrap_err();
    assert_eq!(
        err,
        "Error 'operation [0] in ops.yml failed': Error 'needs x': Expected to find a map key 'x' for path '/x' (found map keys: 'a')"
    );
}

#[test]
fn extra_keys_are_ignored_and_empty_files_are_fine() {
    let v = apply(
        "releases: []\n",
        "- name: cpi\n  release: x\n  type: replace\n  path: /releases/-\n  value: {name: x}\n",
    )
    .unwrap();
    assert_eq!(v, json!({"releases": [{"name": "x"}]}));
    assert!(OpsFile::parse("", "empty.yml").unwrap().is_empty());
    assert_eq!(OpsFile::parse("---\n[]\n", "e.yml").unwrap().len(), 0);
}

#[test]
fn ops_apply_in_sequence_across_files() {
    let a = OpsFile::parse("- {type: replace, path: /x?, value: 1}\n", "a.yml").unwrap();
    let b = OpsFile::parse("- {type: replace, path: /x, value: 2}\n", "b.yml").unwrap();
    let mut d = json!({});
    apply_all(&[a.clone(), b], &mut d).unwrap();
    assert_eq!(d, json!({"x": 2}));
    let c = OpsFile::parse("- {type: remove, path: /y}\n", "c.yml").unwrap();
    let mut d = json!({});
    let err = apply_all(&[a, c], &mut d).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("Error 'operation [0] in c.yml failed'")
    );
    assert_eq!(d, json!({}));
}

#[test]
fn replace_values_are_not_shared_between_applications() {
    let file = OpsFile::parse("- {type: replace, path: /a/-, value: {k: v}}\n", "o.yml").unwrap();
    let mut d = json!({"a": []});
    file.apply(&mut d).unwrap();
    file.apply(&mut d).unwrap();
    assert_eq!(d, json!({"a": [{"k": "v"}, {"k": "v"}]}));
}

#[test]
fn find_for_int_path() {
    let d = doc("a:\n  b: [x, z]\n  items: [{name: nn, v: 1}]\n");
    let f = |p: &str| find(&d, &p.parse().unwrap());
    assert_eq!(f("/a/b/1").unwrap(), json!("z"));
    assert_eq!(f("").unwrap(), d);
    assert_eq!(f("/a/items/name=nn/v").unwrap(), json!(1));
    assert_eq!(f("/a/c?").unwrap(), Value::Null);
    assert_eq!(f("/a/c?/d").unwrap(), Value::Null);
    assert_eq!(f("/a/items/name=m?").unwrap(), json!({"name": "m"}));
    assert_eq!(
        f("/a/b/-").unwrap_err().to_string(),
        "Expected not to find after last index token in path '/a/b/-' (not supported in find operations)"
    );
    assert_eq!(
        f("/a/c?/0").unwrap_err().to_string(),
        "Expected to find key or matching index token at path '/a/c?/0'"
    );
    assert_eq!(
        f("/a/x").unwrap_err().to_string(),
        "Expected to find a map key 'x' for path '/a/x' (found map keys: 'b', 'items')"
    );
}

#[test]
fn deep_paths_are_bounded_and_do_not_overflow() {
    let deep = "/a?".repeat(MAX_POINTER_STEPS);
    let mut d = json!({});
    let ops = json!([{"type": "replace", "path": deep, "value": "((x))"}]);
    OpsFile::from_value(ops, "deep.yml")
        .unwrap()
        .apply(&mut d)
        .unwrap();
    let mut vars = Vars::new();
    vars.add_var("x", json!("y"));
    let out = interpolate(&d, &vars, MissingVars::Error).unwrap();
    assert_eq!(
        find(&out, &deep.replace('?', "").parse().unwrap()).unwrap(),
        json!("y")
    );
    assert_eq!(placeholders(&d), ["x"]);

    let too_deep = format!("{deep}/a");
    let err =
        OpsFile::from_value(json!([{"type": "remove", "path": too_deep}]), "deep.yml").unwrap_err();
    assert!(
        err.to_string()
            .contains("Invalid path: Expected at most 512 path steps but found 513"),
        "{err}"
    );
}
