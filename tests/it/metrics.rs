//! The metrics endpoint (`--metrics-addr`) and what it counts.
//!
//! - A real mount is scraped over HTTP while a workload runs, and `promtool check metrics`
//!   (Debian `prometheus`, installed by scripts/setup.sh) must accept every scrape.
//! - A known workload through a real FUSE mount served in this process, over a
//!   request-counting store, must leave backend counters equal to what the store saw, cache
//!   hits and misses adding up to the lookups made, and errno counters risen for injected
//!   faults. (The registry is process-wide, so that test counts in a process of its own: other
//!   tests of this binary serve mounts in-process too.)

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::zfs::{local_of, put_sharded_array, TTL};
use common::{force_unmount, is_mounted, Mount};
use zarr_mount::fs::{FsConfig, ZarrFs};
use zarr_mount::fuse::session::{serve, SessionError, SessionOptions};
use zarr_mount::metrics::{self, CacheKind, Kind, Op};
use zarr_mount::store::backends::memory::MemoryStore;
use zarr_mount::store::layers::cache::{CacheConfig, CachingStore};
use zarr_mount::store::layers::fault::{self, Fault, FaultPlan, FaultStore};
use zarr_mount::store::layers::metered::MeteredStore;
use zarr_mount::store::layers::recording::{RecordingStore, READS};
use zarr_mount::store::prelude::*;
use zarr_mount::views::raw::namespace::RawNamespace;
use zarr_mount::views::unsharded::namespace::UnshardedNamespace;

/// A port free right now on the loopback interface.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET /metrics` with a plain HTTP/1.0 request: (status line, content type, body).
pub(crate) fn scrape(port: u16) -> (String, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.lines().next().unwrap_or_default().to_string();
    let ctype = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type:").map(str::to_string))
        .unwrap_or_default();
    (status, ctype.trim().to_string(), body.to_string())
}

/// `promtool check metrics` on `text`: Ok, or its complaints.
pub(crate) fn promtool_check(text: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool not found: run scripts/setup.sh (Debian package prometheus)");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The value of the sample line `series` (name and labels exactly as exposed).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn promtool_accepts_scrapes_taken_during_a_workload() {
    let (_tmp, src, mnt) = common::dirs();
    for d in 0..4 {
        std::fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for f in 0..50 {
            std::fs::write(src.join(format!("d{d}/f{f}")), vec![b'x'; 4096]).unwrap();
        }
    }
    let port = free_port();
    let addr = port.to_string(); // a bare port: loopback
    let mut m = Mount::start(&src, &mnt, &["--metrics-addr", &addr]);

    // Readers, a writer and failing lookups run while the scraper polls.
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|d| {
            let (root, stop) = (m.mnt.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rounds = 0;
                while !stop.load(Ordering::Relaxed) || rounds == 0 {
                    for f in 0..50 {
                        assert_eq!(
                            std::fs::read(root.join(format!("d{d}/f{f}"))).unwrap().len(),
                            4096
                        );
                        assert!(std::fs::metadata(root.join(format!("d{d}/absent{f}"))).is_err());
                    }
                    std::fs::write(root.join(format!("d{d}/new{rounds}")), b"written").unwrap();
                    rounds += 1;
                }
            })
        })
        .collect();
    let mut scrapes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        scrapes.push(scrape(port));
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("workload thread");
    }
    let last = scrape(port);
    assert_eq!(m.stop().code(), Some(0), "{}", m.log_text());

    assert!(scrapes.len() >= 5, "only {} scrapes", scrapes.len());
    for (status, ctype, body) in scrapes.iter().chain([&last]) {
        assert!(status.contains(" 200 "), "{status}");
        assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
        if let Err(why) = promtool_check(body) {
            panic!("promtool check metrics refused a scrape:\n{why}\n--- scrape ---\n{body}");
        }
    }
    let body = &last.2;
    let reads = sample(body, "zarr_mount_fuse_requests_total{op=\"read\"}").unwrap();
    assert!(reads >= 200.0, "{reads} reads");
    let enoent =
        sample(body, "zarr_mount_fuse_request_errors_total{errno=\"ENOENT\",op=\"lookup\"}");
    assert!(enoent.is_some_and(|n| n >= 200.0), "{enoent:?}");
    assert!(sample(body, "zarr_mount_backend_sent_bytes_total{kind=\"put\"}").unwrap() >= 7.0);
    assert!(body.contains("zarr_mount_build_info{backend=\"local\",version=\""));
    // The disk cache's series are there (and checked by promtool) on every mount, zero
    // without --cache-dir; tests/it/disk_cache.rs checks what they count.
    for series in [
        "zarr_mount_disk_cache_hits_total",
        "zarr_mount_disk_cache_misses_total",
        "zarr_mount_disk_cache_read_bytes_total",
        "zarr_mount_disk_cache_revalidations_total{result=\"unchanged\"}",
        "zarr_mount_disk_cache_revalidations_total{result=\"changed\"}",
        "zarr_mount_disk_cache_revalidations_total{result=\"deleted\"}",
        "zarr_mount_disk_cache_evictions_total",
        "zarr_mount_disk_cache_corrupt_total",
        "zarr_mount_backend_requests_total{kind=\"revalidate\"}",
    ] {
        assert_eq!(sample(body, series), Some(0.0), "{series}");
    }
    // The scrapes were answered while requests were in flight at least sometimes, and the
    // latency histogram saw every request.
    let count = sample(body, "zarr_mount_fuse_request_duration_seconds_count{op=\"read\"}");
    assert_eq!(count, Some(reads));
}

/// A mount of `fs` served by this process (so its metrics are this process's); unmounted and
/// joined on drop, also when the test fails.
struct InProcessMount {
    mnt: PathBuf,
    server: Option<std::thread::JoinHandle<Result<(), SessionError>>>,
}

impl InProcessMount {
    fn start(fs: Arc<ZarrFs>, mnt: &Path) -> InProcessMount {
        let mnt = mnt.canonicalize().unwrap();
        let opts = SessionOptions {
            mountpoint: mnt.clone(),
            fs_name: "metrics-test".into(),
            read_only: false,
            allow_other: false,
            threads: 2,
            read_ahead: None,
        };
        let server = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
            serve(&rt, fs, &opts, || {})
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(&mnt) {
            assert!(!server.is_finished(), "the in-process mount ended early");
            assert!(Instant::now() < deadline, "the in-process mount did not appear");
            std::thread::sleep(Duration::from_millis(20));
        }
        InProcessMount { mnt, server: Some(server) }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

impl Drop for InProcessMount {
    fn drop(&mut self) {
        force_unmount(&self.mnt);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

/// Counter values the test compares before and after.
#[derive(Debug, Clone, PartialEq)]
struct Counts {
    backend: Vec<(Kind, u64)>,
    received: u64,
    sent: u64,
    backend_errors: u64,
    cache: Vec<(CacheKind, u64, u64)>,
    fuse: Vec<(Op, u64)>,
    eio: u64,
    etimedout: u64,
    rewrites: u64,
}

fn counts() -> Counts {
    let m = metrics::global();
    Counts {
        backend: Kind::ALL.iter().map(|k| (*k, m.backend.requests(*k).get())).collect(),
        received: Kind::ALL.iter().map(|k| m.backend.received(*k).get()).sum(),
        sent: Kind::ALL.iter().map(|k| m.backend.sent(*k).get()).sum(),
        backend_errors: Kind::ALL.iter().map(|k| m.backend.errors(*k, "backend")).sum::<u64>()
            + Kind::ALL.iter().map(|k| m.backend.errors(*k, "timeout")).sum::<u64>(),
        cache: CacheKind::ALL
            .iter()
            .map(|c| (*c, m.cache(*c).hits.get(), m.cache(*c).misses.get()))
            .collect(),
        fuse: Op::ALL.iter().map(|op| (*op, m.fuse.requests(*op).get())).collect(),
        eio: m.fuse.errors_with(libc::EIO),
        etimedout: m.fuse.errors_with(libc::ETIMEDOUT),
        rewrites: m.shard_rewrites.get(),
    }
}

impl Counts {
    fn backend(&self, k: Kind) -> u64 {
        self.backend.iter().find(|(x, _)| *x == k).unwrap().1
    }
    fn hits_misses(&self, c: CacheKind) -> (u64, u64) {
        let (_, h, m) = self.cache.iter().find(|(x, ..)| *x == c).unwrap();
        (*h, *m)
    }
    fn fuse(&self, op: Op) -> u64 {
        self.fuse.iter().find(|(x, _)| *x == op).unwrap().1
    }
}

/// The recorded calls that a backend request of kind `k` is.
fn methods(k: Kind) -> &'static [&'static str] {
    match k {
        Kind::Get => &["get"],
        Kind::Range => &["get_range", "get_ranged"],
        Kind::Head => &["head"],
        Kind::Revalidate => &["get_if_changed"],
        Kind::Lookup => &["lookup"],
        Kind::List => &["list"],
        Kind::Put => &["put"],
        Kind::Delete => &["delete"],
        Kind::Copy => &["rename", "rename_dir"],
        Kind::Dir => &["create_dir", "remove_dir"],
    }
}

/// Inner chunk (y, x): 2x2 little-endian int32, all equal to 10y+x.
fn chunk(y: u64, x: u64) -> Vec<u8> {
    (0..4).flat_map(|_| ((10 * y + x) as i32).to_le_bytes()).collect()
}

/// The counting test below compares process-wide counters with what one store saw, so nothing
/// else may count in its process while it runs: other tests of this binary (faults, unsharded
/// view) serve their own mounts in-process and move the same FUSE, object-cache and
/// shard-rewrite counters. It runs in a process of its own: this binary, started again with
/// only that test selected.
#[test]
fn counters_equal_what_the_store_saw_and_errors_are_counted_by_errno() {
    const ALONE: &str = "metrics::counting_alone_in_its_process";
    let out = Command::new(std::env::current_exe().unwrap())
        .args([ALONE, "--exact", "--ignored", "--test-threads=1", "--nocapture"])
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{ALONE} failed:\n{text}");
    // Selected by exact name and run: a rename must not leave zero tests passing silently.
    assert!(text.contains("1 passed"), "{ALONE} did not run:\n{text}");
}

#[test]
#[ignore = "run in a process of its own by counters_equal_what_the_store_saw_and_errors_are_counted_by_errno"]
fn counting_alone_in_its_process() {
    let (_tmp, _src, mnt) = common::dirs();
    // memory <- faults <- below <- metered <- object cache <- above <- filesystem
    let memory = Arc::new(MemoryStore::new());
    let plan = FaultPlan::new();
    let below =
        Arc::new(RecordingStore::new(Arc::new(FaultStore::new(memory.clone(), plan.clone()))));
    let metered = Arc::new(MeteredStore::new(below.clone()));
    let cache = CacheConfig { capacity: 1 << 20, object_limit: 1 << 16, ttl: TTL };
    let above = Arc::new(RecordingStore::new(CachingStore::new(metered, cache)));
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Large enough for the read-ahead to fetch windows in the background while it is read.
    let big = Bytes::from((0..3u32 << 20).map(|i| (i % 251) as u8).collect::<Vec<_>>());
    let chunks: BTreeMap<u64, Vec<u8>> =
        (0..4).flat_map(|y| (0..4).map(move |x| (local_of(y, x), chunk(y, x)))).collect();
    rt.block_on(async {
        put_sharded_array(&*memory, "a", &chunks).await;
        for k in ["d/a", "d/b", "d/c"] {
            memory.put(k, Bytes::from(format!("content of {k}"))).await.unwrap();
        }
        memory.put("e/big", big.clone()).await.unwrap();
    });
    let ns = UnshardedNamespace::new(RawNamespace::new(above.clone() as Arc<dyn Store>), TTL);
    let fs = Arc::new(ZarrFs::new(
        Arc::new(ns),
        FsConfig {
            metadata_ttl: TTL,
            read_only: false,
            passthrough: false,
            perms: zarr_mount::perms::ShownPerms::of_this_process(),
        },
    ));
    let before = counts();
    let m = InProcessMount::start(fs, &mnt);

    // Reads: every inner chunk of the one shard, through the unsharded view, then plain files.
    for y in 0..4 {
        for x in 0..4 {
            let got = std::fs::read(m.path(&format!("a/c/{y}/{x}"))).unwrap();
            assert_eq!(got, chunk(y, x), "chunk {y},{x}");
        }
    }
    assert_eq!(std::fs::read(m.path("d/c")).unwrap(), b"content of d/c");
    let ahead = metrics::global().ahead(metrics::Ahead::ReadAhead).fetched.get();
    assert!(std::fs::read(m.path("e/big")).unwrap() == big, "e/big read back");
    let ahead = metrics::global().ahead(metrics::Ahead::ReadAhead).fetched.get() - ahead;
    assert!(ahead > 0, "the large file was read without read-ahead");
    assert!(std::fs::metadata(m.path("d/absent")).is_err());
    let read_phase = counts();
    // One shard, read sequentially, nothing invalidated: its index was fetched once; every
    // other use of it was a hit.
    let (hits, misses) = read_phase.hits_misses(CacheKind::ShardIndex);
    let (hits0, misses0) = before.hits_misses(CacheKind::ShardIndex);
    assert_eq!(misses - misses0, 1, "shard index misses");
    assert!(hits - hits0 >= 15, "shard index hits: {}", hits - hits0);

    // Writes: a plain file (one PUT) and a chunk (one shard rewrite).
    std::fs::write(m.path("d/new"), vec![7u8; 1000]).unwrap();
    std::fs::write(m.path("a/c/1/1"), chunk(9, 9)).unwrap();

    // Faults: a backend error and a timeout on reads of two files not read before.
    plan.fail_matching(&[fault::Op::Read], "d/a", Fault::Backend);
    plan.fail_matching(&[fault::Op::Read], "d/b", Fault::Timeout);
    let read_err = |p: &str| std::fs::read(m.path(p)).unwrap_err().raw_os_error();
    assert_eq!(read_err("d/a"), Some(libc::EIO));
    assert_eq!(read_err("d/b"), Some(libc::ETIMEDOUT));
    plan.clear();
    drop(m); // unmounted: every request has been answered and counted
    let after = counts();

    // Backend requests, by kind, are what the store below the meter saw.
    let calls = below.calls();
    for k in Kind::ALL {
        let seen = calls
            .iter()
            .filter(|c| methods(k).contains(&c.split(' ').next().unwrap_or("")))
            .count() as u64;
        assert_eq!(after.backend(k) - before.backend(k), seen, "{k:?} requests; calls: {calls:#?}");
    }
    assert!(after.backend(Kind::Range) > before.backend(Kind::Range));
    assert!(after.backend(Kind::Put) - before.backend(Kind::Put) >= 2);
    // ... and so are the bytes.
    assert_eq!(after.received - before.received, below.bytes_read());
    assert_eq!(after.sent - before.sent, below.bytes_written());
    assert!(below.bytes_written() >= 1000 + 16);

    // Every read that reached the object cache was a hit or a miss.
    let (h1, m1) = after.hits_misses(CacheKind::Objects);
    let (h0, m0) = before.hits_misses(CacheKind::Objects);
    assert_eq!((h1 - h0) + (m1 - m0), above.count(&READS) as u64, "object cache lookups");
    assert!(h1 > h0, "the object cache served something");
    // Every lookup, getattr and open asked the metadata cache once.
    let (h1, m1) = after.hits_misses(CacheKind::Metadata);
    let (h0, m0) = before.hits_misses(CacheKind::Metadata);
    let asked: u64 = [Op::Lookup, Op::Getattr, Op::Open]
        .iter()
        .map(|op| after.fuse(*op) - before.fuse(*op))
        .sum();
    assert_eq!((h1 - h0) + (m1 - m0), asked, "metadata cache lookups");

    // The faults: counted at the backend exactly as injected, and as errno at FUSE.
    assert_eq!(after.backend_errors - before.backend_errors, plan.injected());
    assert!(plan.injected() >= 2);
    assert!(after.eio > before.eio, "EIO not counted");
    assert!(after.etimedout > before.etimedout, "ETIMEDOUT not counted");
    assert_eq!(after.rewrites - before.rewrites, 1, "one shard rewrite");
    // Every request was timed once it was answered.
    let timed = metrics::global().fuse.duration(Op::Read).get_sample_count();
    assert_eq!(timed, after.fuse(Op::Read), "reads timed");
    assert_eq!(metrics::global().fuse.in_flight.get(), 0, "nothing in flight after unmount");
}
