//! `kubosh interpolate` against the real `bosh int` (bosh-cli, built by tools/testbins.sh):
//! the same arguments give the same stdout, the same stderr and the same exit code, byte
//! for byte, on every real-world fixture with its ops files, on YAML 1.1's scalar rules
//! (in keys and values, from files and from `-v`), and on failures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::director_world::KUBOSH;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/real-world")
}

/// Runs `bosh int ARGS` and `kubosh interpolate ARGS` in `dir` and fails with the first
/// differing line if stdout, stderr or the exit code differ.
fn same_as_bosh(dir: &Path, args: &[String]) {
    let bosh = kubosh_devenv::binary("bosh").unwrap_or_else(|e| panic!("{e}"));
    let run = |program: &Path, command: &str| -> Output {
        Command::new(program)
            .current_dir(dir)
            .env("HOME", dir)
            .env_remove("BOSH_LOG_LEVEL")
            .arg(command)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()))
    };
    let expected = run(&bosh, "int");
    let ours = run(Path::new(KUBOSH), "interpolate");
    for (stream, theirs, mine) in [
        ("stdout", &expected.stdout, &ours.stdout),
        ("stderr", &expected.stderr, &ours.stderr),
    ] {
        if theirs == mine {
            continue;
        }
        let (theirs, mine) = (
            String::from_utf8_lossy(theirs),
            String::from_utf8_lossy(mine),
        );
        let line = (theirs.lines().zip(mine.lines()))
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| theirs.lines().count().min(mine.lines().count()));
        let around = |t: &str| {
            (t.lines().skip(line.saturating_sub(2)).take(5))
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "{args:?}: {stream} differs at line {}:\nbosh:\n{}\nkubosh:\n{}",
            line + 1,
            around(&theirs),
            around(&mine)
        );
    }
    assert_eq!(
        expected.status.code(),
        ours.status.code(),
        "{args:?}: exit codes differ"
    );
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Every fixture alone; bosh-deployment's and cf-deployment's manifests with each of their
/// ops files and with all of them; strict variable checks; `--path`; a vars store that one
/// tool generates and the other reads.
#[test]
fn interpolate_is_bosh_int_on_the_real_world_fixtures() {
    let root = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = Vec::new();
    let mut pending = vec![root.clone()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "yml") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 16, "{files:?}");
    for file in &files {
        same_as_bosh(dir.path(), &[file.display().to_string()]);
    }

    let f = |p: &str| root.join(p).display().to_string();
    let bosh_yml = f("bosh-deployment/bosh.yml");
    let bosh_ops = [
        "warden/cpi",
        "bosh-lite",
        "jumpbox-user",
        "uaa",
        "credhub",
        "virtualbox/cpi",
    ]
    .map(|o| f(&format!("bosh-deployment/{o}.yml")));
    for ops in &bosh_ops {
        same_as_bosh(dir.path(), &[bosh_yml.clone(), "-o".into(), ops.clone()]);
    }
    let mut all = vec![bosh_yml.clone()];
    for ops in &bosh_ops[..5] {
        all.extend(["-o".to_string(), ops.clone()]);
    }
    all.extend(args(&[
        "-v",
        "director_name=a director",
        "-v",
        "internal_ip=10.245.0.11",
    ]));
    same_as_bosh(dir.path(), &all);
    same_as_bosh(dir.path(), &[all.clone(), args(&["--var-errs"])].concat());
    same_as_bosh(
        dir.path(),
        &[all.clone(), args(&["--var-errs-unused", "-v", "x=1"])].concat(),
    );

    let cf = f("cf-deployment/cf-deployment.yml");
    let cf_ops = ["bosh-lite", "scale-to-one-az", "use-compiled-releases"]
        .map(|o| f(&format!("cf-deployment/{o}.yml")));
    let mut all_cf = vec![cf.clone()];
    for ops in &cf_ops {
        same_as_bosh(dir.path(), &[cf.clone(), "-o".into(), ops.clone()]);
        all_cf.extend(["-o".to_string(), ops.clone()]);
    }
    same_as_bosh(dir.path(), &all_cf);
    same_as_bosh(
        dir.path(),
        &[
            all_cf,
            args(&["-v", "system_domain=example.com", "--var-errs"]),
        ]
        .concat(),
    );
    for path in [
        "/instance_groups/name=api/jobs/name=cloud_controller_ng/properties",
        "/instance_groups/name=api/instances",
        "/name",
        "/instance_groups/name=nope",
        "/releases/0/url/x",
    ] {
        same_as_bosh(dir.path(), &[cf.clone(), "--path".into(), path.into()]);
    }

    // Generated by bosh, read by kubosh; then generated by kubosh, read by bosh.
    let warden = [
        bosh_yml.as_str(),
        "-o",
        &bosh_ops[0],
        "-v",
        "director_name=d",
        "-v",
        "internal_ip=10.0.0.6",
        "-v",
        "internal_cidr=10.0.0.0/24",
        "-v",
        "internal_gw=10.0.0.1",
        "-v",
        "garden_host=x",
    ];
    let bosh = kubosh_devenv::binary("bosh").unwrap_or_else(|e| panic!("{e}"));
    for (first, store) in [
        (bosh.as_path(), "bosh-store.yml"),
        (Path::new(KUBOSH), "kubosh-store.yml"),
    ] {
        let command = if first == bosh.as_path() {
            "int"
        } else {
            "interpolate"
        };
        let out = Command::new(first)
            .current_dir(dir.path())
            .args([command])
            .args(warden)
            .args(["--vars-store", store])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        same_as_bosh(
            dir.path(),
            &[args(&warden), args(&["--vars-store", store])].concat(),
        );
        // The store itself is written as bosh-cli writes YAML.
        same_as_bosh(dir.path(), &args(&[store]));
    }
}

/// Every YAML 1.1 resolution rule go-yaml v2 has, in keys and values, read from the
/// manifest, from a vars file and from `-v`.
#[test]
fn interpolate_reads_yaml_1_1_scalars_as_bosh_int() {
    let dir = tempfile::tempdir().unwrap();
    let scalars = [
        "0777",
        "0644",
        "-0777",
        "08080",
        "0x1F",
        "0o17",
        "0b101",
        "-0b101",
        "1_000",
        "+12",
        "0",
        "1e3",
        "1e6",
        "1.50",
        "1.",
        ".5",
        "1e400",
        "9223372036854775808",
        "18446744073709551616",
        ".inf",
        "-.Inf",
        "+.INF",
        ".NaN",
        "~",
        "null",
        "NULL",
        "",
        "y",
        "Y",
        "yes",
        "Yes",
        "YES",
        "n",
        "N",
        "no",
        "on",
        "On",
        "ON",
        "off",
        "OFF",
        "true",
        "False",
        "2001-12-14",
        "2001-12-14t21:59:43.10-05:00",
        "2001-12-14 21:59:43.10",
        "2001-2-30",
        "1:20",
        "190:20:30.15",
        "1.2.3",
        "0x",
        "-1",
        "nUll",
        "oN",
    ];
    let mut doc = String::from("base: &b {p: 1, q: 2}\nmerged:\n  <<: *b\n  q: 3\nvalues:\n");
    let mut keys = String::from("keys:\n");
    let mut quoted = String::from("quoted:\n");
    let mut vars = String::new();
    let mut from_vars = String::from("from_vars:\n");
    let mut cli: Vec<String> = Vec::new();
    let mut from_cli = String::from("from_cli:\n");
    for (i, s) in scalars.iter().enumerate() {
        doc.push_str(&format!("  v{i}: {s}\n"));
        quoted.push_str(&format!("  q{i}: '{s}'\n"));
        // A `.nan` key is left out: bosh's own output for it differs from run to run (Go
        // map keys that are NaN never equal themselves).
        if !s.is_empty() && !s.eq_ignore_ascii_case(".nan") {
            keys.push_str(&format!("  {s}: k{i}\n"));
        }
        if !s.is_empty() {
            cli.extend(["-v".to_string(), format!("c{i}={s}")]);
            from_cli.push_str(&format!("  c{i}: ((c{i}))\n"));
        }
        vars.push_str(&format!("l{i}: {s}\n"));
        from_vars.push_str(&format!("  l{i}: ((l{i}))\n"));
    }
    doc.push_str(&keys);
    doc.push_str(&quoted);
    doc.push_str(&from_vars);
    doc.push_str(&from_cli);
    doc.push_str("list: [y, n, 0777, \"0777\", .inf, 1e3, !!str 0777, !!float 3, !!int \"12\"]\n");
    doc.push_str("long: a long text that goes on past the eightieth column of the line, with words to fold\n");
    doc.push_str("multi: |\n  line one\n  line two\n");
    std::fs::write(dir.path().join("edge.yml"), doc).unwrap();
    std::fs::write(dir.path().join("vars.yml"), vars).unwrap();
    same_as_bosh(dir.path(), &args(&["edge.yml", "-l", "vars.yml"]));
    same_as_bosh(
        dir.path(),
        &[args(&["edge.yml", "-l", "vars.yml"]), cli].concat(),
    );
    same_as_bosh(dir.path(), &args(&["edge.yml", "--path", "/multi"]));
    same_as_bosh(dir.path(), &args(&["edge.yml", "--path", "/values/v0"]));
}

/// Failures: missing variables, unused variables, paths that are not there, bad ops files,
/// bad flags, files that are not there; each with bosh's text, `Exit code 1` and exit 1.
#[test]
fn interpolate_fails_as_bosh_int_fails() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write(
        "m.yml",
        "a: ((a))\nb: ((b.c))\nc: {d: ((gone))}\nlist: [x, y]\n",
    );
    write("unknown-op.yml", "- type: frobnicate\n  path: /a\n");
    write(
        "missing-path.yml",
        "- type: replace\n  path: /x/y/z\n  value: 1\n",
    );
    write("not-a-list.yml", "a: 1\n");
    write(
        "bad-index.yml",
        "- type: replace\n  path: /list/5\n  value: 1\n",
    );
    write("error-op.yml", "- type: remove\n  path: /nope\n");
    let cases: &[&[&str]] = &[
        &["m.yml", "--var-errs"],
        &["m.yml", "--var-errs", "-v", "a=1"],
        &["m.yml", "--var-errs-unused", "-v", "zzz=1", "-v", "a=1"],
        &["m.yml", "--var-errs", "--var-errs-unused", "-v", "zzz=1"],
        &["m.yml", "-v", "b=1"],
        &["m.yml", "--path", "/nope"],
        &["m.yml", "--path", "/a/b"],
        &["m.yml", "--path", "/list/7"],
        &["m.yml", "-o", "unknown-op.yml"],
        &["m.yml", "-o", "missing-path.yml"],
        &["m.yml", "-o", "bad-index.yml"],
        &["m.yml", "-o", "error-op.yml"],
        &["m.yml", "-o", "no-such-ops.yml"],
        &["m.yml", "-l", "no-such-vars.yml"],
        &["m.yml", "--var-file", "x=no-such-file"],
        &["m.yml", "-v", "x"],
        &["m.yml", "-v", "=1"],
        &["m.yml", "-v", "x="],
        &["m.yml", "--vars-env="],
        &["no-such-manifest.yml"],
    ];
    for case in cases {
        same_as_bosh(dir.path(), &args(case));
    }
}
