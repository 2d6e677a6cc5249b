//! The tiles of re-tiled arrays (`views::presented::mapping::retile`) in the presented views: a
//! tile exists when a stored chunk it overlaps does, is looked up from those chunks alone, and
//! reads as the region assembled from them (`views::shared::regions`), kept in the decoded-chunk
//! cache. Directories of the tile tree exist from the grid alone and list the tiles of the stored
//! chunks under them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

use crate::views::presented::mapping::retile::Retiling;
use crate::views::shared::error::{FsError, FsResult};
use crate::views::shared::mapping::node::{Backing, Node, SourceChunk};
use crate::views::shared::mapping::regions::Placed;
use crate::views::shared::regions::ChunkSource;

/// What a path inside a re-tiled array is.
pub enum TilePath {
    /// A tile or a directory of the tile tree: this node, or absent.
    Tree(Option<Node>),
    /// A name of the stored chunk tree: hidden.
    Hidden,
    /// Anything else: the same path below.
    Other,
}

/// The node of tile `tile` made of `sources` (the stored chunks it overlaps that exist).
fn tile_node(retiling: &Arc<Retiling>, tile: Vec<u64>, sources: Vec<SourceChunk>) -> Node {
    let modified = sources.iter().map(|s| s.node.modified).max().unwrap_or(SystemTime::UNIX_EPOCH);
    Node {
        size: retiling.tile_bytes(),
        modified,
        backing: Backing::Retiled { tile, sources, retiling: retiling.clone() },
        // Made of many chunks: the array's metadata document's (`presented::inherit`).
        perms: None,
    }
}

impl ChunkSource<'_> {
    /// What `rel` (relative to the re-tiled array's directory `dir`, non-empty) is.
    pub async fn tile_path(
        &self,
        dir: &str,
        retiling: &Arc<Retiling>,
        rel: &str,
        modified: SystemTime,
    ) -> FsResult<TilePath> {
        if let Some(tile) = retiling.shown.chunk(rel) {
            let bounds = retiling.sources_of(&tile).ok_or(FsError::NotFound)?;
            let sources = self.lookup_chunks(dir, &retiling.below, bounds, None).await?;
            let node = (!sources.is_empty()).then(|| tile_node(retiling, tile, sources));
            return Ok(TilePath::Tree(node));
        }
        if retiling.shown.sub_dir(rel).is_some() {
            return Ok(TilePath::Tree(Some(Node::dir(modified))));
        }
        if retiling.shown.owns(rel) || retiling.below.owns(rel) {
            return Ok(TilePath::Hidden);
        }
        Ok(TilePath::Other)
    }

    /// The entries of tile-tree directory `rel` (`""` for the array directory: only its tile
    /// tree entries); `None` if `rel` is not one.
    pub async fn list_tiles(
        &self,
        dir: &str,
        retiling: &Arc<Retiling>,
        rel: &str,
        modified: SystemTime,
    ) -> FsResult<Option<Vec<(String, Node)>>> {
        let Some(tree_dir) = retiling.shown.dir(rel) else { return Ok(None) };
        let bounds = retiling.sources_under(&tree_dir.fixed);
        let sources = self.list_chunks(dir, &retiling.below, &bounds).await?;
        let mut tiles: BTreeMap<Vec<u64>, Vec<SourceChunk>> = BTreeMap::new();
        for source in sources {
            let one: Vec<_> = source.coords.iter().map(|&c| c..c + 1).collect();
            for tile in retiling.tiles_in(retiling.tiles_of(&one)) {
                tiles.entry(tile).or_default().push(source.clone());
            }
        }
        let mut out: BTreeMap<String, Node> = BTreeMap::new();
        for (tile, sources) in tiles {
            let Some(child) = retiling.shown.child(&tree_dir.fixed, tree_dir.children, &tile)
            else {
                continue;
            };
            let node =
                if child.is_dir { Node::dir(modified) } else { tile_node(retiling, tile, sources) };
            out.entry(child.name).or_insert(node);
        }
        Ok(Some(out.into_iter().collect()))
    }

    /// The decoded-cache key of the tile at `path`: its version (that of its sources).
    pub fn tile_key(path: &str, node: &Node) -> String {
        format!("{path}\0{}", node.content_version().unwrap_or_default())
    }

    /// The bytes of a tile (`path` names it in the cache and in errors).
    pub async fn read_tile(
        &self,
        path: &str,
        node: &Node,
        tile: &[u64],
        sources: &[SourceChunk],
        retiling: &Retiling,
    ) -> FsResult<Bytes> {
        let key = Self::tile_key(path, node);
        self.cache
            .get_or_load(&key, || async {
                let region = retiling.tile_region(tile).ok_or(FsError::NotFound)?;
                let origin: Vec<u64> = region.iter().map(|r| r.start).collect();
                let mut out =
                    retiling.fill_tile().map_err(|e| FsError::Corrupt(format!("{path}: {e}")))?;
                let at = Placed { origin: &origin, shape: &retiling.tile };
                let (grid, specs, item) = (&retiling.source, &retiling.specs, retiling.item);
                self.assemble(&mut out, at, sources, grid, specs, item).await?;
                Ok(Bytes::from(out))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::ops::Range;
    use std::time::Duration;

    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::layers::recording::RecordingStore;
    use crate::store::prelude::*;
    use crate::views::presented::mapping::v2::V2Presenter;
    use crate::views::presented::namespace::PresentedNamespace;
    use crate::views::raw::namespace::RawNamespace;
    use crate::views::shared::namespace::{read_all, Namespace};
    use crate::views::unsharded::namespace::UnshardedNamespace;
    use crate::zarr::chunk_grid::tests::{fixture_files, fixtures};

    /// The v2 view of tests/fixtures/rectilinear/store (zarr-python 3.4's arrays) in memory,
    /// with the requests reaching the store recorded.
    async fn v2_view() -> (PresentedNamespace, Arc<RecordingStore>) {
        let mem = Arc::new(MemoryStore::new());
        for (key, data) in fixture_files("") {
            mem.put(&key, Bytes::from(data)).await.unwrap();
        }
        let rec = Arc::new(RecordingStore::new(mem));
        let ttl = Duration::from_secs(3600);
        let unsharded = UnshardedNamespace::new(RawNamespace::new(rec.clone()), ttl);
        let presenter = Box::new(V2Presenter::default());
        (PresentedNamespace::new(Arc::new(unsharded), presenter, ttl, 1 << 24), rec)
    }

    /// The keys the recorded requests named.
    fn keys(calls: Vec<String>) -> BTreeSet<String> {
        calls.iter().filter_map(|c| c.split(' ').nth(1)).map(str::to_string).collect()
    }

    /// The data bytes of a C-order little-endian .npy file of expected/.
    fn npy(name: &str) -> Vec<u8> {
        let file = std::fs::read(fixtures().join("expected").join(format!("{name}.npy"))).unwrap();
        let header_len = u16::from_le_bytes([file[8], file[9]]) as usize;
        let header = String::from_utf8_lossy(&file[10..10 + header_len]);
        assert!(header.contains("'fortran_order': False") && header.contains("'<"), "{header}");
        file[10 + header_len..].to_vec()
    }

    /// The tile at rows `rows`, columns `cols` of a 2-d int32 array (`width` columns, the fill
    /// value past its `height` rows and its columns).
    fn expected_tile(
        data: &[u8],
        height: u64,
        width: u64,
        rows: Range<u64>,
        cols: Range<u64>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        for r in rows {
            for c in cols.clone() {
                if r < height && c < width {
                    let at = ((r * width + c) * 4) as usize;
                    out.extend_from_slice(&data[at..at + 4]);
                } else {
                    out.extend_from_slice(&(-1i32).to_le_bytes());
                }
            }
        }
        out
    }

    /// chunks2d: 100 x 70 int32 in chunks [40, 60] x [30, 30, 10], chunk (1, 2) never written;
    /// tiles of 60 x 30. A tile costs the stored chunks it overlaps and nothing else.
    #[tokio::test]
    async fn a_tile_costs_the_chunks_it_overlaps() {
        let (view, rec) = v2_view().await;
        let zarray = view.lookup("chunks2d/.zarray").await.unwrap().unwrap();
        read_all(&view, "chunks2d/.zarray", &zarray).await.unwrap();
        rec.take();
        // Tile (0, 0): rows 0..60 of the first column chunk, i.e. chunks (0, 0) and (1, 0).
        let node = view.lookup("chunks2d/0/0").await.unwrap().unwrap();
        assert_eq!(node.size, 60 * 30 * 4);
        let bytes = read_all(&view, "chunks2d/0/0", &node).await.unwrap();
        let calls = rec.take();
        assert_eq!(calls.len(), 4, "one lookup and one read per chunk: {calls:?}");
        let touched = keys(calls);
        assert_eq!(touched, BTreeSet::from(["c/0/0", "c/1/0"].map(|k| format!("chunks2d/{k}"))));
        assert_eq!(bytes, expected_tile(&npy("chunks2d"), 100, 70, 0..60, 0..30));
        // Tile (1, 2): rows 60..120, columns 60..90: only chunk (1, 2), which does not exist.
        assert!(view.lookup("chunks2d/1/2").await.unwrap().is_none());
        assert_eq!(keys(rec.take()), BTreeSet::from(["chunks2d/c/1/2".to_string()]));
        // Tile (0, 2) holds chunk (0, 2) and the fill value where chunk (1, 2) would be.
        let node = view.lookup("chunks2d/0/2").await.unwrap().unwrap();
        let bytes = read_all(&view, "chunks2d/0/2", &node).await.unwrap();
        assert_eq!(bytes, expected_tile(&npy("chunks2d"), 100, 70, 0..60, 60..90));
        // Read again: from the cache, no request.
        rec.take();
        read_all(&view, "chunks2d/0/0", &view.lookup("chunks2d/0/0").await.unwrap().unwrap())
            .await
            .unwrap();
        assert!(rec.take().iter().all(|c| !c.starts_with("get")), "no chunk read again");
    }

    /// A tile read to its end leaves the decoded cache; the stored chunks it was made of,
    /// which other tiles share, stay (the next tile over them costs no read).
    #[tokio::test]
    async fn a_tile_read_to_its_end_leaves_its_sources_cached() {
        let (view, rec) = v2_view().await;
        let node = view.lookup("chunks2d/0/0").await.unwrap().unwrap();
        let key = ChunkSource::tile_key("chunks2d/0/0", &node);
        let mut got = Vec::new();
        while (got.len() as u64) < node.size {
            got.extend(view.read("chunks2d/0/0", &node, got.len() as u64, 4096).await.unwrap());
        }
        assert_eq!(got, expected_tile(&npy("chunks2d"), 100, 70, 0..60, 0..30));
        let Backing::Retiled { sources, .. } = &node.backing else { panic!("{node:?}") };
        assert!(!view.decoded.holds(&key), "the tile is let go");
        for s in sources {
            assert!(
                view.decoded.holds(&ChunkSource::decoded_key(&s.below, &s.node)),
                "{}",
                s.below
            );
        }
        // Tile (1, 0), rows 60..120, is made of chunk (1, 0) alone (rows 40..100): no read.
        rec.take();
        let node = view.lookup("chunks2d/1/0").await.unwrap().unwrap();
        let bytes = read_all(&view, "chunks2d/1/0", &node).await.unwrap();
        assert_eq!(bytes, expected_tile(&npy("chunks2d"), 100, 70, 60..120, 0..30));
        assert!(rec.take().iter().all(|c| !c.starts_with("get")), "a chunk read again");
    }

    /// Listings show the tiles of the chunks that exist, from listing the chunk tree below.
    #[tokio::test]
    async fn tiles_listed_from_the_chunks_below() {
        let (view, _rec) = v2_view().await;
        let names =
            |entries: Vec<(String, Node)>| entries.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(view.list("chunks2d").await.unwrap()), [".zarray", ".zattrs", "0", "1"]);
        assert_eq!(names(view.list("chunks2d/0").await.unwrap()), ["0", "1", "2"]);
        assert_eq!(names(view.list("chunks2d/1").await.unwrap()), ["0", "1"]);
        let listed = view.list("chunks2d/0").await.unwrap();
        let looked_up = view.lookup("chunks2d/0/2").await.unwrap().unwrap();
        assert_eq!(listed[2].1, looked_up);
        // `.` keys: tiles are files of the array directory.
        let dot = names(view.list("chunks_dot").await.unwrap());
        assert_eq!(dot, [".zarray", ".zattrs", "0.0", "0.1", "0.2", "1.0", "1.1", "1.2"]);
        // Names of the stored chunk tree are hidden, other names pass.
        assert!(view.lookup("chunks2d/c").await.unwrap().is_none());
        assert!(view.lookup("chunks2d/5").await.unwrap().is_none());
        assert!(view.list("chunks2d/0/0").await.is_err());
    }
}
