//! The properties a link exposes (`links/link_helpers.rb#process_link_properties`).

use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::release::PropertyDefinition;

/// The properties a provided link exposes: each declared dotted name (`a.b.c`) looked up in
/// the job's properties, else the job spec's default (`null` when the spec defines the
/// property without a default), nested back by its dots (`{a: {b: {c: v}}}`).
///
/// A name neither set in the job's properties nor defined in the job spec is an error, in the
/// Director's words ("Link property a.b in template web is not defined in release spec");
/// every such name is reported.
pub fn link_properties(
    job_properties: &Value,
    names: &[String],
    definitions: &IndexMap<String, PropertyDefinition>,
    job_name: &str,
) -> Result<Value, Vec<String>> {
    let mut mapped = Map::new();
    let mut errors = Vec::new();
    for name in names {
        let path: Vec<&str> = name.split('.').collect();
        let value = match find(job_properties, &path) {
            Some(v) => v.clone(),
            None => match definitions.get(name) {
                Some(def) => def.default.clone().unwrap_or(Value::Null),
                None => {
                    errors.push(format!(
                        "Link property {name} in template {job_name} is not defined in release spec"
                    ));
                    continue;
                }
            },
        };
        insert(&mut mapped, &path, value);
    }
    if errors.is_empty() {
        Ok(Value::Object(mapped))
    } else {
        Err(errors)
    }
}

/// The value at `path`, if every step is a key of a mapping (a present `null` counts).
fn find<'a>(properties: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut node = properties;
    for key in path {
        node = node.as_object()?.get(*key)?;
    }
    Some(node)
}

/// Sets `value` at `path`, creating mappings on the way (and replacing non-mappings, as
/// BOSH's `update_mapped_properties` would fail to index them).
fn insert(root: &mut Map<String, Value>, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = root;
    for key in parents {
        let entry = node
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        node = entry.as_object_mut().expect("just made a mapping");
    }
    node.insert(last.to_string(), value);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn defs(pairs: &[(&str, Option<Value>)]) -> IndexMap<String, PropertyDefinition> {
        pairs
            .iter()
            .map(|(n, d)| {
                (
                    n.to_string(),
                    PropertyDefinition {
                        default: d.clone(),
                        ..Default::default()
                    },
                )
            })
            .collect()
    }

    #[test]
    fn set_values_win_over_defaults_and_nest_by_dots() {
        let props = json!({"db": {"port": 5432, "user": null}});
        let names = ["db.port", "db.user", "db.tls.enabled", "plain"].map(String::from);
        let d = defs(&[
            ("db.port", Some(json!(1))),
            ("db.tls.enabled", Some(json!(false))),
            ("plain", None),
        ]);
        let v = link_properties(&props, &names, &d, "pg").unwrap();
        assert_eq!(
            v,
            json!({"db": {"port": 5432, "user": null, "tls": {"enabled": false}}, "plain": null})
        );
    }

    #[test]
    fn undefined_names_are_all_reported() {
        let names = ["a", "b.c", "d"].map(String::from);
        let d = defs(&[("d", None)]);
        let e = link_properties(&json!({}), &names, &d, "web").unwrap_err();
        assert_eq!(
            e,
            [
                "Link property a in template web is not defined in release spec",
                "Link property b.c in template web is not defined in release spec",
            ]
        );
    }

    #[test]
    fn no_names_give_an_empty_mapping() {
        assert_eq!(
            link_properties(&json!(null), &[], &IndexMap::new(), "j").unwrap(),
            json!({})
        );
    }
}
