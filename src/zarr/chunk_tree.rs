//! The chunk tree of one array: given the chunk grid and the chunk key encoding, which paths
//! inside the array directory are chunk files, which are directories of the tree, and which
//! names the tree owns (so that a view replacing the tree hides them). Every view uses this
//! one model: `views::unsharded::mapping` for its inner chunks (and the shards behind them),
//! `views::presented::mapping` for the keys it shows and the keys of the view below. How one
//! key is spelled is `chunk_key`; this module adds the grid and the directory rules.

use serde_json::Value;

use crate::zarr::chunk_key::{parse_coord, ChunkKeyEncoding};
use crate::zarr::data_type::DataType;
use crate::zarr::json::u64_list;
use crate::zarr::metadata::{parse_zarr_json, parse_zarray, NodeMetadata};

/// The chunk grid of an array: chunks per dimension, `ceil(shape / chunk_shape)` (a chunk
/// length of 0, which metadata parsing refuses, counts as 1 rather than dividing by zero).
pub fn grid(shape: &[u64], chunk_shape: &[u64]) -> Vec<u64> {
    shape.iter().zip(chunk_shape).map(|(&s, &c)| s.div_ceil(c.max(1))).collect()
}

/// The chunk keys of one grid under one encoding, seen as a tree of paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkTree {
    encoding: ChunkKeyEncoding,
    /// Chunks per dimension: `ceil(shape / chunk_shape)`.
    grid: Vec<u64>,
}

/// What the entries of a directory of the chunk tree are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Children {
    /// A single subdirectory of this name (`c` at the array root for `default`
    /// keys with `/`), present iff any chunk is.
    Literal(&'static str),
    /// Subdirectories named by chunk coordinate number `fixed.len()`.
    CoordDirs,
    /// Chunk files named by the last chunk coordinate.
    CoordFiles,
    /// Chunk files named by the whole key (separator `.`, or a 0-d array), all
    /// directly in the array directory.
    KeyFiles,
}

/// A directory of the chunk tree: the leading coordinates its path fixes, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeDir {
    pub fixed: Vec<u64>,
    pub children: Children,
}

/// One entry of a directory of the chunk tree.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirChild {
    pub name: String,
    pub is_dir: bool,
}

impl ChunkTree {
    pub fn new(encoding: ChunkKeyEncoding, grid: Vec<u64>) -> Self {
        ChunkTree { encoding, grid }
    }

    /// The chunk tree of the array whose metadata document `name` (`zarr.json` or
    /// `.zarray`) holds `bytes`; `None` for a group, an unknown chunk grid, or a
    /// document that does not parse. Only the grid and the key encoding are read, so a v2
    /// array whose dtype the views cannot decode still has its tree.
    pub fn from_metadata(name: &str, bytes: &[u8]) -> Option<ChunkTree> {
        match name {
            "zarr.json" => match parse_zarr_json(bytes).ok()? {
                NodeMetadata::Array(a) => Some(ChunkTree::new(a.key_encoding, a.chunk_counts()?)),
                NodeMetadata::Group(_) => None,
            },
            ".zarray" => {
                let json = parse_zarray(bytes).ok()?;
                let shape = u64_list(json.get("shape")?, "shape").ok()?;
                let chunks = u64_list(json.get("chunks")?, "chunks").ok()?;
                if chunks.len() != shape.len() || chunks.contains(&0) {
                    return None;
                }
                let separator = match json.get("dimension_separator") {
                    None | Some(Value::Null) => '.',
                    Some(Value::String(s)) if s == "." || s == "/" => s.chars().next()?,
                    Some(_) => return None,
                };
                Some(ChunkTree::new(ChunkKeyEncoding::V2 { separator }, grid(&shape, &chunks)))
            }
            _ => None,
        }
    }

    pub fn encoding(&self) -> ChunkKeyEncoding {
        self.encoding
    }

    pub fn grid(&self) -> &[u64] {
        &self.grid
    }

    pub fn ndim(&self) -> usize {
        self.grid.len()
    }

    /// True if `coords` has the grid's rank and lies inside it.
    pub fn contains(&self, coords: &[u64]) -> bool {
        coords.len() == self.grid.len() && coords.iter().zip(&self.grid).all(|(&c, &n)| c < n)
    }

    /// The key (relative to the array directory) of the chunk at `coords`.
    pub fn key(&self, coords: &[u64]) -> String {
        self.encoding.encode(coords)
    }

    /// The coordinates a path spells as a chunk key of this rank, inside the grid or not.
    pub fn key_coords(&self, rel: &str) -> Option<Vec<u64>> {
        self.encoding.decode(rel, self.ndim())
    }

    /// How many chunks the grid has (`None` if that overflows).
    pub fn chunk_count(&self) -> Option<u64> {
        self.grid.iter().try_fold(1u64, |n, &g| n.checked_mul(g))
    }

    /// Every chunk's coordinates, in C order (the last coordinate fastest).
    pub fn all_chunks(&self) -> impl Iterator<Item = Vec<u64>> + '_ {
        let count = if self.grid.contains(&0) { 0 } else { self.chunk_count().unwrap_or(0) };
        (0..count).map(move |mut i| {
            let mut coords = vec![0; self.grid.len()];
            for (c, &g) in coords.iter_mut().zip(&self.grid).rev() {
                *c = i % g;
                i /= g;
            }
            coords
        })
    }

    /// The chunk a path names: a chunk key inside the grid.
    pub fn chunk(&self, rel: &str) -> Option<Vec<u64>> {
        self.key_coords(rel).filter(|c| self.contains(c))
    }

    /// Whether keys are paths of several components (separator `/`, rank above 0).
    pub fn is_nested(&self) -> bool {
        self.encoding.separator() == '/' && self.ndim() > 0
    }

    /// The one directory at the top of a nested `default` tree (`c`), if the tree has one.
    pub fn root_dir(&self) -> Option<&'static str> {
        (self.is_nested() && matches!(self.encoding, ChunkKeyEncoding::Default { .. }))
            .then_some("c")
    }

    /// If `rel` (relative to the array directory, `""` for the array directory itself, no
    /// leading or trailing `/`) is a directory of the tree, what it fixes and holds. The
    /// array directory always is one (holding the tree's top level). A directory's path
    /// is a proper prefix of a chunk key inside the grid; whether a chunk lies below it is
    /// not known here.
    pub fn dir(&self, rel: &str) -> Option<TreeDir> {
        let comps: Vec<&str> = if rel.is_empty() { Vec::new() } else { rel.split('/').collect() };
        if !self.is_nested() {
            // All keys are single path components in the array directory.
            return comps
                .is_empty()
                .then(|| TreeDir { fixed: Vec::new(), children: Children::KeyFiles });
        }
        let coord_comps = match self.encoding {
            ChunkKeyEncoding::Default { .. } => match comps.split_first() {
                None => {
                    return Some(TreeDir { fixed: Vec::new(), children: Children::Literal("c") })
                }
                Some((&"c", rest)) => rest,
                Some(_) => return None,
            },
            ChunkKeyEncoding::V2 { .. } => &comps[..],
        };
        if coord_comps.len() >= self.ndim() {
            return None;
        }
        let fixed = coord_comps.iter().map(|s| parse_coord(s)).collect::<Option<Vec<u64>>>()?;
        if !fixed.iter().zip(&self.grid).all(|(&c, &n)| c < n) {
            return None;
        }
        let children =
            if fixed.len() + 1 == self.ndim() { Children::CoordFiles } else { Children::CoordDirs };
        Some(TreeDir { fixed, children })
    }

    /// A directory of the tree below the array directory (`rel` non-empty): its fixed
    /// coordinates.
    pub fn sub_dir(&self, rel: &str) -> Option<Vec<u64>> {
        if rel.is_empty() {
            return None;
        }
        self.dir(rel).map(|d| d.fixed)
    }

    /// The path of the directory that fixes these leading coordinates (the inverse of
    /// [`sub_dir`](Self::sub_dir)).
    pub fn dir_path(&self, fixed: &[u64]) -> String {
        let mut parts: Vec<String> = fixed.iter().map(u64::to_string).collect();
        if let ChunkKeyEncoding::Default { .. } = self.encoding {
            parts.insert(0, "c".into());
        }
        parts.join("/")
    }

    /// The entry of the directory that fixes `fixed` and holds `children` under which the
    /// chunk at `coords` appears; `None` if the chunk is not under that directory.
    pub fn child(&self, fixed: &[u64], children: Children, coords: &[u64]) -> Option<DirChild> {
        let k = fixed.len();
        if coords.len() != self.ndim() || coords.get(..k)? != fixed {
            return None;
        }
        let (name, is_dir) = match children {
            Children::Literal(name) => (name.to_string(), true),
            Children::CoordDirs => (coords.get(k)?.to_string(), true),
            Children::CoordFiles => (coords.get(k)?.to_string(), false),
            Children::KeyFiles => (self.key(coords), false),
        };
        Some(DirChild { name, is_dir })
    }

    /// True for a path the tree owns: anything under its top-level names (`c/...` for nested
    /// `default` keys, `<number>/...` for nested `v2` keys) or, when keys are single names,
    /// anything spelled as a key of this rank. Chunks outside the grid count: a view that
    /// replaces the tree hides them rather than showing stray keys as plain files.
    pub fn owns(&self, rel: &str) -> bool {
        if !self.is_nested() {
            return self.key_coords(rel).is_some();
        }
        let first = rel.split('/').next().unwrap_or(rel);
        match self.encoding {
            ChunkKeyEncoding::Default { .. } => first == "c",
            ChunkKeyEncoding::V2 { .. } => parse_coord(first).is_some(),
        }
    }
}

/// An upper estimate of the bytes one stored chunk (one shard, when sharded; the largest, on a
/// rectilinear grid) of the array whose metadata document `name` holds `bytes` takes: its
/// elements at their item size, plus a shard index, plus slack for a compressor's worst case
/// (blosc, zstd and gzip add well under 1/64 to incompressible data). `None` when the document
/// says too little to tell (a variable-size or unknown data type, an unknown grid). A guess for deciding how to
/// fetch, never a limit on what is read.
pub fn stored_chunk_bound(name: &str, bytes: &[u8]) -> Option<u64> {
    let (chunk_shape, itemsize, inner_chunks) = match name {
        "zarr.json" => match parse_zarr_json(bytes).ok()? {
            NodeMetadata::Array(a) => {
                let chunk_shape = a.chunk_grid.boundaries(&a.shape)?.largest_chunk();
                let itemsize = DataType::from_json(&a.data_type).ok()?.itemsize as u64;
                let inner = match a.codecs.iter().find(|c| c.name == "sharding_indexed") {
                    Some(c) => {
                        let inner =
                            u64_list(c.configuration.get("chunk_shape")?, "chunk_shape").ok()?;
                        if inner.len() != chunk_shape.len() || inner.contains(&0) {
                            return None;
                        }
                        chunk_shape
                            .iter()
                            .zip(&inner)
                            .try_fold(1u64, |n, (&s, &i)| n.checked_mul(s.div_ceil(i)))?
                    }
                    None => 0,
                };
                (chunk_shape, itemsize, inner)
            }
            NodeMetadata::Group(_) => return None,
        },
        ".zarray" => {
            let json = parse_zarray(bytes).ok()?;
            let chunks = u64_list(json.get("chunks")?, "chunks").ok()?;
            (chunks, v2_itemsize(json.get("dtype")?.as_str()?)?, 0)
        }
        _ => return None,
    };
    let elements = chunk_shape.iter().try_fold(1u64, |n, &c| n.checked_mul(c))?;
    let raw = elements.checked_mul(itemsize)?;
    // 16 bytes per inner chunk and a crc32c, when sharded.
    let index = inner_chunks.checked_mul(16)?.checked_add(if inner_chunks > 0 { 4 } else { 0 })?;
    raw.checked_add(raw / 64)?.checked_add(index)?.checked_add(4096)
}

/// Bytes per element of a simple numpy type string (`<f4`, `|u1`, `<U8`); `None` for
/// structured, object and other types whose size the string does not give this way.
fn v2_itemsize(dtype: &str) -> Option<u64> {
    let mut chars = dtype.chars();
    if !matches!(chars.next()?, '<' | '>' | '|') {
        return None;
    }
    let kind = chars.next()?;
    let n: u64 = chars.as_str().parse().ok()?;
    match kind {
        'b' | 'i' | 'u' | 'f' | 'c' | 'S' | 'V' | 'm' | 'M' => Some(n),
        'U' => n.checked_mul(4),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::chunk_key::tests::{D_DOT, D_SLASH, V2_DOT, V2_SLASH};

    fn dir(fixed: &[u64], children: Children) -> Option<TreeDir> {
        Some(TreeDir { fixed: fixed.to_vec(), children })
    }

    #[test]
    fn all_chunks_in_c_order() {
        let t = ChunkTree::new(D_SLASH, vec![2, 3]);
        let all: Vec<Vec<u64>> = t.all_chunks().collect();
        assert_eq!(all, [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]);
        assert_eq!(t.chunk_count(), Some(6));
        assert_eq!(
            ChunkTree::new(D_SLASH, vec![]).all_chunks().collect::<Vec<_>>(),
            [Vec::<u64>::new()]
        );
        assert_eq!(ChunkTree::new(D_SLASH, vec![4, 0]).all_chunks().count(), 0);
        assert_eq!(ChunkTree::new(D_SLASH, vec![u64::MAX, 3]).chunk_count(), None);
    }

    #[test]
    fn grid_rounds_up() {
        assert_eq!(grid(&[10, 9, 0, 1], &[5, 4, 3, 7]), vec![2, 3, 0, 1]);
        assert_eq!(grid(&[], &[]), Vec::<u64>::new());
        assert_eq!(grid(&[u64::MAX], &[2]), vec![u64::MAX / 2 + 1]);
    }

    #[test]
    fn chunks_are_keys_inside_the_grid() {
        let t = ChunkTree::new(D_SLASH, vec![3, 4]);
        assert_eq!(t.chunk("c/2/3"), Some(vec![2, 3]));
        assert_eq!(t.key(&[2, 3]), "c/2/3");
        assert_eq!(t.chunk("c/3/0"), None, "outside the grid");
        assert_eq!(t.key_coords("c/3/0"), Some(vec![3, 0]));
        for bad in ["c/2", "c/02/3", "c.2.3", "2/3", "zarr.json", "", "c"] {
            assert_eq!(t.chunk(bad), None, "{bad}");
        }
        assert!(t.contains(&[2, 3]) && !t.contains(&[2]) && !t.contains(&[0, 4]));
        let flat = ChunkTree::new(V2_DOT, vec![3, 4]);
        assert_eq!(flat.chunk("2.3"), Some(vec![2, 3]));
        assert_eq!(flat.chunk("2/3"), None);
    }

    #[test]
    fn directories_default_slash() {
        let t = ChunkTree::new(D_SLASH, vec![3, 4]);
        assert!(t.is_nested());
        assert_eq!(t.root_dir(), Some("c"));
        assert_eq!(t.dir(""), dir(&[], Children::Literal("c")));
        assert_eq!(t.dir("c"), dir(&[], Children::CoordDirs));
        assert_eq!(t.dir("c/2"), dir(&[2], Children::CoordFiles));
        for bad in ["c/3", "c/2/3", "c/02", "c/", "/c", "x", "c//2", "zarr.json"] {
            assert_eq!(t.dir(bad), None, "{bad}");
        }
        assert_eq!(t.sub_dir(""), None);
        assert_eq!(t.sub_dir("c"), Some(vec![]));
        assert_eq!(t.dir_path(&[]), "c");
        assert_eq!(t.dir_path(&[2]), "c/2");
        let three = ChunkTree::new(D_SLASH, vec![2, 2, 2]);
        assert_eq!(three.dir("c/1"), dir(&[1], Children::CoordDirs));
        assert_eq!(three.dir("c/1/1"), dir(&[1, 1], Children::CoordFiles));
    }

    #[test]
    fn directories_other_encodings() {
        let v2s = ChunkTree::new(V2_SLASH, vec![5, 2, 3]);
        assert_eq!(v2s.root_dir(), None);
        assert_eq!(v2s.dir(""), dir(&[], Children::CoordDirs));
        assert_eq!(v2s.dir("4"), dir(&[4], Children::CoordDirs));
        assert_eq!(v2s.dir("4/1"), dir(&[4, 1], Children::CoordFiles));
        assert_eq!(v2s.dir("4/1/0"), None, "a chunk, not a directory");
        assert_eq!(v2s.dir("5"), None);
        assert_eq!(v2s.dir("c"), None);
        assert_eq!(v2s.dir_path(&[4, 1]), "4/1");
        for flat in [ChunkTree::new(D_DOT, vec![3]), ChunkTree::new(V2_DOT, vec![3])] {
            assert!(!flat.is_nested());
            assert_eq!(flat.dir(""), dir(&[], Children::KeyFiles));
            assert_eq!(flat.dir("c"), None);
            assert_eq!(flat.root_dir(), None);
        }
        // A 0-d array's single chunk sits directly in the array directory, whatever the separator.
        let zero = ChunkTree::new(D_SLASH, vec![]);
        assert!(!zero.is_nested());
        assert_eq!(zero.dir(""), dir(&[], Children::KeyFiles));
        assert_eq!(zero.dir("c"), None);
        assert_eq!(zero.chunk("c"), Some(vec![]));
    }

    #[test]
    fn children_of_directories() {
        let t = ChunkTree::new(D_SLASH, vec![3, 4]);
        let child = |t: &ChunkTree, dir: &str, coords: &[u64]| {
            let d = t.dir(dir).unwrap();
            t.child(&d.fixed, d.children, coords)
        };
        let entry = |name: &str, is_dir| Some(DirChild { name: name.into(), is_dir });
        assert_eq!(child(&t, "", &[2, 3]), entry("c", true));
        assert_eq!(child(&t, "c", &[2, 3]), entry("2", true));
        assert_eq!(child(&t, "c/2", &[2, 3]), entry("3", false));
        assert_eq!(child(&t, "c/2", &[1, 3]), None, "another directory's chunk");
        assert_eq!(child(&t, "c/2", &[2]), None, "wrong rank");
        let flat = ChunkTree::new(D_DOT, vec![3, 4]);
        assert_eq!(child(&flat, "", &[2, 3]), entry("c.2.3", false));
        let zero = ChunkTree::new(V2_SLASH, vec![]);
        assert_eq!(child(&zero, "", &[]), entry("0", false));
    }

    #[test]
    fn owned_names() {
        let t = ChunkTree::new(D_SLASH, vec![3, 4]);
        for owned in ["c", "c/2/3", "c/9/9", "c/x", "c/2"] {
            assert!(t.owns(owned), "{owned}");
        }
        for not in ["zarr.json", "cc", "d/1/1", "1/1", "notes.txt"] {
            assert!(!t.owns(not), "{not}");
        }
        let v2s = ChunkTree::new(V2_SLASH, vec![3, 4]);
        for owned in ["1", "1/2", "9", "9/x"] {
            assert!(v2s.owns(owned), "{owned}");
        }
        for not in ["c", "01", "zarr.json", "x/1"] {
            assert!(!v2s.owns(not), "{not}");
        }
        // Single-name keys: any key of the rank, inside the grid or not.
        let flat = ChunkTree::new(D_DOT, vec![3, 4]);
        for owned in ["c.1.2", "c.9.9"] {
            assert!(flat.owns(owned), "{owned}");
        }
        for not in ["c", "c.1", "c.1.2.3", "c/1/2", "1.2", "notes.txt"] {
            assert!(!flat.owns(not), "{not}");
        }
        let zero = ChunkTree::new(D_SLASH, vec![]);
        assert!(zero.owns("c"));
        assert!(!zero.owns("c/x") && !zero.owns("0"));
    }

    #[test]
    fn trees_from_metadata_documents() {
        let v3 = crate::zarr::metadata::tests::FIXTURE.as_bytes();
        assert_eq!(
            ChunkTree::from_metadata("zarr.json", v3),
            Some(ChunkTree::new(D_SLASH, vec![2, 2]))
        );
        let group = br#"{"zarr_format":3,"node_type":"group"}"#;
        assert_eq!(ChunkTree::from_metadata("zarr.json", group), None);
        let odd_grid =
            String::from_utf8(v3.to_vec()).unwrap().replace("\"regular\"", "\"rectilinear\"");
        assert_eq!(ChunkTree::from_metadata("zarr.json", odd_grid.as_bytes()), None);
        // v2: only shape, chunks and the separator matter (an object dtype is fine here).
        let zarray = br#"{"zarr_format":2,"shape":[10,7],"chunks":[5,5],"dtype":"|O","dimension_separator":"/"}"#;
        assert_eq!(
            ChunkTree::from_metadata(".zarray", zarray),
            Some(ChunkTree::new(V2_SLASH, vec![2, 2]))
        );
        let dotted = br#"{"zarr_format":2,"shape":[10],"chunks":[3],"dtype":"<i4"}"#;
        assert_eq!(
            ChunkTree::from_metadata(".zarray", dotted),
            Some(ChunkTree::new(V2_DOT, vec![4]))
        );
        for bad in [
            &br#"{"zarr_format":2,"shape":[10],"chunks":[0]}"#[..],
            b"{",
            b"[]",
            b"{\"zarr_format\":3}",
        ] {
            assert_eq!(ChunkTree::from_metadata(".zarray", bad), None);
        }
        assert_eq!(ChunkTree::from_metadata(".zattrs", dotted), None);
    }

    /// The tree's directories and chunks are exactly the prefixes and keys of the grid's
    /// chunk keys, for every encoding.
    #[test]
    fn directories_are_proper_prefixes_of_keys() {
        let grid = vec![2, 3, 2];
        for enc in [D_SLASH, D_DOT, V2_DOT, V2_SLASH] {
            let t = ChunkTree::new(enc, grid.clone());
            let mut prefixes = std::collections::BTreeSet::new();
            for a in 0..2 {
                for b in 0..3 {
                    for c in 0..2 {
                        let key = t.key(&[a, b, c]);
                        assert_eq!(t.chunk(&key), Some(vec![a, b, c]));
                        assert!(t.owns(&key), "{key}");
                        assert_eq!(t.dir(&key), None, "{key}");
                        let parts: Vec<&str> = key.split('/').collect();
                        for i in 1..parts.len() {
                            prefixes.insert(parts[..i].join("/"));
                        }
                    }
                }
            }
            for p in &prefixes {
                let d = t.dir(p).unwrap_or_else(|| panic!("{enc:?} {p}"));
                assert!(t.owns(p), "{p}");
                assert_eq!(t.dir_path(&d.fixed), *p);
            }
            assert_eq!(prefixes.is_empty(), !t.is_nested());
        }
    }

    #[test]
    fn stored_chunk_bounds_from_metadata_documents() {
        // v3 sharded: a 50x50 int32 shard of 10x10 inner chunks: 10,000 bytes, a 25-entry
        // index and its crc, plus slack.
        let v3 = crate::zarr::metadata::tests::FIXTURE.as_bytes();
        let raw = 50 * 50 * 4;
        assert_eq!(stored_chunk_bound("zarr.json", v3), Some(raw + raw / 64 + 25 * 16 + 4 + 4096));
        let v2 = br#"{"zarr_format":2,"shape":[10,10],"chunks":[5,5],"dtype":"<f8","compressor":null,"fill_value":0,"order":"C","filters":null}"#;
        assert_eq!(stored_chunk_bound(".zarray", v2), Some(200 + 3 + 4096));
        let unicode = br#"{"zarr_format":2,"shape":[4],"chunks":[4],"dtype":"<U3","compressor":null,"fill_value":"","order":"C","filters":null}"#;
        assert_eq!(stored_chunk_bound(".zarray", unicode), Some(48 + 4096));
        // Structured and object dtypes, groups and other names say nothing.
        let structured = br#"{"zarr_format":2,"shape":[4],"chunks":[4],"dtype":[["a","<i4"]],"compressor":null,"fill_value":null,"order":"C","filters":null}"#;
        assert_eq!(stored_chunk_bound(".zarray", structured), None);
        assert_eq!(
            stored_chunk_bound("zarr.json", br#"{"zarr_format":3,"node_type":"group"}"#),
            None
        );
        assert_eq!(stored_chunk_bound(".zattrs", v2), None);
        // Absurd shapes do not overflow.
        let huge = br#"{"zarr_format":2,"shape":[1],"chunks":[18446744073709551615,2],"dtype":"<f8","compressor":null,"fill_value":0,"order":"C","filters":null}"#;
        assert_eq!(stored_chunk_bound(".zarray", huge), None);
    }
}
