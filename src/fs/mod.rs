//! The filesystem on inodes: everything FUSE asks, answered in plain Rust types so that tests
//! can drive it without a kernel. `fuse::adapter` is the thin layer that turns these answers
//! into fuser replies.
//!
//! `ZarrFs` dispatches to subsystems, a folder each: `inodes` (what the kernel holds: inode
//! numbers, open handles), `cache` (what the mount remembers of the namespace) and `write`
//! (write buffers, spill files); the chosen view over the store is a `views` namespace, reached
//! through the `Namespace` trait.
//! This module holds `ZarrFs`, lookups, attributes and directories; open files are in `files`,
//! unlink/rename/link in `names`. A file open for writing is buffered whole and written to the
//! namespace as one object on flush (close) and release, so the backend never sees half a
//! chunk. Files named `*.partial` (temp files that writers such as zarr-python rename over
//! their target) are kept in memory until renamed, so only the final key is ever written to
//! the backend.

pub(crate) mod cache;
mod files;
pub mod inodes;
pub mod listing;
mod names;
mod resolve;
mod sizes;
pub mod write;

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

pub use crate::views::shared::error::{FsError, FsResult};
use cache::NodeCache;
use inodes::handles::{Handle, Handles};
use inodes::table::InodeTable;
use write::spill;
use write::write_buf::{SharedBuf, WriteBuf};
use write::Writes;

use crate::locks::lock;
use crate::prefetch::per_mount::MountReadAhead;
use crate::store::join_key;
use crate::views::shared::mapping::node::Node;
use crate::views::shared::namespace::Namespace;

#[derive(Debug, Clone)]
pub struct FsConfig {
    /// How long resolved paths (and absences) are trusted before asking the store again.
    pub metadata_ttl: Duration,
    pub read_only: bool,
    /// Hand the kernel local copies of whole objects to read directly (FUSE passthrough),
    /// where the store keeps them (`--cache-dir`). Read-only mounts only.
    pub passthrough: bool,
    /// Mode, owner and group shown where the store has none or a flag overrides them.
    pub perms: crate::perms::ShownPerms,
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
    pub uid: u32,
    pub gid: u32,
    /// 0 for a file unlinked while open, else 1 (files) or 2 (directories).
    pub nlink: u32,
}

#[derive(Debug, Clone)]
pub struct DirEntry {
    pub ino: u64,
    pub name: String,
    pub kind: FileKind,
    /// The attributes when listed, for READDIRPLUS (ignored by the kernel for `.` and `..`);
    /// `None` for a file listed for a plain READDIR, which needs none (see `listing`).
    pub attr: Option<Attr>,
    /// The stored version those attributes are of (`sizes::fingerprint`), for the inode table.
    pub version: Option<u64>,
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

/// An open directory.
#[derive(Debug, Clone, Copy)]
pub struct OpenedDir {
    pub fh: u64,
    /// The kernel's cached listing of this directory (if it has one) is younger than the
    /// metadata TTL: it may serve readdir from it without asking.
    pub keep_cache: bool,
}

const MAX_NAME_LEN: usize = 255;

pub struct ZarrFs {
    ns: Arc<dyn Namespace>,
    cfg: FsConfig,
    inodes: Mutex<InodeTable>,
    /// Resolved nodes, changes through the mount, what the kernel has cached.
    cache: NodeCache,
    /// Write buffers of open files and where they spill.
    writes: Writes,
    /// Open handles by number.
    handles: Handles,
    /// The read-ahead budget, windows and scans of the mount.
    ahead: MountReadAhead<FsError>,
    /// Tells the kernel to drop its cached pages of an inode (set by the FUSE session).
    invalidator: OnceLock<Box<dyn Fn(u64) + Send + Sync>>,
    /// Tells the kernel, before returning, that its attributes of an inode are stale (set by
    /// the FUSE session; see `sizes`).
    attr_invalidator: OnceLock<Box<dyn Fn(u64) + Send + Sync>>,
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
    b.node()
}

impl ZarrFs {
    pub fn new(ns: Arc<dyn Namespace>, cfg: FsConfig) -> Self {
        ZarrFs {
            cache: NodeCache::new(cfg.metadata_ttl),
            ns,
            cfg,
            inodes: Mutex::new(InodeTable::default()),
            writes: Writes::new(spill::Spill::new(spill::SpillConfig::default())),
            handles: Handles::default(),
            ahead: MountReadAhead::default(),
            invalidator: OnceLock::new(),
            attr_invalidator: OnceLock::new(),
        }
    }

    /// Use `spill` (`--spill-dir`, `--write-buffer-budget`) for write buffers from now on.
    pub fn with_spill(mut self, spill: Arc<spill::Spill>) -> Self {
        self.writes = Writes::new(spill);
        self
    }

    /// Hold at most `entries` resolved paths in the metadata cache (None: the default).
    pub fn with_metadata_cache_entries(self, entries: Option<usize>) -> Self {
        if let Some(n) = entries.and_then(NonZeroUsize::new) {
            self.cache.set_capacity(n);
        }
        self
    }

    /// The write buffers' spill directory and memory accounting.
    pub fn spill(&self) -> &Arc<spill::Spill> {
        self.writes.spill()
    }

    /// Serve reads without OPEN and RELEASE, for a kernel that stops sending them once OPEN
    /// answers ENOSYS. Only a read-only mount can: writes need handles (and so do files the
    /// kernel reads from a local copy: the adapter does not ask for this then). The kernel keeps
    /// its page cache across opens, so a changed content version (seen at a lookup, getattr or
    /// read) is answered with an invalidation instead of at open. Returns whether it is on.
    pub fn serve_without_open(&self) -> bool {
        if self.cfg.read_only {
            self.handles.set_openless();
        }
        self.handles.is_openless()
    }

    pub fn is_openless(&self) -> bool {
        self.handles.is_openless()
    }

    /// How to tell the kernel to drop its cached pages of an inode. Called from any thread,
    /// including the FUSE dispatch thread, so it must not block on the kernel.
    pub fn set_invalidator(&self, f: Box<dyn Fn(u64) + Send + Sync>) {
        let _ = self.invalidator.set(f);
    }

    /// How to tell the kernel that its attributes of an inode are stale. Called on the FUSE
    /// dispatch thread before an OPEN is answered, so it must return once the kernel has taken
    /// it (an attributes-only invalidation waits for no page).
    pub fn set_attr_invalidator(&self, f: Box<dyn Fn(u64) + Send + Sync>) {
        let _ = self.attr_invalidator.set(f);
    }

    pub fn config(&self) -> &FsConfig {
        &self.cfg
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
        let (node, buf) = self.resolve_with_buf(&path).await?;
        let node = node.ok_or(FsError::NotFound)?;
        Ok(self.named_attr(&path, &node, buf.is_none(), true))
    }

    pub fn forget(&self, ino: u64, n: u64) {
        if lock(&self.inodes).forget(ino, n) {
            self.inode_gone(ino);
        }
    }

    /// What hangs off an inode that no longer exists.
    fn inode_gone(&self, ino: u64) {
        self.cache.forget_inode(ino);
        self.ahead.forget_inode(ino);
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
        let (node, buf) = self.resolve_with_buf(&path).await?;
        let node = node.ok_or(FsError::NotFound)?;
        if buf.is_some() {
            return Ok(self.attr_of(ino, &node));
        }
        match self.inode_attr(ino, &path, &node) {
            Some(attr) => Ok(attr),
            None => self.unlinked_attr(ino).await,
        }
    }

    /// `set.uid`/`set.gid` are owner changes; a chown to the owner shown and a chmod to the
    /// mode shown change nothing, so they succeed (tools such as pjdfstest and `install -m`
    /// set what a new file already has). Any other change is refused: see docs/SEMANTICS.md.
    pub async fn setattr(&self, ino: u64, set: SetAttr) -> FsResult<Attr> {
        if set.uid.is_some() || set.gid.is_some() || set.mode.is_some() {
            let now = self.getattr(ino).await?;
            let same = set.uid.is_none_or(|u| u == now.uid)
                && set.gid.is_none_or(|g| g == now.gid)
                && set.mode.is_none_or(|m| m & 0o7777 == now.perm as u32);
            if !same {
                return Err(FsError::NotPermitted("modes and owners are changed at the store"));
            }
        }
        if let Some(size) = set.size {
            self.check_rw()?;
            // ftruncate() (also of a file unlinked while open) changes the handle's buffer,
            // which that handle writes back; truncate() of a path takes effect now.
            match self.truncate_handle(set.fh, size).await {
                Some(result) => result?,
                None => self.truncate(&self.path_of(ino)?, size).await?,
            }
        }
        self.getattr(ino).await
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
        let keep_cache = self.cache.listing_fresh(ino);
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
    /// `None` (and no reference) for an entry without attributes: a file found gone when
    /// READDIRPLUS asked for them, not to be sent.
    pub fn readdirplus_entry(&self, dir: &str, e: &DirEntry) -> Option<Attr> {
        let attr = e.attr?;
        let path = join_key(dir, &e.name);
        let ino = self.named_ino(&path, e.version, true);
        if let Some(Some(node)) = self.cached_node(&path) {
            self.note_version(ino, &node);
        }
        Some(Attr { ino, ..attr })
    }

    pub fn releasedir(&self, fh: u64) {
        let handle = self.handles.lock().remove(&fh);
        if let Some(Handle::Dir(listing)) = handle {
            self.release_listing(&listing);
        }
    }

    pub async fn mkdir(&self, parent: u64, name: &str) -> FsResult<Attr> {
        self.check_rw()?;
        let path = self.child_path(parent, name)?;
        self.ns.mkdir(&path).await?;
        self.cache.invalidate(&path);
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
        self.cache.invalidate_tree(&path);
        lock(&self.inodes).unlink_path(&path);
        Ok(())
    }

    // ---- handles ----

    fn new_handle(&self, h: Handle) -> u64 {
        self.handles.insert(h)
    }

    pub fn statfs(&self) -> (u64, u64) {
        self.ns.capacity().unwrap_or((1 << 50, 1 << 49))
    }

    /// Figures for the metrics endpoint, read when scraped. A write buffer locked right now
    /// (being written) is counted without its bytes rather than waited for.
    pub fn gauges(&self) -> FsGauges {
        let bufs: Vec<SharedBuf> = self.writes.bufs().values().cloned().collect();
        let buffer_bytes =
            bufs.iter().filter_map(|b| b.try_lock().ok().map(|b| b.data.len())).sum();
        FsGauges {
            open_handles: self.handles.lock().len() as u64,
            known_inodes: lock(&self.inodes).count() as u64,
            write_buffers: bufs.len() as u64,
            buffer_bytes,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::inodes::table::ROOT_INO;
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::prelude::*;
    use crate::views::{ViewKind, ViewOptions};
    use bytes::Bytes;

    /// A filesystem of the raw view over `store`, shown with this process's defaults.
    pub(crate) fn fs_over(store: Arc<dyn Store>, read_only: bool, ttl: Duration) -> ZarrFs {
        let ns = crate::views::build(ViewKind::Raw, store, &ViewOptions::default());
        ZarrFs::new(
            ns,
            FsConfig {
                metadata_ttl: ttl,
                read_only,
                passthrough: false,
                perms: crate::perms::ShownPerms::of_this_process(),
            },
        )
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
        let plus = fs.readdirplus_entry("d", &entries[2]).unwrap(); // handed to the kernel: a lookup
        let looked_up = fs.lookup(d.ino, "f7").await.unwrap();
        fs.releasedir(fh);
        assert_eq!(fs.gauges().known_inodes, before + 2);
        assert_eq!(fs.lookup(d.ino, &entries[2].name).await.unwrap().ino, plus.ino);
        fs.forget(plus.ino, 2);
        fs.forget(looked_up.ino, 1);
        assert_eq!(fs.gauges().known_inodes, before);
    }

    /// READDIRPLUS entries: one kernel reference each, the same numbers a lookup gives, and
    /// each file's content version noted, so a later change is an invalidation of exactly
    /// that inode.
    #[tokio::test]
    async fn readdirplus_entries_take_one_reference_each_and_note_versions() {
        let store = Arc::new(MemoryStore::new());
        for i in 0..40 {
            store.put(&format!("d/f{i}"), Bytes::from_static(b"x")).await.unwrap();
        }
        let fs = fs_over(store.clone(), true, Duration::from_secs(3600));
        let invalidated = Arc::new(Mutex::new(Vec::new()));
        let seen = invalidated.clone();
        fs.set_invalidator(Box::new(move |ino| lock(&seen).push(ino)));
        assert!(fs.serve_without_open());
        let d = fs.lookup(ROOT_INO, "d").await.unwrap();
        let before = fs.gauges().known_inodes;
        let fh = fs.opendir(d.ino).await.unwrap();
        let listed = fs.list_dir(fh).await.unwrap();
        let page: Vec<&DirEntry> = listed.iter().skip(2).collect(); // `.` and `..` take none
        let attrs: Vec<Option<Attr>> = page.iter().map(|e| fs.readdirplus_entry("d", e)).collect();
        assert_eq!(attrs.len(), 40);
        fs.releasedir(fh);
        assert_eq!(fs.gauges().known_inodes, before + 40, "each file held by the kernel");
        let at = page.iter().position(|e| e.name == "f7").unwrap();
        let f7 = attrs[at].unwrap().ino;

        // f7 changes in the store: its next lookup shows another version than the page sent.
        store.put("d/f7", Bytes::from_static(b"changed")).await.unwrap();
        fs.cache.invalidate("d/f7");
        let again = fs.lookup(d.ino, "f7").await.unwrap();
        assert_eq!((again.ino, again.size), (f7, 7), "the page's number is the lookup's");
        assert_eq!(*lock(&invalidated), vec![f7], "the page's version was not noted");
        fs.forget(f7, 1);
        for a in attrs.iter().flatten() {
            fs.forget(a.ino, 1);
        }
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
        let fs = fs_over(store, false, Duration::from_secs(3600));
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

    /// The node of an open write buffer names its path as a store key, where the store may
    /// hold another version or nothing (an inner chunk lives in its shard). A reader's handle
    /// on such a node reads the buffer it came from, also when the buffer was stored and
    /// retired between the lookup and the open (a reader racing the writer's close; the soak
    /// found a chunk read back as ENOENT that way).
    #[tokio::test]
    async fn a_reader_of_a_write_buffers_node_reads_that_buffer() {
        let store = Arc::new(MemoryStore::new());
        let fs = fs_over(store.clone(), false, Duration::from_secs(3600));
        let (attr, w) = fs.create(ROOT_INO, "k", 0).await.unwrap();
        fs.write(w.fh, 0, b"buffered").await.unwrap();
        let (node, buf) = fs.resolve_with_buf("k").await.unwrap();
        let (node, buf) = (node.unwrap(), buf.expect("the open buffer"));
        assert_eq!(node.size, 8);
        fs.release(w.fh).await.unwrap();
        assert!(!fs.writes.bufs().contains_key("k"), "retired");
        store.put("k", Bytes::from_static(b"a later version")).await.unwrap();
        let r = fs.open_for_reading(attr.ino, "k".into(), node, Some(buf)).unwrap();
        assert_eq!(fs.read(r.fh, 0, 64).await.unwrap().as_ref(), b"buffered");
        // With the buffer gone, a new open sees the store: while the buffer's reader holds
        // the inode, that is ESTALE at the old inode (the kernel looks the name up again)
        // and the later version under a new one (`sizes`).
        assert!(matches!(fs.open(attr.ino, libc::O_RDONLY).await, Err(FsError::Stale)));
        let now = fs.lookup(ROOT_INO, "k").await.unwrap();
        assert_ne!(now.ino, attr.ino);
        let r2 = fs.open(now.ino, libc::O_RDONLY).await.unwrap();
        assert_eq!(fs.read(r2.fh, 0, 64).await.unwrap().as_ref(), b"a later version");
        fs.release(r.fh).await.unwrap();
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
        let attr = fs.readdirplus_entry(&fs.dir_path(fh).unwrap(), f).unwrap();
        assert_eq!((attr.ino, attr.size, attr.kind), (f.ino, 5, FileKind::File));
        assert_eq!(fs.path_of(attr.ino).unwrap(), "f");
        fs.forget(attr.ino, 1);
        assert!(fs.path_of(attr.ino).is_ok(), "still in the open listing");
        fs.releasedir(fh);
        assert!(fs.path_of(attr.ino).is_err());
    }

    /// An open for writing that raced the last close of the file's buffer (pjdfstest
    /// `ftruncate::shrink_not_empty`, failed once in CI): the open took the buffer from the
    /// open files, then waited for its lock while the close retired it and took it out. It
    /// must not join that buffer (no path finds it any more: a truncate through the new
    /// handle would go nowhere, and the size shown would be the store's) but open anew.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_open_racing_the_last_close_does_not_join_the_closed_buffer() {
        let store = Arc::new(MemoryStore::new());
        let fs = Arc::new(fs_over(store.clone(), false, Duration::from_secs(60)));
        let (attr, a) = fs.create(ROOT_INO, "f", libc::O_RDWR).await.unwrap();
        fs.write(a.fh, 0, &[7u8; 12345]).await.unwrap();
        let set =
            |size, fh| SetAttr { size: Some(size), fh: Some(fh), mode: None, uid: None, gid: None };
        fs.setattr(attr.ino, set(23456, a.fh)).await.unwrap();
        fs.flush(a.fh).await.unwrap();
        assert_eq!(store.get("f").await.unwrap().len(), 23456);

        // The close of `a` holds the buffer's lock when another open takes the buffer.
        let x = fs.writes.bufs()["f"].clone();
        let held = x.lock().await;
        let before = Arc::strong_count(&x);
        let opening = tokio::spawn({
            let fs = fs.clone();
            async move { fs.open(attr.ino, libc::O_WRONLY).await.unwrap() }
        });
        while Arc::strong_count(&x) == before {
            tokio::task::yield_now().await;
        }
        // The rest of `release(a)`: the last handle closes it, and it leaves the open files.
        fs.handles.lock().remove(&a.fh);
        let mut held = held;
        assert!(held.st.close_handle(true));
        fs.writes.drop_buf("f", &x);
        drop(held);
        let b = opening.await.unwrap();

        let shown = fs.setattr(attr.ino, set(1, b.fh)).await.unwrap();
        assert_eq!(shown.size, 1, "the truncate through the new handle is seen");
        assert_eq!(fs.getattr(attr.ino).await.unwrap().size, 1);
        fs.flush(b.fh).await.unwrap();
        fs.release(b.fh).await.unwrap();
        assert_eq!(store.get("f").await.unwrap().len(), 1);
    }
}
