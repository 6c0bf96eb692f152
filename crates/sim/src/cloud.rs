//! [`SimCloud`]: a [`Cloud`] whose VMs, disks, stemcells and snapshots are records in
//! memory, and whose VMs carry simulated agents ([`super::SimAgents`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use super::instruments::{CloudEffect, CloudFault, Instruments};
use super::world::{AgentState, NewAgents, SimDisk, SimInventory, SimSnapshot, SimStemcell, SimVm};
use super::{Shared, SimError, lock};
use kubosh_cloud::{
    Cloud, CloudFuture, CpiError, CpiInfo, CreateDisk, CreateNetwork, CreateStemcell, CreateVm,
    DiskCid, DiskHint, ErrorKind, Object, SnapshotCid, StemcellCid, UpdateDisk, VmCid, VmCreated,
    VmResources,
};

/// The simulated cloud. Every [`Cloud`] method behaves as a CPI should, with the CPI error
/// kinds (`VMNotFound`, `DiskNotFound`, `DiskNotAttached`, `NotImplemented`, ...); CIDs are
/// deterministic (`vm-1`, `disk-2`, ...).
///
/// Each call is logged with its main argument ([`Call::target`]): the agent id for
/// `create_vm`, the image path for `create_stemcell`, the VM locality hint (or nothing) for
/// `create_disk`, the disk for `attach_disk`/`detach_disk`, else the first CID argument.
/// Faults armed with [`super::Fault::only_for`] match that target.
pub struct SimCloud {
    shared: Arc<Shared>,
    instruments: Mutex<Instruments<CloudEffect>>,
    requests: AtomicU64,
    rate_limits: Mutex<BTreeMap<String, RateLimit>>,
}

/// An IaaS API's rate limit on one method, as AWS keeps them: a bucket of `burst` tokens
/// refilled at `per_second`; a call finding it empty is refused at once.
#[derive(Debug, Clone)]
struct RateLimit {
    per_second: f64,
    burst: f64,
    tokens: f64,
    at: tokio::time::Instant,
    refused: u64,
    /// When each call it let through came, and its target (a `create_vm`'s agent id).
    admitted: Vec<(tokio::time::Instant, String)>,
}

/// What a rate-limited call answers: the AWS CPI's words for EC2's refusal.
pub const RATE_LIMITED_MESSAGE: &str = "Request limit exceeded. (RequestLimitExceeded)";

impl std::fmt::Debug for SimCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCloud")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

fn not_found_vm(cid: &str) -> (ErrorKind, String) {
    (ErrorKind::VmNotFound, format!("VM '{cid}' not found"))
}

fn not_found_disk(cid: &str) -> (ErrorKind, String) {
    (ErrorKind::DiskNotFound, format!("Disk '{cid}' not found"))
}

/// A failure before it is a [`CpiError`] (which needs the method and a request id).
type Failure = (ErrorKind, String);

impl SimCloud {
    pub fn new(shared: Arc<Shared>) -> SimCloud {
        let record = shared.config.record_calls;
        SimCloud {
            shared,
            instruments: Mutex::new(Instruments::new(record)),
            requests: AtomicU64::new(0),
            rate_limits: Mutex::new(BTreeMap::new()),
        }
    }

    /// Limits `method` to `per_second` calls a second with bursts of `burst`, as IaaS APIs
    /// do: a call beyond it is answered at once with `Bosh::Clouds::CloudError`
    /// [`RATE_LIMITED_MESSAGE`] and changes nothing.
    pub fn set_rate_limit(&self, method: &str, per_second: f64, burst: u32) {
        lock(&self.rate_limits).insert(
            method.to_string(),
            RateLimit {
                per_second,
                burst: f64::from(burst),
                tokens: f64::from(burst),
                at: tokio::time::Instant::now(),
                refused: 0,
                admitted: Vec::new(),
            },
        );
    }

    /// How many calls of `method` its rate limit refused.
    pub fn rate_limited(&self, method: &str) -> u64 {
        lock(&self.rate_limits).get(method).map_or(0, |l| l.refused)
    }

    /// When the calls of `method` its rate limit let through came, in order, each with its
    /// target (for `create_vm`, the agent id).
    pub fn rate_limit_admitted(&self, method: &str) -> Vec<(tokio::time::Instant, String)> {
        (lock(&self.rate_limits).get(method)).map_or_else(Vec::new, |l| l.admitted.clone())
    }

    /// Whether `method`'s rate limit lets a call on `target` through now (taking its
    /// token).
    fn admitted(&self, method: &str, target: &str) -> bool {
        let mut limits = lock(&self.rate_limits);
        let Some(limit) = limits.get_mut(method) else {
            return true;
        };
        let now = tokio::time::Instant::now();
        let refill = now.duration_since(limit.at).as_secs_f64() * limit.per_second;
        limit.tokens = (limit.tokens + refill).min(limit.burst);
        limit.at = now;
        if limit.tokens >= 1.0 {
            limit.tokens -= 1.0;
            limit.admitted.push((now, target.to_string()));
            true
        } else {
            limit.refused += 1;
            false
        }
    }

    // ---- steering and observing ---------------------------------------------------------

    super::instruments::forward_to_instruments!(CloudFault, "a CID or image path");

    /// Both sides' calls in the order they arrived, oldest first; empty when
    /// [`super::SimConfig::record_calls`] is off.
    pub fn timeline(&self) -> Vec<super::Step> {
        lock(&self.shared.timeline).clone()
    }

    /// Forgets the timeline.
    pub fn reset_timeline(&self) {
        lock(&self.shared.timeline).clear();
    }

    /// Everything the cloud holds, sorted by CID.
    pub fn inventory(&self) -> SimInventory {
        self.shared.world().inventory()
    }

    /// One VM.
    pub fn vm(&self, cid: &VmCid) -> Option<SimVm> {
        self.shared.world().vms.get(cid.as_str()).cloned()
    }

    /// One disk.
    pub fn disk(&self, cid: &DiskCid) -> Option<SimDisk> {
        self.shared.world().disks.get(cid.as_str()).cloned()
    }

    /// The agent id of a VM.
    pub fn agent_id_of(&self, vm: &VmCid) -> Option<String> {
        self.shared
            .world()
            .vms
            .get(vm.as_str())
            .map(|v| v.agent_id.clone())
    }

    /// Makes the agent of `vm` stop answering (`true`) or answer again (`false`).
    pub fn set_agent_unresponsive(&self, vm: &VmCid, unresponsive: bool) -> Result<(), SimError> {
        let mut world = self.shared.world();
        let agent_id = world
            .vms
            .get(vm.as_str())
            .map(|v| v.agent_id.clone())
            .ok_or_else(|| SimError::VmNotFound(vm.to_string()))?;
        let agent = world
            .agents
            .get_mut(&agent_id)
            .filter(|a| a.vm_cid == vm.as_str())
            .ok_or(SimError::AgentNotFound(agent_id))?;
        agent.responsive = !unresponsive;
        Ok(())
    }

    /// What the agents of VMs created from now on are like.
    pub fn set_new_agents(&self, new_agents: NewAgents) {
        self.shared.world().new_agents = new_agents;
    }

    /// Writes a file onto a disk's simulated contents.
    pub fn write_disk_file(
        &self,
        disk: &DiskCid,
        path: &str,
        content: &str,
    ) -> Result<(), SimError> {
        let mut world = self.shared.world();
        let d = world
            .disks
            .get_mut(disk.as_str())
            .ok_or_else(|| SimError::DiskNotFound(disk.to_string()))?;
        d.files.insert(path.to_string(), content.to_string());
        Ok(())
    }

    /// A disk's simulated contents.
    pub fn disk_files(&self, disk: &DiskCid) -> Option<BTreeMap<String, String>> {
        self.shared
            .world()
            .disks
            .get(disk.as_str())
            .map(|d| d.files.clone())
    }

    // ---- call machinery -----------------------------------------------------------------

    fn request_id(&self) -> String {
        let n = self.requests.fetch_add(1, Ordering::Relaxed) % 900_000;
        format!("cpi-{}", 100_000 + n)
    }

    fn error(&self, method: &str, (kind, message): Failure, ok_to_retry: bool) -> CpiError {
        CpiError::Cloud {
            error_type: kind.type_name().to_string(),
            kind,
            message,
            ok_to_retry,
            method: method.to_string(),
            request_id: self.request_id(),
        }
    }

    /// Logs the call, waits its latency and applies an armed fault.
    async fn enter(&self, method: &str, target: &str) -> Result<(), CpiError> {
        let entry = lock(&self.instruments).enter(method, target);
        self.shared.record(|| super::Step {
            side: super::Side::Cloud,
            method: method.to_string(),
            target: target.to_string(),
            arg: String::new(),
        });
        if !self.admitted(method, target) {
            let refused = (ErrorKind::CloudError, RATE_LIMITED_MESSAGE.to_string());
            return Err(self.error(method, refused, false));
        }
        if !entry.latency.is_zero() {
            tokio::time::sleep(entry.latency).await;
        }
        match entry.fault {
            None => Ok(()),
            Some(CloudEffect::Fail {
                kind,
                message,
                ok_to_retry,
            }) => Err(self.error(method, (kind, message), ok_to_retry)),
            Some(CloudEffect::Hang(Some(delay))) => {
                tokio::time::sleep(delay).await;
                Ok(())
            }
            Some(CloudEffect::Hang(None)) => std::future::pending().await,
        }
    }

    /// Runs `body` on the world after [`SimCloud::enter`]; a failure becomes the CPI error
    /// of `method`.
    async fn call<T>(
        &self,
        method: &'static str,
        target: &str,
        body: impl FnOnce(&mut super::world::World) -> Result<T, Failure>,
    ) -> Result<T, CpiError> {
        self.enter(method, target).await?;
        let outcome = body(&mut self.shared.world());
        outcome.map_err(|f| self.error(method, f, false))
    }

    fn v2(&self) -> bool {
        self.shared.config.api_version >= 2
    }

    /// `create_disk`, remembering the request id the disk was made for.
    async fn snapshot_disk_for(
        &self,
        cid: &DiskCid,
        metadata: &Object,
        request_id: Option<&str>,
    ) -> Result<SnapshotCid, CpiError> {
        self.call("snapshot_disk", cid.as_str(), move |w| {
            let files = w
                .disks
                .get(cid.as_str())
                .ok_or_else(|| not_found_disk(cid.as_str()))?
                .files
                .clone();
            let snapshot = w.next_id("snapshot");
            w.snapshots.insert(
                snapshot.clone(),
                SimSnapshot {
                    cid: snapshot.clone(),
                    disk_cid: cid.to_string(),
                    metadata: metadata.clone(),
                    files,
                    request_id: request_id.map(str::to_string),
                },
            );
            Ok(SnapshotCid(snapshot))
        })
        .await
    }

    async fn create_disk_for(
        &self,
        req: &CreateDisk,
        request_id: Option<&str>,
    ) -> Result<DiskCid, CpiError> {
        let target = req.vm_cid.as_ref().map(VmCid::as_str).unwrap_or_default();
        self.call("create_disk", target, move |w| {
            let cid = w.next_id("disk");
            w.disks.insert(
                cid.clone(),
                SimDisk {
                    cid: cid.clone(),
                    size_mib: req.size_mib,
                    cloud_properties: req.cloud_properties.clone(),
                    vm_locality: req.vm_cid.as_ref().map(|v| v.to_string()),
                    metadata: Map::new(),
                    attached_to: None,
                    files: BTreeMap::new(),
                    request_id: request_id.map(str::to_string),
                },
            );
            Ok(DiskCid(cid))
        })
        .await
    }
}

/// A dynamic network's address: from 100.64.0.0/10, which tests rarely use for manual
/// networks.
fn dynamic_ip(n: u64) -> String {
    format!(
        "100.{}.{}.{}",
        64 + ((n >> 16) & 63),
        (n >> 8) & 255,
        n & 255
    )
}

fn ips_of(networks: &Object) -> Vec<String> {
    networks
        .values()
        .filter_map(|n| n.get("ip")?.as_str())
        .filter(|ip| !ip.is_empty())
        .map(str::to_string)
        .collect()
}

fn create_vm(world: &mut super::world::World, req: &CreateVm) -> Result<(String, Object), Failure> {
    if !world.stemcells.contains_key(req.stemcell_cid.as_str()) {
        return Err((
            ErrorKind::CloudError,
            format!("Stemcell '{}' not found", req.stemcell_cid),
        ));
    }
    let mut networks = Map::new();
    for (name, settings) in &req.networks {
        let mut net = settings.0.clone();
        let has_ip = net
            .get("ip")
            .and_then(Value::as_str)
            .is_some_and(|ip| !ip.is_empty());
        if settings.kind() == Some("dynamic") && !has_ip {
            let n = world.next_number();
            net.insert("ip".into(), dynamic_ip(n).into());
        }
        networks.insert(name.clone(), Value::Object(net));
    }
    let ips = ips_of(&networks);
    if let Some((ip, other)) = ips
        .iter()
        .find_map(|ip| world.ips.get(ip).map(|vm| (ip, vm)))
    {
        return Err((
            ErrorKind::VmCreationFailed,
            format!("IP address '{ip}' is already in use by VM '{other}'"),
        ));
    }
    let cid = world.next_id("vm");
    for ip in ips {
        world.ips.insert(ip, cid.clone());
    }
    let agent = AgentState::new(
        cid.clone(),
        networks.clone(),
        !world.new_agents.unresponsive,
        world.new_agents.jobs_never_running,
    );
    // A reused agent id takes over: the message bus would deliver to the newest agent.
    world.agents.insert(req.agent_id.clone(), agent);
    world.vms.insert(
        cid.clone(),
        SimVm {
            cid: cid.clone(),
            agent_id: req.agent_id.clone(),
            stemcell_cid: req.stemcell_cid.to_string(),
            cloud_properties: req.cloud_properties.clone(),
            networks: networks.clone(),
            disk_cids: req.disk_cids.iter().map(|d| d.to_string()).collect(),
            env: req.env.clone(),
            metadata: Map::new(),
            disks: Default::default(),
            reboots: 0,
        },
    );
    Ok((cid, networks))
}

fn delete_vm(world: &mut super::world::World, cid: &str) -> Result<(), Failure> {
    let vm = world.vms.remove(cid).ok_or_else(|| not_found_vm(cid))?;
    for ip in ips_of(&vm.networks) {
        if world.ips.get(&ip).is_some_and(|holder| holder == cid) {
            world.ips.remove(&ip);
        }
    }
    for disk in &vm.disks {
        if let Some(d) = world.disks.get_mut(disk) {
            d.attached_to = None;
        }
    }
    if world
        .agents
        .get(&vm.agent_id)
        .is_some_and(|a| a.vm_cid == cid)
    {
        world.agents.remove(&vm.agent_id);
    }
    Ok(())
}

fn resize(
    world: &mut super::world::World,
    method: &str,
    cid: &str,
    new_size_mib: u64,
    cloud_properties: Option<&Object>,
) -> Result<(), Failure> {
    let disk = world
        .disks
        .get_mut(cid)
        .ok_or_else(|| not_found_disk(cid))?;
    if let Some(vm) = &disk.attached_to {
        return Err((
            ErrorKind::CloudError,
            format!("{method}: disk '{cid}' is attached to VM '{vm}'; detach it first"),
        ));
    }
    if new_size_mib < disk.size_mib {
        return Err((
            ErrorKind::NotSupported,
            format!(
                "{method}: disk '{cid}' cannot shrink from {} MiB to {new_size_mib} MiB",
                disk.size_mib
            ),
        ));
    }
    disk.size_mib = new_size_mib;
    if let Some(cp) = cloud_properties {
        disk.cloud_properties = cp.clone();
    }
    Ok(())
}

fn not_implemented(method: &str) -> Failure {
    (
        ErrorKind::NotImplemented,
        format!("Must call implemented method: Unknown method '{method}'"),
    )
}

impl Cloud for SimCloud {
    fn info(&self) -> CloudFuture<'_, CpiInfo> {
        Box::pin(self.call("info", "", move |_| {
            Ok(CpiInfo {
                api_version: self.shared.config.api_version,
                stemcell_formats: self.shared.config.stemcell_formats.clone(),
                other: Map::new(),
            })
        }))
    }

    fn create_stemcell<'a>(&'a self, req: &'a CreateStemcell) -> CloudFuture<'a, StemcellCid> {
        let path = req.image_path.display().to_string();
        Box::pin(async move {
            let image_path = path.clone();
            self.call("create_stemcell", &path, move |w| {
                let cid = w.next_id("stemcell");
                w.stemcells.insert(
                    cid.clone(),
                    SimStemcell {
                        cid: cid.clone(),
                        image_path,
                        cloud_properties: req.cloud_properties.clone(),
                    },
                );
                Ok(StemcellCid(cid))
            })
            .await
        })
    }

    fn delete_stemcell<'a>(&'a self, cid: &'a StemcellCid) -> CloudFuture<'a, ()> {
        // An image that is already gone is no error, as IaaS CPIs treat it.
        Box::pin(self.call("delete_stemcell", cid.as_str(), move |w| {
            w.stemcells.remove(cid.as_str());
            Ok(())
        }))
    }

    fn create_vm<'a>(&'a self, req: &'a CreateVm) -> CloudFuture<'a, VmCreated> {
        Box::pin(async move {
            let (cid, networks) = self
                .call("create_vm", &req.agent_id, |w| create_vm(w, req))
                .await?;
            Ok(VmCreated {
                cid: VmCid(cid),
                networks: self.v2().then_some(networks),
            })
        })
    }

    fn delete_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call("delete_vm", cid.as_str(), |w| delete_vm(w, cid.as_str())))
    }

    fn has_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, bool> {
        Box::pin(self.call("has_vm", cid.as_str(), move |w| {
            Ok(w.vms.contains_key(cid.as_str()))
        }))
    }

    fn reboot_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call("reboot_vm", cid.as_str(), move |w| {
            let vm = w
                .vms
                .get_mut(cid.as_str())
                .ok_or_else(|| not_found_vm(cid.as_str()))?;
            vm.reboots += 1;
            Ok(())
        }))
    }

    fn set_vm_metadata<'a>(&'a self, cid: &'a VmCid, metadata: &'a Object) -> CloudFuture<'a, ()> {
        Box::pin(self.call("set_vm_metadata", cid.as_str(), move |w| {
            let vm = w
                .vms
                .get_mut(cid.as_str())
                .ok_or_else(|| not_found_vm(cid.as_str()))?;
            vm.metadata
                .extend(metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
            Ok(())
        }))
    }

    fn calculate_vm_cloud_properties<'a>(
        &'a self,
        resources: &'a VmResources,
    ) -> CloudFuture<'a, Object> {
        Box::pin(self.call("calculate_vm_cloud_properties", "", move |_| {
            match json!({
                "cpu": resources.cpu,
                "ram": resources.ram,
                "ephemeral_disk_size": resources.ephemeral_disk_size,
            }) {
                Value::Object(m) => Ok(m),
                _ => Ok(Map::new()),
            }
        }))
    }

    fn create_disk<'a>(&'a self, req: &'a CreateDisk) -> CloudFuture<'a, DiskCid> {
        Box::pin(self.create_disk_for(req, None))
    }

    fn create_disk_with_request_id<'a>(
        &'a self,
        req: &'a CreateDisk,
        request_id: &'a str,
    ) -> CloudFuture<'a, DiskCid> {
        Box::pin(self.create_disk_for(req, Some(request_id)))
    }

    fn find_vm_by_agent<'a>(&'a self, agent_id: &'a str) -> CloudFuture<'a, Option<VmCid>> {
        Box::pin(self.call(kubosh_cloud::FIND_VM, agent_id, move |w| {
            Ok(w.vms
                .values()
                .find(|vm| vm.agent_id == agent_id)
                .map(|vm| VmCid(vm.cid.clone())))
        }))
    }

    fn find_disk_by_request<'a>(&'a self, request_id: &'a str) -> CloudFuture<'a, Option<DiskCid>> {
        Box::pin(self.call(kubosh_cloud::FIND_DISK, request_id, move |w| {
            Ok(w.disks
                .values()
                .find(|d| d.request_id.as_deref() == Some(request_id))
                .map(|d| DiskCid(d.cid.clone())))
        }))
    }

    fn delete_disk<'a>(&'a self, cid: &'a DiskCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call("delete_disk", cid.as_str(), move |w| {
            let disk = w
                .disks
                .get(cid.as_str())
                .ok_or_else(|| not_found_disk(cid.as_str()))?;
            if let Some(vm) = &disk.attached_to {
                return Err((
                    ErrorKind::CloudError,
                    format!("Disk '{cid}' is attached to VM '{vm}'"),
                ));
            }
            w.disks.remove(cid.as_str());
            Ok(())
        }))
    }

    fn has_disk<'a>(&'a self, cid: &'a DiskCid) -> CloudFuture<'a, bool> {
        Box::pin(self.call("has_disk", cid.as_str(), move |w| {
            Ok(w.disks.contains_key(cid.as_str()))
        }))
    }

    fn attach_disk<'a>(
        &'a self,
        vm: &'a VmCid,
        disk: &'a DiskCid,
    ) -> CloudFuture<'a, Option<DiskHint>> {
        let v2 = self.v2();
        Box::pin(self.call("attach_disk", disk.as_str(), move |w| {
            let v = w
                .vms
                .get_mut(vm.as_str())
                .ok_or_else(|| not_found_vm(vm.as_str()))?;
            let d = w
                .disks
                .get_mut(disk.as_str())
                .ok_or_else(|| not_found_disk(disk.as_str()))?;
            if let Some(other) = d.attached_to.as_deref().filter(|o| *o != vm.as_str()) {
                return Err((
                    ErrorKind::CloudError,
                    format!("Disk '{disk}' is already attached to VM '{other}'"),
                ));
            }
            d.attached_to = Some(vm.to_string());
            v.disks.insert(disk.to_string());
            Ok(v2.then(|| DiskHint(json!({ "path": disk_path(disk.as_str()) }))))
        }))
    }

    fn detach_disk<'a>(&'a self, vm: &'a VmCid, disk: &'a DiskCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call("detach_disk", disk.as_str(), move |w| {
            let v = w
                .vms
                .get_mut(vm.as_str())
                .ok_or_else(|| not_found_vm(vm.as_str()))?;
            let d = w
                .disks
                .get_mut(disk.as_str())
                .ok_or_else(|| not_found_disk(disk.as_str()))?;
            if d.attached_to.as_deref() != Some(vm.as_str()) {
                return Err((
                    ErrorKind::DiskNotAttached,
                    format!("Disk '{disk}' is not attached to VM '{vm}'"),
                ));
            }
            d.attached_to = None;
            v.disks.remove(disk.as_str());
            Ok(())
        }))
    }

    fn get_disks<'a>(&'a self, vm: &'a VmCid) -> CloudFuture<'a, Vec<DiskCid>> {
        Box::pin(self.call("get_disks", vm.as_str(), move |w| {
            let v = w
                .vms
                .get(vm.as_str())
                .ok_or_else(|| not_found_vm(vm.as_str()))?;
            Ok(v.disks.iter().map(|d| DiskCid(d.clone())).collect())
        }))
    }

    fn resize_disk<'a>(&'a self, cid: &'a DiskCid, new_size_mib: u64) -> CloudFuture<'a, ()> {
        let supported = self.shared.config.resize_disk;
        Box::pin(self.call("resize_disk", cid.as_str(), move |w| {
            if !supported {
                return Err(not_implemented("resize_disk"));
            }
            resize(w, "resize_disk", cid.as_str(), new_size_mib, None)
        }))
    }

    fn update_disk<'a>(&'a self, req: &'a UpdateDisk) -> CloudFuture<'a, Option<DiskCid>> {
        let supported = self.shared.config.update_disk;
        Box::pin(self.call("update_disk", req.disk_cid.as_str(), move |w| {
            if !supported {
                return Err(not_implemented("update_disk"));
            }
            resize(
                w,
                "update_disk",
                req.disk_cid.as_str(),
                req.new_size_mib,
                Some(&req.cloud_properties),
            )?;
            Ok(None)
        }))
    }

    fn set_disk_metadata<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
    ) -> CloudFuture<'a, ()> {
        Box::pin(self.call("set_disk_metadata", cid.as_str(), move |w| {
            let d = w
                .disks
                .get_mut(cid.as_str())
                .ok_or_else(|| not_found_disk(cid.as_str()))?;
            d.metadata
                .extend(metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
            Ok(())
        }))
    }

    fn snapshot_disk<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
    ) -> CloudFuture<'a, SnapshotCid> {
        Box::pin(self.snapshot_disk_for(cid, metadata, None))
    }

    fn snapshot_disk_with_request_id<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
        request_id: &'a str,
    ) -> CloudFuture<'a, SnapshotCid> {
        Box::pin(self.snapshot_disk_for(cid, metadata, Some(request_id)))
    }

    fn find_snapshot_by_request<'a>(
        &'a self,
        request_id: &'a str,
    ) -> CloudFuture<'a, Option<SnapshotCid>> {
        Box::pin(
            self.call(kubosh_cloud::FIND_SNAPSHOT, request_id, move |w| {
                Ok(w.snapshots
                    .values()
                    .find(|s| s.request_id.as_deref() == Some(request_id))
                    .map(|s| SnapshotCid(s.cid.clone())))
            }),
        )
    }

    fn delete_snapshot<'a>(&'a self, cid: &'a SnapshotCid) -> CloudFuture<'a, ()> {
        Box::pin(self.call("delete_snapshot", cid.as_str(), move |w| {
            w.snapshots
                .remove(cid.as_str())
                .map(|_| ())
                .ok_or_else(|| (ErrorKind::CloudError, format!("Snapshot '{cid}' not found")))
        }))
    }

    fn create_network<'a>(&'a self, _spec: &'a CreateNetwork) -> CloudFuture<'a, Value> {
        Box::pin(self.call("create_network", "", move |_| {
            Err(not_implemented("create_network"))
        }))
    }

    fn delete_network<'a>(&'a self, network_id: &'a str) -> CloudFuture<'a, ()> {
        Box::pin(self.call("delete_network", network_id, move |_| {
            Err(not_implemented("delete_network"))
        }))
    }
}

/// Where a disk appears on its VM (the `path` of the disk hint).
pub fn disk_path(cid: &str) -> String {
    format!("/sim/disks/{cid}")
}
