//! The shared shape of views that re-present Zarr nodes of the view below them (`decoded`, `v2`):
//! for each directory, given its metadata documents, a `Presenter` decides what the directory
//! shows. Pure: the fs layer (`views::presented::namespace`) reads the documents and applies the
//! decision.

pub mod decoded;
pub mod ome;
pub mod retile;
pub mod v2;

use std::sync::Arc;

use bytes::Bytes;

use crate::views::presented::mapping::retile::Retiling;
use crate::zarr::chunk_key::ChunkKeyEncoding;
use crate::zarr::chunk_specs::ChunkSpecs;
use crate::zarr::chunk_tree::ChunkTree;
use crate::zarr::codecs::BytesChain;

/// The metadata documents of one directory, as the view below shows them.
#[derive(Debug, Clone, Default)]
pub struct DirDocs {
    pub zarr_json: Option<Bytes>,
    pub zarray: Option<Bytes>,
    pub zgroup: Option<Bytes>,
    pub zmetadata: Option<Bytes>,
}

impl DirDocs {
    /// The names read to fill a `DirDocs`, in the order they are tried: a v3 node has only
    /// `zarr.json`, so the v2 names are read only when it is absent.
    pub const V3_NAME: &'static str = "zarr.json";
    pub const V2_NAMES: [&'static str; 3] = [".zarray", ".zgroup", ".zmetadata"];
}

/// What a directory shows.
#[derive(Debug, Clone, PartialEq)]
pub enum DirShow {
    /// Shown as the view below shows it.
    PassThrough,
    /// A group: generated files replace or join its entries, hidden names disappear.
    Group(Files),
    /// An array with translated chunk keys and, possibly, decoded chunks.
    Array(Arc<ArrayShow>),
    /// Left out of the view (logged once, when decided).
    Hidden,
}

/// Generated files (name -> content) and names of the view below to hide.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Files {
    pub generated: Vec<(String, Bytes)>,
    pub hidden: Vec<&'static str>,
}

impl Files {
    pub fn get(&self, name: &str) -> Option<&Bytes> {
        self.generated.iter().find(|(n, _)| n == name).map(|(_, b)| b)
    }

    pub fn hides(&self, name: &str) -> bool {
        self.hidden.contains(&name) && self.get(name).is_none()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ArrayShow {
    pub files: Files,
    pub chunks: ChunkShow,
}

/// Where an array's presented chunks come from.
#[derive(Debug, Clone, PartialEq)]
pub enum ChunkShow {
    /// Each presented chunk is one stored chunk of the view below.
    Stored(StoredChunks),
    /// Each presented chunk (a tile) is assembled from the decoded stored chunks it overlaps.
    Retiled(Arc<Retiling>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct StoredChunks {
    pub keys: KeyMap,
    /// Decode every chunk with its spec of these; `None` serves the stored bytes.
    pub decode: Option<ChunkSpecs>,
    /// (Without `decode`.) Serve every stored chunk with this chain undone (e.g. a trailing
    /// crc32c checked and cut off).
    pub unwrap: Option<Arc<BytesChain>>,
}

impl ArrayShow {
    /// An array whose presented chunks are its stored ones.
    pub fn with_stored(
        files: Files,
        keys: KeyMap,
        decode: Option<ChunkSpecs>,
        unwrap: Option<Arc<BytesChain>>,
    ) -> ArrayShow {
        ArrayShow { files, chunks: ChunkShow::Stored(StoredChunks { keys, decode, unwrap }) }
    }

    /// The stored chunks it presents, unless it presents tiles.
    pub fn stored(&self) -> Option<&StoredChunks> {
        match &self.chunks {
            ChunkShow::Stored(s) => Some(s),
            ChunkShow::Retiled(_) => None,
        }
    }
}

/// How presented chunk keys relate to the keys of the view below: two chunk trees over the
/// same grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMap {
    /// The chunk tree as presented.
    pub shown: ChunkTree,
    /// The chunk tree of the view below.
    pub below: ChunkTree,
}

/// Where a path relative to an array directory leads in the view below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArrayPath {
    /// A chunk of the grid: the key below.
    Chunk(String),
    /// A directory of the presented chunk tree: the directory below.
    ChunkDir(String),
    /// A name below that the presented chunk tree replaces (e.g. `c` when `c/1/2` shows as `1/2`).
    Replaced,
    /// Anything else: the same path below.
    Other,
}

impl KeyMap {
    /// `grid` is the chunk grid, `ceil(shape / chunk_shape)`.
    pub fn new(shown: ChunkKeyEncoding, below: ChunkKeyEncoding, grid: Vec<u64>) -> Self {
        KeyMap { shown: ChunkTree::new(shown, grid.clone()), below: ChunkTree::new(below, grid) }
    }

    pub fn identity(encoding: ChunkKeyEncoding, grid: Vec<u64>) -> Self {
        KeyMap::new(encoding, encoding, grid)
    }

    pub fn grid(&self) -> &[u64] {
        self.shown.grid()
    }

    fn is_identity(&self) -> bool {
        self.shown.encoding() == self.below.encoding()
    }

    /// Chunk coordinates of a presented key, if it is one inside the grid.
    pub fn chunk_coords(&self, rel: &str) -> Option<Vec<u64>> {
        self.shown.chunk(rel)
    }

    /// Classify a path relative to the array directory (non-empty).
    pub fn resolve(&self, rel: &str) -> ArrayPath {
        if let Some(coords) = self.shown.chunk(rel) {
            return ArrayPath::Chunk(self.below.key(&coords));
        }
        if let Some(fixed) = self.shown.sub_dir(rel) {
            return ArrayPath::ChunkDir(self.below.dir_path(&fixed));
        }
        if !self.is_identity() && self.below.owns(rel) {
            return ArrayPath::Replaced;
        }
        ArrayPath::Other
    }

    /// The directory below whose children appear directly in the array directory (besides
    /// the array directory's own entries): `c` when `c/1/2` shows as `1/2`.
    pub fn root_chunk_dir_below(&self) -> Option<&'static str> {
        if self.is_identity() || !self.shown.is_nested() {
            return None;
        }
        self.below.root_dir()
    }

    /// How an entry of the array directory below shows: `Some(name)` under that name (chunk
    /// keys renamed), `None` when the presented chunk tree replaces it.
    pub fn shown_root_name(&self, name: &str) -> Option<String> {
        if self.is_identity() {
            return Some(name.to_string());
        }
        if let Some(coords) = self.below.key_coords(name) {
            return Some(self.shown.key(&coords));
        }
        (!self.below.owns(name)).then(|| name.to_string())
    }
}

/// Decides what each directory of a re-presenting view shows.
pub trait Presenter: Send + Sync + 'static {
    /// `dir` is the directory's path (for log lines), `docs` its metadata documents.
    fn present(&self, dir: &str, docs: &DirDocs) -> DirShow;
    /// Whether some directories may be `Hidden` (then group listings check their children).
    fn may_hide(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_slash() -> ChunkKeyEncoding {
        ChunkKeyEncoding::Default { separator: '/' }
    }

    fn v2(sep: char) -> ChunkKeyEncoding {
        ChunkKeyEncoding::V2 { separator: sep }
    }

    #[test]
    fn identity_map() {
        let m = KeyMap::identity(default_slash(), vec![3, 4]);
        assert_eq!(m.resolve("c/2/3"), ArrayPath::Chunk("c/2/3".into()));
        assert_eq!(m.resolve("c/3/0"), ArrayPath::Other); // outside the grid
        assert_eq!(m.resolve("c/2"), ArrayPath::ChunkDir("c/2".into()));
        assert_eq!(m.resolve("c"), ArrayPath::ChunkDir("c".into()));
        assert_eq!(m.resolve("zarr.json"), ArrayPath::Other);
        assert_eq!(m.root_chunk_dir_below(), None);
        assert_eq!(m.shown_root_name("c"), Some("c".into()));
    }

    #[test]
    fn default_slash_to_v2_nested() {
        let m = KeyMap::new(v2('/'), default_slash(), vec![3, 4]);
        assert_eq!(m.resolve("2/3"), ArrayPath::Chunk("c/2/3".into()));
        assert_eq!(m.resolve("2"), ArrayPath::ChunkDir("c/2".into()));
        assert_eq!(m.resolve("3"), ArrayPath::Other);
        assert_eq!(m.resolve("c"), ArrayPath::Replaced);
        assert_eq!(m.resolve("c/1/1"), ArrayPath::Replaced);
        assert_eq!(m.resolve(".zarray"), ArrayPath::Other);
        assert_eq!(m.root_chunk_dir_below(), Some("c"));
        assert_eq!(m.shown_root_name("c"), None);
        assert_eq!(m.shown_root_name("zarr.json"), Some("zarr.json".into()));
    }

    #[test]
    fn default_dot_to_v2_dot() {
        let m = KeyMap::new(v2('.'), ChunkKeyEncoding::Default { separator: '.' }, vec![3, 4]);
        assert_eq!(m.resolve("2.3"), ArrayPath::Chunk("c.2.3".into()));
        assert_eq!(m.resolve("c.2.3"), ArrayPath::Replaced);
        assert_eq!(m.resolve("2"), ArrayPath::Other);
        assert_eq!(m.root_chunk_dir_below(), None);
        assert_eq!(m.shown_root_name("c.1.2"), Some("1.2".into()));
        assert_eq!(m.shown_root_name("notes.txt"), Some("notes.txt".into()));
    }

    #[test]
    fn zero_d() {
        let m = KeyMap::new(v2('/'), default_slash(), vec![]);
        assert_eq!(m.resolve("0"), ArrayPath::Chunk("c".into()));
        assert_eq!(m.resolve("c"), ArrayPath::Replaced);
        assert_eq!(m.root_chunk_dir_below(), None);
        assert_eq!(m.shown_root_name("c"), Some("0".into()));
    }

    #[test]
    fn v2_below_is_identity() {
        let m = KeyMap::identity(v2('/'), vec![2, 2, 2]);
        assert_eq!(m.resolve("1/1/1"), ArrayPath::Chunk("1/1/1".into()));
        assert_eq!(m.resolve("1/1"), ArrayPath::ChunkDir("1/1".into()));
        assert_eq!(m.resolve("1"), ArrayPath::ChunkDir("1".into()));
        assert_eq!(m.resolve("2"), ArrayPath::Other);
    }
}
