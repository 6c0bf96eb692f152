//! `crds/` must hold exactly what `src/api` generates: the committed CRDs are what users and
//! charts install, so a change to the API types without regenerating them is a bug.

use std::path::Path;

#[test]
fn crds_directory_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds");
    let expected = kubosh_kube::api::crd_files().expect("the CRDs serialize");
    let mut problems = Vec::new();
    for (name, text) in &expected {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(found) if &found == text => {}
            Ok(_) => problems.push(format!("crds/{name} differs from what src/api generates")),
            Err(_) => problems.push(format!("crds/{name} is missing")),
        }
    }
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".kubosh.io.yaml") && !expected.iter().any(|(n, _)| *n == name) {
                problems.push(format!("crds/{name} is no longer generated"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "crds/ is stale:\n  {}\n\nRegenerate it from the repository root with:\n\n    \
         cargo run -q -- crd --write crds/\n\nand commit the result.\n",
        problems.join("\n  ")
    );
}
