//! The unsharded view, the async side: finds sharded arrays (by reading `zarr.json` files), serves
//! their rewritten metadata and their inner chunks as files backed by byte ranges of shards, and
//! passes everything else to the raw namespace. The mapping itself is pure logic in
//! `views::unsharded::mapping` (keys, shards, listings; the chunk tree is `zarr::chunk_tree`) and
//! `views::unsharded::mapping::dirs` (what a directory is, which changes are accepted); the walk
//! from the root is `views::shared::walk`. This module only fetches what that logic asks for.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, StreamExt};

use crate::perms::Perms;
use crate::store::{join_key, split_key, Store, StoreError};
use crate::ttl_cache::TtlCache;
use crate::views::raw::namespace::RawNamespace;
use crate::views::shared::body::Body;
use crate::views::shared::error::{FsError, FsResult};
use crate::views::shared::mapping::node::{Backing, Node};
use crate::views::shared::namespace::is_staged_name;
use crate::views::shared::namespace::{
    read_all, read_range, short_answer, Namespace, NamespaceWrites,
};
use crate::views::shared::walk::{self, DirWalk, Step};
use crate::views::unsharded::mapping::dirs::{classify, AttributesRefused, DirKind, ShardedArray};
use crate::views::unsharded::mapping::{ArrayEntry, DirChild};
use crate::views::unsharded::read_ahead::ShardReadAhead;
use crate::views::unsharded::shard_indexes::{IndexFor, ShardIndexCache, ShardState};
use crate::views::unsharded::writer::{ChunkOp, InGrid, ShardWriter};
use crate::zarr::sharding::index::ShardIndex;

/// Concurrent shard-index fetches while listing a virtual directory.
const LIST_CONCURRENCY: usize = 32;
const DIR_KIND_CACHE: usize = 65_536;
const INDEX_CACHE_BYTES: usize = 256 << 20;
const NOT_IN_GRID: FsError =
    FsError::NotPermitted("not a chunk key of this array's unsharded grid");
pub struct UnshardedNamespace {
    raw: RawNamespace,
    store: Arc<dyn Store>,
    kinds: TtlCache<DirKind>,
    /// The `zarr.json` each directory's kind was read from, or `None` where there was none
    /// (see `lookup`).
    docs: TtlCache<Option<crate::store::ObjectMeta>>,
    indexes: Arc<ShardIndexCache>,
    /// Shards fetched ahead of a scan (see `read_shards_ahead`).
    shards_ahead: ShardReadAhead,
    writer: ShardWriter,
}

/// A read of an inner chunk's file: `size` bytes at `offset`, of the chunk that was
/// `opened_len` bytes long when it was opened.
#[derive(Clone, Copy)]
struct ChunkRead {
    opened_len: u64,
    offset: u64,
    size: u32,
}

/// Where a path of the mount sits relative to the sharded arrays of the store.
type Place = walk::Place<DirKind, Arc<ShardedArray>>;

#[async_trait]
impl DirWalk for UnshardedNamespace {
    type Kind = DirKind;
    type Array = Arc<ShardedArray>;

    fn kinds(&self) -> &TtlCache<DirKind> {
        &self.kinds
    }

    /// Read and classify `dir/zarr.json`.
    async fn read_kind(&self, dir: &str) -> FsResult<DirKind> {
        let key = join_key(dir, "zarr.json");
        let range = crate::store::ByteRange::Range(0..u64::MAX);
        self.docs.forget(dir);
        match self.store.get_ranged(&key, range).await {
            Ok(Some((bytes, meta))) => {
                let kind = classify(dir, &bytes, meta.modified, meta.perms);
                self.docs.put(dir.to_string(), Some(meta));
                Ok(kind)
            }
            Ok(None) | Err(StoreError::NotFound(_)) => {
                self.docs.put(dir.to_string(), None);
                Ok(DirKind::Other)
            }
            Err(StoreError::IsADirectory(_))
            | Err(StoreError::NotADirectory(_))
            | Err(StoreError::InvalidKey(..)) => Ok(DirKind::Other),
            Err(e) => Err(e.into()),
        }
    }

    /// Paths inside a sharded array are the view's; below an array not unpacked nothing is.
    fn step(kind: &DirKind) -> FsResult<Step<Arc<ShardedArray>>> {
        Ok(match kind {
            DirKind::Sharded(array) => Step::Enter(array.clone()),
            DirKind::PlainArray => Step::Stop,
            DirKind::Other | DirKind::Group { .. } => Step::Descend,
        })
    }
}

impl UnshardedNamespace {
    pub fn new(raw: RawNamespace, ttl: Duration) -> Self {
        let store = raw.store().clone();
        UnshardedNamespace {
            indexes: Arc::new(ShardIndexCache::new(store.clone(), ttl, INDEX_CACHE_BYTES)),
            shards_ahead: ShardReadAhead::default(),
            writer: ShardWriter::new(store.clone()),
            raw,
            store,
            kinds: TtlCache::new(DIR_KIND_CACHE, ttl),
            docs: TtlCache::new(DIR_KIND_CACHE, ttl),
        }
    }

    /// Plan at most `bytes` of shards ahead of a scan (see `read_shards_ahead`); the default
    /// is `views::unsharded::read_ahead::DEFAULT_BUDGET`.
    pub fn with_shard_read_ahead(mut self, bytes: u64) -> Self {
        self.shards_ahead = ShardReadAhead::with_budget(bytes);
        self
    }

    fn forget_kind(&self, dir: &str) {
        self.kinds.forget(dir);
        self.docs.forget(dir);
    }

    /// The state of the shard holding inner chunk `coords`, and the local entry index.
    async fn shard_of(
        &self,
        array: &ShardedArray,
        coords: &[u64],
    ) -> FsResult<Option<(String, Arc<ShardState>, u64)>> {
        let Some(loc) = array.array.locate(coords) else { return Ok(None) };
        let key = join_key(&array.dir, &loc.shard_key);
        // Before this shard's own fetch is answered: a scan's next shards then go out beside
        // it, not one round trip later.
        self.read_shards_ahead(array, &loc.shard_coords);
        let reading = IndexFor::Reading { shard_bound: array.shard_bound };
        let layout = array.array.layout_of(&loc.shard_coords).ok_or(FsError::NotFound)?;
        let state = self.indexes.get(&array.dir, &key, &layout, reading).await?;
        Ok(Some((key, state, loc.local_index)))
    }

    /// A scan in C order (the shard before this one was read) over a store that keeps small objects
    /// whole: start fetching the indexes of the next shards now, in the background. When the
    /// array's shards are small, each of those fetches brings the whole shard into the store's
    /// cache (see `ShardIndexCache::window`), so the scan finds its chunks there instead of waiting
    /// for one request after another. How far ahead and how many at once is
    /// `views::unsharded::read_ahead`'s; a shard planned again while it waits for a slot is then
    /// found fetched.
    fn read_shards_ahead(&self, array: &ShardedArray, shard: &[u64]) {
        if self.store.whole_object_limit() == 0 {
            return;
        }
        let key_of = |c: &[u64]| join_key(&array.dir, &array.array.shard_key(c));
        match array.array.shard_beside(shard, -1) {
            Some(before) if self.indexes.is_known(&key_of(&before)) => {}
            _ => return,
        }
        let mut next = shard.to_vec();
        for _ in 0..self.shards_ahead.depth(array.shard_bound) {
            let Some(after) = array.array.shard_beside(&next, 1) else { break };
            next = after;
            let key = key_of(&next);
            if self.indexes.is_known(&key) {
                continue;
            }
            let Some(layout) = array.array.layout_of(&next).map(Cow::into_owned) else { break };
            let (indexes, dir) = (self.indexes.clone(), array.dir.clone());
            let reading = IndexFor::Reading { shard_bound: array.shard_bound };
            self.shards_ahead.start(async move {
                if let Err(e) = indexes.get(&dir, &key, &layout, reading).await {
                    tracing::debug!(shard = ?key, error = %e, "shard read-ahead failed");
                }
            });
        }
    }

    async fn lookup_in_array(&self, array: &ShardedArray, rel: &str) -> FsResult<Option<Node>> {
        let coords = match array.array.entry(rel) {
            ArrayEntry::Metadata => {
                let node = Node::generated(&array.zarr_json, array.modified);
                return Ok(Some(node.with_perms(array.perms)));
            }
            ArrayEntry::Chunk(coords) => coords,
            // A directory of the chunk tree inside the grid. Whether any chunk lies below it
            // would need every shard index under it; lookups answer from the grid alone.
            ArrayEntry::ChunkDir => {
                let perms = self.raw.stored_perms_as_dir(&join_key(&array.dir, rel)).await;
                let perms = perms.or(array.perms.map(Perms::as_dir));
                return Ok(Some(Node::dir(array.modified).with_perms(perms)));
            }
            // A real shard object or its directory: hidden in this view.
            ArrayEntry::Hidden => return Ok(None),
            ArrayEntry::Other => return self.raw.lookup(&join_key(&array.dir, rel)).await,
        };
        let Some((key, state, local)) = self.shard_of(array, &coords).await? else {
            return Ok(None);
        };
        match &*state {
            ShardState::Missing => Ok(None),
            ShardState::Corrupt(why) => Err(FsError::Corrupt(format!("shard {key}: {why}"))),
            ShardState::Present { index, version, modified, perms } => {
                let entry = index.entry(local);
                if entry.is_none() {
                    tracing::debug!(shard = ?key, local, version, "chunk absent from the shard's index");
                }
                Ok(entry.map(|e| Node {
                    size: e.nbytes,
                    modified: *modified,
                    backing: Backing::Slice {
                        key,
                        offset: e.offset,
                        len: e.nbytes,
                        version: version.clone(),
                    },
                    perms: *perms,
                }))
            }
        }
    }

    /// The virtual entries of chunk-tree directory `rel` of `array`, from shard indexes only
    /// (fetched without the shards' data, however small they are).
    async fn list_chunk_dir(
        &self,
        array: &ShardedArray,
        rel: &str,
    ) -> FsResult<Option<Vec<(String, Node)>>> {
        let Some(plan) = array.array.dir_plan(rel) else { return Ok(None) };
        let shards: Vec<Vec<u64>> = plan.shard_coords().collect();
        // (shard coordinates, shard key, its index state) per shard of the directory
        type FetchedShard = (Vec<u64>, String, Arc<ShardState>);
        let fetched: Vec<FsResult<FetchedShard>> = stream::iter(shards)
            .map(|sc| async move {
                let key = join_key(&array.dir, &array.array.shard_key(&sc));
                let layout = array.array.layout_of(&sc).ok_or(FsError::NotFound)?;
                let state = self.indexes.get(&array.dir, &key, &layout, IndexFor::Listing).await?;
                Ok((sc, key, state))
            })
            .buffer_unordered(LIST_CONCURRENCY)
            .collect()
            .await;
        let mut children: std::collections::BTreeMap<String, Node> =
            std::collections::BTreeMap::new();
        for item in fetched {
            let (sc, key, state) = item?;
            let ShardState::Present { index, version, modified, perms } = &*state else {
                if let ShardState::Corrupt(why) = &*state {
                    tracing::warn!(shard = ?key, reason = %why, "listing skips the chunks of a corrupt shard");
                }
                continue;
            };
            for (local, entry) in index.present() {
                let Some(coords) = array.array.inner_coords(&sc, local) else { continue };
                let Some(DirChild { name, is_dir }) = array.array.child_in_dir(&plan, &coords)
                else {
                    continue;
                };
                let node = if is_dir {
                    // A directory of the tree made of this shard (the shard itself, or a
                    // level of its chunks): entered by whoever may read the shard; a real
                    // directory above shards keeps its own mode (below).
                    Node::dir(array.modified).with_perms(perms.map(Perms::as_dir))
                } else {
                    Node {
                        size: entry.nbytes,
                        modified: *modified,
                        backing: Backing::Slice {
                            key: key.clone(),
                            offset: entry.offset,
                            len: entry.nbytes,
                            version: version.clone(),
                        },
                        perms: *perms,
                    }
                };
                children.entry(name).or_insert(node);
            }
        }
        if self.store.has_real_dirs() {
            // The kernel checks these attributes on the way in: a stored directory (or shard)
            // shows its own mode, never one made more open than it is.
            for (name, node) in children.iter_mut().filter(|(_, n)| n.is_dir()) {
                let path = join_key(&array.dir, &join_key(rel, name));
                if let Some(perms) = self.raw.stored_perms_as_dir(&path).await {
                    node.perms = Some(perms);
                }
            }
        }
        Ok(Some(children.into_iter().collect()))
    }

    async fn list_array_dir(&self, array: &ShardedArray) -> FsResult<Vec<(String, Node)>> {
        let mut out: Vec<(String, Node)> = self
            .raw
            .list(&array.dir)
            .await?
            .into_iter()
            .filter(|(name, _)| !array.array.owns(name))
            .map(|(name, node)| {
                if name == "zarr.json" {
                    let node = Node::generated(&array.zarr_json, array.modified);
                    (name, node.with_perms(array.perms))
                } else {
                    (name, node)
                }
            })
            .collect();
        if let Some(virtual_entries) = self.list_chunk_dir(array, "").await? {
            out.extend(virtual_entries);
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// May `path` be created, replaced or removed? Inside a sharded array only inner-chunk
    /// keys, `zarr.json` (attribute changes), temp files and non-chunk files may be written.
    async fn check_mutable(&self, path: &str) -> FsResult<()> {
        let Place::InArray { array, rel, .. } = self.place(path).await? else { return Ok(()) };
        if array.may_change(&rel, is_staged_name(split_key(&rel).1)) {
            return Ok(());
        }
        tracing::info!(path, "refused: not a chunk key of the array's unsharded grid");
        Err(NOT_IN_GRID)
    }

    fn note_write(&self, path: &str) {
        let (dir, name) = split_key(path);
        if name == "zarr.json" {
            self.forget_kind(dir);
        }
    }

    /// Replace (`Some`) or remove (`None`) inner chunk `coords` in its shard; if `exclusive`,
    /// only if the chunk is absent from the shard as stored (else `Exists`).
    async fn write_chunk(
        &self,
        array: &Arc<ShardedArray>,
        coords: &[u64],
        data: Option<Bytes>,
        exclusive: bool,
    ) -> FsResult<()> {
        let loc = array.array.locate(coords).ok_or(FsError::NotFound)?;
        let key = join_key(&array.dir, &loc.shard_key);
        let op = ChunkOp { local: loc.local_index, data, exclusive };
        let (grid_array, shard_coords) = (array.clone(), loc.shard_coords.clone());
        let in_grid: InGrid =
            Arc::new(move |local| grid_array.array.inner_coords(&shard_coords, local).is_some());
        let layout = array.array.layout_of(&loc.shard_coords).ok_or(FsError::NotFound)?;
        let result = self.writer.apply(&key, &layout, in_grid, op, &array.dir).await;
        self.indexes.invalidate(&key);
        result
    }

    /// Read part of an inner chunk. Offsets move whenever a shard is rewritten (through the
    /// mount or by another writer), so every read checks that the shard it read is the version
    /// the index it took the range from describes. The first try takes the range from the node
    /// the file was opened with (a read just after its open, as each of `serve`'s, needs no
    /// second lookup); if the shard changed since, the range is taken from the current index,
    /// and if that does not match either, the index is fetched again. A chunk whose size
    /// changed since it was opened (`opened_len`) is stale: bytes of the new chunk cut to the
    /// old size would be neither the old chunk nor the new.
    async fn read_slice(&self, path: &str, opened: &Node, want: ChunkRead) -> FsResult<Bytes> {
        let ChunkRead { opened_len, offset, size } = want;
        const ATTEMPTS: usize = 4;
        // A store that gives no versions could not tell an old node from a current one.
        let versioned =
            matches!(&opened.backing, Backing::Slice { version, .. } if !version.is_empty());
        let mut first = versioned.then_some(opened);
        let mut lookups = 0;
        while lookups < ATTEMPTS {
            let looked_up;
            let (node, from_open) = match first.take() {
                Some(node) => (node, true),
                None => {
                    lookups += 1;
                    looked_up = self.lookup(path).await?.ok_or(FsError::NotFound)?;
                    (&looked_up, false)
                }
            };
            let Backing::Slice { key, offset: base, len, version } = &node.backing else {
                return Err(FsError::Stale); // no longer an inner chunk
            };
            if *len != opened_len {
                return Err(FsError::Stale);
            }
            let r = read_range(offset, size, *len);
            if r.is_empty() {
                return Ok(Bytes::new());
            }
            let range = crate::store::ByteRange::Range(base + r.start..base + r.end);
            let gate = self.writer.gate(key); // see ShardWriter::gate
            let fetched = {
                let _no_rewrite_meanwhile = gate.read().await;
                self.store.get_ranged(key, range).await?
            };
            match fetched {
                Some((bytes, meta)) if &meta.version == version => {
                    if bytes.len() as u64 == r.end - r.start {
                        return Ok(bytes);
                    }
                    short_answer(key, &(base + r.start..base + r.end), bytes.len());
                }
                // Rewritten since the open: the current index next.
                _ if from_open => {}
                _ => self.indexes.invalidate(key), // rewritten since the index was read
            }
        }
        // Writers keep rewriting the shard between our index and data reads: one GET of the
        // whole shard gives one consistent version, so the reader is not starved.
        tracing::debug!(path, "the shard kept changing: reading it whole");
        self.read_slice_from_whole_shard(path, want).await
    }

    async fn read_slice_from_whole_shard(&self, path: &str, want: ChunkRead) -> FsResult<Bytes> {
        let ChunkRead { opened_len, offset, size } = want;
        let Place::InArray { array, rel, .. } = self.place(path).await? else {
            return Err(FsError::Stale);
        };
        let coords = array.array.parse_inner_key(&rel).ok_or(FsError::Stale)?;
        let loc = array.array.locate(&coords).ok_or(FsError::NotFound)?;
        let key = join_key(&array.dir, &loc.shard_key);
        let shard = match self.store.get(&key).await {
            Err(StoreError::NotFound(_)) => return Err(FsError::NotFound),
            r => r?,
        };
        let layout = array.array.layout_of(&loc.shard_coords).ok_or(FsError::NotFound)?;
        let index = ShardIndex::of_shard(&layout, &shard).map_err(|e| {
            tracing::error!(shard = ?key, error = %e, "corrupt shard index");
            FsError::Corrupt(format!("shard {key}: {e}"))
        })?;
        let entry = index.entry(loc.local_index).ok_or(FsError::NotFound)?;
        if entry.nbytes != opened_len {
            return Err(FsError::Stale);
        }
        let r = read_range(offset, size, entry.nbytes);
        Ok(shard.slice((entry.offset + r.start) as usize..(entry.offset + r.end) as usize))
    }

    /// A new `zarr.json` for a sharded array: accepted only when it differs from the presented
    /// (unsharded) metadata in its attributes; those are written into the real document.
    async fn write_array_metadata(&self, array: &ShardedArray, data: &[u8]) -> FsResult<()> {
        let bytes = array.attributes_update(data).map_err(|refused| {
            if refused == AttributesRefused::MoreThanAttributes {
                tracing::warn!(array = ?array.dir, "refused a zarr.json that changes more than attributes of a sharded array");
            }
            FsError::NotPermitted(refused.reason())
        })?;
        self.raw.write_file(&join_key(&array.dir, "zarr.json"), Bytes::from(bytes)).await?;
        self.forget_kind(&array.dir);
        Ok(())
    }
}

/// The metadata documents of Zarr v2 (and consolidated metadata), which no array of the
/// unsharded view rewrites.
fn is_v2_metadata_doc(name: &str) -> bool {
    matches!(name, ".zarray" | ".zattrs" | ".zgroup" | ".zmetadata")
}

#[async_trait]
impl Namespace for UnshardedNamespace {
    async fn lookup(&self, path: &str) -> FsResult<Option<Node>> {
        if path.is_empty() {
            return self.raw.lookup(path).await;
        }
        // A v2 metadata document is the raw store's wherever it sits (this view makes and
        // hides only zarr.json and chunks), so its GET goes out beside the walk's reads of the
        // directories' zarr.json instead of after them: zarr-python asks for zarr.json,
        // .zarray and .zattrs at once, and would otherwise wait two round trips. The early
        // answer is used only where the walk agrees it is the raw store's.
        let (dir, name) = split_key(path);
        let early = is_v2_metadata_doc(name).then(|| self.raw.lookup(path));
        // The zarr.json of a directory not classified yet: the walk below reads it (with any
        // concurrent walk of the same directory) to classify the directory. What it found
        // answers the lookup: a second read of it would cost another round trip.
        let walk_reads_it = name == "zarr.json" && self.kinds.get(dir).is_none();
        let (place, early) = match early {
            Some(raw) => {
                let (place, raw) = tokio::join!(self.place(path), raw);
                (place?, Some(raw))
            }
            None => (self.place(path).await?, None),
        };
        match (place, early) {
            (Place::InArray { array, rel, .. }, Some(raw))
                if matches!(array.array.entry(&rel), ArrayEntry::Other) =>
            {
                raw
            }
            (Place::InArray { array, rel, .. }, _) => self.lookup_in_array(&array, &rel).await,
            (Place::Outside { .. }, Some(raw)) => raw,
            (Place::Outside { parent: parent_kind }, None) => {
                if name == "zarr.json" {
                    if let DirKind::Group { rewritten: Some(bytes), modified, perms } = &parent_kind
                    {
                        return Ok(Some(Node::generated(bytes, *modified).with_perms(*perms)));
                    }
                }
                match self.docs.get(dir).filter(|_| walk_reads_it) {
                    Some(found) => Ok(found.map(|meta| self.raw.object_node(path, meta))),
                    None => self.raw.lookup(path).await,
                }
            }
        }
    }

    async fn list(&self, dir: &str) -> FsResult<Vec<(String, Node)>> {
        let place = if dir.is_empty() { None } else { Some(self.place(dir).await?) };
        match place {
            Some(Place::InArray { array, rel, .. }) => {
                match self.list_chunk_dir(&array, &rel).await? {
                    Some(entries) => Ok(entries),
                    None => self.raw.list(&join_key(&array.dir, &rel)).await,
                }
            }
            _ => {
                let kind = self.dir_kind(dir).await?;
                if let DirKind::Sharded(array) = &kind {
                    return self.list_array_dir(array).await;
                }
                let mut entries = self.raw.list(dir).await?;
                if let DirKind::Group { rewritten: Some(bytes), modified, perms } = &kind {
                    for (name, node) in entries.iter_mut() {
                        if name == "zarr.json" {
                            *node = Node::generated(bytes, *modified).with_perms(*perms);
                        }
                    }
                }
                Ok(entries)
            }
        }
    }

    async fn read(&self, path: &str, node: &Node, offset: u64, size: u32) -> FsResult<Bytes> {
        if let Backing::Slice { len, .. } = node.backing {
            return self.read_slice(path, node, ChunkRead { opened_len: len, offset, size }).await;
        }
        self.raw.read(path, node, offset, size).await
    }

    fn capacity(&self) -> Option<(u64, u64)> {
        self.raw.capacity()
    }

    /// Files passed through (metadata, v2 chunks) are fetched ahead; inner chunks of a shard
    /// are not: their shard is read ahead as a whole (`read_shards_ahead`).
    async fn prefetch(&self, node: &Node) {
        self.raw.prefetch(node).await
    }

    /// Files passed through are whole objects of the store; inner chunks are not.
    fn local_copy(&self, node: &Node) -> Option<std::fs::File> {
        self.raw.local_copy(node)
    }
}

#[async_trait]
impl NamespaceWrites for UnshardedNamespace {
    async fn check_writable(&self, path: &str) -> FsResult<()> {
        self.check_mutable(path).await?;
        self.raw.check_writable(path).await
    }

    async fn write_file(&self, path: &str, data: Bytes) -> FsResult<()> {
        if let Place::InArray { array, rel, .. } = self.place(path).await? {
            match array.array.entry(&rel) {
                ArrayEntry::Metadata => return self.write_array_metadata(&array, &data).await,
                ArrayEntry::Chunk(coords) => {
                    return self.write_chunk(&array, &coords, Some(data), false).await;
                }
                ArrayEntry::ChunkDir | ArrayEntry::Hidden => {
                    // e.g. a temp file never renamed, written back at unmount: no place here.
                    tracing::warn!(path, "dropped: not a chunk key of the array's unsharded grid");
                    return Err(NOT_IN_GRID);
                }
                ArrayEntry::Other => {}
            }
        }
        self.raw.write_file(path, data).await?;
        self.note_write(path);
        Ok(())
    }

    /// A spilled (large) file outside sharded arrays streams to the store; inside one it is
    /// a chunk or metadata, needed in memory anyway.
    async fn write_file_body(&self, path: &str, body: Body) -> FsResult<()> {
        if matches!(body, Body::File(..))
            && !matches!(self.place(path).await?, Place::InArray { .. })
        {
            self.raw.write_file_body(path, body).await?;
            self.note_write(path);
            return Ok(());
        }
        let data = body.into_bytes().map_err(|e| StoreError::from_io(path, e))?;
        self.write_file(path, data).await
    }

    /// An inner chunk is created only if absent from its shard, checked in the same
    /// compare-and-swap rewrite that adds it; the array's own `zarr.json` always exists.
    async fn create_file(&self, path: &str, data: Bytes) -> FsResult<()> {
        if let Place::InArray { array, rel, .. } = self.place(path).await? {
            match array.array.entry(&rel) {
                ArrayEntry::Metadata => return Err(FsError::Exists),
                ArrayEntry::Chunk(coords) => {
                    return match self.write_chunk(&array, &coords, Some(data), true).await {
                        Err(FsError::Shared(e)) if matches!(*e, FsError::Exists) => {
                            Err(FsError::Exists)
                        }
                        r => r,
                    };
                }
                ArrayEntry::ChunkDir | ArrayEntry::Hidden => return Err(NOT_IN_GRID),
                ArrayEntry::Other => {}
            }
        }
        self.raw.create_file(path, data).await?;
        self.note_write(path);
        Ok(())
    }

    async fn remove_file(&self, path: &str) -> FsResult<()> {
        if let Place::InArray { array, rel, .. } = self.place(path).await? {
            if let Some(coords) = array.array.parse_inner_key(&rel) {
                if self.lookup_in_array(&array, &rel).await?.is_none() {
                    return Err(FsError::NotFound);
                }
                return self.write_chunk(&array, &coords, None, false).await;
            }
            if rel == "zarr.json" {
                self.raw.remove_file(&join_key(&array.dir, "zarr.json")).await?;
                self.forget_kind(&array.dir);
                return Ok(());
            }
            self.check_mutable(path).await?;
        }
        self.raw.remove_file(path).await?;
        self.note_write(path);
        Ok(())
    }

    async fn rename(&self, from: &str, to: &str, is_dir: bool) -> FsResult<()> {
        let from_place = self.place(from).await?;
        let to_place = self.place(to).await?;
        let in_array = |p: &Place| matches!(p, Place::InArray { .. });
        if in_array(&from_place) || in_array(&to_place) {
            if is_dir {
                return Err(FsError::NotSupported("renaming directories inside a sharded array"));
            }
            // A file moved into, out of or within the array: copy the bytes, then remove.
            let node = self.lookup(from).await?.ok_or(FsError::NotFound)?;
            let data = read_all(self, from, &node).await?;
            self.check_mutable(to).await?;
            self.write_file(to, Bytes::from(data)).await?;
            return self.remove_file(from).await;
        }
        self.raw.rename(from, to, is_dir).await?;
        self.note_write(from);
        self.note_write(to);
        if is_dir {
            self.kinds.clear();
        }
        Ok(())
    }

    async fn mkdir(&self, path: &str) -> FsResult<()> {
        if let Place::InArray { array, rel, .. } = self.place(path).await? {
            if array.array.entry(&rel) == ArrayEntry::ChunkDir {
                return Err(FsError::Exists); // chunk directories of the grid always exist
            }
            self.check_mutable(path).await?;
        }
        self.raw.mkdir(path).await
    }

    async fn rmdir(&self, path: &str) -> FsResult<()> {
        if let Place::InArray { array, rel, .. } = self.place(path).await? {
            if let Some(entries) = self.list_chunk_dir(&array, &rel).await? {
                if !entries.is_empty() {
                    return Err(FsError::NotEmpty);
                }
                // Virtual and empty: nothing to remove but a real directory left behind, if any.
                let _ = self.raw.rmdir(path).await;
                return Ok(());
            }
            self.check_mutable(path).await?;
        }
        self.raw.rmdir(path).await?;
        self.forget_kind(path);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::layers::recording::RecordingStore;
    use crate::views::raw::namespace::tests::{
        cloud_namespace, put_raw as put, read_whole_sized as read_whole, V3_ARRAY as PLAIN_ARRAY,
    };
    use crate::views::shared::namespace::Namespace;

    /// The view over `namespace::tests::cloud_namespace`: an object store (in memory) behind
    /// the memory cache, with the requests that reach the store recorded.
    fn cloud_view() -> (UnshardedNamespace, Arc<RecordingStore>, Arc<object_store::memory::InMemory>)
    {
        let (raw, rec, mem) = cloud_namespace();
        (UnshardedNamespace::new(raw, Duration::from_secs(3600)), rec, mem)
    }

    /// The zarr.json of an array this view does not unpack, looked up and read as zarr-python
    /// opens the array: one request, though the view reads it too to classify the directory;
    /// its absence too. A later lookup still asks the store, so another writer's change shows.
    #[tokio::test]
    async fn a_plain_array_document_costs_one_request() {
        let (view, rec, mem) = cloud_view();
        put(&mem, "a/zarr.json", PLAIN_ARRAY).await;
        assert!(view.lookup("a").await.unwrap().unwrap().is_dir()); // as the kernel does first
        rec.take();
        assert_eq!(read_whole(&view, "a/zarr.json").await, PLAIN_ARRAY.as_bytes());
        assert_eq!(rec.take(), [format!("get_ranged a/zarr.json Range(0..{})", u64::MAX)]);
        // A directory with no zarr.json (a v2 array, probed by zarr-python 3): one request.
        put(&mem, "v2/.zarray", "{}").await;
        assert!(view.lookup("v2").await.unwrap().unwrap().is_dir());
        rec.take();
        assert!(view.lookup("v2/zarr.json").await.unwrap().is_none());
        assert_eq!(rec.take().len(), 1);
        let bigger = PLAIN_ARRAY.replace("[4,4]", "[8,8]");
        put(&mem, "a/zarr.json", &bigger).await;
        assert_eq!(read_whole(&view, "a/zarr.json").await, bigger.as_bytes());
        assert_eq!(rec.take(), ["lookup_reading a/zarr.json"]);
    }

    /// A sharded array of tests/fixtures/rectilinear/store (written by zarr-python 3.4), put
    /// under `at/` of the memory store.
    async fn put_fixture(mem: &object_store::memory::InMemory, name: &str, at: &str) {
        use object_store::ObjectStoreExt;
        for (key, data) in crate::zarr::chunk_grid::tests::fixture_files(name) {
            let rel = key.strip_prefix(name).unwrap_or(&key);
            let key = object_store::path::Path::from(format!("{at}{rel}"));
            mem.put(&key, object_store::PutPayload::from(data)).await.unwrap();
        }
    }

    /// Rectilinear shards (`shards2d`: shard (0, 0) holds 4 x 3 inner chunks, shard (1, 1)
    /// 6 x 4): an inner chunk written through the view goes into its shard, rebuilt with that
    /// shard's own index; the shard's other chunks and the other shards keep their bytes.
    #[tokio::test]
    async fn writes_into_rectilinear_shards() {
        use object_store::ObjectStoreExt;
        let (view, _rec, mem) = cloud_view();
        put_fixture(&mem, "shards2d", "s").await;
        let neighbour = read_whole(&view, "s/c/3/2").await; // shard (0, 0), entry 11
        let far = read_whole(&view, "s/c/9/6").await; // shard (1, 1)
        let far_shard = mem.get(&"s/c/1/1".into()).await.unwrap().bytes().await.unwrap();
        view.write_file("s/c/1/1", Bytes::from_static(b"new inner chunk")).await.unwrap();
        assert_eq!(read_whole(&view, "s/c/1/1").await, b"new inner chunk");
        assert_eq!(read_whole(&view, "s/c/3/2").await, neighbour);
        assert_eq!(read_whole(&view, "s/c/9/6").await, far);
        let stored = mem.get(&"s/c/0/0".into()).await.unwrap().bytes().await.unwrap();
        let DirKind::Sharded(array) = view.dir_kind("s").await.unwrap() else { panic!() };
        let layout = array.array.layout_of(&[0, 0]).unwrap();
        assert_eq!(layout.n_entries, 12);
        let index = ShardIndex::of_shard(&layout, &stored).unwrap();
        let entry = index.entry(4).unwrap(); // inner chunk (1, 1): local (1, 1) of 4 x 3
        assert_eq!(
            &stored[entry.range().start as usize..entry.range().end as usize],
            b"new inner chunk"
        );
        assert_eq!(mem.get(&"s/c/1/1".into()).await.unwrap().bytes().await.unwrap(), far_shard);
        // A key past the inner grid (10 x 7) is refused.
        assert!(view.write_file("s/c/10/0", Bytes::from_static(b"x")).await.is_err());
    }
}
