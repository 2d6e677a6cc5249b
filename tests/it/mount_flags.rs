//! Mount flags as the kernel sees them (/proc/self/mountinfo) and as they behave: other users
//! are kept out unless `--allow-other`; `--read-only` is a kernel `ro` mount and, below the
//! kernel, a daemon that refuses every write with EROFS.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use common::zfs::{ino_of, raw_fs, write_file};
use common::{dirs, Mount};
use zarr_mount::fs::inodes::table::ROOT_INO;
use zarr_mount::fs::SetAttr;
use zarr_mount::store::backends::memory::MemoryStore;
use zarr_mount::store::prelude::*;

/// (per-mount options, superblock options) of the mount at `mnt`, from /proc/self/mountinfo.
fn mount_options(mnt: &Path) -> (Vec<String>, Vec<String>) {
    let want = mnt.to_str().unwrap();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() < 10 || fields[4].replace("\\040", " ") != want {
            continue;
        }
        let dash = fields.iter().position(|f| *f == "-").expect("mountinfo separator");
        let split = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
        return (split(fields[5]), split(fields[dash + 3]));
    }
    panic!("{want} is not in /proc/self/mountinfo");
}

/// The errno (or 0) of reading and of writing `file` as the user `nobody`.
fn as_nobody(file: &Path) -> (i32, i32) {
    let run = |script: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(file)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        match () {
            _ if out.status.success() => 0,
            _ if err.contains("Permission denied") => libc::EACCES,
            _ if err.contains("Read-only file system") => libc::EROFS,
            _ => panic!("unexpected failure as nobody: {err}"),
        }
    };
    (run(r#"cat "$1" >/dev/null"#), run(r#"echo x >>"$1""#))
}

/// Temp dirs that user `nobody` may walk through (the mount decides the rest).
fn open_dirs() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let (tmp, src, mnt) = dirs();
    for d in [tmp.path(), &src, &mnt] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (tmp, src, mnt)
}

#[test]
fn other_users_are_kept_out_unless_allow_other() {
    let (_tmp, src, mnt) = open_dirs();
    std::fs::write(src.join("f"), b"data").unwrap();
    std::fs::set_permissions(src.join("f"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let m = Mount::start(&src, &mnt, &["--view", "raw", "--file-mode", "0644"]);
    let (per_mount, sb) = mount_options(&m.mnt);
    assert!(per_mount.contains(&"rw".to_string()), "{per_mount:?}");
    for opt in ["nosuid", "nodev"] {
        assert!(per_mount.contains(&opt.to_string()), "{opt} missing: {per_mount:?}");
    }
    assert!(
        !sb.iter().any(|o| o == "allow_other" || o == "allow_root"),
        "allow_other by default: {sb:?}"
    );
    assert_eq!(
        as_nobody(&m.path("f")),
        (libc::EACCES, libc::EACCES),
        "another user reached the mount"
    );
    drop(m);

    let m = Mount::start(&src, &mnt, &["--view", "raw", "--allow-other", "--file-mode", "0644"]);
    let (_, sb) = mount_options(&m.mnt);
    for opt in ["allow_other", "default_permissions"] {
        assert!(sb.contains(&opt.to_string()), "{opt} missing: {sb:?}");
    }
    // Now the kernel checks the modes shown: --file-mode 0644 over the file's own 0666.
    assert_eq!(as_nobody(&m.path("f")), (0, libc::EACCES));
}

/// Run `cat FILE` as uid/gid 65534 with no supplementary groups (util-linux `setpriv`), and
/// return what it printed, or the errno it failed with.
fn cat_as_nobody(file: &Path) -> Result<Vec<u8>, i32> {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(file)
        .output()
        .expect("setpriv (util-linux) runs");
    let err = String::from_utf8_lossy(&out.stderr);
    match () {
        _ if out.status.success() => Ok(out.stdout),
        _ if err.contains("Permission denied") => Err(libc::EACCES),
        _ => panic!("unexpected failure of cat as nobody: {err}"),
    }
}

/// Issue #51, item 3: a mode was lost. A local store's own modes, owners and groups are shown,
/// so the kernel's `default_permissions` keeps another user out of what the store keeps from
/// them, through a root-mounted `--allow-other` mount, and lets them read what it lets them.
#[test]
fn a_local_store_s_own_modes_keep_other_users_out() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (a root-owned store, read as another user)");
        return;
    }
    let (_tmp, src, mnt) = open_dirs();
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, PermissionsExt::from_mode(m)).unwrap();
    std::fs::write(src.join("secret"), b"root only").unwrap();
    mode(&src.join("secret"), 0o600);
    std::fs::write(src.join("open"), b"for everyone").unwrap();
    mode(&src.join("open"), 0o644);
    std::fs::create_dir(src.join("private")).unwrap();
    mode(&src.join("private"), 0o700);
    std::fs::write(src.join("private/inside"), b"readable, in a closed directory").unwrap();
    mode(&src.join("private/inside"), 0o644);
    // On the store itself, as the baseline.
    assert_eq!(cat_as_nobody(&src.join("secret")), Err(libc::EACCES));
    assert_eq!(cat_as_nobody(&src.join("private/inside")), Err(libc::EACCES));

    let m = Mount::start(&src, &mnt, &["--allow-other"]);
    assert_eq!(cat_as_nobody(&m.path("secret")), Err(libc::EACCES), "a 0600 file read by nobody");
    assert_eq!(cat_as_nobody(&m.path("private/inside")), Err(libc::EACCES));
    assert_eq!(cat_as_nobody(&m.path("open")).unwrap(), b"for everyone");
    // After a listing too (READDIRPLUS hands the kernel the attributes it checks).
    let listed: Vec<_> =
        std::fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(cat_as_nobody(&m.path("private/inside")), Err(libc::EACCES));
    use std::os::unix::fs::MetadataExt;
    let shown = std::fs::metadata(m.path("secret")).unwrap();
    assert_eq!((shown.mode() & 0o7777, shown.uid(), shown.gid()), (0o600, 0, 0));
    assert_eq!(std::fs::metadata(m.path("private")).unwrap().mode() & 0o7777, 0o700);
    // Root writes the file through the mount: the store's file keeps its mode and owner.
    std::fs::write(m.path("secret"), b"still root only").unwrap();
    let stored = std::fs::metadata(src.join("secret")).unwrap();
    assert_eq!((stored.mode() & 0o7777, stored.uid()), (0o600, 0));
    assert_eq!(cat_as_nobody(&m.path("secret")), Err(libc::EACCES));
    drop(m);

    // --file-mode and --uid override the store's own where asked.
    let m = Mount::start(&src, &mnt, &["--allow-other", "--file-mode", "0644", "--uid", "7"]);
    let shown = std::fs::metadata(m.path("secret")).unwrap();
    assert_eq!((shown.mode() & 0o7777, shown.uid(), shown.gid()), (0o644, 7, 0));
    assert_eq!(cat_as_nobody(&m.path("secret")).unwrap(), b"still root only");
}

#[test]
fn read_only_is_a_kernel_flag() {
    let (_tmp, src, mnt) = dirs();
    std::fs::write(src.join("f"), b"data").unwrap();
    let m = Mount::start(&src, &mnt, &["--view", "raw", "--read-only"]);
    let (per_mount, sb) = mount_options(&m.mnt);
    assert!(per_mount.contains(&"ro".to_string()), "{per_mount:?}");
    assert!(sb.contains(&"ro".to_string()), "{sb:?}");
    let err = std::fs::OpenOptions::new().append(true).open(m.path("f")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    assert_eq!(std::fs::read(m.path("f")).unwrap(), b"data");
}

#[tokio::test]
async fn a_read_only_daemon_refuses_every_write_itself() {
    // Below the kernel: even if a request got past the `ro` flag, the filesystem says EROFS.
    let store = Arc::new(MemoryStore::new());
    store.put("d/f", Bytes::from_static(b"data")).await.unwrap();
    let fs = raw_fs(store.clone(), true);
    let d = ino_of(&fs, "d").await.unwrap();
    let f = ino_of(&fs, "d/f").await.unwrap();
    let erofs =
        |r: Result<(), zarr_mount::fs::FsError>| assert_eq!(r.unwrap_err().errno(), libc::EROFS);
    erofs(write_file(&fs, "d/new", b"x").await);
    erofs(write_file(&fs, "d/f", b"x").await);
    erofs(fs.open(f, libc::O_WRONLY).await.map(drop));
    erofs(fs.open(f, libc::O_RDWR | libc::O_APPEND).await.map(drop));
    erofs(fs.setattr(f, SetAttr { size: Some(0), ..SetAttr::default() }).await.map(drop));
    erofs(fs.mkdir(d, "sub").await.map(drop));
    erofs(fs.unlink(d, "f").await);
    erofs(fs.rmdir(ROOT_INO, "d").await);
    erofs(fs.rename(d, "f", d, "g", 0).await);
    // Reading works, permissions say read-only, and the store was never touched.
    let h = fs.open(f, libc::O_RDONLY).await.unwrap();
    assert_eq!(&fs.read(h.fh, 0, 100).await.unwrap()[..], b"data");
    fs.release(h.fh).await.unwrap();
    assert_eq!(fs.getattr(f).await.unwrap().perm & 0o222, 0);
    let keys: Vec<String> = store.list("d").await.unwrap().files.into_iter().map(|f| f.0).collect();
    assert_eq!(keys, ["f"]);
    assert_eq!(store.get("d/f").await.unwrap(), Bytes::from_static(b"data"));
}

/// The sysfs file of the mount's kernel read-ahead window (its backing-device entry).
fn read_ahead_file(mnt: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(mnt).unwrap().dev();
    format!("/sys/class/bdi/{}:{}/read_ahead_kb", libc::major(dev), libc::minor(dev))
}

/// The mount's kernel read-ahead window in KiB.
fn read_ahead_kib(mnt: &Path) -> u64 {
    std::fs::read_to_string(read_ahead_file(mnt)).unwrap().trim().parse().unwrap()
}

/// Whether the mount's read-ahead can be written here (sysfs may be read-only in a container):
/// its own value is written back.
fn read_ahead_writable(mnt: &Path) -> bool {
    let path = read_ahead_file(mnt);
    std::fs::read_to_string(&path).and_then(|v| std::fs::write(&path, v.trim())).is_ok()
}

/// READs the daemon has served, from its metrics.
fn reads_served(port: u16) -> u64 {
    common::metric(port, r#"zarr_mount_fuse_requests_total{op="read"}"#).unwrap_or(0)
}

#[test]
fn the_kernel_read_ahead_is_raised_so_a_whole_file_read_takes_few_reads() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root may set a mount's read-ahead");
        return;
    }
    let (_tmp, src, mnt) = dirs();
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("shard"), &data).unwrap();
    let mut reads = Vec::new();
    for (asked, kib) in [(None, 1024), (Some("4M"), 4096), (Some("0"), 128)] {
        let port = common::s3::free_port();
        let port_arg = format!("127.0.0.1:{port}");
        let mut args = vec!["--view", "raw", "--read-only", "--metrics-addr", &port_arg];
        if let Some(size) = asked {
            args.extend(["--read-ahead", size]);
        }
        let mut m = Mount::start(&src, &mnt, &args);
        // The daemon sets it right after the mount appears, which is when `start` returns.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while read_ahead_kib(&m.mnt) != kib && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // (Checked only now: the check writes the value it reads back, which must not undo
        // the daemon's write.)
        if read_ahead_kib(&m.mnt) != kib && !read_ahead_writable(&m.mnt) {
            eprintln!("skipped: this machine's sysfs does not let root set a read-ahead");
            return;
        }
        assert_eq!(read_ahead_kib(&m.mnt), kib, "--read-ahead {asked:?}");
        let before = reads_served(port);
        assert!(std::fs::read(m.path("shard")).unwrap() == data, "--read-ahead {asked:?}");
        reads.push(reads_served(port) - before);
        m.stop();
    }
    // 4 MiB: READs of at most 1 MiB with a raised window; the kernel's 128 KiB window sends
    // one READ per 128 KiB.
    assert!(reads[0] <= 8 && reads[1] <= 8, "READs per 4 MiB read: {reads:?}");
    assert!(reads[2] >= 30, "READs per 4 MiB read with the kernel's window: {reads:?}");
}
