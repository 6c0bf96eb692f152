//! The example release end to end through rendering: `examples/releases/hello` is built with
//! `kubosh release create`'s code, read back as a release tarball, its job rendered by real
//! Ruby with a consumed link, `spec.address` and `spec.bootstrap`, hashed and archived as the
//! Director does, and installed by kubosh's agent.

use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use kubosh_agentd::install::{InstallPlan, Installer};
use kubosh_agentd::layout::Layout;
use kubosh_artifacts::release::Release;
use kubosh_artifacts::render::{
    InstanceGroupSpec, JobTemplates, LinkInstance, LinkSpec, NetworkSpec, PropertyBinder,
    PropertyDefinition, ProvidedLinkEntry, ReleaseRef, RenderUnit, RenderedJob, Renderer,
    RendererConfig, TemplateSource, TemplateSpec, add_links_json, configuration_hash,
    property_source, rendered_templates_archive, template_hashes,
};
use kubosh_base::digest::sha1_hex;
use kubosh_core::manifest::Map;
use serde_json::{Value, json};

fn object(v: Value) -> Map {
    v.as_object().cloned().unwrap()
}

fn spec(properties: Map, index: u64, peers: Option<LinkSpec>) -> TemplateSpec {
    let ip = format!("10.0.0.{}", 10 + index);
    let mut networks = IndexMap::new();
    networks.insert(
        "default".to_string(),
        NetworkSpec {
            kind: Some("manual".into()),
            ip: Some(ip.clone()),
            netmask: Some("255.255.255.0".into()),
            gateway: Some("10.0.0.1".into()),
            default: vec!["dns".into(), "gateway".into()],
            ..NetworkSpec::default()
        },
    );
    let mut links = IndexMap::new();
    if let Some(p) = peers {
        links.insert("peers".to_string(), p);
    }
    TemplateSpec {
        deployment: "greeters".into(),
        job: InstanceGroupSpec {
            name: "hello".into(),
            extra: Map::new(),
        },
        index,
        bootstrap: index == 0,
        name: "hello".into(),
        id: format!("uuid-{index}"),
        az: Some("z1".into()),
        networks,
        properties_need_filtering: true,
        dns_domain_name: "bosh".into(),
        persistent_disk: 0,
        address: Some(ip.clone()),
        ip: Some(ip),
        properties,
        links,
        release: ReleaseRef {
            name: "hello".into(),
            version: "1.0.0".into(),
        },
    }
}

fn peers_link() -> LinkSpec {
    LinkSpec {
        deployment_name: Some("greeters".into()),
        instance_group: Some("hello".into()),
        default_network: Some("default".into()),
        domain: Some("bosh".into()),
        instances: (0..2)
            .map(|i| LinkInstance {
                name: "hello".into(),
                index: i,
                id: format!("uuid-{i}"),
                az: Some("z1".into()),
                address: Some(format!("10.0.0.{}", 10 + i)),
                bootstrap: i == 0,
                properties: None,
            })
            .collect(),
        properties: Some(object(
            json!({"hello": {"port": 9090, "greeting": "Bonjour"}}),
        )),
        ..LinkSpec::default()
    }
}

async fn render(job: &Arc<JobTemplates>, manifest_props: Value, index: u64) -> RenderedJob {
    let source = property_source(None, None, Some(&object(manifest_props)));
    let bound = PropertyBinder::new(job).unwrap().bind(&source).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let renderer = Renderer::new(RendererConfig {
        cache_dir: dir.path().to_path_buf(),
        timeout: Duration::from_secs(60),
        ..RendererConfig::default()
    })
    .unwrap();
    let unit = RenderUnit {
        job: job.clone(),
        spec: spec(bound, index, Some(peers_link())),
    };
    let mut out = renderer.render(&[unit], None).await;
    let mut rendered = out.remove(0).unwrap_or_else(|e| panic!("{e}"));
    add_links_json(
        &mut rendered,
        &[ProvidedLinkEntry {
            name: "greeter".into(),
            kind: "greeter".into(),
            group: "1".into(),
        }],
    );
    rendered
}

fn file<'a>(job: &'a RenderedJob, destination: &str) -> &'a str {
    &job.files
        .iter()
        .find(|f| f.destination == destination)
        .unwrap_or_else(|| panic!("no {destination}"))
        .content
}

#[tokio::test]
async fn the_example_release_renders_hashes_and_installs() {
    let release = kubosh_devenv::example_release().expect("the example release builds");
    let job = release.job("hello").expect("job hello");
    let job = Arc::new(
        JobTemplates::from_release_job(
            job,
            ReleaseRef {
                name: release.manifest.name.clone(),
                version: release.manifest.version.clone(),
            },
        )
        .unwrap(),
    );

    let first = render(&job, json!({"hello": {"port": 8443}}), 0).await;
    let config: Value = serde_json::from_str(file(&first, "config/config.json")).unwrap();
    assert_eq!(
        config,
        json!({"port": 8443, "greeting": "Hello", "address": "10.0.0.10", "bootstrap": true})
    );
    let peers = file(&first, "config/peers.txt");
    assert!(peers.contains("10.0.0.11:9090 Bonjour"), "{peers}");
    assert!(
        file(&first, "bin/drain").starts_with("#!"),
        "the drain script is rendered"
    );
    assert!(first.monit.contains("check process hello"));
    assert!(file(&first, ".bosh/links.json").contains("\"greeter\""));

    // if_p: an optional property shows up only when set.
    let named = render(&job, json!({"hello": {"port": 8443, "name": "world"}}), 0).await;
    let config: Value = serde_json::from_str(file(&named, "config/config.json")).unwrap();
    assert_eq!(config["name"], "world");

    // The hashes follow the rendered output and nothing else.
    let again = render(&job, json!({"hello": {"port": 8443}}), 0).await;
    assert_eq!(
        configuration_hash(std::slice::from_ref(&first)),
        configuration_hash(&[again])
    );
    assert_ne!(
        configuration_hash(std::slice::from_ref(&first)),
        configuration_hash(&[named])
    );
    let second_instance = render(&job, json!({"hello": {"port": 8443}}), 1).await;
    assert_ne!(
        configuration_hash(std::slice::from_ref(&first)),
        configuration_hash(&[second_instance]),
        "address and bootstrap differ per instance"
    );
    assert_eq!(
        template_hashes(std::slice::from_ref(&first))
            .keys()
            .collect::<Vec<_>>(),
        ["hello"]
    );

    // The archive installs with kubosh's agent, files where the job spec puts them.
    let archive = rendered_templates_archive(std::slice::from_ref(&first)).unwrap();
    let vm = tempfile::tempdir().unwrap();
    let layout = Layout::new(vm.path());
    layout.create().unwrap();
    let plan = InstallPlan::from_apply_spec(&json!({
        "job": {"name": "hello", "templates": [{"name": "hello", "version": job_version(&release)}]},
        "rendered_templates_archive": {"blobstore_id": "b", "sha1": sha1_hex(&archive)},
        "configuration_hash": configuration_hash(std::slice::from_ref(&first)),
    }))
    .unwrap();
    let installed = Installer::new(layout.clone())
        .install_jobs(&plan, archive)
        .await
        .expect("the agent installs the archive");
    let dir = &installed[0];
    assert_eq!(
        std::fs::read_to_string(dir.join("config/config.json")).unwrap(),
        file(&first, "config/config.json")
    );
    assert!(dir.join("bin/ctl").is_file() && dir.join("monit").is_file());
    assert!(dir.join(".bosh/links.json").is_file());
}

fn job_version(release: &Release) -> String {
    release.job("hello").unwrap().version.clone()
}

/// A second job of our own next to `hello`: it uses `logger.level` only.
fn logger_job() -> JobTemplates {
    JobTemplates {
        name: "logger".into(),
        release: ReleaseRef {
            name: "logging".into(),
            version: "0.1.0".into(),
        },
        monit: Some("check process logger\n  group vcap\n".into()),
        templates: vec![TemplateSource {
            source_path: "logger.conf.erb".into(),
            destination: "config/logger.conf".into(),
            text: "level=<%= p('logger.level') %>\nhost=<%= spec.address %>\n".into(),
        }],
        properties: [(
            "logger.level".to_string(),
            PropertyDefinition {
                default: Some(json!("info")),
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
        properties_schema: None,
    }
}

/// Renders both jobs of one instance (index 0) in one batch, each job's properties bound from
/// the instance group's `properties` (neither job has its own, as in a manifest where
/// `properties` sits on the group).
async fn render_instance(jobs: &[Arc<JobTemplates>], group_props: Value) -> Vec<RenderedJob> {
    let source = property_source(None, Some(&object(group_props)), None);
    let units: Vec<RenderUnit> = jobs
        .iter()
        .map(|job| {
            let bound = PropertyBinder::new(job).unwrap().bind(&source).unwrap();
            let mut spec = spec(bound, 0, Some(peers_link()));
            spec.release = job.release.clone();
            RenderUnit {
                job: job.clone(),
                spec,
            }
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let renderer = Renderer::new(RendererConfig {
        cache_dir: dir.path().to_path_buf(),
        timeout: Duration::from_secs(60),
        ..RendererConfig::default()
    })
    .unwrap();
    renderer
        .render(&units, None)
        .await
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

#[tokio::test]
async fn a_property_a_job_does_not_use_changes_nothing_for_that_job() {
    let release = kubosh_devenv::example_release().expect("the example release builds");
    let hello = Arc::new(
        JobTemplates::from_release_job(
            release.job("hello").unwrap(),
            ReleaseRef {
                name: release.manifest.name.clone(),
                version: release.manifest.version.clone(),
            },
        )
        .unwrap(),
    );
    let jobs = [hello, Arc::new(logger_job())];

    let base = render_instance(
        &jobs,
        json!({"hello": {"port": 8443}, "logger": {"level": "info"}}),
    )
    .await;
    let hashes = template_hashes(&base);
    assert_eq!(hashes.keys().collect::<Vec<_>>(), ["hello", "logger"]);
    assert_eq!(
        file(&base[1], "config/logger.conf"),
        "level=info\nhost=10.0.0.10\n"
    );

    // A property only the logger job uses: hello's template hash stays, logger's and the
    // instance's configuration hash change (so the instance is updated, hello's files are
    // the same).
    let logger_changed = render_instance(
        &jobs,
        json!({"hello": {"port": 8443}, "logger": {"level": "debug"}}),
    )
    .await;
    assert_eq!(
        file(&logger_changed[1], "config/logger.conf"),
        "level=debug\nhost=10.0.0.10\n"
    );
    let changed = template_hashes(&logger_changed);
    assert_eq!(changed["hello"], hashes["hello"]);
    assert_ne!(changed["logger"], hashes["logger"]);
    assert_ne!(
        configuration_hash(&logger_changed),
        configuration_hash(&base)
    );

    // A property neither job declares: nothing changes at all.
    let undeclared = render_instance(
        &jobs,
        json!({
            "hello": {"port": 8443, "undeclared": "x"},
            "logger": {"level": "info"},
            "unrelated": {"anything": [1, 2, 3]},
        }),
    )
    .await;
    assert_eq!(undeclared, base);
    assert_eq!(template_hashes(&undeclared), hashes);
    assert_eq!(configuration_hash(&undeclared), configuration_hash(&base));
    assert_eq!(
        rendered_templates_archive(&undeclared).unwrap(),
        rendered_templates_archive(&base).unwrap()
    );
}
