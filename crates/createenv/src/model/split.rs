//! A create-env manifest split as bosh-cli splits it (`bosh-protocols.md` §5.3 step 1; the
//! research notes §7): the release set, the CPI installation (`cloud_provider`) and the
//! deployment of one VM (`resource_pools`, `disk_pools`, `networks`, the one instance group).
//!
//! Both shapes users have are read: bosh-init v1 (`jobs` with `templates`) and v2
//! (`instance_groups` with `jobs`); both are [`InitManifest`]s.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{Value, json};

use kubosh_base::secret::Secret;
use kubosh_core::manifest::{
    CpiTemplate, InitInstanceGroup, InitManifest, InitStemcell, JobRef, Map, Network, NetworkType,
    WatchTime,
};

/// bosh-cli's watch time when the manifest gives none (`0-300000`).
pub const DEFAULT_WATCH_TIME: WatchTime = WatchTime {
    min_ms: 0,
    max_ms: 300_000,
};

/// A manifest that validation let through but that cannot be split (kubosh checks these
/// too, so this names what validation missed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SplitError {
    /// Where in the manifest.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn err(path: impl Into<String>, message: impl Into<String>) -> SplitError {
    SplitError {
        path: path.into(),
        message: message.into(),
    }
}

/// A create-env manifest, split.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvManifest {
    /// The deployment name.
    pub name: String,
    /// Every release, the CPI release included, in manifest order.
    pub releases: Vec<ReleaseSource>,
    /// What the CPI installation needs (`cloud_provider`).
    pub installation: CpiInstallation,
    /// The one VM.
    pub deployment: EnvDeployment,
}

/// Where a release tarball comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseSource {
    /// The release name.
    pub name: String,
    /// `file://…`, `http(s)://…` or a path; none when not given.
    pub url: Option<String>,
    /// The tarball's digest, when given.
    pub sha1: Option<String>,
}

/// The `cloud_provider` block: the CPI jobs to install locally and how to reach the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct CpiInstallation {
    /// The CPI jobs (`templates`, else `template`), by job and release name.
    pub jobs: Vec<CpiTemplate>,
    /// The agent's HTTPS endpoint the CLI dials (`https://user:password@host:port`).
    pub mbus: Secret<String>,
    /// The CA the agent's certificate chains to (`cert.ca`), if any.
    pub ca: Option<String>,
    /// The properties the CPI jobs are rendered with; they carry IaaS credentials.
    pub properties: Secret<Map>,
    /// Whether the manifest asks for an SSH tunnel (not needed with CPI API v2).
    pub ssh_tunnel: bool,
}

/// A persistent disk as the manifest asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskSpec {
    /// Size in MiB (more than 0).
    pub size: u64,
    /// IaaS properties (`{}` when none).
    pub cloud_properties: Map,
}

/// The deployment part: one instance of one instance group.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvDeployment {
    /// The deployment name.
    pub name: String,
    /// The instance group's name.
    pub group: String,
    /// Its jobs (`jobs`, or the legacy `templates`).
    pub jobs: Vec<JobRef>,
    /// The group's `properties`.
    pub group_properties: Option<Map>,
    /// The manifest's global `properties`.
    pub global_properties: Option<Map>,
    /// Where the stemcell tarball comes from (the resource pool's).
    pub stemcell: InitStemcell,
    /// The resource pool's `cloud_properties`.
    pub vm_cloud_properties: Map,
    /// The resource pool's `env`, with `bosh.tags` when the manifest has tags (as bosh-cli
    /// sends it to `create_vm`). It carries the agent's mbus certificate key.
    pub vm_env: Secret<Map>,
    /// The persistent disk, if any (size 0 means none).
    pub disk: Option<DiskSpec>,
    /// The network interfaces by network name, as `create_vm` and the apply spec carry
    /// them (bosh-cli's `NetworkInterfaces`; keys sorted, as Go marshals maps).
    pub networks: Map,
    /// The VM's address: the static IP of the network that is the default gateway.
    pub ip: Option<String>,
    /// `update.update_watch_time` (default `0-300000`).
    pub watch_time: WatchTime,
    /// `tags`, as strings.
    pub tags: Map,
}

/// Splits a (validated) create-env manifest into releases, CPI installation and deployment.
pub fn split(m: &InitManifest) -> Result<EnvManifest, SplitError> {
    let name = m
        .name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| err("name", "is required"))?;
    let releases = m
        .releases
        .iter()
        .map(|r| ReleaseSource {
            name: r.name.clone(),
            url: r.url.clone(),
            sha1: r.sha1.clone(),
        })
        .collect();
    Ok(EnvManifest {
        installation: installation(m)?,
        deployment: deployment(m, &name)?,
        name,
        releases,
    })
}

fn installation(m: &InitManifest) -> Result<CpiInstallation, SplitError> {
    let cp = m
        .cloud_provider
        .as_ref()
        .ok_or_else(|| err("cloud_provider", "is required"))?;
    // bosh-cli: `templates` wins over `template`.
    let jobs = if cp.templates.is_empty() {
        cp.template.iter().cloned().collect::<Vec<_>>()
    } else {
        cp.templates.clone()
    };
    if jobs.is_empty() {
        return Err(err(
            "cloud_provider.template",
            "either cloud_provider.templates or cloud_provider.template must be provided and must contain at least one release",
        ));
    }
    let mbus = cp
        .mbus
        .clone()
        .ok_or_else(|| err("cloud_provider.mbus", "is required"))?;
    // Only `cert.ca` is read (bosh-deployment passes a whole certificate variable).
    let ca = match &cp.cert {
        None | Some(Value::Null) => None,
        Some(Value::Object(cert)) => match cert.get("ca") {
            None | Some(Value::Null) => None,
            Some(Value::String(ca)) if ca.trim().is_empty() => None,
            Some(Value::String(ca)) => Some(ca.clone()),
            Some(_) => return Err(err("cloud_provider.cert.ca", "must be a PEM string")),
        },
        Some(_) => {
            return Err(err("cloud_provider.cert", "must be a map with a 'ca' key"));
        }
    };
    Ok(CpiInstallation {
        jobs,
        mbus: Secret::new(mbus),
        ca,
        properties: Secret::new(cp.properties.clone().unwrap_or_default()),
        ssh_tunnel: cp.ssh_tunnel.is_some(),
    })
}

/// The deployment part: the one instance of the one instance group, with its resource
/// pool, persistent disk, network interfaces and tags.
fn deployment(m: &InitManifest, name: &str) -> Result<EnvDeployment, SplitError> {
    let (key, groups) = if m.jobs.is_empty() {
        ("instance_groups", &m.instance_groups)
    } else {
        ("jobs", &m.jobs)
    };
    let [group] = groups.as_slice() else {
        return Err(err(
            key,
            format!("must be of size 1, found {}", groups.len()),
        ));
    };
    let gp = format!("{key}[0]");
    if group.instances.unwrap_or(1) != 1 {
        return Err(err(
            format!("{gp}.instances"),
            format!(
                "Job '{}' must have only one instance, found {}",
                group.name,
                group.instances.unwrap_or(1)
            ),
        ));
    }
    let pool_name = group
        .resource_pool
        .as_deref()
        .ok_or_else(|| err(format!("{gp}.resource_pool"), "must be provided"))?;
    let pool = m
        .resource_pools
        .iter()
        .find(|p| p.name == pool_name)
        .ok_or_else(|| {
            err(
                format!("{gp}.resource_pool"),
                format!("resource pool '{pool_name}' is not defined in resource_pools"),
            )
        })?;
    let disk = persistent_disk(m, group, &gp)?;
    let (networks, ip) = interfaces(m, group, &gp)?;
    let tags = string_tags(m);
    let env = vm_env(pool.env.clone().unwrap_or_default(), &tags);
    let jobs = if group.jobs.is_empty() {
        group.templates.clone()
    } else {
        group.jobs.clone()
    };
    Ok(EnvDeployment {
        name: name.to_string(),
        group: group.name.clone(),
        jobs,
        group_properties: group.properties.clone(),
        global_properties: m.properties.clone(),
        stemcell: pool.stemcell.clone().unwrap_or_default(),
        vm_cloud_properties: pool.cloud_properties.clone().unwrap_or_default(),
        vm_env: Secret::new(env),
        disk,
        networks,
        ip,
        watch_time: m
            .update
            .as_ref()
            .and_then(|u| u.update_watch_time)
            .unwrap_or(DEFAULT_WATCH_TIME),
        tags,
    })
}

/// The group's persistent disk: its disk pool's, else `persistent_disk` (a size); none
/// when the size is 0.
fn persistent_disk(
    m: &InitManifest,
    group: &InitInstanceGroup,
    gp: &str,
) -> Result<Option<DiskSpec>, SplitError> {
    let disk = match &group.persistent_disk_pool {
        Some(pool) => {
            let dp = m
                .disk_pools
                .iter()
                .find(|p| &p.name == pool)
                .ok_or_else(|| {
                    err(
                        format!("{gp}.persistent_disk_pool"),
                        format!("disk pool '{pool}' is not defined in disk_pools"),
                    )
                })?;
            Some(DiskSpec {
                size: dp.disk_size.unwrap_or(0),
                cloud_properties: dp.cloud_properties.clone().unwrap_or_default(),
            })
        }
        None => group.persistent_disk.map(|size| DiskSpec {
            size,
            cloud_properties: Map::new(),
        }),
    };
    Ok(disk.filter(|d| d.size > 0))
}

/// The manifest's `tags`, every value as a string.
fn string_tags(m: &InitManifest) -> Map {
    m.tags
        .iter()
        .flatten()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), Value::String(text))
        })
        .collect()
}

/// The resource pool's `env` with `bosh.tags` set to `tags` when there are any.
fn vm_env(mut env: Map, tags: &Map) -> Map {
    if !tags.is_empty() {
        let bosh = env
            .entry("bosh")
            .or_insert_with(|| Value::Object(Map::new()));
        if !bosh.is_object() {
            *bosh = Value::Object(Map::new());
        }
        if let Value::Object(bosh) = bosh {
            bosh.insert("tags".into(), Value::Object(tags.clone()));
        }
    }
    env
}

/// bosh-cli's `NetworkInterfaces`: per network of the group its `type`, the static IP, the
/// manual subnet's `netmask`/`gateway`/`dns`/`cloud_properties` (dynamic and vip: the
/// network's `cloud_properties`, dynamic: its `dns`) and `default`; a group with one network
/// gets `default: [dns, gateway]`. Keys sorted, as Go marshals maps. Also the VM's address.
fn interfaces(
    m: &InitManifest,
    group: &InitInstanceGroup,
    gp: &str,
) -> Result<(Map, Option<String>), SplitError> {
    let single = group.networks.len() == 1;
    let mut out = Map::new();
    let mut ip_of_default = None;
    let mut first_ip = None;
    for (ni, n) in group.networks.iter().enumerate() {
        let network = m
            .networks
            .iter()
            .find(|x| x.name == n.name)
            .ok_or_else(|| {
                err(
                    format!("{gp}.networks[{ni}].name"),
                    format!("network '{}' is not defined in networks", n.name),
                )
            })?;
        let mut fields: Vec<(&str, Value)> = Vec::new();
        let kind = network.network_type();
        let type_name = match kind {
            NetworkType::Manual => "manual",
            NetworkType::Dynamic => "dynamic",
            NetworkType::Vip => "vip",
        };
        let default: Vec<String> = if single {
            vec!["dns".into(), "gateway".into()]
        } else {
            n.default.clone()
        };
        if !default.is_empty() {
            fields.push(("default", json!(default)));
        }
        let ip = n.static_ips.first().cloned();
        fields.extend(network_fields(network, ni)?);
        if let Some(ip) = &ip {
            if ip.trim().parse::<IpAddr>().is_err() {
                return Err(err(
                    format!("{gp}.networks[{ni}].static_ips[0]"),
                    format!("'{ip}' is not an IP address"),
                ));
            }
            fields.push(("ip", json!(ip)));
            first_ip.get_or_insert_with(|| ip.clone());
            if default.iter().any(|d| d == "gateway") {
                ip_of_default = Some(ip.clone());
            }
        }
        fields.push(("type", json!(type_name)));
        fields.sort_by(|a, b| a.0.cmp(b.0));
        out.insert(
            n.name.clone(),
            Value::Object(
                fields
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            ),
        );
    }
    Ok((out, ip_of_default.or(first_ip)))
}

/// The interface fields network `ni` gives by its type: a manual network its first
/// subnet's `cloud_properties`, `dns`, `gateway` and `netmask`; a dynamic one its
/// `cloud_properties` and `dns`; a vip one its `cloud_properties`.
fn network_fields(network: &Network, ni: usize) -> Result<Vec<(&'static str, Value)>, SplitError> {
    let mut fields: Vec<(&str, Value)> = Vec::new();
    match network.network_type() {
        NetworkType::Manual => {
            let subnet = network.subnets.first().ok_or_else(|| {
                err(
                    format!("networks[{}].subnets", ni),
                    "subnets must be of size 1",
                )
            })?;
            let range: Option<IpNet> = subnet.range.as_deref().and_then(|r| r.trim().parse().ok());
            fields.push((
                "cloud_properties",
                Value::Object(subnet.cloud_properties.clone().unwrap_or_default()),
            ));
            if !subnet.dns.is_empty() {
                fields.push(("dns", json!(subnet.dns)));
            }
            if let Some(gw) = &subnet.gateway {
                fields.push(("gateway", json!(gw)));
            }
            if let Some(range) = range {
                fields.push(("netmask", json!(range.netmask().to_string())));
            }
        }
        NetworkType::Dynamic => {
            fields.push((
                "cloud_properties",
                Value::Object(network.cloud_properties.clone().unwrap_or_default()),
            ));
            if !network.dns.is_empty() {
                fields.push(("dns", json!(network.dns)));
            }
        }
        NetworkType::Vip => {
            fields.push((
                "cloud_properties",
                Value::Object(network.cloud_properties.clone().unwrap_or_default()),
            ));
        }
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubosh_base::yaml;

    fn manifest(text: &str) -> InitManifest {
        yaml::parse(text, "test").unwrap()
    }

    const V2: &str = r#"
name: env
releases:
- {name: hello, url: file://hello.tgz}
- {name: cpi, url: file://cpi.tgz, sha1: abc}
resource_pools:
- name: vms
  network: default
  stemcell: {url: file://stemcell.tgz}
  cloud_properties: {cpu: 2}
  env: {bosh: {password: x}}
disk_pools:
- {name: disks, disk_size: 1024, cloud_properties: {type: ssd}}
networks:
- name: default
  type: manual
  subnets:
  - {range: 10.0.0.0/24, gateway: 10.0.0.1, dns: [8.8.8.8], cloud_properties: {net: n1}}
instance_groups:
- name: web
  instances: 1
  resource_pool: vms
  persistent_disk_pool: disks
  networks: [{name: default, static_ips: [10.0.0.6]}]
  jobs: [{name: hello, release: hello, properties: {a: 1}}]
  properties: {b: 2}
properties: {c: 3}
tags: {team: x, count: 5}
update: {update_watch_time: 100-2000}
cloud_provider:
  template: {name: cpi_job, release: cpi}
  mbus: https://mbus:secret@10.0.0.6:6868
  cert: {ca: CA-PEM, certificate: C, private_key: K}
  properties: {key: value}
  ssh_tunnel: {host: 10.0.0.6, user: vcap}
"#;

    #[test]
    fn a_v2_manifest_splits_into_installation_and_deployment() {
        let s = split(&manifest(V2)).unwrap();
        assert_eq!(s.name, "env");
        assert_eq!(s.releases.len(), 2);
        assert_eq!(s.releases[1].sha1.as_deref(), Some("abc"));
        let i = &s.installation;
        assert_eq!(i.jobs[0].name, "cpi_job");
        assert_eq!(i.mbus.expose(), "https://mbus:secret@10.0.0.6:6868");
        assert_eq!(i.ca.as_deref(), Some("CA-PEM"));
        assert_eq!(i.properties.expose()["key"], "value");
        assert!(i.ssh_tunnel);
        let d = &s.deployment;
        assert_eq!(d.group, "web");
        assert_eq!(d.jobs[0].name, "hello");
        assert_eq!(
            d.disk,
            Some(DiskSpec {
                size: 1024,
                cloud_properties: json!({"type": "ssd"}).as_object().unwrap().clone()
            })
        );
        assert_eq!(d.ip.as_deref(), Some("10.0.0.6"));
        assert_eq!(
            Value::Object(d.networks.clone()).to_string(),
            r#"{"default":{"cloud_properties":{"net":"n1"},"default":["dns","gateway"],"dns":["8.8.8.8"],"gateway":"10.0.0.1","ip":"10.0.0.6","netmask":"255.255.255.0","type":"manual"}}"#
        );
        assert_eq!(
            d.watch_time,
            WatchTime {
                min_ms: 100,
                max_ms: 2000
            }
        );
        assert_eq!(
            d.vm_env.expose()["bosh"]["tags"],
            json!({"team": "x", "count": "5"})
        );
        assert_eq!(d.vm_env.expose()["bosh"]["password"], "x");
        assert_eq!(d.stemcell.url.as_deref(), Some("file://stemcell.tgz"));
    }

    #[test]
    fn a_v1_manifest_with_jobs_and_templates_splits_the_same_way() {
        let v1 = V2
            .replace("instance_groups:", "jobs:")
            .replace(
                "  jobs: [{name: hello, release: hello, properties: {a: 1}}]",
                "  templates: [{name: hello, release: hello, properties: {a: 1}}]",
            )
            .replace(
                "  persistent_disk_pool: disks\n",
                "  persistent_disk: 2048\n",
            );
        let s = split(&manifest(&v1)).unwrap();
        assert_eq!(s.deployment.jobs[0].name, "hello");
        assert_eq!(s.deployment.disk.as_ref().unwrap().size, 2048);
        assert!(
            s.deployment
                .disk
                .as_ref()
                .unwrap()
                .cloud_properties
                .is_empty()
        );
    }

    #[test]
    fn no_disk_without_a_size_and_defaults_without_update() {
        let text = V2
            .replace("  persistent_disk_pool: disks\n", "")
            .replace("update: {update_watch_time: 100-2000}\n", "")
            .replace("tags: {team: x, count: 5}\n", "");
        let s = split(&manifest(&text)).unwrap();
        assert_eq!(s.deployment.disk, None);
        assert_eq!(s.deployment.watch_time, DEFAULT_WATCH_TIME);
        assert!(s.deployment.vm_env.expose()["bosh"].get("tags").is_none());
    }

    #[test]
    fn templates_win_over_template_and_a_missing_one_is_named() {
        let text = V2.replace(
            "  template: {name: cpi_job, release: cpi}",
            "  template: {name: cpi_job, release: cpi}\n  templates: [{name: other, release: cpi}]",
        );
        let s = split(&manifest(&text)).unwrap();
        assert_eq!(s.installation.jobs.len(), 1);
        assert_eq!(s.installation.jobs[0].name, "other");
        let text = V2.replace("  template: {name: cpi_job, release: cpi}\n", "");
        let e = split(&manifest(&text)).unwrap_err();
        assert_eq!(e.path, "cloud_provider.template");
    }
}
