//! The disk cache's unit tests: restarts, bounds, damaged files, revalidation, confirming
//! listings, writes that overlap reads, copies and the block format.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;

use super::format::{encode_block, encode_header, read_block_into};
use super::freshness::Answer;
use super::*;
use crate::prefetch::next_directories::{next_directories, DIRS_AHEAD};
use crate::store::backends::memory::MemoryStore;
use crate::store::layers::recording::{RecordingStore, READS};
use crate::store::prelude::*;
use crate::store::{ByteRange, ListPages, Listing, ObjectMeta, Store, StoreError, StoreResult};

const BS: u64 = 1000;

fn data(n: usize, seed: u8) -> Bytes {
    Bytes::from((0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<_>>())
}

/// The cache in `dir` over `rec`, keeping blocks only (copies have tests of their own).
fn open(
    rec: &Arc<RecordingStore>,
    dir: &Path,
    max_bytes: u64,
    ttl: Duration,
) -> Arc<DiskCacheStore> {
    open_cfg(rec, dir, DiskCacheConfig { max_bytes, block_size: BS, copy_max: 0, ttl })
}

fn open_cfg(rec: &Arc<RecordingStore>, dir: &Path, cfg: DiskCacheConfig) -> Arc<DiskCacheStore> {
    let lock = Arc::new(DirLock::acquire(dir).unwrap());
    Arc::new(DiskCacheStore::open(rec.clone(), lock, cfg).unwrap())
}

/// Sizes of every file under `dir/blocks` and `dir/tmp`. Background block writes run
/// meanwhile: a file renamed out of `tmp/` or evicted between the listing and its stat
/// counts as gone (blocks are walked before tmp, so a moving file is never counted twice).
fn bytes_on_disk(dir: &Path) -> u64 {
    fn walk(p: &Path) -> u64 {
        std::fs::read_dir(p)
            .map(|rd| {
                rd.flatten()
                    .map(|e| {
                        let Ok(md) = e.metadata() else { return 0 };
                        if md.is_dir() {
                            walk(&e.path())
                        } else {
                            md.len()
                        }
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(&dir.join("blocks")) + walk(&dir.join("copies")) + walk(&dir.join("tmp"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_blocks_survive_a_restart_and_cost_no_request() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let obj = data(5500, 1);
    rec.put("a/big", obj.clone()).await.unwrap();
    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    store.list("a").await.unwrap();
    assert_eq!(store.get_range("a/big", 1500..2500).await.unwrap(), obj.slice(1500..2500));
    c.settle().await;
    assert_eq!(c.block_count(), 2, "blocks 1 and 2 kept");
    rec.take();
    assert_eq!(store.get_range("a/big", 1200..2999).await.unwrap(), obj.slice(1200..2999));
    assert!(rec.take().is_empty(), "served from disk without any request");
    // A read across cached and missing blocks fetches only the missing run.
    let (_, meta) = store.get_ranged("a/big", ByteRange::Range(0..5500)).await.unwrap().unwrap();
    assert_eq!(meta.size, 5500);
    assert_eq!(
        rec.take(),
        vec!["get_ranged a/big Range(0..1000)", "get_ranged a/big Range(3000..5500)"]
    );
    c.settle().await;
    assert_eq!(c.block_count(), 6);
    drop(store);
    drop(c);

    // A new daemon on the same directory: after the lookup, reads are local.
    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    assert_eq!(c.block_count(), 6);
    let store = DiskCache(c.clone());
    store.lookup("a/big").await.unwrap();
    rec.take();
    assert_eq!(store.get("a/big").await.unwrap(), obj);
    assert_eq!(
        store.get_ranged("a/big", ByteRange::Suffix(700)).await.unwrap().unwrap().0,
        obj.slice(4800..)
    );
    assert_eq!(rec.take(), Vec::<String>::new());
    assert_eq!(c.stats.corrupt.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_object_is_never_served_from_old_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let (one, two) = (data(2500, 1), data(2500, 2));
    rec.put("k", one.clone()).await.unwrap();
    // TTL 0: every read confirms the version (a conditional GET, a HEAD here).
    let c = open(&rec, tmp.path(), 1 << 20, Duration::ZERO);
    let store = DiskCache(c.clone());
    assert_eq!(store.get("k").await.unwrap(), one);
    c.settle().await;
    rec.take();
    let before = rec.bytes_read();
    assert_eq!(store.get("k").await.unwrap(), one);
    let whole = format!("get_if_changed k {:?}", ByteRange::Range(0..u64::MAX));
    assert_eq!(rec.take(), vec![whole], "a revalidation, then the blocks from disk");
    assert_eq!(rec.bytes_read(), before, "no object bytes");
    assert_eq!(c.stats.unchanged.load(Ordering::Relaxed), 1);
    rec.put("k", two.clone()).await.unwrap(); // behind the cache's back
    rec.take();
    assert_eq!(store.get("k").await.unwrap(), two);
    assert_eq!(rec.count(&READS), 1, "the new version is fetched");
    assert_eq!(c.stats.changed.load(Ordering::Relaxed), 1);
    assert_eq!(store.get_range("k", 100..200).await.unwrap(), two.slice(100..200));
    c.settle().await;
    assert_eq!(c.block_count(), 3, "the old version's blocks are dropped");
    rec.delete("k").await.unwrap();
    assert!(matches!(store.get("k").await, Err(StoreError::NotFound(_))));
    assert_eq!(c.block_count(), 0, "a deleted object's blocks are dropped");
    rec.put("k", two.clone()).await.unwrap();

    // With a TTL, fresh metadata seen by a lookup or listing decides.
    let tmp2 = tempfile::tempdir().unwrap();
    let c = open(&rec, tmp2.path(), 1 << 20, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    store.lookup("k").await.unwrap();
    assert_eq!(store.get("k").await.unwrap(), two);
    c.settle().await;
    rec.put("k", one.clone()).await.unwrap();
    store.list("").await.unwrap();
    assert_eq!(store.get("k").await.unwrap(), one, "the listing showed a new version");
    // Writes through the layer forget what was known.
    store.put("k", two.clone()).await.unwrap();
    assert_eq!(store.get("k").await.unwrap(), two);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_stays_within_its_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let obj = data(20_000, 3);
    rec.put("big", obj.clone()).await.unwrap();
    let block_file = encode_block("big", "m1", 20_000, 0, &obj[..1000]).len() as u64;
    let max = 4 * block_file + block_file / 2;
    let c = open(&rec, tmp.path(), max, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    store.lookup("big").await.unwrap();
    for i in 0..20u64 {
        let r = i * 1000 + 10..i * 1000 + 990;
        assert_eq!(
            store.get_range("big", r.clone()).await.unwrap(),
            obj.slice(r.start as usize..r.end as usize)
        );
        assert!(
            bytes_on_disk(tmp.path()) <= max + block_file,
            "{} > {max}",
            bytes_on_disk(tmp.path())
        );
    }
    c.settle().await;
    assert!(bytes_on_disk(tmp.path()) <= max);
    assert_eq!(c.block_count(), 4);
    assert_eq!(c.used_bytes(), bytes_on_disk(tmp.path()));
    // The last four blocks are the ones kept (least recently used went first).
    rec.take();
    assert_eq!(store.get_range("big", 16_000..20_000).await.unwrap(), obj.slice(16_000..));
    assert!(rec.take().is_empty());
    // A restart with a smaller bound shrinks the directory at once, oldest first.
    drop(store);
    drop(c);
    let c = open(&rec, tmp.path(), 2 * block_file, Duration::from_secs(60));
    assert_eq!(c.block_count(), 2);
    assert!(bytes_on_disk(tmp.path()) <= 2 * block_file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_block_is_dropped_and_fetched_again() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let obj = data(3000, 4);
    rec.put("k", obj.clone()).await.unwrap();
    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    store.lookup("k").await.unwrap();
    store.get("k").await.unwrap();
    c.settle().await;
    // Damage every block file a different way: a flipped byte, a truncation, a stray file.
    let files = files_under(&tmp.path().join("blocks"));
    assert_eq!(files.len(), 3);
    let mut raw = std::fs::read(&files[0]).unwrap();
    let n = raw.len();
    raw[n - 100] ^= 0x40;
    std::fs::write(&files[0], raw).unwrap();
    let raw = std::fs::read(&files[1]).unwrap();
    std::fs::write(&files[1], &raw[..raw.len() / 2]).unwrap();
    std::fs::write(&files[2], b"").unwrap();
    rec.take();
    assert_eq!(store.get("k").await.unwrap(), obj);
    assert_eq!(c.stats.corrupt.load(Ordering::Relaxed), 3);
    assert_eq!(rec.count(&READS), 1);
    c.settle().await;
    rec.take();
    assert_eq!(store.get("k").await.unwrap(), obj);
    assert!(rec.take().is_empty(), "the fetched blocks were written again");
    // A warm read of the whole object (all blocks read into one buffer) with one bad block
    // in the middle: that block alone is fetched again, the bytes are exact.
    let mut raw = std::fs::read(&files[1]).unwrap();
    raw[40] ^= 0x01;
    std::fs::write(&files[1], raw).unwrap();
    assert_eq!(store.get("k").await.unwrap(), obj);
    assert_eq!(c.stats.corrupt.load(Ordering::Relaxed), 4);
    let reads = rec.take();
    assert_eq!(reads.len(), 1, "{reads:?}");
    assert!(reads[0].contains("1000..2000"), "only the bad block: {reads:?}");
}

/// Objects read without a lookup or listing (the shards behind the unsharded view) are
/// served by the next daemon from its blocks without a request, within the TTL; a write
/// through the mount takes that back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_learned_by_reads_survive_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let (shard, doc) = (data(4500, 6), data(300, 7));
    rec.put("a/shard", shard.clone()).await.unwrap();
    rec.put("a/zarr.json", doc.clone()).await.unwrap();
    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    // A suffix read (a shard index) of an unknown version, then ranges of it.
    let (tail, _) = store.get_ranged("a/shard", ByteRange::Suffix(200)).await.unwrap().unwrap();
    assert_eq!(tail, shard.slice(4300..));
    assert_eq!(store.get_range("a/shard", 100..4500).await.unwrap(), shard.slice(100..));
    assert_eq!(store.get("a/zarr.json").await.unwrap(), doc);
    drop(store);
    drop(c);
    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    rec.take();
    assert_eq!(store.get("a/zarr.json").await.unwrap(), doc);
    assert_eq!(store.get_range("a/shard", 0..4500).await.unwrap(), shard);
    let (tail, _) = store.get_ranged("a/shard", ByteRange::Suffix(200)).await.unwrap().unwrap();
    assert_eq!(tail, shard.slice(4300..));
    assert_eq!(rec.take(), Vec::<String>::new(), "served from disk without any request");
    // A write through the mount: the next daemon asks the store again.
    store.put("a/zarr.json", data(300, 8)).await.unwrap();
    drop(store);
    drop(c);
    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    rec.take();
    assert_eq!(store.get("a/zarr.json").await.unwrap(), data(300, 8));
    assert_eq!(rec.count(&READS), 1, "the written object is fetched");
    // With a TTL of zero nothing recorded is trusted: a HEAD confirms the version.
    drop(store);
    drop(c);
    let c = open(&rec, tmp.path(), 1 << 20, Duration::ZERO);
    let store = DiskCache(c.clone());
    rec.take();
    assert_eq!(store.get_range("a/shard", 0..4500).await.unwrap(), shard);
    assert!(!rec.take().is_empty(), "past the TTL the store is asked");
}

/// A daemon started past the TTL confirms what its cache holds instead of fetching it: no
/// object bytes (a directory of several cached objects: one listing page, see
/// `stale_objects_of_a_directory_are_confirmed_by_one_listing`); a changed object is
/// fetched again, a deleted one is gone; a listing the mount makes confirms every cached
/// object in it at once.
#[tokio::test(start_paused = true)]
async fn past_the_ttl_cached_objects_are_revalidated_not_fetched() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let (shard, doc, gone) = (data(4500, 1), data(300, 2), data(2000, 3));
    rec.put("a/shard", shard.clone()).await.unwrap();
    rec.put("a/doc", doc.clone()).await.unwrap();
    rec.put("a/gone", gone.clone()).await.unwrap();
    let ttl = Duration::from_secs(60);
    let c = open(&rec, tmp.path(), 1 << 20, ttl);
    let store = DiskCache(c.clone());
    for (k, v) in [("a/shard", &shard), ("a/doc", &doc), ("a/gone", &gone)] {
        assert_eq!(store.get(k).await.unwrap(), v);
    }
    c.settle().await;
    drop(store);
    drop(c);
    tokio::time::advance(ttl + Duration::from_secs(1)).await;

    let c = open(&rec, tmp.path(), 1 << 20, ttl);
    let store = DiskCache(c.clone());
    let doc2 = data(300, 9);
    rec.put("a/doc", doc2.clone()).await.unwrap(); // behind the cache's back
    rec.delete("a/gone").await.unwrap();
    rec.take();
    let before = rec.bytes_read();
    assert_eq!(store.get("a/shard").await.unwrap(), shard);
    assert_eq!(rec.take(), vec![r#"list a after "do""#]);
    assert_eq!(rec.bytes_read(), before, "an unchanged object costs no object bytes");
    assert_eq!(store.get_range("a/shard", 100..200).await.unwrap(), shard.slice(100..200));
    assert!(rec.take().is_empty(), "confirmed for the TTL");
    assert_eq!(store.get("a/doc").await.unwrap(), doc2, "a changed object is read new");
    assert_eq!(rec.bytes_read(), before + 300);
    assert!(matches!(store.get("a/gone").await, Err(StoreError::NotFound(_))));
    assert_eq!(c.stats.unchanged.load(Ordering::Relaxed), 1);
    assert_eq!(c.stats.changed.load(Ordering::Relaxed), 2);

    // Past the TTL again: one listing confirms every cached object of the prefix.
    c.settle().await;
    tokio::time::advance(ttl + Duration::from_secs(1)).await;
    rec.take();
    store.list("a").await.unwrap();
    assert_eq!(store.get("a/shard").await.unwrap(), shard);
    assert_eq!(store.get("a/doc").await.unwrap(), doc2);
    assert_eq!(rec.take(), vec!["list a"], "no request per object");
    assert_eq!(c.stats.unchanged.load(Ordering::Relaxed), 3);
}

/// A listing of the store below, changed as a server may change it: answered late (so
/// that concurrent reads pile up behind it), without some names (a page that does not
/// reach them), or without version tags (s3s-fs).
struct ListingDouble {
    inner: Arc<dyn Store>,
    hidden: Vec<&'static str>,
    untagged: bool,
}

crate::store::layers::layer_over!(ListingDouble);

impl crate::store::layers::ReadLayer for ListingDouble {}

impl crate::store::layers::WriteLayer for ListingDouble {}

impl crate::store::layers::HintsLayer for ListingDouble {}

#[async_trait]
impl crate::store::layers::ListLayer for ListingDouble {
    fn list_pages_after<'a>(&'a self, prefix: &'a str, after: &'a str) -> ListPages<'a> {
        use futures::StreamExt;
        let pages = self.inner.list_pages_after(prefix, after).then(move |page| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let mut page = page?;
            page.files.retain(|(name, _)| !self.hidden.contains(&name.as_str()));
            for (_, m) in page.files.iter_mut().filter(|_| self.untagged) {
                let ms = m.modified.duration_since(UNIX_EPOCH).unwrap().as_millis();
                m.version = format!("{ms}-{}", m.size);
            }
            Ok(page)
        });
        Box::pin(pages)
    }
}

/// The TTL of `open_listed`'s caches.
const LISTED_TTL: Duration = Duration::from_secs(60);

/// The cache in `dir` over a `ListingDouble` of `rec`, keeping blocks only, with the mount's
/// policy of directories ahead (`prefetch::next_directories`).
fn open_listed(
    rec: &Arc<RecordingStore>,
    dir: &Path,
    hidden: Vec<&'static str>,
    untagged: bool,
) -> Arc<DiskCacheStore> {
    let lock = Arc::new(DirLock::acquire(dir).unwrap());
    let double = ListingDouble { inner: rec.clone(), hidden, untagged };
    let cfg = DiskCacheConfig { max_bytes: 1 << 20, block_size: BS, copy_max: 0, ttl: LISTED_TTL };
    let cache = DiskCacheStore::open(Arc::new(double), lock, cfg).unwrap();
    Arc::new(cache.with_next_dirs(next_directories))
}

/// A cache of `n` objects `a/c/0/<i>` (and a document `a/zarr.json`) filled by one daemon,
/// and a second daemon on it past the TTL, over a `ListingDouble` of the store.
async fn stale_directory(
    dir: &Path,
    n: u8,
    hidden: Vec<&'static str>,
    untagged: bool,
) -> (Arc<RecordingStore>, Arc<DiskCacheStore>) {
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let ttl = LISTED_TTL;
    let open = |rec: &Arc<RecordingStore>| open_listed(rec, dir, hidden.clone(), untagged);
    rec.put("a/zarr.json", data(100, 0)).await.unwrap();
    for i in 0..n {
        rec.put(&format!("a/c/0/{i}"), data(2500, i)).await.unwrap();
    }
    let c = open(&rec);
    let store = DiskCache(c.clone());
    store.get("a/zarr.json").await.unwrap();
    for i in 0..n {
        store.get(&format!("a/c/0/{i}")).await.unwrap();
    }
    c.settle().await;
    drop(store);
    drop(c);
    tokio::time::advance(ttl + Duration::from_secs(1)).await;
    (rec.clone(), open(&rec))
}

fn shown(rec: &RecordingStore) -> Vec<String> {
    let mut calls = rec.take();
    calls.sort();
    calls
}

/// Past the TTL, the concurrent reads of a directory's cached objects (a reader opening
/// chunk files by name, no listing of its own) are confirmed by one listing page, not a
/// conditional GET each: a changed object is fetched again and read new, a deleted one
/// (not in the page) is asked alone and not found.
#[tokio::test(start_paused = true)]
async fn stale_objects_of_a_directory_are_confirmed_by_one_listing() {
    let tmp = tempfile::tempdir().unwrap();
    let (rec, c) = stale_directory(tmp.path(), 8, vec![], false).await;
    let store = DiskCache(c.clone());
    rec.put("a/c/0/3", data(2500, 103)).await.unwrap(); // behind the cache's back
    rec.delete("a/c/0/5").await.unwrap();
    rec.take();
    let before = rec.bytes_read();
    let store = &store;
    let reads = (0..8u8).map(|i| async move { (i, store.get(&format!("a/c/0/{i}")).await) });
    for (i, got) in futures::future::join_all(reads).await {
        match i {
            3 => assert_eq!(got.unwrap(), data(2500, 103), "the changed object, read new"),
            5 => assert!(matches!(got, Err(StoreError::NotFound(_))), "{got:?}"),
            _ => assert_eq!(got.unwrap(), data(2500, i)),
        }
    }
    let whole = ByteRange::Range(0..u64::MAX);
    let want = vec![
        format!("get_if_changed a/c/0/5 {whole:?}"),
        format!("get_ranged a/c/0/3 {whole:?}"),
        r#"list a/c/0 after """#.to_string(),
    ];
    assert_eq!(shown(&rec), want, "one listing for the directory");
    assert_eq!(rec.bytes_read(), before + 2500, "only the changed object's bytes");
    assert_eq!(c.stats.unchanged.load(Ordering::Relaxed), 6);
    assert_eq!(c.stats.changed.load(Ordering::Relaxed), 2);
    // Confirmed for the TTL; the document, alone in its directory, has its own request.
    assert_eq!(store.get("a/c/0/0").await.unwrap(), data(2500, 0));
    assert_eq!(store.get("a/zarr.json").await.unwrap(), data(100, 0));
    assert_eq!(shown(&rec), [format!("get_if_changed a/zarr.json {whole:?}")]);
}

/// Confirming one directory also confirms the directories after it that hold stale
/// cached objects, beside it (a reader walking `c/0/`, `c/1/`, ... then waits for none of
/// their listings), at most `DIRS_AHEAD` of them; the directory before it is not listed, and
/// those confirmed ahead go no further ahead themselves.
#[tokio::test(start_paused = true)]
async fn a_directory_confirmed_confirms_the_ones_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let open = || open_listed(&rec, tmp.path(), vec![], false);
    let dirs = DIRS_AHEAD as u8 + 3;
    let keys: Vec<String> =
        (0..dirs).flat_map(|d| (0..2).map(move |i| format!("a/c/{d}/{i}"))).collect();
    for (n, k) in keys.iter().enumerate() {
        rec.put(k, data(1500, n as u8)).await.unwrap();
    }
    let c = open();
    for k in &keys {
        DiskCache(c.clone()).get(k).await.unwrap();
    }
    c.settle().await;
    drop(c);
    tokio::time::advance(LISTED_TTL + Duration::from_secs(1)).await;

    let c = open();
    let store = DiskCache(c.clone());
    rec.take();
    assert_eq!(store.get("a/c/1/0").await.unwrap(), data(1500, 2));
    tokio::time::sleep(Duration::from_millis(10)).await; // the listings ahead, in the background
    let listed = |calls: Vec<String>| -> Vec<String> {
        calls.into_iter().filter(|c| c.starts_with("list ")).collect()
    };
    let mut want: Vec<String> =
        (1..=1 + DIRS_AHEAD).map(|d| format!(r#"list a/c/{d} after """#)).collect();
    want.sort();
    assert_eq!(shown(&rec), want, "its own listing and the {DIRS_AHEAD} after it, nothing else");
    // Reading those directories costs nothing more; the ones before and past the reach
    // have their own listing when read.
    for d in 1..=1 + DIRS_AHEAD {
        for i in 0..2 {
            store.get(&format!("a/c/{d}/{i}")).await.unwrap();
        }
    }
    assert!(rec.take().is_empty(), "confirmed ahead");
    store.get("a/c/0/0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(listed(rec.take()), [r#"list a/c/0 after """#], "nothing stale after it");
}

/// A confirming listing that overlapped a write of one of its keys through the cache does
/// not confirm that key: its entry may name the version before the write, whose blocks
/// would then be served as the current ones.
#[tokio::test(start_paused = true)]
async fn a_listing_that_overlapped_a_write_does_not_confirm_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let (rec, c) = stale_directory(tmp.path(), 4, vec![], false).await;
    let store = Arc::new(DiskCache(c.clone()));
    let s = store.clone();
    let reading = tokio::spawn(async move { s.get("a/c/0/0").await });
    // The listing has read the store and is on its way back (the double holds it 20 ms).
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(rec.count(&["list"]), 1);
    store.put("a/c/0/1", data(2500, 201)).await.unwrap();
    assert_eq!(reading.await.unwrap().unwrap(), data(2500, 0));
    let back = store.get("a/c/0/1").await.unwrap();
    assert!(back == data(2500, 201), "the write reads back as the version before it");
}

/// What a listing page cannot confirm is revalidated object by object: a name the page
/// does not reach has its conditional GET; a store whose listings carry no version tag
/// (s3s-fs) confirms nothing by them, and is not asked for another.
#[tokio::test(start_paused = true)]
async fn what_a_listing_cannot_confirm_has_its_own_revalidation() {
    let whole = ByteRange::Range(0..u64::MAX);
    let tmp = tempfile::tempdir().unwrap();
    let (rec, c) = stale_directory(tmp.path(), 4, vec!["2"], false).await;
    let store = DiskCache(c.clone());
    rec.take();
    let store = &store;
    let reads =
        (0..4u8).map(|i| async move { store.get_range(&format!("a/c/0/{i}"), 0..10).await });
    for (i, got) in futures::future::join_all(reads).await.into_iter().enumerate() {
        assert_eq!(got.unwrap(), data(2500, i as u8).slice(0..10));
    }
    let want = [
        format!("get_if_changed a/c/0/2 {:?}", ByteRange::Range(0..BS)),
        r#"list a/c/0 after """#.into(),
    ];
    assert_eq!(shown(&rec), want);

    let tmp = tempfile::tempdir().unwrap();
    let (rec, c) = stale_directory(tmp.path(), 4, vec![], true).await;
    let store = DiskCache(c.clone());
    rec.take();
    let store = &store;
    let reads = (0..4u8).map(|i| async move { store.get(&format!("a/c/0/{i}")).await });
    for (i, got) in futures::future::join_all(reads).await.into_iter().enumerate() {
        assert_eq!(got.unwrap(), data(2500, i as u8));
    }
    let mut want: Vec<String> =
        (0..4).map(|i| format!("get_if_changed a/c/0/{i} {whole:?}")).collect();
    want.push(r#"list a/c/0 after """#.into());
    assert_eq!(shown(&rec), want, "the untagged listing confirmed nothing");
    assert_eq!(c.stats.unchanged.load(Ordering::Relaxed), 4);
    // Past the TTL again: no listing this time.
    tokio::time::advance(Duration::from_secs(61)).await;
    for i in 0..4u8 {
        assert_eq!(store.get(&format!("a/c/0/{i}")).await.unwrap(), data(2500, i));
    }
    assert_eq!(rec.count(&["list"]), 0);
    assert_eq!(rec.count(&READS), 4);
}

/// `--immutable`: what the cache learned is trusted for ever, so a restart long after
/// serves it with no request at all.
#[tokio::test(start_paused = true)]
async fn an_immutable_cache_sends_no_request_after_any_time() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let obj = data(4500, 4);
    rec.put("a/x", obj.clone()).await.unwrap();
    let c = open(&rec, tmp.path(), 1 << 20, IMMUTABLE_TRUST);
    let store = DiskCache(c.clone());
    store.list("a").await.unwrap();
    assert_eq!(store.get("a/x").await.unwrap(), obj);
    c.settle().await;
    drop(store);
    drop(c);
    tokio::time::advance(Duration::from_secs(365 * 24 * 3600)).await;
    let c = open(&rec, tmp.path(), 1 << 20, IMMUTABLE_TRUST);
    let store = DiskCache(c.clone());
    rec.take();
    assert_eq!(store.list("a").await.unwrap().files.len(), 1);
    assert!(store.lookup("a/x").await.unwrap().file.is_some());
    assert_eq!(store.get("a/x").await.unwrap(), obj);
    assert!(rec.take().is_empty(), "no request");
}

/// Concurrent reads of one object not yet known (the parts of a large read-ahead) and
/// HEADs of it journal its version once, not once per read.
#[tokio::test]
async fn repeated_reads_of_one_object_journal_one_record() {
    let tmp = tempfile::tempdir().unwrap();
    let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rec = Arc::new(RecordingStore::with_read_delay(mem, Duration::from_millis(30)));
    let obj = data(8 * BS as usize, 3);
    rec.put("a/big", obj.clone()).await.unwrap();
    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    let parts = (0..8u64).map(|i| store.get_range("a/big", i * BS..(i + 1) * BS));
    let got = futures::future::join_all(parts).await;
    assert!(rec.count(&READS) > 1, "the parts were fetched concurrently");
    for (i, g) in got.into_iter().enumerate() {
        assert_eq!(g.unwrap(), obj.slice(i * BS as usize..(i + 1) * BS as usize));
    }
    for _ in 0..3 {
        assert!(store.head("a/big").await.unwrap().is_some());
    }
    assert_eq!(super::super::disk_meta::object_records(tmp.path(), "a/big"), 1);
}

/// A HEAD (how a chunk file inside a known chunk tree is looked up) is answered from an
/// earlier daemon's lookup, listing or read within the TTL, and asks the store otherwise.
#[tokio::test]
async fn heads_are_answered_from_the_journal_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    for k in ["a/c/0/0", "a/c/0/1", "b/x"] {
        rec.put(k, data(10, 1)).await.unwrap();
    }
    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    store.lookup("a/c/0/0").await.unwrap();
    store.get("a/c/0/1").await.unwrap();
    store.list("b").await.unwrap();
    assert!(store.head("a/c/9/9").await.unwrap().is_none());
    drop(store);
    drop(c);
    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    rec.take();
    for k in ["a/c/0/0", "a/c/0/1", "b/x"] {
        assert_eq!(store.head(k).await.unwrap().unwrap().size, 10, "{k}");
    }
    assert_eq!(rec.take(), Vec::<String>::new(), "answered from the journal");
    assert!(store.head("a/c/9/9").await.unwrap().is_none());
    assert_eq!(rec.take(), ["head a/c/9/9"], "an absent object was not recorded");
}

/// Answers every read with a buffer of its own, as a network backend does (the memory
/// store hands out slices of what it holds).
struct FreshBuffers(Arc<dyn Store>);

crate::store::layers::layer_over!(FreshBuffers, 0);

#[async_trait]
impl crate::store::layers::ReadLayer for FreshBuffers {
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let got = self.0.get_ranged(key, range).await?;
        Ok(got.map(|(b, m)| (Bytes::copy_from_slice(&b), m)))
    }
}

impl crate::store::layers::ListLayer for FreshBuffers {}

impl crate::store::layers::WriteLayer for FreshBuffers {}

impl crate::store::layers::HintsLayer for FreshBuffers {}

/// The memory the cache adds stays inside the reader's own: when a cold read returns, its
/// blocks are on disk and nothing but the answer holds the fetched buffer (so the
/// read-ahead budget that paid for the fetch covers the write queue too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_returns_once_its_blocks_are_written_and_holds_nothing_back() {
    let tmp = tempfile::tempdir().unwrap();
    let mem = Arc::new(MemoryStore::new());
    let obj = data(64_000, 5);
    for key in ["seen", "unseen"] {
        mem.put(key, obj.clone()).await.unwrap();
    }
    let lock = Arc::new(DirLock::acquire(tmp.path()).unwrap());
    let cfg = DiskCacheConfig {
        max_bytes: 1 << 20,
        block_size: BS,
        copy_max: 0,
        ttl: Duration::from_secs(60),
    };
    let c = Arc::new(DiskCacheStore::open(Arc::new(FreshBuffers(mem)), lock, cfg).unwrap());
    let store = DiskCache(c.clone());
    // A known version (blocks path) and an unknown one (one widened GET), 64 blocks each.
    store.lookup("seen").await.unwrap();
    let reads = [("seen", 0..64_000, 64), ("unseen", 500..30_500, 31), ("seen", 0..64_000, 64)];
    for (key, range, blocks) in reads {
        let got = store.get_range(key, range.clone()).await.unwrap();
        assert_eq!(got, obj.slice(range.start as usize..range.end as usize));
        assert_eq!(c.backlog.load(Ordering::Acquire), 0, "{key}: blocks still queued");
        assert!(got.is_unique(), "{key}: the fetched buffer is still held elsewhere");
        assert!(c.block_count() >= blocks, "{key}: {} blocks on disk", c.block_count());
    }
    assert_eq!(c.block_count(), 64 + 31);
}

fn open_with_copies(rec: &Arc<RecordingStore>, dir: &Path, max_bytes: u64) -> Arc<DiskCacheStore> {
    let ttl = Duration::from_secs(60);
    open_cfg(rec, dir, DiskCacheConfig { max_bytes, block_size: BS, copy_max: 10_000, ttl })
}

/// The files in the subdirectories of `dir` (a cache's `blocks` or `copies`), sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|sub| std::fs::read_dir(sub.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .collect();
    files.sort();
    files
}

/// An object fetched whole is one file of exactly its bytes, named with its CRC-32C: ranges
/// are read from it, the kernel may read it directly (`local_copy`), and a damaged one is
/// never handed out or served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_objects_are_kept_as_checked_copies() {
    use std::io::Read;
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    let (shard, big) = (data(4500, 8), data(12_000, 9));
    rec.put("a/shard", shard.clone()).await.unwrap();
    rec.put("a/big", big.clone()).await.unwrap();
    let c = open_with_copies(&rec, tmp.path(), 1 << 20);
    let store = DiskCache(c.clone());
    let version = store.lookup("a/shard").await.unwrap().file.unwrap().version;
    assert!(c.local_copy("a/shard", &version).is_none(), "nothing kept yet");
    assert_eq!(store.get("a/shard").await.unwrap(), shard);
    assert_eq!(store.get("a/big").await.unwrap(), big, "above copy_max: blocks");
    c.settle().await;
    let copies = files_under(&tmp.path().join("copies"));
    assert_eq!(copies.len(), 1);
    assert_eq!(std::fs::read(&copies[0]).unwrap(), shard, "nothing but the object's bytes");
    let crc = format!("{:08x}", crc32c::crc32c(&shard));
    assert!(copies[0].to_str().unwrap().ends_with(&crc), "{copies:?}");
    assert_eq!(c.block_count(), 1 + 12, "one copy, twelve blocks");
    assert_eq!(c.used_bytes(), bytes_on_disk(tmp.path()));
    rec.take();
    assert_eq!(store.get_range("a/shard", 1000..3100).await.unwrap(), shard.slice(1000..3100));
    assert!(rec.take().is_empty(), "ranges come from the copy");
    let mut handed = Vec::new();
    c.local_copy("a/shard", &version).unwrap().read_to_end(&mut handed).unwrap();
    assert_eq!(handed, shard);
    assert!(c.local_copy("a/shard", "another version").is_none());
    assert!(c.local_copy("a/big", "").is_none());
    drop(store);
    drop(c);

    // The next daemon checks a copy whole before its first use: a damaged one is deleted
    // and the object fetched again (and kept again).
    let mut raw = std::fs::read(&copies[0]).unwrap();
    raw[4000] ^= 0x10;
    std::fs::write(&copies[0], raw).unwrap();
    let c = open_with_copies(&rec, tmp.path(), 1 << 20);
    assert_eq!(c.block_count(), 13);
    let store = DiskCache(c.clone());
    store.lookup("a/shard").await.unwrap();
    assert!(c.local_copy("a/shard", &version).is_none(), "a damaged copy is not handed out");
    assert_eq!(c.stats.corrupt.load(Ordering::Relaxed), 1);
    assert!(!copies[0].exists());
    rec.take();
    assert_eq!(store.get("a/shard").await.unwrap(), shard);
    assert_eq!(rec.count(&READS), 1);
    c.settle().await;
    let mut handed = Vec::new();
    c.local_copy("a/shard", &version).unwrap().read_to_end(&mut handed).unwrap();
    assert_eq!(handed, shard, "kept again");
    // A copy cut short after it was checked is refused by its length.
    let copies = files_under(&tmp.path().join("copies"));
    std::fs::write(&copies[0], &shard[..100]).unwrap();
    rec.take();
    assert_eq!(store.get("a/shard").await.unwrap(), shard);
    assert_eq!(c.stats.corrupt.load(Ordering::Relaxed), 2);
    assert_eq!(rec.count(&READS), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_are_evicted_within_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    for i in 0..10u8 {
        rec.put(&format!("s/{i}"), data(3000, i)).await.unwrap();
    }
    let c = open_with_copies(&rec, tmp.path(), 10_000);
    let store = DiskCache(c.clone());
    store.list("s").await.unwrap();
    for i in 0..10u8 {
        assert_eq!(store.get(&format!("s/{i}")).await.unwrap(), data(3000, i));
        c.settle().await;
        assert!(bytes_on_disk(tmp.path()) <= 10_000);
    }
    assert_eq!(c.block_count(), 3, "the three most recent copies");
    assert_eq!(files_under(&tmp.path().join("copies")).len(), 3);
    assert_eq!(c.used_bytes(), bytes_on_disk(tmp.path()));
    rec.take();
    for i in 7..10u8 {
        assert_eq!(store.get(&format!("s/{i}")).await.unwrap(), data(3000, i));
    }
    assert!(rec.take().is_empty());
}

#[test]
fn a_second_daemon_is_refused_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let first = DirLock::acquire(tmp.path()).unwrap();
    let err = DirLock::acquire(tmp.path()).unwrap_err();
    assert!(err.contains("in use by another zarr-mount"), "{err}");
    assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
    drop(first);
    DirLock::acquire(tmp.path()).unwrap();
}

/// Holds the next read (or HEAD) between taking its answer from the store and giving it,
/// until released: a response sent before a write and delivered after it. With
/// `late_tag`, the version is taken only at release, as s3s-fs 0.14 does (it opens the
/// data file, then reads the ETag from a file of its own): a read overlapping a put pairs
/// the old bytes with the new version.
struct HeldAnswer {
    inner: Arc<MemoryStore>,
    late_tag: bool,
    hold: std::sync::atomic::AtomicBool,
    taken: tokio::sync::Notify,
    release: tokio::sync::Semaphore,
}

impl HeldAnswer {
    fn new(late_tag: bool) -> Arc<Self> {
        Arc::new(HeldAnswer {
            inner: Arc::new(MemoryStore::new()),
            late_tag,
            hold: Default::default(),
            taken: Default::default(),
            release: tokio::sync::Semaphore::new(0),
        })
    }

    /// Run `request`, held until `release`; returns once it took its answer.
    async fn held<T: Send + 'static>(
        &self,
        request: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.hold.store(true, Ordering::SeqCst);
        let task = tokio::spawn(request);
        self.taken.notified().await;
        task
    }

    async fn wait_if_held(&self) -> bool {
        if !self.hold.swap(false, Ordering::SeqCst) {
            return false;
        }
        self.taken.notify_one();
        self.release.acquire().await.expect("open").forget();
        true
    }
}

crate::store::layers::layer_over!(HeldAnswer);

#[async_trait]
impl crate::store::layers::ListLayer for HeldAnswer {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        let got = self.inner.list(prefix).await?;
        self.wait_if_held().await;
        Ok(got)
    }
}

impl crate::store::layers::WriteLayer for HeldAnswer {}

impl crate::store::layers::HintsLayer for HeldAnswer {}

#[async_trait]
impl crate::store::layers::ReadLayer for HeldAnswer {
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let got = self.inner.get_ranged(key, range).await?;
        if self.wait_if_held().await && self.late_tag {
            let now = self.inner.head(key).await?;
            return Ok(got.map(|(bytes, meta)| (bytes, now.unwrap_or(meta))));
        }
        Ok(got)
    }
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        let got = self.inner.head(key).await?;
        self.wait_if_held().await;
        Ok(got)
    }
}

/// A read (or HEAD) that overlapped a write through the cache keeps nothing: the writer's
/// own read-back is its write, not the version before it that the late answer named (it
/// was trusted for the TTL), nor the old bytes under the new version (a server that tags
/// bytes separately; those were trusted for as long as the version lasted). The read
/// itself is asked again once the write is done.
#[tokio::test(start_paused = true)]
async fn an_answer_that_overlapped_a_write_is_asked_again_and_not_kept() {
    let (one, two) = (data(2500, 1), data(2500, 2));
    for (late_tag, head) in [(false, false), (false, true), (true, false)] {
        let case = format!("late tag {late_tag}, head {head}");
        let tmp = tempfile::tempdir().unwrap();
        let held = HeldAnswer::new(late_tag);
        held.inner.put("k", one.clone()).await.unwrap();
        let lock = Arc::new(DirLock::acquire(tmp.path()).unwrap());
        let ttl = Duration::from_secs(60);
        let cfg = DiskCacheConfig { max_bytes: 1 << 20, block_size: BS, copy_max: 0, ttl };
        let c = Arc::new(DiskCacheStore::open(held.clone(), lock, cfg).unwrap());
        let store = Arc::new(DiskCache(c.clone()));
        let s = store.clone();
        let answered = if head {
            assert_eq!(store.get("k").await.unwrap(), one, "{case}: blocks of version one");
            c.settle().await;
            tokio::time::advance(ttl).await; // the HEAD goes to the store
            held.held(async move { s.head("k").await.map(|_| None) }).await
        } else {
            held.held(async move { s.get("k").await.map(Some) }).await
        };
        store.put("k", two.clone()).await.unwrap();
        held.release.add_permits(1);
        let got = answered.await.unwrap().unwrap();
        if let Some(got) = got {
            // Asked again once the write was done: never the old bytes (under either tag).
            assert!(got == two, "{case}: the overlapped read answered version {}", got[0]);
        }
        c.settle().await;
        if late_tag {
            store.lookup("k").await.unwrap(); // as an open does: the new version is known
        }
        let back = store.get("k").await.unwrap();
        assert!(back == two, "{case}: the write reads back as version {}", back[0]);
    }
}

/// Whether an answer may be kept is decided when it is kept, under the lock a write's
/// forget takes (`observe`): an answer asked for before a write and kept after the write's
/// last forget is not kept (decided before the lock, it was: the version before the write
/// was then current for the TTL, and the writer's read-back opened it); one kept before
/// the write began is dropped by it. Neither reaches the next daemon.
#[tokio::test(start_paused = true)]
async fn an_answer_is_kept_only_if_no_write_began_since_it_was_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    rec.put("k", data(2500, 1)).await.unwrap();
    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    let store = DiskCache(c.clone());
    let meta_now = || async { rec.head("k").await.unwrap().unwrap() };

    let asked = c.writes.read_starts("k");
    let one = meta_now().await;
    store.put("k", data(2500, 2)).await.unwrap();
    assert!(!c.observe("k", Some(&one), Answer::CONFIRMED, &asked), "kept after the write");
    assert_eq!(c.fresh_meta("k"), None);

    let asked = c.writes.read_starts("k");
    let two = meta_now().await;
    assert!(c.observe("k", Some(&two), Answer::CONFIRMED, &asked));
    assert_eq!(c.fresh_meta("k"), Some(two));
    store.put("k", data(2500, 3)).await.unwrap();
    assert_eq!(c.fresh_meta("k"), None, "the write forgets what was kept before it");
    drop(store);
    drop(c);

    let c = open(&rec, tmp.path(), 1 << 20, Duration::from_secs(60));
    let three = meta_now().await;
    rec.take();
    assert_eq!(DiskCache(c).head("k").await.unwrap().unwrap(), three);
    assert_eq!(rec.take(), vec!["head k"], "the next daemon asks; nothing older replayed");
}

/// A listing sent before a write through the cache and answered after it is not kept in
/// the journal: replayed by the next daemon within the TTL, it would answer the written
/// key's lookup with the version before the write.
#[tokio::test(start_paused = true)]
async fn a_listing_that_overlapped_a_write_is_not_replayed() {
    let tmp = tempfile::tempdir().unwrap();
    let held = HeldAnswer::new(false);
    held.inner.put("d/k", data(2500, 1)).await.unwrap();
    let ttl = Duration::from_secs(60);
    let cfg = DiskCacheConfig { max_bytes: 1 << 20, block_size: BS, copy_max: 0, ttl };
    let open = || {
        let lock = Arc::new(DirLock::acquire(tmp.path()).unwrap());
        Arc::new(DiskCacheStore::open(held.clone(), lock, cfg.clone()).unwrap())
    };
    let c = open();
    let store = Arc::new(DiskCache(c.clone()));
    let s = store.clone();
    let listing = held.held(async move { s.list("d").await }).await;
    store.put("d/k", data(3000, 2)).await.unwrap();
    held.release.add_permits(1);
    listing.await.unwrap().unwrap();
    c.settle().await;
    drop((store, c));
    let next = DiskCache(open());
    let found = next.lookup("d/k").await.unwrap().file.expect("the written object");
    assert_eq!(found.size, 3000, "the listing from before the write was replayed");
}

#[test]
fn block_files_check_everything() {
    let f = encode_block("k", "v1", 5000, 2, b"abc");
    let read = |f: &[u8], key, version, size, index, len: usize| {
        let mut out = vec![0u8; len];
        let before = encode_header(key, version, size, index, len);
        read_block_into(f, f.len() as u64, &before, &mut out).then_some(out)
    };
    assert_eq!(read(&f, "k", "v1", 5000, 2, 3).unwrap(), b"abc");
    assert!(read(&f, "k", "v2", 5000, 2, 3).is_none());
    assert!(read(&f, "j", "v1", 5000, 2, 3).is_none());
    assert!(read(&f, "k", "v1", 5001, 2, 3).is_none());
    assert!(read(&f, "k", "v1", 5000, 1, 3).is_none());
    assert!(read(&f, "k", "v1", 5000, 2, 4).is_none());
    for cut in 0..f.len() {
        assert!(read(&f[..cut], "k", "v1", 5000, 2, 3).is_none());
    }
    let mut longer = f.clone();
    longer.push(0);
    assert!(read(&longer, "k", "v1", 5000, 2, 3).is_none());
    for at in 0..f.len() {
        let mut flipped = f.clone();
        flipped[at] ^= 1;
        assert!(read(&flipped, "k", "v1", 5000, 2, 3).is_none(), "a flipped bit at {at}");
    }
    assert_eq!(parse_block_name(&format!("{}.7", "ab".repeat(16))).unwrap().index, 7);
    assert!(parse_block_name("tmp.7").is_none());
}
