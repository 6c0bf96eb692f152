//! Link resolution and link content against realistic manifests and job specs
//! (`kubosh_core::links`), with the Director's messages and our manifest paths.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use kubosh_core::links::{
    self, Binding, DnsSettings, InstanceNetwork, LinkInstance, OtherDeployment, ProviderContent,
    ProviderFeatures, ProviderRef, Resolution, Target,
};
use kubosh_core::manifest::DeploymentManifest;
use kubosh_core::release::{JobSpec, PropertyDefinition};
use kubosh_core::validate::{Problems, Severity};
use serde_json::{Value, json};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/real-world"
);

type Specs = BTreeMap<(String, String), JobSpec>;

/// Job specs from `release/job: {spec}` YAML.
fn specs(yaml: &str) -> Specs {
    let map: BTreeMap<String, Value> = kubosh_base::yaml::parse(yaml, "specs").unwrap();
    map.into_iter()
        .map(|(key, mut spec)| {
            let (release, job) = key.split_once('/').unwrap();
            spec["name"] = json!(job);
            (
                (release.to_string(), job.to_string()),
                serde_json::from_value(spec).unwrap(),
            )
        })
        .collect()
}

fn manifest(yaml: &str) -> DeploymentManifest {
    kubosh_base::yaml::parse(yaml, "manifest").unwrap()
}

fn ok(m: &DeploymentManifest, s: &Specs, others: &[OtherDeployment]) -> Resolution {
    match links::resolve(m, s, others) {
        Ok(v) => v.document,
        Err(p) => panic!("unexpected problems:\n{p}"),
    }
}

/// (path, message) of every error.
fn errors(m: &DeploymentManifest, s: &Specs, others: &[OtherDeployment]) -> Vec<(String, String)> {
    let p: Problems = links::resolve(m, s, others).expect_err("expected problems");
    p.errors()
        .map(|e| (e.path.to_string(), e.message.clone()))
        .collect()
}

fn target<'a>(r: &'a Resolution, group: &str, job: &str, link: &str) -> &'a Target {
    &r.binding(group, job, link)
        .unwrap_or_else(|| panic!("no binding {group}/{job}/{link}"))
        .target
}

fn provider<'a>(r: &'a Resolution, group: &str, job: &str, link: &str) -> &'a ProviderRef {
    match target(r, group, job, link) {
        Target::Provider(p) => p,
        other => panic!("{group}/{job}/{link}: {other:?}"),
    }
}

const SPECS: &str = r#"
pg/postgres:
  provides: [{name: db, type: pg, properties: [port, tls.enabled]}]
  properties:
    port: {default: 5432}
    tls.enabled: {default: false}
    password: {}
app/web:
  consumes: [{name: db, type: pg}, {name: cache, type: redis, optional: true}]
  provides: [{name: web, type: http}]
app/worker:
  consumes: [{name: primary, type: pg}, {name: api, type: http, optional: true}]
"#;

fn base(groups: &str) -> DeploymentManifest {
    manifest(&format!(
        "name: app\ninstance_groups:\n{groups}",
        groups = groups
    ))
}

#[test]
fn implicit_by_type_binds_the_only_provider() {
    let m = base(
        r#"
- name: web
  networks: [{name: default}]
  jobs: [{name: web, release: app}]
- name: db
  networks: [{name: default}]
  jobs: [{name: postgres, release: pg}]
"#,
    );
    let r = ok(&m, &specs(SPECS), &[]);
    let p = provider(&r, "web", "web", "db");
    assert_eq!(
        (
            p.deployment.as_str(),
            p.instance_group.as_str(),
            p.job.as_str(),
            p.original_name.as_str(),
            p.name.as_str(),
            p.link_type.as_str()
        ),
        ("app", "db", "postgres", "db", "db", "pg")
    );
    assert_eq!(target(&r, "web", "web", "cache"), &Target::Unresolved);
    assert_eq!(r.providers.len(), 2);
    assert_eq!(p.default_network.as_deref(), Some("default"));
    assert_eq!(p.property_names, ["port", "tls.enabled"]);
}

#[test]
fn ambiguity_lists_every_provider() {
    let m = base(
        r#"
- name: web
  jobs: [{name: web, release: app}]
- name: db-a
  jobs: [{name: postgres, release: pg}]
- name: db-b
  jobs: [{name: postgres, release: pg, provides: {db: {as: other}}}]
"#,
    );
    assert_eq!(
        errors(&m, &specs(SPECS), &[]),
        [(
            "instance_groups[0].jobs[0].consumes.db".to_string(),
            "Failed to resolve link 'db' with type 'pg' from job 'web' in instance group 'web'. Multiple link providers found:\n    - Link provider 'db' from job 'postgres' in instance group 'db-a' in deployment 'app'\n    - Link provider 'db' with alias 'other' from job 'postgres' in instance group 'db-b' in deployment 'app'".to_string()
        )]
    );
}

#[test]
fn explicit_from_matches_aliases_and_takes_the_last_dot_segment() {
    let m = base(
        r#"
- name: web
  jobs: [{name: web, release: app, consumes: {db: {from: replica}}}]
- name: worker
  jobs: [{name: worker, release: app, consumes: {primary: {from: app.primary}}}]
- name: db-a
  jobs: [{name: postgres, release: pg, provides: {db: {as: primary}}}]
- name: db-b
  jobs: [{name: postgres, release: pg, provides: {db: {as: replica}}}]
"#,
    );
    let r = ok(&m, &specs(SPECS), &[]);
    assert_eq!(provider(&r, "web", "web", "db").instance_group, "db-b");
    assert_eq!(
        provider(&r, "worker", "worker", "primary").instance_group,
        "db-a"
    );
    // Explicit without `from` matches by the consumed link's own name.
    let m = base(
        r#"
- name: web
  jobs: [{name: web, release: app, consumes: {db: {ip_addresses: true}}}]
- name: db-a
  jobs: [{name: postgres, release: pg, provides: {db: {as: primary}}}]
- name: db-b
  jobs: [{name: postgres, release: pg}]
"#,
    );
    let r = ok(&m, &specs(SPECS), &[]);
    assert_eq!(provider(&r, "web", "web", "db").instance_group, "db-b");
    assert_eq!(
        r.binding("web", "web", "db").unwrap().ip_addresses,
        Some(true)
    );
}

#[test]
fn alias_mismatch_is_reported_with_the_alias() {
    let m = base(
        r#"
- name: web
  jobs: [{name: web, release: app, consumes: {db: {from: nope}}}]
- name: db
  jobs: [{name: postgres, release: pg}]
"#,
    );
    assert_eq!(
        errors(&m, &specs(SPECS), &[])[0].1,
        "Failed to resolve link 'db' with alias 'nope' and type 'pg' from job 'web' in instance group 'web'. Details below:\n    - No link providers found"
    );
}

#[test]
fn blocked_optional_and_disabled_links() {
    let s = specs(SPECS);
    // `nil` blocks an optional link even when a provider exists.
    let m = base(
        r#"
- name: web
  jobs: [{name: web, release: app, consumes: {cache: nil}}]
- name: db
  jobs: [{name: postgres, release: pg}]
"#,
    );
    assert_eq!(
        target(&ok(&m, &s, &[]), "web", "web", "cache"),
        &Target::Blocked
    );
    // Blocking a required link leaves it without a provider: an error, as in the Director.
    let m = base(
        r#"
- name: web
  jobs: [{name: web, release: app, consumes: {db: nil}}]
- name: db
  jobs: [{name: postgres, release: pg}]
"#,
    );
    assert_eq!(
        errors(&m, &s, &[])[0].1,
        "Failed to resolve link 'db' with type 'pg' from job 'web' in instance group 'web'. Details below:\n    - No link providers found"
    );
    // A disabled provider is no candidate.
    let m = base(
        r#"
- name: web
  jobs: [{name: web, release: app}]
- name: db-a
  jobs: [{name: postgres, release: pg, provides: {db: nil}}]
- name: db-b
  jobs: [{name: postgres, release: pg}]
"#,
    );
    let r = ok(&m, &s, &[]);
    assert_eq!(provider(&r, "web", "web", "db").instance_group, "db-b");
    assert!(!r.providers[1].consumable);
    // An explicit optional link must resolve; an implicit one may stay unresolved.
    let m = base(
        r#"
- name: web
  jobs: [{name: web, release: app, consumes: {cache: {from: redis}}}]
- name: db
  jobs: [{name: postgres, release: pg}]
"#,
    );
    let e = errors(&m, &s, &[]);
    assert_eq!(e[0].0, "instance_groups[0].jobs[0].consumes.cache");
    assert!(e[0].1.ends_with("No link providers found"), "{}", e[0].1);
}

fn zk_provider(shared: bool) -> OtherDeployment {
    OtherDeployment {
        name: "zk".into(),
        providers: vec![ProviderRef {
            deployment: "zk".into(),
            instance_group: "zookeeper".into(),
            job: "zookeeper".into(),
            original_name: "conn".into(),
            name: "conn".into(),
            link_type: "zookeeper".into(),
            shared,
            consumable: true,
            custom: false,
            property_names: vec!["client_port".into()],
            networks: vec!["default".into()],
            default_network: Some("default".into()),
        }],
    }
}

#[test]
fn shared_providers_of_other_deployments() {
    let s = specs("kafka/broker: {consumes: [{name: zk, type: zookeeper}]}");
    let m = manifest(
        r#"
name: kafka
instance_groups:
- name: broker
  jobs: [{name: broker, release: kafka, consumes: {zk: {from: conn, deployment: zk}}}]
"#,
    );
    let r = ok(&m, &s, &[zk_provider(true)]);
    let p = provider(&r, "broker", "broker", "zk");
    assert_eq!((p.deployment.as_str(), p.name.as_str()), ("zk", "conn"));

    // Not shared: no provider.
    assert_eq!(
        errors(&m, &s, &[zk_provider(false)]),
        [(
            "instance_groups[0].jobs[0].consumes.zk".to_string(),
            "Failed to resolve link 'zk' with alias 'conn' and type 'zookeeper' from job 'broker' in instance group 'broker'. Details below:\n    - No link providers found".to_string()
        )]
    );
    // No such deployment.
    assert_eq!(
        errors(&m, &s, &[]),
        [(
            "instance_groups[0].jobs[0].consumes.zk.deployment".to_string(),
            "Link 'conn' in job 'broker' from instance group 'broker' consumes from deployment 'zk', but the deployment does not exist.".to_string()
        )]
    );
    // Implicit links never cross deployments.
    let m = manifest(
        "name: kafka\ninstance_groups:\n- {name: broker, jobs: [{name: broker, release: kafka}]}\n",
    );
    assert!(
        errors(&m, &s, &[zk_provider(true)])[0]
            .1
            .ends_with("No link providers found")
    );
}

#[test]
fn manual_links_are_taken_literally() {
    let m = base(
        r#"
- name: web
  jobs:
  - name: web
    release: app
    consumes:
      db:
        address: db.example.com
        instances: [{address: 10.1.1.1}]
        properties: {port: 6543}
"#,
    );
    let r = ok(&m, &specs(SPECS), &[]);
    let b = r.binding("web", "web", "db").unwrap();
    let v = links::content(b, None).unwrap().unwrap();
    assert_eq!(
        v,
        json!({
            "instances": [{"address": "10.1.1.1"}],
            "properties": {"port": 6543},
            "address": "db.example.com",
            "deployment_name": "app",
            "group_name": "db-pg",
        })
    );
    assert_eq!(
        links::group_address(&v, &DnsSettings::default()).unwrap(),
        "db.example.com"
    );
}

#[test]
fn custom_provider_definitions() {
    let s = specs(SPECS);
    let m = base(
        r#"
- name: worker
  jobs: [{name: worker, release: app}]
- name: api
  jobs:
  - name: web
    release: app
    custom_provider_definitions: [{name: db-proxy, type: pg, properties: [proxy.port]}]
    properties: {proxy: {port: 7432}}
"#,
    );
    let r = ok(&m, &s, &[]);
    let p = provider(&r, "worker", "worker", "primary");
    assert_eq!((p.original_name.as_str(), p.custom), ("db-proxy", true));
    // The custom definition comes before the release's own providers.
    assert_eq!(r.providers[0].original_name, "db-proxy");
    assert_eq!(r.providers[1].original_name, "web");

    let m = base(
        r#"
- name: api
  jobs:
  - name: web
    release: app
    custom_provider_definitions:
    - {name: web, type: http}
    - {name: x, type: ""}
    - {name: yy, type: t, properties: [nowhere]}
    - {name: yy, type: t}
"#,
    );
    assert_eq!(
        errors(&m, &s, &[]),
        [
            (
                "instance_groups[0].jobs[0].custom_provider_definitions[0].name".to_string(),
                "Custom provider 'web' in job 'web' in instance group 'api' is already defined in release 'app'".to_string()
            ),
            (
                "instance_groups[0].jobs[0].custom_provider_definitions[1].type".to_string(),
                "Type for custom link provider definition in manifest in job 'web' in instance group 'api' must be a valid non-empty string.".to_string()
            ),
            (
                "instance_groups[0].jobs[0].custom_provider_definitions[3].name".to_string(),
                "Custom provider 'yy' in job 'web' in instance group 'api' is defined multiple times in manifest.".to_string()
            ),
            // The job's own required link has no provider: reported in the same pass.
            (
                "instance_groups[0].jobs[0].consumes.db".to_string(),
                "Failed to resolve link 'db' with type 'pg' from job 'web' in instance group 'api'. Details below:\n    - No link providers found".to_string()
            ),
        ]
    );
}

fn instances(n: u64, nets: &[(&str, &str)]) -> Vec<LinkInstance> {
    (0..n)
        .rev()
        .map(|i| LinkInstance {
            index: i,
            id: format!("uuid-{i}"),
            az: Some(format!("z{}", i + 1)),
            bootstrap: i == 0,
            networks: nets
                .iter()
                .map(|(name, prefix)| InstanceNetwork {
                    name: name.to_string(),
                    ip: Some(format!("{prefix}.{}", 10 + i)),
                    dynamic: false,
                })
                .collect(),
        })
        .collect()
}

fn defs(spec: &JobSpec) -> &IndexMap<String, PropertyDefinition> {
    &spec.properties
}

fn db_manifest(features: &str, consumes: &str) -> DeploymentManifest {
    manifest(&format!(
        r#"
name: app
features: {features}
instance_groups:
- name: web
  jobs: [{{name: web, release: app, consumes: {consumes}}}]
- name: db
  networks: [{{name: a, default: [dns, gateway]}}, {{name: b}}]
  jobs: [{{name: postgres, release: pg, properties: {{port: 6000, password: secret}}}}]
"#
    ))
}

/// Resolves, builds the provider content and returns web's `db` link.
fn db_link(m: &DeploymentManifest, dns: &DnsSettings) -> (Binding, ProviderContent, Value) {
    let s = specs(SPECS);
    let r = ok(m, &s, &[]);
    let b = r.binding("web", "web", "db").unwrap().clone();
    let Target::Provider(p) = &b.target else {
        panic!("{:?}", b.target)
    };
    let spec = &s[&("pg".to_string(), "postgres".to_string())];
    let props = json!({"port": 6000, "password": "secret"});
    let c = links::provider_content(
        p,
        ProviderFeatures::of(m),
        &instances(2, &[("a", "10.0.1"), ("b", "10.0.2")]),
        &props,
        defs(spec),
        dns,
    )
    .unwrap();
    let v = links::content(&b, Some(&c)).unwrap().unwrap();
    (b, c, v)
}

#[test]
fn content_with_ips_filters_and_defaults_properties() {
    let (_, c, v) = db_link(&db_manifest("{}", "{}"), &DnsSettings::default());
    assert_eq!(
        serde_json::to_string(&v).unwrap(),
        serde_json::to_string(&json!({
            "deployment_name": "app",
            "domain": "bosh",
            "default_network": "a",
            "instance_group": "db",
            "properties": {"port": 6000, "tls": {"enabled": false}},
            "use_short_dns_addresses": false,
            "use_link_dns_names": false,
            "instances": [
                {"name": "db", "id": "uuid-0", "index": 0, "bootstrap": true, "az": "z1", "address": "10.0.1.10"},
                {"name": "db", "id": "uuid-1", "index": 1, "bootstrap": false, "az": "z2", "address": "10.0.1.11"},
            ],
            "group_name": "db-pg",
        }))
        .unwrap(),
        "keys in the Director's order, secrets not exposed"
    );
    assert_eq!(c.instances[0].dns_addresses["b"], "uuid-0.db.b.app.bosh");
    assert_eq!(
        links::group_address(&v, &DnsSettings::default()).unwrap(),
        "q-s0.db.a.app.bosh"
    );
}

#[test]
fn content_with_dns_names_and_network_choice() {
    let dns = DnsSettings::default();
    let (_, _, v) = db_link(&db_manifest("{use_dns_addresses: true}", "{}"), &dns);
    assert_eq!(v["instances"][1]["address"], "uuid-1.db.a.app.bosh");
    // ip_addresses: true overrides the provider's use_dns_addresses.
    let (_, _, v) = db_link(
        &db_manifest("{use_dns_addresses: true}", "{db: {ip_addresses: true}}"),
        &dns,
    );
    assert_eq!(v["instances"][1]["address"], "10.0.1.11");
    // ip_addresses: false asks for DNS names without the feature.
    let (_, _, v) = db_link(&db_manifest("{}", "{db: {ip_addresses: false}}"), &dns);
    assert_eq!(v["instances"][0]["address"], "uuid-0.db.a.app.bosh");
    // `network` picks the network, and becomes the link's default network.
    let (_, _, v) = db_link(&db_manifest("{}", "{db: {network: b}}"), &dns);
    assert_eq!(v["instances"][0]["address"], "10.0.2.10");
    assert_eq!(v["default_network"], "b");
    assert_eq!(
        links::group_address(&v, &dns).unwrap(),
        "q-s0.db.b.app.bosh"
    );
    // Without local DNS the Director gives IPs even when DNS names are asked for.
    let no_dns = DnsSettings {
        local_dns_enabled: false,
        ..DnsSettings::default()
    };
    let (_, _, v) = db_link(&db_manifest("{use_dns_addresses: true}", "{}"), &no_dns);
    assert_eq!(v["instances"][0]["address"], "10.0.1.10");
}

#[test]
fn consumer_network_must_be_a_provider_network() {
    let m = db_manifest("{}", "{db: {network: c}}");
    assert_eq!(
        errors(&m, &specs(SPECS), &[]),
        [(
            "instance_groups[0].jobs[0].consumes.db.network".to_string(),
            "Failed to resolve link 'db' with type 'pg' from job 'web' in instance group 'web'. Details below:\n    - Link provider 'db' from job 'postgres' in instance group 'db' in deployment 'app' does not belong to network 'c'".to_string()
        )]
    );
}

#[test]
fn every_problem_is_reported_at_once_with_paths() {
    let m = base(
        r#"
- name: web
  jobs:
  - name: web
    release: app
    consumes:
      db: {from: x, instances: [], name: n}
      cache: [not, a, hash]
      unknown: {from: y}
- name: worker
  jobs: [{name: worker, release: app, consumes: {primary: {ip_addresses: "yes"}}}]
- name: db
  jobs:
  - {name: postgres, release: pg, provides: {db: {type: t}}, custom_provider_definitions: [{name: "", type: pg}]}
  - {name: missing, release: pg}
- name: db2
  jobs:
  - {name: postgres, release: pg, provides: {db: {as: primary}}}
"#,
    );
    let p = links::resolve(&m, &specs(SPECS), &[]).unwrap_err();
    let got: Vec<(Severity, String, String)> = p
        .all()
        .iter()
        .map(|e| (e.severity, e.path.to_string(), e.message.clone()))
        .collect();
    let e = |path: &str, msg: &str| (Severity::Error, path.to_string(), msg.to_string());
    assert_eq!(
        got,
        [
            e(
                "instance_groups[0].jobs[0].consumes.db",
                "Cannot specify both 'instances' and 'from' keys for link 'db' in job 'web' in instance group 'web'."
            ),
            e(
                "instance_groups[0].jobs[0].consumes.db",
                "Cannot specify 'name' or 'type' properties in the manifest for link 'db' in job 'web' in instance group 'web'. Please provide these keys in the release only."
            ),
            e(
                "instance_groups[0].jobs[0].consumes.cache",
                "Consumer 'cache' in job 'web' in instance group 'web' specified in the manifest should only be a hash or string 'nil'"
            ),
            (
                Severity::Warning,
                "instance_groups[0].jobs[0].consumes.unknown".to_string(),
                "Job 'web' does not define link consumer 'unknown' in the release spec".to_string()
            ),
            e(
                "instance_groups[1].jobs[0].consumes.primary",
                "Cannot specify non boolean values for 'ip_addresses' field for link 'primary' in job 'worker' in instance group 'worker'."
            ),
            e(
                "instance_groups[2].jobs[0].custom_provider_definitions[0].name",
                "Name for custom link provider definition in manifest in job 'postgres' in instance group 'db' must be a valid non-empty string."
            ),
            e(
                "instance_groups[2].jobs[1].name",
                "Job 'missing' not found in release 'pg'"
            ),
        ]
    );

    // Resolution problems of several consumers come together too.
    let m = base(
        r#"
- name: web
  jobs: [{name: web, release: app}]
- name: worker
  jobs: [{name: worker, release: app}]
- name: db
  jobs: [{name: postgres, release: pg, provides: {db: {type: t}}}]
"#,
    );
    let e = errors(&m, &specs(SPECS), &[]);
    let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "instance_groups[2].jobs[0].provides.db",
            "instance_groups[0].jobs[0].consumes.db",
            "instance_groups[1].jobs[0].consumes.primary",
        ]
    );
}

#[test]
fn undefined_link_properties_are_errors() {
    let s =
        specs("r/j: {provides: [{name: l, type: t, properties: [a.b, c]}], properties: {c: {}}}");
    let m = manifest("name: d\ninstance_groups:\n- {name: g, jobs: [{name: j, release: r}]}\n");
    assert_eq!(
        errors(&m, &s, &[]),
        [(
            "instance_groups[0].jobs[0]".to_string(),
            "Link property a.b in template j is not defined in release spec".to_string()
        )]
    );
    // Set in the manifest (group or global properties count too), it is fine.
    let m = manifest(
        "name: d\nproperties: {a: {b: 1}}\ninstance_groups:\n- {name: g, jobs: [{name: j, release: r}]}\n",
    );
    ok(&m, &s, &[]);
}

#[test]
fn addon_jobs_provide_and_consume() {
    let s = specs(
        r#"
dns/agent: {consumes: [{name: api, type: http}]}
app/web: {provides: [{name: web, type: http}]}
"#,
    );
    let m = manifest(
        r#"
name: d
instance_groups:
- {name: front, jobs: [{name: web, release: app}]}
- {name: back, jobs: []}
addons:
- {name: dns, jobs: [{name: agent, release: dns}], exclude: {instance_groups: [back]}}
"#,
    );
    let r = ok(&m, &s, &[]);
    assert_eq!(
        provider(&r, "front", "agent", "api").instance_group,
        "front"
    );
    assert!(r.binding("back", "agent", "api").is_none());
}

#[test]
fn same_input_same_output() {
    let m = base(
        r#"
- name: web
  jobs: [{name: web, release: app}]
- name: worker
  jobs: [{name: worker, release: app}]
- name: db
  jobs: [{name: postgres, release: pg}]
"#,
    );
    let s = specs(SPECS);
    let first = ok(&m, &s, &[]);
    for _ in 0..5 {
        assert_eq!(ok(&m, &s, &[]), first);
    }
    let order: Vec<String> = first
        .bindings
        .iter()
        .map(|b| {
            format!(
                "{}/{}/{}",
                b.consumer.instance_group, b.consumer.job, b.consumer.name
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            "web/web/db",
            "web/web/cache",
            "worker/worker/primary",
            "worker/worker/api"
        ]
    );
    assert_eq!(
        provider(&first, "worker", "worker", "api").instance_group,
        "web"
    );
}

#[test]
fn real_zookeeper_manifest_and_job_spec() {
    let text =
        std::fs::read_to_string(format!("{FIXTURES}/zookeeper-release/zookeeper.yml")).unwrap();
    let m = manifest(&text);
    let spec_text = std::fs::read_to_string(format!(
        "{FIXTURES}/zookeeper-release/zookeeper-job-spec.yml"
    ))
    .unwrap();
    let zk: JobSpec = kubosh_base::yaml::parse(&spec_text, "spec").unwrap();
    let mut s = specs(
        r#"
zookeeper/status: {}
zookeeper/smoke-tests: {consumes: [{name: conn, type: zookeeper}]}
"#,
    );
    s.insert(("zookeeper".into(), "zookeeper".into()), zk.clone());
    let r = ok(&m, &s, &[]);
    let peers = provider(&r, "zookeeper", "zookeeper", "peers");
    assert_eq!(
        (peers.instance_group.as_str(), peers.shared),
        ("zookeeper", false)
    );
    let conn = provider(&r, "smoke-tests", "smoke-tests", "conn");
    assert!(conn.shared);

    let c = links::provider_content(
        peers,
        ProviderFeatures::of(&m),
        &instances(5, &[("default", "10.244.0")]),
        &json!({}),
        &zk.properties,
        &DnsSettings::default(),
    )
    .unwrap();
    let b = r.binding("zookeeper", "zookeeper", "peers").unwrap();
    let v = links::content(b, Some(&c)).unwrap().unwrap();
    assert_eq!(
        v["properties"],
        json!({"client_port": 2181, "quorum_port": 2888, "leader_election_port": 3888})
    );
    let addresses: Vec<&str> = v["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["address"].as_str().unwrap())
        .collect();
    assert_eq!(
        addresses,
        [
            "10.244.0.10",
            "10.244.0.11",
            "10.244.0.12",
            "10.244.0.13",
            "10.244.0.14"
        ]
    );

    // Another deployment consumes the shared `conn` link through what this one published.
    let others = [OtherDeployment {
        name: "zookeeper".into(),
        providers: r.providers.clone(),
    }];
    let kafka = specs("kafka/broker: {consumes: [{name: zookeeper, type: zookeeper}]}");
    let km = manifest(
        "name: kafka\ninstance_groups:\n- {name: broker, jobs: [{name: broker, release: kafka, consumes: {zookeeper: {from: conn, deployment: zookeeper}}}]}\n",
    );
    let kr = ok(&km, &kafka, &others);
    let p = provider(&kr, "broker", "broker", "zookeeper");
    assert_eq!(
        (p.deployment.as_str(), p.job.as_str()),
        ("zookeeper", "zookeeper")
    );
}

#[test]
fn real_cf_deployment_resolves_without_false_errors() {
    let text =
        std::fs::read_to_string(format!("{FIXTURES}/cf-deployment/cf-deployment.yml")).unwrap();
    let m = manifest(&text);
    // Link declarations of a few of cf-deployment's jobs (abridged from their releases);
    // every other job gets an empty spec.
    let mut s = specs(
        r#"
nats/nats-tls:
  provides: [{name: nats-tls, type: nats-tls, properties: [nats.user, nats.password]}]
  consumes: [{name: nats-tls, type: nats-tls, optional: true}]
  properties: {nats.user: {}, nats.password: {}}
routing/route_registrar:
  consumes: [{name: nats, type: nats, optional: true}, {name: nats-tls, type: nats-tls, optional: true}]
routing/gorouter:
  consumes: [{name: nats, type: nats, optional: true}, {name: nats-tls, type: nats-tls, optional: true}]
loggregator/doppler:
  provides: [{name: doppler, type: doppler, properties: [doppler.grpc_port]}]
  properties: {doppler.grpc_port: {default: 8082}}
loggregator/loggregator_trafficcontroller:
  consumes: [{name: doppler, type: doppler}]
loggregator/reverse_log_proxy:
  provides: [{name: reverse_log_proxy, type: reverse_log_proxy}]
loggregator/reverse_log_proxy_gateway:
  consumes: [{name: reverse_log_proxy, type: reverse_log_proxy}]
log-cache/log-cache:
  provides: [{name: log-cache, type: log-cache}]
log-cache/log-cache-gateway:
  consumes: [{name: log-cache, type: log-cache}]
capi/cloud_controller_ng:
  provides: [{name: cloud_controller, type: cloud_controller}, {name: cloud_controller_internal, type: cloud_controller_internal}]
capi/cloud_controller_worker:
  consumes: [{name: cloud_controller_internal, type: cloud_controller_internal}]
pxc/pxc-mysql:
  provides: [{name: mysql, type: mysql}]
pxc/proxy:
  consumes: [{name: mysql, type: mysql}]
diego/bbs:
  provides: [{name: bbs, type: bbs}]
diego/rep:
  consumes: [{name: bbs, type: bbs, optional: true}]
"#,
    );
    let addon_jobs = m.addons.iter().flat_map(|a| a.jobs.iter());
    for j in m
        .instance_groups
        .iter()
        .flat_map(|g| g.jobs.iter())
        .chain(addon_jobs)
    {
        {
            s.entry((j.release.clone(), j.name.clone()))
                .or_insert_with(|| serde_json::from_value(json!({"name": j.name})).unwrap());
        }
    }
    let v = links::resolve(&m, &s, &[]).unwrap_or_else(|p| panic!("{p}"));
    let r = v.document;
    assert!(v.warnings.is_empty(), "{}", v.warnings);
    assert_eq!(
        provider(&r, "router", "gorouter", "nats-tls").instance_group,
        "nats"
    );
    assert_eq!(
        target(&r, "router", "gorouter", "nats"),
        &Target::Unresolved
    );
    let d = provider(&r, "log-api", "loggregator_trafficcontroller", "doppler");
    assert_eq!((d.instance_group.as_str(), d.shared), ("doppler", true));
    assert_eq!(provider(&r, "database", "proxy", "mysql").job, "pxc-mysql");
    // route_registrar on many groups all find the one nats-tls provider.
    let registrars = r
        .bindings
        .iter()
        .filter(|b| b.consumer.job == "route_registrar" && b.consumer.name == "nats-tls")
        .count();
    assert!(registrars >= 5, "{registrars}");
}
