//! Named cloud configs merged into one, as the Director merges them before a deploy: the
//! `azs`, `vm_types`, `disk_types`, `networks` and `vm_extensions` of every config one after
//! the other, `compilation` from the one config that defines it. A name defined by two
//! configs is an error naming both (the Director would only find the duplicate in the merged
//! document); the merged document is then validated like a single cloud config.

use std::borrow::Borrow;

use serde_json::{Map, Value};

use super::problem::{Document, Path, Problems};

/// The sections whose lists are joined.
const JOINED: [&str; 5] = ["azs", "vm_types", "disk_types", "networks", "vm_extensions"];

/// `configs` (each its name and document, in the order to join them) as one cloud config.
/// One config is returned as it is. Any other top-level key is kept from the first config
/// that has it (the validator then says what it thinks of it).
pub fn merge_cloud_configs<N: AsRef<str>, D: Borrow<Value>>(
    configs: &[(N, D)],
) -> Result<Value, Problems> {
    if let [(_, only)] = configs {
        return Ok(only.borrow().clone());
    }
    let mut problems = Problems::default();
    let mut merged = Map::new();
    for section in JOINED {
        merged.insert(section.to_string(), Value::Array(Vec::new()));
    }
    // Per section: each name with the config and index that defined it first.
    let mut defined: Vec<(&str, String, &str, usize)> = Vec::new();
    let mut compilation: Option<&str> = None;
    for (config, document) in configs {
        let config = config.as_ref();
        let Some(document) = document.borrow().as_object() else {
            problems.error(
                Document::CloudConfig,
                Path::root(),
                format!("cloud config '{config}' is not a map"),
            );
            continue;
        };
        for (key, value) in document {
            if let Some(section) = JOINED.iter().find(|s| **s == key) {
                let Some(items) = value.as_array() else {
                    if !value.is_null() {
                        problems.error(
                            Document::CloudConfig,
                            Path::root().key(section),
                            format!("cloud config '{config}': '{section}' must be a list"),
                        );
                    }
                    continue;
                };
                for (i, item) in items.iter().enumerate() {
                    if let Some(name) = item.get("name").and_then(Value::as_str) {
                        let first = (defined.iter())
                            .find(|(s, n, c, _)| s == section && n == name && *c != config);
                        match first {
                            Some((_, _, other, j)) => problems.error(
                                Document::CloudConfig,
                                Path::root().key(section),
                                format!(
                                    "{section} '{name}' is defined in cloud config '{other}' ({section}[{j}]) and in cloud config '{config}' ({section}[{i}])"
                                ),
                            ),
                            None => defined.push((section, name.to_string(), config, i)),
                        }
                    }
                    if let Some(Value::Array(joined)) = merged.get_mut(*section) {
                        joined.push(item.clone());
                    }
                }
            } else if key == "compilation" && !value.is_null() {
                if let Some(other) = compilation {
                    problems.error(
                        Document::CloudConfig,
                        Path::root().key("compilation"),
                        format!(
                            "Cloud config 'compilation' key cannot be defined in multiple cloud configs ('{other}' and '{config}')"
                        ),
                    );
                    continue;
                }
                compilation = Some(config);
                merged.insert(key.clone(), value.clone());
            } else {
                merged.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
    }
    if problems.has_errors() {
        Err(problems)
    } else {
        Ok(Value::Object(merged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_are_joined_and_compilation_comes_from_its_one_config() {
        let a = json!({"azs": [{"name": "z1"}], "networks": [{"name": "default"}],
                       "compilation": {"workers": 2}});
        let b = json!({"azs": [{"name": "z2"}], "vm_types": [{"name": "small"}]});
        let merged = merge_cloud_configs(&[("a", &a), ("b", &b)]).unwrap();
        assert_eq!(
            merged,
            json!({"azs": [{"name": "z1"}, {"name": "z2"}], "vm_types": [{"name": "small"}],
                   "disk_types": [], "networks": [{"name": "default"}], "vm_extensions": [],
                   "compilation": {"workers": 2}})
        );
        assert_eq!(
            merge_cloud_configs(&[("a", &a)]).unwrap(),
            a,
            "one is kept as it is"
        );
    }

    #[test]
    fn a_name_in_two_configs_and_two_compilations_name_both_configs() {
        let a = json!({"vm_types": [{"name": "small"}], "compilation": {"workers": 1}});
        let b = json!({"vm_types": [{"name": "large"}, {"name": "small"}],
                       "compilation": {"workers": 2}});
        let problems = merge_cloud_configs(&[("a", &a), ("b", &b)])
            .unwrap_err()
            .to_string();
        assert!(
            problems.contains(
                "vm_types 'small' is defined in cloud config 'a' (vm_types[0]) and in cloud config 'b' (vm_types[1])"
            ),
            "{problems}"
        );
        assert!(
            problems.contains(
                "Cloud config 'compilation' key cannot be defined in multiple cloud configs ('a' and 'b')"
            ),
            "{problems}"
        );
        // Twice in one config is the validator's to say, with its path.
        let twice = json!({"vm_types": [{"name": "small"}, {"name": "small"}]});
        let other = json!({"azs": [{"name": "z1"}]});
        assert!(merge_cloud_configs(&[("a", &twice), ("b", &other)]).is_ok());
    }
}
