//! Several CPIs (issue 25 item 4): a CPI config names a second local cloud (its own state
//! directory) and the cloud config's AZ `z2` names that CPI; each AZ's VMs go to its own
//! cloud, the stemcell is uploaded once to each, and deleting the deployment deletes the
//! VMs in both. Under the controller (`CpiConfig`) and with `kubosh deploy --cpi-config`
//! (with a runtime config too). Real kube-apiserver, real nats-server, two local clouds,
//! kubosh agents.

use std::path::Path;

use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};

use crate::controller::{
    apply, apply_deployment, apply_inputs, assert_stalls, control_plane, deployment_object,
    ready_at, start_replica, stored_state, wait_gone,
};
use crate::director_world::{StopAgents, World, cloud_config, hello_deployment, http_get};
use kubosh_cloud::local::inventory;
use kubosh_engine::state::{DeploymentState, DirStore, StateStore};
use kubosh_kube::api::{Deployment, Stemcell};

/// The world's cloud config with a second AZ `z2` on subnet `127.0.<net+1>.0/24`, served by
/// CPI `second`.
fn two_clouds(net: u8) -> Value {
    let mut cloud = cloud_config(net);
    cloud["azs"] = json!([{"name": "z1"}, {"name": "z2", "cpi": "second"}]);
    let second = net + 1;
    cloud["networks"][0]["subnets"]
        .as_array_mut()
        .unwrap()
        .push(json!({
            "range": format!("127.0.{second}.0/24"),
            "gateway": format!("127.0.{second}.1"),
            "az": "z2",
            "reserved": [format!("127.0.{second}.200-127.0.{second}.254")],
        }));
    cloud
}

/// The CPI config: CPI `second` is the local cloud with its state in `cloud`.
fn cpi_config(cloud: &Path) -> Value {
    json!({"cpis": [{"name": "second", "type": "local",
                     "properties": {"state_dir": cloud.display().to_string()}}]})
}

/// `hello` with one web instance in each AZ.
fn across_azs(port: u16) -> Value {
    let mut manifest = hello_deployment(port, "Hello");
    manifest["instance_groups"][0]["azs"] = json!(["z1", "z2"]);
    manifest
}

/// Each instance's VM is in the cloud its AZ names (z1: the director's own, z2: `second`),
/// and answers.
fn assert_split(w: &World, second: &Path, state: &DeploymentState) {
    let first = inventory(&w.cloud()).unwrap();
    let other = inventory(second).unwrap();
    assert_eq!(state.instances.len(), 2);
    for i in state.instances.values() {
        let vm = i.vm.as_ref().expect("a VM");
        let (cloud, cpi) = match i.az.as_deref() {
            Some("z2") => (&other, Some("second")),
            _ => (&first, None),
        };
        assert_eq!(vm.cpi.as_deref(), cpi, "{}", i.name());
        assert!(
            cloud.vms.iter().any(|v| v.cid == vm.cid),
            "{}: its VM {} is in {cpi:?}'s cloud",
            i.name(),
            vm.cid
        );
        let ip = &i.ips["default"].ip;
        let body = http_get(ip, w.port).unwrap_or_else(|| panic!("{} answers on {ip}", i.name()));
        assert!(body.contains("Hello"), "{body}");
    }
    // The compilation workers are z1's; the instances one in each cloud.
    assert_eq!(first.vms.len(), 1, "{first:?}");
    assert_eq!(other.vms.len(), 1, "{other:?}");
    assert_eq!(first.stemcells.len(), 1, "{first:?}");
    assert_eq!(
        other.stemcells.len(),
        1,
        "uploaded once to each cloud: {other:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpi_config_puts_each_azs_vms_in_its_own_cloud_under_the_controller() {
    let cp = control_plane().await;
    let w = World::new(44);
    let second = w.dir.path().join("cloud-2");
    let _stop = StopAgents(second.clone());
    let ns = "cpi-config-e2e";
    cp.create_namespace(ns).await.unwrap();
    let client = cp.client().await.unwrap();
    let _controller = start_replica(&w, cp, ns, "cpi-configs");
    apply_inputs(&client, ns, &w).await;
    apply(
        &client,
        ns,
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "CloudConfig",
               "metadata": {"name": "default"}, "spec": two_clouds(w.net)}),
    )
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let generation =
        apply_deployment(&client, ns, &deployment_object("hello", across_azs(w.port))).await;
    // z2 names a CPI that no CpiConfig defines yet: the cloud config's error, nothing made.
    assert_stalls(
        &deployments,
        "hello",
        &w,
        "InvalidCloudConfig",
        "AZ 'z2' names CPI 'second', which no CPI config defines (defined: none)",
    )
    .await;
    assert!(inventory(&w.cloud()).unwrap().vms.is_empty());
    // The CpiConfig appears: the deployment deploys, without a change of its own.
    apply(
        &client,
        ns,
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "CpiConfig",
               "metadata": {"name": "clouds"}, "spec": cpi_config(&second)}),
    )
    .await;
    ready_at(&deployments, "hello", &w, generation).await;
    assert_split(&w, &second, &stored_state(&client, ns, "hello").await);
    let stemcell = Api::<Stemcell>::namespaced(client.clone(), ns)
        .get("jammy-1.0")
        .await
        .unwrap();
    let annotations = stemcell.annotations();
    assert!(annotations.contains_key("kubosh.io/cid"), "{annotations:?}");
    assert!(
        annotations.contains_key("kubosh.io/cid.second"),
        "{annotations:?}"
    );

    // Deleting the deployment deletes its VMs in both clouds.
    deployments
        .delete("hello", &Default::default())
        .await
        .unwrap();
    wait_gone(&deployments, "hello").await;
    for cloud in [w.cloud(), second] {
        let left = inventory(&cloud).unwrap();
        assert!(left.vms.is_empty(), "{}: {left:?}", cloud.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubosh_deploy_with_a_cpi_config_and_a_runtime_config() {
    let w = World::new(46);
    let second = w.dir.path().join("cloud-2");
    let _stop = StopAgents(second.clone());
    crate::director_world::write_json(&w.dir.path().join("cloud-config.yml"), &two_clouds(w.net));
    let cpis = w.dir.path().join("cpi-config.yml");
    crate::director_world::write_json(&cpis, &cpi_config(&second));
    // bosh-deployment's own runtime configs (bosh-dns with its director-wide certificates,
    // bpm), their releases stand-ins with the real jobs' names and property specs.
    let stand_ins = stand_in_releases(w.dir.path());
    let rcs = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/fixtures/real-world/bosh-deployment/runtime-configs"
    );
    w.write_manifest(&across_azs(w.port));
    let deploy = |with_cpi_config: bool| {
        let mut c = w.command("deploy");
        c.args(["--runtime-config", &format!("{rcs}/dns.yml")])
            .args(["--runtime-config", &format!("{rcs}/bpm.yml")])
            .args(["--vars-store", &w.path("vars.yml")]);
        for release in &stand_ins {
            c.args(["--release", release.to_str().unwrap()]);
        }
        if with_cpi_config {
            c.args(["--cpi-config", cpis.to_str().unwrap()]);
        }
        w.output(c)
    };
    // Without the CPI config, z2's CPI is unknown: refused before any cloud call.
    let (ok, stdout, stderr) = deploy(false);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("azs[1].cpi"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(w.calls(), 0);

    let (ok, stdout, stderr) = deploy(true);
    assert!(ok, "{stdout}\n{stderr}");
    let state = w.state().await;
    assert_split(&w, &second, &state);
    let certificates = dns_certificates(&w, &second, &state);
    assert_eq!(certificates.len(), 2);
    assert!(
        (certificates.iter()).all(|c| c.starts_with("-----BEGIN CERTIFICATE-----")),
        "{certificates:?}"
    );
    assert_eq!(certificates[0], certificates[1], "one certificate");
    let mode = std::fs::metadata(w.state_dir().join("cpi-config.json")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600,
        "the kept CPI config is its owner's only"
    );

    // The director kept the CPI config: the next deploy without it changes nothing.
    let (ok, stdout, stderr) = deploy(false);
    assert!(ok, "{stdout}\n{stderr}");
    assert_eq!(w.state().await.instances, state.instances);

    // A second deployment of the director uses the stemcells uploaded for the first.
    let mut other = across_azs(w.port);
    other["name"] = json!("other");
    other["instance_groups"][0]["instances"] = json!(1);
    other["instance_groups"][0]["azs"] = json!(["z2"]);
    w.write_manifest(&other);
    let (ok, stdout, stderr) = deploy(false);
    assert!(ok, "{stdout}\n{stderr}");
    assert_eq!(
        inventory(&second).unwrap().stemcells.len(),
        1,
        "not uploaded again"
    );
    assert_eq!(inventory(&w.cloud()).unwrap().stemcells.len(), 1);
    // `((/dns_api_client_tls))` is the director's: one certificate for both deployments,
    // kept in its state, never in a deployment's vars store.
    let other_state = DirStore::new(w.state_dir().join("deployments/other"))
        .load()
        .await
        .unwrap();
    let other = dns_certificates(&w, &second, &other_state);
    assert_eq!(other, certificates[..1].to_vec());
    let kept = std::fs::read_to_string(w.state_dir().join("director-variables.yml")).unwrap();
    assert!(
        kept.contains("/dns_api_client_tls"),
        "the director keeps its variables"
    );
    let store = std::fs::read_to_string(w.path("vars.yml")).unwrap_or_default();
    assert!(!store.contains("/dns_"), "{store}");
}

/// Stand-ins for bosh-dns/1.39.28 and bpm/0.8.0 (the releases of bosh-deployment's runtime
/// configs, not downloadable here): the jobs' names and the properties the runtime configs
/// set (the Windows job too, which the jammy stemcell never gets); bosh-dns renders its API
/// client certificate.
fn stand_in_releases(dir: &Path) -> Vec<std::path::PathBuf> {
    let spec = "---\nname: bosh-dns\ntemplates:\n  api-client.crt.erb: config/api-client.crt\npackages: []\nproperties:\n  api.client.tls:\n    type: certificate\n  api.server.tls:\n    type: certificate\n  cache.enabled:\n    default: false\n  health.enabled:\n    default: false\n  health.client.tls:\n    type: certificate\n  health.server.tls:\n    type: certificate\n  configure_systemd_resolved:\n    default: false\n  disable_recursors:\n    default: false\n  override_nameserver:\n    default: true\n";
    let windows = spec.replace("name: bosh-dns", "name: bosh-dns-windows");
    let dns = [
        ("jobs/bosh-dns/spec", spec),
        ("jobs/bosh-dns/monit", ""),
        ("jobs/bosh-dns-windows/spec", &windows),
        ("jobs/bosh-dns-windows/monit", ""),
        (
            "jobs/bosh-dns-windows/templates/api-client.crt.erb",
            "<%= p('api.client.tls.certificate') %>",
        ),
        (
            "jobs/bosh-dns/templates/api-client.crt.erb",
            "<%= p('api.client.tls.certificate') %>",
        ),
    ];
    let bpm = [
        (
            "jobs/bpm/spec",
            "---\nname: bpm\ntemplates: {}\npackages: []\nproperties: {}\n",
        ),
        ("jobs/bpm/monit", ""),
    ];
    let mut tarballs = Vec::new();
    for (release, files) in [
        (("bosh-dns", "1.39.28"), &dns[..]),
        (("bpm", "0.8.0"), &bpm[..]),
    ] {
        let source = tempfile::tempdir().unwrap();
        let tarball = dir.join(format!("{}.tgz", release.0));
        crate::runtime_config::build_release(source.path(), release, files, &tarball);
        tarballs.push(tarball);
    }
    tarballs
}

/// The API client certificate bosh-dns rendered on each instance of `state`, whichever
/// cloud its VM is in.
fn dns_certificates(w: &World, second: &Path, state: &DeploymentState) -> Vec<String> {
    (state.instances.values())
        .map(|i| {
            let vm = &i.vm.as_ref().unwrap().cid;
            let cloud = match i.az.as_deref() {
                Some("z2") => second.to_path_buf(),
                _ => w.cloud(),
            };
            let motd = cloud
                .join("vms")
                .join(vm)
                .join("root/jobs/bosh-dns/config/api-client.crt");
            std::fs::read_to_string(&motd).unwrap_or_else(|e| panic!("{}: {e}", motd.display()))
        })
        .collect()
}
