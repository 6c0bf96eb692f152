//! A VM's private view of `/var/vcap`: the process moves into its own mount namespace and
//! bind-mounts its VM directory on the base directory, so the job processes it starts see
//! their files at the paths real releases hard-code (`/var/vcap/jobs/...`), while every other
//! path stays the host's. Linux only. As root this needs nothing more; any other user first
//! enters a user namespace of its own (mapped to root inside, so the mounts are allowed), and
//! the base directory must already exist on the host (only root can create `/var/vcap`).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Moves this process into a new mount namespace with `vm_dir` mounted on `base`.
/// Mounts made here do not propagate back to the host. Call before starting any thread
/// (a user namespace can only be entered by a single-threaded process, and the namespace is
/// per process, set at `unshare` time).
pub fn bind_base(vm_dir: &Path, base: &Path) -> io::Result<()> {
    std::fs::create_dir_all(vm_dir)?;
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 {
        unshare(libc::CLONE_NEWNS)?;
    } else {
        unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS)?;
        // Our own uid and gid become root inside; setgroups must be denied before an
        // unprivileged process may write the gid map.
        std::fs::write("/proc/self/setgroups", "deny")?;
        std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))?;
        std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    }
    mount(
        None,
        Path::new("/"),
        libc::MS_REC | libc::MS_PRIVATE,
        "make / private",
    )?;
    if !base.is_dir() {
        if uid != 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} does not exist; as a user other than root it must be created once by root (mkdir -p {})",
                    base.display(),
                    base.display()
                ),
            ));
        }
        std::fs::create_dir_all(base)?;
    }
    mount(
        Some(vm_dir),
        base,
        libc::MS_BIND | libc::MS_REC,
        "bind the VM directory",
    )
}

fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare(2) takes plain flags.
    if unsafe { libc::unshare(flags) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("unshare: {e}")));
    }
    Ok(())
}

fn mount(source: Option<&Path>, target: &Path, flags: libc::c_ulong, what: &str) -> io::Result<()> {
    let source = source.map(c_path).transpose()?;
    let target_c = c_path(target)?;
    // SAFETY: valid NUL-terminated paths (or null), no file system type or data.
    let rc = unsafe {
        libc::mount(
            source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target_c.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("{what} ({}): {e}", target.display()),
        ));
    }
    Ok(())
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::other(e.to_string()))
}
