//! Rules for a cloud config on its own.

use super::network::{az_list, check_subnets, network_azs};
use super::problem::{Document, Path, Problems};
use super::{canonical_names, must_exist, unique_names};
use crate::manifest::{CloudConfig, Network, NetworkType};

const DOC: Document = Document::CloudConfig;

/// Checks names, subnets and the compilation block.
pub fn check(cc: &CloudConfig, problems: &mut Problems) {
    let root = Path::root();
    unique_names(
        DOC,
        "AZ",
        cc.azs
            .iter()
            .enumerate()
            .map(|(i, a)| (a.name.as_str(), root.key("azs").index(i).key("name"))),
        problems,
    );
    unique_names(
        DOC,
        "VM type",
        cc.vm_types
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.as_str(), root.key("vm_types").index(i).key("name"))),
        problems,
    );
    unique_names(
        DOC,
        "VM extension",
        cc.vm_extensions.iter().enumerate().map(|(i, v)| {
            (
                v.name.as_str(),
                root.key("vm_extensions").index(i).key("name"),
            )
        }),
        problems,
    );
    unique_names(
        DOC,
        "disk type",
        cc.disk_types
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name.as_str(), root.key("disk_types").index(i).key("name"))),
        problems,
    );
    unique_names(
        DOC,
        "network",
        cc.networks
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), root.key("networks").index(i).key("name"))),
        problems,
    );
    canonical_names(
        DOC,
        "network",
        cc.networks
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), root.key("networks").index(i).key("name"))),
        problems,
    );

    for (i, d) in cc.disk_types.iter().enumerate() {
        if d.disk_size.is_none() {
            problems.error(
                DOC,
                root.key("disk_types").index(i).key("disk_size"),
                format!("is required for disk type '{}'", d.name),
            );
        }
    }
    let az_names: Vec<&str> = cc.azs.iter().map(|a| a.name.as_str()).collect();
    for i in 0..cc.networks.len() {
        check_network(cc, i, &az_names, problems);
    }
    check_compilation(cc, &az_names, problems);
}

fn check_network(cc: &CloudConfig, index: usize, az_names: &[&str], problems: &mut Problems) {
    let network = &cc.networks[index];
    let path = Path::root().key("networks").index(index);
    let kind = network.network_type();
    if kind == NetworkType::Manual && network.subnets.is_empty() && network.managed != Some(true) {
        problems.error(
            DOC,
            path.key("subnets"),
            format!(
                "manual network '{}' needs at least one subnet",
                network.name
            ),
        );
    }
    if kind == NetworkType::Dynamic && !network.subnets.is_empty() {
        check_dynamic_network_keys(network, &path, problems);
    }
    let with_az = network
        .subnets
        .iter()
        .filter(|s| s.az.is_some() || !s.azs.is_empty())
        .count();
    if with_az != 0 && with_az != network.subnets.len() {
        problems.error(
            DOC,
            path.key("subnets"),
            format!(
                "subnets of network '{}' must all name their AZs or none of them",
                network.name
            ),
        );
    }
    for (si, subnet) in network.subnets.iter().enumerate() {
        let sp = path.key("subnets").index(si);
        if subnet.az.is_some() && !subnet.azs.is_empty() {
            problems.error(DOC, sp.key("azs"), "give either 'az' or 'azs', not both");
        }
        if let Some(az) = &subnet.az {
            must_exist(
                DOC,
                sp.key("az"),
                "AZ",
                az,
                az_names,
                "the cloud config's azs",
                problems,
            );
        }
        for (ai, az) in subnet.azs.iter().enumerate() {
            must_exist(
                DOC,
                sp.key("azs").index(ai),
                "AZ",
                az,
                az_names,
                "the cloud config's azs",
                problems,
            );
        }
    }
    check_subnets(DOC, network, &path, problems);
}

/// A dynamic network with subnets takes `dns` and `cloud_properties` per subnet only
/// (BOSH dynamic_network.rb: "must not specify 'dns' when also specifying 'subnets'").
fn check_dynamic_network_keys(network: &Network, path: &Path, problems: &mut Problems) {
    let given = [
        ("dns", !network.dns.is_empty()),
        ("cloud_properties", network.cloud_properties.is_some()),
    ];
    for (key, present) in given {
        if present {
            problems.error(
                DOC,
                path.key(key),
                format!(
                    "dynamic network '{}' has subnets, so '{key}' belongs on each subnet",
                    network.name
                ),
            );
        }
    }
}

fn check_compilation(cc: &CloudConfig, az_names: &[&str], problems: &mut Problems) {
    let path = Path::root().key("compilation");
    let Some(c) = &cc.compilation else {
        problems.error(
            DOC,
            path,
            "is required: packages are compiled on these workers",
        );
        return;
    };
    match c.workers {
        None => problems.error(DOC, path.key("workers"), "is required"),
        Some(0) => problems.error(DOC, path.key("workers"), "must be at least 1"),
        Some(_) => {}
    }
    // As BOSH's compilation_config.rb: at most one of the three, an empty cloud_properties
    // counting as none; none at all is accepted (the CPI's defaults shape the workers).
    let shapes: Vec<&str> = [
        ("vm_type", c.vm_type.is_some()),
        ("vm_resources", c.vm_resources.is_some()),
        (
            "cloud_properties",
            c.cloud_properties.as_ref().is_some_and(|p| !p.is_empty()),
        ),
    ]
    .into_iter()
    .filter_map(|(key, given)| given.then_some(key))
    .collect();
    if let [first, .., last] = shapes.as_slice() {
        problems.error(
            DOC,
            path.key(last),
            format!("compilation gives both '{first}' and '{last}'; give only one of 'vm_type', 'vm_resources' and 'cloud_properties'"),
        );
    }
    if let Some(vm_type) = &c.vm_type {
        let known: Vec<&str> = cc.vm_types.iter().map(|v| v.name.as_str()).collect();
        must_exist(
            DOC,
            path.key("vm_type"),
            "VM type",
            vm_type,
            &known,
            "vm_types",
            problems,
        );
    }
    let exts: Vec<&str> = cc.vm_extensions.iter().map(|v| v.name.as_str()).collect();
    for (i, e) in c.vm_extensions.iter().enumerate() {
        must_exist(
            DOC,
            path.key("vm_extensions").index(i),
            "VM extension",
            e,
            &exts,
            "vm_extensions",
            problems,
        );
    }
    if let Some(az) = &c.az {
        must_exist(
            DOC,
            path.key("az"),
            "AZ",
            az,
            az_names,
            "the cloud config's azs",
            problems,
        );
    }
    let Some(net_name) = &c.network else {
        problems.error(DOC, path.key("network"), "is required");
        return;
    };
    let nets: Vec<&str> = cc.networks.iter().map(|n| n.name.as_str()).collect();
    must_exist(
        DOC,
        path.key("network"),
        "network",
        net_name,
        &nets,
        "networks",
        problems,
    );
    if let Some(network) = cc.networks.iter().find(|n| &n.name == net_name) {
        if network.network_type() == NetworkType::Vip {
            problems.error(DOC, path.key("network"), format!("'{net_name}' is a vip network; compilation workers need a manual or dynamic network"));
        }
        check_compilation_az(c.az.as_deref(), network, az_names, problems);
    }
}

/// The compilation AZ against the compilation network, as BOSH's `has_azs?`: required when
/// the network's subnets all have AZs, and then one of them. (Not simply "required when the
/// cloud config has AZs": BOSH accepts no AZ on a network whose subnets have none.)
fn check_compilation_az(
    az: Option<&str>,
    network: &Network,
    az_names: &[&str],
    problems: &mut Problems,
) {
    let Some(network_azs) = network_azs(network) else {
        return; // a vip network is reported above
    };
    let path = Path::root().key("compilation").key("az");
    let net = &network.name;
    let zoned: Vec<&str> = network_azs.iter().flatten().copied().collect();
    match az {
        None if !network_azs.is_empty() && !network_azs.contains(&None) => problems.error(
            DOC,
            path,
            format!(
                "is required: compilation network '{net}' is in {}",
                az_list(&network_azs)
            ),
        ),
        // An unknown AZ is reported already; saying the network lacks it too adds nothing.
        Some(az) if az_names.contains(&az) && !network_azs.contains(&Some(az)) => {
            let hint = if network.subnets.is_empty() {
                "it has no subnets: leave compilation.az out".to_string()
            } else if zoned.is_empty() {
                "its subnets have no AZs: leave compilation.az out".to_string()
            } else {
                format!("it is in {}", az_list(&network_azs))
            };
            problems.error(
                DOC,
                path,
                format!("compilation network '{net}' has no subnet in AZ '{az}' ({hint})"),
            );
        }
        _ => {}
    }
}
