//! Benchmark: rendering the sample job's templates for many instances with Ruby's ERB.
//!
//! `cargo bench --bench render` renders `BENCH_INSTANCES` instances (default 1,000) of the
//! sample job, `examples/releases/hello`'s `hello` job (built with `release::create` and
//! converted with `JobTemplates::from_release_job`: 5 templates, one of them looping over the
//! `peers` link, and its monit file), twice:
//! - batched: `Renderer::render` over all instances (a few `ruby` processes in all);
//! - a process per file, as the BOSH CLI renders: `BENCH_SAMPLE` files (default 60, the
//!   templates and the monit file in turn), each alone through its own `ruby` process,
//!   extrapolated to every file of every instance.
//!
//! Both run `concurrency` processes at a time (the machine's cores), so the ratio is what
//! batching saves, not parallelism. Printed: instances per second of each mode and the ratio.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use indexmap::IndexMap;
use kubosh_artifacts::render::*;
use kubosh_core::manifest::Map;
use serde_json::json;

/// The sample job: `hello` of `examples/releases/hello`, built as `kubosh release create` builds it.
fn job() -> JobTemplates {
    let release = kubosh_devenv::build_example_release().expect("the example release builds");
    let job = release.job("hello").expect("job hello");
    JobTemplates::from_release_job(
        job,
        ReleaseRef {
            name: release.manifest.name.clone(),
            version: release.manifest.version.clone(),
        },
    )
    .expect("templates are text")
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
        "peers".to_string(),
        LinkSpec {
            default_network: Some("default".into()),
            deployment_name: Some("bench".into()),
            domain: Some("bosh".into()),
            instance_group: Some("hello".into()),
            instances: (0..3)
                .map(|d| LinkInstance {
                    name: "hello".into(),
                    index: d,
                    id: format!("peer-{d}"),
                    az: Some(format!("z{}", d % 3 + 1)),
                    address: Some(format!("10.1.0.{}", d + 2)),
                    bootstrap: d == 0,
                    properties: None,
                })
                .collect(),
            properties: Some(
                json!({"hello": {"port": 9090, "greeting": "Bonjour"}})
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
            name: "hello".into(),
            extra: Map::new(),
        },
        index: i,
        bootstrap: i == 0,
        name: "hello".into(),
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
            name: "hello".into(),
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
    let sample = env_usize("BENCH_SAMPLE", 60);
    let cache = tempfile::tempdir().expect("temp dir");
    let config = RendererConfig {
        cache_dir: cache.path().to_path_buf(),
        timeout: Duration::from_secs(600),
        ..RendererConfig::default()
    };
    let concurrency = config.concurrency;
    let renderer = Renderer::new(config).expect("renderer");

    let job = Arc::new(job());
    let global = json!({"hello": {"port": 9090, "name": "bench", "undeclared": 1}, "other": 1});
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
    // Files per instance: the templates and the monit file.
    let per_instance = job.templates.len() + usize::from(job.monit.is_some());
    let files = instances * per_instance;

    // Warm the page cache and Ruby's own files.
    let _ = renderer.render(&units[..1], None).await;

    let start = Instant::now();
    let results = renderer.render(&units, None).await;
    let batched = start.elapsed();
    let failed = results.iter().filter(|r| r.is_err()).count();
    assert_eq!(failed, 0, "{:?}", results.iter().find(|r| r.is_err()));

    // A process per file: each sampled file rendered alone (its job reduced to that template,
    // or to its monit file), `concurrency` processes at a time.
    let singles: Vec<RenderUnit> = (0..sample)
        .map(|s| {
            let which = s % per_instance;
            let single = match job.templates.get(which) {
                Some(template) => JobTemplates {
                    monit: None,
                    templates: vec![template.clone()],
                    ..(*job).clone()
                },
                None => JobTemplates {
                    templates: Vec::new(),
                    ..(*job).clone()
                },
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

    let per_file_rate = instances as f64 / per_file;
    let batched_rate = instances as f64 / batched.as_secs_f64();

    println!(
        "render: {instances} instances of {}/{} x {} templates + monit = {files} files, {concurrency} ruby processes at a time",
        job.release.name,
        job.name,
        job.templates.len()
    );
    println!(
        "  property binding (Rust)        {:>8.3} s",
        bind.as_secs_f64()
    );
    println!(
        "  batched                        {:>8.3} s  ({batched_rate:.0} instances/s, {:.0} files/s)",
        batched.as_secs_f64(),
        files as f64 / batched.as_secs_f64()
    );
    println!(
        "  process per file (extrapolated from {sample}: {:.3} s, {:.1} ms/file)  {:>8.1} s  ({per_file_rate:.2} instances/s)",
        sampled.as_secs_f64(),
        sampled.as_secs_f64() * 1000.0 / sample as f64,
        per_file
    );
    println!(
        "  ratio batched / per-file       {:>8.1}x",
        batched_rate / per_file_rate
    );
}
