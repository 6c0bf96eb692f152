//! Instance identity and placement (`bosh-protocols.md` §4.2): which existing instances an
//! instance group keeps, in which AZ each instance lives, which indexes new instances get,
//! which instance is the bootstrap one, and which instances become obsolete.

use std::collections::{BTreeMap, BTreeSet};

use crate::state::InstanceRecord;

/// What placement needs of one instance group.
#[derive(Debug, Clone, Default)]
pub struct GroupDemand {
    /// The group's name.
    pub name: String,
    /// `instances`.
    pub instances: u64,
    /// `azs` in manifest order (empty: the group has no AZs).
    pub azs: Vec<String>,
    /// With `static_ips`: the AZ each static IP's subnet allows, one entry per IP (a subnet
    /// may span several AZs; the first one listed that the group uses is taken). Instances
    /// then go where their addresses are.
    pub static_ip_azs: Option<Vec<StaticIpAz>>,
    /// `migrated_from`: groups whose instances become this group's, with the AZ to give
    /// those that had none.
    pub migrated_from: Vec<(String, Option<String>)>,
}

/// A static IP and the AZs of its subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticIpAz {
    /// The address, as written.
    pub ip: String,
    /// AZs of the subnet holding it.
    pub azs: Vec<String>,
}

/// One instance of the placed group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Its uuid: kept from the existing instance, or new.
    pub uuid: String,
    /// Its index.
    pub index: u64,
    /// Its AZ.
    pub az: Option<String>,
    /// The group's bootstrap instance.
    pub bootstrap: bool,
    /// It exists already (under this group or one it migrates from).
    pub existing: bool,
    /// The group it was under before (`migrated_from`), when not this one.
    pub migrated_from: Option<String>,
}

/// The placement of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Desired instances, by index.
    pub instances: Vec<Placed>,
    /// Existing instances no longer wanted (uuids), highest index first as BOSH deletes
    /// them.
    pub obsolete: Vec<String>,
}

/// Places one group. `existing` holds every instance record of the deployment; those of
/// this group (and of the groups it migrates from) are candidates. `new_uuid` makes uuids
/// for new instances.
pub fn place(
    demand: &GroupDemand,
    existing: &[&InstanceRecord],
    new_uuid: &mut dyn FnMut() -> String,
) -> Placement {
    let mut free: Vec<Candidate> = candidates(demand, existing);
    let wanted = usize::try_from(demand.instances).unwrap_or(usize::MAX);
    let kept = match &demand.static_ip_azs {
        Some(ips) => keep_for_static_ips(demand, ips, wanted, &mut free, new_uuid),
        None if demand.azs.is_empty() => keep_without_azs(wanted, &mut free, new_uuid),
        None => keep_balanced(demand, wanted, &mut free, new_uuid),
    };
    let mut instances = assign_indexes(kept, &free);
    choose_bootstrap(&mut instances);
    let mut obsolete = free;
    obsolete.sort_by_key(|c| std::cmp::Reverse(c.index));
    Placement {
        instances,
        obsolete: obsolete.into_iter().map(|c| c.uuid).collect(),
    }
}

/// The instances kept (taken out of `free`) or created, each with its AZ.
type Kept = Vec<(Candidate, Option<String>)>;

/// One slot per static IP, in the AZ of its subnet (the first of the group's AZs the
/// subnet spans). Existing instances already in a slot's AZ fill it first.
fn keep_for_static_ips(
    demand: &GroupDemand,
    ips: &[StaticIpAz],
    wanted: usize,
    free: &mut Vec<Candidate>,
    new_uuid: &mut dyn FnMut() -> String,
) -> Kept {
    let mut kept = Kept::new();
    let mut slots: BTreeMap<Option<String>, usize> = BTreeMap::new();
    for ip in ips.iter().take(wanted) {
        let az = ip
            .azs
            .iter()
            .find(|az| demand.azs.contains(az))
            .or(ip.azs.first())
            .cloned();
        *slots
            .entry(if demand.azs.is_empty() { None } else { az })
            .or_default() += 1;
    }
    for (az, count) in slots {
        for _ in 0..count {
            let pos = free.iter().position(|c| c.az == az);
            match pos {
                Some(p) => {
                    let c = free.remove(p);
                    kept.push((c, az.clone()));
                }
                None => kept.push((Candidate::new(new_uuid()), az.clone())),
            }
        }
    }
    kept
}

/// A group without AZs: the first candidates, then new instances.
fn keep_without_azs(
    wanted: usize,
    free: &mut Vec<Candidate>,
    new_uuid: &mut dyn FnMut() -> String,
) -> Kept {
    let mut kept = Kept::new();
    for _ in 0..wanted {
        if free.is_empty() {
            kept.push((Candidate::new(new_uuid()), None));
        } else {
            let c = free.remove(0);
            kept.push((c, None));
        }
    }
    kept
}

/// A group with AZs: instances with disks stay put, the rest are balanced across AZs.
fn keep_balanced(
    demand: &GroupDemand,
    wanted: usize,
    free: &mut Vec<Candidate>,
    new_uuid: &mut dyn FnMut() -> String,
) -> Kept {
    let mut kept = Kept::new();
    // (1) Instances with persistent disks stay in their AZ when it is still wanted.
    let mut counts: BTreeMap<String, usize> = demand.azs.iter().map(|az| (az.clone(), 0)).collect();
    let mut i = 0;
    while i < free.len() && kept.len() < wanted {
        let c = &free[i];
        match &c.az {
            Some(az) if c.has_disk && counts.contains_key(az) => {
                let c = free.remove(i);
                let az = c.az.clone();
                if let Some(n) = az.as_ref().and_then(|az| counts.get_mut(az)) {
                    *n += 1;
                }
                kept.push((c, az));
            }
            _ => i += 1,
        }
    }
    // (2) The rest balanced: the AZ with the fewest instances, ties broken by "has an
    // unclaimed existing instance", then by name.
    while kept.len() < wanted {
        let Some(az) = counts
            .iter()
            .min_by_key(|(az, n)| {
                let has_existing = free.iter().any(|c| c.az.as_ref() == Some(*az));
                (**n, !has_existing, (*az).clone())
            })
            .map(|(az, _)| az.clone())
        else {
            break;
        };
        if let Some(n) = counts.get_mut(&az) {
            *n += 1;
        }
        let az = Some(az);
        match free.iter().position(|c| c.az == az) {
            Some(p) => {
                let c = free.remove(p);
                kept.push((c, az));
            }
            None => kept.push((Candidate::new(new_uuid()), az)),
        }
    }
    kept
}

/// Indexes: kept instances keep theirs (unless two migrated groups collide); new ones take
/// the lowest index no instance of the group holds, the `obsolete` ones included (they
/// still exist until deleted). Sorted by index.
fn assign_indexes(kept: Kept, obsolete: &[Candidate]) -> Vec<Placed> {
    let mut used: BTreeSet<u64> = obsolete.iter().filter_map(|c| c.index).collect();
    let mut instances: Vec<Placed> = Vec::new();
    let mut needs_index: Vec<usize> = Vec::new();
    for (c, az) in kept {
        let index = c.index.filter(|i| used.insert(*i));
        if index.is_none() {
            needs_index.push(instances.len());
        }
        instances.push(Placed {
            uuid: c.uuid,
            index: index.unwrap_or(0),
            az,
            bootstrap: c.bootstrap,
            existing: c.index.is_some(),
            migrated_from: c.migrated_from,
        });
    }
    let mut next = 0u64;
    for i in needs_index {
        while used.contains(&next) {
            next += 1;
        }
        used.insert(next);
        instances[i].index = next;
    }
    instances.sort_by_key(|p| p.index);
    instances
}

/// Bootstrap: kept when exactly one desired instance has it, else the lowest index.
fn choose_bootstrap(instances: &mut [Placed]) {
    let holders = instances.iter().filter(|p| p.bootstrap).count();
    if holders != 1 {
        for (i, p) in instances.iter_mut().enumerate() {
            p.bootstrap = i == 0;
        }
    }
}

#[derive(Debug, Clone)]
struct Candidate {
    uuid: String,
    index: Option<u64>,
    az: Option<String>,
    has_disk: bool,
    bootstrap: bool,
    migrated_from: Option<String>,
}

impl Candidate {
    fn new(uuid: String) -> Candidate {
        Candidate {
            uuid,
            index: None,
            az: None,
            has_disk: false,
            bootstrap: false,
            migrated_from: None,
        }
    }
}

/// This group's existing instances, then those of the groups it migrates from, each by
/// index.
fn candidates(demand: &GroupDemand, existing: &[&InstanceRecord]) -> Vec<Candidate> {
    let mut own: Vec<Candidate> = existing
        .iter()
        .filter(|r| r.group == demand.name)
        .map(|r| candidate(r, None, None))
        .collect();
    own.sort_by_key(|c| c.index);
    for (group, az) in &demand.migrated_from {
        let mut theirs: Vec<Candidate> = existing
            .iter()
            .filter(|r| &r.group == group)
            .map(|r| candidate(r, Some(group.clone()), az.clone()))
            .collect();
        theirs.sort_by_key(|c| c.index);
        own.extend(theirs);
    }
    own
}

fn candidate(r: &InstanceRecord, migrated_from: Option<String>, az: Option<String>) -> Candidate {
    Candidate {
        uuid: r.uuid.clone(),
        index: Some(r.index),
        az: r.az.clone().or(az),
        has_disk: !r.disks.is_empty(),
        bootstrap: r.bootstrap && migrated_from.is_none(),
        migrated_from,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{DiskRecord, InstanceState};

    fn record(group: &str, index: u64, az: Option<&str>, disk: bool) -> InstanceRecord {
        InstanceRecord {
            group: group.into(),
            index,
            uuid: format!("{group}-{index}"),
            az: az.map(String::from),
            bootstrap: index == 0,
            state: InstanceState::Started,
            update_completed: true,
            vm: None,
            disks: if disk {
                vec![DiskRecord {
                    cid: format!("d-{index}"),
                    name: String::new(),
                    size_mib: 1024,
                    cloud_properties: serde_json::json!({}),
                    snapshots: Vec::new(),
                    cpi: None,
                }]
            } else {
                vec![]
            },
            ips: Default::default(),
            applied: None,
            inactive_vm: None,
        }
    }

    fn uuids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("new-{n}")
        }
    }

    fn demand(instances: u64, azs: &[&str]) -> GroupDemand {
        GroupDemand {
            name: "web".into(),
            instances,
            azs: azs.iter().map(|s| s.to_string()).collect(),
            ..GroupDemand::default()
        }
    }

    fn summary(p: &Placement) -> Vec<(String, u64, Option<String>, bool)> {
        p.instances
            .iter()
            .map(|i| (i.uuid.clone(), i.index, i.az.clone(), i.bootstrap))
            .collect()
    }

    #[test]
    fn a_fresh_group_is_balanced_across_azs_alphabetically() {
        let p = place(&demand(5, &["z2", "z1", "z3"]), &[], &mut uuids());
        let azs: Vec<_> = p.instances.iter().map(|i| i.az.clone().unwrap()).collect();
        assert_eq!(azs, ["z1", "z2", "z3", "z1", "z2"]);
        assert_eq!(
            p.instances.iter().map(|i| i.index).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert!(p.instances[0].bootstrap);
        assert_eq!(p.instances.iter().filter(|i| i.bootstrap).count(), 1);
        assert!(p.obsolete.is_empty());
    }

    #[test]
    fn a_second_placement_of_the_same_group_changes_nothing() {
        let first = place(&demand(4, &["z1", "z2"]), &[], &mut uuids());
        let records: Vec<InstanceRecord> = first
            .instances
            .iter()
            .map(|p| InstanceRecord {
                uuid: p.uuid.clone(),
                bootstrap: p.bootstrap,
                ..record("web", p.index, p.az.as_deref(), false)
            })
            .collect();
        let refs: Vec<&InstanceRecord> = records.iter().collect();
        let second = place(&demand(4, &["z1", "z2"]), &refs, &mut uuids());
        assert_eq!(summary(&first), summary(&second));
        assert!(second.instances.iter().all(|i| i.existing));
    }

    #[test]
    fn scale_down_removes_the_highest_indexes() {
        let records: Vec<InstanceRecord> = (0..5)
            .map(|i| record("web", i, Some(if i % 2 == 0 { "z1" } else { "z2" }), false))
            .collect();
        let refs: Vec<&InstanceRecord> = records.iter().collect();
        let p = place(&demand(3, &["z1", "z2"]), &refs, &mut uuids());
        let kept: Vec<u64> = p.instances.iter().map(|i| i.index).collect();
        assert_eq!(kept, [0, 1, 2]);
        assert_eq!(p.obsolete, ["web-4", "web-3"]);
    }

    #[test]
    fn scale_up_reuses_indexes_and_keeps_the_bootstrap() {
        let mut records: Vec<InstanceRecord> =
            vec![record("web", 0, None, false), record("web", 2, None, false)];
        records[0].bootstrap = false;
        records[1].bootstrap = true;
        let refs: Vec<&InstanceRecord> = records.iter().collect();
        let p = place(&demand(4, &[]), &refs, &mut uuids());
        assert_eq!(
            summary(&p),
            [
                ("web-0".into(), 0, None, false),
                ("new-1".into(), 1, None, false),
                ("web-2".into(), 2, None, true),
                ("new-2".into(), 3, None, false),
            ]
        );
    }

    #[test]
    fn instances_with_disks_stay_in_their_az_when_it_is_still_wanted() {
        let records = [
            record("web", 0, Some("z1"), true),
            record("web", 1, Some("z1"), true),
            record("web", 2, Some("z3"), true),
        ];
        let refs: Vec<&InstanceRecord> = records.iter().collect();
        let p = place(&demand(3, &["z1", "z2"]), &refs, &mut uuids());
        let got: Vec<_> = p
            .instances
            .iter()
            .map(|i| (i.uuid.as_str(), i.az.as_deref()))
            .collect();
        // The z3 instance is gone with its AZ; a new one fills z2.
        assert_eq!(
            got,
            [
                ("web-0", Some("z1")),
                ("web-1", Some("z1")),
                ("new-1", Some("z2"))
            ]
        );
        assert_eq!(p.instances[2].index, 3);
        assert_eq!(p.obsolete, ["web-2"]);
    }

    #[test]
    fn static_ips_put_instances_in_the_azs_of_their_subnets() {
        let mut d = demand(3, &["z1", "z2"]);
        d.static_ip_azs = Some(vec![
            StaticIpAz {
                ip: "10.0.1.10".into(),
                azs: vec!["z2".into()],
            },
            StaticIpAz {
                ip: "10.0.1.11".into(),
                azs: vec!["z2".into()],
            },
            StaticIpAz {
                ip: "10.0.0.10".into(),
                azs: vec!["z1".into()],
            },
        ]);
        let p = place(&d, &[], &mut uuids());
        let mut azs: Vec<_> = p.instances.iter().map(|i| i.az.clone().unwrap()).collect();
        azs.sort();
        assert_eq!(azs, ["z1", "z2", "z2"]);
    }

    #[test]
    fn migrated_instances_keep_their_identity_and_get_the_named_az() {
        let records = [
            record("old_a", 0, None, true),
            record("old_b", 0, None, true),
        ];
        let refs: Vec<&InstanceRecord> = records.iter().collect();
        let mut d = demand(2, &["z1", "z2"]);
        d.migrated_from = vec![
            ("old_a".into(), Some("z1".into())),
            ("old_b".into(), Some("z2".into())),
        ];
        let p = place(&d, &refs, &mut uuids());
        let got: Vec<_> = p
            .instances
            .iter()
            .map(|i| {
                (
                    i.uuid.as_str(),
                    i.index,
                    i.az.as_deref(),
                    i.migrated_from.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("old_a-0", 0, Some("z1"), Some("old_a")),
                ("old_b-0", 1, Some("z2"), Some("old_b"))
            ]
        );
        assert!(p.instances[0].bootstrap);
    }
}
