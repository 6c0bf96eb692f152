//! The agent's HTTPS mbus server (`kubosh_agentd::mbus::https`) driven by the crate's real
//! create-env client (`HttpsTransport`, `AgentClient`) and, for raw status checks, by
//! reqwest. TLS with a certificate from `kubosh_base::pki`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kubosh_agentd::mbus::Handler;
use kubosh_agentd::mbus::https::{HttpsMbusConfig, HttpsMbusError, HttpsMbusServer, serve};
use kubosh_base::pki::{Ca, Leaf};
use kubosh_transport::agent::protocol::{Reply, Request};
use kubosh_transport::agent::{AgentError, HttpsError, HttpsTransport, Transport};
use serde_json::{Value, json};

const USER: &str = "mbus";
const PASSWORD: &str = "p@ss:w/rd";
const DIRECTOR_ID: &str = "director-uuid";

/// Answers like a tiny agent and remembers every request it saw.
#[derive(Default)]
struct TestHandler {
    seen: Mutex<Vec<Request>>,
}

impl Handler for TestHandler {
    fn handle(&self, request: Request) -> BoxFuture<'_, Reply> {
        self.seen.lock().unwrap().push(request.clone());
        Box::pin(async move {
            match request.method.as_str() {
                "ping" => Reply::value("pong"),
                "echo" => Reply::value(json!({
                    "method": request.method,
                    "arguments": request.arguments,
                    "reply_to": request.reply_to,
                })),
                "fail" => Reply::exception("Action Failed fail: boom"),
                "slow" => {
                    let ms = request
                        .arguments
                        .first()
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Reply::value("slept")
                }
                "big" => Reply::value("x".repeat(3 * 1024 * 1024)),
                other => Reply::exception(format!("unknown message {other}")),
            }
        })
    }
}

struct Agent {
    server: Option<HttpsMbusServer>,
    handler: Arc<TestHandler>,
    ca_pem: String,
    dir: tempfile::TempDir,
}

impl Agent {
    async fn start() -> Agent {
        let ca = Ca::new("mbus-ca").unwrap();
        let cert = ca.issue(&Leaf::loopback_server("agent")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let url = format!(
            "https://{USER}:{}@127.0.0.1:0",
            PASSWORD
                .replace('@', "%40")
                .replace(':', "%3A")
                .replace('/', "%2F")
        );
        let config = HttpsMbusConfig::from_url(
            &url,
            cert.cert_pem,
            cert.key_pem,
            dir.path().join("data/blobs"),
        )
        .unwrap();
        assert_eq!(config.password, PASSWORD);
        let handler = Arc::new(TestHandler::default());
        let server = serve(config, handler.clone()).await.unwrap();
        Agent {
            server: Some(server),
            handler,
            ca_pem: ca.cert_pem(),
            dir,
        }
    }

    fn port(&self) -> u16 {
        self.server.as_ref().unwrap().local_addr().port()
    }

    fn mbus_url(&self, password: &str) -> String {
        let password = password
            .replace('@', "%40")
            .replace(':', "%3A")
            .replace('/', "%2F");
        format!("https://{USER}:{password}@127.0.0.1:{}", self.port())
    }

    fn transport(&self) -> HttpsTransport {
        HttpsTransport::new(&self.mbus_url(PASSWORD), &self.ca_pem, DIRECTOR_ID).unwrap()
    }

    fn blobs_dir(&self) -> PathBuf {
        self.dir.path().join("data/blobs")
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port())
    }

    /// A plain HTTPS client trusting the test CA, for raw status checks.
    fn raw(&self) -> reqwest::Client {
        let config = kubosh_transport::tls::client_config(&self.ca_pem, None, false).unwrap();
        reqwest::Client::builder()
            .tls_backend_preconfigured(config)
            .no_proxy()
            .build()
            .unwrap()
    }

    fn seen(&self) -> Vec<Request> {
        self.handler.seen.lock().unwrap().clone()
    }
}

/// Every file under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Deterministic pseudo-random bytes.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn ping_round_trip_over_the_real_client() {
    let agent = Agent::start().await;
    let client = agent.transport().agent("agent-1");
    assert_eq!(client.ping().await.unwrap(), "pong");
    let seen = agent.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "ping");
    assert_eq!(seen[0].protocol, None, "no protocol over HTTPS");
    assert_eq!(seen[0].reply_to, DIRECTOR_ID);
    assert!(seen[0].arguments.is_empty());
}

#[tokio::test]
async fn handler_sees_method_and_arguments() {
    let agent = Agent::start().await;
    let transport = agent.transport();
    let arguments = [json!("pre-start"), json!({"env": {"A": "b"}}), json!(3)];
    let reply = transport
        .request("agent-1", "echo", &arguments, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        reply,
        Reply::value(json!({
            "method": "echo",
            "arguments": arguments,
            "reply_to": DIRECTOR_ID,
        }))
    );
    let seen = agent.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].protocol, None);
    assert_eq!(seen[0].arguments, arguments);
}

#[tokio::test]
async fn exception_reply_is_the_clients_error() {
    let agent = Agent::start().await;
    let transport = agent.transport();
    let reply = transport
        .request("agent-1", "fail", &[], Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(reply, Reply::exception("Action Failed fail: boom"));

    // Through the typed client: an unknown method is the agent's "unknown message".
    let client = agent.transport().agent("agent-1");
    let err = client
        .send(kubosh_transport::agent::Method::RemoveFile, &[json!("/x")])
        .await
        .unwrap_err();
    match &err {
        AgentError::Remote {
            method, message, ..
        } => {
            assert_eq!(method, "remove_file");
            assert_eq!(message, "unknown message remove_file");
        }
        other => panic!("expected a remote error, got {other:?}"),
    }
    assert!(err.is_unknown_message());
}

#[tokio::test]
async fn large_replies_are_not_limited() {
    let agent = Agent::start().await;
    let reply = agent
        .transport()
        .request("agent-1", "big", &[], Duration::from_secs(30))
        .await
        .unwrap();
    let Reply::Value(Value::String(s)) = reply else {
        panic!("expected a string value");
    };
    assert_eq!(s.len(), 3 * 1024 * 1024);
}

#[tokio::test]
async fn blobs_round_trip_and_land_in_the_blobs_dir() {
    let agent = Agent::start().await;
    let transport = agent.transport();
    let blob_id = "0d5c2f4e-1b7a-4c43-9d0e-5b6f1a2c3d4e";
    transport
        .put_blob(blob_id, b"package bits".to_vec())
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(agent.blobs_dir().join(blob_id)).unwrap(),
        b"package bits"
    );
    assert_eq!(transport.get_blob(blob_id).await.unwrap(), b"package bits");

    // A second PUT replaces the blob.
    transport
        .put_blob(blob_id, b"new bits".to_vec())
        .await
        .unwrap();
    assert_eq!(transport.get_blob(blob_id).await.unwrap(), b"new bits");

    // An empty blob.
    transport.put_blob("empty", Vec::new()).await.unwrap();
    assert_eq!(transport.get_blob("empty").await.unwrap(), b"");

    // Nothing is left behind in the temporary directory.
    assert_eq!(
        files_under(&agent.blobs_dir()),
        vec![blob_id.to_string(), "empty".to_string()]
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(agent.blobs_dir().join(blob_id))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o640);
}

#[tokio::test]
async fn multi_mib_blob_streams_both_ways() {
    let agent = Agent::start().await;
    let transport = agent.transport();
    let data = noise(12 * 1024 * 1024 + 17);
    let src = agent.dir.path().join("upload.tgz");
    std::fs::write(&src, &data).unwrap();
    transport.put_blob_file("big-blob", &src).await.unwrap();
    let dst = agent.dir.path().join("download.tgz");
    transport.get_blob_to_file("big-blob", &dst).await.unwrap();
    assert!(
        std::fs::read(&dst).unwrap() == data,
        "downloaded bytes differ"
    );
    assert!(std::fs::read(agent.blobs_dir().join("big-blob")).unwrap() == data);

    let resp = agent
        .raw()
        .get(transport.blob_url("big-blob").unwrap())
        .basic_auth(USER, Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.content_length(), Some(data.len() as u64));
}

#[tokio::test]
async fn only_the_last_path_segment_names_the_blob() {
    let agent = Agent::start().await;
    let resp = agent
        .raw()
        .put(agent.url("/blobs/any/where/deep/abc"))
        .basic_auth(USER, Some(PASSWORD))
        .body("via another prefix")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    // The client addresses it as /blobs/a9/abc.
    assert_eq!(
        agent.transport().get_blob("abc").await.unwrap(),
        b"via another prefix"
    );
}

#[tokio::test]
async fn missing_blob_is_the_clients_404() {
    let agent = Agent::start().await;
    let err = agent.transport().get_blob("nope").await.unwrap_err();
    match err {
        HttpsError::BlobStatus {
            action,
            blob_id,
            status,
            body,
        } => {
            assert_eq!(action, "Getting");
            assert_eq!(blob_id, "nope");
            assert_eq!(status, 404);
            assert_eq!(body, "");
        }
        other => panic!("expected a 404, got {other:?}"),
    }
    // The server's own temporary directory is not a blob either.
    let err = agent.transport().get_blob("tmp").await.unwrap_err();
    assert!(
        matches!(err, HttpsError::BlobStatus { status: 404, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn wrong_or_missing_credentials_get_401() {
    let agent = Agent::start().await;
    let raw = agent.raw();
    let attempts = [
        raw.post(agent.url("/agent"))
            .basic_auth(USER, Some("wrong"))
            .body(r#"{"method":"ping","arguments":[],"reply_to":"d"}"#),
        raw.post(agent.url("/agent"))
            .body(r#"{"method":"ping","arguments":[],"reply_to":"d"}"#),
        raw.post(agent.url("/agent"))
            .basic_auth("other", Some(PASSWORD))
            .body("{}"),
        raw.put(agent.url("/blobs/a9/abc"))
            .basic_auth(USER, Some("wrong"))
            .body("x"),
        raw.get(agent.url("/blobs/a9/abc")),
        // The comparison is of the whole header: a lower-case scheme is refused too.
        raw.get(agent.url("/blobs/a9/abc")).header(
            "authorization",
            format!(
                "basic {}",
                base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    format!("{USER}:{PASSWORD}")
                )
            ),
        ),
    ];
    for request in attempts {
        let resp = request.send().await.unwrap();
        assert_eq!(resp.status(), 401);
        assert_eq!(
            resp.headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap()),
            Some(r#"Basic realm="""#)
        );
        assert_eq!(resp.bytes().await.unwrap().len(), 0);
    }
    assert!(agent.seen().is_empty(), "the handler must not be called");
    assert!(files_under(&agent.blobs_dir()).is_empty());

    // The real client with a wrong password.
    let transport =
        HttpsTransport::new(&agent.mbus_url("wrong"), &agent.ca_pem, DIRECTOR_ID).unwrap();
    let err = transport.clone().agent("agent-1").ping().await.unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");
    let err = transport.put_blob("abc", b"x".to_vec()).await.unwrap_err();
    assert!(
        matches!(err, HttpsError::BlobStatus { status: 401, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn non_post_agent_and_unknown_routes_are_404() {
    let agent = Agent::start().await;
    let raw = agent.raw();
    for method in [
        reqwest::Method::GET,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
    ] {
        let resp = raw
            .request(method.clone(), agent.url("/agent"))
            .basic_auth(USER, Some(PASSWORD))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{method}");
        assert_eq!(resp.bytes().await.unwrap().len(), 0);
    }
    // Blobs take only GET and PUT.
    let resp = raw
        .delete(agent.url("/blobs/a9/abc"))
        .basic_auth(USER, Some(PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // Routes the agent does not have: 404 without authentication, as bosh-agent's mux.
    for path in ["/", "/agent/", "/info", "/blobs"] {
        let resp = raw.get(agent.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        assert_eq!(resp.text().await.unwrap(), "404 page not found\n");
    }
    assert!(agent.seen().is_empty());
}

#[tokio::test]
async fn unparseable_json_is_500() {
    let agent = Agent::start().await;
    let raw = agent.raw();
    for body in ["{not json", "", "[1,2]", r#"{"method":5}"#] {
        let resp = raw
            .post(agent.url("/agent"))
            .basic_auth(USER, Some(PASSWORD))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 500, "{body:?}");
        assert_eq!(resp.bytes().await.unwrap().len(), 0, "{body:?}");
    }
    assert!(agent.seen().is_empty());

    // Missing keys are empty, as in Go; the handler answers.
    let resp = raw
        .post(agent.url("/agent"))
        .basic_auth(USER, Some(PASSWORD))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&resp.bytes().await.unwrap()).unwrap(),
        json!({"exception": {"message": "unknown message "}})
    );
    let seen = agent.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "");
    assert_eq!(seen[0].reply_to, "");
}

#[tokio::test]
async fn path_traversal_blob_ids_are_refused() {
    let agent = Agent::start().await;
    let raw = agent.raw();
    // A file outside the blobs directory that a traversal would read.
    std::fs::write(agent.dir.path().join("secret"), "do not serve").unwrap();
    let before = files_under(agent.dir.path());
    for path in [
        "/blobs/xx/..%2F..%2Fescape",
        "/blobs/xx/..%2f..%2f..%2fsecret",
        "/blobs/xx/%2e%2e",
        "/blobs/xx/..",
        "/blobs/xx/",
        "/blobs/xx/a%00b",
        "/blobs/xx/%2Ftmp%2Fabs",
    ] {
        for method in [reqwest::Method::PUT, reqwest::Method::GET] {
            let resp = raw
                .request(method.clone(), agent.url(path))
                .basic_auth(USER, Some(PASSWORD))
                .body("payload")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 400, "{method} {path}");
            let body = resp.text().await.unwrap();
            assert!(
                body.starts_with("invalid blob id"),
                "{method} {path}: {body}"
            );
            assert!(!body.contains("do not serve"));
        }
    }
    assert_eq!(files_under(agent.dir.path()), before, "nothing was written");
    // The client refuses such ids itself.
    assert!(matches!(
        agent.transport().get_blob("../secret").await,
        Err(HttpsError::BlobId(_))
    ));
}

#[tokio::test]
async fn requests_are_handled_concurrently() {
    let agent = Agent::start().await;
    let transport = agent.transport();
    let start = Instant::now();
    let calls = (0..4).map(|_| {
        let transport = transport.clone();
        async move {
            transport
                .request("agent-1", "slow", &[json!(800)], Duration::from_secs(10))
                .await
                .unwrap()
        }
    });
    let replies = futures::future::join_all(calls).await;
    let elapsed = start.elapsed();
    assert!(replies.iter().all(|r| *r == Reply::value("slept")));
    assert!(
        elapsed < Duration::from_millis(2400),
        "4 × 800 ms took {elapsed:?}: not concurrent"
    );
}

#[tokio::test]
async fn shutdown_finishes_requests_in_flight_then_stops_listening() {
    let mut agent = Agent::start().await;
    let transport = agent.transport();
    let in_flight = tokio::spawn({
        let transport = transport.clone();
        async move {
            transport
                .request("agent-1", "slow", &[json!(700)], Duration::from_secs(10))
                .await
        }
    });
    // Wait until the handler has the request.
    let deadline = Instant::now() + Duration::from_secs(5);
    while agent.seen().is_empty() {
        assert!(Instant::now() < deadline, "request never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let addr = agent.server.as_ref().unwrap().local_addr();
    agent.server.take().unwrap().shutdown().await;
    assert_eq!(in_flight.await.unwrap().unwrap(), Reply::value("slept"));
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn dropping_the_server_stops_it() {
    let mut agent = Agent::start().await;
    assert_eq!(agent.transport().agent("a").ping().await.unwrap(), "pong");
    let addr = agent.server.as_ref().unwrap().local_addr();
    drop(agent.server.take());
    let deadline = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "still listening after drop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn serve_reports_bad_certificates_and_busy_ports() {
    let ca = Ca::new("ca").unwrap();
    let cert = ca.issue(&Leaf::loopback_server("agent")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let handler: Arc<dyn Handler> = Arc::new(TestHandler::default());

    let config =
        HttpsMbusConfig::from_url("https://u:p@127.0.0.1:0", "", "SECRET", dir.path()).unwrap();
    let err = serve(config, handler.clone()).await.unwrap_err();
    assert!(matches!(err, HttpsMbusError::Tls(_)), "{err:?}");
    assert!(!err.to_string().contains("SECRET"));

    let first = serve(
        HttpsMbusConfig::from_url(
            "https://u:p@127.0.0.1:0",
            cert.cert_pem.clone(),
            cert.key_pem.clone(),
            dir.path(),
        )
        .unwrap(),
        handler.clone(),
    )
    .await
    .unwrap();
    let busy = format!("https://u:p@{}", first.local_addr());
    let config = HttpsMbusConfig::from_url(&busy, cert.cert_pem, cert.key_pem, dir.path()).unwrap();
    let err = serve(config, handler).await.unwrap_err();
    assert!(matches!(err, HttpsMbusError::Bind { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("Starting HTTP listener on 127.0.0.1:")
    );
    first.shutdown().await;
}
