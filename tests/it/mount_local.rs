//! Real FUSE mounts of a local directory store, driven with std::fs.

use crate::common;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::process::Command;

use common::{dirs, is_mounted, Mount, BIN};

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).expect("expected an error")
}

#[test]
fn files_and_directories_round_trip() {
    let (_tmp, src, mnt) = dirs();
    fs::write(src.join("existing.txt"), b"from the backing dir").unwrap();
    let m = Mount::start(&src, &mnt, &["--view", "raw"]);

    assert_eq!(fs::read(m.path("existing.txt")).unwrap(), b"from the backing dir");
    fs::create_dir_all(m.path("g/a/c/0")).unwrap();
    fs::write(m.path("g/a/c/0/1"), vec![7u8; 100_000]).unwrap();
    assert_eq!(fs::read(src.join("g/a/c/0/1")).unwrap(), vec![7u8; 100_000]);
    assert_eq!(fs::metadata(m.path("g/a/c/0/1")).unwrap().len(), 100_000);

    // Read with offsets.
    let f = fs::File::open(m.path("existing.txt")).unwrap();
    let mut buf = [0u8; 4];
    f.read_exact_at(&mut buf, 9).unwrap();
    assert_eq!(&buf, b"back");

    // Overwrite part of a file in place, then append.
    let mut f = fs::OpenOptions::new().write(true).open(m.path("existing.txt")).unwrap();
    f.seek(SeekFrom::Start(5)).unwrap();
    f.write_all(b"THE").unwrap();
    drop(f);
    assert_eq!(fs::read(src.join("existing.txt")).unwrap(), b"from THE backing dir");
    let mut f = fs::OpenOptions::new().append(true).open(m.path("existing.txt")).unwrap();
    f.write_all(b"!").unwrap();
    drop(f);
    assert_eq!(fs::read(src.join("existing.txt")).unwrap(), b"from THE backing dir!");

    // Truncate via open and via set_len.
    fs::OpenOptions::new().write(true).truncate(true).open(m.path("existing.txt")).unwrap();
    assert_eq!(fs::read(src.join("existing.txt")).unwrap(), b"");
    fs::write(m.path("t"), b"0123456789").unwrap();
    fs::OpenOptions::new().write(true).open(m.path("t")).unwrap().set_len(4).unwrap();
    assert_eq!(fs::read(src.join("t")).unwrap(), b"0123");

    // Changes in the backing dir show through the mount (after the metadata TTL).
    fs::write(src.join("outside"), b"made outside").unwrap();
    m.advance_clock();
    assert_eq!(fs::read(m.path("outside")).unwrap(), b"made outside");

    // unlink, rmdir, non-empty rmdir.
    assert_eq!(errno_of(fs::remove_dir(m.path("g/a"))), libc::ENOTEMPTY);
    fs::remove_file(m.path("g/a/c/0/1")).unwrap();
    assert!(!src.join("g/a/c/0/1").exists());
    fs::remove_dir(m.path("g/a/c/0")).unwrap();
    assert!(!src.join("g/a/c/0").exists());
    fs::remove_dir_all(m.path("g")).unwrap();
    assert!(!src.join("g").exists());
}

#[test]
fn empty_file_is_created_on_close() {
    let (_tmp, src, mnt) = dirs();
    let m = Mount::start(&src, &mnt, &["--view", "raw"]);
    fs::File::create(m.path("empty")).unwrap();
    assert_eq!(fs::metadata(src.join("empty")).unwrap().len(), 0);
    // A file open for writing is visible (with its size so far) before close.
    let mut f = fs::File::create(m.path("open")).unwrap();
    f.write_all(b"abc").unwrap();
    assert!(fs::read_dir(&m.mnt).unwrap().any(|e| e.unwrap().file_name() == "open"));
    let mut r = String::new();
    fs::File::open(m.path("open")).unwrap().read_to_string(&mut r).unwrap();
    assert_eq!(r, "abc");
    drop(f);
    assert_eq!(fs::read(src.join("open")).unwrap(), b"abc");
}

#[test]
fn rename_over_like_zarr_python() {
    let (_tmp, src, mnt) = dirs();
    fs::write(src.join("zarr.json"), b"old").unwrap();
    let m = Mount::start(&src, &mnt, &["--view", "raw"]);
    let tmp = m.path("zarr.json.3f2a.partial");
    fs::write(&tmp, b"new metadata").unwrap();
    // The temp file is served from the mount but never reaches the backend under its own name.
    assert_eq!(fs::read(&tmp).unwrap(), b"new metadata");
    assert!(!src.join("zarr.json.3f2a.partial").exists());
    fs::rename(&tmp, m.path("zarr.json")).unwrap();
    assert_eq!(fs::read(src.join("zarr.json")).unwrap(), b"new metadata");
    assert_eq!(fs::read(m.path("zarr.json")).unwrap(), b"new metadata");
    assert!(!tmp.exists());
    // Plain renames of stored files and directories.
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/x"), b"x").unwrap();
    fs::rename(m.path("d/x"), m.path("d/y")).unwrap();
    assert_eq!(fs::read(src.join("d/y")).unwrap(), b"x");
    fs::rename(m.path("d"), m.path("e")).unwrap();
    assert_eq!(fs::read(m.path("e/y")).unwrap(), b"x");
    assert!(src.join("e/y").exists() && !src.join("d").exists());
}

#[test]
fn readdir_with_thousands_of_entries() {
    let (_tmp, src, mnt) = dirs();
    fs::create_dir(src.join("c")).unwrap();
    for i in 0..5000 {
        fs::write(src.join("c").join(i.to_string()), i.to_string()).unwrap();
    }
    let m = Mount::start(&src, &mnt, &["--view", "raw"]);
    let mut names: Vec<u32> = fs::read_dir(m.path("c"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, (0..5000).collect::<Vec<_>>());
    assert_eq!(fs::read_to_string(m.path("c/4321")).unwrap(), "4321");
}

/// link(2) is an atomic create of an independent copy (#20): EEXIST for an existing name, and
/// the two names do not share later writes.
#[test]
fn hard_links_are_atomic_creates_of_independent_files() {
    use std::os::unix::fs::MetadataExt;
    let (_tmp, src, mnt) = dirs();
    fs::write(src.join("f"), b"x").unwrap();
    let m = Mount::start(&src, &mnt, &[]);
    fs::hard_link(m.path("f"), m.path("h")).unwrap();
    assert_eq!(fs::read(src.join("h")).unwrap(), b"x");
    assert_eq!(fs::metadata(m.path("h")).unwrap().nlink(), 1);
    assert_ne!(fs::metadata(m.path("h")).unwrap().ino(), fs::metadata(m.path("f")).unwrap().ino());
    assert_eq!(errno_of(fs::hard_link(m.path("f"), m.path("h"))), libc::EEXIST);
    fs::write(m.path("f"), b"changed").unwrap();
    assert_eq!(fs::read(m.path("h")).unwrap(), b"x");
    // zarr-python's set_if_not_exists: a temp file linked to the key, then unlinked.
    fs::write(m.path("k.0123.partial"), b"value").unwrap();
    fs::hard_link(m.path("k.0123.partial"), m.path("k")).unwrap();
    fs::remove_file(m.path("k.0123.partial")).unwrap();
    assert_eq!(fs::read(src.join("k")).unwrap(), b"value");
    assert!(!src.join("k.0123.partial").exists());
}

#[test]
fn unsupported_operations_get_documented_errors() {
    let (_tmp, src, mnt) = dirs();
    fs::write(src.join("f"), b"x").unwrap();
    let m = Mount::start(&src, &mnt, &["--view", "raw"]);
    assert_eq!(errno_of(std::os::unix::fs::symlink("f", m.path("l"))), libc::EPERM);
    fs::create_dir(m.path("d")).unwrap();
    assert_eq!(errno_of(fs::hard_link(m.path("d"), m.path("dl"))), libc::EPERM);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        errno_of(fs::set_permissions(m.path("f"), fs::Permissions::from_mode(0o600))),
        libc::EPERM
    );
    let out = Command::new("setfattr").args(["-n", "user.x", "-v", "1"]).arg(m.path("f")).output();
    if let Ok(out) = out {
        assert!(!out.status.success(), "setxattr must fail");
    }
    assert_eq!(errno_of(fs::read(m.path("missing"))), libc::ENOENT);
    assert_eq!(errno_of(fs::read_dir(m.path("f"))), libc::ENOTDIR);
    // statfs works and reports the backing filesystem's size.
    let st = nix_statvfs(&m.mnt);
    assert!(st.0 > 0);
}

fn nix_statvfs(p: &std::path::Path) -> (u64, u64) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statvfs into a zeroed struct with a valid path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    (st.f_blocks, st.f_bavail)
}

#[test]
fn read_only_mount_refuses_writes() {
    let (_tmp, src, mnt) = dirs();
    fs::write(src.join("f"), b"x").unwrap();
    let m = Mount::start(&src, &mnt, &["--view", "raw", "--read-only"]);
    assert_eq!(fs::read(m.path("f")).unwrap(), b"x");
    assert_eq!(errno_of(fs::write(m.path("f"), b"y")), libc::EROFS);
    assert_eq!(errno_of(fs::write(m.path("g"), b"y")), libc::EROFS);
    assert_eq!(errno_of(fs::remove_file(m.path("f"))), libc::EROFS);
    assert_eq!(errno_of(fs::create_dir(m.path("d"))), libc::EROFS);
    assert_eq!(fs::read(src.join("f")).unwrap(), b"x");
}

#[test]
fn sigterm_flushes_and_unmounts_cleanly() {
    let (_tmp, src, mnt) = dirs();
    let mut m = Mount::start(&src, &mnt, &["--view", "raw"]);
    fs::write(m.path("kept"), b"data").unwrap();
    let status = m.stop();
    assert!(status.success(), "exit status {status}:\n{}", m.log_text());
    assert!(!is_mounted(&m.mnt));
    assert_eq!(fs::read(src.join("kept")).unwrap(), b"data");
}

#[test]
fn external_unmount_ends_the_daemon() {
    let (_tmp, src, mnt) = dirs();
    let mut m = Mount::start(&src, &mnt, &["--view", "raw"]);
    assert!(Command::new("fusermount3").arg("-u").arg(&m.mnt).status().unwrap().success());
    let mut child = m.child.take().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "daemon still running after unmount");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success());
}

#[test]
fn daemon_mode_returns_once_mounted() {
    let (_tmp, src, mnt) = dirs();
    fs::write(src.join("f"), b"x").unwrap();
    let out = Command::new(BIN).arg(&src).arg(&mnt).args(["--view", "raw"]).output().unwrap();
    let mnt = mnt.canonicalize().unwrap();
    let mounted = is_mounted(&mnt);
    let content = fs::read(mnt.join("f"));
    common::force_unmount(&mnt);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(mounted, "daemon returned before the mount was live");
    assert_eq!(content.unwrap(), b"x");
}

fn refused(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "one line expected, got {err:?}");
    err
}

#[test]
fn bad_arguments_are_refused_before_mounting() {
    let (tmp, src, mnt) = dirs();
    let os = |p: &std::path::Path| p.as_os_str().to_owned();
    let missing = tmp.path().join("missing");
    let file = tmp.path().join("file");
    fs::write(&file, b"x").unwrap();
    assert!(refused(&[&os(&missing), &os(&mnt)]).contains("no such file"));
    assert!(refused(&[&os(&file), &os(&mnt)]).contains("not a directory"));
    assert!(refused(&[&os(&src), &os(&missing)]).contains("MOUNTPOINT"));
    let full = tmp.path().join("full");
    fs::create_dir(&full).unwrap();
    fs::write(full.join("x"), b"").unwrap();
    assert!(refused(&[&os(&src), &os(&full)]).contains("not empty"));
    assert!(refused(&[std::ffi::OsStr::new("ftp://x/y"), &os(&mnt)]).contains("scheme"));
    let unknown_view =
        Command::new(BIN).arg(&src).arg(&mnt).args(["--view", "v3"]).output().unwrap();
    assert_eq!(unknown_view.status.code(), Some(2));
    assert!(!is_mounted(&mnt));
    let lots = [os(&src), os(&mnt), "--array-prefetch".into(), "lots".into()];
    let lots: Vec<&std::ffi::OsStr> = lots.iter().map(|s| s.as_os_str()).collect();
    assert!(refused(&lots).contains("--array-prefetch"));
    let q = [os(&src), os(&mnt), "--cache-size".into(), "12Q".into()];
    let q: Vec<&std::ffi::OsStr> = q.iter().map(|s| s.as_os_str()).collect();
    let err = refused(&q);
    assert!(err.contains("'12Q'") && err.contains("--cache-size <SIZE>"), "{err}");
    // Endpoint URLs the S3 client would panic on (no scheme), or that are not http(s).
    for (endpoint, why) in [
        ("localhost:5555", "scheme"),
        ("127.0.0.1:9000", "give its scheme"),
        ("ftp://h:1", "scheme"),
        ("http://", "URL"),
    ] {
        let args = ["s3://bkt/p", mnt.to_str().unwrap(), "--endpoint-url", endpoint];
        let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        let err = refused(&args);
        assert!(err.contains("--endpoint-url") && err.contains(why), "{endpoint}: {err}");
    }
    // Already a mount point.
    let m = Mount::start(&src, &mnt, &["--view", "raw"]);
    assert!(refused(&[&os(&src), &os(&m.mnt)]).contains("already a mount point"));
}

#[test]
fn parallel_readers_proceed() {
    let (_tmp, src, mnt) = dirs();
    for i in 0..16 {
        fs::write(src.join(format!("f{i}")), vec![i as u8; 1 << 20]).unwrap();
    }
    let m = Mount::start(&src, &mnt, &["--view", "raw"]);
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let p = m.path(&format!("f{i}"));
            std::thread::spawn(move || fs::read(p).unwrap() == vec![i as u8; 1 << 20])
        })
        .collect();
    assert!(handles.into_iter().all(|h| h.join().unwrap()));
}

/// A stored file unlinked while open for writing with changes not yet closed: the name stays
/// gone (the old content must not come back), and the writer's close stores nothing.
#[test]
fn unlink_while_writing_removes_the_stored_file() {
    let (_tmp, src, mnt) = dirs();
    fs::write(src.join("k"), b"old").unwrap();
    let m = Mount::start(&src, &mnt, &["--view", "raw"]);
    let mut f = fs::OpenOptions::new().write(true).open(m.path("k")).unwrap();
    f.write_all(b"new").unwrap();
    fs::remove_file(m.path("k")).unwrap();
    drop(f);
    assert!(!src.join("k").exists(), "the old content is still stored");
    assert_eq!(errno_of(fs::metadata(m.path("k"))), libc::ENOENT);
}

/// Children get copies of the writer's descriptors, and close them at exec (close-on-exec)
/// or exit; the kernel sends a FLUSH for each. None of those may store the half-written
/// file. The writer's own close stores it whole. A child that holds the last copy (a
/// redirect) has its output stored once it exits.
#[test]
fn a_child_closing_an_inherited_descriptor_stores_nothing_half_written() {
    let (_tmp, src, mnt) = dirs();
    let m = Mount::start(&src, &mnt, &["--view", "raw"]);
    let mut f = fs::File::create(m.path("k")).unwrap();
    f.write_all(b"first half, ").unwrap();
    // Another thread starts a program: its copy of `f` closes at exec.
    std::thread::spawn(|| Command::new("true").status().unwrap()).join().unwrap();
    // A forked child exits at once, closing its copies.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        unsafe { libc::_exit(0) };
    }
    assert!(pid > 0);
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    assert!(!src.join("k").exists(), "a child's close stored the half-written file");
    f.write_all(b"second half").unwrap();
    drop(f);
    assert_eq!(fs::read(src.join("k")).unwrap(), b"first half, second half");

    // `cmd > file`: the child writes and closes last; RELEASE stores its output.
    let out = fs::File::create(m.path("out")).unwrap();
    let status =
        Command::new("sh").args(["-c", "printf 'from the child'"]).stdout(out).status().unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while fs::read(src.join("out")).unwrap_or_default() != b"from the child" {
        assert!(std::time::Instant::now() < deadline, "the child's output was not stored");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A daemon that cannot start reports why once: its parent prints the line, the child does not.
#[test]
fn a_daemon_start_failure_is_one_line() {
    let (_tmp, src, mnt) = dirs();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out =
        Command::new(BIN).arg(&src).arg(&mnt).args(["--metrics-addr", &addr]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim_end().lines().collect::<Vec<_>>(),
        [format!(
        "zarr-mount: --metrics-addr {addr}: cannot listen: Address already in use (os error 98)"
    )]
    );
    assert!(!is_mounted(&mnt));
}
