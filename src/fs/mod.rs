//! The filesystem on inodes: everything FUSE asks, answered in plain Rust types so that tests
//! can drive it without a kernel. `fuse::adapter` is the thin layer that turns these answers
//! into fuser replies.
//!
//! Owns: the inode table, the metadata cache, open handles and the write buffers of open files.
//! A file open for writing is buffered whole in memory and written to the namespace as one
//! object on flush (close) and release, so the backend never sees half a chunk. Files named
//! `*.partial` (temp files that writers such as zarr-python rename over their target) are kept
//! in memory until renamed, so only the final key is ever written to the backend.

pub mod changes;
pub mod decoded_cache;
pub mod error;
pub mod inode;
pub mod listing;
pub mod namespace;
pub mod presented;
pub mod readahead;
pub mod scan_ahead;
pub mod shard_indexes;
pub mod shard_writer;
pub mod spill;
pub mod trees;
pub mod unsharded;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use lru::LruCache;

use changes::{ChangeLog, Watch};
pub use error::{FsError, FsResult};
use inode::InodeTable;
use namespace::Namespace;

use crate::locks::lock;
use crate::store::{join_key, split_key};
use crate::view::node::{Backing, Node};

#[derive(Debug, Clone)]
pub struct FsConfig {
    /// How long resolved paths (and absences) are trusted before asking the store again.
    pub metadata_ttl: Duration,
    pub read_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Dir,
    File,
}

/// Attributes of one inode, as the mount shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    pub size: u64,
    pub mtime: SystemTime,
    pub perm: u16,
    /// 0 for a file unlinked while open, else 1 (files) or 2 (directories).
    pub nlink: u32,
}

#[derive(Debug, Clone)]
pub struct DirEntry {
    pub ino: u64,
    pub name: String,
    pub kind: FileKind,
    /// The attributes at opendir, for READDIRPLUS (ignored by the kernel for `.` and `..`).
    pub attr: Attr,
}

#[derive(Debug, Clone, Copy)]
pub struct Opened {
    pub fh: u64,
    /// The content is the same as at the previous open: the kernel may keep its page cache.
    pub keep_cache: bool,
    /// Opened for reading only: close() needs no flush round trip.
    pub read_only: bool,
}

/// What `setattr` may change.
#[derive(Debug, Default, Clone, Copy)]
pub struct SetAttr {
    pub size: Option<u64>,
    /// The handle a truncation came with (ftruncate(), open(O_TRUNC)).
    pub fh: Option<u64>,
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// Buffered content of a file open for writing (shared by every handle on that path).
struct WriteBuf {
    path: String,
    /// In memory while small, else in a spill file (see `spill`).
    data: spill::Buffer,
    dirty: bool,
    handles: usize,
    /// A temp file (`*.partial`): kept here, never written to the backend under its own name.
    staged: bool,
    /// Unlinked while open: never written back.
    unlinked: bool,
    /// The last write-back failed: every writer's close tries again.
    failed: bool,
    /// Made with `O_CREAT|O_EXCL`: the first write-back creates the key only if the store has
    /// none (another daemon may have made it since the open), else EEXIST and nothing stored.
    exclusive: bool,
    modified: SystemTime,
}

type SharedBuf = Arc<tokio::sync::Mutex<WriteBuf>>;

impl WriteBuf {
    /// A buffer for `path` with one handle on it; `dirty` when it must be written back even
    /// unchanged (a new or truncated file).
    fn shared(
        spill: &Arc<spill::Spill>,
        path: &str,
        data: Vec<u8>,
        dirty: bool,
    ) -> FsResult<SharedBuf> {
        let data = spill::Buffer::new(spill.clone(), data).map_err(|e| io_err(path, e))?;
        Ok(Arc::new(tokio::sync::Mutex::new(WriteBuf {
            path: path.to_string(),
            data,
            dirty,
            handles: 1,
            staged: is_staged_name(split_key(path).1),
            unlinked: false,
            failed: false,
            exclusive: false,
            modified: SystemTime::now(),
        })))
    }
}

fn is_too_large(e: &FsError) -> bool {
    match e {
        FsError::TooLarge(_) => true,
        FsError::Shared(e) => is_too_large(e),
        _ => false,
    }
}

/// A spill-file error (e.g. ENOSPC in the spill directory) as the writer sees it.
fn io_err(path: &str, e: std::io::Error) -> FsError {
    FsError::Store(crate::store::StoreError::from_io(path, e))
}
type SharedReadAhead = Arc<tokio::sync::Mutex<readahead::ReadAhead>>;

enum Handle {
    /// `buf`: the write buffer of the path, read by readers too (they see the writer's
    /// progress); only a handle that `writes` writes it back, and only when it is `dirty`
    /// (it wrote or truncated since its last flush). So the late RELEASE of a closed handle
    /// does not store the half-written buffer of the next open of the same file.
    File {
        ino: u64,
        path: String,
        node: Option<Node>,
        buf: Option<SharedBuf>,
        writes: bool,
        dirty: bool,
        ra: Option<SharedReadAhead>,
    },
    /// An open directory: its listing, read from the first readdir on (see `listing`).
    Dir(Arc<listing::DirListing>),
}

/// An open directory.
#[derive(Debug, Clone, Copy)]
pub struct OpenedDir {
    pub fh: u64,
    /// The kernel's cached listing of this directory (if it has one) is younger than the
    /// metadata TTL: it may serve readdir from it without asking.
    pub keep_cache: bool,
}

const METADATA_CACHE_ENTRIES: usize = 500_000;
/// Read-ahead states kept per inode when the kernel sends no OPEN (and so no RELEASE to end them).
const INODE_READAHEADS: usize = 64;
/// Files fetched ahead of a reader that reads a directory's files in listing order.
const SCAN_AHEAD_FILES: usize = 8;
const MAX_NAME_LEN: usize = 255;

pub struct ZarrFs {
    ns: Arc<dyn Namespace>,
    cfg: FsConfig,
    inodes: Mutex<InodeTable>,
    /// path -> resolved node (None = known absent), with the time it was resolved.
    nodes: Mutex<LruCache<String, (Option<Node>, Instant)>>,
    bufs: Mutex<HashMap<String, SharedBuf>>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    /// ino -> content version at its last open (or, without opens, the last one the kernel was
    /// shown), to tell the kernel when its cache is still good.
    versions: Mutex<HashMap<u64, String>>,
    /// Memory for read-ahead, shared by every file of the mount.
    readahead_budget: Arc<readahead::Budget>,
    /// The kernel sends no OPEN/RELEASE (read-only mounts, see `serve_without_open`): reads come
    /// with handle 0 and are served by inode.
    openless: AtomicBool,
    /// Read-ahead per inode for reads without a handle.
    inode_readaheads: Mutex<LruCache<u64, SharedReadAhead>>,
    /// Tells the kernel to drop its cached pages of an inode (set by the FUSE session).
    invalidator: OnceLock<Box<dyn Fn(u64) + Send + Sync>>,
    /// Directory ino -> when it was last listed (the kernel caches that listing).
    dirs_listed: Mutex<HashMap<u64, Instant>>,
    /// Paths changed through the mount, for lookups and listings that overlapped the change.
    changes: Arc<ChangeLog>,
    /// Which files to fetch ahead of a reader scanning a directory.
    scans: scan_ahead::ScanAhead,
    /// Where write buffers go once too large for memory, and the memory they may hold.
    spill: Arc<spill::Spill>,
    /// Directory trees renamed or removed, for the metadata cache (see `trees`).
    dropped_trees: Mutex<trees::DroppedTrees>,
}

/// See `ZarrFs::gauges`.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsGauges {
    pub open_handles: u64,
    pub known_inodes: u64,
    /// Files with a write buffer in memory (written and not yet closed, or failed to store).
    pub write_buffers: u64,
    pub buffer_bytes: u64,
}

/// What a write buffer shows as a file.
fn buf_node(b: &WriteBuf) -> Node {
    Node {
        size: b.data.len(),
        modified: b.modified,
        backing: Backing::Object { key: b.path.clone(), version: "pending".into() },
    }
}

/// Another writer handle on an existing buffer.
async fn join_buf(buf: SharedBuf, truncating: bool) -> SharedBuf {
    let mut b = buf.lock().await;
    b.handles += 1;
    if truncating {
        b.data.clear();
        b.dirty = true;
    }
    drop(b);
    buf
}

async fn truncate_buf(buf: &SharedBuf, size: u64) -> FsResult<()> {
    let mut b = buf.lock().await;
    let path = b.path.clone();
    b.data.truncate(size).map_err(|e| io_err(&path, e))?;
    b.dirty = true;
    b.modified = SystemTime::now();
    Ok(())
}

/// Temp files that writers rename over the real key.
pub fn is_staged_name(name: &str) -> bool {
    name.ends_with(".partial")
}

impl ZarrFs {
    pub fn new(ns: Arc<dyn Namespace>, cfg: FsConfig) -> Self {
        let cfg_ttl = cfg.metadata_ttl;
        ZarrFs {
            ns,
            cfg,
            inodes: Mutex::new(InodeTable::default()),
            nodes: Mutex::new(LruCache::new(
                NonZeroUsize::new(METADATA_CACHE_ENTRIES).expect("nonzero"),
            )),
            bufs: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            versions: Mutex::new(HashMap::new()),
            readahead_budget: readahead::Budget::new(readahead::DEFAULT_BUDGET),
            openless: AtomicBool::new(false),
            inode_readaheads: Mutex::new(LruCache::new(
                NonZeroUsize::new(INODE_READAHEADS).expect("nonzero"),
            )),
            invalidator: OnceLock::new(),
            dirs_listed: Mutex::new(HashMap::new()),
            changes: Arc::new(ChangeLog::default()),
            scans: scan_ahead::ScanAhead::new(SCAN_AHEAD_FILES),
            spill: spill::Spill::new(spill::SpillConfig::default()),
            dropped_trees: Mutex::new(trees::DroppedTrees::new(cfg_ttl)),
        }
    }

    /// Use `spill` (`--spill-dir`, `--write-buffer-budget`) for write buffers from now on.
    pub fn with_spill(mut self, spill: Arc<spill::Spill>) -> Self {
        self.spill = spill;
        self
    }

    /// The write buffers' spill directory and memory accounting.
    pub fn spill(&self) -> &Arc<spill::Spill> {
        &self.spill
    }

    /// Serve reads without OPEN and RELEASE, for a kernel that stops sending them once OPEN
    /// answers ENOSYS. Only a read-only mount can: writes need handles. The kernel then keeps
    /// its page cache across opens, so a changed content version (seen at a lookup, getattr or
    /// read) is answered with an invalidation instead of at open. Returns whether it is on.
    pub fn serve_without_open(&self) -> bool {
        if self.cfg.read_only {
            self.openless.store(true, Ordering::Relaxed);
        }
        self.openless.load(Ordering::Relaxed)
    }

    pub fn is_openless(&self) -> bool {
        self.openless.load(Ordering::Relaxed)
    }

    /// How to tell the kernel to drop its cached pages of an inode. Called from any thread,
    /// including the FUSE dispatch thread, so it must not block on the kernel.
    pub fn set_invalidator(&self, f: Box<dyn Fn(u64) + Send + Sync>) {
        let _ = self.invalidator.set(f);
    }

    /// Without opens: the kernel is about to get (or has read) `node`'s content for `ino`. If
    /// it is not the version it saw last, its cached pages are stale: drop them.
    fn note_version(&self, ino: u64, node: &Node) {
        if !self.is_openless() {
            return;
        }
        let Some(v) = node.content_version() else { return };
        let changed = {
            let mut versions = lock(&self.versions);
            match versions.get(&ino) {
                Some(old) if *old == v => return,
                old => {
                    let changed = old.is_some();
                    versions.insert(ino, v);
                    changed
                }
            }
        };
        if changed {
            lock(&self.inode_readaheads).pop(&ino);
            if let Some(invalidate) = self.invalidator.get() {
                invalidate(ino);
            }
        }
    }

    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    // ---- paths, caches ----

    /// The path of a live inode. ESTALE for one whose name was unlinked or replaced through
    /// the mount: the name now leads elsewhere (or nowhere), so the kernel must look it up again.
    fn path_of(&self, ino: u64) -> FsResult<String> {
        let inodes = lock(&self.inodes);
        let path = inodes.path(ino).ok_or(FsError::NotFound)?;
        if !inodes.is_linked(ino) {
            return Err(FsError::Stale);
        }
        Ok(path.to_string())
    }

    /// An open handle's view of an inode whose name is gone (see `path_of`): its write buffer
    /// (a writer's, if any), or the node it was opened on.
    fn open_content(&self, ino: u64) -> Option<(Option<SharedBuf>, Option<Node>)> {
        let handles = lock(&self.handles);
        let mut found = None;
        for h in handles.values() {
            if let Handle::File { ino: i, buf, node, writes, .. } = h {
                if *i == ino && (found.is_none() || *writes) {
                    found = Some((buf.clone(), node.clone()));
                }
            }
        }
        found
    }

    /// fstat() of a file unlinked (or replaced) while open: what the open handle holds, with no
    /// links. Without an open handle the inode is just stale.
    async fn unlinked_attr(&self, ino: u64) -> FsResult<Attr> {
        let node = match self.open_content(ino) {
            Some((Some(buf), _)) => buf_node(&*buf.lock().await),
            Some((None, Some(node))) => node,
            _ => return Err(FsError::Stale),
        };
        Ok(Attr { nlink: 0, ..self.attr_of(ino, &node) })
    }

    fn child_path(&self, parent: u64, name: &str) -> FsResult<String> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(FsError::InvalidName("not a single path component"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        Ok(join_key(&self.path_of(parent)?, name))
    }

    /// `path` changed through the mount: drop what is cached of it. The change is noted
    /// before the entry goes, so a lookup that finds no change (under the cache lock, see
    /// `cache_node`) has its entry dropped here afterwards.
    fn invalidate(&self, path: &str) {
        self.changes.note(path);
        lock(&self.nodes).pop(path);
    }

    /// Drop everything cached at or below `path` (after a directory rename or removal).
    /// One record, not a scan of the cache (see `trees`); entries below are dropped lazily.
    fn invalidate_tree(&self, path: &str) {
        self.changes.note(path);
        let mut nodes = lock(&self.nodes);
        if !lock(&self.dropped_trees).drop_tree(path) {
            nodes.clear();
        }
    }

    /// A cache entry of `path` made at `at` that is within the TTL and below no tree dropped
    /// since.
    fn fresh(&self, path: &str, at: Instant) -> bool {
        at.elapsed() < self.cfg.metadata_ttl && lock(&self.dropped_trees).valid(path, at)
    }

    /// Cache what a lookup under `watch` found, unless the path changed through the mount
    /// meanwhile (the answer may predate the change). Returns whether it was cached.
    fn cache_node(&self, watch: &Watch, path: &str, node: Option<Node>) -> bool {
        let mut nodes = lock(&self.nodes);
        let fresh = !watch.changed(path);
        if fresh {
            nodes.put(path.to_string(), (node, Instant::now()));
        }
        fresh
    }

    async fn pending_node(&self, path: &str) -> Option<Node> {
        let buf = lock(&self.bufs).get(path).cloned()?;
        let b = buf.lock().await;
        (!b.unlinked).then(|| buf_node(&b))
    }

    /// What `path` is now: an open write buffer, a fresh cache entry, or the namespace's answer.
    async fn resolve(&self, path: &str) -> FsResult<Option<Node>> {
        if let Some(node) = self.pending_node(path).await {
            return Ok(Some(node));
        }
        let cached = lock(&self.nodes).get(path).cloned();
        if let Some((node, at)) = cached {
            if self.fresh(path, at) {
                return Ok(node);
            }
        }
        // A change through the mount during the lookup may be newer than its answer: ask
        // again. After a few tries (the path keeps changing) the last answer goes uncached.
        let mut tries = 0;
        loop {
            let watch = self.changes.watch();
            let node = self.ns.lookup(path).await?;
            tries += 1;
            if self.cache_node(&watch, path, node.clone()) || tries == 3 {
                return Ok(node);
            }
        }
    }

    fn attr_of(&self, ino: u64, node: &Node) -> Attr {
        let (kind, perm) =
            if node.is_dir() { (FileKind::Dir, 0o755) } else { (FileKind::File, 0o644) };
        let perm = if self.cfg.read_only { perm & 0o555 } else { perm };
        let nlink = if kind == FileKind::Dir { 2 } else { 1 };
        Attr { ino, kind, size: node.size, mtime: node.modified, perm, nlink }
    }

    fn check_rw(&self) -> FsResult<()> {
        if self.cfg.read_only {
            Err(FsError::ReadOnly("mounted with --read-only"))
        } else {
            Ok(())
        }
    }

    // ---- lookups ----

    pub async fn lookup(&self, parent: u64, name: &str) -> FsResult<Attr> {
        let path = self.child_path(parent, name)?;
        let node = self.resolve(&path).await?.ok_or(FsError::NotFound)?;
        let ino = lock(&self.inodes).get_or_insert(&path, true);
        self.note_version(ino, &node);
        Ok(self.attr_of(ino, &node))
    }

    pub fn forget(&self, ino: u64, n: u64) {
        if lock(&self.inodes).forget(ino, n) {
            self.inode_gone(ino);
        }
    }

    /// What hangs off an inode that no longer exists.
    fn inode_gone(&self, ino: u64) {
        lock(&self.versions).remove(&ino);
        lock(&self.inode_readaheads).pop(&ino);
        lock(&self.dirs_listed).remove(&ino);
    }

    /// A listing is gone: the inodes only it held go too.
    fn unpin_listing(&self, entries: &[DirEntry]) {
        let gone: Vec<u64> = {
            let mut inodes = lock(&self.inodes);
            entries.iter().map(|e| e.ino).filter(|&ino| inodes.unpin(ino)).collect()
        };
        for ino in gone {
            self.inode_gone(ino);
        }
    }

    pub async fn getattr(&self, ino: u64) -> FsResult<Attr> {
        let path = match self.path_of(ino) {
            Err(FsError::Stale) => return self.unlinked_attr(ino).await,
            r => r?,
        };
        let node = self.resolve(&path).await?.ok_or(FsError::NotFound)?;
        self.note_version(ino, &node);
        Ok(self.attr_of(ino, &node))
    }

    /// `set.uid`/`set.gid` are owner changes (the adapter drops a chown to the owner shown).
    pub async fn setattr(&self, ino: u64, set: SetAttr) -> FsResult<Attr> {
        if set.uid.is_some() || set.gid.is_some() {
            return Err(FsError::NotPermitted("a store has no permissions or owners"));
        }
        if let Some(mode) = set.mode {
            // A chmod to the mode shown changes nothing, so it succeeds (tools such as
            // pjdfstest and `install -m` set the mode a new file already has).
            if mode & 0o7777 != self.getattr(ino).await?.perm as u32 {
                return Err(FsError::NotPermitted("a store has no permissions or owners"));
            }
        }
        if let Some(size) = set.size {
            self.check_rw()?;
            // ftruncate() (also of a file unlinked while open) changes the handle's buffer,
            // which that handle writes back; truncate() of a path takes effect now.
            match set.fh.and_then(|fh| self.dirty_writer_buf(fh)) {
                Some(buf) => truncate_buf(&buf, size).await?,
                None => self.truncate(&self.path_of(ino)?, size).await?,
            }
        }
        self.getattr(ino).await
    }

    async fn truncate(&self, path: &str, size: u64) -> FsResult<()> {
        let existing = lock(&self.bufs).get(path).cloned();
        if let Some(buf) = existing {
            truncate_buf(&buf, size).await?;
            return self.write_back(&buf).await;
        }
        // Not open: rewrite the object now (`truncate -s`).
        self.ns.check_writable(path).await?;
        let node = self.resolve(path).await?.ok_or(FsError::NotFound)?;
        if node.is_dir() {
            return Err(FsError::IsADirectory);
        }
        let mut data = namespace::read_all(&*self.ns, path, &node).await?;
        data.resize(size as usize, 0);
        self.ns.write_file(path, Bytes::from(data)).await?;
        self.invalidate(path);
        Ok(())
    }

    // ---- directories ----

    /// Open and list a directory.
    pub async fn opendir(&self, ino: u64) -> FsResult<u64> {
        let opened = self.opendir_lazy(ino)?;
        self.list_dir(opened.fh).await?;
        Ok(opened.fh)
    }

    /// Open a directory without listing it (no I/O): the listing is taken by `list_dir` at the
    /// first readdir, which never comes when the kernel still has the listing cached.
    pub fn opendir_lazy(&self, ino: u64) -> FsResult<OpenedDir> {
        let path = self.path_of(ino)?;
        let keep_cache = lock(&self.dirs_listed)
            .get(&ino)
            .is_some_and(|at| at.elapsed() < self.cfg.metadata_ttl);
        let fh = self.new_handle(Handle::Dir(Arc::new(listing::DirListing::new(ino, path))));
        Ok(OpenedDir { fh, keep_cache })
    }

    /// The listing of an open directory (after `opendir`, or a first `list_dir`).
    pub fn readdir(&self, fh: u64) -> FsResult<Arc<Vec<DirEntry>>> {
        self.readdir_listed(fh)?.ok_or(FsError::BadHandle)
    }

    /// The directory path of a directory handle (for `readdirplus_entry`).
    pub fn dir_path(&self, fh: u64) -> FsResult<String> {
        Ok(self.dir_listing(fh)?.path.clone())
    }

    /// READDIRPLUS hands the kernel an entry, which counts as a lookup of it: take the
    /// reference and return the attributes to send (the inode may have been renumbered since
    /// opendir). If the reply has no room for it after all, `forget(attr.ino, 1)` undoes this.
    pub fn readdirplus_entry(&self, dir: &str, e: &DirEntry) -> Attr {
        let path = join_key(dir, &e.name);
        let ino = lock(&self.inodes).get_or_insert(&path, true);
        if let Some(Some(node)) = self.cached_node(&path) {
            self.note_version(ino, &node);
        }
        Attr { ino, ..e.attr }
    }

    pub fn releasedir(&self, fh: u64) {
        let handle = lock(&self.handles).remove(&fh);
        if let Some(Handle::Dir(listing)) = handle {
            self.release_listing(&listing);
        }
    }

    pub async fn mkdir(&self, parent: u64, name: &str) -> FsResult<Attr> {
        self.check_rw()?;
        let path = self.child_path(parent, name)?;
        self.ns.mkdir(&path).await?;
        self.invalidate(&path);
        self.lookup(parent, name).await
    }

    pub async fn rmdir(&self, parent: u64, name: &str) -> FsResult<()> {
        self.check_rw()?;
        let path = self.child_path(parent, name)?;
        let node = self.resolve(&path).await?.ok_or(FsError::NotFound)?;
        if !node.is_dir() {
            return Err(FsError::NotADirectory);
        }
        self.ns.rmdir(&path).await?;
        self.invalidate_tree(&path);
        lock(&self.inodes).unlink_path(&path);
        Ok(())
    }

    // ---- files ----

    fn new_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, h);
        fh
    }

    fn keep_cache(&self, ino: u64, node: &Node) -> bool {
        let Some(v) = node.content_version() else { return false };
        let mut versions = lock(&self.versions);
        let same = versions.get(&ino) == Some(&v);
        versions.insert(ino, v);
        same
    }

    pub async fn open(&self, ino: u64, flags: i32) -> FsResult<Opened> {
        let path = self.path_of(ino)?;
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let truncating = flags & libc::O_TRUNC != 0;
        if !writing {
            let node = self.resolve(&path).await?.ok_or(FsError::NotFound)?;
            return self.open_for_reading(ino, path, node);
        }
        self.check_rw()?;
        self.ns.check_writable(&path).await?;
        let existing = lock(&self.bufs).get(&path).cloned();
        let buf = match existing {
            Some(buf) => join_buf(buf, truncating).await,
            None => {
                let node = self.resolve(&path).await?.ok_or(FsError::NotFound)?;
                if node.is_dir() {
                    return Err(FsError::IsADirectory);
                }
                let data = if truncating {
                    Vec::new()
                } else {
                    namespace::read_all(&*self.ns, &path, &node).await?
                };
                let mine = WriteBuf::shared(&self.spill, &path, data, truncating)?;
                let buf =
                    lock(&self.bufs).entry(path.clone()).or_insert_with(|| mine.clone()).clone();
                if Arc::ptr_eq(&buf, &mine) {
                    buf
                } else {
                    join_buf(buf, truncating).await // another open made one meanwhile
                }
            }
        };
        lock(&self.versions).remove(&ino);
        let fh = self.new_handle(Handle::File {
            ino,
            path,
            node: None,
            buf: Some(buf),
            writes: true,
            dirty: truncating,
            ra: None,
        });
        Ok(Opened { fh, keep_cache: false, read_only: false })
    }

    fn open_for_reading(&self, ino: u64, path: String, node: Node) -> FsResult<Opened> {
        if node.is_dir() {
            return Err(FsError::IsADirectory);
        }
        let buf = lock(&self.bufs).get(&path).cloned();
        let keep_cache = buf.is_none() && self.keep_cache(ino, &node);
        let ra = Some(self.new_readahead());
        let fh = self.new_handle(Handle::File {
            ino,
            path,
            node: Some(node),
            buf,
            writes: false,
            dirty: false,
            ra,
        });
        Ok(Opened { fh, keep_cache, read_only: true })
    }

    fn new_readahead(&self) -> SharedReadAhead {
        Arc::new(tokio::sync::Mutex::new(readahead::ReadAhead::new(self.readahead_budget.clone())))
    }

    // ---- answers from memory alone ----
    // The adapter calls these on the FUSE dispatch thread: when the metadata cache already
    // knows the answer no I/O is needed, and skipping the hop to a tokio task roughly halves
    // the cost of opening a small chunk file. `None` means "not cached: ask the async path".

    /// The cached node at `path`, unless a write buffer (whose lock is async) is involved.
    fn cached_node(&self, path: &str) -> Option<Option<Node>> {
        if lock(&self.bufs).contains_key(path) {
            return None;
        }
        let cached = lock(&self.nodes).get(path).cloned();
        match cached {
            Some((node, at)) if self.fresh(path, at) => Some(node),
            _ => None,
        }
    }

    pub fn lookup_cached(&self, parent: u64, name: &str) -> Option<FsResult<Attr>> {
        let path = match self.child_path(parent, name) {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        Some(match self.cached_node(&path)? {
            None => Err(FsError::NotFound),
            Some(node) => {
                let ino = lock(&self.inodes).get_or_insert(&path, true);
                self.note_version(ino, &node);
                Ok(self.attr_of(ino, &node))
            }
        })
    }

    pub fn getattr_cached(&self, ino: u64) -> Option<FsResult<Attr>> {
        let path = self.path_of(ino).ok()?;
        let node = self.cached_node(&path)??;
        self.note_version(ino, &node);
        Some(Ok(self.attr_of(ino, &node)))
    }

    pub fn open_cached(&self, ino: u64, flags: i32) -> Option<FsResult<Opened>> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return None;
        }
        let path = self.path_of(ino).ok()?;
        let node = self.cached_node(&path)??;
        Some(self.open_for_reading(ino, path, node))
    }

    pub async fn create(&self, parent: u64, name: &str, flags: i32) -> FsResult<(Attr, Opened)> {
        self.check_rw()?;
        let path = self.child_path(parent, name)?;
        self.ns.check_writable(&path).await?;
        let buf = WriteBuf::shared(&self.spill, &path, Vec::new(), true)?;
        let exclusive = flags & libc::O_EXCL != 0;
        if exclusive {
            // Ask the store, not the metadata cache: EEXIST at open when the key exists now.
            // (The write-back makes it exclusive at the store, see `WriteBuf::exclusive`.)
            self.invalidate(&path);
            let mut b = buf.lock().await;
            b.exclusive = !b.staged; // a temp file never reaches the store under its own name
        }
        let exists = match self.resolve(&path).await? {
            Some(node) if node.is_dir() => return Err(FsError::IsADirectory),
            Some(_) => true,
            // Another create of the same name may have made its buffer since: join that one.
            None => {
                let mut bufs = lock(&self.bufs);
                let taken = bufs.contains_key(&path);
                if !taken {
                    bufs.insert(path.clone(), buf.clone());
                }
                taken
            }
        };
        if exists {
            // The kernel thought the name was free (its view was out of date): open the file
            // as open(2) would, truncating only if asked to.
            if flags & libc::O_EXCL != 0 {
                return Err(FsError::Exists);
            }
            let ino = lock(&self.inodes).get_or_insert(&path, true);
            let opened = self.open(ino, flags).await?;
            return Ok((self.getattr(ino).await?, opened));
        }
        self.invalidate(&path);
        let ino = lock(&self.inodes).get_or_insert(&path, true);
        lock(&self.versions).remove(&ino);
        let fh = self.new_handle(Handle::File {
            ino,
            path,
            node: None,
            buf: Some(buf),
            writes: true,
            dirty: true,
            ra: None,
        });
        let attr = Attr {
            ino,
            kind: FileKind::File,
            size: 0,
            mtime: SystemTime::now(),
            perm: 0o644,
            nlink: 1,
        };
        Ok((attr, Opened { fh, keep_cache: false, read_only: false }))
    }

    fn file_handle(&self, fh: u64) -> FsResult<(u64, String, Option<Node>, Option<SharedBuf>)> {
        match lock(&self.handles).get(&fh) {
            Some(Handle::File { ino, path, node, buf, .. }) => {
                Ok((*ino, path.clone(), node.clone(), buf.clone()))
            }
            _ => Err(FsError::BadHandle),
        }
    }

    fn read_ahead_of(&self, fh: u64) -> Option<SharedReadAhead> {
        match lock(&self.handles).get(&fh) {
            Some(Handle::File { ra, .. }) => ra.clone(),
            _ => None,
        }
    }

    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Bytes> {
        let (ino, path, node, buf) = self.file_handle(fh)?;
        if let Some(buf) = buf {
            let b = buf.lock().await;
            return b.data.read(offset, size).map_err(|e| io_err(&path, e));
        }
        let node = node.ok_or(FsError::BadHandle)?;
        if offset == 0 {
            self.fetch_next_files(&path);
        }
        let Some(ra) = self.read_ahead_of(fh) else {
            return self.read_node(ino, &path, &node, offset, size).await;
        };
        self.read_ahead(ino, &ra, &path, &node, offset, size).await
    }

    /// A read from the namespace. When the file changed since `node` was resolved (ESTALE),
    /// what this mount and the kernel know of it is dropped, so the next open sees the change.
    async fn read_node(
        &self,
        ino: u64,
        path: &str,
        node: &Node,
        offset: u64,
        size: u32,
    ) -> FsResult<Bytes> {
        let r = self.ns.read(path, node, offset, size).await;
        if matches!(r, Err(FsError::Stale)) {
            tracing::debug!(path, "changed since it was opened: ESTALE");
            self.invalidate(path);
            lock(&self.versions).remove(&ino);
            if let Some(invalidate) = self.invalidator.get() {
                invalidate(ino);
            }
        }
        r
    }

    /// `path` is being read from its start: when that continues a scan of its directory in
    /// listing order, start fetching the next files (those whose node the listing cached).
    fn fetch_next_files(&self, path: &str) {
        let (dir, name) = split_key(path);
        let next = self.scans.reading(dir, name);
        if next.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        for name in next {
            let Some(Some(node)) = self.cached_node(&join_key(dir, &name)) else { continue };
            if node.is_dir() {
                continue;
            }
            let ns = self.ns.clone();
            rt.spawn(async move { ns.prefetch(&node).await });
        }
    }

    /// A read without a handle (the kernel sends no OPEN, see `serve_without_open`): by inode,
    /// from its current node.
    pub async fn read_inode(&self, ino: u64, offset: u64, size: u32) -> FsResult<Bytes> {
        let path = self.path_of(ino)?;
        let node = self.resolve(&path).await?.ok_or(FsError::NotFound)?;
        if node.is_dir() {
            return Err(FsError::IsADirectory);
        }
        self.note_version(ino, &node);
        if offset == 0 {
            self.fetch_next_files(&path);
        }
        let ra = lock(&self.inode_readaheads).get_or_insert(ino, || self.new_readahead()).clone();
        self.read_ahead(ino, &ra, &path, &node, offset, size).await
    }

    async fn read_ahead(
        &self,
        ino: u64,
        ra: &SharedReadAhead,
        path: &str,
        node: &Node,
        offset: u64,
        size: u32,
    ) -> FsResult<Bytes> {
        let mut ra = ra.lock().await;
        if let Some(data) = ra.take(offset, size, node.size) {
            return Ok(data);
        }
        let (from, len) = ra.plan(offset, size, node.size);
        let fetched = self.read_node(ino, path, node, from, len.max(size as u64) as u32).await?;
        Ok(ra.fill(offset, size, fetched))
    }

    pub async fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        let buf = self.dirty_writer_buf(fh).ok_or(FsError::BadHandle)?;
        let mut b = buf.lock().await;
        let path = b.path.clone();
        b.data.write(offset, data).map_err(|e| io_err(&path, e))?;
        b.dirty = true;
        b.modified = SystemTime::now();
        Ok(data.len() as u32)
    }

    /// Write a dirty buffer to the namespace. Errors reach the caller of close()/fsync().
    async fn write_back(&self, buf: &SharedBuf) -> FsResult<()> {
        let mut b = buf.lock().await;
        if !b.dirty || b.staged || b.unlinked {
            return Ok(());
        }
        let path = b.path.clone();
        // A spilled body is the spill file itself: the buffer stays locked until it is stored.
        let body = b.data.body().map_err(|e| io_err(&path, e))?;
        if b.exclusive {
            crate::metrics::global().conditional_writes.inc();
            let data = body.into_bytes().map_err(|e| io_err(&path, e))?;
            let result = self.ns.create_file(&path, data).await;
            if matches!(result, Err(FsError::Exists)) {
                // Another writer (another daemon) created the key after our open: this file
                // lost the race. Nothing of it is stored, and its name now means the winner's.
                crate::metrics::global().create_conflicts.inc();
                tracing::info!(path = ?path, "exclusive create lost to another writer: EEXIST");
                b.unlinked = true;
                b.dirty = false;
                drop(b);
                self.drop_buf(&path, buf);
                self.invalidate(&path);
                return Err(FsError::Exists);
            }
            b.failed = result.is_err();
            result?;
            b.exclusive = false;
        } else {
            let result = self.ns.write_file_body(&path, body).await;
            b.failed = result.is_err();
            if result.as_ref().is_err_and(is_too_large) {
                // Refused for its shape, not for a passing fault: trying again at every close
                // would only repeat the error (and its log line).
                b.failed = false;
                b.dirty = false;
            }
            result?;
        }
        b.dirty = false;
        self.invalidate(&path);
        Ok(())
    }

    /// Forget `buf` as the write buffer of `path` (if it still is).
    fn drop_buf(&self, path: &str, buf: &SharedBuf) {
        let mut bufs = lock(&self.bufs);
        if bufs.get(path).is_some_and(|x| Arc::ptr_eq(x, buf)) {
            bufs.remove(path);
        }
    }

    /// close(): the buffer goes to the store if this handle changed it since its last flush,
    /// or an earlier write-back of it failed. A reader's close never stores a writer's
    /// unfinished data.
    pub async fn flush(&self, fh: u64) -> FsResult<()> {
        self.write_back_from(fh, false).await
    }

    /// fsync(): like close(), and also whatever other writers left unstored.
    pub async fn fsync(&self, fh: u64) -> FsResult<()> {
        self.write_back_from(fh, true).await
    }

    async fn write_back_from(&self, fh: u64, whole_file: bool) -> FsResult<()> {
        let Some((buf, handle_dirty)) = self.take_dirty(fh)? else { return Ok(()) };
        if !(handle_dirty || whole_file || buf.lock().await.failed) {
            return Ok(());
        }
        let result = self.write_back(&buf).await;
        if result.is_err() && handle_dirty {
            self.dirty_writer_buf(fh); // still this handle's to write
        }
        result
    }

    /// The write buffer of a handle open for writing, which is about to change it: the handle
    /// is marked dirty. `None` for a reader or an unknown handle.
    fn dirty_writer_buf(&self, fh: u64) -> Option<SharedBuf> {
        match lock(&self.handles).get_mut(&fh) {
            Some(Handle::File { buf: Some(buf), writes: true, dirty, .. }) => {
                *dirty = true;
                Some(buf.clone())
            }
            _ => None,
        }
    }

    /// A writer handle's buffer and whether the handle was dirty; it is marked clean now,
    /// before the write-back, so a write during it marks it dirty again. `None` for a reader.
    fn take_dirty(&self, fh: u64) -> FsResult<Option<(SharedBuf, bool)>> {
        match lock(&self.handles).get_mut(&fh) {
            Some(Handle::File { buf: Some(buf), writes: true, dirty, .. }) => {
                Ok(Some((buf.clone(), std::mem::take(dirty))))
            }
            Some(Handle::File { .. }) => Ok(None),
            _ => Err(FsError::BadHandle),
        }
    }

    /// Release a handle that has no write buffer (nothing to write back), without I/O.
    /// Returns false when the handle needs the async `release`.
    pub fn release_reader(&self, fh: u64) -> bool {
        let mut handles = lock(&self.handles);
        if matches!(handles.get(&fh), Some(Handle::File { writes: false, .. })) {
            handles.remove(&fh);
            return true;
        }
        false
    }

    pub async fn release(&self, fh: u64) -> FsResult<()> {
        let Some(handle) = lock(&self.handles).remove(&fh) else { return Err(FsError::BadHandle) };
        let Handle::File { buf: Some(buf), writes: true, dirty, .. } = handle else {
            return Ok(());
        };
        let retry = buf.lock().await.failed;
        let result = if dirty || retry { self.write_back(&buf).await } else { Ok(()) };
        let mut b = buf.lock().await;
        b.handles = b.handles.saturating_sub(1);
        // Keep a staged temp file (until renamed) and a buffer whose write-back failed (so a
        // retry can still find the data); drop the rest once the last handle is gone.
        if b.handles == 0 && (!b.staged || b.unlinked) && (result.is_ok() || b.unlinked) {
            let path = b.path.clone();
            drop(b);
            let mut bufs = lock(&self.bufs);
            if bufs.get(&path).is_some_and(|x| Arc::ptr_eq(x, &buf)) {
                bufs.remove(&path);
            }
        }
        result
    }

    pub async fn unlink(&self, parent: u64, name: &str) -> FsResult<()> {
        self.check_rw()?;
        let path = self.child_path(parent, name)?;
        let buf = lock(&self.bufs).get(&path).cloned();
        let mut handled = false;
        if let Some(buf) = buf {
            let mut b = buf.lock().await;
            b.unlinked = true;
            handled = b.staged || b.dirty;
            drop(b);
            lock(&self.bufs).remove(&path);
        }
        if !handled {
            let node = self.resolve(&path).await?.ok_or(FsError::NotFound)?;
            if node.is_dir() {
                return Err(FsError::IsADirectory);
            }
            match self.ns.remove_file(&path).await {
                Err(FsError::Store(crate::store::StoreError::NotFound(_))) if handled => {}
                r => r?,
            }
        }
        self.invalidate(&path);
        lock(&self.inodes).unlink_path(&path);
        Ok(())
    }

    pub async fn rename(
        &self,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        flags: u32,
    ) -> FsResult<()> {
        self.check_rw()?;
        if flags & libc::RENAME_EXCHANGE != 0 {
            return Err(FsError::NotSupported("RENAME_EXCHANGE"));
        }
        let from = self.child_path(parent, name)?;
        let to = self.child_path(newparent, newname)?;
        let node = self.resolve(&from).await?.ok_or(FsError::NotFound)?;
        let target = self.resolve(&to).await?;
        if flags & libc::RENAME_NOREPLACE != 0 && target.is_some() {
            return Err(FsError::Exists);
        }
        if from == to {
            return Ok(());
        }
        if node.is_dir() {
            if let Some(t) = &target {
                if !t.is_dir() {
                    return Err(FsError::NotADirectory);
                }
                if !self.ns.list(&to).await?.is_empty() {
                    return Err(FsError::NotEmpty);
                }
                self.ns.rmdir(&to).await?;
            }
            if to.starts_with(&format!("{from}/")) {
                return Err(FsError::InvalidName("cannot move a directory into itself"));
            }
            self.ns.rename(&from, &to, true).await?;
            self.invalidate_tree(&from);
            self.invalidate_tree(&to);
        } else {
            if target.as_ref().is_some_and(Node::is_dir) {
                return Err(FsError::IsADirectory);
            }
            self.ns.check_writable(&to).await?;
            let buf = lock(&self.bufs).get(&from).cloned();
            let mut still_open = None;
            match buf {
                Some(buf) => {
                    // A buffered file (a staged temp file, or open for writing): its content
                    // goes to the new name in one write.
                    let mut b = buf.lock().await;
                    let body = b.data.body().map_err(|e| io_err(&from, e))?;
                    let was_stored = !b.staged && !b.dirty;
                    self.ns.write_file_body(&to, body).await?;
                    if was_stored || (!b.staged && self.ns.lookup(&from).await?.is_some()) {
                        self.ns.remove_file(&from).await?;
                    }
                    lock(&self.bufs).remove(&from);
                    if b.handles > 0 {
                        // Still open for writing: as an open file follows its rename, later
                        // writes go to the new name (written back at close).
                        b.path = to.clone();
                        b.staged = is_staged_name(split_key(&to).1);
                        b.dirty = false;
                        b.failed = false;
                        b.exclusive = false; // the rename has stored it: later closes replace
                        drop(b);
                        still_open = Some(buf);
                    } else {
                        b.unlinked = true;
                    }
                }
                None => self.ns.rename(&from, &to, false).await?,
            }
            // A writer still open on the replaced file now writes nowhere: its file is
            // unlinked, as on POSIX (its close must not bring the old content back).
            let replaced = lock(&self.bufs).remove(&to);
            if let Some(old) = replaced {
                old.lock().await.unlinked = true;
            }
            if let Some(buf) = still_open {
                lock(&self.bufs).insert(to.clone(), buf);
            }
            self.invalidate(&from);
            self.invalidate(&to);
        }
        let mut inodes = lock(&self.inodes);
        inodes.rename(&from, &to);
        Ok(())
    }

    /// link(2) as an atomic create: `newname` gets the content the file `ino` has now (its
    /// write buffer if it is open or a staged temp file, which is not uploaded for this), stored
    /// with one create-if-absent put, so EEXIST comes from the store itself when the key exists,
    /// also if another daemon made it a moment ago. The two names are then independent files
    /// (a store has no hard links): the new one gets its own inode, and later writes to either
    /// do not show in the other.
    pub async fn link(&self, ino: u64, newparent: u64, newname: &str) -> FsResult<Attr> {
        self.check_rw()?;
        let from = self.path_of(ino)?;
        let to = self.child_path(newparent, newname)?;
        self.ns.check_writable(&to).await?;
        let buf = lock(&self.bufs).get(&from).cloned();
        let data = match buf {
            Some(buf) => {
                let mut b = buf.lock().await;
                if b.unlinked {
                    return Err(FsError::NotFound);
                }
                b.data.body().and_then(|b| b.into_bytes()).map_err(|e| io_err(&from, e))?
            }
            None => {
                let node = self.resolve(&from).await?.ok_or(FsError::NotFound)?;
                if node.is_dir() {
                    return Err(FsError::NotPermitted("hard links to directories"));
                }
                Bytes::from(namespace::read_all(&*self.ns, &from, &node).await?)
            }
        };
        if self.pending_node(&to).await.is_some() {
            return Err(FsError::Exists);
        }
        if is_staged_name(split_key(&to).1) {
            // A temp-file name lives in memory until renamed, like one made by create().
            if self.resolve(&to).await?.is_some() {
                return Err(FsError::Exists);
            }
            let staged = WriteBuf::shared(&self.spill, &to, data.to_vec(), true)?;
            staged.lock().await.handles = 0;
            let mut bufs = lock(&self.bufs);
            if bufs.contains_key(&to) {
                return Err(FsError::Exists);
            }
            bufs.insert(to.clone(), staged);
        } else {
            match self.ns.create_file(&to, data).await {
                Err(FsError::Exists) => {
                    crate::metrics::global().create_conflicts.inc();
                    self.invalidate(&to);
                    return Err(FsError::Exists);
                }
                r => r?,
            }
            crate::metrics::global().conditional_writes.inc();
        }
        self.invalidate(&to);
        let new_ino = lock(&self.inodes).get_or_insert(&to, true);
        let node = self.resolve(&to).await?.ok_or(FsError::NotFound)?;
        Ok(self.attr_of(new_ino, &node))
    }

    pub fn statfs(&self) -> (u64, u64) {
        self.ns.capacity().unwrap_or((1 << 50, 1 << 49))
    }

    /// Figures for the metrics endpoint, read when scraped. A write buffer locked right now
    /// (being written) is counted without its bytes rather than waited for.
    pub fn gauges(&self) -> FsGauges {
        let bufs: Vec<SharedBuf> = lock(&self.bufs).values().cloned().collect();
        let buffer_bytes =
            bufs.iter().filter_map(|b| b.try_lock().ok().map(|b| b.data.len())).sum();
        FsGauges {
            open_handles: lock(&self.handles).len() as u64,
            known_inodes: lock(&self.inodes).count() as u64,
            write_buffers: bufs.len() as u64,
            buffer_bytes,
        }
    }

    /// Write back every dirty buffer and keep staged temp files under their own names (so
    /// nothing written through the mount is lost at unmount). Returns how many failed.
    pub async fn flush_all(&self) -> usize {
        let bufs: Vec<SharedBuf> = lock(&self.bufs).values().cloned().collect();
        let mut failed = 0;
        for buf in bufs {
            {
                let mut b = buf.lock().await;
                if b.staged && !b.unlinked {
                    b.staged = false;
                    b.dirty = true;
                }
            }
            if let Err(e) = self.write_back(&buf).await {
                let path = buf.lock().await.path.clone();
                tracing::error!(path = ?path, error = %e, "could not write back at unmount");
                failed += 1;
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::inode::ROOT_INO;
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::Store;

    fn fs_over(store: Arc<MemoryStore>, read_only: bool, ttl: Duration) -> ZarrFs {
        let ns = Arc::new(namespace::RawNamespace::new(store));
        ZarrFs::new(ns, FsConfig { metadata_ttl: ttl, read_only })
    }

    /// Reads by inode (no OPEN) follow the current content, and a new content version seen
    /// at a lookup asks the kernel to drop its cached pages of that inode, once.
    #[tokio::test]
    async fn reads_without_open_follow_versions_and_invalidate_changed_files() {
        let store = Arc::new(MemoryStore::new());
        store.put("a/x", Bytes::from_static(b"first")).await.unwrap();
        let fs = fs_over(store.clone(), true, Duration::ZERO);
        let invalidated = Arc::new(Mutex::new(Vec::new()));
        let seen = invalidated.clone();
        fs.set_invalidator(Box::new(move |ino| lock(&seen).push(ino)));
        assert!(fs.serve_without_open());

        let dir = fs.lookup(ROOT_INO, "a").await.unwrap();
        let x = fs.lookup(dir.ino, "x").await.unwrap();
        assert_eq!(&fs.read_inode(x.ino, 0, 100).await.unwrap()[..], b"first");
        assert_eq!(fs.lookup(dir.ino, "x").await.unwrap().ino, x.ino);
        assert!(lock(&invalidated).is_empty(), "an unchanged file was invalidated");

        store.put("a/x", Bytes::from_static(b"second!")).await.unwrap();
        assert_eq!(fs.lookup(dir.ino, "x").await.unwrap().size, 7);
        assert_eq!(*lock(&invalidated), vec![x.ino]);
        assert_eq!(&fs.read_inode(x.ino, 0, 100).await.unwrap()[..], b"second!");
        assert_eq!(lock(&invalidated).len(), 1, "the same new version invalidated twice");
        assert!(matches!(fs.read_inode(dir.ino, 0, 1).await, Err(FsError::IsADirectory)));
    }

    #[tokio::test]
    async fn only_read_only_mounts_serve_without_open() {
        let fs = fs_over(Arc::new(MemoryStore::new()), false, Duration::ZERO);
        assert!(!fs.serve_without_open());
        assert!(!fs.is_openless());
    }

    /// A directory is listed at the first readdir, not at opendir, and a reopen within the
    /// metadata TTL may keep the kernel's cached listing.
    #[tokio::test]
    async fn directories_are_listed_lazily_and_kept_within_the_ttl() {
        let store = Arc::new(MemoryStore::new());
        store.put("d/one", Bytes::from_static(b"1")).await.unwrap();
        let fs = fs_over(store.clone(), false, Duration::from_secs(3600));
        let d = fs.lookup(ROOT_INO, "d").await.unwrap();
        let first = fs.opendir_lazy(d.ino).unwrap();
        assert!(!first.keep_cache);
        assert!(fs.readdir_listed(first.fh).unwrap().is_none());
        let names: Vec<String> =
            fs.list_dir(first.fh).await.unwrap().iter().map(|e| e.name.clone()).collect();
        assert_eq!(names, [".", "..", "one"]);
        fs.releasedir(first.fh);
        let again = fs.opendir_lazy(d.ino).unwrap();
        assert!(again.keep_cache);
        fs.releasedir(again.fh);

        let no_ttl = fs_over(store, false, Duration::ZERO);
        let d = no_ttl.lookup(ROOT_INO, "d").await.unwrap();
        let fh = no_ttl.opendir(d.ino).await.unwrap();
        no_ttl.releasedir(fh);
        assert!(!no_ttl.opendir_lazy(d.ino).unwrap().keep_cache);
    }

    /// Inodes handed out by a plain READDIR (never looked up, so never forgotten by the
    /// kernel) go when the listing is released; READDIRPLUS entries and lookups stay until
    /// forgotten. Listing the same tree again does not grow the table.
    #[tokio::test]
    async fn listed_inodes_do_not_outlive_their_listing() {
        let store = Arc::new(MemoryStore::new());
        for i in 0..500 {
            store.put(&format!("d/f{i}"), Bytes::from_static(b"x")).await.unwrap();
        }
        let fs = fs_over(store, false, Duration::from_secs(3600));
        let d = fs.lookup(ROOT_INO, "d").await.unwrap();
        let before = fs.gauges().known_inodes;
        for _ in 0..2 {
            let fh = fs.opendir(d.ino).await.unwrap();
            assert_eq!(fs.readdir(fh).unwrap().len(), 502);
            assert_eq!(fs.gauges().known_inodes, before + 500, "held while the listing is open");
            fs.releasedir(fh);
            assert_eq!(fs.gauges().known_inodes, before);
        }
        let fh = fs.opendir(d.ino).await.unwrap();
        let entries = fs.readdir(fh).unwrap();
        let plus = fs.readdirplus_entry("d", &entries[2]); // handed to the kernel: a lookup
        let looked_up = fs.lookup(d.ino, "f7").await.unwrap();
        fs.releasedir(fh);
        assert_eq!(fs.gauges().known_inodes, before + 2);
        assert_eq!(fs.lookup(d.ino, &entries[2].name).await.unwrap().ino, plus.ino);
        fs.forget(plus.ino, 2);
        fs.forget(looked_up.ino, 1);
        assert_eq!(fs.gauges().known_inodes, before);
    }

    /// A directory rename drops what the cache knew below both names (one record, no scan of
    /// the cache): old paths are asked again and found gone, new ones found.
    #[tokio::test]
    async fn a_directory_rename_drops_the_cached_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Arc::new(crate::store::backends::local::LocalStore::open(tmp.path()).unwrap());
        store.put("a/sub/x", Bytes::from_static(b"1")).await.unwrap();
        store.put("ab/y", Bytes::from_static(b"2")).await.unwrap();
        let ns = Arc::new(namespace::RawNamespace::new(store));
        let cfg = FsConfig { metadata_ttl: Duration::from_secs(3600), read_only: false };
        let fs = ZarrFs::new(ns, cfg);
        for p in ["a", "a/sub", "a/sub/x", "ab/y", "b/sub/x"] {
            fs.resolve(p).await.unwrap();
        }
        assert!(fs.cached_node("a/sub/x").unwrap().is_some());
        assert_eq!(fs.cached_node("b/sub/x"), Some(None), "known absent");
        fs.rename(ROOT_INO, "a", ROOT_INO, "b", 0).await.unwrap();
        assert_eq!(fs.cached_node("a/sub/x"), None, "not trusted after the rename");
        assert_eq!(fs.cached_node("b/sub/x"), None);
        assert!(fs.cached_node("ab/y").unwrap().is_some(), "a sibling sharing the prefix stays");
        assert!(fs.resolve("a/sub/x").await.unwrap().is_none());
        assert!(fs.resolve("b/sub/x").await.unwrap().is_some());
        assert!(fs.cached_node("b/sub/x").unwrap().is_some(), "cached again after the rename");
    }

    /// link() stores the new name with one create-if-absent put: a buffered temp file is
    /// linked without its own name ever reaching the store, an existing key (also one made by
    /// another daemon behind this one's cache) is EEXIST, and the names are independent after.
    #[tokio::test]
    async fn link_is_an_atomic_create() {
        let store = Arc::new(MemoryStore::new());
        let fs = fs_over(store.clone(), false, Duration::from_secs(3600));
        let (tmp, o) = fs.create(ROOT_INO, "k.1234.partial", libc::O_EXCL).await.unwrap();
        fs.write(o.fh, 0, b"value").await.unwrap();
        fs.flush(o.fh).await.unwrap();
        fs.release(o.fh).await.unwrap();
        let linked = fs.link(tmp.ino, ROOT_INO, "k").await.unwrap();
        assert_ne!(linked.ino, tmp.ino, "the new name is its own file");
        assert_eq!((linked.size, linked.nlink), (5, 1));
        assert_eq!(store.get("k").await.unwrap().as_ref(), b"value");
        assert!(store.head("k.1234.partial").await.unwrap().is_none(), "temp name uploaded");
        let err = fs.link(tmp.ino, ROOT_INO, "k").await.unwrap_err();
        assert_eq!(err.errno(), libc::EEXIST);

        // Another daemon makes "j" after this one cached its absence: the store says EEXIST.
        assert!(fs.lookup(ROOT_INO, "j").await.is_err());
        store.put("j", Bytes::from_static(b"theirs")).await.unwrap();
        let err = fs.link(tmp.ino, ROOT_INO, "j").await.unwrap_err();
        assert_eq!(err.errno(), libc::EEXIST);
        assert_eq!(store.get("j").await.unwrap().as_ref(), b"theirs");

        fs.unlink(ROOT_INO, "k.1234.partial").await.unwrap();
        assert_eq!(store.get("k").await.unwrap().as_ref(), b"value");
        let k = fs.lookup(ROOT_INO, "k").await.unwrap();
        let o = fs.open(k.ino, libc::O_RDONLY).await.unwrap();
        assert_eq!(&fs.read(o.fh, 0, 100).await.unwrap()[..], b"value");
        fs.release(o.fh).await.unwrap();
        let d = fs.mkdir(ROOT_INO, "d").await.unwrap();
        assert_eq!(fs.link(d.ino, ROOT_INO, "dl").await.unwrap_err().errno(), libc::EPERM);
    }

    /// O_CREAT|O_EXCL: EEXIST at open for a key in the store, and a key created by another
    /// daemon between this one's open and close makes the close fail with EEXIST and store
    /// nothing.
    #[tokio::test]
    async fn exclusive_creates_are_decided_by_the_store() {
        let store = Arc::new(MemoryStore::new());
        let fs = fs_over(store.clone(), false, Duration::from_secs(3600));
        assert!(fs.lookup(ROOT_INO, "a").await.is_err()); // absence cached
        store.put("a", Bytes::from_static(b"there")).await.unwrap();
        let err = fs.create(ROOT_INO, "a", libc::O_EXCL | libc::O_WRONLY).await.unwrap_err();
        assert_eq!(err.errno(), libc::EEXIST, "cached absence trusted for O_EXCL");

        let (_, o) = fs.create(ROOT_INO, "b", libc::O_EXCL | libc::O_WRONLY).await.unwrap();
        fs.write(o.fh, 0, b"mine").await.unwrap();
        store.put("b", Bytes::from_static(b"theirs")).await.unwrap(); // the other daemon
        assert_eq!(fs.flush(o.fh).await.unwrap_err().errno(), libc::EEXIST);
        fs.release(o.fh).await.unwrap();
        assert_eq!(store.get("b").await.unwrap().as_ref(), b"theirs");

        // The winner's file keeps working as a normal file after its first write-back.
        let (_, o) = fs.create(ROOT_INO, "c", libc::O_EXCL | libc::O_WRONLY).await.unwrap();
        fs.write(o.fh, 0, b"one").await.unwrap();
        fs.fsync(o.fh).await.unwrap();
        fs.write(o.fh, 3, b"two").await.unwrap();
        fs.flush(o.fh).await.unwrap();
        fs.release(o.fh).await.unwrap();
        assert_eq!(store.get("c").await.unwrap().as_ref(), b"onetwo");

        // Renamed while still open: the rename stores it, and the close after that replaces it.
        let (_, o) = fs.create(ROOT_INO, "e", libc::O_EXCL | libc::O_WRONLY).await.unwrap();
        fs.write(o.fh, 0, b"1").await.unwrap();
        fs.rename(ROOT_INO, "e", ROOT_INO, "f", 0).await.unwrap();
        fs.write(o.fh, 1, b"2").await.unwrap();
        fs.flush(o.fh).await.unwrap();
        fs.release(o.fh).await.unwrap();
        assert_eq!(store.get("f").await.unwrap().as_ref(), b"12");
    }

    /// Every entry READDIRPLUS hands out is a lookup reference: after the kernel forgets it
    /// (and the listing that named it is released), the inode is gone.
    #[tokio::test]
    async fn readdirplus_entries_are_lookups() {
        let store = Arc::new(MemoryStore::new());
        store.put("f", Bytes::from_static(b"12345")).await.unwrap();
        let fs = fs_over(store, true, Duration::from_secs(3600));
        let fh = fs.opendir(ROOT_INO).await.unwrap();
        let entries = fs.readdir(fh).unwrap();
        let f = entries.iter().find(|e| e.name == "f").unwrap();
        let attr = fs.readdirplus_entry(&fs.dir_path(fh).unwrap(), f);
        assert_eq!((attr.ino, attr.size, attr.kind), (f.ino, 5, FileKind::File));
        assert_eq!(fs.path_of(attr.ino).unwrap(), "f");
        fs.forget(attr.ino, 1);
        assert!(fs.path_of(attr.ino).is_ok(), "still in the open listing");
        fs.releasedir(fh);
        assert!(fs.path_of(attr.ino).is_err());
    }
}
