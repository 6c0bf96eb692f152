//! The test nats-server is real and enforces mutual TLS.

use std::time::Duration;

use futures::StreamExt;
use kubosh_base::pki::{Ca, Leaf};
use kubosh_devenv::{NatsServer, NatsTls};

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_admits_signed_clients_and_refuses_others() {
    let ca = Ca::new("nats-ca").unwrap();
    let server_cert = ca
        .issue(&Leaf {
            common_name: "default.nats.bosh-internal",
            alternative_names: &["127.0.0.1", "localhost"],
            server: true,
            ..Leaf::default()
        })
        .unwrap();
    let tls = NatsTls {
        ca_pem: ca.cert_pem(),
        cert_pem: server_cert.cert_pem,
        key_pem: server_cert.key_pem,
        verify_clients: true,
    };
    let server = NatsServer::start(Some(&tls), "").expect("start nats-server");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = write(dir.path(), "ca.crt", &ca.cert_pem());
    let client = ca
        .issue(&Leaf {
            common_name: "director.bosh-internal",
            client: true,
            ..Leaf::default()
        })
        .unwrap();
    let cert = write(dir.path(), "client.crt", &client.cert_pem);
    let key = write(dir.path(), "client.key", &client.key_pem);

    let nc = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(ca_file.clone())
        .add_client_certificate(cert, key)
        .connect(server.url())
        .await
        .expect("a client with a CA-signed certificate connects");
    let mut sub = nc.subscribe("agent.probe").await.unwrap();
    nc.publish("agent.probe", "ping".into()).await.unwrap();
    nc.flush().await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&msg.payload[..], b"ping");

    // Without a client certificate the server refuses the TLS handshake.
    let refused = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(ca_file)
        .connection_timeout(Duration::from_secs(2))
        .connect(server.url());
    let outcome = tokio::time::timeout(Duration::from_secs(10), refused).await;
    let Ok(result) = outcome else {
        panic!("connecting without a certificate neither failed nor succeeded within 10 s");
    };
    let err = result.expect_err("a client without a certificate must not connect");
    assert!(!err.to_string().is_empty());
}
