//! The engine's durable state as Kubernetes objects: [`KubeStore`], a
//! [`StateStore`](kubosh_engine::state::StateStore) for one deployment.
//!
//! Where each record lives (never only in a status, which backups and migrations drop):
//!
//! | Engine record                | Object                                                   |
//! |------------------------------|----------------------------------------------------------|
//! | instance (VM, disks, IPs, applied spec) | its `Instance`: annotation `kubosh.io/record`, copied into the readable spec |
//! | an instance's active disk    | a `Disk` (attached), projected from the instance record  |
//! | orphaned disk                | a `Disk` with `orphaned: true`, no owner, finalizer `kubosh.io/disk` |
//! | pending intent               | key `intent.<id>` of the deployment's state `ConfigMap` |
//! | DNS version, link group ids, deployed inputs | key `state` of the deployment's state `ConfigMap` |
//! | compiled package (namespace-wide) | a `CompiledPackage`                                 |
//! | stemcell in the cloud (namespace-wide) | annotations `kubosh.io/cid`, `kubosh.io/os` on its `Stemcell` |
//!
//! The state `ConfigMap` ([`KubeStore::state_name`]) is written at every intent and at
//! every change of the deployment-wide facts (several times per repair): a built-in
//! object costs the apiserver a fraction of a `Deployment` write (no schema, no
//! validation rules), and its writes wake no watcher of `Deployment`s. It has no owner
//! reference (a foreground deletion would let the garbage collector take pending intents
//! before the deletion has used them): the deletion removes it, and one left behind is
//! told apart from a new `Deployment` of the same name by the uid it names. State written
//! before it existed (annotations of the `Deployment`) is read, moved with the first
//! write and then removed.
//!
//! Every write is one server-side apply with field manager `kubosh`, except settling an
//! intent, which rides on the deployment's next state write; objects kubosh owns
//! alone (`Instance`) carry the `resourceVersion` last seen, so a write over someone else's
//! change fails instead of losing it. Each [`Write`] costs one API write, plus one per disk
//! projection that changed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::api::{
    CompiledPackage as CompiledPackageResource, CompiledPackageSpec, Deployment, Disk, DiskSpec,
    Instance, InstanceNetwork, InstanceSpec, InstanceState as ApiInstanceState, OS_ANNOTATION,
    RECORD_ANNOTATION, Stemcell, StemcellVersion, cid_annotation, labels, recorded_cids,
};
use crate::left_behind::{LeftBehind, LeftInstance, record_digest};
use crate::names;
use kubosh_engine::state::{
    CompiledPackage, DeploymentMeta, DeploymentState, DiskRecord, InstanceRecord, InstanceState,
    Intent, OrphanedDisk, StateStore, StemcellRecord, StoreError, StoreFuture, Write,
    compiled_package_key,
};

/// The field manager of every write kubosh makes.
pub const FIELD_MANAGER: &str = "kubosh";

/// Key of the state `ConfigMap` with the engine's deployment-wide facts (JSON).
pub const STATE_KEY: &str = "state";

/// Prefix of the state `ConfigMap`'s keys that hold pending intents (JSON each).
pub const INTENT_KEY_PREFIX: &str = "intent.";

/// Annotation of the state `ConfigMap` with the uid of the `Deployment` it belongs to.
pub const DEPLOYMENT_UID_ANNOTATION: &str = "kubosh.io/deployment-uid";

/// Annotation of a `Deployment` with the engine's deployment-wide facts as kubosh wrote
/// them before the state `ConfigMap` (read, moved, removed).
const LEGACY_STATE_ANNOTATION: &str = "kubosh.io/state";

/// Prefix of the annotations of a `Deployment` with pending intents as kubosh wrote them
/// before the state `ConfigMap` (read, moved, removed).
const LEGACY_INTENT_PREFIX: &str = "intent.kubosh.io/";

/// Annotation of a `Deployment` with the request annotations the controller handled last
/// (JSON; the status says the same, but a status can be wiped or left out of a backup).
pub const HANDLED_ANNOTATION: &str = "kubosh.io/handled-requests";

/// The finalizer of orphaned `Disk`s: the disk in the cloud is deleted before the object.
pub const DISK_FINALIZER: &str = "kubosh.io/disk";

/// The engine state of one deployment, kept in the apiserver.
pub struct KubeStore {
    client: kube::Client,
    namespace: String,
    deployment: String,
    owner: Option<OwnerReference>,
    cache: Mutex<Option<Cache>>,
    writes: AtomicU64,
    /// What the last deploy of the deployment (its uid) left, taken instead of listing the
    /// `Instance`s when it still holds; this store leaves its own there ([`KubeStore::leave`]).
    reuse: Option<(Arc<LeftBehind>, String)>,
    /// Its last load started from what was left instead of listing the `Instance`s.
    reused: AtomicBool,
}

impl std::fmt::Debug for KubeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStore")
            .field("namespace", &self.namespace)
            .field("deployment", &self.deployment)
            .finish_non_exhaustive()
    }
}

/// An `Instance` object as last written or read, and the record it holds.
#[derive(Debug, Clone)]
struct InstanceObject {
    /// The object without its annotations and managed fields: the record is kept parsed
    /// beside it, and what is read of the object later (name, uid, resourceVersion,
    /// generation, status) is small. Kept for the whole deploy, for every instance.
    object: Instance,
    record: InstanceRecord,
    /// The [`record_digest`] of the record's text as written.
    digest: String,
}

impl InstanceObject {
    fn of(mut object: Instance, record: InstanceRecord, digest: String) -> InstanceObject {
        object.metadata.annotations = None;
        object.metadata.managed_fields = None;
        InstanceObject {
            object,
            record,
            digest,
        }
    }

    fn name(&self) -> &str {
        self.object.metadata.name.as_deref().unwrap_or_default()
    }
}

/// What the store knows of the objects it wrote or read last.
#[derive(Default)]
struct Cache {
    /// Instance objects by instance uuid.
    instances: BTreeMap<String, InstanceObject>,
    /// Disk objects by CID, as written.
    disks: BTreeMap<String, DiskSpec>,
    /// The attached projection of every disk an instance record lists, by CID. A disk the
    /// engine orphaned stays orphaned while a record still lists it (the record goes next);
    /// an orphan attached again gets this projection back when its orphan record goes.
    attached: BTreeMap<String, DiskSpec>,
    /// `Stemcell` object names by `name/version`.
    stemcells: BTreeMap<String, String>,
    /// The `Deployment` is gone (its orphaned disks outlive it): its state loads empty but
    /// for the orphans, and nothing may write its annotations (an apply would create it).
    deployment_gone: bool,
    /// The `Deployment`'s uid (the state `ConfigMap` names it).
    deployment_uid: Option<String>,
    /// The state was read from the `Deployment`'s annotations (written before the state
    /// `ConfigMap`): the next state write removes them.
    legacy_annotations: bool,
    /// The deployment-wide facts and intents as last written.
    meta: DeploymentMeta,
    /// The [`HANDLED_ANNOTATION`] as last written.
    handled: Option<String>,
    intents: BTreeMap<String, Intent>,
}

fn io(what: impl std::fmt::Display, e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(format!("{what}: {e}"))
}

fn corrupt(record: impl Into<String>, reason: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        record: record.into(),
        reason: reason.to_string(),
    }
}

/// A namespaced object kubosh writes and kube reads back.
pub trait NamespacedObject:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> NamespacedObject for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// The store's error for a refused write of `name` (a `K`).
fn apply_error<K: NamespacedObject>(name: &str, e: kube::Error) -> StoreError {
    let kind = K::kind(&()).to_string();
    if is_conflict(&e) {
        return io(
            format!("{kind} {name}"),
            "changed by someone else since kubosh read it (resourceVersion); another controller \
             may be running",
        );
    }
    io(format!("writing {kind} {name}"), e)
}

/// Whether the apiserver said the object is not there.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether the apiserver refused a write because the object (or its version) is not what
/// the writer assumed: it exists already, or it changed since it was read.
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl KubeStore {
    /// The state of `deployment` (a `Deployment` in `namespace`, which must exist). Objects
    /// it creates for the deployment are owned by `owner` (the `Deployment`), so deleting
    /// the resource without its finalizer still cleans them up.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        deployment: &str,
        owner: Option<OwnerReference>,
    ) -> KubeStore {
        KubeStore {
            client,
            namespace: namespace.to_string(),
            deployment: deployment.to_string(),
            owner,
            cache: Mutex::new(None),
            writes: AtomicU64::new(0),
            reuse: None,
            reused: AtomicBool::new(false),
        }
    }

    /// Whether its last load started from what the last deploy left (see
    /// [`KubeStore::reusing`]) instead of listing the `Instance`s.
    pub fn reused(&self) -> bool {
        self.reused.load(Ordering::Relaxed)
    }

    /// The store, starting from what the last deploy of deployment `uid` left in `left`
    /// when it still holds (instead of listing its `Instance`s), and leaving its own there.
    #[must_use]
    pub fn reusing(mut self, left: Arc<LeftBehind>, uid: &str) -> KubeStore {
        self.reuse = Some((left, uid.to_string()));
        self
    }

    /// Leaves the instance records as this store last read or wrote them for the next
    /// deploy of the deployment (see [`LeftBehind`]); nothing if it read nothing.
    pub async fn leave(&self) {
        let Some((left, uid)) = &self.reuse else {
            return;
        };
        let guard = self.cache.lock().await;
        let Some(cache) = guard.as_ref() else {
            return;
        };
        let instances = (cache.instances.values())
            .map(|o| LeftInstance {
                name: o.name().to_string(),
                uid: o.object.metadata.uid.clone(),
                // As a list would read it.
                record: serde_json::to_string(&sealed(&o.record)).unwrap_or_default(),
                digest: o.digest.clone(),
            })
            .collect();
        left.leave(uid, instances);
    }

    /// A reference to the `Instance` of `group`/`index` as this store last wrote or read
    /// it (for Events about it), without asking the apiserver.
    pub async fn instance_ref(&self, group: &str, index: u64) -> Option<ObjectReference> {
        let name = Self::instance_name(&self.deployment, group, index);
        let guard = self.cache.lock().await;
        let object = guard
            .as_ref()?
            .instances
            .values()
            .find(|o| o.name() == name)?;
        Some(ObjectReference {
            api_version: Some(Instance::api_version(&()).to_string()),
            kind: Some(Instance::kind(&()).to_string()),
            name: Some(object.name().to_string()),
            namespace: Some(self.namespace.clone()),
            uid: object.object.metadata.uid.clone(),
            resource_version: object.object.metadata.resource_version.clone(),
            ..ObjectReference::default()
        })
    }

    /// The deployment's instances as this store last read or wrote them (each record with
    /// its `Instance` object), read from the apiserver only if it has read nothing yet: what
    /// a deploy left, without listing them again.
    pub async fn instances_as_left(&self) -> Result<Vec<(InstanceRecord, Instance)>, StoreError> {
        let cache = self.cache().await?;
        let mut state = DeploymentState {
            meta: cache.meta.clone(),
            instances: (cache.instances.iter())
                .map(|(uuid, o)| (uuid.clone(), o.record.clone()))
                .collect(),
            ..DeploymentState::default()
        };
        // As a load says them: an update a failed deploy left unfinished is not complete.
        state.mark_unfinished_updates();
        Ok((state.instances.into_iter())
            .filter_map(|(uuid, record)| Some((record, cache.instances.get(&uuid)?.object.clone())))
            .collect())
    }

    /// API writes made so far (for budgets and benchmarks).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    fn api<K: NamespacedObject>(&self) -> Api<K> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Lists the objects labelled as `deployment`'s (names hashing to the same label value
    /// included: check `spec.deployment`).
    pub fn selector(deployment: &str) -> ListParams {
        ListParams::default().labels(&format!(
            "{}={}",
            labels::DEPLOYMENT,
            names::label_value(deployment)
        ))
    }

    /// The name of the `Instance` of `group`/`index`.
    pub fn instance_name(deployment: &str, group: &str, index: u64) -> String {
        names::object_name(
            &format!("{deployment}-{group}-{index}"),
            &format!("{deployment}\0{group}\0{index}"),
        )
    }

    /// The name of the `ConfigMap` with `deployment`'s deployment-wide state and intents.
    pub fn state_name(deployment: &str) -> String {
        names::object_name(
            &format!("{deployment}.kubosh-state"),
            &format!("{deployment}\0kubosh-state"),
        )
    }

    /// The name of the `Disk` of CID `cid`.
    pub fn disk_name(deployment: &str, cid: &str) -> String {
        names::object_name(
            &format!("{deployment}-{cid}"),
            &format!("{deployment}\0{cid}"),
        )
    }

    /// The name of the `CompiledPackage` of `package`.
    pub fn compiled_package_name(package: &CompiledPackage) -> String {
        let key = compiled_package_key(package);
        let hash = kubosh_base::digest::sha256_hex(key.as_bytes());
        names::object_name(&format!("{}-{}", package.name, &hash[..12]), &key)
    }

    /// Everything the engine remembers of the deployment, and what the store caches of the
    /// objects it came from.
    /// Its six reads go out at once: a deploy (a repair) waits for one round trip, not six.
    async fn load_all(&self) -> Result<(DeploymentState, Cache), StoreError> {
        let state_name = Self::state_name(&self.deployment);
        let selector = Self::selector(&self.deployment);
        let everywhere = ListParams::default();
        let left = (self.reuse.as_ref()).and_then(|(left, uid)| left.take(uid));
        self.reused.store(left.is_some(), Ordering::Relaxed);
        let (deployment, config_map, instances, disks, packages, stemcells) = tokio::try_join!(
            async {
                (self.api::<Deployment>().get_opt(&self.deployment).await)
                    .map_err(|e| io(format!("deployment {}", self.deployment), e))
            },
            async {
                (self.api::<ConfigMap>().get_opt(&state_name).await)
                    .map_err(|e| io(format!("config map {state_name}"), e))
            },
            async {
                if left.is_some() {
                    return Ok(Vec::new());
                }
                (self.api::<Instance>().list(&selector).await)
                    .map(|l| l.items)
                    .map_err(|e| io("listing instances", e))
            },
            async {
                (self.api::<Disk>().list(&selector).await).map_err(|e| io("listing disks", e))
            },
            async {
                (self
                    .api::<CompiledPackageResource>()
                    .list(&everywhere)
                    .await)
                    .map_err(|e| io("listing compiled packages", e))
            },
            async {
                (self.api::<Stemcell>().list(&everywhere).await)
                    .map_err(|e| io("listing stemcells", e))
            },
        )?;
        let mut state = DeploymentState::default();
        let mut cache = Cache::default();
        self.load_deployment(deployment, config_map, &mut state, &mut cache)?;
        match left {
            Some(left) => {
                for (record, digest, object) in left {
                    let held = InstanceObject::of(object, record, digest);
                    self.hold_instance(held, &mut state, &mut cache);
                }
            }
            None => self.load_instances(instances, &mut state, &mut cache)?,
        }
        self.load_disks(disks.items, &mut state, &mut cache);
        load_namespace_records(packages.items, stemcells.items, &mut state, &mut cache);
        Ok((state, cache))
    }

    /// The deployment-wide facts and pending intents: the state `ConfigMap` (or, where
    /// none names the `Deployment`, the annotations kubosh wrote on it before).
    fn load_deployment(
        &self,
        deployment: Option<Deployment>,
        config_map: Option<ConfigMap>,
        state: &mut DeploymentState,
        cache: &mut Cache,
    ) -> Result<(), StoreError> {
        cache.deployment_gone = deployment.is_none();
        cache.deployment_uid = deployment.as_ref().and_then(|d| d.uid());
        let name = Self::state_name(&self.deployment);
        let ours = config_map.filter(|c| {
            cache.deployment_uid.is_some()
                && c.annotations().get(DEPLOYMENT_UID_ANNOTATION) == cache.deployment_uid.as_ref()
        });
        let no_annotations = BTreeMap::new();
        let annotations = deployment
            .as_ref()
            .map_or(&no_annotations, |d| d.annotations());
        cache.handled = annotations.get(HANDLED_ANNOTATION).cloned();
        let (records, state_key, intent_prefix, source) = match &ours {
            Some(c) => (
                c.data.as_ref().unwrap_or(&no_annotations),
                STATE_KEY,
                INTENT_KEY_PREFIX,
                format!("config map {name}"),
            ),
            None => (
                annotations,
                LEGACY_STATE_ANNOTATION,
                LEGACY_INTENT_PREFIX,
                format!("deployment {}", self.deployment),
            ),
        };
        if let Some(text) = records.get(state_key) {
            state.meta = serde_json::from_str(text)
                .map_err(|e| corrupt(format!("{state_key} of {source}"), e))?;
        }
        for (key, text) in records {
            if key.starts_with(intent_prefix) {
                let intent: Intent = serde_json::from_str(text)
                    .map_err(|e| corrupt(format!("{key} of {source}"), e))?;
                state.intents.insert(intent.id.clone(), intent);
            }
        }
        cache.legacy_annotations = ours.is_none()
            && (annotations.keys())
                .any(|k| k == LEGACY_STATE_ANNOTATION || k.starts_with(LEGACY_INTENT_PREFIX));
        cache.meta = state.meta.clone();
        cache.intents = state.intents.clone();
        Ok(())
    }

    /// The instance records: the deployment's `Instance` objects.
    fn load_instances(
        &self,
        instances: Vec<Instance>,
        state: &mut DeploymentState,
        cache: &mut Cache,
    ) -> Result<(), StoreError> {
        for object in instances {
            let name = object.name_any();
            // Another deployment whose name hashes to the same label value is not ours.
            if object.spec.deployment != self.deployment {
                continue;
            }
            let text = object.annotations().get(RECORD_ANNOTATION).ok_or_else(|| {
                corrupt(
                    format!("instance {name}"),
                    format!("annotation {RECORD_ANNOTATION} is missing"),
                )
            })?;
            let record: InstanceRecord =
                serde_json::from_str(text).map_err(|e| corrupt(format!("instance {name}"), e))?;
            let digest = record_digest(text);
            self.hold_instance(InstanceObject::of(object, record, digest), state, cache);
        }
        Ok(())
    }

    /// An instance record (with its object) in the state and the cache.
    fn hold_instance(&self, held: InstanceObject, state: &mut DeploymentState, cache: &mut Cache) {
        for disk in &held.record.disks {
            cache.attached.insert(
                disk.cid.clone(),
                self.attached_projection(held.name(), &held.record, disk),
            );
        }
        state
            .instances
            .insert(held.record.uuid.clone(), held.record.clone());
        cache.instances.insert(held.record.uuid.clone(), held);
    }

    /// Active and orphaned disks: the deployment's `Disk` objects.
    fn load_disks(&self, disks: Vec<Disk>, state: &mut DeploymentState, cache: &mut Cache) {
        for object in disks {
            if object.spec.deployment != self.deployment {
                continue;
            }
            if object.spec.orphaned {
                let orphan = orphan_of(&object.spec);
                state.orphaned_disks.insert(orphan.disk.cid.clone(), orphan);
            }
            cache.disks.insert(object.spec.cid.clone(), object.spec);
        }
    }

    async fn apply<K: NamespacedObject>(
        &self,
        name: &str,
        object: &Value,
    ) -> Result<K, StoreError> {
        (self.apply_object(name, object).await).map_err(|e| apply_error::<K>(name, e))
    }

    /// [`KubeStore::apply`], the apiserver's error as it is.
    async fn apply_object<K: NamespacedObject>(
        &self,
        name: &str,
        object: &Value,
    ) -> Result<K, kube::Error> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.api::<K>()
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object),
            )
            .await
    }

    /// The `Instance` `patch` (refused: its object changed since it was `read`) applied
    /// again over the object as it is now, if neither its record nor its spec changed: a
    /// status write (the health watch's, a deploy's report) changes an object's version,
    /// not what kubosh wrote.
    async fn apply_over_status_change(
        &self,
        name: &str,
        mut patch: Value,
        read: &InstanceObject,
        conflict: kube::Error,
    ) -> Result<Instance, StoreError> {
        let now = (self.api::<Instance>().get_opt(name).await)
            .map_err(|e| io(format!("reading Instance {name}"), e))?;
        let unchanged = |now: &Instance| {
            let digest = (now.annotations().get(RECORD_ANNOTATION)).map(|text| record_digest(text));
            digest.as_ref() == Some(&read.digest) && now.spec == read.object.spec
        };
        let Some(now) = now.filter(unchanged) else {
            return Err(apply_error::<Instance>(name, conflict));
        };
        patch["metadata"]["resourceVersion"] = json!(now.metadata.resource_version);
        self.apply(name, &patch).await
    }

    async fn delete<K: NamespacedObject>(&self, name: &str) -> Result<(), StoreError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        match self.api::<K>().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(io(format!("deleting {} {name}", K::kind(&())), e)),
        }
    }

    fn owner_references(&self) -> Value {
        match &self.owner {
            Some(owner) => json!([owner]),
            None => json!([]),
        }
    }

    fn labels(&self, group: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                labels::DEPLOYMENT.to_string(),
                names::label_value(&self.deployment),
            ),
            (
                labels::INSTANCE_GROUP.to_string(),
                names::label_value(group),
            ),
        ])
    }

    /// Fails for a deleted `Deployment`: an apply of its state would create it again.
    fn check_present(&self, cache: &Cache) -> Result<(), StoreError> {
        if cache.deployment_gone {
            return Err(io(
                format!("deployment {}", self.deployment),
                "it does not exist (deleted); only its orphaned disks are left",
            ));
        }
        Ok(())
    }

    /// The deployment-wide facts and intents as the cache holds them, in the state
    /// `ConfigMap`: all of them, so one apply replaces the set (an intent left out is
    /// removed). State still in the `Deployment`'s annotations is removed from there after.
    async fn write_deployment_state(&self, cache: &mut Cache) -> Result<(), StoreError> {
        self.check_present(cache)?;
        let mut data = serde_json::Map::new();
        let meta = serde_json::to_string(&cache.meta).map_err(|e| io("deployment state", e))?;
        data.insert(STATE_KEY.into(), Value::String(meta));
        for intent in cache.intents.values() {
            let text = serde_json::to_string(intent).map_err(|e| io("intent", e))?;
            data.insert(
                format!("{INTENT_KEY_PREFIX}{}", names::key_name(&intent.id)),
                Value::String(text),
            );
        }
        let name = Self::state_name(&self.deployment);
        let patch = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "labels": {labels::DEPLOYMENT: names::label_value(&self.deployment)},
                "annotations": {DEPLOYMENT_UID_ANNOTATION: cache.deployment_uid},
            },
            "data": data,
        });
        self.apply::<ConfigMap>(&name, &patch).await?;
        if cache.legacy_annotations {
            self.write_deployment_annotations(cache).await?;
            cache.legacy_annotations = false;
        }
        Ok(())
    }

    /// The `Deployment`'s kubosh annotations as the cache holds them: the handled requests
    /// alone (one apply replaces the set: state written there before is removed).
    async fn write_deployment_annotations(&self, cache: &Cache) -> Result<(), StoreError> {
        self.check_present(cache)?;
        let mut annotations = serde_json::Map::new();
        if let Some(handled) = &cache.handled {
            annotations.insert(HANDLED_ANNOTATION.into(), Value::String(handled.clone()));
        }
        let patch = json!({
            "apiVersion": Deployment::api_version(&()),
            "kind": Deployment::kind(&()),
            "metadata": {"name": self.deployment, "annotations": annotations},
        });
        self.apply::<Deployment>(&self.deployment, &patch).await?;
        Ok(())
    }

    /// Removes the state `ConfigMap` (the deployment's deletion has succeeded: nothing is
    /// left for it to hold).
    pub async fn forget_deployment_state(&self) -> Result<(), StoreError> {
        self.delete::<ConfigMap>(&Self::state_name(&self.deployment))
            .await?;
        if let Some(cache) = self.cache.lock().await.as_mut() {
            cache.meta = DeploymentMeta::default();
            cache.intents.clear();
        }
        Ok(())
    }

    async fn write_instance(
        &self,
        cache: &mut Cache,
        record: &InstanceRecord,
    ) -> Result<(), StoreError> {
        let name = Self::instance_name(&self.deployment, &record.group, record.index);
        let previous = cache.instances.get(&record.uuid).cloned();
        let spec = instance_spec(&self.deployment, record);
        let text = serde_json::to_string(&sealed(record))
            .map_err(|e| io(format!("instance {}", record.name()), e))?;
        let mut labels = self.labels(&record.group);
        labels.insert(labels::INDEX.to_string(), record.index.to_string());
        let mut metadata = json!({
            "name": name,
            "labels": labels,
            "annotations": {RECORD_ANNOTATION: text},
            "ownerReferences": self.owner_references(),
        });
        if let Some(previous) = &previous
            && previous.name() == name
            && let Some(rv) = &previous.object.metadata.resource_version
        {
            metadata["resourceVersion"] = json!(rv);
        }
        let patch = json!({
            "apiVersion": Instance::api_version(&()),
            "kind": Instance::kind(&()),
            "metadata": metadata,
            "spec": spec,
        });
        let digest = record_digest(&text);
        let written: Instance = match (self.apply_object(&name, &patch).await, &previous) {
            (Err(e), Some(read)) if is_conflict(&e) && read.name() == name => {
                (self.apply_over_status_change(&name, patch, read, e)).await?
            }
            (written, _) => written.map_err(|e| apply_error::<Instance>(&name, e))?,
        };
        cache.instances.insert(
            record.uuid.clone(),
            InstanceObject::of(written, record.clone(), digest),
        );
        // Renamed (`migrated_from`): the object under the old name goes.
        if let Some(old) = previous
            && old.name() != name
        {
            self.delete::<Instance>(old.name()).await?;
        }

        // The disks it holds, as `Disk` objects; an orphan keeps its object as it is.
        cache
            .attached
            .retain(|_, d| d.instance.as_deref() != Some(name.as_str()));
        for disk in &record.disks {
            let projected = self.attached_projection(&name, record, disk);
            cache.attached.insert(disk.cid.clone(), projected.clone());
            let current = cache.disks.get(&disk.cid);
            if current.is_some_and(|d| d.orphaned) || current == Some(&projected) {
                continue;
            }
            self.write_disk(cache, projected).await?;
        }
        // Disks it let go of that are not orphaned (deleted, or about to be orphaned).
        let gone: Vec<String> = cache
            .disks
            .values()
            .filter(|d| {
                !d.orphaned
                    && d.instance.as_deref() == Some(name.as_str())
                    && !record.disks.iter().any(|r| r.cid == d.cid)
            })
            .map(|d| d.cid.clone())
            .collect();
        for cid in gone {
            self.delete::<Disk>(&Self::disk_name(&self.deployment, &cid))
                .await?;
            cache.disks.remove(&cid);
        }
        Ok(())
    }

    /// The `Disk` of `disk` while instance object `name` (of `record`) holds it.
    fn attached_projection(
        &self,
        name: &str,
        record: &InstanceRecord,
        disk: &DiskRecord,
    ) -> DiskSpec {
        DiskSpec {
            cid: disk.cid.clone(),
            size: i64::try_from(disk.size_mib).unwrap_or(i64::MAX),
            deployment: self.deployment.clone(),
            instance_group: record.group.clone(),
            name: disk.name.clone(),
            instance: Some(name.to_string()),
            az: record.az.clone(),
            disk_type: None,
            cloud_properties: disk.cloud_properties.as_object().cloned(),
            orphaned: false,
            orphaned_at: None,
            orphaned_from: None,
            orphaned_from_index: None,
            snapshots: disk.snapshots.clone(),
        }
    }

    /// Writes a `Disk`. An orphan has no owner (it outlives its deployment) and carries
    /// [`DISK_FINALIZER`] (it is the only record of a disk in the cloud: deleting the object
    /// deletes the disk first); an attached disk's object is a projection of its instance's
    /// record and has neither.
    async fn write_disk(&self, cache: &mut Cache, spec: DiskSpec) -> Result<(), StoreError> {
        let keep = spec.orphaned;
        self.apply_disk(&spec, keep).await?;
        cache.disks.insert(spec.cid.clone(), spec);
        Ok(())
    }

    async fn apply_disk(&self, spec: &DiskSpec, finalizer: bool) -> Result<(), StoreError> {
        let name = Self::disk_name(&self.deployment, &spec.cid);
        let mut metadata = json!({
            "name": name,
            "labels": self.labels(&spec.instance_group),
        });
        if spec.orphaned {
            if finalizer {
                metadata["finalizers"] = json!([DISK_FINALIZER]);
            }
        } else {
            metadata["ownerReferences"] = self.owner_references();
        }
        let patch = json!({
            "apiVersion": Disk::api_version(&()),
            "kind": Disk::kind(&()),
            "metadata": metadata,
            "spec": spec,
        });
        self.apply::<Disk>(&name, &patch).await?;
        Ok(())
    }

    async fn delete_instance(&self, cache: &mut Cache, uuid: &str) -> Result<(), StoreError> {
        let Some(object) = cache.instances.remove(uuid) else {
            return Ok(());
        };
        let name = object.name().to_string();
        self.delete::<Instance>(&name).await?;
        cache
            .attached
            .retain(|_, d| d.instance.as_deref() != Some(name.as_str()));
        let attached: Vec<String> = cache
            .disks
            .values()
            .filter(|d| !d.orphaned && d.instance.as_deref() == Some(name.as_str()))
            .map(|d| d.cid.clone())
            .collect();
        for cid in attached {
            self.delete::<Disk>(&Self::disk_name(&self.deployment, &cid))
                .await?;
            cache.disks.remove(&cid);
        }
        Ok(())
    }

    async fn write_orphan(
        &self,
        cache: &mut Cache,
        orphan: &OrphanedDisk,
    ) -> Result<(), StoreError> {
        let group = orphan
            .instance
            .split_once('/')
            .map_or(orphan.instance.as_str(), |(g, _)| g)
            .to_string();
        let az = (orphan.az.clone())
            .or_else(|| cache.disks.get(&orphan.disk.cid).and_then(|d| d.az.clone()));
        let spec = DiskSpec {
            cid: orphan.disk.cid.clone(),
            size: i64::try_from(orphan.disk.size_mib).unwrap_or(i64::MAX),
            deployment: self.deployment.clone(),
            instance_group: group,
            name: orphan.disk.name.clone(),
            instance: None,
            az,
            disk_type: None,
            cloud_properties: orphan.disk.cloud_properties.as_object().cloned(),
            orphaned: true,
            orphaned_at: orphan
                .orphaned_at
                .parse::<k8s_openapi::jiff::Timestamp>()
                .ok()
                .map(Time),
            orphaned_from: Some(orphan.instance.clone()),
            orphaned_from_index: orphan.index.and_then(|i| i64::try_from(i).ok()),
            snapshots: orphan.disk.snapshots.clone(),
        };
        self.write_disk(cache, spec).await
    }

    async fn write_compiled(&self, package: &CompiledPackage) -> Result<(), StoreError> {
        let name = Self::compiled_package_name(package);
        let spec = CompiledPackageSpec {
            package: package.name.clone(),
            version: package.version.clone(),
            fingerprint: Some(package.fingerprint.clone()),
            stemcell: StemcellVersion {
                os: package.stemcell_os.clone(),
                version: package.stemcell_version.clone(),
            },
            dependency_key: package.dependency_key.clone(),
            build: i64::try_from(package.build).unwrap_or(i64::MAX),
            blobstore_id: package.blob_id.clone(),
            sha1: package.sha1.clone(),
        };
        let patch = json!({
            "apiVersion": CompiledPackageResource::api_version(&()),
            "kind": CompiledPackageResource::kind(&()),
            "metadata": {"name": name},
            "spec": spec,
        });
        self.apply::<CompiledPackageResource>(&name, &patch).await?;
        Ok(())
    }

    /// Writes (or, with `None`, removes) the CID annotation of one CPI's copy of the
    /// `Stemcell` resource of `key` ([`StemcellRecord::key`]: `name/version`, `@cpi` for a
    /// named CPI's copy). A merge patch, not an apply: each copy's annotation is written
    /// on its own, and the others stay.
    async fn write_stemcell(
        &self,
        cache: &mut Cache,
        key: &str,
        record: Option<&StemcellRecord>,
    ) -> Result<(), StoreError> {
        let (key, cpi) = match key.split_once('@') {
            Some((stemcell, cpi)) => (stemcell, Some(cpi)),
            None => (key, None),
        };
        if !cache.stemcells.contains_key(key) {
            // A Stemcell resource created since the last load.
            let list = self
                .api::<Stemcell>()
                .list(&ListParams::default())
                .await
                .map_err(|e| io("listing stemcells", e))?;
            for object in list {
                let k = format!("{}/{}", object.spec.name, object.spec.version.as_str());
                cache.stemcells.insert(k, object.name_any());
            }
        }
        let Some(name) = cache.stemcells.get(key).cloned() else {
            if record.is_none() {
                return Ok(());
            }
            return Err(io(
                format!("stemcell {key}"),
                "no Stemcell resource names it, so its CID has nowhere to go",
            ));
        };
        let annotations = match record {
            Some(r) => json!({cid_annotation(cpi): r.cid, OS_ANNOTATION: r.os}),
            None => json!({cid_annotation(cpi): null}),
        };
        self.writes.fetch_add(1, Ordering::Relaxed);
        let patch = json!({"metadata": {"annotations": annotations}});
        self.api::<Stemcell>()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| io(format!("writing Stemcell {name}"), e))?;
        Ok(())
    }

    /// Records which request annotations were handled ([`HANDLED_ANNOTATION`], `text`) with
    /// the deployment's other kubosh annotations.
    pub async fn record_handled_requests(&self, text: String) -> Result<(), StoreError> {
        let mut guard = self.cache().await?;
        if guard.handled.as_ref() == Some(&text) {
            return Ok(());
        }
        let previous = guard.handled.replace(text);
        // State not yet moved out of the annotations goes first, or this write would drop it.
        let result = if guard.legacy_annotations {
            self.write_deployment_state(&mut guard).await
        } else {
            self.write_deployment_annotations(&guard).await
        };
        if result.is_err() {
            guard.handled = previous;
        }
        result
    }

    /// What this store holds, read from the apiserver first if it has read nothing yet.
    async fn cache(&self) -> Result<tokio::sync::MappedMutexGuard<'_, Cache>, StoreError> {
        let mut guard = self.cache.lock().await;
        if guard.is_none() {
            *guard = Some(self.load_all().await?.1);
        }
        tokio::sync::MutexGuard::try_map(guard, Option::as_mut)
            .map_err(|_| io("state store", "not loaded"))
    }

    async fn write_one(&self, write: &Write) -> Result<(), StoreError> {
        let mut guard = self.cache().await?;
        let cache = &mut *guard;
        match write {
            Write::Instance(record) => self.write_instance(cache, record).await,
            Write::DeleteInstance(uuid) => self.delete_instance(cache, uuid).await,
            Write::Intent(intent) => {
                let previous = cache.intents.insert(intent.id.clone(), intent.clone());
                let result = self.write_deployment_state(cache).await;
                if result.is_err() {
                    match previous {
                        Some(p) => cache.intents.insert(p.id.clone(), p),
                        None => cache.intents.remove(&intent.id),
                    };
                }
                result
            }
            // Settling waits for the next write of the deployment's state (the next
            // intent, the deploy's last `Meta`): an intent left pending by a crash is one
            // whose owner carries its result, which recovery settles without touching the
            // cloud. One write per creation instead of two.
            Write::DeleteIntent(id) => {
                cache.intents.remove(id);
                Ok(())
            }
            Write::Meta(meta) => {
                let previous = std::mem::replace(&mut cache.meta, meta.clone());
                let result = self.write_deployment_state(cache).await;
                if result.is_err() {
                    cache.meta = previous;
                }
                result
            }
            Write::OrphanedDisk(orphan) => self.write_orphan(cache, orphan).await,
            Write::DeleteOrphanedDisk(cid) => {
                if !cache.disks.get(cid).is_some_and(|d| d.orphaned) {
                    return Ok(());
                }
                // Attached again: the object shows the instance that holds it now.
                if let Some(attached) = cache.attached.get(cid).cloned() {
                    return self.write_disk(cache, attached).await;
                }
                // Its finalizer first, or the object would wait for the disk's deletion,
                // which is what this write records.
                if let Some(spec) = cache.disks.get(cid).cloned() {
                    self.apply_disk(&spec, false).await?;
                }
                self.delete::<Disk>(&Self::disk_name(&self.deployment, cid))
                    .await?;
                cache.disks.remove(cid);
                Ok(())
            }
            Write::CompiledPackage(package) => self.write_compiled(package).await,
            Write::Stemcell(record) => {
                self.write_stemcell(cache, &record.key(), Some(record))
                    .await
            }
            Write::DeleteStemcell(key) => self.write_stemcell(cache, key, None).await,
        }
    }
}

impl StateStore for KubeStore {
    fn load_records(&self) -> StoreFuture<'_, DeploymentState> {
        Box::pin(async move {
            let mut guard = self.cache.lock().await;
            let (state, cache) = self.load_all().await?;
            *guard = Some(cache);
            Ok(state)
        })
    }

    fn orphaned_disks(&self) -> StoreFuture<'_, BTreeMap<String, OrphanedDisk>> {
        Box::pin(async move {
            let cache = self.cache().await?;
            Ok((cache.disks.values())
                .filter(|d| d.orphaned)
                .map(|d| (d.cid.clone(), orphan_of(d)))
                .collect())
        })
    }

    fn stemcells(&self) -> StoreFuture<'_, BTreeMap<String, StemcellRecord>> {
        Box::pin(async move {
            let stemcells = self
                .api::<Stemcell>()
                .list(&ListParams::default())
                .await
                .map_err(|e| io("listing stemcells", e))?;
            Ok((stemcells.iter())
                .flat_map(stemcell_records)
                .map(|r| (r.key(), r))
                .collect())
        })
    }

    fn write<'a>(&'a self, write: &'a Write) -> StoreFuture<'a, ()> {
        Box::pin(self.write_one(write))
    }
}

/// What all deployments of the namespace share: compiled packages, and the cloud CIDs of
/// stemcells.
fn load_namespace_records(
    packages: Vec<CompiledPackageResource>,
    stemcells: Vec<Stemcell>,
    state: &mut DeploymentState,
    cache: &mut Cache,
) {
    for object in packages {
        let record = compiled_of(&object.spec);
        state
            .compiled_packages
            .insert(compiled_package_key(&record), record);
    }
    for object in stemcells {
        let key = format!("{}/{}", object.spec.name, object.spec.version.as_str());
        for record in stemcell_records(&object) {
            state.stemcells.insert(record.key(), record);
        }
        cache.stemcells.insert(key, object.name_any());
    }
}

/// The records of every cloud's copy of `object` its annotations name.
fn stemcell_records(object: &Stemcell) -> Vec<StemcellRecord> {
    let annotations = object.annotations();
    let os = annotations
        .get(OS_ANNOTATION)
        .cloned()
        .or_else(|| object.status.as_ref().and_then(|s| s.os.clone()))
        .unwrap_or_default();
    (recorded_cids(annotations).into_iter())
        .map(|(cpi, cid)| StemcellRecord {
            name: object.spec.name.clone(),
            version: object.spec.version.as_str().to_string(),
            os: os.clone(),
            cid,
            cpi,
        })
        .collect()
}

/// The readable fields of an `Instance`, from its record.
fn instance_spec(deployment: &str, record: &InstanceRecord) -> InstanceSpec {
    let vm_networks = record.vm.as_ref().map(|vm| &vm.networks);
    // The network with the default gateway first, as `kubectl get` shows the first one.
    let is_default = |name: &str| {
        vm_networks
            .and_then(|n| n.get(name))
            .and_then(|n| n.get("default"))
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "gateway"))
    };
    let mut networks: Vec<InstanceNetwork> = record
        .ips
        .iter()
        .map(|(name, ip)| InstanceNetwork {
            name: name.clone(),
            ip: Some(ip.ip.clone()),
        })
        .collect();
    if let Some(Value::Object(settings)) = vm_networks {
        for (name, s) in settings {
            if !networks.iter().any(|n| &n.name == name) {
                networks.push(InstanceNetwork {
                    name: name.clone(),
                    ip: s.get("ip").and_then(Value::as_str).map(String::from),
                });
            }
        }
    }
    networks.sort_by_key(|n| !is_default(&n.name));
    InstanceSpec {
        deployment: deployment.to_string(),
        instance_group: record.group.clone(),
        index: i32::try_from(record.index).unwrap_or(i32::MAX),
        id: record.uuid.clone(),
        az: record.az.clone(),
        bootstrap: record.bootstrap,
        state: match record.state {
            InstanceState::Started => ApiInstanceState::Started,
            InstanceState::Stopped => ApiInstanceState::Stopped,
            InstanceState::Detached => ApiInstanceState::Detached,
        },
        vm_cid: record.vm.as_ref().map(|vm| vm.cid.clone()),
        agent_id: record.vm.as_ref().map(|vm| vm.agent_id.clone()),
        networks,
        disk_cids: record.disks.iter().map(|d| d.cid.clone()).collect(),
        stemcell: record.vm.as_ref().map(|vm| vm.stemcell.clone()),
    }
}

/// `record` as others may read it: the VM's `env` (agent password hash, mbus credentials,
/// interpolated variables) sealed, which change detection compares as well as the value.
fn sealed(record: &InstanceRecord) -> InstanceRecord {
    let mut record = record.clone();
    if let Some(vm) = &mut record.vm {
        vm.env = kubosh_base::secret::seal(&vm.env);
    }
    if let Some(inactive) = &mut record.inactive_vm {
        inactive.vm.env = kubosh_base::secret::seal(&inactive.vm.env);
    }
    if let Some(applied) = &mut record.applied {
        applied.env = kubosh_base::secret::seal(&applied.env);
    }
    record
}

/// The engine's orphaned-disk record of a `Disk`.
fn orphan_of(spec: &DiskSpec) -> OrphanedDisk {
    OrphanedDisk {
        disk: DiskRecord {
            cid: spec.cid.clone(),
            name: spec.name.clone(),
            size_mib: u64::try_from(spec.size).unwrap_or_default(),
            cloud_properties: spec
                .cloud_properties
                .clone()
                .map_or(Value::Null, Value::Object),
            snapshots: spec.snapshots.clone(),
            cpi: None,
        },
        instance: spec.orphaned_from.clone().unwrap_or_default(),
        index: spec.orphaned_from_index.and_then(|i| u64::try_from(i).ok()),
        az: spec.az.clone(),
        orphaned_at: spec
            .orphaned_at
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
    }
}

/// The engine's record of a `CompiledPackage`.
fn compiled_of(spec: &CompiledPackageSpec) -> CompiledPackage {
    CompiledPackage {
        name: spec.package.clone(),
        version: spec.version.clone(),
        fingerprint: spec.fingerprint.clone().unwrap_or_default(),
        stemcell_os: spec.stemcell.os.clone(),
        stemcell_version: spec.stemcell.version.clone(),
        dependency_key: spec.dependency_key.clone(),
        build: u64::try_from(spec.build).unwrap_or(1),
        blob_id: spec.blobstore_id.clone(),
        sha1: spec.sha1.clone(),
    }
}
