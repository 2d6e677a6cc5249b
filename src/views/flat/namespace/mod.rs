//! `--view flat` on the fs side: a namespace over the unsharded view where every array directory is
//! replaced by its files (`views::flat::mapping`: `NAME.npy` and the other formats) in its parent,
//! groups and other directories stay directories without their Zarr documents, and a flat file's
//! read assembles the chunks under the bytes asked (`views::flat::namespace::layout`). Read-only.

mod layout;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Map, Value};

use crate::store::{join_key, split_key};
use crate::ttl_cache::TtlCache;
use crate::views::flat::mapping::{
    array_files, within_file_size, FlatArray, FlatFile, GROUP_FORMATS,
};
use crate::views::flat::namespace::layout::FlatReader;
use crate::views::presented::namespace::{read_doc, Doc};
use crate::views::shared::decoded_cache::DecodedCache;
use crate::views::shared::error::{FsError, FsResult};
use crate::views::shared::mapping::node::{Backing, Node};
use crate::views::shared::namespace::{slice_for_read, Namespace, ReadOnlyView};
use crate::views::shared::regions::ChunkSource;
use crate::views::shared::walk::{self, DirWalk, Step};
use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
use crate::zarr::v2::V2Array;

const KIND_CACHE: usize = 65_536;
/// Chunk lookups kept (a few hundred bytes each).
const CHUNK_CACHE: usize = 65_536;
/// Zarr documents, not shown: the files say what they hold.
const ZARR_DOCS: [&str; 5] = ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];
/// The name of the files of an array at the root of the mount (it has no name of its own).
pub const ROOT_ARRAY_NAME: &str = "array";

/// What a directory of the view below is to this view.
#[derive(Clone)]
pub(in crate::views) struct Kind {
    /// An array (its directory is not shown) and whether the view can read it.
    array: Option<Option<Arc<FlatArray>>>,
    /// The files shown beside the directory (in its parent): an array's, or a group's.
    files: Arc<Vec<(String, Arc<FlatFile>)>>,
    modified: SystemTime,
    /// Those of the array's (or group's) metadata document, which its files show: a file
    /// made of many chunks has no one stored file's mode, and whoever may read the document
    /// may read the array (its chunks keep their own modes in the other views).
    perms: Option<crate::perms::Perms>,
}

type Place = walk::Place<Kind, ()>;

pub struct FlatNamespace {
    below: Arc<dyn Namespace>,
    kinds: TtlCache<Kind>,
    decoded: DecodedCache,
    /// Chunks looked up (see `FlatReader::found`).
    chunks: TtlCache<Option<Node>>,
}

#[async_trait]
impl DirWalk for FlatNamespace {
    type Kind = Kind;
    type Array = ();

    fn kinds(&self) -> &TtlCache<Kind> {
        &self.kinds
    }

    async fn read_kind(&self, dir: &str) -> FsResult<Kind> {
        let below = self.below.as_ref();
        let name = match split_key(dir).1 {
            "" => ROOT_ARRAY_NAME,
            name => name,
        };
        let mut kind = Kind {
            array: None,
            files: Arc::default(),
            modified: SystemTime::UNIX_EPOCH,
            perms: None,
        };
        let attrs_of = |doc: Option<Doc>| match doc {
            Some((b, ..)) => match crate::zarr::metadata::parse_document_json(&b) {
                Ok(Value::Object(m)) => m,
                _ => Map::new(),
            },
            None => Map::new(),
        };
        let (array, group) =
            if let Some((doc, modified, perms)) = read_doc(below, dir, "zarr.json").await? {
                (kind.modified, kind.perms) = (modified, perms);
                match parse_zarr_json(&doc) {
                    Ok(NodeMetadata::Array(meta)) => (Some(FlatArray::from_v3(&meta)), None),
                    Ok(NodeMetadata::Group(g)) => (None, Some(g.json)),
                    Err(_) => (None, None), // the view below already logged it
                }
            } else if let Some((doc, modified, perms)) = read_doc(below, dir, ".zarray").await? {
                (kind.modified, kind.perms) = (modified, perms);
                let zattrs = attrs_of(read_doc(below, dir, ".zattrs").await?);
                let array = V2Array::parse(&doc).map_err(|e| e.to_string());
                (Some(array.and_then(|a| FlatArray::from_v2(&a, zattrs))), None)
            } else if let Some((_, modified, perms)) = read_doc(below, dir, ".zgroup").await? {
                (kind.modified, kind.perms) = (modified, perms);
                (None, Some(attrs_of(read_doc(below, dir, ".zattrs").await?)))
            } else {
                (None, None)
            };
        match array {
            Some(Ok(array)) => {
                let array = Arc::new(array);
                let files = array_files(dir, name, &array);
                kind.files = Arc::new(files.into_iter().map(|(n, f)| (n, Arc::new(f))).collect());
                kind.array = Some(Some(array));
            }
            Some(Err(why)) => {
                tracing::info!(array = ?dir, reason = %why, "array left out of the flat view");
                kind.array = Some(None);
            }
            None => {}
        }
        if let Some(group) = group {
            kind.files = Arc::new(self.group_files(dir, name, &group).await?);
        }
        Ok(kind)
    }

    /// Nothing inside an array directory is shown.
    fn step(kind: &Kind) -> FsResult<Step<()>> {
        Ok(if kind.array.is_some() { Step::Enter(()) } else { Step::Descend })
    }
}

impl FlatNamespace {
    /// `cache_bytes` bounds the decoded chunks kept (see docs/VIEWS.md for the budget).
    pub fn new(below: Arc<dyn Namespace>, ttl: Duration, cache_bytes: usize) -> Self {
        FlatNamespace {
            below,
            kinds: TtlCache::new(KIND_CACHE, ttl),
            decoded: DecodedCache::new(cache_bytes),
            chunks: TtlCache::new(CHUNK_CACHE, ttl),
        }
    }

    fn reader(&self) -> FlatReader<'_> {
        let source = ChunkSource { below: self.below.as_ref(), cache: &self.decoded };
        FlatReader { source, found: &self.chunks }
    }

    /// The files of the group formats of group `dir` (named `name`) with attributes `group`.
    async fn group_files(
        &self,
        dir: &str,
        name: &str,
        group: &Map<String, Value>,
    ) -> FsResult<Vec<(String, Arc<FlatFile>)>> {
        let mut out = Vec::new();
        'formats: for format in GROUP_FORMATS {
            let rels = format.arrays(group);
            if rels.is_empty() {
                continue;
            }
            let (mut dirs, mut arrays) = (Vec::new(), Vec::new());
            for rel in rels {
                let array_dir = join_key(dir, &rel);
                match self.dir_kind(&array_dir).await?.array {
                    Some(Some(array)) => arrays.push(array),
                    _ => {
                        tracing::info!(group = ?dir, format = format.suffix(), array = ?rel,
                            "no flat file: an array it needs cannot be read");
                        continue 'formats;
                    }
                }
                dirs.push(array_dir);
            }
            match within_file_size(format.layout(group, &arrays)) {
                Ok(Some(layout)) => {
                    let file = FlatFile { layout, dirs, arrays };
                    out.push((format!("{name}{}", format.suffix()), Arc::new(file)));
                }
                Ok(None) => {}
                Err(why) => {
                    tracing::info!(group = ?dir, format = format.suffix(), reason = %why, "no flat file")
                }
            }
        }
        Ok(out)
    }

    /// The flat file `name` of directory `dir`, if one of its children shows it.
    async fn flat_file(&self, dir: &str, name: &str) -> FsResult<Option<Node>> {
        for owner in crate::views::flat::mapping::owners(name) {
            let kind = self.dir_kind(&join_key(dir, owner)).await?;
            if let Some((_, file)) = kind.files.iter().find(|(n, _)| n == name) {
                return Ok(Some(file_node(file, &kind)));
            }
        }
        Ok(None)
    }

    /// Whether the root of the mount is an array (shown as the files of [`ROOT_ARRAY_NAME`]).
    async fn root_array(&self) -> FsResult<Option<Kind>> {
        let kind = self.dir_kind("").await?;
        Ok(kind.array.is_some().then_some(kind))
    }

    /// Drop Zarr documents and array directories from a listing of `dir` and add the files
    /// of its children.
    async fn flatten(
        &self,
        dir: &str,
        entries: Vec<(String, Node)>,
    ) -> FsResult<Vec<(String, Node)>> {
        let shown = entries.into_iter().filter(|(name, _)| !ZARR_DOCS.contains(&name.as_str()));
        let mut out = walk::check_entries(shown, |(name, node)| async move {
            if !node.is_dir() {
                return Ok(vec![(name, node)]);
            }
            let kind = self.dir_kind(&join_key(dir, &name)).await?;
            let mut out: Vec<(String, Node)> =
                kind.files.iter().map(|(n, f)| (n.clone(), file_node(f, &kind))).collect();
            if kind.array.is_none() {
                out.push((name, node));
            }
            Ok(out)
        })
        .await?;
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|a, b| a.0 == b.0);
        Ok(out)
    }
}

fn file_node(file: &Arc<FlatFile>, kind: &Kind) -> Node {
    Node {
        size: file.layout.size,
        modified: kind.modified,
        backing: Backing::Flat(file.clone()),
        perms: kind.perms,
    }
}

#[async_trait]
impl Namespace for FlatNamespace {
    async fn lookup(&self, path: &str) -> FsResult<Option<Node>> {
        if path.is_empty() {
            return self.below.lookup(path).await;
        }
        let (dir, name) = split_key(path);
        if let Some(root) = self.root_array().await? {
            let file = root.files.iter().find(|(n, _)| dir.is_empty() && n == name);
            return Ok(file.map(|(_, f)| file_node(f, &root)));
        }
        let place = match self.place(path).await {
            Err(FsError::NotFound) => return Ok(None),
            other => other?,
        };
        if let Place::InArray { .. } = place {
            return Ok(None);
        }
        if ZARR_DOCS.contains(&name) {
            return Ok(None);
        }
        if let Some(node) = self.flat_file(dir, name).await? {
            return Ok(Some(node));
        }
        match self.below.lookup(path).await? {
            Some(node) if node.is_dir() && self.dir_kind(path).await?.array.is_some() => Ok(None),
            other => Ok(other),
        }
    }

    async fn list(&self, dir: &str) -> FsResult<Vec<(String, Node)>> {
        if let Some(root) = self.root_array().await? {
            if !dir.is_empty() {
                return Err(FsError::NotFound);
            }
            let files = root.files.iter().map(|(n, f)| (n.clone(), file_node(f, &root)));
            return Ok(files.collect());
        }
        if !dir.is_empty() {
            match self.place(dir).await? {
                Place::InArray { .. } => return Err(FsError::NotFound),
                Place::Outside { .. } if self.dir_kind(dir).await?.array.is_some() => {
                    return Err(FsError::NotFound)
                }
                Place::Outside { .. } => {}
            }
        }
        let entries = self.below.list(dir).await?;
        self.flatten(dir, entries).await
    }

    async fn read(&self, path: &str, node: &Node, offset: u64, size: u32) -> FsResult<Bytes> {
        match &node.backing {
            Backing::Flat(file) => {
                tracing::trace!(path, offset, size, "flat file read");
                self.reader().read_flat(path, file, offset, size).await
            }
            Backing::Generated(bytes) => Ok(slice_for_read(bytes, offset, size)),
            _ => self.below.read(path, node, offset, size).await,
        }
    }

    fn capacity(&self) -> Option<(u64, u64)> {
        self.below.capacity()
    }
}

impl ReadOnlyView for FlatNamespace {}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::layers::recording::RecordingStore;
    use crate::store::prelude::*;
    use crate::views::flat::mapping::npy::header;
    use crate::views::raw::namespace::RawNamespace;
    use crate::views::shared::namespace::NamespaceWrites;
    use crate::views::unsharded::namespace::UnshardedNamespace;

    const SHAPE: [u64; 2] = [5, 7];
    const CHUNKS: [u64; 2] = [2, 3];
    const FILL: u16 = 9;

    /// Group `g` holding uint16 array `a` (5 x 7 in 2 x 3 chunks, element (r, c) = r * 100 + c,
    /// fill 9): chunks (0, 0), (0, 1), (1, 2) and (2, 0) stored, (2, 2) corrupt (too short),
    /// the others missing. Returns the flat view and the recorded store requests.
    async fn view() -> (FlatNamespace, Arc<RecordingStore>) {
        let mem = Arc::new(MemoryStore::new());
        let put = |k: &str, v: Vec<u8>| {
            let mem = mem.clone();
            let k = k.to_string();
            async move { mem.put(&k, Bytes::from(v)).await.unwrap() }
        };
        put("zarr.json", br#"{"zarr_format": 3, "node_type": "group"}"#.to_vec()).await;
        put("g/zarr.json", br#"{"zarr_format": 3, "node_type": "group"}"#.to_vec()).await;
        let meta = json!({"zarr_format": 3, "node_type": "array", "shape": SHAPE,
            "data_type": "uint16", "fill_value": FILL,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": CHUNKS}},
            "chunk_key_encoding": {"name": "default"},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]});
        put("g/a/zarr.json", serde_json::to_vec(&meta).unwrap()).await;
        for (i, j) in [(0u64, 0u64), (0, 1), (1, 2), (2, 0)] {
            let mut chunk = Vec::new();
            for r in i * 2..i * 2 + 2 {
                for c in j * 3..j * 3 + 3 {
                    chunk.extend_from_slice(&((r * 100 + c) as u16).to_le_bytes());
                }
            }
            put(&format!("g/a/c/{i}/{j}"), chunk).await;
        }
        put("g/a/c/2/2", vec![1, 2, 3]).await;
        let rec = Arc::new(RecordingStore::new(mem));
        let ttl = Duration::from_secs(3600);
        let unsharded = UnshardedNamespace::new(RawNamespace::new(rec.clone()), ttl);
        (FlatNamespace::new(Arc::new(unsharded), ttl, 1 << 20), rec)
    }

    fn stored(i: u64, j: u64) -> bool {
        matches!((i, j), (0, 0) | (0, 1) | (1, 2) | (2, 0))
    }

    /// The data bytes of the whole array as numpy would have them.
    fn expected() -> Vec<u8> {
        let mut out = Vec::new();
        for r in 0..SHAPE[0] {
            for c in 0..SHAPE[1] {
                let v = if stored(r / 2, c / 3) { (r * 100 + c) as u16 } else { FILL };
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    fn names(entries: Vec<(String, Node)>) -> Vec<String> {
        entries.into_iter().map(|(n, _)| n).collect()
    }

    #[tokio::test]
    async fn arrays_are_files_and_groups_directories() {
        let (view, _) = view().await;
        assert_eq!(names(view.list("").await.unwrap()), ["g"]);
        assert_eq!(names(view.list("g").await.unwrap()), ["a.npy", "a.tif"]);
        let node = view.lookup("g/a.npy").await.unwrap().unwrap();
        let head = header("<u2", &SHAPE);
        assert_eq!(node.size, head.len() as u64 + 70);
        for hidden in ["g/a", "g/zarr.json", "g/a/zarr.json", "g/a/c/0/0", "g/b.npy", "a.npy"] {
            assert!(view.lookup(hidden).await.unwrap().is_none(), "{hidden}");
        }
        assert!(view.list("g/a").await.is_err());
        assert!(view.write_file("g/x", Bytes::new()).await.is_err());
    }

    /// Reads of byte ranges: missing chunks are the fill value, a range touching the corrupt
    /// chunk's elements fails, every other range reads, and each read costs the chunks under
    /// it alone.
    #[tokio::test]
    async fn ranges_read_their_chunks_alone() {
        let (view, rec) = view().await;
        let node = view.lookup("g/a.npy").await.unwrap().unwrap();
        let head = header("<u2", &SHAPE);
        let data_at = head.len() as u64;
        let want = [head, expected()].concat();
        // Elements of chunk (2, 2): row 4, columns 6..7 (the array ends at column 7).
        let bad = data_at + (4 * 7 + 6) * 2..data_at + (4 * 7 + 7) * 2;
        rec.take();
        let mut ok = 0;
        for start in 0..node.size {
            for len in [1u64, 3, 14, 29, 100] {
                let end = (start + len).min(node.size);
                let got = view.read("g/a.npy", &node, start, len as u32).await;
                if start < bad.end && bad.start < end {
                    assert!(matches!(got, Err(FsError::Corrupt(_))), "{start}+{len}");
                } else {
                    assert_eq!(got.unwrap(), want[start as usize..end as usize], "{start}+{len}");
                    ok += 1;
                }
            }
        }
        assert!(ok > 500);
        // Row 0, columns 0..3: chunk (0, 0) alone, looked up once (kept), read from the cache.
        let (view, rec) = self::view().await;
        let node = view.lookup("g/a.npy").await.unwrap().unwrap();
        rec.take();
        let got = view.read("g/a.npy", &node, data_at, 6).await.unwrap();
        assert_eq!(got, want[data_at as usize..data_at as usize + 6]);
        let keys: BTreeSet<String> =
            rec.take().iter().filter_map(|c| c.split(' ').nth(1).map(str::to_string)).collect();
        assert_eq!(keys, BTreeSet::from(["g/a/c/0/0".to_string()]));
        view.read("g/a.npy", &node, data_at + 2, 4).await.unwrap();
        assert!(rec.take().is_empty(), "looked up or read again");
    }

    /// Array `b` of `view()`'s store kind, clean: 40 x 30 uint16 in 4 x 10 chunks (3 a chunk
    /// row, all stored, element (r, c) = r * 30 + c), with a decoded cache of 1 MiB (all of
    /// it fits). Returns the view, the recorded requests and its .npy's node and header length.
    async fn clean_view() -> (FlatNamespace, Arc<RecordingStore>, Node, u64) {
        let mem = Arc::new(MemoryStore::new());
        let meta = json!({"zarr_format": 3, "node_type": "array", "shape": [40, 30],
            "data_type": "uint16", "fill_value": 0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 10]}},
            "chunk_key_encoding": {"name": "default"},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]});
        mem.put("b/zarr.json", Bytes::from(serde_json::to_vec(&meta).unwrap())).await.unwrap();
        for (i, j) in (0..10u64).flat_map(|i| (0..3u64).map(move |j| (i, j))) {
            let mut chunk = Vec::new();
            for r in i * 4..i * 4 + 4 {
                for c in j * 10..j * 10 + 10 {
                    chunk.extend_from_slice(&((r * 30 + c) as u16).to_le_bytes());
                }
            }
            mem.put(&format!("b/c/{i}/{j}"), Bytes::from(chunk)).await.unwrap();
        }
        let rec = Arc::new(RecordingStore::new(mem));
        let ttl = Duration::from_secs(3600);
        let unsharded = UnshardedNamespace::new(RawNamespace::new(rec.clone()), ttl);
        let view = FlatNamespace::new(Arc::new(unsharded), ttl, 1 << 20);
        let node = view.lookup("b.npy").await.unwrap().unwrap();
        let head = header("<u2", &[40, 30]).len() as u64;
        (view, rec, node, head)
    }

    /// Chunk gets among the recorded requests.
    fn chunk_gets(calls: &[String]) -> usize {
        calls.iter().filter(|c| c.starts_with("get") && c.contains("b/c/")).count()
    }

    /// Drop-behind: a reader of the whole .npy in kernel-sized pieces (not aligned with rows or
    /// chunks) decodes each chunk once and holds at most one chunk row (3 chunks) at a time,
    /// none at the end; the bytes are numpy's.
    #[tokio::test]
    async fn a_sequential_reader_holds_one_chunk_row() {
        let (view, rec, node, head) = clean_view().await;
        let mut want = header("<u2", &[40, 30]);
        want.extend((0..40 * 30u16).flat_map(|v| v.to_le_bytes()));
        for piece in [100u32, 4096, 37] {
            rec.take();
            let (mut got, mut most) = (Vec::new(), 0);
            while (got.len() as u64) < node.size {
                got.extend(view.read("b.npy", &node, got.len() as u64, piece).await.unwrap());
                most = most.max(view.decoded.entries());
            }
            assert_eq!(got, want, "pieces of {piece}");
            assert!(most <= 3, "pieces of {piece}: {most} chunks held");
            assert_eq!(view.decoded.entries(), 0, "pieces of {piece}: held after the end");
            assert_eq!(chunk_gets(&rec.take()), 30, "pieces of {piece}: one decode a chunk");
        }
        assert!(head > 0);
    }

    /// Reads finishing out of order (the kernel's read-ahead sends several at once): the read
    /// of a chunk's last byte coming before one of its earlier bytes does not let the chunk go
    /// under that read, which still finds it; each chunk is decoded once, none held at the end.
    #[tokio::test]
    async fn reads_out_of_order_decode_each_chunk_once() {
        let (view, rec, node, _) = clean_view().await;
        let piece = 64u64; // a chunk row is 240 bytes
        let pieces = node.size.div_ceil(piece);
        let mut got = vec![0u8; node.size as usize];
        rec.take();
        // Pieces 1, 0, 3, 2, ...: every second one before the one ahead of it.
        for i in (0..pieces).map(|i| i ^ 1).filter(|&i| i < pieces) {
            let bytes = view.read("b.npy", &node, i * piece, piece as u32).await.unwrap();
            got[(i * piece) as usize..(i * piece) as usize + bytes.len()].copy_from_slice(&bytes);
            // Two chunk rows at most: a row waiting for the piece behind, the next one.
            assert!(view.decoded.entries() <= 6, "piece {i}: {} held", view.decoded.entries());
        }
        if pieces % 2 == 1 {
            let i = pieces - 1;
            let bytes = view.read("b.npy", &node, i * piece, piece as u32).await.unwrap();
            got[(i * piece) as usize..].copy_from_slice(&bytes);
        }
        let mut want = header("<u2", &[40, 30]);
        want.extend((0..40 * 30u16).flat_map(|v| v.to_le_bytes()));
        assert_eq!(got, want);
        assert_eq!(chunk_gets(&rec.take()), 30, "one decode a chunk");
        assert_eq!(view.decoded.entries(), 0);
    }

    /// A read that stops short of a chunk's last byte keeps the chunk (a second read of it
    /// costs nothing); the read that covers its last byte lets it go, and no other chunk.
    #[tokio::test]
    async fn a_chunk_stays_until_its_last_byte_is_read() {
        let (view, rec, node, head) = clean_view().await;
        let key = |i: u64, j: u64| {
            let below = format!("b/c/{i}/{j}");
            let node = view.chunks.get(&below).flatten().unwrap();
            ChunkSource::decoded_key(&below, &node)
        };
        // Chunk (0, 0) holds rows 0..4, columns 0..10: its last element is (3, 9).
        let last = head + (3 * 30 + 9) * 2 + 1;
        view.read("b.npy", &node, head, 8).await.unwrap();
        assert!(view.decoded.holds(&key(0, 0)));
        view.read("b.npy", &node, head + 4, (last - head - 4) as u32).await.unwrap();
        assert!(view.decoded.holds(&key(0, 0)), "its last byte not read yet");
        assert_eq!(chunk_gets(&rec.take()), 3, "chunks (0, 0), (0, 1), (0, 2), once");
        // Bytes of the element (3, 9) and (3, 10): chunk (0, 0) goes, (0, 1) stays.
        view.read("b.npy", &node, last - 1, 3).await.unwrap();
        assert!(!view.decoded.holds(&key(0, 0)));
        assert!(view.decoded.holds(&key(0, 1)) && view.decoded.holds(&key(0, 2)));
        assert!(rec.take().is_empty());
        // A random reader that does not reach a chunk's last byte keeps hitting the cache.
        for _ in 0..3 {
            view.read("b.npy", &node, head + (2 * 30 + 15) * 2, 4).await.unwrap();
        }
        assert!(rec.take().is_empty(), "read again from the cache");
    }
}
