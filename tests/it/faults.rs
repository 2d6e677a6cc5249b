//! The filesystem over a misbehaving backend (`store::layers::fault::FaultStore`), driven without FUSE:
//! a failing request fails only the file it was for, a failed write-back reaches the writer
//! and leaves the stored content alone, caches neither keep errors nor lose their single
//! fetch under latency, and a failed shard rewrite leaves the old shard intact.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::zfs::{
    ino_of, list, local_of, put_sharded_array, raw_fs, read_file, remove_file, sharded_layout,
    stored_chunks, unsharded_fs, write_file, write_file_in,
};
use zarr_mount::fs::{FsError, ZarrFs};
use zarr_mount::store::backends::memory::MemoryStore;
use zarr_mount::store::layers::cache::{CacheConfig, CachingStore};
use zarr_mount::store::layers::fault::{Fault, FaultPlan, FaultStore, Op};
use zarr_mount::store::layers::recording::{RecordingStore, READS};
use zarr_mount::store::prelude::*;

/// memory <- faults <- recording: `recording` sees every request the layers above make,
/// including the ones the plan then fails.
struct Backend {
    memory: Arc<MemoryStore>,
    plan: Arc<FaultPlan>,
    recording: Arc<RecordingStore>,
}

impl Backend {
    fn store(&self) -> Arc<dyn Store> {
        self.recording.clone()
    }
}

fn backend() -> Backend {
    let memory = Arc::new(MemoryStore::new());
    let plan = FaultPlan::new();
    let faulty = Arc::new(FaultStore::new(memory.clone(), plan.clone()));
    Backend { memory, plan, recording: Arc::new(RecordingStore::new(faulty)) }
}

fn errno<T: std::fmt::Debug>(r: Result<T, FsError>) -> i32 {
    r.expect_err("expected an error").errno()
}

#[tokio::test]
async fn a_failing_backend_fails_only_that_file_and_the_fs_recovers() {
    let b = backend();
    for k in ["d/a", "d/b", "d/c"] {
        b.memory.put(k, Bytes::from(format!("content of {k}"))).await.unwrap();
    }
    let fs = raw_fs(b.store(), false);
    assert_eq!(list(&fs, "d").await.unwrap(), ["a", "b", "c"]);

    // Reads of one key fail; its neighbours, the listing and its metadata are fine.
    b.plan.fail_matching(&[Op::Read], "d/a", Fault::Backend);
    assert_eq!(errno(read_file(&fs, "d/a").await), libc::EIO);
    assert_eq!(read_file(&fs, "d/b").await.unwrap(), b"content of d/b");
    assert_eq!(list(&fs, "d").await.unwrap(), ["a", "b", "c"]);
    assert_eq!(fs.getattr(ino_of(&fs, "d/a").await.unwrap()).await.unwrap().size, 14);
    // A backend timeout is ETIMEDOUT, a refusal EACCES, for that key only.
    b.plan.fail_matching(&[Op::Read], "d/b", Fault::Timeout);
    b.plan.fail_matching(&[Op::Read], "d/c", Fault::PermissionDenied);
    assert_eq!(errno(read_file(&fs, "d/b").await), libc::ETIMEDOUT);
    assert_eq!(errno(read_file(&fs, "d/c").await), libc::EACCES);

    // Lookups and listings that fail are not remembered as "absent" or "empty".
    b.plan.fail_matching(&[Op::Stat, Op::List], "e", Fault::Backend);
    b.memory.put("e/new", Bytes::from_static(b"appeared")).await.unwrap();
    assert_eq!(errno(ino_of(&fs, "e/new").await), libc::EIO);
    assert_eq!(errno(list(&fs, "e").await), libc::EIO);

    assert!(b.plan.injected() >= 5);
    b.plan.clear();
    assert_eq!(read_file(&fs, "d/a").await.unwrap(), b"content of d/a");
    assert_eq!(read_file(&fs, "d/b").await.unwrap(), b"content of d/b");
    assert_eq!(read_file(&fs, "e/new").await.unwrap(), b"appeared");
    assert_eq!(list(&fs, "e").await.unwrap(), ["new"]);
}

#[tokio::test]
async fn a_failed_write_back_reaches_the_writer_and_keeps_the_old_content() {
    let b = backend();
    b.memory.put("k", Bytes::from_static(b"old content")).await.unwrap();
    let fs = raw_fs(b.store(), false);

    // close() reports the flush: the disk is full.
    b.plan.fail_matching(&[Op::Put], "k", Fault::NoSpace);
    assert_eq!(
        errno(write_file_in(&fs, "k", b"new content, longer than before", 7).await),
        libc::ENOSPC
    );
    assert_eq!(b.memory.get("k").await.unwrap(), Bytes::from_static(b"old content"));
    // fsync reports it as well.
    let ino = ino_of(&fs, "k").await.unwrap();
    let h = fs.open(ino, libc::O_WRONLY).await.unwrap();
    assert_eq!(errno(fs.fsync(h.fh).await), libc::ENOSPC);
    assert_eq!(errno(fs.release(h.fh).await), libc::ENOSPC);
    assert_eq!(b.memory.get("k").await.unwrap(), Bytes::from_static(b"old content"));

    // Once the backend works again, the data that could not be written is not lost: the
    // write-back at unmount stores it.
    b.plan.clear();
    assert_eq!(fs.flush_all().await, 0);
    assert_eq!(
        b.memory.get("k").await.unwrap(),
        Bytes::from_static(b"new content, longer than before")
    );

    // A new file whose first write-back fails does not appear in the store at all.
    let injected = b.plan.injected();
    b.plan.fail_next(Op::Put, 2, Fault::Backend);
    assert_eq!(errno(write_file(&fs, "fresh", b"x").await), libc::EIO);
    assert!(b.memory.head("fresh").await.unwrap().is_none());
    assert_eq!(b.plan.injected() - injected, 2, "flush and release each tried once");
}

#[tokio::test]
async fn latency_keeps_one_fetch_per_object_and_errors_are_not_cached() {
    let b = backend();
    let data = Bytes::from(vec![7u8; 4096]);
    b.memory.put("obj", data.clone()).await.unwrap();
    let cfg =
        CacheConfig { capacity: 1 << 20, object_limit: 1 << 20, ttl: Duration::from_secs(60) };
    let cache = CachingStore::new(b.store(), cfg);
    cache.head("obj").await.unwrap(); // the size is known: reads fetch the whole object
    b.recording.take();

    // A slow backend: concurrent readers wait for the same fetch, and all see its error.
    b.plan.delay(&[Op::Read], Duration::from_millis(200));
    b.plan.fail_next(Op::Read, 1, Fault::Backend);
    let readers = |n: usize| {
        (0..n)
            .map(|_| {
                let c = cache.clone();
                tokio::spawn(async move { c.get("obj").await })
            })
            .collect::<Vec<_>>()
    };
    for r in readers(16) {
        assert!(r.await.unwrap().is_err(), "every waiter of the failed fetch gets its error");
    }
    assert_eq!(b.recording.count(&READS), 1, "{:?}", b.recording.calls());
    // The error was not cached: the next readers fetch again, once, and succeed.
    for r in readers(16) {
        assert_eq!(r.await.unwrap().unwrap(), data);
    }
    assert_eq!(b.recording.count(&READS), 2, "{:?}", b.recording.calls());
}

fn chunk(y: u64, x: u64, tag: &str) -> Vec<u8> {
    format!("chunk {y},{x} {tag} ").repeat(1 + ((y + x) % 3) as usize).into_bytes()
}

/// Shard (0, 0) of array `a` with inner chunks (0..4, 0..4) except (3, 3).
async fn sharded_backend() -> (Backend, BTreeMap<u64, Vec<u8>>) {
    let b = backend();
    let mut chunks = BTreeMap::new();
    for y in 0..4 {
        for x in 0..4 {
            if (y, x) != (3, 3) {
                chunks.insert(local_of(y, x), chunk(y, x, "v1"));
            }
        }
    }
    put_sharded_array(&*b.memory, "a", &chunks).await;
    (b, chunks)
}

#[tokio::test]
async fn shard_index_fetch_under_latency_is_shared_and_its_error_not_kept() {
    let (b, chunks) = sharded_backend().await;
    let fs = Arc::new(unsharded_fs(b.store()));
    read_file(&fs, "a/zarr.json").await.unwrap();
    b.recording.take();
    b.plan.delay(&[Op::Read], Duration::from_millis(200));
    b.plan.fail_next(Op::Read, 1, Fault::Backend);
    let readers = || {
        (0..4u64)
            .flat_map(|y| (0..3u64).map(move |x| (y, x)))
            .map(|(y, x)| {
                let fs = fs.clone();
                tokio::spawn(async move { (y, x, read_file(&fs, &format!("a/c/{y}/{x}")).await) })
            })
            .collect::<Vec<_>>()
    };
    for r in readers() {
        let (_, _, got) = r.await.unwrap();
        assert_eq!(errno(got), libc::EIO);
    }
    let index_fetches =
        |calls: Vec<String>| calls.iter().filter(|c| c.contains("a/c/0/0 Suffix")).count();
    assert_eq!(index_fetches(b.recording.calls()), 1, "{:?}", b.recording.calls());
    for r in readers() {
        let (y, x, got) = r.await.unwrap();
        assert_eq!(got.unwrap(), chunks[&local_of(y, x)]);
    }
    assert_eq!(index_fetches(b.recording.calls()), 2, "{:?}", b.recording.calls());
}

/// `sharded_backend` with shard (0, 0) copied to (0, 1), (1, 0) and (1, 1), seen through the
/// unsharded view over a whole-object cache that keeps them (1 MiB).
async fn small_shards_behind_a_cache() -> (Backend, BTreeMap<u64, Vec<u8>>, ZarrFs) {
    let (b, chunks) = sharded_backend().await;
    let shard = b.memory.get("a/c/0/0").await.unwrap();
    for k in ["a/c/0/1", "a/c/1/0", "a/c/1/1"] {
        b.memory.put(k, shard.clone()).await.unwrap();
    }
    let cfg =
        CacheConfig { capacity: 1 << 20, object_limit: 1 << 20, ttl: Duration::from_secs(60) };
    let fs = unsharded_fs(CachingStore::new(b.store(), cfg));
    (b, chunks, fs)
}

/// Over a whole-object cache, each shard costs one GET in all (index and chunks), as
/// zarr-python's own whole-shard read does: the first because the array's metadata bounds a
/// shard within what the cache keeps whole, the others by the size seen, whether the scan
/// fetched them ahead or read them itself. Over a plain store, the index alone.
#[tokio::test]
async fn small_shards_behind_a_cache_cost_one_request_each() {
    let (b, chunks, fs) = small_shards_behind_a_cache().await;
    let shard = b.memory.get("a/c/0/0").await.unwrap();
    read_file(&fs, "a/zarr.json").await.unwrap();
    b.recording.take();
    let read_shard = |sy: u64, sx: u64| {
        let fs = &fs;
        let chunks = &chunks;
        async move {
            for (y, x) in (0..4u64).flat_map(|y| (0..4u64).map(move |x| (y, x))) {
                let path = format!("a/c/{}/{}", sy * 4 + y, sx * 4 + x);
                match chunks.get(&local_of(y, x)) {
                    Some(want) => assert_eq!(&read_file(fs, &path).await.unwrap(), want, "{path}"),
                    None => assert_eq!(errno(read_file(fs, &path).await), libc::ENOENT, "{path}"),
                }
            }
        }
    };
    read_shard(0, 0).await;
    let calls = b.recording.take();
    assert_eq!(calls.len(), 1, "first shard: one GET of the whole shard: {calls:?}");
    // From the shard's start: an over-long suffix is a shape some servers refuse.
    let window: u64 = calls[0]
        .rsplit_once("Range(0..")
        .unwrap_or_else(|| panic!("{calls:?}"))
        .1
        .trim_end_matches(')')
        .parse()
        .unwrap();
    assert!(window >= shard.len() as u64, "{calls:?} for a shard of {} bytes", shard.len());
    for (sy, sx) in [(0, 1), (1, 0), (1, 1)] {
        read_shard(sy, sx).await;
    }
    let mut calls = b.recording.take();
    calls.sort();
    let shards: Vec<&str> = calls
        .iter()
        .filter_map(|c| ["a/c/0/1 ", "a/c/1/0 ", "a/c/1/1 "].into_iter().find(|k| c.contains(k)))
        .collect();
    assert_eq!(shards, ["a/c/0/1 ", "a/c/1/0 ", "a/c/1/1 "], "one request per shard: {calls:?}");
    assert_eq!(calls.len(), 3, "{calls:?}");

    // Without a whole-object cache the index GET asks for the index only.
    let (b, _) = sharded_backend().await;
    let fs = unsharded_fs(b.store());
    read_file(&fs, "a/c/0/0").await.unwrap();
    let index_len = sharded_layout().index_size();
    let calls = b.recording.calls();
    assert!(calls.iter().any(|c| c.contains(&format!("a/c/0/0 Suffix({index_len})"))), "{calls:?}");
}

/// A scan in C order over a row of 12 small shards (array "row": 8 x 96, shards of 8 x 8):
/// once the second shard is read, the scan fetches as many shards ahead as fit in its
/// read-ahead budget (every one of these, at most 16), each whole in one GET, so a reader
/// walking a row of shards one chunk at a time does not wait a round trip every few shards;
/// 4 at a time, so the shard the reader waits for keeps most of the bandwidth. What was
/// fetched ahead is not served past the TTL once the shard changed.
/// A single chunk read fetches nothing ahead.
#[tokio::test(start_paused = true)]
async fn a_scan_of_small_shards_fetches_the_rest_of_the_row_ahead() {
    let b = backend();
    let doc = common::zfs::SHARDED_ARRAY.replace(r#""shape":[16,16]"#, r#""shape":[8,96]"#);
    b.memory.put("row/zarr.json", Bytes::from(doc)).await.unwrap();
    let parts: Vec<(u64, Vec<u8>)> = (0..16).map(|l| (l, chunk(l / 4, l % 4, "v1"))).collect();
    let parts: Vec<(u64, &[u8])> = parts.iter().map(|(l, c)| (*l, c.as_slice())).collect();
    let shard =
        zarr_mount::zarr::sharding::build::build_shard(&sharded_layout(), &parts).unwrap().unwrap();
    let keys: Vec<String> = (0..12).map(|x| format!("row/c/0/{x}")).collect();
    for k in &keys {
        b.memory.put(k, Bytes::from(shard.clone())).await.unwrap();
    }
    let cfg =
        CacheConfig { capacity: 1 << 20, object_limit: 1 << 20, ttl: Duration::from_secs(60) };
    let fs = unsharded_fs(CachingStore::new(b.store(), cfg));
    read_file(&fs, "row/zarr.json").await.unwrap();

    // Chunk (0, 0): shard 0 alone. On the paused clock this returns once every task waits.
    read_file(&fs, "row/c/0/0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fetched_of(&b, &keys), keys[..1], "{:?}", b.recording.calls());
    // Chunk (0, 4), in shard 1: the scan reads ahead to the end of the row, 4 shards in
    // flight at a time beside the one read (100 ms each), in order.
    b.plan.delay(&[Op::Read], Duration::from_millis(100));
    let fs = Arc::new(fs);
    let reader = tokio::spawn({
        let fs = fs.clone();
        async move { read_file(&fs, "row/c/0/4").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(fetched_of(&b, &keys), keys[..6], "{:?}", b.recording.calls());
    reader.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(fetched_of(&b, &keys), keys, "{:?}", b.recording.calls());
    b.plan.clear();
    // Reading every chunk of the row then costs no request: one GET per shard in all.
    b.recording.take();
    for x in 0..48u64 {
        let got = read_file(&fs, &format!("row/c/0/{x}")).await.unwrap();
        assert_eq!(got, chunk(0, x % 4, "v1"), "chunk (0, {x})");
    }
    assert_eq!(b.recording.calls(), Vec::<String>::new());

    // A shard fetched ahead is trusted for the TTL only: rewritten at the store, it is read
    // new once the TTL has passed.
    let parts: Vec<(u64, Vec<u8>)> = (0..16).map(|l| (l, chunk(l / 4, l % 4, "v2"))).collect();
    let parts: Vec<(u64, &[u8])> = parts.iter().map(|(l, c)| (*l, c.as_slice())).collect();
    let shard = zarr_mount::zarr::sharding::build::build_shard(&sharded_layout(), &parts);
    b.memory.put("row/c/0/7", Bytes::from(shard.unwrap().unwrap())).await.unwrap();
    tokio::time::sleep(common::zfs::TTL + Duration::from_secs(1)).await;
    assert_eq!(read_file(&fs, "row/c/0/28").await.unwrap(), chunk(0, 0, "v2"));
}

/// A listing reads shard indexes alone, even over a whole-object cache and for shards known
/// to be small: `ls -R`, `find` or `du` of an array must not download it. Reading the listed
/// chunks then still costs one GET per shard.
#[tokio::test]
async fn listings_read_shard_indexes_alone() {
    let (b, _, fs) = small_shards_behind_a_cache().await;
    read_file(&fs, "a/c/0/0").await.unwrap(); // shard (0, 0) read whole: small shards known
    b.recording.take();
    // Row 4 of inner chunks lies in shards (1, 0) and (1, 1).
    let names = list(&fs, "a/c/4").await.unwrap();
    assert_eq!(names.len(), 8, "{names:?}");
    let index_len = sharded_layout().index_size();
    let mut calls = b.recording.take();
    calls.sort();
    assert_eq!(
        calls,
        [
            format!("get_ranged a/c/1/0 Suffix({index_len})"),
            format!("get_ranged a/c/1/1 Suffix({index_len})")
        ]
    );
    // The chunks read after the listing: their shard whole, once (the listing learnt its size).
    for x in 0..3 {
        read_file(&fs, &format!("a/c/4/{x}")).await.unwrap();
    }
    let calls = b.recording.take();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].starts_with("get_ranged a/c/1/0 Range(0.."), "{calls:?}");
}

/// The requests for `keys` the recording has seen so far (sorted, deduplicated).
fn fetched_of(b: &Backend, keys: &[String]) -> Vec<String> {
    let calls = b.recording.calls();
    let mut seen: Vec<String> = keys
        .iter()
        .filter(|k| calls.iter().any(|c| c.contains(&format!(" {k} "))))
        .cloned()
        .collect();
    seen.dedup();
    seen
}

#[tokio::test(start_paused = true)]
async fn a_scan_of_small_files_in_listing_order_fetches_the_next_ones_ahead() {
    let b = backend();
    let keys: Vec<String> = (0..20).map(|i| format!("d/{i:02}")).collect();
    for k in &keys {
        b.memory.put(k, Bytes::from(format!("content of {k}"))).await.unwrap();
    }
    let cfg =
        CacheConfig { capacity: 1 << 20, object_limit: 1 << 20, ttl: Duration::from_secs(60) };
    let fs = raw_fs(CachingStore::new(b.store(), cfg), true);
    assert_eq!(
        list(&fs, "d").await.unwrap(),
        keys.iter().map(|k| k[2..].to_string()).collect::<Vec<_>>()
    );

    // Jumping around is not a scan: nothing is fetched but what is read.
    for k in ["d/07", "d/03", "d/12"] {
        read_file(&fs, k).await.unwrap();
    }
    // On the paused clock this returns once every task waits: a scan would have started.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fetched_of(&b, &keys), ["d/03", "d/07", "d/12"]);

    // Two files in order: the next 8 are fetched before they are read.
    read_file(&fs, "d/00").await.unwrap();
    read_file(&fs, "d/01").await.unwrap();
    let ahead: Vec<String> = keys[2..10].to_vec();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ahead.iter().all(|k| fetched_of(&b, &keys).contains(k)) {
        assert!(
            std::time::Instant::now() < deadline,
            "not fetched ahead: {:?}",
            b.recording.calls()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !fetched_of(&b, &keys).contains(&"d/10".to_string()),
        "only 8 ahead: {:?}",
        b.recording.calls()
    );
    // Each file fetched ahead costs one request, and reading it none more; the scan goes on
    // one file ahead per file read.
    b.recording.take();
    for k in &keys[2..10] {
        assert_eq!(read_file(&fs, k).await.unwrap(), format!("content of {k}").as_bytes());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fetched_of(&b, &keys)
        != keys[10..18].iter().filter(|k| *k != "d/12").cloned().collect::<Vec<_>>()
    {
        assert!(std::time::Instant::now() < deadline, "{:?}", b.recording.calls());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        b.recording.calls().len(),
        7,
        "one request per file fetched ahead (d/12 was cached): {:?}",
        b.recording.calls()
    );
}

#[tokio::test]
async fn a_failed_shard_rewrite_leaves_the_old_shard_intact() {
    let (b, chunks) = sharded_backend().await;
    let fs = unsharded_fs(b.store());
    let before = b.memory.get("a/c/0/0").await.unwrap();
    read_file(&fs, "a/c/0/1").await.unwrap(); // index cached: the rewrite's get is the next read

    // 1. The shard cannot be read for the rewrite.
    b.plan.fail_next(Op::Read, 2, Fault::Backend);
    assert_eq!(errno(write_file(&fs, "a/c/1/1", b"lost").await), libc::EIO);
    assert_eq!(b.plan.injected(), 2);
    assert_eq!(b.memory.get("a/c/0/0").await.unwrap(), before);
    // 2. The new shard cannot be stored (disk full).
    b.plan.fail_matching(&[Op::Put], "a/c/0/0", Fault::NoSpace);
    assert_eq!(errno(write_file(&fs, "a/c/1/1", b"lost").await), libc::ENOSPC);
    assert_eq!(errno(write_file(&fs, "a/c/3/3", b"new chunk").await), libc::ENOSPC);
    // 3. Deleting an inner chunk also rewrites the shard: it fails the same way.
    assert_eq!(errno(remove_file(&fs, "a/c/2/2").await), libc::ENOSPC);
    assert_eq!(
        b.memory.get("a/c/0/0").await.unwrap(),
        before,
        "the shard is byte for byte the old one"
    );
    assert_eq!(stored_chunks(&*b.memory, "a/c/0/0").await.unwrap(), chunks);

    // Reads through the view still show the stored chunks; nothing half-written shows.
    b.plan.clear();
    assert_eq!(read_file(&fs, "a/c/0/1").await.unwrap(), chunks[&local_of(0, 1)]);
    assert_eq!(read_file(&fs, "a/c/2/2").await.unwrap(), chunks[&local_of(2, 2)]);
    // The failed buffers are written back at unmount, now that the store works.
    assert_eq!(fs.flush_all().await, 0);
    let mut want = chunks.clone();
    want.insert(local_of(1, 1), b"lost".to_vec());
    want.insert(local_of(3, 3), b"new chunk".to_vec());
    assert_eq!(stored_chunks(&*b.memory, "a/c/0/0").await.unwrap(), want);
}

#[tokio::test]
async fn a_failed_delete_of_an_emptied_shard_keeps_it() {
    let b = backend();
    let one: BTreeMap<u64, Vec<u8>> = [(local_of(2, 1), chunk(2, 1, "only"))].into();
    put_sharded_array(&*b.memory, "a", &one).await;
    let fs = unsharded_fs(b.store());
    b.plan.fail_matching(&[Op::Delete], "a/c/0/0", Fault::Backend);
    assert_eq!(errno(remove_file(&fs, "a/c/2/1").await), libc::EIO);
    assert_eq!(stored_chunks(&*b.memory, "a/c/0/0").await.unwrap(), one);
    assert_eq!(read_file(&fs, "a/c/2/1").await.unwrap(), one[&local_of(2, 1)]);
    b.plan.clear();
    remove_file(&fs, "a/c/2/1").await.unwrap();
    assert!(stored_chunks(&*b.memory, "a/c/0/0").await.is_none(), "the emptied shard is gone");
}

#[tokio::test]
async fn writers_batched_into_a_failing_rewrite_all_get_the_error() {
    let (b, chunks) = sharded_backend().await;
    let fs = Arc::new(unsharded_fs(b.store()));
    read_file(&fs, "a/c/0/0").await.unwrap();
    // Slow puts make the writers queue up behind the first rewrite; every rewrite fails.
    b.plan.delay(&[Op::Put], Duration::from_millis(100));
    b.plan.fail_matching(&[Op::Put], "a/c/0/0", Fault::Backend);
    let writers: Vec<_> = (0..4u64)
        .map(|x| {
            let fs = fs.clone();
            tokio::spawn(async move { write_file(&fs, &format!("a/c/1/{x}"), b"batched").await })
        })
        .collect();
    for w in writers {
        assert_eq!(errno(w.await.unwrap()), libc::EIO);
    }
    assert_eq!(stored_chunks(&*b.memory, "a/c/0/0").await.unwrap(), chunks);
    b.plan.clear();
    write_file(&fs, "a/c/0/0", b"after").await.unwrap();
    let stored = stored_chunks(&*b.memory, "a/c/0/0").await.unwrap();
    assert_eq!(stored[&local_of(0, 0)], b"after");
}

/// Like s3s-fs 0.14 (it opens the data file, then reads the ETag from a file of its own): a
/// read that overlaps a put gets the new bytes with the old version. The put swaps the bytes,
/// waits `window`, and only then publishes the new version.
struct StaleVersionStore {
    inner: Arc<MemoryStore>,
    old: std::sync::Mutex<BTreeMap<String, zarr_mount::store::ObjectMeta>>,
    window: Duration,
}

impl zarr_mount::store::layers::Layer for StaleVersionStore {
    type Below = dyn Store;
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }
}

#[async_trait::async_trait]
impl zarr_mount::store::layers::ReadLayer for StaleVersionStore {
    async fn get_ranged(
        &self,
        key: &str,
        range: zarr_mount::store::ByteRange,
    ) -> zarr_mount::store::StoreResult<Option<(Bytes, zarr_mount::store::ObjectMeta)>> {
        let got = self.inner.get_ranged(key, range).await?;
        let old = self.old.lock().unwrap().get(key).cloned();
        Ok(got.map(|(bytes, meta)| (bytes, old.unwrap_or(meta))))
    }
}

impl zarr_mount::store::layers::ListLayer for StaleVersionStore {}

#[async_trait::async_trait]
impl zarr_mount::store::layers::WriteLayer for StaleVersionStore {
    async fn put_opts(
        &self,
        key: &str,
        data: Bytes,
        mode: zarr_mount::store::PutMode,
    ) -> zarr_mount::store::StoreResult<()> {
        if let Some(meta) = self.inner.head(key).await? {
            self.old.lock().unwrap().insert(key.to_string(), meta);
        }
        let r = self.inner.put_opts(key, data, mode).await;
        tokio::time::sleep(self.window).await;
        self.old.lock().unwrap().remove(key);
        r
    }
}

impl zarr_mount::store::layers::HintsLayer for StaleVersionStore {}

/// A chunk read while this daemon rewrites its shard (moving the chunk) gets the chunk's bytes,
/// also from a server that pairs new bytes with the old version during the put: the read
/// waits for the rewrite instead of trusting that version (ShardWriter::gate).
#[tokio::test(start_paused = true)]
async fn a_chunk_read_during_its_shards_rewrite_is_exact_on_a_server_with_stale_versions() {
    let memory = Arc::new(MemoryStore::new());
    let b_chunk = b"chunk B, 16 byte".to_vec();
    let chunks =
        BTreeMap::from([(local_of(0, 0), b"aaaa".to_vec()), (local_of(0, 1), b_chunk.clone())]);
    put_sharded_array(memory.as_ref(), "a", &chunks).await;
    let store = Arc::new(StaleVersionStore {
        inner: memory.clone(),
        old: Default::default(),
        window: Duration::from_millis(300),
    });
    let fs = Arc::new(unsharded_fs(store));
    assert_eq!(read_file(&fs, "a/c/0/1").await.unwrap(), b_chunk); // index and version cached

    // Chunk A grows from 4 to 16 bytes, so chunk B moves within the rewritten shard.
    let writer = {
        let fs = fs.clone();
        tokio::spawn(async move { write_file(&fs, "a/c/0/0", b"AAAAAAAAAAAAAAAA").await })
    };
    // On the paused clock: 100 ms into the put's 300 ms window, the rewrite under way.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(read_file(&fs, "a/c/0/1").await.unwrap(), b_chunk);
    writer.await.unwrap().unwrap();
    let stored = stored_chunks(memory.as_ref(), "a/c/0/0").await.unwrap();
    assert_eq!(stored[&local_of(0, 0)], b"AAAAAAAAAAAAAAAA");
    assert_eq!(stored[&local_of(0, 1)], b_chunk);
}
