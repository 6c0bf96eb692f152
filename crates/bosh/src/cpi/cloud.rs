//! The engine's view of a cloud.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use super::error::CpiError;
use super::types::*;

/// The CPI method of [`Cloud::find_disk_by_request`]: `kubosh_find_disk(request_id)` ⇒ the
/// CID of the disk a `create_disk` with that `context.request_id` made, or `null`.
pub const FIND_DISK: &str = "kubosh_find_disk";

/// The CPI method of [`Cloud::find_stemcell_by_request`]: `kubosh_find_stemcell(request_id)`
/// ⇒ the CID of the stemcell a `create_stemcell` with that `context.request_id` made, or
/// `null`.
pub const FIND_STEMCELL: &str = "kubosh_find_stemcell";

/// The CPI method of [`Cloud::find_vm_by_agent`]: `kubosh_find_vm(agent_id)` ⇒ the CID of
/// the VM `create_vm` made for that agent id, or `null`.
pub const FIND_VM: &str = "kubosh_find_vm";

/// The CPI method of [`Cloud::find_snapshot_by_request`]: `kubosh_find_snapshot(request_id)`
/// ⇒ the CID of the snapshot a `snapshot_disk` with that `context.request_id` made, or
/// `null`.
pub const FIND_SNAPSHOT: &str = "kubosh_find_snapshot";

/// What a cloud without a kubosh extension answers: BOSH's `NotImplemented`.
fn not_implemented<T: Send + 'static>(method: &'static str) -> CloudFuture<'static, T> {
    Box::pin(async move {
        Err(CpiError::Cloud {
            kind: super::error::ErrorKind::NotImplemented,
            error_type: super::error::ErrorKind::NotImplemented
                .type_name()
                .to_string(),
            message: format!("Must call implemented method: Unknown method '{method}'"),
            ok_to_retry: false,
            method: method.to_string(),
            request_id: String::new(),
        })
    })
}

/// The future every [`Cloud`] method returns (boxed, so `dyn Cloud` works: one deployment can
/// use several CPIs).
pub type CloudFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, CpiError>> + Send + 'a>>;

/// A cloud, as the deploy engine drives it: one method per CPI API v2 method
/// (`bosh-protocols.md` §1.6), typed arguments and results.
///
/// Result shapes are already normalised across API versions: `create_vm` yields the CID
/// whether the CPI answered v1 (a string) or v2 (`[cid, networks]`), and `attach_disk` yields
/// `None` under v1 (no hint) and a non-empty hint under v2.
pub trait Cloud: Send + Sync {
    /// `info`: API version and stemcell formats.
    fn info(&self) -> CloudFuture<'_, CpiInfo>;

    /// `create_stemcell(image_path, cloud_properties)`.
    fn create_stemcell<'a>(&'a self, req: &'a CreateStemcell) -> CloudFuture<'a, StemcellCid>;

    /// `delete_stemcell(stemcell_cid)`.
    fn delete_stemcell<'a>(&'a self, cid: &'a StemcellCid) -> CloudFuture<'a, ()>;

    /// `create_vm(agent_id, stemcell_cid, cloud_properties, networks, disk_cids, env)`.
    fn create_vm<'a>(&'a self, req: &'a CreateVm) -> CloudFuture<'a, VmCreated>;

    /// `delete_vm(vm_cid)`; `VMNotFound` when it is already gone.
    fn delete_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, ()>;

    /// `has_vm(vm_cid)`.
    fn has_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, bool>;

    /// The VM `create_vm` made for `agent_id`, if any (kubosh extension, CPI method
    /// `kubosh_find_vm`): how a director killed before `create_vm` answered finds the VM
    /// even when its agent never comes up. `NotImplemented` (the default) means the cloud
    /// cannot tell.
    fn find_vm_by_agent<'a>(&'a self, agent_id: &'a str) -> CloudFuture<'a, Option<VmCid>> {
        let _ = agent_id;
        not_implemented(FIND_VM)
    }

    /// `reboot_vm(vm_cid)`.
    fn reboot_vm<'a>(&'a self, cid: &'a VmCid) -> CloudFuture<'a, ()>;

    /// `set_vm_metadata(vm_cid, metadata)`.
    fn set_vm_metadata<'a>(&'a self, cid: &'a VmCid, metadata: &'a Object) -> CloudFuture<'a, ()>;

    /// `calculate_vm_cloud_properties({cpu, ram, ephemeral_disk_size})`.
    fn calculate_vm_cloud_properties<'a>(
        &'a self,
        resources: &'a VmResources,
    ) -> CloudFuture<'a, Object>;

    /// `create_stemcell` sent with `request_id` as the request's `context.request_id`
    /// (kubosh extension): a run killed before the answer finds the stemcell again with
    /// [`Cloud::find_stemcell_by_request`]. Clouds that cannot tell ids apart just create it.
    fn create_stemcell_with_request_id<'a>(
        &'a self,
        req: &'a CreateStemcell,
        request_id: &'a str,
    ) -> CloudFuture<'a, StemcellCid> {
        let _ = request_id;
        self.create_stemcell(req)
    }

    /// The stemcell a `create_stemcell` with this `context.request_id` made, if any (kubosh
    /// extension, CPI method `kubosh_find_stemcell`). `NotImplemented` (the default) means
    /// the cloud cannot tell.
    fn find_stemcell_by_request<'a>(
        &'a self,
        request_id: &'a str,
    ) -> CloudFuture<'a, Option<StemcellCid>> {
        let _ = request_id;
        not_implemented(FIND_STEMCELL)
    }

    /// `create_disk(size, cloud_properties, vm_cid)`.
    fn create_disk<'a>(&'a self, req: &'a CreateDisk) -> CloudFuture<'a, DiskCid>;

    /// `create_disk` sent with `request_id` as the request's `context.request_id` (kubosh
    /// extension): a run killed before the answer finds the disk again with
    /// [`Cloud::find_disk_by_request`]. Clouds that cannot tell ids apart just create the
    /// disk.
    fn create_disk_with_request_id<'a>(
        &'a self,
        req: &'a CreateDisk,
        request_id: &'a str,
    ) -> CloudFuture<'a, DiskCid> {
        let _ = request_id;
        self.create_disk(req)
    }

    /// The disk a `create_disk` with this `context.request_id` made, if any (kubosh
    /// extension, CPI method `kubosh_find_disk`). `NotImplemented` (the default) means the
    /// cloud cannot tell.
    fn find_disk_by_request<'a>(&'a self, request_id: &'a str) -> CloudFuture<'a, Option<DiskCid>> {
        let _ = request_id;
        not_implemented(FIND_DISK)
    }

    /// `delete_disk(disk_cid)`.
    fn delete_disk<'a>(&'a self, cid: &'a DiskCid) -> CloudFuture<'a, ()>;

    /// `has_disk(disk_cid)`.
    fn has_disk<'a>(&'a self, cid: &'a DiskCid) -> CloudFuture<'a, bool>;

    /// `attach_disk(vm_cid, disk_cid)`: the hint to pass to the agent's
    /// `add_persistent_disk` (v2), `None` under API v1.
    fn attach_disk<'a>(
        &'a self,
        vm: &'a VmCid,
        disk: &'a DiskCid,
    ) -> CloudFuture<'a, Option<DiskHint>>;

    /// `detach_disk(vm_cid, disk_cid)`; `DiskNotAttached` when it is not attached.
    fn detach_disk<'a>(&'a self, vm: &'a VmCid, disk: &'a DiskCid) -> CloudFuture<'a, ()>;

    /// `get_disks(vm_cid)`: the disks attached to the VM.
    fn get_disks<'a>(&'a self, vm: &'a VmCid) -> CloudFuture<'a, Vec<DiskCid>>;

    /// `resize_disk(disk_cid, new_size)`; `NotImplemented`/`NotSupported` ⇒ copy instead.
    fn resize_disk<'a>(&'a self, cid: &'a DiskCid, new_size_mib: u64) -> CloudFuture<'a, ()>;

    /// `update_disk(disk_cid, new_size, cloud_properties)`: the new disk's CID, or `None` when
    /// updated in place.
    fn update_disk<'a>(&'a self, req: &'a UpdateDisk) -> CloudFuture<'a, Option<DiskCid>>;

    /// `set_disk_metadata(disk_cid, metadata)`.
    fn set_disk_metadata<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
    ) -> CloudFuture<'a, ()>;

    /// `snapshot_disk(disk_cid, metadata)`.
    fn snapshot_disk<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
    ) -> CloudFuture<'a, SnapshotCid>;

    /// `snapshot_disk` sent with `request_id` as the request's `context.request_id` (kubosh
    /// extension): a run killed before the answer finds the snapshot again with
    /// [`Cloud::find_snapshot_by_request`]. Clouds that cannot tell ids apart just snapshot.
    fn snapshot_disk_with_request_id<'a>(
        &'a self,
        cid: &'a DiskCid,
        metadata: &'a Object,
        request_id: &'a str,
    ) -> CloudFuture<'a, SnapshotCid> {
        let _ = request_id;
        self.snapshot_disk(cid, metadata)
    }

    /// The snapshot a `snapshot_disk` with this `context.request_id` made, if any (kubosh
    /// extension, CPI method `kubosh_find_snapshot`). `NotImplemented` (the default) means
    /// the cloud cannot tell.
    fn find_snapshot_by_request<'a>(
        &'a self,
        request_id: &'a str,
    ) -> CloudFuture<'a, Option<SnapshotCid>> {
        let _ = request_id;
        not_implemented(FIND_SNAPSHOT)
    }

    /// `delete_snapshot(snapshot_cid)`.
    fn delete_snapshot<'a>(&'a self, cid: &'a SnapshotCid) -> CloudFuture<'a, ()>;

    /// `create_network(spec)` (managed networks): `[network_id, {range, gateway, reserved},
    /// cloud_properties]`, verbatim.
    fn create_network<'a>(&'a self, spec: &'a CreateNetwork) -> CloudFuture<'a, Value>;

    /// `delete_network(network_id)`.
    fn delete_network<'a>(&'a self, network_id: &'a str) -> CloudFuture<'a, ()>;
}
