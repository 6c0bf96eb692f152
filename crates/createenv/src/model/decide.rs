//! The decisions of a create-env deploy that depend only on the state and the manifest.

use serde_json::Value;

use super::split::DiskSpec;
use super::state::{DiskRecord, EnvState, canonical_json};

/// What the deploy does with the persistent disk (bosh-cli's `disk_deployer.go`).
#[derive(Debug, Clone, PartialEq)]
pub enum DiskAction {
    /// The manifest asks for no disk: nothing at all (a disk record stays as it is).
    Nothing,
    /// No current disk: create one, attach and mount it.
    Create,
    /// Attach and mount the current disk again.
    Keep(DiskRecord),
    /// Attach the current disk, then move its data to a new one (size or cloud properties
    /// changed, or `--recreate-persistent-disks`).
    Migrate(DiskRecord),
}

/// bosh-cli's `NeedsMigration`: the size differs, or the cloud properties differ as Go's
/// JSON (keys sorted) shows them.
pub fn needs_migration(current: &DiskRecord, desired: &DiskSpec) -> bool {
    current.size != desired.size
        || canonical_json(&Value::Object(current.cloud_properties.clone()))
            != canonical_json(&Value::Object(desired.cloud_properties.clone()))
}

/// The disk action for `desired` (none when the manifest asks for no disk).
pub fn disk_action(
    state: &EnvState,
    desired: Option<&DiskSpec>,
    recreate_persistent_disks: bool,
) -> DiskAction {
    let Some(desired) = desired else {
        return DiskAction::Nothing;
    };
    match state.current_disk() {
        None => DiskAction::Create,
        Some(current) if recreate_persistent_disks || needs_migration(current, desired) => {
            DiskAction::Migrate(current.clone())
        }
        Some(current) => DiskAction::Keep(current.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn disk(size: u64, cp: Value) -> DiskSpec {
        DiskSpec {
            size,
            cloud_properties: cp.as_object().unwrap().clone(),
        }
    }

    fn state_with(size: u64, cp: Value) -> EnvState {
        let mut state = EnvState::default();
        state.add_disk(DiskRecord {
            id: "k".into(),
            cid: "disk-k".into(),
            size,
            cloud_properties: cp.as_object().unwrap().clone(),
        });
        state.current_disk_id = "k".into();
        state
    }

    #[test]
    fn disk_actions() {
        let empty = EnvState::default();
        assert_eq!(disk_action(&empty, None, true), DiskAction::Nothing);
        assert_eq!(
            disk_action(&empty, Some(&disk(1, json!({}))), false),
            DiskAction::Create
        );
        let state = state_with(1024, json!({"a": 1, "b": {"x": 1, "y": 2}}));
        let same = disk(1024, json!({"b": {"y": 2, "x": 1}, "a": 1}));
        assert!(
            matches!(disk_action(&state, Some(&same), false), DiskAction::Keep(d) if d.cid == "disk-k")
        );
        assert!(matches!(
            disk_action(&state, Some(&same), true),
            DiskAction::Migrate(_)
        ));
        let bigger = disk(2048, json!({"a": 1, "b": {"x": 1, "y": 2}}));
        assert!(matches!(
            disk_action(&state, Some(&bigger), false),
            DiskAction::Migrate(_)
        ));
        let other = disk(1024, json!({"a": 2, "b": {"x": 1, "y": 2}}));
        assert!(matches!(
            disk_action(&state, Some(&other), false),
            DiskAction::Migrate(_)
        ));
        // A record the current id does not name is not current.
        let mut stray = state.clone();
        stray.current_disk_id = "gone".into();
        assert_eq!(disk_action(&stray, Some(&same), false), DiskAction::Create);
    }
}
