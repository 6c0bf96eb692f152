//! The simulated agent's actions: what each one does to the world and what it answers,
//! with the reply values and failure causes of kubosh's real agent (`agentd::service`).
//! A failure here is the cause only; the dispatcher adds `Action Failed <method>: ` or makes
//! it the task's result.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::spec::{self, JobsStatus};
use super::world::{Task, World};
use kubosh_transport::agent::Method;
use kubosh_transport::agent::protocol::UploadBlob;

/// The actions the simulated agent answers; every other method is `unknown message`, as an
/// agent that does not know it answers.
pub fn implements(method: Method) -> bool {
    use Method::*;
    matches!(
        method,
        Ping | Info
            | GetTask
            | CancelTask
            | GetState
            | Prepare
            | Apply
            | Start
            | Stop
            | Drain
            | RunScript
            | CompilePackage
            | MountDisk
            | UnmountDisk
            | AddPersistentDisk
            | RemovePersistentDisk
            | MigrateDisk
            | ListDisk
            | SyncDns
            | UpdateSettings
            | UploadBlob
            | DeleteArpEntries
            | Shutdown
            | RunErrand
    )
}

/// Argument `i` as `T`, worded like the agent's action runner.
pub fn arg<T: DeserializeOwned>(args: &[Value], i: usize, needed: usize) -> Result<T, String> {
    let v = args.get(i).ok_or_else(|| {
        format!(
            "Extracting method arguments from payload: Not enough arguments, expected {needed}, got {}",
            args.len()
        )
    })?;
    serde_json::from_value(v.clone()).map_err(|e| {
        format!("Extracting method arguments from payload: Unmarshalling action argument: {e}")
    })
}

fn unknown_disk(cid: &str) -> String {
    format!("Persistent disk with volume id '{cid}' could not be found")
}

/// Argument `i` by reference (for JSON objects the action keeps or reads in place).
fn arg_ref(args: &[Value], i: usize, needed: usize) -> Result<&Value, String> {
    args.get(i).ok_or_else(|| {
        format!(
            "Extracting method arguments from payload: Not enough arguments, expected {needed}, got {}",
            args.len()
        )
    })
}

/// Argument `i`, which must be a JSON object.
fn object_arg(args: &[Value], i: usize, needed: usize) -> Result<&Map<String, Value>, String> {
    arg_ref(args, i, needed)?.as_object().ok_or_else(|| {
        "Extracting method arguments from payload: Unmarshalling action argument: \
         expected an object"
            .to_string()
    })
}

/// Runs `method` (anything but `compile_package`) on the agent `agent_id`, which exists.
pub fn run(
    world: &mut World,
    agent_id: &str,
    method: Method,
    args: &[Value],
) -> Result<Value, String> {
    match method {
        Method::GetTask => end_if_due(world, agent_id, &arg::<String>(args, 0, 1)?),
        Method::MountDisk => return mount_disk(world, agent_id, &arg::<String>(args, 0, 1)?),
        Method::MigrateDisk => return migrate_disk(world, agent_id),
        _ => {}
    }
    let agent = world
        .agents
        .get_mut(agent_id)
        .ok_or_else(|| format!("agent {agent_id} is gone"))?;
    match method {
        Method::Ping => Ok(json!("pong")),
        Method::Info => Ok(json!({"api_version": 1})),
        Method::GetTask => {
            let id: String = arg(args, 0, 1)?;
            match agent.tasks.get(&id) {
                None => Err(format!("Task with id {id} could not be found")),
                Some(Task::Running { .. }) => Ok(json!({"agent_task_id": id, "state": "running"})),
                Some(Task::Done(Ok(v))) => Ok(v.clone()),
                Some(Task::Done(Err(cause))) => Err(format!("Task {id} result: {cause}")),
            }
        }
        Method::CancelTask => {
            let id: String = arg(args, 0, 1)?;
            match agent.tasks.get(&id) {
                None => Err(format!("Task with id {id} could not be found")),
                Some(Task::Running { cancellable: false }) => Err("not supported".into()),
                Some(Task::Running { cancellable: true }) => {
                    agent.finish_task(&id, Err("Task was cancelled".into()));
                    Ok(json!("canceled"))
                }
                Some(Task::Done(_)) => Ok(json!("canceled")),
            }
        }
        Method::GetState => {
            let full = args.first().and_then(Value::as_str) == Some("full");
            let jobs = JobsStatus {
                started: agent.started,
                stopped: agent.stopped,
                never_running: agent.jobs_never_running,
            };
            Ok(spec::state(
                &agent.spec,
                agent_id,
                &agent.vm_cid,
                &jobs,
                full,
            ))
        }
        Method::Prepare => {
            let spec = object_arg(args, 0, 1)?;
            agent.prepared = Some(Value::Object(spec.clone()));
            Ok(json!("prepared"))
        }
        Method::Apply => {
            let spec = arg_ref(args, 0, 1)?;
            object_arg(args, 0, 1)?;
            // The persisted spec keeps `networks` verbatim, so the dynamic addresses can be
            // filled in there (no copy of the director's spec).
            let mut persisted = Value::Object(spec::persisted(spec));
            spec::fill_dynamic_networks(&mut persisted, &agent.networks);
            agent.spec = persisted;
            Ok(json!("applied"))
        }
        Method::Start => {
            agent.started = true;
            agent.stopped = false;
            Ok(json!("started"))
        }
        Method::Stop => {
            agent.started = false;
            agent.stopped = true;
            Ok(json!("stopped"))
        }
        Method::Drain => {
            let kind: String = arg(args, 0, 1)?;
            if !matches!(kind.as_str(), "update" | "shutdown" | "status") {
                return Err(format!("Invalid drain type '{kind}'"));
            }
            agent.drains.push(kind);
            Ok(json!(0))
        }
        Method::RunScript => {
            let script: String = arg(args, 0, 2)?;
            arg_ref(args, 1, 2)?;
            agent.scripts.push(script);
            Ok(json!({}))
        }
        Method::UnmountDisk => {
            let cid: String = arg(args, 0, 1)?;
            if !agent.disk_hints.contains_key(&cid) {
                return Err(format!(
                    "Unmounting persistent disk: {}",
                    unknown_disk(&cid)
                ));
            }
            let message = if agent.store.as_deref() == Some(cid.as_str()) {
                agent.store = None;
                format!("Unmounted partition of {{ID:{cid}}}")
            } else if agent.migration_target.as_deref() == Some(cid.as_str()) {
                agent.migration_target = None;
                format!("Unmounted partition of {{ID:{cid}}}")
            } else {
                format!("Partition of {{ID:{cid}}} is not mounted")
            };
            Ok(json!({ "message": message }))
        }
        Method::AddPersistentDisk => {
            let cid: String = arg(args, 0, 2)?;
            let hint = arg_ref(args, 1, 2)?.clone();
            if !(hint.is_string() || hint.is_object()) {
                return Err(format!(
                    "disk {cid}: unusable disk hint {hint}: expected a path or an object"
                ));
            }
            agent.disk_hints.insert(cid, hint);
            Ok(json!({}))
        }
        Method::RemovePersistentDisk => {
            let cid: String = arg(args, 0, 1)?;
            agent.disk_hints.remove(&cid);
            Ok(json!({}))
        }
        Method::ListDisk => Ok(json!(agent.mounted())),
        Method::SyncDns => {
            let _blobstore_id: String = arg(args, 0, 3)?;
            let _digest: String = arg(args, 1, 3)?;
            let version: u64 = arg(args, 2, 3)?;
            agent.dns_version = Some(agent.dns_version.map_or(version, |v| v.max(version)));
            Ok(json!("synced"))
        }
        Method::UpdateSettings => {
            let settings = object_arg(args, 0, 1)?;
            agent.settings = Some(Value::Object(settings.clone()));
            Ok(json!("ok"))
        }
        Method::UploadBlob => {
            let blob: UploadBlob = arg(args, 0, 1)?;
            check_payload(&blob)?;
            agent.uploaded_blobs.push(blob.blob_id.clone());
            Ok(json!(blob.blob_id))
        }
        Method::DeleteArpEntries => {
            #[derive(serde::Deserialize)]
            struct Ips {
                ips: Vec<String>,
            }
            let ips: Ips = arg(args, 0, 1)?;
            agent.arp_deleted.extend(ips.ips);
            Ok(json!({}))
        }
        Method::RunErrand => {
            // The errand succeeds, saying which job it ran (every job's, when none is named).
            let job: Option<String> = args.first().map(|_| arg(args, 0, 1)).transpose()?;
            Ok(json!({
                "exit_code": 0,
                "stdout": format!("ran {}", job.as_deref().unwrap_or("every errand")),
                "stderr": "",
            }))
        }
        Method::Shutdown => {
            // The VM powers off: nothing answers any more.
            agent.responsive = false;
            Ok(json!(""))
        }
        other => Err(format!("unknown message {}", other.name())),
    }
}

/// Ends task `task_id` now if its latency has passed, so a `get_task` at the very instant a
/// task ends sees it ended: at equal virtual times the end comes first, whichever of the two
/// the runtime happens to wake first.
fn end_if_due(world: &mut World, agent_id: &str, task_id: &str) {
    let Some(agent) = world.agents.get_mut(agent_id) else {
        return;
    };
    let now = tokio::time::Instant::now();
    if agent.due.get(task_id).is_none_or(|d| d.at > now) {
        return;
    }
    let Some(due) = agent.due.remove(task_id) else {
        return;
    };
    if !matches!(agent.tasks.get(task_id), Some(Task::Running { .. })) {
        return;
    }
    let result = match due.failure {
        Some(cause) => Err(cause),
        None => run(world, agent_id, due.method, &due.args),
    };
    if let Some(agent) = world.agents.get_mut(agent_id) {
        agent.finish_task(task_id, result);
    }
}

/// `upload_blob`'s payload must decode and match its checksum, as the agent checks.
fn check_payload(blob: &UploadBlob) -> Result<(), String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&blob.payload)
        .map_err(|e| format!("Decoding payload: {e}"))?;
    let digest: kubosh_base::digest::MultiDigest = blob.checksum.parse().map_err(|e| {
        format!("Extracting method arguments from payload: Unmarshalling action argument: {e}")
    })?;
    digest.verify(&bytes).map_err(|e| {
        format!(
            "Payload corrupted. Checksum mismatch. Expected '{}': {e}",
            blob.checksum
        )
    })
}

/// `mount_disk`: the hint from `add_persistent_disk`, else the cloud's attachment (the agent
/// refreshes its settings, where the CPI put the disk); `store` first, the migration target
/// when `store` holds another disk.
fn mount_disk(world: &mut World, agent_id: &str, cid: &str) -> Result<Value, String> {
    let fail = |cause: String| format!("Mounting persistent disk: {cause}");
    let agent = world
        .agents
        .get_mut(agent_id)
        .ok_or_else(|| format!("agent {agent_id} is gone"))?;
    if !agent.disk_hints.contains_key(cid) {
        let attached = world
            .disks
            .get(cid)
            .is_some_and(|d| d.attached_to.as_deref() == Some(agent.vm_cid.as_str()));
        if !attached {
            return Err(fail(unknown_disk(cid)));
        }
        agent.disk_hints.insert(
            cid.to_string(),
            json!({ "path": super::cloud::disk_path(cid) }),
        );
    }
    let here = Some(cid);
    if agent.store.as_deref() == here || agent.migration_target.as_deref() == here {
        return Ok(json!({}));
    }
    if agent.store.is_none() {
        agent.store = Some(cid.to_string());
    } else if agent.migration_target.is_none() {
        agent.migration_target = Some(cid.to_string());
    } else {
        return Err(fail(format!(
            "disk {cid}: store and store_migration_target are both in use"
        )));
    }
    Ok(json!({}))
}

/// `migrate_disk`: copies the files of the disk at `store` onto the one at the migration
/// target, which then becomes `store` (the old disk is unmounted).
fn migrate_disk(world: &mut World, agent_id: &str) -> Result<Value, String> {
    let agent = world
        .agents
        .get_mut(agent_id)
        .ok_or_else(|| format!("agent {agent_id} is gone"))?;
    let (Some(from), Some(to)) = (agent.store.clone(), agent.migration_target.clone()) else {
        return Err("migrate_disk needs disks mounted at store and store_migration_target".into());
    };
    let files = world
        .disks
        .get(&from)
        .map(|d| d.files.clone())
        .ok_or_else(|| format!("copying {from} to {to}: disk {from} is gone"))?;
    let target = world
        .disks
        .get_mut(&to)
        .ok_or_else(|| format!("copying {from} to {to}: disk {to} is gone"))?;
    target.files.extend(files);
    if let Some(agent) = world.agents.get_mut(agent_id) {
        agent.store = Some(to);
        agent.migration_target = None;
    }
    Ok(json!({}))
}

/// The compiled package `compile_package` produces: deterministic bytes (so runs compare)
/// naming the source and the dependencies.
pub fn compiled_bytes(args: &[Value]) -> Result<(String, Vec<u8>), String> {
    let blobstore_id: String = arg(args, 0, 5)?;
    let digest: String = arg(args, 1, 5)?;
    let name: String = arg(args, 2, 5)?;
    let version: String = arg(args, 3, 5)?;
    let deps: Map<String, Value> = arg(args, 4, 5)?;
    let mut text =
        format!("simulated compiled package {name}/{version}\nsource {blobstore_id} {digest}\n");
    let mut dep_lines: Vec<String> = deps
        .iter()
        .map(|(key, d)| {
            format!(
                "dependency {key} {} {}\n",
                d["version"].as_str().unwrap_or_default(),
                d["sha1"].as_str().unwrap_or_default()
            )
        })
        .collect();
    dep_lines.sort();
    text.extend(dep_lines);
    Ok((name, text.into_bytes()))
}
