//! A VM's private view of `/var/vcap`: the agent moves into its own mount namespace and
//! bind-mounts its VM directory on the base directory, so the job processes it starts see
//! their files at the paths real releases hard-code (`/var/vcap/jobs/...`), while every other
//! path stays the host's. Linux only; needs `CAP_SYS_ADMIN` (root).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Moves this process into a new mount namespace with `vm_dir` mounted on `base`.
/// Mounts made here do not propagate back to the host. Call before starting threads that
/// should share the view (the namespace is per process, set at `unshare` time).
pub fn bind_base(vm_dir: &Path, base: &Path) -> io::Result<()> {
    std::fs::create_dir_all(vm_dir)?;
    // SAFETY: plain system calls with valid, NUL-terminated arguments.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(io::Error::last_os_error());
        }
        let root = c_path(Path::new("/"))?;
        if libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    std::fs::create_dir_all(base)?;
    let (source, target) = (c_path(vm_dir)?, c_path(base)?);
    // SAFETY: as above.
    if unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::other(e.to_string()))
}
