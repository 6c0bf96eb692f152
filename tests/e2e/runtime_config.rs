//! Runtime configs under the controller (issue 25): a `RuntimeConfig` adds its release, its
//! addon and its director-wide variable to every deployment of its namespace; the addon's
//! `include`/`exclude` filters decide on which instance groups its job lands; a change of it
//! rolls out every deployment it touches, without a change to any of them. Real
//! kube-apiserver, real nats-server, the local cloud, kubosh agents; the addon's release is a
//! stand-in built here (one job with a template, no packages).

use std::path::Path;
use std::time::Duration;

use kube::api::Api;
use serde_json::{Value, json};

use crate::controller::{
    apply, apply_deployment, apply_inputs, control_plane, deployment_object, ready_at,
    start_replica, stored_state, wait_for,
};
use crate::director_world::{World, hello_deployment, run, text};
use kubosh_kube::api::Deployment;

/// Builds the stand-in addon release `addon-kit/1` (job `motd`: `config/motd.txt` says
/// `motd.text` and `motd.token`) into `tarball`.
fn build_addon_release(dir: &Path, tarball: &Path) {
    let files = [
        (
            "jobs/motd/spec",
            "---\nname: motd\ntemplates:\n  motd.txt.erb: config/motd.txt\npackages: []\nproperties:\n  motd.text:\n    description: What to say.\n  motd.token:\n    description: A secret shared by every deployment.\n",
        ),
        ("jobs/motd/monit", ""),
        (
            "jobs/motd/templates/motd.txt.erb",
            "<%= p('motd.text') %> <%= p('motd.token') %>\n",
        ),
    ];
    build_release(dir, ("addon-kit", "1"), &files, tarball);
}

/// Builds release `name/version` of `files` (paths in a release directory: job specs,
/// monit files, templates; no packages) in `dir` into `tarball`: a stand-in for a release
/// this machine cannot download, with the real one's job names and property specs.
pub(crate) fn build_release(
    dir: &Path,
    (name, version): (&str, &str),
    files: &[(&str, &str)],
    tarball: &Path,
) {
    let final_yml = format!(
        "name: {name}\nblobstore:\n  provider: local\n  options:\n    blobstore_path: /tmp/{name}-blobs\n"
    );
    let config = [("config/final.yml", final_yml.as_str())];
    for (path, content) in config.iter().chain(files) {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let out = run(&[
        "release",
        "create",
        dir.to_str().unwrap(),
        "--version",
        version,
        "--tarball",
        tarball.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{:?}", text(&out));
}

/// The runtime config: the addon on every group with the `hello` job, but never on `api`.
fn runtime_config(text: &str) -> Value {
    json!({
        "apiVersion": "kubosh.io/v1alpha1", "kind": "RuntimeConfig",
        "metadata": {"name": "motd"},
        "spec": {
            "releases": [{"name": "addon-kit", "version": "1"}],
            "addons": [{
                "name": "motd",
                "jobs": [{"name": "motd", "release": "addon-kit",
                          "properties": {"motd": {"text": text, "token": "((/motd_token))"}}}],
                "include": {"jobs": [{"name": "hello", "release": "hello"}]},
                "exclude": {"instance_groups": ["api"]},
            }],
            "variables": [{"name": "/motd_token", "type": "password"}],
        },
    })
}

/// What the addon rendered on each instance of deployment `name`, by group: `None` where it
/// is not.
async fn motds(
    client: &kube::Client,
    ns: &str,
    w: &World,
    name: &str,
) -> Vec<(String, Option<String>)> {
    let state = stored_state(client, ns, name).await;
    let mut out: Vec<(String, Option<String>)> = (state.instances.values())
        .map(|i| {
            let vm = &i.vm.as_ref().expect("a VM").cid;
            let file = w.vm_root(vm).join("jobs/motd/config/motd.txt");
            (i.group.clone(), std::fs::read_to_string(file).ok())
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_config_lands_on_the_groups_its_filters_match_in_every_deployment_and_a_change_rolls_them_out()
 {
    let cp = control_plane().await;
    let w = World::new(43);
    let ns = "runtime-config-e2e";
    cp.create_namespace(ns).await.unwrap();
    let client = cp.client().await.unwrap();
    let _controller = start_replica(&w, cp, ns, "runtime-configs");
    apply_inputs(&client, ns, &w).await;
    let release_dir = tempfile::tempdir().unwrap();
    let tarball = w.dir.path().join("addon-kit.tgz");
    build_addon_release(release_dir.path(), &tarball);
    apply(
        &client,
        ns,
        json!({"apiVersion": "kubosh.io/v1alpha1", "kind": "Release",
               "metadata": {"name": "addon-kit-1"},
               "spec": {"name": "addon-kit", "version": "1",
                        "url": format!("file://{}", tarball.display())}}),
    )
    .await;
    apply(&client, ns, runtime_config("hello from the director")).await;

    // Two deployments: `one` with a `web` and an `api` group, `two` with a `web` group.
    let mut one = hello_deployment(w.port, "one");
    one["instance_groups"][0]["instances"] = json!(1);
    let mut api = one["instance_groups"][0].clone();
    api["name"] = json!("api");
    // The web group's `peers` link stays the web group's.
    api["jobs"][0]["provides"] = json!({"greeter": "nil"});
    api["jobs"][0]["consumes"] = json!({"peers": "nil"});
    one["instance_groups"].as_array_mut().unwrap().push(api);
    let mut two = hello_deployment(w.port, "two");
    two["instance_groups"][0]["instances"] = json!(1);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    for (name, manifest) in [("one", &one), ("two", &two)] {
        let generation =
            apply_deployment(&client, ns, &deployment_object(name, manifest.clone())).await;
        let d = ready_at(&deployments, name, &w, generation).await;
        let applied = &d.status.as_ref().unwrap().runtime_configs;
        assert_eq!(applied.len(), 1, "{applied:?}");
        assert_eq!(applied[0].name, "motd");
    }
    let one_motds = motds(&client, ns, &w, "one").await;
    let two_motds = motds(&client, ns, &w, "two").await;
    assert_eq!(
        one_motds[0],
        ("api".to_string(), None),
        "excluded: {one_motds:?}"
    );
    let token = |motd: &Option<String>| {
        let motd = motd.as_deref().expect("the addon rendered");
        assert!(motd.starts_with("hello from the director "), "{motd}");
        motd.trim_end().rsplit(' ').next().unwrap().to_string()
    };
    assert_eq!(one_motds[1].0, "web");
    assert_eq!(two_motds[0].0, "web");
    // `((/motd_token))` is the director's: one value for both deployments.
    assert_eq!(token(&one_motds[1].1), token(&two_motds[0].1));

    // A change of the runtime config rolls out both deployments, no change to either.
    apply(&client, ns, runtime_config("hello again")).await;
    for name in ["one", "two"] {
        wait_for(&deployments, name, Duration::from_secs(240), &w, |_| {
            let motds = futures::executor::block_on(motds(&client, ns, &w, name));
            motds
                .iter()
                .filter(|(group, _)| group == "web")
                .all(|(_, motd)| {
                    motd.as_deref()
                        .is_some_and(|m| m.starts_with("hello again "))
                })
        })
        .await;
        let d = deployments.get(name).await.unwrap();
        assert_eq!(d.metadata.generation, Some(1), "{name}: no spec change");
    }
    assert_eq!(
        motds(&client, ns, &w, "one").await[0].1,
        None,
        "api still excluded"
    );

    // A new version that deploys nothing new (a label) changes no instance, and the status
    // names the version deployed.
    let mut relabelled = runtime_config("hello again");
    relabelled["metadata"]["labels"] = json!({"owner": "platform-team"});
    apply(&client, ns, relabelled).await;
    let configs: Api<kubosh_kube::api::RuntimeConfig> = Api::namespaced(client.clone(), ns);
    let version = configs.get("motd").await.unwrap().metadata.resource_version;
    for name in ["one", "two"] {
        let d = wait_for(&deployments, name, Duration::from_secs(120), &w, |d| {
            (d.status.as_ref()).is_some_and(|s| {
                s.runtime_configs.first().map(|r| Some(&r.resource_version))
                    == Some(version.as_ref())
            })
        })
        .await;
        let status = d.status.unwrap();
        assert_eq!(status.observed_generation, Some(1), "{name}");
        assert!(
            kubosh_kube::controller::status::is_ready(&status.conditions, Some(1)),
            "{name}: {:?}",
            status.conditions
        );
    }
    let motds_after = motds(&client, ns, &w, "two").await;
    assert!(
        motds_after[0]
            .1
            .as_deref()
            .is_some_and(|m| m.starts_with("hello again ")),
        "{motds_after:?}"
    );
}
