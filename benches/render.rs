//! Benchmark: rendering job templates for many instances with Ruby's ERB.
//!
//! `cargo bench --bench render` renders `BENCH_INSTANCES` instances (default 1,000) of a job
//! with 3 templates (a ctl script, a YAML config looping over properties and a link, a bpm
//! file) and its monit file, twice:
//! - batched: `Renderer::render` over all instances (a few `ruby` processes in all);
//! - a process per file, as the BOSH CLI renders: `BENCH_SAMPLE` files (default 50), each
//!   alone through its own `ruby` process, extrapolated to every file.
//!
//! Both run `concurrency` processes at a time (the machine's cores), so the ratio is what
//! batching saves, not parallelism.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use indexmap::IndexMap;
use kubosh::manifest::Map;
use kubosh::render::*;
use serde_json::{Value, json};

const CTL: &str = r#"#!/bin/bash
set -e
RUN_DIR=/var/vcap/sys/run/<%= name %>
LOG_DIR=/var/vcap/sys/log/<%= name %>
PIDFILE=$RUN_DIR/web.pid
case $1 in
  start)
    mkdir -p $RUN_DIR $LOG_DIR
    <%- if p('web.debug') -%>
    export DEBUG=1
    <%- end -%>
    echo $$ > $PIDFILE
    exec /var/vcap/packages/web/bin/web \
      --port <%= p('web.port') %> \
      --workers <%= p('web.workers') %> \
      --index <%= spec.index %> --id <%= spec.id %> \
      >> $LOG_DIR/web.stdout.log 2>> $LOG_DIR/web.stderr.log
    ;;
  stop)
    kill -9 $(cat $PIDFILE) || true
    rm -f $PIDFILE
    ;;
esac
"#;

const CONFIG: &str = r#"---
name: <%= spec.deployment %>-<%= name %>-<%= index %>
listen: "<%= spec.address %>:<%= p('web.port') %>"
az: <%= spec.az %>
bootstrap: <%= spec.bootstrap %>
backends:
<% link('db').instances.each do |i| -%>
  - host: <%= i.address %>
    port: <%= link('db').p('db.port') %>
    az: <%= i.az %>
<% end -%>
<% if_p('web.tls.cert', 'web.tls.key') do |cert, key| -%>
tls:
  cert: <%= cert.to_json %>
  key: <%= key.to_json %>
<% end.else do -%>
tls: null
<% end -%>
headers:
<% p('web.headers').sort.each do |k, v| -%>
  <%= k %>: <%= v.to_s.to_json %>
<% end -%>
limits: <%= JSON.dump(p('web.limits')) %>
"#;

const BPM: &str = r#"processes:
- name: web
  executable: /var/vcap/packages/web/bin/web
  args: [--config, /var/vcap/jobs/web/config/web.yml]
  limits:
    memory: <%= p('web.memory', '1G') %>
  env:
    INDEX: "<%= spec.index %>"
<% spec.networks.methods(false).each do |net| -%>
    NET_<%= net.to_s.upcase %>: "<%= spec.networks.send(net).ip %>"
<% end -%>
"#;

const MONIT: &str = r#"check process web
  with pidfile /var/vcap/sys/run/<%= name %>/web.pid
  start program "/var/vcap/jobs/web/bin/ctl start"
  stop program "/var/vcap/jobs/web/bin/ctl stop"
  group vcap
"#;

fn job() -> JobTemplates {
    let templates = [
        ("ctl.erb", "bin/ctl", CTL),
        ("web.yml.erb", "config/web.yml", CONFIG),
        ("bpm.yml.erb", "config/bpm.yml", BPM),
    ];
    let declared: [(&str, Value); 9] = [
        ("web.port", json!(8080)),
        ("web.workers", json!(4)),
        ("web.debug", json!(false)),
        ("web.tls.cert", Value::Null),
        ("web.tls.key", Value::Null),
        (
            "web.headers",
            json!({"X-Frame-Options": "DENY", "X-Served-By": "kubosh"}),
        ),
        ("web.limits", json!({"connections": 1024, "rate": 100})),
        ("web.memory", Value::Null),
        ("web.unused", json!("x")),
    ];
    JobTemplates {
        name: "web".into(),
        release: ReleaseRef {
            name: "web".into(),
            version: "1.0.0".into(),
        },
        monit: Some(MONIT.into()),
        templates: templates
            .iter()
            .map(|(src, dst, text)| TemplateSource {
                source_path: (*src).into(),
                destination: (*dst).into(),
                text: (*text).into(),
            })
            .collect(),
        properties: declared
            .into_iter()
            .map(|(name, default)| {
                let default = (!default.is_null()).then_some(default);
                (
                    name.to_string(),
                    PropertyDefinition {
                        default,
                        description: None,
                    },
                )
            })
            .collect(),
        properties_schema: None,
    }
}

fn spec(i: u64, properties: Map) -> TemplateSpec {
    let mut networks = IndexMap::new();
    let ip = format!("10.0.{}.{}", i / 250, i % 250 + 2);
    networks.insert(
        "default".to_string(),
        NetworkSpec {
            kind: Some("manual".into()),
            ip: Some(ip.clone()),
            netmask: Some("255.255.0.0".into()),
            gateway: Some("10.0.0.1".into()),
            default: vec!["dns".into(), "gateway".into()],
            ..NetworkSpec::default()
        },
    );
    let mut links = IndexMap::new();
    links.insert(
        "db".to_string(),
        LinkSpec {
            default_network: Some("default".into()),
            deployment_name: Some("bench".into()),
            domain: Some("bosh".into()),
            instance_group: Some("db".into()),
            instances: (0..3)
                .map(|d| LinkInstance {
                    name: "db".into(),
                    index: d,
                    id: format!("db-{d}"),
                    az: Some(format!("z{}", d % 3 + 1)),
                    address: Some(format!("10.1.0.{}", d + 2)),
                    bootstrap: d == 0,
                    properties: None,
                })
                .collect(),
            properties: Some(
                json!({"db": {"port": 5432}})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
            ..LinkSpec::default()
        },
    );
    TemplateSpec {
        deployment: "bench".into(),
        job: InstanceGroupSpec {
            name: "web".into(),
            extra: Map::new(),
        },
        index: i,
        bootstrap: i == 0,
        name: "web".into(),
        id: format!("00000000-0000-4000-8000-{i:012}"),
        az: Some(format!("z{}", i % 3 + 1)),
        networks,
        properties_need_filtering: true,
        dns_domain_name: "bosh".into(),
        persistent_disk: 0,
        address: Some(ip.clone()),
        ip: Some(ip),
        properties,
        links,
        release: ReleaseRef {
            name: "web".into(),
            version: "1.0.0".into(),
        },
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let instances = env_usize("BENCH_INSTANCES", 1000);
    let sample = env_usize("BENCH_SAMPLE", 50);
    let cache = tempfile::tempdir().expect("temp dir");
    let config = RendererConfig {
        cache_dir: cache.path().to_path_buf(),
        timeout: Duration::from_secs(600),
        ..RendererConfig::default()
    };
    let concurrency = config.concurrency;
    let renderer = Renderer::new(config).expect("renderer");

    let job = Arc::new(job());
    let global = json!({"web": {"port": 9090, "tls": {"cert": "CERT", "key": "KEY"}}, "other": 1});
    let source = property_source(global.as_object(), None, None);
    let bind_start = Instant::now();
    let binder = PropertyBinder::new(&job).expect("binder");
    let units: Vec<RenderUnit> = (0..instances as u64)
        .map(|i| RenderUnit {
            job: job.clone(),
            spec: spec(i, binder.bind(&source).expect("bind")),
        })
        .collect();
    let bind = bind_start.elapsed();
    let files = instances * job.templates.len();

    // Warm the page cache and Ruby's own files.
    let _ = renderer.render(&units[..1], None).await;

    let start = Instant::now();
    let results = renderer.render(&units, None).await;
    let batched = start.elapsed();
    let failed = results.iter().filter(|r| r.is_err()).count();
    assert_eq!(failed, 0, "{:?}", results.iter().find(|r| r.is_err()));

    // A process per file: each sampled file rendered alone (its job reduced to that template,
    // no monit), `concurrency` processes at a time.
    let singles: Vec<RenderUnit> = (0..sample)
        .map(|s| {
            let template = job.templates[s % job.templates.len()].clone();
            let single = JobTemplates {
                monit: None,
                templates: vec![template],
                ..(*job).clone()
            };
            RenderUnit {
                job: Arc::new(single),
                spec: units[s % units.len()].spec.clone(),
            }
        })
        .collect();
    let start = Instant::now();
    let per_file_results: Vec<_> = futures::stream::iter(singles.iter())
        .map(|unit| renderer.render(std::slice::from_ref(unit), None))
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let sampled = start.elapsed();
    assert!(per_file_results.iter().flatten().all(|r| r.is_ok()));
    let per_file = sampled.as_secs_f64() / sample as f64 * files as f64;

    println!(
        "render: {instances} instances x {} templates (+ monit) = {files} files, {concurrency} ruby processes at a time",
        job.templates.len()
    );
    println!(
        "  property binding (Rust)        {:>8.3} s",
        bind.as_secs_f64()
    );
    println!(
        "  batched                        {:>8.3} s  ({:.0} files/s)",
        batched.as_secs_f64(),
        files as f64 / batched.as_secs_f64()
    );
    println!(
        "  process per file (extrapolated from {sample}: {:.3} s, {:.1} ms/file)  {:>8.1} s",
        sampled.as_secs_f64(),
        sampled.as_secs_f64() * 1000.0 / sample as f64,
        per_file
    );
    println!(
        "  ratio per-file / batched       {:>8.1}x",
        per_file / batched.as_secs_f64()
    );
}
