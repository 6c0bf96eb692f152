//! The real zookeeper job spec (cppforlife/zookeeper-release, read from
//! `shared/fixtures/real-world/zookeeper-release`, never copied) with its real deployment
//! manifest, rendered by real Ruby: properties defaulted and filtered as the Director does,
//! and template errors named by template and line.
//!
//! The fixture has the job spec but not its templates, so the templates here are small ones
//! of ours using the spec's real property names. The real manifest sets `properties: {}` on
//! the job (so every value is a spec default); overrides are applied to it with a go-patch
//! ops file, as an operator would.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use kubosh_artifacts::release::manifest::JobSpec;
use kubosh_artifacts::render::{
    InstanceGroupSpec, JobTemplates, NetworkSpec, PropertyBinder, ReleaseRef, RenderError,
    RenderUnit, RenderedJob, Renderer, RendererConfig, TemplateSource, TemplateSpec,
    property_source,
};
use kubosh_core::manifest::{DeploymentManifest, Map};
use kubosh_core::ops::OpsFile;
use serde_json::json;

fn fixture(name: &str) -> (String, String) {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "../../../shared/fixtures/real-world/zookeeper-release",
        name,
    ]
    .iter()
    .collect();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    (text, path.display().to_string())
}

fn job_spec() -> JobSpec {
    let (text, origin) = fixture("zookeeper-job-spec.yml");
    kubosh_base::yaml::parse(&text, &origin).unwrap_or_else(|e| panic!("{e}"))
}

/// The real manifest, with go-patch `ops` (YAML) applied first.
fn real_manifest(ops: &str) -> DeploymentManifest {
    let (text, origin) = fixture("zookeeper.yml");
    let mut doc = kubosh_base::yaml::parse_value(&text, &origin).unwrap_or_else(|e| panic!("{e}"));
    if !ops.is_empty() {
        OpsFile::parse(ops, "ops.yml")
            .unwrap()
            .apply(&mut doc)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    serde_json::from_value(doc).unwrap_or_else(|e| panic!("{e}"))
}

/// Our templates, using the spec's real property names, at the spec's destinations.
const ZOO_CFG: &str = "\
tickTime=<%= p('tick_time') %>
initLimit=<%= p('init_limit') %>
syncLimit=<%= p('sync_limit') %>
clientPort=<%= p('client_port') %>
clientPortAddress=<%= p('listen_address') %>
maxClientCnxns=<%= p('max_client_connections') %>
autopurge.purgeInterval=<%= p('autopurge_purge_interval') %>
autopurge.snapRetainCount=<%= p('autopurge_snap_retain_count') %>
preAllocSize=<%= p('pre_allocation_size') %>
syncEnabled=<%= p('sync_enabled') %>
forceSync=<%= p('force_sync') %>
server.<%= spec.index %>=<%= spec.address %>:<%= p('quorum_port') %>:<%= p('leader_election_port') %>
";
const MYID: &str = "<%= spec.index %>\n";

/// The zookeeper job as rendering sees it: the real spec's templates and properties, with
/// `templates` giving the text of the ones we render (the others are left out; each must be
/// in the spec).
fn job(spec: &JobSpec, templates: &[(&str, &str)]) -> JobTemplates {
    for (source, _) in templates {
        assert!(
            spec.templates.contains_key(*source),
            "{source} is not in the job spec"
        );
    }
    JobTemplates {
        name: spec.name.clone(),
        release: ReleaseRef {
            name: "zookeeper".into(),
            version: "0.0.10".into(),
        },
        monit: Some("check process zookeeper\n  group vcap\n".into()),
        // In job-spec order, as `JobTemplates::from_release_job` has them.
        templates: spec
            .templates
            .iter()
            .filter_map(|(source, destination)| {
                let (_, text) = templates.iter().find(|(s, _)| s == source)?;
                Some(TemplateSource {
                    source_path: source.clone(),
                    destination: destination.clone(),
                    text: (*text).to_string(),
                })
            })
            .collect(),
        properties: spec.properties.clone(),
        properties_schema: None,
    }
}

/// The properties the zookeeper job of the zookeeper group sees in `manifest`.
fn source(manifest: &DeploymentManifest) -> Map {
    let group = manifest
        .instance_groups
        .iter()
        .find(|g| g.name == "zookeeper")
        .expect("zookeeper group");
    let job = group
        .jobs
        .iter()
        .find(|j| j.name == "zookeeper")
        .expect("zookeeper job");
    property_source(
        manifest.properties.as_ref(),
        group.properties.as_ref(),
        job.properties.as_ref(),
    )
}

fn template_spec(properties: Map, index: u64) -> TemplateSpec {
    let ip = format!("10.0.16.{}", 10 + index);
    let mut networks = IndexMap::new();
    networks.insert(
        "default".to_string(),
        NetworkSpec {
            kind: Some("manual".into()),
            ip: Some(ip.clone()),
            netmask: Some("255.255.255.0".into()),
            gateway: Some("10.0.16.1".into()),
            default: vec!["dns".into(), "gateway".into()],
            ..NetworkSpec::default()
        },
    );
    TemplateSpec {
        deployment: "zookeeper".into(),
        job: InstanceGroupSpec {
            name: "zookeeper".into(),
            extra: Map::new(),
        },
        index,
        bootstrap: index == 0,
        name: "zookeeper".into(),
        id: format!("zk-uuid-{index}"),
        az: Some("z1".into()),
        networks,
        properties_need_filtering: true,
        dns_domain_name: "bosh".into(),
        persistent_disk: 10240,
        address: Some(ip.clone()),
        ip: Some(ip),
        properties,
        links: IndexMap::new(),
        release: ReleaseRef {
            name: "zookeeper".into(),
            version: "0.0.10".into(),
        },
    }
}

async fn render(job: JobTemplates, source: &Map, index: u64) -> Result<RenderedJob, RenderError> {
    let bound = PropertyBinder::new(&job)?.bind(source)?;
    let dir = tempfile::tempdir().unwrap();
    let renderer = Renderer::new(RendererConfig {
        cache_dir: dir.path().to_path_buf(),
        timeout: Duration::from_secs(60),
        ..RendererConfig::default()
    })
    .unwrap();
    let unit = RenderUnit {
        job: Arc::new(job),
        spec: template_spec(bound, index),
    };
    let mut out = renderer.render(&[unit], None).await;
    assert_eq!(out.len(), 1);
    out.remove(0)
}

fn file<'a>(job: &'a RenderedJob, destination: &str) -> &'a str {
    &job.files
        .iter()
        .find(|f| f.destination == destination)
        .unwrap_or_else(|| panic!("no {destination} in {job:?}"))
        .content
}

fn template_errors(err: RenderError) -> Vec<String> {
    match err {
        RenderError::Templates { errors, .. } => errors.iter().map(ToString::to_string).collect(),
        other => panic!("expected template errors, got {other}"),
    }
}

#[test]
fn the_real_job_spec_parses() {
    let spec = job_spec();
    assert_eq!(spec.name, "zookeeper");
    assert_eq!(spec.templates["zoo.cfg.erb"], "config/zoo.cfg");
    assert_eq!(spec.templates["myid.erb"], "config/myid");
    assert_eq!(spec.properties.len(), 21);
    assert_eq!(spec.properties["client_port"].default, Some(json!(2181)));
    assert_eq!(spec.properties["leader_serves"].default, Some(json!("yes")));
}

#[tokio::test]
async fn defaults_fill_what_the_real_manifest_leaves_out() {
    let spec = job_spec();
    let manifest = real_manifest("");
    let source = source(&manifest);
    assert_eq!(source, Map::new(), "the real manifest gives the job `{{}}`");
    let rendered = render(
        job(&spec, &[("zoo.cfg.erb", ZOO_CFG), ("myid.erb", MYID)]),
        &source,
        3,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        file(&rendered, "config/zoo.cfg"),
        "\
tickTime=2000
initLimit=5
syncLimit=2
clientPort=2181
clientPortAddress=0.0.0.0
maxClientCnxns=60
autopurge.purgeInterval=24
autopurge.snapRetainCount=3
preAllocSize=65536
syncEnabled=true
forceSync=yes
server.3=10.0.16.13:2888:3888
"
    );
    assert_eq!(file(&rendered, "config/myid"), "3\n");
    assert_eq!(
        rendered
            .files
            .iter()
            .map(|f| f.destination.as_str())
            .collect::<Vec<_>>(),
        ["config/myid", "config/zoo.cfg"],
        "files in job-spec order"
    );
}

#[tokio::test]
async fn manifest_values_override_defaults_and_undeclared_ones_are_invisible() {
    let spec = job_spec();
    let manifest = real_manifest(
        "\
- type: replace
  path: /instance_groups/name=zookeeper/jobs/name=zookeeper/properties
  value:
    client_port: 2182
    tick_time: 3000
    sync_enabled: false
    not_declared: leaked
",
    );
    let source = source(&manifest);
    let rendered = render(
        job(&spec, &[("zoo.cfg.erb", ZOO_CFG), ("myid.erb", MYID)]),
        &source,
        0,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let cfg = file(&rendered, "config/zoo.cfg");
    assert!(cfg.contains("clientPort=2182\n"), "{cfg}");
    assert!(cfg.contains("tickTime=3000\n"), "{cfg}");
    assert!(cfg.contains("syncEnabled=false\n"), "{cfg}");
    assert!(
        cfg.contains("initLimit=5\n"),
        "untouched defaults stay: {cfg}"
    );
    assert!(cfg.contains("server.0=10.0.16.10:2888:3888\n"), "{cfg}");

    // The binder keeps declared properties only.
    let bound = PropertyBinder::new(&job(&spec, &[]))
        .unwrap()
        .bind(&source)
        .unwrap();
    assert_eq!(bound.len(), spec.properties.len());
    assert!(!bound.contains_key("not_declared"));

    // A template asking for the undeclared property fails as the Director's does; the one
    // with a fallback gets the fallback.
    let errors = template_errors(
        render(
            job(
                &spec,
                &[
                    ("myid.erb", "<%= p('not_declared', 'fallback') %>\n"),
                    (
                        "zoo.cfg.erb",
                        "clientPort=<%= p('client_port') %>\n<%= p('not_declared') %>\n",
                    ),
                ],
            ),
            &source,
            0,
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        errors,
        [
            "Error filling in template 'zoo.cfg.erb' for zookeeper/0 (line 2: Can't find property '[\"not_declared\"]')"
        ]
    );
}

#[tokio::test]
async fn a_required_property_missing_from_the_manifest_names_template_and_line() {
    let mut spec = job_spec();
    // Every property of the real spec has a default; make one required, as releases do.
    spec.properties
        .get_mut("tick_time")
        .expect("tick_time declared")
        .default = None;
    let manifest = real_manifest("");
    let err = render(
        job(&spec, &[("zoo.cfg.erb", ZOO_CFG), ("myid.erb", MYID)]),
        &source(&manifest),
        1,
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "Unable to render templates for job 'zookeeper' of release 'zookeeper/0.0.10'. Errors are:"
        ),
        "{text}"
    );
    assert_eq!(
        template_errors(err),
        [
            "Error filling in template 'zoo.cfg.erb' for zookeeper/1 (line 1: Can't find property '[\"tick_time\"]')"
        ]
    );

    // Set in the manifest, it renders.
    let manifest = real_manifest(
        "\
- type: replace
  path: /instance_groups/name=zookeeper/jobs/name=zookeeper/properties/tick_time?
  value: 1500
",
    );
    let rendered = render(
        job(&spec, &[("zoo.cfg.erb", ZOO_CFG)]),
        &source(&manifest),
        1,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(file(&rendered, "config/zoo.cfg").starts_with("tickTime=1500\n"));
}

#[tokio::test]
async fn an_erb_syntax_error_names_template_and_line() {
    let spec = job_spec();
    let broken = "\
tickTime=<%= p('tick_time') %>
clientPort=<%= p('client_port') %>
<% if p('sync_enabled') %>
syncEnabled=true
";
    // A call left unclosed on line 2 of the other template.
    let broken_myid = "<%= spec.index %>\n<%= p('client_port' %>\n";
    let errors = template_errors(
        render(
            job(&spec, &[("myid.erb", broken_myid), ("zoo.cfg.erb", broken)]),
            &source(&real_manifest("")),
            4,
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("Error filling in template 'myid.erb' for zookeeper/4 (line 2: "),
        "{}",
        errors[0]
    );
    // An `if` never closed is an error at the end of the input: the line after the last
    // newline, as Ruby (and so the Director) reports it.
    assert!(
        errors[1].starts_with("Error filling in template 'zoo.cfg.erb' for zookeeper/4 (line 5: "),
        "{}",
        errors[1]
    );
    for e in &errors {
        assert!(e.contains("syntax error"), "{e}");
    }
}
