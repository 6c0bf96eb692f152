//! `kubosh controller` killed (SIGKILL: no signal handler, no cleanup) at random instants of
//! deploys that create, scale, update and resize disks; a new process with the same identity
//! (a container restarted in its pod) resumes at once. Every few kills one runs until the
//! deployment is Ready; then the local cloud holds exactly the VMs and disks the state in
//! the apiserver records, and a marker written on a persistent disk at the start is there.
//! Then two replicas: the leader is killed mid-deploy and the standby finishes the deploy.
//!
//! Kills come in rounds of their own seed (two by default): each round goes on until it
//! killed `KUBOSH_CTRL_CRASH_RUNS` (default 5) running deploys, so at least 10 kills land
//! mid-deploy. `KUBOSH_CTRL_CRASH_SEEDS=a,b` replays a run (the seeds are printed).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use crate::controller::{
    ControllerProcess, apply_deployment, apply_inputs, condition, control_plane, deployment_object,
    ready_at, start_replica, stored_state, wait_for,
};
use crate::crash_safety::{
    Rng, check_variant, manifest, plant_marker, runs_from_env, seeds_from_env, variant,
};
use crate::director_world::World;
use kubosh_engine::state::DeploymentState;
use kubosh_kube::api::Deployment;

const NS: &str = "ctrl-crash";

/// The deployment's state as the apiserver holds it.
async fn state(client: &kube::Client) -> DeploymentState {
    stored_state(client, NS, "hello").await
}

/// Applies variant `n` of the deployment; its generation.
async fn apply_variant(client: &kube::Client, w: &World, n: u64) -> i64 {
    let (greeting, disk, instances) = variant(n);
    let object = deployment_object("hello", manifest(w.net, w.port, greeting, disk, instances));
    apply_deployment(client, NS, &object).await
}

/// Ready at `generation`.
async fn converged(api: &Api<Deployment>, w: &World, generation: i64) -> Deployment {
    ready_at(api, "hello", w, generation).await
}

fn kill(mut c: ControllerProcess) {
    // SIGKILL.
    let _ = c.0.kill();
    let _ = c.0.wait();
}

/// Who holds the leader election Lease.
async fn leader(client: &kube::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), NS)
        .get_opt("kubosh-controller")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// Waits until `identity` holds the leader election Lease, for at most `limit`.
async fn leads(client: &kube::Client, identity: &str, limit: Duration) {
    let start = Instant::now();
    while leader(client).await.as_deref() != Some(identity) {
        assert!(
            start.elapsed() < limit,
            "{identity} does not lead after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_anywhere_resumes_without_leaks_and_a_standby_takes_over() {
    let per_round = runs_from_env("KUBOSH_CTRL_CRASH_RUNS", 5) as usize;
    let seeds = seeds_from_env("KUBOSH_CTRL_CRASH_SEEDS", 2);
    let cp = control_plane().await;
    let w = World::new(22);
    cp.create_namespace(NS).await.unwrap();
    let client = cp.client().await.unwrap();
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    apply_inputs(&client, NS, &w).await;

    let generation = apply_variant(&client, &w, 0).await;
    let controller = start_replica(&w, cp, NS, "restarting");
    converged(&api, &w, generation).await;
    let first = state(&client).await;
    let web0 = plant_marker(&w, &first);
    check_variant(&w, &first, &web0, 0, "after the first deploy");
    kill(controller);

    let mut mid_deploy = Vec::new();
    let mut n = 0;
    for &seed in &seeds {
        let mut rng = Rng(seed);
        let wanted = mid_deploy.len() + per_round;
        // Kills before the deploy started do not count; a round gives up after 3× its share.
        for _ in 0..3 * per_round {
            if mid_deploy.len() >= wanted {
                break;
            }
            n += 1;
            let generation = apply_variant(&client, &w, n).await;
            let task_of = |d: &Deployment| {
                d.status
                    .as_ref()
                    .and_then(|s| s.last_task.as_ref())
                    .map(|t| t.id.clone())
            };
            let before = task_of(&api.get("hello").await.unwrap());
            let controller = start_replica(&w, cp, NS, "restarting");
            tokio::time::sleep(Duration::from_millis(500 + rng.below(5000))).await;
            let d = api.get("hello").await.unwrap();
            let stage = d.status.as_ref().and_then(|s| s.progress.clone());
            // A deploy this process started (a killed one leaves `Reconciling` behind).
            let deploying = condition(&d, "Reconciling").is_some_and(|c| c.status == "True")
                && task_of(&d) != before;
            kill(controller);
            if deploying {
                mid_deploy.push(format!(
                    "{n} (seed {seed}): {}",
                    stage.map_or("starting".into(), |p| p.message)
                ));
            }
            if n.is_multiple_of(4) {
                let controller = start_replica(&w, cp, NS, "restarting");
                converged(&api, &w, generation).await;
                let context = format!("after kill {n} (seed {seed})");
                check_variant(&w, &state(&client).await, &web0, n, &context);
                kill(controller);
            }
        }
    }
    let controller = start_replica(&w, cp, NS, "restarting");
    converged(
        &api,
        &w,
        api.get("hello").await.unwrap().metadata.generation.unwrap(),
    )
    .await;
    let context = format!("after kill {n} (seeds {seeds:?})");
    check_variant(&w, &state(&client).await, &web0, n, &context);
    kill(controller);

    println!("killed mid-deploy: {mid_deploy:#?}");
    assert!(
        mid_deploy.len() >= per_round * seeds.len(),
        "only {} of {n} kills hit a running deploy: {mid_deploy:?}",
        mid_deploy.len()
    );

    // Two replicas: the leader dies mid-deploy, the standby takes over and finishes.
    let a = start_replica(&w, cp, NS, "replica-a");
    leads(&client, "replica-a", Duration::from_secs(30)).await;
    let _b = start_replica(&w, cp, NS, "replica-b");
    let n = n + 1;
    let mut rng = Rng(seeds[0]);
    let generation = apply_variant(&client, &w, n).await;
    wait_for(&api, "hello", Duration::from_secs(60), &w, |d| {
        d.metadata.generation == Some(generation)
            && condition(d, "Reconciling").is_some_and(|c| c.status == "True")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(rng.below(2000))).await;
    kill(a);
    // The standby takes over within 15 s of the leader's death.
    leads(&client, "replica-b", Duration::from_secs(15)).await;
    converged(&api, &w, generation).await;
    let context = format!("after the leader died (seeds {seeds:?})");
    check_variant(&w, &state(&client).await, &web0, n, &context);
}
