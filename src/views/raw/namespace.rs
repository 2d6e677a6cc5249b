//! The raw view, the async side: resolves paths of the mount to `Node`s by asking the store,
//! and carries out reads and writes. `RawNamespace` shows the store as it is; the other views
//! wrap it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use crate::metrics::Ahead;
use crate::prefetch::array::ArrayPrefetch;
use crate::prefetch::documents::{fetch_documents, names_zarr_node, DOCUMENT_BYTES};
use crate::store::{
    join_key, split_key, ByteRange, EntryListing, MetaWanted, PutMode, Store, StoreError,
};
use crate::ttl_cache::TtlCache;
use crate::views::raw::mapping::{ancestors, classify, TreeLookup};
use crate::views::shared::body::Body;
use crate::views::shared::error::{FsError, FsResult};
use crate::views::shared::mapping::node::{Backing, Node};
use crate::views::shared::namespace::{
    read_range, short_answer, slice_for_read, Namespace, NamespaceWrites, NodePages,
};
use crate::zarr::chunk_tree::{stored_chunk_bound, ChunkTree};

/// Whether two version tags of an object name the same content. Only tags of one kind
/// compare: an ETag (quoted) with an ETag, a local file's tag with a local file's. A tag
/// missing from either answer, or made up by the backend from a time and size where a listing
/// carried no ETag (s3s-fs lists none), decides nothing.
fn same_tag(a: &str, b: &str) -> bool {
    let etag = |t: &str| t.trim_start_matches("W/").starts_with('"');
    if a.is_empty() || b.is_empty() || etag(a) != etag(b) {
        return true;
    }
    bare_tag(a) == bare_tag(b)
}

/// An ETag without its weak marker and quotes.
fn bare_tag(t: &str) -> &str {
    t.trim_start_matches("W/").trim_matches('"')
}

/// The store as stored. On stores without real directories, `mkdir` makes a directory that
/// lives in memory until a key appears below it (the way object-store mounts behave).
pub struct RawNamespace {
    store: Arc<dyn Store>,
    virtual_dirs: Mutex<HashSet<String>>,
    started: SystemTime,
    /// Array directory -> its chunk tree, learned from metadata documents read through the
    /// mount and trusted for the metadata TTL (see `with_chunk_trees`).
    trees: Option<TtlCache<KnownArray>>,
    /// How much of a metadata document its lookup reads (0: the lookup reads nothing).
    metadata_lookup_bytes: u64,
    /// Small arrays fetched whole at their first chunk read (see `with_array_prefetch`).
    array_prefetch: ArrayPrefetch,
    /// The lookup of a `*.zarr` directory fetches its metadata documents (see
    /// `with_document_fetch`).
    document_fetch: bool,
}

/// What a metadata document read through the mount says about its array's chunk files.
#[derive(Clone)]
struct KnownArray {
    tree: ChunkTree,
    /// An upper estimate of one chunk object's size (`zarr::chunk_tree::stored_chunk_bound`).
    chunk_bound: Option<u64>,
    /// Its chunks were prefetched (see `with_array_prefetch`), once per reading of the
    /// metadata document.
    prefetched: Arc<AtomicBool>,
}

/// A metadata document's lookup reads up to this much of it (see `with_chunk_trees`), as its
/// fetch ahead does; a larger document gets its true size from the answer.
const METADATA_LOOKUP_BYTES: u64 = DOCUMENT_BYTES;

/// Arrays whose chunk trees are kept at once.
const CHUNK_TREES: usize = 4096;
/// How far above a path an array directory is looked for: a chunk tree is at most the
/// array's rank plus one (`c/`) deep, and ranks beyond 32 are not seen in practice.
const MAX_TREE_DEPTH: usize = 33;

impl RawNamespace {
    pub fn new(store: Arc<dyn Store>) -> Self {
        RawNamespace {
            store,
            virtual_dirs: Mutex::new(HashSet::new()),
            started: SystemTime::now(),
            trees: None,
            metadata_lookup_bytes: 0,
            array_prefetch: ArrayPrefetch::default(),
            document_fetch: false,
        }
    }

    /// The lookup of a directory named `*.zarr` also fetches its metadata documents
    /// (`fetch_documents`), sent beside it: a reader opening it asks for them next, and then
    /// finds them in the cache below. Needs `with_chunk_trees`.
    pub fn with_document_fetch(mut self, on: bool) -> Self {
        self.document_fetch = on;
        self
    }

    /// Fetch all the chunks of a small array (at most `bytes` by its metadata's estimate, see
    /// `prefetch::array`) as soon as its first chunk is looked up, each one whole into the
    /// object cache. Needs `with_chunk_trees`.
    pub fn with_array_prefetch(mut self, bytes: u64) -> Self {
        self.array_prefetch = ArrayPrefetch::new(bytes);
        self
    }

    /// Answer lookups inside the chunk tree of an array whose metadata document was read
    /// through this namespace (within `ttl`) from that tree (see `views::raw::mapping`):
    /// directories of the tree with no request, chunk files with one request and no directory
    /// probe: a GET of the whole chunk when the metadata bounds it within what the cache
    /// below keeps whole (the read that follows a lookup is then served from memory: one
    /// round trip per chunk instead of two), else a HEAD. Only on stores without real
    /// directories, where a directory is a prefix that costs a LIST to confirm; on a
    /// filesystem a lookup is one cheap `stat` anyway.
    ///
    /// On the same stores, the lookup of a Zarr metadata document's name (`zarr.json`,
    /// `.zarray`, `.zattrs`, `.zgroup`, `.zmetadata`) is one GET of its first 1 MiB, in place of
    /// a HEAD and a directory probe (`ListStore::lookup_reading`), and the caches below keep the
    /// document: zarr-python's read of it right after is then served from memory, one round
    /// trip fewer before the first chunk, and its probes of the absent ones cost a GET each,
    /// as with its own S3 store. These names are documents, never directories (the rule:
    /// `ListStore::lookup_reading`); a directory made through the mount is still one.
    pub fn with_chunk_trees(mut self, ttl: Duration) -> Self {
        if !self.store.has_real_dirs() && !ttl.is_zero() {
            self.trees = Some(TtlCache::new(CHUNK_TREES, ttl));
            self.metadata_lookup_bytes = METADATA_LOOKUP_BYTES.min(self.store.whole_object_limit());
        }
        self
    }

    /// The lookup of a name below no known chunk tree: one request (or two sent together)
    /// to the store, see `with_chunk_trees` for metadata documents.
    async fn store_lookup(&self, path: &str) -> Result<crate::store::Lookup, StoreError> {
        let (_, name) = split_key(path);
        if self.metadata_lookup_bytes > 0 && is_metadata_doc(name) {
            let (found, _) = self.store.lookup_reading(path, self.metadata_lookup_bytes).await?;
            return Ok(found);
        }
        if self.document_fetch && self.metadata_lookup_bytes > 0 && names_zarr_node(name) {
            // Sent beside the lookup, so the documents come in the same round trip.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(fetch_documents(self.store.clone(), path.to_string()));
            }
        }
        self.store.lookup(path).await
    }

    /// What the chunk tree of the nearest known array above `path` says it is, that array's
    /// directory, and what is known of it.
    fn tree_lookup<'p>(&self, path: &'p str) -> Option<(TreeLookup, &'p str, KnownArray)> {
        let trees = self.trees.as_ref()?;
        ancestors(path, MAX_TREE_DEPTH).find_map(|(dir, rel)| {
            trees.get(dir).map(|known| (classify(&known.tree, rel), dir, known))
        })
    }

    /// A chunk of the array at `dir` is being looked up (`looking`): if the array is small
    /// enough, start fetching its other chunks (see `with_array_prefetch`).
    fn prefetch_array(&self, dir: &str, known: &KnownArray, looking: &str) {
        let Some(bound) = known.chunk_bound else { return };
        let Some(count) = known.tree.chunk_count() else { return };
        let small = self.array_prefetch.wants(count, bound, self.store.whole_object_limit());
        if !small || known.prefetched.swap(true, Ordering::Relaxed) {
            return;
        }
        let keys: Vec<String> = known
            .tree
            .all_chunks()
            .map(|c| join_key(dir, &known.tree.key(&c)))
            .filter(|k| k != looking && !self.store.keeps_local_copy(k))
            .collect();
        tracing::debug!(array = dir, chunks = keys.len(), "prefetching a small array");
        ArrayPrefetch::start(self.store.clone(), keys, bound);
    }

    /// The metadata of a chunk object, found by the cheapest request that also serves the
    /// read likely to follow (see `with_chunk_trees`).
    async fn chunk_meta(
        &self,
        path: &str,
        bound: Option<u64>,
    ) -> Result<Option<crate::store::ObjectMeta>, StoreError> {
        let whole = self.store.whole_object_limit();
        match bound {
            // With a local copy (a warm disk cache) the HEAD costs no request, and the bytes
            // are read from the copy, by the kernel itself when the mount hands it over.
            // The answer comes with the response's headers; the bytes go on into the cache
            // for the reads that follow, which take them as they arrive.
            Some(bound) if bound <= whole && !self.store.keeps_local_copy(path) => Ok(self
                .store
                .get_streamed(path, ByteRange::Range(0..bound))
                .await?
                .map(|(meta, _)| meta)),
            _ => self.store.head(path).await,
        }
    }

    /// A whole metadata document was read at `key`: learn (or forget) its directory's tree.
    fn learn_tree(&self, key: &str, data: &[u8]) {
        let Some(trees) = &self.trees else { return };
        let (dir, name) = split_key(key);
        if !is_array_doc(name) {
            return;
        }
        match ChunkTree::from_metadata(name, data) {
            Some(tree) => {
                let chunk_bound = stored_chunk_bound(name, data);
                let known = KnownArray { tree, chunk_bound, prefetched: Arc::default() };
                trees.put(dir.to_string(), known)
            }
            None => trees.forget(dir),
        }
    }

    /// `key` is written, removed or renamed through the mount: a tree it defined is gone.
    fn forget_tree_of(&self, key: &str) {
        if let Some(trees) = &self.trees {
            let (dir, name) = split_key(key);
            if is_array_doc(name) {
                trees.forget(dir);
            }
        }
    }

    /// A directory moved or went away: every tree at or below it may be wrong now.
    fn forget_all_trees(&self) {
        if let Some(trees) = &self.trees {
            trees.clear();
        }
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

    /// As `real_dir_perms`, for a directory of a view that may be a stored file (a shard
    /// shown as the directory of its chunks): the file's, open to entry where it is readable.
    pub(in crate::views) async fn stored_perms_as_dir(
        &self,
        path: &str,
    ) -> Option<crate::store::Perms> {
        if !self.store.has_real_dirs() {
            return None;
        }
        let found = self.store.lookup(path).await.ok()?;
        found.dir_perms.or(found.file.and_then(|f| f.perms).map(crate::store::Perms::as_dir))
    }

    /// The own mode, owner and group of the directory at `path`, from a store with real
    /// directories (a local one), for a directory known without asking the store (the root, a
    /// chunk tree's): the kernel checks a directory's mode before letting anyone in, so one
    /// shown more open than it is would open what is below it. `None` elsewhere, and where
    /// the store has no such directory (yet).
    async fn real_dir_perms(&self, path: &str) -> Option<crate::store::Perms> {
        if !self.store.has_real_dirs() {
            return None;
        }
        self.store.lookup(path).await.ok().and_then(|found| found.dir_perms)
    }
}

#[async_trait]
impl Namespace for RawNamespace {
    async fn lookup(&self, path: &str) -> FsResult<Option<Node>> {
        if path.is_empty() {
            return Ok(Some(self.dir_node().with_perms(self.real_dir_perms(path).await)));
        }
        match self.tree_lookup(path) {
            Some((TreeLookup::Dir, ..)) => {
                return Ok(Some(self.dir_node().with_perms(self.real_dir_perms(path).await)));
            }
            Some((TreeLookup::ChunkFile, dir, known)) if !self.is_virtual_dir(path) => {
                self.prefetch_array(dir, &known, path);
                return match self.chunk_meta(path, known.chunk_bound).await {
                    Ok(meta) => Ok(meta.map(|meta| self.object_node(path, meta))),
                    Err(StoreError::InvalidKey(..)) => Ok(None),
                    Err(e) => Err(e.into()),
                };
            }
            _ => {}
        }
        let found = match self.store_lookup(path).await {
            Ok(found) => found,
            Err(StoreError::InvalidKey(..)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // A name that is both an object and a prefix (object stores allow it) shows as the
        // directory, so everything below it stays reachable.
        if found.dir || self.is_virtual_dir(path) {
            return Ok(Some(self.dir_node().with_perms(found.dir_perms)));
        }
        Ok(found.file.map(|meta| self.object_node(path, meta)))
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
            Backing::Object { key, version } => {
                let r = read_range(offset, size, node.size);
                if r.is_empty() {
                    return Ok(Bytes::new());
                }
                // The object may have been replaced since the file was opened: bytes of the new
                // object cut to the old size would be neither the old content nor the new one,
                // and bytes of a new version of the same size beside pages of the old one
                // would be neither either. So the answer must be of the size and the version
                // tag the file was opened at (a tag only where both answers carry one).
                let whole = r.start == 0 && r.end == node.size;
                // A short answer is asked again once, then an error: handed up, the reader
                // would take its end for the end of the file.
                for _ in 0..2 {
                    match self.store.get_ranged(key, ByteRange::Range(r.clone())).await? {
                        Some((data, meta))
                            if meta.size == node.size && same_tag(&meta.version, version) =>
                        {
                            if data.len() as u64 != r.end - r.start {
                                short_answer(key, &r, data.len());
                                continue;
                            }
                            if whole {
                                self.learn_tree(key, &data);
                            }
                            return Ok(data);
                        }
                        Some(_) => return Err(FsError::Stale),
                        None => return Err(FsError::NotFound),
                    }
                }
                Err(FsError::Store(StoreError::Io {
                    key: key.clone(),
                    source: std::io::Error::other("the store answered a range short twice"),
                }))
            }
            Backing::Slice { key, offset: base, len, .. } => {
                let r = read_range(offset, size, *len);
                if r.is_empty() {
                    return Ok(Bytes::new());
                }
                let data = self.store.get_range(key, base + r.start..base + r.end).await?;
                if data.len() as u64 != r.end - r.start {
                    // The object holding the slice is shorter now: it changed.
                    short_answer(key, &r, data.len());
                    return Err(FsError::Stale);
                }
                Ok(data)
            }
            // Only the presenting view that made a decoded node can read it.
            Backing::Decoded { .. }
            | Backing::Unwrapped { .. }
            | Backing::Retiled { .. }
            | Backing::Flat(_) => Err(FsError::NotSupported("a decoded chunk read below its view")),
        }
    }

    fn capacity(&self) -> Option<(u64, u64)> {
        self.store.capacity()
    }

    async fn prefetch(&self, node: &Node) {
        if let Backing::Object { key, .. } = &node.backing {
            self.store.prefetch(key, node.size, Ahead::ScanAhead).await;
        }
    }

    fn local_copy(&self, node: &Node) -> Option<std::fs::File> {
        match &node.backing {
            // Metadata documents are read through the daemon, which learns the array's chunk
            // tree from them (`learn_tree`); the kernel would read a copy without telling it.
            Backing::Object { key, .. } if is_metadata_doc(split_key(key).1) => None,
            Backing::Object { key, version } => self.store.local_copy(key, version),
            _ => None,
        }
    }
}

#[async_trait]
impl NamespaceWrites for RawNamespace {
    async fn check_writable(&self, path: &str) -> FsResult<()> {
        Ok(self.store.check_key(path)?)
    }

    async fn write_file(&self, path: &str, data: Bytes) -> FsResult<()> {
        self.forget_tree_of(path);
        self.store.put(path, data).await?;
        // Again after the write: a read of the old document meanwhile may have learned it.
        self.forget_tree_of(path);
        self.forget_virtual_ancestors(path);
        Ok(())
    }

    async fn write_file_body(&self, path: &str, body: Body) -> FsResult<()> {
        self.forget_tree_of(path);
        match body {
            Body::Bytes(data) => self.store.put(path, data).await?,
            Body::File(file, len) => {
                self.store.put_file(path, file, len, PutMode::Overwrite).await?
            }
        }
        // Again after the write: a read of the old document meanwhile may have learned it.
        self.forget_tree_of(path);
        self.forget_virtual_ancestors(path);
        Ok(())
    }

    async fn create_file(&self, path: &str, data: Bytes) -> FsResult<()> {
        self.forget_tree_of(path);
        match self.store.put_opts(path, data, PutMode::Create).await {
            Err(StoreError::AlreadyExists(_)) => return Err(FsError::Exists),
            r => r?,
        }
        // Again after the write: a read of the old document meanwhile may have learned it.
        self.forget_tree_of(path);
        self.forget_virtual_ancestors(path);
        Ok(())
    }

    /// On object stores the directories the key was in stay (in memory) until removed, as on
    /// a filesystem: `rm -r` (and zarr-python's `LocalStore.clear`) unlinks the last file, then
    /// rmdirs the directory, which would otherwise have vanished with its last key.
    async fn remove_file(&self, path: &str) -> FsResult<()> {
        self.forget_tree_of(path);
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
        self.forget_tree_of(from);
        self.forget_tree_of(to);
        if is_dir {
            self.forget_all_trees();
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
        self.forget_all_trees();
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
}

/// The names zarr-python (v2 and v3 formats) reads whole right after looking them up.
fn is_metadata_doc(name: &str) -> bool {
    crate::zarr::METADATA_NAMES.contains(&name)
}

/// The metadata documents that make a directory an array.
fn is_array_doc(name: &str) -> bool {
    name == "zarr.json" || name == ".zarray"
}

impl RawNamespace {
    pub(in crate::views) fn object_node(&self, key: &str, meta: crate::store::ObjectMeta) -> Node {
        Node {
            size: meta.size,
            modified: meta.modified,
            backing: Backing::Object { key: key.to_string(), version: meta.version },
            perms: meta.perms,
        }
    }

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
                perms: meta.perms,
            });
            out.push((name, node));
        }
        drop(dirs);
        for name in listing.dirs {
            let perms = listing.dir_perms.get(&name).copied();
            out.push((name, Some(self.dir_node().with_perms(perms))));
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::layers::recording::RecordingStore;
    use crate::store::prelude::*;
    use crate::views::shared::namespace::read_all;

    pub(crate) const V3_ARRAY: &str = r#"{"zarr_format":3,"node_type":"array","shape":[4,4],"data_type":"uint8","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2,2]}},"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0,"codecs":[{"name":"bytes"}]}"#;
    const V2_NESTED: &str = r#"{"zarr_format":2,"shape":[4,4],"chunks":[2,2],"dtype":"|u1","compressor":null,"fill_value":0,"order":"C","filters":null,"dimension_separator":"/"}"#;

    async fn namespace(keys: &[(&str, &str)]) -> (RawNamespace, Arc<RecordingStore>) {
        let mem = Arc::new(MemoryStore::new());
        for (k, v) in keys {
            mem.put(k, Bytes::from(v.to_string())).await.unwrap();
        }
        let rec = Arc::new(RecordingStore::new(mem));
        let ns = RawNamespace::new(rec.clone()).with_chunk_trees(Duration::from_secs(3600));
        (ns, rec)
    }

    /// Read a whole file through the namespace, as zarr-python reads a metadata document.
    async fn read_whole(ns: &RawNamespace, path: &str) -> Bytes {
        let node = ns.lookup(path).await.unwrap().unwrap();
        ns.read(path, &node, 0, 1 << 20).await.unwrap()
    }

    async fn kind(ns: &RawNamespace, path: &str) -> Option<bool> {
        ns.lookup(path).await.unwrap().map(|n| n.is_dir())
    }

    /// Answers the first `short` reads one byte short, as a body cut off without an error.
    struct ShortAnswers {
        inner: Arc<dyn Store>,
        short: std::sync::atomic::AtomicUsize,
    }

    impl crate::store::layers::Layer for ShortAnswers {
        type Below = dyn Store;
        fn inner(&self) -> &dyn Store {
            &*self.inner
        }
    }

    #[async_trait]
    impl crate::store::layers::ReadLayer for ShortAnswers {
        async fn get_ranged(
            &self,
            key: &str,
            range: ByteRange,
        ) -> crate::store::StoreResult<Option<(Bytes, crate::store::ObjectMeta)>> {
            use std::sync::atomic::Ordering::SeqCst;
            let got = self.inner.get_ranged(key, range).await?;
            let cut = self.short.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok();
            Ok(got.map(|(b, m)| if cut { (b.slice(..b.len() - 1), m) } else { (b, m) }))
        }
    }
    impl crate::store::layers::ListLayer for ShortAnswers {}
    impl crate::store::layers::WriteLayer for ShortAnswers {}
    impl crate::store::layers::HintsLayer for ShortAnswers {}

    /// A read the store answers short is asked again, and fails rather than hand the reader
    /// fewer bytes than the file has there (a reader takes a short read for the end of file).
    #[tokio::test]
    async fn a_short_answer_is_asked_again_and_never_handed_up() {
        let mem = Arc::new(MemoryStore::new());
        mem.put("f", Bytes::from_static(b"0123456789")).await.unwrap();
        for (short, want) in [(1, Some(&b"0123456789"[..])), (2, None)] {
            let store = ShortAnswers { inner: mem.clone(), short: short.into() };
            let ns = RawNamespace::new(Arc::new(store));
            let node = ns.lookup("f").await.unwrap().unwrap();
            let got = ns.read("f", &node, 0, 64).await;
            match want {
                Some(want) => assert_eq!(got.unwrap().as_ref(), want, "asked again"),
                None => assert_eq!(got.unwrap_err().errno(), libc::EIO, "short twice"),
            }
        }
    }

    #[tokio::test]
    async fn chunk_tree_directories_need_no_request_once_the_metadata_was_read() {
        let (ns, rec) = namespace(&[
            ("g/zarr.json", r#"{"zarr_format":3,"node_type":"group"}"#),
            ("g/a/zarr.json", V3_ARRAY),
            ("g/a/c/0/0", "abcd"),
            ("g/a/c/1/1", "efgh"),
        ])
        .await;
        // Before the array's metadata is known, a lookup asks the store (HEAD and LIST).
        assert_eq!(kind(&ns, "g/a/c").await, Some(true));
        assert_eq!(rec.take(), ["lookup g/a/c"]);
        read_whole(&ns, "g/a/zarr.json").await;
        rec.take();

        // Directories of the tree inside the grid: answered with no request at all, even one
        // with no chunk below it (it lists empty).
        for dir in ["g/a/c", "g/a/c/0", "g/a/c/1"] {
            assert_eq!(kind(&ns, dir).await, Some(true), "{dir}");
        }
        assert_eq!(rec.calls(), Vec::<String>::new());
        assert!(ns.list("g/a/c/1").await.unwrap().iter().any(|(n, _)| n == "1"));
        rec.take();

        // A chunk file: its HEAD only, no directory probe; a missing one is absent.
        assert_eq!(kind(&ns, "g/a/c/0/0").await, Some(false));
        assert_eq!(kind(&ns, "g/a/c/0/1").await, None);
        assert_eq!(rec.take(), ["head g/a/c/0/0", "head g/a/c/0/1"]);
        let node = ns.lookup("g/a/c/1/1").await.unwrap().unwrap();
        assert_eq!(&ns.read("g/a/c/1/1", &node, 0, 10).await.unwrap()[..], b"efgh");
    }

    #[tokio::test]
    async fn names_outside_the_chunk_tree_still_ask_the_store() {
        let (ns, rec) =
            namespace(&[("a/zarr.json", V3_ARRAY), ("a/c/2/0", "stray"), ("a/notes", "n")]).await;
        read_whole(&ns, "a/zarr.json").await;
        rec.take();
        // Out of the grid (the grid is 2x2), stray names, too deep, and the group above.
        assert_eq!(kind(&ns, "a/c/2").await, Some(true));
        assert_eq!(kind(&ns, "a/c/2/0").await, Some(false));
        assert_eq!(kind(&ns, "a/notes").await, Some(false));
        assert_eq!(kind(&ns, "a/c/0/0/x").await, None);
        assert_eq!(kind(&ns, "a/d").await, None);
        assert_eq!(
            rec.take(),
            ["lookup a/c/2", "lookup a/c/2/0", "lookup a/notes", "lookup a/c/0/0/x", "lookup a/d"]
        );
    }

    #[tokio::test]
    async fn v2_nested_keys_and_rewritten_metadata() {
        let (ns, rec) = namespace(&[("v/.zarray", V2_NESTED), ("v/1/0", "x")]).await;
        read_whole(&ns, "v/.zarray").await;
        rec.take();
        assert_eq!(kind(&ns, "v/1").await, Some(true));
        assert_eq!(kind(&ns, "v/0").await, Some(true));
        assert_eq!(kind(&ns, "v/1/0").await, Some(false));
        assert_eq!(rec.take(), ["head v/1/0"]);

        // Metadata written through the mount: the tree it defined is no longer trusted.
        let bigger = V2_NESTED.replace("[4,4]", "[8,8]");
        ns.write_file("v/.zarray", Bytes::from(bigger)).await.unwrap();
        rec.take();
        assert_eq!(kind(&ns, "v/3").await, None);
        assert_eq!(rec.take(), ["lookup v/3"]);
        // Until it is read again.
        read_whole(&ns, "v/.zarray").await;
        rec.take();
        assert_eq!(kind(&ns, "v/3").await, Some(true));
        assert_eq!(rec.calls(), Vec::<String>::new());
    }

    /// Writing through the mount into a chunk directory that has no key yet (as zarr-python
    /// does for a new chunk: makedirs, then the file) works the same with the tree known.
    #[tokio::test]
    async fn new_chunk_directories_through_the_mount() {
        let (ns, _rec) = namespace(&[("a/zarr.json", V3_ARRAY)]).await;
        read_whole(&ns, "a/zarr.json").await;
        assert!(matches!(ns.mkdir("a/c").await, Err(FsError::Exists)));
        assert_eq!(kind(&ns, "a/c/1/1").await, None);
        ns.create_file("a/c/1/1", Bytes::from_static(b"new")).await.unwrap();
        assert_eq!(kind(&ns, "a/c/1/1").await, Some(false));
        let names: Vec<String> = ns.list("a/c").await.unwrap().into_iter().map(|e| e.0).collect();
        assert_eq!(names, ["1"]);
    }

    /// An object-store backend (in memory) behind the memory cache, with the requests that
    /// reach the backend recorded: the stack a cloud mount has.
    pub(crate) fn cloud_namespace(
    ) -> (RawNamespace, Arc<RecordingStore>, Arc<object_store::memory::InMemory>) {
        cloud_namespace_prefetching(0)
    }

    /// `cloud_namespace` that prefetches arrays of up to `array_prefetch` bytes.
    fn cloud_namespace_prefetching(
        array_prefetch: u64,
    ) -> (RawNamespace, Arc<RecordingStore>, Arc<object_store::memory::InMemory>) {
        use crate::store::backends::object::ObjectStoreBackend;
        use crate::store::layers::cache::{CacheConfig, CachingStore};
        let mem = Arc::new(object_store::memory::InMemory::new());
        let backend = ObjectStoreBackend::new(mem.clone(), "", "memory://test".into());
        let rec = Arc::new(RecordingStore::new(Arc::new(backend)));
        let cfg = CacheConfig {
            capacity: 64 << 20,
            object_limit: 8 << 20,
            ttl: Duration::from_secs(3600),
        };
        let cached = CachingStore::new(rec.clone(), cfg);
        let ns = RawNamespace::new(cached)
            .with_chunk_trees(Duration::from_secs(3600))
            .with_array_prefetch(array_prefetch)
            .with_document_fetch(true);
        (ns, rec, mem)
    }

    /// The first chunk lookup of a small array starts fetching its other chunks: lookups and
    /// reads of them then send nothing, also of a chunk the prefetch found absent (until
    /// written). A larger array, or the option off, prefetches nothing; and an array is
    /// prefetched once per reading of its metadata.
    #[tokio::test(start_paused = true)]
    async fn a_small_array_is_fetched_whole_at_its_first_chunk_lookup() {
        let (ns, rec, mem) = cloud_namespace_prefetching(1 << 20);
        put_raw(&mem, "a/zarr.json", V3_ARRAY).await;
        for (k, v) in [("a/c/0/0", "abcd"), ("a/c/0/1", "efgh"), ("a/c/1/0", "ijkl")] {
            put_raw(&mem, k, v).await;
        }
        read_whole(&ns, "a/zarr.json").await;
        rec.take();
        assert_eq!(kind(&ns, "a/c/0/0").await, Some(false));
        // The paused clock moves only when every task waits: the prefetch has run by then.
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(rec.calls().len(), 4, "one prefetch: {:?}", rec.calls());
        let mut calls = rec.take();
        calls.sort();
        assert_eq!(calls.len(), 4, "one request per chunk: {calls:?}");
        for (chunk, bytes) in [("a/c/0/1", b"efgh"), ("a/c/1/0", b"ijkl")] {
            let node = ns.lookup(chunk).await.unwrap().unwrap();
            assert_eq!(&ns.read(chunk, &node, 0, 10).await.unwrap()[..], bytes);
        }
        // The missing chunk (fill value): the prefetch found it absent, so is its lookup.
        assert_eq!(kind(&ns, "a/c/1/1").await, None);
        assert_eq!(rec.calls(), Vec::<String>::new(), "served from the prefetch");
        // Written through the mount: no longer absent.
        ns.create_file("a/c/1/1", Bytes::from_static(b"mnop")).await.unwrap();
        assert_eq!(kind(&ns, "a/c/1/1").await, Some(false));
        rec.take();
        // Once per reading of the metadata: a chunk lookup starts no second prefetch.
        assert_eq!(kind(&ns, "a/c/0/1").await, Some(false));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(rec.take(), Vec::<String>::new());

        for (budget, why) in [(10_000, "larger than the budget"), (0, "prefetching off")] {
            let (ns, rec, mem) = cloud_namespace_prefetching(budget);
            put_raw(&mem, "a/zarr.json", V3_ARRAY).await;
            put_raw(&mem, "a/c/0/0", "abcd").await;
            put_raw(&mem, "a/c/0/1", "efgh").await;
            read_whole(&ns, "a/zarr.json").await;
            rec.take();
            assert_eq!(kind(&ns, "a/c/0/0").await, Some(false));
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(rec.take().len(), 1, "{why}");
        }
    }

    pub(crate) async fn put_raw(mem: &object_store::memory::InMemory, key: &str, data: &str) {
        use object_store::ObjectStoreExt;
        let payload = object_store::PutPayload::from(data.as_bytes().to_vec());
        mem.put(&object_store::path::Path::from(key), payload).await.unwrap();
    }

    /// A metadata document's lookup is one GET (no directory probe) that the read after it
    /// uses: no second request. Other names keep the HEAD and the probe.
    #[tokio::test]
    async fn a_metadata_document_lookup_brings_the_document() {
        let (ns, rec, mem) = cloud_namespace();
        put_raw(&mem, "a/zarr.json", V3_ARRAY).await;
        put_raw(&mem, "a/notes", "n").await;
        assert_eq!(&read_whole(&ns, "a/zarr.json").await[..], V3_ARRAY.as_bytes());
        assert_eq!(rec.take(), ["lookup_reading a/zarr.json"]);
        // zarr-python's probes of the v2 documents: absent, one request each, as before.
        for probe in ["a/.zarray", "a/.zattrs"] {
            assert_eq!(kind(&ns, probe).await, None, "{probe}");
        }
        assert_eq!(rec.take(), ["lookup_reading a/.zarray", "lookup_reading a/.zattrs"]);
        // Not a metadata name: the plain lookup, and the read is its own GET.
        assert_eq!(&read_whole(&ns, "a/notes").await[..], b"n");
        let calls = rec.take();
        assert_eq!(calls[0], "lookup a/notes");
        assert!(calls[1..].iter().all(|c| c.starts_with("get")), "{calls:?}");
        // Metadata names are documents, never directories: one that is also a prefix is the
        // document, and a prefix alone shows in the listing but not to a lookup (no probe).
        put_raw(&mem, "b/.zattrs", "{}").await;
        put_raw(&mem, "b/.zattrs/x", "y").await;
        put_raw(&mem, "b/.zarray/x", "y").await;
        assert_eq!(kind(&ns, "b/.zattrs").await, Some(false));
        assert_eq!(kind(&ns, "b/.zarray").await, None);
        let listed: Vec<(String, bool)> =
            ns.list("b").await.unwrap().into_iter().map(|(n, node)| (n, node.is_dir())).collect();
        assert!(listed.contains(&(".zarray".to_string(), true)), "{listed:?}");
        assert_eq!(rec.take(), ["lookup_reading b/.zattrs", "lookup_reading b/.zarray", "list b"]);
        // A directory made through the mount is one, whatever its name.
        ns.mkdir("b/.zgroup").await.unwrap();
        assert_eq!(kind(&ns, "b/.zgroup").await, Some(true));
        // A document larger than what the lookup reads still gets its true size and bytes.
        let big = format!("{{\"pad\":\"{}\"}}", "x".repeat((1 << 20) + 10));
        put_raw(&mem, "c/.zattrs", &big).await;
        assert_eq!(read_whole_sized(&ns, "c/.zattrs").await, big.as_bytes());
    }

    /// zarr-python 3 opening the v3 array `V3_ARRAY` at `dir`: its three documents at once.
    async fn open_v3_array(ns: &RawNamespace, dir: &str) {
        let [json, zarray, zattrs] =
            [join_key(dir, "zarr.json"), join_key(dir, ".zarray"), join_key(dir, ".zattrs")];
        let (json, zarray, zattrs) =
            tokio::join!(read_whole(ns, &json), kind(ns, &zarray), kind(ns, &zattrs));
        assert_eq!(&json[..], V3_ARRAY.as_bytes());
        assert_eq!((zarray, zattrs), (None, None));
    }

    /// The metadata documents fetched ahead (as the mount's start fetches the root's) answer
    /// the lookups and reads of them, present or absent, with no request of their own, also
    /// while the fetch is still under way.
    #[tokio::test]
    async fn metadata_documents_fetched_ahead_answer_their_lookups() {
        let (ns, rec, mem) = cloud_namespace();
        put_raw(&mem, "zarr.json", V3_ARRAY).await;
        let fetch_all = || fetch_documents(ns.store().clone(), String::new());
        // zarr-python 3 opening the root, beside the fetches.
        let open = || open_v3_array(&ns, "");
        tokio::join!(fetch_all(), open());
        let mut sent = rec.take();
        sent.sort();
        // Each asked as its lookup would be: one GET of it on an object store.
        let mut want: Vec<String> =
            crate::zarr::METADATA_NAMES.iter().map(|n| format!("lookup_reading {n}")).collect();
        want.sort();
        assert_eq!(sent, want);
        // Once read, a document's lookup asks the store again, as without the fetch (the
        // absences found stay known for the TTL, as a read's would).
        open().await;
        assert_eq!(rec.take(), ["lookup_reading zarr.json"]);
        // A document changed through the mount is read anew, not answered from the fetch.
        ns.write_file("zarr.json", Bytes::from_static(b"{}")).await.unwrap();
        rec.take();
        assert_eq!(&read_whole(&ns, "zarr.json").await[..], b"{}");
    }

    /// The lookup of a `*.zarr` directory also fetches its metadata documents, so opening it
    /// sends nothing more; other directories do not.
    #[tokio::test]
    async fn a_zarr_directory_lookup_fetches_its_documents() {
        let (ns, rec, mem) = cloud_namespace();
        put_raw(&mem, "d.zarr/zarr.json", V3_ARRAY).await;
        put_raw(&mem, "plain/zarr.json", V3_ARRAY).await;
        assert_eq!(kind(&ns, "d.zarr").await, Some(true));
        // The fetches run beside the lookup: wait for all five to be sent.
        let mut sent = rec.take();
        for _ in 0..1000 {
            if sent.len() == 1 + crate::zarr::METADATA_NAMES.len() {
                break;
            }
            tokio::task::yield_now().await;
            sent.extend(rec.take());
        }
        sent.sort();
        assert_eq!(sent[0], "lookup d.zarr");
        let fetched = sent[1..].iter().filter(|c| c.starts_with("lookup_reading d.zarr/")).count();
        assert_eq!(fetched, 5, "{sent:?}");
        open_v3_array(&ns, "d.zarr").await;
        assert_eq!(rec.take(), Vec::<String>::new());
        // Any other directory: its lookup only.
        assert_eq!(kind(&ns, "plain").await, Some(true));
        tokio::task::yield_now().await;
        assert_eq!(rec.take(), ["lookup plain"]);
        // Without the setting (plain HTTP, a TTL of zero, no cache): the lookup only.
        let off = RawNamespace::new(ns.store().clone()).with_chunk_trees(Duration::from_secs(60));
        assert_eq!(kind(&off, "e.zarr").await, None);
        tokio::task::yield_now().await;
        assert_eq!(rec.take(), ["lookup e.zarr"]);
    }

    /// Read every byte of a file, whatever its size.
    pub(crate) async fn read_whole_sized(ns: &dyn Namespace, path: &str) -> Vec<u8> {
        let node = ns.lookup(path).await.unwrap().unwrap();
        read_all(ns, path, &node).await.unwrap()
    }

    /// What a lookup brought is never served over a write through the mount, nor over a
    /// change by another writer once the name is looked up again.
    #[tokio::test]
    async fn metadata_read_by_lookup_sees_writes_right_after() {
        let (ns, rec, mem) = cloud_namespace();
        put_raw(&mem, "a/zarr.json", V3_ARRAY).await;
        read_whole(&ns, "a/zarr.json").await;
        // Overwritten through the mount: the next lookup and read see the new document.
        let bigger = V3_ARRAY.replace("[4,4]", "[8,8]");
        ns.write_file("a/zarr.json", Bytes::from(bigger.clone())).await.unwrap();
        assert_eq!(&read_whole(&ns, "a/zarr.json").await[..], bigger.as_bytes());
        // and the tree learned from it is the new one (8x8 has chunk row 3).
        assert_eq!(kind(&ns, "a/c/3").await, Some(true));
        // Created after a lookup found nothing.
        assert_eq!(kind(&ns, "a/.zattrs").await, None);
        ns.create_file("a/.zattrs", Bytes::from_static(b"{\"k\":1}")).await.unwrap();
        assert_eq!(&read_whole(&ns, "a/.zattrs").await[..], b"{\"k\":1}");
        // Renamed away and removed: gone at once.
        ns.rename("a/.zattrs", "a/.zattrs.old", false).await.unwrap();
        assert_eq!(kind(&ns, "a/.zattrs").await, None);
        assert_eq!(&read_whole(&ns, "a/.zattrs.old").await[..], b"{\"k\":1}");
        ns.remove_file("a/zarr.json").await.unwrap();
        assert_eq!(kind(&ns, "a/zarr.json").await, None);
        // Changed by another writer (not through this mount): a new lookup brings the new bytes.
        put_raw(&mem, "a/zarr.json", V3_ARRAY).await;
        assert_eq!(&read_whole(&ns, "a/zarr.json").await[..], V3_ARRAY.as_bytes());
        put_raw(&mem, "a/zarr.json", &bigger).await;
        assert_eq!(&read_whole(&ns, "a/zarr.json").await[..], bigger.as_bytes());
        rec.take();
    }

    /// Without the setting (and on stores with real directories) nothing changes.
    #[tokio::test]
    async fn trees_only_where_enabled() {
        let mem = Arc::new(MemoryStore::new());
        mem.put("a/zarr.json", Bytes::from_static(V3_ARRAY.as_bytes())).await.unwrap();
        let rec = Arc::new(RecordingStore::new(mem));
        let ns = RawNamespace::new(rec.clone());
        read_whole(&ns, "a/zarr.json").await;
        rec.take();
        assert_eq!(kind(&ns, "a/c").await, None);
        assert_eq!(rec.take(), ["lookup a/c"]);
    }
}
