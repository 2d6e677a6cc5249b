//! MOUNTPOINT: an existing, empty directory that is not a mount point already, or `/dev/fd/N`
//! (a /dev/fuse connection a privileged helper mounted, `crate::fuse::passed_fd`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{usage, UsageError};
use crate::source::io_reason;

/// The absolute MOUNTPOINT, or why it cannot be mounted on.
pub(super) fn check(p: &Path) -> Result<PathBuf, UsageError> {
    // A /dev/fuse connection handed in already mounted: nothing to check on disk.
    if let Some(fd) = crate::fuse::passed_fd::descriptor(p) {
        crate::fuse::passed_fd::check(fd)
            .map_err(|e| usage(format!("MOUNTPOINT {}: {e}", p.display())))?;
        return Ok(p.to_path_buf());
    }
    let md = std::fs::metadata(p).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            usage(format!(
                "MOUNTPOINT {}: a dead FUSE mount is still there; run `fusermount3 -u {}`",
                p.display(),
                p.display()
            ))
        } else {
            usage(format!("MOUNTPOINT {}: {}", p.display(), io_reason(&e)))
        }
    })?;
    if !md.is_dir() {
        return Err(usage(format!("MOUNTPOINT {}: not a directory", p.display())));
    }
    let abs = std::fs::canonicalize(p)
        .map_err(|e| usage(format!("MOUNTPOINT {}: {}", p.display(), io_reason(&e))))?;
    if is_mount_point(&abs, &md) {
        return Err(usage(format!("MOUNTPOINT {}: already a mount point", p.display())));
    }
    let mut entries = std::fs::read_dir(&abs)
        .map_err(|e| usage(format!("MOUNTPOINT {}: {}", p.display(), io_reason(&e))))?;
    if entries.next().is_some() {
        return Err(usage(format!("MOUNTPOINT {}: not empty", p.display())));
    }
    Ok(abs)
}

fn is_mount_point(abs: &Path, md: &std::fs::Metadata) -> bool {
    if abs == Path::new("/") {
        return true;
    }
    let parent_dev = abs.parent().and_then(|pp| std::fs::metadata(pp).ok()).map(|m| m.dev());
    if parent_dev.is_some_and(|d| d != md.dev()) {
        return true;
    }
    // Bind mounts of the same device: ask the mount table.
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = abs.to_string_lossy();
    table.lines().any(|l| l.split(' ').nth(4).is_some_and(|mp| unescape_mountinfo(mp) == want))
}

fn unescape_mountinfo(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}
