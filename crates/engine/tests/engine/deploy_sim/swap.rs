//! `vm_strategy: create-swap-delete` on the simulated cloud: new VMs made ahead with new
//! addresses, the disks moved to them with their data, the old VMs deleted afterwards and
//! their addresses released only then; groups with static IPs fall back to delete-create;
//! a run killed anywhere leaks nothing and loses no data.

use super::*;
use kubosh_engine::state::IntentKind;

/// The world's manifest with create-swap-delete for every group (api's static IPs make it
/// fall back to delete-create).
fn swapping_manifest() -> Value {
    let mut m = manifest();
    m["update"]["vm_strategy"] = json!("create-swap-delete");
    m
}

/// Where the first cloud call `method` on `target` is in `timeline`.
fn position(timeline: &[kubosh_sim::Step], method: &str, target: &str) -> usize {
    (timeline.iter())
        .position(|s| s.side == kubosh_sim::Side::Cloud && s.method == method && s.target == target)
        .unwrap_or_else(|| panic!("no {method} of {target}"))
}

/// Writes a marker naming each web instance on its persistent disk.
fn mark_web_disks(sim: &Sim) {
    for i in sim.group("web") {
        (sim.agents)
            .write_store_file(&Sim::agent_id(&i), "data/marker", &i.uuid)
            .unwrap();
    }
}

/// Each web instance's marker is on the disk its VM has mounted now.
fn assert_web_data_kept(sim: &Sim) {
    for i in sim.group("web") {
        let marker = (sim.agents)
            .read_store_file(&Sim::agent_id(&i), "data/marker")
            .unwrap();
        assert_eq!(marker.as_deref(), Some(i.uuid.as_str()), "{}", i.name());
    }
}

/// The addresses the registry holds for the world's deployment.
async fn claimed(registry: &MemoryIpRegistry) -> BTreeSet<String> {
    (registry.held_elsewhere("another").await.unwrap().iter())
        .filter(|r| r.deployment == "sim")
        .map(|r| r.ip.to_string())
        .collect()
}

/// The addresses the records hold (inactive VMs' included).
fn recorded_ips(state: &DeploymentState) -> BTreeSet<String> {
    (state.instances.values())
        .flat_map(|i| i.held_ips().map(|(_, r)| r.ip.clone()).collect::<Vec<_>>())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn create_swap_delete_makes_the_new_vms_first_and_moves_the_disks_with_their_data() {
    let mut sim = Sim::new();
    let registry = Arc::new(MemoryIpRegistry::default());
    sim.engine.config.ip_registry = Some(registry.clone());
    sim.deploy(swapping_manifest()).await;
    mark_web_disks(&sim);
    let before = sim.state();
    sim.stemcells.push(stemcell(sim.dir.path(), "1.1"));
    sim.cloud.reset_timeline();
    let report = sim.deploy(swapping_manifest()).await;
    assert_eq!(report.updated.len(), 7, "{report:?}");

    let after = sim.state();
    let timeline = sim.cloud.timeline();
    let (mut last_made_ahead, mut first_old_deleted) = (0, usize::MAX);
    for old in before.instances.values() {
        let new = &after.instances[&old.uuid];
        let (old_vm, new_vm) = (old.vm.as_ref().unwrap(), new.vm.as_ref().unwrap());
        assert_eq!(new_vm.stemcell, "bosh-sim-ubuntu-jammy/1.1");
        assert_eq!(new.disks, old.disks, "{}: the same disks", old.name());
        assert!(new.inactive_vm.is_none());
        let created = position(&timeline, "create_vm", &new_vm.agent_id);
        let deleted = position(&timeline, "delete_vm", &old_vm.cid);
        if old.group == "api" {
            assert!(
                deleted < created,
                "{}: static IPs, delete-create",
                old.name()
            );
            assert_eq!(new.ips, old.ips);
            continue;
        }
        assert!(created < deleted, "{}: the new VM first", old.name());
        last_made_ahead = last_made_ahead.max(created);
        first_old_deleted = first_old_deleted.min(deleted);
        if old.group == "web" {
            assert_ne!(
                new.ips["default"],
                old.ips["default"],
                "{}: the new VM has a new address",
                old.name()
            );
        }
    }
    assert!(
        last_made_ahead < first_old_deleted,
        "every new VM is made in \"Creating missing vms\", before any old one goes"
    );
    assert_web_data_kept(&sim);
    // Canaries as for any update: web's canary alone, first.
    let web = update_events(&sim.events, "web");
    let web = &web[web.len() - 6..];
    assert!(web[0].0.ends_with("(canary)"), "{web:?}");
    assert_eq!(web[1], (web[0].0.clone(), State::Finished), "{web:?}");
    // The old VMs' addresses are released once they are gone.
    assert_eq!(claimed(&registry).await, recorded_ips(&after));
    sim.assert_no_leak();
    assert!(sim.deploy(swapping_manifest()).await.noop);
}

/// Every VM in the cloud is an instance's (active or inactive) or named by a pending intent.
fn assert_every_vm_recorded(sim: &Sim, state: &DeploymentState, at: Duration) {
    let mut known: BTreeSet<String> = BTreeSet::new();
    for i in state.instances.values() {
        for vm in i.vm.iter().chain(i.inactive_vm.iter().map(|x| &x.vm)) {
            known.insert(vm.cid.clone());
        }
    }
    for intent in state.intents.values() {
        known.extend(intent.cid.clone());
        match &intent.kind {
            IntentKind::CreateVm { agent_id, .. } => known.insert(agent_id.clone()),
            IntentKind::DeleteVm { vm, .. } => known.insert(vm.clone()),
            _ => false,
        };
    }
    for vm in sim.cloud.inventory().vms {
        assert!(
            known.contains(&vm.cid) || known.contains(&vm.agent_id),
            "VM {} is recorded nowhere at {at:?}",
            vm.cid
        );
    }
}

/// Drops a create-swap-delete deploy at growing virtual deadlines: at each, every VM is
/// recorded and every recorded VM's addresses are still claimed; the next deploy finishes
/// it with nothing leaked and the disks' data where it was.
#[tokio::test(start_paused = true)]
async fn a_create_swap_delete_killed_anywhere_is_finished_by_the_next_deploy() {
    let mut interrupted_at = Vec::new();
    let mut deadline = Duration::ZERO;
    loop {
        let mut sim = Sim::new();
        sim.engine.config.recovery_wait = Duration::from_secs(5);
        let registry = Arc::new(MemoryIpRegistry::default());
        sim.engine.config.ip_registry = Some(registry.clone());
        sim.deploy(swapping_manifest()).await;
        mark_web_disks(&sim);
        for (method, secs) in [("create_vm", 20), ("delete_vm", 5), ("attach_disk", 2)] {
            sim.cloud.set_latency(method, Duration::from_secs(secs));
        }
        for (method, secs) in [("apply", 3), ("compile_package", 7), ("drain", 2)] {
            sim.agents.set_latency(method, Duration::from_secs(secs));
        }
        sim.stemcells.push(stemcell(sim.dir.path(), "1.1"));
        let request = sim.request(swapping_manifest());
        let dropped = tokio::time::timeout(deadline, sim.engine.deploy(&request))
            .await
            .is_err();
        let state = sim.store.snapshot();
        assert_every_vm_recorded(&sim, &state, deadline);
        let claimed_now = claimed(&registry).await;
        for ip in recorded_ips(&state) {
            assert!(claimed_now.contains(&ip), "{ip} released at {deadline:?}");
        }

        let report = sim.deploy(swapping_manifest()).await;
        sim.assert_no_leak();
        let state = sim.state();
        assert!(state.instances.values().all(|i| i.update_completed));
        for i in state.instances.values() {
            let vm = i.vm.as_ref().unwrap();
            assert_eq!(vm.stemcell, "bosh-sim-ubuntu-jammy/1.1", "{}", i.name());
            assert!(sim.agents.agent(&vm.agent_id).unwrap().started);
        }
        assert_web_data_kept(&sim);
        assert_eq!(claimed(&registry).await, recorded_ips(&state));
        if !dropped {
            assert!(report.noop, "{report:?}");
            break;
        }
        interrupted_at.push(deadline);
        deadline += Duration::from_secs(6);
    }
    assert!(
        interrupted_at.len() >= 10,
        "interrupted at only {interrupted_at:?}"
    );
}
