//! Running `helm` and `kubectl` (the test binaries) on the repository's chart; shared with
//! `tests/e2e`, which includes this file.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use kubosh_devenv::binary;

/// The repository root: the first directory up from this crate's that holds the chart.
pub fn root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|d| d.join("charts/kubosh/Chart.yaml").is_file())
        .unwrap_or(here)
        .to_path_buf()
}

/// Runs `program` (one of the test binaries) with `args` in the repository root, `stdin` on
/// its standard input.
pub fn run(program: &str, args: &[&str], stdin: &str) -> Output {
    let path = binary(program).unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(&path)
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// [`run`], which must succeed: its stdout and stderr.
pub fn succeeds(program: &str, args: &[&str], stdin: &str) -> (String, String) {
    let out = run(program, args, stdin);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

/// The arguments of `helm template` of `charts/kubosh` as release `release` in
/// `namespace`, with `values` (`--set ...`, `-f ...`).
pub fn template_args<'a>(release: &'a str, namespace: &'a str, values: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "template",
        release,
        "charts/kubosh",
        "--namespace",
        namespace,
    ];
    args.extend(values);
    args
}

/// `helm template` of `charts/kubosh` as release `release` in `namespace`, with `--set`
/// values.
pub fn render(release: &str, namespace: &str, set: &[&str]) -> String {
    let values: Vec<&str> = set.iter().flat_map(|s| ["--set", *s]).collect();
    succeeds("helm", &template_args(release, namespace, &values), "").0
}
