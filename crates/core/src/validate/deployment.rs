//! Rules for a deployment manifest, on its own and against the cloud config.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use serde_json::Value;

use super::capacity::{self, Demand, Shortage, Supply};
use super::network::{ParsedSubnet, az_list, network_azs, parse_subnets};
use super::problem::{Document, Path, Problems};
use super::shape::{RejectedKey, describe};
use super::{canonical_names, must_exist, unique_names};
use crate::manifest::{
    CloudConfig, DeploymentManifest, InstanceGroup, IpRange, Network, NetworkRef, NetworkType,
    Variable,
};

const DOC: Document = Document::Manifest;

/// Keys of v1 manifests that the Director rejects in a v2 deployment manifest
/// (`manifest_validator.rb`, `instance_group_spec_parser.rb`); other unknown keys are only
/// ignored.
pub(super) const V1_KEYS: &[RejectedKey] = &[
    RejectedKey {
        within: &[],
        key: "networks",
        message: "networks are no longer defined in the deployment manifest: define them in the cloud config",
    },
    RejectedKey {
        within: &[],
        key: "resource_pools",
        message: "resource_pools are no longer supported: define vm_types in the cloud config and give instance groups a vm_type",
    },
    RejectedKey {
        within: &[],
        key: "disk_pools",
        message: "disk_pools are no longer supported: define disk_types in the cloud config",
    },
    RejectedKey {
        within: &[],
        key: "jobs",
        message: "jobs are no longer supported at the top level: use instance_groups",
    },
    RejectedKey {
        within: &[],
        key: "vm_types",
        message: "can only be set in the cloud config",
    },
    RejectedKey {
        within: &[],
        key: "azs",
        message: "can only be set in the cloud config",
    },
    RejectedKey {
        within: &[],
        key: "disk_types",
        message: "can only be set in the cloud config",
    },
    RejectedKey {
        within: &[],
        key: "compilation",
        message: "can only be set in the cloud config",
    },
    RejectedKey {
        within: &["instance_groups", "[]"],
        key: "resource_pool",
        message: "instance groups no longer support resource_pool: give 'vm_type' (from the cloud config) or 'vm_resources'",
    },
    RejectedKey {
        within: &["instance_groups", "[]"],
        key: "persistent_disk_pool",
        message: "instance groups no longer support persistent_disk_pool: give 'persistent_disk_type' (from the cloud config)",
    },
    RejectedKey {
        within: &["instance_groups", "[]"],
        key: "templates",
        message: "instance groups no longer support templates: list them under 'jobs'",
    },
    RejectedKey {
        within: &["instance_groups", "[]"],
        key: "template",
        message: "instance groups no longer support template: list it under 'jobs'",
    },
];

/// Names the cloud config defines, and its parsed subnets per network.
struct CloudIndex<'a> {
    cc: &'a CloudConfig,
    azs: Vec<&'a str>,
    vm_types: Vec<&'a str>,
    vm_extensions: Vec<&'a str>,
    disk_types: Vec<&'a str>,
    networks: Vec<&'a str>,
    subnets: HashMap<&'a str, Vec<ParsedSubnet>>,
}

impl<'a> CloudIndex<'a> {
    fn new(cc: &'a CloudConfig) -> Self {
        CloudIndex {
            cc,
            azs: cc.azs.iter().map(|a| a.name.as_str()).collect(),
            vm_types: cc.vm_types.iter().map(|v| v.name.as_str()).collect(),
            vm_extensions: cc.vm_extensions.iter().map(|v| v.name.as_str()).collect(),
            disk_types: cc.disk_types.iter().map(|d| d.name.as_str()).collect(),
            networks: cc.networks.iter().map(|n| n.name.as_str()).collect(),
            subnets: first_definitions(&cc.networks),
        }
    }
}

/// Parsed subnets by network name. When a name is defined twice (reported in the cloud
/// config), the first definition wins, as it does everywhere else the manifest is checked:
/// a duplicate must not turn into errors about the manifest.
fn first_definitions(networks: &[Network]) -> HashMap<&str, Vec<ParsedSubnet>> {
    let mut subnets = HashMap::new();
    for (i, n) in networks.iter().enumerate() {
        let path = Path::root().key("networks").index(i);
        subnets
            .entry(n.name.as_str())
            .or_insert_with(|| parse_subnets(n, &path, None));
    }
    subnets
}

/// Checks the manifest and its references into the cloud config.
pub fn check(m: &DeploymentManifest, cc: &CloudConfig, problems: &mut Problems) {
    let root = Path::root();
    let index = CloudIndex::new(cc);
    if m.name.as_deref().is_none_or(|n| n.trim().is_empty()) {
        problems.error(DOC, root.key("name"), "is required");
    }
    check_update_block(m, problems);
    check_releases(m, problems);
    check_stemcells(m, problems);
    check_group_names(m, problems);
    let releases: Vec<&str> = m.releases.iter().map(|r| r.name.as_str()).collect();
    let stemcells: Vec<&str> = m.stemcells.iter().map(|s| s.alias.as_str()).collect();
    for (gi, g) in m.instance_groups.iter().enumerate() {
        let gp = root.key("instance_groups").index(gi);
        check_group(g, &gp, &index, &releases, &stemcells, problems);
    }
    check_migrations(m, problems);
    check_static_ips_unique(m, problems);
    check_dynamic_capacity(m, &index, problems);
    check_variables(&m.variables, problems);
    check_addons(m, &releases, problems);
}

/// Release names are unique and each release has a version.
fn check_releases(m: &DeploymentManifest, problems: &mut Problems) {
    let root = Path::root();
    unique_names(
        DOC,
        "release",
        m.releases
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.as_str(), root.key("releases").index(i).key("name"))),
        problems,
    );
    for (i, r) in m.releases.iter().enumerate() {
        if r.version.is_none() {
            problems.error(
                DOC,
                root.key("releases").index(i).key("version"),
                format!("is required for release '{}'", r.name),
            );
        }
    }
}

/// Stemcell aliases are unique; each stemcell names an `os` or a `name`, and a version.
fn check_stemcells(m: &DeploymentManifest, problems: &mut Problems) {
    let root = Path::root();
    unique_names(
        DOC,
        "stemcell alias",
        m.stemcells.iter().enumerate().map(|(i, s)| {
            (
                s.alias.as_str(),
                root.key("stemcells").index(i).key("alias"),
            )
        }),
        problems,
    );
    for (i, s) in m.stemcells.iter().enumerate() {
        let sp = root.key("stemcells").index(i);
        match (&s.os, &s.name) {
            (None, None) => problems.error(
                DOC,
                sp.key("os"),
                format!(
                    "is required: stemcell '{}' needs 'os' (e.g. ubuntu-jammy) or the full 'name'",
                    s.alias
                ),
            ),
            // BOSH accepts both and looks the stemcell up by name (stemcell.rb).
            (Some(_), Some(_)) => problems.warning(
                DOC,
                sp.key("os"),
                format!(
                    "is ignored: stemcell '{}' is looked up by its 'name' when both are given",
                    s.alias
                ),
            ),
            _ => {}
        }
        if s.version.is_none() {
            problems.error(
                DOC,
                sp.key("version"),
                format!("is required for stemcell '{}'", s.alias),
            );
        }
    }
}

/// Instance group names are unique and canonical.
fn check_group_names(m: &DeploymentManifest, problems: &mut Problems) {
    let root = Path::root();
    let groups = &m.instance_groups;
    unique_names(
        DOC,
        "instance group",
        groups.iter().enumerate().map(|(i, g)| {
            (
                g.name.as_str(),
                root.key("instance_groups").index(i).key("name"),
            )
        }),
        problems,
    );
    canonical_names(
        DOC,
        "instance group",
        groups.iter().enumerate().map(|(i, g)| {
            (
                g.name.as_str(),
                root.key("instance_groups").index(i).key("name"),
            )
        }),
        problems,
    );
}

/// Addon names are unique and their jobs come from the manifest's releases.
fn check_addons(m: &DeploymentManifest, releases: &[&str], problems: &mut Problems) {
    let root = Path::root();
    unique_names(
        DOC,
        "addon",
        m.addons
            .iter()
            .enumerate()
            .map(|(i, a)| (a.name.as_str(), root.key("addons").index(i).key("name"))),
        problems,
    );
    for (ai, addon) in m.addons.iter().enumerate() {
        for (ji, job) in addon.jobs.iter().enumerate() {
            let jp = root.key("addons").index(ai).key("jobs").index(ji);
            check_job_release(&job.release, &job.name, &jp, releases, problems);
        }
    }
}

fn check_update_block(m: &DeploymentManifest, problems: &mut Problems) {
    let path = Path::root().key("update");
    let Some(u) = &m.update else {
        problems.error(
            DOC,
            path,
            "is required (canaries, max_in_flight, canary_watch_time, update_watch_time)",
        );
        return;
    };
    let required = [
        ("canaries", u.canaries.is_some()),
        ("max_in_flight", u.max_in_flight.is_some()),
        ("canary_watch_time", u.canary_watch_time.is_some()),
        ("update_watch_time", u.update_watch_time.is_some()),
    ];
    for (key, present) in required {
        if !present {
            problems.error(
                DOC,
                path.key(key),
                "is required in the deployment's update block",
            );
        }
    }
    warn_of_no_flight(u, &path, problems);
    for (gi, g) in m.instance_groups.iter().enumerate() {
        if let Some(u) = &g.update {
            let path = Path::root().key("instance_groups").index(gi).key("update");
            warn_of_no_flight(u, &path, problems);
        }
    }
}

/// A `max_in_flight` of 0 (or 0 %), which the Director runs as 1 (`UpdateConfig#max_in_flight`),
/// as a warning where it is written: the manifest says something that does not happen.
fn warn_of_no_flight(u: &crate::manifest::Update, path: &Path, problems: &mut Problems) {
    if let Some(crate::manifest::Quantity::Count(0) | crate::manifest::Quantity::Percent(0)) =
        u.max_in_flight
    {
        problems.warning(
            DOC,
            path.key("max_in_flight"),
            "0 is treated as 1: at least one instance is always updated at a time (as the Director does)",
        );
    }
}

fn check_job_release(
    release: &str,
    job: &str,
    path: &Path,
    releases: &[&str],
    problems: &mut Problems,
) {
    if release.is_empty() {
        problems.error(
            DOC,
            path.key("release"),
            format!("is required for job '{job}'"),
        );
    } else {
        must_exist(
            DOC,
            path.key("release"),
            "release",
            release,
            releases,
            "the manifest's releases",
            problems,
        );
    }
}

/// One instance group: its instances, AZs, jobs, VM shape, stemcell, disks and networks.
fn check_group(
    g: &InstanceGroup,
    gp: &Path,
    index: &CloudIndex<'_>,
    releases: &[&str],
    stemcells: &[&str],
    problems: &mut Problems,
) {
    let name = &g.name;
    let instances = match g.instances {
        Some(n) => n,
        None => {
            problems.error(
                DOC,
                gp.key("instances"),
                format!("is required for instance group '{name}'"),
            );
            0
        }
    };
    check_group_az_names(g, gp, index, problems);
    check_group_jobs(g, gp, releases, problems);
    check_group_vm(g, gp, index, stemcells, problems);
    check_group_disks(g, gp, index, problems);
    check_group_networks(g, gp, instances, index, problems);
    check_group_azs(g, gp, index, problems);
}

/// The group's AZs: unique, and defined in the cloud config.
fn check_group_az_names(
    g: &InstanceGroup,
    gp: &Path,
    index: &CloudIndex<'_>,
    problems: &mut Problems,
) {
    unique_names(
        DOC,
        "AZ",
        g.azs
            .iter()
            .enumerate()
            .map(|(i, a)| (a.as_str(), gp.key("azs").index(i))),
        problems,
    );
    for (i, az) in g.azs.iter().enumerate() {
        must_exist(
            DOC,
            gp.key("azs").index(i),
            "AZ",
            az,
            &index.azs,
            "the cloud config's azs",
            problems,
        );
    }
}

/// The group's jobs: unique names, each from one of the manifest's releases.
fn check_group_jobs(g: &InstanceGroup, gp: &Path, releases: &[&str], problems: &mut Problems) {
    unique_names(
        DOC,
        "job",
        g.jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.name.as_str(), gp.key("jobs").index(i).key("name"))),
        problems,
    );
    for (ji, job) in g.jobs.iter().enumerate() {
        check_job_release(
            &job.release,
            &job.name,
            &gp.key("jobs").index(ji),
            releases,
            problems,
        );
    }
}

/// The group's VM: `vm_type` or `vm_resources` (one of them), known VM extensions and a
/// known stemcell alias.
fn check_group_vm(
    g: &InstanceGroup,
    gp: &Path,
    index: &CloudIndex<'_>,
    stemcells: &[&str],
    problems: &mut Problems,
) {
    let name = &g.name;
    match (&g.vm_type, &g.vm_resources) {
        (None, None) => problems.error(
            DOC,
            gp.key("vm_type"),
            format!("is required: instance group '{name}' needs 'vm_type' (from the cloud config) or 'vm_resources'"),
        ),
        (Some(_), Some(_)) => problems.error(
            DOC,
            gp.key("vm_resources"),
            format!("instance group '{name}' gives both 'vm_type' and 'vm_resources'; give one"),
        ),
        (Some(t), None) => must_exist(
            DOC,
            gp.key("vm_type"),
            "VM type",
            t,
            &index.vm_types,
            "the cloud config's vm_types",
            problems,
        ),
        (None, Some(_)) => {}
    }
    for (i, e) in g.vm_extensions.iter().enumerate() {
        must_exist(
            DOC,
            gp.key("vm_extensions").index(i),
            "VM extension",
            e,
            &index.vm_extensions,
            "the cloud config's vm_extensions",
            problems,
        );
    }
    match &g.stemcell {
        None => problems.error(
            DOC,
            gp.key("stemcell"),
            format!("is required for instance group '{name}'"),
        ),
        Some(s) => must_exist(
            DOC,
            gp.key("stemcell"),
            "stemcell alias",
            s,
            stemcells,
            "the manifest's stemcells",
            problems,
        ),
    }
}

/// The group's persistent disks: one way of giving them, known disk types, unique names.
fn check_group_disks(
    g: &InstanceGroup,
    gp: &Path,
    index: &CloudIndex<'_>,
    problems: &mut Problems,
) {
    let name = &g.name;
    let disk_keys: Vec<&str> = [
        ("persistent_disk", g.persistent_disk.is_some()),
        ("persistent_disk_type", g.persistent_disk_type.is_some()),
        ("persistent_disks", !g.persistent_disks.is_empty()),
    ]
    .into_iter()
    .filter_map(|(key, given)| given.then_some(key))
    .collect();
    if let [first, .., last] = disk_keys.as_slice() {
        // Like vm_type and vm_resources: the error is on the key given in excess.
        problems.error(DOC, gp.key(last), format!("instance group '{name}' gives both '{first}' and '{last}'; give only one of 'persistent_disk', 'persistent_disk_type' and 'persistent_disks'"));
    }
    if let Some(t) = &g.persistent_disk_type {
        must_exist(
            DOC,
            gp.key("persistent_disk_type"),
            "disk type",
            t,
            &index.disk_types,
            "the cloud config's disk_types",
            problems,
        );
    }
    unique_names(
        DOC,
        "persistent disk",
        g.persistent_disks.iter().enumerate().map(|(i, d)| {
            (
                d.name.as_str(),
                gp.key("persistent_disks").index(i).key("name"),
            )
        }),
        problems,
    );
    for (i, d) in g.persistent_disks.iter().enumerate() {
        must_exist(
            DOC,
            gp.key("persistent_disks").index(i).key("type"),
            "disk type",
            &d.disk_type,
            &index.disk_types,
            "the cloud config's disk_types",
            problems,
        );
    }
}

/// The group's AZs against its networks, as BOSH's `has_azs?`: every AZ of the group must be
/// one of each network's AZs, and a group without AZs can only use networks that have a
/// subnet without AZs. Vip networks fit any AZ.
fn check_group_azs(g: &InstanceGroup, gp: &Path, index: &CloudIndex<'_>, problems: &mut Problems) {
    let networks: Vec<(&Network, Vec<Option<&str>>)> = g
        .networks
        .iter()
        .filter_map(|r| index.cc.networks.iter().find(|n| n.name == r.name))
        .filter_map(|n| Some((n, network_azs(n)?)))
        .collect();
    let name = &g.name;
    if g.azs.is_empty() {
        let zoned: Vec<String> = networks
            .iter()
            .filter(|(_, azs)| !azs.is_empty() && !azs.contains(&None))
            .map(|(n, azs)| format!("network '{}' is in {}", n.name, az_list(azs)))
            .collect();
        if !zoned.is_empty() {
            problems.error(
                DOC,
                gp.key("azs"),
                format!(
                    "is required: instance group '{name}' must say which AZs to place its instances in ({})",
                    zoned.join("; ")
                ),
            );
        }
        return;
    }
    for (ai, az) in g.azs.iter().enumerate() {
        if !index.azs.contains(&az.as_str()) {
            continue; // reported as unknown
        }
        let lacking: Vec<String> = networks
            .iter()
            .filter(|(_, azs)| !azs.contains(&Some(az.as_str())))
            .map(|(n, azs)| match azs.as_slice() {
                [None] if n.subnets.is_empty() => format!("dynamic network '{}' has no subnets, so it cannot be used in AZs (give it subnets with 'azs' in the cloud config)", n.name),
                _ => format!("network '{}' has no subnet in AZ '{az}' (it is in {})", n.name, az_list(azs)),
            })
            .collect();
        if !lacking.is_empty() {
            problems.error(
                DOC,
                gp.key("azs").index(ai),
                format!(
                    "instance group '{name}' cannot be placed in AZ '{az}': {}",
                    lacking.join("; ")
                ),
            );
        }
    }
}

fn check_group_networks(
    g: &InstanceGroup,
    gp: &Path,
    instances: u64,
    index: &CloudIndex<'_>,
    problems: &mut Problems,
) {
    let name = &g.name;
    if g.networks.is_empty() {
        problems.error(
            DOC,
            gp.key("networks"),
            format!("instance group '{name}' must join at least one network"),
        );
        return;
    }
    unique_names(
        DOC,
        "network",
        g.networks
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), gp.key("networks").index(i).key("name"))),
        problems,
    );
    let mut defaults: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut only_vip = true;
    for (ni, net_ref) in g.networks.iter().enumerate() {
        let np = gp.key("networks").index(ni);
        let network = index.cc.networks.iter().find(|n| n.name == net_ref.name);
        let kind = network.map(|n| n.network_type());
        only_vip &= kind == Some(NetworkType::Vip);
        check_default_values(net_ref, &np, kind, ni, &mut defaults, problems);
        let Some(network) = network else {
            must_exist(
                DOC,
                np.key("name"),
                "network",
                &net_ref.name,
                &index.networks,
                "the cloud config's networks",
                problems,
            );
            continue;
        };
        let subnets = &index.subnets[net_ref.name.as_str()];
        check_static_ips(g, &np, ni, network, subnets, instances, problems);
    }
    if only_vip {
        problems.error(
            DOC,
            gp.key("networks"),
            format!("instance group '{name}' joins only vip networks; it also needs a manual or dynamic network to be the default for dns and gateway"),
        );
    }
    if g.networks.len() > 1 {
        check_default_networks(g, gp, &defaults, problems);
    }
}

/// The `default` list of one network: known properties only, and never on a vip network.
/// Valid entries are recorded in `defaults` (network index by property) for
/// [`check_default_networks`]; a vip network's are not, as they are already an error.
fn check_default_values<'a>(
    net_ref: &'a NetworkRef,
    np: &Path,
    kind: Option<NetworkType>,
    ni: usize,
    defaults: &mut BTreeMap<&'a str, Vec<usize>>,
    problems: &mut Problems,
) {
    if kind == Some(NetworkType::Vip) && !net_ref.default.is_empty() {
        problems.error(
            DOC,
            np.key("default"),
            format!("vip network '{}' cannot be a default network", net_ref.name),
        );
        return;
    }
    for (di, d) in net_ref.default.iter().enumerate() {
        if ["dns", "gateway", "addressable"].contains(&d.as_str()) {
            defaults.entry(d.as_str()).or_default().push(ni);
        } else {
            problems.error(
                DOC,
                np.key("default").index(di),
                format!("expected one of 'dns', 'gateway', 'addressable', found '{d}'"),
            );
        }
    }
}

/// The static IPs of one network of an instance group (BOSH §4.9): one per instance, no
/// repeats, each in a subnet's `static` ranges in one of the group's AZs. Dynamic networks
/// take none; a vip network takes any address, unless its cloud config subnets hand them
/// out, and needs them when it has no subnets.
fn check_static_ips(
    g: &InstanceGroup,
    np: &Path,
    ni: usize,
    network: &Network,
    subnets: &[ParsedSubnet],
    instances: u64,
    problems: &mut Problems,
) {
    let (group, net) = (&g.name, &network.name);
    let kind = network.network_type();
    let static_ips = &g.networks[ni].static_ips;
    let message = match kind {
        _ if static_ips.is_empty() => {
            if kind == NetworkType::Vip && network.subnets.is_empty() && instances > 0 {
                problems.error(DOC, np.key("static_ips"), format!("is required: vip network '{net}' has no subnets in the cloud config to take addresses from, so instance group '{group}' must list one static IP per instance"));
            }
            return;
        }
        NetworkType::Dynamic => {
            format!("instance group '{group}' cannot have static IPs on dynamic network '{net}'")
        }
        NetworkType::Vip if !network.subnets.is_empty() => format!(
            "vip network '{net}' hands out addresses from the 'static' ranges of its subnets in the cloud config; instance group '{group}' cannot list static IPs on it too"
        ),
        _ => return check_static_ip_list(g, np, ni, kind, subnets, instances, problems),
    };
    problems.error(DOC, np.key("static_ips"), message);
}

fn check_static_ip_list(
    g: &InstanceGroup,
    np: &Path,
    ni: usize,
    kind: NetworkType,
    subnets: &[ParsedSubnet],
    instances: u64,
    problems: &mut Problems,
) {
    let net_ref = &g.networks[ni];
    let mut count: u128 = 0;
    let mut seen: HashMap<IpAddr, usize> = HashMap::new();
    for (si, text) in net_ref.static_ips.iter().enumerate() {
        let sp = np.key("static_ips").index(si);
        let range = match IpRange::parse(text) {
            Ok(r) => r,
            Err(e) => {
                problems.error(DOC, sp, e.to_string());
                continue;
            }
        };
        count = count.saturating_add(range.len());
        for ip in range.addresses().take(65_536) {
            if let Some(first) = seen.insert(ip, si) {
                problems.error(
                    DOC,
                    sp.clone(),
                    format!(
                        "static IP {ip} is listed more than once (also at static_ips[{first}])"
                    ),
                );
                break;
            }
            let problem = match kind {
                NetworkType::Manual => static_ip_problem(ip, g, &net_ref.name, subnets),
                _ => None,
            };
            if let Some(msg) = problem {
                problems.error(DOC, sp.clone(), msg);
                break;
            }
        }
    }
    if count != u128::from(instances) {
        problems.error(
            DOC,
            np.key("static_ips"),
            format!(
                "instance group '{}' has {} but {} on network '{}': give one per instance",
                g.name,
                counted(u128::from(instances), "instance"),
                if count > u128::from(u64::MAX) {
                    "more than 2^64 static IPs".to_string()
                } else {
                    counted(count, "static IP")
                },
                net_ref.name
            ),
        );
    }
}

/// `1 instance`, `3 instances`, `2 free addresses`.
fn counted(n: u128, what: &str) -> String {
    match (n, what.ends_with('s')) {
        (1, _) => format!("1 {what}"),
        (_, true) => format!("{n} {what}es"),
        (_, false) => format!("{n} {what}s"),
    }
}

/// With several networks, each of `dns` and `gateway` needs exactly one default network, and
/// no property may have two (BOSH `instance_group_networks_parser.rb`): one error for all the
/// missing properties, one for all the doubled ones, as the Director reports them.
fn check_default_networks(
    g: &InstanceGroup,
    gp: &Path,
    defaults: &BTreeMap<&str, Vec<usize>>,
    problems: &mut Problems,
) {
    let name = &g.name;
    let doubled: Vec<String> = defaults
        .iter()
        .filter(|(_, nets)| nets.len() > 1)
        .map(|(prop, nets)| {
            let names: Vec<String> = nets
                .iter()
                .map(|&i| format!("'{}'", g.networks[i].name))
                .collect();
            format!("'{prop}' on {}", names.join(" and "))
        })
        .collect();
    if !doubled.is_empty() {
        problems.error(
            DOC,
            gp.key("networks"),
            format!(
                "instance group '{name}' marks more than one network as default: {}",
                doubled.join("; ")
            ),
        );
    }
    let missing: Vec<&str> = ["dns", "gateway"]
        .into_iter()
        .filter(|p| defaults.get(p).is_none_or(Vec::is_empty))
        .collect();
    if !missing.is_empty() {
        problems.error(
            DOC,
            gp.key("networks"),
            format!(
                "instance group '{name}' has {} networks and none of them is the default for {}: list {} in the 'default' of one network",
                g.networks.len(),
                missing.join(" and "),
                if missing.len() == 1 { "it" } else { "them" }
            ),
        );
    }
}

/// What is wrong with one static IP of a manual network, if anything.
fn static_ip_problem(
    ip: IpAddr,
    g: &InstanceGroup,
    network: &str,
    subnets: &[ParsedSubnet],
) -> Option<String> {
    let owner = subnets
        .iter()
        .find(|s| s.is_static(ip) || s.range.is_some_and(|r| r.contains(&ip)));
    let Some(subnet) = owner else {
        return Some(format!(
            "static IP {ip} belongs to no subnet of network '{network}'"
        ));
    };
    if !subnet.is_static(ip) {
        if let Some(why) = subnet.restriction(ip) {
            let what = match why {
                "reserved" => "in the 'reserved' ranges of".to_string(),
                address => format!("{address} of"),
            };
            return Some(format!(
                "static IP {ip} is {what} its subnet ({} in the cloud config) of network '{network}', which is never handed out: pick an address of the subnet's 'static' ranges",
                subnet.path
            ));
        }
        return Some(format!(
            "static IP {ip} is not in the 'static' ranges of its subnet ({} in the cloud config) of network '{network}'",
            subnet.path
        ));
    }
    if !subnet.azs.is_empty() && !g.azs.is_empty() && !subnet.azs.iter().any(|a| g.azs.contains(a))
    {
        let azs: Vec<Option<&str>> = subnet.azs.iter().map(|a| Some(a.as_str())).collect();
        return Some(format!(
            "static IP {ip} is in a subnet of {}, which instance group '{}' does not use",
            az_list(&azs),
            g.name
        ));
    }
    None
}

fn check_static_ips_unique(m: &DeploymentManifest, problems: &mut Problems) {
    let mut owner: HashMap<(String, IpAddr), (String, Path)> = HashMap::new();
    for (gi, g) in m.instance_groups.iter().enumerate() {
        for (ni, n) in g.networks.iter().enumerate() {
            for (si, text) in n.static_ips.iter().enumerate() {
                let Ok(range) = IpRange::parse(text) else {
                    continue;
                };
                let path = Path::root()
                    .key("instance_groups")
                    .index(gi)
                    .key("networks")
                    .index(ni)
                    .key("static_ips")
                    .index(si);
                for ip in range.addresses().take(65_536) {
                    match owner.get(&(n.name.clone(), ip)) {
                        Some((other, _)) if other != &g.name => {
                            problems.error(
                                DOC,
                                path.clone(),
                                format!(
                                    "static IP {ip} is already given to instance group '{other}'"
                                ),
                            );
                            break;
                        }
                        Some(_) => {}
                        None => {
                            owner.insert((n.name.clone(), ip), (g.name.clone(), path.clone()));
                        }
                    }
                }
            }
        }
    }
}

/// Dynamic IPs on manual networks: every instance without a static IP on a manual network
/// needs a free address in a subnet of its AZ ([`capacity`]). One error per network, at the
/// `instances` of the group that needs the most addresses where they run short.
fn check_dynamic_capacity(m: &DeploymentManifest, index: &CloudIndex<'_>, problems: &mut Problems) {
    let mut names: Vec<&str> = Vec::new();
    for net in m.instance_groups.iter().flat_map(|g| &g.networks) {
        if !names.contains(&net.name.as_str()) {
            names.push(net.name.as_str());
        }
    }
    for net in names {
        let Some(network) = index.cc.networks.iter().find(|n| n.name == net) else {
            continue;
        };
        // A subnet whose range is missing or broken (reported in the cloud config) has an
        // unknown capacity: no shortage can be told then.
        let subnets = &index.subnets[net];
        if network.network_type() != NetworkType::Manual
            || subnets.iter().any(|s| s.range.is_none())
        {
            continue;
        }
        let supplies: Vec<Supply<'_>> = subnets
            .iter()
            .map(|s| Supply {
                azs: zones(&s.azs),
                free: s.dynamic_capacity(),
            })
            .collect();
        let demands = dynamic_demands(m, net, &supplies, index);
        if let Some(short) = capacity::shortage(&demands, &supplies) {
            report_shortage(m, net, &short, problems);
        }
    }
}

/// `[None]` for no AZs, else each AZ.
fn zones(azs: &[String]) -> Vec<Option<&str>> {
    if azs.is_empty() {
        vec![None]
    } else {
        azs.iter().map(|a| Some(a.as_str())).collect()
    }
}

/// The groups taking dynamic IPs on `net`. A group with an AZ that no subnet serves (or that
/// is unknown) is left out: that is reported already, and its spread cannot be known.
fn dynamic_demands<'a>(
    m: &'a DeploymentManifest,
    net: &str,
    supplies: &[Supply<'_>],
    index: &CloudIndex<'_>,
) -> Vec<Demand<'a>> {
    let served = |az: &Option<&str>| supplies.iter().any(|s| s.azs.contains(az));
    m.instance_groups
        .iter()
        .enumerate()
        .filter(|(_, g)| {
            g.networks
                .iter()
                .any(|n| n.name == net && n.static_ips.is_empty())
        })
        .filter_map(|(gi, g)| {
            let mut azs: Vec<Option<&str>> = Vec::new();
            for az in zones(&g.azs) {
                if !azs.contains(&az) {
                    azs.push(az);
                }
            }
            let known = azs
                .iter()
                .all(|az| az.is_none_or(|a| index.azs.contains(&a)) && served(az));
            known.then(|| Demand {
                group: gi,
                azs,
                instances: g.instances.unwrap_or(0),
            })
        })
        .collect()
}

fn report_shortage(
    m: &DeploymentManifest,
    net: &str,
    short: &Shortage<'_>,
    problems: &mut Problems,
) {
    let Some(&(worst, _)) = short.groups.iter().max_by_key(|(_, n)| *n) else {
        return;
    };
    let groups: Vec<String> = short
        .groups
        .iter()
        .map(|(gi, n)| format!("'{}' {n}", m.instance_groups[*gi].name))
        .collect();
    let named: Vec<&str> = short.azs.iter().flatten().copied().collect();
    let place = match named.as_slice() {
        [] => String::new(),
        [one] => format!(" in AZ {one}"),
        many => format!(" in AZs {}", many.join(", ")),
    };
    problems.error(
        DOC,
        Path::root().key("instance_groups").index(worst).key("instances"),
        format!(
            "manual network '{net}' has {} for dynamic IPs{place}, but {} placed there (instance groups {})",
            counted(short.free, "free address"),
            counted_verb(short.needed),
            groups.join(", ")
        ),
    );
}

/// `1 instance is`, `3 instances are`.
fn counted_verb(n: u128) -> String {
    if n == 1 {
        "1 instance is".to_string()
    } else {
        format!("at least {n} instances are")
    }
}

fn check_migrations(m: &DeploymentManifest, problems: &mut Problems) {
    let names: Vec<&str> = m.instance_groups.iter().map(|g| g.name.as_str()).collect();
    let mut claimed: HashMap<&str, &str> = HashMap::new();
    for (gi, g) in m.instance_groups.iter().enumerate() {
        for (mi, from) in g.migrated_from.iter().enumerate() {
            let mp = Path::root()
                .key("instance_groups")
                .index(gi)
                .key("migrated_from")
                .index(mi);
            // A group naming itself is a no-op BOSH accepts (job_migrator.rb).
            if from.name != g.name && names.contains(&from.name.as_str()) {
                problems.error(DOC, mp.key("name"), format!("cannot migrate '{}' into '{}': an instance group named '{}' still exists in the manifest", from.name, g.name, from.name));
            } else if let Some(other) = claimed.insert(from.name.as_str(), g.name.as_str()) {
                problems.error(
                    DOC,
                    mp.key("name"),
                    format!(
                        "'{}' is migrated into both '{other}' and '{}'",
                        from.name, g.name
                    ),
                );
            }
            if let Some(az) = &from.az
                && !g.azs.contains(az)
            {
                problems.error(
                    DOC,
                    mp.key("az"),
                    format!(
                        "AZ '{az}' is not one of the AZs of instance group '{}'",
                        g.name
                    ),
                );
            }
        }
    }
}

const VARIABLE_TYPES: [&str; 7] = [
    "password",
    "certificate",
    "ssh",
    "rsa",
    "value",
    "json",
    "user",
];

fn check_variables(vars: &[Variable], problems: &mut Problems) {
    let root = Path::root().key("variables");
    unique_names(
        DOC,
        "variable",
        vars.iter()
            .enumerate()
            .map(|(i, v)| (v.name.as_str(), root.index(i).key("name"))),
        problems,
    );
    for (i, v) in vars.iter().enumerate() {
        let vp = root.index(i);
        if v.name.trim().is_empty() {
            problems.error(DOC, vp.key("name"), "must not be empty");
        }
        if !VARIABLE_TYPES.contains(&v.kind.as_str()) {
            problems.error(
                DOC,
                vp.key("type"),
                format!(
                    "unknown variable type '{}'; expected one of {}",
                    v.kind,
                    VARIABLE_TYPES.join(", ")
                ),
            );
        }
        if let Some(mode) = &v.update_mode
            && !["no-overwrite", "overwrite", "converge"].contains(&mode.as_str())
        {
            problems.error(
                DOC,
                vp.key("update_mode"),
                format!("expected one of 'no-overwrite', 'overwrite', 'converge', found '{mode}'"),
            );
        }
        match v.kind.as_str() {
            "certificate" => check_certificate(v, &vp, vars, problems),
            "password" => check_password(v, &vp, problems),
            _ => {}
        }
    }
}

/// Certificate options as the generators read them (bosh-cli's config-server
/// `certificate_generator.go`, CredHub): a CA (`is_ca: true`) or a `ca` naming a CA
/// certificate variable, a `common_name`, known extended key usages.
fn check_certificate(v: &Variable, vp: &Path, vars: &[Variable], problems: &mut Problems) {
    let op = vp.key("options");
    let Some(opts) = &v.options else {
        problems.error(DOC, op, format!("is required: certificate '{}' needs at least 'common_name', and 'ca' (the CA that signs it) or 'is_ca: true'", v.name));
        return;
    };
    let is_ca = match opts.get("is_ca") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            problems.error(
                DOC,
                op.key("is_ca"),
                format!("expected true or false, found {}", describe(other)),
            );
            false
        }
    };
    if !opts.contains_key("common_name") && !opts.contains_key("alternative_names") && !is_ca {
        problems.error(
            DOC,
            op.clone(),
            format!(
                "certificate '{}' needs 'common_name' or 'alternative_names'",
                v.name
            ),
        );
    }
    match opts.get("ca") {
        Some(Value::String(ca)) => check_ca_reference(ca, &op.key("ca"), vars, problems),
        Some(other) => problems.error(
            DOC,
            op.key("ca"),
            format!(
                "expected the name of a CA certificate variable, found {}",
                describe(other)
            ),
        ),
        None if !is_ca => problems.error(
            DOC,
            op.key("ca"),
            format!(
                "is required: certificate '{}' is not a CA, so it must name the CA that signs it",
                v.name
            ),
        ),
        None => {}
    }
    if let Some(ekus) = opts.get("extended_key_usage") {
        check_key_usages(ekus, &op.key("extended_key_usage"), problems);
    }
}

fn check_ca_reference(ca: &str, path: &Path, vars: &[Variable], problems: &mut Problems) {
    let is_ca = |o: &Variable| {
        o.options
            .as_ref()
            .and_then(|x| x.get("is_ca"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    match vars.iter().find(|o| o.name == ca) {
        Some(o) if o.kind != "certificate" => problems.error(
            DOC,
            path.clone(),
            format!("CA '{ca}' is a {} variable, not a certificate", o.kind),
        ),
        Some(o) if !is_ca(o) => problems.error(
            DOC,
            path.clone(),
            format!("CA '{ca}' is not a CA certificate (it lacks 'is_ca: true')"),
        ),
        Some(_) => {}
        None => problems.warning(
            DOC,
            path.clone(),
            format!("CA '{ca}' is not a variable of this manifest; it must be provided"),
        ),
    }
}

fn check_key_usages(ekus: &Value, path: &Path, problems: &mut Problems) {
    const KNOWN: [&str; 5] = [
        "client_auth",
        "server_auth",
        "code_signing",
        "email_protection",
        "timestamping",
    ];
    let Some(list) = ekus.as_array() else {
        problems.error(
            DOC,
            path.clone(),
            format!(
                "expected a list such as [server_auth], found {}",
                describe(ekus)
            ),
        );
        return;
    };
    for (ei, eku) in list.iter().enumerate() {
        if !eku.as_str().is_some_and(|e| KNOWN.contains(&e)) {
            problems.error(
                DOC,
                path.index(ei),
                format!(
                    "expected one of {}, found {}",
                    KNOWN.join(", "),
                    describe(eku)
                ),
            );
        }
    }
}

fn check_password(v: &Variable, vp: &Path, problems: &mut Problems) {
    if let Some(len) = v.options.as_ref().and_then(|o| o.get("length"))
        && len.as_u64().is_none_or(|n| n == 0)
    {
        problems.error(
            DOC,
            vp.key("options").key("length"),
            format!("must be a whole number above 0, found {}", describe(len)),
        );
    }
}
