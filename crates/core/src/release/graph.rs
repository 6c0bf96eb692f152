//! Package dependency graphs: every dependency must exist and there must be no cycle (the
//! Director's `resolve_package_dependencies`, bosh-cli's `AttachDependencies`).

use std::collections::{BTreeMap, BTreeSet};

/// A dependency graph that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// A package depends on a package the release does not have.
    #[error("package '{package}' depends on package '{dependency}', which is not in the release")]
    MissingDependency {
        /// The depending package.
        package: String,
        /// The missing dependency.
        dependency: String,
    },
    /// Packages depend on each other in a circle; `cycle` starts and ends with the same name.
    #[error("package dependency cycle: {}", cycle.join(" => "))]
    Cycle {
        /// The packages on the cycle, the first repeated at the end.
        cycle: Vec<String>,
    },
}

/// Checks `packages` (name, dependencies) and returns the names in compile order: every
/// package after all its dependencies, ties broken by name.
pub fn compile_order<'a>(
    packages: impl IntoIterator<Item = (&'a str, &'a [String])>,
) -> Result<Vec<String>, GraphError> {
    let deps: BTreeMap<&str, &[String]> = packages.into_iter().collect();
    for (name, ds) in &deps {
        for d in ds.iter() {
            if !deps.contains_key(d.as_str()) {
                return Err(GraphError::MissingDependency {
                    package: name.to_string(),
                    dependency: d.clone(),
                });
            }
        }
    }
    let mut order = Vec::with_capacity(deps.len());
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for name in deps.keys() {
        let mut path = Vec::new();
        visit(name, &deps, &mut path, &mut done, &mut order)?;
    }
    Ok(order)
}

/// Depth-first: dependencies before the package; `path` is the current chain.
fn visit<'a>(
    name: &'a str,
    deps: &BTreeMap<&'a str, &'a [String]>,
    path: &mut Vec<&'a str>,
    done: &mut BTreeSet<&'a str>,
    order: &mut Vec<String>,
) -> Result<(), GraphError> {
    if done.contains(name) {
        return Ok(());
    }
    if let Some(start) = path.iter().position(|p| *p == name) {
        let mut cycle: Vec<String> = path[start..].iter().map(|s| s.to_string()).collect();
        cycle.push(name.to_string());
        return Err(GraphError::Cycle { cycle });
    }
    path.push(name);
    let mut sorted: Vec<&String> = deps
        .get(name)
        .map(|d| d.iter().collect())
        .unwrap_or_default();
    sorted.sort();
    for d in sorted {
        if let Some((key, _)) = deps.get_key_value(d.as_str()) {
            visit(key, deps, path, done, order)?;
        }
    }
    path.pop();
    done.insert(name);
    order.push(name.to_string());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        edges
            .iter()
            .map(|(n, d)| (n.to_string(), d.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    fn order(g: &[(String, Vec<String>)]) -> Result<Vec<String>, GraphError> {
        compile_order(g.iter().map(|(n, d)| (n.as_str(), d.as_slice())))
    }

    #[test]
    fn dependencies_come_first() {
        let g = graph(&[("app", &["lib", "ruby"]), ("ruby", &["lib"]), ("lib", &[])]);
        assert_eq!(order(&g).unwrap(), ["lib", "ruby", "app"]);
    }

    #[test]
    fn cycles_and_missing_dependencies_are_named() {
        let g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])]);
        let err = order(&g).unwrap_err();
        assert_eq!(
            err.to_string(),
            "package dependency cycle: a => b => c => a"
        );
        let g = graph(&[("a", &["a"])]);
        assert_eq!(
            order(&g).unwrap_err().to_string(),
            "package dependency cycle: a => a"
        );
        let g = graph(&[("a", &["zlib"])]);
        assert_eq!(
            order(&g).unwrap_err(),
            GraphError::MissingDependency {
                package: "a".into(),
                dependency: "zlib".into()
            }
        );
    }
}
