//! Hostile keys through real mounts (issue #10): object names with `..`, `.`, empty segments,
//! a leading `/`, control characters, names longer than 255 bytes, a key that is also a
//! prefix; and a local directory holding symlinks (out of the root, looping, to a directory),
//! FIFOs, a socket, a device node and a name that is not UTF-8.
//!
//! What must hold: every good neighbour is listed and reads its own bytes; a key that cannot
//! be a file name is hidden, with one log line naming it however often it is listed; nothing
//! outside the root is reachable; nothing hangs or crashes, and the daemon exits cleanly.
//!
//! The S3 test starts its own moto server (scripts/s3-server.sh) and skips, with a message,
//! only when moto cannot be installed. Guards stop mounts and servers also when a test panics.

use crate::common;

use std::collections::BTreeSet;
use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use common::s3::{S3Server, BUCKET, ENV, S3};
use common::{sorted_names, Mount};

/// Every file below `dir` (the mount shows no symlinks) with its content.
fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        assert!(t.is_dir() || t.is_file(), "{:?} is neither a file nor a directory", e.path());
        if t.is_dir() {
            walk(&e.path(), out);
        } else {
            out.push((e.path(), std::fs::read(e.path()).unwrap()));
        }
    }
}

fn errno(path: &Path) -> Option<i32> {
    std::fs::symlink_metadata(path).err().and_then(|e| e.raw_os_error())
}

/// How often the daemon logged that `key` is not shown.
fn hidden_lines(m: &Mount, key: &str) -> usize {
    let needle = format!("key={key:?} ");
    m.log_text()
        .lines()
        .filter(|l| l.contains("key not shown in the mount") && l.contains(&needle))
        .count()
}

fn body(key: &str) -> Vec<u8> {
    format!("body of {key:?}").into_bytes()
}

#[test]
fn s3_bucket_with_hostile_keys() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let long = |c: &str, n: usize| c.repeat(n);
    let max_name = format!("d/{}", long("N", 255)); // the longest name a file can have: shown
    let good: Vec<String> = [
        "top",
        "d/ok",
        "d/back\\slash",
        "d/pct%2Fenc",
        "d/pct%41",
        "d/sp ace é ü 日本",
        "d/zz",
        "d/x/y",
        "d/trailing/", // a directory marker: an empty directory
        max_name.as_str(),
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    // Each hostile key, and the key the log names (a prefix where the listing sees one).
    let hostile: Vec<(String, String)> = [
        ("d/../escape", "d/../"),
        ("d/./dot", "d/./"),
        ("d//double", "d//"),
        ("/lead", "/"),
        ("d/..", "d/.."),
        ("d/.", "d/."),
        ("d/ctl\u{1}x", "d/ctl\u{1}x"),
        ("d/tab\tx", "d/tab\tx"),
        ("d/del\u{7f}x", "d/del\u{7f}x"),
        ("d/x", "d/x"), // also the prefix of d/x/y: the directory wins
        ("e/../../../etc/passwd", "e/../"),
    ]
    .iter()
    .map(|(k, l)| (k.to_string(), l.to_string()))
    .chain([
        (format!("d/{}", long("L", 256)), format!("d/{}", long("L", 256))),
        (format!("f/{}/inner", long("M", 300)), format!("f/{}/", long("M", 300))),
    ])
    .collect();
    for k in good.iter().chain(hostile.iter().map(|h| &h.0)) {
        moto.put_raw(k, &body(k));
    }

    let tmp = tempfile::tempdir().unwrap();
    let endpoint = moto.endpoint();
    let args = ["--endpoint-url", endpoint.as_str(), "--metadata-ttl", "0", "--view", "raw"];
    let mut raw = Mount::start_with(&format!("s3://{BUCKET}"), &tmp.path().join("raw"), &args, ENV);
    let mut unsharded = Mount::start_with(
        &format!("s3://{BUCKET}"),
        &tmp.path().join("unsharded"),
        &args[..4],
        ENV,
    );

    let want_d = vec![
        "N".repeat(255),
        "back\\slash".into(),
        "ok".into(),
        "pct%2Fenc".into(),
        "pct%41".into(),
        "sp ace é ü 日本".into(),
        "trailing".into(),
        "x".into(),
        "zz".into(),
    ];
    for m in [&raw, &unsharded] {
        // Listed three times: with --metadata-ttl 0 every listing reaches the store.
        for _ in 0..3 {
            assert_eq!(sorted_names(&m.mnt), vec!["d", "e", "f", "top"]);
            assert_eq!(sorted_names(&m.path("d")), want_d);
            assert_eq!(sorted_names(&m.path("d/x")), vec!["y"]);
            assert!(sorted_names(&m.path("d/trailing")).is_empty());
            assert!(sorted_names(&m.path("e")).is_empty(), "e holds only e/../..");
            assert!(sorted_names(&m.path("f")).is_empty(), "f holds only a 300-byte name");
        }
        // Every file the mount shows is a good key with its own bytes, and every good key is
        // there: no hostile object is reachable under any name.
        let mut files = Vec::new();
        walk(&m.mnt, &mut files);
        let shown: BTreeSet<(String, Vec<u8>)> = files
            .into_iter()
            .map(|(p, data)| (p.strip_prefix(&m.mnt).unwrap().to_str().unwrap().to_string(), data))
            .collect();
        let expected: BTreeSet<(String, Vec<u8>)> =
            good.iter().filter(|k| !k.ends_with('/')).map(|k| (k.clone(), body(k))).collect();
        assert_eq!(shown, expected);

        // Hidden names are absent for lookups too; too long ones the kernel refuses itself.
        for name in ["ctl\u{1}x", "tab\tx", "del\u{7f}x"] {
            assert_eq!(errno(&m.path("d").join(name)), Some(libc::ENOENT), "{name:?}");
        }
        assert_eq!(errno(&m.path("d").join("L".repeat(256))), Some(libc::ENAMETOOLONG));
        assert_eq!(errno(&m.path("escape")), Some(libc::ENOENT));
    }

    // One log line per hidden key, however often it was listed.
    for (key, logged) in &hostile {
        assert_eq!(
            hidden_lines(&raw, logged),
            1,
            "{key:?} logged as {logged:?}:\n{}",
            raw.log_text()
        );
    }
    assert!(raw.stop().success(), "{}", raw.log_text());
    assert!(unsharded.stop().success(), "{}", unsharded.log_text());
}

/// Run `f` on another thread; if it takes longer than `secs`, call `unblock` (so the daemon
/// is not left hanging) and fail.
fn within<T: Send + 'static>(
    secs: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
    unblock: impl FnOnce(),
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(_) => {
            unblock();
            panic!("{what} hung");
        }
    }
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo of a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {path:?}");
}

/// Open each FIFO for writing without blocking: a reader stuck in open(2) is released.
fn release_fifos(fifos: &[PathBuf]) {
    for f in fifos {
        let c = CString::new(f.as_os_str().as_bytes()).unwrap();
        // SAFETY: open/close of a NUL-terminated path.
        unsafe {
            let fd = libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK);
            if fd >= 0 {
                libc::close(fd);
            }
        }
    }
}

#[test]
fn local_directory_with_symlinks_fifos_and_odd_names() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, outside) = (tmp.path().join("src"), tmp.path().join("outside"));
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"SECRET").unwrap();
    std::fs::write(src.join("ok"), b"ok body").unwrap();
    std::fs::write(src.join("new\nline"), b"newline body").unwrap();
    std::fs::write(src.join("sub/inner"), b"inner body").unwrap();
    std::fs::write(src.join(OsStr::from_bytes(b"bad\xffname")), b"not utf-8").unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), src.join("link_out")).unwrap();
    std::os::unix::fs::symlink(&outside, src.join("dir_link")).unwrap();
    std::os::unix::fs::symlink("../../outside", src.join("sub/up")).unwrap();
    std::os::unix::fs::symlink("ok", src.join("link_in")).unwrap();
    std::os::unix::fs::symlink("loop_b", src.join("loop_a")).unwrap();
    std::os::unix::fs::symlink("loop_a", src.join("loop_b")).unwrap();
    // A FIFO where the default view reads metadata (zarr.json), and plain ones: before the
    // fix, listing the root opened zarr.json and hung until a writer came.
    let fifos = vec![src.join("zarr.json"), src.join("sub/zarr.json"), src.join("fifo")];
    for f in &fifos {
        mkfifo(f);
    }
    let _socket = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
    let dev = CString::new(src.join("null").as_os_str().as_bytes()).unwrap();
    // SAFETY: mknod of a NUL-terminated path (needs CAP_MKNOD; left out without it).
    let have_dev =
        unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 3)) } == 0;

    let mut hidden = vec![
        "link_out",
        "dir_link",
        "sub/up",
        "link_in",
        "loop_a",
        "loop_b",
        "zarr.json",
        "sub/zarr.json",
        "fifo",
        "sock",
    ];
    if have_dev {
        hidden.push("null");
    }
    for view in ["unsharded", "raw"] {
        let mnt = tmp.path().join(format!("mnt-{view}"));
        let mut m = Mount::start(&src, &mnt, &["--view", view, "--metadata-ttl", "0"]);
        let (root, sub) = (m.mnt.clone(), m.path("sub"));
        let listed = within(
            20,
            "listing a directory holding FIFOs",
            move || (sorted_names(&root), sorted_names(&sub)),
            || release_fifos(&fifos),
        );
        assert_eq!(listed.0, vec!["new\nline", "ok", "sub"], "{view}");
        assert_eq!(listed.1, vec!["inner"], "{view}");
        for name in &hidden {
            let p = m.path(name);
            let found = within(10, "a lookup", move || errno(&p), || release_fifos(&fifos));
            assert_eq!(found, Some(libc::ENOENT), "{view}: {name}");
        }
        for reach in ["dir_link/secret", "sub/up/secret", "link_out"] {
            assert!(std::fs::read(m.path(reach)).is_err(), "{view}: {reach} readable");
        }
        let root = m.mnt.clone();
        let mut files = within(
            20,
            "reading every file",
            move || {
                let mut files = Vec::new();
                walk(&root, &mut files);
                files
            },
            || release_fifos(&fifos),
        );
        files.sort();
        let files: Vec<(String, Vec<u8>)> = files
            .into_iter()
            .map(|(p, d)| (p.strip_prefix(&m.mnt).unwrap().to_str().unwrap().to_string(), d))
            .collect();
        assert_eq!(
            files,
            vec![
                ("new\nline".to_string(), b"newline body".to_vec()),
                ("ok".to_string(), b"ok body".to_vec()),
                ("sub/inner".to_string(), b"inner body".to_vec()),
            ],
            "{view}"
        );
        // Each hidden entry is logged once, by name (escaped), however often it is listed.
        for name in hidden.iter().copied().chain(["bad\u{fffd}name"]) {
            assert_eq!(hidden_lines(&m, name), 1, "{view}: {name:?}:\n{}", m.log_text());
        }
        assert!(m.stop().success(), "{}", m.log_text());
    }

    // Writing through the mount to a symlink's name replaces the symlink; the file it
    // pointed to is never written, and a directory symlink is never entered.
    let mut m = Mount::start(&src, &tmp.path().join("mnt-write"), &["--view", "raw"]);
    std::fs::write(m.path("link_out"), b"through the mount").unwrap();
    assert!(std::fs::create_dir(m.path("dir_link")).is_err());
    assert!(std::fs::write(m.path("dir_link/planted"), b"x").is_err());
    assert!(m.stop().success(), "{}", m.log_text());
    assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"SECRET");
    assert_eq!(sorted_names(&outside), vec!["secret"]);
    assert!(std::fs::symlink_metadata(src.join("link_out")).unwrap().is_file());
    assert_eq!(std::fs::read(src.join("link_out")).unwrap(), b"through the mount");
    assert!(std::fs::symlink_metadata(src.join("dir_link")).unwrap().file_type().is_symlink());
}

/// Zip entries: a name longer than 255 bytes is skipped like `..` (with the zip log line),
/// and its neighbours stay.
#[test]
fn zip_entries_with_overlong_names_are_skipped() {
    use zip::write::SimpleFileOptions;
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("store.zip");
    let long_file = "L".repeat(300);
    let long_dir = format!("dir/{}/x", "M".repeat(300));
    {
        let mut w = zip::ZipWriter::new(std::fs::File::create(&archive).unwrap());
        let opts = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        for (name, data) in [
            ("ok", "ok body"),
            (long_file.as_str(), "long"),
            (long_dir.as_str(), "deep"),
            ("a/b", "b body"),
        ] {
            w.start_file(name, opts).unwrap();
            w.write_all(data.as_bytes()).unwrap();
        }
        w.finish().unwrap();
    }
    let mut m = Mount::start(&archive, &tmp.path().join("mnt"), &["--view", "raw"]);
    assert_eq!(sorted_names(&m.mnt), vec!["a", "ok"]);
    assert_eq!(std::fs::read(m.path("ok")).unwrap(), b"ok body");
    assert_eq!(std::fs::read(m.path("a/b")).unwrap(), b"b body");
    let log = m.log_text();
    for name in [&long_file, &long_dir] {
        assert!(
            log.lines()
                .any(|l| l.contains("hostile or invalid name") && l.contains(&format!("{name:?}"))),
            "{name}:\n{log}"
        );
    }
    assert!(m.stop().success(), "{}", m.log_text());
}

/// A name the object store cannot hold (a control character) is refused when the file is
/// created, the directory made or the file renamed to it: EINVAL at once, nothing written
/// and nothing lost, rather than a create that succeeds and a close (or unmount) that fails.
#[tokio::test]
async fn names_an_object_store_cannot_hold_are_refused_at_create() {
    use common::zfs::{ino_of, list, raw_fs, read_file, rename, write_file};
    use zarr_mount::fs::inodes::table::ROOT_INO;
    use zarr_mount::fs::FsError;
    use zarr_mount::store::backends::object::ObjectStoreBackend;
    use zarr_mount::store::prelude::*;
    use zarr_mount::store::StoreError;

    let bucket = std::sync::Arc::new(object_store::memory::InMemory::new());
    let store: std::sync::Arc<dyn Store> =
        std::sync::Arc::new(ObjectStoreBackend::new(bucket, "pre", "memory://bkt".into()));
    let fs = raw_fs(store.clone(), false);
    let invalid = |r: Result<_, FsError>| {
        matches!(r, Err(FsError::Store(StoreError::InvalidKey(..)))) && {
            let e = r.err().unwrap();
            e.errno() == libc::EINVAL
        }
    };

    let bad = "line\nbreak";
    assert!(invalid(fs.create(ROOT_INO, bad, libc::O_WRONLY).await.map(|_| ())), "create");
    assert!(invalid(fs.mkdir(ROOT_INO, bad).await.map(|_| ())), "mkdir");
    write_file(&fs, "good", b"kept").await.unwrap();
    assert!(invalid(rename(&fs, "good", bad).await), "rename");
    assert_eq!(read_file(&fs, "good").await.unwrap(), b"kept");
    assert_eq!(list(&fs, "").await.unwrap(), ["good"]);
    assert!(ino_of(&fs, bad).await.is_err());
    assert_eq!(&store.get("good").await.unwrap()[..], b"kept");

    // The same names are fine on a local directory, which can hold them.
    let dir = tempfile::tempdir().unwrap();
    let local: std::sync::Arc<dyn Store> = std::sync::Arc::new(
        zarr_mount::store::backends::local::LocalStore::open(dir.path()).unwrap(),
    );
    let fs = raw_fs(local, false);
    write_file(&fs, bad, b"x").await.unwrap();
    assert_eq!(std::fs::read(dir.path().join(bad)).unwrap(), b"x");
}
