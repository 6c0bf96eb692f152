//! Agents confined on NATS as BOSH confines them: `kubosh deploy` with
//! `nats.authorization` keeps nats-server's users (`verify_and_map`: each certificate's
//! subject is a user) — the director, the health monitor and one user per agent that may
//! subscribe only `agent.<its id>` and publish only its own `hm.agent.*.<id>` and the
//! director's replies — letting each agent in before its VM is created and out after it is
//! deleted. Checked with a real nats-server and agent A's own certificate (from its VM's
//! settings), for kubosh's agent and for the real bosh-agent.

use crate::director_world;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use director_world::{AgentKind, World, edit_json, hello_deployment};
use kubosh_transport::agent::{MbusTls, NatsOptions};
use serde_json::{Value, json};

/// Lines collected by a connection's event callback.
type Log = Arc<Mutex<Vec<String>>>;

/// A NATS connection with a VM's agent identity, and what the server told it.
struct Client {
    client: async_nats::Client,
    errors: Log,
    events: Log,
}

impl Client {
    /// Connects with the NATS certificate the director gave the agent of `vm_cid`.
    async fn as_agent_of(w: &World, vm_cid: &str) -> Client {
        let settings: Value = serde_json::from_str(
            &std::fs::read_to_string(w.cloud().join("vms").join(vm_cid).join("settings.json"))
                .unwrap(),
        )
        .unwrap();
        let cert = &settings["env"]["bosh"]["mbus"]["cert"];
        let tls = MbusTls::new(
            cert["ca"].as_str().unwrap(),
            cert["certificate"].as_str().unwrap(),
            cert["private_key"].as_str().unwrap(),
        );
        let url = settings["mbus"].as_str().unwrap().to_string();
        let (errors, events): (Log, Log) = (Arc::default(), Arc::default());
        let client =
            kubosh_transport::agent::nats::connect_with(&NatsOptions::new(url, tls), |o| {
                let (e, v) = (errors.clone(), events.clone());
                o.event_callback(move |event| {
                    let (e, v) = (e.clone(), v.clone());
                    async move {
                        if let async_nats::Event::ServerError(err) = &event {
                            e.lock().unwrap().push(err.to_string());
                        }
                        v.lock().unwrap().push(event.to_string());
                    }
                })
            })
            .await
            .expect("the agent's identity connects");
        Client {
            client,
            errors,
            events,
        }
    }

    /// Waits up to 5 s for a server error containing all of `words`.
    async fn refused(&self, words: &[&str]) -> bool {
        for _ in 0..50 {
            if (self.errors.lock().unwrap().iter()).any(|e| words.iter().all(|w| e.contains(w))) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }
}

fn agent_and_vm(i: &kubosh_engine::state::InstanceRecord) -> (String, String) {
    let vm = i.vm.as_ref().expect("a VM");
    (vm.agent_id.clone(), vm.cid.clone())
}

async fn agent_a_cannot_read_or_address_agent_b(net: u8, kind: AgentKind) {
    let w = World::confined(net, kind);
    let mut manifest = hello_deployment(w.port, "Hello");
    w.write_manifest(&manifest);
    let (ok, stdout, stderr) = w.output(w.command("deploy"));
    assert!(ok, "deploy failed:\n{stdout}\n{stderr}");
    let state = w.state().await;
    let mut web: Vec<_> = state.instances.values().collect();
    web.sort_by_key(|i| i.index);
    let ((a, a_vm), (b, b_vm)) = (agent_and_vm(web[0]), agent_and_vm(web[1]));
    let auth: Value = serde_json::from_str(
        &std::fs::read_to_string(w.dir.path().join("nats/authorization.json")).unwrap(),
    )
    .unwrap();
    let users: Vec<&str> = (auth["authorization"]["users"].as_array().unwrap().iter())
        .filter_map(|u| u["user"].as_str())
        .collect();
    assert!(
        users.contains(&format!("CN={a}.agent.bosh-internal").as_str()),
        "{users:?}"
    );
    assert!(
        users.contains(&format!("CN={b}.agent.bosh-internal").as_str()),
        "{users:?}"
    );
    assert_eq!(
        users.len(),
        4,
        "director, hm and the two agents (no compilation VM left): {users:?}"
    );

    let as_a = Client::as_agent_of(&w, &a_vm).await;
    let as_b = Client::as_agent_of(&w, &b_vm).await;
    // B may hear its own subject (a copy of what its agent gets).
    let mut b_inbox = as_b.client.subscribe(format!("agent.{b}")).await.unwrap();
    as_b.client.flush().await.unwrap();

    // A cannot listen to B's requests, the director's replies or the heartbeats.
    for subject in [
        "agent.>",
        &format!("agent.{b}"),
        "director.>",
        "hm.agent.heartbeat.*",
    ] {
        let _sub = as_a.client.subscribe(subject.to_string()).await.unwrap();
        as_a.client.flush().await.unwrap();
        assert!(
            as_a.refused(&["Permissions Violation", "Subscription", subject])
                .await,
            "A subscribed to {subject}: {:?}",
            as_a.errors.lock().unwrap()
        );
    }
    // A cannot send B a request, nor answer as B.
    let request =
        json!({"method": "get_state", "arguments": [], "reply_to": format!("director.x.{a}.y")});
    as_a.client
        .publish(format!("agent.{b}"), request.to_string().into())
        .await
        .unwrap();
    as_a.client
        .publish(format!("director.x.{b}.y"), "{}".into())
        .await
        .unwrap();
    as_a.client.flush().await.unwrap();
    assert!(
        as_a.refused(&["Permissions Violation", "Publish", &format!("agent.{b}")])
            .await
    );
    assert!(
        as_a.refused(&[
            "Permissions Violation",
            "Publish",
            &format!("director.x.{b}.y")
        ])
        .await
    );
    let heard = tokio::time::timeout(
        Duration::from_secs(1),
        futures::StreamExt::next(&mut b_inbox),
    )
    .await;
    assert!(heard.is_err(), "B's subject got A's message: {heard:?}");

    // The director and the health monitor still do their work: a deploy that listens to
    // heartbeats (its HM identity's subscriptions would be refused otherwise) and asks every
    // agent for its state.
    let director = w.dir.path().join("director.yml");
    edit_json(&director, |d| d["health"] = json!({"listen_for": 1}));
    let (ok, stdout, stderr) = w.output(w.command("deploy"));
    assert!(ok, "deploy failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("No changes"), "{stdout}");

    // B's VM goes: its user goes, and its connections are closed by the reload.
    manifest["instance_groups"][0]["instances"] = json!(1);
    w.write_manifest(&manifest);
    let (ok, stdout, stderr) = w.output(w.command("deploy"));
    assert!(ok, "deploy failed:\n{stdout}\n{stderr}");
    let auth = std::fs::read_to_string(w.dir.path().join("nats/authorization.json")).unwrap();
    assert!(!auth.contains(&b), "B is still allowed: {auth}");
    assert!(auth.contains(&a));
    let mut closed = false;
    for _ in 0..50 {
        closed = (as_b.events.lock().unwrap().iter()).any(|e| e.contains("disconnected"))
            || as_b.client.connection_state() != async_nats::connection::State::Connected;
        if closed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        closed,
        "B's connection outlived its user: {:?}",
        as_b.events.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubosh_agents_are_confined_to_their_own_subjects() {
    agent_a_cannot_read_or_address_agent_b(33, AgentKind::Kubosh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_agents_are_confined_to_their_own_subjects() {
    agent_a_cannot_read_or_address_agent_b(34, AgentKind::Bosh).await;
}
