//! `Release` and `Stemcell` resources reconciled against a real kube-apiserver: the example
//! release and a kubosh-made stemcell fetched from `file://` and from an HTTP server that
//! wants the credentials of a Secret, verified, stored in a real local blobstore, and
//! reported as kstatus conditions; bad digests and names are Stalled.

use crate::support;

use kubosh_artifacts::release::ReleaseFile as _;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kubosh_artifacts::blobstore::{Blobstore, LocalBlobstore};
use kubosh_base::digest::sha1_hex;
use kubosh_kube::api::{Release, ReleaseSpec, Stemcell, StemcellSpec};
use kubosh_kube::controller::artifacts::{
    ArtifactContext, ReconcileError, reconcile_release, reconcile_stemcell,
};
use kubosh_kube::controller::inputs::waiting_for;

fn example_release_tarball(dir: &Path) -> PathBuf {
    let release = kubosh_devenv::build_example_release().unwrap();
    let out = dir.join("hello-1.0.0.tgz");
    release.write(&out).unwrap();
    out
}

fn file_url(p: &Path) -> String {
    format!("file://{}", p.display())
}

fn release(name: &str, url: &str, sha1: Option<String>) -> Release {
    Release::new(
        name,
        ReleaseSpec {
            name: "hello".into(),
            version: "1.0.0".into(),
            url: url.into(),
            sha1,
            credentials_secret: None,
        },
    )
}

/// The example release as `Release` `hello-1.0.0` (not reconciled yet).
async fn create_hello_release(api: &Api<Release>, dir: &Path) -> Release {
    let tarball = example_release_tarball(dir);
    api.create(
        &PostParams::default(),
        &release("hello-1.0.0", &file_url(&tarball), None),
    )
    .await
    .unwrap()
}

fn reason(
    conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    kind: &str,
) -> (String, String) {
    let c = conds.iter().find(|c| c.type_ == kind).unwrap();
    (c.status.clone(), c.reason.clone())
}

async fn context(dir: &Path) -> (ArtifactContext, Arc<LocalBlobstore>) {
    let cp = support::control_plane().await;
    let store = Arc::new(LocalBlobstore::new(dir.join("blobs")).unwrap());
    let ctx = ArtifactContext {
        client: cp.client().await.unwrap(),
        blobstore: store.clone(),
        cloud: None,
        cloud_maker: Arc::new(kubosh_engine::clouds::NoCpiTypes),
        work_dir: dir.join("work"),
    };
    (ctx, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_from_a_file_url_becomes_ready_and_stays_without_refetching() {
    let dir = tempfile::tempdir().unwrap();
    let ns = support::namespace("rel").await;
    let (ctx, store) = context(dir.path()).await;
    let tarball = example_release_tarball(dir.path());
    let sha1 = sha1_hex(&std::fs::read(&tarball).unwrap());
    let api: Api<Release> = Api::namespaced(ctx.client.clone(), &ns);
    let created = api
        .create(
            &PostParams::default(),
            &release("hello-1.0.0", &file_url(&tarball), Some(sha1)),
        )
        .await
        .unwrap();

    let status = reconcile_release(&created, &ctx).await.unwrap();
    assert_eq!(
        reason(&status.conditions, "Ready"),
        ("True".into(), "Succeeded".into())
    );
    assert_eq!(reason(&status.conditions, "Stalled").0, "False");
    let jobs: Vec<&str> = status.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(jobs, ["hello", "smoke-test"]);
    let mut packages: Vec<&str> = status.packages.iter().map(|p| p.name.as_str()).collect();
    packages.sort();
    assert_eq!(packages, ["hello-server", "libhello"]);
    for item in status.jobs.iter().chain(&status.packages) {
        assert!(store.exists(item.blob_id.as_ref().unwrap()).await.unwrap());
    }
    // release.MF is stored, the tarball is not: deploys take the release by reference.
    let release_mf = status.manifest_blob_id.as_ref().unwrap();
    let text = store
        .get_bytes(release_mf, &format!("sha256:{release_mf}").parse().unwrap())
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&text).contains("name: hello"));
    let tarball_id = kubosh_base::digest::sha256_hex(&std::fs::read(&tarball).unwrap());
    assert!(!store.exists(&tarball_id).await.unwrap());

    // The status is on the API object, for kubectl and GitOps tools.
    let stored = api.get("hello-1.0.0").await.unwrap();
    let st = stored.status.clone().unwrap();
    assert_eq!(st.observed_generation, stored.metadata.generation);
    assert_eq!(st, status);

    // Ready for this generation: no download (the file is gone), nothing changes.
    std::fs::remove_file(&tarball).unwrap();
    let again = reconcile_release(&stored, &ctx).await.unwrap();
    assert_eq!(again, st);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_digests_and_names_stall_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ns = support::namespace("stall").await;
    let (ctx, store) = context(dir.path()).await;
    let tarball = example_release_tarball(dir.path());
    let api: Api<Release> = Api::namespaced(ctx.client.clone(), &ns);

    let bad = api
        .create(
            &PostParams::default(),
            &release("bad-digest", &file_url(&tarball), Some(sha1_hex(b"other"))),
        )
        .await
        .unwrap();
    let status = reconcile_release(&bad, &ctx).await.unwrap();
    assert_eq!(
        reason(&status.conditions, "Stalled"),
        ("True".into(), "DigestMismatch".into())
    );
    assert_eq!(reason(&status.conditions, "Ready").0, "False");
    assert!(status.jobs.is_empty());
    assert!(store.list().await.unwrap().is_empty(), "nothing stored");
    // A deployment waiting for it is told why.
    let manifest: kubosh_core::manifest::DeploymentManifest =
        serde_json::from_value(serde_json::json!({
            "name": "d", "releases": [{"name": "hello", "version": "1.0.0"}],
            "stemcells": [], "instance_groups": [],
            "update": {"canaries": 1, "max_in_flight": 1, "canary_watch_time": 1000, "update_watch_time": 1000},
        }))
        .unwrap();
    let stored = api.get("bad-digest").await.unwrap();
    let waiting = waiting_for(&manifest, &[stored], &[]);
    assert_eq!(waiting.len(), 1);
    assert!(
        waiting[0]
            .starts_with("release hello/1.0.0 (Release bad-digest: Stalled: DigestMismatch: "),
        "{waiting:?}"
    );

    let mut wrong = release("wrong-version", &file_url(&tarball), None);
    wrong.spec.version = "2.0.0".into();
    let wrong = api.create(&PostParams::default(), &wrong).await.unwrap();
    let status = reconcile_release(&wrong, &ctx).await.unwrap();
    let stalled = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    assert_eq!(stalled.reason, "NameMismatch");
    assert!(
        stalled.message.contains("hello/1.0.0, not hello/2.0.0"),
        "{}",
        stalled.message
    );

    let garbage = dir.path().join("garbage.tgz");
    std::fs::write(&garbage, b"not a tarball").unwrap();
    let broken = api
        .create(
            &PostParams::default(),
            &release("broken", &file_url(&garbage), None),
        )
        .await
        .unwrap();
    let status = reconcile_release(&broken, &ctx).await.unwrap();
    assert_eq!(reason(&status.conditions, "Stalled").1, "InvalidTarball");
}

/// One-connection-at-a-time HTTP server that serves `body` to requests carrying
/// `authorization`, 401 otherwise.
fn serve_with_auth(body: Vec<u8>, authorization: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut authorized = false;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if line.to_ascii_lowercase().starts_with("authorization:")
                    && line.trim_end().ends_with(&authorization)
                {
                    authorized = true;
                }
            }
            if authorized {
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            } else {
                let _ = write!(
                    stream,
                    "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_downloads_use_the_credentials_secret_and_failures_are_retried() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let ns = support::namespace("http").await;
    let (ctx, _store) = context(dir.path()).await;
    let body = std::fs::read(example_release_tarball(dir.path())).unwrap();
    let expected = base64::engine::general_purpose::STANDARD.encode("ops:s3cret-download");
    let port = serve_with_auth(body, format!("Basic {expected}"));
    let url = format!("http://127.0.0.1:{port}/hello-1.0.0.tgz");
    let api: Api<Release> = Api::namespaced(ctx.client.clone(), &ns);

    // Without credentials: a retryable error, and the status says why.
    let anonymous = api
        .create(&PostParams::default(), &release("anonymous", &url, None))
        .await
        .unwrap();
    let err = reconcile_release(&anonymous, &ctx).await.unwrap_err();
    assert!(matches!(err, ReconcileError::Fetch(_)), "{err}");
    assert!(err.to_string().contains("401"), "{err}");
    let st = api.get("anonymous").await.unwrap().status.unwrap();
    assert_eq!(
        reason(&st.conditions, "Ready"),
        ("False".into(), "DownloadFailed".into())
    );
    assert_eq!(reason(&st.conditions, "Reconciling").0, "True");

    // With the Secret.
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "download-creds"},
        "stringData": {"username": "ops", "password": "s3cret-download"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let mut with = release("with-creds", &url, None);
    with.spec.credentials_secret = Some("download-creds".into());
    let with = api.create(&PostParams::default(), &with).await.unwrap();
    let status = reconcile_release(&with, &ctx).await.unwrap();
    assert_eq!(reason(&status.conditions, "Ready").0, "True");
    let text = serde_json::to_string(&status).unwrap();
    assert!(!text.contains("s3cret-download"), "no secret in the status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stemcell_becomes_ready_and_deployments_know_what_they_wait_for() {
    let dir = tempfile::tempdir().unwrap();
    let ns = support::namespace("stem").await;
    let (ctx, store) = context(dir.path()).await;
    let tarball = dir.path().join("stemcell.tgz");
    kubosh_artifacts::stemcell::create(
        &kubosh_artifacts::stemcell::CreateStemcellOptions {
            name: "kubosh-local-ubuntu-noble".into(),
            version: "1.0".into(),
            operating_system: "ubuntu-noble".into(),
            image: None,
            stemcell_formats: vec!["general-tar".into()],
            api_version: 3,
            cloud_properties: Default::default(),
        },
        &tarball,
    )
    .unwrap();
    let api: Api<Stemcell> = Api::namespaced(ctx.client.clone(), &ns);
    let created = api
        .create(
            &PostParams::default(),
            &Stemcell::new(
                "noble-1.0",
                StemcellSpec {
                    name: "kubosh-local-ubuntu-noble".into(),
                    version: "1.0".into(),
                    url: file_url(&tarball),
                    sha1: Some(sha1_hex(&std::fs::read(&tarball).unwrap())),
                    credentials_secret: None,
                },
            ),
        )
        .await
        .unwrap();
    let status = reconcile_stemcell(&created, &ctx).await.unwrap();
    assert_eq!(reason(&status.conditions, "Ready").0, "True");
    assert_eq!(status.os.as_deref(), Some("ubuntu-noble"));
    assert_eq!(status.api_version, Some(3));
    assert!(
        store
            .exists(status.blob_id.as_ref().unwrap())
            .await
            .unwrap()
    );

    // A deployment using the stemcell by os and the example release, plus one that is missing.
    let manifest: kubosh_core::manifest::DeploymentManifest = serde_json::from_value(serde_json::json!({
        "name": "greeters",
        "releases": [{"name": "hello", "version": "1.0.0"}, {"name": "missing", "version": "3"}],
        "stemcells": [{"alias": "default", "os": "ubuntu-noble", "version": "latest"}],
        "update": {"canaries": 1, "max_in_flight": 1, "canary_watch_time": 1000, "update_watch_time": 1000},
        "instance_groups": [],
    }))
    .unwrap();
    let stemcells = api.list(&Default::default()).await.unwrap().items;
    let rels: Api<Release> = Api::namespaced(ctx.client.clone(), &ns);
    let r = create_hello_release(&rels, dir.path()).await;
    assert_eq!(
        waiting_for(&manifest, std::slice::from_ref(&r), &stemcells),
        [
            "release hello/1.0.0 (Release hello-1.0.0: not Ready yet)",
            "release missing/3"
        ],
        "a Release that is not Ready yet is still waited for"
    );
    reconcile_release(&r, &ctx).await.unwrap();
    let releases = rels.list(&Default::default()).await.unwrap().items;
    assert_eq!(
        waiting_for(&manifest, &releases, &stemcells),
        ["release missing/3"]
    );
}

/// A manifest naming a job its (Ready) release lacks is invalid before anything is asked of
/// an agent or the cloud: the `InvalidManifest` problem names the job by its path, in the
/// Director's words, and the release it was looked for in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_its_release_lacks_makes_the_manifest_invalid() {
    use kubosh_kube::api::{CloudConfig, Deployment};
    use kubosh_kube::controller::inputs::{Unready, Watched, gather};
    let dir = tempfile::tempdir().unwrap();
    let ns = support::namespace("jobs").await;
    let (ctx, _store) = context(dir.path()).await;
    let rels: Api<Release> = Api::namespaced(ctx.client.clone(), &ns);
    let r = create_hello_release(&rels, dir.path()).await;
    reconcile_release(&r, &ctx).await.unwrap();
    let stemcell: Stemcell = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubosh.io/v1alpha1", "kind": "Stemcell",
        "metadata": {"name": "noble-1.0", "namespace": ns, "generation": 1},
        "spec": {"name": "kubosh-local-ubuntu-noble", "version": "1.0", "url": "file:///x"},
        "status": {"os": "ubuntu-noble", "conditions": [{
            "type": "Ready", "status": "True", "reason": "Ready", "message": "",
            "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    }))
    .unwrap();
    let cloud_config: CloudConfig = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubosh.io/v1alpha1", "kind": "CloudConfig",
        "metadata": {"name": "default", "namespace": ns},
        "spec": {
            "azs": [{"name": "z1"}],
            "vm_types": [{"name": "small"}],
            "networks": [{"name": "default", "type": "manual", "subnets": [{
                "range": "10.0.0.0/24", "gateway": "10.0.0.1", "az": "z1"}]}],
            "compilation": {"workers": 1, "network": "default", "az": "z1", "vm_type": "small"},
        },
    }))
    .unwrap();
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "kubosh.io/v1alpha1", "kind": "Deployment",
        "metadata": {"name": "greeters", "namespace": ns},
        "spec": {"manifest": {
            "releases": [{"name": "hello", "version": "1.0.0"}],
            "stemcells": [{"alias": "default", "os": "ubuntu-noble", "version": "latest"}],
            "update": {"canaries": 1, "max_in_flight": 1, "canary_watch_time": 1000, "update_watch_time": 1000},
            "instance_groups": [{
                "name": "web", "instances": 1, "azs": ["z1"], "vm_type": "small",
                "stemcell": "default", "networks": [{"name": "default"}],
                "jobs": [{"name": "hello", "release": "hello"}, {"name": "helo", "release": "hello"}],
            }],
        }},
    }))
    .unwrap();
    let watched = Watched {
        cloud_configs: vec![cloud_config],
        releases: rels.list(&Default::default()).await.unwrap().items,
        stemcells: vec![stemcell],
        runtime_configs: vec![],
        cpi_configs: vec![],
    };
    let unready = gather(
        &ctx.client,
        &deployment,
        &watched,
        &kubosh_engine::clouds::NoCpiTypes,
    )
    .await
    .unwrap()
    .unwrap_err();
    assert_eq!(
        unready,
        Unready::Invalid {
            reason: "InvalidManifest",
            problems: vec![
                "error: manifest: instance_groups[0].jobs[1].name: Can't find job 'helo' in release 'hello/1.0.0'"
                    .into()
            ],
        }
    );
}
