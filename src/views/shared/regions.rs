//! Decoded chunks of the view below, and regions of an array assembled from them (the async side of
//! `views::shared::mapping::regions`). A stored chunk is read and decoded once per version through
//! the decoded-chunk cache; a region takes each chunk under it that exists and copies that chunk's
//! overlap into a buffer already holding the fill value (absent chunks are the fill value). Finding
//! which chunks exist lists only the chunk tree's directories under the region.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::store::{join_key, StoreError};
use crate::ttl_cache::TtlCache;
use crate::views::shared::decoded_cache::DecodedCache;
use crate::views::shared::error::{FsError, FsResult};
use crate::views::shared::mapping::node::{Node, SourceChunk};
use crate::views::shared::mapping::regions::GridBoxIter;
use crate::views::shared::mapping::regions::{copy_overlap, Placed};
use crate::views::shared::namespace::{read_all, Namespace};
use crate::zarr::chunk_grid::RectilinearGrid;
use crate::zarr::chunk_specs::ChunkSpecs;
use crate::zarr::chunk_tree::ChunkTree;
use crate::zarr::codecs::ChunkSpec;

/// Chunks looked up or decoded at once.
const CONCURRENCY: usize = 16;

/// The chunks of one view below, decoded through one cache.
#[derive(Clone, Copy)]
pub struct ChunkSource<'a> {
    pub below: &'a dyn Namespace,
    pub cache: &'a DecodedCache,
}

/// A path missing from the view below (or not a directory), as opposed to a failure.
pub fn is_absent(e: &FsError) -> bool {
    matches!(
        e,
        FsError::NotFound
            | FsError::NotADirectory
            | FsError::Store(StoreError::NotFound(_))
            | FsError::Store(StoreError::NotADirectory(_))
            | FsError::Store(StoreError::InvalidKey(..))
    )
}

fn inside(bounds: &[Range<u64>], coords: &[u64]) -> bool {
    coords.iter().zip(bounds).all(|(c, r)| r.contains(c))
}

impl ChunkSource<'_> {
    /// The decoded-cache key of the stored chunk `encoded` at path `below`: its version.
    pub fn decoded_key(below: &str, encoded: &Node) -> String {
        format!("{below}\0{}", encoded.content_version().unwrap_or_default())
    }

    /// The decoded bytes of the stored chunk `encoded` at path `below` (cached by its version).
    pub async fn decoded(&self, below: &str, encoded: &Node, spec: &ChunkSpec) -> FsResult<Bytes> {
        let key = Self::decoded_key(below, encoded);
        self.cache
            .get_or_load(&key, || async {
                let stored = read_all(self.below, below, encoded).await?;
                spec.decode(&stored).map(Bytes::from).map_err(|e| {
                    tracing::error!(chunk = %below, error = %e, "cannot decode chunk: reads give EIO");
                    FsError::Corrupt(format!("{below}: {e}"))
                })
            })
            .await
    }

    /// The box (array coordinates) a stored chunk's decoded elements fill, as `assemble`
    /// places them: from its origin on the grid, its spec's chunk shape.
    pub fn chunk_box(
        source: &SourceChunk,
        grid: &RectilinearGrid,
        specs: &ChunkSpecs,
    ) -> Option<Vec<Range<u64>>> {
        let origin = grid.chunk_origin(&source.coords)?;
        let spec = specs.of(&source.coords)?;
        let shape = spec.chunk_shape.get(..origin.len())?;
        Some(origin.iter().zip(shape).map(|(&o, &s)| o..o.saturating_add(s)).collect())
    }

    /// The chunks of `tree` (the chunk tree of the array in directory `dir` below) that exist
    /// and lie in `bounds` (one range of chunk coordinates per dimension), each looked up, or
    /// taken from `known` (chunk path below -> its node, `None`: absent) and kept there.
    pub async fn lookup_chunks(
        &self,
        dir: &str,
        tree: &ChunkTree,
        bounds: Vec<Range<u64>>,
        known: Option<&TtlCache<Option<Node>>>,
    ) -> FsResult<Vec<SourceChunk>> {
        let found: Vec<Option<SourceChunk>> = stream::iter(GridBoxIter::new(bounds))
            .map(|coords| async move {
                let below = join_key(dir, &tree.key(&coords));
                let node = match known.and_then(|k| k.get(&below)) {
                    Some(node) => node,
                    None => {
                        let node = self.below.lookup(&below).await?;
                        if let Some(k) = known {
                            k.put(below.clone(), node.clone());
                        }
                        node
                    }
                };
                Ok::<_, FsError>(match node {
                    Some(node) if !node.is_dir() => Some(SourceChunk { coords, below, node }),
                    _ => None,
                })
            })
            .buffered(CONCURRENCY)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// The same chunks found by listing: only the directories of the tree that can hold
    /// chunks in `bounds` are listed (a listing costs one request per directory, a lookup one
    /// per chunk).
    pub async fn list_chunks(
        &self,
        dir: &str,
        tree: &ChunkTree,
        bounds: &[Range<u64>],
    ) -> FsResult<Vec<SourceChunk>> {
        let mut found = Vec::new();
        let mut dirs = vec![String::new()];
        while let Some(rel) = dirs.pop() {
            let path = if rel.is_empty() { dir.to_string() } else { join_key(dir, &rel) };
            let entries = match self.below.list(&path).await {
                Ok(entries) => entries,
                Err(e) if is_absent(&e) => continue,
                Err(e) => return Err(e),
            };
            for (name, node) in entries {
                let child = join_key(&rel, &name);
                if let Some(coords) = tree.chunk(&child) {
                    if !node.is_dir() && inside(bounds, &coords) {
                        found.push(SourceChunk { coords, below: join_key(dir, &child), node });
                    }
                } else if node.is_dir()
                    && tree.sub_dir(&child).is_some_and(|fixed| inside(bounds, &fixed))
                {
                    dirs.push(child);
                }
            }
        }
        Ok(found)
    }

    /// A stored chunk decoded, with the spec it was decoded with.
    async fn decoded_source<'s>(
        &self,
        source: &'s SourceChunk,
        specs: &ChunkSpecs,
    ) -> FsResult<(&'s SourceChunk, Arc<ChunkSpec>, Bytes)> {
        let spec = specs.of(&source.coords).ok_or(FsError::NotFound)?;
        let bytes = self.decoded(&source.below, &source.node, &spec).await?;
        Ok((source, spec, bytes))
    }

    /// Copy every one of `sources` (chunks on `grid`, decoded with their spec of `specs`,
    /// `item` bytes per element) into `out`, a C-order buffer of the region `at`.
    pub async fn assemble(
        &self,
        out: &mut [u8],
        at: Placed<'_>,
        sources: &[SourceChunk],
        grid: &RectilinearGrid,
        specs: &ChunkSpecs,
        item: usize,
    ) -> FsResult<()> {
        // Made up front: a stream mapping with a closure would borrow `sources` for a lifetime
        // the async trait's future cannot name.
        let fetches: Vec<_> = sources.iter().map(|s| self.decoded_source(s, specs)).collect();
        let mut decoded = stream::iter(fetches).buffer_unordered(CONCURRENCY);
        while let Some(next) = decoded.next().await {
            let (source, spec, bytes) = next?;
            let origin = grid.chunk_origin(&source.coords).ok_or(FsError::NotFound)?;
            let shape = &spec.chunk_shape[..origin.len()];
            let overlap: Vec<Range<u64>> = (0..origin.len())
                .map(|d| {
                    let start = origin[d].max(at.origin[d]);
                    let end = origin[d]
                        .saturating_add(shape[d])
                        .min(at.origin[d].saturating_add(at.shape[d]));
                    start..end.max(start)
                })
                .collect();
            copy_overlap(&bytes, Placed { origin: &origin, shape }, out, at, &overlap, item)
                .map_err(|e| FsError::Corrupt(format!("{}: {e}", source.below)))?;
        }
        Ok(())
    }
}
