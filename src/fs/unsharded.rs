//! The unsharded view, the async side: finds sharded arrays (by reading `zarr.json` files),
//! serves their rewritten metadata and their inner chunks as files backed by byte ranges of
//! shards, and passes everything else to the raw namespace. The mapping itself is pure logic
//! in `view::unsharded`; this module only fetches what that logic asks for.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, StreamExt};
use lru::LruCache;

use super::error::{FsError, FsResult};
use super::namespace::{Namespace, RawNamespace};
use super::shard_indexes::{ShardIndexCache, ShardState};
use crate::store::{join_key, split_key, Store, StoreError};
use crate::view::node::{Backing, Node};
use crate::view::unsharded::{rewrite_consolidated_v3, Children, DirChild, UnshardedArray};
use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};

/// What a directory of the store is, as far as this view cares.
#[derive(Debug, Clone)]
enum DirKind {
    /// Not a Zarr node (or not one we can read): look further down.
    Other,
    /// An array we do not unpack: nothing below it can be a sharded array.
    PlainArray,
    /// A group whose `zarr.json` is presented rewritten (consolidated metadata of sharded arrays).
    Group { rewritten: Option<Bytes>, modified: SystemTime },
    Sharded(Arc<ShardedArray>),
}

#[derive(Debug)]
struct ShardedArray {
    dir: String,
    array: UnshardedArray,
    zarr_json: Bytes,
    modified: SystemTime,
}

/// Concurrent shard-index fetches while listing a virtual directory.
const LIST_CONCURRENCY: usize = 32;
const DIR_KIND_CACHE: usize = 65_536;
const INDEX_CACHE_BYTES: usize = 256 << 20;

pub struct UnshardedNamespace {
    raw: RawNamespace,
    store: Arc<dyn Store>,
    ttl: Duration,
    kinds: Mutex<LruCache<String, (DirKind, Instant)>>,
    indexes: ShardIndexCache,
}

/// Where a path of the mount sits relative to the sharded arrays of the store.
enum Place {
    /// Inside sharded array `array`, at `rel` (relative to the array directory, non-empty).
    InArray { array: Arc<ShardedArray>, rel: String },
    /// Anywhere else; `parent_kind` is the kind of the path's parent directory.
    Outside { parent_kind: DirKind },
}

impl UnshardedNamespace {
    pub fn new(raw: RawNamespace, ttl: Duration) -> Self {
        let store = raw.store().clone();
        UnshardedNamespace {
            indexes: ShardIndexCache::new(store.clone(), ttl, INDEX_CACHE_BYTES),
            raw,
            store,
            ttl,
            kinds: Mutex::new(LruCache::new(NonZeroUsize::new(DIR_KIND_CACHE).expect("nonzero"))),
        }
    }

    fn forget_kind(&self, dir: &str) {
        self.kinds.lock().unwrap_or_else(|p| p.into_inner()).pop(dir);
    }

    /// Read and classify `dir/zarr.json` (cached for the metadata TTL).
    async fn dir_kind(&self, dir: &str) -> FsResult<DirKind> {
        if let Some((kind, at)) = self.kinds.lock().unwrap_or_else(|p| p.into_inner()).get(dir) {
            if at.elapsed() < self.ttl {
                return Ok(kind.clone());
            }
        }
        let key = join_key(dir, "zarr.json");
        let kind = match self.store.get_ranged(&key, crate::store::ByteRange::Range(0..u64::MAX)).await {
            Ok(Some((bytes, meta))) => classify(dir, &bytes, meta.modified),
            Ok(None) | Err(StoreError::NotFound(_)) | Err(StoreError::IsADirectory(_)) => DirKind::Other,
            Err(StoreError::NotADirectory(_)) | Err(StoreError::InvalidKey(..)) => DirKind::Other,
            Err(e) => return Err(e.into()),
        };
        self.kinds.lock().unwrap_or_else(|p| p.into_inner()).put(dir.to_string(), (kind.clone(), Instant::now()));
        Ok(kind)
    }

    /// Walk from the root towards `path`, stopping at the first array on the way.
    async fn place(&self, path: &str) -> FsResult<Place> {
        let mut dir = String::new();
        let mut kind = self.dir_kind("").await?;
        let comps: Vec<&str> = path.split('/').collect();
        for (i, comp) in comps.iter().enumerate() {
            match &kind {
                DirKind::Sharded(array) => {
                    let rel = comps[i..].join("/");
                    return Ok(Place::InArray { array: array.clone(), rel });
                }
                DirKind::PlainArray => return Ok(Place::Outside { parent_kind: DirKind::PlainArray }),
                _ => {}
            }
            if i + 1 == comps.len() {
                break;
            }
            dir = join_key(&dir, comp);
            kind = self.dir_kind(&dir).await?;
        }
        Ok(Place::Outside { parent_kind: kind })
    }

    /// The state of the shard holding inner chunk `coords`, and the local entry index.
    async fn shard_of(&self, array: &ShardedArray, coords: &[u64]) -> FsResult<Option<(String, Arc<ShardState>, u64)>> {
        let Some(loc) = array.array.locate(coords) else { return Ok(None) };
        let key = join_key(&array.dir, &loc.shard_key);
        let state = self.indexes.get(&key, &array.array.layout).await.map_err(store_err)?;
        Ok(Some((key, state, loc.local_index)))
    }

    async fn lookup_in_array(&self, array: &ShardedArray, rel: &str) -> FsResult<Option<Node>> {
        if rel == "zarr.json" {
            return Ok(Some(generated(&array.zarr_json, array.modified)));
        }
        if let Some(coords) = array.array.parse_inner_key(rel) {
            let Some((key, state, local)) = self.shard_of(array, &coords).await? else { return Ok(None) };
            return match &*state {
                ShardState::Missing => Ok(None),
                ShardState::Corrupt(why) => Err(FsError::Corrupt(format!("shard {key}: {why}"))),
                ShardState::Present { index, version, modified } => Ok(index.entry(local).map(|e| Node {
                    size: e.nbytes,
                    modified: *modified,
                    backing: Backing::Slice { key, offset: e.offset, len: e.nbytes, version: version.clone() },
                })),
            };
        }
        if array.array.dir_plan(rel).is_some() {
            // A directory of the chunk tree inside the grid. Whether any chunk lies below it
            // would need every shard index under it; lookups answer from the grid alone.
            return Ok(Some(Node::dir(array.modified)));
        }
        if is_chunk_tree_name(&array.array, rel) {
            return Ok(None); // a real shard object or its directory: hidden in this view
        }
        self.raw.lookup(&join_key(&array.dir, rel)).await
    }

    /// The virtual entries of chunk-tree directory `rel` of `array`, from shard indexes only.
    async fn list_chunk_dir(&self, array: &ShardedArray, rel: &str) -> FsResult<Option<Vec<(String, Node)>>> {
        let Some(plan) = array.array.dir_plan(rel) else { return Ok(None) };
        let layout = &array.array.layout;
        let shards: Vec<Vec<u64>> = plan.shard_coords().collect();
        let fetched: Vec<FsResult<(Vec<u64>, String, Arc<ShardState>)>> = stream::iter(shards)
            .map(|sc| async move {
                let key = join_key(&array.dir, &array.array.shard_key(&sc));
                let state = self.indexes.get(&key, layout).await.map_err(store_err)?;
                Ok((sc, key, state))
            })
            .buffer_unordered(LIST_CONCURRENCY)
            .collect()
            .await;
        let mut children: std::collections::BTreeMap<String, Node> = std::collections::BTreeMap::new();
        for item in fetched {
            let (sc, key, state) = item?;
            let ShardState::Present { index, version, modified } = &*state else {
                if let ShardState::Corrupt(why) = &*state {
                    tracing::warn!(shard = %key, reason = %why, "listing skips the chunks of a corrupt shard");
                }
                continue;
            };
            for (local, entry) in index.present() {
                let Some(coords) = array.array.inner_coords(&sc, local) else { continue };
                let Some(DirChild { name, is_dir }) = array.array.child_in_dir(&plan, &coords) else { continue };
                let node = if is_dir {
                    Node::dir(array.modified)
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
                    }
                };
                children.entry(name).or_insert(node);
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
            .filter(|(name, _)| !is_chunk_tree_name(&array.array, name))
            .map(|(name, node)| if name == "zarr.json" { (name, generated(&array.zarr_json, array.modified)) } else { (name, node) })
            .collect();
        if let Some(virtual_entries) = self.list_chunk_dir(array, "").await? {
            out.extend(virtual_entries);
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn refuse_in_array(&self, path: &str) -> FsError {
        tracing::info!(path, "refused: writing inside a sharded array through the unsharded view is not supported yet");
        FsError::ReadOnly("sharded arrays are read-only in the unsharded view")
    }

    /// Whether a write at `path` lands inside a sharded array (refused for now).
    async fn check_mutable(&self, path: &str) -> FsResult<()> {
        match self.place(path).await? {
            Place::InArray { array, rel } if rel == "zarr.json" || is_chunk_tree_name(&array.array, &rel)
                || array.array.dir_plan(&rel).is_some() || array.array.parse_inner_key(&rel).is_some() =>
            {
                Err(self.refuse_in_array(path))
            }
            _ => Ok(()),
        }
    }

    fn note_write(&self, path: &str) {
        let (dir, name) = split_key(path);
        if name == "zarr.json" {
            self.forget_kind(dir);
        }
    }
}

fn store_err(e: Arc<StoreError>) -> FsError {
    match Arc::try_unwrap(e) {
        Ok(e) => FsError::Store(e),
        Err(shared) => FsError::Store(StoreError::Backend { key: String::new(), message: shared.to_string() }),
    }
}

fn generated(bytes: &Bytes, modified: SystemTime) -> Node {
    Node { size: bytes.len() as u64, modified, backing: Backing::Generated(bytes.clone()) }
}

/// A name inside an array directory that belongs to the chunk tree (real shards or their
/// directories), which this view replaces with virtual entries.
fn is_chunk_tree_name(array: &UnshardedArray, rel: &str) -> bool {
    if array.parse_inner_key(rel).is_some() || array.shard_coords_of_key(rel).is_some() {
        return true;
    }
    match array.dir_plan("").map(|p| p.children) {
        Some(Children::Literal(name)) => rel == name || rel.starts_with(&format!("{name}/")),
        Some(Children::CoordDirs) | Some(Children::CoordFiles) => {
            rel.split('/').next().is_some_and(|c| crate::zarr::chunk_key::parse_coord(c).is_some())
        }
        _ => false,
    }
}

/// Decide what a directory with this `zarr.json` is.
fn classify(dir: &str, bytes: &[u8], modified: SystemTime) -> DirKind {
    match parse_zarr_json(bytes) {
        Ok(NodeMetadata::Array(meta)) => match UnshardedArray::new(meta) {
            Ok(array) => {
                let zarr_json = Bytes::from(array.rewritten_zarr_json());
                DirKind::Sharded(Arc::new(ShardedArray { dir: dir.to_string(), array, zarr_json, modified }))
            }
            Err(reason) => {
                if !matches!(reason, crate::zarr::sharding::NotUnpackable::NotSharded) {
                    tracing::info!(array = %dir, reason = %reason, "sharded array passed through untouched");
                }
                DirKind::PlainArray
            }
        },
        Ok(NodeMetadata::Group(group)) => {
            let mut json = group.json.clone();
            let rewritten = rewrite_consolidated_v3(&mut json).then(|| {
                let mut out = serde_json::to_vec_pretty(&serde_json::Value::Object(json)).expect("JSON serializes");
                out.shrink_to_fit();
                Bytes::from(out)
            });
            DirKind::Group { rewritten, modified }
        }
        Err(e) => {
            tracing::warn!(dir = %dir, error = %e, "unreadable zarr.json: passed through untouched");
            DirKind::Other
        }
    }
}

#[async_trait]
impl Namespace for UnshardedNamespace {
    async fn lookup(&self, path: &str) -> FsResult<Option<Node>> {
        if path.is_empty() {
            return self.raw.lookup(path).await;
        }
        match self.place(path).await? {
            Place::InArray { array, rel } => self.lookup_in_array(&array, &rel).await,
            Place::Outside { parent_kind } => {
                if split_key(path).1 == "zarr.json" {
                    if let DirKind::Group { rewritten: Some(bytes), modified } = &parent_kind {
                        return Ok(Some(generated(bytes, *modified)));
                    }
                }
                self.raw.lookup(path).await
            }
        }
    }

    async fn list(&self, dir: &str) -> FsResult<Vec<(String, Node)>> {
        let place = if dir.is_empty() { None } else { Some(self.place(dir).await?) };
        match place {
            Some(Place::InArray { array, rel }) => match self.list_chunk_dir(&array, &rel).await? {
                Some(entries) => Ok(entries),
                None => self.raw.list(&join_key(&array.dir, &rel)).await,
            },
            _ => {
                let kind = self.dir_kind(dir).await?;
                if let DirKind::Sharded(array) = &kind {
                    return self.list_array_dir(array).await;
                }
                let mut entries = self.raw.list(dir).await?;
                if let DirKind::Group { rewritten: Some(bytes), modified } = &kind {
                    for (name, node) in entries.iter_mut() {
                        if name == "zarr.json" {
                            *node = generated(bytes, *modified);
                        }
                    }
                }
                Ok(entries)
            }
        }
    }

    async fn read(&self, path: &str, node: &Node, offset: u64, size: u32) -> FsResult<Bytes> {
        self.raw.read(path, node, offset, size).await
    }

    async fn check_writable(&self, path: &str) -> FsResult<()> {
        self.check_mutable(path).await
    }

    async fn write_file(&self, path: &str, data: Bytes) -> FsResult<()> {
        self.check_mutable(path).await?;
        self.raw.write_file(path, data).await?;
        self.note_write(path);
        Ok(())
    }

    async fn remove_file(&self, path: &str) -> FsResult<()> {
        self.check_mutable(path).await?;
        self.raw.remove_file(path).await?;
        self.note_write(path);
        Ok(())
    }

    async fn rename(&self, from: &str, to: &str, is_dir: bool) -> FsResult<()> {
        self.check_mutable(from).await?;
        self.check_mutable(to).await?;
        self.raw.rename(from, to, is_dir).await?;
        self.note_write(from);
        self.note_write(to);
        if is_dir {
            self.kinds.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        Ok(())
    }

    async fn mkdir(&self, path: &str) -> FsResult<()> {
        self.check_mutable(path).await?;
        self.raw.mkdir(path).await
    }

    async fn rmdir(&self, path: &str) -> FsResult<()> {
        self.check_mutable(path).await?;
        self.raw.rmdir(path).await?;
        self.forget_kind(path);
        Ok(())
    }

    fn capacity(&self) -> Option<(u64, u64)> {
        self.raw.capacity()
    }
}
