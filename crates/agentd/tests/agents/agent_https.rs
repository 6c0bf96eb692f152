//! The create-env HTTPS mbus client against a small HTTPS server written here (tokio +
//! rustls) that behaves like bosh-agent's `mbus/https_handler.go`: Basic auth on every
//! route (401 otherwise), `POST /agent`, `PUT`/`GET /blobs/.../<id>` keyed by the last path
//! segment.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use kubosh_base::pki::{Ca, Leaf};
use kubosh_transport::agent::protocol::{ApplySpec, Reply};
use kubosh_transport::agent::{AgentError, ClientOptions, HttpsError, HttpsTransport};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const USER: &str = "mbus";
const PASSWORD: &str = "p@ss:w/rd";

/// One request as received: method, path, headers (lower-case names), body.
type Received = (String, String, HashMap<String, String>, Vec<u8>);

/// What the fake agent saw.
#[derive(Default)]
struct Seen {
    requests: Vec<Received>,
    blobs: HashMap<String, Vec<u8>>,
}

struct FakeHttpsAgent {
    port: u16,
    ca_pem: String,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeHttpsAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeHttpsAgent {
    async fn start() -> FakeHttpsAgent {
        let ca = Ca::new("mbus-ca").unwrap();
        let cert = ca.issue(&Leaf::loopback_server("agent")).unwrap();
        let certs = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let state = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let state = state.clone();
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let _ = serve(tls, state).await;
                    }
                });
            }
        });
        FakeHttpsAgent {
            port,
            ca_pem: ca.cert_pem(),
            seen,
            task,
        }
    }

    fn mbus_url(&self, password: &str) -> String {
        let password = password
            .replace('@', "%40")
            .replace(':', "%3A")
            .replace('/', "%2F");
        format!("https://{USER}:{password}@127.0.0.1:{}", self.port)
    }

    fn transport(&self) -> HttpsTransport {
        HttpsTransport::new(&self.mbus_url(PASSWORD), &self.ca_pem, "director-uuid").unwrap()
    }
}

/// One HTTP/1.1 request per connection, answered with `Connection: close`.
async fn serve(
    stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    state: Arc<Mutex<Seen>>,
) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    let mut line = String::new();
    stream.read_line(&mut line).await?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        stream.read_line(&mut h).await?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    stream.read_exact(&mut body).await?;
    state.lock().unwrap().requests.push((
        method.clone(),
        path.clone(),
        headers.clone(),
        body.clone(),
    ));

    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    );
    let (status, extra, out): (&str, &str, Vec<u8>) =
        if headers.get("authorization") != Some(&expected) {
            (
                "401 Unauthorized",
                "WWW-Authenticate: Basic realm=\"\"\r\n",
                b"Unauthorized".to_vec(),
            )
        } else if path == "/agent" {
            if method != "POST" {
                ("404 Not Found", "", vec![])
            } else {
                match serde_json::from_slice::<Value>(&body) {
                    Ok(req) => {
                        if req["method"] == "get_state" {
                            tokio::time::sleep(Duration::from_secs(3)).await;
                        }
                        ("200 OK", "", agent_reply(&req).to_vec())
                    }
                    Err(_) => ("500 Internal Server Error", "", vec![]),
                }
            }
        } else if let Some(rest) = path.strip_prefix("/blobs/") {
            let id = rest.rsplit('/').next().unwrap_or_default().to_string();
            match method.as_str() {
                "PUT" => {
                    state.lock().unwrap().blobs.insert(id, body);
                    ("201 Created", "", vec![])
                }
                "GET" => match state.lock().unwrap().blobs.get(&id) {
                    Some(b) => ("200 OK", "", b.clone()),
                    None => ("404 Not Found", "", vec![]),
                },
                _ => ("404 Not Found", "", vec![]),
            }
        } else {
            ("404 Not Found", "", vec![])
        };
    let head = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
        out.len()
    );
    let stream = stream.get_mut();
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&out).await?;
    stream.shutdown().await
}

fn agent_reply(req: &Value) -> Reply {
    match req["method"].as_str().unwrap_or_default() {
        "ping" => Reply::value("pong"),
        // Without "protocol" the agent runs list_disk synchronously.
        "list_disk" if req.get("protocol").is_none() => Reply::value(json!(["disk-1"])),
        "apply" => Reply::value(json!({"agent_task_id": "t1", "state": "running"})),
        "get_task" => Reply::value("applied"),
        "start" => Reply::exception("Action Failed start: monit failed"),
        other => Reply::exception(format!("unknown message {other}")),
    }
}

fn fast() -> ClientOptions {
    ClientOptions {
        timeout: Duration::from_secs(5),
        poll_interval: Duration::from_millis(10),
        ..ClientOptions::create_env()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_requests_over_https() {
    let fake = FakeHttpsAgent::start().await;
    let agent = fake.transport().agent("agent-1").with_options(fast());
    assert_eq!(agent.ping().await.unwrap(), "pong");
    assert_eq!(agent.list_disk().await.unwrap(), ["disk-1"]);
    assert_eq!(agent.apply(&ApplySpec::default()).await.unwrap(), "applied");
    let err = agent.start().await.unwrap_err();
    assert_eq!(err.to_string(), "Action Failed start: monit failed");

    let seen = fake.seen.lock().unwrap();
    let (method, path, headers, body) = &seen.requests[0];
    assert_eq!((method.as_str(), path.as_str()), ("POST", "/agent"));
    assert_eq!(headers["content-type"], "application/json");
    // The CLI's envelope: no "protocol", reply_to is the director id.
    assert_eq!(
        String::from_utf8_lossy(body),
        r#"{"method":"ping","arguments":[],"reply_to":"director-uuid"}"#
    );
    let methods: Vec<String> = seen
        .requests
        .iter()
        .map(|r| {
            serde_json::from_slice::<Value>(&r.3).unwrap()["method"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(methods, ["ping", "list_disk", "apply", "get_task", "start"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_refused_with_401() {
    let fake = FakeHttpsAgent::start().await;
    let t = HttpsTransport::new(&fake.mbus_url("wrong"), &fake.ca_pem, "d").unwrap();
    let err = t
        .clone()
        .agent("a")
        .with_options(fast())
        .ping()
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Transport { .. }), "{err}");
    assert!(
        err.to_string()
            .ends_with("Agent responded with non-successful status code: 401"),
        "{err}"
    );
    assert!(!err.to_string().contains("wrong"));
    let err = t.put_blob("b1", b"x".to_vec()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Putting dav blob b1: Wrong response code: 401; body: Unauthorized"
    );
    let seen = fake.seen.lock().unwrap();
    assert!(seen.blobs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_put_and_get_under_the_davcli_prefix() {
    let fake = FakeHttpsAgent::start().await;
    let t = fake.transport();
    let id = "0a1b2c3d-compiled";
    t.put_blob(id, b"hello blob".to_vec()).await.unwrap();
    assert_eq!(t.get_blob(id).await.unwrap(), b"hello blob");
    let prefix = kubosh_transport::agent::https::blob_prefix(id);
    {
        let seen = fake.seen.lock().unwrap();
        let put = &seen.requests[0];
        assert_eq!(put.0, "PUT");
        assert_eq!(put.1, format!("/blobs/{prefix}/{id}"));
        assert_eq!(seen.requests[1].1, format!("/blobs/{prefix}/{id}"));
    }

    // Files stream both ways with a Content-Length, as davcli sends.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("big.tgz");
    let data: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    t.put_blob_file("big", &src).await.unwrap();
    let dst = dir.path().join("back.tgz");
    t.get_blob_to_file("big", &dst).await.unwrap();
    assert_eq!(std::fs::read(&dst).unwrap(), data);
    assert_eq!(
        fake.seen.lock().unwrap().requests[2].2["content-length"],
        data.len().to_string()
    );

    let err = t.get_blob("missing").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Getting dav blob missing: Wrong response code: 404; body: "
    );
    assert!(matches!(
        t.get_blob("../etc").await,
        Err(HttpsError::BlobId(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_certificate_must_chain_to_the_given_ca() {
    let fake = FakeHttpsAgent::start().await;
    let other_ca = Ca::new("other").unwrap().cert_pem();
    let t = HttpsTransport::new(&fake.mbus_url(PASSWORD), &other_ca, "d").unwrap();
    let err = t
        .clone()
        .agent("a")
        .with_options(fast())
        .ping()
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Transport { .. }), "{err}");
    assert!(t.get_blob("x").await.is_err());
    assert!(
        fake.seen.lock().unwrap().requests.is_empty(),
        "no request got through"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_agent_times_out_with_the_directors_message() {
    let fake = FakeHttpsAgent::start().await;
    let agent = fake
        .transport()
        .agent("agent-1")
        .with_options(ClientOptions {
            timeout: Duration::from_millis(300),
            get_state_retries: 1,
            ..fast()
        });
    let err = agent.get_state(false).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Timed out sending 'get_state' to instance: 'unknown', agent-id: 'agent-1' after 0.3 seconds"
    );
    let tries = fake.seen.lock().unwrap().requests.len();
    assert_eq!(tries, 2, "one retry");
}
