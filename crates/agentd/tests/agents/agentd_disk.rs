//! Persistent disks as directories: mount, migrate, unmount, list.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use kubosh_agentd::disk::{DiskError, Disks, Mounted};
use kubosh_agentd::layout::Layout;

#[test]
fn mount_migrate_keeps_data_and_unmount() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path().join("vcap"));
    layout.create().unwrap();
    let disks = Disks::new(layout.clone());
    let d1 = dir.path().join("disks/disk-1");
    let d2 = dir.path().join("disks/disk-2");
    disks
        .add_persistent_disk("disk-1", &serde_json::json!(d1.to_str().unwrap()))
        .unwrap();
    disks
        .add_persistent_disk("disk-2", &serde_json::json!({"path": d2.to_str().unwrap()}))
        .unwrap();
    assert!(disks.list_disk().unwrap().is_empty());

    assert_eq!(disks.mount_disk("disk-1").unwrap(), Mounted::Store);
    assert_eq!(disks.mount_disk("disk-1").unwrap(), Mounted::AlreadyMounted);
    assert_eq!(disks.list_disk().unwrap(), ["disk-1"]);

    // Data on the first disk, through store/.
    let store = layout.store_dir();
    std::fs::create_dir_all(store.join("db/private")).unwrap();
    std::fs::write(store.join("db/data"), "precious").unwrap();
    std::fs::set_permissions(
        store.join("db/data"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(
        store.join("db/private"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    std::os::unix::fs::symlink("data", store.join("db/current")).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    std::fs::File::options()
        .write(true)
        .open(store.join("db/data"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    assert!(d1.join("db/data").is_file());

    assert_eq!(
        disks.mount_disk("disk-2").unwrap(),
        Mounted::MigrationTarget
    );
    assert_eq!(disks.list_disk().unwrap(), ["disk-1", "disk-2"]);
    disks.migrate_disk().unwrap();
    assert_eq!(std::fs::read_link(&store).unwrap(), d2);
    assert_eq!(disks.list_disk().unwrap(), ["disk-2"]);
    assert_eq!(
        std::fs::read_to_string(layout.managed_disk_settings_file()).unwrap(),
        "disk-2"
    );
    assert_eq!(
        std::fs::read_to_string(store.join("db/data")).unwrap(),
        "precious"
    );
    let meta = std::fs::metadata(d2.join("db/data")).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(meta.mtime(), 1_000_000_000);
    assert_eq!(
        std::fs::metadata(d2.join("db/private")).unwrap().mode() & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::read_link(d2.join("db/current")).unwrap(),
        std::path::Path::new("data")
    );
    assert!(layout.store_migration_dir().is_dir());
    assert!(std::fs::read_link(layout.store_migration_dir()).is_err());

    assert!(disks.unmount_disk("disk-2").unwrap());
    assert!(!disks.unmount_disk("disk-2").unwrap());
    assert!(disks.list_disk().unwrap().is_empty());
    assert!(store.is_dir() && std::fs::read_dir(&store).unwrap().next().is_none());
    // The data stays on the disk.
    assert_eq!(
        std::fs::read_to_string(d2.join("db/data")).unwrap(),
        "precious"
    );

    disks.remove_persistent_disk("disk-1").unwrap();
    assert!(matches!(
        disks.mount_disk("disk-1"),
        Err(DiskError::UnknownDisk(_))
    ));
    std::fs::write(store.join("stray"), "x").unwrap();
    assert!(matches!(
        disks.mount_disk("disk-2"),
        Err(DiskError::MountPointInUse(_))
    ));
    assert!(matches!(
        disks.migrate_disk(),
        Err(DiskError::NothingToMigrate)
    ));
    assert!(
        disks
            .add_persistent_disk("disk-3", &serde_json::json!("relative/path"))
            .is_err()
    );
}
