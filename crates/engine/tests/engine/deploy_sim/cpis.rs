//! Several CPIs (a CPI config) on the simulated cloud: each AZ's instances get their VMs and
//! disks from the CPI the AZ names, and the records say which; a stemcell is uploaded once per
//! CPI; a CPI renamed with `migrated_from` keeps what it made; a VM in another cloud than its
//! AZ's CPI is made again there; a disk never moves between clouds. (The named clouds here
//! are the same simulated cloud under other names: which program a call reaches is the e2e
//! tests' to check, with two local clouds.)

use super::*;
use kubosh_core::manifest::CpiConfig;
use kubosh_engine::clouds::NamedClouds;

/// The world's cloud config with AZ z2 served by CPI `cpi`.
fn z2_on(cpi: &str) -> Value {
    let mut cloud = cloud_config();
    cloud["azs"][1]["cpi"] = json!(cpi);
    cloud
}

/// Named CPIs (as a CPI config has them), each the world's simulated cloud.
fn named(sim: &Sim, config: Value) -> NamedClouds {
    let config: CpiConfig = serde_json::from_value(config).unwrap();
    let clouds = (config.cpis.iter())
        .map(|c| {
            (
                c.name.clone(),
                sim.cloud.clone() as Arc<dyn kubosh_cloud::Cloud>,
            )
        })
        .collect();
    NamedClouds::of(config, clouds)
}

/// How often the cloud was asked for `method` since its timeline was reset.
fn calls(sim: &Sim, method: &str) -> usize {
    (sim.cloud.timeline().iter())
        .filter(|s| s.side == kubosh_sim::Side::Cloud && s.method == method)
        .count()
}

#[tokio::test(start_paused = true)]
async fn each_az_uses_its_cpi_and_a_disk_never_changes_clouds() {
    let mut sim = Sim::new();
    sim.engine.named_clouds = named(&sim, json!({"cpis": [{"name": "b", "type": "sim"}]}));
    let deploy = |sim: &Sim, cloud: Value| {
        let request = sim.request_on(manifest(), cloud);
        let engine = sim.engine.clone();
        async move { engine.deploy(&request).await }
    };
    sim.cloud.reset_timeline();
    deploy(&sim, z2_on("b")).await.unwrap();
    let state = sim.state();
    for i in state.instances.values() {
        let cpi = (i.az.as_deref() == Some("z2")).then(|| "b".to_string());
        assert_eq!(i.vm.as_ref().unwrap().cpi, cpi, "{}", i.name());
        for d in &i.disks {
            assert_eq!(d.cpi, cpi, "{}: its disk", i.name());
        }
    }
    assert_eq!(calls(&sim, "create_stemcell"), 2, "once per CPI");
    let keys: Vec<&String> = state.stemcells.keys().collect();
    assert_eq!(
        keys,
        ["bosh-sim-ubuntu-jammy/1.0", "bosh-sim-ubuntu-jammy/1.0@b"]
    );
    sim.assert_no_leak();

    // z2 now served by another cloud: web's disks there cannot follow, nothing changes.
    sim.engine.named_clouds = named(
        &sim,
        json!({"cpis": [{"name": "b", "type": "sim"}, {"name": "c", "type": "sim"}]}),
    );
    sim.cloud.reset_timeline();
    let err = deploy(&sim, z2_on("c")).await.unwrap_err().to_string();
    assert!(
        err.contains("cannot keep its persistent disk")
            && err.contains(
                "the disk is in the cloud of CPI 'b', and AZ 'z2' is now served by CPI 'c'"
            )
            && err.contains("list CPI 'b' in its migrated_from"),
        "{err}"
    );
    let web_z2 = (state.instances.values())
        .filter(|i| i.group == "web" && i.az.as_deref() == Some("z2"))
        .count();
    assert_eq!(err.lines().count(), web_z2, "one line per disk: {err}");
    assert_eq!(calls(&sim, "create_vm") + calls(&sim, "delete_vm"), 0);
    assert_eq!(sim.state(), state);

    // The same cloud under a new name (c migrated from b): nothing to do.
    sim.engine.named_clouds = named(
        &sim,
        json!({"cpis": [{"name": "c", "type": "sim", "migrated_from": [{"name": "b"}]}]}),
    );
    sim.cloud.reset_timeline();
    let report = deploy(&sim, z2_on("c")).await.unwrap();
    assert!(report.updated.is_empty(), "{report:?}");
    assert_eq!(calls(&sim, "create_vm") + calls(&sim, "delete_vm"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_vm_without_disks_moves_to_the_cloud_its_az_names_now() {
    let mut sim = Sim::new();
    let mut m = manifest();
    m["instance_groups"] = json!([m["instance_groups"][2].clone()]);
    sim.engine.named_clouds = named(
        &sim,
        json!({"cpis": [{"name": "b", "type": "sim"}, {"name": "c", "type": "sim"}]}),
    );
    let request = |cloud: Value| sim.request_on(m.clone(), cloud);
    sim.engine.deploy(&request(z2_on("b"))).await.unwrap();
    let before = sim.state();
    let report = sim.engine.deploy(&request(z2_on("c"))).await.unwrap();
    let after = sim.state();
    for (uuid, old) in &before.instances {
        let new = &after.instances[uuid];
        let (old_vm, new_vm) = (old.vm.as_ref().unwrap(), new.vm.as_ref().unwrap());
        if old.az.as_deref() == Some("z2") {
            assert_eq!(new_vm.cpi.as_deref(), Some("c"));
            assert_ne!(new_vm.cid, old_vm.cid, "{}: a new VM", old.name());
        } else {
            assert_eq!(new_vm, old_vm, "{}: untouched", old.name());
        }
    }
    assert_eq!(report.updated.len(), 1, "{report:?}");
    let moved: Vec<&Vec<&str>> = (report.plan.iter())
        .filter(|p| p.az.as_deref() == Some("z2"))
        .map(|p| &p.changes)
        .collect();
    assert_eq!(moved, [&vec!["cpi"]], "the change is named");
    sim.assert_no_leak();
}
