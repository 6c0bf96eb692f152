//! `crds/` must hold exactly what `src/api` generates: the committed CRDs are what users and
//! charts install, so a change to the API types without regenerating them is a bug. The
//! chart's `crds/` (what `helm install` applies) and the plain manifests' kustomization
//! (`crds/kustomization.yaml`, which `deploy/` includes) follow it.

use std::path::Path;

/// The problems of directory `dir` (named `label` in messages) against the generated files.
fn stale(label: &str, dir: &Path, expected: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, text) in expected {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(found) if &found == text => {}
            Ok(_) => problems.push(format!(
                "{label}/{name} differs from what src/api generates"
            )),
            Err(_) => problems.push(format!("{label}/{name} is missing")),
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".kubosh.io.yaml") && !expected.iter().any(|(n, _)| *n == name) {
                problems.push(format!("{label}/{name} is no longer generated"));
            }
        }
    }
    problems
}

#[test]
fn crds_directory_is_up_to_date() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let expected = kubosh_kube::api::crd_files().expect("the CRDs serialize");
    let mut problems = Vec::new();
    for dir in ["crds", "charts/kubosh/crds"] {
        problems.extend(stale(dir, &root.join(dir), &expected));
    }
    // Kustomize takes the files one by one.
    let kustomization =
        std::fs::read_to_string(root.join("crds/kustomization.yaml")).unwrap_or_default();
    let listed: Vec<&str> = (kustomization.lines())
        .filter_map(|l| l.trim().strip_prefix("- "))
        .collect();
    let generated: Vec<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    if listed != generated {
        problems.push(format!(
            "crds/kustomization.yaml lists {listed:?}, not {generated:?}"
        ));
    }
    assert!(
        problems.is_empty(),
        "the CRDs are stale:\n  {}\n\nRegenerate them from the repository root with:\n\n    \
         cargo run -q -- crd --write crds/ && cargo run -q -- crd --write charts/kubosh/crds/\n\n\
         (crds/kustomization.yaml lists the files in the order `kubosh crd` prints them) and \
         commit the result.\n",
        problems.join("\n  ")
    );
}
