//! The filesystem on inodes: everything FUSE asks, answered in plain Rust types so that tests
//! can drive it without a kernel. `fuse::adapter` is the thin layer that turns these answers
//! into fuser replies.
//!
//! Owns: the inode table, the metadata cache, open handles and the write buffers of open files.
//! A file open for writing is buffered whole in memory and written to the namespace as one
//! object on flush (close) and release, so the backend never sees half a chunk. Files named
//! `*.partial` (temp files that writers such as zarr-python rename over their target) are kept
//! in memory until renamed, so only the final key is ever written to the backend.

pub mod decoded_cache;
pub mod error;
pub mod inode;
pub mod namespace;
pub mod presented;
pub mod readahead;
pub mod shard_indexes;
pub mod shard_writer;
pub mod unsharded;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use lru::LruCache;

pub use error::{FsError, FsResult};
use inode::{InodeTable, ROOT_INO};
use namespace::Namespace;

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
}

#[derive(Debug, Clone)]
pub struct DirEntry {
    pub ino: u64,
    pub name: String,
    pub kind: FileKind,
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
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// Buffered content of a file open for writing (shared by every handle on that path).
struct WriteBuf {
    path: String,
    data: Vec<u8>,
    dirty: bool,
    handles: usize,
    /// A temp file (`*.partial`): kept here, never written to the backend under its own name.
    staged: bool,
    /// Unlinked while open: never written back.
    unlinked: bool,
    modified: SystemTime,
}

type SharedBuf = Arc<tokio::sync::Mutex<WriteBuf>>;

impl WriteBuf {
    /// A buffer for `path` with one handle on it; `dirty` when it must be written back even
    /// unchanged (a new or truncated file).
    fn shared(path: &str, data: Vec<u8>, dirty: bool) -> SharedBuf {
        Arc::new(tokio::sync::Mutex::new(WriteBuf {
            path: path.to_string(),
            data,
            dirty,
            handles: 1,
            staged: is_staged_name(split_key(path).1),
            unlinked: false,
            modified: SystemTime::now(),
        }))
    }
}
type SharedReadAhead = Arc<tokio::sync::Mutex<readahead::ReadAhead>>;

enum Handle {
    File { ino: u64, path: String, node: Option<Node>, buf: Option<SharedBuf>, ra: Option<SharedReadAhead> },
    Dir { entries: Arc<Vec<DirEntry>> },
}

const METADATA_CACHE_ENTRIES: usize = 500_000;
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
    /// ino -> content version at its last open, to tell the kernel when its cache is still good.
    versions: Mutex<HashMap<u64, String>>,
}

/// Temp files that writers rename over the real key.
pub fn is_staged_name(name: &str) -> bool {
    name.ends_with(".partial")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ZarrFs {
    pub fn new(ns: Arc<dyn Namespace>, cfg: FsConfig) -> Self {
        ZarrFs {
            ns,
            cfg,
            inodes: Mutex::new(InodeTable::default()),
            nodes: Mutex::new(LruCache::new(NonZeroUsize::new(METADATA_CACHE_ENTRIES).expect("nonzero"))),
            bufs: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            versions: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &FsConfig {
        &self.cfg
    }

    // ---- paths, caches ----

    fn path_of(&self, ino: u64) -> FsResult<String> {
        lock(&self.inodes).path(ino).map(str::to_string).ok_or(FsError::NotFound)
    }

    fn child_path(&self, parent: u64, name: &str) -> FsResult<String> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(FsError::InvalidName("not a single path component"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(FsError::InvalidName("name too long"));
        }
        Ok(join_key(&self.path_of(parent)?, name))
    }

    fn invalidate(&self, path: &str) {
        lock(&self.nodes).pop(path);
    }

    /// Drop everything cached at or below `path` (after a directory rename or removal).
    fn invalidate_tree(&self, path: &str) {
        let prefix = format!("{path}/");
        let mut nodes = lock(&self.nodes);
        let stale: Vec<String> =
            nodes.iter().filter(|(k, _)| *k == path || k.starts_with(&prefix)).map(|(k, _)| k.clone()).collect();
        for k in stale {
            nodes.pop(&k);
        }
    }

    fn cache_node(&self, path: &str, node: Option<Node>) {
        lock(&self.nodes).put(path.to_string(), (node, Instant::now()));
    }

    async fn pending_node(&self, path: &str) -> Option<Node> {
        let buf = lock(&self.bufs).get(path).cloned()?;
        let b = buf.lock().await;
        if b.unlinked {
            return None;
        }
        Some(Node {
            size: b.data.len() as u64,
            modified: b.modified,
            backing: Backing::Object { key: path.to_string(), version: "pending".into() },
        })
    }

    /// What `path` is now: an open write buffer, a fresh cache entry, or the namespace's answer.
    async fn resolve(&self, path: &str) -> FsResult<Option<Node>> {
        if let Some(node) = self.pending_node(path).await {
            return Ok(Some(node));
        }
        if let Some((node, at)) = lock(&self.nodes).get(path) {
            if at.elapsed() < self.cfg.metadata_ttl {
                return Ok(node.clone());
            }
        }
        let node = self.ns.lookup(path).await?;
        self.cache_node(path, node.clone());
        Ok(node)
    }

    fn attr_of(&self, ino: u64, node: &Node) -> Attr {
        let (kind, perm) = if node.is_dir() { (FileKind::Dir, 0o755) } else { (FileKind::File, 0o644) };
        let perm = if self.cfg.read_only { perm & 0o555 } else { perm };
        Attr { ino, kind, size: node.size, mtime: node.modified, perm }
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
        Ok(self.attr_of(ino, &node))
    }

    pub fn forget(&self, ino: u64, n: u64) {
        lock(&self.inodes).forget(ino, n);
    }

    pub async fn getattr(&self, ino: u64) -> FsResult<Attr> {
        let path = self.path_of(ino)?;
        let node = self.resolve(&path).await?.ok_or(FsError::NotFound)?;
        Ok(self.attr_of(ino, &node))
    }

    pub async fn setattr(&self, ino: u64, set: SetAttr) -> FsResult<Attr> {
        if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() {
            return Err(FsError::NotPermitted("a store has no permissions or owners"));
        }
        if let Some(size) = set.size {
            self.check_rw()?;
            let path = self.path_of(ino)?;
            self.truncate(&path, size).await?;
        }
        self.getattr(ino).await
    }

    async fn truncate(&self, path: &str, size: u64) -> FsResult<()> {
        let existing = lock(&self.bufs).get(path).cloned();
        if let Some(buf) = existing {
            let mut b = buf.lock().await;
            b.data.resize(size as usize, 0);
            b.dirty = true;
            b.modified = SystemTime::now();
            return Ok(());
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

    pub async fn opendir(&self, ino: u64) -> FsResult<u64> {
        let path = self.path_of(ino)?;
        let listing = self.ns.list(&path).await?;
        let mut entries = Vec::with_capacity(listing.len() + 2);
        let parent_ino = if path.is_empty() {
            ROOT_INO
        } else {
            lock(&self.inodes).get_or_insert(split_key(&path).0, false)
        };
        entries.push(DirEntry { ino, name: ".".into(), kind: FileKind::Dir });
        entries.push(DirEntry { ino: parent_ino, name: "..".into(), kind: FileKind::Dir });
        let mut names = std::collections::HashSet::new();
        {
            let now = Instant::now();
            let mut inodes = lock(&self.inodes);
            let mut nodes = lock(&self.nodes);
            for (name, node) in listing {
                let child = join_key(&path, &name);
                let kind = if node.is_dir() { FileKind::Dir } else { FileKind::File };
                let child_ino = inodes.get_or_insert(&child, false);
                // One listing answers the lookups that `ls -l` sends next.
                nodes.put(child.clone(), (Some(node), now));
                names.insert(name.clone());
                entries.push(DirEntry { ino: child_ino, name, kind });
            }
        }
        // Files being written here that the backend does not have yet.
        let prefix = if path.is_empty() { String::new() } else { format!("{path}/") };
        let pending: Vec<(String, SharedBuf)> = lock(&self.bufs)
            .iter()
            .filter_map(|(p, b)| p.strip_prefix(&prefix).filter(|n| !n.contains('/')).map(|n| (n.to_string(), b.clone())))
            .collect();
        for (name, buf) in pending {
            if names.contains(&name) || buf.lock().await.unlinked {
                continue;
            }
            let child_ino = lock(&self.inodes).get_or_insert(&join_key(&path, &name), false);
            entries.push(DirEntry { ino: child_ino, name, kind: FileKind::File });
        }
        Ok(self.new_handle(Handle::Dir { entries: Arc::new(entries) }))
    }

    /// The snapshot taken at opendir (the adapter pages through it).
    pub fn readdir(&self, fh: u64) -> FsResult<Arc<Vec<DirEntry>>> {
        match lock(&self.handles).get(&fh) {
            Some(Handle::Dir { entries }) => {
                Ok(entries.clone())
            }
            _ => Err(FsError::BadHandle),
        }
    }

    pub fn releasedir(&self, fh: u64) {
        lock(&self.handles).remove(&fh);
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
            Some(buf) => {
                let mut b = buf.lock().await;
                b.handles += 1;
                if truncating {
                    b.data.clear();
                    b.dirty = true;
                }
                drop(b);
                buf
            }
            None => {
                let node = self.resolve(&path).await?.ok_or(FsError::NotFound)?;
                if node.is_dir() {
                    return Err(FsError::IsADirectory);
                }
                let data = if truncating { Vec::new() } else { namespace::read_all(&*self.ns, &path, &node).await? };
                let buf = WriteBuf::shared(&path, data, truncating);
                lock(&self.bufs).entry(path.clone()).or_insert(buf).clone()
            }
        };
        lock(&self.versions).remove(&ino);
        let fh = self.new_handle(Handle::File { ino, path, node: None, buf: Some(buf), ra: None });
        Ok(Opened { fh, keep_cache: false, read_only: false })
    }

    fn open_for_reading(&self, ino: u64, path: String, node: Node) -> FsResult<Opened> {
        if node.is_dir() {
            return Err(FsError::IsADirectory);
        }
        let buf = lock(&self.bufs).get(&path).cloned();
        let keep_cache = buf.is_none() && self.keep_cache(ino, &node);
        let ra = Some(Arc::new(tokio::sync::Mutex::new(readahead::ReadAhead::default())));
        let fh = self.new_handle(Handle::File { ino, path, node: Some(node), buf, ra });
        Ok(Opened { fh, keep_cache, read_only: true })
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
        let mut nodes = lock(&self.nodes);
        match nodes.get(path) {
            Some((node, at)) if at.elapsed() < self.cfg.metadata_ttl => Some(node.clone()),
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
                Ok(self.attr_of(ino, &node))
            }
        })
    }

    pub fn getattr_cached(&self, ino: u64) -> Option<FsResult<Attr>> {
        let path = self.path_of(ino).ok()?;
        let node = self.cached_node(&path)??;
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
        if let Some(node) = self.resolve(&path).await? {
            if flags & libc::O_EXCL != 0 {
                return Err(FsError::Exists);
            }
            if node.is_dir() {
                return Err(FsError::IsADirectory);
            }
            let ino = lock(&self.inodes).get_or_insert(&path, true);
            let opened = self.open(ino, flags | libc::O_TRUNC).await?;
            return Ok((self.getattr(ino).await?, opened));
        }
        let buf = WriteBuf::shared(&path, Vec::new(), true);
        lock(&self.bufs).insert(path.clone(), buf.clone());
        self.invalidate(&path);
        let ino = lock(&self.inodes).get_or_insert(&path, true);
        lock(&self.versions).remove(&ino);
        let fh = self.new_handle(Handle::File { ino, path, node: None, buf: Some(buf), ra: None });
        let attr = Attr { ino, kind: FileKind::File, size: 0, mtime: SystemTime::now(), perm: 0o644 };
        Ok((attr, Opened { fh, keep_cache: false, read_only: false }))
    }

    fn file_handle(&self, fh: u64) -> FsResult<(u64, String, Option<Node>, Option<SharedBuf>)> {
        match lock(&self.handles).get(&fh) {
            Some(Handle::File { ino, path, node, buf, .. }) => Ok((*ino, path.clone(), node.clone(), buf.clone())),
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
        let (_, path, node, buf) = self.file_handle(fh)?;
        if let Some(buf) = buf {
            let b = buf.lock().await;
            let start = (offset as usize).min(b.data.len());
            let end = start.saturating_add(size as usize).min(b.data.len());
            return Ok(Bytes::copy_from_slice(&b.data[start..end]));
        }
        let node = node.ok_or(FsError::BadHandle)?;
        let Some(ra) = self.read_ahead_of(fh) else { return self.ns.read(&path, &node, offset, size).await };
        let mut ra = ra.lock().await;
        if let Some(data) = ra.take(offset, size, node.size) {
            return Ok(data);
        }
        let (from, len) = ra.plan(offset, size, node.size);
        let fetched = self.ns.read(&path, &node, from, len.max(size as u64) as u32).await?;
        Ok(ra.fill(offset, size, fetched))
    }

    pub async fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        let (_, _, _, buf) = self.file_handle(fh)?;
        let buf = buf.ok_or(FsError::BadHandle)?;
        let mut b = buf.lock().await;
        let end = offset as usize + data.len();
        if b.data.len() < end {
            b.data.resize(end, 0);
        }
        b.data[offset as usize..end].copy_from_slice(data);
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
        self.ns.write_file(&path, Bytes::copy_from_slice(&b.data)).await?;
        b.dirty = false;
        self.invalidate(&path);
        Ok(())
    }

    pub async fn flush(&self, fh: u64) -> FsResult<()> {
        let (_, _, _, buf) = self.file_handle(fh)?;
        match buf {
            Some(buf) => self.write_back(&buf).await,
            None => Ok(()),
        }
    }

    /// Release a handle that has no write buffer (nothing to write back), without I/O.
    /// Returns false when the handle needs the async `release`.
    pub fn release_reader(&self, fh: u64) -> bool {
        let mut handles = lock(&self.handles);
        if matches!(handles.get(&fh), Some(Handle::File { buf: None, .. })) {
            handles.remove(&fh);
            return true;
        }
        false
    }

    pub async fn release(&self, fh: u64) -> FsResult<()> {
        let Some(handle) = lock(&self.handles).remove(&fh) else { return Err(FsError::BadHandle) };
        let Handle::File { buf: Some(buf), .. } = handle else { return Ok(()) };
        let result = self.write_back(&buf).await;
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

    pub async fn fsync(&self, fh: u64) -> FsResult<()> {
        self.flush(fh).await
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

    pub async fn rename(&self, parent: u64, name: &str, newparent: u64, newname: &str, flags: u32) -> FsResult<()> {
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
            match buf {
                Some(buf) => {
                    // A buffered file (a staged temp file, or open for writing): its content
                    // goes to the new name in one write.
                    let mut b = buf.lock().await;
                    let data = Bytes::copy_from_slice(&b.data);
                    let was_stored = !b.staged && !b.dirty;
                    self.ns.write_file(&to, data).await?;
                    if was_stored || (!b.staged && self.ns.lookup(&from).await?.is_some()) {
                        self.ns.remove_file(&from).await?;
                    }
                    b.unlinked = true;
                    drop(b);
                    lock(&self.bufs).remove(&from);
                    // A writer of the old name that is still open now writes nowhere; the
                    // usual write-then-rename pattern closes first.
                    if let Some(old) = lock(&self.bufs).remove(&to) {
                        if let Ok(mut o) = old.try_lock() {
                            o.unlinked = true;
                        }
                    }
                }
                None => self.ns.rename(&from, &to, false).await?,
            }
            self.invalidate(&from);
            self.invalidate(&to);
        }
        let mut inodes = lock(&self.inodes);
        inodes.rename(&from, &to);
        Ok(())
    }

    pub fn statfs(&self) -> (u64, u64) {
        self.ns.capacity().unwrap_or((1 << 50, 1 << 49))
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
                tracing::error!(path = %path, error = %e, "could not write back at unmount");
                failed += 1;
            }
        }
        failed
    }
}
