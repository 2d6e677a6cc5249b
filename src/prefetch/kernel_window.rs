//! The kernel's read-ahead window for this mount (`--read-ahead`).
//!
//! FUSE may only lower the window it gets at INIT (`max_readahead`); the kernel starts every
//! mount at its block-device default, 128 KiB. A whole-file read of a 4 MiB shard then reaches
//! the daemon as about 32 READs of 128 KiB, one window after another, instead of 4 of 1 MiB
//! (the largest READ the mount negotiates). The window lives in the mount's backing-device
//! entry, `/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`, which only root may write; gcsfuse and
//! JuiceFS tell their users to raise it by hand.

use std::path::{Path, PathBuf};

/// The default of `--read-ahead`: one READ of the largest size the mount negotiates
/// (`max_write`/`max_readahead` in the adapter). Larger windows measured no faster.
pub const DEFAULT_BYTES: u64 = 1 << 20;

/// The sysfs file that holds the read-ahead of the filesystem with device `major:minor`.
pub fn sysfs_path(device: &str) -> PathBuf {
    PathBuf::from(format!("/sys/class/bdi/{device}/read_ahead_kb"))
}

/// What goes into `read_ahead_kb` for `bytes` (whole KiB, at least one page).
pub fn kib_value(bytes: u64) -> u64 {
    (bytes / 1024).max(4)
}

/// The device (`major:minor`) of the newest FUSE mount at `mountpoint` in `mountinfo` (the
/// text of /proc/self/mountinfo). Read from there, not by a stat of the mountpoint: a stat
/// walks into the mount and, at that moment, makes an unmount from outside fail with EBUSY.
pub fn device_in_mountinfo(mountinfo: &str, mountpoint: &Path) -> Option<String> {
    let want = mountpoint.to_str()?;
    mountinfo.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().position(|f| *f == "-")?;
        let fstype = fields.get(dash + 1)?;
        let mounted_at = unescape(fields.get(4)?);
        (mounted_at == want && fstype.starts_with("fuse")).then(|| fields[2].to_string())
    })
}

/// mountinfo writes space, tab, newline and backslash in paths as `\ooo` (octal).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push(d.iter().fold(0u8, |n, c| n.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Set the read-ahead of the live mount at `mountpoint` to `bytes`.
pub fn apply(mountpoint: &Path, bytes: u64) -> std::io::Result<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let device = device_in_mountinfo(&mountinfo, mountpoint).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the mount is not in /proc/self/mountinfo",
        )
    })?;
    let path = sysfs_path(&device);
    std::fs::write(&path, kib_value(bytes).to_string())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_is_the_newest_fuse_mount_at_the_mountpoint() {
        let info = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
36 22 0:39 / /mnt/a\\040b rw,nosuid,nodev,noatime shared:20 - fuse.zarr-mount zarr:/data rw,user_id=0
37 22 0:40 / /mnt/x rw shared:21 - tmpfs tmpfs rw
38 36 0:41 / /mnt/a\\040b rw,nosuid shared:22 - fuse.zarr-mount zarr:/other rw,user_id=0
39 22 0:42 / /mnt/x rw shared:23 master:4 - fuse.zarr-mount zarr:/y rw,user_id=0
";
        let dev = |p: &str| device_in_mountinfo(info, Path::new(p));
        assert_eq!(dev("/mnt/a b").as_deref(), Some("0:41"), "the newest of two");
        assert_eq!(dev("/mnt/x").as_deref(), Some("0:42"), "a FUSE mount over a tmpfs");
        assert_eq!(dev("/"), None, "not a FUSE mount");
        assert_eq!(dev("/mnt/a\\040b"), None, "the escaped form is not a path");
        assert_eq!(sysfs_path("0:41"), PathBuf::from("/sys/class/bdi/0:41/read_ahead_kb"));
    }

    #[test]
    fn sizes_become_whole_kib_of_at_least_a_page() {
        assert_eq!(kib_value(1 << 20), 1024);
        assert_eq!(kib_value(4 << 20), 4096);
        assert_eq!(kib_value(1500), 4);
        assert_eq!(kib_value((1 << 20) + 1000), 1024);
    }
}
