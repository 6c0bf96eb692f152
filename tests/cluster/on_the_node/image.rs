//! What the controller image must contain, checked in a Pod under the chart's own security
//! context (uid 65532, read-only root file system, no capabilities): Ruby that renders ERB,
//! the `kubosh` binary with the local cloud's CPI and agent, CA certificates, a compiler for
//! the local cloud's compilation VMs, the mount point of their `/var/vcap`.

use std::time::Duration;

use crate::{cluster, eventually, kubectl};

#[tokio::test(flavor = "multi_thread")]
async fn the_image_has_what_the_controller_needs_under_the_charts_security_context() {
    let cluster = cluster().await;
    let cp = &*cluster;
    let ns = "image-check";
    cp.create_namespace(ns).await.unwrap();
    // The chart's securityContext and podSecurityContext, as it renders them.
    let rendered = super::install::render_chart(&[]);
    let chart_pod = (rendered.split("\n---\n"))
        .filter_map(|doc| kubosh_base::yaml::parse_value(doc, "chart").ok())
        .find(|doc| doc["kind"] == "Deployment")
        .expect("the chart's Deployment")["spec"]["template"]["spec"]
        .clone();
    let container = &chart_pod["containers"][0];
    let script = r#"
        echo "uid=$(id -u) gid=$(id -g)"
        ruby -rerb -e 'puts ERB.new("erb=<%= 6 * 7 %>").result'
        kubosh --version
        kubosh cpi --help >/dev/null && echo cpi=yes
        kubosh agent --help >/dev/null && echo agent=yes
        test -s /etc/ssl/certs/ca-certificates.crt && echo ca=yes
        test -d /var/vcap && echo vcap=yes
        if touch /usr/local/probe 2>/dev/null; then echo root=writable; else echo root=read-only; fi
        touch /tmp/probe && echo tmp=writable
        printf 'int main(void){return 0;}' > /tmp/a.c && cc -o /tmp/a /tmp/a.c && /tmp/a && echo cc=yes
    "#;
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "check", "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "securityContext": chart_pod["securityContext"],
            "containers": [{
                "name": "check",
                "image": container["image"],
                "imagePullPolicy": "Never",
                "securityContext": container["securityContext"],
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    });
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), pod.to_string()).unwrap();
    kubectl(cp, &["apply", "-f", &file.path().display().to_string()]);
    let phase = eventually(cp, "the check Pod ends", Duration::from_secs(120), || {
        let phase = kubectl(
            cp,
            &[
                "get",
                "pod",
                "check",
                "-n",
                ns,
                "-o",
                "jsonpath={.status.phase}",
            ],
        );
        matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
    })
    .await;
    let log = kubectl(cp, &["logs", "check", "-n", ns]);
    assert_eq!(phase, "Succeeded", "{log}");
    for line in [
        "uid=65532 gid=65532",
        "erb=42",
        "cpi=yes",
        "agent=yes",
        "ca=yes",
        "vcap=yes",
        "root=read-only",
        "tmp=writable",
        "cc=yes",
    ] {
        assert!(log.lines().any(|l| l == line), "{line} in:\n{log}");
    }
    assert!(log.contains("kubosh 0.1.0"), "{log}");
}
