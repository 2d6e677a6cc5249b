//! The mount(2) call itself, as root: type `fuse.zarr-mount` and the SOURCE as written, so
//! /proc/mounts, `findmnt -t fuse.zarr-mount` and `mount -a` (which skips what is already
//! mounted) see what fstab says. fuser's own direct mount always uses the bare type `fuse`;
//! without the privilege (EPERM) the caller falls back to fuser, whose fusermount3 path sets
//! the subtype itself.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The filesystem type the kernel shows: FUSE with our subtype.
pub const FS_TYPE: &str = "fuse.zarr-mount";

/// What the kernel mount needs besides the mountpoint.
pub struct KernelMountOptions<'a> {
    /// The mount's source in /proc/mounts (fsname).
    pub fs_name: &'a str,
    pub read_only: bool,
    /// Other users may enter (with the kernel checking permissions).
    pub allow_other: bool,
}

/// Mount a fresh /dev/fuse connection on `mountpoint`. `Ok(None)`: not permitted (not root);
/// the caller mounts another way.
pub fn mount(mountpoint: &Path, opts: &KernelMountOptions) -> std::io::Result<Option<OwnedFd>> {
    let dev: OwnedFd = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse")?.into();
    let root_mode = std::fs::metadata(mountpoint)?.mode() & libc::S_IFMT;
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data =
        format!("fd={},rootmode={root_mode:o},user_id={uid},group_id={gid}", dev.as_raw_fd());
    if opts.allow_other {
        data.push_str(",default_permissions,allow_other");
    }
    let mut flags = libc::MS_NODEV | libc::MS_NOSUID | libc::MS_NOATIME;
    if opts.read_only {
        flags |= libc::MS_RDONLY;
    }
    let nul = |what: &str| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("NUL in {what}"))
    };
    let source = CString::new(opts.fs_name).map_err(|_| nul("the source"))?;
    let target =
        CString::new(mountpoint.as_os_str().as_bytes()).map_err(|_| nul("the mountpoint"))?;
    let fs_type = CString::new(FS_TYPE).expect("no NUL");
    let data = CString::new(data).expect("no NUL");
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(source.as_ptr(), target.as_ptr(), fs_type.as_ptr(), flags, data.as_ptr().cast())
    };
    if rc == 0 {
        return Ok(Some(dev));
    }
    match std::io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::EPERM) => Ok(None),
        e => Err(e),
    }
}

/// Unmount what `mount` mounted; EBUSY (a process has its cwd inside) is the caller's to handle.
pub fn unmount(mountpoint: &Path) -> std::io::Result<()> {
    let target = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: umount2 with a valid NUL-terminated path.
    if unsafe { libc::umount2(target.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
