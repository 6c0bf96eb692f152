//! Events as every reader sorts them. kube-runtime's `Recorder` writes events.k8s.io/v1
//! Events with only `eventTime`, and that API refuses the legacy fields (`deprecated*`
//! "needs to be unset"), so `kubectl get events --sort-by=.lastTimestamp` (core/v1's view)
//! finds none and misorders them. kube's `Recorder` cannot be told otherwise, so each Event
//! is created here through core/v1 with both: `eventTime` and the reporting controller as
//! events.k8s.io has them, and `firstTimestamp`, `lastTimestamp`, `count` and `source` as
//! core/v1 readers expect. Every publish is a new Event (the controller's events are
//! milestones, not repeats of one).

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Reporter};

/// The Event `reporter` publishes about `regarding` at `now`.
pub fn event(
    reporter: &Reporter,
    event: &KubeEvent,
    regarding: &ObjectReference,
    now: Timestamp,
) -> Event {
    let controller = reporter.controller.clone();
    let name = regarding.name.as_deref().unwrap_or(&controller);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace_of(regarding).to_string()),
            ..ObjectMeta::default()
        },
        involved_object: regarding.clone(),
        related: event.secondary.clone(),
        type_: Some(
            match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        reason: Some(event.reason.clone()),
        action: Some(event.action.clone()),
        message: event.note.clone(),
        event_time: Some(MicroTime(now)),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        reporting_instance: Some(reporter.instance.clone().unwrap_or(controller.clone())),
        source: Some(EventSource {
            component: Some(controller.clone()),
            host: None,
        }),
        reporting_component: Some(controller),
        series: None,
    }
}

/// An Event lives in its object's namespace; a cluster-scoped object's in `default`.
fn namespace_of(regarding: &ObjectReference) -> &str {
    regarding.namespace.as_deref().unwrap_or("default")
}

/// Creates the Event `reporter` publishes about `regarding` (core/v1 `events`, `create`).
pub async fn publish(
    client: &kube::Client,
    reporter: &Reporter,
    event: &KubeEvent,
    regarding: &ObjectReference,
) -> Result<(), kube::Error> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace_of(regarding));
    let made = self::event(reporter, event, regarding, Timestamp::now());
    api.create(&PostParams::default(), &made).await.map(drop)
}
