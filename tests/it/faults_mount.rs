//! A full disk under a real mount: the backing directory is a small tmpfs that the test fills.
//! A writer must get the error (ENOSPC or EIO) by close() at the latest, the key keeps its
//! previous content, no temp file is left behind, and once there is room again the data is
//! written back at unmount.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::fd::IntoRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::zfs::{local_of, put_sharded_array, stored_chunks};
use common::{is_mounted, Mount};
use zarr_mount::store::backends::local::LocalStore;

/// A tmpfs mounted for one test; unmounted on drop (lazily if something still holds it).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// None (with a message saying why the test is skipped) when tmpfs cannot be mounted.
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir: dir.canonicalize().unwrap() }),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs (needs root): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount(8): {e}");
                None
            }
        }
    }

    /// Fill every free byte with `name`.
    fn fill(&self, name: &str) {
        let mut f = fs::File::create(self.dir.join(name)).unwrap();
        let block = vec![0xAAu8; 64 << 10];
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        let _ = f.write_all(&block[..1]); // the last partial block
    }

    /// The names in the backing directory, hidden temp files included.
    fn names(&self, sub: &str) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    /// `names(sub)` once it equals `want`, or as it is after 5 s. The kernel sends RELEASE
    /// after close() has returned, and the daemon's release tries a failed write-back once
    /// more: its temp file can be seen for a moment, but none may be left.
    fn names_settled(&self, sub: &str, want: &[&str]) -> Vec<String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let names = self.names(sub);
            if names == want || std::time::Instant::now() > deadline {
                return names;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if is_mounted(&self.dir)
            && !Command::new("umount").arg(&self.dir).status().is_ok_and(|s| s.success())
        {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Write `data` to `path` and close it; the first errno seen by write, fsync-less close.
fn write_and_close(path: &Path, data: &[u8]) -> Option<i32> {
    let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).open(path).unwrap();
    if let Err(e) = f.write_all(data) {
        return e.raw_os_error();
    }
    let fd = f.into_raw_fd();
    // SAFETY: closing the fd we own; close() returns the error of the FUSE flush.
    if unsafe { libc::close(fd) } != 0 {
        return std::io::Error::last_os_error().raw_os_error();
    }
    None
}

fn assert_disk_full_error(got: Option<i32>, what: &str) {
    assert!(
        matches!(got, Some(libc::ENOSPC) | Some(libc::EIO)),
        "{what}: expected ENOSPC or EIO, got {got:?}"
    );
}

#[test]
fn a_full_disk_fails_the_writer_and_keeps_the_previous_content() {
    let tmp = tempfile::tempdir().unwrap();
    // Declared first, dropped last: the FUSE mount (which holds the tmpfs open) goes first.
    let Some(disk) = Tmpfs::mount(&tmp.path().join("disk"), "2m") else { return };
    fs::write(disk.dir.join("victim"), b"previous content").unwrap();
    let mut m = Mount::start(&disk.dir, &tmp.path().join("mnt"), &["--view", "raw"]);
    disk.fill("filler");

    let new_content = vec![b'N'; 256 << 10];
    assert_disk_full_error(write_and_close(&m.path("victim"), &new_content), "replacing a key");
    assert_disk_full_error(write_and_close(&m.path("fresh"), &new_content), "a new key");
    assert_eq!(fs::read(disk.dir.join("victim")).unwrap(), b"previous content");
    assert_eq!(
        disk.names_settled("", &["filler", "victim"]),
        ["filler", "victim"],
        "no temp file left and no half-written key"
    );

    // Room again: the failed write is kept and written back when the mount stops.
    fs::remove_file(disk.dir.join("filler")).unwrap();
    let status = m.stop();
    assert!(status.success(), "exit status {status}:\n{}", m.log_text());
    assert_eq!(fs::read(disk.dir.join("victim")).unwrap(), new_content);
    assert_eq!(fs::read(disk.dir.join("fresh")).unwrap(), new_content);
    assert_eq!(disk.names(""), ["fresh", "victim"]);
}

#[test]
fn a_full_disk_during_a_shard_rewrite_keeps_the_old_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&tmp.path().join("disk"), "2m") else { return };
    let chunks: BTreeMap<u64, Vec<u8>> =
        (0..4).map(|x| (local_of(0, x), vec![x as u8; 100])).collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = LocalStore::open(&disk.dir).unwrap();
    fs::create_dir_all(disk.dir.join("a/c/0")).unwrap(); // a local store has real directories
    rt.block_on(put_sharded_array(&store, "a", &chunks));
    let shard_before = fs::read(disk.dir.join("a/c/0/0")).unwrap();
    let m = Mount::start(&disk.dir, &tmp.path().join("mnt"), &[]);
    assert_eq!(
        fs::read(m.path("a/c/0/2")).unwrap(),
        vec![2u8; 100],
        "the unsharded view shows the chunk"
    );
    disk.fill("filler");

    assert_disk_full_error(write_and_close(&m.path("a/c/1/1"), &[9u8; 64 << 10]), "an inner chunk");
    assert_eq!(
        fs::read(disk.dir.join("a/c/0/0")).unwrap(),
        shard_before,
        "the shard is byte for byte the old one"
    );
    assert_eq!(rt.block_on(stored_chunks(&store, "a/c/0/0")).unwrap(), chunks);
    assert_eq!(disk.names_settled("a/c/0", &["0"]), ["0"], "no temp file left beside the shard");
    assert_eq!(fs::read(m.path("a/c/0/3")).unwrap(), vec![3u8; 100], "the other chunks still read");
}
