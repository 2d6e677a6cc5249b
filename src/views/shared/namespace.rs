//! The one trait through which the filesystem core (`fs`) and the HTTP front door (`serve`)
//! reach every view, its writes, and the read helpers the views share.

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::{ByteRange, MetaWanted, StoreError};
use crate::views::shared::body::Body;
use crate::views::shared::error::{FsError, FsResult};
use crate::views::shared::mapping::node::Node;

/// Temp files that writers rename over the real key (`*.partial`): kept in the mount until
/// renamed, and accepted by views that check every change.
pub fn is_staged_name(name: &str) -> bool {
    name.ends_with(".partial")
}

/// A listing read page by page (see `Namespace::list_pages`): each name with its node, or
/// `None` for a regular file whose attributes the page was read without.
pub type NodePages<'a> = futures::stream::BoxStream<'a, FsResult<Vec<(String, Option<Node>)>>>;

/// Paths are store-style keys: relative, `/`-separated, `""` for the root.
#[async_trait]
pub trait Namespace: NamespaceWrites + Send + Sync + 'static {
    async fn lookup(&self, path: &str) -> FsResult<Option<Node>>;
    /// The children of a directory, sorted by name.
    async fn list(&self, dir: &str) -> FsResult<Vec<(String, Node)>>;
    /// The children of a directory page by page, each page sorted by name, no name twice over
    /// all pages, an error ending the listing: a directory can then be shown before it has
    /// been read whole. A page read while `wanted` is false may leave out the attributes of
    /// files (`None`) where they would cost a request per file (see
    /// `ListStore::list_entry_pages`). By default the whole `list` as one page, every node known
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
    /// (total bytes, free bytes) for statfs, when the backend knows.
    fn capacity(&self) -> Option<(u64, u64)>;
    /// The file resolved to `node` will likely be read soon (see `prefetch::across_files`): start
    /// fetching what backs it. Nothing by default.
    async fn prefetch(&self, _node: &Node) {}
    /// A local file of exactly `node`'s bytes, for the kernel to read directly (see
    /// `StoreHints::local_copy`). None by default. May block: call it off the runtime.
    fn local_copy(&self, _node: &Node) -> Option<std::fs::File> {
        None
    }
}

/// The writes of a namespace. A view that takes none is a `ReadOnlyView`.
#[async_trait]
pub trait NamespaceWrites: Send + Sync {
    /// Whether a file at `path` may be created or replaced (checked at open, before any data).
    async fn check_writable(&self, path: &str) -> FsResult<()>;
    /// Replace the whole content of the file at `path`.
    async fn write_file(&self, path: &str, data: Bytes) -> FsResult<()>;
    /// `write_file` of a write buffer that may have spilled to disk. By default the body is
    /// read into memory; views over a store stream a spilled body to it (`WriteStore::put_file`).
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
}

/// A view that shows the store without taking writes: every write is refused as read-only.
pub trait ReadOnlyView: Send + Sync {}

const READ_ONLY: FsError = FsError::ReadOnly("this view is read-only");

#[async_trait]
impl<T: ReadOnlyView> NamespaceWrites for T {
    async fn check_writable(&self, _path: &str) -> FsResult<()> {
        Err(READ_ONLY)
    }
    async fn write_file(&self, _path: &str, _data: Bytes) -> FsResult<()> {
        Err(READ_ONLY)
    }
    async fn create_file(&self, _path: &str, _data: Bytes) -> FsResult<()> {
        Err(READ_ONLY)
    }
    async fn remove_file(&self, _path: &str) -> FsResult<()> {
        Err(READ_ONLY)
    }
    async fn rename(&self, _from: &str, _to: &str, _is_dir: bool) -> FsResult<()> {
        Err(READ_ONLY)
    }
    async fn mkdir(&self, _path: &str) -> FsResult<()> {
        Err(READ_ONLY)
    }
    async fn rmdir(&self, _path: &str) -> FsResult<()> {
        Err(READ_ONLY)
    }
}

/// Slice `data` (the bytes of a whole file) to a read request.
pub fn slice_for_read(data: &Bytes, offset: u64, size: u32) -> Bytes {
    let r = read_range(offset, size, data.len() as u64);
    data.slice(r.start as usize..r.end as usize)
}

/// Whether a read of `size` at `offset` covers the last byte of a file of `len` bytes (or the
/// file is empty): a sequential reader is done with it.
pub fn reads_last_byte(offset: u64, size: u32, len: u64) -> bool {
    len == 0 || (offset < len && offset.saturating_add(size as u64) >= len)
}

/// The bytes a read of `size` at `offset` gets from a file of `len` bytes (empty past the end).
pub fn read_range(offset: u64, size: u32, len: u64) -> std::ops::Range<u64> {
    ByteRange::Range(offset..offset.saturating_add(size as u64)).clip(len)
}

/// A store's answer to a read of `r` that brought `got` bytes, fewer than asked for within
/// the object: logged, for the caller to ask again or fail.
pub(crate) fn short_answer(key: &str, r: &std::ops::Range<u64>, got: usize) {
    tracing::warn!(key, range = ?r, got, "the store answered a read short");
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
