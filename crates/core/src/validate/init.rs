//! Rules for a `create-env` (bosh-init) manifest: one VM, a CPI to install.

use std::net::IpAddr;

use ipnet::IpNet;

use super::network::{check_subnets, parse_subnets};
use super::problem::{Document, Path, Problems};
use super::{must_exist, unique_names};
use crate::manifest::{CloudProvider, InitInstanceGroup, InitManifest, Network, NetworkType};

const DOC: Document = Document::Manifest;

/// Checks that the manifest describes exactly one VM and how to reach it.
pub fn check(m: &InitManifest, problems: &mut Problems) {
    let root = Path::root();
    if m.name.as_deref().is_none_or(|n| n.trim().is_empty()) {
        problems.error(DOC, root.key("name"), "is required");
    }
    let (key, groups) = if m.jobs.is_empty() {
        ("instance_groups", &m.instance_groups)
    } else {
        ("jobs", &m.jobs)
    };
    if !m.jobs.is_empty() && !m.instance_groups.is_empty() {
        problems.error(
            DOC,
            root.key("jobs"),
            "give 'instance_groups' or the legacy 'jobs', not both",
        );
    }
    if groups.len() != 1 {
        problems.error(
            DOC,
            root.key(key),
            format!(
                "create-env deploys exactly one instance group, found {}",
                groups.len()
            ),
        );
    }
    unique_names(
        DOC,
        "release",
        m.releases
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.as_str(), root.key("releases").index(i).key("name"))),
        problems,
    );
    let defined = Defined::of(m);
    for (gi, g) in groups.iter().enumerate() {
        check_group(m, g, &root.key(key).index(gi), &defined, problems);
    }
    check_networks(m, problems);
    check_sources(m, problems);
    check_pools(m, &defined, problems);
    check_cloud_provider(m.cloud_provider.as_ref(), &defined, problems);
}

/// The names the manifest defines, which its references must match.
struct Defined<'a> {
    releases: Vec<&'a str>,
    resource_pools: Vec<&'a str>,
    disk_pools: Vec<&'a str>,
    networks: Vec<&'a str>,
}

impl<'a> Defined<'a> {
    fn of(m: &'a InitManifest) -> Self {
        Defined {
            releases: m.releases.iter().map(|r| r.name.as_str()).collect(),
            resource_pools: m.resource_pools.iter().map(|p| p.name.as_str()).collect(),
            disk_pools: m.disk_pools.iter().map(|p| p.name.as_str()).collect(),
            networks: m.networks.iter().map(|n| n.name.as_str()).collect(),
        }
    }
}

/// The one instance group at `gp`: one instance, a resource pool, known releases and
/// networks, and static IPs that fit their network.
fn check_group(
    m: &InitManifest,
    g: &InitInstanceGroup,
    gp: &Path,
    defined: &Defined<'_>,
    problems: &mut Problems,
) {
    if g.instances.unwrap_or(1) != 1 {
        problems.error(
            DOC,
            gp.key("instances"),
            "create-env deploys exactly one instance",
        );
    }
    match &g.resource_pool {
        Some(p) => must_exist(
            DOC,
            gp.key("resource_pool"),
            "resource pool",
            p,
            &defined.resource_pools,
            "resource_pools",
            problems,
        ),
        None => problems.error(DOC, gp.key("resource_pool"), "is required"),
    }
    if let Some(p) = &g.persistent_disk_pool {
        must_exist(
            DOC,
            gp.key("persistent_disk_pool"),
            "disk pool",
            p,
            &defined.disk_pools,
            "disk_pools",
            problems,
        );
    }
    let jobs_key = if g.jobs.is_empty() && !g.templates.is_empty() {
        "templates"
    } else {
        "jobs"
    };
    let jobs = if jobs_key == "jobs" {
        &g.jobs
    } else {
        &g.templates
    };
    for (ji, j) in jobs.iter().enumerate() {
        must_exist(
            DOC,
            gp.key(jobs_key).index(ji).key("release"),
            "release",
            &j.release,
            &defined.releases,
            "releases",
            problems,
        );
    }
    if g.networks.is_empty() {
        problems.error(
            DOC,
            gp.key("networks"),
            "the VM must join at least one network",
        );
    }
    for (ni, n) in g.networks.iter().enumerate() {
        let np = gp.key("networks").index(ni);
        match m.networks.iter().find(|x| x.name == n.name) {
            Some(network) => check_static_ips(&n.static_ips, network, &np, problems),
            None => must_exist(
                DOC,
                np.key("name"),
                "network",
                &n.name,
                &defined.networks,
                "networks",
                problems,
            ),
        }
    }
}

/// Disk pools have a size; resource pools name known networks.
fn check_pools(m: &InitManifest, defined: &Defined<'_>, problems: &mut Problems) {
    let root = Path::root();
    for (pi, dp) in m.disk_pools.iter().enumerate() {
        if dp.disk_size.unwrap_or(0) == 0 {
            problems.error(
                DOC,
                root.key("disk_pools").index(pi).key("disk_size"),
                "must be > 0",
            );
        }
    }
    for (pi, p) in m.resource_pools.iter().enumerate() {
        if let Some(n) = &p.network {
            must_exist(
                DOC,
                root.key("resource_pools").index(pi).key("network"),
                "network",
                n,
                &defined.networks,
                "networks",
                problems,
            );
        }
    }
}

/// `cloud_provider`: the CPI job, from a known release, and an https:// mbus URL.
fn check_cloud_provider(
    cloud_provider: Option<&CloudProvider>,
    defined: &Defined<'_>,
    problems: &mut Problems,
) {
    let cp = Path::root().key("cloud_provider");
    let Some(c) = cloud_provider else {
        problems.error(
            DOC,
            cp,
            "is required: it names the CPI job to install and the agent's mbus URL",
        );
        return;
    };
    if c.template.is_none() && c.templates.is_empty() {
        problems.error(
            DOC,
            cp.key("template"),
            "is required: the CPI job and its release",
        );
    }
    for t in c.template.iter().chain(&c.templates) {
        must_exist(
            DOC,
            cp.key("template").key("release"),
            "release",
            &t.release,
            &defined.releases,
            "releases",
            problems,
        );
    }
    match &c.mbus {
        None => problems.error(
            DOC,
            cp.key("mbus"),
            "is required, e.g. https://mbus:<password>@<ip>:6868",
        ),
        Some(url) if !url.starts_with("https://") && !url.starts_with("((") => problems.error(
            DOC,
            cp.key("mbus"),
            format!("'{url}' must be an https:// URL"),
        ),
        Some(_) => {}
    }
}

/// Where releases and the stemcell come from: a `file://` (relative to the manifest) or
/// `http(s)://` URL, as bosh-cli requires (`must be a valid URL (file:// or http(s)://)`).
fn check_sources(m: &InitManifest, problems: &mut Problems) {
    let root = Path::root();
    let valid = |url: &str| {
        ["file://", "http://", "https://", "(("]
            .iter()
            .any(|scheme| url.trim().starts_with(scheme))
    };
    for (ri, r) in m.releases.iter().enumerate() {
        let path = root.key("releases").index(ri).key("url");
        match &r.url {
            None => problems.error(
                DOC,
                path,
                "is required: create-env reads every release from its tarball (file:// or http(s)://)",
            ),
            Some(url) if !valid(url) => problems.error(
                DOC,
                path,
                format!("'{url}' must be a valid URL (file:// or http(s)://)"),
            ),
            Some(_) => {}
        }
    }
    for (pi, p) in m.resource_pools.iter().enumerate() {
        let path = root.key("resource_pools").index(pi).key("stemcell");
        match p.stemcell.as_ref().map(|s| s.url.as_ref()) {
            None => problems.error(
                DOC,
                path,
                "is required: the stemcell tarball, {url: file://... or http(s)://...}",
            ),
            Some(None) => problems.error(
                DOC,
                path.key("url"),
                "is required: the stemcell tarball (file:// or http(s)://)",
            ),
            Some(Some(url)) if !valid(url) => problems.error(
                DOC,
                path.key("url"),
                format!("'{url}' must be a valid URL (file:// or http(s)://)"),
            ),
            Some(Some(_)) => {}
        }
    }
}

/// The networks of a create-env manifest (bosh-cli `deployment/manifest/validator.go`):
/// cloud-config networks with exactly one subnet when manual.
fn check_networks(m: &InitManifest, problems: &mut Problems) {
    let root = Path::root().key("networks");
    unique_names(
        DOC,
        "network",
        m.networks
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), root.index(i).key("name"))),
        problems,
    );
    for (ni, network) in m.networks.iter().enumerate() {
        let np = root.index(ni);
        if network.network_type() == NetworkType::Manual && network.subnets.len() != 1 {
            problems.error(
                DOC,
                np.key("subnets"),
                format!(
                    "create-env needs exactly one subnet on manual network '{}', found {}",
                    network.name,
                    network.subnets.len()
                ),
            );
        }
        check_subnets(DOC, network, &np, problems);
    }
}

/// Static IPs of the VM: single addresses, inside the subnet range on a manual network.
fn check_static_ips(ips: &[String], network: &Network, np: &Path, problems: &mut Problems) {
    let subnets = parse_subnets(network, np, None);
    for (i, text) in ips.iter().enumerate() {
        let path = np.key("static_ips").index(i);
        let ip = match text.trim().parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) if text.trim().starts_with("((") => continue, // interpolated later
            Err(_) => {
                problems.error(
                    DOC,
                    path,
                    format!("'{text}' is not an IP address (create-env takes single addresses)"),
                );
                continue;
            }
        };
        let ranges: Vec<IpNet> = subnets.iter().filter_map(|s| s.range).collect();
        if network.network_type() == NetworkType::Manual
            && !ranges.is_empty()
            && !ranges.iter().any(|r| r.contains(&ip))
        {
            let shown: Vec<String> = ranges.iter().map(ToString::to_string).collect();
            problems.error(
                DOC,
                path,
                format!(
                    "static IP {ip} is outside the range {} of network '{}'",
                    shown.join(", "),
                    network.name
                ),
            );
        }
    }
}
