//! The controller's Events on a real kube-apiserver, read back as kubectl reads them: each
//! carries `eventTime` and the reporting controller (events.k8s.io) and `firstTimestamp`,
//! `lastTimestamp`, `count` and `source` (core/v1), so `kubectl get events
//! --sort-by=.lastTimestamp` lists them in the order they happened.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Reporter};
use kubosh_kube::controller::events::publish;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_sort_by_last_timestamp_in_the_order_they_happened() {
    let ns = support::namespace("events").await;
    let cp = support::control_plane().await;
    let client = cp.client().await.unwrap();
    let reporter = Reporter {
        controller: "kubosh.io/controller".into(),
        instance: Some("kubosh-0".into()),
    };
    // Names whose order is the reverse of the events' (the apiserver lists by name), a
    // second apart (lastTimestamp has whole seconds).
    for (i, name) in ["c-web", "b-web", "a-web"].into_iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let regarding = ObjectReference {
            api_version: Some("kubosh.io/v1alpha1".into()),
            kind: Some("Instance".into()),
            name: Some(name.into()),
            namespace: Some(ns.clone()),
            ..ObjectReference::default()
        };
        let event = KubeEvent {
            type_: EventType::Normal,
            reason: "VmCreated".into(),
            note: Some(format!("event {i}")),
            action: "Deploy".into(),
            secondary: None,
        };
        publish(&client, &reporter, &event, &regarding)
            .await
            .unwrap();
    }

    let mut kubectl = cp.kubectl().unwrap();
    kubectl
        .args(["get", "events", "-n", &ns, "--sort-by=.lastTimestamp"])
        .args(["-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}"]);
    let out = kubectl.output().unwrap();
    let (said, complaint) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{complaint}");
    let order: Vec<&str> = said.lines().collect();
    assert_eq!(order, ["event 0", "event 1", "event 2"], "{complaint}");

    // The events.k8s.io view has what kube's Recorder writes, plus the legacy fields.
    let events = Api::<Event>::namespaced(client, &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(events.len(), 3);
    for e in &events {
        let event_time = e.event_time.as_ref().expect("eventTime").0;
        let last = e
            .deprecated_last_timestamp
            .as_ref()
            .expect("lastTimestamp")
            .0;
        assert_eq!(
            e.deprecated_first_timestamp.as_ref().map(|t| t.0),
            Some(last)
        );
        assert_eq!(last.as_second(), event_time.as_second());
        assert_eq!(e.deprecated_count, Some(1));
        assert_eq!(
            e.reporting_controller.as_deref(),
            Some("kubosh.io/controller")
        );
        assert_eq!(e.reporting_instance.as_deref(), Some("kubosh-0"));
        assert_eq!(e.action.as_deref(), Some("Deploy"));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        let regarding = e.regarding.as_ref().expect("regarding");
        assert_eq!(regarding.kind.as_deref(), Some("Instance"));
        assert!(
            e.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("{}.", regarding.name.as_deref().unwrap()))),
            "{:?}",
            e.metadata.name
        );
    }
}
