//! The blobstore (`kubosh_artifacts::blobstore`) with real parts: a local directory read by kubosh's
//! own agent, the HMAC-signed HTTPS endpoint driven by reqwest, and S3 against a real
//! S3-compatible server (moto, `kubosh_devenv::S3Server`).

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use kubosh_artifacts::blobstore::endpoint::{self, BlobEndpoint, EndpointConfig};
use kubosh_artifacts::blobstore::{
    BlobRef, Blobstore, BlobstoreError, HmacSigner, LocalBlobstore, S3Blobstore, S3Config,
    SignedMethod, collect_garbage,
};
use kubosh_base::digest::{MultiDigest, sha1_hex, sha256_hex};
use kubosh_base::pki::{Ca, Leaf};
use serde_json::json;

fn digest_of(data: &[u8]) -> MultiDigest {
    format!("{};sha256:{}", sha1_hex(data), sha256_hex(data))
        .parse()
        .unwrap()
}

/// Sets a file's modification time `age` into the past.
fn age_file(path: &Path, age: Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

fn ids(blobs: &[kubosh_artifacts::blobstore::BlobInfo]) -> Vec<String> {
    let mut ids: Vec<String> = blobs.iter().map(|b| b.id.clone()).collect();
    ids.sort();
    ids
}

/// Every file under `dir`, relative, sorted (hidden ones included).
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------
// Local store

#[tokio::test]
async fn local_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalBlobstore::new(tmp.path().join("blobs")).unwrap();
    let data = b"package source".to_vec();
    let blob = store.put_bytes(Bytes::from(data.clone())).await.unwrap();
    assert_eq!(
        blob,
        BlobRef {
            id: sha256_hex(&data),
            sha1: sha1_hex(&data),
            sha256: sha256_hex(&data),
            size: data.len() as u64,
        }
    );
    // The agent's contract: <blobstore_path>/<id> is the content, a plain file.
    assert_eq!(std::fs::read(store.dir().join(&blob.id)).unwrap(), data);
    assert!(store.exists(&blob.id).await.unwrap());

    let dest = tmp.path().join("out/pkg.tgz");
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    let n = store.get(&blob.id, &blob.digest(), &dest).await.unwrap();
    assert_eq!(n, data.len() as u64);
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    // A BOSH sha1-only digest works too.
    let sha1: MultiDigest = blob.sha1.parse().unwrap();
    assert_eq!(store.get_bytes(&blob.id, &sha1).await.unwrap(), data);

    let listed = store.list().await.unwrap();
    assert_eq!(ids(&listed), vec![blob.id.clone()]);
    assert_eq!(listed[0].size, data.len() as u64);
    assert!(listed[0].last_modified <= SystemTime::now());

    assert_eq!(
        store.agent_settings(),
        json!({"provider": "local", "options": {"blobstore_path": store.dir().display().to_string()}})
    );
    let moved = store
        .clone()
        .with_agent_path("/var/vcap/micro_bosh/data/cache");
    assert_eq!(
        moved.agent_settings()["options"]["blobstore_path"],
        "/var/vcap/micro_bosh/data/cache"
    );
    // Without a signer there is no way to sign a URL.
    assert_eq!(
        store
            .signed_url(&blob.id, SignedMethod::Get, Duration::from_secs(60))
            .await
            .unwrap(),
        None
    );

    store.delete(&blob.id).await.unwrap();
    store.delete(&blob.id).await.unwrap(); // idempotent
    assert!(!store.exists(&blob.id).await.unwrap());
    assert!(matches!(
        store.get_bytes(&blob.id, &sha1).await,
        Err(BlobstoreError::NotFound(id)) if id == blob.id
    ));
    assert!(matches!(
        store.exists("../etc/passwd").await,
        Err(BlobstoreError::InvalidId(_))
    ));
}

#[tokio::test]
async fn same_bytes_same_blob() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalBlobstore::new(tmp.path().join("blobs")).unwrap();
    let data = vec![7u8; 3 * 1024 * 1024 + 17];
    let a = store.put_bytes(Bytes::from(data.clone())).await.unwrap();
    let b = store.put_bytes(Bytes::from(data.clone())).await.unwrap();
    let file = tmp.path().join("same.bin");
    std::fs::write(&file, &data).unwrap();
    let c = store.put_file(&file).await.unwrap();
    assert_eq!(a, b);
    assert_eq!(a, c);
    let other = store.put_bytes(Bytes::from_static(b"other")).await.unwrap();
    assert_ne!(a.id, other.id);
    let mut want = vec![a.id.clone(), other.id.clone()];
    want.sort();
    assert_eq!(ids(&store.list().await.unwrap()), want);
    // Nothing is left staged.
    assert_eq!(files_under(store.dir()), want);
}

#[tokio::test]
async fn digest_mismatch_names_the_blob_and_leaves_dest_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalBlobstore::new(tmp.path().join("blobs")).unwrap();
    let blob = store.put_bytes(Bytes::from_static(b"good")).await.unwrap();
    // The file is corrupted behind the store's back.
    std::fs::write(store.dir().join(&blob.id), b"evil").unwrap();
    let dest = tmp.path().join("dest");
    std::fs::write(&dest, b"previous").unwrap();
    let err = store
        .get(&blob.id, &blob.digest(), &dest)
        .await
        .unwrap_err();
    assert!(
        matches!(err, BlobstoreError::Digest { ref id, .. } if *id == blob.id),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&blob.id), "{text}");
    assert!(text.contains(&sha256_hex(b"evil")), "{text}");
    assert_eq!(std::fs::read(&dest).unwrap(), b"previous");
    // No temporary file is left next to dest.
    assert_eq!(
        files_under(tmp.path()).len(),
        2,
        "{:?}",
        files_under(tmp.path())
    );
    let err = store.get_bytes(&blob.id, &blob.digest()).await.unwrap_err();
    assert!(err.to_string().contains(&blob.id), "{err}");
}

#[tokio::test]
async fn failed_and_crashed_uploads_never_appear_under_an_id() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalBlobstore::new(tmp.path().join("blobs")).unwrap();
    // A file that cannot be read: nothing stored.
    assert!(matches!(
        store.put_file(&tmp.path().join("missing")).await,
        Err(BlobstoreError::Io { .. })
    ));
    assert!(store.list().await.unwrap().is_empty());
    // What a crash mid-upload leaves: a staged file, not a blob.
    let staging = store.dir().join(".staging");
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::write(staging.join("half"), b"half a blob").unwrap();
    std::fs::write(staging.join("fresh"), b"an upload in flight").unwrap();
    assert!(store.list().await.unwrap().is_empty());
    age_file(&staging.join("half"), Duration::from_secs(7200));
    let removed = collect_garbage(&store, &HashSet::new(), Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(removed.is_empty());
    assert_eq!(files_under(store.dir()), vec![".staging/fresh"]);
}

#[tokio::test]
async fn gc_keeps_referenced_and_young_blobs() {
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalBlobstore::new(tmp.path().join("blobs")).unwrap();
    let referenced = store
        .put_bytes(Bytes::from_static(b"kept: referenced"))
        .await
        .unwrap();
    let young = store
        .put_bytes(Bytes::from_static(b"kept: young"))
        .await
        .unwrap();
    let old = store
        .put_bytes(Bytes::from_static(b"removed: old"))
        .await
        .unwrap();
    // An agent's compiled package under a UUID, old and unreferenced.
    let uuid = "6c3b1d6e-8f0a-4f5e-9a53-2b1f3c4d5e6f";
    std::fs::write(store.dir().join(uuid), b"compiled").unwrap();
    for id in [&referenced.id, &old.id, &uuid.to_string()] {
        age_file(&store.dir().join(id), Duration::from_secs(7200));
    }
    let refs: HashSet<String> = [referenced.id.clone()].into();
    let removed = collect_garbage(&store, &refs, Duration::from_secs(3600))
        .await
        .unwrap();
    let mut want = vec![old.id.clone(), uuid.to_string()];
    want.sort();
    assert_eq!(removed, want);
    let mut left = vec![referenced.id, young.id];
    left.sort();
    assert_eq!(ids(&store.list().await.unwrap()), left);
}

#[tokio::test]
async fn kubosh_agent_reads_and_writes_the_shared_directory() {
    use kubosh_agentd::blobs::Blobstore as AgentBlobs;
    use kubosh_agentd::layout::Layout;
    let tmp = tempfile::tempdir().unwrap();
    let store = LocalBlobstore::new(tmp.path().join("blobs")).unwrap();
    let settings = store.agent_settings();
    let shared = settings["options"]["blobstore_path"].as_str().unwrap();
    let agent = AgentBlobs::new(&Layout::new(tmp.path().join("vcap")), Some(shared.into()));
    let blob = store
        .put_bytes(Bytes::from_static(b"a package"))
        .await
        .unwrap();
    let got = agent
        .get_verified(&blob.id, &blob.digest().to_string())
        .await
        .unwrap();
    assert_eq!(got, b"a package");
    // A compiled package the agent uploads is a blob of the store.
    let compiled = agent.put(b"compiled package").await.unwrap();
    assert_eq!(
        store
            .get_bytes(&compiled, &digest_of(b"compiled package"))
            .await
            .unwrap(),
        &b"compiled package"[..]
    );
    let mut want = vec![blob.id, compiled];
    want.sort();
    assert_eq!(ids(&store.list().await.unwrap()), want);
}

// ---------------------------------------------------------------------------------------
// HMAC-signed HTTPS endpoint

struct Endpoint {
    server: BlobEndpoint,
    store: LocalBlobstore,
    signer: HmacSigner,
    client: reqwest::Client,
    _tmp: tempfile::TempDir,
}

impl Endpoint {
    async fn start() -> Endpoint {
        let ca = Ca::new("blobstore-ca").unwrap();
        let cert = ca.issue(&Leaf::loopback_server("director")).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let config = EndpointConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            cert_pem: cert.cert_pem,
            key_pem: cert.key_pem.clone(),
        };
        assert!(!format!("{config:?}").contains(&cert.key_pem));
        // The port is only known once bound: re-base the signer then.
        let store = LocalBlobstore::new(tmp.path().join("blobs")).unwrap();
        let signer = HmacSigner::random("https://127.0.0.1:1".parse().unwrap());
        let server = endpoint::serve(config, store.clone(), signer.clone())
            .await
            .unwrap();
        let base = format!("https://127.0.0.1:{}", server.local_addr().port());
        let signer = signer.with_base(base.parse().unwrap());
        let store = store.with_signer(signer.clone());
        let tls = kubosh_transport::tls::client_config(&ca.cert_pem(), None, false).unwrap();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            .build()
            .unwrap();
        Endpoint {
            server,
            store,
            signer,
            client,
            _tmp: tmp,
        }
    }

    async fn url(&self, id: &str, method: SignedMethod, ttl: Duration) -> reqwest::Url {
        self.store
            .signed_url(id, method, ttl)
            .await
            .unwrap()
            .unwrap()
    }
}

#[tokio::test]
async fn endpoint_serves_signed_get_and_put() {
    let e = Endpoint::start().await;
    let ttl = Duration::from_secs(60);
    let blob = e
        .store
        .put_bytes(Bytes::from_static(b"job archive"))
        .await
        .unwrap();

    let url = e.url(&blob.id, SignedMethod::Get, ttl).await;
    assert!(url.as_str().contains("method=GET"), "{url}");
    let resp = e.client.get(url.clone()).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.bytes().await.unwrap(), &b"job archive"[..]);

    // A director-chosen id (compiled package): stored as it is, replaced on retry.
    let uuid = "0f1e2d3c-4b5a-4968-8776-5a4b3c2d1e0f";
    let put = e.url(uuid, SignedMethod::Put, ttl).await;
    let resp = e
        .client
        .put(put.clone())
        .body("compiled v1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let resp = e.client.put(put).body("compiled v2").send().await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(
        e.store
            .get_bytes(uuid, &digest_of(b"compiled v2"))
            .await
            .unwrap(),
        &b"compiled v2"[..]
    );

    // A content id: the body must hash to it.
    let data = vec![42u8; 2 * 1024 * 1024];
    let id = sha256_hex(&data);
    let put = e.url(&id, SignedMethod::Put, ttl).await;
    let resp = e.client.put(put).body(data.clone()).send().await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(std::fs::read(e.store.dir().join(&id)).unwrap(), data);
    let wrong = sha256_hex(b"something else");
    let put = e.url(&wrong, SignedMethod::Put, ttl).await;
    let resp = e.client.put(put).body("not that").send().await.unwrap();
    assert_eq!(resp.status(), 400);
    assert!(!e.store.exists(&wrong).await.unwrap());

    // A missing blob.
    let missing = e.url("no-such-blob", SignedMethod::Get, ttl).await;
    assert_eq!(e.client.get(missing).send().await.unwrap().status(), 404);
    // Nothing is left staged.
    let mut want = vec![blob.id, uuid.to_string(), id];
    want.sort();
    assert_eq!(files_under(e.store.dir()), want);
    e.server.shutdown().await;
}

#[tokio::test]
async fn endpoint_refuses_expired_and_tampered_urls() {
    let e = Endpoint::start().await;
    let blob = e
        .store
        .put_bytes(Bytes::from_static(b"secret-ish"))
        .await
        .unwrap();
    let ttl = Duration::from_secs(60);
    let status = |url: reqwest::Url, method: reqwest::Method| {
        let req = e.client.request(method, url).body("x");
        async move { req.send().await.unwrap().status().as_u16() }
    };
    let get = reqwest::Method::GET;
    let put = reqwest::Method::PUT;

    // Expired a second ago.
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let expired = e.signer.sign_until(SignedMethod::Get, &blob.id, now - 1);
    assert_eq!(status(expired, get.clone()).await, 403);

    let good = e.url(&blob.id, SignedMethod::Get, ttl).await;
    assert_eq!(status(good.clone(), get.clone()).await, 200);
    // A GET URL used for PUT.
    assert_eq!(status(good.clone(), put.clone()).await, 403);
    // The method parameter rewritten.
    let mut m = good.clone();
    m.set_query(Some(
        &good.query().unwrap().replace("method=GET", "method=PUT"),
    ));
    assert_eq!(status(m, put.clone()).await, 403);
    // Another blob id.
    let mut other = good.clone();
    other.set_path(&format!("/blobs/{}", sha256_hex(b"other")));
    assert_eq!(status(other, get.clone()).await, 403);
    // A flipped signature digit, and the expiry pushed out.
    let q = good.query().unwrap().to_string();
    let sig_at = q.find("sig=").unwrap() + 4;
    let mut flipped = q.clone().into_bytes();
    flipped[sig_at] = if flipped[sig_at] == b'0' { b'1' } else { b'0' };
    let mut bad = good.clone();
    bad.set_query(Some(std::str::from_utf8(&flipped).unwrap()));
    assert_eq!(status(bad, get.clone()).await, 403);
    let mut later = good.clone();
    later.set_query(Some(&q.replace("expires=", "expires=9")));
    assert_eq!(status(later, get.clone()).await, 403);
    // No signature at all; a URL from another key.
    let mut bare = good.clone();
    bare.set_query(None);
    assert_eq!(status(bare, get.clone()).await, 403);
    let stranger =
        HmacSigner::new(b"not the key", good.clone()).sign(SignedMethod::Get, &blob.id, ttl);
    let mut foreign = good.clone();
    foreign.set_query(stranger.query());
    assert_eq!(status(foreign, get.clone()).await, 403);
    // A refused PUT stores nothing.
    let put_url = e.url("fresh-id", SignedMethod::Put, ttl).await;
    let mut tampered = put_url.clone();
    tampered.set_path("/blobs/other-id");
    assert_eq!(status(tampered, put.clone()).await, 403);
    assert!(!e.store.exists("other-id").await.unwrap());
    // Other paths and methods.
    let mut root = good.clone();
    root.set_path("/");
    assert_eq!(status(root, get.clone()).await, 404);
    assert_eq!(status(good, reqwest::Method::DELETE).await, 405);
    assert!(e.store.exists(&blob.id).await.unwrap());
}

#[tokio::test]
async fn endpoint_drops_an_interrupted_upload() {
    let e = Endpoint::start().await;
    let id = "interrupted-upload";
    let url = e.url(id, SignedMethod::Put, Duration::from_secs(60)).await;
    // The client's body fails after the first chunk: the server sees a truncated upload.
    let chunks = futures::stream::iter(vec![
        Ok::<_, std::io::Error>(Bytes::from(vec![1u8; 256 * 1024])),
        Err(std::io::Error::other("client went away")),
    ]);
    let sent = e
        .client
        .put(url)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await;
    assert!(sent.is_err() || !sent.unwrap().status().is_success());
    // The server notices asynchronously; the blob must never appear, and the staged part
    // must go.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        assert!(!e.store.exists(id).await.unwrap());
        if files_under(e.store.dir()).is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            files_under(e.store.dir())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------
// S3 against a real S3-compatible server

fn s3_store(server: &kubosh_devenv::S3Server, bucket: &str) -> S3Blobstore {
    server.create_bucket(bucket).unwrap();
    S3Blobstore::new(S3Config {
        endpoint: Some(server.endpoint().parse().unwrap()),
        bucket: bucket.to_string(),
        region: "us-east-1".to_string(),
        access_key_id: "kubosh-test".to_string(),
        secret_access_key: "kubosh-test-secret".to_string(),
        path_style: true,
        ca_pem: None,
    })
    .unwrap()
}

#[tokio::test]
async fn s3_round_trip_listing_presigned_urls_and_gc() {
    let server = kubosh_devenv::S3Server::start().unwrap();
    let store = s3_store(&server, "kubosh-blobs");
    assert!(!format!("{:?}", store).contains("kubosh-test-secret"));

    // Round trip, content addressing.
    let small = store
        .put_bytes(Bytes::from_static(b"small blob"))
        .await
        .unwrap();
    assert_eq!(small.id, sha256_hex(b"small blob"));
    assert_eq!(
        store
            .put_bytes(Bytes::from_static(b"small blob"))
            .await
            .unwrap(),
        small
    );
    assert!(store.exists(&small.id).await.unwrap());
    let tmp = tempfile::tempdir().unwrap();
    // Large enough for a multipart upload.
    let big: Vec<u8> = (0..12 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let big_file = tmp.path().join("big.tgz");
    std::fs::write(&big_file, &big).unwrap();
    let big_blob = store.put_file(&big_file).await.unwrap();
    assert_eq!(big_blob.id, sha256_hex(&big));
    assert_eq!(big_blob.size, big.len() as u64);
    let dest = tmp.path().join("back.tgz");
    store
        .get(&big_blob.id, &big_blob.digest(), &dest)
        .await
        .unwrap();
    assert!(std::fs::read(&dest).unwrap() == big);
    let wrong = digest_of(b"not it");
    let err = store.get(&small.id, &wrong, &dest).await.unwrap_err();
    assert!(err.to_string().contains(&small.id), "{err}");

    // Listing: blobs only, never staged uploads.
    let mut want = vec![small.id.clone(), big_blob.id.clone()];
    want.sort();
    let listed = store.list().await.unwrap();
    assert_eq!(ids(&listed), want);
    assert!(listed.iter().any(|b| b.size == big.len() as u64));

    // Presigned GET and PUT with a plain client.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let ttl = Duration::from_secs(300);
    let get = store
        .signed_url(&small.id, SignedMethod::Get, ttl)
        .await
        .unwrap()
        .unwrap();
    let q: std::collections::HashMap<_, _> = get.query_pairs().into_owned().collect();
    assert_eq!(q.get("X-Amz-Expires").map(String::as_str), Some("300"));
    assert!(q.contains_key("X-Amz-Signature") && q.contains_key("X-Amz-Date"));
    assert!(!get.as_str().contains("kubosh-test-secret"));
    let resp = http.get(get).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.bytes().await.unwrap(), &b"small blob"[..]);
    let uuid = "1a2b3c4d-0000-4000-8000-00000000abcd";
    let put = store
        .signed_url(uuid, SignedMethod::Put, ttl)
        .await
        .unwrap()
        .unwrap();
    let resp = http
        .put(put)
        .body("compiled by an agent")
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    assert_eq!(
        store
            .get_bytes(uuid, &digest_of(b"compiled by an agent"))
            .await
            .unwrap(),
        &b"compiled by an agent"[..]
    );
    // The expiry is part of what is signed: a URL signed for 1 second says so.
    let short = store
        .signed_url(&small.id, SignedMethod::Get, Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    assert!(short.as_str().contains("X-Amz-Expires=1&"), "{short}");

    // Agent settings: bosh-s3cli's options.
    assert_eq!(
        store.agent_settings(),
        json!({"provider": "s3", "options": {
            "bucket_name": "kubosh-blobs",
            "credentials_source": "static",
            "access_key_id": "kubosh-test",
            "secret_access_key": "kubosh-test-secret",
            "region": "us-east-1",
            "host": "127.0.0.1",
            "port": server.port(),
            "use_ssl": false,
            "ssl_verify_peer": false,
            "host_style": false,
        }})
    );

    // GC: nothing is old enough with a minimum age; without one, the unreferenced go.
    let refs: HashSet<String> = [small.id.clone()].into();
    assert!(
        collect_garbage(&store, &refs, Duration::from_secs(3600))
            .await
            .unwrap()
            .is_empty()
    );
    let mut gone = vec![big_blob.id.clone(), uuid.to_string()];
    gone.sort();
    assert_eq!(
        collect_garbage(&store, &refs, Duration::ZERO)
            .await
            .unwrap(),
        gone
    );
    assert_eq!(ids(&store.list().await.unwrap()), vec![small.id.clone()]);
    store.delete(&small.id).await.unwrap();
    store.delete(&small.id).await.unwrap();
    assert!(store.list().await.unwrap().is_empty());
}
