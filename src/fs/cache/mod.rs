//! What the mount remembers of the namespace: resolved nodes by path (and known absences)
//! within the metadata TTL, the paths changed through the mount (so that an answer that
//! overlapped a change is not cached), directory trees dropped by a rename or removal, and the
//! content version of each inode that the kernel last saw.

pub mod changes;
pub mod trees;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::fs::cache::changes::{ChangeLog, Watch};
use crate::fs::cache::trees::DroppedTrees;
use crate::locks::lock;
use crate::views::shared::mapping::node::Node;

/// Entries of the metadata cache unless `--metadata-cache-entries` says otherwise. Each costs
/// about 300 bytes (the path, the node with its key and version, the LRU links and slot), so
/// 200,000 is ~60 MB. Measured in a walk of 1,000,000 keys (`git show 6624a29:BENCHMARKS.md`, section 11): 500,000
/// cost ~150 MB there and gave no hits (an LRU smaller than a walk never hits on the next one).
pub const METADATA_CACHE_ENTRIES: usize = 200_000;

/// path -> resolved node (None = known absent), with the time it was resolved.
pub type Entries = LruCache<String, (Option<Node>, Instant)>;

pub struct NodeCache {
    ttl: Duration,
    nodes: Mutex<Entries>,
    /// Paths changed through the mount, for lookups and listings that overlapped the change.
    changes: Arc<ChangeLog>,
    /// Directory trees renamed or removed (see `trees`).
    dropped_trees: Mutex<DroppedTrees>,
    /// ino -> content version at its last open (or, without opens, the last one the kernel was
    /// shown), to tell the kernel when its cache is still good.
    versions: Mutex<HashMap<u64, String>>,
    /// Directory ino -> when it was last listed whole (the kernel caches that listing).
    dirs_listed: Mutex<HashMap<u64, Instant>>,
}

impl NodeCache {
    pub fn new(ttl: Duration) -> NodeCache {
        NodeCache {
            ttl,
            nodes: Mutex::new(LruCache::new(
                NonZeroUsize::new(METADATA_CACHE_ENTRIES).expect("nonzero"),
            )),
            changes: Arc::new(ChangeLog::default()),
            dropped_trees: Mutex::new(DroppedTrees::new(ttl)),
            versions: Mutex::new(HashMap::new()),
            dirs_listed: Mutex::new(HashMap::new()),
        }
    }

    /// Hold at most `n` entries (the least recently used go first).
    pub fn set_capacity(&self, n: NonZeroUsize) {
        lock(&self.nodes).resize(n);
    }

    /// Start watching for changes through the mount, before asking the namespace.
    pub fn watch(&self) -> Watch {
        self.changes.watch()
    }

    /// The change log itself, for a listing whose pages are asked for by a task of their own
    /// (each page under its own `Watch`, see `listing`).
    pub fn change_log(&self) -> Arc<ChangeLog> {
        self.changes.clone()
    }

    /// The entries themselves, locked, for a listing that caches many at once (each only if
    /// its path did not change under the listing's `Watch`, see `cache_node`).
    pub fn lock_entries(&self) -> MutexGuard<'_, Entries> {
        lock(&self.nodes)
    }

    /// `path` changed through the mount: drop what is cached of it. The change is noted
    /// before the entry goes, so a lookup that finds no change (under the cache lock, see
    /// `cache_node`) has its entry dropped here afterwards.
    pub fn invalidate(&self, path: &str) {
        self.changes.note(path);
        lock(&self.nodes).pop(path);
    }

    /// Drop everything cached at or below `path` (after a directory rename or removal).
    /// One record, not a scan of the cache (see `trees`); entries below are dropped lazily.
    pub fn invalidate_tree(&self, path: &str) {
        self.changes.note(path);
        let mut nodes = lock(&self.nodes);
        if !lock(&self.dropped_trees).drop_tree(path) {
            nodes.clear();
        }
    }

    /// A cache entry of `path` made at `at` that is within the TTL and below no tree dropped
    /// since.
    fn fresh(&self, path: &str, at: Instant) -> bool {
        crate::clock::since(at) < self.ttl && lock(&self.dropped_trees).valid(path, at)
    }

    /// The fresh cached answer for `path` (`Some(None)`: known absent), if there is one.
    pub fn get(&self, path: &str) -> Option<Option<Node>> {
        let cached = lock(&self.nodes).get(path).cloned();
        match cached {
            Some((node, at)) if self.fresh(path, at) => Some(node),
            _ => None,
        }
    }

    /// Cache what a lookup under `watch` found, unless the path changed through the mount
    /// meanwhile (the answer may predate the change). Returns whether it was cached.
    pub fn cache_node(&self, watch: &Watch, path: &str, node: Option<Node>) -> bool {
        let mut nodes = lock(&self.nodes);
        let fresh = !watch.changed(path);
        if fresh {
            nodes.put(path.to_string(), (node, crate::clock::now()));
        }
        fresh
    }

    /// Record `version` as the one the kernel has of `ino`. Returns whether it had another one
    /// (its cached pages are stale).
    pub fn note_version(&self, ino: u64, version: String) -> bool {
        let mut versions = lock(&self.versions);
        match versions.get(&ino) {
            Some(old) if *old == version => false,
            old => {
                let changed = old.is_some();
                versions.insert(ino, version);
                changed
            }
        }
    }

    /// An open of `ino` at `node`: whether the kernel may keep its cached pages (the content
    /// version is the one of the previous open).
    pub fn keep_cache(&self, ino: u64, node: &Node) -> bool {
        let Some(v) = node.content_version() else { return false };
        let mut versions = lock(&self.versions);
        let same = versions.get(&ino) == Some(&v);
        versions.insert(ino, v);
        same
    }

    /// The kernel's copy of `ino` is not to be trusted (opened for writing, changed, or gone).
    pub fn forget_version(&self, ino: u64) {
        lock(&self.versions).remove(&ino);
    }

    /// The directory `ino` was listed whole from a read that started `at`.
    pub fn listed(&self, ino: u64, at: Instant) {
        lock(&self.dirs_listed).insert(ino, at);
    }

    /// Whether the kernel's cached listing of directory `ino` (if it has one) is within the TTL.
    pub fn listing_fresh(&self, ino: u64) -> bool {
        lock(&self.dirs_listed).get(&ino).is_some_and(|at| crate::clock::since(*at) < self.ttl)
    }

    /// `ino` no longer exists: nothing the kernel had of it is to be trusted.
    pub fn forget_inode(&self, ino: u64) {
        self.forget_version(ino);
        lock(&self.dirs_listed).remove(&ino);
    }
}
