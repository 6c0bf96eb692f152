//! Release tarballs: the example release (`examples/releases/hello`) built and inspected
//! through the real `kubosh` binary, fingerprints stable across builds and directories and
//! equal to the real bosh-cli's, corrupt tarballs rejected with their reasons and never a
//! panic.

use kubosh_artifacts::release::ReleaseFile as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use kubosh_artifacts::release::{CreateOptions, PackageArchive, Release, create::create};
use kubosh_devenv::binary;
use proptest::prelude::*;
use serde_json::Value;

const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");

fn example() -> PathBuf {
    kubosh_devenv::example_release_dir()
}

/// Copies a directory tree (files, modes and symlinks).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let t = entry.file_type().unwrap();
        if t.is_dir() {
            copy_tree(&src, &dst);
        } else if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run_err(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(!out.status.success(), "{cmd:?} unexpectedly succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// (name, version, fingerprint) of every job and package.
fn identities(r: &Release) -> Vec<(String, String, String)> {
    r.jobs
        .iter()
        .map(|j| (j.name.clone(), j.version.clone(), j.fingerprint.clone()))
        .chain(
            r.packages
                .iter()
                .map(|p| (p.name.clone(), p.version.clone(), p.fingerprint.clone())),
        )
        .collect()
}

#[test]
fn the_example_round_trips_through_create_and_inspect() {
    let tmp = tempfile::tempdir().unwrap();
    let tgz = tmp.path().join("hello.tgz");
    let out = run(Command::new(KUBOSH).args([
        "release",
        "create",
        example().to_str().unwrap(),
        "--tarball",
        tgz.to_str().unwrap(),
    ]));
    assert!(out.contains("hello/"), "{out}");
    let json =
        run(Command::new(KUBOSH).args(["release", "inspect", "--json", tgz.to_str().unwrap()]));
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["name"], "hello");
    assert_eq!(v["version"], "0+dev.1");
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0]["name"], "hello");
    assert_eq!(jobs[1]["name"], "smoke-test");
    assert_eq!(
        jobs[1]["consumes"],
        serde_json::json!(["greeters (greeter)"])
    );
    assert_eq!(
        jobs[0]["packages"],
        serde_json::json!(["libhello", "hello-server"])
    );
    assert_eq!(
        jobs[0]["provides"],
        serde_json::json!(["greeter (greeter)"])
    );
    assert_eq!(
        jobs[0]["consumes"],
        serde_json::json!(["peers (greeter, optional)"])
    );
    assert_eq!(jobs[0]["version"], jobs[0]["fingerprint"]);
    let packages = v["packages"].as_array().unwrap();
    let names: Vec<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hello-server", "libhello"]);
    assert_eq!(packages[0]["dependencies"], serde_json::json!(["libhello"]));
    assert_eq!(packages[1]["dependencies"], serde_json::json!([]));
    assert!(packages.iter().all(|p| p["compiled_for"].is_null()));
    assert!(v["license"].is_string());
    assert!(packages[0]["sha1"].as_str().unwrap().starts_with("sha256:"));

    // The table form lists the same.
    let table = run(Command::new(KUBOSH).args(["release", "inspect", tgz.to_str().unwrap()]));
    for needle in [
        "hello-server/",
        "libhello/",
        "peers (greeter, optional)",
        "(source)",
    ] {
        assert!(table.contains(needle), "{needle} not in\n{table}");
    }

    // The library view: templates, monit, spec and compile order.
    let r = Release::read(&tgz).unwrap();
    let job = r.job("hello").unwrap();
    assert!(
        job.monit
            .as_deref()
            .unwrap()
            .contains("check process hello")
    );
    assert!(job.templates.contains_key("drain.erb"));
    assert_eq!(job.spec.templates["drain.erb"], "bin/drain");
    assert_eq!(
        job.spec.properties["hello.port"].default,
        Some(serde_json::json!(8080))
    );
    assert_eq!(r.compile_order().unwrap(), ["libhello", "hello-server"]);
    assert!(!r.is_compiled());
}

#[test]
fn fingerprints_and_archives_are_stable_across_builds_and_directories() {
    let a = create(&example(), &CreateOptions::default()).unwrap();
    let b = create(&example(), &CreateOptions::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("elsewhere/hello-release");
    copy_tree(&example(), &copy);
    let c = create(&copy, &CreateOptions::default()).unwrap();
    assert_eq!(identities(&a), identities(&b));
    assert_eq!(identities(&a), identities(&c));
    // The archives are deterministic too: same bytes, same digests.
    for (x, y) in a.jobs.iter().zip(&c.jobs) {
        assert_eq!(x.archive, y.archive);
    }
    for (x, y) in a.packages.iter().zip(&c.packages) {
        assert_eq!(x.digest, y.digest);
    }
    // Outside git the commit is "non-git", as bosh-cli writes it.
    assert_eq!(c.manifest.commit_hash, "non-git");
    assert!(!c.manifest.uncommitted_changes);

    // A content change moves exactly the fingerprints it should.
    std::fs::write(copy.join("src/libhello/hello.c"), "int x;\n").unwrap();
    let d = create(&copy, &CreateOptions::default()).unwrap();
    let fp = |r: &Release, n: &str| r.package(n).unwrap().fingerprint.clone();
    assert_ne!(fp(&c, "libhello"), fp(&d, "libhello"));
    assert_eq!(fp(&c, "hello-server"), fp(&d, "hello-server"));
    assert_eq!(c.jobs[0].fingerprint, d.jobs[0].fingerprint);
    // So does a mode change of a template (file modes count).
    let ctl = copy.join("jobs/hello/templates/ctl.erb");
    std::fs::set_permissions(&ctl, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let e = create(&copy, &CreateOptions::default()).unwrap();
    assert_ne!(d.jobs[0].fingerprint, e.jobs[0].fingerprint);
    // But not the packaging script's mode.
    let packaging = copy.join("packages/libhello/packaging");
    std::fs::set_permissions(
        &packaging,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let f = create(&copy, &CreateOptions::default()).unwrap();
    assert_eq!(fp(&e, "libhello"), fp(&f, "libhello"));
}

#[test]
fn name_and_version_can_be_overridden() {
    let r = create(
        &example(),
        &CreateOptions {
            name: Some("greeter".into()),
            version: Some("7".into()),
        },
    )
    .unwrap();
    let back = Release::from_bytes(&r.to_tarball().unwrap()).unwrap();
    assert_eq!((back.name(), back.version()), ("greeter", "7"));
}

#[test]
fn a_release_by_reference_has_its_jobs_and_only_the_ids_of_its_packages() {
    let r = create(&example(), &CreateOptions::default()).unwrap();
    let release_mf = r.manifest_yaml().unwrap();
    let jobs = || {
        r.jobs
            .iter()
            .map(|j| (j.name.clone(), j.archive.clone()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let ids: std::collections::BTreeMap<String, String> = r
        .packages
        .iter()
        .map(|p| (p.name.clone(), p.archive.blob_id()))
        .collect();
    let by_ref = Release::by_reference(release_mf.as_bytes(), jobs(), &ids).unwrap();

    assert_eq!(identities(&by_ref), identities(&r));
    for (x, y) in by_ref.jobs.iter().zip(&r.jobs) {
        assert_eq!(
            (&x.spec, &x.templates, &x.monit),
            (&y.spec, &y.templates, &y.monit)
        );
    }
    for (x, y) in by_ref.packages.iter().zip(&r.packages) {
        assert_eq!(x.digest, y.digest);
        let sha256 = kubosh_base::digest::sha256_hex(y.archive.bytes().unwrap());
        assert_eq!(x.archive, PackageArchive::Stored(sha256.clone()));
        assert_eq!(x.archive.blob_id(), sha256);
    }
    let err = by_ref.to_tarball().unwrap_err().to_string();
    assert!(err.contains("no package bytes"), "{err}");

    // A package without an id, a tampered job archive: refused, naming it.
    let mut missing = ids.clone();
    missing.remove("hello-server");
    let err = Release::by_reference(release_mf.as_bytes(), jobs(), &missing)
        .unwrap_err()
        .to_string();
    assert!(err.contains("package 'hello-server'"), "{err}");
    let mut tampered = jobs();
    let job = tampered.values_mut().next().unwrap();
    let last = job.len() - 1;
    job[last] ^= 1;
    let err = Release::by_reference(release_mf.as_bytes(), tampered, &ids)
        .unwrap_err()
        .to_string();
    assert!(err.contains("job '"), "{err}");
}

/// Rewrites one line of release.MF inside a built release and returns the new tarball.
fn with_manifest(
    r: &Release,
    edit: impl Fn(&mut kubosh_artifacts::release::ReleaseManifest),
) -> Vec<u8> {
    let mut r = r.clone();
    edit(&mut r.manifest);
    r.to_tarball().unwrap()
}

#[test]
fn corrupt_digests_are_rejected_naming_the_archive() {
    let r = create(&example(), &CreateOptions::default()).unwrap();
    let bad = with_manifest(&r, |m| {
        m.packages[1].sha1 = format!("sha256:{}", "0".repeat(64))
    });
    let err = Release::from_bytes(&bad).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "package 'libhello' (packages/libhello.tgz): expected stream to have digest"
        ),
        "{err}"
    );
    // A plain sha1 is checked too.
    let bad = with_manifest(&r, |m| m.jobs[0].sha1 = "0".repeat(40));
    let err = Release::from_bytes(&bad).unwrap_err().to_string();
    assert!(
        err.starts_with("job 'hello' (jobs/hello.tgz): expected"),
        "{err}"
    );
    // So is a multi-digest: the strongest one counts.
    let sha1 = kubosh_base::digest::sha1_hex(&r.jobs[0].archive);
    let good = with_manifest(&r, |m| {
        m.jobs[0].sha1 = format!("{sha1};{}", r.jobs[0].digest);
    });
    Release::from_bytes(&good).unwrap();
    let bad = with_manifest(&r, |m| {
        m.jobs[0].sha1 = format!("{sha1};sha512:{}", "a".repeat(128));
    });
    assert!(Release::from_bytes(&bad).is_err());
    // Malformed digests are named.
    let bad = with_manifest(&r, |m| m.packages[0].sha1 = "sha256:not-hex!".into());
    let err = Release::from_bytes(&bad).unwrap_err().to_string();
    assert!(
        err.contains("hello-server") && err.contains("unable to parse digest"),
        "{err}"
    );

    // Tampered archive bytes: the digest no longer matches.
    let mut tampered = r.clone();
    let PackageArchive::Bytes(bytes) = &mut tampered.packages[0].archive else {
        panic!("a release read from a tarball holds its packages' bytes");
    };
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let err = Release::from_bytes(&tampered.to_tarball().unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("package 'hello-server'"), "{err}");

    // An archive listed but absent.
    let mut missing = r.clone();
    missing.jobs.clear();
    let err = Release::from_bytes(&missing.to_tarball().unwrap())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "job 'hello' (jobs/hello.tgz) not found in release tarball"
    );
}

#[test]
fn dependency_cycles_and_missing_dependencies_are_rejected() {
    let r = create(&example(), &CreateOptions::default()).unwrap();
    // In a tarball.
    let cyclic = with_manifest(&r, |m| {
        m.packages[1].dependencies = vec!["hello-server".into()]
    });
    let err = Release::from_bytes(&cyclic).unwrap_err().to_string();
    assert_eq!(
        err,
        "package dependency cycle: hello-server => libhello => hello-server"
    );
    let missing = with_manifest(&r, |m| m.packages[1].dependencies = vec!["zlib".into()]);
    let err = Release::from_bytes(&missing).unwrap_err().to_string();
    assert_eq!(
        err,
        "package 'libhello' depends on package 'zlib', which is not in the release"
    );
    let mut r2 = r.clone();
    r2.packages.retain(|p| p.name != "hello-server");
    r2.manifest.packages.retain(|p| p.name != "hello-server");
    let err = Release::from_bytes(&r2.to_tarball().unwrap())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "job 'hello' needs package 'hello-server', which is not in the release"
    );

    // In a release directory.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("hello");
    copy_tree(&example(), &dir);
    std::fs::write(
        dir.join("packages/libhello/spec"),
        "name: libhello\ndependencies: [hello-server]\nfiles: [libhello/*.c]\n",
    )
    .unwrap();
    let err = run_err(Command::new(KUBOSH).args([
        "release",
        "create",
        dir.to_str().unwrap(),
        "--tarball",
        tmp.path().join("x.tgz").to_str().unwrap(),
    ]));
    assert!(
        err.contains("package dependency cycle: hello-server => libhello => hello-server"),
        "{err}"
    );
    std::fs::write(
        dir.join("packages/libhello/spec"),
        "name: libhello\ndependencies: [zlib]\nfiles: [libhello/*.c]\n",
    )
    .unwrap();
    let err = create(&dir, &CreateOptions::default())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "package 'libhello' depends on package 'zlib', which is not in the release"
    );
    std::fs::write(
        dir.join("packages/libhello/spec"),
        "name: libhello\nfiles: [libhello/*.cpp]\n",
    )
    .unwrap();
    let err = create(&dir, &CreateOptions::default())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "package 'libhello': missing files for pattern 'libhello/*.cpp'"
    );
}

#[test]
fn job_archives_are_checked_like_the_director_does() {
    let r = create(&example(), &CreateOptions::default()).unwrap();
    let rebuild = |files: &[(&str, &[u8])]| {
        let mut w = kubosh_artifacts::release::tarball::TarWriter::new();
        for (p, d) in files {
            w.file(p, d, false).unwrap();
        }
        let archive = w.finish(false).unwrap();
        let mut r = r.clone();
        r.jobs[0].archive = archive.clone();
        r.manifest.jobs[0].sha1 = format!("sha256:{}", kubosh_base::digest::sha256_hex(&archive));
        Release::from_bytes(&r.to_tarball().unwrap())
            .unwrap_err()
            .to_string()
    };
    let spec = r.jobs[0].archive.clone();
    let files = kubosh_artifacts::release::tarball::read_all(&spec).unwrap();
    let job_mf = files.get("job.MF").unwrap().to_vec();
    let monit = files.get("monit").unwrap().to_vec();
    assert_eq!(
        rebuild(&[("monit", &monit)]),
        "job 'hello': missing job manifest (job.MF)"
    );
    assert_eq!(
        rebuild(&[("job.MF", &job_mf), ("monit", &monit)]),
        "job 'hello': missing template file 'ctl.erb'"
    );
    assert_eq!(
        rebuild(&[("job.MF", b"name: other\n"), ("monit", &monit)]),
        "job 'hello': inconsistent name: release manifest says 'hello', job.MF says 'other'"
    );
    assert_eq!(
        rebuild(&[("job.MF", b"name: hello\n")]),
        "job 'hello': missing monit file"
    );
    assert_eq!(
        rebuild(&[
            (
                "job.MF",
                b"name: hello\nprovides: [{name: a, type: t, optional: true}]\n"
            ),
            ("monit", &monit)
        ]),
        "job 'hello': link 'a' is a provides link, not allowed to have 'optional' key"
    );
    assert_eq!(
        rebuild(&[
            (
                "job.MF",
                b"name: hello\nconsumes: [{name: a, type: t}, {name: a, type: u}]\n"
            ),
            ("monit", &monit)
        ]),
        "job 'hello': duplicate consumes link with name 'a'"
    );
}

/// The real bosh-cli builds the same directory to the same job and package fingerprints and
/// versions, and reads kubosh's tarball.
#[test]
fn fingerprints_match_the_real_bosh_cli() {
    let bosh = binary("bosh").unwrap_or_else(|e| panic!("{e}"));
    let tmp = tempfile::tempdir().unwrap();
    // bosh-cli writes .dev_builds/ and dev_releases/ into the directory: its own copy.
    let theirs_dir = tmp.path().join("bosh/hello");
    let ours_dir = tmp.path().join("kubosh/hello");
    copy_tree(&example(), &theirs_dir);
    copy_tree(&example(), &ours_dir);
    let theirs = tmp.path().join("theirs.tgz");
    let ours = tmp.path().join("ours.tgz");
    run(Command::new(&bosh)
        .args([
            "create-release",
            "--force",
            "--tarball",
            theirs.to_str().unwrap(),
        ])
        .current_dir(&theirs_dir)
        .env("HOME", tmp.path())
        .env("BOSH_NON_INTERACTIVE", "true"));
    run(Command::new(KUBOSH).args([
        "release",
        "create",
        ours_dir.to_str().unwrap(),
        "--tarball",
        ours.to_str().unwrap(),
    ]));

    // kubosh reads (and verifies) bosh-cli's tarball; the identities agree.
    let theirs_r = Release::read(&theirs).unwrap();
    let ours_r = Release::read(&ours).unwrap();
    assert_eq!(identities(&theirs_r), identities(&ours_r));
    assert_eq!(theirs_r.version(), ours_r.version());
    assert_eq!(theirs_r.name(), ours_r.name());
    assert_eq!(
        theirs_r.license.as_ref().map(|l| &l.fingerprint),
        ours_r.license.as_ref().map(|l| &l.fingerprint)
    );
    for (t, o) in theirs_r.packages.iter().zip(&ours_r.packages) {
        assert_eq!(t.dependencies, o.dependencies);
    }
    for (t, o) in theirs_r.jobs.iter().zip(&ours_r.jobs) {
        assert_eq!(t.spec, o.spec);
        assert_eq!(t.templates, o.templates);
        assert_eq!(t.monit, o.monit);
    }

    // bosh-cli reads kubosh's tarball and reports the same jobs and packages.
    let json = run(Command::new(&bosh)
        .args(["inspect-local-release", "--json", ours.to_str().unwrap()])
        .env("HOME", tmp.path()));
    let v: Value = serde_json::from_str(&json).unwrap();
    let rows = |content: &str, key: &str| -> Vec<String> {
        let table = v["Tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["Content"] == content)
            .unwrap_or_else(|| panic!("no {content} table in {json}"));
        table["Rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[key].as_str().unwrap().to_string())
            .collect()
    };
    let mut listed = rows("jobs", "job");
    listed.extend(rows("packages", "package"));
    let mut expected: Vec<String> = identities(&ours_r)
        .into_iter()
        .map(|(n, v, _)| format!("{n}/{v}"))
        .collect();
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected);
    let digests = rows("packages", "digest");
    for p in &ours_r.packages {
        assert!(digests.contains(&p.digest.to_string()), "{digests:?}");
    }
}

/// A small release, uncompressed, so random corruption reaches the tar headers, the YAML and
/// the job archives rather than only the gzip checksum.
fn small_plain_release() -> Vec<u8> {
    let mut r = create(&example(), &CreateOptions::default()).unwrap();
    r.manifest.no_compression = true;
    r.to_tarball().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn corrupt_tarballs_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
        gzip in any::<bool>(),
    ) {
        let mut data = if gzip {
            create(&example(), &CreateOptions::default()).unwrap().to_tarball().unwrap()
        } else {
            small_plain_release()
        };
        for (i, b) in flips {
            let i = i.index(data.len());
            data[i] ^= b | 1;
        }
        if truncate {
            data.truncate(cut.index(data.len()));
        }
        let _ = Release::from_bytes(&data);
        let _ = Release::from_reader(&data[..]);
        let _ = kubosh_artifacts::stemcell::Stemcell::from_reader(&data[..]);
    }

    #[test]
    fn arbitrary_manifests_never_panic(text in "[a-z_: \\-\\[\\]{}~0-9\n]{0,200}") {
        let mut w = kubosh_artifacts::release::tarball::TarWriter::new();
        w.file("release.MF", text.as_bytes(), false).unwrap();
        let data = w.finish(true).unwrap();
        let _ = Release::from_bytes(&data);
    }
}
