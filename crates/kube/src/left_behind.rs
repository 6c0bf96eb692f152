//! What a deploy's [`KubeStore`](crate::state::KubeStore) leaves of a deployment's instance
//! records for the next deploy of the same deployment, so that deploy (a repair, most
//! often) starts without listing and parsing every `Instance` again: the largest read of a
//! deploy, and most of the controller's and the apiserver's work for a one-instance repair.
//!
//! What was left is used only if the `Instance`s as the controller's watch has them now are
//! exactly those it describes: the same names and uids, each holding the same record text
//! (compared by digest, [`record_digest`]). Anything else (a record written since by anyone,
//! an `Instance` deleted or added, a watch not caught up with the last writes, no watch
//! running) makes the store list them as before. The objects themselves (resource version,
//! status) always come from the watch, never from what was left.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt;
use kube::ResourceExt;
use kube::runtime::reflector::{self, Store};

use crate::api::{Instance, RECORD_ANNOTATION};
use kubosh_engine::state::InstanceRecord;

/// The in-memory annotation the watch's cache keeps of an `Instance`'s record: its
/// [`record_digest`].
pub const RECORD_DIGEST: &str = "kubosh.io/record-digest";

/// The digest of an `Instance`'s record annotation as written.
pub fn record_digest(text: &str) -> String {
    kubosh_base::digest::sha256_hex(text.as_bytes())
}

/// One instance as a deploy left it: its object's name and uid, its record (as JSON text:
/// a fraction of the parsed record's memory, kept for every instance between deploys), and
/// the digest of the record's text as written.
#[derive(Debug, Clone)]
pub(crate) struct LeftInstance {
    pub(crate) name: String,
    pub(crate) uid: Option<String>,
    pub(crate) record: String,
    pub(crate) digest: String,
}

/// The instance records deploys left, by deployment uid, and the watch's cache of every
/// `Instance` they are checked against.
pub struct LeftBehind {
    left: Mutex<HashMap<String, Vec<LeftInstance>>>,
    watched: Store<Instance>,
    writer: Mutex<Option<reflector::store::Writer<Instance>>>,
}

impl Default for LeftBehind {
    fn default() -> Self {
        let (watched, writer) = reflector::store();
        LeftBehind {
            left: Mutex::default(),
            watched,
            writer: Mutex::new(Some(writer)),
        }
    }
}

impl std::fmt::Debug for LeftBehind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeftBehind").finish_non_exhaustive()
    }
}

impl LeftBehind {
    /// The writer of the `Instance` cache, for the one watch that fills it (the health
    /// watch); later callers get a cache of their own, which nothing here reads.
    pub fn cache_writer(&self) -> (Store<Instance>, reflector::store::Writer<Instance>) {
        let taken = (self.writer.lock().unwrap_or_else(PoisonError::into_inner)).take();
        match taken {
            Some(writer) => (self.watched.clone(), writer),
            None => reflector::store(),
        }
    }

    /// Every `Instance` the watch has now (slimmed: no managed fields, no record).
    pub(crate) fn watched_instances(&self) -> Vec<std::sync::Arc<Instance>> {
        self.watched.state()
    }

    /// Keeps what a deploy of deployment `uid` left (replacing anything older).
    pub(crate) fn leave(&self, uid: &str, instances: Vec<LeftInstance>) {
        let mut left = self.left.lock().unwrap_or_else(PoisonError::into_inner);
        left.insert(uid.to_string(), instances);
    }

    /// Drops what was left of deployment `uid` (a task other than a deploy writes its
    /// records, or it is gone).
    pub fn forget(&self, uid: &str) {
        let mut left = self.left.lock().unwrap_or_else(PoisonError::into_inner);
        left.remove(uid);
    }

    /// What was left of deployment `uid` (taken: one store uses it), each record with its
    /// `Instance` as the watch has it now, if they are exactly the deployment's `Instance`s
    /// the watch sees (owned by `uid`).
    pub(crate) fn take(&self, uid: &str) -> Option<Vec<(InstanceRecord, String, Instance)>> {
        let left = (self.left.lock().unwrap_or_else(PoisonError::into_inner)).remove(uid)?;
        // Nothing is known of a deployment before the watch has listed them all.
        self.watched.wait_until_ready().now_or_never()?.ok()?;
        // None left: nothing to save, and an empty match proves little.
        if left.is_empty() {
            return None;
        }
        let mut watched: BTreeMap<String, Arc<Instance>> = (self.watched.state().into_iter())
            .filter(|i| i.owner_references().iter().any(|o| o.uid == uid))
            .map(|i| (i.name_any(), i))
            .collect();
        if watched.len() != left.len() {
            return None;
        }
        let mut taken = Vec::with_capacity(left.len());
        for instance in left {
            let object = watched.remove(&instance.name)?;
            let digest = object.annotations().get(RECORD_DIGEST);
            if object.metadata.uid != instance.uid || digest != Some(&instance.digest) {
                return None;
            }
            let record = serde_json::from_str(&instance.record).ok()?;
            let mut object = Instance::clone(&object);
            object.metadata.annotations = None;
            object.metadata.managed_fields = None;
            taken.push((record, instance.digest, object));
        }
        Some(taken)
    }
}

/// `instance`'s record annotation replaced by its [`RECORD_DIGEST`] (the watch's cache
/// keeps that, not the record); `None` when it has no record.
pub fn digest_record(instance: &mut Instance) -> Option<String> {
    let annotations = instance.annotations_mut();
    let text = annotations.remove(RECORD_ANNOTATION)?;
    let digest = record_digest(&text);
    annotations.insert(RECORD_DIGEST.into(), digest);
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::runtime::watcher::Event;

    const UID: &str = "deployment-uid";

    fn record(index: u64) -> InstanceRecord {
        serde_json::from_value(serde_json::json!({
            "group": "web", "index": index, "uuid": format!("u{index}"), "update_completed": true
        }))
        .expect("a record")
    }

    /// Instance `index` of the deployment as written with `text` as its record, as the
    /// watch caches it.
    fn watched(index: u64, text: &str) -> Instance {
        let mut object = Instance::new(&format!("web-{index}"), Default::default());
        object.metadata.uid = Some(format!("object-{index}"));
        object.metadata.resource_version = Some("7".into());
        object.metadata.owner_references = Some(vec![OwnerReference {
            uid: UID.into(),
            kind: "Deployment".into(),
            ..OwnerReference::default()
        }]);
        (object.annotations_mut()).insert(RECORD_ANNOTATION.into(), text.into());
        digest_record(&mut object);
        object
    }

    fn as_left(index: u64, text: &str) -> LeftInstance {
        LeftInstance {
            name: format!("web-{index}"),
            uid: Some(format!("object-{index}")),
            record: serde_json::to_string(&record(index)).expect("JSON"),
            digest: record_digest(text),
        }
    }

    /// A `LeftBehind` whose watch has listed `objects`.
    fn watching(objects: &[Instance]) -> LeftBehind {
        let left = LeftBehind::default();
        let (_, mut writer) = left.cache_writer();
        writer.apply_watcher_event(&Event::Init);
        for object in objects {
            writer.apply_watcher_event(&Event::InitApply(object.clone()));
        }
        writer.apply_watcher_event(&Event::InitDone);
        left
    }

    #[test]
    fn what_was_left_is_taken_with_the_objects_as_watched_when_it_matches_them() {
        let left = watching(&[watched(0, "a"), watched(1, "b")]);
        left.leave(UID, vec![as_left(0, "a"), as_left(1, "b")]);
        let taken = left.take(UID).expect("it matches");
        assert_eq!(taken.len(), 2);
        let (record_0, digest, object) = &taken[0];
        assert_eq!(
            (record_0, digest.as_str()),
            (&record(0), record_digest("a").as_str())
        );
        assert_eq!(object.metadata.resource_version.as_deref(), Some("7"));
        assert!(object.metadata.annotations.is_none());
        // Taken: a second store lists.
        assert!(left.take(UID).is_none());
    }

    #[test]
    fn any_difference_with_the_watch_makes_the_store_list() {
        let cases: [(&str, Vec<Instance>, Vec<LeftInstance>); 5] = [
            (
                "a record written since",
                vec![watched(0, "a2")],
                vec![as_left(0, "a")],
            ),
            (
                "an instance added",
                vec![watched(0, "a"), watched(1, "b")],
                vec![as_left(0, "a")],
            ),
            (
                "an instance deleted",
                vec![watched(0, "a")],
                vec![as_left(0, "a"), as_left(1, "b")],
            ),
            (
                "an object made again under its name",
                vec![{
                    let mut o = watched(0, "a");
                    o.metadata.uid = Some("other".into());
                    o
                }],
                vec![as_left(0, "a")],
            ),
            ("nothing left", vec![], vec![]),
        ];
        for (case, objects, instances) in cases {
            let left = watching(&objects);
            left.leave(UID, instances);
            assert!(left.take(UID).is_none(), "{case}");
        }
    }

    #[test]
    fn nothing_is_taken_before_the_watch_has_listed_or_once_forgotten() {
        let listing = LeftBehind::default();
        listing.leave(UID, vec![as_left(0, "a")]);
        assert!(listing.take(UID).is_none());

        let left = watching(&[watched(0, "a")]);
        left.leave(UID, vec![as_left(0, "a")]);
        left.forget(UID);
        assert!(left.take(UID).is_none());
    }
}
