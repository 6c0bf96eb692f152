//! compile_package compiles real C code with `cc`.

use crate::agentd_common;

use std::path::Path;

use kubosh_agentd::compile::{CompileError, CompileRequest, Compiler, PackageSource};
use kubosh_agentd::layout::Layout;
use kubosh_base::digest::{sha1_hex, sha256_hex};

/// A source package tarball: `files` (path, content, mode), gzipped or not.
fn source_tarball(files: &[(&str, &str, u32)], gzip: bool) -> Vec<u8> {
    if gzip {
        agentd_common::tgz(files)
    } else {
        agentd_common::tar(files)
    }
}

fn unpack(bytes: &[u8], dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let r: Box<dyn std::io::Read> = if bytes.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    };
    let mut a = tar::Archive::new(r);
    a.set_preserve_permissions(true);
    a.unpack(dir).unwrap();
}

fn request(name: &str, digest: &str, deps: &[&str]) -> CompileRequest {
    CompileRequest {
        name: name.into(),
        version: "1.0.3".into(),
        digest: digest.into(),
        dependencies: deps.iter().map(|s| s.to_string()).collect(),
    }
}

const HELLO_C: &str = r#"#include <stdio.h>
int main(void) { printf("hello from kubosh\n"); return 0; }
"#;

const PACKAGING: &str = "set -e\nmkdir -p ${BOSH_INSTALL_TARGET}/bin\ncc -o ${BOSH_INSTALL_TARGET}/bin/hello hello.c\necho \"$BOSH_PACKAGE_NAME $BOSH_PACKAGE_VERSION\" > ${BOSH_INSTALL_TARGET}/built-as\n";

fn layout() -> (tempfile::TempDir, Layout) {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path().join("vcap"));
    layout.create().unwrap();
    (dir, layout)
}

#[tokio::test]
async fn compiles_a_c_program_and_the_result_runs() {
    let (dir, layout) = layout();
    let src = source_tarball(
        &[("packaging", PACKAGING, 0o644), ("hello.c", HELLO_C, 0o644)],
        true,
    );
    let digest = format!("sha1:{};sha256:{}", sha1_hex(&src), sha256_hex(&src));
    let compiled = Compiler::new(layout.clone())
        .compile(PackageSource::Bytes(src), &request("hello", &digest, &[]))
        .await
        .unwrap();
    assert!(compiled.compressed);
    assert_eq!(compiled.sha1, sha1_hex(&compiled.tarball));
    assert_eq!(compiled.sha256, sha256_hex(&compiled.tarball));

    let out = dir.path().join("out");
    unpack(&compiled.tarball, &out);
    let run = std::process::Command::new(out.join("bin/hello"))
        .output()
        .unwrap();
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout), "hello from kubosh\n");
    assert_eq!(
        std::fs::read_to_string(out.join("built-as")).unwrap(),
        "hello 1.0.3\n"
    );
    // bash -x traced the script into the compilation log.
    let log = std::fs::read_to_string(
        layout
            .sys_log_dir()
            .join("compilation/packaging.stderr.log"),
    )
    .unwrap();
    assert!(log.contains("+ cc -o"), "{log}");
    // Nothing left behind.
    assert!(!layout.compile_dir().join("hello").exists());
    assert!(std::fs::symlink_metadata(layout.package_dir("hello")).is_err());
    assert!(
        !layout
            .data_packages_dir()
            .join("hello")
            .read_dir()
            .unwrap()
            .any(|_| true)
    );
}

#[tokio::test]
async fn compiles_against_an_installed_dependency() {
    let (_dir, layout) = layout();
    let compiler = Compiler::new(layout.clone());
    // The dependency: a header.
    let dep_src = source_tarball(
        &[
            (
                "packaging",
                "mkdir -p $BOSH_INSTALL_TARGET/include && cp greeting.h $BOSH_INSTALL_TARGET/include/",
                0o644,
            ),
            (
                "greeting.h",
                "#define GREETING \"hi from a dependency\"\n",
                0o644,
            ),
        ],
        false,
    );
    let dep = compiler
        .compile(
            PackageSource::Bytes(dep_src.clone()),
            &request("greeting", &sha1_hex(&dep_src), &[]),
        )
        .await
        .unwrap();
    assert!(!dep.compressed, "a plain tar source gives a plain tar");
    // Install it at packages/greeting, as the director's dependency list would.
    let installed = layout.data_package_dir("greeting", "v");
    unpack(&dep.tarball, &installed);
    std::os::unix::fs::symlink(&installed, layout.package_dir("greeting")).unwrap();

    let app_c = "#include <stdio.h>\n#include \"greeting.h\"\nint main(void) { puts(GREETING); return 0; }\n";
    let packaging = "set -e\nmkdir -p $BOSH_INSTALL_TARGET/bin\ncc -I$BOSH_PACKAGES_DIR/greeting/include -o $BOSH_INSTALL_TARGET/bin/app app.c\n";
    let src = source_tarball(
        &[("packaging", packaging, 0o644), ("app.c", app_c, 0o644)],
        true,
    );
    let path = layout.tmp_dir().join("app.tgz");
    std::fs::write(&path, &src).unwrap();
    let compiled = compiler
        .compile(
            PackageSource::Path(path),
            &request(
                "app",
                &format!("sha256:{}", sha256_hex(&src)),
                &["greeting"],
            ),
        )
        .await
        .unwrap();
    let out = layout.tmp_dir().join("app-out");
    unpack(&compiled.tarball, &out);
    let run = std::process::Command::new(out.join("bin/app"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        "hi from a dependency\n"
    );

    let err = compiler
        .compile(
            PackageSource::Bytes(src.clone()),
            &request("app", &sha1_hex(&src), &["missing"]),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, CompileError::MissingDependency { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn digest_mismatch_is_an_error() {
    let (_dir, layout) = layout();
    let src = source_tarball(
        &[("packaging", PACKAGING, 0o644), ("hello.c", HELLO_C, 0o644)],
        true,
    );
    let compiler = Compiler::new(layout.clone());
    for digest in [
        "0".repeat(40),
        format!("{};sha256:{}", sha1_hex(&src), "0".repeat(64)),
        "not a digest!".to_string(),
    ] {
        let err = compiler
            .compile(
                PackageSource::Bytes(src.clone()),
                &request("hello", &digest, &[]),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, CompileError::Digest { .. }), "{err}");
    }
    // A wrong sha1 next to a right sha256 passes: only the strongest is checked.
    compiler
        .compile(
            PackageSource::Bytes(src.clone()),
            &request(
                "hello",
                &format!("{};sha256:{}", "0".repeat(40), sha256_hex(&src)),
                &[],
            ),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn failing_packaging_carries_the_output_tail() {
    let (_dir, layout) = layout();
    let packaging = "echo compiling now\necho 'error: no such compiler' >&2\nexit 2\n";
    let src = source_tarball(&[("packaging", packaging, 0o644)], true);
    let err = Compiler::new(layout.clone())
        .compile(
            PackageSource::Bytes(src.clone()),
            &request("broken", &sha1_hex(&src), &[]),
        )
        .await
        .unwrap_err();
    let CompileError::Packaging {
        name,
        status,
        stdout,
        stderr,
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(name, "broken");
    assert_eq!(status, "exited with status 2");
    assert_eq!(stdout, "compiling now\n");
    assert!(stderr.contains("error: no such compiler"), "{stderr}");
    assert!(err.to_string().contains("no such compiler"));
    assert!(!layout.compile_dir().join("broken").exists());
}
