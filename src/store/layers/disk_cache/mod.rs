//! A persistent cache of remote object bytes on local disk (`--cache-dir`), below the memory
//! cache and above an object-store backend.
//!
//! Objects are cached in fixed-size blocks (block `i` of an object holds bytes
//! `i * BLOCK .. (i + 1) * BLOCK`), so ranges and whole objects alike are kept, sparse. A block
//! is one file named by a hash of (store, key, version, size): a changed object (new ETag) never
//! maps onto the old blocks. Each file carries its key, version and index in a header and a
//! CRC-32C of everything; a file that fails any check is deleted and the block fetched again.
//! Files are written to `tmp/` and renamed into place (no fsync: a crash can lose a block, never
//! serve a torn one, and the checksum catches what a power loss leaves behind).
//!
//! Freshness: reads need the object's version without asking the network. It comes from the
//! metadata that passes through this layer (listings, lookups, HEADs, ranged GETs), trusted for
//! the metadata TTL. So once the mount has looked a file up (which it does before any open),
//! reading cached blocks of it costs no request at all. An answer that overlapped a write of
//! its key through this layer is passed on but keeps nothing, neither its version nor its
//! bytes (`write_watch.rs`): it may be of the version before the write. Listings and lookups
//! are kept too (disk_meta.rs), so that a restarted daemon has those versions, and its
//! listings, for the rest of the TTL without asking the store.
//!
//! Revalidation: past the TTL a known version whose bytes are on disk is confirmed, not fetched
//! again. A listing or lookup the mount makes anyway confirms it (a listing, every object in it
//! at once). A read of an object whose directory holds other stale cached objects sends one
//! listing page of that directory for all of them (`confirm_directory`: a reader opening chunks
//! by name makes no listing, and a conditional GET each would be a round trip each), and
//! the listings of the directories after it beside it (`confirm_next_directories`: the reader
//! walks on to them); what the page did not confirm, and an object alone in its directory, has one conditional GET
//! (`ReadStore::get_if_changed`): unchanged, the blocks are served; changed, the answer carries
//! the new bytes; deleted, the read finds nothing. Any
//! answer naming another version drops the old version's files (`drop_version`). The journal
//! keeps versions past the TTL for this (never served as answers). `--immutable` sets the
//! TTL to a century (`IMMUTABLE_TRUST`): nothing is ever revalidated.
//!
//! Bounds: the files are indexed in memory in LRU order (rebuilt from file times at start;
//! a hit refreshes the file's mtime). Space is reserved before a block is written and the least
//! recently used blocks are deleted first, so the directory stays within `max_bytes` (plus the
//! lock file and directory entries). Writes run on one writer thread (no copy of the data, no
//! fsync: see above), and are skipped, never queued, when more than `WRITE_BACKLOG` bytes are
//! already waiting to be written.
//!
//! Memory: a read that fetched blocks returns only once the writer has them on disk. The
//! fetched buffer is then never held by the write queue after its reader let go of it, so the
//! memory the cache adds is inside what the reader already accounts for (the read-ahead's
//! budget pays for a part until its fetch, write included, is done). Peak memory with the cache
//! is that of the same reads without it; the price is the write's time on a cold read (disk
//! is much faster than the network it saves, and read-ahead parts wait in the background).
//!
//! Whole objects: an object fetched whole (a shard or document looked up or read whole) and no
//! larger than `copy_max` is kept as one file of exactly its bytes, a *copy*, instead of blocks:
//! `copies/XX/<object>.<crc32c>`. Its checksum is in its name, since the file must hold nothing
//! but the object: the kernel reads a copy directly when the mount opens the file in FUSE
//! passthrough mode (`local_copy`). A copy is checked whole the first time this daemon uses it
//! (a crash or power loss can only have damaged it before that), then trusted.
//!
//! One daemon per cache directory: an exclusive `flock` on `DIR/lock`, taken when the command
//! line is checked; a second daemon on the same directory is refused with a usage error.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::num::NonZeroUsize;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use lru::LruCache;

use super::disk_meta::{one_version, to_keep, MetaJournal};
use super::known_objects::KnownObjects;
use super::listing_flights::ListingFlights;
use super::write_watch::{ReadStart, WriteWatch};
use crate::metrics::Revalidation;
use crate::store::{
    ByteRange, ListPages, Listing, Lookup, ObjectMeta, PutMode, Revalidated, Store, StoreError,
    StoreResult,
};

/// Bytes per block.
pub const BLOCK_SIZE: u64 = 1 << 20;
/// Objects fetched whole up to this size are kept as copies (see the module comment): shards and
/// documents. Larger ones are read in parts anyway, and a copy is checked whole at first use.
pub const COPY_MAX: u64 = 16 << 20;
/// The block index that stands for an object's copy in the LRU index.
const COPY: u64 = u64::MAX;
/// Default `--cache-max-size`.
pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;
/// How many times a read overlapped by writes of its key is asked (see `get_clear_of_writes`).
const ASKS_PAST_WRITES: u32 = 3;
/// A directory's stale cached objects are confirmed by one listing page when there are at
/// least this many (for one, its own conditional GET costs the same round trip, and is exact).
const LIST_TO_CONFIRM: usize = 2;
/// At most this many objects a listing is sent to confirm: the objects of an S3 listing page.
const CONFIRM_PER_LISTING: usize = 1000;
/// A confirming page starts at most this many stale names before the one read.
const RUN_BEFORE: usize = CONFIRM_PER_LISTING / 4;
/// Directories after the one confirmed whose listings go out beside its own (a listing
/// costs no object bytes; a reader walking an array's chunk directories saves a round trip
/// for each).
const DIRS_AHEAD: usize = 8;
/// Bytes of fetched data that may wait for their background write at once.
const WRITE_BACKLOG: u64 = 64 << 20;
/// How many objects' metadata (version, size) this layer remembers.
const KNOWN_OBJECTS: usize = 200_000;
const MAGIC: &[u8; 8] = b"ZMDCBLK1";
/// A block file's mtime is refreshed on a hit at most this often (it orders eviction after a
/// restart; finer than this is not worth a syscall per read).
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// What an answer about a key is to the known versions (see `observe`).
#[derive(Clone, Copy)]
struct Answer {
    /// A lookup's, HEAD's or listing's: it counts as the revalidation of a version past the TTL.
    confirms: bool,
    /// Also written down for the next daemon.
    record: bool,
}

impl Answer {
    /// A read's: the version whose bytes it brought.
    const READ: Answer = Answer { confirms: false, record: true };
    /// A read's that failed or found another version than the one it read by (not recorded).
    const READ_MISMATCH: Answer = Answer { confirms: false, record: false };
    /// A lookup's or listing's (the journal records those whole).
    const LOOKUP: Answer = Answer { confirms: true, record: false };
    /// A HEAD's or a confirming listing page's, recorded per object.
    const CONFIRMED: Answer = Answer { confirms: true, record: true };
}

/// An exclusive lock on a cache directory, held for the daemon's life (the fd is inherited
/// across the daemonizing fork, and the lock with it).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Create `dir` if needed and lock it; the error is one line for the user.
    pub fn acquire(dir: &Path) -> Result<DirLock, String> {
        let shown = dir.display();
        std::fs::create_dir_all(dir).map_err(|e| format!("--cache-dir {shown}: {e}"))?;
        let dir = std::fs::canonicalize(dir).map_err(|e| format!("--cache-dir {shown}: {e}"))?;
        let path = dir.join("lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("--cache-dir {shown}: {e}"))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let who =
                    if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
                return Err(format!(
                    "--cache-dir {shown}: in use by another zarr-mount{who}; each mount needs its own cache directory"
                ));
            }
            return Err(format!("--cache-dir {shown}: cannot lock: {err}"));
        }
        let lock = DirLock { _file: file, dir };
        lock.note_pid();
        Ok(lock)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write our pid into the lock file, for the message a second daemon prints (the lock
    /// itself is what counts). Called again after the daemonizing fork.
    pub fn note_pid(&self) {
        use std::io::Seek;
        let mut f = &self._file;
        let _ = f.set_len(0);
        let _ = f.seek(std::io::SeekFrom::Start(0));
        let _ = writeln!(f, "{}", std::process::id());
    }
}

/// See [`MetaJournal::root_answered_within`].
pub fn vouches_for(opts: &DiskCacheOptions, identity: &str, ttl: Duration) -> bool {
    MetaJournal::root_answered_within(opts.lock.dir(), identity, ttl)
}

/// `--cache-dir`, `--cache-max-size` and `--immutable`, checked (the directory is locked
/// already).
#[derive(Debug, Clone)]
pub struct DiskCacheOptions {
    pub lock: Arc<DirLock>,
    pub max_bytes: u64,
    /// The data does not change: what the cache learned is trusted for ever.
    pub immutable: bool,
}

/// How long an answer of the store is trusted under `--immutable`: for ever, in effect (a
/// century keeps every clock sum far from overflowing).
pub const IMMUTABLE_TRUST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl DiskCacheOptions {
    /// How long the cache trusts what the store said, given `--metadata-ttl`.
    pub fn trust(&self, metadata_ttl: Duration) -> Duration {
        if self.immutable {
            IMMUTABLE_TRUST
        } else {
            metadata_ttl
        }
    }
}

#[derive(Debug, Clone)]
pub struct DiskCacheConfig {
    pub max_bytes: u64,
    pub block_size: u64,
    /// Objects fetched whole up to this size are kept as one copy file, not blocks (0: never).
    pub copy_max: u64,
    /// How long metadata seen by this layer is trusted before a read confirms it with a HEAD.
    pub ttl: Duration,
}

/// One block file: which object (hash of store, key, version, size) and which block of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BlockId {
    object: String,
    index: u64,
}

struct State {
    /// Block files on disk, least recently used first; value: file size and last touch.
    blocks: LruCache<BlockId, (u64, Instant)>,
    /// Bytes of block files on disk, plus space reserved for writes under way.
    used: u64,
    /// Metadata seen for each key and when (wall clock: it may come from an earlier daemon).
    known: KnownObjects,
    /// Objects kept as copies (their LRU entry is `BlockId { object, index: COPY }`).
    copies: HashMap<String, CopyFile>,
}

/// A copy file's checksum (part of its name), and whether this daemon has checked it.
#[derive(Debug, Clone, Copy)]
struct CopyFile {
    crc: u32,
    checked: bool,
}

/// Counters of this cache, for tests (the process-wide ones are in `metrics::DiskCacheMetrics`).
#[derive(Debug, Default)]
pub struct DiskCacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub written: AtomicU64,
    pub corrupt: AtomicU64,
    pub evicted: AtomicU64,
    /// Revalidations that found the cached version still there, and another one (or none).
    pub unchanged: AtomicU64,
    pub changed: AtomicU64,
}

impl DiskCacheStats {
    fn hit(&self, blocks: u64, bytes: u64) {
        self.hits.fetch_add(blocks, Ordering::Relaxed);
        let m = &crate::metrics::global().disk_cache;
        m.hits.inc_by(blocks);
        m.read_bytes.inc_by(bytes);
    }
    fn miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        crate::metrics::global().disk_cache.misses.inc();
    }
    fn corrupt(&self) {
        self.corrupt.fetch_add(1, Ordering::Relaxed);
        crate::metrics::global().disk_cache.corrupt.inc();
    }
    fn evicted(&self, files: u64) {
        self.evicted.fetch_add(files, Ordering::Relaxed);
        crate::metrics::global().disk_cache.evictions.inc_by(files);
    }
    fn revalidated(&self, found: Revalidation) {
        let mine = if found == Revalidation::Unchanged { &self.unchanged } else { &self.changed };
        mine.fetch_add(1, Ordering::Relaxed);
        crate::metrics::global().disk_cache.revalidations(found).inc();
    }
}

pub struct DiskCacheStore {
    inner: Arc<dyn Store>,
    root: PathBuf,
    cfg: DiskCacheConfig,
    /// Store identity mixed into every block name (two sources never share blocks).
    identity: String,
    state: Mutex<State>,
    backlog: AtomicU64,
    /// To the writer thread (see `spawn_writer`).
    writer: Mutex<std::sync::mpsc::Sender<WriteJob>>,
    tmp_seq: AtomicU64,
    pub stats: DiskCacheStats,
    /// Listings and lookups kept for the next daemon (see disk_meta.rs).
    journal: MetaJournal,
    /// Writes through this layer under way: what a read overlapping one brought is not kept.
    writes: WriteWatch,
    /// Listings of a directory confirming its stale objects together (`confirm_directory`).
    listings: ListingFlights,
    _lock: Arc<DirLock>,
}

/// Bytes queued for the writer threads of every disk cache in this process. A daemon that
/// stops cleanly (SIGTERM, unmount) waits for them (`wait_for_queued_writes`): the writer is a
/// plain thread, which process exit would otherwise cut off with blocks still queued, and the
/// next daemon would fetch again what this one read.
static QUEUED: AtomicU64 = AtomicU64::new(0);

/// Wait (up to `limit`) until every block queued for writing is on disk; false on timeout.
pub fn wait_for_queued_writes(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while QUEUED.load(Ordering::Acquire) > 0 {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Blocks of one fetch for the writer thread; the `Arc` keeps the store alive until written.
struct WriteJob {
    store: Arc<DiskCacheStore>,
    key: String,
    version: String,
    size: u64,
    blocks: Vec<(BlockId, Bytes)>,
    bytes: u64,
    /// Told once the blocks are written (or given up); the reader waits for it.
    done: tokio::sync::oneshot::Sender<()>,
}

/// One thread writes every block, in the order fetched: off the async runtime and its
/// blocking pool (which the reads use), and never more than one write competing with the
/// readers for the CPU. It ends when the store is dropped (the last sender goes with it).
fn spawn_writer() -> std::io::Result<std::sync::mpsc::Sender<WriteJob>> {
    let (tx, rx) = std::sync::mpsc::channel::<WriteJob>();
    std::thread::Builder::new().name("disk-cache-writer".into()).spawn(move || {
        for job in rx {
            let WriteJob { store, key, version, size, blocks, bytes, done } = job;
            for (id, data) in &blocks {
                store.write_block(&key, &version, size, id, data);
            }
            store.backlog.fetch_sub(bytes, Ordering::AcqRel);
            QUEUED.fetch_sub(bytes, Ordering::AcqRel);
            // Let go of the data (and the store) before telling the reader, so that nothing
            // of it outlives the read.
            drop(blocks);
            drop(store);
            let _ = done.send(());
        }
    })?;
    Ok(tx)
}

/// What one fetch returned, placed in the object.
struct Fetched {
    start: u64,
    data: Bytes,
}

impl DiskCacheStore {
    /// Open the cache in the locked directory: drop leftovers of interrupted writes and index
    /// the blocks there, oldest first.
    pub fn open(
        inner: Arc<dyn Store>,
        lock: Arc<DirLock>,
        cfg: DiskCacheConfig,
    ) -> std::io::Result<Self> {
        let root = lock.dir().to_path_buf();
        let tmp = root.join("tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        std::fs::create_dir_all(root.join("blocks"))?;
        std::fs::create_dir_all(root.join("copies"))?;
        let mut found = scan_files(&root.join("blocks"), parse_block_name)?;
        let mut copies = HashMap::new();
        for (at, (object, crc), len) in scan_files(&root.join("copies"), parse_copy_name)? {
            copies.insert(object.clone(), CopyFile { crc, checked: false });
            found.push((at, BlockId { object, index: COPY }, len));
        }
        found.sort_by_key(|(t, _, _)| *t);
        let mut blocks = LruCache::unbounded();
        let mut used = 0;
        let long_ago = Instant::now().checked_sub(TOUCH_EVERY).unwrap_or_else(Instant::now);
        for (_, id, len) in found {
            used += len;
            blocks.put(id, (len, long_ago));
        }
        lock.note_pid();
        let journal = MetaJournal::open(&root, &inner.describe(), cfg.ttl)?;
        let mut known = KnownObjects::new(NonZeroUsize::new(KNOWN_OBJECTS).expect("nonzero"));
        for (key, meta, at) in journal.replayed_objects() {
            let meta = match known.peek(&key) {
                Some((before, _)) => to_keep(before, &meta).clone(),
                None => meta,
            };
            known.put(key, (meta, at));
        }
        let store = DiskCacheStore {
            identity: inner.describe(),
            inner,
            root,
            cfg,
            state: Mutex::new(State { blocks, used, known, copies }),
            backlog: AtomicU64::new(0),
            writer: Mutex::new(spawn_writer()?),
            tmp_seq: AtomicU64::new(0),
            stats: DiskCacheStats::default(),
            journal,
            writes: WriteWatch::default(),
            listings: ListingFlights::default(),
            _lock: lock,
        };
        // A smaller bound than last time: shrink now.
        let victims = store.reserve(0);
        store.remove_files(&victims);
        let (blocks, bytes) = {
            let st = store.state();
            (st.blocks.len(), st.used)
        };
        tracing::info!(
            dir = %store.root.display(),
            blocks,
            bytes,
            max = store.cfg.max_bytes,
            "disk cache opened"
        );
        Ok(store)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        crate::locks::lock(&self.state)
    }

    /// Bytes the index counts on disk (tests).
    pub fn used_bytes(&self) -> u64 {
        self.state().used
    }

    /// Wait until every background block write has finished (tests).
    pub async fn settle(&self) {
        while self.backlog.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Block files indexed (tests).
    pub fn block_count(&self) -> usize {
        self.state().blocks.len()
    }

    fn object_id(&self, key: &str, meta: &ObjectMeta) -> String {
        let modified = meta.modified.duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        for part in [self.identity.as_bytes(), key.as_bytes(), meta.version.as_bytes()] {
            ctx.update(&(part.len() as u64).to_le_bytes());
            ctx.update(part);
        }
        ctx.update(&meta.size.to_le_bytes());
        // Without a version tag (some HTTP servers) the modification time has to stand in.
        if meta.version.is_empty() {
            ctx.update(&modified.to_le_bytes());
        }
        ctx.finish().as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    fn block_path(&self, id: &BlockId) -> PathBuf {
        self.root.join("blocks").join(&id.object[..2]).join(format!("{}.{}", id.object, id.index))
    }

    fn copy_path(&self, object: &str, crc: u32) -> PathBuf {
        self.root.join("copies").join(&object[..2]).join(format!("{object}.{crc:08x}"))
    }

    /// Metadata of `key` seen within the TTL.
    fn fresh_meta(&self, key: &str) -> Option<ObjectMeta> {
        let mut st = self.state();
        match st.known.get(key) {
            Some((m, at))
                if crate::clock::system_now()
                    .duration_since(*at)
                    .is_ok_and(|age| age < self.cfg.ttl) =>
            {
                Some(m.clone())
            }
            _ => None,
        }
    }

    /// Metadata of `key` known, however old: a version whose cached bytes a revalidation
    /// may confirm.
    fn known_meta(&self, key: &str) -> Option<ObjectMeta> {
        self.state().known.peek(key).map(|(m, _)| m.clone())
    }

    /// What the store said of `key` now, trusted for the TTL from now on, unless a write of
    /// `key` through this layer overlapped the request (`since`: its start): then the answer
    /// may predate the write and nothing of it is kept. Returns whether it was kept.
    ///
    /// The overlap is checked under the state lock, which a write's `forget` takes after the
    /// write has begun: an answer kept just before a write begins is dropped by that write's
    /// forget, and one arriving later sees the write. (Checked before taking the lock, a late
    /// answer could be kept just after the write's last forget, and named the version before
    /// the write as current for the TTL.)
    ///
    /// An answer naming another version than the one known (or none) drops the known
    /// version's files: they can never be read again. A confirming answer (a lookup, HEAD or
    /// listing) that meets a known version past the TTL counts as its revalidation. A
    /// recorded one is also written down for the next daemon (disk_meta.rs,
    /// `Record::Object`), so that it can serve the blocks of objects that nothing looks up or
    /// lists (shards behind the unsharded view, metadata documents) without asking again.
    fn observe(
        &self,
        key: &str,
        meta: Option<&ObjectMeta>,
        answer: Answer,
        since: &ReadStart,
    ) -> bool {
        let now = crate::clock::system_now();
        let before = {
            let mut st = self.state();
            if self.writes.overlapped(since) {
                return false;
            }
            let before = st.known.peek(key).cloned();
            // An untagged answer (an s3s-fs listing) that meets a tagged version only by size
            // and second cannot tell a rewrite within that second: it keeps the version but
            // not as confirmed, so a read past the TTL still asks with the tag.
            let untagged = crate::store::backends::object::is_untagged;
            let weak = |m: &ObjectMeta, old: &ObjectMeta| {
                untagged(m) && !untagged(old) && one_version(m, old)
            };
            match meta {
                Some(m) if before.as_ref().is_some_and(|(old, _)| weak(m, old)) => {
                    return true;
                }
                Some(m) => {
                    let m = match &before {
                        Some((old, _)) => to_keep(old, m).clone(),
                        None => m.clone(),
                    };
                    st.known.put(key.to_string(), (m, now));
                }
                None => {
                    st.known.pop(key);
                }
            }
            // Under the same lock, so that a write's forget comes after the record.
            if let (true, Some(m)) = (answer.record, meta) {
                self.journal.record_object(key, m);
            }
            before
        };
        let Some((old, at)) = before else { return true };
        let same = meta.is_some_and(|m| one_version(m, &old));
        if !same {
            self.drop_version(key, &old);
        }
        let stale = now.duration_since(at).map_or(true, |age| age >= self.cfg.ttl);
        if answer.confirms && stale {
            let found = match (same, meta) {
                (true, _) => Revalidation::Unchanged,
                (false, Some(_)) => Revalidation::Changed,
                (false, None) => Revalidation::Deleted,
            };
            tracing::debug!(key, found = found.name(), known = ?old, now = ?meta, "disk cache: a cached version confirmed");
            self.stats.revalidated(found);
        }
        true
    }

    /// Forget the files of `key` at `old`, a version the store no longer has: each block the
    /// object's size allows, and its copy. Deleted off the async runtime.
    fn drop_version(&self, key: &str, old: &ObjectMeta) {
        let object = self.object_id(key, old);
        let blocks = old.size.div_ceil(self.cfg.block_size);
        let paths: Vec<PathBuf> = {
            let mut st = self.state();
            std::iter::once(COPY)
                .chain(0..blocks)
                .filter_map(|index| {
                    self.unindex(&mut st, &BlockId { object: object.clone(), index })
                })
                .collect()
        };
        if paths.is_empty() {
            return;
        }
        let remove = move || {
            for p in paths {
                let _ = std::fs::remove_file(p);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }

    fn forget(&self, key: &str) {
        self.journal.forget(key, false);
        self.state().known.pop(key);
    }

    fn forget_prefix(&self, prefix: &str) {
        self.journal.forget(prefix, true);
        let mut st = self.state();
        for k in st.known.keys_below(prefix) {
            st.known.pop(&k);
        }
    }

    /// Make room for `n` more bytes: the files to delete (least recently used first).
    fn reserve(&self, n: u64) -> Vec<PathBuf> {
        let mut st = self.state();
        let mut victims = Vec::new();
        while st.used + n > self.cfg.max_bytes {
            match st.blocks.peek_lru().map(|(id, _)| id.clone()) {
                Some(id) => victims.extend(self.unindex(&mut st, &id)),
                None => break,
            }
        }
        st.used += n;
        victims
    }

    fn remove_files(&self, victims: &[PathBuf]) {
        for path in victims {
            let _ = std::fs::remove_file(path);
        }
        self.stats.evicted(victims.len() as u64);
    }

    /// The expected payload length of block `index` of an object of `size` bytes.
    fn block_len(&self, index: u64, size: u64) -> u64 {
        let start = index * self.cfg.block_size;
        size.saturating_sub(start).min(self.cfg.block_size)
    }

    /// Read and check one block file; a bad file is deleted (and forgotten).
    fn load_block(&self, key: &str, meta: &ObjectMeta, id: &BlockId) -> Option<Bytes> {
        let mut data = vec![0u8; self.block_len(id.index, meta.size) as usize];
        self.load_block_into(key, meta, id, &mut data).then(|| Bytes::from(data))
    }

    /// Blocks `blocks` of an object, all on disk (as far as the index knows), read into one
    /// buffer (bytes `blocks.start * block_size ..` of the object): a warm read of a whole
    /// shard is then one allocation and no copy in the daemon (a buffer per block and their
    /// assembly were two thirds of a warm zarr-python read's time in the daemon, mostly
    /// faulting in fresh pages). `None` when one fails its check (it is dropped).
    fn load_span(
        &self,
        key: &str,
        meta: &ObjectMeta,
        object: &str,
        blocks: Range<u64>,
    ) -> Option<Vec<u8>> {
        let bs = self.cfg.block_size;
        let end = (blocks.end * bs).min(meta.size);
        let mut out = vec![0u8; (end - blocks.start * bs) as usize];
        for (index, part) in blocks.clone().zip(out.chunks_mut(bs as usize)) {
            let id = BlockId { object: object.to_string(), index };
            if !self.load_block_into(key, meta, &id, part) {
                return None;
            }
        }
        Some(out)
    }

    /// Read one block file's data into `out` (the block's length), checked; a bad file is
    /// deleted (and forgotten).
    fn load_block_into(&self, key: &str, meta: &ObjectMeta, id: &BlockId, out: &mut [u8]) -> bool {
        let path = self.block_path(id);
        let touch = {
            let mut st = self.state();
            match st.blocks.get_mut(id) {
                Some((_, at)) if at.elapsed() >= TOUCH_EVERY => {
                    *at = Instant::now();
                    true
                }
                Some(_) => false,
                None => return false,
            }
        };
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(_) => {
                self.drop_block(id, false);
                return false;
            }
        };
        let before = encode_header(key, &meta.version, meta.size, id.index, out.len());
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if !read_block_into(&file, len, &before, out) {
            tracing::warn!(path = %path.display(), "disk cache block failed its check; fetching it again");
            self.stats.corrupt();
            self.drop_block(id, true);
            return false;
        }
        if touch {
            let _ = file.set_modified(SystemTime::now());
        }
        true
    }

    /// Take the block or copy `id` out of the index (and its space out of `used`): the path of
    /// its file, if it was indexed.
    fn unindex(&self, st: &mut State, id: &BlockId) -> Option<PathBuf> {
        let (len, _) = st.blocks.pop(id)?;
        st.used -= len;
        if id.index != COPY {
            return Some(self.block_path(id));
        }
        let copy = st.copies.remove(&id.object)?;
        Some(self.copy_path(&id.object, copy.crc))
    }

    /// Forget a block or copy file, and delete it if `delete`.
    fn drop_block(&self, id: &BlockId, delete: bool) {
        let path = self.unindex(&mut self.state(), id);
        if let Some(path) = path.filter(|_| delete) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// `object`'s copy file, opened, if one is kept; checked whole (its length and CRC-32C) the
    /// first time this daemon opens it. A bad copy is deleted (and forgotten). The use
    /// refreshes its place in the LRU order.
    fn open_copy(&self, object: &str, size: u64) -> Option<File> {
        let id = BlockId { object: object.to_string(), index: COPY };
        let (copy, touch) = {
            let mut st = self.state();
            let copy = *st.copies.get(object)?;
            match st.blocks.get_mut(&id) {
                Some((_, at)) if at.elapsed() >= TOUCH_EVERY => {
                    *at = Instant::now();
                    (copy, true)
                }
                Some(_) => (copy, false),
                None => return None,
            }
        };
        let path = self.copy_path(object, copy.crc);
        let Ok(file) = File::open(&path) else {
            self.drop_block(&id, false);
            return None;
        };
        let len = file.metadata().map(|m| m.len()).ok();
        let good = len == Some(size) && (copy.checked || crc_of(&file) == Some(copy.crc));
        if !good {
            tracing::warn!(path = %path.display(), "disk cache copy failed its check; fetching it again");
            self.stats.corrupt();
            self.drop_block(&id, true);
            return None;
        }
        if !copy.checked {
            if let Some(c) = self.state().copies.get_mut(object) {
                c.checked = true;
            }
        }
        if touch {
            let _ = file.set_modified(SystemTime::now());
        }
        Some(file)
    }

    /// Bytes `want` of an object of `size` bytes kept as the copy `object`; `None` when there is
    /// none, or it failed its check.
    fn load_from_copy(&self, object: &str, size: u64, want: Range<u64>) -> Option<Bytes> {
        use std::os::unix::fs::FileExt;
        let file = self.open_copy(object, size)?;
        let mut out = vec![0u8; (want.end - want.start) as usize];
        file.read_exact_at(&mut out, want.start).ok()?;
        Some(Bytes::from(out))
    }

    /// The copy of `key` (see the module comment), opened for the kernel to read directly, when
    /// one is kept for `version` and that version is known fresh; checked whole at its first use
    /// by this daemon. Blocks on file I/O: call it off the async runtime.
    pub fn local_copy(&self, key: &str, version: &str) -> Option<File> {
        let meta = self.fresh_meta(key).filter(|m| m.version == version)?;
        let file = self.open_copy(&self.object_id(key, &meta), meta.size)?;
        self.stats.hit(1, meta.size);
        Some(file)
    }

    /// Whether a copy of `key`'s version known fresh is kept (see `StoreHints::keeps_local_copy`).
    pub fn keeps_local_copy(&self, key: &str) -> bool {
        let Some(meta) = self.fresh_meta(key) else { return false };
        let object = self.object_id(key, &meta);
        self.state().copies.contains_key(&object)
    }

    /// Keep every whole block inside `fetched` (bytes `start..` of the object): queued for the
    /// writer thread; the answer says when they are written (`None`: nothing queued). Skipped
    /// when the write backlog is full.
    fn store_blocks(
        self: &Arc<Self>,
        key: &str,
        meta: &ObjectMeta,
        f: &Fetched,
    ) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let bs = self.cfg.block_size;
        let end = f.start + f.data.len() as u64;
        let object = self.object_id(key, meta);
        let mut todo: Vec<(BlockId, Bytes)> = Vec::new();
        let mut index = f.start.div_ceil(bs);
        let whole = f.start == 0 && f.data.len() as u64 == meta.size && meta.size > 0;
        if whole && meta.size <= self.cfg.copy_max {
            if !self.state().copies.contains_key(&object) {
                todo.push((BlockId { object, index: COPY }, f.data.clone()));
            }
        } else {
            let st = self.state();
            while index * bs < meta.size {
                let len = self.block_len(index, meta.size);
                let (b0, b1) = (index * bs, index * bs + len);
                if b1 > end {
                    break;
                }
                let id = BlockId { object: object.clone(), index };
                if !st.blocks.contains(&id) {
                    let from = (b0 - f.start) as usize;
                    todo.push((id, f.data.slice(from..from + len as usize)));
                }
                index += 1;
            }
        }
        if todo.is_empty() {
            return None;
        }
        let bytes: u64 = todo.iter().map(|(_, d)| d.len() as u64).sum();
        if self
            .backlog
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b + bytes <= WRITE_BACKLOG).then_some(b + bytes)
            })
            .is_err()
        {
            return None;
        }
        let (done, written) = tokio::sync::oneshot::channel();
        let job = WriteJob {
            store: self.clone(),
            key: key.to_string(),
            version: meta.version.clone(),
            size: meta.size,
            blocks: todo,
            bytes,
            done,
        };
        QUEUED.fetch_add(bytes, Ordering::AcqRel);
        let sent = crate::locks::lock(&self.writer).send(job);
        if let Err(unsent) = sent {
            self.backlog.fetch_sub(unsent.0.bytes, Ordering::AcqRel);
            QUEUED.fetch_sub(unsent.0.bytes, Ordering::AcqRel);
            return None;
        }
        Some(written)
    }

    fn write_block(&self, key: &str, version: &str, size: u64, id: &BlockId, data: &[u8]) {
        if id.index == COPY {
            return self.write_copy(&id.object, data);
        }
        // Header, data and checksum are written in turn: the data is never copied.
        let header = encode_header(key, version, size, id.index, data.len());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&header), data);
        self.write_file_as(id, None, &self.block_path(id), &[&header, data, &crc.to_le_bytes()]);
    }

    /// Keep `data`, all of `object`, as its copy file.
    fn write_copy(&self, object: &str, data: &[u8]) {
        let crc = crc32c::crc32c(data);
        let id = BlockId { object: object.to_string(), index: COPY };
        let copy = CopyFile { crc, checked: true }; // its bytes are the ones fetched
        self.write_file_as(&id, Some(copy), &self.copy_path(object, crc), &[data]);
    }

    /// Write `parts` as the file at `path` (through `tmp/` and a rename, after making room) and
    /// index it as `id` (a copy with its `copy` entry, under the same lock, so that eviction
    /// always finds its name).
    fn write_file_as(&self, id: &BlockId, copy: Option<CopyFile>, path: &Path, parts: &[&[u8]]) {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if len > self.cfg.max_bytes {
            return;
        }
        let victims = self.reserve(len);
        self.remove_files(&victims);
        let tmp = self.root.join("tmp").join(format!(
            "{}.{}",
            std::process::id(),
            self.tmp_seq.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            for part in parts {
                f.write_all(part)?;
            }
            drop(f);
            if let Err(e) = std::fs::rename(&tmp, path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(e);
                }
                std::fs::create_dir_all(path.parent().expect("has a parent"))?;
                std::fs::rename(&tmp, path)?;
            }
            Ok(())
        })();
        let mut st = self.state();
        match written {
            Ok(()) => {
                if let Some((old, _)) = st.blocks.put(id.clone(), (len, Instant::now())) {
                    st.used -= old; // the same block written twice by racing readers
                }
                if let Some(c) = copy {
                    let old = st.copies.insert(id.object.clone(), c);
                    if let Some(old) = old.filter(|o| o.crc != c.crc) {
                        let _ = std::fs::remove_file(self.copy_path(&id.object, old.crc));
                    }
                }
                drop(st);
                self.stats.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                st.used -= len;
                drop(st);
                let _ = std::fs::remove_file(&tmp);
                tracing::debug!(error = %e, "disk cache write failed; block not kept");
            }
        }
    }

    /// Is anything of `range` of `key` at `meta` on disk (its copy, or a block of the range)?
    /// Then a revalidation is worth sending rather than a plain GET.
    fn holds_any(&self, key: &str, meta: &ObjectMeta, range: &ByteRange) -> bool {
        let want = range.clip(meta.size);
        let object = self.object_id(key, meta);
        let st = self.state();
        if st.copies.contains_key(&object) {
            return true;
        }
        if want.is_empty() {
            return false;
        }
        let bs = self.cfg.block_size;
        (want.start / bs..=(want.end - 1) / bs)
            .any(|index| st.blocks.contains(&BlockId { object: object.clone(), index }))
    }

    /// Confirm `known`, a version of `key` past the TTL whose bytes are on disk, with the
    /// cheapest request the store has (a conditional GET of `fetch`: a 304 carries no body):
    /// `Ok(known)` when unchanged (trusted for the TTL again), else the store's answer to a
    /// read of `fetch` now (`None`: deleted).
    async fn revalidate(
        &self,
        key: &str,
        fetch: &ByteRange,
        known: ObjectMeta,
    ) -> StoreResult<Result<ObjectMeta, Option<(Bytes, ObjectMeta)>>> {
        let start = self.writes.read_starts(key);
        match self.inner.get_if_changed(key, fetch.clone(), &known).await? {
            Revalidated::Unchanged => {
                self.stats.revalidated(Revalidation::Unchanged);
                self.observe(key, Some(&known), Answer::READ, &start);
                Ok(Ok(known))
            }
            Revalidated::Changed(now) => {
                let found = match &now {
                    Some(_) => Revalidation::Changed,
                    None => Revalidation::Deleted,
                };
                let now_meta = now.as_ref().map(|(_, m)| m);
                tracing::debug!(key, found = found.name(), ?known, now = ?now_meta, "disk cache: a cached version confirmed");
                self.stats.revalidated(found);
                Ok(Err(now))
            }
        }
    }

    /// The known version of `key`, past the TTL, when some of `range` of it is on disk: what a
    /// read confirms rather than fetches.
    fn stale_on_disk(&self, key: &str, range: &ByteRange) -> Option<ObjectMeta> {
        self.fresh_meta(key).is_none().then_some(())?;
        self.known_meta(key).filter(|m| self.holds_any(key, m, range))
    }

    /// Before `key`'s cached version past the TTL is revalidated alone: confirm it together
    /// with the other stale cached objects of its directory, by one listing page, when there
    /// are `LIST_TO_CONFIRM` of them and this store's listings can confirm. The reads of that
    /// directory meanwhile wait for this listing rather than send their own requests. What the
    /// page did not confirm (not in it, untagged, overlapped by a write) stays past the TTL,
    /// for its own conditional GET.
    ///
    /// Its own directory, not an ancestor prefix: chunks read together differ in their last
    /// coordinate (`c/i/j`: neighbours share `c/i`), and a listing of an ancestor's whole
    /// subtree would be paged through names far from the ones being read. With `ahead`, the
    /// directories after it are confirmed beside it (`confirm_next_directories`).
    async fn confirm_directory(self: &Arc<Self>, key: &str, ahead: bool) {
        if !self.listings.may_confirm() {
            return;
        }
        let (dir, _) = crate::store::split_key(key);
        self.listings
            .run(dir, || async move {
                let whole = ByteRange::Range(0..u64::MAX);
                let now = crate::clock::system_now();
                let stale =
                    |at: &SystemTime| now.duration_since(*at).map_or(true, |a| a >= self.cfg.ttl);
                // The page starts at the run of stale names just before `key` (concurrent
                // reads of a directory arrive in about name order), and holds the names after
                // it that a reader in name order (chunk keys) wants next. A name's proper
                // prefix sorts just before it: the listing starts after that.
                let (after, candidates) = {
                    let st = self.state();
                    let first = st.known.run_start(dir, key, RUN_BEFORE, |_, (_, at)| stale(at));
                    let (_, name) = crate::store::split_key(&first);
                    let after = name.char_indices().last().map_or("", |(i, _)| &name[..i]);
                    let candidates = st.known.in_dir(dir, after, CONFIRM_PER_LISTING);
                    (after.to_string(), candidates)
                };
                let stale: Vec<String> = candidates
                    .into_iter()
                    .filter(|(k, (m, at))| stale(at) && self.holds_any(k, m, &whole))
                    .map(|(k, _)| k)
                    .collect();
                if stale.len() >= LIST_TO_CONFIRM && stale.iter().any(|k| k == key) {
                    if ahead {
                        self.confirm_next_directories(dir);
                    }
                    self.confirm_in_listing(dir, &after, &stale).await;
                }
            })
            .await;
    }

    /// A reader confirming one directory's cached objects goes on to the directories after
    /// it (an array's `c/0/`, then `c/1/`, ...), each of which would cost it another round
    /// trip when it gets there: their listings go out now, beside this one, in the
    /// background. At most `DIRS_AHEAD` of them, among its siblings that this cache holds
    /// objects of: by number when the names are numbers (chunk coordinates, where `c/10`
    /// sorts before `c/2`), else in name order. Each lists only if it has stale cached objects
    /// of its own (`confirm_directory`), and goes no further ahead itself.
    fn confirm_next_directories(self: &Arc<Self>, dir: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if dir.is_empty() {
            return;
        }
        let (parent, name) = crate::store::split_key(dir);
        let firsts: Vec<String> = {
            let st = self.state();
            match name.parse::<u64>() {
                Ok(n) => (1..=DIRS_AHEAD as u64)
                    .filter_map(|i| {
                        let next = crate::store::join_key(parent, &(n + i).to_string());
                        st.known.first_key_below(&next)
                    })
                    .collect(),
                Err(_) => st.known.first_keys_of_dirs_after(parent, name, DIRS_AHEAD),
            }
        };
        for key in firsts {
            let this = self.clone();
            runtime.spawn(async move { this.confirm_directory(&key, false).await });
        }
    }

    /// One listing page of `dir` from after the name `after`, taken as the answer to a
    /// revalidation of each of `stale` (keys of `dir`) that it names: as the same version, confirmed; as another, the old
    /// version's files dropped (the read fetches the new one). A page with an entry without a
    /// version tag, with no object, or a listing refused, says this store's listings cannot
    /// confirm.
    async fn confirm_in_listing(&self, dir: &str, after: &str, stale: &[String]) {
        use futures::StreamExt;
        let start = self.writes.listing_starts();
        let page = self.inner.list_pages_after(dir, after).next().await;
        let page = match page {
            Some(Ok(page)) => page,
            Some(Err(e)) => {
                tracing::debug!(dir, error = %e, "disk cache: a confirming listing failed");
                // Not allowed to list (no ListBucket) or no listing at all: not again. A
                // passing failure (an outage) only sends these reads their own requests.
                if matches!(e, StoreError::PermissionDenied(_) | StoreError::Unsupported(_)) {
                    self.listings.cannot_confirm();
                }
                return;
            }
            None => Listing::default(),
        };
        let untagged = crate::store::backends::object::is_untagged;
        if page.files.is_empty() || page.files.iter().any(|(_, m)| untagged(m)) {
            tracing::debug!(dir, "disk cache: listings of this store cannot confirm");
            self.listings.cannot_confirm();
            return;
        }
        for (name, meta) in &page.files {
            let key = crate::store::join_key(dir, name);
            if stale.binary_search(&key).is_ok() {
                self.observe(&key, Some(meta), Answer::CONFIRMED, &start.of(&key));
            }
        }
    }

    /// Bytes `want` of an object whose metadata is `meta` (fresh): blocks from disk, the
    /// missing runs from the store (concurrently), the new blocks kept. `None`: the object
    /// changed under us, or a write of it overlapped the fetch (`start`: the read's start),
    /// so its bytes may not be of `meta`; the caller falls back to a plain read.
    async fn read_blocks(
        self: &Arc<Self>,
        key: &str,
        meta: &ObjectMeta,
        want: Range<u64>,
        start: &ReadStart,
    ) -> StoreResult<Option<Bytes>> {
        let bs = self.cfg.block_size;
        let first = want.start / bs;
        let last = (want.end - 1) / bs;
        let object = self.object_id(key, meta);
        if self.state().copies.contains_key(&object) {
            let this = self.clone();
            let (obj, size, w) = (object.clone(), meta.size, want.clone());
            let data = tokio::task::spawn_blocking(move || this.load_from_copy(&obj, size, w))
                .await
                .map_err(|e| StoreError::Backend {
                    key: key.to_string(),
                    message: e.to_string(),
                })?;
            if let Some(data) = data {
                self.stats.hit(1, data.len() as u64);
                return Ok(Some(data));
            }
            // It failed its check and is dropped: blocks, or the store, below.
        }
        let (any_on_disk, all_on_disk) = {
            let st = self.state();
            let on_disk = |index| st.blocks.contains(&BlockId { object: object.clone(), index });
            ((first..=last).any(on_disk), (first..=last).all(on_disk))
        };
        // A warm read: every block on disk, read into one buffer.
        if all_on_disk {
            let this = self.clone();
            let (k, m, obj) = (key.to_string(), meta.clone(), object.clone());
            let span =
                tokio::task::spawn_blocking(move || this.load_span(&k, &m, &obj, first..last + 1))
                    .await
                    .map_err(|e| StoreError::Backend {
                        key: key.to_string(),
                        message: e.to_string(),
                    })?;
            if let Some(span) = span {
                self.stats.hit(last - first + 1, want.end - want.start);
                let from = (want.start - first * bs) as usize;
                return Ok(Some(
                    Bytes::from(span).slice(from..from + (want.end - want.start) as usize),
                ));
            }
            // A block failed its check and is dropped: fetched again below.
        }
        // A cold read (no block on disk) goes straight to the store, without a blocking hop.
        let loaded: Vec<Option<Bytes>> = if any_on_disk {
            let this = self.clone();
            let (k, m, obj) = (key.to_string(), meta.clone(), object.clone());
            tokio::task::spawn_blocking(move || {
                (first..=last)
                    .map(|index| this.load_block(&k, &m, &BlockId { object: obj.clone(), index }))
                    .collect()
            })
            .await
            .map_err(|e| StoreError::Backend { key: key.to_string(), message: e.to_string() })?
        } else {
            vec![None; (last - first + 1) as usize]
        };
        // Runs of missing blocks, each fetched with one ranged GET.
        let mut runs: Vec<Range<u64>> = Vec::new();
        for (i, b) in loaded.iter().enumerate() {
            let index = first + i as u64;
            if let Some(b) = b {
                self.stats.hit(1, b.len() as u64);
                continue;
            }
            self.stats.miss();
            match runs.last_mut() {
                Some(r) if r.end == index => r.end = index + 1,
                _ => runs.push(index..index + 1),
            }
        }
        let fetches = runs.iter().map(|r| {
            let range = r.start * bs..(r.end * bs).min(meta.size);
            async move { (range.start, self.inner.get_ranged(key, ByteRange::Range(range)).await) }
        });
        let mut fetched: HashMap<u64, Bytes> = HashMap::new();
        let mut writes = Vec::new();
        for (at, r) in futures::future::join_all(fetches).await {
            let r = r?;
            let overlapped = self.writes.overlapped(start);
            match r {
                Some((data, m))
                    if !overlapped && m.version == meta.version && m.size == meta.size =>
                {
                    let f = Fetched { start: at, data };
                    writes.extend(self.store_blocks(key, meta, &f));
                    fetched.insert(at, f.data);
                }
                other => {
                    self.observe(key, other.as_ref().map(|(_, m)| m), Answer::READ_MISMATCH, start);
                    return Ok(None);
                }
            }
        }
        // Assemble `want` from the blocks and fetched runs, in order.
        let mut pieces: Vec<Bytes> = Vec::new();
        let mut index = first;
        while index <= last {
            let b0 = index * bs;
            let (piece_start, piece, next) = match &loaded[(index - first) as usize] {
                Some(block) => (b0, block.clone(), index + 1),
                None => {
                    let run = runs.iter().find(|r| r.start == index).expect("a run starts here");
                    (b0, fetched[&b0].clone(), run.end)
                }
            };
            let from = want.start.max(piece_start) - piece_start;
            let to = (want.end.min(piece_start + piece.len() as u64) - piece_start).max(from);
            pieces.push(piece.slice(from as usize..to as usize));
            index = next;
        }
        drop(fetched);
        blocks_written(writes).await;
        Ok(Some(if pieces.len() == 1 {
            pieces.pop().expect("one piece")
        } else {
            let mut out = BytesMut::with_capacity((want.end - want.start) as usize);
            for p in pieces {
                out.extend_from_slice(&p);
            }
            out.freeze()
        }))
    }

    async fn read(
        self: &Arc<Self>,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let (fetch, asked) = widened(&range, self.cfg.block_size);
        let start = self.writes.read_starts(key);
        if self.stale_on_disk(key, &range).is_some() {
            self.confirm_directory(key, true).await;
        }
        let mut meta = self.fresh_meta(key);
        // What the store answered a revalidation of a changed (or deleted) object with.
        let mut answered = None;
        if let Some(known) = self.stale_on_disk(key, &range) {
            match self.revalidate(key, &fetch, known).await? {
                Ok(known) => meta = Some(known),
                Err(now) => answered = Some(now),
            }
        }
        if self.writes.overlapped(&start) {
            // What was known or revalidated may predate a write through this layer.
            (meta, answered) = (None, None);
        }
        if let Some(meta) = meta {
            let want = range.clip(meta.size);
            if want.is_empty() {
                return Ok(Some((Bytes::new(), meta)));
            }
            // Nothing on disk: the plain GET below, which takes the version it finds (a
            // listing's version may lack the tag that a GET's has, see `one_version`).
            if self.holds_any(key, &meta, &range) {
                if let Some(data) = self.read_blocks(key, &meta, want, &start).await? {
                    return Ok(Some((data, meta)));
                }
            }
        }
        // Unknown version (or a new one): one GET, widened to whole blocks so that what comes
        // back is kept.
        let (r, asked_at) = match answered {
            Some(r) => (r, start),
            None => self.get_clear_of_writes(key, &fetch).await?,
        };
        let keep = self.observe(key, r.as_ref().map(|(_, m)| m), Answer::READ, &asked_at);
        let Some((data, meta)) = r else {
            tracing::debug!(key, keep, "disk cache: the store says the object is absent");
            return Ok(None);
        };
        let start = match &fetch {
            ByteRange::Range(r) => r.start.min(meta.size),
            ByteRange::Suffix(_) => meta.size - data.len() as u64,
        };
        let written = keep
            .then(|| self.store_blocks(key, &meta, &Fetched { start, data: data.clone() }))
            .flatten();
        let data = match asked {
            Some(r) => {
                let a = r.start.min(meta.size).max(start) - start;
                let b = (r.end.min(meta.size).max(start) - start).min(data.len() as u64).max(a);
                data.slice(a as usize..b as usize)
            }
            None => data,
        };
        blocks_written(written).await;
        Ok(Some((data, meta)))
    }
}

impl DiskCacheStore {
    /// A GET of `fetch`, asked again once the writes of `key` through this layer that it
    /// overlapped are done (`ASKS_PAST_WRITES` times at most): its answer may predate them or,
    /// on s3s-fs, pair one version's bytes with the other's tag (see write_watch.rs). Also
    /// when the answer was asked for, for `observe` to tell whether it may be kept.
    async fn get_clear_of_writes(
        &self,
        key: &str,
        fetch: &ByteRange,
    ) -> StoreResult<(Option<(Bytes, ObjectMeta)>, ReadStart)> {
        let mut asks = 0;
        loop {
            asks += 1;
            let start = self.writes.read_starts(key);
            let r = self.inner.get_ranged(key, fetch.clone()).await?;
            if !self.writes.overlapped(&start) || asks == ASKS_PAST_WRITES {
                return Ok((r, start));
            }
            self.writes.writes_done(&start).await;
        }
    }
}

/// The GET for a read of `range`: widened to whole blocks, so that what comes back is kept,
/// and the part asked for (`None`: all of it).
fn widened(range: &ByteRange, bs: u64) -> (ByteRange, Option<Range<u64>>) {
    match range {
        ByteRange::Range(r) if r.end > r.start => {
            let end = if r.end == u64::MAX { u64::MAX } else { r.end.div_ceil(bs) * bs };
            (ByteRange::Range(r.start / bs * bs..end), Some(r.clone()))
        }
        other => (other.clone(), None),
    }
}

/// Wait until the blocks `store_blocks` queued are written (or given up): see the module
/// comment (Memory), the blocks are on disk before the answer goes up.
async fn blocks_written(writes: impl IntoIterator<Item = tokio::sync::oneshot::Receiver<()>>) {
    for w in writes {
        let _ = w.await;
    }
}

/// Block file: MAGIC, header length (u32 LE), header, data, CRC-32C of all before it (u32 LE).
/// Header: key length (u32) + key, version length (u32) + version, object size, block index,
/// data length (u64 each, LE). This returns what comes before the data.
fn encode_header(key: &str, version: &str, size: u64, index: u64, data_len: usize) -> Vec<u8> {
    let mut header = Vec::with_capacity(40 + key.len() + version.len());
    header.extend_from_slice(&(key.len() as u32).to_le_bytes());
    header.extend_from_slice(key.as_bytes());
    header.extend_from_slice(&(version.len() as u32).to_le_bytes());
    header.extend_from_slice(version.as_bytes());
    header.extend_from_slice(&size.to_le_bytes());
    header.extend_from_slice(&index.to_le_bytes());
    header.extend_from_slice(&(data_len as u64).to_le_bytes());
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out
}

/// A whole block file in memory (tests).
#[cfg(test)]
fn encode_block(key: &str, version: &str, size: u64, index: u64, data: &[u8]) -> Vec<u8> {
    let mut out = encode_header(key, version, size, index, data.len());
    out.extend_from_slice(data);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Read a block file of `file_len` bytes, whose data is `out.len()` bytes, into `out`; true when
/// it holds exactly what it must: the bytes before the data as `encode_header` makes them for
/// the key, version, object size, index and length wanted, then the data, then the CRC-32C of
/// all before it, and nothing more. The data goes straight into `out`.
fn read_block_into(mut file: impl Read, file_len: u64, before: &[u8], out: &mut [u8]) -> bool {
    if file_len != (before.len() + out.len() + 4) as u64 {
        return false;
    }
    let mut head = vec![0u8; before.len()];
    let mut crc = [0u8; 4];
    if file.read_exact(&mut head).is_err() || head != before {
        return false;
    }
    if file.read_exact(out).is_err() || file.read_exact(&mut crc).is_err() {
        return false;
    }
    crc32c::crc32c_append(crc32c::crc32c(before), out) == u32::from_le_bytes(crc)
}

/// The CRC-32C of a whole file, read in pieces into one buffer per thread (a buffer of the
/// file's size would cost a page fault per 4 KiB, more than the checksum itself).
fn crc_of(mut file: &File) -> Option<u32> {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 256 << 10]);
    }
    BUF.with_borrow_mut(|buf| {
        let mut crc = 0;
        loop {
            match file.read(buf) {
                Ok(0) => return Some(crc),
                Ok(n) => crc = crc32c::crc32c_append(crc, &buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    })
}

/// The files in the subdirectories of `dir` whose names `parse` takes, with their mtimes and
/// sizes; any other file there is deleted (a leftover of an older layout, or not ours).
fn scan_files<T>(
    dir: &Path,
    parse: impl Fn(&str) -> Option<T>,
) -> std::io::Result<Vec<(SystemTime, T, u64)>> {
    let mut found = Vec::new();
    for sub in std::fs::read_dir(dir)? {
        let sub = sub?;
        if !sub.file_type()?.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(sub.path())? {
            let f = f?;
            let md = f.metadata()?;
            match f.file_name().to_str().and_then(&parse) {
                Some(t) if md.is_file() => {
                    found.push((md.modified().unwrap_or(UNIX_EPOCH), t, md.len()))
                }
                _ => {
                    let _ = std::fs::remove_file(f.path());
                }
            }
        }
    }
    Ok(found)
}

/// `<32 hex>.<rest>` -> the object's name and the rest.
fn split_object_name(name: &str) -> Option<(String, &str)> {
    let (object, rest) = name.split_once('.')?;
    let hex = object.len() == 32 && object.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| (object.to_string(), rest))
}

/// `<32 hex>.<index>` -> the block it names.
fn parse_block_name(name: &str) -> Option<BlockId> {
    let (object, index) = split_object_name(name)?;
    Some(BlockId { object, index: index.parse().ok().filter(|&i| i != COPY)? })
}

/// `<32 hex>.<8 hex>` -> the object a copy file holds, and its CRC-32C.
fn parse_copy_name(name: &str) -> Option<(String, u32)> {
    let (object, crc) = split_object_name(name)?;
    (crc.len() == 8).then_some(())?;
    Some((object, u32::from_str_radix(crc, 16).ok()?))
}

/// The layer as a `Store`: an `Arc` inside, because reads hand work to background tasks.
pub struct DiskCache(pub Arc<DiskCacheStore>);

impl crate::store::layers::Layer for DiskCache {
    type Below = dyn Store;
    fn inner(&self) -> &dyn Store {
        &*self.0.inner
    }
}

#[async_trait]
impl crate::store::layers::ReadLayer for DiskCache {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        crate::store::found(key, self.0.read(key, ByteRange::Range(0..u64::MAX)).await?)
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        if range.end <= range.start {
            return Ok(Bytes::new());
        }
        crate::store::found(key, self.0.read(key, ByteRange::Range(range)).await?)
    }

    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        self.0.read(key, range).await
    }

    /// An earlier daemon's answer within the TTL (a lookup, a listing of the parent, or a
    /// version learned by a read), or this one's, is used as it is, as for `lookup`: a chunk file looked up
    /// by HEAD alone (see `view::chunk_lookup`) costs no request on a warm remount. A found
    /// object's version is kept for the next daemon.
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if let Some(m) = self.0.journal.replayed_head(key) {
            return Ok(m);
        }
        // What this daemon saw within the TTL, as a read would trust it.
        if let Some(m) = self.0.fresh_meta(key) {
            return Ok(Some(m));
        }
        let start = self.0.writes.read_starts(key);
        let m = self.0.inner.head(key).await?;
        self.0.observe(key, m.as_ref(), Answer::CONFIRMED, &start);
        Ok(m)
    }
}

#[async_trait]
impl crate::store::layers::ListLayer for DiskCache {
    // Listings and lookups: an earlier daemon's answer within the TTL is used as it is (the
    // versions it names were seeded into `known` at open); this run's answers are recorded.
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        if let Some(listing) = self.0.journal.replayed_list(prefix) {
            return Ok(listing);
        }
        let start = self.0.writes.listing_starts();
        let since = self.0.journal.forgets();
        let listing = self.0.inner.list(prefix).await?;
        for (name, meta) in &listing.files {
            let key = crate::store::join_key(prefix, name);
            self.0.observe(&key, Some(meta), Answer::LOOKUP, &start.of(&key));
        }
        self.0.journal.record_list(since, prefix, &listing);
        Ok(listing)
    }

    /// A listing the journal holds (from this daemon or an earlier one) is answered whole, as
    /// `list` answers it. One from the store goes out page by page and is recorded once its
    /// last page arrived (a listing dropped midway or failed is not recorded).
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        use futures::StreamExt;
        if let Some(listing) = self.0.journal.replayed_list(prefix) {
            return Box::pin(futures::stream::once(async move { Ok(listing) }));
        }
        let whole = Arc::new(Mutex::new(Some(Listing::default())));
        let collect = whole.clone();
        let start = self.0.writes.listing_starts();
        let since = self.0.journal.forgets();
        let pages = self.0.inner.list_pages(prefix).inspect(move |page| {
            let mut whole = crate::locks::lock(&collect);
            match page {
                Ok(l) => {
                    for (name, meta) in &l.files {
                        let key = crate::store::join_key(prefix, name);
                        self.0.observe(&key, Some(meta), Answer::LOOKUP, &start.of(&key));
                    }
                    if let Some(w) = whole.as_mut() {
                        w.files.extend(l.files.iter().cloned());
                        w.dirs.extend(l.dirs.iter().cloned());
                    }
                }
                Err(_) => *whole = None,
            }
        });
        let record = futures::stream::once(async move {
            let done = crate::locks::lock(&whole).take();
            if let Some(mut listing) = done {
                listing.files.sort_by(|a, b| a.0.cmp(&b.0));
                listing.dirs.sort();
                self.0.journal.record_list(since, prefix, &listing);
            }
        })
        .filter_map(|()| async { None });
        Box::pin(pages.chain(record))
    }

    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        if let Some(l) = self.0.journal.replayed_lookup(key) {
            return Ok(l);
        }
        let since = self.0.journal.forgets();
        let start = self.0.writes.read_starts(key);
        let l = self.0.inner.lookup(key).await?;
        // Not kept when a write went through meanwhile: the answer may predate it.
        if self.0.journal.record_lookup(since, key, &l) && !key.is_empty() {
            self.0.observe(key, l.file.as_ref(), Answer::LOOKUP, &start);
        }
        Ok(l)
    }

    /// As `lookup`; the bytes it brought (all of a metadata document) are kept as a read's
    /// are, so the next daemon reads the document with no request either.
    async fn lookup_reading(&self, key: &str, limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        if let Some(l) = self.0.journal.replayed_lookup(key) {
            return Ok((l, None));
        }
        let since = self.0.journal.forgets();
        let start = self.0.writes.read_starts(key);
        // A document whose copy is on disk from an earlier daemon: confirmed rather than read
        // again (a lookup of a document's name never answers a directory, see `Store`).
        if let Some(known) = self.0.known_meta(key).filter(|m| m.size <= limit) {
            let whole = ByteRange::Range(0..u64::MAX);
            if self.0.fresh_meta(key).is_none() && self.0.holds_any(key, &known, &whole) {
                match self.0.revalidate(key, &whole, known).await? {
                    Ok(known) => {
                        let l = Lookup { file: Some(known), dir: false, dir_perms: None };
                        self.0.journal.record_lookup(since, key, &l);
                        let data = self.0.read(key, whole).await?.map(|(d, _)| d);
                        return Ok((l, data));
                    }
                    Err(Some((data, meta))) => {
                        let l = Lookup { file: Some(meta.clone()), dir: false, dir_perms: None };
                        if self.0.observe(key, Some(&meta), Answer::READ, &start) {
                            self.0.journal.record_lookup(since, key, &l);
                            let fetched = Fetched { start: 0, data: data.clone() };
                            blocks_written(self.0.store_blocks(key, &meta, &fetched)).await;
                        }
                        return Ok((l, Some(data)));
                    }
                    // Deleted: a directory of that name may still be there.
                    Err(None) => {
                        self.0.observe(key, None, Answer::READ, &start);
                    }
                }
            }
        }
        let (l, data) = self.0.inner.lookup_reading(key, limit).await?;
        // (Not kept when a write went through meanwhile: see `lookup`; `observe` checks too.)
        if key.is_empty() || !self.0.journal.record_lookup(since, key, &l) {
            return Ok((l, data));
        }
        match (&l.file, &data) {
            (Some(meta), Some(bytes)) if bytes.len() as u64 == meta.size && meta.size > 0 => {
                if self.0.observe(key, Some(meta), Answer::CONFIRMED, &start) {
                    let fetched = Fetched { start: 0, data: bytes.clone() };
                    blocks_written(self.0.store_blocks(key, meta, &fetched)).await;
                }
            }
            (file, _) => {
                self.0.observe(key, file.as_ref(), Answer::LOOKUP, &start);
            }
        }
        Ok((l, data))
    }
}

#[async_trait]
impl crate::store::layers::WriteLayer for DiskCache {
    // Writes go through to the backend; the key's version is forgotten before and after, so
    // whatever the outcome (a lost condition included) the next read asks the backend again.
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        let _writing = self.0.writes.writing(&[key]);
        self.0.forget(key);
        let r = self.0.inner.put_opts(key, data, mode).await;
        self.0.forget(key);
        r
    }

    async fn put_file(
        &self,
        key: &str,
        file: std::sync::Arc<std::fs::File>,
        len: u64,
        mode: PutMode,
    ) -> StoreResult<()> {
        let _writing = self.0.writes.writing(&[key]);
        self.0.forget(key);
        let r = self.0.inner.put_file(key, file, len, mode).await;
        self.0.forget(key);
        r
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        let _writing = self.0.writes.writing(&[key]);
        self.0.forget(key);
        let r = self.0.inner.delete(key).await;
        self.0.forget(key);
        r
    }

    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        let _writing = self.0.writes.writing(&[key]);
        self.0.forget(key);
        let r = self.0.inner.delete_if_version(key, version).await;
        self.0.forget(key);
        r
    }

    async fn create_dir(&self, key: &str) -> StoreResult<()> {
        let _writing = self.0.writes.writing(&[key]);
        self.0.forget(key);
        let r = self.0.inner.create_dir(key).await;
        self.0.forget(key);
        r
    }

    async fn remove_dir(&self, key: &str) -> StoreResult<()> {
        let _writing = self.0.writes.writing(&[key]);
        self.0.forget(key);
        let r = self.0.inner.remove_dir(key).await;
        self.0.forget(key);
        r
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        let _writing = self.0.writes.writing(&[from, to]);
        self.0.forget(from);
        self.0.forget(to);
        let r = self.0.inner.rename(from, to).await;
        self.0.forget(from);
        self.0.forget(to);
        r
    }

    async fn rename_dir(&self, from: &str, to: &str) -> StoreResult<()> {
        let _writing = self.0.writes.writing_all();
        self.0.forget_prefix(from);
        self.0.forget_prefix(to);
        let r = self.0.inner.rename_dir(from, to).await;
        self.0.forget_prefix(from);
        self.0.forget_prefix(to);
        r
    }
}

impl crate::store::layers::HintsLayer for DiskCache {
    fn local_copy(&self, key: &str, version: &str) -> Option<std::fs::File> {
        self.0.local_copy(key, version)
    }

    fn keeps_local_copy(&self, key: &str) -> bool {
        self.0.keeps_local_copy(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::layers::recording::{RecordingStore, READS};
    use crate::store::prelude::*;

    const BS: u64 = 1000;

    fn data(n: usize, seed: u8) -> Bytes {
        Bytes::from(
            (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect::<Vec<_>>(),
        )
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

    fn open_cfg(
        rec: &Arc<RecordingStore>,
        dir: &Path,
        cfg: DiskCacheConfig,
    ) -> Arc<DiskCacheStore> {
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
        let (_, meta) =
            store.get_ranged("a/big", ByteRange::Range(0..5500)).await.unwrap().unwrap();
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

    impl crate::store::layers::Layer for ListingDouble {
        type Below = dyn Store;
        fn inner(&self) -> &dyn Store {
            &*self.inner
        }
    }

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

    /// The cache in `dir` over a `ListingDouble` of `rec`, keeping blocks only.
    fn open_listed(
        rec: &Arc<RecordingStore>,
        dir: &Path,
        hidden: Vec<&'static str>,
        untagged: bool,
    ) -> Arc<DiskCacheStore> {
        let lock = Arc::new(DirLock::acquire(dir).unwrap());
        let double = ListingDouble { inner: rec.clone(), hidden, untagged };
        let cfg =
            DiskCacheConfig { max_bytes: 1 << 20, block_size: BS, copy_max: 0, ttl: LISTED_TTL };
        Arc::new(DiskCacheStore::open(Arc::new(double), lock, cfg).unwrap())
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
        assert_eq!(
            shown(&rec),
            want,
            "its own listing and the {DIRS_AHEAD} after it, nothing else"
        );
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

    impl crate::store::layers::Layer for FreshBuffers {
        type Below = dyn Store;
        fn inner(&self) -> &dyn Store {
            &*self.0
        }
    }

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

    fn open_with_copies(
        rec: &Arc<RecordingStore>,
        dir: &Path,
        max_bytes: u64,
    ) -> Arc<DiskCacheStore> {
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

    impl crate::store::layers::Layer for HeldAnswer {
        type Below = dyn Store;
        fn inner(&self) -> &dyn Store {
            &*self.inner
        }
    }

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
}
