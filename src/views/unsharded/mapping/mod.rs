//! The unsharded view of one sharded Zarr v3 array, as pure mapping logic: the
//! rewritten metadata the mount presents, and the correspondence between virtual
//! inner-chunk keys/directories and the real shards (and index entries) behind
//! them. No I/O: the caller fetches the shard indexes this module points it to.
//!
//! The shard grid may be rectilinear (shards of different lengths, each holding whole inner
//! chunks): the inner chunks still form a regular grid, `ceil(shape / inner_chunk_shape)`,
//! and a global inner coordinate is the shard's start / inner length + the local one.
//!
//! Also rewrites inline consolidated metadata so consolidated readers see the same
//! unsharded arrays as readers of the individual `zarr.json` files.

pub mod dirs;

use std::borrow::Cow;
use std::ops::Range;

use serde_json::{Map, Value};

use crate::python_json;
use crate::views::shared::mapping::regions::GridBoxIter;
use crate::zarr::chunk_tree::{grid, ChunkTree};
pub use crate::zarr::chunk_tree::{Children, DirChild};
use crate::zarr::metadata::{parse_node, ArrayMetadata, NodeMetadata};
use crate::zarr::sharding::{shard_grid, ConfigProblem, NotUnpackable, ShardGrid, ShardLayout};

/// One sharded array seen as an unsharded array of its inner chunks.
#[derive(Debug, Clone, PartialEq)]
pub struct UnshardedArray {
    pub meta: ArrayMetadata,
    /// Where the shards lie and how each is laid out.
    pub sharding: ShardGrid,
    /// The chunk tree of the view: grid `ceil(shape / inner_chunk_shape)`.
    inner: ChunkTree,
    /// The chunk tree of the real store: the shard grid.
    shards: ChunkTree,
    /// The sharding codec's inner chain exactly as written, so the rewrite keeps
    /// string shorthands and any extra codec keys.
    inner_codecs_json: Value,
}

/// Where an inner chunk lives in the real store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InnerLocation {
    pub shard_coords: Vec<u64>,
    /// Key of the shard object, relative to the array directory.
    pub shard_key: String,
    /// C-order position of the inner chunk within its shard (= index entry).
    pub local_index: u64,
}

/// What a path inside the array directory is to the unsharded view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArrayEntry {
    /// `zarr.json`: the presented (unsharded) metadata.
    Metadata,
    /// An inner chunk of the grid, at these coordinates.
    Chunk(Vec<u64>),
    /// A directory of the inner chunk tree (it exists whether or not a chunk lies below it).
    ChunkDir,
    /// Another name of the chunk tree (a real shard or its directory, a key outside the grid):
    /// hidden, and not to be written.
    Hidden,
    /// Anything else: the same path of the store, passed through.
    Other,
}

/// How to list one virtual chunk directory from shard indexes alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirPlan {
    /// Leading inner-chunk coordinates fixed by the directory's path.
    pub fixed: Vec<u64>,
    /// A box of shard-grid coordinates (one range per dimension) holding every inner
    /// chunk that can appear under this directory: fetch only these indexes.
    pub shards: Vec<Range<u64>>,
    pub children: Children,
}

impl DirPlan {
    /// The shard coordinates to consult, in C order.
    pub fn shard_coords(&self) -> GridBoxIter {
        GridBoxIter::new(self.shards.clone())
    }
}

impl UnshardedArray {
    pub fn new(meta: ArrayMetadata) -> Result<Self, NotUnpackable> {
        let sharding = shard_grid(&meta)?;
        // shard_grid accepted it, so the sharding codec is the only codec.
        let inner_codecs_json = meta
            .json
            .get("codecs")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .and_then(|c| c.get("configuration"))
            .and_then(|c| c.get("codecs"))
            .cloned()
            .ok_or(NotUnpackable::BadConfig(ConfigProblem::InvalidCodecs))?;
        let inner_shape = &sharding.largest.inner_chunk_shape;
        let inner = ChunkTree::new(meta.key_encoding, grid(&meta.shape, inner_shape));
        let shards = ChunkTree::new(meta.key_encoding, sharding.bounds.counts());
        Ok(UnshardedArray { meta, sharding, inner, shards, inner_codecs_json })
    }

    /// The shape of every inner chunk.
    pub fn inner_chunk_shape(&self) -> &[u64] {
        &self.sharding.largest.inner_chunk_shape
    }

    /// The layout of the shard at `shard_coords` (shards of a rectilinear grid differ in
    /// shape); `None` outside the shard grid.
    pub fn layout_of(&self, shard_coords: &[u64]) -> Option<Cow<'_, ShardLayout>> {
        self.sharding.layout_of(shard_coords)
    }

    pub fn ndim(&self) -> usize {
        self.meta.shape.len()
    }

    pub fn inner_grid_shape(&self) -> &[u64] {
        self.inner.grid()
    }

    pub fn shard_grid_shape(&self) -> &[u64] {
        self.shards.grid()
    }

    /// zarr.json as presented in the mount: the chunk grid becomes the regular grid of
    /// inner chunks and the codecs the inner chain; every other key is unchanged and in
    /// its original place (replacing a value in a `preserve_order` map keeps it).
    pub fn rewritten_metadata(&self) -> Map<String, Value> {
        let mut json = self.meta.json.clone();
        let inner: Vec<Value> = self.inner_chunk_shape().iter().map(|&n| Value::from(n)).collect();
        let regular_shape = json
            .get_mut("chunk_grid")
            .filter(|g| g.get("name").and_then(Value::as_str) == Some("regular"))
            .and_then(|g| g.get_mut("configuration"))
            .and_then(|c| c.get_mut("chunk_shape"));
        match regular_shape {
            Some(cs) => *cs = Value::Array(inner),
            None => {
                let regular = serde_json::json!({"name": "regular",
                    "configuration": {"chunk_shape": inner}});
                json.insert("chunk_grid".to_string(), regular);
            }
        }
        json.insert("codecs".to_string(), self.inner_codecs_json.clone());
        json
    }

    /// [`rewritten_metadata`](Self::rewritten_metadata) serialized with a 2-space
    /// indent, as zarr-python writes it.
    pub fn rewritten_zarr_json(&self) -> Vec<u8> {
        python_json::to_vec_pretty(&Value::Object(self.rewritten_metadata()))
    }

    /// Parse a key relative to the array directory as an inner chunk of the view;
    /// `None` if it is not a chunk key or lies outside the inner grid.
    pub fn parse_inner_key(&self, rel_key: &str) -> Option<Vec<u64>> {
        self.inner.chunk(rel_key)
    }

    pub fn inner_key(&self, inner_coords: &[u64]) -> String {
        self.inner.key(inner_coords)
    }

    pub fn shard_key(&self, shard_coords: &[u64]) -> String {
        self.shards.key(shard_coords)
    }

    /// The shard holding inner chunk `c` along dimension `dim`, and the chunk's place in it.
    fn shard_along(&self, dim: usize, c: u64) -> Option<(u64, u64)> {
        let inner = self.inner_chunk_shape()[dim];
        let edges = self.sharding.bounds.dim(dim);
        let shard = edges.chunk_at(c.checked_mul(inner)?)?;
        Some((shard, c - edges.start(shard) / inner))
    }

    /// The shard and index entry holding an inner chunk; `None` if the
    /// coordinates are not in the inner grid.
    pub fn locate(&self, inner_coords: &[u64]) -> Option<InnerLocation> {
        if !self.inner.contains(inner_coords) {
            return None;
        }
        let along: Vec<(u64, u64)> = (0..self.ndim())
            .map(|d| self.shard_along(d, inner_coords[d]))
            .collect::<Option<_>>()?;
        let shard_coords: Vec<u64> = along.iter().map(|&(s, _)| s).collect();
        let layout = self.layout_of(&shard_coords)?;
        // Bounded by n_entries (capped), so this cannot overflow.
        let local_index = along
            .iter()
            .zip(&layout.chunks_per_shard)
            .fold(0u64, |acc, (&(_, local), &per)| acc * per + local);
        Some(InnerLocation { shard_key: self.shard_key(&shard_coords), shard_coords, local_index })
    }

    /// Inner chunk coordinates of entry `local_index` of a shard; `None` if that
    /// chunk lies past the array edge (writers may store it; the view hides it).
    pub fn inner_coords(&self, shard_coords: &[u64], local_index: u64) -> Option<Vec<u64>> {
        let layout = self.layout_of(shard_coords)?;
        if local_index >= layout.n_entries {
            return None;
        }
        let cps = &layout.chunks_per_shard;
        let mut coords = vec![0; cps.len()];
        let mut rest = local_index;
        for i in (0..cps.len()).rev() {
            let local = rest % cps[i];
            rest /= cps[i];
            let first =
                self.sharding.bounds.dim(i).start(shard_coords[i]) / self.inner_chunk_shape()[i];
            coords[i] = first.checked_add(local)?;
        }
        self.inner.contains(&coords).then_some(coords)
    }

    /// What the path `rel` (relative to the array directory, non-empty) is in the view.
    pub fn entry(&self, rel: &str) -> ArrayEntry {
        if rel == "zarr.json" {
            ArrayEntry::Metadata
        } else if let Some(coords) = self.parse_inner_key(rel) {
            ArrayEntry::Chunk(coords)
        } else if !rel.is_empty() && self.dir_plan(rel).is_some() {
            ArrayEntry::ChunkDir
        } else if self.owns(rel) {
            ArrayEntry::Hidden
        } else {
            ArrayEntry::Other
        }
    }

    /// True for a path of the array directory that belongs to the chunk tree (inner chunk
    /// keys, the real shards, their directories), which this view replaces.
    pub fn owns(&self, rel: &str) -> bool {
        // Shard keys are spelled like inner keys with smaller coordinates.
        self.inner.owns(rel)
    }

    /// Parse a real shard key (relative to the array directory); `None` if it is
    /// not one or lies outside the shard grid.
    pub fn shard_coords_of_key(&self, rel_key: &str) -> Option<Vec<u64>> {
        self.shards.chunk(rel_key)
    }

    /// The shard next to `shard_coords` in C order (the order a whole-array scan reads them):
    /// `step` +1 for the one after, -1 for the one before; `None` past either end of the grid.
    pub fn shard_beside(&self, shard_coords: &[u64], step: i8) -> Option<Vec<u64>> {
        if !self.shards.contains(shard_coords) {
            return None;
        }
        let grid = self.shards.grid();
        let mut c = shard_coords.to_vec();
        for d in (0..c.len()).rev() {
            if step > 0 && c[d] + 1 < grid[d] {
                c[d] += 1;
                return Some(c);
            }
            if step < 0 && c[d] > 0 {
                c[d] -= 1;
                return Some(c);
            }
            // carry into the dimension before: this one wraps to its other end
            c[d] = if step > 0 { 0 } else { grid[d] - 1 };
        }
        None
    }

    /// Every shard position of the grid, in C order (lazily: grids can be huge).
    pub fn all_shard_coords(&self) -> GridBoxIter {
        GridBoxIter::new(self.shards.grid().iter().map(|&n| 0..n).collect())
    }

    /// If `rel_dir` (relative to the array directory, `""` for the array directory
    /// itself, no leading or trailing `/`) is a directory of the view's chunk tree,
    /// how to list it. Whether it exists is up to the caller: it does iff some
    /// present inner chunk falls under it (see [`child_in_dir`](Self::child_in_dir)).
    /// The array directory always gets a plan, which lists only its chunk entries.
    pub fn dir_plan(&self, rel_dir: &str) -> Option<DirPlan> {
        let dir = self.inner.dir(rel_dir)?;
        let shards = (0..self.ndim())
            .map(|i| match dir.fixed.get(i) {
                Some(&c) => self.shard_along(i, c).map(|(s, _)| s..s + 1),
                None => Some(0..self.shards.grid()[i]),
            })
            .collect::<Option<_>>()?;
        Some(DirPlan { fixed: dir.fixed, shards, children: dir.children })
    }

    /// The entry of the directory planned by `plan` under which the inner chunk
    /// `inner_coords` appears; `None` if the chunk is not under that directory.
    pub fn child_in_dir(&self, plan: &DirPlan, inner_coords: &[u64]) -> Option<DirChild> {
        self.inner.child(&plan.fixed, plan.children, inner_coords)
    }
}

/// Rewrite a v3 group's inline `consolidated_metadata.metadata` (relative path ->
/// node document) so every unpackable sharded array appears in its unsharded
/// form, as its own `zarr.json` does in the mount. Nested groups' consolidated
/// metadata is rewritten too. Returns whether anything changed.
pub fn rewrite_consolidated_v3(group_json: &mut Map<String, Value>) -> bool {
    rewrite_consolidated_arrays(group_json, &unsharded_form)
}

fn unsharded_form(meta: ArrayMetadata) -> Option<Map<String, Value>> {
    UnshardedArray::new(meta).ok().map(|a| a.rewritten_metadata())
}

/// Replace every array document of a group's inline consolidated metadata (nested groups'
/// too) by `rewrite`'s form of it, where it has one. Returns whether anything changed.
pub fn rewrite_consolidated_arrays(
    group_json: &mut Map<String, Value>,
    rewrite: &dyn Fn(ArrayMetadata) -> Option<Map<String, Value>>,
) -> bool {
    let Some(entries) = group_json
        .get_mut("consolidated_metadata")
        .and_then(|c| c.get_mut("metadata"))
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    let mut changed = false;
    for node in entries.values_mut() {
        changed |= rewrite_node(node, rewrite);
    }
    changed
}

/// Rewrite one consolidated node document in place: an array `rewrite` has a form for, or
/// a group carrying consolidated metadata.
fn rewrite_node(
    node: &mut Value,
    rewrite: &dyn Fn(ArrayMetadata) -> Option<Map<String, Value>>,
) -> bool {
    match node.get("node_type").and_then(Value::as_str) {
        Some("array") => {
            let Ok(NodeMetadata::Array(meta)) = parse_node(node.clone()) else {
                return false;
            };
            match rewrite(meta) {
                Some(json) => {
                    *node = Value::Object(json);
                    true
                }
                None => false,
            }
        }
        Some("group") => {
            node.as_object_mut().is_some_and(|g| rewrite_consolidated_arrays(g, rewrite))
        }
        _ => false,
    }
}

/// Rewrite a v2 `.zmetadata` document. zarr-python 3 writes `.zmetadata` only for
/// v2 hierarchies, whose entries are `.zgroup`/`.zarray`/`.zattrs` documents of v2
/// nodes, and sharding does not exist in v2, so normally nothing changes. Should a
/// document nonetheless carry v3 `zarr.json` entries (no known writer does this),
/// those are rewritten like the inline v3 form so no consolidated reader can see
/// the sharded codecs. Returns whether anything changed.
pub fn rewrite_zmetadata_v2(doc: &mut Map<String, Value>) -> bool {
    let Some(entries) = doc.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = false;
    for (key, node) in entries.iter_mut() {
        if key == "zarr.json" || key.ends_with("/zarr.json") {
            changed |= rewrite_node(node, &unsharded_form);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::chunk_grid::tests::fixture_meta;
    use crate::zarr::metadata::parse_zarr_json;
    use crate::zarr::metadata::tests::{fixture, FIXTURE};
    use proptest::prelude::*;
    use serde_json::json;
    use std::collections::{BTreeMap, BTreeSet};

    fn fixture_array() -> UnshardedArray {
        UnshardedArray::new(fixture()).unwrap()
    }

    #[test]
    fn shards_beside_follow_c_order_across_rows() {
        // 3 x 2 shards (shape 30 x 20, shards 10 x 10).
        let a = array(&[30, 20], &[10, 10], &[5, 5], json!({"name": "default"}));
        let order: Vec<Vec<u64>> = a.all_shard_coords().collect();
        for (i, c) in order.iter().enumerate() {
            assert_eq!(a.shard_beside(c, 1).as_ref(), order.get(i + 1), "after {c:?}");
            assert_eq!(
                a.shard_beside(c, -1).as_ref(),
                i.checked_sub(1).and_then(|j| order.get(j)),
                "before {c:?}"
            );
        }
        assert_eq!(a.shard_beside(&[0, 1], 1), Some(vec![1, 0]));
        assert_eq!(a.shard_beside(&[3, 0], 1), None, "outside the grid");
        assert_eq!(a.shard_beside(&[0], 1), None, "wrong rank");
    }

    /// A sharded array with the given geometry and key encoding.
    fn array(shape: &[u64], shard: &[u64], inner: &[u64], cke: Value) -> UnshardedArray {
        let grid = json!({"name": "regular", "configuration": {"chunk_shape": shard}});
        array_with_grid(shape, grid, inner, cke)
    }

    /// A sharded array whose shards have these lengths per dimension.
    fn rect_array(shape: &[u64], shards: &[Vec<u64>], inner: &[u64], cke: Value) -> UnshardedArray {
        let grid = json!({"name": "rectilinear",
            "configuration": {"kind": "inline", "chunk_shapes": shards}});
        array_with_grid(shape, grid, inner, cke)
    }

    fn array_with_grid(shape: &[u64], grid: Value, inner: &[u64], cke: Value) -> UnshardedArray {
        let doc = json!({
            "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
            "chunk_grid": grid, "chunk_key_encoding": cke, "fill_value": 0,
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": inner, "codecs": ["bytes"], "index_codecs": ["bytes", "crc32c"]}}],
        });
        match parse_node(doc).unwrap() {
            NodeMetadata::Array(m) => UnshardedArray::new(m).unwrap(),
            NodeMetadata::Group(_) => panic!(),
        }
    }

    /// zarr-python 3.4's rectilinear shards (tests/fixtures/rectilinear/store/shards2d): 95 x 70,
    /// inner chunks 10 x 10 in shards of [40, 60] x [30, 40] rows and columns.
    #[test]
    fn rectilinear_shards_unpack_to_a_regular_inner_grid() {
        let a = UnshardedArray::new(fixture_meta("shards2d")).unwrap();
        assert_eq!(a.inner_grid_shape(), [10, 7]);
        assert_eq!(a.shard_grid_shape(), [2, 2]);
        // Inner chunk (5, 3) = rows 50..60, columns 30..40: shard (1, 1) starts at (40, 30),
        // 6 x 4 inner chunks; local (1, 0) is entry 4.
        let loc = a.locate(&[5, 3]).unwrap();
        assert_eq!((loc.shard_key.as_str(), loc.local_index), ("c/1/1", 4));
        assert_eq!(a.inner_coords(&[1, 1], 4), Some(vec![5, 3]));
        // Shard (0, 0) is 4 x 3 inner chunks: entry 11 is inner chunk (3, 2).
        assert_eq!(a.locate(&[3, 2]).unwrap().local_index, 11);
        assert_eq!(a.layout_of(&[0, 0]).unwrap().n_entries, 12);
        // The last shard row holds rows 40..100 of a 95-row array: its last inner row (90..100)
        // overhangs the edge as the last inner row of the array.
        assert_eq!(a.inner_coords(&[1, 0], 5 * 3), Some(vec![9, 0]));
        assert_eq!(a.inner_coords(&[1, 0], 6 * 3), None);
        assert_eq!(a.dir_plan("c/6").unwrap().shards, vec![1..2, 0..2]);
        // The presented document is an ordinary unsharded array on a regular grid.
        let doc = a.rewritten_metadata();
        assert_eq!(
            doc["chunk_grid"],
            json!({"name": "regular", "configuration": {"chunk_shape": [10, 10]}})
        );
        assert_eq!(doc["codecs"][0]["name"], "bytes");
        let keys: Vec<&String> = doc.keys().collect();
        assert_eq!(keys[2], "chunk_grid", "in its place");
        let again = parse_node(Value::Object(doc)).unwrap();
        let NodeMetadata::Array(again) = again else { panic!() };
        assert_eq!(again.chunk_shape(), Some(vec![10, 10]));
    }

    /// An inner chunk that does not divide a shard's length: not unpacked.
    #[test]
    fn rectilinear_shards_not_divided_pass_through() {
        assert_eq!(
            UnshardedArray::new(fixture_meta("shards_nodivide")).unwrap_err().to_string(),
            "bad sharding configuration: inner chunk size 20 does not divide shard size 30 in dimension 1"
        );
    }

    #[test]
    fn fixture_rewrite_exact() {
        let a = fixture_array();
        let want = r#"{"shape":[100,100],"data_type":"int32","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[10,10]}},"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0,"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":0,"checksum":false}}],"attributes":{"a":1},"zarr_format":3,"node_type":"array","storage_transformers":[],"dimension_names":["y","x"]}"#;
        assert_eq!(serde_json::to_string(&a.rewritten_metadata()).unwrap(), want);
        let pretty = String::from_utf8(a.rewritten_zarr_json()).unwrap();
        assert!(
            pretty.starts_with(
                "{\n  \"shape\": [\n    100,\n    100\n  ],\n  \"data_type\": \"int32\","
            ),
            "{pretty}"
        );
        assert!(!pretty.ends_with('\n'));
        // The presented document is itself an unsharded array with the inner geometry.
        let NodeMetadata::Array(m) = parse_zarr_json(pretty.as_bytes()).unwrap() else { panic!() };
        assert_eq!(m.chunk_shape(), Some(vec![10, 10]));
        assert_eq!(shard_grid(&m), Err(NotUnpackable::NotSharded));
    }

    /// Attributes with Python's bare NaN and Infinity are written back with the same tokens.
    #[test]
    fn python_nan_tokens_written_back() {
        let doc = FIXTURE.replace(
            r#""attributes":{"a":1}"#,
            r#""attributes":{"a":NaN,"r":[Infinity,-Infinity]}"#,
        );
        let NodeMetadata::Array(m) = parse_zarr_json(doc.as_bytes()).unwrap() else { panic!() };
        let pretty =
            String::from_utf8(UnshardedArray::new(m).unwrap().rewritten_zarr_json()).unwrap();
        let attributes = "\"attributes\": {\n    \"a\": NaN,\n    \"r\": [\n      Infinity,\n      -Infinity\n    ]\n  }";
        assert!(pretty.contains(attributes), "{pretty}");
    }

    #[test]
    fn rewrite_keeps_unknown_keys_and_shorthands() {
        let mut v: Value = serde_json::from_str(FIXTURE).unwrap();
        let obj = v.as_object_mut().unwrap();
        obj.insert("extra_thing".into(), json!({"must_understand": false, "x": [1]}));
        obj["codecs"][0]["configuration"]["codecs"] = json!(["bytes", {"name": "gzip", "configuration": {"level": 1}, "must_understand": false}]);
        let NodeMetadata::Array(m) = parse_node(v.clone()).unwrap() else { panic!() };
        let out = UnshardedArray::new(m).unwrap().rewritten_metadata();
        let in_keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        let out_keys: Vec<_> = out.keys().cloned().collect();
        assert_eq!(in_keys, out_keys);
        assert_eq!(out["codecs"], v["codecs"][0]["configuration"]["codecs"]);
        assert_eq!(out["extra_thing"], v["extra_thing"]);
    }

    #[test]
    fn fixture_keys_and_locate() {
        let a = fixture_array();
        assert_eq!(a.inner_grid_shape(), &[10, 10]);
        assert_eq!(a.shard_grid_shape(), &[2, 2]);
        assert_eq!(a.parse_inner_key("c/9/9"), Some(vec![9, 9]));
        for bad in ["c/10/0", "c/0", "c/0/0/0", "zarr.json", "c/01/0", "0/0", "c.0.0", ""] {
            assert_eq!(a.parse_inner_key(bad), None, "{bad}");
        }
        assert_eq!(a.inner_key(&[7, 3]), "c/7/3");
        let loc = a.locate(&[7, 3]).unwrap();
        assert_eq!(loc.shard_coords, vec![1, 0]);
        assert_eq!(loc.shard_key, "c/1/0");
        assert_eq!(loc.local_index, 2 * 5 + 3);
        assert_eq!(a.inner_coords(&[1, 0], 13), Some(vec![7, 3]));
        assert_eq!(a.locate(&[10, 0]), None);
        assert_eq!(a.locate(&[1]), None);
        assert_eq!(a.inner_coords(&[1, 0], 25), None);
        assert_eq!(a.inner_coords(&[2, 0], 0), None);
        assert_eq!(a.inner_coords(&[1], 0), None);
        assert_eq!(a.shard_coords_of_key("c/1/1"), Some(vec![1, 1]));
        assert_eq!(a.shard_coords_of_key("c/2/1"), None);
        let all: Vec<_> = a.all_shard_coords().collect();
        assert_eq!(all, vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]);
    }

    #[test]
    fn entries_of_the_array_directory() {
        let a = fixture_array(); // inner grid 10 x 10, `default` keys with `/`
        assert_eq!(a.entry("zarr.json"), ArrayEntry::Metadata);
        assert_eq!(a.entry("c/9/3"), ArrayEntry::Chunk(vec![9, 3]));
        for dir in ["c", "c/9"] {
            assert_eq!(a.entry(dir), ArrayEntry::ChunkDir, "{dir}");
        }
        for hidden in ["c/10", "c/10/0", "c/1/2/3", "c/x", "c/01"] {
            assert_eq!(a.entry(hidden), ArrayEntry::Hidden, "{hidden}");
        }
        for other in [".zattrs", "notes.txt", "sub/c/1/1", "cc"] {
            assert_eq!(a.entry(other), ArrayEntry::Other, "{other}");
        }
        // Keys that are single names: a shard key is a key of the view's grid too; keys
        // outside the grid are hidden; there are no chunk directories.
        let dot = array(&[10, 10], &[4, 4], &[2, 2], json!({"name": "v2"}));
        assert_eq!(dot.entry("4.4"), ArrayEntry::Chunk(vec![4, 4]));
        assert_eq!(dot.entry("5.0"), ArrayEntry::Hidden);
        assert_eq!(dot.entry("4"), ArrayEntry::Other);
        assert_eq!(dot.entry("c"), ArrayEntry::Other);
    }

    #[test]
    fn ragged_edge_hides_overhang() {
        // 25 wide, shards of 20 with inner 5: second shard holds inner chunks 4..8,
        // only 4 (covering 20..25) exists.
        let a = array(&[25], &[20], &[5], json!({"name": "default"}));
        assert_eq!(a.inner_grid_shape(), &[5]);
        assert_eq!(a.inner_coords(&[1], 0), Some(vec![4]));
        assert_eq!(a.inner_coords(&[1], 1), None);
        assert_eq!(a.inner_coords(&[1], 3), None);
        assert_eq!(a.parse_inner_key("c/5"), None);
    }

    #[test]
    fn zero_d() {
        let a = array(&[], &[], &[], json!({"name": "default"}));
        assert_eq!(a.parse_inner_key("c"), Some(vec![]));
        assert_eq!(
            a.locate(&[]).unwrap(),
            InnerLocation { shard_coords: vec![], shard_key: "c".into(), local_index: 0 }
        );
        assert_eq!(a.inner_coords(&[], 0), Some(vec![]));
        assert_eq!(a.all_shard_coords().collect::<Vec<_>>(), vec![Vec::<u64>::new()]);
        let plan = a.dir_plan("").unwrap();
        assert_eq!(plan.children, Children::KeyFiles);
        assert_eq!(a.child_in_dir(&plan, &[]), Some(DirChild { name: "c".into(), is_dir: false }));
        assert_eq!(a.dir_plan("c"), None);
        let v2 = array(&[], &[], &[], json!({"name": "v2"}));
        let plan = v2.dir_plan("").unwrap();
        assert_eq!(v2.child_in_dir(&plan, &[]).unwrap().name, "0");
        assert_eq!(v2.parse_inner_key("0"), Some(vec![]));
    }

    #[test]
    fn empty_array_has_no_shards() {
        let a = array(&[0, 10], &[4, 4], &[2, 2], json!("default"));
        assert_eq!(a.all_shard_coords().count(), 0);
        assert_eq!(a.parse_inner_key("c/0/0"), None);
        assert_eq!(a.dir_plan("").unwrap().shard_coords().count(), 0);
    }

    #[test]
    fn dir_plans_default_slash() {
        let a = fixture_array(); // inner grid 10x10, 5 inner chunks per shard side
        let root = a.dir_plan("").unwrap();
        assert_eq!(root.children, Children::Literal("c"));
        assert_eq!(root.shards, vec![0..2, 0..2]);
        let c = a.dir_plan("c").unwrap();
        assert_eq!((c.fixed.clone(), c.children), (vec![], Children::CoordDirs));
        assert_eq!(a.child_in_dir(&c, &[7, 3]), Some(DirChild { name: "7".into(), is_dir: true }));
        let c7 = a.dir_plan("c/7").unwrap();
        assert_eq!(c7.fixed, vec![7]);
        assert_eq!(c7.children, Children::CoordFiles);
        assert_eq!(c7.shards, vec![1..2, 0..2]);
        assert_eq!(c7.shard_coords().collect::<Vec<_>>(), vec![vec![1, 0], vec![1, 1]]);
        assert_eq!(
            a.child_in_dir(&c7, &[7, 3]),
            Some(DirChild { name: "3".into(), is_dir: false })
        );
        assert_eq!(a.child_in_dir(&c7, &[6, 3]), None);
        for bad in ["c/7/3", "c/10", "c/07", "x", "c/", "/c", "c//7", "zarr.json", "c/-1"] {
            assert_eq!(a.dir_plan(bad), None, "{bad}");
        }
    }

    #[test]
    fn dir_plans_other_encodings() {
        let v2s = array(
            &[10, 10, 10],
            &[4, 4, 4],
            &[2, 2, 2],
            json!({"name": "v2", "configuration": {"separator": "/"}}),
        );
        let root = v2s.dir_plan("").unwrap();
        assert_eq!(root.children, Children::CoordDirs);
        assert_eq!(v2s.dir_plan("4").unwrap().children, Children::CoordDirs);
        let p = v2s.dir_plan("4/1").unwrap();
        assert_eq!(p.children, Children::CoordFiles);
        assert_eq!(p.shards, vec![2..3, 0..1, 0..3]);
        assert_eq!(v2s.dir_plan("c"), None);
        assert_eq!(v2s.dir_plan("4/1/0"), None);
        assert_eq!(v2s.parse_inner_key("4/1/0"), Some(vec![4, 1, 0]));

        let dot = array(
            &[10, 10],
            &[4, 4],
            &[2, 2],
            json!({"name": "default", "configuration": {"separator": "."}}),
        );
        let root = dot.dir_plan("").unwrap();
        assert_eq!(root.children, Children::KeyFiles);
        assert_eq!(
            dot.child_in_dir(&root, &[3, 4]),
            Some(DirChild { name: "c.3.4".into(), is_dir: false })
        );
        assert_eq!(dot.dir_plan("c"), None);
        let v2 = array(&[10, 10], &[4, 4], &[2, 2], json!("v2"));
        let root = v2.dir_plan("").unwrap();
        assert_eq!(v2.child_in_dir(&root, &[3, 4]).unwrap().name, "3.4");
        assert_eq!(v2.locate(&[3, 4]).unwrap().shard_key, "1.2");

        // 1-d with '/': files directly under `c` (default) or the root (v2).
        let one = array(&[10], &[4], &[2], json!("default"));
        assert_eq!(one.dir_plan("c").unwrap().children, Children::CoordFiles);
        let one_v2 =
            array(&[10], &[4], &[2], json!({"name": "v2", "configuration": {"separator": "/"}}));
        assert_eq!(one_v2.dir_plan("").unwrap().children, Children::CoordFiles);
    }

    #[test]
    fn consolidated_v3() {
        let sharded: Value = serde_json::from_str(FIXTURE).unwrap();
        let plain = json!({"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": ["bytes"]});
        let mut group = json!({"zarr_format": 3, "node_type": "group", "attributes": {},
            "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {
                "arr": sharded, "plain": plain.clone(),
                "sub": {"zarr_format": 3, "node_type": "group", "attributes": {}, "consolidated_metadata": null},
                "sub/arr": sharded, "broken": {"node_type": "array"}}}});
        let g = group.as_object_mut().unwrap();
        let before = g.clone();
        assert!(rewrite_consolidated_v3(g));
        let md = &g["consolidated_metadata"]["metadata"];
        let want = Value::Object(fixture_array().rewritten_metadata());
        assert_eq!(md["arr"], want);
        assert_eq!(md["sub/arr"], want);
        assert_eq!(md["plain"], plain);
        assert_eq!(md["sub"], before["consolidated_metadata"]["metadata"]["sub"]);
        assert_eq!(md["broken"], json!({"node_type": "array"}));
        let keys: Vec<_> = md.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["arr", "plain", "sub", "sub/arr", "broken"]);
        // Idempotent: the rewritten arrays are no longer sharded.
        assert!(!rewrite_consolidated_v3(g));
        // Groups without consolidated metadata are untouched.
        let mut bare = json!({"zarr_format": 3, "node_type": "group"});
        assert!(!rewrite_consolidated_v3(bare.as_object_mut().unwrap()));
    }

    #[test]
    fn consolidated_nested_group() {
        let sharded: Value = serde_json::from_str(FIXTURE).unwrap();
        let mut group = json!({"consolidated_metadata": {"metadata": {
            "sub": {"zarr_format": 3, "node_type": "group",
                    "consolidated_metadata": {"metadata": {"arr": sharded}}}}}});
        assert!(rewrite_consolidated_v3(group.as_object_mut().unwrap()));
        let inner = &group["consolidated_metadata"]["metadata"]["sub"]["consolidated_metadata"]
            ["metadata"]["arr"];
        assert_eq!(inner["chunk_grid"]["configuration"]["chunk_shape"], json!([10, 10]));
    }

    #[test]
    fn zmetadata_v2() {
        let mut doc = json!({"metadata": {".zgroup": {"zarr_format": 2},
            "a/.zarray": {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i4",
                          "compressor": null, "fill_value": 0, "order": "C", "filters": null},
            "a/.zattrs": {}}, "zarr_consolidated_format": 1});
        let before = doc.clone();
        assert!(!rewrite_zmetadata_v2(doc.as_object_mut().unwrap()));
        assert_eq!(doc, before);
        let sharded: Value = serde_json::from_str(FIXTURE).unwrap();
        doc["metadata"]["b/zarr.json"] = sharded;
        assert!(rewrite_zmetadata_v2(doc.as_object_mut().unwrap()));
        assert_eq!(
            doc["metadata"]["b/zarr.json"]["chunk_grid"]["configuration"]["chunk_shape"],
            json!([10, 10])
        );
    }

    /// Random geometry: shape, inner chunk shape and chunks per shard per dimension.
    /// Random geometry: per dimension the shape, the inner chunk length and the shard lengths
    /// in inner chunks (repeated to cover the shape; several lengths make a rectilinear grid).
    fn geometry() -> impl Strategy<Value = Vec<(u64, u64, Vec<u64>)>> {
        let shards = proptest::collection::vec(1u64..4, 1..4);
        proptest::collection::vec((0u64..13, 1u64..5, shards), 0..4)
    }

    fn encodings() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!({"name": "default"})),
            Just(json!({"name": "default", "configuration": {"separator": "."}})),
            Just(json!({"name": "v2"})),
            Just(json!({"name": "v2", "configuration": {"separator": "/"}})),
        ]
    }

    fn build(geom: &[(u64, u64, Vec<u64>)], cke: Value) -> UnshardedArray {
        let shape: Vec<u64> = geom.iter().map(|g| g.0).collect();
        let inner: Vec<u64> = geom.iter().map(|g| g.1).collect();
        let lengths: Vec<Vec<u64>> = geom
            .iter()
            .map(|(extent, inner, per)| {
                let mut lens: Vec<u64> = per.iter().map(|p| p * inner).collect();
                while lens.iter().sum::<u64>() < *extent {
                    lens.push(*lens.last().unwrap());
                }
                lens
            })
            .collect();
        if lengths.iter().all(|l| l.iter().all(|&x| x == l[0])) {
            let shard: Vec<u64> = lengths.iter().map(|l| l[0]).collect();
            return array(&shape, &shard, &inner, cke);
        }
        rect_array(&shape, &lengths, &inner, cke)
    }

    /// The number of index entries of a shard.
    fn entries_of(a: &UnshardedArray, shard: &[u64]) -> u64 {
        a.layout_of(shard).unwrap().n_entries
    }

    fn inner_grid_coords(a: &UnshardedArray) -> GridBoxIter {
        GridBoxIter::new(a.inner_grid_shape().iter().map(|&n| 0..n).collect())
    }

    proptest! {
        #[test]
        fn locate_inverse(geom in geometry(), cke in encodings()) {
            let a = build(&geom, cke);
            let mut seen = BTreeSet::new();
            for c in inner_grid_coords(&a) {
                let loc = a.locate(&c).unwrap();
                prop_assert!(loc.local_index < entries_of(&a, &loc.shard_coords));
                prop_assert_eq!(a.inner_coords(&loc.shard_coords, loc.local_index), Some(c.clone()));
                prop_assert_eq!(a.shard_coords_of_key(&loc.shard_key), Some(loc.shard_coords.clone()));
                prop_assert_eq!(a.parse_inner_key(&a.inner_key(&c)), Some(c.clone()));
                prop_assert!(seen.insert((loc.shard_coords, loc.local_index)));
            }
            // Every (shard, entry) maps into the grid and back, or is past the edge.
            let mut mapped = 0usize;
            for s in a.all_shard_coords() {
                for local in 0..entries_of(&a, &s) {
                    if let Some(c) = a.inner_coords(&s, local) {
                        mapped += 1;
                        let loc = a.locate(&c).unwrap();
                        prop_assert_eq!((loc.shard_coords, loc.local_index), (s.clone(), local));
                    } else {
                        prop_assert!(!seen.contains(&(s.clone(), local)));
                    }
                }
            }
            prop_assert_eq!(mapped, seen.len());
        }

        /// Listing every directory through its plan (shard indexes only) gives
        /// exactly the tree formed by the keys of the present inner chunks.
        #[test]
        fn dir_listing_matches_key_tree(geom in geometry(), cke in encodings(), seed in any::<u64>()) {
            let a = build(&geom, cke);
            // Pseudo-random presence, also on overhanging entries (which must stay hidden).
            let present = |s: &[u64], local: u64| {
                let h = s.iter().fold(seed ^ local.wrapping_mul(0x9E37_79B9_7F4A_7C15), |h, &c| {
                    (h ^ c).wrapping_mul(0x100_0000_01B3)
                });
                h % 3 != 0
            };
            // Expected tree from keys.
            let mut tree: BTreeMap<String, BTreeSet<DirChild>> = BTreeMap::new();
            tree.insert(String::new(), BTreeSet::new());
            for c in inner_grid_coords(&a) {
                let loc = a.locate(&c).unwrap();
                if !present(&loc.shard_coords, loc.local_index) {
                    continue;
                }
                let key = a.inner_key(&c);
                let parts: Vec<&str> = key.split('/').collect();
                for i in 0..parts.len() {
                    let dir = parts[..i].join("/");
                    let child = DirChild { name: parts[i].to_string(), is_dir: i + 1 < parts.len() };
                    tree.entry(dir).or_default().insert(child);
                }
            }
            for (dir, want) in &tree {
                let plan = a.dir_plan(dir).unwrap();
                let mut got = BTreeSet::new();
                for s in plan.shard_coords() {
                    for local in 0..entries_of(&a, &s) {
                        if !present(&s, local) {
                            continue;
                        }
                        if let Some(c) = a.inner_coords(&s, local) {
                            if let Some(child) = a.child_in_dir(&plan, &c) {
                                got.insert(child);
                            }
                        }
                    }
                }
                prop_assert_eq!(&got, want, "dir {:?}", dir);
                for child in want {
                    let path = if dir.is_empty() { child.name.clone() } else { format!("{dir}/{}", child.name) };
                    prop_assert_eq!(a.dir_plan(&path).is_some(), child.is_dir, "{}", path);
                    prop_assert_eq!(a.parse_inner_key(&path).is_some(), !child.is_dir, "{}", path);
                }
            }
        }
    }
}
