//! Rules for a `create-env` (bosh-init) manifest: one VM, a CPI to install.

use super::problem::{Document, Path, Problems};
use super::{must_exist, unique_names};
use crate::manifest::InitManifest;

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
    let releases: Vec<&str> = m.releases.iter().map(|r| r.name.as_str()).collect();
    let pools: Vec<&str> = m.resource_pools.iter().map(|p| p.name.as_str()).collect();
    let disk_pools: Vec<&str> = m.disk_pools.iter().map(|p| p.name.as_str()).collect();
    let networks: Vec<&str> = m.networks.iter().map(|n| n.name.as_str()).collect();
    for (gi, g) in groups.iter().enumerate() {
        let gp = root.key(key).index(gi);
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
                &pools,
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
                &disk_pools,
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
                &releases,
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
            must_exist(
                DOC,
                gp.key("networks").index(ni).key("name"),
                "network",
                &n.name,
                &networks,
                "networks",
                problems,
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
                &networks,
                "networks",
                problems,
            );
        }
    }
    let cp = root.key("cloud_provider");
    match &m.cloud_provider {
        None => problems.error(
            DOC,
            cp,
            "is required: it names the CPI job to install and the agent's mbus URL",
        ),
        Some(c) => {
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
                    &releases,
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
                Some(url) if !url.starts_with("https://") && !url.starts_with("((") => problems
                    .error(
                        DOC,
                        cp.key("mbus"),
                        format!("'{url}' must be an https:// URL"),
                    ),
                Some(_) => {}
            }
        }
    }
}
