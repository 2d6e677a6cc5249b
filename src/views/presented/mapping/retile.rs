//! A truly rectilinear array on a regular grid, for the v2 views (Zarr v2 has no rectilinear grid):
//! every v2 chunk (a *tile*) is assembled from the decoded source chunks it overlaps. Pure: which
//! source chunks a tile needs, which tiles a source chunk feeds, and the names of both chunk trees;
//! `views::shared::regions` and `views::presented::namespace::retile` fetch and assemble.
//!
//! The tile is, per dimension, the longest source chunk: the shape of the grid's largest chunk
//! (every combination of lengths is a chunk), so no tile is larger than a decoded chunk already
//! is. Then a source chunk overlaps at most
//! two tiles per dimension (it is no longer than a tile), so a scan of the whole array decodes
//! each source chunk at most 2^ndim times even with nothing cached (once with the decoded-chunk
//! cache), and there are never more tiles than source chunks. A shorter tile (the shortest
//! chunk, or the most common length) would align with more chunks but make a long chunk feed
//! many tiles, each of which decodes all of it; a dimension whose chunks share one length
//! (the rest of a grid may vary) tiles exactly onto its chunks.

use std::ops::Range;

use crate::views::shared::mapping::regions::GridBoxIter;
use crate::views::shared::mapping::regions::{chunks_under, Region};
use crate::zarr::chunk_grid::RectilinearGrid;
use crate::zarr::chunk_key::ChunkKeyEncoding;
use crate::zarr::chunk_specs::ChunkSpecs;
use crate::zarr::chunk_tree::{grid, ChunkTree};
use crate::zarr::codecs::CodecError;

#[derive(Debug, Clone, PartialEq)]
pub struct Retiling {
    /// The source chunks' boundaries.
    pub source: RectilinearGrid,
    /// How to decode each source chunk.
    pub specs: ChunkSpecs,
    /// The shape of every tile.
    pub tile: Vec<u64>,
    /// The tiles' keys, as presented.
    pub shown: ChunkTree,
    /// The source chunks' keys, in the view below.
    pub below: ChunkTree,
    /// Bytes of one decoded element (trailing axes of `specs` included).
    pub item: usize,
}

impl Retiling {
    /// Tiles for an array of `shape` whose chunks, on `source` and keyed by `below`, decode
    /// with `specs`; tiles are keyed by `shown`.
    pub fn new(
        shape: &[u64],
        source: &RectilinearGrid,
        specs: ChunkSpecs,
        below: ChunkKeyEncoding,
        shown: ChunkKeyEncoding,
    ) -> Retiling {
        let tile = source.largest_chunk();
        let base = specs.base();
        let extra: usize = base.chunk_shape[source.ndim()..].iter().map(|&n| n as usize).product();
        let item = base.data_type.itemsize * extra;
        Retiling {
            shown: ChunkTree::new(shown, grid(shape, &tile)),
            below: ChunkTree::new(below, source.counts()),
            source: source.clone(),
            specs,
            tile,
            item,
        }
    }

    /// The elements of tile `coords` (its full shape: a tile at the array's edge overhangs
    /// it, as a v2 chunk does); `None` outside the tile grid.
    pub fn tile_region(&self, coords: &[u64]) -> Option<Region> {
        if !self.shown.contains(coords) {
            return None;
        }
        let start = |c: u64, t: u64| c.saturating_mul(t);
        Some(coords.iter().zip(&self.tile).map(|(&c, &t)| start(c, t)..start(c + 1, t)).collect())
    }

    /// The source chunks a tile overlaps, boxed (one range of chunk coordinates per dimension).
    pub fn sources_of(&self, tile: &[u64]) -> Option<Vec<Range<u64>>> {
        Some(chunks_under(&self.source, &self.tile_region(tile)?))
    }

    /// The tiles a box of source chunks feeds, boxed.
    pub fn tiles_of(&self, sources: &[Range<u64>]) -> Vec<Range<u64>> {
        sources
            .iter()
            .enumerate()
            .map(|(d, r)| {
                if r.is_empty() {
                    return 0..0;
                }
                let edges = self.source.dim(d);
                let (first, last) =
                    (edges.start(r.start), edges.start(r.end - 1) + edges.len(r.end - 1));
                let end = last.div_ceil(self.tile[d]).min(self.shown.grid()[d]);
                first / self.tile[d]..end
            })
            .collect()
    }

    /// The source chunks under the tiles whose leading coordinates are `fixed` (a directory
    /// of the tile tree), boxed.
    pub fn sources_under(&self, fixed: &[u64]) -> Vec<Range<u64>> {
        let tiles: Vec<Range<u64>> = (0..self.tile.len())
            .map(|d| match fixed.get(d) {
                Some(&c) => c..c + 1,
                None => 0..self.shown.grid()[d],
            })
            .collect();
        let region: Region = tiles
            .iter()
            .zip(&self.tile)
            .map(|(r, &t)| r.start.saturating_mul(t)..r.end.saturating_mul(t))
            .collect();
        chunks_under(&self.source, &region)
    }

    /// The tiles a box of tiles holds, in C order.
    pub fn tiles_in(&self, tiles: Vec<Range<u64>>) -> GridBoxIter {
        GridBoxIter::new(tiles)
    }

    /// Bytes of one assembled tile.
    pub fn tile_bytes(&self) -> u64 {
        self.tile.iter().fold(self.item as u64, |n, &t| n.saturating_mul(t))
    }

    /// A tile of the fill value, to assemble into.
    pub fn fill_tile(&self) -> Result<Vec<u8>, CodecError> {
        let mut spec = self.specs.base().clone();
        spec.chunk_shape[..self.tile.len()].copy_from_slice(&self.tile);
        spec.fill_chunk()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::chunk_grid::tests::fixture_meta;

    const V2_SLASH: ChunkKeyEncoding = ChunkKeyEncoding::V2 { separator: '/' };

    fn retiling(name: &str) -> Retiling {
        let meta = fixture_meta(name);
        let source = meta.chunk_grid.truly_rectilinear().unwrap().clone();
        let specs = ChunkSpecs::from_v3(&meta).unwrap();
        Retiling::new(&meta.shape, &source, specs, meta.key_encoding, V2_SLASH)
    }

    /// chunks2d: 100 x 70 int32 in chunks [40, 60] x [30, 30, 10]: tiles of 60 x 30.
    #[test]
    fn tiles_of_the_longest_chunks() {
        let r = retiling("chunks2d");
        assert_eq!(r.tile, [60, 30]);
        assert_eq!(r.shown.grid(), [2, 3]);
        assert_eq!((r.item, r.tile_bytes()), (4, 60 * 30 * 4));
        assert_eq!(r.tile_region(&[1, 2]), Some(vec![60..120, 60..90]));
        assert_eq!(r.tile_region(&[2, 0]), None);
        // Tile (0, 0) = rows 0..60: both row chunks; columns 0..30: the first column chunk.
        assert_eq!(r.sources_of(&[0, 0]), Some(vec![0..2, 0..1]));
        assert_eq!(r.sources_of(&[1, 2]), Some(vec![1..2, 2..3]));
        // Source chunk (1, 1) (rows 40..100, columns 30..60) feeds tiles (0..2, 1..2).
        assert_eq!(r.tiles_of(&[1..2, 1..2]), vec![0..2, 1..2]);
        assert_eq!(r.tiles_of(&[0..2, 0..3]), vec![0..2, 0..3]);
        assert_eq!(r.sources_under(&[1]), vec![1..2, 0..3]);
        assert_eq!(r.sources_under(&[]), vec![0..2, 0..3]);
        assert_eq!(r.tiles_in(vec![0..2, 1..2]).count(), 2);
        let fill = r.fill_tile().unwrap();
        assert_eq!(fill.len() as u64, r.tile_bytes());
        assert!(fill.chunks(4).all(|e| e == (-1i32).to_le_bytes()));
    }

    /// Every source chunk feeds at most 2 tiles per dimension, and the tiles a chunk feeds are
    /// exactly those whose sources include it.
    #[test]
    fn each_chunk_feeds_at_most_two_tiles_per_dimension() {
        for name in ["chunks2d", "chunks3d_f64", "chunks1d_v2keys", "chunks_dot"] {
            let r = retiling(name);
            for chunk in GridBoxIter::new(r.source.counts().iter().map(|&n| 0..n).collect()) {
                let one: Vec<Range<u64>> = chunk.iter().map(|&c| c..c + 1).collect();
                let tiles = r.tiles_of(&one);
                assert!(
                    tiles.iter().all(|t| t.end - t.start <= 2 && !t.is_empty()),
                    "{name} {chunk:?}"
                );
                for tile in GridBoxIter::new(r.shown.grid().iter().map(|&n| 0..n).collect()) {
                    let feeds = tiles.iter().zip(&tile).all(|(t, c)| t.contains(c));
                    let needs = r.sources_of(&tile).unwrap();
                    let needed = needs.iter().zip(&chunk).all(|(s, c)| s.contains(c));
                    assert_eq!(feeds, needed, "{name} chunk {chunk:?} tile {tile:?}");
                }
            }
        }
    }

    #[test]
    fn trailing_axes_widen_the_element() {
        let meta = fixture_meta("chunks_dot");
        let source = meta.chunk_grid.truly_rectilinear().unwrap().clone();
        let specs = ChunkSpecs::from_v3(&meta).unwrap().with_trailing_axis(3).unwrap();
        let r = Retiling::new(&meta.shape, &source, specs, meta.key_encoding, V2_SLASH);
        assert_eq!(r.item, 2 * 3);
        assert_eq!(r.fill_tile().unwrap().len() as u64, r.tile_bytes());
    }
}
