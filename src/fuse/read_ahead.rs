//! The kernel's read-ahead window for this mount (`--read-ahead`).
//!
//! FUSE may only lower the window it gets at INIT (`max_readahead`); the kernel starts every
//! mount at its block-device default, 128 KiB. A whole-file read of a 4 MiB shard then reaches
//! the daemon as about 32 READs of 128 KiB, one window after another, instead of 4 of 1 MiB
//! (the largest READ the mount negotiates). The window lives in the mount's backing-device
//! entry, `/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`, which only root may write; gcsfuse and
//! JuiceFS tell their users to raise it by hand.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The default of `--read-ahead`: one READ of the largest size the mount negotiates
/// (`max_write`/`max_readahead` in the adapter). Larger windows measured no faster.
pub const DEFAULT_BYTES: u64 = 1 << 20;

/// The sysfs file that holds the read-ahead of the filesystem whose device number is `dev`.
pub fn sysfs_path(dev: u64) -> PathBuf {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    PathBuf::from(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"))
}

/// What goes into `read_ahead_kb` for `bytes` (whole KiB, at least one page).
pub fn kib_value(bytes: u64) -> u64 {
    (bytes / 1024).max(4)
}

/// Set the read-ahead of the live mount at `mountpoint` to `bytes`. The stat of the
/// mountpoint is answered by this daemon's own session, which must already be running.
pub fn apply(mountpoint: &Path, bytes: u64) -> std::io::Result<PathBuf> {
    let dev = std::fs::metadata(mountpoint)?.dev();
    let path = sysfs_path(dev);
    std::fs::write(&path, kib_value(bytes).to_string())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sysfs_file_is_named_by_major_and_minor() {
        let dev = libc::makedev(0, 39);
        assert_eq!(sysfs_path(dev), PathBuf::from("/sys/class/bdi/0:39/read_ahead_kb"));
        let dev = libc::makedev(259, 70000);
        assert_eq!(sysfs_path(dev), PathBuf::from("/sys/class/bdi/259:70000/read_ahead_kb"));
    }

    #[test]
    fn sizes_become_whole_kib_of_at_least_a_page() {
        assert_eq!(kib_value(1 << 20), 1024);
        assert_eq!(kib_value(4 << 20), 4096);
        assert_eq!(kib_value(1500), 4);
        assert_eq!(kib_value((1 << 20) + 1000), 1024);
    }
}
