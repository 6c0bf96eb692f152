//! End to end on the local cloud, every part real: the `kubosh` binary as CPI (one process
//! per call) starts `kubosh agent` processes as VMs; they connect to a real nats-server with
//! BOSH's production permissions and mutual TLS; the director side is kubosh's agent client.
//! A C package is compiled from source with `cc`, a job whose monit file starts the compiled
//! HTTP server is applied and started, a persistent disk is created, mounted, written and
//! migrated, and at the end the cloud holds nothing and no process is left.

use crate::agentd_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentd_common::{free_port, http_get, live_processes, tgz, wait_for};
use futures::StreamExt;
use indexmap::IndexMap;
use kubosh_base::digest::sha1_hex;
use kubosh_cloud::local::{self, set_agent_frozen};
use kubosh_cloud::*;
use kubosh_devenv::BoshNats;
use kubosh_transport::agent::protocol::{
    ApplySpec, CompilePackageArgs, DiskHint, DrainType, JobSpec, JobState, JobTemplateSpec,
    PackageSpec, RenderedTemplatesArchive, RunScriptOptions,
};
use kubosh_transport::agent::{
    AgentClient, AgentError, ClientOptions, MbusTls, NatsOptions, NatsTransport, heartbeats,
};
use serde_json::{Value, json};

const KUBOSH: &str = env!("CARGO_BIN_EXE_kubosh");

const AGENT_ID: &str = "e2e-agent-1";
const FROZEN_AGENT_ID: &str = "e2e-agent-2";

const HELLO_C: &str = r#"
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: hello-server PORT\n"); return 2; }
  int s = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(atoi(argv[1]));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 16) != 0) { perror("listen"); return 1; }
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    char buf[1024];
    if (read(c, buf, sizeof buf) < 0) { close(c); continue; }
    const char *body = GREETING "\n";
    char out[2048];
    int n = snprintf(out, sizeof out, "HTTP/1.0 200 OK\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
    if (write(c, out, n) < 0) perror("write");
    close(c);
  }
}
"#;

/// Stops every agent of a local cloud when dropped: a failing test leaves no process behind.
struct StopAgents(PathBuf);

impl Drop for StopAgents {
    fn drop(&mut self) {
        let _ = local::stop_all_agents(&self.0, Duration::from_secs(5));
    }
}

/// The director's view of the world in this test.
struct World {
    _stop_agents: StopAgents,
    dir: tempfile::TempDir,
    nats: BoshNats,
    cpi: ExternalCpi,
    director: Arc<NatsTransport>,
}

impl World {
    async fn new() -> World {
        let nats = BoshNats::start(&[AGENT_ID, FROZEN_AGENT_ID]).expect("nats-server starts");
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("cpi.json");
        std::fs::write(
            &config,
            json!({
                "state_dir": dir.path().join("state"),
                "mbus": nats.url(),
                "agent": {
                    "env": {"KUBOSH_LOG": "kubosh=info"},
                    "stop_timeout_seconds": 20,
                },
            })
            .to_string(),
        )
        .unwrap();
        let command = CpiCommand::new(KUBOSH)
            .args(["cpi", "--config", config.to_str().unwrap()])
            .timeout(Duration::from_secs(60));
        let cpi = ExternalCpi::new(command, "director-uuid");
        let pem = nats.director().unwrap();
        let options = NatsOptions::new(
            nats.url(),
            MbusTls::new(pem.ca_pem, pem.cert_pem, pem.key_pem),
        );
        let director = Arc::new(
            NatsTransport::connect(&options)
                .await
                .expect("director connects"),
        );
        World {
            _stop_agents: StopAgents(dir.path().join("state")),
            dir,
            nats,
            cpi,
            director,
        }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn blobstore(&self) -> PathBuf {
        self.state().join("blobstore")
    }

    /// The VM's `/var/vcap`.
    fn vm_root(&self, vm: &VmCid) -> PathBuf {
        self.state().join("vms").join(vm.as_str()).join("root")
    }

    fn agent_log(&self, vm: &VmCid) -> String {
        std::fs::read_to_string(self.state().join("vms").join(vm.as_str()).join("agent.log"))
            .unwrap_or_default()
    }

    /// Stores `bytes` in the shared blobstore as the director does.
    fn put_blob(&self, bytes: &[u8]) -> String {
        std::fs::create_dir_all(self.blobstore()).unwrap();
        let id = kubosh_base::ids::uuid_v4();
        std::fs::write(self.blobstore().join(&id), bytes).unwrap();
        id
    }

    async fn create_vm(&self, stemcell: &StemcellCid, agent_id: &str, ip: &str) -> VmCid {
        let pem = self.nats.agent(agent_id).unwrap();
        let mut networks = Networks::new();
        networks.insert(
            "default".into(),
            NetworkSettings::new("manual")
                .with("ip", ip)
                .with("netmask", "255.255.255.0")
                .with("gateway", "10.0.0.1")
                .with("default", json!(["dns", "gateway"])),
        );
        let created = self
            .cpi
            .create_vm(&CreateVm {
                agent_id: agent_id.into(),
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
            .expect("create_vm");
        created.cid
    }

    /// `create_disk`, `attach_disk`, `add_persistent_disk`, `mount_disk`, as the Director
    /// does for a new persistent disk.
    async fn attach_and_mount_disk(
        &self,
        vm: &VmCid,
        agent: &AgentClient,
        size_mib: u64,
    ) -> DiskCid {
        let disk = self
            .cpi
            .create_disk(&CreateDisk {
                size_mib,
                cloud_properties: Object::new(),
                vm_cid: Some(vm.clone()),
            })
            .await
            .unwrap();
        let hint = self
            .cpi
            .attach_disk(vm, &disk)
            .await
            .unwrap()
            .expect("v2 hint");
        let hint: DiskHint = serde_json::from_value(serde_json::to_value(&hint).unwrap()).unwrap();
        agent
            .add_persistent_disk(disk.as_str(), &hint)
            .await
            .unwrap();
        agent.mount_disk(disk.as_str()).await.unwrap();
        disk
    }

    /// `create_stemcell` with a small image file.
    async fn stemcell(&self) -> StemcellCid {
        let image = self.dir.path().join("image");
        std::fs::write(&image, b"stemcell image").unwrap();
        self.cpi
            .create_stemcell(&CreateStemcell {
                image_path: image,
                cloud_properties: json!({"name": "kubosh-local", "version": "1"})
                    .as_object()
                    .unwrap()
                    .clone(),
            })
            .await
            .expect("create_stemcell")
    }

    fn agent(&self, agent_id: &str, options: ClientOptions) -> AgentClient {
        self.director
            .agent(agent_id)
            .with_instance_name("web/0")
            .with_options(options)
    }
}

fn fast() -> ClientOptions {
    ClientOptions {
        timeout: Duration::from_secs(30),
        poll_interval: Duration::from_millis(50),
        ..ClientOptions::default()
    }
}

/// A source package tarball as in a release: `packaging` at the top, sources beside it.
fn source_package(files: &[(&str, &str, u32)]) -> (Vec<u8>, String) {
    let bytes = tgz(files);
    let digest = sha1_hex(&bytes);
    (bytes, digest)
}

fn ctl_script(root: &Path, port: u16) -> String {
    let root = root.display();
    format!(
        r#"#!/bin/sh
RUN={root}/sys/run/hello
LOG={root}/sys/log/hello
case "$1" in
  start)
    mkdir -p $RUN $LOG
    {root}/packages/hello-server/bin/hello-server {port} >>$LOG/hello.stdout.log 2>>$LOG/hello.stderr.log &
    echo $! > $RUN/hello.pid
    ;;
  stop)
    kill $(cat $RUN/hello.pid) 2>/dev/null
    rm -f $RUN/hello.pid
    ;;
esac
"#
    )
}

fn monit_file(root: &Path) -> String {
    let root = root.display();
    format!(
        "check process hello\n  with pidfile {root}/sys/run/hello/hello.pid\n  start program \"{root}/jobs/hello/bin/ctl start\"\n  stop program \"{root}/jobs/hello/bin/ctl stop\"\n  group vcap\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_lives_its_whole_life_on_the_local_cloud() {
    let w = World::new().await;
    let stemcell = w.stemcell().await;

    // create_vm: the agent comes up and answers ping.
    let vm = w.create_vm(&stemcell, AGENT_ID, "10.0.0.5").await;
    let agent = w.agent(AGENT_ID, fast());
    if let Err(e) = agent
        .wait_until_ready(vm.as_str(), Duration::from_secs(30))
        .await
    {
        panic!("agent not ready: {e}\nagent log:\n{}", w.agent_log(&vm));
    }
    assert_eq!(agent.ping().await.unwrap(), "pong");
    assert_eq!(agent.info().await.unwrap().api_version, 1);
    let root = w.vm_root(&vm);
    let state = agent.get_state(false).await.unwrap();
    assert_eq!(state.agent_id.as_deref(), Some(AGENT_ID));
    assert_eq!(state.vm.as_ref().unwrap().name, vm.as_str());

    // compile_package: a dependency first, then the C program that uses it.
    let (greeting_src, greeting_sha1) = source_package(&[
        (
            "packaging",
            "set -e\ncp message.txt $BOSH_INSTALL_TARGET/\n",
            0o644,
        ),
        ("message.txt", "hello from kubosh", 0o644),
    ]);
    let greeting_blob = w.put_blob(&greeting_src);
    let greeting = agent
        .compile_package(&CompilePackageArgs {
            blobstore_id: greeting_blob,
            sha1: greeting_sha1,
            name: "greeting".into(),
            version: "1.1".into(),
            dependencies: IndexMap::new(),
        })
        .await
        .expect("compile greeting")
        .result;
    let greeting_ref = PackageSpec {
        name: "greeting".into(),
        version: "1.1".into(),
        sha1: greeting.sha1.clone(),
        blobstore_id: greeting.blobstore_id.clone(),
        ..PackageSpec::default()
    };
    let (hello_src, hello_sha1) = source_package(&[
        (
            "packaging",
            "set -e\nGREETING=$(cat ${BOSH_PACKAGES_DIR:-/var/vcap/packages}/greeting/message.txt)\nmkdir -p $BOSH_INSTALL_TARGET/bin\ncc -O2 -DGREETING=\"\\\"$GREETING\\\"\" -o $BOSH_INSTALL_TARGET/bin/hello-server hello-server/hello.c\n",
            0o644,
        ),
        ("hello-server/hello.c", HELLO_C, 0o644),
    ]);
    let hello_blob = w.put_blob(&hello_src);
    let hello = agent
        .compile_package(&CompilePackageArgs {
            blobstore_id: hello_blob,
            sha1: hello_sha1,
            name: "hello-server".into(),
            version: "2.1".into(),
            dependencies: IndexMap::from([("greeting".to_string(), greeting_ref.clone())]),
        })
        .await
        .expect("compile hello-server")
        .result;
    let compiled = std::fs::read(w.blobstore().join(&hello.blobstore_id)).unwrap();
    assert_eq!(
        sha1_hex(&compiled),
        hello.sha1,
        "the returned digest is the blob's"
    );

    // prepare + apply the job, start it: the compiled server answers.
    let port = free_port();
    let drain_marker = root.join("drained");
    let archive = tgz(&[
        ("hello/monit", &monit_file(&root), 0o644),
        ("hello/bin/ctl", &ctl_script(&root, port), 0o755),
        (
            "hello/bin/drain",
            &format!(
                "#!/bin/sh\necho \"$@\" > {}\necho 0\n",
                drain_marker.display()
            ),
            0o755,
        ),
    ]);
    let archive_sha1 = sha1_hex(&archive);
    let archive_blob = w.put_blob(&archive);
    let spec = ApplySpec {
        deployment: Some("dep".into()),
        name: Some("web".into()),
        index: Some(Some(0)),
        id: Some("web-uuid-0".into()),
        az: Some(Some("z1".into())),
        job: Some(Some(JobSpec {
            name: Some(Some("web".into())),
            templates: Some(Some(vec![JobTemplateSpec {
                name: "hello".into(),
                version: "fp-hello".into(),
                ..JobTemplateSpec::default()
            }])),
            ..JobSpec::default()
        })),
        packages: Some(IndexMap::from([
            (
                "hello-server".to_string(),
                PackageSpec {
                    name: "hello-server".into(),
                    version: "2.1".into(),
                    sha1: hello.sha1.clone(),
                    blobstore_id: hello.blobstore_id.clone(),
                    ..PackageSpec::default()
                },
            ),
            ("greeting".to_string(), greeting_ref),
        ])),
        networks: Some(
            json!({"default": {"type": "manual", "ip": "10.0.0.5", "netmask": "255.255.255.0", "gateway": "10.0.0.1"}})
                .as_object()
                .unwrap()
                .clone(),
        ),
        configuration_hash: Some("config-hash-1".into()),
        persistent_disk: Some(0),
        rendered_templates_archive: Some(Some(RenderedTemplatesArchive {
            blobstore_id: archive_blob,
            sha1: archive_sha1,
        })),
        ..ApplySpec::default()
    };
    assert_eq!(agent.prepare(&spec).await.expect("prepare"), "prepared");
    assert_eq!(agent.apply(&spec).await.expect("apply"), "applied");
    assert_eq!(
        std::fs::read_to_string(root.join("instance/id")).unwrap(),
        "web-uuid-0"
    );
    agent
        .run_script("pre-start", &RunScriptOptions::default())
        .await
        .expect("pre-start (none) succeeds");
    assert_eq!(agent.start().await.expect("start"), "started");
    let mut running = None;
    for _ in 0..200 {
        let s = agent.get_state(false).await.unwrap();
        if s.job_state == JobState::Running {
            running = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let running =
        running.unwrap_or_else(|| panic!("job never ran; agent log:\n{}", w.agent_log(&vm)));
    let procs = running.processes.clone().unwrap_or_default();
    assert_eq!(procs.len(), 1);
    assert_eq!(
        (procs[0].name.as_str(), procs[0].state.as_str()),
        ("hello", "running")
    );
    assert_eq!(running.spec.deployment.as_deref(), Some("dep"));
    assert_eq!(
        running.spec.configuration_hash.as_deref(),
        Some("config-hash-1")
    );
    let status = wait_for(Duration::from_secs(10), "the server to answer", || {
        http_get(port)
    })
    .await;
    assert!(status.contains("200"), "{status}");
    let full = agent.get_state(true).await.unwrap();
    assert!(full.vitals.unwrap().load.is_some());

    // A persistent disk: create, attach, mount, write; then migrate to a bigger one.
    let disk1 = w.attach_and_mount_disk(&vm, &agent, 1024).await;
    assert_eq!(agent.list_disk().await.unwrap(), vec![disk1.to_string()]);
    std::fs::write(root.join("store/data.txt"), "precious").unwrap();
    let disk2 = w.attach_and_mount_disk(&vm, &agent, 2048).await;
    agent
        .migrate_disk(disk1.as_str(), disk2.as_str())
        .await
        .unwrap();
    agent.remove_persistent_disk(disk1.as_str()).await.unwrap();
    w.cpi.detach_disk(&vm, &disk1).await.unwrap();
    w.cpi.delete_disk(&disk1).await.unwrap();
    assert_eq!(agent.list_disk().await.unwrap(), vec![disk2.to_string()]);
    assert_eq!(
        std::fs::read_to_string(root.join("store/data.txt")).unwrap(),
        "precious",
        "the file moved to the new disk"
    );

    // drain + stop: the drain script ran with BOSH's arguments, the server is gone.
    assert_eq!(agent.drain(DrainType::Shutdown, None).await.unwrap(), 0);
    assert_eq!(
        std::fs::read_to_string(&drain_marker).unwrap().trim(),
        "job_shutdown hash_unchanged"
    );
    agent.stop().await.expect("stop");
    assert_eq!(
        agent.get_state(false).await.unwrap().job_state,
        JobState::Stopped
    );
    assert!(http_get(port).is_none(), "the server stopped");

    // Tear down: nothing left in the cloud, no process left behind.
    agent.unmount_disk(disk2.as_str()).await.unwrap();
    agent.remove_persistent_disk(disk2.as_str()).await.unwrap();
    w.cpi.detach_disk(&vm, &disk2).await.unwrap();
    w.cpi.delete_vm(&vm).await.unwrap();
    w.cpi.delete_disk(&disk2).await.unwrap();
    w.cpi.delete_stemcell(&stemcell).await.unwrap();
    let inventory = local::inventory(&w.state()).unwrap();
    assert!(inventory.is_empty(), "{inventory:?}");
    let root_text = root.display().to_string();
    let leftovers = live_processes(&[&root_text]);
    assert!(leftovers.is_empty(), "processes left: {leftovers:?}");
    let agents = live_processes(&["agent", "-b", &root_text]);
    assert!(agents.is_empty(), "agent left: {agents:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unresponsive_agent_times_out_with_boshs_message_and_delete_vm_still_cleans_up() {
    let w = World::new().await;
    let stemcell = w.stemcell().await;
    let vm = w.create_vm(&stemcell, FROZEN_AGENT_ID, "10.0.0.6").await;
    let agent = w.agent(
        FROZEN_AGENT_ID,
        ClientOptions {
            timeout: Duration::from_secs(1),
            ..fast()
        },
    );
    agent
        .wait_until_ready(vm.as_str(), Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", w.agent_log(&vm)));

    set_agent_frozen(&w.state(), &vm, true).unwrap();
    let err = agent.get_state(false).await.unwrap_err();
    assert!(matches!(err, AgentError::Timeout { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "Timed out sending 'get_state' to instance: 'web/0', agent-id: '{FROZEN_AGENT_ID}' after 1 seconds"
        )
    );

    set_agent_frozen(&w.state(), &vm, false).unwrap();
    assert_eq!(
        agent.ping().await.unwrap(),
        "pong",
        "a thawed agent answers again"
    );
    // A frozen agent is still deleted whole.
    set_agent_frozen(&w.state(), &vm, true).unwrap();
    w.cpi.delete_vm(&vm).await.unwrap();
    w.cpi.delete_stemcell(&stemcell).await.unwrap();
    assert!(local::inventory(&w.state()).unwrap().is_empty());
    let root_text = w.vm_root(&vm).display().to_string();
    assert!(live_processes(&["agent", "-b", &root_text]).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reports_unknown_methods_and_action_failures_as_bosh_agent_does() {
    let w = World::new().await;
    let stemcell = w.stemcell().await;
    // The health monitor's view: heartbeats and shutdown notices.
    let hm_pem = w.nats.client("default.hm.bosh-internal").unwrap();
    let hm = kubosh_transport::agent::nats::connect(&NatsOptions::new(
        w.nats.url(),
        MbusTls::new(hm_pem.ca_pem, hm_pem.cert_pem, hm_pem.key_pem),
    ))
    .await
    .unwrap();
    let mut beats = heartbeats(&hm, Some(AGENT_ID)).await.unwrap();
    let mut shutdowns = hm
        .subscribe(format!("hm.agent.shutdown.{AGENT_ID}"))
        .await
        .unwrap();
    hm.flush().await.unwrap();

    let vm = w.create_vm(&stemcell, AGENT_ID, "10.0.0.7").await;
    let agent = w.agent(AGENT_ID, fast());
    agent
        .wait_until_ready(vm.as_str(), Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", w.agent_log(&vm)));
    let (id, beat) = tokio::time::timeout(Duration::from_secs(10), beats.next())
        .await
        .expect("a heartbeat at startup")
        .unwrap()
        .unwrap();
    assert_eq!(id, AGENT_ID);
    assert_eq!(
        beat.job_state,
        JobState::Running,
        "no jobs: nothing fails, as with monit"
    );
    assert_eq!(beat.number_of_processes, Some(0));
    assert!(beat.vitals.load.is_some() && beat.vitals.mem.is_some());
    assert_eq!(agent.drain(DrainType::Shutdown, None).await.unwrap(), 0);
    let notice = tokio::time::timeout(Duration::from_secs(10), shutdowns.next())
        .await
        .expect("hm.agent.shutdown after drain shutdown")
        .unwrap();
    assert_eq!(&notice.payload[..], b"null");

    let raw = |method: &str, args: Vec<Value>| {
        let agent = &agent;
        let method = method.to_string();
        async move {
            agent
                .call(
                    kubosh_transport::agent::Method::from_name(&method).unwrap(),
                    &args,
                )
                .await
        }
    };
    // A failing synchronous action.
    let err = raw("get_task", vec![json!("no-such-task")])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string().lines().next().unwrap(),
        "Action Failed get_task: Task with id no-such-task could not be found"
    );
    // A failing task: the digest does not match.
    let blob = w.put_blob(b"not what the digest says");
    let err = agent
        .compile_package(&CompilePackageArgs {
            blobstore_id: blob,
            sha1: sha1_hex(b"something else"),
            name: "pkg".into(),
            version: "1".into(),
            dependencies: IndexMap::new(),
        })
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("Action Failed get_task: Task ")
            && text.contains("result: Compiling package pkg:"),
        "{text}"
    );
    // Missing arguments are worded as the agent's action runner words them.
    let err = raw("mount_disk", vec![]).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("Not enough arguments, expected 1, got 0"),
        "{err}"
    );

    w.cpi.delete_vm(&vm).await.unwrap();
    w.cpi.delete_stemcell(&stemcell).await.unwrap();
    assert!(local::inventory(&w.state()).unwrap().is_empty());
}

/// create-env's message bus: the agent serves HTTPS with its mbus certificate; the CLI side
/// uploads the package source into the agent's blobstore, compiles, and downloads the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_env_talks_to_the_agent_over_https() {
    use kubosh_base::pki::{Ca, Leaf};
    use kubosh_transport::agent::HttpsTransport;

    let ca = Ca::new("mbus-ca").unwrap();
    let server = ca.issue(&Leaf::loopback_server("127.0.0.1")).unwrap();
    let port = free_port();
    let mbus = format!("https://mbus:mbus-secret@127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let _stop_agents = StopAgents(dir.path().join("state"));
    let config = dir.path().join("cpi.json");
    std::fs::write(
        &config,
        json!({
            "state_dir": dir.path().join("state"),
            "mbus": mbus,
            "blobstore": {"provider": "dav", "options": {"endpoint": format!("https://127.0.0.1:{port}/blobs")}},
            "agent": {"env": {"KUBOSH_LOG": "kubosh=info"}},
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
    std::fs::write(&image, b"img").unwrap();
    let stemcell = cpi
        .create_stemcell(&CreateStemcell {
            image_path: image,
            cloud_properties: Object::new(),
        })
        .await
        .unwrap();
    let vm = cpi
        .create_vm(&CreateVm {
            agent_id: "create-env-agent".into(),
            stemcell_cid: stemcell.clone(),
            cloud_properties: Object::new(),
            networks: Networks::new(),
            disk_cids: vec![],
            env: json!({"bosh": {"mbus": {"cert": {
                "ca": ca.cert_pem(), "certificate": server.cert_pem, "private_key": server.key_pem}}}})
            .as_object()
            .unwrap()
            .clone(),
        })
        .await
        .unwrap()
        .cid;
    let log = || {
        std::fs::read_to_string(
            dir.path()
                .join("state/vms")
                .join(vm.as_str())
                .join("agent.log"),
        )
        .unwrap_or_default()
    };
    let transport = HttpsTransport::new(&mbus, &ca.cert_pem(), "director-uuid").unwrap();
    let agent = transport
        .clone()
        .agent("create-env-agent")
        .with_options(fast());
    agent
        .wait_until_ready(vm.as_str(), Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", log()));

    let (src, sha1) = source_package(&[(
        "packaging",
        "set -e\necho compiled > $BOSH_INSTALL_TARGET/out.txt\n",
        0o644,
    )]);
    transport.put_blob("source-blob", src).await.unwrap();
    let compiled = agent
        .compile_package(&CompilePackageArgs {
            blobstore_id: "source-blob".into(),
            sha1,
            name: "tiny".into(),
            version: "1".into(),
            dependencies: IndexMap::new(),
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", log()))
        .result;
    let tarball = transport.get_blob(&compiled.blobstore_id).await.unwrap();
    assert_eq!(sha1_hex(&tarball), compiled.sha1);
    let state = agent.get_state(false).await.unwrap();
    assert_eq!(state.agent_id.as_deref(), Some("create-env-agent"));

    cpi.delete_vm(&vm).await.unwrap();
    cpi.delete_stemcell(&stemcell).await.unwrap();
    assert!(
        local::inventory(&dir.path().join("state"))
            .unwrap()
            .is_empty()
    );
}

/// SIGTERM stops the agent promptly even when its message bus has gone away (a flush to a
/// dead server would wait forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_an_agent_whose_nats_server_is_gone() {
    let nats = BoshNats::start(&[AGENT_ID]).unwrap();
    let pem = nats.agent(AGENT_ID).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({
            "agent_id": AGENT_ID,
            "vm": {"name": "vm-x"},
            "mbus": nats.url(),
            "env": {"bosh": {"mbus": {"cert": {
                "ca": pem.ca_pem, "certificate": pem.cert_pem, "private_key": pem.key_pem}}}},
        })
        .to_string(),
    )
    .unwrap();
    let director_pem = nats.director().unwrap();
    let director = Arc::new(
        NatsTransport::connect(&NatsOptions::new(
            nats.url(),
            MbusTls::new(
                director_pem.ca_pem,
                director_pem.cert_pem,
                director_pem.key_pem,
            ),
        ))
        .await
        .unwrap(),
    );
    /// Kills the agent if the test fails before it exits.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(
        std::process::Command::new(KUBOSH)
            .args(["agent", "-b"])
            .arg(dir.path().join("root"))
            .arg("--settings")
            .arg(&settings)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let agent = director.agent(AGENT_ID).with_options(fast());
    agent
        .wait_until_ready("vm-x", Duration::from_secs(20))
        .await
        .expect("the agent answers");
    drop(agent);
    drop(director);
    drop(nats);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let exited = wait_for(Duration::from_secs(10), "the agent to exit", || {
        child.0.try_wait().unwrap()
    })
    .await;
    assert!(exited.success(), "{exited:?}");
}
