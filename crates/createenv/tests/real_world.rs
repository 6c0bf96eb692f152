//! create-env's split of a real manifest: `bosh-deployment`'s `bosh.yml` with
//! `warden/cpi.yml` (from `../shared/fixtures/real-world/`), interpolated as `bosh
//! create-env` would with the variables it needs, validated and split into the CPI
//! installation and the deployment of one VM. Nothing is deployed (its releases are not here).

use std::path::PathBuf;

use kubosh_base::yaml;
use kubosh_core::ops::{self, InterpolateOptions, MissingVars, OpsFile, Vars};
use kubosh_core::validate;
use kubosh_createenv::model::{self, DiskSpec};
use serde_json::{Value, json};

fn fixture(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/real-world/bosh-deployment")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn bosh_yml_on_warden() -> Value {
    let mut doc = yaml::parse_value(&fixture("bosh.yml"), "bosh.yml").unwrap();
    let cpi = OpsFile::parse(&fixture("warden/cpi.yml"), "warden/cpi.yml").unwrap();
    ops::apply_all(&[cpi], &mut doc).unwrap();
    let mut vars = Vars::new();
    for arg in [
        "internal_ip=10.245.0.11",
        "internal_gw=10.245.0.1",
        "internal_cidr=10.245.0.0/16",
        "garden_host=10.0.0.4",
        "director_name=bosh-lite",
        "mbus_bootstrap_password=MBUS-SECRET",
    ] {
        vars.add_var_arg(arg).unwrap();
    }
    vars.add_var_arg(r#"mbus_bootstrap_ssl={"ca": "CA-PEM", "certificate": "CERT-PEM", "private_key": "KEY-PEM"}"#)
        .unwrap();
    let options = InterpolateOptions {
        missing: MissingVars::Leave,
        error_on_unused: false,
    };
    ops::interpolate_with(&doc, &vars, &options).unwrap().value
}

#[test]
fn bosh_deployment_on_warden_splits_into_the_cpi_installation_and_one_vm() {
    let doc = bosh_yml_on_warden();
    let validated = validate::init_manifest(&doc).unwrap_or_else(|p| panic!("{p:?}"));
    let env = model::split(&validated.document).unwrap();
    assert_eq!(env.name, "bosh");
    let names: Vec<&str> = env.releases.iter().map(|r| r.name.as_str()).collect();
    assert!(
        names.contains(&"bosh") && names.contains(&"bosh-warden-cpi"),
        "{names:?}"
    );

    // The CPI installation: the warden CPI job, rendered with cloud_provider.properties.
    let cpi = &env.installation;
    assert_eq!(cpi.jobs.len(), 1);
    assert_eq!(cpi.jobs[0].name, "warden_cpi");
    assert_eq!(cpi.jobs[0].release, "bosh-warden-cpi");
    assert_eq!(
        cpi.mbus.expose(),
        "https://mbus:MBUS-SECRET@10.245.0.11:6868"
    );
    assert_eq!(cpi.ca.as_deref(), Some("CA-PEM"));
    let props = cpi.properties.expose();
    assert_eq!(
        props["agent"]["mbus"],
        "https://mbus:MBUS-SECRET@0.0.0.0:6868"
    );
    assert_eq!(
        props["warden_cpi"]["warden"]["connect_address"],
        "10.0.0.4:7777"
    );
    assert_eq!(
        props["warden_cpi"]["agent"]["blobstore"]["provider"],
        "local"
    );
    assert!(!cpi.ssh_tunnel);
    // Debug output never shows the mbus password or the CPI properties.
    let shown = format!("{cpi:?}");
    assert!(!shown.contains("MBUS-SECRET"), "{shown}");

    // The deployment: one VM of the `vms` pool, a 64 GiB disk from `disks`, one network.
    let d = &env.deployment;
    assert_eq!(d.group, "bosh");
    let jobs: Vec<&str> = d.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(
        jobs,
        [
            "bpm",
            "nats",
            "postgres",
            "blobstore",
            "director",
            "health_monitor"
        ]
    );
    assert_eq!(
        d.disk,
        Some(DiskSpec {
            size: 65536,
            cloud_properties: Default::default()
        })
    );
    assert!(
        d.stemcell
            .url
            .as_deref()
            .unwrap()
            .contains("warden-boshlite-ubuntu-noble")
    );
    assert_eq!(d.vm_cloud_properties["ports"][1], json!({"host": 6868}));
    assert_eq!(d.vm_env.expose()["bosh"]["mbus"]["cert"]["ca"], "CA-PEM");
    assert_eq!(d.ip.as_deref(), Some("10.245.0.11"));
    assert_eq!(
        d.networks["default"],
        json!({
            "cloud_properties": {},
            "default": ["dns", "gateway"],
            "dns": ["8.8.8.8"],
            "gateway": "10.245.0.1",
            "ip": "10.245.0.11",
            "netmask": "255.255.0.0",
            "type": "manual",
        })
    );
    assert_eq!(d.watch_time, model::split::DEFAULT_WATCH_TIME);
    // The director's properties stay the group's, to be bound per job at render time.
    assert!(
        d.group_properties
            .as_ref()
            .unwrap()
            .contains_key("director")
    );

    // The digest changes with any value and not with formatting.
    let sha = model::manifest_sha(&doc);
    let mut changed = doc.clone();
    changed["name"] = json!("bosh2");
    assert_ne!(sha, model::manifest_sha(&changed));
    let reparsed = yaml::parse_value(&yaml::to_string(&doc).unwrap(), "again").unwrap();
    assert_eq!(sha, model::manifest_sha(&reparsed));
}
