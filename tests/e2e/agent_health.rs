//! The heartbeat monitor against a real nats-server with BOSH's production permissions and a
//! real `kubosh agent` started by the local cloud (the `kubosh` binary as CPI): it hears the
//! agent's heartbeat at start, keeps it, lets it age out of short windows only, drops it on
//! the agent's shutdown notice, survives malformed messages, and needs the health monitor's
//! identity (the director's is refused the subscription).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubosh_cloud::local;
use kubosh_cloud::*;
use kubosh_devenv::{BoshNats, ClientPem};
use kubosh_engine::AgentHealth;
use kubosh_transport::agent::health::{HM_COMMON_NAME, HealthError, HeartbeatMonitor};
use kubosh_transport::agent::protocol::DrainType;
use kubosh_transport::agent::{ClientOptions, MbusTls, NatsOptions, NatsTransport};
use serde_json::json;

const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");
const AGENT_ID: &str = "health-agent-1";
/// Not a VM: a client with an agent's identity that publishes heartbeats by hand.
const HAND_AGENT_ID: &str = "health-agent-2";
const LONG: Duration = Duration::from_secs(600);

/// Stops every agent of a local cloud when dropped: a failing test leaves no process behind.
struct StopAgents(PathBuf);

impl Drop for StopAgents {
    fn drop(&mut self) {
        let _ = local::stop_all_agents(&self.0, Duration::from_secs(5));
    }
}

fn options(nats: &BoshNats, pem: ClientPem) -> NatsOptions {
    NatsOptions::new(
        nats.url(),
        MbusTls::new(pem.ca_pem, pem.cert_pem, pem.key_pem),
    )
}

/// Polls `check` every 50 ms until it holds or `within` passes.
async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_hears_a_real_agent_until_it_shuts_down() {
    let nats = BoshNats::start(&[AGENT_ID, HAND_AGENT_ID]).expect("nats-server starts");

    // The director may not listen to heartbeats: nats-server refuses, and connect says so.
    let refused = HeartbeatMonitor::connect(&options(&nats, nats.director().unwrap())).await;
    match refused {
        Err(HealthError::Refused { reason }) => {
            assert!(reason.contains("hm.agent.heartbeat.*"), "{reason}");
            assert!(
                reason.to_lowercase().contains("permissions violation"),
                "{reason}"
            );
        }
        other => panic!("the director's identity was not refused: {other:?}"),
    }
    let monitor = HeartbeatMonitor::connect(&options(&nats, nats.client(HM_COMMON_NAME).unwrap()))
        .await
        .expect("the health monitor's identity may subscribe");
    assert_eq!(monitor.agents_heard(), 0);

    // A real agent on the local cloud: it heartbeats at start (then every 30 s).
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let _stop = StopAgents(state.clone());
    let config = dir.path().join("cpi.json");
    std::fs::write(
        &config,
        json!({
            "state_dir": state,
            "mbus": nats.url(),
            "agent": {"env": {"KUBOSH_LOG": "kubosh=info"}, "stop_timeout_seconds": 20},
        })
        .to_string(),
    )
    .unwrap();
    let cpi = ExternalCpi::new(
        CpiCommand::new(KUBOSH)
            .args(["cpi", "--config", config.to_str().unwrap()])
            .timeout(Duration::from_secs(60)),
        "director-uuid",
    );
    let image = dir.path().join("image");
    std::fs::write(&image, b"stemcell image").unwrap();
    let stemcell = cpi
        .create_stemcell(&CreateStemcell {
            image_path: image,
            cloud_properties: Object::new(),
        })
        .await
        .unwrap();
    let pem = nats.agent(AGENT_ID).unwrap();
    let mut networks = Networks::new();
    networks.insert(
        "default".into(),
        NetworkSettings::new("manual")
            .with("ip", "10.0.0.8")
            .with("netmask", "255.255.255.0")
            .with("gateway", "10.0.0.1")
            .with("default", json!(["dns", "gateway"])),
    );
    let vm = cpi
        .create_vm(&CreateVm {
            agent_id: AGENT_ID.into(),
            stemcell_cid: stemcell.clone(),
            cloud_properties: Object::new(),
            networks,
            disk_cids: vec![],
            env: json!({"bosh": {"mbus": {"cert": {
                "ca": pem.ca_pem, "certificate": pem.cert_pem, "private_key": pem.key_pem}}}})
            .as_object()
            .unwrap()
            .clone(),
        })
        .await
        .expect("create_vm")
        .cid;
    let agent_log = || {
        std::fs::read_to_string(state.join("vms").join(vm.as_str()).join("agent.log"))
            .unwrap_or_default()
    };
    assert!(
        eventually(Duration::from_secs(30), || monitor
            .last_heartbeat(AGENT_ID)
            .is_some())
        .await,
        "no heartbeat heard; agent log:\n{}",
        agent_log()
    );
    let heard = monitor.last_heartbeat(AGENT_ID).unwrap();
    assert_eq!(heard.job_state, "running", "no jobs: nothing fails");
    assert_eq!(heard.deployment, "", "nothing applied yet");
    assert_eq!(
        monitor.recent_job_state(AGENT_ID, LONG).as_deref(),
        Some("running")
    );

    // Malformed messages from an agent identity are ignored; the monitor goes on listening.
    let hand =
        kubosh_transport::agent::nats::connect(&options(&nats, nats.agent(HAND_AGENT_ID).unwrap()))
            .await
            .unwrap();
    let subject = format!("hm.agent.heartbeat.{HAND_AGENT_ID}");
    for garbage in [&b"not json"[..], b"null", br#"{"job_state": 1}"#] {
        hand.publish(subject.clone(), garbage.to_vec().into())
            .await
            .unwrap();
    }
    hand.publish(
        subject.clone(),
        json!({"deployment": "d", "job": "web", "index": 0, "job_state": "failing",
               "vitals": {"load": ["0.1", "0.1", "0.1"]}, "node_id": "n", "number_of_processes": 1})
        .to_string()
        .into(),
    )
    .await
    .unwrap();
    hand.flush().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || monitor
            .recent_job_state(HAND_AGENT_ID, LONG)
            .is_some())
        .await
    );
    let hand_beat = monitor.last_heartbeat(HAND_AGENT_ID).unwrap();
    assert_eq!(hand_beat.job_state, "failing");
    assert_eq!(
        (hand_beat.job.as_deref(), hand_beat.index),
        (Some("web"), Some(0))
    );
    assert_eq!(monitor.agents_heard(), 2);

    // Time passes without a heartbeat: out of a short window, still known in a long one.
    let short = Duration::from_millis(500);
    tokio::time::sleep(short.saturating_sub(heard.received.elapsed()) + short).await;
    assert_eq!(monitor.recent_job_state(AGENT_ID, short), None);
    assert_eq!(
        monitor.recent_job_state(AGENT_ID, LONG).as_deref(),
        Some("running")
    );

    // `drain shutdown`: the agent says it is going; the monitor forgets it, and only it.
    let director = Arc::new(
        NatsTransport::connect(&options(&nats, nats.director().unwrap()))
            .await
            .unwrap(),
    );
    let agent = director.agent(AGENT_ID).with_options(ClientOptions {
        timeout: Duration::from_secs(30),
        poll_interval: Duration::from_millis(50),
        ..ClientOptions::default()
    });
    assert_eq!(agent.drain(DrainType::Shutdown, None).await.unwrap(), 0);
    assert!(
        eventually(Duration::from_secs(10), || monitor
            .recent_job_state(AGENT_ID, LONG)
            .is_none())
        .await,
        "still healthy after its shutdown notice"
    );
    assert!(monitor.last_heartbeat(AGENT_ID).is_none());
    assert_eq!(
        monitor.recent_job_state(HAND_AGENT_ID, LONG).as_deref(),
        Some("failing")
    );

    cpi.delete_vm(&vm).await.unwrap();
    cpi.delete_stemcell(&stemcell).await.unwrap();
    assert!(local::inventory(&state).unwrap().is_empty());
    monitor.close().await;
}
