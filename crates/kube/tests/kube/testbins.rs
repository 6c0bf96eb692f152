//! The control-plane binaries are installed and of matching versions: kube-apiserver and
//! kubectl on the Kubernetes minor the crate's k8s-openapi feature targets, etcd 3.6, helm 4,
//! nats-server 2, bosh-cli 7.

use std::process::Command;

use kubosh_devenv::binary;

fn version(name: &str, args: &[&str]) -> String {
    let path = binary(name).unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        out.status.success(),
        "{name} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn binaries_match_the_kubernetes_line_we_build_against() {
    // k8s-openapi is built with feature v1_36 (Cargo.toml).
    assert!(version("kube-apiserver", &["--version"]).starts_with("Kubernetes v1.36."));
    assert!(version("kubectl", &["version", "--client"]).contains("Client Version: v1.36."));
    assert!(version("etcd", &["--version"]).contains("etcd Version: 3.6."));
    assert!(version("helm", &["version", "--short"]).starts_with("v4."));
    assert!(version("nats-server", &["--version"]).starts_with("nats-server: v2."));
    assert!(version("bosh", &["--version"]).starts_with("version 7."));
}

#[test]
fn helm_renders_a_chart_offline() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("probe");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(chart.join("values.yaml"), "greeting: hello\n").unwrap();
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\ndata:\n  greeting: {{ .Values.greeting | quote }}\n",
    )
    .unwrap();
    let out = version(
        "helm",
        &[
            "template",
            "probe",
            chart.to_str().unwrap(),
            "--set",
            "greeting=hi",
        ],
    );
    assert!(out.contains("greeting: \"hi\""), "{out}");
}
