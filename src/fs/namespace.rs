//! The async side of a view: resolves paths of the mount to `Node`s by asking the store, and
//! carries out reads and writes. `RawNamespace` shows the store as it is; other views wrap it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

use super::error::{FsError, FsResult};
use super::spill::Body;
use crate::store::{join_key, ByteRange, EntryListing, MetaWanted, PutMode, Store, StoreError};
use crate::view::node::{Backing, Node};

/// A listing read page by page (see `Namespace::list_pages`): each name with its node, or
/// `None` for a regular file whose attributes the page was read without.
pub type NodePages<'a> = futures::stream::BoxStream<'a, FsResult<Vec<(String, Option<Node>)>>>;

/// Paths are store-style keys: relative, `/`-separated, `""` for the root.
#[async_trait]
pub trait Namespace: Send + Sync + 'static {
    async fn lookup(&self, path: &str) -> FsResult<Option<Node>>;
    /// The children of a directory, sorted by name.
    async fn list(&self, dir: &str) -> FsResult<Vec<(String, Node)>>;
    /// The children of a directory page by page, each page sorted by name, no name twice over
    /// all pages, an error ending the listing: a directory can then be shown before it has
    /// been read whole. A page read while `wanted` is false may leave out the attributes of
    /// files (`None`) where they would cost a request per file (see
    /// `Store::list_entry_pages`). By default the whole `list` as one page, every node known
    /// (views that must see every key of a directory before they know their own entries keep
    /// it that way).
    fn list_pages<'a>(&'a self, dir: &'a str, _wanted: MetaWanted) -> NodePages<'a> {
        use futures::FutureExt;
        Box::pin(futures::stream::once(self.list(dir).map(|page| {
            page.map(|nodes| nodes.into_iter().map(|(name, node)| (name, Some(node))).collect())
        })))
    }
    /// Bytes `offset..offset+size` of the file at `path` (resolved earlier to `node`).
    async fn read(&self, path: &str, node: &Node, offset: u64, size: u32) -> FsResult<Bytes>;
    /// Whether a file at `path` may be created or replaced (checked at open, before any data).
    async fn check_writable(&self, path: &str) -> FsResult<()>;
    /// Replace the whole content of the file at `path`.
    async fn write_file(&self, path: &str, data: Bytes) -> FsResult<()>;
    /// `write_file` of a write buffer that may have spilled to disk. By default the body is
    /// read into memory; views over a store stream a spilled body to it (`Store::put_file`).
    async fn write_file_body(&self, path: &str, body: Body) -> FsResult<()> {
        let data = body.into_bytes().map_err(|e| StoreError::from_io(path, e))?;
        self.write_file(path, data).await
    }
    /// Write a new file at `path` only if none is there, decided by the store itself (so of
    /// two daemons creating one key only one succeeds): `Exists` otherwise, nothing written.
    /// No default: a view that cannot create atomically must say so, not overwrite.
    async fn create_file(&self, path: &str, data: Bytes) -> FsResult<()>;
    async fn remove_file(&self, path: &str) -> FsResult<()>;
    async fn rename(&self, from: &str, to: &str, is_dir: bool) -> FsResult<()>;
    async fn mkdir(&self, path: &str) -> FsResult<()>;
    async fn rmdir(&self, path: &str) -> FsResult<()>;
    /// (total bytes, free bytes) for statfs, when the backend knows.
    fn capacity(&self) -> Option<(u64, u64)>;
    /// The file resolved to `node` will likely be read soon (see `scan_ahead`): start
    /// fetching what backs it. Nothing by default.
    async fn prefetch(&self, _node: &Node) {}
}

/// Slice `data` (the bytes of a whole file) to a read request.
pub fn slice_for_read(data: &Bytes, offset: u64, size: u32) -> Bytes {
    let r = read_range(offset, size, data.len() as u64);
    data.slice(r.start as usize..r.end as usize)
}

/// The bytes a read of `size` at `offset` gets from a file of `len` bytes (empty past the end).
pub fn read_range(offset: u64, size: u32, len: u64) -> std::ops::Range<u64> {
    ByteRange::Range(offset..offset.saturating_add(size as u64)).clip(len)
}

/// The whole content of the file at `path`, read in steps of at most 64 MiB.
pub async fn read_all(ns: &dyn Namespace, path: &str, node: &Node) -> FsResult<Vec<u8>> {
    const STEP: u64 = 64 << 20;
    let mut out = Vec::with_capacity(node.size as usize);
    while (out.len() as u64) < node.size {
        let want = (node.size - out.len() as u64).min(STEP) as u32;
        let part = ns.read(path, node, out.len() as u64, want).await?;
        if part.is_empty() {
            break;
        }
        out.extend_from_slice(&part);
    }
    Ok(out)
}

/// The store as stored. On stores without real directories, `mkdir` makes a directory that
/// lives in memory until a key appears below it (the way object-store mounts behave).
pub struct RawNamespace {
    store: Arc<dyn Store>,
    virtual_dirs: Mutex<HashSet<String>>,
    started: SystemTime,
}

impl RawNamespace {
    pub fn new(store: Arc<dyn Store>) -> Self {
        RawNamespace { store, virtual_dirs: Mutex::new(HashSet::new()), started: SystemTime::now() }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn is_virtual_dir(&self, path: &str) -> bool {
        crate::locks::lock(&self.virtual_dirs).contains(path)
    }

    fn dir_node(&self) -> Node {
        Node::dir(self.started)
    }
}

#[async_trait]
impl Namespace for RawNamespace {
    async fn lookup(&self, path: &str) -> FsResult<Option<Node>> {
        if path.is_empty() {
            return Ok(Some(self.dir_node()));
        }
        let found = match self.store.lookup(path).await {
            Ok(found) => found,
            Err(StoreError::InvalidKey(..)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // A name that is both an object and a prefix (object stores allow it) shows as the
        // directory, so everything below it stays reachable.
        if found.dir || self.is_virtual_dir(path) {
            return Ok(Some(self.dir_node()));
        }
        Ok(found.file.map(|meta| Node {
            size: meta.size,
            modified: meta.modified,
            backing: Backing::Object { key: path.to_string(), version: meta.version },
        }))
    }

    async fn list(&self, dir: &str) -> FsResult<Vec<(String, Node)>> {
        let listing = self.store.list(dir).await?;
        let mut out = self.nodes_of(dir, listing);
        for name in self.virtual_dirs_in(dir) {
            if !out.iter().any(|(n, _)| *n == name) {
                out.push((name, self.dir_node()));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The store's pages as they come; then, as a last page, the virtual directories (made
    /// by mkdir, see `RawNamespace`) that no page showed.
    fn list_pages<'a>(&'a self, dir: &'a str, wanted: MetaWanted) -> NodePages<'a> {
        use futures::stream::{self, StreamExt};
        let virtuals: HashSet<String> = self.virtual_dirs_in(dir).collect();
        let state = (self.store.list_entry_pages(dir, wanted), Some(virtuals));
        stream::unfold(state, move |(mut pages, mut virtuals)| async move {
            let unseen = virtuals.as_mut()?;
            match pages.next().await {
                Some(Ok(listing)) => {
                    let mut out = self.entries_of(dir, listing);
                    out.sort_by(|a, b| a.0.cmp(&b.0));
                    if !unseen.is_empty() {
                        out.iter().for_each(|(name, _)| {
                            unseen.remove(name);
                        });
                    }
                    Some((Ok(out), (pages, virtuals)))
                }
                Some(Err(e)) => Some((Err(e.into()), (pages, None))),
                None => {
                    let mut last: Vec<(String, Option<Node>)> =
                        virtuals.take()?.into_iter().map(|n| (n, Some(self.dir_node()))).collect();
                    last.sort_by(|a, b| a.0.cmp(&b.0));
                    (!last.is_empty()).then_some((Ok(last), (pages, None)))
                }
            }
        })
        .boxed()
    }

    async fn read(&self, _path: &str, node: &Node, offset: u64, size: u32) -> FsResult<Bytes> {
        match &node.backing {
            Backing::Dir => Err(FsError::IsADirectory),
            Backing::Generated(data) => Ok(slice_for_read(data, offset, size)),
            Backing::Object { key, .. } => {
                let r = read_range(offset, size, node.size);
                if r.is_empty() {
                    return Ok(Bytes::new());
                }
                // The object may have been replaced since the file was opened: bytes of the new
                // object cut to the old size would be neither the old content nor the new one.
                // (Sizes, unlike version tags, compare reliably across every backend's answers.)
                match self.store.get_ranged(key, ByteRange::Range(r)).await? {
                    Some((data, meta)) if meta.size == node.size => Ok(data),
                    Some(_) => Err(FsError::Stale),
                    None => Err(FsError::NotFound),
                }
            }
            Backing::Slice { key, offset: base, len, .. } => {
                let r = read_range(offset, size, *len);
                if r.is_empty() {
                    return Ok(Bytes::new());
                }
                Ok(self.store.get_range(key, base + r.start..base + r.end).await?)
            }
            // Only the presenting view that made a decoded node can read it.
            Backing::Decoded { .. } | Backing::Unwrapped { .. } => {
                Err(FsError::NotSupported("a decoded chunk read below its view"))
            }
        }
    }

    async fn check_writable(&self, path: &str) -> FsResult<()> {
        Ok(self.store.check_key(path)?)
    }

    async fn write_file(&self, path: &str, data: Bytes) -> FsResult<()> {
        self.store.put(path, data).await?;
        self.forget_virtual_ancestors(path);
        Ok(())
    }

    async fn write_file_body(&self, path: &str, body: Body) -> FsResult<()> {
        match body {
            Body::Bytes(data) => self.store.put(path, data).await?,
            Body::File(file, len) => {
                self.store.put_file(path, file, len, PutMode::Overwrite).await?
            }
        }
        self.forget_virtual_ancestors(path);
        Ok(())
    }

    async fn create_file(&self, path: &str, data: Bytes) -> FsResult<()> {
        match self.store.put_opts(path, data, PutMode::Create).await {
            Err(StoreError::AlreadyExists(_)) => return Err(FsError::Exists),
            r => r?,
        }
        self.forget_virtual_ancestors(path);
        Ok(())
    }

    /// On object stores the directories the key was in stay (in memory) until removed, as on
    /// a filesystem: `rm -r` (and zarr-python's `LocalStore.clear`) unlinks the last file, then
    /// rmdirs the directory, which would otherwise have vanished with its last key.
    async fn remove_file(&self, path: &str) -> FsResult<()> {
        self.store.delete(path).await?;
        if !self.store.has_real_dirs() {
            let mut v = crate::locks::lock(&self.virtual_dirs);
            let mut k = path;
            while let Some(i) = k.rfind('/') {
                k = &k[..i];
                v.insert(k.to_string());
            }
        }
        Ok(())
    }

    async fn rename(&self, from: &str, to: &str, is_dir: bool) -> FsResult<()> {
        self.store.check_key(to)?;
        if is_dir {
            if self.is_virtual_dir(from) {
                let mut v = crate::locks::lock(&self.virtual_dirs);
                v.remove(from);
                v.insert(to.to_string());
                return Ok(());
            }
            return Ok(self.store.rename_dir(from, to).await?);
        }
        self.store.rename(from, to).await?;
        self.forget_virtual_ancestors(to);
        Ok(())
    }

    async fn mkdir(&self, path: &str) -> FsResult<()> {
        self.store.check_key(path)?;
        if self.lookup(path).await?.is_some() {
            return Err(FsError::Exists);
        }
        if self.store.has_real_dirs() {
            Ok(self.store.create_dir(path).await?)
        } else {
            crate::locks::lock(&self.virtual_dirs).insert(path.to_string());
            Ok(())
        }
    }

    async fn rmdir(&self, path: &str) -> FsResult<()> {
        if self.store.has_real_dirs() {
            return Ok(self.store.remove_dir(path).await?);
        }
        let listing = self.store.list(path).await?;
        if !listing.files.is_empty() || !listing.dirs.is_empty() {
            return Err(FsError::NotEmpty);
        }
        if crate::locks::lock(&self.virtual_dirs).remove(path) {
            Ok(())
        } else {
            Err(FsError::NotFound)
        }
    }

    fn capacity(&self) -> Option<(u64, u64)> {
        self.store.capacity()
    }

    async fn prefetch(&self, node: &Node) {
        if let Backing::Object { key, .. } = &node.backing {
            self.store.prefetch(key, node.size).await;
        }
    }
}

impl RawNamespace {
    /// The entries of a whole store listing of `dir`, unsorted (see `entries_of`).
    fn nodes_of(&self, dir: &str, listing: crate::store::Listing) -> Vec<(String, Node)> {
        // Every file of a `Listing` has its metadata, so every entry has its node.
        let entries = self.entries_of(dir, listing.into());
        entries.into_iter().filter_map(|(name, node)| Some((name, node?))).collect()
    }

    /// The entries of (a page of) a store listing of `dir`, unsorted; a file listed without
    /// its metadata has no node. A name that is both a file and a directory is shown as the
    /// directory (see `lookup`).
    fn entries_of(&self, dir: &str, listing: EntryListing) -> Vec<(String, Option<Node>)> {
        let mut out = Vec::with_capacity(listing.files.len() + listing.dirs.len());
        let dirs: HashSet<&str> = listing.dirs.iter().map(String::as_str).collect();
        for (name, meta) in listing.files {
            if dirs.contains(name.as_str()) {
                continue; // shown as the directory (see lookup)
            }
            let node = meta.map(|meta| Node {
                size: meta.size,
                modified: meta.modified,
                backing: Backing::Object { key: join_key(dir, &name), version: meta.version },
            });
            out.push((name, node));
        }
        drop(dirs);
        for name in listing.dirs {
            out.push((name, Some(self.dir_node())));
        }
        out
    }

    /// Names of the virtual directories directly in `dir`.
    fn virtual_dirs_in(&self, dir: &str) -> impl Iterator<Item = String> {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let names: Vec<String> = crate::locks::lock(&self.virtual_dirs)
            .iter()
            .filter_map(|v| v.strip_prefix(&prefix))
            .filter(|name| !name.contains('/'))
            .map(str::to_string)
            .collect();
        names.into_iter()
    }

    /// Once a key exists below a virtual directory, the prefix itself makes it a directory.
    fn forget_virtual_ancestors(&self, key: &str) {
        if self.store.has_real_dirs() {
            return;
        }
        let mut v = crate::locks::lock(&self.virtual_dirs);
        let mut k = key;
        while let Some(i) = k.rfind('/') {
            k = &k[..i];
            v.remove(k);
        }
    }
}
