//! Stemcell tarballs: `kubosh stemcell create` -> read -> verify -> extract, bad digests
//! rejected, the real bosh-cli reads them, and the local CPI (the real `kubosh cpi`
//! process) accepts the extracted image in `create_stemcell`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kubosh_artifacts::stemcell::{CreateStemcellOptions, Stemcell, StemcellError, create};
use kubosh_cloud::*;
use kubosh_devenv::binary;
use serde_json::json;

const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");

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

fn options(image: Option<&Path>) -> CreateStemcellOptions {
    CreateStemcellOptions {
        name: "bosh-kubosh-local-ubuntu-jammy".into(),
        version: "1.5".into(),
        operating_system: "ubuntu-jammy".into(),
        image: image.map(Path::to_path_buf),
        stemcell_formats: vec!["warden-tar".into()],
        api_version: 3,
        cloud_properties: serde_json::Map::new(),
    }
}

#[test]
fn create_read_verify_and_extract() {
    let tmp = tempfile::tempdir().unwrap();
    let tgz = tmp.path().join("stemcell.tgz");
    let out = run(Command::new(KUBOSH).args([
        "stemcell",
        "create",
        "--name",
        "bosh-kubosh-local-ubuntu-jammy",
        "--version",
        "1.5",
        "--os",
        "ubuntu-jammy",
        "--tarball",
        tgz.to_str().unwrap(),
        "--cloud-properties",
        r#"{"flavor": "small"}"#,
    ]));
    assert!(out.contains("operating_system: ubuntu-jammy"), "{out}");
    let s = Stemcell::read(&tgz).unwrap();
    assert_eq!(s.manifest.name, "bosh-kubosh-local-ubuntu-jammy");
    assert_eq!(s.manifest.version, "1.5");
    assert_eq!(s.manifest.operating_system, "ubuntu-jammy");
    assert_eq!(s.manifest.api_version, Some(3));
    assert_eq!(s.manifest.stemcell_formats, ["warden-tar"]);
    assert_eq!(s.manifest.cloud_properties["flavor"], "small");
    let inspected = run(Command::new(KUBOSH).args(["stemcell", "inspect", tgz.to_str().unwrap()]));
    assert!(inspected.contains("digest verified"), "{inspected}");

    // A directory image is packed; a file image is kept verbatim.
    let rootfs = tmp.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::write(rootfs.join("etc/os-release"), "ID=ubuntu\n").unwrap();
    let from_dir = tmp.path().join("dir.tgz");
    create(&options(Some(&rootfs)), &from_dir).unwrap();
    let extracted = Stemcell::extract(&from_dir, &tmp.path().join("x1")).unwrap();
    let files = kubosh_artifacts::release::tarball::read_all(
        &std::fs::read(&extracted.image_path).unwrap(),
    )
    .unwrap();
    assert_eq!(files.get("etc/os-release"), Some(&b"ID=ubuntu\n"[..]));

    let image = tmp.path().join("disk.img");
    std::fs::write(&image, vec![7u8; 300_000]).unwrap();
    let from_file = tmp.path().join("file.tgz");
    create(&options(Some(&image)), &from_file).unwrap();
    let extracted = Stemcell::extract(&from_file, &tmp.path().join("x2")).unwrap();
    assert_eq!(
        std::fs::read(&extracted.image_path).unwrap(),
        std::fs::read(&image).unwrap()
    );
    assert_eq!(extracted.stemcell.image_size, 300_000);
}

/// A stemcell tarball with this manifest text and image.
fn tarball(manifest: &str, image: &[u8]) -> Vec<u8> {
    let mut w = kubosh_artifacts::release::tarball::TarWriter::new();
    w.file("stemcell.MF", manifest.as_bytes(), false).unwrap();
    w.file("image", image, false).unwrap();
    w.finish(false).unwrap()
}

#[test]
fn bad_digests_are_rejected() {
    let image = b"an image";
    let sha1 = kubosh_base::digest::sha1_hex(image);
    let sha256 = kubosh_base::digest::sha256_hex(image);
    let mf = |sha: &str| {
        format!(
            "name: s\nversion: '1'\noperating_system: ubuntu-jammy\nsha1: '{sha}'\ncloud_properties: {{}}\n"
        )
    };
    Stemcell::from_reader(&tarball(&mf(&sha1), image)[..]).unwrap();
    Stemcell::from_reader(&tarball(&mf(&format!("sha256:{sha256}")), image)[..]).unwrap();

    let wrong = "0".repeat(40);
    let err = Stemcell::from_reader(&tarball(&mf(&wrong), image)[..]).unwrap_err();
    assert!(matches!(err, StemcellError::Digest(_)), "{err}");
    assert_eq!(
        err.to_string(),
        format!("stemcell image: expected stream to have digest '{wrong}' but was '{sha1}'")
    );
    // The strongest digest decides.
    let mixed = format!("{sha1};sha256:{}", "0".repeat(64));
    assert!(Stemcell::from_reader(&tarball(&mf(&mixed), image)[..]).is_err());

    // Extracting a bad stemcell leaves no image behind.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad.tgz");
    std::fs::write(&path, tarball(&mf(&wrong), image)).unwrap();
    let dir = tmp.path().join("out");
    assert!(Stemcell::extract(&path, &dir).is_err());
    assert!(!dir.join("image").exists());

    // Missing pieces are named.
    let mut w = kubosh_artifacts::release::tarball::TarWriter::new();
    w.file("image", image, false).unwrap();
    let err = Stemcell::from_reader(&w.finish(false).unwrap()[..]).unwrap_err();
    assert_eq!(err.to_string(), "stemcell.MF not found in stemcell tarball");
    let mut w = kubosh_artifacts::release::tarball::TarWriter::new();
    w.file("stemcell.MF", mf(&sha1).as_bytes(), false).unwrap();
    let err = Stemcell::from_reader(&w.finish(false).unwrap()[..]).unwrap_err();
    assert_eq!(err.to_string(), "image not found in stemcell tarball");
    let err = Stemcell::from_reader(&b"not a tarball at all"[..]).unwrap_err();
    assert!(matches!(err, StemcellError::Archive(_)), "{err}");
}

#[test]
fn the_real_bosh_cli_reads_it() {
    let bosh = binary("bosh").unwrap_or_else(|e| panic!("{e}"));
    let tmp = tempfile::tempdir().unwrap();
    let tgz = tmp.path().join("stemcell.tgz");
    create(&options(None), &tgz).unwrap();
    let json = run(Command::new(&bosh)
        .args(["inspect-local-stemcell", "--json", tgz.to_str().unwrap()])
        .env("HOME", tmp.path()));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let row = &v["Tables"][0]["Rows"][0];
    assert_eq!(row["name"], "bosh-kubosh-local-ubuntu-jammy", "{json}");
    assert_eq!(row["version"], "1.5", "{json}");
    assert_eq!(row["os"], "ubuntu-jammy", "{json}");
}

#[tokio::test]
async fn the_local_cpi_accepts_the_extracted_image() {
    let tmp = tempfile::tempdir().unwrap();
    let tgz = tmp.path().join("stemcell.tgz");
    let mut opts = options(None);
    opts.cloud_properties = json!({"name": "bosh-kubosh-local-ubuntu-jammy", "version": "1.5"})
        .as_object()
        .unwrap()
        .clone();
    create(&opts, &tgz).unwrap();
    let extracted = Stemcell::extract(&tgz, &tmp.path().join("extracted")).unwrap();

    let config = tmp.path().join("cpi.yml");
    std::fs::write(
        &config,
        "state_dir: state\nmbus: nats://nats.example:4222\nagent:\n  command: [\"/bin/sh\", \"-c\", \"exec sleep 1000\"]\n",
    )
    .unwrap();
    let command = CpiCommand::new(KUBOSH)
        .args(["cpi", "--config", config.to_str().unwrap()])
        .timeout(Duration::from_secs(30));
    let cpi = ExternalCpi::new(command, "director-uuid");
    let info = cpi.info().await.unwrap();
    assert!(
        extracted
            .stemcell
            .manifest
            .stemcell_formats
            .iter()
            .any(|f| info.stemcell_formats.contains(f)),
        "CPI formats {:?}",
        info.stemcell_formats
    );
    let cid = cpi
        .create_stemcell(&CreateStemcell {
            image_path: extracted.image_path.clone(),
            cloud_properties: extracted.stemcell.manifest.cloud_properties.clone(),
        })
        .await
        .unwrap();
    let stored = tmp
        .path()
        .join("state/stemcells")
        .join(cid.as_str())
        .join("image");
    assert_eq!(
        std::fs::read(&stored).unwrap(),
        std::fs::read(&extracted.image_path).unwrap()
    );
    cpi.delete_stemcell(&cid).await.unwrap();
}
