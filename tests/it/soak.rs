//! Concurrency soak against a model (see `common::soak`): first through `ZarrFs` directly over
//! a local directory store with a little injected latency, then briefly through a real mount.
//! `ZM_SOAK_SECS` sets the length of each run (defaults: 3 s and 2 s), `ZM_SOAK_SEED` replays
//! the random choices of a failed run as far as thread timing allows.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::soak::{self, Target};
use common::zfs::{self, put_sharded_array};
use common::Mount;
use zarr_mount::fs::{FsError, ZarrFs};
use zarr_mount::store::backends::local::LocalStore;
use zarr_mount::store::layers::fault::{FaultPlan, FaultStore, Op};
use zarr_mount::store::prelude::*;

/// A backing directory holding the directory `d/` and the empty sharded array `a`.
fn backing(rt: &tokio::runtime::Runtime, dir: &Path) -> Arc<dyn Store> {
    for sub in ["d", "a/c/0"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let store: Arc<dyn Store> = Arc::new(LocalStore::open(dir).unwrap());
    rt.block_on(put_sharded_array(&*store, "a", &BTreeMap::new()));
    store
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// `ZarrFs` driven from plain threads, each request run to completion on the runtime.
struct Direct {
    fs: ZarrFs,
    rt: tokio::runtime::Handle,
}

fn errno(e: FsError) -> i32 {
    e.errno()
}

impl Target for Direct {
    fn write(&self, path: &str, data: &[u8], piece: usize) -> Result<(), i32> {
        self.rt.block_on(zfs::write_file_in(&self.fs, path, data, piece)).map_err(errno)
    }
    fn read(&self, path: &str) -> Result<Vec<u8>, i32> {
        self.rt.block_on(zfs::read_file(&self.fs, path)).map_err(errno)
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), i32> {
        self.rt.block_on(zfs::rename(&self.fs, from, to)).map_err(errno)
    }
    fn remove(&self, path: &str) -> Result<(), i32> {
        self.rt.block_on(zfs::remove_file(&self.fs, path)).map_err(errno)
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, i32> {
        self.rt.block_on(zfs::list(&self.fs, dir)).map_err(errno)
    }
    fn reads_whole_files_at_once(&self) -> bool {
        true
    }
}

#[test]
fn soak_through_zarrfs_matches_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime();
    let local = backing(&rt, tmp.path());
    // A little latency on every read and write widens the windows in which requests overlap.
    let plan = FaultPlan::new();
    plan.delay(&[Op::Read, Op::Put], Duration::from_micros(300));
    let faulty: Arc<dyn Store> = Arc::new(FaultStore::new(local.clone(), plan));
    let target = Arc::new(Direct { fs: zfs::unsharded_fs(faulty), rt: rt.handle().clone() });
    let (ops, stale) = soak::run(target, local, rt.handle(), soak::duration(3.0), 300_000);
    eprintln!("soak through ZarrFs: {ops} operations, {stale} reads of replaced files got ESTALE");
    assert!(ops > soak::THREADS as u64 * 10, "the soak hardly ran: {ops} operations");
}

/// A real mount, through std::fs.
struct Mounted {
    root: PathBuf,
}

fn os_errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl Target for Mounted {
    fn write(&self, path: &str, data: &[u8], piece: usize) -> Result<(), i32> {
        let mut f = std::fs::File::create(self.root.join(path)).map_err(os_errno)?;
        for part in data.chunks(piece.max(1)) {
            f.write_all(part).map_err(os_errno)?;
        }
        f.sync_all().map_err(os_errno) // the write-back's error, which close() would drop
    }
    fn read(&self, path: &str) -> Result<Vec<u8>, i32> {
        std::fs::read(self.root.join(path)).map_err(os_errno)
    }
    fn rename(&self, from: &str, to: &str) -> Result<(), i32> {
        std::fs::rename(self.root.join(from), self.root.join(to)).map_err(os_errno)
    }
    fn remove(&self, path: &str) -> Result<(), i32> {
        std::fs::remove_file(self.root.join(path)).map_err(os_errno)
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, i32> {
        std::fs::read_dir(self.root.join(dir))
            .map_err(os_errno)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()).map_err(os_errno))
            .collect()
    }
    fn reads_whole_files_at_once(&self) -> bool {
        false // the kernel splits reads into requests and shares pages between open files
    }
}

#[test]
fn soak_through_a_mount_matches_the_model() {
    let (_tmp, src, mnt) = common::dirs();
    let rt = runtime();
    let local = backing(&rt, &src);
    let m = Mount::start(&src, &mnt, &[]);
    let target = Arc::new(Mounted { root: m.mnt.clone() });
    // Values up to 64 KiB: each is read with one request, as the kernel reads small files.
    let (ops, stale) = soak::run(target, local, rt.handle(), soak::duration(2.0), 64 << 10);
    eprintln!("soak through a mount: {ops} operations, {stale} reads of replaced files got ESTALE");
    assert!(ops > soak::THREADS as u64 * 10, "the soak hardly ran: {ops} operations");
}
