//! The mountpoint `/dev/fd/N`: a `/dev/fuse` connection that a privileged helper (a Kubernetes
//! CSI driver, a container runtime hook, a wrapper run as root) opened and mounted, then handed
//! to this process as descriptor N. The daemon serves it without mounting anything itself, so it
//! needs neither `CAP_SYS_ADMIN` nor fusermount3. The helper owns the mount: it chose the mount
//! options (who may enter) and it unmounts.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// `/dev/fuse` is the character device 10:229 on every Linux.
const FUSE_MAJOR: u64 = 10;
const FUSE_MINOR: u64 = 229;

/// The descriptor N of a mountpoint written `/dev/fd/N`; `None` for any other path.
pub fn descriptor(mountpoint: &Path) -> Option<RawFd> {
    let n = mountpoint.to_str()?.strip_prefix("/dev/fd/")?;
    // Digits only: "/dev/fd/+3" or "/dev/fd/3/" is not a descriptor.
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// Why descriptor `fd` cannot be served, in words for a one-line error; `Ok` when it is an
/// open `/dev/fuse` connection.
pub fn check(fd: RawFd) -> Result<(), String> {
    // fstat through /proc/self/fd: a closed descriptor is ENOENT there, not a panic.
    let md = std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .map_err(|_| format!("descriptor {fd} is not open in this process"))?;
    let rdev = md.rdev();
    let is_fuse = md.file_type().is_char_device()
        && libc::major(rdev) as u64 == FUSE_MAJOR
        && libc::minor(rdev) as u64 == FUSE_MINOR;
    if !is_fuse {
        return Err(format!("descriptor {fd} is not an open /dev/fuse"));
    }
    Ok(())
}

/// Whether this process may open /dev/fuse (to clone the connection for each thread).
pub fn may_open_dev_fuse() -> bool {
    // SAFETY: access(2) with a NUL-terminated literal.
    unsafe { libc::access(c"/dev/fuse".as_ptr(), libc::R_OK | libc::W_OK) == 0 }
}

/// Take ownership of descriptor `fd` (checked by `check`) for the session.
pub fn take(fd: RawFd) -> Result<OwnedFd, String> {
    check(fd)?;
    // SAFETY: the descriptor is open (checked above) and nothing else in this process owns
    // it: it came in from the parent and is named only by the mountpoint argument.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn only_dev_fd_and_digits_name_a_descriptor() {
        assert_eq!(descriptor(Path::new("/dev/fd/3")), Some(3));
        assert_eq!(descriptor(Path::new("/dev/fd/123")), Some(123));
        for other in ["/dev/fd/", "/dev/fd/+3", "/dev/fd/3/", "/dev/fd/x", "/mnt/dev/fd/3", "fd/3"]
        {
            assert_eq!(descriptor(Path::new(other)), None, "{other}");
        }
        assert_eq!(descriptor(Path::new("/dev/fd/99999999999999999999")), None);
    }

    #[test]
    fn a_closed_or_other_descriptor_is_refused() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let err = check(file.as_raw_fd()).unwrap_err();
        assert!(err.contains("not an open /dev/fuse"), "{err}");
        // Far above any descriptor a test process opens (another test thread may reuse a
        // number just closed).
        assert!(check(999_999).unwrap_err().contains("not open"));
    }
}
