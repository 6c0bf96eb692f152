//! The order variables are generated in: a certificate's `ca` before the certificate, and any
//! variable a definition's options interpolate (`common_name: ((domain))`) before it.

use serde_json::Value;

use super::VariableError;
use crate::manifest::Variable;
use crate::ops;

/// Why definition `from` needs definition `to` first.
struct Edge {
    to: usize,
    /// Where the dependency is written, e.g. `variables[3].options.ca`.
    path: String,
}

fn edges(defs: &[Variable], i: usize) -> Vec<Edge> {
    let position = |name: &str| defs.iter().position(|d| d.name == name);
    let def = &defs[i];
    let mut out = Vec::new();
    let Some(options) = &def.options else {
        return out;
    };
    if def.kind == "certificate"
        && let Some(Value::String(ca)) = options.get("ca")
        && let Some(to) = position(ca)
    {
        out.push(Edge {
            to,
            path: format!("variables[{i}].options.ca"),
        });
    }
    for (key, value) in options {
        for placeholder in ops::placeholders(value) {
            if let Some(to) = position(ops::variable_of(&placeholder)) {
                out.push(Edge {
                    to,
                    path: format!("variables[{i}].options.{key}"),
                });
            }
        }
    }
    out
}

/// Definition indexes in generation order: dependencies first, otherwise the section's order.
/// Rejects duplicate names and cycles, naming where they are written.
pub(super) fn generation_order(defs: &[Variable]) -> Result<Vec<usize>, VariableError> {
    for (i, def) in defs.iter().enumerate() {
        if def.name.is_empty() {
            return Err(VariableError::Definition {
                path: format!("variables[{i}].name"),
                message: "a variable needs a name".into(),
            });
        }
        if let Some(first) = defs[..i].iter().position(|d| d.name == def.name) {
            return Err(VariableError::Definition {
                path: format!("variables[{i}].name"),
                message: format!(
                    "variable '{}' is already defined at variables[{first}]",
                    def.name
                ),
            });
        }
    }

    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Visiting,
        Done,
    }
    let graph: Vec<Vec<Edge>> = (0..defs.len()).map(|i| edges(defs, i)).collect();
    let mut marks = vec![Mark::New; defs.len()];
    let mut order = Vec::with_capacity(defs.len());

    // Iterative depth-first search (no recursion, whatever the input): a stack of
    // (definition, next edge to follow).
    for root in 0..defs.len() {
        if marks[root] != Mark::New {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        marks[root] = Mark::Visiting;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(edge) = graph[node].get(*next) {
                *next += 1;
                match marks[edge.to] {
                    Mark::Done => {}
                    Mark::New => {
                        marks[edge.to] = Mark::Visiting;
                        stack.push((edge.to, 0));
                    }
                    Mark::Visiting => {
                        let start = stack.iter().position(|(n, _)| *n == edge.to).unwrap_or(0);
                        let mut cycle: Vec<&str> = stack[start..]
                            .iter()
                            .map(|(n, _)| defs[*n].name.as_str())
                            .collect();
                        cycle.push(defs[edge.to].name.as_str());
                        return Err(VariableError::Definition {
                            path: edge.path.clone(),
                            message: format!(
                                "variables depend on each other in a cycle: {}",
                                cycle.join(" -> ")
                            ),
                        });
                    }
                }
            } else {
                marks[node] = Mark::Done;
                order.push(node);
                stack.pop();
            }
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defs(yaml: &str) -> Vec<Variable> {
        kubosh_base::yaml::parse(yaml, "variables").unwrap()
    }

    #[test]
    fn cas_come_first() {
        let d = defs(
            "- {name: leaf, type: certificate, options: {ca: mid, common_name: l}}\n\
             - {name: mid, type: certificate, options: {ca: root, is_ca: true}}\n\
             - {name: pw, type: password}\n\
             - {name: root, type: certificate, options: {is_ca: true, common_name: ((pw))}}\n",
        );
        assert_eq!(generation_order(&d).unwrap(), vec![2, 3, 1, 0]);
    }

    #[test]
    fn cycles_are_named_with_their_path() {
        let d = defs(
            "- {name: pw, type: password}\n\
             - {name: a, type: certificate, options: {ca: b, is_ca: true}}\n\
             - {name: b, type: certificate, options: {ca: a, is_ca: true}}\n",
        );
        let err = generation_order(&d).unwrap_err().to_string();
        assert_eq!(
            err,
            "variables[2].options.ca: variables depend on each other in a cycle: a -> b -> a"
        );
        let d = defs("- {name: a, type: certificate, options: {ca: a, is_ca: true}}\n");
        assert_eq!(
            generation_order(&d).unwrap_err().to_string(),
            "variables[0].options.ca: variables depend on each other in a cycle: a -> a"
        );
    }

    #[test]
    fn duplicates_are_rejected() {
        let d = defs("- {name: a, type: password}\n- {name: a, type: password}\n");
        assert_eq!(
            generation_order(&d).unwrap_err().to_string(),
            "variables[1].name: variable 'a' is already defined at variables[0]"
        );
    }
}
