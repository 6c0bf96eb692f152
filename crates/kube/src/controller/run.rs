//! The controllers of `kubosh controller`, run together in one process: `Deployment` (also
//! woken by its `CloudConfig`, the `Release`s and `Stemcell`s of its namespace, its own
//! `Instance`s and the shared links of the deployments it consumes from), `Release`, `Stemcell` and (orphaned) `Disk`, and, when the controller hears
//! heartbeats, the instances' health ([`super::health`]). Reconciles run with bounded
//! concurrency; the deploys they start run beside them (see [`super::deployment`]).

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::finalizer::{self, Error as FinalizerError, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::artifacts::{
    ArtifactContext, ReconcileError, STEMCELL_FINALIZER, delete_stemcell, reconcile_release,
    reconcile_stemcell,
};
use super::backoff::Backoffs;
use super::deployment::{self, DeploymentContext};
use super::disk;
use super::health::{self, HealthWatch};
use crate::api::{
    CloudConfig, CpiConfig, Deployment, Disk, ErrandRun, Instance, Release, RuntimeConfig, Stemcell,
};

/// How many reconciles of one kind run at once.
pub const CONCURRENCY: u16 = 16;

/// How often a deleted stemcell still in use is looked at again.
const IN_USE_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// Where the controllers look.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// One namespace, or all of them.
    pub namespace: Option<String>,
}

impl Scope {
    fn api<K>(&self, client: &kube::Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
}

struct Artifacts {
    ctx: ArtifactContext,
    backoffs: Backoffs,
    metrics: Arc<crate::metrics::Metrics>,
}

/// Runs `reconcile`, timing it into the metrics as a reconcile of `controller`.
async fn timed<T, E>(
    metrics: &crate::metrics::Metrics,
    controller: &str,
    reconcile: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let started = std::time::Instant::now();
    let result = reconcile.await;
    metrics.reconciled(controller, started.elapsed(), result.is_ok());
    result
}

async fn release(r: Arc<Release>, a: Arc<Artifacts>) -> Result<Action, ReconcileError> {
    timed(&a.metrics, "release", release_untimed(r, a.clone())).await
}

async fn release_untimed(r: Arc<Release>, a: Arc<Artifacts>) -> Result<Action, ReconcileError> {
    reconcile_release(&r, &a.ctx).await?;
    a.backoffs.reset(&r.uid().unwrap_or_default());
    Ok(Action::await_change())
}

/// Reconciles a `Stemcell`; with a cloud, under the finalizer that deletes the cloud's
/// copy with the resource.
async fn stemcell(
    s: Arc<Stemcell>,
    a: Arc<Artifacts>,
) -> Result<Action, FinalizerError<ReconcileError>> {
    timed(&a.metrics, "stemcell", stemcell_untimed(s, a.clone())).await
}

async fn stemcell_untimed(
    s: Arc<Stemcell>,
    a: Arc<Artifacts>,
) -> Result<Action, FinalizerError<ReconcileError>> {
    let uid = s.uid().unwrap_or_default();
    let Some(cloud) = a.ctx.cloud.clone() else {
        reconcile_stemcell(&s, &a.ctx)
            .await
            .map_err(FinalizerError::ApplyFailed)?;
        a.backoffs.reset(&uid);
        return Ok(Action::await_change());
    };
    let api: Api<Stemcell> =
        Api::namespaced(a.ctx.client.clone(), &s.namespace().unwrap_or_default());
    let outcome = finalizer(&api, STEMCELL_FINALIZER, s, |event| async {
        match event {
            finalizer::Event::Apply(s) => reconcile_stemcell(&s, &a.ctx).await.map(|_| ()),
            finalizer::Event::Cleanup(s) => delete_stemcell(&s, &a.ctx, cloud.as_ref()).await,
        }
        .map(|()| Action::await_change())
    })
    .await;
    let action = match outcome {
        // Not a failure: looked at again soon, without growing the backoff.
        Err(FinalizerError::CleanupFailed(ReconcileError::InUse { .. })) => {
            Action::requeue(IN_USE_POLL)
        }
        other => other?,
    };
    a.backoffs.reset(&uid);
    Ok(action)
}

fn artifact_error<K: Resource + ResourceExt, E: std::fmt::Display>(
    object: Arc<K>,
    error: &E,
    a: Arc<Artifacts>,
) -> Action {
    let delay = a.backoffs.next(&object.uid().unwrap_or_default());
    tracing::warn!(object = %object.name_any(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Runs the controllers (and the health watch, with `health`) until `shutdown` completes
/// (then in-flight reconciles finish).
pub async fn run(
    deployments: Arc<DeploymentContext>,
    artifacts: ArtifactContext,
    scope: Scope,
    health: Option<HealthWatch>,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    let client = deployments.client.clone();
    let config = Config::default().concurrency(CONCURRENCY);
    let watch = watcher::Config::default().any_semantic();

    let (deployment_loop, synced_store) = deployment_controller(
        &client,
        &scope,
        &watch,
        &config,
        deployments.clone(),
        shutdown.clone(),
    );
    let artifacts = Arc::new(Artifacts {
        ctx: artifacts,
        backoffs: Backoffs::default(),
        metrics: deployments.metrics.clone(),
    });
    let release_loop = Controller::new(scope.api::<Release>(&client), watch.clone())
        .with_config(config.clone())
        .graceful_shutdown_on(shutdown.clone())
        .run(release, artifact_error, artifacts.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "release reconcile");
            }
        });
    let stemcell_loop = Controller::new(scope.api::<Stemcell>(&client), watch.clone())
        .with_config(config.clone())
        .graceful_shutdown_on(shutdown.clone())
        .run(stemcell, artifact_error, artifacts)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "stemcell reconcile");
            }
        });
    let errand_loop = errand_run_controller(
        &client,
        &scope,
        &watch,
        &config,
        deployments.clone(),
        shutdown.clone(),
    );
    let disk_loop = Controller::new(scope.api::<Disk>(&client), watch)
        .with_config(config)
        .graceful_shutdown_on(shutdown.clone())
        .run(
            |d, ctx| async move {
                let metrics = ctx.metrics.clone();
                timed(&metrics, "disk", disk::reconcile(d, ctx)).await
            },
            disk::error_policy,
            deployments.clone(),
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "disk reconcile");
            }
        });
    let details_loop = {
        let (ctx, shutdown) = (deployments.clone(), shutdown.clone());
        async move {
            if let Some(interval) = ctx.details_interval {
                super::details::run(ctx, interval, shutdown).await;
            }
        }
    };
    let health_loop = health::run(
        deployments.clone(),
        scope.api::<Instance>(&client),
        synced_store.clone(),
        health,
        shutdown,
    );
    // Ready once the deployments' cache holds them all.
    let synced = async {
        if synced_store.wait_until_ready().await.is_ok() {
            deployments.readiness.synced();
        }
    };
    futures::join!(
        deployment_loop,
        release_loop,
        stemcell_loop,
        disk_loop,
        errand_loop,
        details_loop,
        health_loop,
        synced
    );
}

/// The `ErrandRun` controller, woken by changes of the deployments runs wait for.
fn errand_run_controller<S>(
    client: &kube::Client,
    scope: &Scope,
    watch: &watcher::Config,
    config: &Config,
    deployments: Arc<DeploymentContext>,
    shutdown: S,
) -> impl Future<Output = ()> + use<S>
where
    S: Future<Output = ()> + Send + Sync + Clone + 'static,
{
    use crate::controller::deployment::errand_run;
    let controller = Controller::new(scope.api::<ErrandRun>(client), watch.clone());
    let runs = controller.store();
    controller
        .watches(
            scope.api::<Deployment>(client),
            watch.clone(),
            move |d: Deployment| {
                (runs.state().into_iter())
                    .filter(|r| r.namespace() == d.namespace() && r.spec.deployment == d.name_any())
                    .filter(|r| {
                        !(r.status.as_ref()).is_some_and(|s| s.phase.is_some_and(|p| p.is_final()))
                    })
                    .map(|r| ObjectRef::from_obj(&*r))
                    .collect::<Vec<_>>()
            },
        )
        .with_config(config.clone())
        .graceful_shutdown_on(shutdown)
        .run(
            |r, ctx| async move {
                let metrics = ctx.metrics.clone();
                timed(&metrics, "errandrun", errand_run::reconcile(r, ctx)).await
            },
            errand_run::error_policy,
            deployments,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "errand run reconcile");
            }
        })
}

/// The watch mapper of an input every deployment of its namespace may use (a `Release`, a
/// `Stemcell`, a `RuntimeConfig`, a `CpiConfig`): its change is counted in `inputs`, then wakes them all.
fn every_deployment_of_its_namespace<K: kube::Resource>(
    store: &Store<Deployment>,
    inputs: &Arc<super::deployment::InputChanges>,
) -> impl Fn(K) -> Vec<ObjectRef<Deployment>> + Send + Sync + 'static {
    let (store, inputs) = (store.clone(), inputs.clone());
    move |changed: K| {
        let namespace = changed.meta().namespace.clone();
        inputs.changed(namespace.as_deref());
        (store.state().into_iter())
            .filter(|d| d.namespace() == namespace)
            .map(|d| ObjectRef::from_obj(&*d))
            .collect()
    }
}

/// The `Deployment` controller, woken by its own `Instance`s, its `CloudConfig`s and the
/// `Release`s, `Stemcell`s, `RuntimeConfig`s and `CpiConfig`s of its namespace (each change counted in
/// [`InputChanges`](super::deployment::InputChanges) first); and the store of the
/// deployments it watches.
fn deployment_controller<S>(
    client: &kube::Client,
    scope: &Scope,
    watch: &watcher::Config,
    config: &Config,
    deployments: Arc<DeploymentContext>,
    shutdown: S,
) -> (impl Future<Output = ()> + use<S>, Store<Deployment>)
where
    S: Future<Output = ()> + Send + Sync + Clone + 'static,
{
    let controller = Controller::new(scope.api::<Deployment>(client), watch.clone());
    let store = controller.store();
    let cloud_configs_changed = deployments.inputs.clone();
    let by_cloud_config = store.clone();
    // The resurrector wakes the deployments it asks to deploy.
    let (wake, woken) = futures::channel::mpsc::unbounded();
    deployments.resurrection.wake_with(wake);
    let deployment_loop = controller
        .reconcile_on(woken)
        .owns(scope.api::<Instance>(client), watch.clone())
        .watches(
            scope.api::<CloudConfig>(client),
            watch.clone(),
            move |cc: CloudConfig| {
                cloud_configs_changed.changed(cc.namespace().as_deref());
                let name = cc.name_any();
                by_cloud_config
                    .state()
                    .into_iter()
                    .filter(|d| d.namespace() == cc.namespace())
                    .filter(|d| d.spec.uses_cloud_config(&name))
                    .map(|d| ObjectRef::from_obj(&*d))
                    .collect::<Vec<_>>()
            },
        )
        .watches(
            scope.api::<Release>(client),
            watch.clone(),
            every_deployment_of_its_namespace(&store, &deployments.inputs),
        )
        .watches(
            scope.api::<Stemcell>(client),
            watch.clone(),
            every_deployment_of_its_namespace(&store, &deployments.inputs),
        )
        // Every deployment of the namespace takes its runtime configs.
        .watches(
            scope.api::<RuntimeConfig>(client),
            watch.clone(),
            every_deployment_of_its_namespace(&store, &deployments.inputs),
        )
        // ... and the clouds its AZs may name.
        .watches(
            scope.api::<CpiConfig>(client),
            watch.clone(),
            every_deployment_of_its_namespace(&store, &deployments.inputs),
        )
        // A deployment's shared links changed (its deploy published new ones, it appeared,
        // it was deleted): the deployments that consume from it deploy again.
        .watches(
            scope.api::<ConfigMap>(client),
            watch.clone().labels(&format!(
                "{}={}",
                crate::registry::REGISTRY_LABEL,
                crate::registry::LINKS
            )),
            consumers_of(store.clone(), deployments.inputs.clone()),
        )
        .with_config(config.clone())
        .graceful_shutdown_on(shutdown)
        .run(
            |d, ctx| async move {
                let metrics = ctx.metrics.clone();
                timed(&metrics, "deployment", deployment::reconcile(d, ctx)).await
            },
            deployment::error_policy,
            deployments,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "deployment reconcile");
            }
        });
    (deployment_loop, store)
}

/// What a change of a deployment's shared links (a ConfigMap of the link registry) wakes:
/// the deployments of its namespace that may consume from it, the namespace's inputs
/// counted changed first.
fn consumers_of(
    store: Store<Deployment>,
    inputs: Arc<super::deployment::InputChanges>,
) -> impl Fn(ConfigMap) -> Vec<ObjectRef<Deployment>> {
    move |share: ConfigMap| {
        inputs.changed(share.namespace().as_deref());
        let provider = share.annotations().get(crate::registry::REGISTRY_LABEL);
        (store.state().into_iter())
            .filter(|d| d.namespace() == share.namespace())
            .filter(|d| provider.is_some_and(|p| may_consume_from(d, p)))
            .map(|d| ObjectRef::from_obj(&*d))
            .collect()
    }
}

/// Whether `deployment` may consume links from deployment `provider`: its manifest names it
/// in a consumed link, or ops files or variables may (those read their inputs again to know).
fn may_consume_from(deployment: &Deployment, provider: &str) -> bool {
    let spec = &deployment.spec;
    !spec.ops.is_empty()
        || kubosh_core::links::consumed_deployments(&spec.manifest)
            .iter()
            .any(|name| name == provider || name.contains("(("))
}
