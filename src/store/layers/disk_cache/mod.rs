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
//! listing page of that directory for all of them (`confirm_directory`: a reader opening files
//! by name makes no listing, and a conditional GET each would be a round trip each), and the
//! listings of the directories a read-ahead policy above the store says the reader goes to
//! next beside it (`confirm_next_directories`); what the page did not confirm, and an object
//! alone in its directory, has one conditional GET (`ReadStore::get_if_changed`): unchanged,
//! the blocks are served; changed, the answer carries the new bytes; deleted, the read finds
//! nothing. Any answer naming another version drops the old version's files (`drop_version`). The journal
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
//!
//! Where each part lives: `lock.rs` (the directory lock), `options.rs` (what the command line
//! sets), `format.rs` (file names and the block format), `index.rs` (the LRU index and
//! eviction), `load.rs` (files read back, checked), `writer.rs` (the writer thread),
//! `freshness.rs` (known versions and revalidation), `confirm.rs` (confirming listings),
//! `read.rs` (the read path), `layer.rs` (the `Store` layer), `stats.rs` (counters).

mod confirm;
mod format;
mod freshness;
mod index;
mod layer;
mod load;
mod lock;
mod options;
mod read;
mod stats;
#[cfg(test)]
mod tests;
mod writer;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;

use super::disk_meta::{to_keep, MetaJournal};
use super::known_objects::KnownObjects;
use super::listing_flights::ListingFlights;
use super::write_watch::WriteWatch;
use crate::store::{NextDirs, Store};
use format::{parse_block_name, parse_copy_name, scan_files};
use index::{BlockId, CopyFile, State, COPY, TOUCH_EVERY};
use writer::{spawn_writer, WriteJob};

pub use layer::DiskCache;
pub use lock::DirLock;
pub use options::{
    vouches_for, DiskCacheConfig, DiskCacheOptions, BLOCK_SIZE, COPY_MAX, DEFAULT_MAX_BYTES,
    IMMUTABLE_TRUST,
};
pub use stats::DiskCacheStats;
pub use writer::wait_for_queued_writes;

/// How many objects' metadata (version, size) this layer remembers.
const KNOWN_OBJECTS: usize = 200_000;

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
    /// Which directories a reader goes to next, whose listings go out beside one confirming
    /// (`with_next_dirs`; none by default).
    next_dirs: Option<NextDirs>,
    _lock: Arc<DirLock>,
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
            next_dirs: None,
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

    /// Confirm the directories `policy` names beside a directory this cache confirms (see
    /// `confirm_next_directories`).
    pub fn with_next_dirs(mut self, policy: NextDirs) -> Self {
        self.next_dirs = Some(policy);
        self
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
}
