//! Job template rendering against real Ruby (`ruby` from Debian, see tools/test.sh).
//!
//! Expected texts follow the Director's `Bosh::Common::Template::EvaluationContext` and
//! `SourceErb` (cloudfoundry/bosh, src/bosh-common and src/bosh-director).

use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use kubosh_artifacts::render::{
    DnsTables, InstanceGroupSpec, JobTemplates, LinkInstance, LinkSpec, NetworkSpec,
    PropertyBinder, PropertyDefinition, ReleaseRef, RenderError, RenderUnit, RenderedJob, Renderer,
    RendererConfig, TemplateSource, TemplateSpec, property_source,
};
use kubosh_core::manifest::Map;
use serde_json::{Value, json};

fn renderer(dir: &tempfile::TempDir) -> Renderer {
    Renderer::new(RendererConfig {
        cache_dir: dir.path().to_path_buf(),
        concurrency: 2,
        timeout: Duration::from_secs(60),
        ..RendererConfig::default()
    })
    .expect("renderer script installed")
}

fn map(v: Value) -> Map {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// A job with the given templates (`source` → text, destination `dest/<source>`) and declared
/// properties (name → default).
fn job(templates: &[(&str, &str)], declared: &[(&str, Option<Value>)]) -> JobTemplates {
    JobTemplates {
        name: "web".into(),
        release: ReleaseRef {
            name: "nginx".into(),
            version: "1.2.3".into(),
        },
        monit: Some("check process <%= name %>_<%= index %>\n".into()),
        templates: templates
            .iter()
            .map(|(src, text)| TemplateSource {
                source_path: (*src).into(),
                destination: format!("dest/{src}"),
                text: (*text).into(),
            })
            .collect(),
        properties: declared
            .iter()
            .map(|(name, default)| {
                (
                    (*name).to_string(),
                    PropertyDefinition {
                        default: default.clone(),
                        ..Default::default()
                    },
                )
            })
            .collect(),
        properties_schema: None,
    }
}

fn spec(properties: Map) -> TemplateSpec {
    let mut networks = IndexMap::new();
    networks.insert(
        "private".to_string(),
        NetworkSpec {
            kind: Some("manual".into()),
            ip: Some("10.0.0.5".into()),
            netmask: Some("255.255.255.0".into()),
            gateway: Some("10.0.0.1".into()),
            default: vec!["dns".into(), "gateway".into()],
            dns_record_name: Some("2.web.private.dep.bosh".into()),
            ..NetworkSpec::default()
        },
    );
    networks.insert(
        "public".to_string(),
        NetworkSpec {
            kind: Some("vip".into()),
            ip: Some("203.0.113.9".into()),
            ..NetworkSpec::default()
        },
    );
    TemplateSpec {
        deployment: "dep".into(),
        job: InstanceGroupSpec {
            name: "web".into(),
            extra: Map::new(),
        },
        index: 2,
        bootstrap: false,
        name: "web".into(),
        id: "0b7a4c6e-1f2d-4e55-9c1a-3d2b1a0f9e88".into(),
        az: Some("z1".into()),
        networks,
        properties_need_filtering: true,
        dns_domain_name: "bosh".into(),
        persistent_disk: 10240,
        address: Some("10.0.0.5".into()),
        ip: Some("10.0.0.5".into()),
        properties,
        links: IndexMap::new(),
        release: ReleaseRef {
            name: "nginx".into(),
            version: "1.2.3".into(),
        },
    }
}

/// Binds `source` for the job (declared properties + defaults), then renders it.
async fn render(job: JobTemplates, source: Value) -> Result<RenderedJob, RenderError> {
    let dir = tempfile::tempdir().unwrap();
    let props = PropertyBinder::new(&job)?.bind(&map(source))?;
    let unit = RenderUnit {
        job: Arc::new(job),
        spec: spec(props),
    };
    let mut out = renderer(&dir).render(&[unit], None).await;
    assert_eq!(out.len(), 1);
    out.remove(0)
}

fn content(rendered: &RenderedJob, source: &str) -> String {
    rendered
        .files
        .iter()
        .find(|f| f.source_path == source)
        .unwrap_or_else(|| panic!("no {source} in {rendered:?}"))
        .content
        .clone()
}

fn template_errors(err: RenderError) -> Vec<String> {
    match err {
        RenderError::Templates { errors, .. } => errors.iter().map(ToString::to_string).collect(),
        other => panic!("expected template errors, got {other}"),
    }
}

#[tokio::test]
async fn p_with_dotted_names_defaults_and_name_lists() {
    let tpl = "\
a.b=<%= p('a.b') %>
c=<%= p('c') %>
first=<%= p(['missing', 'c']) %>
default=<%= p('missing', 'dflt') %>
listdefault=<%= p(['m1', 'm2'], 7) %>
nil_default=<%= p('missing', nil).inspect %>
list=<%= p('list').inspect %>
nested=<%= p('a').to_json %>
falsy=<%= p('flag') %>
";
    let j = job(
        &[("cfg.erb", tpl)],
        &[
            ("a.b", Some(json!(1))),
            ("a.z", Some(json!({"y": 1, "x": 2}))),
            ("c", None),
            ("list", Some(json!([1, "two"]))),
            ("flag", Some(json!(true))),
        ],
    );
    let out = render(j, json!({"c": "cee", "flag": false})).await.unwrap();
    assert_eq!(
        content(&out, "cfg.erb"),
        "a.b=1\nc=cee\nfirst=cee\ndefault=dflt\nlistdefault=7\nnil_default=nil\n\
         list=[1, \"two\"]\nnested={\"b\":1,\"z\":{\"x\":2,\"y\":1}}\nfalsy=false\n"
    );
    assert_eq!(out.monit, "check process web_2\n");
    assert_eq!(out.files[0].destination, "dest/cfg.erb");
}

#[tokio::test]
async fn if_p_else_and_else_if_p() {
    let tpl = "\
<% if_p('set') do |v| -%>
set:<%= v %>
<% end -%>
<% if_p('set', 'unset') do |a, b| -%>
both
<% end.else do -%>
not both
<% end -%>
<% if_p('unset') do -%>
unset
<% end.else_if_p('other', 'set') do |o, s| -%>
else_if:<%= o %>,<%= s %>
<% end.else do -%>
never
<% end -%>
<% if_p('unset') do -%>
x
<% end.else_if_p('unset2') do -%>
y
<% end.else do -%>
fell through
<% end -%>
";
    let j = job(
        &[("t.erb", tpl)],
        &[
            ("set", None),
            ("unset", None),
            ("unset2", None),
            ("other", Some(json!("o"))),
        ],
    );
    let out = render(j, json!({"set": "S"})).await.unwrap();
    assert_eq!(
        content(&out, "t.erb"),
        "set:S\nnot both\nelse_if:o,S\nfell through\n"
    );
}

#[tokio::test]
async fn spec_fields() {
    let tpl = "\
<%= spec.deployment %> <%= spec.name %>/<%= spec.id %> <%= spec.index %> <%= name %>/<%= index %>
az=<%= spec.az %> bootstrap=<%= spec.bootstrap %> address=<%= spec.address %> ip=<%= spec.ip %>
net=<%= spec.networks.private.ip %> <%= spec.networks.methods(false).inspect %> <%= spec.networks.send(spec.networks.methods(false).first).netmask %>
disk=<%= spec.persistent_disk %> domain=<%= spec.dns_domain_name %> job=<%= spec.job.name %>
release=<%= spec.release.name %>/<%= spec.release.version %> filtering=<%= spec.properties_need_filtering %>
dns=<%= spec.networks.private.dns_record_name %> props=<%= spec.properties.port %>
";
    let j = job(&[("t.erb", tpl)], &[("port", Some(json!(8080)))]);
    let out = render(j, json!({})).await.unwrap();
    assert_eq!(
        content(&out, "t.erb"),
        "dep web/0b7a4c6e-1f2d-4e55-9c1a-3d2b1a0f9e88 2 web/2\n\
         az=z1 bootstrap=false address=10.0.0.5 ip=10.0.0.5\n\
         net=10.0.0.5 [:private, :public] 255.255.255.0\n\
         disk=10240 domain=bosh job=web\n\
         release=nginx/1.2.3 filtering=true\n\
         dns=2.web.private.dep.bosh props=8080\n"
    );
}

fn db_link(address: Option<&str>) -> LinkSpec {
    LinkSpec {
        address: address.map(Into::into),
        default_network: Some("private".into()),
        deployment_name: Some("dep".into()),
        domain: Some("bosh".into()),
        instance_group: Some("db_group".into()),
        instances: (0..2)
            .map(|i| LinkInstance {
                name: "db_group".into(),
                index: i,
                id: format!("id-{i}"),
                az: Some(format!("z{}", i + 1)),
                address: Some(format!("10.0.1.{}", i + 10)),
                bootstrap: i == 0,
                properties: None,
            })
            .collect(),
        properties: Some(map(json!({"db": {"port": 5432, "user": "admin"}}))),
        ..LinkSpec::default()
    }
}

#[tokio::test]
async fn links_instances_properties_addresses_and_if_link() {
    let tpl = "\
<% link('db').instances.each do |i| -%>
<%= i.name %> <%= i.index %> <%= i.id %> <%= i.az %> <%= i.address %> <%= i.bootstrap %>
<% end -%>
port=<%= link('db').p('db.port') %> missing=<%= link('db').p('db.nope', 'dflt') %>
<% link('db').if_p('db.user') do |u| -%>
user=<%= u %>
<% end -%>
<% if_link('db') do |l| -%>
if_link:<%= l.instances.size %>
<% end.else do -%>
no db
<% end -%>
<% if_link('cache') do |l| -%>
cache
<% end.else_if_link('db') do |l| -%>
else_if_link:<%= l.instances.first.address %>
<% end -%>
<% if_link('cache') do |l| -%>
cache
<% end.else do -%>
no cache
<% end -%>
address=<%= link('db').address %>
healthy=<%= link('db').address(azs: ['z2'], status: 'healthy') %>
manual=<%= link('manual').address(azs: ['z9']) %>
";
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec(Map::new());
    s.links.insert("db".into(), db_link(None));
    s.links
        .insert("manual".into(), db_link(Some("fixed.example.com")));
    let unit = RenderUnit {
        job: Arc::new(job(&[("t.erb", tpl)], &[])),
        spec: s,
    };
    let dns = DnsTables {
        az_ids: [("z1".to_string(), 1), ("z2".to_string(), 2)]
            .into_iter()
            .collect(),
        ..DnsTables::default()
    };
    let out = renderer(&dir)
        .render(&[unit], Some(&dns))
        .await
        .remove(0)
        .unwrap();
    // BOSH's encoder: q-<sorted query parts>.<group>.<network>.<deployment>.<domain>, with
    // underscores canonicalised to hyphens; a link with an address answers it as is.
    assert_eq!(
        content(&out, "t.erb"),
        "db_group 0 id-0 z1 10.0.1.10 true\n\
         db_group 1 id-1 z2 10.0.1.11 false\n\
         port=5432 missing=dflt\n\
         user=admin\n\
         if_link:2\n\
         else_if_link:10.0.1.10\n\
         no cache\n\
         address=q-s0.db-group.private.dep.bosh\n\
         healthy=q-a2s3.db-group.private.dep.bosh\n\
         manual=fixed.example.com\n"
    );
}

#[tokio::test]
async fn unknown_property_and_unknown_link_name_template_and_line() {
    let j = job(
        &[
            ("ok.erb", "fine\n"),
            (
                "prop.erb",
                "one\ntwo <%= p('declared') %>\n<%= p('a.b') %>\n",
            ),
            ("names.erb", "<%= p(['x.y', 'z']) %>"),
            ("link.erb", "\n\n\n<%= link('db').instances %>\n"),
        ],
        &[("declared", Some(json!("d")))],
    );
    let err = render(j, json!({})).await.unwrap_err();
    let text = err.to_string();
    assert_eq!(
        template_errors(err),
        vec![
            "Error filling in template 'prop.erb' for web/2 (line 3: Can't find property '[\"a.b\"]')",
            "Error filling in template 'names.erb' for web/2 (line 1: Can't find property '[\"x.y\", \"z\"]')",
            "Error filling in template 'link.erb' for web/2 (line 4: Can't find link 'db')",
        ]
    );
    assert!(
        text.starts_with(
            "Unable to render templates for job 'web' of release 'nginx/1.2.3'. Errors are:\n  - Error filling in template 'prop.erb'"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn ruby_errors_syntax_and_runtime() {
    let j = job(
        &[
            ("syntax.erb", "a\nb\n<% if %>\n"),
            ("nomethod.erb", "<%= p('n').upcase %>\n<%= nil.foo %>"),
            ("undefined.erb", "\n<%= no_such_helper %>"),
            ("raise.erb", "<% raise 'custom failure' %>"),
        ],
        &[("n", Some(json!("x")))],
    );
    let errors = template_errors(render(j, json!({})).await.unwrap_err());
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert!(
        errors[0]
            .starts_with("Error filling in template 'syntax.erb' for web/2 (line 3: syntax error"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].starts_with(
            "Error filling in template 'nomethod.erb' for web/2 (line 2: undefined method `foo' for nil"
        ),
        "{}",
        errors[1]
    );
    // The receiver prints as a bare class name: never with its properties.
    assert_eq!(
        errors[2],
        "Error filling in template 'undefined.erb' for web/2 (line 2: undefined local variable or method `no_such_helper' for #<EvaluationContext>)"
    );
    assert_eq!(
        errors[3],
        "Error filling in template 'raise.erb' for web/2 (line 1: custom failure)"
    );
}

#[tokio::test]
async fn monit_errors_are_reported_as_monit() {
    let mut j = job(&[("t.erb", "x")], &[]);
    j.monit = Some("check <%= p('missing') %>".into());
    let errors = template_errors(render(j, json!({})).await.unwrap_err());
    assert_eq!(
        errors,
        vec![
            "Error filling in template 'monit' for web/2 (line 1: Can't find property '[\"missing\"]')"
        ]
    );
}

#[tokio::test]
async fn undeclared_properties_are_invisible() {
    let tpl = "\
<%= p('secret', 'absent') %> <%= properties.secret.inspect %> <%= raw_properties.keys.sort.inspect %>
<%= p('tls.cert') %> <%= p('tls.key', 'nokey') %> <%= spec.properties.tls.cert %>
";
    let j = job(
        &[("t.erb", tpl)],
        &[("tls.cert", None), ("port", Some(json!(80)))],
    );
    let source = property_source(
        Some(&map(
            json!({"secret": "global", "tls": {"cert": "C", "key": "K"}}),
        )),
        None,
        None,
    );
    let props = PropertyBinder::new(&j).unwrap().bind(&source).unwrap();
    assert_eq!(
        Value::Object(props.clone()),
        json!({"tls": {"cert": "C"}, "port": 80})
    );
    let dir = tempfile::tempdir().unwrap();
    let unit = RenderUnit {
        job: Arc::new(j),
        spec: spec(props),
    };
    let out = renderer(&dir)
        .render(&[unit], None)
        .await
        .remove(0)
        .unwrap();
    assert_eq!(
        content(&out, "t.erb"),
        "absent nil [\"port\", \"tls\"]\nC nokey C\n"
    );
}

#[test]
fn property_sources_follow_the_director() {
    let global = map(json!({"a": {"x": 1, "y": 2}, "g": true}));
    let group = map(json!({"a": {"y": 3, "z": 4}, "h": [1]}));
    // No job properties: group merged over global, deeply.
    assert_eq!(
        Value::Object(property_source(Some(&global), Some(&group), None)),
        json!({"a": {"x": 1, "y": 3, "z": 4}, "g": true, "h": [1]})
    );
    // Job properties, even empty, replace both.
    assert_eq!(
        Value::Object(property_source(
            Some(&global),
            Some(&group),
            Some(&Map::new())
        )),
        json!({})
    );
}

#[test]
fn binding_rejects_non_hash_on_the_way_and_uses_defaults_for_null() {
    let j = job(&[], &[("a.b", None), ("n", Some(json!("default")))]);
    let binder = PropertyBinder::new(&j).unwrap();
    let err = binder
        .bind(&map(json!({"a": "some secret string"})))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Property 'a.b' expects a hash, but received 'String' (job 'web' of release 'nginx/1.2.3')"
    );
    let bound = binder.bind(&map(json!({"n": null}))).unwrap();
    assert_eq!(
        Value::Object(bound),
        json!({"a": {"b": null}, "n": "default"})
    );
}

#[test]
fn schema_validation_names_the_property_path_without_values() {
    let mut j = job(
        &[],
        &[
            ("port", Some(json!(80))),
            ("tls.ca", Some(json!(""))),
            ("name", None),
        ],
    );
    j.properties_schema = Some(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "port": {"type": "integer", "maximum": 65535},
            "tls": {"type": "object", "properties": {"ca": {"type": "certificate"}}},
            "name": {"type": ["string", "null"]}
        }
    }));
    let binder = PropertyBinder::new(&j).unwrap();
    // Defaults pass (an empty certificate is allowed).
    binder.bind(&Map::new()).unwrap();
    let err = binder
        .bind(&map(
            json!({"port": "hunter2-secret", "tls": {"ca": "not-a-cert-s3cret"}}),
        ))
        .unwrap_err();
    let RenderError::Schema { ref errors, .. } = err else {
        panic!("expected a schema error, got {err}")
    };
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].starts_with("value at `/port`: "), "{errors:?}");
    assert_eq!(errors[1], "value at `/tls/ca`: value is not a certificate");
    let text = err.to_string();
    assert!(
        text.starts_with("Error validating properties for web"),
        "{text}"
    );
    assert!(
        !text.contains("hunter2") && !text.contains("s3cret"),
        "{text}"
    );

    // A real certificate passes.
    let ca = rcgen::generate_simple_self_signed(vec!["ca.example".into()]).unwrap();
    binder
        .bind(&map(json!({"tls": {"ca": ca.cert.pem()}})))
        .unwrap();

    // The Director insists on the draft.
    j.properties_schema = Some(json!({"type": "object"}));
    assert_eq!(
        PropertyBinder::new(&j).unwrap_err().to_string(),
        "invalid properties_schema.json of job 'web' (release 'nginx/1.2.3'): You must declare your $schema draft version"
    );
    j.properties_schema = Some(json!({"$schema": "http://json-schema.org/draft-07/schema#"}));
    assert!(PropertyBinder::new(&j).unwrap_err().to_string().ends_with(
        "Only https://json-schema.org/draft/2020-12/schema schema is currently supported"
    ));
}

#[tokio::test]
async fn a_failing_unit_does_not_affect_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let good = Arc::new(job(
        &[("t.erb", "port=<%= p('port') %>\n")],
        &[("port", None)],
    ));
    let bad = Arc::new(job(&[("t.erb", "<%= p('nope') %>")], &[]));
    let mut units = Vec::new();
    for i in 0..7u64 {
        let mut s = spec(map(json!({"port": 8000 + i})));
        s.index = i;
        let j = if i == 3 { bad.clone() } else { good.clone() };
        units.push(RenderUnit { job: j, spec: s });
    }
    let r = Renderer::new(RendererConfig {
        cache_dir: dir.path().to_path_buf(),
        concurrency: 2,
        units_per_batch: 3,
        ..RendererConfig::default()
    })
    .unwrap();
    let out = r.render(&units, None).await;
    assert_eq!(out.len(), 7);
    for (i, result) in out.into_iter().enumerate() {
        if i == 3 {
            let errors = template_errors(result.unwrap_err());
            assert_eq!(
                errors,
                vec![
                    "Error filling in template 't.erb' for web/3 (line 1: Can't find property '[\"nope\"]')"
                ]
            );
        } else {
            let rendered = result.unwrap();
            assert_eq!(content(&rendered, "t.erb"), format!("port={}\n", 8000 + i));
            assert_eq!(rendered.monit, format!("check process web_{i}\n"));
        }
    }
}

#[tokio::test]
async fn trim_mode_is_dash() {
    let tpl = "\
start
  <%- if true -%>
  kept
  <%- end -%>
<% [1, 2].each do |i| -%>
i=<%= i %>
<% end -%>
no trim <% if true %>here<% end %>
end
";
    let out = render(job(&[("t.erb", tpl)], &[]), json!({}))
        .await
        .unwrap();
    assert_eq!(
        content(&out, "t.erb"),
        "start\n  kept\ni=1\ni=2\nno trim here\nend\n"
    );
}

#[tokio::test]
async fn odd_templates_do_not_break_the_batch() {
    let j = job(
        &[
            (
                "prints.erb",
                "<% puts 'to stdout'; $stdout.write('x'); STDOUT.flush %>ok",
            ),
            ("exits.erb", "<% exit 3 %>"),
            ("unicode.erb", "héllo <%= p('u') %> ✓"),
            ("empty.erb", ""),
            // A constant cannot be assigned in a method body: rendered with a binding instead.
            ("const.erb", "<% LIMIT = 3 -%>\n<%= LIMIT %>\n"),
            (
                "nested.erb",
                "<% def helper; p('u') * 2; end -%>\n<%= ERB.new('[<' + '%= helper %' + '>]').result(binding) %>",
            ),
            (
                "helpers.erb",
                "<%= ''.blank? %> <%= 'x'.present? %> <%= 'a b'.shellescape %> <%= JSON.dump({'k' => 1}) %> <%= {'k' => 1}.to_yaml.lines.last %>",
            ),
        ],
        &[("u", Some(json!("ü")))],
    );
    let err = render(j.clone(), json!({})).await.unwrap_err();
    assert_eq!(
        template_errors(err),
        vec!["Error filling in template 'exits.erb' for web/2 (line 1: exit)"]
    );
    let mut j = j;
    j.templates.retain(|t| t.source_path != "exits.erb");
    let out = render(j, json!({})).await.unwrap();
    assert_eq!(content(&out, "prints.erb"), "ok");
    assert_eq!(content(&out, "unicode.erb"), "héllo ü ✓");
    assert_eq!(content(&out, "empty.erb"), "");
    assert_eq!(content(&out, "const.erb"), "3\n");
    assert_eq!(content(&out, "nested.erb"), "[üü]");
    assert_eq!(
        content(&out, "helpers.erb"),
        "true true a\\ b {\"k\":1} k: 1\n"
    );
}

#[tokio::test]
async fn no_ruby_fails_every_unit_of_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let r = Renderer::new(RendererConfig {
        ruby: "/nonexistent/ruby".into(),
        cache_dir: dir.path().to_path_buf(),
        ..RendererConfig::default()
    })
    .unwrap();
    let unit = RenderUnit {
        job: Arc::new(job(&[("t.erb", "x")], &[])),
        spec: spec(Map::new()),
    };
    let out = r.render(&[unit.clone(), unit], None).await;
    assert_eq!(out.len(), 2);
    for result in out {
        let err = result.unwrap_err();
        assert!(matches!(err, RenderError::Ruby { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/ruby"), "{err}");
    }
    assert!(r.render(&[], None).await.is_empty());
}

#[tokio::test]
async fn a_runaway_template_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let r = Renderer::new(RendererConfig {
        cache_dir: dir.path().to_path_buf(),
        timeout: Duration::from_millis(1500),
        ..RendererConfig::default()
    })
    .unwrap();
    let unit = RenderUnit {
        job: Arc::new(job(&[("t.erb", "<% loop {} %>")], &[])),
        spec: spec(Map::new()),
    };
    let err = r.render(&[unit], None).await.remove(0).unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[test]
fn the_script_is_installed_once_by_content() {
    let dir = tempfile::tempdir().unwrap();
    let a = renderer(&dir);
    let b = renderer(&dir);
    assert_eq!(a.script(), b.script());
    assert_eq!(
        std::fs::read_to_string(a.script()).unwrap(),
        kubosh_artifacts::render::RENDERER_RB
    );
}
