//! CPI configs: each on its own (names unique and set, a type for each), several merged as
//! one (a CPI defined by two is an error naming both), and the cloud config's AZs checked
//! against them (an AZ may only name a CPI that is defined).

use std::borrow::Borrow;

use serde_json::Value;

use super::problem::{Document, Path, Problems};
use super::{CPI_CONFIG_SHAPE, Validated, finish, typed};
use crate::manifest::{CloudConfig, CpiConfig};

/// Validates a CPI config on its own.
pub fn cpi_config(value: &Value) -> Result<Validated<CpiConfig>, Problems> {
    let mut problems = Problems::default();
    let config: Option<CpiConfig> =
        typed(&CPI_CONFIG_SHAPE, Document::CpiConfig, value, &mut problems);
    if let Some(config) = &config {
        check(config, &mut problems);
    }
    finish(config, problems)
}

/// The longest CPI name: with `cid.` in front it is still a Kubernetes annotation name.
const MAX_NAME: usize = 50;

/// Whether `name` can name a CPI.
fn is_cpi_name(name: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    name.len() <= MAX_NAME
        && alnum(name.chars().next())
        && alnum(name.chars().last())
        && (name.chars()).all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn check(config: &CpiConfig, problems: &mut Problems) {
    let cpis = Path::root().key("cpis");
    for (i, cpi) in config.cpis.iter().enumerate() {
        let at = cpis.index(i);
        if cpi.name.trim().is_empty() {
            problems.error(Document::CpiConfig, at.key("name"), "must not be empty");
        } else if !is_cpi_name(&cpi.name) {
            problems.error(
                Document::CpiConfig,
                at.key("name"),
                format!(
                    "CPI name '{}' must be at most {MAX_NAME} letters, digits, '-', '_' or '.', starting and ending with a letter or digit (it names what the CPI made in records and annotations)",
                    cpi.name
                ),
            );
        } else if let Some(j) = config.cpis[..i].iter().position(|c| c.name == cpi.name) {
            problems.error(
                Document::CpiConfig,
                at.key("name"),
                format!("CPI '{}' is defined twice (also cpis[{j}])", cpi.name),
            );
        }
        if cpi.kind.trim().is_empty() {
            problems.error(
                Document::CpiConfig,
                at.key("type"),
                "must name an installed CPI",
            );
        }
        for (k, from) in cpi.migrated_from.iter().enumerate() {
            let current = config.cpis.iter().any(|c| c.name == from.name);
            if current {
                problems.error(
                    Document::CpiConfig,
                    at.key("migrated_from").index(k).key("name"),
                    format!(
                        "CPI '{}' cannot be migrated from '{}': that name is a CPI of this config",
                        cpi.name, from.name
                    ),
                );
            }
        }
    }
}

/// `configs` (each its name and document, in name order) as one CPI config; every problem of
/// every config at once, each naming its config.
pub fn merge_cpi_configs<N: AsRef<str>, D: Borrow<Value>>(
    configs: &[(N, D)],
) -> Result<Validated<CpiConfig>, Problems> {
    let mut problems = Problems::default();
    let mut warnings = Problems::default();
    let mut merged = CpiConfig::default();
    // The config that defined each CPI name first.
    let mut defined_by: Vec<(String, &str)> = Vec::new();
    for (name, document) in configs {
        let name = name.as_ref();
        let about = format!("cpi config '{name}'");
        match cpi_config(document.borrow()) {
            Err(p) => problems.extend(p.about(&about)),
            Ok(v) => {
                warnings.extend(v.warnings.about(&about));
                for (i, cpi) in v.document.cpis.into_iter().enumerate() {
                    if let Some((_, other)) = defined_by.iter().find(|(n, _)| *n == cpi.name) {
                        problems.error(
                            Document::CpiConfig,
                            Path::root().key("cpis").index(i).key("name"),
                            format!(
                                "CPI '{}' is defined in cpi config '{other}' and in cpi config '{name}'",
                                cpi.name
                            ),
                        );
                        continue;
                    }
                    defined_by.push((cpi.name.clone(), name));
                    merged.cpis.push(cpi);
                }
            }
        }
    }
    if problems.has_errors() {
        return Err(problems);
    }
    Ok(Validated {
        document: merged,
        warnings,
    })
}

/// Problems of the cloud config's AZs that name a CPI `cpis` does not define.
pub fn azs_on_cpis(cloud: &CloudConfig, cpis: &CpiConfig) -> Problems {
    let mut problems = Problems::default();
    for (i, az) in cloud.azs.iter().enumerate() {
        let Some(cpi) = &az.cpi else {
            continue;
        };
        if cpis.find(cpi).is_none() {
            problems.error(
                Document::CloudConfig,
                Path::root().key("azs").index(i).key("cpi"),
                format!(
                    "AZ '{}' names CPI '{cpi}', which no CPI config defines (defined: {})",
                    az.name,
                    cpis.names()
                ),
            );
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(p: Problems) -> String {
        p.to_string()
    }

    #[test]
    fn names_must_be_set_and_unique_and_types_set() {
        let config = json!({"cpis": [
            {"name": "a", "type": "local"},
            {"name": "a", "type": "local"},
            {"name": "", "type": ""},
            {"name": "b", "type": "local", "migrated_from": [{"name": "a"}]},
            {"name": "with space", "type": "local"},
        ]});
        let text = errors(cpi_config(&config).unwrap_err());
        assert!(text.contains("cpis[1].name"), "{text}");
        assert!(
            text.contains("CPI 'a' is defined twice (also cpis[0])"),
            "{text}"
        );
        assert!(text.contains("cpis[2].name"), "{text}");
        assert!(text.contains("cpis[2].type"), "{text}");
        assert!(text.contains("cpis[3].migrated_from[0].name"), "{text}");
        assert!(
            text.contains("cpis[4].name: CPI name 'with space' must be"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_key_is_a_warning_with_its_path() {
        let config = json!({"cpis": [{"name": "a", "type": "local", "propertes": {}}]});
        let text = errors(cpi_config(&config).unwrap().warnings);
        assert!(text.contains("cpis[0].propertes"), "{text}");
    }

    #[test]
    fn several_configs_merge_and_a_name_in_two_names_both() {
        let a = json!({"cpis": [{"name": "one", "type": "local"}]});
        let b = json!({"cpis": [{"name": "two", "type": "local", "properties": {"k": 1}}]});
        let merged = merge_cpi_configs(&[("a", &a), ("b", &b)]).unwrap().document;
        assert_eq!(merged.names(), "one, two");
        assert!(merged.find("two").unwrap().properties.is_some());
        let c = json!({"cpis": [{"name": "one", "type": "other"}]});
        let text = errors(merge_cpi_configs(&[("a", &a), ("c", &c)]).unwrap_err());
        assert!(
            text.contains("CPI 'one' is defined in cpi config 'a' and in cpi config 'c'"),
            "{text}"
        );
        assert!(
            merge_cpi_configs::<&str, Value>(&[])
                .unwrap()
                .document
                .cpis
                .is_empty()
        );
    }

    #[test]
    fn an_az_may_only_name_a_defined_cpi() {
        let cloud: CloudConfig = serde_json::from_value(json!({"azs": [
            {"name": "z1"}, {"name": "z2", "cpi": "one"}, {"name": "z3", "cpi": "three"},
        ]}))
        .unwrap();
        let cpis: CpiConfig =
            serde_json::from_value(json!({"cpis": [{"name": "one", "type": "local"}]})).unwrap();
        let text = errors(azs_on_cpis(&cloud, &cpis));
        assert!(text.contains("azs[2].cpi"), "{text}");
        assert!(
            text.contains("AZ 'z3' names CPI 'three', which no CPI config defines (defined: one)"),
            "{text}"
        );
        assert!(!text.contains("z2"), "{text}");
        let none = errors(azs_on_cpis(&cloud, &CpiConfig::default()));
        assert!(none.contains("(defined: none)"), "{none}");
    }
}
